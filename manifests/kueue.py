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
- one **LocalQueue** per tenant namespace, named `default`;
- where some pool is **elastic** (the Cluster Autoscaler sizes it), one
  **AdmissionCheck** of Kueue's ProvisioningRequest controller with its
  **ProvisioningRequestConfig** (`provisioning_check`). Tenant ClusterQueues apply it
  only on the elastic pools' flavors (`admissionChecksStrategy.admissionChecks[].onFlavors`):
  a job placed there reserves quota, then Kueue asks the autoscaler for all of its GPU
  nodes in one ProvisioningRequest (`best-effort-atomic-scale-up`) and admits the job
  once they were granted. On a fixed pool quota alone admits, since the nodes are there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from manifests.jobs.trainjob import NODE, node_pod_template
from spec.labels import POOL_LABEL, TEAM_LABEL

API_VERSION: Final = "kueue.x-k8s.io/v1beta2"
COHORT = "llm-platform"
SPARE_QUEUE = "spare"
CPU_FLAVOR = "cpu"
LOCAL_QUEUE = "default"
"""The LocalQueue of every tenant namespace (`kueue.x-k8s.io/queue-name: default`)."""
PROVISIONING_CONTROLLER: Final = "kueue.x-k8s.io/provisioning-request"
"""Kueue's built-in ProvisioningRequest admission check controller (GA since 0.14)."""
ATOMIC_SCALE_UP: Final = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
"""Cluster Autoscaler's class that scales one node group by a whole request or not at all."""
PROVISIONING_CHECK = "gpu-provisioning"
PROVISIONING_CONFIG = "gpu-atomic-scale-up"
PART_OF = {"app.kubernetes.io/part-of": "llm-platform"}


_DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
NETWORK_LAYER_LABEL: Final = "topology.k8s.aws/network-node-layer-"
"""EKS's node labels of the EC2 network topology: `-1` the top of the hierarchy (the least
selective), `-3` the bottom on most types, `-4` the bottom on types with four layers."""
REQUIRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-unconstrained-topology"


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
    node_labels: dict[str, str] = Field(default_factory=dict, alias="nodeLabels", max_length=8)
    tolerations: list[Toleration] = Field(default_factory=list, max_length=8)
    topology_name: str | None = Field(
        None, alias="topologyName", pattern=_DNS_SUBDOMAIN_PATTERN, max_length=253
    )
    """A TAS flavor: Kueue places the pods of the workloads it admits here on nodes of one
    domain of this Topology (kueue.x-k8s.io/v1beta2 at 0.19; at least one node label)."""

    @model_validator(mode="after")
    def _labelled(self) -> ResourceFlavorSpec:
        if self.topology_name is not None and not self.node_labels:
            raise ValueError("at least one nodeLabel is required when topology is set")
        return self


_LABEL_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)


class TopologyLevel(_Model):
    node_label: str = Field(alias="nodeLabel", pattern=_LABEL_KEY, min_length=1, max_length=316)


class TopologySpec(_Model):
    levels: list[TopologyLevel] = Field(min_length=1, max_length=16)

    @model_validator(mode="after")
    def _levels(self) -> TopologySpec:
        labels = [level.node_label for level in self.levels]
        if len(set(labels)) != len(labels):
            raise ValueError("levels must be unique")
        if HOSTNAME_LABEL in labels[:-1]:
            raise ValueError(f"{HOSTNAME_LABEL} can only be the lowest level of topology")
        return self


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
    admission_checks_strategy: AdmissionChecksStrategy | None = Field(
        None, alias="admissionChecksStrategy"
    )


class LocalQueueSpec(_Model):
    cluster_queue: str = Field(alias="clusterQueue")


_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class AdmissionCheckStrategyRule(_Model):
    """One admission check of a ClusterQueue and the flavors it runs for (all when empty)."""

    name: str = Field(pattern=_DNS_SUBDOMAIN, max_length=253)
    on_flavors: list[str] = Field(default_factory=list, alias="onFlavors", max_length=64)


class AdmissionChecksStrategy(_Model):
    admission_checks: list[AdmissionCheckStrategyRule] = Field(
        alias="admissionChecks", min_length=1, max_length=64
    )


class AdmissionCheckParametersReference(_Model):
    api_group: Literal["kueue.x-k8s.io"] = Field("kueue.x-k8s.io", alias="apiGroup")
    kind: Literal["ProvisioningRequestConfig"] = "ProvisioningRequestConfig"
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)


class AdmissionCheckSpec(_Model):
    controller_name: str = Field(alias="controllerName", min_length=1, max_length=253)
    parameters: AdmissionCheckParametersReference | None = None


class ProvisioningRequestRetryStrategy(_Model):
    """Kueue's retries of a ProvisioningRequest that failed or whose booking expired: the
    workload's quota is released, and it is requeued after a backoff of about
    base x 2^(n-1) seconds, capped at max; after `backoffLimitCount` retries Kueue
    deactivates the workload."""

    backoff_limit_count: int = Field(alias="backoffLimitCount", ge=0)
    backoff_base_seconds: int = Field(alias="backoffBaseSeconds", ge=0)
    backoff_max_seconds: int = Field(alias="backoffMaxSeconds", ge=0)


class ProvisioningRequestConfigSpec(_Model):
    provisioning_class_name: str = Field(
        alias="provisioningClassName", pattern=_DNS_SUBDOMAIN, min_length=1, max_length=253
    )
    parameters: dict[str, str] | None = Field(None, max_length=100)
    managed_resources: list[str] = Field(
        default_factory=list, alias="managedResources", max_length=100
    )
    retry_strategy: ProvisioningRequestRetryStrategy | None = Field(None, alias="retryStrategy")
    pod_set_merge_policy: (
        Literal["IdenticalPodTemplates", "IdenticalWorkloadSchedulingRequirements"] | None
    ) = Field(None, alias="podSetMergePolicy")


class _Resource(_Model):
    api_version: Literal["kueue.x-k8s.io/v1beta2"] = Field(API_VERSION, alias="apiVersion")
    metadata: Metadata

    def manifest(self) -> dict[str, Any]:
        return self.dump()


class ResourceFlavor(_Resource):
    kind: Literal["ResourceFlavor"] = "ResourceFlavor"
    spec: ResourceFlavorSpec


