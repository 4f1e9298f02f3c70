"""ImageRepository: the trainer image's ECR repository in every stack, locked down, with a
lifecycle that keeps the release images a job may still pull, and an output job files use."""

from __future__ import annotations

import json

import pytest

from components.image_repository import ImageRepositoryArgs, lifecycle_policy
from spec.images import RELEASE_TAG_PREFIX
from tests.conftest import STACKS, config_error, inputs_of, with_section

REPOSITORY = "aws:ecr/repository:Repository"
LIFECYCLE = "aws:ecr/lifecyclePolicy:LifecyclePolicy"
NODE_POLICY = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_has_a_locked_down_trainer_repository(plans, stack: str) -> None:
    repository = inputs_of(plans(stack), REPOSITORY, "images-repository")
    assert repository["name"] == f"llm-platform-{stack}/trainer"
    assert repository["imageTagMutability"] == "IMMUTABLE"
    assert repository["imageScanningConfiguration"] == {"scanOnPush": True}
    assert repository["encryptionConfigurations"] == [{"encryptionType": "KMS"}]
    assert repository["forceDelete"] is False


@pytest.mark.parametrize("stack", STACKS)
def test_the_repository_url_is_a_stack_output(plans, stack: str) -> None:
    plan = plans(stack)
    region = plan.outputs["region"]
    assert plan.outputs["trainer_image_repository"] == (
        f"000000000000.dkr.ecr.{region}.amazonaws.com/llm-platform-{stack}/trainer"
    )


def test_the_lifecycle_keeps_release_images_and_expires_untagged_ones(plans) -> None:
    lifecycle = inputs_of(plans("pretrain"), LIFECYCLE, "images-lifecycle")
    assert lifecycle["repository"] == "llm-platform-pretrain/trainer"
    release, untagged = json.loads(lifecycle["policy"])["rules"]
    assert release["selection"] == {
        "tagStatus": "tagged",
        "tagPrefixList": [RELEASE_TAG_PREFIX],
        "countType": "imageCountMoreThan",
        "countNumber": 30,
    }
    assert untagged["selection"] == {
        "tagStatus": "untagged",
        "countType": "sinceImagePushed",
        "countUnit": "days",
        "countNumber": 7,
    }
    assert [release["rulePriority"], untagged["rulePriority"]] == [1, 2]


def test_the_lifecycle_follows_the_config(synth) -> None:
    raw = with_section(
        "finetune",
        "images",
        {"repository_name": "acme/trainer", "release_images_kept": 5, "untagged_expire_days": 1},
    )
    plan = synth(raw)
    assert inputs_of(plan, REPOSITORY, "images-repository")["name"] == "acme/trainer"
    release, untagged = json.loads(inputs_of(plan, LIFECYCLE, "images-lifecycle")["policy"])[
        "rules"
    ]
    assert release["selection"]["countNumber"] == 5
    assert untagged["selection"]["countNumber"] == 1


def test_a_stack_can_do_without_the_repository(synth) -> None:
    plan = synth(with_section("inference", "images", {"enabled": False}))
    assert not plan.by_type(REPOSITORY)
    assert "trainer_image_repository" not in plan.outputs


def test_the_nodes_can_pull_from_it(plans) -> None:
    """ECR decrypts for the puller (it holds a grant on the key), so ECR read access on the
    node role is all a node needs."""
    plan = plans("pretrain")
    attached = {r.inputs["policyArn"] for r in plan.by_type(NODE_POLICY)}
    assert "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly" in attached
    pool = inputs_of(plan, "aws:eks/nodeGroup:NodeGroup", "gpu-h100-nodes")
    system = inputs_of(plan, "aws:eks/nodeGroup:NodeGroup", "cluster-system")
    assert pool["nodeRoleArn"] == system["nodeRoleArn"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Trainer", "an ECR repository name"),
        ("a//b", "an ECR repository name"),
        ("x", "an ECR repository name"),
    ],
)
def test_a_bad_repository_name_is_one_line(name: str, expected: str) -> None:
    message = config_error(with_section("pretrain", "images", {"repository_name": name}))
    assert "llm-platform:images.repository_name" in message
    assert expected in message


def test_release_images_kept_must_be_positive() -> None:
    message = config_error(with_section("pretrain", "images", {"release_images_kept": 0}))
    assert "llm-platform:images.release_images_kept" in message


def test_the_args_refuse_an_empty_release_prefix() -> None:
    with pytest.raises(ValueError, match="release_tag_prefix"):
        ImageRepositoryArgs(repository_name="a/b", release_tag_prefix="")


def test_the_policy_is_long_enough_for_ecr() -> None:
    # PutLifecyclePolicy takes 100 to 30,720 characters (botocore's LifecyclePolicyText).
    import botocore.session

    shape = botocore.session.get_session().get_service_model("ecr").shape_for("LifecyclePolicyText")
    policy = lifecycle_policy(
        ImageRepositoryArgs(repository_name="a/b", release_tag_prefix=RELEASE_TAG_PREFIX)
    )
    assert shape.metadata["min"] <= len(policy) <= shape.metadata["max"]
