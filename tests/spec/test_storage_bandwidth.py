"""The storage bandwidth model: what a pool's jobs need, what FSx and S3 deliver per node and
in total, from AWS's published figures in the catalog."""

from __future__ import annotations

import pytest

from spec.catalog import catalog
from spec.stackfile import load_config
from spec.storage_bandwidth import (
    BandwidthPlan,
    LustreThroughput,
    TrainingDemand,
    bandwidth_plan,
    rate,
)
from tests.conftest import config_error, raw_stack, with_section

PRETRAIN_FS = {"capacity_gib": 48000, "throughput_per_tib": 500}


def demand(**overrides: float) -> TrainingDemand:
    base: dict[str, float] = {
        "nodes": 16,
        "gpus_per_node": 8,
        "tokens_per_second_per_gpu": 942,
        "bytes_per_token": 4,
        "prefetch_factor": 2,
        "checkpoint_gb": 980,
        "write_seconds": 600,
    }
    base.update(overrides)
    return TrainingDemand(**base)  # type: ignore[arg-type]


def test_pretrain_before_efa_is_held_to_ena_and_the_file_systems_share() -> None:
    """The issue's figures: 48,000 GiB at 500 MB/s/TiB is about 23 GB/s for the whole file
    system, about 1.5 GB/s per node over 16 nodes; one ENA client reaches at most 100 Gbps."""
    fs = LustreThroughput(**PRETRAIN_FS)
    assert fs.total == pytest.approx(46.875 * 0.5)
    assert fs.per_node(16) == pytest.approx(23.4375 / 16)
    assert fs.per_client == 12.5
    assert fs.alone() == 12.5
    assert fs.cache_total == pytest.approx(46.875 * 1.3)


def test_pretrain_with_efa_lifts_one_client_to_700_gbps_not_the_shared_total() -> None:
    fs = LustreThroughput(**PRETRAIN_FS, efa=True)
    assert fs.per_client == 87.5
    assert fs.alone() == pytest.approx(23.4375)  # now the file system, not the client, binds
    assert fs.per_node(16) == pytest.approx(23.4375 / 16)
    gds = LustreThroughput(**PRETRAIN_FS, efa=True, gpudirect_storage=True)
    assert gds.per_client == 150


def test_the_seeds_200_gb_per_node_is_beyond_any_fsx_client_path() -> None:
    """AWS's highest per-client figure (EFA with GPUDirect Storage, 1200 Gbps) is 150 GB/s."""
    best = max(catalog().storage.lustre_performance.per_client_gbps.values()) / 8
    assert best == 150 < 200


def test_a_small_ena_file_system_is_held_to_5_gbps_per_server() -> None:
    fs = LustreThroughput(capacity_gib=2400, throughput_per_tib=1000)
    assert fs.servers == 1
    assert fs.per_client == 0.625
    assert fs.alone() == 0.625 < fs.total


def test_s3_gives_a_node_one_network_cards_share() -> None:
    fs = LustreThroughput(**PRETRAIN_FS)
    for itype, gb in (("p5.48xlarge", 12.5), ("p4d.24xlarge", 12.5), ("g5.12xlarge", 5.0)):
        assert BandwidthPlan("p", itype, 4, fs).s3_per_node == gb


def test_demand_is_tokens_times_bytes_times_prefetch_and_checkpoint_over_its_time() -> None:
    need = demand()
    assert need.read_per_node == pytest.approx(942 * 8 * 4 * 2 / 1e9)
    assert need.write_total == pytest.approx(980 / 600)
    assert need.write_per_node == pytest.approx(980 / 600 / 16)


def test_a_plan_that_can_feed_and_checkpoint_has_no_problem() -> None:
    plan = BandwidthPlan("h100", "p5.48xlarge", 16, LustreThroughput(**PRETRAIN_FS), demand())
    assert plan.problems() == []
    assert plan.write_seconds() == pytest.approx(980 / 23.4375)


def test_a_starved_reader_and_a_slow_checkpoint_are_both_named() -> None:
    """A multimodal loader at 100 kB per token: 1.6 GB/s per node over 1.46 delivered; and a
    980 GB checkpoint within 30 s, which needs 32.7 GB/s of a 23.4 GB/s file system."""
    plan = BandwidthPlan(
        "h100",
        "p5.48xlarge",
        16,
        LustreThroughput(**PRETRAIN_FS, efa=True),
        demand(bytes_per_token=100_000, tokens_per_second_per_gpu=1000, write_seconds=30),
    )
    read, write = plan.problems()
    assert read == (
        "reading needs 1.6 GB/s per node but FSx delivers 1.46 GB/s to each of 16 nodes; "
        "raise the capacity or throughput_per_tib, or set efa"
    )
    assert write.startswith("a 980 GB checkpoint takes 42 s to write at 23.4 GB/s, over its 30 s")
    assert "it needs 32.7 GB/s" in write


def test_rates_read_in_decimal_units_with_three_figures() -> None:
    assert rate(23.4375) == "23.4 GB/s"
    assert rate(0.102) == "102 MB/s"
    assert rate(0.0000603) == "60.3 kB/s"
    assert rate(1500) == "1,500 GB/s"


def test_pretrain_stack_plans_its_70b_job_on_efa() -> None:
    plan = bandwidth_plan(load_config(raw_stack("pretrain")))
    assert plan is not None
    assert plan.lustre.efa and plan.nodes == 16 and plan.problems() == []
    assert plan.lines()[1] == (
        "FSx per node of h100 (16 x p5.48xlarge): 1.46 GB/s with all 16 at once, 23.4 GB/s alone"
    )


def test_an_ena_file_system_beside_an_efa_client_pool_is_told_to_use_efa() -> None:
    raw = with_section("pretrain", "storage", {"lustre": {"efa": False}})
    lines = bandwidth_plan(load_config(raw)).lines()  # type: ignore[union-attr]
    assert any("AWS recommends efa: true" in line for line in lines)


def test_efa_capacity_comes_in_the_tiers_steps() -> None:
    raw = with_section("pretrain", "storage", {"lustre": {"storage_capacity_gib": 50400}})
    assert config_error(raw) == (
        "config error: llm-platform:storage.lustre.storage_capacity_gib = 50400: an "
        "EFA-enabled file system at 500 MB/s/TiB takes multiples of 9600 GiB "
        "(getting-started.html)"
    )


def test_efa_needs_an_efa_client_pool_and_gds_needs_efa() -> None:
    raw = with_section("finetune", "storage", {"lustre": {"node_pool": "a100-spot", "efa": True}})
    raw["llm-platform:storage"]["lustre"]["storage_capacity_gib"] = 19200
    assert "pool a100-spot is not an EFA client of FSx" in config_error(raw)
    raw = with_section("pretrain", "storage", {"lustre": {"efa": False, "gpudirect_storage": True}})
    assert "GPUDirect Storage runs over EFA: set efa: true" in config_error(raw)


def test_a_checkpoint_write_longer_than_its_interval_is_refused() -> None:
    raw = with_section(
        "pretrain", "storage", {"lustre": {"demand": {"checkpoint_write_minutes": 300}}}
    )
    assert config_error(raw) == (
        "config error: llm-platform:storage.lustre.demand.checkpoint_write_minutes = 300.0: "
        "exceeds checkpoint_interval_minutes (240): the next checkpoint would start before "
        "this one is written"
    )