class Topology(_Resource):
    kind: Literal["Topology"] = "Topology"
    spec: TopologySpec


class ClusterQueue(_Resource):
    kind: Literal["ClusterQueue"] = "ClusterQueue"
    spec: ClusterQueueSpec


class LocalQueue(_Resource):
    kind: Literal["LocalQueue"] = "LocalQueue"
    spec: LocalQueueSpec


class AdmissionCheck(_Resource):
    kind: Literal["AdmissionCheck"] = "AdmissionCheck"
    spec: AdmissionCheckSpec


class ProvisioningRequestConfig(_Resource):
    kind: Literal["ProvisioningRequestConfig"] = "ProvisioningRequestConfig"
    spec: ProvisioningRequestConfigSpec


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
    elastic: bool = False
    """The Cluster Autoscaler sizes the pool: its nodes are provisioned before admission."""
    team: str = ""
    """On a shared cluster, the team stack that owns the pool: its flavor is named after the
    team and also selects the team's label, so two teams' pools of one name stay apart."""
    topology_layers: int | None = None
    """Topology Aware Scheduling on the pool: its flavor names the Topology of this many EC2
    network layers (`network_topology`); None: quota only."""
    partitions: dict[str, int] = field(default_factory=dict)
    """MIG: resource -> instances per GPU the device plugin advertises
    (`nvidia.com/mig-1g.10gb: 7`); empty: whole GPUs as `gpu_resource`."""

    @property
    def flavor(self) -> str:
        return f"{self.team}-{flavor_name(self.name)}" if self.team else flavor_name(self.name)

    @property
    def topology(self) -> str | None:
        return topology_name(self.topology_layers) if self.topology_layers else None

    @property
    def per_gpu(self) -> dict[str, int]:
        """What one of the pool's GPUs adds to its flavor's quota, by resource."""
        return dict(self.partitions) or {self.gpu_resource: 1}


@dataclass(frozen=True, kw_only=True)
class Scheduling:
    """The cluster-wide names a ClusterQueue attaches to: the shared stack's on a shared
    cluster (its `scheduling` output), these defaults on a stack that owns its cluster."""

    cohort: str = COHORT
    cpu_flavor: str = CPU_FLAVOR
    provisioning_check: str = PROVISIONING_CHECK


@dataclass(frozen=True, kw_only=True)
class TenantShare:
    name: str
    gpu_quota: dict[str, int]
    """GPUs per pool the tenant's queue holds (its nominal quota)."""
    cpu: int
    """vCPUs for work without GPUs (the `cpu` flavor), and the namespace's cap."""
    memory_gib: int
    unlent_gpus: dict[str, int] = field(default_factory=dict)
    """GPUs per pool of `gpu_quota` the queue never lends to the cohort (the model servers'
    `serving_gpus`: a replica KEDA adds must not wait for a borrower's preemption)."""


def flavor_name(pool: str) -> str:
    return f"pool-{pool}"


def topology_name(layers: int) -> str:
    return f"ec2-network-{layers}"


def network_levels(layers: int) -> list[str]:
    """The Topology's levels for a type of `layers` EC2 network layers: EKS's labels from the
    top of the network down, then the node. Every level must be on every node (Kueue leaves
    a node without one out of the flavor), so a Topology has exactly the type's layers; the
    node level last lets Kueue pin each pod to its node and honour the nodes' taints."""
    return [f"{NETWORK_LAYER_LABEL}{i}" for i in range(1, layers + 1)] + [HOSTNAME_LABEL]


def topologies(pools: list[PoolCapacity]) -> list[Topology]:
    """One Topology per depth of network the topology-aware pools have (3 or 4 layers)."""
    depths = sorted({p.topology_layers for p in pools if p.topology_layers})
    return [
        Topology(
            metadata=Metadata(name=topology_name(n)),
            spec=TopologySpec(
                levels=[TopologyLevel(node_label=label) for label in network_levels(n)]
            ),
        )
        for n in depths
    ]


def resource_flavors(pools: list[PoolCapacity], cpu: bool = True) -> list[ResourceFlavor]:
    """A flavor per GPU pool (its node label, its taint tolerated, its Topology where the
    pool is topology-aware) and, unless `cpu` is false (a team stack: the shared stack owns
    it), a `cpu` flavor."""
    flavors = [
        ResourceFlavor(
            metadata=Metadata(name=p.flavor),
            spec=ResourceFlavorSpec(
                node_labels={POOL_LABEL: p.name, **({TEAM_LABEL: p.team} if p.team else {})},
                tolerations=[Toleration(key=p.taint_key, operator="Exists", effect="NoSchedule")],
                topology_name=p.topology,
            ),
        )
        for p in pools
    ]
    if not cpu:
        return flavors
    return [ResourceFlavor(metadata=Metadata(name=CPU_FLAVOR), spec=ResourceFlavorSpec()), *flavors]


