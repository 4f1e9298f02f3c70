"""Typed Kueue custom resources (`kueue.x-k8s.io/v1beta2`, the storage version of Kueue 0.19).

Pydantic models with `extra="forbid"`, so a typo in a field is an error here
rather than an object the API server silently prunes. `manifest()` renders the
object as the dict that `kubernetes.apiextensions.CustomResource` applies.

The platform's queueing layout, built by `platform_queues`:

- one **ResourceFlavor per GPU pool** (node label `llm-platform/pool`, the
  accelerator taint tolerated), plus a `cpu` flavor for work without GPUs;
- one **ClusterQueue per tenant** in the cohort `llm-platform`; its nominal
  GPU quota per flavor is the tenant's `gpu_quota`, with the pool's CPU and
  memory in proportion (per-GPU share of the instance);
- a **`spare` ClusterQueue** in the same cohort holding the capacity no tenant
  was promised (pool max size x GPUs minus the quotas): nobody submits to it,
  it lends. So the cohort owns exactly what the pools can supply, tenants
  borrow idle capacity, and reclaim it by preempting borrowers
  (`reclaimWithinCohort: Any`), and within a queue higher priority preempts
  lower (`withinClusterQueue: LowerPriority`);
- one **LocalQueue** per tenant namespace, named `default`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

API_VERSION: Final = "kueue.x-k8s.io/v1beta2"
COHORT = "llm-platform"
SPARE_QUEUE = "spare"
CPU_FLAVOR = "cpu"
LOCAL_QUEUE = "default"
"""The LocalQueue of every tenant namespace (`kueue.x-k8s.io/queue-name: default`)."""
POOL_LABEL = "llm-platform/pool"
PART_OF = {"app.kubernetes.io/part-of": "llm-platform"}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class Metadata(_Model):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=lambda: dict(PART_OF))


class Toleration(_Model):
    key: str
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class ResourceFlavorSpec(_Model):
    node_labels: dict[str, str] = Field(default_factory=dict, alias="nodeLabels")
    tolerations: list[Toleration] = Field(default_factory=list)


class ResourceQuota(_Model):
    name: str
    nominal_quota: str = Field(alias="nominalQuota")
    borrowing_limit: str | None = Field(None, alias="borrowingLimit")
    lending_limit: str | None = Field(None, alias="lendingLimit")


class FlavorQuotas(_Model):
    name: str
    resources: list[ResourceQuota]


class ResourceGroup(_Model):
    covered_resources: list[str] = Field(alias="coveredResources")
    flavors: list[FlavorQuotas]


class BorrowWithinCohort(_Model):
    policy: Literal["Never", "LowerPriority"] = "Never"


class Preemption(_Model):
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = Field(
        "Any", alias="reclaimWithinCohort"
    )
    borrow_within_cohort: BorrowWithinCohort | None = Field(None, alias="borrowWithinCohort")
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = Field(
        "LowerPriority", alias="withinClusterQueue"
    )


class ClusterQueueSpec(_Model):
    cohort_name: str | None = Field(None, alias="cohortName")
    namespace_selector: dict[str, Any] | None = Field(None, alias="namespaceSelector")
    queueing_strategy: Literal["StrictFIFO", "BestEffortFIFO"] = Field(
        "BestEffortFIFO", alias="queueingStrategy"
    )
    resource_groups: list[ResourceGroup] = Field(alias="resourceGroups")
    preemption: Preemption | None = None


class LocalQueueSpec(_Model):
    cluster_queue: str = Field(alias="clusterQueue")


class _Resource(_Model):
    api_version: Literal["kueue.x-k8s.io/v1beta2"] = Field(API_VERSION, alias="apiVersion")
    metadata: Metadata

    def manifest(self) -> dict[str, Any]:
        return self.dump()


class ResourceFlavor(_Resource):
    kind: Literal["ResourceFlavor"] = "ResourceFlavor"
    spec: ResourceFlavorSpec


class ClusterQueue(_Resource):
    kind: Literal["ClusterQueue"] = "ClusterQueue"
    spec: ClusterQueueSpec


class LocalQueue(_Resource):
    kind: Literal["LocalQueue"] = "LocalQueue"
    spec: LocalQueueSpec


# ---------------------------------------------------------------------------
# The platform's layout
# ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PoolCapacity:
    """What one GPU pool supplies at its max size."""

    name: str
    gpu_resource: str
    """`nvidia.com/gpu` or `aws.amazon.com/neuron`."""
    taint_key: str
    gpus: int
    """GPUs per node x max nodes."""
    cpu_per_gpu: float
    memory_gib_per_gpu: float


@dataclass(frozen=True, kw_only=True)
class TenantShare:
    name: str
    gpu_quota: dict[str, int]
    cpu: int
    """vCPUs for work without GPUs (the `cpu` flavor), and the namespace's cap."""
    memory_gib: int


