"""Elastic multi-node training as a Kubeflow `PyTorchJob` (training operator, `kubeflow.org/v1`).

The platform no longer installs the training operator nor submits PyTorchJobs: training jobs
are Kubeflow Trainer v2 TrainJobs (manifests/jobs/trainjob.py), which build on this module's
`JobSpec`, `training_env` and `pod_template` (the pod a PyTorchJob's worker ran is the pod a
TrainJob's node runs). `pytorch_job` stays for a cluster still on Trainer v1 until it has
migrated (docs/training/jobs.md, "Migrating a cluster from Trainer v1").

Why a PyTorchJob: the operator creates one pod per node, a headless service
per replica for the torchrun rendezvous, and with `elasticPolicy` passes the
elastic settings to torchrun through `PET_*` variables (PET_NNODES="min:max",
PET_RDZV_BACKEND, PET_RDZV_ENDPOINT, PET_MAX_RESTARTS, and PET_NPROC_PER_NODE
from `spec.nprocPerNode`).
The container therefore runs plain `torchrun <script>`: the job spec, not a
hand-written command line, is the single source of the elastic settings.

Kueue admits the job: it carries `kueue.x-k8s.io/queue-name` and is created
suspended (`runPolicy.suspend`) so that nothing is scheduled before Kueue has
found quota; Kueue un-suspends it.

Metrics: rank 0 of `workloads/training/train.py` serves `llmp_*` gauges on the container
port named `metrics` (METRICS_PORT); the pod carries `llm-platform/job-kind: training`, which
the GPU-idle alert and the dashboards use to find training pods.

The lifecycle's single-process steps (`promotion`, `quantization`: `job_kind`) run the same
way, one pod and one torchrun process (`procs_per_node`), so `llmp job` follows, lists and
cancels them like training; they carry their own `job-kind`, serve no metrics, and use the
`ExitCode` restart policy: the pod's own restartPolicy is Never and the operator fails the
job on exit codes 1-127 (their errors, deterministic: torchrun reports a worker's exit 1 or 2
as 1, and a SIGTERM it takes as 1 too) rather than running them again, and starts the pod
again on 130, 137, 143 (torchrun itself killed). A pod that is gone (drained, its node lost)
is created again, as for any replica.

Everything the instance type decides (accelerator resource and taint, GPU
count, EFA interfaces, memory) comes from the catalog, and a spec that asks
for more than the instance has is refused before submission.
"""

from __future__ import annotations

import math
from typing import Any, Final, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from manifests.jobs.pod import (
    EFA_RESOURCE,
    FSX_MOUNT,
    WORKLOAD_SERVICE_ACCOUNT,
    ConfigMapSource,
    Container,
    ContainerPort,
    EnvVar,
    EnvVarSource,
    K8s,
    ObjectFieldSelector,
    ObjectMeta,
    PodSpec,
    PodTemplate,
    ResourceRequirements,
    Volume,
    VolumeMount,
    check_dns_label,
    check_image,
    fsx_volume,
    nccl_env,
    node_placement,
    non_root_pod_context,
    on_fsx,
    restricted_container_context,
    shm_volume,
)
from manifests.scheduling import check_priority_class
from spec.catalog import catalog
from spec.labels import JOB_KIND_LABEL, PART_OF

API_VERSION: Final = "kubeflow.org/v1"
KIND: Final = "PyTorchJob"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CONTAINER_NAME = "pytorch"
"""The training operator finds the training container by this name."""
METRICS_PORT = 9300
"""Where rank 0 serves the `llmp_*` metrics (container port `metrics`)."""
CONFIG_MOUNT = "/etc/llmp"
"""Where a job's ConfigMap (`config_map`) is mounted, read-only."""
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
"""Cluster Autoscaler never drains a node to scale it down while a pod says "false" here:
a training pod evicted for bin-packing costs the whole job a restart."""
STEP_TIMES_FILE = "step-times.jsonl"
SHARD_CACHE = f"{FSX_MOUNT}/cache/shards"
"""Where a training job caches token shards it reads from s3:// (`workloads.training.s3io`)."""
"""Per-rank step times (JSON lines for `llmp stragglers`), in the checkpoint dir."""

JobKind = Literal["training", "promotion", "quantization"]
"""The pod's `llm-platform/job-kind`: what its GPUs are busy with."""

SpecT = TypeVar("SpecT", bound=BaseModel)


# --- the custom resource ---------------------------------------------------------------


class ElasticPolicy(K8s):
    min_replicas: int
    max_replicas: int
    max_restarts: int
    rdzv_backend: Literal["c10d"] = "c10d"


class ReplicaSpec(K8s):
    replicas: int
    restart_policy: Literal["OnFailure", "ExitCode"] = "OnFailure"
    template: PodTemplate