def _cpu(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{int(value * 1000)}m"


def _gib(value: float) -> str:
    return f"{int(value)}Gi" if float(value).is_integer() else f"{int(value * 1024)}Mi"


def _group(
    pools: list[PoolCapacity],
    gpus: dict[str, int],
    cpu: int,
    memory_gib: int,
    cpu_flavor: str = CPU_FLAVOR,
    unlent: dict[str, int] | None = None,
) -> list[ResourceGroup]:
    """One group covering cpu, memory and every GPU resource: the `cpu` flavor first (no
    GPUs, so GPU work moves on to a pool flavor), then a flavor per pool. `unlent`: GPUs
    per pool the queue keeps from the cohort (a lending limit on the pool's GPUs)."""
    gpu_resources = sorted({r for p in pools for r in p.per_gpu})
    covered = ["cpu", "memory", *gpu_resources]
    kept = unlent or {}

    def quotas(
        cpu_q: str, mem_q: str, gpu: dict[str, int], lend: dict[str, int] | None = None
    ) -> list[ResourceQuota]:
        return [
            ResourceQuota(name="cpu", nominal_quota=cpu_q),
            ResourceQuota(name="memory", nominal_quota=mem_q),
            *(
                ResourceQuota(
                    name=r,
                    nominal_quota=str(gpu.get(r, 0)),
                    lending_limit=str(lend[r]) if lend and r in lend else None,
                )
                for r in gpu_resources
            ),
        ]

    flavors = [FlavorQuotas(name=cpu_flavor, resources=quotas(str(cpu), f"{memory_gib}Gi", {}))]
    for p in pools:
        n = gpus.get(p.name, 0)
        keep = min(kept.get(p.name, 0), n)
        flavors.append(
            FlavorQuotas(
                name=p.flavor,
                resources=quotas(
                    _cpu(n * p.cpu_per_gpu),
                    _gib(n * p.memory_gib_per_gpu),
                    {r: n * each for r, each in p.per_gpu.items()},
                    {r: (n - keep) * each for r, each in p.per_gpu.items()} if keep else None,
                ),
            )
        )
    return [ResourceGroup(covered_resources=covered, flavors=flavors)]


def elastic_flavors(pools: list[PoolCapacity]) -> list[str]:
    return [p.flavor for p in pools if p.elastic]


def provisioning_check(
    pools: list[PoolCapacity], resources: Sequence[str] = ()
) -> tuple[AdmissionCheck, ProvisioningRequestConfig] | None:
    """The provisioning admission check and its configuration, where some pool is elastic.

    - `best-effort-atomic-scale-up`: the autoscaler grows the one node group the job's
      flavor selects by all the nodes the request needs, or by none. On AWS that is an
      all-or-nothing *decision* (the AWS provider has no atomic resize, so EC2 may still
      deliver part of a Spot request; Kueue's waitForPodsReady, which counts from this
      admission, then evicts and requeues).
    - `managedResources`: the pools' accelerator resources, so only pod sets that request
      them go into the request (a CPU-only launcher needs no new node).
    - `podSetMergePolicy: IdenticalWorkloadSchedulingRequirements`: a PyTorchJob's master
      and workers, which ask for the same node shape, become one pod template.
    - `retryStrategy`: Kueue's defaults (3 retries, 60 s doubling to 30 min), written out.
      The autoscaler retries a request it cannot fill yet by itself, keeping it pending
      (the job keeps its reserved quota); a request fails only when it expires or its pods
      cannot be created, and then the job is requeued with this backoff, and deactivated
      (`spec.active: false`) after the third.

    `resources`: accelerator resources to manage beside the elastic pools' own (a shared
    stack's check serves the elastic pools team stacks bring).
    """
    resources = sorted({r for p in pools if p.elastic for r in p.per_gpu} | set(resources))
    if not resources:
        return None
    config = ProvisioningRequestConfig(
        metadata=Metadata(name=PROVISIONING_CONFIG),
        spec=ProvisioningRequestConfigSpec(
            provisioning_class_name=ATOMIC_SCALE_UP,
            managed_resources=resources,
            retry_strategy=ProvisioningRequestRetryStrategy(
                backoff_limit_count=3, backoff_base_seconds=60, backoff_max_seconds=1800
            ),
            pod_set_merge_policy="IdenticalWorkloadSchedulingRequirements",
        ),
    )
    check = AdmissionCheck(
        metadata=Metadata(name=PROVISIONING_CHECK),
        spec=AdmissionCheckSpec(
            controller_name=PROVISIONING_CONTROLLER,
            parameters=AdmissionCheckParametersReference(name=config.metadata.name),
        ),
    )
    return check, config


def _checks_on_elastic_flavors(
    pools: list[PoolCapacity], check: str = PROVISIONING_CHECK
) -> AdmissionChecksStrategy | None:
    """The provisioning check on the elastic pools' flavors only: on a fixed pool the nodes
    exist, and quota alone admits."""
    flavors = elastic_flavors(pools)
    if not flavors:
        return None
    return AdmissionChecksStrategy(
        admission_checks=[AdmissionCheckStrategyRule(name=check, on_flavors=flavors)]
    )


def tenant_cluster_queue(
    tenant: TenantShare, pools: list[PoolCapacity], scheduling: Scheduling | None = None
) -> ClusterQueue:
    """The tenant's ClusterQueue: its nominal share, borrowing from the cohort, preemption,
    and the provisioning check on elastic flavors."""
    names = scheduling or Scheduling()
    return ClusterQueue(
        metadata=Metadata(name=tenant.name),
        spec=ClusterQueueSpec(
            cohort_name=names.cohort,
            # Only the tenant's own namespace may point a LocalQueue at it.
            namespace_selector={"matchLabels": {"kubernetes.io/metadata.name": tenant.name}},
            resource_groups=_group(
                pools,
                tenant.gpu_quota,
                tenant.cpu,
                tenant.memory_gib,
                names.cpu_flavor,
                tenant.unlent_gpus,
            ),
            preemption=Preemption(
                reclaim_within_cohort="Any",
                borrow_within_cohort=BorrowWithinCohort(policy="LowerPriority"),
                within_cluster_queue="LowerPriority",
            ),
            admission_checks_strategy=_checks_on_elastic_flavors(pools, names.provisioning_check),
        ),
    )


def spare_cluster_queue(
    tenants: list[TenantShare],
    pools: list[PoolCapacity],
    scheduling: Scheduling | None = None,
    name: str = SPARE_QUEUE,
) -> ClusterQueue:
    """What no tenant was promised, lent to the cohort; no namespace may submit to it."""
    names = scheduling or Scheduling()
    spare = {p.name: p.gpus - sum(t.gpu_quota.get(p.name, 0) for t in tenants) for p in pools}
    return ClusterQueue(
        metadata=Metadata(name=name),
        spec=ClusterQueueSpec(
            cohort_name=names.cohort,
            # No namespace carries this label (tenants cannot label namespaces).
            namespace_selector={"matchLabels": {"llm-platform/queue": name}},
            resource_groups=_group(pools, spare, 0, 0, names.cpu_flavor),
        ),
    )


def platform_queues(
    pools: list[PoolCapacity], tenants: list[TenantShare]
) -> tuple[list[ResourceFlavor], list[ClusterQueue]]:
    """The flavors and ClusterQueues a stack declares: a flavor per pool and `cpu`, a queue
    per tenant, and the `spare` queue lending what no tenant was promised."""
    queues = [tenant_cluster_queue(t, pools) for t in tenants]
    return resource_flavors(pools), [*queues, spare_cluster_queue(tenants, pools)]


def local_queue(namespace: str) -> LocalQueue:
    """The tenant namespace's LocalQueue, pointing at the tenant's ClusterQueue."""
    return LocalQueue(
        metadata=Metadata(name=LOCAL_QUEUE, namespace=namespace),
        spec=LocalQueueSpec(cluster_queue=namespace),
    )


# ---------------------------------------------------------------------------
# Resources Kueue ignores, and its admission rule
# ---------------------------------------------------------------------------

EXCLUDED_RESOURCE_PREFIXES: Final = ("vpc.amazonaws.com/efa", "hugepages-")
"""Kueue's `resources.excludeResourcePrefixes`: requested by pods, but no queue's business.

Kueue refuses a workload that requests a resource its ClusterQueue does not cover
("resource ... unavailable in ClusterQueue"), so every resource a pod may request is
either covered by the queues or excluded here:

- `nvidia.com/gpu`, `aws.amazon.com/neuron`, `cpu`, `memory`: **covered**. They are what
  tenants share and borrow; quotas come from the pools (GPUs) and the tenant config.
- `vpc.amazonaws.com/efa`: **excluded**. EFA interfaces are a per-node device bound 1:1
  to the pool's nodes: a job pinned to a pool (every job is, by node affinity and the
  flavor's node label) cannot take more nodes than its GPU quota admits, and the kubelet
  refuses a pod asking for more interfaces than its node has. Covering it would add a
  second quota that can only ever agree with the GPU one, or disagree wrongly (a job
  that uses 4 of 8 GPUs and every interface).
- `hugepages-*`: **excluded**. Memory the node reserved at boot for libfabric; like EFA,
  bound per node and enforced by the kubelet, and its size is the AMI's, not ours.
"""


class AdmissionError(ValueError):
    """A manifest Kueue would not know how to admit (no pod sets)."""


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: dict[str, Fraction] = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)$")


