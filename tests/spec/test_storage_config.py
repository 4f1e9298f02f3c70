"""Storage config: lifecycle steps S3 would refuse or bill for nothing, FSx sizes, references."""

from __future__ import annotations

from typing import Any

from spec.stackfile import load_config
from tests.conftest import config_error, raw_stack, with_section


def checkpoints_rule(*steps: tuple[int, str], expire: int | None = None) -> dict[str, Any]:
    # On the milestones: pretrain's retention owns runs/, and a rule may not overlap it.
    rule: dict[str, Any] = {
        "prefix": "milestones/",
        "transitions": [{"days": d, "storage_class": c} for d, c in steps],
    }
    if expire is not None:
        rule["expire_days"] = expire
    return with_section("pretrain", "storage", {"buckets": {"checkpoints": {"lifecycle": [rule]}}})


KEY = "config error: llm-platform:storage.buckets.checkpoints.lifecycle.0"


def test_transitions_must_increase() -> None:
    raw = checkpoints_rule((40, "STANDARD_IA"), (30, "GLACIER_IR"))
    assert config_error(raw) == (
        f"{KEY}.transitions.1.days = 30: transitions must be in increasing days; "
        "step 0 is at 40 days"
    )


def test_standard_ia_before_30_days() -> None:
    raw = checkpoints_rule((14, "STANDARD_IA"))
    assert config_error(raw) == (
        f"{KEY}.transitions.0.days = 14: S3 moves objects to STANDARD_IA only after 30 days; "
        "use 30 or more"
    )


def test_minimum_storage_duration_broken_by_the_next_step() -> None:
    raw = checkpoints_rule((30, "STANDARD_IA"), (45, "GLACIER_IR"))
    assert config_error(raw) == (
        f"{KEY}.transitions.1.days = 45: STANDARD_IA bills at least 30 days, so the move to "
        "GLACIER_IR before day 60 pays for storage it no longer has"
    )


def test_minimum_storage_duration_broken_by_expiry() -> None:
    raw = checkpoints_rule((14, "INTELLIGENT_TIERING"), (90, "GLACIER_IR"), expire=120)
    assert config_error(raw) == (
        f"{KEY}.expire_days = 120: GLACIER_IR bills at least 90 days, so expiry before day "
        "180 pays for storage it no longer has"
    )


def test_transition_against_the_waterfall() -> None:
    raw = checkpoints_rule((90, "GLACIER_IR"), (200, "STANDARD_IA"))
    assert config_error(raw).startswith(
        f"{KEY}.transitions.1.storage_class = 'STANDARD_IA': S3 cannot move objects from "
        "GLACIER_IR to STANDARD_IA"
    )
    raw = checkpoints_rule((30, "ONEZONE_IA"), (90, "GLACIER_IR"))
    assert "cannot move objects from ONEZONE_IA to GLACIER_IR" in config_error(raw)


def test_unknown_storage_class() -> None:
    raw = checkpoints_rule((30, "GLACIER_DEEP"))
    assert config_error(raw).startswith(
        f"{KEY}.transitions.0.storage_class = 'GLACIER_DEEP': Input should be "
    )


def test_the_issue_example_is_valid() -> None:
    # Standard for 14 days, then Intelligent-Tiering, then Glacier IR after 90 days.
    cfg = load_config(checkpoints_rule((14, "INTELLIGENT_TIERING"), (90, "GLACIER_IR")))
    steps = cfg.storage.buckets["checkpoints"].lifecycle[0].transitions  # type: ignore[union-attr]
    assert [(s.days, s.storage_class) for s in steps] == [
        (14, "INTELLIGENT_TIERING"),
        (90, "GLACIER_IR"),
    ]


def test_precious_bucket_cannot_drop_versioning() -> None:
    raw = with_section(
        "pretrain", "storage", {"buckets": {"models": {"versioning": False, "replicate": False}}}
    )
    assert config_error(raw) == (
        "config error: llm-platform:storage.buckets.models.versioning = False: "
        "a precious bucket is versioned; remove versioning: false"
    )


