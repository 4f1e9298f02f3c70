"""What the config sections share: the frozen base model and validators of AWS names."""

from __future__ import annotations

import difflib
import functools
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from spec.catalog import catalog
from spec.errors import FieldError, sorted_names


def is_model(t: Any) -> bool:
    """A pydantic model class (what the error paths and the reference walk into)."""
    return isinstance(t, type) and issubclass(t, BaseModel)


class Section(BaseModel):
    # NaN and infinity are no sizes or prices: they would poison every sum of the cost model.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


POOL_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8,17}$")
AZ = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$")


@functools.cache
def _partitions() -> dict[str, tuple[re.Pattern[str], tuple[str, ...]]]:
    """Partition -> (its region-name pattern, its regions), from botocore's partition data.

    `botocore/data/partitions.json` ships inside botocore (offline, 7 KB; the 1.2 MB
    endpoints.json lists the same regions and took 0.2 s a synthesis to load). Every
    partition counts (aws, aws-cn, aws-us-gov, ...), opt-in regions included; its
    `aws-global`-style pseudo-regions are no deployment target.
    """
    import botocore

    data = json.loads((Path(botocore.__file__).parent / "data" / "partitions.json").read_text())
    return {
        p["id"]: (
            re.compile(p.get("regionRegex") or "^$"),
            tuple(sorted(r for r in p["regions"] if not r.endswith("-global"))),
        )
        for p in data["partitions"]
    }


def aws_regions() -> list[str]:
    """Every AWS region botocore knows, in every partition."""
    return sorted(r for _, regions in _partitions().values() for r in regions)


def known_region(v: str) -> str:
    if v in aws_regions():
        return v
    import botocore

    # The regions of the partition the name looks like it belongs to, else all of them.
    known = next(
        (list(regions) for pattern, regions in _partitions().values() if pattern.match(v)),
        aws_regions(),
    )
    guess = None
    if len(v) <= 64:
        stem = v.rsplit("-", 1)[0] + "-"
        siblings = [r for r in known if r.startswith(stem)]
        close = difflib.get_close_matches(v, aws_regions(), n=1, cutoff=0.6)
        guess = siblings[0] if siblings else (close[0] if close else None)
    hint = f"; did you mean {guess}?" if guess else ""
    raise ValueError(
        f"not an AWS region{hint} (known to botocore {botocore.__version__}: {', '.join(known)})"
    )


LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827)
"""The retentions CloudWatch Logs accepts (PutRetentionPolicy)."""


def cloudwatch_retention(v: int) -> int:
    if v not in LOG_RETENTION_DAYS:
        raise FieldError((), v, f"a CloudWatch retention: {LOG_RETENTION_DAYS}")
    return v


K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def namespace_names(v: list[str]) -> list[str]:
    for i, ns in enumerate(v):
        if not K8S_NAME.match(ns):
            raise FieldError((i,), ns, "not a Kubernetes namespace name (RFC 1123 label)")
    return v


def known_instance(v: str) -> str:
    if v not in catalog().instances:
        raise ValueError(
            f"not an instance type in the catalog; use one of {sorted_names(catalog().instances)}"
        )
    return v
