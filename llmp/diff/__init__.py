"""`llmp diff`: what a change does to a stack, from two synthesized plans.

A PR preview without cloud credentials: the stack is synthesized at the base
revision and at the working tree (llmp/plan/revision.py), and the two plans are
compared by URN, the identity Pulumi uses:

- resources added, deleted, and changed (the input paths, old -> new);
  a change of dependencies alone is not an input change;
- renames: a URN that vanishes while one of the same type appears. Pulumi
  deletes the old resource and creates the new one unless the new one has
  `aliases=[old URN]`, so a rename is reported as delete + create;
- replacements and refusals, by the replacement table (spec/replacement.yaml: every
  input of every type the stacks declare, updated in place, forcing a new resource, or
  conditional), spread to what takes a replaced resource's outputs or runs on its
  provider; a move to a provider configured differently, a delete or a rename replace
  too. Precious types (cluster, node groups, file system, buckets, KMS keys) are flagged
  loudly, and changes the API refuses fail the diff;
- the cost delta from the plans' `cost` output, and what a replaced node pool costs
  while it is replaced (`transition_costs`);
- the policy violations that are new, and the ones fixed.

The plan comparison is `llmp.diff.compare` (shared with `llmp dr plan`); this
module adds the cost and policy deltas (`cost_delta`, `violation_delta`) and
builds the report (`build_report`, `DiffReport`, `report_to_json`);
`llmp.diff.render` renders it for a terminal and as a PR comment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmp.diff.compare import PlanDiff, as_applied, compare_plans
from llmp.diff.rolls import Roll, rolls
from llmp.diff.workloads import NODE_GROUP, PoolWork, effect, pool_work
from llmp.plan import Plan
from llmp.plan.leaves import at_path, number
from spec.labels import POOL_LABEL

# ---------------------------------------------------------------------------
# Cost
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CostLine:
    measure: str
    base: float | None
    head: float | None

    @property
    def delta(self) -> float | None:
        if self.base is None and self.head is None:
            return None
        return round((self.head or 0.0) - (self.base or 0.0), 2)

    def to_dict(self) -> dict[str, Any]:
        return {"measure": self.measure, "base": self.base, "head": self.head, "delta": self.delta}


_COST_MEASURES = (
    ("usd_per_hour.min", "$/h at min size"),
    ("usd_per_hour.desired", "$/h at desired size"),
    ("usd_per_hour.max", "$/h at max size"),
    ("usd_per_month_with_storage", "$/month at desired size, with storage"),
)




def _cost_of(plan: Plan | None) -> Mapping[str, Any]:
    cost = plan.outputs.get("cost") if plan is not None else None
    return cost if isinstance(cost, Mapping) else {}


def _component_costs(cost: Mapping[str, Any]) -> dict[str, float | None]:
    components = cost.get("components")
    if not isinstance(components, Mapping):
        return {}
    out = {}
    for name, value in components.items():
        monthly = value.get("usd_per_month") if isinstance(value, Mapping) else value
        out[str(name)] = number(monthly)
    return out


def cost_delta(base: Plan | None, head: Plan | None) -> dict[str, list[CostLine]]:
    """Cost base vs head from the plans' `cost` output: totals, GPU pools, components.

    A measure either plan lacks is None there (an older revision without the
    output, or without `cost.components`); a stack that does not exist on one
    side costs nothing there.
    """
    a, b = _cost_of(base), _cost_of(head)
    missing_a, missing_b = base is None, head is None

    def side(cost: Mapping[str, Any], missing: bool, path: str) -> float | None:
        return 0.0 if missing else number(at_path(cost, path))

    totals = [
        CostLine(label, side(a, missing_a, p), side(b, missing_b, p)) for p, label in _COST_MEASURES
    ]
    pools: list[CostLine] = []
    for section in ("node_pools", "cpu_pools"):
        pool_names = sorted(set(a.get(section) or {}) | set(b.get(section) or {}))
        for pool in pool_names:
            for size in ("desired", "max"):
                path = f"{section}.{pool}.usd_per_hour.{size}"
                line = CostLine(
                    f"pool {pool}, $/h at {size}",
                    number(at_path(a, path)),
                    number(at_path(b, path)),
                )
                if line.base != line.head:
                    pools.append(line)
    comps_a, comps_b = _component_costs(a), _component_costs(b)
    components = [
        CostLine(f"component {name}, $/month", comps_a.get(name), comps_b.get(name))
        for name in sorted(set(comps_a) | set(comps_b))
        if comps_a.get(name) != comps_b.get(name)
    ]
    return {"totals": totals, "node_pools": pools, "components": components}


def has_component_costs(plan: Plan | None) -> bool:
    """Whether a plan's cost output has the per-component breakdown (`cost.components`)."""
    return bool(_component_costs(_cost_of(plan)))