def test_replication_needs_versioning_and_a_region() -> None:
    raw = with_section("inference", "storage", {"buckets": {"logs": {"replicate": True}}})
    assert "S3 replicates only versioned buckets" in config_error(raw)
    raw = with_section("finetune", "storage", {"buckets": {"models": {"replicate": True}}})
    assert config_error(raw) == (
        "config error: llm-platform:storage.replication.region = <missing>: "
        "buckets models replicate: name the disaster-recovery region"
    )
    raw = with_section("pretrain", "storage", {"replication": {"region": "us-east-1"}})
    assert config_error(raw) == (
        "config error: llm-platform:storage.replication.region = 'us-east-1': "
        "is the stack's own region; replicate to another region than us-east-1"
    )


def test_logs_bucket_is_required() -> None:
    raw = raw_stack("inference")
    del raw["llm-platform:storage"]["buckets"]["logs"]
    assert config_error(raw) == (
        "config error: llm-platform:storage.buckets = {'models': {'precious': True, "
        "and 2 more}}: declare a `logs` bucket: every bucket "
        "sends its access logs there"
    )


def test_lustre_capacity_and_throughput() -> None:
    raw = with_section("pretrain", "storage", {"lustre": {"storage_capacity_gib": 3000}})
    assert config_error(raw) == (
        "config error: llm-platform:storage.lustre.storage_capacity_gib = 3000: "
        "PERSISTENT_2 takes 1200 GiB or a multiple of 2400 GiB"
    )
    raw = with_section("pretrain", "storage", {"lustre": {"throughput_per_tib": 200}})
    assert config_error(raw) == (
        "config error: llm-platform:storage.lustre.throughput_per_tib = 200: "
        "Input should be 125, 250, 500 or 1000"
    )


def test_lustre_metadata_iops() -> None:
    raw = with_section("pretrain", "storage", {"lustre": {"metadata_iops": 5000}})
    assert config_error(raw) == (
        "config error: llm-platform:storage.lustre.metadata_iops = 5000: USER_PROVISIONED "
        "needs 1500, 3000, 6000, or a multiple of 12000 up to 192000"
    )
    raw = with_section(
        "pretrain", "storage", {"lustre": {"metadata_mode": "AUTOMATIC", "metadata_iops": 3000}}
    )
    assert "only applies with metadata_mode: USER_PROVISIONED" in config_error(raw)


def test_lustre_beside_a_single_az_pool_and_existing_buckets() -> None:
    raw = with_section("pretrain", "storage", {"lustre": {"datasets_bucket": "corpus"}})
    assert config_error(raw) == (
        "config error: llm-platform:storage.lustre.datasets_bucket = 'corpus': not a bucket in "
        "storage.buckets (datasets, checkpoints, models, logs)"
    )
    raw = with_section(
        "inference",
        "storage",
        {
            "buckets": {"datasets": {}, "checkpoints": {"precious": True}},
            "lustre": {"node_pool": "l40s"},
        },
    )
    assert config_error(raw) == (
        "config error: llm-platform:storage.lustre.node_pool = 'l40s': spans several AZs; "
        "the file system sits in one subnet beside one single-AZ pool"
    )
    raw = with_section("pretrain", "storage", {"lustre": {"node_pool": "a100"}})
    assert config_error(raw) == (
        "config error: llm-platform:storage.lustre.node_pool = 'a100': not a pool in "
        "node_pools (h100, h100-block)"
    )


def test_bucket_name_prefix_must_be_a_valid_bucket_name() -> None:
    raw = with_section("pretrain", "storage", {"bucket_name_prefix": "Acme_LLM"})
    assert config_error(raw).startswith(
        "config error: llm-platform:storage.bucket_name_prefix = 'Acme_LLM': bucket names take"
    )


def test_namespaces_are_checked() -> None:
    raw = with_section("inference", "storage", {"model_weights": {"namespaces": ["Serving"]}})
    assert config_error(raw) == (
        "config error: llm-platform:storage.model_weights.namespaces.0 = 'Serving': "
        "not a Kubernetes namespace name (RFC 1123 label)"
    )
