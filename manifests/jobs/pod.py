"""Typed pieces of a Kubernetes pod template, for custom resources and Jobs alike.

The training operator's `PyTorchJob` is a custom resource: its body is plain
JSON, which `pulumi_kubernetes`'s typed `*Args` cannot produce for a CR. These
pydantic models cover exactly the fields the platform's jobs set, with
`extra="forbid"` so a misspelt field fails in Python rather than being pruned
silently by the API server. They dump camelCase (`model_dump(by_alias=True)`);
the tests validate every rendered pod against Kubernetes' own OpenAPI schema
(kubernetes-validate, strict) so the names cannot drift from the API.

The environment and resource helpers carry the platform's EFA/NCCL rules
(see /work/shared/FACTS.md): they are shared so the training job and the
fabric acceptance job cannot disagree about the network stack they test.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from manifests.volumes import LUSTRE_CLAIM
from spec.catalog import InstanceType, catalog
from spec.labels import POOL_LABEL

FSX_MOUNT = "/fsx"
"""Where every job mounts the `fsx-lustre` claim."""
"""Node label the GPU node pools carry (components/gpu_node_pool.py)."""
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
HUGEPAGES = "hugepages-2Mi"
HUGEPAGES_SIZE = "5120Mi"
WORKLOAD_SERVICE_ACCOUNT = "training"
"""The service account every tenant namespace gives its job pods (IRSA: the tenant's role)."""
"""libfabric's EFA provider backs its bounce buffers with 2 MiB huge pages: what the
fabric test (nccl-tests under MPI, no fork) requests. Training pods, whose DataLoader
workers fork, turn that off (FI_EFA_USE_HUGE_PAGE=0) and request none."""

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


class K8s(BaseModel):
    """A Kubernetes API object fragment: camelCase on the wire, no unknown fields, immutable."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class ObjectMeta(K8s):
    name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class ObjectFieldSelector(K8s):
    field_path: str


class EnvVarSource(K8s):
    field_ref: ObjectFieldSelector


class EnvVar(K8s):
    name: str
    value: str | None = None
    value_from: EnvVarSource | None = None


class ResourceRequirements(K8s):
    limits: dict[str, str]
    requests: dict[str, str]


class VolumeMount(K8s):
    name: str
    mount_path: str
    read_only: bool | None = None


class Capabilities(K8s):
    drop: list[str]


class SeccompProfile(K8s):
    type: Literal["RuntimeDefault"] = "RuntimeDefault"


class ContainerSecurityContext(K8s):
    privileged: Literal[False] = False
    allow_privilege_escalation: bool = False
    capabilities: Capabilities | None = None
    run_as_non_root: bool | None = None
    read_only_root_filesystem: bool | None = None


class ContainerPort(K8s):
    name: str
    container_port: int
    protocol: Literal["TCP"] = "TCP"


class Container(K8s):
    name: str
    image: str
    image_pull_policy: Literal["IfNotPresent", "Always"] = "IfNotPresent"
    command: list[str]
    args: list[str] | None = None
    env: list[EnvVar]
    ports: list[ContainerPort] | None = None
    resources: ResourceRequirements
    volume_mounts: list[VolumeMount]
    security_context: ContainerSecurityContext
    working_dir: str | None = None


class PersistentVolumeClaimSource(K8s):
    claim_name: str
    read_only: bool | None = None


class EmptyDirSource(K8s):
    medium: Literal["Memory", ""] | None = None
    size_limit: str | None = None


class SecretSource(K8s):
    secret_name: str
    default_mode: int | None = None


class ConfigMapSource(K8s):
    name: str
    default_mode: int | None = None


class Volume(K8s):
    name: str
    persistent_volume_claim: PersistentVolumeClaimSource | None = None
    empty_dir: EmptyDirSource | None = None
    secret: SecretSource | None = None
    config_map: ConfigMapSource | None = None


class NodeSelectorRequirement(K8s):
    key: str
    operator: Literal["In", "NotIn", "Exists"]
    values: list[str] | None = None


class NodeSelectorTerm(K8s):
    match_expressions: list[NodeSelectorRequirement]


class NodeSelector(K8s):
    node_selector_terms: list[NodeSelectorTerm]


class NodeAffinity(K8s):
    required_during_scheduling_ignored_during_execution: NodeSelector


class LabelSelector(K8s):
    match_labels: dict[str, str]


class PodAffinityTerm(K8s):
    label_selector: LabelSelector
    topology_key: str


class PodAntiAffinity(K8s):
    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm]


class Affinity(K8s):
    node_affinity: NodeAffinity
    pod_anti_affinity: PodAntiAffinity | None = None


class Toleration(K8s):
    key: str
    operator: Literal["Exists", "Equal"] = "Exists"
    effect: Literal["NoSchedule", "NoExecute"] = "NoSchedule"


class PodSecurityContext(K8s):
    run_as_non_root: bool | None = None
    run_as_user: int | None = None
    run_as_group: int | None = None
    seccomp_profile: SeccompProfile = SeccompProfile()


class PodSpec(K8s):
    service_account_name: str
    automount_service_account_token: bool | None = None
    priority_class_name: str | None = None
    restart_policy: Literal["Never", "OnFailure"] | None = None
    termination_grace_period_seconds: int | None = None
    affinity: Affinity | None = None
    tolerations: list[Toleration] | None = None
    security_context: PodSecurityContext
    containers: list[Container]
    volumes: list[Volume]
    hostname: str | None = None
    subdomain: str | None = None


class PodTemplate(K8s):
    metadata: ObjectMeta
    spec: PodSpec


# --- checks and shared building blocks -------------------------------------------------


def on_fsx(v: str, what: str = "") -> str:
    """A path under /fsx/ (the tenant's FSx claim, where every job's pods see the same
    files), without its trailing slash; ValueError (naming `what`, if given) otherwise."""
    parts = v.split("/")
    if not v.startswith(FSX_MOUNT + "/") or ".." in parts or len(v) <= len(FSX_MOUNT) + 1:
        named = f"{what} {v!r} " if what else ""
        raise ValueError(f"{named}must be a path under {FSX_MOUNT}/ (the tenant's FSx claim)")
    return v.rstrip("/")


def check_dns_label(value: str, what: str, max_len: int = 63) -> str:
    """Names end up in pod and service DNS names: refuse what the API server would."""
    if len(value) > max_len or not _DNS_LABEL.match(value):
        raise ValueError(
            f"{what} {value!r} must be a DNS label: lowercase letters, digits and '-', "
            f"starting with a letter, at most {max_len} characters"
        )
    return value


def check_nvidia_job(
    name: str, namespace: str, queue_name: str | None, instance_type: str, what: str
) -> InstanceType:
    """The names an acceptance job's objects take, and its instance type: an NVIDIA GPU type
    of the catalog, else ValueError `TYPE: what`. Returns the type's facts."""
    check_dns_label(name, "name", 40)
    check_dns_label(namespace, "namespace")
    if queue_name is not None:
        check_dns_label(queue_name, "queue name")
    itype = catalog().instances.get(instance_type)
    if itype is None or itype.accelerator is None or itype.accelerator.kind != "nvidia":
        raise ValueError(f"{instance_type}: {what}")
    return itype


def check_image(image: str) -> str:
    """Same rule as the policy pack's k8s-image-pinned: a digest or a tag other than latest."""
    if not image or any(c.isspace() for c in image):
        raise ValueError(f"image {image!r} is not an image reference")
    if "@sha256:" in image:
        return image
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        raise ValueError(f"image {image} has no tag (means latest); pin a version or digest")
    if last.rsplit(":", 1)[-1] == "latest":
        raise ValueError(f"image {image} uses the latest tag; pin a version or digest")
    return image


def nccl_env(*, debug_subsys: str = "INIT,NET") -> list[EnvVar]:
    """NCCL/EFA environment per FACTS.md, for NVIDIA pods.

    What is *absent* matters as much: FI_PROVIDER and FI_EFA_USE_DEVICE_RDMA
    stay unset (libfabric >= 1.18 and aws-ofi-nccl >= 1.7 pick EFA and
    GPUDirect RDMA themselves; forcing them breaks instance types where they
    differ) and RDMAV_FORK_SAFE is never set (it slows every registration and
    is unneeded on current kernels). NCCL_DEBUG=INFO limited to INIT,NET
    prints which network NCCL chose, so a silent fall-back to sockets shows in
    the logs once, at start-up.
    """
    return [
        EnvVar(name="NCCL_SOCKET_IFNAME", value="^lo"),
        EnvVar(name="NCCL_DEBUG", value="INFO"),
        EnvVar(name="NCCL_DEBUG_SUBSYS", value=debug_subsys),
    ]


def node_placement(instance_type: str, node_pool: str) -> tuple[Affinity, list[Toleration]]:
    """Pin the pod to one pool of one instance type and tolerate that pool's accelerator taint."""
    check_dns_label(node_pool, "node pool")
    kind = catalog().accelerator_kind(instance_type)
    terms = [
        NodeSelectorRequirement(key=POOL_LABEL, operator="In", values=[node_pool]),
        NodeSelectorRequirement(key=INSTANCE_TYPE_LABEL, operator="In", values=[instance_type]),
    ]
    affinity = Affinity(
        node_affinity=NodeAffinity(
            required_during_scheduling_ignored_during_execution=NodeSelector(
                node_selector_terms=[NodeSelectorTerm(match_expressions=terms)]
            )
        )
    )
    tolerations = [Toleration(key=kind.taint_key)] if kind else []
    return affinity, tolerations


def restricted_container_context() -> ContainerSecurityContext:
    """Pod Security `restricted` for a container: no escalation, no capabilities."""
    return ContainerSecurityContext(
        allow_privilege_escalation=False, capabilities=Capabilities(drop=["ALL"])
    )


def non_root_pod_context(uid: int) -> PodSecurityContext:
    return PodSecurityContext(run_as_non_root=True, run_as_user=uid, run_as_group=uid)


def fsx_volume() -> tuple[Volume, VolumeMount]:
    return (
        Volume(
            name="fsx", persistent_volume_claim=PersistentVolumeClaimSource(claim_name=LUSTRE_CLAIM)
        ),
        VolumeMount(name="fsx", mount_path=FSX_MOUNT),
    )


def shm_volume(size: str) -> tuple[Volume, VolumeMount]:
    """A memory-backed /dev/shm: the container runtime's 64 MiB default starves NCCL and
    data-loader workers. It counts against the container's memory limit."""
    return (
        Volume(name="dshm", empty_dir=EmptyDirSource(medium="Memory", size_limit=size)),
        VolumeMount(name="dshm", mount_path="/dev/shm"),
    )


# --- batch/v1 Jobs ---------------------------------------------------------------------

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
"""The label the Job controller puts on a Job's pods (and a selector of them may use)."""


class SuccessPolicyRule(K8s):
    succeeded_indexes: str


class SuccessPolicy(K8s):
    rules: list[SuccessPolicyRule]


class IndexedJobSpec(K8s):
    """The spec of an Indexed batch/v1 Job, with the fields the platform's Jobs set.

    Each Job fills in the retry knobs it needs (a whole-Job `backoff_limit`, or per-index
    `backoff_limit_per_index` with `max_failed_indexes`); the unset ones stay off the wire.
    """

    completion_mode: Literal["Indexed"] = "Indexed"
    completions: int
    parallelism: int
    backoff_limit: int | None = None
    backoff_limit_per_index: int | None = None
    max_failed_indexes: int | None = None
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int
    success_policy: SuccessPolicy | None = None
    suspend: bool | None = None
    template: PodTemplate


class IndexedJob(K8s):
    api_version: Literal["batch/v1"] = "batch/v1"
    kind: Literal["Job"] = "Job"
    metadata: ObjectMeta
    spec: IndexedJobSpec