def quantity(value: str | int | float) -> Fraction:
    """A Kubernetes resource quantity ("5120Mi", "163", "500m", "1e3") as an exact number."""
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        raise AdmissionError(f"{value!r} is not a Kubernetes quantity")
    number, suffix = Fraction(match.group(1)), match.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        exponent = int(suffix[1:])
        return number * 10**exponent if exponent >= 0 else number / 10**-exponent
    return number * _DECIMAL[suffix]


def pod_requests(pod_spec: dict[str, Any]) -> dict[str, Fraction]:
    """What one pod requests, as Kueue counts it: each container's requests, its limits
    where a request is missing; summed over containers, at least any init container's;
    plus the pod's overhead."""

    def of(container: dict[str, Any]) -> dict[str, Fraction]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {name: quantity(v) for name, v in merged.items()}

    total: dict[str, Fraction] = {}
    for container in pod_spec.get("containers") or []:
        for name, amount in of(container).items():
            total[name] = total.get(name, Fraction(0)) + amount
    for container in pod_spec.get("initContainers") or []:
        for name, amount in of(container).items():
            total[name] = max(total.get(name, Fraction(0)), amount)
    for name, amount in (pod_spec.get("overhead") or {}).items():
        total[name] = total.get(name, Fraction(0)) + quantity(amount)
    return total


@dataclass(frozen=True)
class PodSet:
    """A group of identical pods of one workload (Kueue's podSets)."""

    name: str
    count: int
    template: dict[str, Any]
    """The pod template: {"metadata": ..., "spec": ...}."""

    def requests(self, excluded: tuple[str, ...] = ()) -> dict[str, Fraction]:
        """Per pod, without the excluded prefixes and zero quantities."""
        return {
            name: amount
            for name, amount in pod_requests(self.template.get("spec") or {}).items()
            if amount and not name.startswith(tuple(excluded))
        }


def pod_sets(manifest: dict[str, Any], runtimes: Sequence[dict[str, Any]] = ()) -> list[PodSet]:
    """The pod sets Kueue makes of a workload: a TrainJob's replicated job `node` as its
    runtime (one of `runtimes`) makes it (count = numNodes), a PyTorchJob's replica types
    (count = replicas), a batch/v1 Job's pods (count = parallelism), one LeaderWorkerSet
    group's leader and workers, a RayJob's head, worker groups and submitter, or the one
    pod of a Pod or of a Deployment's replica."""
    kind, spec = manifest.get("kind"), manifest.get("spec") or {}
    if kind == "TrainJob":
        # Kueue 0.19.2 (trainjob.PodSets) runs the Trainer's own runtime framework to build
        # the JobSet, and takes one pod set per replicated job.
        name = spec["runtimeRef"]["name"]
        runtime = next((r for r in runtimes if r["metadata"]["name"] == name), None)
        if runtime is None:
            raise AdmissionError(f"TrainJob names runtime {name}, which the cluster lacks")
        count = int((spec.get("trainer") or {}).get("numNodes", 1))
        return [PodSet(name=NODE, count=count, template=node_pod_template(manifest, runtime))]
    if kind == "PyTorchJob":
        replicas = spec.get("pytorchReplicaSpecs") or {}
        return [
            PodSet(name=rtype.lower(), count=int(r.get("replicas", 1)), template=r["template"])
            for rtype, r in replicas.items()
        ]
    if kind == "Job":
        count = int(spec.get("parallelism", 1))
        return [PodSet(name="main", count=count, template=spec["template"])]
    if kind == "LeaderWorkerSet":
        # One workload per group (Kueue's leaderworkerset podSets): the leader, then the
        # size - 1 workers.
        group = spec["leaderWorkerTemplate"]
        size = int(group.get("size", 1))
        if "leaderTemplate" not in group:
            return [PodSet(name="main", count=size, template=group["workerTemplate"])]
        return [
            PodSet(name="leader", count=1, template=group["leaderTemplate"]),
            PodSet(name="worker", count=size - 1, template=group["workerTemplate"]),
        ]
    if kind == "RayJob":
        return ray_job_pod_sets(spec)
    if kind == "Deployment":
        # Kueue's pod integration admits each replica's pod as a workload of its own (a
        # model server in a tenant namespace, where every pod is Kueue's).
        return [PodSet(name="main", count=1, template=spec["template"])]
    if kind == "Pod":
        return [PodSet(name="main", count=1, template={"spec": spec})]
    raise AdmissionError(f"{kind} is not a kind this platform submits to Kueue")


