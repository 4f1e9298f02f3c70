"""`s3-adopted-bucket-protected`: a recovery stack can never delete the only copy.

The rule reads what a real preview hands CrossGuard: the resource's tags (inputs) and
its `protect` option, which `llmp synth` records and `llmp policy` passes on.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llmp import dr
from llmp.synth import synthesize
from tests.conftest import raw_stack
from tests.policies.conftest import hits, names, res

RULE = "s3-adopted-bucket-protected"
KEY_ARN = "arn:aws:kms:us-west-2:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@pytest.fixture(scope="module")
def recovery_plan() -> dict[str, Any]:
    rc = dr.build_recovery_config(
        raw_stack("pretrain"),
        dr.RecoveryOptions(source_stack="pretrain", region="us-west-2", replica_key_arn=KEY_ARN),
    )
    return synthesize(rc.stack, rc.synth_raw).to_dict()


@pytest.mark.parametrize("stack", ["pretrain", "finetune", "inference"])
def test_quiet_on_the_stacks(plan, stack: str) -> None:
    assert hits(plan(stack), RULE) == []


def test_quiet_on_the_recovery_plan(recovery_plan) -> None:
    assert hits(copy.deepcopy(recovery_plan), RULE) == []


def test_fires_on_an_adopted_bucket_or_key_without_protect(recovery_plan) -> None:
    p = copy.deepcopy(recovery_plan)
    for name, type_ in (
        ("storage-checkpoints", "aws:s3/bucket:Bucket"),
        ("storage-s3", "aws:kms/key:Key"),
    ):
        del res(p, name, type_)["protect"]
    found = hits(p, RULE)
    assert names(found) == {"storage-checkpoints", "storage-s3"}
    assert all(v.level == "mandatory" for v in found)
    assert any("adopted bucket storage-checkpoints is not protected" in v.message for v in found)


def test_an_untagged_bucket_needs_no_protection(recovery_plan) -> None:
    p = copy.deepcopy(recovery_plan)
    bucket = res(p, "storage-models", "aws:s3/bucket:Bucket")
    del bucket["protect"]
    del bucket["inputs"]["tags"]["llm-platform/adopted"]
    assert hits(p, RULE) == []