def flavor_name(pool: str) -> str:
    return f"pool-{pool}"


def resource_flavors(pools: list[PoolCapacity]) -> list[ResourceFlavor]:
    """A flavor per GPU pool (its node label, its taint tolerated) and a `cpu` flavor."""
    flavors = [
        ResourceFlavor(
            metadata=Metadata(name=flavor_name(p.name)),
            spec=ResourceFlavorSpec(
                node_labels={POOL_LABEL: p.name},
                tolerations=[Toleration(key=p.taint_key, operator="Exists", effect="NoSchedule")],
            ),
        )
        for p in pools
    ]
    cpu = ResourceFlavor(metadata=Metadata(name=CPU_FLAVOR), spec=ResourceFlavorSpec())
    return [cpu, *flavors]


def _cpu(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{int(value * 1000)}m"


def _gib(value: float) -> str:
    return f"{int(value)}Gi" if float(value).is_integer() else f"{int(value * 1024)}Mi"


def _group(
    pools: list[PoolCapacity], gpus: dict[str, int], cpu: int, memory_gib: int
) -> list[ResourceGroup]:
    """One group covering cpu, memory and every GPU resource: the `cpu` flavor first (no
    GPUs, so GPU work moves on to a pool flavor), then a flavor per pool."""
    gpu_resources = sorted({p.gpu_resource for p in pools})
    covered = ["cpu", "memory", *gpu_resources]

    def quotas(cpu_q: str, mem_q: str, gpu: dict[str, int]) -> list[ResourceQuota]:
        return [
            ResourceQuota(name="cpu", nominal_quota=cpu_q),
            ResourceQuota(name="memory", nominal_quota=mem_q),
            *(ResourceQuota(name=r, nominal_quota=str(gpu.get(r, 0))) for r in gpu_resources),
        ]

    flavors = [FlavorQuotas(name=CPU_FLAVOR, resources=quotas(str(cpu), f"{memory_gib}Gi", {}))]
    for p in pools:
        n = gpus.get(p.name, 0)
        flavors.append(
            FlavorQuotas(
                name=flavor_name(p.name),
                resources=quotas(
                    _cpu(n * p.cpu_per_gpu), _gib(n * p.memory_gib_per_gpu), {p.gpu_resource: n}
                ),
            )
        )
    return [ResourceGroup(covered_resources=covered, flavors=flavors)]


def tenant_cluster_queue(tenant: TenantShare, pools: list[PoolCapacity]) -> ClusterQueue:
    """The tenant's ClusterQueue: its nominal share, borrowing from the cohort, preemption."""
    return ClusterQueue(
        metadata=Metadata(name=tenant.name),
        spec=ClusterQueueSpec(
            cohort_name=COHORT,
            # Only the tenant's own namespace may point a LocalQueue at it.
            namespace_selector={"matchLabels": {"kubernetes.io/metadata.name": tenant.name}},
            resource_groups=_group(pools, tenant.gpu_quota, tenant.cpu, tenant.memory_gib),
            preemption=Preemption(
                reclaim_within_cohort="Any",
                borrow_within_cohort=BorrowWithinCohort(policy="LowerPriority"),
                within_cluster_queue="LowerPriority",
            ),
        ),
    )


def spare_cluster_queue(tenants: list[TenantShare], pools: list[PoolCapacity]) -> ClusterQueue:
    """What no tenant was promised, lent to the cohort; no namespace may submit to it."""
    spare = {p.name: p.gpus - sum(t.gpu_quota.get(p.name, 0) for t in tenants) for p in pools}
    return ClusterQueue(
        metadata=Metadata(name=SPARE_QUEUE),
        spec=ClusterQueueSpec(
            cohort_name=COHORT,
            # No namespace carries this label (tenants cannot label namespaces).
            namespace_selector={"matchLabels": {"llm-platform/queue": SPARE_QUEUE}},
            resource_groups=_group(pools, spare, 0, 0),
        ),
    )


def local_queue(namespace: str) -> LocalQueue:
    """The tenant namespace's LocalQueue, pointing at the tenant's ClusterQueue."""
    return LocalQueue(
        metadata=Metadata(name=LOCAL_QUEUE, namespace=namespace),
        spec=LocalQueueSpec(cluster_queue=namespace),
    )