RAY_SUBMITTER_DEFAULT: Final = {
    "containers": [
        {
            "name": "ray-job-submitter",
            "resources": {
                "requests": {"cpu": "500m", "memory": "200Mi"},
                "limits": {"cpu": "1", "memory": "1Gi"},
            },
        }
    ]
}
"""The submitter pod Kueue counts when a RayJob gives no template (v0.19.2
rayjob.getSubmitterTemplate, copied from KubeRay's default submitter container)."""
RAY_AUTOSCALER_DEFAULT: Final = {
    "name": "autoscaler",
    "resources": {
        "requests": {"cpu": "500m", "memory": "512Mi"},
        "limits": {"cpu": "500m", "memory": "512Mi"},
    },
}
"""The autoscaler sidecar Kueue adds to the head pod set with in-tree autoscaling on."""


def ray_job_pod_sets(spec: dict[str, Any]) -> list[PodSet]:
    """A RayJob's pod sets as Kueue 0.19.2 builds them (raycluster.BuildPodSets, then
    rayjob.addSubmitterPodSet): `head` (1; with Ray's in-tree autoscaler its sidecar too),
    each worker group by its groupName (replicas, default 1, times numOfHosts), and in
    K8sJobMode (the default) `submitter` (1): the RayJob's submitterPodTemplate, or KubeRay's
    default one. In SidecarMode the submitter is a container of the head instead."""
    cluster = spec.get("rayClusterSpec") or {}
    head_template = dict(cluster["headGroupSpec"]["template"])
    mode = spec.get("submissionMode", "K8sJobMode")
    extra: list[dict[str, Any]] = []
    if cluster.get("enableInTreeAutoscaling"):
        extra.append(RAY_AUTOSCALER_DEFAULT)
    if mode == "SidecarMode":
        extra.append(RAY_SUBMITTER_DEFAULT["containers"][0])
    if extra:
        head_spec = dict(head_template.get("spec") or {})
        head_spec["containers"] = [*(head_spec.get("containers") or []), *extra]
        head_template["spec"] = head_spec
    sets = [PodSet(name="head", count=1, template=head_template)]
    for group in cluster.get("workerGroupSpecs") or []:
        hosts = int(group.get("numOfHosts", 1))
        count = int(group.get("replicas", 1)) * max(1, hosts)
        sets.append(PodSet(name=group["groupName"], count=count, template=group["template"]))
    if mode == "K8sJobMode":
        submitter = spec.get("submitterPodTemplate") or {"spec": RAY_SUBMITTER_DEFAULT}
        sets.append(PodSet(name="submitter", count=1, template=submitter))
    return sets


def _selector_terms(pod_spec: dict[str, Any], keys: set[str]) -> list[list[dict[str, Any]]]:
    """The pod's node constraints on `keys` only, as OR-ed terms of AND-ed requirements."""
    base = [
        {"key": k, "operator": "In", "values": [v]}
        for k, v in (pod_spec.get("nodeSelector") or {}).items()
        if k in keys
    ]
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = [
        [e for e in term.get("matchExpressions") or [] if e["key"] in keys]
        for term in required.get("nodeSelectorTerms") or []
    ]
    return [base + term for term in terms] if terms else [base]


