"""The milestone copier as pretrain renders it: a CronJob in the tenant namespace on the
stack's trainer image, and a Pod Identity role limited to the bucket's two prefixes."""

from __future__ import annotations

import json
from typing import Any

from components.checkpoint_milestones import NAME
from tests.conftest import raw_stack
from workloads.jobs import milestones

CRONJOB = "kubernetes:batch/v1:CronJob"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"


def _retention() -> dict[str, Any]:
    storage = raw_stack("pretrain")["llm-platform:storage"]
    retention: dict[str, Any] = storage["buckets"]["checkpoints"]["retention"]
    return retention


def test_the_cronjob_runs_the_copier_with_the_stacks_retention(plans) -> None:
    (cron,) = plans("pretrain").by_type(CRONJOB)
    spec = cron.inputs["spec"]
    retention = _retention()
    assert cron.inputs["metadata"]["namespace"] == retention["namespace"] == "foundation"
    assert spec["schedule"] == "*/30 * * * *"
    assert spec["concurrencyPolicy"] == "Forbid"
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NAME
    (container,) = pod["containers"]
    # The stack's own trainer repository at the release tag, as the watcher and jobs run.
    repository = plans("pretrain").outputs["trainer_image_repository"]
    assert container["image"] == f"{repository}:{retention['image_tag']}"
    command = container["command"]
    assert command[:4] == ["python", "-m", "workloads.jobs.milestones", "copy"]
    flags = dict(zip(command[4::2], command[5::2], strict=True))
    assert flags["--bucket"] == "acme-llm-pretrain-checkpoints"
    assert flags["--runs-prefix"] == "runs/"
    assert flags["--milestone-prefix"] == "milestones/"
    assert flags["--every-steps"] == "5000"
    hardened = container["securityContext"]
    assert hardened["readOnlyRootFilesystem"] is True
    assert hardened["allowPrivilegeEscalation"] is False
    assert hardened["capabilities"] == {"drop": ["ALL"]}


def test_the_copier_waits_for_its_pod_identity_association(plans) -> None:
    plan = plans("pretrain")
    (cron,) = plan.by_type(CRONJOB)
    (association,) = [a for a in plan.by_type(ASSOCIATION) if a.inputs["serviceAccount"] == NAME]
    assert association.inputs["namespace"] == "foundation"
    assert association.urn in cron.dependencies


def test_the_role_reads_both_prefixes_writes_milestones_and_never_deletes(plans) -> None:
    (policy,) = [
        p
        for p in plans("pretrain").by_type(ROLE_POLICY)
        if p.name == "milestones-checkpoints-copier"
    ]
    statements = {s["Sid"]: s for s in json.loads(policy.inputs["policy"])["Statement"]}
    # The bucket's ARN as the mocks give it.
    (bucket,) = statements["WriteMilestones"]["Resource"].rsplit("/milestones/*", 1)[:1]
    assert bucket.endswith(":bucket/storage-checkpoints")
    assert statements["ListCheckpointPrefixes"]["Condition"] == {
        "StringLike": {"s3:prefix": ["runs/*", "milestones/*"]}
    }
    assert statements["ReadCheckpoints"]["Resource"] == [
        f"{bucket}/runs/*",
        f"{bucket}/milestones/*",
    ]
    actions = [a for s in statements.values() for a in json.dumps(s["Action"]).split('"')]
    assert not any("Delete" in a for a in actions)
    kms = statements["UseBucketKeyThroughS3"]
    assert kms["Condition"] == {"StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com"}}


def test_stacks_without_retention_have_no_copier(plans) -> None:
    for stack in ("finetune", "inference"):
        assert plans(stack).by_type(CRONJOB) == []


def test_a_copier_namespace_that_is_no_tenant_is_one_line(synth) -> None:
    from spec.errors import ConfigError
    from tests.conftest import with_section

    raw = with_section(
        "pretrain",
        "storage",
        {"buckets": {"checkpoints": {"retention": {"namespace": "nobody"}}}},
    )
    try:
        synth(raw)
    except ConfigError as exc:
        message = str(exc)
    else:
        raise AssertionError("no error")
    assert "\n" not in message
    assert "storage.buckets.checkpoints.retention.namespace" in message
    assert "not a tenant in tenants (foundation)" in message


def test_the_cronjob_runs_a_command_the_copier_takes(plans) -> None:
    """From the stack file to the copier's own parser: the CronJob's command parses into
    the run the stack's retention asks for."""
    (cron,) = plans("pretrain").by_type(CRONJOB)
    pod = cron.inputs["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = milestones.parse_args(container["command"][3:])
    retention = _retention()
    assert args.command == "copy" and not args.dry_run
    assert (args.runs_prefix, args.milestone_prefix, args.every_steps) == (
        retention["runs_prefix"],
        retention["milestone_prefix"],
        retention["milestone_every_steps"],
    )
    assert args.bucket == "acme-llm-pretrain-checkpoints"
