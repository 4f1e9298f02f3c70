"""A data pipeline as a KubeRay `RayJob` (`ray.io/v1`, KubeRay 1.7.0), admitted by Kueue as a gang.

What KubeRay does with it: creates a RayCluster from `rayClusterSpec` (a head pod and one
worker group), then a submitter pod (a batch/v1 Job, `submissionMode: K8sJobMode`) that runs
`ray job submit` against the head's dashboard; the entrypoint, the pipeline's command, runs as
the Ray driver on the head and reaches the cluster through RAY_ADDRESS, which Ray's job
manager sets. When the driver exits, `shutdownAfterJobFinishes` deletes the RayCluster, and
`ttlSecondsAfterFinished` later the RayJob's own leftovers.

Why these choices:

- **Suspended, queued.** `spec.suspend: true` and the `kueue.x-k8s.io/queue-name` label: Kueue
  0.19.2's `ray.io/rayjob` integration makes one Workload of pod sets `head` (1), each worker
  group by its `groupName` (its `replicas`, times `numOfHosts`), and `submitter` (1, in
  K8sJobMode; the submitter pod template below, which Kueue counts as KubeRay runs it), and
  unsuspends the RayJob once all of them fit. Its webhook refuses a queued RayJob without
  `shutdownAfterJobFinishes` (the cluster would keep holding quota) and a worker group named
  `head`.
- **The head schedules no tasks** (`num-cpus: "0"`): it runs the GCS, the dashboard and the
  driver on the system pool (untainted, always up), so the pipeline's tasks land only on the
  workers of the pool the job asked for. Small requests equal to limits.
- **Workers take a whole node each** of their pool: CPU and memory are `HOST_SHARE` of the
  instance (the rest is the kubelet's, the daemons' and the OS's), as the training builder
  sizes its pods; a GPU worker asks for the GPUs given and their share of the node. Ray is
  told the same (`num-cpus`, `num-gpus`), and its object store lives on a memory-backed
  /dev/shm of `OBJECT_STORE_SHARE` of the pod's memory (counted in its limit).
- **No in-tree autoscaling** (`enableInTreeAutoscaling: false`, `replicas = minReplicas =
  maxReplicas`). See below.
- **Where Ray talks**: the head's `gcs-server` 6379, `dashboard` 8265, `client` 10001 and every
  pod's `metrics` 8080 are named ports; the object managers and workers use Ray's random
  ports. All of it is traffic within the tenant's namespace, which its NetworkPolicies allow
  (components/tenancy.py), as they allow Prometheus's scrape of `metrics` (the `ray`
  PodMonitor, monitoring/charts.py) and the KubeRay operator's calls to the dashboard. The
  dashboard is not exposed: `kubectl -n <tenant> port-forward svc/<cluster>-head-svc
  8265:8265` (the RayCluster's name is in the RayJob's `status.rayClusterName`).

**How autoscaling of Ray workers meets the node autoscaler.** Kueue admits the RayJob at its
fixed worker count as one gang: quota for the head, every worker and the submitter is
reserved together or not at all. Kueue 0.19.2 can also admit RayJobs with Ray's in-tree
autoscaler, through its elastic workloads (the `ElasticJobsViaWorkloadSlices` feature gate,
beta and on by default since 0.18, plus the RayJob annotation `kueue.x-k8s.io/elastic-job:
"true"`): each scale-up is a new workload slice admitted on its own, in the flavor first
assigned, without topology-aware scheduling; without that annotation its webhook refuses a
queued RayJob with autoscaling on. The platform does not use it: a data job is sized up front
(`workers`), and a gang that grows slice by slice would hold part of its quota while waiting
for the rest. Once admitted, the worker pods go Pending on their pool. On a CPU pool (always
elastic, `cpu_pools`) the Cluster Autoscaler sees them and adds nodes up to the pool's
`max_size`; the pods bind as nodes join (Kueue's waitForPodsReady gives them 30 minutes). On
an elastic GPU pool the ProvisioningRequest admission check has asked the autoscaler for all
of the GPU nodes first (atomically) and the job is admitted only once they are granted; a
fixed GPU pool's nodes are there. When the driver exits, `shutdownAfterJobFinishes` deletes
the RayCluster, its pods go, Kueue releases the quota, and the autoscaler removes the idle
nodes after its scale-down delay (workers are `safe-to-evict: false` only while they run).
"""

