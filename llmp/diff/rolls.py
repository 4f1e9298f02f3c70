"""Rolling replacements: changes that make EKS replace every node of a managed node group
while the group itself stays (an "update in place" to Pulumi), and what they cost the
work on the pool.

Which changes roll, read 2026-12-02 from the EKS user guide ("Understand each phase of
node updates", managed-node-update-behavior) and the EKS API reference, and from
terraform-provider-aws internal/service/eks/node_group.go as pulumi-aws 7.51.1 bridges it:

- `version` (Kubernetes), `releaseVersion` (the AMI release) and `launchTemplate.version`
  go through UpdateNodegroupVersion: EKS creates a launch template version, grows the
  Auto Scaling group by max(2 x its Availability Zones, maxUnavailable) new nodes, then
  cordons and drains the old nodes `updateConfig.maxUnavailable` at a time, honouring
  PodDisruptionBudgets; a pod that does not drain within 15 minutes fails the update
  (PodEvictionFailure) unless it is forced;
- a change of the launch template's data (block devices, user data, instance type,
  metadata options, network interfaces, placement, market options, tag specifications)
  creates a new template version (CreateLaunchTemplateVersion), and the node group, pinned
  to the template's latest version, rolls onto it;
- labels, taints, scaling and update config go through UpdateNodegroupConfig: no node is
  replaced (a taint applies to the nodes as they are);
- a launch template's own tags, description and default-version flag create no version.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llmp.diff.compare import PlanDiff
from llmp.diff.workloads import NODE_GROUP, POOL_LABEL, PoolWork, effect, pool_work
from llmp.plan import Plan, Resource
from llmp.plan.leaves import number

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
ROLLING_INPUTS = {
    "version": "Kubernetes version",
    "releaseVersion": "AMI release version",
    "launchTemplate.version": "launch template version",
}
"""Node group inputs that go through UpdateNodegroupVersion: every node is replaced."""
NO_TEMPLATE_VERSION = ("tags", "description", "updateDefaultVersion")
"""Launch template inputs whose change creates no new version (and so no roll)."""
DRAIN_TIMEOUT_MINUTES = 15
"""EKS fails an update whose pods do not drain within this (PodEvictionFailure)."""


@dataclass
class Roll:
    """Every node of one pool replaced by EKS, wave by wave, the node group kept."""

    pool: str
    resource: str
    causes: list[str]
    nodes: int
    autoscaled: bool
    max_unavailable: int
    surge: int
    """New nodes EKS launches first: max(2 x Availability Zones, maxUnavailable)."""
    minutes_per_wave: float
    low: float
    high: float
    work: PoolWork = field(default_factory=lambda: PoolWork(""))

    @property
    def waves(self) -> int:
        return max(1, math.ceil(self.nodes / self.max_unavailable)) if self.nodes else 0

    @property
    def minutes(self) -> float:
        return self.waves * self.minutes_per_wave

    def describe(self) -> str:
        count = f"{self.nodes} nodes"
        if self.autoscaled:
            count += " (its desired size at creation; the autoscaler may hold another now)"
        if not self.nodes:
            now = "if the autoscaler has started some" if self.autoscaled else "if it has any"
            return (
                f"pool {self.pool} rolls ({'; '.join(self.causes)}): its desired size is 0, "
                f"so its nodes are replaced only {now}"
            )
        return (
            f"pool {self.pool} rolls: every node is replaced ({'; '.join(self.causes)}); "
            f"{count}, {self.max_unavailable} at a time: {self.waves} waves, "
            f"~{self.minutes:g} min ({self.waves * self.low:g}-{self.waves * self.high:g}); "
            f"EKS first adds up to {self.surge} new nodes; a pod that does not drain in "
            f"{DRAIN_TIMEOUT_MINUTES} min fails the update"
        )

    def effects(self) -> list[str]:
        return effect(self.work, "roll", unavailable=self.max_unavailable)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "resource": self.resource,
            "causes": self.causes,
            "nodes": self.nodes,
            "autoscaled": self.autoscaled,
            "max_unavailable": self.max_unavailable,
            "waves": self.waves,
            "surge": self.surge,
            "minutes": self.minutes,
            "minutes_range": [self.waves * self.low, self.waves * self.high],
            "workloads": self.work.kinds(),
            "effects": self.effects(),
            "text": self.describe(),
        }


def _count(value: Any, default: int) -> int:
    found = number(value)
    return default if found is None else int(found)


def _template_of(group: Resource, plan: Plan) -> Resource | None:
    """The launch template a node group names (`launchTemplate.id` is `<name>-id` offline)."""
    template_id = (group.inputs.get("launchTemplate") or {}).get("id")
    for r in plan.resources:
        if r.type == LAUNCH_TEMPLATE and f"{r.name}-id" == template_id:
            return r
    return None


def _versioned(path: str) -> bool:
    return not any(path == p or path.startswith((p + ".", p + "[")) for p in NO_TEMPLATE_VERSION)


def rolls(diff: PlanDiff, base: Plan | None, head: Plan | None) -> list[Roll]:
    """The node groups this change rolls (not those it replaces, deletes or adds)."""
    from spec.catalog import catalog

    if base is None or head is None:
        return []
    recovery = catalog().recovery
    join = recovery.creation_minutes.get(NODE_GROUP) if recovery else None
    per_wave, low, high = (join.minutes, join.low, join.high) if join else (0.0, 0.0, 0.0)
    replaced = {r.urn for r in diff.replacements}
    changed: Mapping[str, Any] = {c.urn: c for c in diff.changed}
    work = pool_work(head)
    out = []
    for group in head.resources:
        if group.type != NODE_GROUP or group.urn in replaced or group.urn not in base.by_urn:
            continue
        before = base.by_urn[group.urn]
        causes = []
        change = changed.get(group.urn)
        for c in change.changes if change is not None else []:
            if c.path in ROLLING_INPUTS:
                causes.append(f"{ROLLING_INPUTS[c.path]} {c.old} → {c.new}")
        template = _template_of(group, head)
        if template is not None and template.urn not in replaced:
            tchange = changed.get(template.urn)
            paths = [c for c in (tchange.changes if tchange else []) if _versioned(c.path)]
            if paths:
                shown = ", ".join(f"{c.path} {c.old} → {c.new}" for c in paths[:3])
                more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
                causes.append(f"launch template {template.name}: {shown}{more}")
        if not causes:
            continue
        scaling = before.inputs.get("scalingConfig") or {}
        update = group.inputs.get("updateConfig") or {}
        unavailable = max(1, _count(update.get("maxUnavailable"), 1))
        zones = len(group.inputs.get("subnetIds") or []) or 1
        pool = str((group.inputs.get("labels") or {}).get(POOL_LABEL) or group.name)
        out.append(
            Roll(
                pool=pool,
                resource=group.name,
                causes=causes,
                nodes=_count(scaling.get("desiredSize"), 0),
                autoscaled=bool(group.ignores("scalingConfig.desiredSize")),
                max_unavailable=unavailable,
                surge=max(2 * zones, unavailable),
                minutes_per_wave=per_wave,
                low=low,
                high=high,
                work=work.get(pool, PoolWork(pool)),
            )
        )
    return out
