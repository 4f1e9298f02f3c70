"""Tag rules: effective tags are own tags over the provider's default tags."""

from __future__ import annotations

import inspect
import json

import pulumi_aws
import pytest

from policies.tags import TAGGABLE
from tests.policies.conftest import add, hits, inputs, names, res

AWS_PROVIDER = "pulumi:providers:aws"


@pytest.mark.parametrize("stack", ["pretrain", "finetune", "inference"])
@pytest.mark.parametrize("rule", ["required-tags", "launch-template-tag-specifications"])
def test_tag_rule_is_quiet_on_the_stacks(plan, stack: str, rule: str) -> None:
    assert hits(plan(stack), rule) == []


def test_required_tags_come_from_the_provider(plan) -> None:
    p = plan("inference")
    provider = res(p, "aws", AWS_PROVIDER).inputs
    tags = json.loads(provider["defaultTags"])
    del tags["tags"]["cost-center"]
    provider["defaultTags"] = json.dumps(tags)
    found = hits(p, "required-tags")
    assert "network-vpc" in names(found) and "storage-models" in names(found)
    assert "storage-models-policy" not in names(found)  # a bucket policy takes no tags
    assert all("cost-center" in v.message for v in found)


def test_required_tags_accept_own_tags(plan) -> None:
    p = plan("inference")
    res(p, "aws", AWS_PROVIDER).inputs.pop("defaultTags")
    before = names(hits(p, "required-tags"))
    assert "network-vpc" in before
    inputs(p, "network-vpc")["tags"].update(
        {"team": "inference", "cost-center": "cc-4300", "stack": "inference"}
    )
    assert "network-vpc" not in names(hits(p, "required-tags"))


def test_required_tags_follow_the_resource_s_own_provider(plan) -> None:
    p = plan()
    dr = res(p, "aws-dr", AWS_PROVIDER).inputs
    dr["defaultTags"] = json.dumps({"tags": {"team": "x"}})
    found = names(hits(p, "required-tags"))
    assert "storage-models-replica" in found and "storage-models" not in found


def test_required_tags_are_configurable(plan) -> None:
    p = plan("inference")
    config = {"required-tags": {"tags": ["team", "owner"]}}
    assert "network-vpc" in names(hits(p, "required-tags", config))


def test_required_tags_apply_to_an_unlisted_type_that_takes_tags(plan) -> None:
    p = plan("inference")
    res(p, "aws", AWS_PROVIDER).inputs.pop("defaultTags")
    add(p, "aws:sns/topic:Topic", "alerts", {"tags": {"team": "x"}})
    assert "alerts" in names(hits(p, "required-tags"))


def test_launch_template_tag_specifications_fire_on_missing_tags(plan) -> None:
    p = plan()
    template = inputs(p, "gpu-h100-nodes", "aws:ec2/launchTemplate:LaunchTemplate")
    for spec in template["tagSpecifications"]:
        if spec["resourceType"] == "volume":
            del spec["tags"]["team"]
    found = hits(p, "launch-template-tag-specifications")
    assert names(found) == {"gpu-h100-nodes"} and "volume" in found[0].message


def test_every_taggable_type_takes_tags_in_pulumi_aws() -> None:
    for token in TAGGABLE:
        module, name = token.split(":")[1].split("/")[0], token.rsplit(":", 1)[-1]
        cls = getattr(getattr(pulumi_aws, module), name)
        assert "tags" in inspect.signature(cls._internal_init).parameters, token