@dataclass(frozen=True)
class Transition:
    """What replacing a node pool costs while it happens (not in the steady-state delta)."""

    pool: str
    resource: str
    order: str
    """create-first: old and new nodes both run; delete-first: the pool has none."""
    nodes: int
    usd_per_hour: float
    minutes: float
    """How long the overlap or the gap lasts: the catalog's node-group creation time."""
    work: PoolWork | None = None
    """What runs on the pool (None: not read)."""

    @property
    def usd(self) -> float:
        """The extra spend of a create-first overlap (a delete-first gap costs capacity)."""
        return (
            round(self.usd_per_hour * self.minutes / 60, 2) if self.order == "create-first" else 0.0
        )

    def describe(self) -> str:
        if self.order == "create-first":
            return (
                f"pool {self.pool}: old and new node groups both run for ~{self.minutes:g} min "
                f"({self.nodes} more nodes, +{money(self.usd_per_hour)}/h, ~{money(self.usd)})"
            )
        return (
            f"pool {self.pool}: its {self.nodes} nodes stop before the new group exists "
            f"(its name is fixed): no capacity for ~{self.minutes:g} min"
        )

    def effects(self) -> list[str]:
        """What the work on the pool lives through (serving, training, data, system)."""
        work = self.work if self.work is not None else PoolWork(self.pool)
        return effect(work, self.order, minutes=self.minutes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "resource": self.resource,
            "order": self.order,
            "nodes": self.nodes,
            "usd_per_hour": self.usd_per_hour,
            "minutes": self.minutes,
            "usd": self.usd,
            "text": self.describe(),
            "workloads": (self.work or PoolWork(self.pool)).kinds(),
            "effects": self.effects(),
        }




def transition_costs(diff: PlanDiff, base: Plan | None, head: Plan | None) -> list[Transition]:
    """For each node group replaced (not only deleted), what the replacement costs meanwhile.

    Create-first (Pulumi's default) runs the old and the new group together until the old
    one is deleted; delete-first (a fixed node group name, or delete_before_replace) leaves
    the pool without nodes. Either lasts about one node group creation (the catalog's
    recovery figure). The nodes and their price come from the base plan's cost output.
    """
    from spec.catalog import catalog

    if base is None:
        return []
    recovery = catalog().recovery
    minutes = recovery.creation_minutes[NODE_GROUP].minutes if recovery else 0.0
    cost_of_base = _cost_of(base)
    work = pool_work(base)
    # GPU and CPU pools (cpu_pools) by pool label: their names never collide.
    pools = {**(cost_of_base.get("node_pools") or {}), **(cost_of_base.get("cpu_pools") or {})}
    out = []
    for r in diff.replacements:
        if r.type != NODE_GROUP or r.order is None or r.urn not in base.by_urn:
            continue
        labels = base.by_urn[r.urn].inputs.get("labels") or {}
        pool = labels.get(POOL_LABEL)
        cost = pools.get(pool) if isinstance(pools, Mapping) else None
        if not isinstance(cost, Mapping):
            continue
        nodes = number(at_path(cost, "nodes.desired")) or 0.0
        per_hour = number(at_path(cost, "usd_per_hour.desired")) or 0.0
        if nodes <= 0:
            continue
        out.append(
            Transition(
                str(pool),
                r.name,
                r.order,
                int(nodes),
                per_hour,
                minutes,
                work.get(str(pool), PoolWork(str(pool))),
            )
        )
    return out


# ---------------------------------------------------------------------------
# Policy
# ---------------------------------------------------------------------------


