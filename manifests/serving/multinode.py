"""Models larger than a node: a replica is a LeaderWorkerSet group of whole nodes.

vLLM shards such a model with tensor parallelism inside each node (NVLink: the
node's GPUs) and pipeline parallelism across nodes (one stage per node, the
activations between stages over EFA). Its Ray executor spans the group: the
leader starts a Ray head, waits until all `size` nodes joined, then runs the
OpenAI server with `--pipeline-parallel-size`; each worker joins the head at
`LWS_LEADER_ADDRESS` and blocks. This is the LeaderWorkerSet project's vLLM
example (docs/examples/vllm/GPU/lws.yaml at v0.10.0), with the `ray start`
commands of vLLM's `multi-node-serving.sh` written out here rather than read
from a path inside the image.

- `restartPolicy: RecreateGroupOnPodRestart`: a stage that dies takes its
  group down and the group restarts whole (a pipeline with a missing stage
  serves nothing); `startupPolicy: LeaderCreated` starts the workers with the
  leader.
- Kueue admits each group as one workload (pod sets `leader` x1 and `worker` x
  size-1), from the `serving` namespace's LocalQueue (the label on the
  LeaderWorkerSet): on an elastic pool its ProvisioningRequest asks the
  Cluster Autoscaler for all the group's nodes at once
  (`best-effort-atomic-scale-up`), so a group never holds half its nodes.
- `replicas` is left out: KEDA owns it through the LeaderWorkerSet's scale
  subresource (one group per replica), as it does a Deployment's.
- The Service selects the groups' leaders only (they run the server, on loopback
  like every model server's, and the gateway sidecar); workers serve no port of the
  API, run no gateway, mount no keys and take no service account of the model
  server's. The Ray ports between a group's pods are fenced to the pods of the same
  LeaderWorkerSet (`manifests.serving.network`): Ray has no authentication, and a head
  reachable from any pod would run anyone's code.
- EFA: every interface of the node is requested, huge pages are not (Ray and
  vLLM fork; with libfabric >= 1.18 `FI_EFA_USE_HUGE_PAGE=0` avoids the ENOMEM
  at fork).
"""

from __future__ import annotations

import shlex
from typing import Any, Literal

import pulumi._types as pulumi_types
from pulumi_kubernetes.core.v1 import ContainerArgs, EnvVarArgs, PodTemplateSpecArgs
from pulumi_kubernetes.meta.v1 import ObjectMetaArgs
from pydantic import BaseModel, ConfigDict, Field

from manifests.kueue import LOCAL_QUEUE
from manifests.serving import NAMESPACE, EngineSettings, ServedModel, gateway, keys, vllm
from spec.catalog import catalog

API_VERSION = "leaderworkerset.x-k8s.io/v1"
KIND = "LeaderWorkerSet"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
ROLE_LABEL = "role"
"""Set on the leader template here, as the LWS example's Service selects it."""
RAY_PORT = 6379
OBJECT_STORE_BYTES = 4 * 1024**3
"""Ray's object store lives in /dev/shm (SHM_GIB); vLLM passes little through it."""
EFA_RESOURCE = "vpc.amazonaws.com/efa"
WORKER_CHECK = f'ray health-check --address="$LWS_LEADER_ADDRESS:{RAY_PORT}"'


