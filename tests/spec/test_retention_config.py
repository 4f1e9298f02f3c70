"""Checkpoint retention config: milestones apart from the runs, a window a restore can use,
and the export prefix the runs rule must expire; every error one line."""

from __future__ import annotations

from typing import Any

import pytest

from spec.stackfile import load_config
from tests.conftest import config_error, raw_stack, with_section

KEY = "config error: llm-platform:storage.buckets.checkpoints"


def checkpoints(overrides: dict[str, Any]) -> dict[str, Any]:
    return with_section("pretrain", "storage", {"buckets": {"checkpoints": overrides}})


def test_pretrain_keeps_a_week_and_every_tenth_checkpoint() -> None:
    bucket = load_config(raw_stack("pretrain")).storage.buckets["checkpoints"]  # type: ignore[union-attr]
    assert bucket.retention is not None
    assert bucket.retention.keep_days == 7
    assert bucket.milestone_share == pytest.approx(0.1)
    assert [rule.prefix for rule in bucket.lifecycle] == ["milestones/"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"lifecycle": [{"prefix": "", "expire_days": 365}]},
            f"{KEY}.lifecycle.0.prefix = '': overlaps retention.runs_prefix 'runs/', which "
            "retention expires after 7 days",
        ),
        (
            {"lifecycle": [{"prefix": "runs/llama/", "expire_days": 365}]},
            f"{KEY}.lifecycle.0.prefix = 'runs/llama/': overlaps retention.runs_prefix",
        ),
        (
            {"retention": {"milestone_prefix": "runs/keep/"}},
            f"{KEY}.retention.milestone_prefix = 'runs/keep/': must not overlap runs_prefix",
        ),
        ({"retention": {"keep_days": 1}}, f"{KEY}.retention.keep_days = 1"),
        (
            {"retention": {"milestone_every_steps": 1234}},
            f"{KEY}.retention.milestone_every_steps = 1234: a multiple of "
            "checkpoint_interval_steps (500)",
        ),
        (
            {"checkpoint_interval_steps": None},
            f"{KEY}.checkpoint_interval_steps = <missing>: required with retention",
        ),
        (
            {"retention": {"image_tag": "latest"}},
            f"{KEY}.retention.image_tag = 'latest': an image tag of a release",
        ),
        (
            {"retention": {"image_tag": None}},
            f"{KEY}.retention.image_tag = <missing>: required (or set image)",
        ),
        (
            {"retention": {"image": "acme/trainer:latest"}},
            f"{KEY}.retention.image = 'acme/trainer:latest': an image reference pinned",
        ),
        ({"retention": {"schedule": "every hour"}}, "a cron schedule of five fields"),
        ({"retention": {"runs_prefix": "/runs"}}, "a key prefix of one or more folders"),
        (
            {"retention": {"runs_prefix": "exports/"}},
            f"{KEY}.retention.runs_prefix = 'exports/': the file system exports checkpoints "
            "to 'runs/' (lustre.checkpoints_prefix)",
        ),
    ],
)
def test_bad_retention_is_one_line(overrides: dict[str, Any], message: str) -> None:
    assert message in config_error(checkpoints(overrides))


def test_a_whole_bucket_export_cannot_have_retention() -> None:
    raw = checkpoints({})
    raw["llm-platform:storage"]["lustre"]["checkpoints_prefix"] = ""
    assert "exports checkpoints to ''" in config_error(raw)
