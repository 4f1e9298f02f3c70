"""RTO, RPO and quotas of a recovery: how long the rebuild takes, what a disaster can take,
and the EC2 quotas the recovery region must grant."""

from __future__ import annotations

import fnmatch
import functools
from dataclasses import asdict, dataclass, field
from graphlib import CycleError, TopologicalSorter
from typing import Any

from llmp.dr.config import DrError
from llmp.plan import Plan, Resource
from spec.catalog import CreationTime, Lag, Recovery, catalog
from spec.platform import PlatformConfig


def recovery_catalog() -> Recovery:
    recovery = catalog().recovery
    if recovery is None:
        raise DrError("the catalog has no `recovery` section (spec/catalog.yaml)")
    return recovery


@dataclass(frozen=True)
class PathStep:
    """One resource on the critical path: when it can start and how long it takes."""

    name: str
    type: str
    minutes: float
    start: float
    finish: float
    source: str


@dataclass(frozen=True)
class NotAwaited:
    """A resource a training restart does not wait for, when it is done, and why."""

    name: str
    type: str
    finish: float
    why: str


NOT_AWAITED: tuple[tuple[str, str], ...] = (
    (
        "lustre-datasets",
        "the restart reads its token shards from S3 (`data.path: s3://...`, fetched shard "
        "by shard on first use), not through the association; they must be in the "
        "recovery region's bucket (replicated, or restored: see CHECK)",
    ),
    (
        "lustre-checkpoints",
        "the trainer pulls its restore point from the replica (`--restore-from`) and "
        "writes new checkpoints on the file system; the association exports them once "
        "it is ready, long before the first new checkpoint is due",
    ),
    ("monitoring-*", "observability: training runs and checkpoints without it"),
    ("straggler-watch-*", "slow-node detection reads Prometheus, which comes after too"),
    (
        "milestones-*",
        "checkpoint housekeeping: the copier's first run copies what the restart wrote",
    ),
    (
        "addons-nvsentinel",
        "node-fault detection: the EKS node monitoring agent and node auto-repair already "
        "run; NVSentinel's extra checks join when it is up",
    ),
)
"""Resource names (fnmatch patterns) that a training restart does not wait for, and why.

A resource matched here only stops being a *target*: whatever the restart does need still
waits for everything it depends on, matched or not."""


def not_awaited_because(name: str) -> str | None:
    return next((why for pattern, why in NOT_AWAITED if fnmatch.fnmatchcase(name, pattern)), None)


@dataclass
class RtoEstimate:
    """When a training job can restart in the recovery stack (the critical path of what
    it needs, under typical creation times, and its range), and when `pulumi up` ends."""

    minutes: float
    low: float
    high: float
    path: list[PathStep]
    unknown_types: list[str]
    resources: int
    complete: float = 0.0
    """When the last resource of the plan is created (typical figures)."""
    not_awaited: list[NotAwaited] = field(default_factory=list)
    """What the restart does not wait for, latest first (only those finishing after it)."""

    def to_dict(self) -> dict[str, Any]:
        steps = [
            {**asdict(s), **{k: round(getattr(s, k), 2) for k in ("minutes", "start", "finish")}}
            for s in self.path
        ]
        return {
            **{k: round(getattr(self, k), 1) for k in ("minutes", "low", "high", "complete")},
            "critical_path": steps,
            "not_awaited": [{**asdict(n), "finish": round(n.finish, 2)} for n in self.not_awaited],
            "unknown_types": self.unknown_types,
            "resources": self.resources,
        }


def _creation_time(resource: Resource, recovery: Recovery) -> CreationTime | None:
    """None for what takes no time of its own: providers and ComponentResources."""
    if resource.type in recovery.creation_minutes:
        return recovery.creation_minutes[resource.type]
    if resource.type.startswith("pulumi:providers:"):
        return None
    if not resource.custom and not resource.type.startswith(("aws:", "kubernetes:")):
        return None  # our ComponentResources: containment only
    return recovery.default_creation_minutes


def waits_for(plan: Plan) -> dict[str, set[str]]:
    """urn -> the urns it cannot start before: its dependencies and parent
    (`Plan.graph`), its provider, and for a dependency on a ComponentResource, every
    descendant of that component."""
    graph = plan.graph()
    children: dict[str, list[str]] = {}
    for r in plan.resources:
        if r.parent is not None:
            children.setdefault(r.parent, []).append(r.urn)

    @functools.cache
    def descendants(urn: str) -> set[str]:
        return set().union(*({c} | descendants(c) for c in children.get(urn, [])))

    edges: dict[str, set[str]] = {}
    for r in plan.resources:
        waits = set(graph[r.urn]).union(*(descendants(d) for d in r.dependencies))
        if r.provider is not None and r.provider in graph:
            waits.add(r.provider)
        edges[r.urn] = waits - {r.urn}
    return edges


