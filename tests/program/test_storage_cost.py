"""The storage cost model: cohorts age through the lifecycle; tiering beats Standard."""

from __future__ import annotations

import pytest

from llmp.cost import declared
from program.cost import usage_of
from program.cost.facts import facts
from program.cost.storage import BucketUsage, bucket_model, lustre_monthly, storage_estimate
from spec.catalog import catalog
from spec.stackfile import load_config
from tests.conftest import raw_stack

PRICES = catalog().storage


def test_standard_only_bucket_costs_its_gb_days() -> None:
    model = bucket_model(BucketUsage("b", initial_gb=3000), None, days=90)
    # 3000 GB for 90 days at the Standard price, no transitions.
    assert model["usd_for_period"] == pytest.approx(3000 * 0.023 * 90 / 30, rel=1e-6)
    assert model["usd_per_month"] == pytest.approx(3000 * 0.023, rel=1e-6)
    assert model["gb_by_class_at_end"] == {"STANDARD": 3000}
    assert model["transition_usd"] == 0


def test_cohorts_move_through_the_steps_and_expire() -> None:
    # A rule as the bucket's lifecycle configuration declares it.
    rule = {
        "transitions": [{"days": 30, "storageClass": "STANDARD_IA"}],
        "expiration": {"days": 60},
    }
    usage = BucketUsage("b", daily_write_gb=10, average_object_mb=1024)
    model = bucket_model(usage, rule, days=90)
    # At the end: 30 days of writes in Standard, 30 in Standard-IA, the oldest 30 expired.
    assert model["gb_by_class_at_end"] == {"STANDARD": 300, "STANDARD_IA": 300}
    # One transition request per 1 GiB object, 60 cohorts crossed day 30.
    assert model["transition_usd"] == pytest.approx(60 * 10 / 1000 * 0.01, abs=0.01)


def test_intelligent_tiering_drops_to_infrequent_after_30_days_unread() -> None:
    rule = {"transitions": [{"days": 0, "storageClass": "INTELLIGENT_TIERING"}]}
    usage = BucketUsage("b", initial_gb=1000, average_object_mb=1024)
    last_month = bucket_model(usage, rule, days=60)["usd_per_month_by_class"]["INTELLIGENT_TIERING"]
    it = PRICES.intelligent_tiering
    monitoring = 1000 / 1000 * it.monitoring_usd_per_1000_objects_month
    assert last_month == pytest.approx(1000 * it.infrequent_usd_per_gb_month + monitoring, abs=0.01)


def test_pretrain_checkpoints_tiering_is_cheaper_than_standard(plans) -> None:
    usage = usage_of(load_config(raw_stack("pretrain")))
    estimate = storage_estimate(facts(declared(plans("pretrain"))), usage)
    ninety = estimate["checkpoints_90_days"]
    assert ninety["bucket"] == "checkpoints"
    assert 0 < ninety["ratio"] < 1
    assert ninety["ratio"] == pytest.approx(ninety["tiered_usd"] / ninety["standard_usd"], abs=1e-3)


def test_lustre_cost_is_capacity_times_the_tier_price(plans) -> None:
    (fs,) = plans("pretrain").by_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    fsx = lustre_monthly(fs.inputs)
    assert fsx["usd_per_month"] == pytest.approx(48000 * 0.340)
    assert fsx["throughput_mb_s"] == round(48000 / 1024 * 500)


def test_storage_total_adds_buckets_replicas_and_fsx(plans) -> None:
    cost = plans("pretrain").outputs["cost"]
    storage = cost["storage"]
    parts = sum(b["usd_per_month"] for b in storage["s3"].values())
    parts += sum(r["usd_per_month"] for r in storage["replicas"].values())
    parts += storage["fsx_lustre"]["usd_per_month"]
    assert storage["usd_per_month"] == pytest.approx(parts, abs=0.05)
    assert set(storage["replicas"]) == {"checkpoints", "models"}
    assert cost["usd_per_month_with_storage"] == pytest.approx(
        cost["usd_per_month_at_desired"] + storage["usd_per_month"], abs=0.05
    )
    assert plans("inference").outputs["cost"]["storage"].get("fsx_lustre") is None


