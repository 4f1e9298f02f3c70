"""ImageRepository: the ECR repository the stack's own images are pushed to (the trainer image).

Owns the repository and its lifecycle policy:
- scan on push (basic scanning: ECR reports the image's OS-package CVEs as it lands);
- IMMUTABLE tags: a release tag names one image for ever, so a job file that says
  `:trainer-v1.4.0` gets the image it was tested with, on every node and every restart;
- KMS encryption at rest, with the account's AWS managed key `aws/ecr` unless a key is given:
  decryptions are logged in CloudTrail, and no customer managed key has to be paid for or
  kept a policy of. A customer managed key (`kms_key_arn`) buys a key policy of its own and
  cross-account pulls; nodes of this account pulling through their role need neither.
  Encryption is fixed when the repository is created (changing it replaces the repository);
- `force_delete` off: deleting the repository while it holds images fails, so a `pulumi
  destroy` or a replacement cannot take the released images with it;
- a lifecycle policy: the newest `release_images_kept` release images are kept and older ones
  expire; untagged images (a push that failed half way) expire after `untagged_expire_days`.

Pulling needs no policy here: the node role has AmazonEC2ContainerRegistryReadOnly
(components/cluster.py), which covers every repository of the account, and ECR decrypts
through the grant it holds on the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws


@dataclass(frozen=True, kw_only=True)
class ImageRepositoryArgs:
    repository_name: str
    """The ECR repository name (`<namespace>/<image>`)."""
    release_tag_prefix: str
    """Tags that mark a release image (the git tag the image was built from)."""
    release_images_kept: int = 30
    """The newest release images kept; older ones expire."""
    untagged_expire_days: int = 7
    """Days an untagged image is kept."""
    kms_key_arn: pulumi.Input[str] | None = None
    """A customer managed key; None: the AWS managed key `aws/ecr`."""

    def __post_init__(self) -> None:
        if self.release_images_kept < 1 or self.untagged_expire_days < 1:
            raise ValueError(
                f"release_images_kept ({self.release_images_kept}) and untagged_expire_days "
                f"({self.untagged_expire_days}) must be at least 1"
            )
        if not self.release_tag_prefix:
            raise ValueError("release_tag_prefix is empty: every tagged image would be a release")


def lifecycle_policy(args: ImageRepositoryArgs) -> str:
    """The lifecycle policy document (JSON): release images by count, untagged ones by age.

    Rules are listed in ascending priority: ECR returns them sorted, and a policy written in
    another order would show as a change on every preview.
    """
    rules = [
        {
            "rulePriority": 1,
            "description": f"keep the newest {args.release_images_kept} release images",
            "selection": {
                "tagStatus": "tagged",
                "tagPrefixList": [args.release_tag_prefix],
                "countType": "imageCountMoreThan",
                "countNumber": args.release_images_kept,
            },
            "action": {"type": "expire"},
        },
        {
            "rulePriority": 2,
            "description": f"expire untagged images after {args.untagged_expire_days} days",
            "selection": {
                "tagStatus": "untagged",
                "countType": "sinceImagePushed",
                "countUnit": "days",
                "countNumber": args.untagged_expire_days,
            },
            "action": {"type": "expire"},
        },
    ]
    return json.dumps({"rules": rules})


class ImageRepository(pulumi.ComponentResource):
    repository_url: pulumi.Output[str]
    """`<account>.dkr.ecr.<region>.amazonaws.com/<name>`: a job's image is this `:<tag>`."""
    repository_name: pulumi.Output[str]
    repository_arn: pulumi.Output[str]

    def __init__(
        self, name: str, args: ImageRepositoryArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("llmp:images:ImageRepository", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        repository = aws.ecr.Repository(
            f"{name}-repository",
            name=args.repository_name,
            image_tag_mutability="IMMUTABLE",
            image_scanning_configuration=aws.ecr.RepositoryImageScanningConfigurationArgs(
                scan_on_push=True
            ),
            encryption_configurations=[
                aws.ecr.RepositoryEncryptionConfigurationArgs(
                    encryption_type="KMS", kms_key=args.kms_key_arn
                )
            ],
            force_delete=False,
            opts=child,
        )
        aws.ecr.LifecyclePolicy(
            f"{name}-lifecycle",
            repository=repository.name,
            policy=lifecycle_policy(args),
            opts=child,
        )

        self.repository_url = repository.repository_url
        self.repository_name = repository.name
        self.repository_arn = repository.arn
        self.register_outputs(
            {
                "repository_url": self.repository_url,
                "repository_name": self.repository_name,
                "repository_arn": self.repository_arn,
            }
        )