class RunPolicy(K8s):
    clean_pod_policy: Literal["None", "Running", "All"] = "Running"
    backoff_limit: int
    suspend: bool = True


class PyTorchJobSpec(K8s):
    elastic_policy: ElasticPolicy
    nproc_per_node: str = Field(
        description="Processes per pod. The operator's webhook deprecates (and refuses beside "
        "this) elasticPolicy.nProcPerNode; the string form also takes auto/gpu/cpu."
    )
    run_policy: RunPolicy
    pytorch_replica_specs: dict[Literal["Worker"], ReplicaSpec]


class PyTorchJob(K8s):
    api_version: Literal["kubeflow.org/v1"] = API_VERSION
    kind: Literal["PyTorchJob"] = KIND
    metadata: ObjectMeta
    spec: PyTorchJobSpec


# --- what a user submits ---------------------------------------------------------------


class JobSpec(BaseModel):
    """One training run. Defaults take the whole instance: all GPUs, every EFA interface."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Job name; pods are <name>-worker-<i>.")
    namespace: str = Field(description="Tenant namespace (has the fsx-lustre claim and a queue).")
    image: str = Field(description="Training image, pinned by tag or digest.")
    command: list[str] = Field(
        min_length=1, description="What torchrun runs: a script and its arguments, or -m module."
    )
    instance_type: str
    node_pool: str = Field(description="Value of the pool's llm-platform/pool label.")
    nodes_min: int = Field(ge=1)
    nodes_max: int = Field(ge=1)
    max_restarts: int = Field(3, ge=0, description="Elastic restarts of the whole worker group.")
    gpus_per_node: int | None = Field(None, description="Default: every accelerator.")
    procs_per_node: int | None = Field(
        None, ge=1, description="torchrun processes per pod (nprocPerNode); default one per GPU."
    )
    efa_per_node: int | None = Field(None, description="Default: every EFA interface.")
    checkpoint_dir: str | None = Field(
        None,
        description="Under /fsx, shared by every node; required for training (None: a job "
        "that keeps no state of its own).",
    )
    job_kind: JobKind = Field(
        "training", description="The pods' job-kind; only training serves the trainer's metrics."
    )
    trainer_metrics: bool = Field(
        True,
        description="training: the trainer serves `llmp_*` metrics and writes step times "
        "(workloads.training.train and workloads.training.parallel both do).",
    )
    restart_policy: Literal["OnFailure", "ExitCode"] = Field(
        "OnFailure",
        description="OnFailure: the kubelet restarts in place (elastic training); ExitCode: "
        "the job fails on exit codes 1-127, the operator starts the pod again on 130/137/143.",
    )
    queue_name: str = Field(description="Kueue LocalQueue in the namespace.")
    priority_class: str = "llmp-training"
    memory_fraction: float = Field(
        0.85,
        gt=0,
        le=0.95,
        description="Share of instance memory requested; the rest is the kubelet's and the OS's.",
    )
    host_share: Literal["node", "gpus"] = Field(
        "node",
        description="node: memory_fraction of the instance's CPU and memory (training takes "
        "whole nodes); gpus: of the GPUs' share of them (gpus/count, the share Kueue's quota "
        "gives a GPU), so the node's other GPUs keep theirs.",
    )
    shm_size: str = "64Gi"
    run_as_user: int = Field(1000, ge=1)
    service_account: str = WORKLOAD_SERVICE_ACCOUNT
    config_map: str | None = Field(
        None, description=f"A ConfigMap in the namespace, mounted read-only at {CONFIG_MOUNT}."
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="Extra labels on the job and its pods."
    )
    accelerator_resource: str | None = Field(
        None,
        description="The extended resource asked for instead of the accelerator kind's: a MIG "
        "partition (`nvidia.com/mig-3g.40gb`), gpus_per_node of them.",
    )
    partitions_per_gpu: int = Field(
        1,
        ge=1,
        le=7,
        description="With accelerator_resource, how many such partitions one GPU holds: a "
        "partition's host share (host_share gpus) is that GPU's divided by it.",
    )
    topology: dict[str, str] = Field(
        default_factory=dict,
        description="Kueue's Topology Aware Scheduling request, as the pod annotations it reads "
        "(`kueue.x-k8s.io/podset-required-topology: <level>` and the like): what a job on a "
        "topology-aware pool must carry, and one on any other pool must not.",
    )

    @field_validator("topology")
    @classmethod
    def _topology(cls, v: dict[str, str]) -> dict[str, str]:
        unknown = [k for k in v if not k.startswith("kueue.x-k8s.io/podset-")]
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not a Kueue pod-set annotation")
        return v

    @field_validator("name", "namespace", "node_pool", "queue_name")
    @classmethod
    def _dns(cls, v: str, info: ValidationInfo) -> str:
        # 52: the operator appends "-worker-<index>" and the Service name must stay a label.
        return check_dns_label(v, str(info.field_name).replace("_", " "), 52)

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        return check_image(v)

    @field_validator("priority_class")
    @classmethod
    def _priority(cls, v: str) -> str:
        return check_priority_class(v)

    @field_validator("checkpoint_dir")
    @classmethod
    def _checkpoint(cls, v: str | None) -> str | None:
        return v if v is None else on_fsx(v, "checkpoint dir")

    @model_validator(mode="after")
    def _fits_instance(self) -> JobSpec:
        instances = catalog().instances
        if self.instance_type not in instances:
            raise ValueError(f"instance type {self.instance_type} is not in the catalog")
        itype = instances[self.instance_type]
        if itype.accelerator is None:
            raise ValueError(f"instance type {self.instance_type} has no accelerator")
        if self.nodes_min > self.nodes_max:
            raise ValueError(f"nodes_min {self.nodes_min} is above nodes_max {self.nodes_max}")
        if self.checkpoint_dir is None and self.job_kind == "training":
            raise ValueError("checkpoint_dir: a training job needs one (under /fsx/)")
        gpus = self.gpus
        if not 1 <= gpus <= itype.accelerator.count:
            raise ValueError(
                f"gpus_per_node {gpus}: {self.instance_type} has {itype.accelerator.count} "
                f"{itype.accelerator.model} accelerators"
            )
        if self.procs_per_node is not None and self.procs_per_node > gpus:
            raise ValueError(f"procs_per_node {self.procs_per_node}: more than its {gpus} GPUs")
        if not 0 <= self.efa <= itype.efa_interfaces:
            raise ValueError(
                f"efa_per_node {self.efa}: {self.instance_type} takes at most "
                f"{itype.efa_interfaces} EFA interfaces"
            )
        return self

    @property
    def gpus(self) -> int:
        acc = catalog().instance(self.instance_type).accelerator
        default = acc.count if acc else 0
        return default if self.gpus_per_node is None else self.gpus_per_node

    @property
    def procs(self) -> int:
        """torchrun's processes per pod: `procs_per_node`, else one per GPU."""
        return self.gpus if self.procs_per_node is None else self.procs_per_node

    @property
    def serves_metrics(self) -> bool:
        return self.job_kind == "training" and self.trainer_metrics

    @property
    def efa(self) -> int:
        default = catalog().instance(self.instance_type).efa_interfaces
        return default if self.efa_per_node is None else self.efa_per_node