def violation_delta(base: Sequence[Any], head: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """(new, fixed): violations in head and not in base, and the reverse.

    Two violations are the same when their rule matches and so does their
    resource, by URN or by name (a name survives a change of parent type; a
    stack-wide violation is `(stack)` on both sides whatever its message).
    """

    def keys(v: Any) -> set[tuple[str, str]]:
        return {(v.rule, f"urn:{v.urn}"), (v.rule, f"name:{v.resource}")}

    base_keys = set().union(*(keys(v) for v in base)) if base else set()
    head_keys = set().union(*(keys(v) for v in head)) if head else set()
    new = [v for v in head if not keys(v) & base_keys]
    fixed = [v for v in base if not keys(v) & head_keys]
    return new, fixed


# ---------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------


@dataclass
class DiffReport:
    stack: str
    base: str
    """The base revision as shown: `main (1a2b3c4)`."""
    head: str
    """`the working tree`, or a revision as shown."""
    diff: PlanDiff
    cost: dict[str, list[CostLine]]
    new_violations: list[Any] = field(default_factory=list)
    fixed_violations: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    component_costs: bool = False
    """Whether either plan's cost output has the per-component breakdown."""
    transitions: list[Transition] = field(default_factory=list)
    rolls: list[Roll] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    """What the diff cannot know offline (a provider's behaviour at apply time)."""

    @property
    def new_mandatory(self) -> list[Any]:
        return [v for v in self.new_violations if v.level == "mandatory"]

    def summary(self) -> str:
        d = self.diff
        recreated = d.recreated
        precious = sum(1 for r in recreated if r.precious)
        parts = [
            f"{len(d.added)} to add",
            f"{d.updated_in_place} to change in place",
            f"{len(recreated)} to replace ({precious} precious)",
            f"{len(d.deleted)} to delete",
        ]
        if d.renamed:
            parts.append(f"{len(d.renamed)} renamed (delete + create)")
        parts.append(f"{d.untouched} unchanged")
        if d.refused:
            parts.append(f"{len(d.refused)} refused by the API")
        if self.rolls:
            parts.append(f"{len(self.rolls)} node pools roll (every node replaced)")
        if d.ignored:
            parts.append(f"{len(d.ignored)} changes `pulumi up` does not make")
        if self.unknown:
            parts.append(f"{len(self.unknown)} not known offline")
        desired = next((c for c in self.cost["totals"] if "desired" in c.measure), None)
        if desired is not None and desired.delta is not None:
            parts.append(f"cost {money_delta(desired.delta)}/h at desired size")
        parts.append(
            f"{len(self.new_violations)} new policy violations "
            f"({len(self.new_mandatory)} mandatory), {len(self.fixed_violations)} fixed"
        )
        return "; ".join(parts)


def exit_code(report: DiffReport, fail_on_replace: bool) -> int:
    """1 for a new mandatory violation, a change the API refuses, or a precious replacement
    with --fail-on-replace; else 0."""
    if report.new_mandatory or report.diff.refused:
        return 1
    if fail_on_replace and report.diff.precious_replacements:
        return 1
    return 0


def report_to_json(report: DiffReport) -> dict[str, Any]:
    return {
        "stack": report.stack,
        "base": report.base,
        "head": report.head,
        "summary": report.summary(),
        **report.diff.to_dict(),
        "cost": {k: [c.to_dict() for c in v] for k, v in report.cost.items()},
        "new_violations": [v.to_dict() for v in report.new_violations],
        "fixed_violations": [v.to_dict() for v in report.fixed_violations],
        "transitions": [t.to_dict() for t in report.transitions],
        "rolls": [r.to_dict() for r in report.rolls],
        "not_known_offline": report.unknown,
        "notes": report.notes,
    }


def money(value: float | None) -> str:
    """Dollars as the report shows them (`n/a` for an unknown amount)."""
    return "n/a" if value is None else f"${value:,.2f}"


def money_delta(value: float | None) -> str:
    """A change in dollars, signed (`±` for none)."""
    if value is None:
        return "n/a"
    sign = "+" if value > 0 else "-" if value < 0 else "±"
    return f"{sign}${abs(value):,.2f}"


# ---------------------------------------------------------------------------
# Putting it together
# ---------------------------------------------------------------------------


def _violations(
    plan: Plan | None, stack: str, stack_text: str | None, fallback: str | None
) -> tuple[list[Any], str | None]:
    """The policy pack's violations of `plan`, configured by the stack file it came from.

    The pack and its rules are the running code's (head's), so a violation is
    new because the infrastructure changed, not because a rule was added. The
    stack file of that revision sets the GPU budget and the FSx pool; when the
    running code cannot read it (the schema changed), `fallback`'s is used and
    a note says so.
    """
    import tempfile

    from llmp.plan.policy import evaluate, stack_policy_config
    from spec.errors import ConfigError

    if plan is None or stack_text is None:
        return [], None
    note = None
    with tempfile.TemporaryDirectory(prefix="llmp-stack-") as tmp:
        path = Path(tmp) / f"Pulumi.{stack}.yaml"
        path.write_text(stack_text)
        try:
            config = stack_policy_config(stack, path)
        except ConfigError as exc:
            if fallback is None:
                raise
            path.write_text(fallback)
            config = stack_policy_config(stack, path)
            note = f"the base stack file does not validate with this code ({exc}); its policy "
            note += "config is taken from the head stack file"
    return evaluate(plan, config, stack_config=False), note


def build_report(
    stack: str,
    base_ref: str,
    repo: Path,
    head_ref: str | None = None,
    config: str | None = None,
) -> DiffReport:
    """Synthesize `stack` at `base_ref` and at `head_ref` (None: the working tree) and compare;
    `config`: the stack file's path in the repository, where it is not the stack's own.

    Raises RevisionError (one line, with its exit code) when a side cannot be
    synthesized, or when the stack exists on neither side.
    """
    from llmp.plan import revision as rev

    rev.check_stack_name(stack)
    base_revision = rev.resolve(base_ref, repo)
    head_revision = rev.resolve(head_ref, repo) if head_ref is not None else None
    head_label = head_revision.label if head_revision else rev.WORKING_TREE
    notes: list[str] = []

    base_text = rev.stack_file_at(base_revision, stack, repo, config)
    if head_revision is not None:
        head_text = rev.stack_file_at(head_revision, stack, repo, config)
    else:
        path = repo / rev.stack_relpath(stack, config)
        head_text = path.read_text() if path.is_file() else None
    if base_text is None and head_text is None:
        raise rev.RevisionError(
            f"stack {stack} exists neither at {base_revision.label} nor at {head_label}: "
            f"no {rev.stack_relpath(stack, config)}"
        )

    base_plan: Plan | None = None
    head_plan: Plan | None = None
    if base_text is None:
        notes.append(
            f"stack {stack} does not exist at {base_revision.label}: it is added by this change"
        )
    else:
        base_plan = rev.plan_of_revision(base_revision, stack, repo, config)
    if head_text is None:
        notes.append(f"stack {stack} does not exist at {head_label}: it is removed by this change")
    elif head_revision is not None:
        head_plan = rev.plan_of_revision(head_revision, stack, repo, config)
    else:
        head_plan = rev.plan_of_worktree(stack, repo, config)

    base_violations, note = _violations(base_plan, stack, base_text, head_text)
    if note:
        notes.append(note)
    head_violations, _ = _violations(head_plan, stack, head_text, None)
    new, fixed = violation_delta(base_violations, head_violations)
    return report_of_plans(
        stack,
        base_plan,
        head_plan,
        base_label=base_revision.label,
        head_label=head_label,
        notes=notes,
        violations=(new, fixed),
    )


def report_of_plans(
    stack: str,
    base_plan: Plan | None,
    head_plan: Plan | None,
    *,
    base_label: str = "base",
    head_label: str = "head",
    notes: Sequence[str] = (),
    violations: tuple[list[Any], list[Any]] = ([], []),
) -> DiffReport:
    """The report of two plans: the comparison, what `pulumi up` would change of the
    cost, the rolls and replacements with what runs on each pool, what is unknown."""
    notes = list(notes)
    plan_diff = compare_plans(base_plan, head_plan)
    if plan_diff.unclassified:
        shown = ", ".join(f"{t} {p}" for t, p in plan_diff.unclassified[:5])
        more = len(plan_diff.unclassified) - 5
        notes.append(
            f"{len(plan_diff.unclassified)} changed inputs have no rule in "
            f"spec/replacement.yaml ({shown}{f', and {more} more' if more > 0 else ''}): "
            "changes are read as in place, values from replaced resources as replacements"
        )
    applied = applied_head(base_plan, head_plan, plan_diff)
    if applied is not head_plan:
        paths = sorted({f"{c.name} {c.path}" for c in plan_diff.ignored})
        notes.append(
            "the cost below is what `pulumi up` would change: it leaves "
            f"{', '.join(paths)} alone (ignore_changes), so the file's new value costs nothing "
            "until it applies"
        )
    new, fixed = violations
    return DiffReport(
        stack=stack,
        base=base_label,
        head=head_label,
        diff=plan_diff,
        cost=cost_delta(base_plan, applied),
        new_violations=new,
        fixed_violations=fixed,
        notes=notes,
        component_costs=has_component_costs(base_plan) or has_component_costs(head_plan),
        transitions=transition_costs(plan_diff, base_plan, head_plan),
        rolls=rolls(plan_diff, base_plan, head_plan),
        unknown=not_known_offline(plan_diff, base_plan, head_plan),
    )


def applied_head(base: Plan | None, head: Plan | None, diff: PlanDiff) -> Plan | None:
    """`head` with the cost `pulumi up` would leave: where ignore_changes keeps inputs at
    their deployed values, the program's own pricing of both versions gives the
    difference, taken off head's cost output. `head` itself where nothing is ignored."""
    if base is None or head is None or not diff.ignored:
        return head
    from llmp.cost import as_exported, declared
    from program.cost import estimate

    applied = as_applied(base, head, diff)
    as_file = as_exported(estimate(declared(head)))
    as_up = as_exported(estimate(declared(applied)))
    cost = _shifted(_cost_of(head), as_file, as_up)
    return applied.model_copy(update={"outputs": {**head.outputs, "cost": cost}})


def _shifted(value: Any, as_file: Any, as_up: Any) -> Any:
    """`value` with each number moved by (as_up - as_file) at the same place."""
    if isinstance(value, Mapping):
        return {
            k: _shifted(
                v,
                as_file.get(k) if isinstance(as_file, Mapping) else None,
                as_up.get(k) if isinstance(as_up, Mapping) else None,
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [
            _shifted(
                v,
                as_file[i] if isinstance(as_file, list) and i < len(as_file) else None,
                as_up[i] if isinstance(as_up, list) and i < len(as_up) else None,
            )
            for i, v in enumerate(value)
        ]
    a, b, x = number(as_file), number(as_up), number(value)
    if x is None or a is None or b is None or isinstance(value, bool):
        return value
    return round(x + (b - a), 6)


def _shown(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


def not_known_offline(diff: PlanDiff, base: Plan | None, head: Plan | None) -> list[str]:
    """What `pulumi up` does that depends on the deployed state, which a plan cannot hold.

    An autoscaled node group keeps the desired size its autoscaler set; UpdateNodegroupConfig
    requires min <= desired <= max in the group's new state (EKS API reference,
    NodegroupScalingConfig, read 2026-12-02), so a new min above, or a new max below, the
    desired size at creation may be refused, or not, by the count it runs now.
    """
    if base is None or head is None:
        return []
    replaced = {r.urn for r in diff.recreated}
    out = []
    for r in head.resources:
        if r.type != NODE_GROUP or r.urn not in base.by_urn or r.urn in replaced:
            continue
        if not r.ignores("scalingConfig.desiredSize"):
            continue
        before = base.by_urn[r.urn].inputs.get("scalingConfig") or {}
        after = r.inputs.get("scalingConfig") or {}
        desired = number(before.get("desiredSize"))
        low, high = number(after.get("minSize")), number(after.get("maxSize"))
        old_low, old_high = number(before.get("minSize")), number(before.get("maxSize"))
        if desired is None:
            continue
        if low is not None and low != old_low and low > desired:
            out.append(
                f"{r.name}: min_size {_shown(old_low)} → {low:g} is above the desired size at "
                f"creation ({desired:g}); EKS refuses it unless the autoscaler already runs "
                f"at least {low:g} nodes: not known offline"
            )
        if high is not None and high != old_high and high < desired:
            out.append(
                f"{r.name}: max_size {_shown(old_high)} → {high:g} is below the desired size at "
                f"creation ({desired:g}); EKS refuses it unless the autoscaler runs at most "
                f"{high:g} nodes now: not known offline"
            )
    return out