from __future__ import annotations

import math
import shlex
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from manifests.jobs.pod import (
    Affinity,
    ConfigMapSource,
    ContainerPort,
    ContainerSecurityContext,
    EnvVar,
    K8s,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectMeta,
    PodSecurityContext,
    ResourceRequirements,
    Toleration,
    Volume,
    VolumeMount,
    check_dns_label,
    check_image,
    fsx_volume,
    node_placement,
    non_root_pod_context,
    restricted_container_context,
    shm_volume,
)
from manifests.jobs.pytorchjob import CONFIG_MOUNT, QUEUE_LABEL, SAFE_TO_EVICT
from manifests.scheduling import check_priority_class
from spec.catalog import catalog
from spec.labels import JOB_KIND_LABEL, PART_OF, POOL_LABEL, TEAM_LABEL

API_VERSION: Final = "ray.io/v1"
KIND: Final = "RayJob"
RAY_VERSION: Final = "2.60.0"
"""The Ray of requirements-dev.txt (`ray[data]`): the image must carry the same, since the
head, the workers and the submitter's `ray job submit` all run it."""
RAY_CONTAINER: Final = "ray"
SUBMITTER_CONTAINER: Final = "ray-job-submitter"
"""KubeRay's name for it (utils.SubmitterContainerName): it fills in its command."""
WORKER_GROUP: Final = "workers"
SYSTEM_POOL: Final = "system"
JOB_KIND: Final = "data"
"""The pods' `llm-platform/job-kind`."""
GCS_PORT: Final = 6379
DASHBOARD_PORT: Final = 8265
CLIENT_PORT: Final = 10001
METRICS_PORT: Final = 8080
"""KubeRay's default metrics port (utils.DefaultMetricsPort), named `metrics`."""
HOST_SHARE: Final = 0.85
"""A worker's share of its node's vCPUs and memory (the training builder's memory_fraction)."""
OBJECT_STORE_SHARE: Final = 0.3
"""Ray's own default share of memory for the object store, made explicit to size /dev/shm."""
HEAD_CPU: Final = "2"
HEAD_MEMORY_GIB: Final = 8
HEAD_OBJECT_STORE_GIB: Final = 2
SUBMITTER_RESOURCES: Final = {"cpu": "500m", "memory": "512Mi"}
"""`ray job submit` and `ray job logs --follow`: KubeRay's default requests 500m and 200Mi with
limits 1 and 1Gi; here requests equal limits, so Kueue's count is what it may use."""
SUBMITTER_SERVICE_ACCOUNT: Final = "default"
"""The submitter only talks to the head's dashboard: no S3 role, no API token."""


# --- the custom resource ---------------------------------------------------------------


class RayContainer(K8s):
    """A Ray container: KubeRay writes its command (`ray start ...`, or the submitter's
    `ray job submit ...`) when none is given, so none is."""

    name: str
    image: str
    image_pull_policy: Literal["IfNotPresent", "Always"] = "IfNotPresent"
    env: list[EnvVar] | None = None
    ports: list[ContainerPort] | None = None
    resources: ResourceRequirements
    volume_mounts: list[VolumeMount] | None = None
    security_context: ContainerSecurityContext


class RayPodSpec(K8s):
    service_account_name: str
    automount_service_account_token: bool | None = None
    priority_class_name: str | None = None
    restart_policy: Literal["Never"] | None = None
    termination_grace_period_seconds: int | None = None
    affinity: Affinity | None = None
    tolerations: list[Toleration] | None = None
    security_context: PodSecurityContext
    containers: list[RayContainer]
    volumes: list[Volume] | None = None


class RayPodTemplate(K8s):
    metadata: ObjectMeta
    spec: RayPodSpec


class HeadGroupSpec(K8s):
    ray_start_params: dict[str, str]
    template: RayPodTemplate