def training_env(spec: JobSpec) -> list[EnvVar]:
    """PyTorch and NCCL settings per FACTS.md, plus where the run keeps its state."""
    kind = catalog().instance(spec.instance_type).accelerator
    env = [
        EnvVar(name="TORCH_NCCL_ASYNC_ERROR_HANDLING", value="1"),
        # On a collective timeout each rank dumps its flight-recorder ring
        # buffer next to the checkpoints, where it survives the pod.
        EnvVar(name="TORCH_NCCL_DUMP_ON_TIMEOUT", value="1"),
        EnvVar(name="TORCH_NCCL_TRACE_BUFFER_SIZE", value="2000"),
    ]
    if spec.checkpoint_dir is not None:
        env.append(
            EnvVar(
                name="TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                value=f"{spec.checkpoint_dir}/nccl-traces/rank_",
            )
        )
    env.append(EnvVar(name="PYTORCH_CUDA_ALLOC_CONF", value="expandable_segments:True"))
    if spec.checkpoint_dir is not None:
        env.append(EnvVar(name="CHECKPOINT_DIR", value=spec.checkpoint_dir))
        # Token shards read from s3:// are cached here, once for every node (outside both
        # associations' paths, so nothing exports or re-imports them).
        env.append(EnvVar(name="LLMP_SHARD_CACHE", value=SHARD_CACHE))
    if spec.serves_metrics:
        # The trainers' metrics and step times (read through their --metrics-port etc. defaults)
        env += [
            EnvVar(name="LLMP_METRICS_PORT", value=str(METRICS_PORT)),
            EnvVar(name="LLMP_METRICS_ADDR", value="0.0.0.0"),
            EnvVar(name="LLMP_STEP_TIMES", value=f"{spec.checkpoint_dir}/{STEP_TIMES_FILE}"),
            EnvVar(name="LLMP_JOB_NAME", value=spec.name),
        ]
    env.append(
        EnvVar(
            name="NODE_NAME",
            value_from=EnvVarSource(field_ref=ObjectFieldSelector(field_path="spec.nodeName")),
        )
    )
    if kind is not None and kind.kind == "nvidia":
        env = nccl_env() + env
    if spec.efa:
        # DataLoader workers fork. With libfabric's bounce buffers on huge pages, fork()
        # fails with ENOMEM once the pool is used up (awsome-distributed-ai's EFA
        # cheatsheet); regular pages cost a little bandwidth. RDMAV_FORK_SAFE stays unset
        # and FI_EFA_FORK_SAFE is not needed on kernels >= 5.15 (AL2023 runs 6.x).
        env.append(EnvVar(name="FI_EFA_USE_HUGE_PAGE", value="0"))
    return env


