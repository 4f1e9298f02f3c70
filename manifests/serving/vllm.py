"""vLLM model servers: per model a Deployment, a Service and a PodDisruptionBudget.

Each pod runs vLLM's OpenAI server on the weights of the read-only
`model-weights` claim (Mountpoint for S3: nothing is copied into the image),
with as many GPUs as its tensor-parallel size, and the gateway sidecar
(`manifests.serving.gateway`) in front of it: vLLM listens on the pod's loopback
only, so the gateway's listeners are the pod's only ports. The pod runs as the
`model-server` service account (the role that reads its keys) and mounts its
model's keys through the Secrets Store CSI driver into the gateway only
(`manifests.serving.keys`).

- Probes on vLLM's `/health` at 127.0.0.1, from inside its container (the
  kubelet's own HTTP probes come from the node, and nothing listens for them):
  a startup probe that allows `STARTUP_BUDGET_S` for reading the weights from S3
  and warming up, then readiness and liveness.
- Graceful drain: the pod leaves the Service endpoints at termination, a
  preStop sleep covers the ALB's deregistration, then vLLM finishes its
  in-flight requests within `terminationGracePeriodSeconds`.
- Rollouts surge one pod and take none away (maxSurge 1, maxUnavailable 0):
  the old replica serves until the new one is ready.
- `replicas` is left out: KEDA owns it (`manifests.serving.keda`), and a
  value here would be reset at every `pulumi up`.
- Spread over zones and nodes (best effort: a model with few replicas on a
  pool in fewer zones still schedules), priority `llmp-serving`, the GPU
  taint tolerated and the pool required by node affinity.
- A canary (`serving.models[].canary`) is a second Deployment, Service and PDB
  named `<model>-canary`, with the same engine settings and gateway, serving
  the canary's revision under the same served name; its pods carry the track
  label `canary` and their own instance label, so the stable's selectors never
  take them. Its replicas are fixed (KEDA scales the stable).
"""

from __future__ import annotations

import json
import math

import pulumi
from pulumi_kubernetes.apps.v1 import (
    DeploymentInitArgs,
    DeploymentSpecArgs,
    DeploymentStrategyArgs,
    RollingUpdateDeploymentArgs,
)
from pulumi_kubernetes.core.v1 import (
    AffinityArgs,
    ContainerArgs,
    ContainerPortArgs,
    EmptyDirVolumeSourceArgs,
    EnvVarArgs,
    ExecActionArgs,
    LifecycleArgs,
    LifecycleHandlerArgs,
    NodeAffinityArgs,
    NodeSelectorArgs,
    NodeSelectorRequirementArgs,
    NodeSelectorTermArgs,
    PersistentVolumeClaimVolumeSourceArgs,
    PodSpecArgs,
    PodTemplateSpecArgs,
    ProbeArgs,
    ResourceRequirementsArgs,
    ServiceInitArgs,
    ServicePortArgs,
    ServiceSpecArgs,
    SleepActionArgs,
    TCPSocketActionArgs,
    TolerationArgs,
    TopologySpreadConstraintArgs,
    VolumeArgs,
    VolumeMountArgs,
)
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, ObjectMetaArgs
from pulumi_kubernetes.policy.v1 import PodDisruptionBudgetInitArgs, PodDisruptionBudgetSpecArgs

from manifests.hardening import container_context, pod_context
from manifests.serving import EngineSettings, ServedModel, gateway, keys
from manifests.volumes import MODEL_WEIGHTS_CLAIM
from spec.catalog import InstanceType, catalog
from spec.labels import PART_OF, POOL_LABEL, SCRAPE_LABEL

PRIORITY_CLASS = "llmp-serving"
ZONE_KEY = "topology.kubernetes.io/zone"
HOST_KEY = "kubernetes.io/hostname"
WEIGHTS_PATH = "/models"
STARTUP_BUDGET_S = 1800
"""Loading a 70B model from S3 through Mountpoint and compiling takes minutes."""
PRE_STOP_SLEEP_S = 30
"""Longer than the ALB's deregistration and the endpoint propagation."""
GRACE_S = 180
"""preStop plus time for in-flight generations to finish."""
CACHE_PATH = "/var/cache/vllm"
RUN_AS = 10101
"""A high UID of no image user: the weights are readable by all (Mountpoint allow-other)."""
SHM_GIB = 16
"""Shared memory for NCCL between tensor-parallel workers."""
STABLE = "stable"
CANARY = "canary"
TRACK_LABEL = "llm-platform/track"
"""On a canary's objects and pods only (the stable's selectors and labels stay as they were)."""
MODEL_LABEL = "llm-platform/model"


