"""Cost rules: Spot needs checkpointing; the GPU budget at max size."""

from __future__ import annotations

import pytest

from llmp.plan.policy import stack_policy_config
from spec.catalog import catalog
from tests.policies.conftest import hits, inputs, names

NG = "aws:eks/nodeGroup:NodeGroup"


def budget(usd: float) -> dict:
    return {"gpu-budget": {"gpu-budget-usd-per-hour": usd}}


@pytest.mark.parametrize("stack", ["pretrain", "finetune", "inference"])
def test_cost_rules_are_quiet_on_the_stacks_with_their_budget(plan, stack: str) -> None:
    config = stack_policy_config(stack)
    assert "gpu-budget" in config
    assert hits(plan(stack), "gpu-budget", config) == []
    assert hits(plan(stack), "spot-requires-checkpointing") == []


def test_spot_fires_without_checkpointing(plan) -> None:
    p = plan("finetune")
    inputs(p, "gpu-a100-spot-nodes", NG)["labels"]["llm-platform/checkpointing"] = "false"
    assert names(hits(p, "spot-requires-checkpointing")) == {"gpu-a100-spot-nodes"}
    inputs(p, "gpu-h100-nodes", NG)["labels"].pop("llm-platform/checkpointing")
    assert names(hits(p, "spot-requires-checkpointing")) == {"gpu-a100-spot-nodes"}


def test_budget_prices_each_capacity_type(plan) -> None:
    p = plan()  # h100: 16 on-demand p5; h100-block: 16 capacity-block p5
    p5 = catalog().instance("p5.48xlarge")
    total = 16 * p5.on_demand_usd_per_hour + 16 * p5.capacity_block_usd_per_hour
    assert hits(p, "gpu-budget", budget(total + 0.01)) == []
    found = hits(p, "gpu-budget", budget(total - 0.01))
    assert len(found) == 1 and found[0].level == "mandatory"
    assert f"${total:,.2f}/h" in found[0].message


def test_budget_applies_the_spot_discount(plan) -> None:
    p = plan("finetune")  # a100-spot: 4 spot p4de; h100: 2 on-demand p5
    spot = 4 * catalog().instance("p4de.24xlarge").on_demand_usd_per_hour
    spot *= 1 - catalog().spot_discount_assumption
    total = spot + 2 * catalog().instance("p5.48xlarge").on_demand_usd_per_hour
    assert hits(p, "gpu-budget", budget(total + 0.01)) == []
    assert hits(p, "gpu-budget", budget(total - 0.01))


def test_budget_fires_when_a_pool_grows(plan) -> None:
    p = plan("inference")
    assert hits(p, "gpu-budget", budget(400)) == []
    inputs(p, "gpu-h200-nodes", NG)["scalingConfig"]["maxSize"] = 8
    assert hits(p, "gpu-budget", budget(400))


def test_budget_ignores_the_cpu_system_pool_and_is_off_without_config(plan) -> None:
    p = plan("inference")
    inputs(p, "cluster-system", NG)["scalingConfig"]["maxSize"] = 1000
    assert hits(p, "gpu-budget", budget(400)) == []
    inputs(p, "gpu-h200-nodes", NG)["scalingConfig"]["maxSize"] = 1000
    assert hits(p, "gpu-budget") == []


def test_budget_fires_on_an_unpriced_instance_type(plan) -> None:
    p = plan("inference")
    group = inputs(p, "gpu-h200-nodes", NG)
    group["instanceTypes"] = ["p9.96xlarge"]
    found = hits(p, "gpu-budget", budget(10_000))
    assert names(found) == {"gpu-h200-nodes"} and "cannot price" in found[0].message