def _matches(requirement: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = requirement["key"], requirement["operator"], requirement.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False  # Gt, Lt: numeric labels, which no flavor of ours carries


def flavor_selects(flavor: ResourceFlavor, pod_spec: dict[str, Any]) -> bool:
    """Kueue's flavor fit: the pod's node selector and required node affinity, cut to
    the flavor's label keys, match its labels (an empty term matches any flavor)."""
    labels = flavor.spec.node_labels
    terms = _selector_terms(pod_spec, set(labels))
    return any(all(_matches(r, labels) for r in term) for term in terms)


# ---------------------------------------------------------------------------
# Topology Aware Scheduling: what a pod set asks, and where Kueue would place it
# ---------------------------------------------------------------------------

TopologyMode = Literal["required", "preferred", "unconstrained"]
LEVEL_NAMES: Final = {
    **{f"layer-{i}": f"{NETWORK_LAYER_LABEL}{i}" for i in range(1, 5)},
    "node": HOSTNAME_LABEL,
}
"""The job file's short names of the Topology's levels."""


@dataclass(frozen=True)
class TopologyRequest:
    """What a pod set asks of Kueue's Topology Aware Scheduling, as its pod template's
    annotations say it (Kueue 0.19: `podset-required-topology`, `podset-preferred-topology`
    with a level's node label, `podset-unconstrained-topology: "true"`).

    - required: every pod in one domain of `level`, or the workload waits;
    - preferred: one domain of `level` if one has room, else of the level above, and so on;
      at the top, spread over as few domains as hold it;
    - unconstrained: anywhere on the flavor's nodes (Kueue still counts each node's room).
    """

    mode: TopologyMode
    level: str | None = None
    """A level's node label (`topology.k8s.aws/network-node-layer-3`); None when unconstrained."""

    def __post_init__(self) -> None:
        if (self.level is None) != (self.mode == "unconstrained"):
            takes = "a level" if self.level is None else "no level"
            raise ValueError(f"a {self.mode} topology request takes {takes}")

    def annotations(self) -> dict[str, str]:
        if self.mode == "unconstrained":
            return {UNCONSTRAINED_TOPOLOGY: "true"}
        assert self.level is not None
        key = REQUIRED_TOPOLOGY if self.mode == "required" else PREFERRED_TOPOLOGY
        return {key: self.level}

    @classmethod
    def of(cls, template: dict[str, Any]) -> TopologyRequest | None:
        """The request of a pod template, or None where it asks for none."""
        notes = (template.get("metadata") or {}).get("annotations") or {}
        if REQUIRED_TOPOLOGY in notes:
            return cls("required", notes[REQUIRED_TOPOLOGY])
        if PREFERRED_TOPOLOGY in notes:
            return cls("preferred", notes[PREFERRED_TOPOLOGY])
        if str(notes.get(UNCONSTRAINED_TOPOLOGY, "")).lower() == "true":
            return cls("unconstrained")
        return None

    @classmethod
    def parse(cls, mode: TopologyMode, level: str | None) -> TopologyRequest:
        """From the job file's words: a mode and a short level name (`layer-3`, `node`)."""
        if level is None:
            return cls(mode)
        if level not in LEVEL_NAMES:
            raise ValueError(f"level {level!r}: one of {', '.join(LEVEL_NAMES)}")
        return cls(mode, LEVEL_NAMES[level])


def default_topology_request(layers: int) -> TopologyRequest:
    """What a gang on a topology-aware pool asks when its file says nothing: its nodes under
    one switch of the lowest network layer if one has room, else as close above as fits."""
    return TopologyRequest("preferred", f"{NETWORK_LAYER_LABEL}{layers}")


@dataclass(frozen=True)
class TopologyNode:
    """One node as Kueue's TAS cache sees it: its labels and what it still has free (its
    allocatable less what runs there), for every resource a pod may request."""

    name: str
    labels: dict[str, str]
    free: dict[str, Fraction]


def instance_node(
    name: str,
    instance_type: str,
    labels: dict[str, str],
    *,
    hugepages_2mi_mib: int = 0,
    partitions: dict[str, int] | None = None,
) -> TopologyNode:
    """A node of `instance_type` with the whole instance free (the catalog's vCPUs, memory,
    accelerators or `partitions` per node, EFA interfaces, reserved huge pages), labelled
    `labels` and its name as `kubernetes.io/hostname`. The kubelet's own reservation is left
    out: a test that needs it passes a smaller node."""
    from spec.catalog import catalog

    itype = catalog().instance(instance_type)
    kind = catalog().accelerator_kind(instance_type)
    free: dict[str, Fraction] = {
        "cpu": Fraction(itype.vcpus),
        "memory": Fraction(itype.memory_gib * 2**30),
    }
    if partitions:
        free |= {r: Fraction(n) for r, n in partitions.items()}
    elif kind is not None:
        free[kind.resource] = Fraction(itype.gpu_count)
    if itype.efa_interfaces:
        free["vpc.amazonaws.com/efa"] = Fraction(itype.efa_interfaces)
    if hugepages_2mi_mib:
        free["hugepages-2Mi"] = Fraction(hugepages_2mi_mib * 2**20)
    return TopologyNode(name=name, labels={**labels, HOSTNAME_LABEL: name}, free=free)


@dataclass(frozen=True)
class Placement:
    """Where Kueue puts a pod set on a TAS flavor: the domains of `level` it uses and the
    pods on each node (the node selectors it injects before ungating them)."""

    level: str
    domains: list[tuple[str, ...]]
    """Each domain as its label values from the top level down to `level`."""
    pods: dict[str, int]
    """Node -> pods of the set there."""


def _fits_on(free: dict[str, Fraction], per_pod: dict[str, Fraction]) -> int:
    counts = [int(free.get(r, 0) // amount) for r, amount in per_pod.items() if amount > 0]
    return min(counts) if counts else 0


def place(
    request: TopologyRequest,
    count: int,
    per_pod: dict[str, Fraction],
    template: dict[str, Any],
    flavor: ResourceFlavor,
    topology: Topology,
    nodes: Sequence[TopologyNode],
    used: dict[str, dict[str, Fraction]],
) -> Placement | str:
    """Kueue 0.19's TAS assignment (pkg/cache/scheduler/tas_flavor_snapshot.go, BestFit) of
    `count` pods requesting `per_pod` each (every resource, excluded ones too: TAS reads the
    pod spec) on the nodes of `flavor`, or why not, in Kueue's words. `used` is what earlier
    pod sets took, per node; it is updated.

    The flavor's nodes are those with its node labels and every level's label (Kueue leaves
    out a node missing one), that the pod's node selector and affinity select. Each node
    holds as many pods as its free resources fit; a domain what its nodes hold. Domains of a
    level are sorted by what they hold, most first: where the first holds the set, the one
    that holds it with the least room left is taken (best fit); where none does, required
    fails, preferred tries the level above, and at the top (or unconstrained, at the node
    level) the set is spread over domains, most room first, the last by best fit. Within
    the chosen domains pods go to nodes the same way.
    """
    levels = [level.node_label for level in topology.spec.levels]
    name = topology.metadata.name
    if request.level is not None and request.level not in levels:
        return f"no requested topology level: {request.level}"
    pod_spec = template.get("spec") or {}
    room: dict[str, int] = {}
    values: dict[str, tuple[str, ...]] = {}
    for node in nodes:
        labels = node.labels
        if any(labels.get(k) != v for k, v in flavor.spec.node_labels.items()):
            continue
        if any(level not in labels for level in levels):
            continue
        terms = _selector_terms(pod_spec, set(labels))
        if not any(all(_matches(r, labels) for r in term) for term in terms):
            continue
        taken = used.get(node.name, {})
        free = {r: amount - taken.get(r, Fraction(0)) for r, amount in node.free.items()}
        room[node.name] = _fits_on(free, per_pod)
        values[node.name] = tuple(labels[level] for level in levels)

    def domains(depth: int) -> list[tuple[tuple[str, ...], int]]:
        held: dict[tuple[str, ...], int] = {}
        for node, n in room.items():
            key = values[node][: depth + 1]
            held[key] = held.get(key, 0) + n
        return sorted(held.items(), key=lambda item: (-item[1], item[0]))

    def best_fit(ranked: list[tuple[tuple[str, ...], int]], need: int) -> tuple[str, ...]:
        fitting = [d for d, n in ranked if n >= need]
        return min(fitting, key=lambda d: dict(ranked)[d]) if fitting else ranked[0][0]

    def spread(ranked: list[tuple[tuple[str, ...], int]], need: int) -> list[tuple[str, ...]]:
        chosen: list[tuple[str, ...]] = []
        left = [(d, n) for d, n in ranked if n > 0]
        while need > 0 and left:
            pick = best_fit(left, need) if left[0][1] >= need else left[0][0]
            held = dict(left)[pick]
            chosen.append(pick)
            need -= held
            left = [(d, n) for d, n in left if d != pick]
        return chosen

    if not room:
        return f"no topology domains at level: {levels[0]}"
    depth = len(levels) - 1 if request.level is None else levels.index(request.level)
    chosen: list[tuple[str, ...]] = []
    while True:
        ranked = domains(depth)
        if ranked[0][1] >= count:
            chosen = [best_fit(ranked, count)]
            break
        if request.mode == "required":
            return f'topology "{name}" allows to fit only {ranked[0][1]} out of {count} pod(s)'
        if depth > 0 and request.mode == "preferred":
            depth -= 1
            continue
        if sum(n for _, n in ranked) < count:
            total = sum(n for _, n in ranked)
            return f'topology "{name}" allows to fit only {total} out of {count} pod(s)'
        chosen = spread(ranked, count)
        break
    inside = [n for n in room if values[n][: depth + 1] in chosen]
    per_node = sorted(((n, room[n]) for n in inside), key=lambda item: (-item[1], item[0]))
    pods: dict[str, int] = {}
    need = count
    for (host,) in spread([((n,), k) for n, k in per_node], need):
        take = min(room[host], need)
        pods[host] = take
        need -= take
    for host, n in pods.items():
        taken = used.setdefault(host, {})
        for r, amount in per_pod.items():
            taken[r] = taken.get(r, Fraction(0)) + amount * n
    return Placement(level=levels[depth], domains=chosen, pods=pods)


ADMITTED: Final = "Admitted"
WAITING_FOR_PROVISIONING: Final = "Pending: waiting for provisioning"
"""Quota reserved on an elastic flavor: Kueue has asked the autoscaler for the nodes
(a ProvisioningRequest) and admits the workload once the request is Provisioned."""
WAITING_FOR_CHECKS: Final = "Pending: waiting for admission checks"
NOT_ADMITTED: Final = "Pending: not admissible as declared"


@dataclass(frozen=True)
class Admission:
    """What Kueue would do with a workload on an empty cluster: the flavor each pod set's
    resources get, the admission checks it then waits for, or why it waits forever."""

    queue: str
    flavors: dict[str, dict[str, str]]
    """Pod set -> resource -> flavor."""
    problems: list[str]
    """Why it can never be admitted as declared (empty: its quota is reserved)."""
    waiting_for: list[str] = field(default_factory=list)
    """The admission checks of its flavors, which must be Ready before it is admitted."""
    provisioning: bool = False
    """One of them is the ProvisioningRequest check: its nodes are being asked for."""
    placements: dict[str, Placement] = field(default_factory=dict)
    """Pod set -> where Topology Aware Scheduling puts it (pod sets on a TAS flavor, when
    the nodes were given)."""
    topology_unchecked: list[str] = field(default_factory=list)
    """Pod sets on a TAS flavor whose placement was not simulated: no nodes were given (an
    offline check knows the quota, not which network block each node is in), or the
    provisioning check comes first (Kueue assigns the topology once the nodes exist)."""

    @property
    def admitted(self) -> bool:
        """Kueue reserves its quota, and admits it: at once, or once `waiting_for` are Ready
        (see `state`). False: it waits forever (`problems`)."""
        return not self.problems

    @property
    def state(self) -> str:
        """The workload's state as Kueue reports it, at the end of this simulation."""
        if self.problems:
            return NOT_ADMITTED
        if self.provisioning:
            return WAITING_FOR_PROVISIONING
        if self.waiting_for:
            return WAITING_FOR_CHECKS
        return ADMITTED


def _quota(queue: ClusterQueue, flavor: str, resource: str) -> ResourceQuota | None:
    for group in queue.spec.resource_groups:
        for fq in group.flavors:
            if fq.name == flavor:
                return next((rq for rq in fq.resources if rq.name == resource), None)
    return None


def _capacity(
    queue: ClusterQueue, cohort: list[ClusterQueue], flavor: str, resource: str
) -> Fraction:
    """What `queue` can use of flavor/resource on an empty cluster: its nominal quota plus
    what the other queues of its cohort lend (all of their nominal quota unless a lending
    limit caps it), up to its own borrowing limit."""
    mine = _quota(queue, flavor, resource)
    own = quantity(mine.nominal_quota) if mine else Fraction(0)
    if queue.spec.cohort_name is None:
        return own
    lent = Fraction(0)
    for other in cohort:
        if other.metadata.name == queue.metadata.name:
            continue
        if other.spec.cohort_name != queue.spec.cohort_name:
            continue
        theirs = _quota(other, flavor, resource)
        if theirs is not None:
            amount = quantity(theirs.nominal_quota)
            if theirs.lending_limit is not None:
                amount = min(amount, quantity(theirs.lending_limit))
            lent += amount
    if mine is not None and mine.borrowing_limit is not None:
        lent = min(lent, quantity(mine.borrowing_limit))
    return own + lent


def _pending_checks(
    queue: ClusterQueue,
    chosen: set[str],
    checks: Sequence[AdmissionCheck] | None,
    problems: list[str],
) -> tuple[list[str], bool]:
    """The checks of `queue` that run for a workload assigned the flavors `chosen` (a rule
    without `onFlavors` runs for all), and whether one is the provisioning check.

    With `checks` given (the AdmissionChecks the stack declares), a rule naming none of
    them is a problem: Kueue then marks the whole ClusterQueue inactive and admits nothing.
    """
    strategy = queue.spec.admission_checks_strategy
    if strategy is None:
        return [], False
    declared = {c.metadata.name: c for c in checks} if checks is not None else None
    waiting: list[str] = []
    provisioning = False
    for rule in strategy.admission_checks:
        check = declared.get(rule.name) if declared is not None else None
        if declared is not None and check is None:
            problems.append(
                f"ClusterQueue {queue.metadata.name} is inactive: its AdmissionCheck "
                f"{rule.name} does not exist"
            )
            continue
        if rule.on_flavors and not chosen & set(rule.on_flavors):
            continue
        waiting.append(rule.name)
        if check is not None and check.spec.controller_name == PROVISIONING_CONTROLLER:
            provisioning = True
    return waiting, provisioning


def _tas_mismatch(
    request: TopologyRequest | None,
    flavor: ResourceFlavor,
    queue_flavors: list[ResourceFlavor],
    topologies: dict[str, Topology] | None,
) -> str | None:
    """Why Kueue 0.19 skips `flavor` for the pod set (flavorassigner's
    checkPodSetAndFlavorMatchForTAS), or None. A queue whose flavors are all TAS implies a
    request (unconstrained) for a pod set that makes none; ours have the `cpu` flavor."""
    implied = request is None and all(f.spec.topology_name for f in queue_flavors)
    name = flavor.metadata.name
    if request is not None or implied:
        if implied:
            return None
        if flavor.spec.topology_name is None:
            return f'Flavor "{name}" does not support TopologyAwareScheduling'
        topology = (topologies or {}).get(flavor.spec.topology_name)
        if topologies is not None and topology is None:
            return f'Flavor "{name}" information missing in TAS cache'
        levels = [level.node_label for level in topology.spec.levels] if topology else []
        wanted = request.level if request is not None else None
        if topology is not None and wanted is not None and wanted not in levels:
            return f'Flavor "{name}" does not contain the requested level'
        return None
    if flavor.spec.topology_name is not None:
        return f'Flavor "{name}" supports only TopologyAwareScheduling'
    return None


def admit(
    sets: list[PodSet],
    queue: ClusterQueue,
    flavors: list[ResourceFlavor],
    *,
    cohort: list[ClusterQueue] | None = None,
    excluded: tuple[str, ...] = EXCLUDED_RESOURCE_PREFIXES,
    checks: Sequence[AdmissionCheck] | None = None,
    topologies: Sequence[Topology] | None = None,
    nodes: Sequence[TopologyNode] | None = None,
) -> Admission:
    """Kueue's admission rule for `sets` in `queue`, on an empty cluster.

    As Kueue's flavor assigner does (pkg/scheduler/flavorassigner): requests without
    the excluded prefixes; each must be covered by one of the queue's resource groups
    ("resource X unavailable in ClusterQueue Q" otherwise); per group, the first flavor
    whose node labels the pods select and whose quota (nominal plus what the cohort
    lends) holds the pod set's total of every resource of the group.

    Then the queue's admission checks that run on the flavors assigned
    (`admissionChecksStrategy`): quota is reserved, and the workload waits for them
    (`Admission.waiting_for`; on an elastic pool, for the ProvisioningRequest that brings
    its nodes). `checks`: the AdmissionChecks that exist, to tell the provisioning check
    from others and to find a queue made inactive by a check that does not exist; None
    assumes every named check exists and says nothing of its kind.

    Topology Aware Scheduling (a flavor with `topologyName`): a pod set that asks for a
    topology (`TopologyRequest.of` its template) is placed on TAS flavors only, and one that
    asks for none on the others. With `topologies` (the Topology objects) and `nodes` (the
    cluster's nodes, what is free on each) the pod set is then placed as Kueue would
    (`place`): its pods within one network block, or why they fit in none; without nodes
    the placement is left out (`Admission.topology_unchecked`).
    """
    by_name = {f.metadata.name: f for f in flavors}
    by_topology = {t.metadata.name: t for t in topologies} if topologies is not None else None
    queue_flavors = [
        by_name[fq.name]
        for g in queue.spec.resource_groups
        for fq in g.flavors
        if fq.name in by_name
    ]
    tas_flavor_of: dict[str, str] = {}
    assigned: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    used: dict[tuple[str, str], Fraction] = {}
    for ps in sets:
        wanted = {r: amount * ps.count for r, amount in ps.requests(excluded).items()}
        assigned[ps.name] = {}
        groups: list[ResourceGroup] = []
        for resource in sorted(wanted):
            group = next(
                (g for g in queue.spec.resource_groups if resource in g.covered_resources), None
            )
            if group is None:
                problems.append(
                    f"{ps.name}: resource {resource} unavailable in ClusterQueue "
                    f"{queue.metadata.name}"
                )
            elif group not in groups:
                groups.append(group)
        request = TopologyRequest.of(ps.template)
        for group in groups:
            need = {r: wanted[r] for r in group.covered_resources if r in wanted}
            chosen = None
            why: list[str] = []
            for fq in group.flavors:
                flavor = by_name.get(fq.name)
                if flavor is None:
                    why.append(f"flavor {fq.name} does not exist")
                    continue
                if not flavor_selects(flavor, ps.template.get("spec") or {}):
                    continue
                mismatch = _tas_mismatch(request, flavor, queue_flavors, by_topology)
                if mismatch is not None:
                    why.append(mismatch)
                    continue
                free = {
                    r: _capacity(queue, cohort or [], fq.name, r) - used.get((fq.name, r), 0)
                    for r in need
                }
                short = [f"{r} {need[r]} > {free[r]}" for r in need if need[r] > free[r]]
                if short:
                    why.append(f"{fq.name}: {', '.join(short)}")
                    continue
                chosen = fq.name
                break
            if chosen is None:
                problems.append(
                    f"{ps.name}: no flavor of ClusterQueue {queue.metadata.name} fits "
                    f"({'; '.join(why) or 'none selects its nodes'})"
                )
                continue
            for r, amount in need.items():
                used[(chosen, r)] = used.get((chosen, r), Fraction(0)) + amount
                assigned[ps.name][r] = chosen
            if by_name[chosen].spec.topology_name is not None:
                tas_flavor_of[ps.name] = chosen
    waiting: list[str] = []
    provisioning = False
    if not problems:
        on = {f for by_resource in assigned.values() for f in by_resource.values()}
        waiting, provisioning = _pending_checks(queue, on, checks, problems)
    placements: dict[str, Placement] = {}
    unchecked: list[str] = []
    on_nodes: dict[str, dict[str, Fraction]] = {}
    for ps in sets:
        flavor_name_ = tas_flavor_of.get(ps.name)
        if flavor_name_ is None or problems:
            continue
        flavor = by_name[flavor_name_]
        topology = (by_topology or {}).get(flavor.spec.topology_name or "")
        if provisioning or nodes is None or topology is None:
            unchecked.append(ps.name)
            continue
        request = TopologyRequest.of(ps.template) or TopologyRequest("unconstrained")
        per_pod = {r: a for r, a in pod_requests(ps.template.get("spec") or {}).items() if a}
        placed = place(request, ps.count, per_pod, ps.template, flavor, topology, nodes, on_nodes)
        if isinstance(placed, str):
            problems.append(f"{ps.name}: {placed}")
        else:
            placements[ps.name] = placed
    return Admission(
        queue=queue.metadata.name,
        flavors=assigned,
        problems=problems,
        waiting_for=waiting if not problems else [],
        provisioning=provisioning and not problems,
        placements=placements if not problems else {},
        topology_unchecked=unchecked if not problems else [],
    )