class WorkerGroupSpec(K8s):
    group_name: str
    replicas: int
    min_replicas: int
    max_replicas: int
    ray_start_params: dict[str, str]
    template: RayPodTemplate


class RayClusterSpec(K8s):
    ray_version: str
    enable_in_tree_autoscaling: bool
    head_group_spec: HeadGroupSpec
    worker_group_specs: list[WorkerGroupSpec]


class RayJobBody(K8s):
    entrypoint: str
    submission_mode: Literal["K8sJobMode"] = "K8sJobMode"
    suspend: bool = True
    shutdown_after_job_finishes: Literal[True] = True
    ttl_seconds_after_finished: int
    active_deadline_seconds: int | None = None
    backoff_limit: int
    submitter_pod_template: RayPodTemplate
    ray_cluster_spec: RayClusterSpec


class RayJob(K8s):
    api_version: Literal["ray.io/v1"] = API_VERSION
    kind: Literal["RayJob"] = KIND
    metadata: ObjectMeta
    spec: RayJobBody


# --- what a caller gives ---------------------------------------------------------------


class RayJobSpec(BaseModel):
    """One pipeline run: `python -m <module> <args>` as the driver, `workers` pods on a pool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="The RayJob's name (its RayCluster's is derived from it).")
    namespace: str = Field(description="The tenant's namespace (FSx claim, queue, role).")
    image: str = Field(description="The pipeline's image, with Ray 2.60.0, pinned.")
    module: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$", description="`python -m` module.")
    args: list[str] = Field(default_factory=list, description="The module's arguments.")
    queue_name: str
    pool: str = Field(description="The workers' pool (`llm-platform/pool`).")
    team: str = Field(
        "",
        description="A team stack's name on a shared cluster: the workers also select "
        "`llm-platform/team`, since two teams' CPU pools may share a name (and Kueue's cpu "
        "flavor, which has no node labels, would not tell them apart).",
    )
    instance_type: str = Field(description="The pool's instance type (sizes the workers).")
    pool_taint: str = Field(description="The taint key of the pool the workers tolerate.")
    workers: int = Field(ge=1, le=1000)
    gpus_per_worker: int = Field(0, ge=0, description="0 on a CPU pool.")
    service_account: str = Field(description="The tenant's workload service account.")
    config_map: str | None = Field(
        None, description=f"A ConfigMap mounted read-only at {CONFIG_MOUNT} on every pod."
    )
    priority_class: str = "llmp-training"
    backoff_limit: int = Field(0, ge=0, description="Retries of the whole RayJob.")
    ttl_seconds_after_finished: int = Field(3600, ge=0)
    active_deadline_seconds: int | None = Field(None, ge=1)
    run_as_user: int = Field(1000, ge=1)
    labels: dict[str, str] = Field(default_factory=dict)
    worker_topology: dict[str, str] = Field(
        default_factory=dict,
        description="Kueue's Topology Aware Scheduling annotations of the workers: what their "
        "pod set must carry on a topology-aware pool (the head stays on the system pool).",
    )

    @field_validator("name", "namespace", "pool", "queue_name")
    @classmethod
    def _dns(cls, v: str, info: ValidationInfo) -> str:
        # KubeRay names the cluster <name>-<5 chars> and its pods <cluster>-<group>-<5>.
        return check_dns_label(v, str(info.field_name).replace("_", " "), 40)

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        return check_image(v)

    @field_validator("priority_class")
    @classmethod
    def _priority(cls, v: str) -> str:
        return check_priority_class(v)

    @model_validator(mode="after")
    def _fits(self) -> RayJobSpec:
        itype = catalog().instances.get(self.instance_type)
        if itype is None:
            raise ValueError(f"instance type {self.instance_type} is not in the catalog")
        have = itype.accelerator.count if itype.accelerator else 0
        if self.gpus_per_worker > have:
            raise ValueError(
                f"gpus_per_worker {self.gpus_per_worker}: {self.instance_type} has {have}"
            )
        return self


def entrypoint(module: str, args: list[str]) -> str:
    """The driver's command line, each argument shell-quoted (KubeRay runs it in a shell)."""
    return shlex.join(["python", "-m", module, *args])


