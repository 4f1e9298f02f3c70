"""Cost guardrails: Spot only for jobs that checkpoint, and a GPU budget per stack.

The budget prices every accelerated node group at its max size: catalog
on-demand price for ON_DEMAND, the capacity-block price for CAPACITY_BLOCK,
and on-demand less the catalog's Spot discount assumption for SPOT.
"""

from __future__ import annotations

from pulumi_policy import ResourceValidationArgs, StackValidationArgs

from policies.nodes import NODE_GROUP, accelerator_kind, instance_types
from policies.props import Report, get, known, of_type
from spec.catalog import catalog
from spec.labels import CHECKPOINTING_LABEL

BUDGET_KEY = "gpu-budget-usd-per-hour"
CLUSTER = "aws:eks/cluster:Cluster"


def spot_requires_checkpointing(args: ResourceValidationArgs, report: Report) -> None:
    """SPOT node groups are labelled `llm-platform/checkpointing: "true"`: their jobs must
    survive the two-minute interruption notice."""
    if args.resource_type != NODE_GROUP or get(args.props, "capacityType") != "SPOT":
        return
    if get(args.props, "labels", CHECKPOINTING_LABEL) != "true":
        report(
            f'SPOT node group without label {CHECKPOINTING_LABEL}: "true"; set '
            "checkpointing: true on the pool once its jobs checkpoint and resume"
        )


def hourly_price(instance_type: str, capacity_type: str) -> float | None:
    spec = catalog().instances.get(instance_type)
    if spec is None:
        return None
    if capacity_type == "CAPACITY_BLOCK":
        return spec.capacity_block_usd_per_hour or spec.on_demand_usd_per_hour
    if capacity_type == "SPOT":
        return spec.on_demand_usd_per_hour * (1 - catalog().spot_discount_assumption)
    return spec.on_demand_usd_per_hour


def gpu_budget(args: StackValidationArgs, report: Report) -> None:
    """The accelerated node groups at their max sizes cost no more per hour than
    `gpu-budget-usd-per-hour` (when configured)."""
    budget = args.get_config().get(BUDGET_KEY)
    if budget is None:
        return
    total = 0.0
    parts = []
    for group in of_type(args.resources, NODE_GROUP):
        if known(lambda g=group: accelerator_kind(g.props), None) is None:
            continue
        props = group.props
        max_size = known(lambda p=props: get(p, "scalingConfig", "maxSize"), None)
        capacity = known(lambda p=props: get(p, "capacityType"), None) or "ON_DEMAND"
        types = known(lambda g=group: instance_types(g), [])
        prices = [hourly_price(t, capacity) for t in types]
        if not isinstance(max_size, int | float) or not prices or None in prices:
            report(
                f"node group {group.name}: cannot price it (max size {max_size}, instance "
                f"types {types}); the budget of ${budget}/h cannot be checked",
                group.urn,
            )
            continue
        cost = max_size * max(p for p in prices if p is not None)
        total += cost
        parts.append(f"{group.name} {int(max_size)} x {types[0]} {capacity} ${cost:,.2f}")
    if total > float(budget):
        report(
            f"accelerated node groups cost ${total:,.2f}/h at max size, over the budget of "
            f"${float(budget):,.2f}/h ({'; '.join(parts)})"
        )


def eks_standard_support(args: ResourceValidationArgs, report: Report) -> None:
    """The control plane stays on standard support (extended support costs 6x)."""
    if args.resource_type != CLUSTER:
        return
    if get(args.props, "upgradePolicy", "supportType") == "EXTENDED":
        report("upgradePolicy.supportType EXTENDED bills the control plane at 6x: upgrade")
