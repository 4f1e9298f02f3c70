"""`storage`: S3 buckets and their lifecycles, replication, adoption, FSx for Lustre and the
model-weights volume."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from spec.base import K8S_NAME, Section, cloudwatch_retention, known_region, namespace_names
from spec.catalog import catalog
from spec.errors import MISSING, FieldError
from spec.images import RequiredTrainerImage

TransitionClass = Literal[
    "INTELLIGENT_TIERING", "STANDARD_IA", "ONEZONE_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE"
]
# S3's lifecycle waterfall: an object only moves to a class further down.
_WATERFALL: dict[str, int] = {
    "STANDARD_IA": 1,
    "INTELLIGENT_TIERING": 2,
    "ONEZONE_IA": 3,
    "GLACIER_IR": 4,
    "GLACIER": 5,
    "DEEP_ARCHIVE": 6,
}
_BUCKET_KEY = re.compile(r"^[a-z0-9][a-z0-9-]{0,20}$")
_BUCKET_PREFIX = re.compile(r"^[a-z0-9][a-z0-9-]{2,38}[a-z0-9]$")
_KEY_PREFIX = re.compile(r"^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*/$")
_CRON_FIELD = re.compile(r"^[0-9*/,-]+$")

MIN_KEEP_DAYS = 2
"""The shortest recent window: a resume after an outage needs the newest checkpoint still
under the runs prefix once the outage is noticed, the stack rebuilt (its RTO is under an
hour) and the copier has caught up; a day of S3 lifecycle lag (expiry runs once a day)
comes on top."""


class TransitionStep(Section):
    """One lifecycle step: after `days`, move objects to `storage_class`."""

    days: int = Field(ge=0, description="Object age in days at which the step applies.")
    storage_class: TransitionClass = Field(description="The S3 storage class to move to.")


class LifecycleRuleConfig(Section):
    """Tiering and expiry of the objects under one prefix."""

    prefix: str = Field("", description="Key prefix the rule covers; empty for the whole bucket.")
    transitions: list[TransitionStep] = Field(
        default_factory=list, description="Storage-class steps by age, in increasing days."
    )
    expire_days: int | None = Field(
        None, ge=1, description="Delete current versions at this age; none keeps them."
    )

    @model_validator(mode="after")
    def _steps(self) -> LifecycleRuleConfig:
        prices = catalog().storage
        previous: TransitionStep | None = None
        for i, step in enumerate(self.transitions):
            here = ("transitions", i, "days")
            if previous is not None and step.days <= previous.days:
                raise FieldError(
                    here,
                    step.days,
                    f"transitions must be in increasing days; step {i - 1} is at "
                    f"{previous.days} days",
                )
            if step.storage_class in ("STANDARD_IA", "ONEZONE_IA") and (
                step.days < prices.min_days_before_ia
            ):
                raise FieldError(
                    here,
                    step.days,
                    f"S3 moves objects to {step.storage_class} only after "
                    f"{prices.min_days_before_ia} days; use {prices.min_days_before_ia} or more",
                )
            if previous is not None:
                self._check_move(i, previous, step)
            previous = step
        if previous is not None and self.expire_days is not None:
            self._check_held(previous, self.expire_days, ("expire_days",), "expiry")
        return self

    def _check_move(self, i: int, previous: TransitionStep, step: TransitionStep) -> None:
        here = ("transitions", i, "storage_class")
        before, after = previous.storage_class, step.storage_class
        if _WATERFALL[after] <= _WATERFALL[before] or (before, after) == (
            "ONEZONE_IA",
            "GLACIER_IR",
        ):
            raise FieldError(
                here,
                after,
                f"S3 cannot move objects from {before} to {after}; "
                "steps go Standard-IA, Intelligent-Tiering, One Zone-IA, Glacier IR, "
                "Glacier, Deep Archive",
            )
        self._check_held(previous, step.days, ("transitions", i, "days"), f"the move to {after}")

    def _check_held(
        self, previous: TransitionStep, days: int, path: tuple[str | int, ...], what: str
    ) -> None:
        minimum = catalog().storage.min_storage_days.get(previous.storage_class)
        if minimum is not None and days - previous.days < minimum:
            raise FieldError(
                path,
                days,
                f"{previous.storage_class} bills at least {minimum} days, so {what} before day "
                f"{previous.days + minimum} pays for storage it no longer has",
            )


def overlaps(a: str, b: str) -> bool:
    """Whether S3 lifecycle rules on key prefixes `a` and `b` can match the same object."""
    return a.startswith(b) or b.startswith(a)


class RetentionConfig(RequiredTrainerImage):
    """Checkpoint retention (`storage.buckets.<name>.retention`): every checkpoint is kept
    `keep_days` under `runs_prefix`; milestones (steps that are multiples of
    `milestone_every_steps`) are copied, complete and marker last, to `milestone_prefix` by
    a CronJob running the trainer image (`image_tag` or `image`: `python -m
    workloads.jobs.milestones`), and kept there by the bucket's lifecycle rule for that
    prefix."""

    runs_prefix: str = Field(
        "runs/",
        description="Where the file system exports checkpoints (`lustre.checkpoints_prefix`): "
        "expired after `keep_days`.",
    )
    keep_days: int = Field(
        7,
        ge=MIN_KEEP_DAYS,
        description="Days every checkpoint stays under `runs_prefix`; after that only "
        f"milestones exist (at least {MIN_KEEP_DAYS}: a restore must still find the newest).",
    )
    noncurrent_days: int = Field(
        1,
        ge=1,
        description="Days an expired or overwritten object under `runs_prefix` is kept as a "
        "noncurrent version (the bucket's `noncurrent_version_expire_days` elsewhere).",
    )
    milestone_prefix: str = Field(
        "milestones/",
        description="Where milestones are copied to (`<prefix><job>/step-N/`); tier and keep "
        "them with a `lifecycle` rule on this prefix.",
    )
    milestone_every_steps: int = Field(
        ge=1,
        description="A checkpoint whose step is a multiple of this is a milestone; make it a "
        "multiple of the jobs' `checkpoint.interval_steps`.",
    )
    schedule: str = Field(
        "*/30 * * * *", description="Cron schedule (UTC) of the copier's CronJob."
    )
    namespace: str = Field(
        description="Tenant namespace the copier runs in (service account "
        "`checkpoint-milestones`, its own Pod Identity role)."
    )

    @field_validator("runs_prefix", "milestone_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not _KEY_PREFIX.match(v):
            raise ValueError(
                "a key prefix of one or more folders ending in '/', without a leading '/', "
                "e.g. runs/"
            )
        return v

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        if not K8S_NAME.match(v):
            raise ValueError("not a Kubernetes namespace name (RFC 1123 label)")
        return v

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, v: str) -> str:
        fields = v.split()
        if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
            raise ValueError("a cron schedule of five fields, e.g. '*/30 * * * *'")
        return v

    @model_validator(mode="after")
    def _apart(self) -> RetentionConfig:
        if overlaps(self.runs_prefix, self.milestone_prefix):
            raise FieldError(
                ("milestone_prefix",),
                self.milestone_prefix,
                f"must not overlap runs_prefix {self.runs_prefix!r}: the runs' expiry would "
                "delete the milestones; use a sibling prefix such as milestones/",
            )
        return self


class BucketConfig(Section):
    """One S3 bucket (`storage.buckets.<name>`): encrypted, private, TLS-only, logged."""

    precious: bool = Field(
        False,
        description=(
            "Versioned, never force-destroyed, retained when the stack is deleted "
            "(checkpoints, models)."
        ),
    )
    versioning: bool | None = Field(None, description="Object versioning; default: `precious`.")
    replicate: bool = Field(
        False, description="Replicate to `storage.replication.region` (needs versioning)."
    )
    lifecycle: list[LifecycleRuleConfig] = Field(
        default_factory=list, description="Tiering and expiry rules by prefix."
    )
    noncurrent_version_expire_days: int = Field(
        30, ge=1, description="Delete overwritten or deleted versions after this many days."
    )
    abort_incomplete_multipart_days: int = Field(
        7, ge=1, description="Abort multipart uploads left incomplete this long."
    )
    initial_gb: float = Field(0, ge=0, description="Data present at creation (cost model).")
    daily_write_gb: float = Field(0, ge=0, description="New data per day (cost model).")
    average_object_mb: float = Field(
        64, gt=0, description="Typical object size (cost model: requests, monitoring)."
    )
    checkpoint_interval_steps: int | None = Field(
        None,
        ge=1,
        description="The training jobs' checkpoint interval in steps (cost model, with "
        "`retention`: milestones are interval / `milestone_every_steps` of the writes).",
    )
    retention: RetentionConfig | None = Field(
        None,
        description="Checkpoints: keep all for a short window, milestones long; none: the "
        "`lifecycle` rules alone.",
    )

    @model_validator(mode="after")
    def _versioning(self) -> BucketConfig:
        if self.precious and self.versioning is False:
            raise FieldError(
                ("versioning",), False, "a precious bucket is versioned; remove versioning: false"
            )
        if self.replicate and not self.versioned:
            raise FieldError(
                ("replicate",), True, "S3 replicates only versioned buckets; set versioning: true"
            )
        prefixes = [rule.prefix for rule in self.lifecycle]
        for i, prefix in enumerate(prefixes):
            if prefixes.index(prefix) != i:
                raise FieldError(
                    ("lifecycle", i, "prefix"), prefix, "another rule covers this prefix already"
                )
        if self.retention is not None:
            self._check_retention(self.retention)
        return self

    def _check_retention(self, retention: RetentionConfig) -> None:
        runs = retention.runs_prefix
        for i, rule in enumerate(self.lifecycle):
            if overlaps(rule.prefix, runs):
                raise FieldError(
                    ("lifecycle", i, "prefix"),
                    rule.prefix,
                    f"overlaps retention.runs_prefix {runs!r}, which retention expires after "
                    f"{retention.keep_days} days (S3 applies the shortest expiry of overlapping "
                    f"rules); give the rule a prefix outside it, e.g. {retention.milestone_prefix}",
                )
        interval = self.checkpoint_interval_steps
        if interval is None:
            raise FieldError(
                ("checkpoint_interval_steps",),
                MISSING,
                "required with retention: the jobs' checkpoint.interval_steps, which gives the "
                "cost model the milestones' share of the writes",
            )
        if retention.milestone_every_steps % interval:
            raise FieldError(
                ("retention", "milestone_every_steps"),
                retention.milestone_every_steps,
                f"a multiple of checkpoint_interval_steps ({interval}), or most milestones are "
                "never saved",
            )

    @property
    def milestone_share(self) -> float | None:
        """The share of checkpoint writes that are milestones (1/N), with retention."""
        if self.retention is None or not self.checkpoint_interval_steps:
            return None
        return self.checkpoint_interval_steps / self.retention.milestone_every_steps

    @property
    def versioned(self) -> bool:
        return self.precious if self.versioning is None else self.versioning


class ReplicationConfig(Section):
    """Cross-region replication of the buckets marked `replicate`."""

    region: str | None = Field(None, description="Disaster-recovery region of the replicas.")
    replicate_delete_markers: bool = Field(
        False, description="Replicate deletes too (off: a deleted checkpoint survives in DR)."
    )
    time_control: bool = Field(
        False, description="S3 Replication Time Control: 15-minute SLA, billed per GB."
    )

    @field_validator("region")
    @classmethod
    def _region(cls, v: str | None) -> str | None:
        return v if v is None else known_region(v)


_KMS_KEY_ARN = re.compile(
    r"^arn:aws[a-z-]*:kms:(?P<region>[a-z0-9-]+):\d{12}:key/(?P<id>(mrk-)?[0-9a-f-]{32,36})$"
)
_S3_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class AdoptionConfig(Section):
    """Existing buckets this stack takes over instead of creating them empty.

    Disaster recovery: the source stack's replicas in this region become this
    stack's buckets. They are imported (Pulumi `import`), protected and retained,
    so no `pulumi up` or `pulumi destroy` of this stack can delete them.
    """

    kms_key_arn: str | None = Field(
        None,
        description=(
            "KMS key that encrypts the adopted buckets' objects (the source stack's replica "
            "key, output `dr_replicas`); imported and used as this stack's storage key. "
            "Must be set before deploying: without it the stack fails with one config error."
        ),
    )
    buckets: dict[str, str] = Field(
        min_length=1,
        description="Bucket key (in storage.buckets) -> name of the existing bucket to adopt.",
    )

    @field_validator("kms_key_arn")
    @classmethod
    def _key_arn(cls, v: str | None) -> str | None:
        if v is not None and not _KMS_KEY_ARN.match(v):
            raise ValueError(
                "not a KMS key ARN; e.g. arn:aws:kms:us-west-2:123456789012:key/"
                "0123abcd-0123-4567-89ab-0123456789ab (the source's output dr_replicas, or "
                "aws kms describe-key --key-id alias/<prefix>-s3-replica)"
            )
        return v

    @field_validator("buckets")
    @classmethod
    def _names(cls, v: dict[str, str]) -> dict[str, str]:
        for key, name in v.items():
            if not isinstance(name, str) or not _S3_BUCKET_NAME.match(name) or ".." in name:
                raise FieldError((key,), name, "not an S3 bucket name (3-63 lowercase, digits, -)")
        return v

    @model_validator(mode="after")
    def _key_given(self) -> AdoptionConfig:
        # Optional only to say, when it is missing, where to find it.
        if self.kms_key_arn is None:
            raise FieldError(
                ("kms_key_arn",),
                MISSING,
                "required: the KMS key of the adopted buckets' objects (the source's replica "
                "key): the source stack's output dr_replicas, or aws kms describe-key --region "
                "<this region> --key-id alias/<source prefix>-s3-replica --query KeyMetadata.Arn",
            )
        return self

    def _key_match(self) -> re.Match[str]:
        match = _KMS_KEY_ARN.match(self.kms_key_arn or "")
        assert match is not None  # validated above
        return match

    @property
    def kms_key_region(self) -> str:
        return self._key_match()["region"]

    @property
    def kms_key_id(self) -> str:
        """The key's id (the ARN's last part): what Pulumi imports a key by."""
        return self._key_match()["id"]


class TrainingIoConfig(Section):
    """What one training job on the pool asks of storage (`storage.lustre.demand`): the
    bandwidth model of `spec.storage_bandwidth` (reported by `llmp synth`, enforced by the
    `fsx-feeds-gpus` rule). `llmp plan train` prints these figures for a model."""

    tokens_per_second_per_gpu: float = Field(
        gt=0, description="Training throughput per GPU (`llmp plan train` prints it)."
    )
    bytes_per_token: float = Field(
        2,
        gt=0,
        description="Bytes of one token in the shards read (2: uint16 ids, vocabularies "
        "under 65,536; 4: uint32).",
    )
    prefetch_factor: float = Field(
        2,
        ge=1,
        description="The data loader reads this many times what the GPUs consume, so its "
        "prefetch queue refills within a step after a stall (torch's DataLoader default 2).",
    )
    checkpoint_gb: float = Field(
        0, ge=0, description="Size of one checkpoint in GB (`llmp plan train` prints it)."
    )
    checkpoint_interval_minutes: float = Field(
        60, gt=0, description="Minutes between two checkpoints of the job."
    )
    checkpoint_write_minutes: float | None = Field(
        None,
        gt=0,
        description="Minutes a checkpoint may take to write (a synchronous save stalls "
        "every GPU meanwhile); default the interval, which it must not exceed.",
    )
    nodes: int | None = Field(
        None,
        ge=1,
        description="Nodes the job spans, reading and writing at once; default the pool's "
        "desired size (its max size when that is 0).",
    )

    @model_validator(mode="after")
    def _write_within_interval(self) -> TrainingIoConfig:
        write = self.checkpoint_write_minutes
        if write is not None and write > self.checkpoint_interval_minutes:
            raise FieldError(
                ("checkpoint_write_minutes",),
                write,
                f"exceeds checkpoint_interval_minutes ({self.checkpoint_interval_minutes:g}): "
                "the next checkpoint would start before this one is written",
            )
        return self

    @property
    def write_minutes(self) -> float:
        return self.checkpoint_write_minutes or self.checkpoint_interval_minutes


class LustreConfig(Section):
    """FSx for Lustre (PERSISTENT_2) beside a GPU pool, linked to the datasets and
    checkpoints buckets."""

    node_pool: str = Field(description="GPU pool whose subnet (one AZ) holds the file system.")
    storage_capacity_gib: int = Field(1200, description="1200 GiB or a multiple of 2400 GiB.")
    throughput_per_tib: Literal[125, 250, 500, 1000] = Field(
        125, description="MB/s per TiB of storage (PERSISTENT_2 tiers)."
    )
    compression: Literal["LZ4", "NONE"] = Field("LZ4", description="Data compression.")
    metadata_mode: Literal["AUTOMATIC", "USER_PROVISIONED"] = Field(
        "AUTOMATIC", description="Metadata IOPS: sized by FSx, or `metadata_iops`."
    )
    metadata_iops: int | None = Field(
        None, description="With USER_PROVISIONED: 1500, 3000, 6000, or a multiple of 12000."
    )
    lustre_version: Literal["2.15", "2.12"] = Field("2.15", description="Lustre version.")
    datasets_bucket: str = Field("datasets", description="Bucket imported at /datasets.")
    datasets_prefix: str = Field("", description="Prefix of that bucket imported.")
    checkpoints_bucket: str = Field("checkpoints", description="Bucket exported from /checkpoints.")
    checkpoints_prefix: str = Field("", description="Prefix checkpoints are exported to.")
    mount_namespaces: list[str] = Field(
        default_factory=lambda: ["training"],
        description="Namespaces that get a PVC bound to the file system.",
    )
    log_retention_days: int = Field(
        90,
        description="Retention of the file system's log group (failed S3 imports and exports).",
    )
    efa: bool = Field(
        False,
        description="EFA and GPUDirect Storage support (FSx `EfaEnabled`): 700 Gbps per "
        "client instead of 100. Set at creation only (a change replaces the file system) "
        "and it freezes `throughput_per_tib`; needs an EFA pool of an FSx EFA client type "
        "and a capacity in the tier's EFA steps.",
    )
    gpudirect_storage: bool = Field(
        False,
        description="The pool's nodes read through GPUDirect Storage (NVIDIA's GDS driver on "
        "the node, cuFile in the loader): 1200 Gbps per client; needs `efa`.",
    )
    demand: TrainingIoConfig | None = Field(
        None,
        description="What a training job asks of the file system; none: no bandwidth model.",
    )

    @field_validator("storage_capacity_gib")
    @classmethod
    def _capacity(cls, v: int) -> int:
        if v != 1200 and (v <= 0 or v % 2400):
            raise ValueError("PERSISTENT_2 takes 1200 GiB or a multiple of 2400 GiB")
        return v

    _namespaces = field_validator("mount_namespaces")(namespace_names)

    _log_retention = field_validator("log_retention_days")(cloudwatch_retention)

    @model_validator(mode="after")
    def _metadata(self) -> LustreConfig:
        iops = self.metadata_iops
        if self.metadata_mode == "AUTOMATIC" and iops is not None:
            raise FieldError(
                ("metadata_iops",), iops, "only applies with metadata_mode: USER_PROVISIONED"
            )
        if self.metadata_mode == "USER_PROVISIONED":
            valid = iops in (1500, 3000, 6000) or (
                iops is not None and iops % 12000 == 0 and 12000 <= iops <= 192000
            )
            if not valid:
                raise FieldError(
                    ("metadata_iops",),
                    MISSING if iops is None else iops,
                    "USER_PROVISIONED needs 1500, 3000, 6000, or a multiple of 12000 up to 192000",
                )
        if self.gpudirect_storage and not self.efa:
            raise FieldError(
                ("gpudirect_storage",),
                True,
                "GPUDirect Storage runs over EFA: set efa: true (FSx supports GDS on "
                "EFA-enabled file systems only)",
            )
        if self.efa:
            step = catalog().storage.lustre_performance.efa_capacity_step_gib[
                self.throughput_per_tib
            ]
            if self.storage_capacity_gib % step:
                raise FieldError(
                    ("storage_capacity_gib",),
                    self.storage_capacity_gib,
                    f"an EFA-enabled file system at {self.throughput_per_tib} MB/s/TiB takes "
                    f"multiples of {step} GiB (getting-started.html)",
                )
        return self


class ModelWeightsConfig(Section):
    """Model weights served straight from S3 through the Mountpoint for S3 CSI driver."""

    bucket: str = Field("models", description="Bucket holding the model revisions.")
    prefix: str = Field("", description="Prefix mounted (read-only).")
    namespaces: list[str] = Field(
        default_factory=lambda: ["serving"],
        description="Namespaces that get a read-only PVC of the weights.",
    )

    _namespaces = field_validator("namespaces")(namespace_names)


class StorageConfig(Section):
    """S3 buckets, cross-region replication, FSx for Lustre and the CSI volumes."""

    bucket_name_prefix: str = Field(
        description="Globally unique prefix of bucket names: `<prefix>-<bucket>`."
    )
    buckets: dict[str, BucketConfig] = Field(
        default_factory=dict, description="Buckets by name; `logs` receives access logs."
    )
    replication: ReplicationConfig = Field(default_factory=ReplicationConfig)
    lustre: LustreConfig | None = Field(None, description="FSx for Lustre; none: no file system.")
    model_weights: ModelWeightsConfig | None = Field(
        None, description="Mount model weights from S3; none: no Mountpoint volumes."
    )
    adoption: AdoptionConfig | None = Field(
        None,
        description=(
            "Existing buckets to adopt (imported, protected) instead of creating them: "
            "a disaster-recovery stack's replicas (`llmp dr plan` writes it); none: create all."
        ),
    )

    @model_validator(mode="after")
    def _retention_follows_export(self) -> StorageConfig:
        lustre = self.lustre
        for key, bucket in self.buckets.items():
            retention = bucket.retention
            if retention is None:
                continue
            exported = lustre.checkpoints_prefix if lustre is not None else None
            if (
                lustre is not None
                and key == lustre.checkpoints_bucket
                and (retention.runs_prefix != exported)
            ):
                raise FieldError(
                    ("buckets", key, "retention", "runs_prefix"),
                    retention.runs_prefix,
                    f"the file system exports checkpoints to {exported!r} "
                    "(lustre.checkpoints_prefix); retention must expire that prefix, and a "
                    "whole-bucket export cannot be expired apart from its milestones",
                )
        return self

    @field_validator("bucket_name_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not _BUCKET_PREFIX.match(v) or "--" in v:
            raise ValueError(
                "bucket names take lowercase letters, digits and '-': 4 to 40 characters, "
                "e.g. acme-llm-pretrain"
            )
        return v

    @field_validator("buckets")
    @classmethod
    def _keys(cls, v: dict[str, BucketConfig]) -> dict[str, BucketConfig]:
        for key in v:
            if not _BUCKET_KEY.match(key):
                raise FieldError((key,), key, "bucket keys are lowercase letters, digits and '-'")
        if v and "logs" not in v:
            raise ValueError("declare a `logs` bucket: every bucket sends its access logs there")
        if v.get("logs") and v["logs"].replicate:
            raise FieldError(("logs", "replicate"), True, "access logs are not replicated")
        return v

    def bucket_name(self, key: str) -> str:
        """The bucket's physical name: the adopted bucket's, else `<prefix>-<key>`."""
        if self.adoption is not None and key in self.adoption.buckets:
            return self.adoption.buckets[key]
        return f"{self.bucket_name_prefix}-{key}"

    def adopted(self, key: str) -> bool:
        return self.adoption is not None and key in self.adoption.buckets
