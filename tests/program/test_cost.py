"""The stack's `cost` output: every component priced, totals that add up, GPU against
overhead, pricing modes, and quantities that match what the plan declares."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from llmp.cost import as_exported, declared
from llmp.plan.synth import synthesize
from program.cost import CATALOG_PRICES, PriceBook, estimate, usage_of
from program.cost.facts import classified
from program.ledger import Declared
from spec.catalog import catalog
from spec.stackfile import load_config
from tests.conftest import STACKS, raw_stack, with_section

HOURS = catalog().hours_per_month
PLATFORM = catalog().platform_prices


def _lines(cost: dict[str, Any], component: str, containing: str) -> list[dict[str, Any]]:
    return [line for line in cost["components"][component]["lines"] if containing in line["what"]]


def _estimate(raw: dict[str, Any], prices: PriceBook = CATALOG_PRICES) -> dict[str, Any]:
    """The cost of a stack file's plan: its resources priced, as the program prices them."""
    plan = synthesize("test", raw)
    return as_exported(estimate(declared(plan), usage_of(load_config(raw)), prices))


@pytest.mark.parametrize("stack", STACKS)
def test_the_program_prices_the_resources_the_engine_is_handed(plans, stack: str) -> None:
    """The `cost` output is priced from the program's ledger (what it declares, written down
    as it declares it); pricing the synthesized plan's resources gives the same output, so
    the ledger records what the engine receives."""
    plan = plans(stack)
    usage = usage_of(load_config(raw_stack(stack)))
    assert as_exported(estimate(declared(plan), usage)) == plan.outputs["cost"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_resource_type_of_the_stacks_is_priced_or_free(plans, stack: str) -> None:
    unclassified = sorted({r.type for r in plans(stack).resources if not classified(r.type)})
    assert unclassified == []
    assert "not_priced" not in plans(stack).outputs["cost"]


def test_a_resource_of_a_type_nobody_priced_is_named_not_priced(plans) -> None:
    resources = declared(plans("finetune"))
    resources.append(Declared("aws:rds/instance:Instance", "db", "db", {"instanceClass": "x"}))
    cost = estimate(resources)
    assert cost["not_priced"] == [
        {
            "type": "aws:rds/instance:Instance",
            "resources": ["db"],
            "why": "no price rule for this type (program/cost/facts.py PRICED or FREE)",
        }
    ]


def test_a_nat_gateway_added_to_the_plan_is_priced_without_a_cost_change(plans) -> None:
    """Pricing follows the resources: one more NAT gateway (and its address) declared is one
    more priced, whatever the config says."""
    resources = declared(plans("finetune"))
    before = estimate(resources)["components"]["network"]["usd_per_month"]
    nat = next(r for r in resources if r.type == "aws:ec2/natGateway:NatGateway")
    eip = next(r for r in resources if r.type == "aws:ec2/eip:Eip")
    more = [
        *resources,
        Declared(nat.type, "nat-2", "network", {}),
        Declared(eip.type, "ip-2", "network", {}),
    ]
    after = estimate(more)["components"]["network"]["usd_per_month"]
    per_gateway = (PLATFORM.nat_gateway_usd_per_hour + PLATFORM.public_ipv4_usd_per_hour) * HOURS
    assert after == pytest.approx(before + per_gateway, abs=0.01)


@pytest.mark.parametrize("stack", STACKS)
def test_every_top_level_component_of_the_plan_is_priced(plans, stack: str) -> None:
    plan = plans(stack)
    top_level = {r.name for r in plan.resources if r.parent is None and not r.custom}
    assert top_level, "the plan has no component resources"
    # Equal, not a subset: a new component cannot go unpriced, nor a priced one be phantom.
    assert set(plan.outputs["cost"]["components"]) == top_level


@pytest.mark.parametrize("stack", STACKS)
def test_component_totals_add_up_to_the_stack_total(plans, stack: str) -> None:
    cost = plans(stack).outputs["cost"]
    components = cost["components"]
    for name, comp in components.items():
        lines = sum(line["usd_per_month"] for line in comp["lines"])
        assert comp["usd_per_month"] == pytest.approx(lines, abs=0.005), name
        for line in comp["lines"]:
            if "basis" not in line:
                assert line["usd_per_month"] == pytest.approx(
                    line["quantity"] * line["usd_per_unit"], abs=0.01
                ), line["what"]
        if not comp["lines"]:
            assert comp["usd_per_month"] == 0 and comp["note"], name
    total = sum(c["usd_per_month"] for c in components.values())
    assert cost["usd_per_month_with_storage"] == pytest.approx(total, abs=0.005)
    storage = cost["storage"]["usd_per_month"]
    assert cost["usd_per_month_at_desired"] + storage == pytest.approx(total, abs=0.01)


@pytest.mark.parametrize("stack", STACKS)
def test_hour_billed_lines_are_the_hourly_total_at_desired_size(plans, stack: str) -> None:
    cost = plans(stack).outputs["cost"]
    hour_lines = sum(
        line["usd_per_month"]
        for comp in cost["components"].values()
        for line in comp["lines"]
        if line["unit"].endswith("-hour")
    )
    per_hour = sum(cost["overhead_usd_per_hour"].values())
    for pool in [cost["system_pool"], *cost["node_pools"].values()]:
        per_hour += pool["usd_per_instance_hour"] * pool["nodes"]["desired"]
    assert hour_lines == pytest.approx(per_hour * HOURS, rel=1e-5)
    assert cost["usd_per_hour"]["desired"] == pytest.approx(per_hour, abs=0.01)


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_share_is_the_accelerated_pools_against_everything_else(plans, stack: str) -> None:
    cost = plans(stack).outputs["cost"]
    components = cost["components"]
    gpu = sum(c["usd_per_month"] for n, c in components.items() if n.startswith("gpu-"))
    assert {n for n, c in components.items() if c["kind"] == "accelerators"} == {
        f"gpu-{pool}" for pool in cost["node_pools"]
    }
    share = cost["gpu_share"]
    total = cost["usd_per_month_with_storage"]
    assert share["gpu_usd_per_month"] == pytest.approx(gpu, abs=0.01)
    assert share["overhead_usd_per_month"] == pytest.approx(total - gpu, abs=0.01)
    assert share["gpu_share"] + share["overhead_share"] == pytest.approx(1)
    assert share["gpu_share"] == pytest.approx(gpu / total, abs=1e-4)
    assert 0 < share["gpu_share"] < 1


@pytest.mark.parametrize("stack", STACKS)
def test_pricing_modes_follow_the_catalog_and_the_spot_assumption(plans, stack: str) -> None:
    cost = plans(stack).outputs["cost"]
    cfg = load_config(raw_stack(stack))
    discount = catalog().spot_discount_assumption
    assert set(cost["pricing_modes"]) == set(cfg.node_pools)
    for name, modes in cost["pricing_modes"].items():
        pool = cfg.node_pools[name]
        itype = catalog().instance(pool.instance_type)
        on_demand, spot = modes["on_demand"], modes["spot"]
        assert on_demand["usd_per_instance_hour"] == pytest.approx(itype.on_demand_usd_per_hour)
        assert spot["usd_per_instance_hour"] == pytest.approx(
            itype.on_demand_usd_per_hour * (1 - discount), abs=1e-4
        )
        assert spot["assumed_discount"] == discount and "assumed" in spot["assumption"]
        for mode in ("on_demand", "spot"):
            entry = modes[mode]
            assert entry["usd_per_hour_at_desired"] == pytest.approx(
                entry["usd_per_instance_hour"] * pool.desired_size, abs=0.01
            )
            assert entry["usd_per_hour_at_max"] == pytest.approx(
                entry["usd_per_instance_hour"] * pool.max_size, abs=0.01
            )
        assert modes["configured"] == pool.capacity_type
        configured = modes[pool.capacity_type.lower()]
        assert cost["node_pools"][name]["usd_per_instance_hour"] == pytest.approx(
            configured["usd_per_instance_hour"], abs=1e-4
        )
        if itype.capacity_block_usd_per_hour is None:
            assert modes.get("capacity_block") is None
            assert pool.instance_type in modes["capacity_block_unavailable"]
        else:
            block = modes["capacity_block"]
            assert block["usd_per_instance_hour"] == itype.capacity_block_usd_per_hour
            assert block["as_of"] == catalog().prices.capacity_block_as_of


def test_inference_l40s_has_no_capacity_block_price(plans) -> None:
    modes = plans("inference").outputs["cost"]["pricing_modes"]
    assert "capacity_block" not in modes["l40s"]  # None does not survive the export
    assert "g6e.12xlarge" in modes["l40s"]["capacity_block_unavailable"]
    assert modes["h200"]["capacity_block"]["usd_per_instance_hour"] == 41.612


def _plan_inputs(plan: Any, type_: str) -> list[dict[str, Any]]:
    return [r.inputs for r in plan.by_type(type_)]


@pytest.mark.parametrize("stack", STACKS)
def test_priced_quantities_match_the_plan(plans, stack: str) -> None:
    plan = plans(stack)
    cost = plan.outputs["cost"]
    # NAT gateways and their Elastic IPs.
    nat = _lines(cost, "network", "NAT gateways")[0]
    assert nat["quantity"] == len(plan.by_type("aws:ec2/natGateway:NatGateway")) * HOURS
    ipv4 = _lines(cost, "network", "public IPv4")[0]
    assert ipv4["quantity"] == len(plan.by_type("aws:ec2/eip:Eip")) * HOURS
    # Every KMS key the plan declares is a key-month.
    key_months = sum(
        line["quantity"]
        for comp in cost["components"].values()
        for line in comp["lines"]
        if line["unit"] == "key-month"
    )
    assert key_months == len(plan.by_type("aws:kms/key:Key"))
    # Root volumes: the launch templates' gp3 size times the nodes at desired size.
    cfg = load_config(raw_stack(stack))
    for name, pool in cfg.node_pools.items():
        template = plan.one("aws:ec2/launchTemplate:LaunchTemplate", f"gpu-{name}-nodes")
        size = template.inputs["blockDeviceMappings"][0]["ebs"]["volumeSize"]
        (volumes,) = _lines(cost, f"gpu-{name}", "root volumes")
        assert volumes["quantity"] == size * pool.desired_size
        assert volumes["usd_per_unit"] == PLATFORM.ebs_gp3_usd_per_gb_month


def test_waf_rules_priced_are_the_web_acls_rules(plans) -> None:
    plan = plans("inference")
    (acl,) = _plan_inputs(plan, "aws:wafv2/webAcl:WebAcl")
    (rules,) = _lines(plan.outputs["cost"], "serving", "WAF rules")
    assert rules["quantity"] == len(acl["rules"]) == 3
    assert rules["usd_per_unit"] == PLATFORM.waf_rule_usd_per_month
    (alb,) = _lines(plan.outputs["cost"], "serving", "Application Load Balancer")
    assert alb["quantity"] == HOURS and alb["usd_per_unit"] == PLATFORM.alb_usd_per_hour
    whats = {n["what"] for n in plan.outputs["cost"]["components"]["serving"]["not_estimated"]}
    assert "WAF requests" in whats


def test_an_internet_facing_alb_adds_a_public_ipv4_address_per_zone() -> None:
    internal = _estimate(raw_stack("inference"))
    public = _estimate(with_section("inference", "serving", {"scheme": "internet-facing"}))
    (line,) = _lines(public, "serving", "public IPv4")
    assert line["quantity"] == 3 * HOURS
    assert not _lines(internal, "serving", "public IPv4")
    delta = public["overhead_usd_per_hour"]["public_ipv4"]
    delta -= internal["overhead_usd_per_hour"]["public_ipv4"]
    assert delta == pytest.approx(3 * PLATFORM.public_ipv4_usd_per_hour)


def test_prometheus_volume_and_log_gaps_follow_the_monitoring_config() -> None:
    cost = _estimate(with_section("finetune", "monitoring", {"storage_gib": 250, "logs": False}))
    (volume,) = _lines(cost, "monitoring", "Prometheus volume")
    assert volume["quantity"] == 250
    assert volume["usd_per_month"] == pytest.approx(250 * PLATFORM.ebs_gp3_usd_per_gb_month)
    gaps = {n["what"] for n in cost["components"]["monitoring"].get("not_estimated", [])}
    assert "container logs in CloudWatch" not in gaps
    off = _estimate(with_section("finetune", "monitoring", {"enabled": False}))
    assert "monitoring" not in off["components"]


@pytest.mark.parametrize("stack", STACKS)
def test_the_fsx_metrics_exporters_cloudwatch_calls_are_priced_from_its_config(
    plans, stack: str
) -> None:
    plan = plans(stack)
    cost = plan.outputs["cost"]
    lines = _lines(cost, "monitoring", "CloudWatch API requests")
    releases = [
        r
        for r in plan.by_type("kubernetes:helm.sh/v3:Release")
        if r.inputs["chart"] == "prometheus-cloudwatch-exporter"
    ]
    storage = load_config(raw_stack(stack)).storage
    if storage is None or storage.lustre is None:
        assert not lines and not releases
        return
    (line,) = lines
    (release,) = releases
    values = release.inputs["values"]
    # One GetMetricStatistics request per metric per scrape (every dimension is selected).
    metrics = yaml.safe_load(values["config"])["metrics"]
    assert all(set(m["aws_dimension_select"]) == set(m["aws_dimensions"]) for m in metrics)
    interval = values["serviceMonitor"]["interval"]
    assert interval.endswith("m")
    scrapes_per_hour = 60 / int(interval.removesuffix("m"))
    assert line["quantity"] == pytest.approx(len(metrics) * scrapes_per_hour * HOURS / 1000)
    assert line["unit"] == "1000 requests"
    assert line["usd_per_unit"] == PLATFORM.cloudwatch_api_usd_per_1000_requests


def test_the_file_systems_log_group_is_listed_as_not_estimated(plans) -> None:
    cost = plans("pretrain").outputs["cost"]
    lustre = {n["what"] for n in cost["not_estimated"] if n["component"] == "lustre"}
    assert "the file system's log group in CloudWatch" in lustre


def test_extended_support_prices_the_control_plane_at_its_rate() -> None:
    cost = _estimate(with_section("finetune", "cluster", {"support_type": "EXTENDED"}))
    (plane,) = _lines(cost, "cluster", "EKS control plane")
    assert plane["usd_per_unit"] == PLATFORM.eks_control_plane_extended_usd_per_hour
    assert cost["overhead_usd_per_hour"]["eks_control_plane"] == 0.60


def test_user_provisioned_metadata_is_listed_as_not_estimated(plans) -> None:
    cost = plans("pretrain").outputs["cost"]
    lustre = {n["what"] for n in cost["not_estimated"] if n["component"] == "lustre"}
    assert "12,000 user-provisioned metadata IOPS" in lustre
    # Linked to S3, the file system has no FSx backups to price (AWS takes none of it).
    assert not any(w.startswith("automatic backups") for w in lustre)
    stack_wide = {n["what"] for n in cost["not_estimated"] if n["component"] == "stack"}
    assert any("data transfer" in w for w in stack_wide)


def test_replication_time_control_is_priced_per_gb_replicated(plans) -> None:
    cost = plans("pretrain").outputs["cost"]
    (rtc,) = _lines(cost, "storage", "Replication Time Control of checkpoints")
    # Every checkpoint written, and the milestones' copies (1 in 10): new objects, replicated.
    assert rtc["quantity"] == pytest.approx(6000 * 1.1 * 30)
    assert rtc["usd_per_unit"] == catalog().storage.replication_time_control_usd_per_gb
    replica = cost["storage"]["replicas"]["checkpoints"]
    assert replica["time_control_usd_per_month"] == rtc["usd_per_month"]
    assert replica["usd_per_month"] == pytest.approx(
        replica["storage_usd_per_month"]
        + replica["transfer_usd_per_month"]
        + replica["time_control_usd_per_month"],
        abs=0.01,
    )


def test_catalog_prices_name_their_dates_and_a_region_they_do_not_hold_for(plans) -> None:
    pretrain = plans("pretrain").outputs["cost"]["price_source"]
    assert pretrain["kind"] == "catalog" and "note" not in pretrain
    assert pretrain["as_of"]["platform"] == PLATFORM.prices_as_of
    finetune = plans("finetune").outputs["cost"]["price_source"]
    assert "us-west-2 may differ" in finetune["note"]


def test_a_live_price_book_reprices_on_demand_and_spot_and_says_so() -> None:
    book = PriceBook(
        source="live",
        region="us-west-2",
        fetched_at="2026-12-01T09:00:00+00:00",
        on_demand_usd_per_hour={"p5.48xlarge": 60.0, "m7i.4xlarge": 0.9},
        fallbacks={"p4de.24xlarge": "the AWS Price List has no price for it"},
    )
    cost = _estimate(raw_stack("finetune"), book)
    assert cost["node_pools"]["h100"]["usd_per_instance_hour"] == 60.0
    assert cost["pricing_modes"]["h100"]["spot"]["usd_per_instance_hour"] == pytest.approx(
        60.0 * (1 - catalog().spot_discount_assumption)
    )
    # The pool the API did not know keeps its catalog price; capacity blocks stay catalog.
    p4de = catalog().instance("p4de.24xlarge")
    assert cost["pricing_modes"]["a100-spot"]["on_demand"]["usd_per_instance_hour"] == (
        pytest.approx(p4de.on_demand_usd_per_hour, abs=1e-4)
    )
    assert cost["pricing_modes"]["h100"]["capacity_block"]["usd_per_instance_hour"] == 31.464
    (system,) = _lines(cost, "cluster", "system pool: 2 x")
    assert system["usd_per_unit"] == 0.9
    source = cost["price_source"]
    assert source["kind"] == "live" and source["fetched_at"] == book.fetched_at
    assert source["live_instance_types"] == ["m7i.4xlarge", "p5.48xlarge"]
    assert "p4de.24xlarge" in source["catalog_fallbacks"]
    assert cost["prices_as_of"] == book.fetched_at and cost["price_region"] == "us-west-2"