def worker_resources(spec: RayJobSpec) -> tuple[ResourceRequirements, int, int]:
    """(the worker container's resources, its vCPUs, its memory in GiB)."""
    itype = catalog().instance(spec.instance_type)
    share = HOST_SHARE
    acc = itype.accelerator
    if spec.gpus_per_worker and acc is not None:
        share *= spec.gpus_per_worker / acc.count
    cpus = max(1, math.floor(itype.vcpus * share))
    memory = max(1, math.floor(itype.memory_gib * share))
    both = {"cpu": str(cpus), "memory": f"{memory}Gi"}
    if spec.gpus_per_worker:
        kind = catalog().accelerator_kind(spec.instance_type)
        assert kind is not None  # gpus_per_worker > 0 only where the type has accelerators
        both[kind.resource] = str(spec.gpus_per_worker)
    return ResourceRequirements(limits=dict(both), requests=dict(both)), cpus, memory


def _gib(n: int) -> str:
    return str(n * 2**30)


def _volumes(
    spec: RayJobSpec, shm_gib: int, fsx: bool = True
) -> tuple[list[Volume], list[VolumeMount]]:
    shm, shm_mount = shm_volume(f"{shm_gib}Gi")
    volumes, mounts = [shm], [shm_mount]
    if fsx:
        claim, claim_mount = fsx_volume()
        volumes.insert(0, claim)
        mounts.insert(0, claim_mount)
    if spec.config_map is not None:
        volumes.append(Volume(name="config", config_map=ConfigMapSource(name=spec.config_map)))
        mounts.append(VolumeMount(name="config", mount_path=CONFIG_MOUNT, read_only=True))
    return volumes, mounts


def _labels(spec: RayJobSpec, component: str) -> dict[str, str]:
    return {
        **spec.labels,
        "app.kubernetes.io/name": spec.name,
        "app.kubernetes.io/component": f"ray-{component}",
        JOB_KIND_LABEL: JOB_KIND,
        **PART_OF,
    }


def _system_placement() -> Affinity:
    affinity, _ = node_placement_on_pool(SYSTEM_POOL)
    return affinity


def node_placement_on_pool(pool: str) -> tuple[Affinity, list[Toleration]]:
    """Pin a pod to a pool by its label alone (any instance type of it), tolerating nothing."""
    term = NodeSelectorTerm(
        match_expressions=[NodeSelectorRequirement(key=POOL_LABEL, operator="In", values=[pool])]
    )
    affinity = Affinity(
        node_affinity=NodeAffinity(
            required_during_scheduling_ignored_during_execution=NodeSelector(
                node_selector_terms=[term]
            )
        )
    )
    return affinity, []


def head_template(spec: RayJobSpec) -> RayPodTemplate:
    volumes, mounts = _volumes(spec, HEAD_OBJECT_STORE_GIB)
    both = {"cpu": HEAD_CPU, "memory": f"{HEAD_MEMORY_GIB}Gi"}
    return RayPodTemplate(
        metadata=ObjectMeta(labels=_labels(spec, "head")),
        spec=RayPodSpec(
            service_account_name=spec.service_account,
            priority_class_name=spec.priority_class,
            affinity=_system_placement(),
            security_context=non_root_pod_context(spec.run_as_user),
            containers=[
                RayContainer(
                    name=RAY_CONTAINER,
                    image=spec.image,
                    ports=[
                        ContainerPort(name="gcs-server", container_port=GCS_PORT),
                        ContainerPort(name="dashboard", container_port=DASHBOARD_PORT),
                        ContainerPort(name="client", container_port=CLIENT_PORT),
                        ContainerPort(name="metrics", container_port=METRICS_PORT),
                    ],
                    resources=ResourceRequirements(limits=dict(both), requests=dict(both)),
                    volume_mounts=mounts,
                    security_context=restricted_container_context(),
                )
            ],
            volumes=volumes,
        ),
    )


