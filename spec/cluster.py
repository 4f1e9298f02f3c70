"""`cluster`: the EKS control plane."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, field_validator, model_validator

from spec.base import ROLE_ARN, Section, cloudwatch_retention
from spec.catalog import catalog
from spec.errors import FieldError

LogType = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]


def _default_log_types() -> list[LogType]:
    return ["api", "audit", "authenticator"]


CLUSTER_NAME = r"^[a-zA-Z][\w-]{0,99}$"


class ExistingClusterConfig(Section):
    """An EKS cluster someone else owns: the stack adds pools, missing add-ons and workloads."""

    name: str = Field(pattern=CLUSTER_NAME, description="The cluster's name.")
    security_group_id: str = Field(
        pattern=r"^sg-[0-9a-f]{8,17}$",
        description="Its EKS-managed cluster security group (every node carries it).",
    )
    node_role_arn: str | None = Field(
        None, description="The cluster's node role for the GPU pools; none: the stack's own."
    )
    addons: dict[str, str] = Field(
        default_factory=dict,
        description="EKS add-ons already installed, name -> version: the stack installs only "
        "the others, and leaves these as they are.",
    )
    endpoint: str | None = Field(
        None,
        pattern=r"^https://",
        description="API endpoint; none: read from EKS at deploy time (offline: a stand-in).",
    )
    certificate_authority_data: str | None = Field(
        None, description="Its CA (base64), with endpoint; none: read at deploy time."
    )

    @field_validator("node_role_arn")
    @classmethod
    def _role(cls, v: str | None) -> str | None:
        if v is not None and not ROLE_ARN.match(v):
            raise ValueError("not an IAM role ARN; e.g. arn:aws:iam::123456789012:role/eks-node")
        return v

    @model_validator(mode="after")
    def _both(self) -> ExistingClusterConfig:
        if (self.endpoint is None) != (self.certificate_authority_data is None):
            given = "endpoint" if self.endpoint else "certificate_authority_data"
            raise FieldError(
                (given,),
                getattr(self, given),
                "set both endpoint and certificate_authority_data, or neither",
            )
        return self


class ClusterConfig(Section):
    """The EKS control plane."""

    name: str | None = Field(
        None,
        description="Cluster name; default `<project>-<stack>`.",
        pattern=r"^[a-zA-Z][\w-]{0,99}$",
    )
    version: str = Field(
        default_factory=lambda: catalog().eks.default_version,
        description="Kubernetes minor version; one the catalog lists as supported.",
    )
    endpoint_public_access: bool = Field(
        False, description="Expose the API endpoint publicly (restricted to the CIDRs below)."
    )
    public_access_cidrs: list[str] = Field(
        default_factory=list, description="CIDRs allowed to reach a public endpoint."
    )
    admin_role_arns: list[str] = Field(
        default_factory=list, description="IAM roles given cluster-admin through access entries."
    )
    log_types: list[LogType] = Field(
        default_factory=_default_log_types,
        description="Control-plane log types sent to CloudWatch; must include audit.",
    )
    log_retention_days: int = Field(90, ge=1, description="Retention of control-plane logs.")
    _log_retention = field_validator("log_retention_days")(cloudwatch_retention)
    support_type: Literal["STANDARD", "EXTENDED"] = Field(
        "STANDARD", description="EXTENDED costs 6x the standard control-plane rate."
    )
    deletion_protection: bool = Field(
        False, description="Refuse to delete the cluster until this is turned off."
    )
    existing: ExistingClusterConfig | None = Field(
        None,
        description="Adopt this cluster instead of creating one; `version` is then the "
        "adopted cluster's.",
    )

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        supported = catalog().eks.supported_versions
        if v not in supported:
            raise ValueError(f"not a supported EKS version; use one of {', '.join(supported)}")
        return v

    @field_validator("public_access_cidrs")
    @classmethod
    def _public_cidrs(cls, v: list[str]) -> list[str]:
        for i, cidr in enumerate(v):
            try:
                net = ipaddress.ip_network(cidr)
            except ValueError:
                raise FieldError((i,), cidr, "not a CIDR; e.g. 203.0.113.0/24") from None
            if net.prefixlen == 0:
                raise FieldError((i,), cidr, "opens the API to the internet; list your CIDRs")
        return v

    @field_validator("admin_role_arns")
    @classmethod
    def _roles(cls, v: list[str]) -> list[str]:
        for i, arn in enumerate(v):
            if not ROLE_ARN.match(arn):
                raise FieldError(
                    (i,), arn, "not an IAM role ARN; e.g. arn:aws:iam::123456789012:role/admin"
                )
        return v

    @field_validator("log_types")
    @classmethod
    def _audit(cls, v: list[str]) -> list[str]:
        if "audit" not in v:
            raise ValueError("must include audit: who changed what is not optional")
        return v

    @model_validator(mode="after")
    def _public(self) -> ClusterConfig:
        if self.endpoint_public_access and not self.public_access_cidrs:
            raise FieldError(
                ("public_access_cidrs",),
                [],
                "a public endpoint needs the CIDRs allowed to reach it",
            )
        if self.public_access_cidrs and not self.endpoint_public_access:
            raise FieldError(
                ("public_access_cidrs",),
                self.public_access_cidrs,
                "only applies with endpoint_public_access: true",
            )
        return self
