"""`images`: the stack's registry of its own images (the trainer image, images/trainer/)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from spec.base import Section
from spec.errors import FieldError

ECR_NAME_PATTERN = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(\/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*"
"""ECR's RepositoryName pattern, as botocore's service model gives it (tests/spec/test_images.py
compares the two), for names of 2 to 256 characters."""
ECR_REPOSITORY_NAME = re.compile(f"^{ECR_NAME_PATTERN}$")

RELEASE_TAG_PREFIX = "trainer-v"
"""Git tags `trainer-v*` build the image (.github/workflows/trainer-image.yml); the image tag
is the git tag, so the lifecycle policy keeps release images by this prefix."""


_NAME_RULE = "2-256 lowercase letters and digits, separated by '.', '_', '__', '-' or '/'"


def is_repository_name(name: str) -> bool:
    return 2 <= len(name) <= 256 and bool(ECR_REPOSITORY_NAME.match(name))


def check_repository_name(name: str) -> str:
    """`name` if ECR takes it as a repository name, else ValueError (one line)."""
    if not is_repository_name(name):
        raise ValueError(f"ECR repository name {name!r}: {_NAME_RULE}")
    return name


class ImagesConfig(Section):
    """ECR repository of the trainer image: scanned on push, tags immutable, KMS-encrypted."""

    enabled: bool = Field(
        True,
        description="An ECR repository for the trainer image (images/trainer/Dockerfile), "
        "pushed by the trainer-image workflow; output `trainer_image_repository`.",
    )
    repository_name: str | None = Field(
        None, description="Repository name; default `<cluster name>/trainer`."
    )
    release_images_kept: int = Field(
        30,
        ge=1,
        le=10000,
        description=f"Release images kept (tags `{RELEASE_TAG_PREFIX}*`); older ones expire. A "
        "running job's image must stay among them: pods of a restarted job pull it again.",
    )
    untagged_expire_days: int = Field(
        7,
        ge=1,
        le=3650,
        description="Days an untagged image (a failed or interrupted push) is kept.",
    )

    @field_validator("repository_name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not is_repository_name(v):
            raise FieldError((), v, f"an ECR repository name: {_NAME_RULE}")
        return v
