"""The vocabulary of `llmp verify`'s report: a row (`Finding`), its statuses and areas,
the resource types it reads, and the row of a read that failed. The AWS checks, the
adopted-infrastructure checks, drift and readiness all write these rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from llmp.clients.aws import error_text, unsupported

Status = Literal["pass", "fail", "not checked"]


PASS: Status = "pass"


FAIL: Status = "fail"


NOT_CHECKED: Status = "not checked"


STATUSES: tuple[Status, ...] = (PASS, FAIL, NOT_CHECKED)


AREAS = ("cluster", "nodegroups", "addons", "storage", "adopted", "kubernetes", "drift")


AWS_AREAS = AREAS[:5]


CLUSTER = "aws:eks/cluster:Cluster"


NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"


ADDON = "aws:eks/addon:Addon"


LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"


DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"


EKS_NOT_IMPLEMENTED = "the endpoint does not implement EKS"


ADDONS_NOT_IMPLEMENTED = "the endpoint does not implement EKS add-ons"


EC2_NOT_IMPLEMENTED = "the endpoint does not implement EC2 launch templates"


FSX_NOT_IMPLEMENTED = "the endpoint does not implement FSx file systems"


DRA_NOT_IMPLEMENTED = "the endpoint does not implement data repository associations"




@dataclass(frozen=True)
class Finding:
    """One row of the report. The AWS checks leave `area` empty; `verify_aws` sets it."""

    resource: str
    check: str
    status: Status
    reason: str = ""
    area: str = ""

    def to_dict(self) -> dict[str, str]:
        return {
            "area": self.area,
            "resource": self.resource,
            "check": self.check,
            "status": self.status,
            "reason": self.reason,
        }


def unread(resource: str, check: str, exc: Exception, emulated: bool, lacking: str) -> Finding:
    """The row of a read that failed: not checked where the endpoint lacks the API."""
    if unsupported(exc, emulated):
        return Finding(resource, check, NOT_CHECKED, lacking)
    return Finding(resource, check, FAIL, f"cannot read: {error_text(exc)}")