def worker_template(
    spec: RayJobSpec, resources: ResourceRequirements, shm_gib: int
) -> RayPodTemplate:
    affinity, tolerations = node_placement(spec.instance_type, spec.pool)
    if not tolerations:  # a CPU pool: its own taint
        tolerations = [Toleration(key=spec.pool_taint)]
    if spec.team:
        selector = affinity.node_affinity.required_during_scheduling_ignored_during_execution
        team = NodeSelectorRequirement(key=TEAM_LABEL, operator="In", values=[spec.team])
        for term in selector.node_selector_terms:
            term.match_expressions.append(team)
    volumes, mounts = _volumes(spec, shm_gib)
    return RayPodTemplate(
        metadata=ObjectMeta(
            labels=_labels(spec, "worker"),
            # A worker's objects live in its store: evicting it for bin-packing loses them.
            annotations={SAFE_TO_EVICT: "false", **spec.worker_topology},
        ),
        spec=RayPodSpec(
            service_account_name=spec.service_account,
            priority_class_name=spec.priority_class,
            affinity=affinity,
            tolerations=tolerations,
            security_context=non_root_pod_context(spec.run_as_user),
            containers=[
                RayContainer(
                    name=RAY_CONTAINER,
                    image=spec.image,
                    ports=[ContainerPort(name="metrics", container_port=METRICS_PORT)],
                    resources=resources,
                    volume_mounts=mounts,
                    security_context=restricted_container_context(),
                )
            ],
            volumes=volumes,
        ),
    )


def submitter_template(spec: RayJobSpec) -> RayPodTemplate:
    both = dict(SUBMITTER_RESOURCES)
    return RayPodTemplate(
        metadata=ObjectMeta(labels=_labels(spec, "submitter")),
        spec=RayPodSpec(
            service_account_name=SUBMITTER_SERVICE_ACCOUNT,
            automount_service_account_token=False,
            priority_class_name=spec.priority_class,
            restart_policy="Never",
            affinity=_system_placement(),
            security_context=non_root_pod_context(spec.run_as_user),
            containers=[
                RayContainer(
                    name=SUBMITTER_CONTAINER,
                    image=spec.image,
                    resources=ResourceRequirements(limits=dict(both), requests=dict(both)),
                    security_context=restricted_container_context(),
                )
            ],
        ),
    )


def ray_job(spec: RayJobSpec) -> dict[str, Any]:
    """The RayJob body for `spec`, ready for the API server (or `kubectl apply`)."""
    resources, cpus, memory = worker_resources(spec)
    store = max(1, math.floor(memory * OBJECT_STORE_SHARE))
    worker_params = {
        "num-cpus": str(cpus),
        "object-store-memory": _gib(store),
        "metrics-export-port": str(METRICS_PORT),
    }
    if spec.gpus_per_worker:
        worker_params["num-gpus"] = str(spec.gpus_per_worker)
    job = RayJob(
        metadata=ObjectMeta(
            name=spec.name,
            namespace=spec.namespace,
            labels={**spec.labels, QUEUE_LABEL: spec.queue_name, **PART_OF},
        ),
        spec=RayJobBody(
            entrypoint=entrypoint(spec.module, spec.args),
            ttl_seconds_after_finished=spec.ttl_seconds_after_finished,
            active_deadline_seconds=spec.active_deadline_seconds,
            backoff_limit=spec.backoff_limit,
            submitter_pod_template=submitter_template(spec),
            ray_cluster_spec=RayClusterSpec(
                ray_version=RAY_VERSION,
                enable_in_tree_autoscaling=False,
                head_group_spec=HeadGroupSpec(
                    ray_start_params={
                        # No tasks on the head: the driver, GCS and dashboard only.
                        "num-cpus": "0",
                        "dashboard-host": "0.0.0.0",
                        "object-store-memory": _gib(HEAD_OBJECT_STORE_GIB),
                        "metrics-export-port": str(METRICS_PORT),
                    },
                    template=head_template(spec),
                ),
                worker_group_specs=[
                    WorkerGroupSpec(
                        group_name=WORKER_GROUP,
                        replicas=spec.workers,
                        min_replicas=spec.workers,
                        max_replicas=spec.workers,
                        ray_start_params=worker_params,
                        template=worker_template(spec, resources, store),
                    )
                ],
            ),
        ),
    )
    return job.to_json()
