"""`tenants`, `addons` and `guardrails`: who may use what, which add-ons run, the limits
the policy pack enforces."""

from __future__ import annotations

import re
import zlib
from collections.abc import Collection
from typing import Literal

from pydantic import Field, field_validator

from spec.base import ROLE_ARN, Section
from spec.errors import FieldError

TENANT_BUCKETS = ("datasets", "checkpoints")
"""The buckets in which a tenant's `s3_prefixes` are granted."""
MODELS_BUCKET = "models"
"""The bucket in which a tenant's `models_prefixes` are granted (promotion publishes there)."""


class GuardrailsConfig(Section):
    """Limits the policy pack enforces on this stack."""

    gpu_budget_usd_per_hour: float | None = Field(
        None,
        gt=0,
        description=(
            "Most the accelerated pools may cost per hour at their max sizes "
            "(catalog prices); none: no cap."
        ),
    )


UID_MIN = 200_000
"""Tenant uids start above the ranges images and distributions hand out (0-65535) and below
the 2^31 that some runtimes treat as signed."""
UID_MAX = 1_999_999_999
_UID_SPAN = 1_000_000
"""Derived uids fall in [UID_MIN, UID_MIN + _UID_SPAN): a clash among a few dozen tenants is
unlikely (about 1 in 2,000 for 50 tenants) and refused by the platform validator."""


SERVING_PRIORITY = "llmp-serving"
TRAINING_PRIORITIES = ("llmp-training-critical", "llmp-training", "llmp-preemptible")
PRIORITY_CLASSES = (SERVING_PRIORITY, *TRAINING_PRIORITIES)
"""The platform's PriorityClasses by name (values and meaning: manifests.scheduling)."""


TENANT_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")
RESERVED_NAMESPACES = frozenset(
    {
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "kueue-system",
        "kubeflow",
        "kubeflow-system",
        "jobset-system",
        "gpu-operator",
        "monitoring",
        "nvsentinel",
        "cert-manager",
    }
)
_S3_PREFIX = re.compile(r"^[A-Za-z0-9!_.'()-]+(/[A-Za-z0-9!_.'()-]+)*/$")


class TenantConfig(Section):
    """One team's share of the cluster (`tenants.<name>`): a namespace, quotas, a queue, a role."""

    gpu_quota: dict[str, int] = Field(
        default_factory=dict,
        description="GPUs per node pool the tenant is guaranteed (Kueue nominal quota).",
    )
    serving_gpus: dict[str, int] = Field(
        default_factory=dict,
        description=(
            "GPUs per node pool for model servers (Deployments): in the namespace quota and "
            "the tenant's Kueue queue, which admits every pod of the namespace and never "
            "lends these to another queue."
        ),
    )
    cpu: int = Field(ge=1, description="vCPUs the namespace may request in total.")
    memory_gib: int = Field(ge=1, description="Memory (GiB) the namespace may request in total.")
    pvcs: int = Field(8, ge=0, description="PersistentVolumeClaims the namespace may hold.")
    admin_role_arn: str | None = Field(
        None,
        description="IAM role mapped to the tenant's Kubernetes group (EKS access entry).",
    )
    s3_prefixes: list[str] = Field(
        default_factory=list,
        description=(
            "Key prefixes (ending in /) the tenant's `training` service account reads and "
            "writes in the datasets and checkpoints buckets."
        ),
    )

    models_prefixes: list[str] = Field(
        default_factory=list,
        description=(
            "Key prefixes (ending in /) the tenant's `training` service account reads and "
            "writes in the models bucket: where its promotion jobs publish revisions, e.g. "
            "revisions/llama-8b/."
        ),
    )
    uid: int | None = Field(
        None,
        ge=UID_MIN,
        le=UID_MAX,
        description=(
            "POSIX uid and gid the tenant's pods run as (admission enforces it) and that own "
            f"its directories on the shared file system; none: {UID_MIN} plus a hash of the "
            "name (stable, so files keep their owner). Set it only to resolve a clash."
        ),
    )
    storage_gib: int = Field(
        2048,
        ge=0,
        description=(
            "Storage (GiB) the namespace's claims may request in total (`requests.storage`; "
            "the file system's and model weights' claims count toward it)."
        ),
    )
    priority_classes: list[str] | None = Field(
        None,
        description=(
            "PriorityClasses the namespace's pods may use (a ResourceQuota refuses others); "
            "none: the training classes, plus llmp-serving where the tenant has serving_gpus."
        ),
    )

    @field_validator("priority_classes")
    @classmethod
    def _priorities(cls, v: list[str] | None) -> list[str] | None:
        for i, name in enumerate(v or []):
            if name not in PRIORITY_CLASSES:
                raise FieldError((i,), name, f"one of {', '.join(PRIORITY_CLASSES)}")
        return v

    def allowed_priorities(self) -> list[str]:
        """The PriorityClasses its pods may use: `priority_classes`, else the training ones
        and, with serving_gpus, llmp-serving."""
        if self.priority_classes is not None:
            return list(self.priority_classes)
        return [*([SERVING_PRIORITY] if self.serving_gpus else []), *TRAINING_PRIORITIES]

    @field_validator("gpu_quota", "serving_gpus")
    @classmethod
    def _quota(cls, v: dict[str, int]) -> dict[str, int]:
        for pool, gpus in v.items():
            if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
                raise FieldError((pool,), gpus, "a GPU count: a whole number, 0 or more")
        return v

    @field_validator("admin_role_arn")
    @classmethod
    def _role(cls, v: str | None) -> str | None:
        if v is not None and not ROLE_ARN.match(v):
            raise ValueError("not an IAM role ARN; e.g. arn:aws:iam::123456789012:role/team")
        return v

    @field_validator("s3_prefixes", "models_prefixes")
    @classmethod
    def _prefixes(cls, v: list[str]) -> list[str]:
        for i, prefix in enumerate(v):
            if not _S3_PREFIX.match(prefix):
                raise FieldError(
                    (i,), prefix, "a key prefix like teams/foundation/ (no *, ending in /)"
                )
        return v