def _resources(spec: JobSpec) -> ResourceRequirements:
    itype = catalog().instance(spec.instance_type)
    kind = catalog().accelerator_kind(spec.instance_type)
    assert kind is not None  # the spec's validator refuses instance types without one
    fraction = spec.memory_fraction
    if spec.host_share == "gpus" and itype.accelerator is not None:
        fraction *= spec.gpus / itype.accelerator.count / spec.partitions_per_gpu
    memory_gib = math.floor(itype.memory_gib * fraction)
    # No hugepages-2Mi: libfabric is told not to use them (FI_EFA_USE_HUGE_PAGE=0, see
    # training_env). Memory request == limit keeps the kernel from OOM-killing a rank
    # while it pins EFA buffers (those errors look like EFA faults).
    both = {
        spec.accelerator_resource or kind.resource: str(spec.gpus),
        "memory": f"{memory_gib}Gi",
    }
    if spec.efa:
        both[EFA_RESOURCE] = str(spec.efa)
    # CPU is requested (scheduling, quota) but not limited: CFS throttling of
    # data-loader workers costs more GPU time than it saves.
    cpu = str(max(1, math.floor(itype.vcpus * fraction)))
    return ResourceRequirements(limits=dict(both), requests={**both, "cpu": cpu})


def pod_template(spec: JobSpec) -> PodTemplate:
    affinity, tolerations = node_placement(spec.instance_type, spec.node_pool)
    fsx, fsx_mount = fsx_volume()
    shm, shm_mount = shm_volume(spec.shm_size)
    volumes, mounts = [fsx, shm], [fsx_mount, shm_mount]
    if spec.config_map is not None:
        volumes.append(Volume(name="config", config_map=ConfigMapSource(name=spec.config_map)))
        mounts.append(VolumeMount(name="config", mount_path=CONFIG_MOUNT, read_only=True))
    container = Container(
        name=CONTAINER_NAME,
        image=spec.image,
        command=["torchrun", *spec.command],
        env=training_env(spec),
        ports=[ContainerPort(name="metrics", container_port=METRICS_PORT)]
        if spec.serves_metrics
        else None,
        resources=_resources(spec),
        volume_mounts=mounts,
        security_context=restricted_container_context(),
    )
    return PodTemplate(
        metadata=ObjectMeta(
            labels={
                **spec.labels,
                "app.kubernetes.io/name": spec.name,
                "app.kubernetes.io/component": spec.job_kind,
                JOB_KIND_LABEL: spec.job_kind,
            },
            annotations={SAFE_TO_EVICT: "false", **spec.topology},
        ),
        spec=PodSpec(
            service_account_name=spec.service_account,
            priority_class_name=spec.priority_class,
            # Time for a rank to finish writing its checkpoint shard on SIGTERM.
            termination_grace_period_seconds=300,
            affinity=affinity,
            tolerations=tolerations,
            security_context=non_root_pod_context(spec.run_as_user),
            containers=[container],
            volumes=volumes,
        ),
    )


def pytorch_job(spec: JobSpec) -> dict[str, Any]:
    """The PyTorchJob body for `spec`, ready for the API server (or `kubectl apply`)."""
    job = PyTorchJob(
        metadata=ObjectMeta(
            name=spec.name,
            namespace=spec.namespace,
            labels={**spec.labels, QUEUE_LABEL: spec.queue_name, **PART_OF},
        ),
        spec=PyTorchJobSpec(
            elastic_policy=ElasticPolicy(
                min_replicas=spec.nodes_min,
                max_replicas=spec.nodes_max,
                max_restarts=spec.max_restarts,
            ),
            nproc_per_node=str(spec.procs),
            run_policy=RunPolicy(backoff_limit=spec.max_restarts),
            pytorch_replica_specs={
                "Worker": ReplicaSpec(
                    replicas=spec.nodes_max,
                    restart_policy=spec.restart_policy,
                    template=pod_template(spec),
                )
            },
        ),
    )
    return job.to_json()


def build(**fields: Any) -> dict[str, Any]:
    """`pytorch_job(JobSpec(**fields))` with pydantic's multi-line report cut to one line."""
    return pytorch_job(parse_spec(JobSpec, fields))


def parse_spec(model: type[SpecT], fields: dict[str, Any]) -> SpecT:
    """Validate `fields`; on error raise one ValueError line naming the first problem."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise ValueError(f"{model.__name__}: {where + ': ' if where else ''}{msg}") from None
