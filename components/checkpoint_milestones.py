"""Checkpoint milestones: the CronJob that copies every Nth checkpoint out of the runs prefix.

Owns, for a bucket with `retention` (the checkpoints bucket):

- a **Pod Identity role** for the service account `checkpoint-milestones` of
  the copier's namespace: list and read the bucket's runs and milestone
  prefixes, write only the milestone prefix (never delete), and use the
  storage KMS key through S3; nothing else of the bucket or the account;
- the **ServiceAccount** (no token mounted: Pod Identity projects its own);
- a **CronJob** running `python -m workloads.jobs.milestones copy` in the
  trainer image (pinned by digest), one run at a time, hardened like the
  platform's other pods (non-root, read-only root file system, every
  capability dropped, RuntimeDefault seccomp).

The lifecycle rules that make the copy necessary (`recent-<runs prefix>`
expiring every checkpoint after the recent window, the milestone prefix's
tiering rule) are the bucket's, in `components/storage.py`. The namespace is a
tenant's: its network policies already let pods reach S3 over HTTPS and the
Pod Identity agent, and its quota and limit range cover the copier's pod.

The component expects the AWS and Kubernetes providers through `opts.providers`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.batch.v1 import (
    CronJobInitArgs,
    CronJobSpecArgs,
    JobSpecArgs,
    JobTemplateSpecArgs,
)
from pulumi_kubernetes.core.v1 import (
    ContainerArgs,
    EnvVarArgs,
    PodSpecArgs,
    PodTemplateSpecArgs,
    ResourceRequirementsArgs,
    ServiceAccountInitArgs,
)
from pulumi_kubernetes.meta.v1 import ObjectMetaArgs

from components.iam import pod_identity_role
from manifests import volumes
from manifests.hardening import container_context, pod_context

NAME = "checkpoint-milestones"
"""The CronJob's and its service account's name."""
MODULE = "workloads.jobs.milestones"
RUN_AS = 10102
"""A high uid of no user of the image: the copier needs no home, only Python and boto3."""
ACTIVE_DEADLINE_S = 6 * 3600
"""A first run copies every milestone of the recent window: terabytes server-side."""


@dataclass(frozen=True, kw_only=True)
class CheckpointMilestonesArgs:
    bucket_name: pulumi.Input[str]
    bucket_arn: pulumi.Input[str]
    kms_key_arn: pulumi.Input[str]
    region: str
    runs_prefix: str
    milestone_prefix: str
    milestone_every_steps: int
    schedule: str
    """Cron schedule, UTC."""
    namespace: pulumi.Input[str]
    """The tenant namespace (its output: the objects wait for it)."""
    namespace_name: str
    """The same, plainly: a Pod Identity association needs no namespace to exist."""
    image: str
    """The trainer image by digest."""
    cluster_name: pulumi.Input[str]


def copier_policy(
    bucket_arn: str, runs_prefix: str, milestone_prefix: str, kms_key_arn: str, region: str
) -> dict[str, Any]:
    """Read both prefixes, write milestones (multipart included), never delete."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ListCheckpointPrefixes",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": bucket_arn,
                "Condition": {
                    "StringLike": {"s3:prefix": [f"{runs_prefix}*", f"{milestone_prefix}*"]}
                },
            },
            {
                "Sid": "ReadCheckpoints",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": [f"{bucket_arn}/{runs_prefix}*", f"{bucket_arn}/{milestone_prefix}*"],
            },
            {
                "Sid": "WriteMilestones",
                "Effect": "Allow",
                "Action": [
                    "s3:PutObject",
                    "s3:AbortMultipartUpload",
                    "s3:ListMultipartUploadParts",
                ],
                "Resource": f"{bucket_arn}/{milestone_prefix}*",
            },
            {
                "Sid": "UseBucketKeyThroughS3",
                "Effect": "Allow",
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Resource": kms_key_arn,
                "Condition": {"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}},
            },
        ],
    }


def copier_command(args: CheckpointMilestonesArgs) -> list[pulumi.Input[str]]:
    return [
        "python",
        "-m",
        MODULE,
        "copy",
        "--bucket",
        args.bucket_name,
        "--runs-prefix",
        args.runs_prefix,
        "--milestone-prefix",
        args.milestone_prefix,
        "--every-steps",
        str(args.milestone_every_steps),
    ]


def cronjob_args(args: CheckpointMilestonesArgs) -> CronJobInitArgs:
    """One copier run per schedule tick, never two at once."""
    labels = {**volumes.PART_OF, "app.kubernetes.io/name": NAME}
    container = ContainerArgs(
        name="copier",
        image=args.image,
        image_pull_policy="Always",
        command=copier_command(args),
        env=[
            EnvVarArgs(name="AWS_REGION", value=args.region),
            EnvVarArgs(name="AWS_DEFAULT_REGION", value=args.region),
        ],
        resources=ResourceRequirementsArgs(
            requests={"cpu": "250m", "memory": "512Mi"},
            limits={"cpu": "1", "memory": "1Gi"},
        ),
        security_context=container_context(RUN_AS),
    )
    pod = PodSpecArgs(
        service_account_name=NAME,
        automount_service_account_token=False,
        restart_policy="Never",
        security_context=pod_context(RUN_AS),
        containers=[container],
    )
    return CronJobInitArgs(
        metadata=ObjectMetaArgs(name=NAME, namespace=args.namespace, labels=labels),
        spec=CronJobSpecArgs(
            schedule=args.schedule,
            time_zone="Etc/UTC",
            # A run still copying when the next tick comes is left to finish.
            concurrency_policy="Forbid",
            starting_deadline_seconds=600,
            successful_jobs_history_limit=1,
            failed_jobs_history_limit=3,
            job_template=JobTemplateSpecArgs(
                metadata=ObjectMetaArgs(labels=labels),
                spec=JobSpecArgs(
                    backoff_limit=2,
                    active_deadline_seconds=ACTIVE_DEADLINE_S,
                    ttl_seconds_after_finished=86400,
                    # No pod metadata: checkov's seccomp check of a CronJob reads only the
                    # template's annotations when it has metadata, not its securityContext.
                    # The Job controller labels the pods (job-name) anyway.
                    template=PodTemplateSpecArgs(spec=pod),
                ),
            ),
        ),
    )


class CheckpointMilestones(pulumi.ComponentResource):
    role_arn: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        args: CheckpointMilestonesArgs,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("llmp:storage:CheckpointMilestones", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        policy = pulumi.Output.all(args.bucket_arn, args.kms_key_arn).apply(
            lambda v: json.dumps(
                copier_policy(v[0], args.runs_prefix, args.milestone_prefix, v[1], args.region)
            )
        )
        role, association = pod_identity_role(
            f"{name}-copier",
            parent=self,
            description=f"Checkpoint milestones: service account {args.namespace_name}/{NAME}",
            policy=policy,
            cluster_name=args.cluster_name,
            namespace=args.namespace_name,
            service_account=NAME,
        )
        account = k8s.core.v1.ServiceAccount(
            f"{name}-sa",
            ServiceAccountInitArgs(
                metadata=ObjectMetaArgs(
                    name=NAME, namespace=args.namespace, labels=volumes.PART_OF
                ),
                automount_service_account_token=False,
            ),
            opts=child,
        )
        # Pod Identity injects credentials only into pods created after the association.
        k8s.batch.v1.CronJob(
            f"{name}-cronjob",
            cronjob_args(args),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[association, account]),
        )
        self.role_arn = role.arn
        self.register_outputs({"role_arn": self.role_arn})