class _Obj(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class Metadata(_Obj):
    name: str
    namespace: str
    labels: dict[str, str] = Field(default_factory=dict)


class RollingUpdateConfiguration(_Obj):
    max_unavailable: int = Field(0, ge=0, alias="maxUnavailable")
    max_surge: int = Field(1, ge=0, alias="maxSurge")


class RolloutStrategy(_Obj):
    type: Literal["RollingUpdate"] = "RollingUpdate"
    rolling_update_configuration: RollingUpdateConfiguration = Field(
        default_factory=RollingUpdateConfiguration, alias="rollingUpdateConfiguration"
    )


class LeaderWorkerTemplate(_Obj):
    size: int = Field(ge=2, description="Pods per group: the leader and size-1 workers.")
    restart_policy: Literal["RecreateGroupOnPodRestart", "None"] = Field(
        "RecreateGroupOnPodRestart", alias="restartPolicy"
    )
    leader_template: dict[str, Any] = Field(alias="leaderTemplate")
    worker_template: dict[str, Any] = Field(alias="workerTemplate")


class LeaderWorkerSetSpec(_Obj):
    replicas: int | None = Field(None, ge=0, description="None: KEDA owns it.")
    startup_policy: Literal["LeaderCreated", "LeaderReady"] = Field(
        "LeaderCreated", alias="startupPolicy"
    )
    rollout_strategy: RolloutStrategy = Field(
        default_factory=RolloutStrategy, alias="rolloutStrategy"
    )
    leader_worker_template: LeaderWorkerTemplate = Field(alias="leaderWorkerTemplate")


class LeaderWorkerSet(_Obj):
    api_version: Literal["leaderworkerset.x-k8s.io/v1"] = Field(
        "leaderworkerset.x-k8s.io/v1", alias="apiVersion"
    )
    kind: Literal["LeaderWorkerSet"] = "LeaderWorkerSet"
    metadata: Metadata
    spec: LeaderWorkerSetSpec

    def manifest(self) -> dict[str, Any]:
        return self.dump()


def plain(value: Any) -> Any:
    """A pulumi_kubernetes `*Args` tree as the manifest's plain data (camelCase keys):
    the pod templates are built by the same typed builders as the Deployments'."""
    if pulumi_types.is_input_type(type(value)):
        return {k: plain(v) for k, v in pulumi_types.input_type_to_dict(value).items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def leader_script(model: ServedModel, engine: EngineSettings, revision: str | None) -> str:
    """Start the Ray head, wait for the group's nodes, then serve (exec: vLLM is PID 1's
    child that receives SIGTERM and drains)."""
    serve = [*vllm.SERVE, *vllm.vllm_args(model, engine, revision)]
    count = 'import ray; ray.init(address="auto"); print(sum(n["Alive"] for n in ray.nodes()))'
    return "\n".join(
        [
            "set -eu",
            f"ray start --head --port={RAY_PORT} --object-store-memory={OBJECT_STORE_BYTES} "
            "--disable-usage-stats",
            f'until [ "$(python3 -c {shlex.quote(count)} 2>/dev/null || echo 0)" '
            '-ge "$LWS_GROUP_SIZE" ]; do',
            '  echo "waiting for the group\'s $LWS_GROUP_SIZE nodes to join Ray"; sleep 5',
            "done",
            "exec " + shlex.join(serve),
        ]
    )


def worker_script() -> str:
    """Join the leader's Ray head (retried until it is up) and block."""
    return "\n".join(
        [
            "set -eu",
            f'until ray health-check --address="$LWS_LEADER_ADDRESS:{RAY_PORT}" 2>/dev/null; do',
            "  sleep 5",
            "done",
            f'exec ray start --address="$LWS_LEADER_ADDRESS:{RAY_PORT}" '
            f"--object-store-memory={OBJECT_STORE_BYTES} --disable-usage-stats --block",
        ]
    )


def _env() -> list[EnvVarArgs]:
    return [
        EnvVarArgs(name="NCCL_SOCKET_IFNAME", value="^lo"),
        EnvVarArgs(name="FI_EFA_USE_HUGE_PAGE", value="0"),
        EnvVarArgs(name="RAY_USAGE_STATS_ENABLED", value="0"),
    ]


GROUP_ANNOTATION = "kueue.x-k8s.io/podset-group-name"
"""Kueue 0.19: pod sets of one group name are assigned flavors and a topology domain as one."""


def templates(
    model: ServedModel,
    engine: EngineSettings,
    instance_type: str,
    gpu_resource: str,
    taint_key: str,
    *,
    gateway_model: gateway.GatewayModel,
    name: str,
    revision: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(leader, worker) pod templates of one group, as plain manifests; `annotations`: on
    both (Kueue's topology request on a topology-aware pool)."""
    itype = catalog().instance(instance_type)
    efa = {EFA_RESOURCE: str(itype.efa_interfaces)} if itype.efa_interfaces else {}
    pod_labels = labels or vllm.labels(model.name)

    def container(script: str, serves: bool) -> ContainerArgs:
        # A worker is alive while the group's Ray head answers it: without the head its
        # stage serves nothing, and its restart recreates the group.
        return vllm.vllm_container(
            model,
            engine,
            instance_type,
            gpu_resource,
            revision,
            command=["/bin/bash", "-c", script],
            extra_resources=efa,
            extra_env=_env(),
            probe_command=None if serves else ["/bin/bash", "-c", WORKER_CHECK],
        )

    spread = {NAME_LABEL: name}

    def template(containers: list[ContainerArgs], role: str) -> dict[str, Any]:
        spec = vllm.pod_spec(
            model,
            engine,
            instance_type,
            gpu_resource,
            taint_key,
            gateway_model=gateway_model,
            spread_selector=spread,
            revision=revision,
            containers=containers,
        )
        meta = ObjectMetaArgs(
            labels={**pod_labels, ROLE_LABEL: role}, annotations=annotations or None
        )
        return plain(PodTemplateSpecArgs(metadata=meta, spec=spec))

    leader = template(
        [
            container(leader_script(model, engine, revision), True),
            vllm.gateway_container(gateway_model),
        ],
        "leader",
    )
    worker = template([container(worker_script(), False)], "worker")
    # A worker has no gateway: it mounts no keys and takes no account that reads them.
    worker["spec"]["volumes"] = [v for v in worker["spec"]["volumes"] if v["name"] != keys.VOLUME]
    del worker["spec"]["serviceAccountName"]
    return leader, worker


def leader_worker_set(
    model: ServedModel,
    engine: EngineSettings,
    instance_type: str,
    gpu_resource: str,
    taint_key: str,
    *,
    gateway_model: gateway.GatewayModel,
    track: str = vllm.STABLE,
    revision: str | None = None,
    replicas: int | None = None,
    topology: dict[str, str] | None = None,
) -> LeaderWorkerSet:
    """The model's LeaderWorkerSet: `engine.pipeline_parallel_size` nodes per group, its
    leaders' gateway `gateway_model`'s. `topology`: on a topology-aware pool, Kueue's request
    for the group, put on the leader and the workers with one pod-set group name, so Kueue
    places a group's nodes as one unit (`kueue.x-k8s.io/podset-group-name`)."""
    name = vllm.workload_name(model.name, track)
    obj_labels = vllm.labels(model.name, track)
    leader, worker = templates(
        model,
        engine,
        instance_type,
        gpu_resource,
        taint_key,
        gateway_model=gateway_model,
        name=name,
        revision=revision,
        labels=obj_labels,
        annotations={**topology, GROUP_ANNOTATION: "group"} if topology else None,
    )
    return LeaderWorkerSet(
        metadata=Metadata(
            name=name, namespace=NAMESPACE, labels={**obj_labels, QUEUE_LABEL: LOCAL_QUEUE}
        ),
        spec=LeaderWorkerSetSpec(
            replicas=replicas,
            leader_worker_template=LeaderWorkerTemplate(
                size=engine.pipeline_parallel_size,
                leader_template=leader,
                worker_template=worker,
            ),
        ),
    )


def leader_selector(name: str) -> dict[str, str]:
    """The group leaders of LeaderWorkerSet `name` (what its Service selects)."""
    return {NAME_LABEL: name, ROLE_LABEL: "leader"}