def tenant_uid(name: str, tenant: TenantConfig) -> int:
    """The POSIX uid (and gid) of the tenant's pods and of its files on Lustre: its `uid`,
    else derived from the namespace name alone, so adding or reordering tenants never
    changes whose files are whose."""
    if tenant.uid is not None:
        return tenant.uid
    return UID_MIN + zlib.crc32(name.encode()) % _UID_SPAN


def s3_grants(tenant: TenantConfig, bucket_keys: Collection[str]) -> dict[str, list[str]]:
    """Bucket key -> the key prefixes the tenant's workload role (service account
    `training`) may list, read and write there: its `s3_prefixes` in the datasets and
    checkpoints buckets when the stack has both, its `models_prefixes` in the models bucket
    when it has one. The program builds the role from this; `llmp job` checks against it."""
    grants: dict[str, list[str]] = {}
    if tenant.s3_prefixes and all(b in bucket_keys for b in TENANT_BUCKETS):
        grants |= {b: list(tenant.s3_prefixes) for b in TENANT_BUCKETS}
    if tenant.models_prefixes and MODELS_BUCKET in bucket_keys:
        grants[MODELS_BUCKET] = list(tenant.models_prefixes)
    return grants


class AddonsConfig(Section):
    """Cluster add-ons (Helm charts and operators pinned in the catalog), each on by default."""

    gpu_operator: bool = Field(
        True, description="NVIDIA GPU operator (device plugin, DCGM exporter; no driver/toolkit)."
    )
    mig_strategy: Literal["single", "mixed"] = Field(
        "mixed",
        description=(
            "How the GPU operator's device plugin advertises the MIG partitions of pools with "
            "`mig`: mixed, one resource per profile (`nvidia.com/mig-1g.10gb`), so a pod asks "
            "for the partition it fits in; single, every partition as `nvidia.com/gpu` (one "
            "profile per pool). Cluster-wide (the chart's `mig.strategy`); set only where a "
            "pool has `mig`."
        ),
    )
    efa_device_plugin: bool = Field(True, description="EFA device plugin on EFA nodes.")
    kueue: bool = Field(True, description="Kueue: quotas, queues and preemption for jobs.")
    training_operator: bool = Field(
        True,
        description="Kubeflow Trainer v2 and JobSet (TrainJob on the platform's "
        "ClusterTrainingRuntimes, elastic torchrun).",
    )
    load_balancer_controller: bool = Field(
        True, description="AWS Load Balancer Controller (Pod Identity role)."
    )
    metrics_server: bool = Field(True, description="metrics-server (kubectl top, HPA).")
    kuberay: bool = Field(
        True,
        description="KubeRay operator: the RayJobs of `llmp job` data kinds (data-text, "
        "data-web, data-multimodal), admitted by Kueue as gangs.",
    )
    nvsentinel: bool = Field(
        True,
        description=(
            "NVSentinel: GPU faults (DCGM health, kernel-log XIDs) cordon, taint "
            "(llm-platform/quarantined) and drain the node; EKS auto-repair replaces it. Only "
            "where NVIDIA pools exist and the GPU operator (its DCGM host engine) and monitoring "
            "(the gp3 class of its MongoDB volumes) are on."
        ),
    )
    nvsentinel_max_quarantined_percent: int = Field(
        10,
        ge=1,
        le=100,
        description=(
            "NVSentinel's circuit breaker: it stops quarantining once this share of the "
            "cluster's nodes (system pool included) was cordoned within the window, until a "
            "person resets it; at least one node can always be quarantined."
        ),
    )
    nvsentinel_quarantine_window_minutes: int = Field(
        60,
        ge=1,
        le=1440,
        description=(
            "The circuit breaker's sliding window: cordons older than this no longer count "
            "(longer than a node replacement, so a replaced node's cordon still counts)."
        ),
    )