def test_an_expired_version_stays_its_noncurrent_days() -> None:
    rule = {"expiration": {"days": 7}}
    usage = BucketUsage("b", daily_write_gb=100, average_object_mb=1024)
    unversioned = bucket_model(usage, rule, days=30)
    versioned = bucket_model(usage, rule, days=30, noncurrent_days=3)
    assert unversioned["gb_by_class_at_end"] == {"STANDARD": 700}
    assert versioned["gb_by_class_at_end"] == {"STANDARD": 1000}


def _retention_estimate(plans) -> tuple[dict, dict]:
    usage = usage_of(load_config(raw_stack("pretrain")))
    estimate = storage_estimate(facts(declared(plans("pretrain"))), usage)
    return estimate, estimate["s3"]["checkpoints"]


def test_retention_keeps_runs_a_window_and_milestones_a_share(plans) -> None:
    cfg = load_config(raw_stack("pretrain"))
    spec = cfg.storage.buckets["checkpoints"]  # type: ignore[union-attr]
    retention = spec.retention
    assert retention is not None
    _, model = _retention_estimate(plans)
    runs, milestones = model["by_prefix"]["runs/"], model["by_prefix"]["milestones/"]
    # Every checkpoint, in Standard, for the window plus its noncurrent version's days.
    window = retention.keep_days + retention.noncurrent_days
    assert runs["gb_by_class_at_end"] == {"STANDARD": spec.daily_write_gb * window}
    # A copy of one checkpoint in N, tiered by the milestones' rule: 90 days of them held.
    share = spec.checkpoint_interval_steps / retention.milestone_every_steps  # type: ignore[operator]
    assert milestones["share_of_writes"] == pytest.approx(share)
    assert sum(milestones["gb_by_class_at_end"].values()) == pytest.approx(
        spec.daily_write_gb * share * 90
    )
    assert "INTELLIGENT_TIERING" in milestones["gb_by_class_at_end"]


def test_milestone_copies_are_priced_as_requests_and_replicate(plans) -> None:
    estimate, model = _retention_estimate(plans)
    # 600 GB of 512 MB objects a day, one CopyObject each (under 5 GB).
    copies = 6000 * 0.1 * 1024 / 512 * 30
    assert model["copy_requests_usd_per_month"] == pytest.approx(
        copies / 1000 * PRICES.put_copy_list_usd_per_1000_requests, abs=0.01
    )
    replica = estimate["replicas"]["checkpoints"]
    assert replica["transfer_usd_per_month"] == pytest.approx(
        6000 * 1.1 * 30 * PRICES.replication_transfer_usd_per_gb
    )
    assert replica["storage_usd_per_month"] == pytest.approx(
        model["usd_per_month"] - model["copy_requests_usd_per_month"], abs=0.01
    )


def test_retention_costs_less_than_tiering_every_checkpoint(plans, synth) -> None:
    from tests.conftest import with_section

    # The same bucket before retention: one whole-bucket rule, every checkpoint kept a year.
    before = with_section(
        "pretrain",
        "storage",
        {
            "buckets": {
                "checkpoints": {
                    "retention": None,
                    "checkpoint_interval_steps": None,
                    "lifecycle": [
                        {
                            "prefix": "",
                            "transitions": [
                                {"days": 14, "storage_class": "INTELLIGENT_TIERING"},
                                {"days": 90, "storage_class": "GLACIER_IR"},
                            ],
                            "expire_days": 365,
                        }
                    ],
                }
            }
        },
    )
    tiered = storage_estimate(facts(declared(synth(before))), usage_of(load_config(before)))
    estimate, _ = _retention_estimate(plans)
    now, then = estimate["checkpoints_90_days"], tiered["checkpoints_90_days"]
    assert now["retention"] is True and then["retention"] is False
    # The same baseline: every checkpoint written, kept in Standard.
    assert now["standard_usd"] == then["standard_usd"]
    assert now["ratio"] < then["ratio"] < 1
    print(f"checkpoints 90 days: tiered {then['ratio']}, with retention {now['ratio']}")
