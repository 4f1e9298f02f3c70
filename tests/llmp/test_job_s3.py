"""A training job that reads S3 directly: token shards from `data: s3://...` and a restore
point from `trainer.checkpoint.restore_from` (the restart `llmp dr plan` counts on).

Checked like every other location: a bucket of the stack, a prefix the tenant's workload
role is granted (the rule the program builds the role by), one line naming the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmp.jobs import prepare
from llmp.jobs.checks import JobFileError
from llmp.stacks import REPO_ROOT
from tests.llmp.job_files import job_file

RESTART = REPO_ROOT / "examples" / "pretrain-restart.yaml"
SFT = REPO_ROOT / "examples" / "finetune-sft.yaml"


def test_the_restart_example_renders_its_s3_locations_into_the_trainer_config() -> None:
    prepared = prepare(str(RESTART))
    config_map, job = prepared.manifests
    trainer = json.loads(config_map["data"]["job.json"])
    assert trainer["data"]["path"] == "s3://acme-llm-pretrain-datasets/tokenized/web-2026-11/"
    assert trainer["checkpoint"]["restore_from"] == (
        "s3://acme-llm-pretrain-checkpoints/runs/base-1b/"
    )
    assert trainer["checkpoint"]["dir"] == "/fsx/checkpoints/base-1b"
    assert prepared.admission.admitted, prepared.admission.problems
    assert job["kind"] == "TrainJob"


@pytest.mark.parametrize(
    ("changes", "key", "why"),
    [
        (
            {"data": "s3://someone-elses-bucket/tokenized/x/"},
            "data",
            "bucket someone-elses-bucket is not one of the stack's",
        ),
        (
            {"data": "s3://acme-llm-pretrain-datasets/scratch/x/"},
            "data",
            "may read only raw/, tokenized/, runs/ in datasets",
        ),
        (
            {"trainer__checkpoint__restore_from": "s3://acme-llm-pretrain-checkpoints/other/"},
            "trainer.checkpoint.restore_from",
            "may read only raw/, tokenized/, runs/",
        ),
    ],
)
def test_an_s3_location_the_tenant_cannot_read_is_refused_in_one_line(
    tmp_path: Path, changes: dict[str, str], key: str, why: str
) -> None:
    path = job_file(tmp_path, RESTART, **changes)
    with pytest.raises(JobFileError) as info:
        prepare(path)
    message = str(info.value)
    assert "\n" not in message
    assert key in message and why in message, message


def test_s3_data_is_for_token_shards_only(tmp_path: Path) -> None:
    path = job_file(tmp_path, SFT, data="s3://acme-llm-finetune-datasets/chat/")
    with pytest.raises(JobFileError, match="only kind pretrain takes"):
        prepare(path)


def test_a_restore_point_that_is_not_an_s3_uri_is_the_trainers_error(tmp_path: Path) -> None:
    path = job_file(tmp_path, RESTART, trainer__checkpoint__restore_from="/fsx/elsewhere")
    with pytest.raises(JobFileError, match=r"restore_from.*s3://bucket/prefix"):
        prepare(path)