def critical_path(plan: Plan, recovery: Recovery | None = None) -> RtoEstimate:
    """When a training job can restart: the longest chain of `plan`'s dependency graph,
    weighted by creation minutes, that ends at a resource the restart needs.

    A resource starts when everything it waits for is done (`waits_for`) and takes its
    type's typical minutes. The restart needs every resource but those `NOT_AWAITED`
    names; the RTO is the latest finish among them, `complete` the latest of all. The
    range repeats the walk with every resource at its type's low and high figures. Ties
    go to the first URN, so the same plan gives the same path.
    """
    recovery = recovery or recovery_catalog()
    edges = waits_for(plan)
    try:
        order = list(TopologicalSorter(edges).static_order())
    except CycleError as exc:
        cycle = " -> ".join(exc.args[1])
        raise DrError(f"the plan's dependency graph has a cycle through {cycle}") from None
    times = {urn: _creation_time(plan.by_urn[urn], recovery) for urn in order}
    needed = sorted(u for u in order if not_awaited_because(plan.by_urn[u].name) is None)

    def walk(weight: str) -> tuple[dict[str, float], dict[str, str | None]]:
        finish: dict[str, float] = {}
        via: dict[str, str | None] = {}
        for urn in order:
            start, before = 0.0, None
            for dep in sorted(edges[urn]):
                if finish[dep] > start:
                    start, before = finish[dep], dep
            time = times[urn]
            finish[urn] = start + (getattr(time, weight) if time else 0.0)
            via[urn] = before
        return finish, via

    def restart(finish: dict[str, float]) -> float:
        return max((finish[u] for u in needed), default=0.0)

    finish, via = walk("minutes")
    end = max(needed, key=finish.__getitem__, default=None)
    path: list[PathStep] = []
    cursor = end
    while cursor is not None:
        r, time = plan.by_urn[cursor], times[cursor]
        if time is not None:  # components and providers only connect the chain
            start = finish[cursor] - time.minutes
            path.append(PathStep(r.name, r.type, time.minutes, start, finish[cursor], time.source))
        cursor = via[cursor]
    minutes = finish[end] if end else 0.0
    later = [
        NotAwaited(r.name, r.type, finish[u], why)
        for u in sorted(order)
        if (why := not_awaited_because((r := plan.by_urn[u]).name)) is not None
        and times[u] is not None
        and finish[u] > minutes
    ]
    default = recovery.default_creation_minutes
    return RtoEstimate(
        minutes=minutes,
        low=restart(walk("low")[0]),
        high=restart(walk("high")[0]),
        path=path[::-1],
        unknown_types=sorted({plan.by_urn[u].type for u, t in times.items() if t is default}),
        resources=len(plan.resources),
        complete=max(finish.values(), default=0.0),
        not_awaited=sorted(later, key=lambda n: (-n.finish, n.name)),
    )


@dataclass(frozen=True)
class RpoPart:
    what: str
    minutes: float
    kind: str
    """`configured` (the stack's own value), `SLA` (a service's bound) or `assumption`."""
    source: str


@dataclass
class RpoEstimate:
    """Worst-case training progress lost: the parts add up."""

    parts: list[RpoPart]
    replicated: bool
    """Whether the checkpoints bucket is replicated at all (else every checkpoint is lost)."""

    @property
    def minutes(self) -> float:
        return sum(p.minutes for p in self.parts)

    @property
    def bound(self) -> bool:
        """True when no part is an assumption."""
        return self.replicated and all(p.kind != "assumption" for p in self.parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "minutes": round(self.minutes, 1) if self.replicated else None,
            "replicated": self.replicated,
            "bound": self.bound,
            "parts": [asdict(p) for p in self.parts],
        }


def _lag(what: str, lag: Lag) -> RpoPart:
    return RpoPart(what, lag.minutes, "SLA" if lag.bound else "assumption", lag.source)


def estimate_rpo(source: PlatformConfig, interval_seconds: int | None = None) -> RpoEstimate:
    """A checkpoint taken just after the last one that reached the replica is what is lost:
    at most one checkpoint interval, plus the time to export it from the file system to S3,
    plus the time S3 takes to replicate it to the recovery region."""
    recovery = recovery_catalog()
    storage = source.storage
    if interval_seconds is None:
        interval = RpoPart(
            "checkpoint interval",
            source.monitoring.alerts.checkpoint_interval_seconds / 60,
            "configured",
            "monitoring.alerts.checkpoint_interval_seconds of the source stack. The job's own "
            "interval is in steps (checkpoint.interval_steps), so its seconds depend on the "
            "step time; the stale-checkpoint alert fires at twice this age, so a stalled "
            "checkpointer can lose up to twice as much before anyone is paged",
        )
    else:
        interval = RpoPart(
            "checkpoint interval", interval_seconds / 60, "configured", "--checkpoint-interval"
        )
    parts = [interval]
    lustre = storage.lustre if storage else None
    spec = (
        storage.buckets.get(lustre.checkpoints_bucket if lustre else "checkpoints")
        if storage
        else None
    )
    replicated = spec is not None and spec.replicate
    if lustre is not None:
        parts.append(_lag("FSx auto-export to S3", recovery.fsx_auto_export))
    if storage is not None and replicated:
        if storage.replication.time_control:
            parts.append(_lag("S3 replication (RTC)", recovery.s3_replication_rtc))
        else:
            parts.append(_lag("S3 replication (no RTC)", recovery.s3_replication_without_rtc))
    return RpoEstimate(parts, replicated=replicated)


@dataclass(frozen=True)
class QuotaNeed:
    """vCPUs a recovery stack may run under one EC2 quota at its pools' max sizes."""

    code: str
    name: str
    vcpus: int
    pools: list[str]


def quota_needs(cfg: PlatformConfig) -> tuple[list[QuotaNeed], list[str]]:
    """The quotas the pools need at their max sizes, and the capacity-block pools (whose
    block is bought for them, outside any quota): `llmp synth`'s count
    (`llmp.plan.quotas`), which leaves out an adopted cluster's system pool."""
    from llmp.plan.quotas import quota_demands

    demands, unquoted = quota_demands(cfg)
    return [QuotaNeed(d.code, d.name, d.vcpus, list(d.pools)) for d in demands], unquoted
