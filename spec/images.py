"""`images`: the stack's registry of its own images (the trainer image, images/trainer/)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from spec.base import Section
from spec.errors import MISSING, FieldError

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


_IMAGE_REF = re.compile(
    r"^[a-z0-9][a-z0-9.\-/_:]*(:[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}|@sha256:[0-9a-f]{64})$"
)
_IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")


class TrainerImageRef(Section):
    """Which trainer image a platform workload runs (the straggler watcher, the milestone
    copier): a release tag in the stack's own repository (`images`), or a whole reference."""

    image_tag: str | None = Field(
        None,
        description="Tag of the trainer image in the stack's repository (`images`), e.g. "
        "`trainer-v0.1.0`: the release it runs.",
    )
    image: str | None = Field(
        None,
        description="The whole image reference instead, with a tag or digest (for a stack "
        "without `images`).",
    )

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        if v is not None and (not _IMAGE_REF.match(v) or v.endswith(":latest")):
            raise FieldError((), v, "an image reference pinned by a tag (not latest) or digest")
        return v

    @field_validator("image_tag")
    @classmethod
    def _tag(cls, v: str | None) -> str | None:
        if v is not None and (not _IMAGE_TAG.match(v) or v == "latest"):
            raise FieldError((), v, "an image tag of a release such as trainer-v0.1.0")
        return v

    def _image_required(self, when: str = "") -> None:
        """FieldError on `image_tag` when neither is set (`when`: when it is needed)."""
        if self.image is None and self.image_tag is None:
            when = f" {when}" if when else ""
            raise FieldError(
                ("image_tag",), MISSING, f"required{when} (or set image): the trainer release's tag"
            )


class RequiredTrainerImage(TrainerImageRef):
    """A `TrainerImageRef` that is always needed."""

    @model_validator(mode="after")
    def _required(self) -> RequiredTrainerImage:
        self._image_required()
        return self
