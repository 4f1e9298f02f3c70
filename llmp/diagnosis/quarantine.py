"""`llmp stragglers --quarantine`: the quarantine of slow nodes (workloads/diagnosis/isolation.py,
which the in-cluster straggler watcher uses too) with the CLI's errors and exit codes.

The library's one-line errors become the CLI's: a cluster that cannot be used is a
`KubeError` (exit 2), a target that is no node of the cluster or a cap under 1 `BadInput`
(exit 2), a write the API refused `Failed` (exit 1).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from llmp.clients.kube import KubeApis, KubeError
from llmp.errors import BadInput, Failed
from workloads.diagnosis import isolation
from workloads.diagnosis.isolation import (
    EFFECT,
    REASON_ANNOTATION,
    SINCE_ANNOTATION,
    SLOW,
    TRAINING_PODS,
    Action,
    NodeOutcome,
    QuarantineReport,
    Target,
    describe,
)

__all__ = [
    "EFFECT",
    "REASON_ANNOTATION",
    "SINCE_ANNOTATION",
    "SLOW",
    "TRAINING_PODS",
    "Action",
    "NodeOutcome",
    "QuarantineReport",
    "Target",
    "check_cap",
    "describe",
    "quarantine",
]


def check_cap(max_quarantined: int) -> None:
    if max_quarantined < 1:
        raise BadInput(f"--max-quarantined {max_quarantined}: at least 1")


def quarantine(
    apis: KubeApis,
    targets: Sequence[Target],
    *,
    max_quarantined: int,
    dry_run: bool,
    now: datetime.datetime,
) -> QuarantineReport:
    """`isolation.quarantine`: the worst first until `max_quarantined` nodes carry the taint,
    the rest refused. KubeError for a cluster that cannot be used, BadInput for a target that
    is no node of it, Failed for a refused write."""
    check_cap(max_quarantined)
    try:
        return isolation.quarantine(
            apis, targets, max_quarantined=max_quarantined, dry_run=dry_run, now=now
        )
    except isolation.ClusterUnusable as exc:
        raise KubeError(str(exc)) from None
    except (isolation.NotANode, isolation.BadCap) as exc:
        raise BadInput(str(exc)) from None
    except isolation.IsolationFailed as exc:
        raise Failed(str(exc)) from None