def workload_name(model: str, track: str = STABLE) -> str:
    """The Deployment, Service and PDB name of a model's track: `<model>` or `<model>-canary`
    (the canary's Service name is also the `service` label of its scraped series)."""
    return model if track == STABLE else f"{model}-{track}"


def labels(model: str, track: str = STABLE) -> dict[str, str]:
    """Pod and object labels; `component: serving` marks them for the policy pack."""
    out = {
        **PART_OF,
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": workload_name(model, track),
        "app.kubernetes.io/component": "serving",
    }
    if track != STABLE:
        out |= {TRACK_LABEL: track, MODEL_LABEL: model}
    return out


def selector(model: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": model}


SERVE = ("vllm", "serve")
"""The vllm-openai image's ENTRYPOINT (v0.34.0's docker/Dockerfile): the Deployment gives only
its arguments; a group's leader runs it itself (`manifests.serving.multinode`)."""


def vllm_args(model: ServedModel, engine: EngineSettings, revision: str | None = None) -> list[str]:
    """The arguments of vLLM v0.34.0's `vllm serve` for `model`, tuned by its resolved
    `engine` (`revision`: another than the model's, a canary's): the weights' directory as
    the positional model (`--model` is deprecated there), then flags, each one that vLLM's
    own argument definitions have (tests/peers/test_vllm_sdist.py)."""
    args = [
        f"{WEIGHTS_PATH}/{revision or model.revision}",
        "--served-model-name",
        model.name,
        # Loopback: only this pod's gateway reaches vLLM (manifests.serving.gateway).
        "--host",
        gateway.VLLM_HOST,
        "--port",
        str(gateway.VLLM_PORT),
        "--tensor-parallel-size",
        str(engine.tensor_parallel_size),
        "--max-model-len",
        str(engine.max_model_len),
        "--max-num-seqs",
        str(engine.max_num_seqs),
        "--max-num-batched-tokens",
        str(engine.max_num_batched_tokens),
        "--gpu-memory-utilization",
        f"{engine.gpu_memory_utilization:g}",
        # Booleans as vLLM's BooleanOptionalAction spells them: both set, never implied.
        "--enable-prefix-caching" if engine.enable_prefix_caching else "--no-enable-prefix-caching",
        "--enable-chunked-prefill"
        if engine.enable_chunked_prefill
        else "--no-enable-chunked-prefill",
    ]
    if engine.pipeline_parallel_size > 1:
        # Stages on several nodes: vLLM's Ray executor, over the group's Ray cluster.
        args += ["--pipeline-parallel-size", str(engine.pipeline_parallel_size)]
        args += ["--distributed-executor-backend", "ray"]
    if engine.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", engine.kv_cache_dtype]
    if model.quantization != "none":
        args += ["--quantization", model.quantization]
    if engine.speculative is not None:
        spec = dict(engine.speculative)
        if "model" in spec:
            spec["model"] = f"{WEIGHTS_PATH}/{spec['model']}"
        args += ["--speculative-config", json.dumps(spec, sort_keys=True, separators=(",", ":"))]
    if engine.lora_adapters:
        args += ["--enable-lora", "--max-loras", str(engine.max_loras)]
        args += ["--max-lora-rank", str(engine.max_lora_rank), "--lora-modules"]
        args += [f"{name}={WEIGHTS_PATH}/{path}" for name, path in engine.lora_adapters.items()]
    if engine.otlp_traces_endpoint:
        # A span per request, continuing the gateway's trace (traceparent).
        args += ["--otlp-traces-endpoint", engine.otlp_traces_endpoint]
    return args


def replica_resources(
    model: ServedModel, itype: InstanceType, partitions_per_gpu: int = 1
) -> tuple[int, int]:
    """(vCPUs, GiB) of a replica: its share of the node by GPUs (on a MIG partition, its
    GPU's share over the partitions the GPU holds), less 10% for the node."""
    share = model.gpus_per_replica / itype.gpu_count / partitions_per_gpu
    cpu = max(1, math.floor(itype.vcpus * share * 0.9) - 1)
    memory = max(4, math.floor(itype.memory_gib * share * 0.9) - 2)
    return cpu, memory


HEALTH_CHECK = [
    "python3",
    "-c",
    "import urllib.request; "
    f"urllib.request.urlopen('http://{gateway.VLLM_HOST}:{gateway.VLLM_PORT}/health', timeout=2)",
]
"""vLLM's `/health` from inside its container: exits non-zero unless it answers 2xx."""


def vllm_container(
    model: ServedModel,
    engine: EngineSettings,
    instance_type: str,
    gpu_resource: str,
    revision: str | None = None,
    *,
    command: list[str] | None = None,
    extra_resources: dict[str, str] | None = None,
    extra_env: list[EnvVarArgs] | None = None,
    probe_command: list[str] | None = None,
    partitions_per_gpu: int = 1,
) -> ContainerArgs:
    """vLLM's container (`command`: a script that starts the server itself, as a group's
    leader or worker does; `probe_command`: probes that run it instead of asking the
    server's `/health`, for a worker, which serves no HTTP). It declares no port: vLLM
    listens on loopback, for the gateway only."""

    def check() -> dict[str, object]:
        return {"exec_": ExecActionArgs(command=probe_command or HEALTH_CHECK)}

    cpu, memory = replica_resources(model, catalog().instance(instance_type), partitions_per_gpu)
    gpus = str(model.gpus_per_replica)
    more = dict(extra_resources or {})
    pins = catalog().serving
    assert pins is not None, "catalog.yaml has no serving section"
    return ContainerArgs(
        name="vllm",
        image=pins.vllm_image,
        image_pull_policy="Always",
        command=command,
        args=None if command is not None else vllm_args(model, engine, revision),
        env=[
            EnvVarArgs(name="HF_HUB_OFFLINE", value="1"),
            EnvVarArgs(name="VLLM_NO_USAGE_STATS", value="1"),
            # A read-only root file system: every cache goes to the `cache` emptyDir.
            EnvVarArgs(name="HOME", value=CACHE_PATH),
            EnvVarArgs(name="XDG_CACHE_HOME", value=CACHE_PATH),
            EnvVarArgs(name="VLLM_CACHE_ROOT", value=f"{CACHE_PATH}/vllm"),
            EnvVarArgs(name="TRITON_CACHE_DIR", value=f"{CACHE_PATH}/triton"),
            EnvVarArgs(name="TMPDIR", value="/tmp"),
            EnvVarArgs(name="USER", value="vllm"),  # no passwd entry for RUN_AS
            *(extra_env or []),
        ],
        resources=ResourceRequirementsArgs(
            requests={"cpu": str(cpu), "memory": f"{memory}Gi", gpu_resource: gpus, **more},
            limits={"cpu": str(cpu), "memory": f"{memory}Gi", gpu_resource: gpus, **more},
        ),
        startup_probe=ProbeArgs(
            **check(),  # type: ignore[arg-type]
            period_seconds=10,
            timeout_seconds=5,
            failure_threshold=STARTUP_BUDGET_S // 10,
        ),
        readiness_probe=ProbeArgs(
            **check(),  # type: ignore[arg-type]
            period_seconds=5,
            timeout_seconds=3,
            failure_threshold=3,
        ),
        liveness_probe=ProbeArgs(
            **check(),  # type: ignore[arg-type]
            period_seconds=15,
            timeout_seconds=10,
            failure_threshold=4,
        ),
        lifecycle=LifecycleArgs(
            pre_stop=LifecycleHandlerArgs(sleep=SleepActionArgs(seconds=PRE_STOP_SLEEP_S))
        ),
        volume_mounts=[
            VolumeMountArgs(name="weights", mount_path=WEIGHTS_PATH, read_only=True),
            VolumeMountArgs(name="shm", mount_path="/dev/shm"),
            VolumeMountArgs(name="cache", mount_path=CACHE_PATH),
            VolumeMountArgs(name="tmp", mount_path="/tmp"),
        ],
        security_context=container_context(RUN_AS),
    )


def gateway_container(model: gateway.GatewayModel) -> ContainerArgs:
    """The Envoy sidecar of `model`: its bootstrap (no key) is the `--config-yaml`
    argument, so it is part of the pod template; its keyed listeners are the file the
    Secrets Store CSI driver mounts at KEYS_DIR, which Envoy watches."""
    pins = catalog().serving
    assert pins is not None, "catalog.yaml has no serving section"
    ports = [
        ContainerPortArgs(name="http", container_port=gateway.API_PORT),
        ContainerPortArgs(name="health", container_port=gateway.HEALTH_PORT),
        ContainerPortArgs(name="metrics", container_port=gateway.METRICS_PORT),
    ]
    if model.routing == "endpoint-picker":
        ports.append(ContainerPortArgs(name="peer", container_port=gateway.PEER_PORT))
    return ContainerArgs(
        name="gateway",
        image=pins.gateway_image,
        image_pull_policy="Always",
        args=[
            "--config-yaml",
            gateway.bootstrap_arg(model),
            "--log-level",
            "warn",
            "--disable-hot-restart",
        ],
        ports=ports,
        resources=ResourceRequirementsArgs(
            requests={"cpu": "500m", "memory": "256Mi"},
            limits={"cpu": "2", "memory": "512Mi"},
        ),
        # The API listener is the keyed one: ready once the keys are loaded.
        readiness_probe=ProbeArgs(
            tcp_socket=TCPSocketActionArgs(port=gateway.API_PORT), period_seconds=5
        ),
        liveness_probe=ProbeArgs(
            tcp_socket=TCPSocketActionArgs(port=gateway.HEALTH_PORT), period_seconds=15
        ),
        lifecycle=LifecycleArgs(
            # Keep proxying while vLLM drains; Envoy stops after vLLM's preStop.
            pre_stop=LifecycleHandlerArgs(sleep=SleepActionArgs(seconds=PRE_STOP_SLEEP_S))
        ),
        volume_mounts=[keys.keys_mount()],
        security_context=container_context(RUN_AS),
    )


def deployment_args(
    namespace: pulumi.Input[str],
    model: ServedModel,
    engine: EngineSettings,
    instance_type: str,
    gpu_resource: str,
    taint_key: str,
    *,
    gateway_model: gateway.GatewayModel,
    track: str = STABLE,
    revision: str | None = None,
    replicas: int | None = None,
    pod_annotations: dict[str, str] | None = None,
    partitions_per_gpu: int = 1,
) -> DeploymentInitArgs:
    """The model's Deployment, its gateway `gateway_model`'s (`track` canary: its canary's,
    serving `revision` with fixed `replicas`; the stable leaves replicas to KEDA).
    `pod_annotations`: Kueue's topology request on a topology-aware pool; `gpu_resource`
    with `partitions_per_gpu`: a MIG partition, of which one GPU holds that many."""
    name = workload_name(model.name, track)
    pod_labels = labels(model.name, track)
    pod = pod_spec(
        model,
        engine,
        instance_type,
        gpu_resource,
        taint_key,
        gateway_model=gateway_model,
        spread_selector=selector(name),
        revision=revision,
        partitions_per_gpu=partitions_per_gpu,
    )
    return DeploymentInitArgs(
        metadata=ObjectMetaArgs(
            name=name,
            namespace=namespace,
            labels=pod_labels,
            # Rollouts are gated by readiness in the cluster; a model loading for many
            # minutes, or scaled to zero outside serving hours, must not hold `pulumi up`.
            annotations={"pulumi.com/skipAwait": "true"},
        ),
        spec=DeploymentSpecArgs(
            replicas=replicas,
            selector=LabelSelectorArgs(match_labels=selector(name)),
            strategy=DeploymentStrategyArgs(
                type="RollingUpdate",
                rolling_update=RollingUpdateDeploymentArgs(max_surge=1, max_unavailable=0),
            ),
            revision_history_limit=5,
            progress_deadline_seconds=STARTUP_BUDGET_S + 600,
            template=PodTemplateSpecArgs(
                metadata=ObjectMetaArgs(labels=pod_labels, annotations=pod_annotations or None),
                spec=pod,
            ),
        ),
    )


def pod_spec(
    model: ServedModel,
    engine: EngineSettings,
    instance_type: str,
    gpu_resource: str,
    taint_key: str,
    *,
    gateway_model: gateway.GatewayModel,
    spread_selector: dict[str, str],
    revision: str | None = None,
    containers: list[ContainerArgs] | None = None,
    partitions_per_gpu: int = 1,
) -> PodSpecArgs:
    """A serving pod: vLLM and the gateway sidecar on the model's pool (`containers`:
    others, a LeaderWorkerSet's), as the model server's account, with its model's keys."""
    spread = [
        TopologySpreadConstraintArgs(
            max_skew=1,
            topology_key=key,
            when_unsatisfiable="ScheduleAnyway",
            label_selector=LabelSelectorArgs(match_labels=spread_selector),
        )
        for key in (ZONE_KEY, HOST_KEY)
    ]
    return PodSpecArgs(
        priority_class_name=PRIORITY_CLASS,
        # Pod Identity gives this account the role that reads the model's keys; the pod
        # calls no Kubernetes API, so no token is mounted.
        service_account_name=keys.MODEL_SERVER_SA,
        security_context=pod_context(RUN_AS, fs_group=RUN_AS),
        automount_service_account_token=False,
        termination_grace_period_seconds=GRACE_S,
        containers=containers
        or [
            vllm_container(
                model,
                engine,
                instance_type,
                gpu_resource,
                revision,
                partitions_per_gpu=partitions_per_gpu,
            ),
            gateway_container(gateway_model),
        ],
        tolerations=[TolerationArgs(key=taint_key, operator="Exists", effect="NoSchedule")],
        affinity=AffinityArgs(
            node_affinity=NodeAffinityArgs(
                required_during_scheduling_ignored_during_execution=NodeSelectorArgs(
                    node_selector_terms=[
                        NodeSelectorTermArgs(
                            match_expressions=[
                                NodeSelectorRequirementArgs(
                                    key=POOL_LABEL, operator="In", values=[model.node_pool]
                                )
                            ]
                        )
                    ]
                )
            )
        ),
        topology_spread_constraints=spread,
        volumes=[
            VolumeArgs(
                name="weights",
                persistent_volume_claim=PersistentVolumeClaimVolumeSourceArgs(
                    claim_name=MODEL_WEIGHTS_CLAIM, read_only=True
                ),
            ),
            VolumeArgs(
                name="shm",
                empty_dir=EmptyDirVolumeSourceArgs(medium="Memory", size_limit=f"{SHM_GIB}Gi"),
            ),
            VolumeArgs(name="cache", empty_dir=EmptyDirVolumeSourceArgs(size_limit="50Gi")),
            VolumeArgs(name="tmp", empty_dir=EmptyDirVolumeSourceArgs(size_limit="10Gi")),
            keys.keys_volume(model.name),
        ],
    )


def service_args(
    namespace: pulumi.Input[str],
    model: str,
    track: str = STABLE,
    pod_selector: dict[str, str] | None = None,
) -> ServiceInitArgs:
    """The track's Service (`pod_selector`: other pods than the Deployment's, a
    LeaderWorkerSet's leaders)."""
    name = workload_name(model, track)
    return ServiceInitArgs(
        metadata=ObjectMetaArgs(
            name=name,
            namespace=namespace,
            labels={**labels(model, track), SCRAPE_LABEL: "true"},
            annotations={
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(gateway.METRICS_PORT),
                "prometheus.io/path": "/metrics",
            },
        ),
        spec=ServiceSpecArgs(
            type="ClusterIP",
            selector=pod_selector or selector(name),
            ports=[
                ServicePortArgs(name="http", port=gateway.API_PORT, target_port="http"),
                ServicePortArgs(name="health", port=gateway.HEALTH_PORT, target_port="health"),
                ServicePortArgs(name="metrics", port=gateway.METRICS_PORT, target_port="metrics"),
            ],
        ),
    )


def pdb_args(
    namespace: pulumi.Input[str], model: str, track: str = STABLE
) -> PodDisruptionBudgetInitArgs:
    """One replica at a time: a drain never empties a model with two or more replicas,
    and never blocks forever on a model with one (minAvailable 1 would)."""
    name = workload_name(model, track)
    return PodDisruptionBudgetInitArgs(
        metadata=ObjectMetaArgs(name=name, namespace=namespace, labels=labels(model, track)),
        spec=PodDisruptionBudgetSpecArgs(
            max_unavailable=1,
            selector=LabelSelectorArgs(match_labels=selector(name)),
        ),
    )
