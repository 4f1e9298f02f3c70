"""`s3-adopted-bucket-protected`: a recovery stack can never delete the only copy.

The rule reads what a real preview hands CrossGuard: the resource's tags (inputs) and
its `protect` option, which `llmp synth` records and `llmp policy` passes on.
"""

from __future__ import annotations

import pytest

from llmp.plan import Plan
from llmp.plan.synth import synthesize
from tests.conftest import with_section
from tests.policies.conftest import hits, names, res

RULE = "s3-adopted-bucket-protected"
KEY_ARN = "arn:aws:kms:us-west-2:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@pytest.fixture(scope="module")
def recovery_plan() -> Plan:
    """finetune (us-west-2) adopting two replicas, as a recovery stack does."""
    adoption = {
        "kms_key_arn": KEY_ARN,
        "buckets": {
            "checkpoints": "acme-llm-pretrain-checkpoints-us-west-2",
            "models": "acme-llm-pretrain-models-us-west-2",
        },
    }
    return synthesize("finetune-dr", with_section("finetune", "storage", {"adoption": adoption}))


def _unprotected(p: Plan, name: str, type_: str) -> None:
    i = p.resources.index(res(p, name, type_))
    p.resources[i] = p.resources[i].model_copy(update={"protect": False})


@pytest.mark.parametrize("stack", ["pretrain", "finetune", "inference"])
def test_quiet_on_the_stacks(plan, stack: str) -> None:
    assert hits(plan(stack), RULE) == []


def test_quiet_on_the_recovery_plan(recovery_plan) -> None:
    assert hits(recovery_plan.model_copy(deep=True), RULE) == []


def test_fires_on_an_adopted_bucket_or_key_without_protect(recovery_plan) -> None:
    p = recovery_plan.model_copy(deep=True)
    for name, type_ in (
        ("storage-checkpoints", "aws:s3/bucket:Bucket"),
        ("storage-s3", "aws:kms/key:Key"),
    ):
        _unprotected(p, name, type_)
    found = hits(p, RULE)
    assert names(found) == {"storage-checkpoints", "storage-s3"}
    assert all(v.level == "mandatory" for v in found)
    assert any("adopted bucket storage-checkpoints is not protected" in v.message for v in found)


def test_an_untagged_bucket_needs_no_protection(recovery_plan) -> None:
    p = recovery_plan.model_copy(deep=True)
    _unprotected(p, "storage-models", "aws:s3/bucket:Bucket")
    del res(p, "storage-models", "aws:s3/bucket:Bucket").inputs["tags"]["llm-platform/adopted"]
    assert hits(p, RULE) == []
