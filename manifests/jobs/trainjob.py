"""Training jobs as Kubeflow Trainer v2 `TrainJob`s (`trainer.kubeflow.org/v1alpha1`) on the
platform's `ClusterTrainingRuntime`s.

What the Trainer does with them (v2.2.1, the catalog's `addon_charts.kubeflow-trainer`): it
builds a JobSet from the runtime's template, sets the replicated job `node` to
`trainer.numNodes` pods, puts `trainer.image`, `command`, `env` and `resourcesPerNode` on the
container `node`, applies each `runtimePatches` entry (labels and annotations, service
account, volumes, mounts, security contexts, affinity, tolerations), and, through its torch
plugin, adds PET_NNODES (numNodes), PET_NPROC_PER_NODE (numProcPerNode), PET_NODE_RANK (the
Job completion index), PET_MASTER_ADDR (`<job>-node-0-0.<job>`) and PET_MASTER_PORT (29500).

Elastic ranges: the Trainer removed its torch elastic policy in v2.2.0 (#3235, "Remove
ElasticPolicy API"), so PET_NNODES is a fixed count. The container therefore runs torchrun
with its own elastic flags: `--nnodes=min:max`, a c10d rendezvous at the master address and
port the plugin gives, `--max-restarts`. torchrun takes command-line flags over PET_*
variables, and Kubernetes expands `$(PET_MASTER_ADDR)` in the command from the container's
own environment. The job starts `nodes_max` pods (one gang, as the PyTorchJob's replicas
did); a pod lost with its node is created again by the Job controller, and the surviving
agents re-rendezvous at the smaller world size meanwhile.

What a TrainJob cannot set, a runtime does: the pod's priority class, its restart policy,
the Job's backoff limit and pod failure policy, the termination grace, the container's
security context and the metrics port. So the program renders one runtime per (kind,
priority class) (`cluster_training_runtimes`), and `runtime_name(spec)` picks the job's:

- `deepspeed`: `workloads.training.train` (DeepSpeed ZeRO under torchrun);
- `torch`: `workloads.training.parallel` (TP x PP x FSDP under torchrun);

  both serve the `llmp_*` metrics on the container port `metrics`;
- `step`: the lifecycle's one-pod steps (promotion, quantization): the PyTorchJob's
  `ExitCode` policy as a Job pod failure policy: the job fails on exit codes 1-127, and a
  pod is started again on 128-255 (130, 137, 143: torchrun itself killed) or, without
  counting, when its node is lost.

Kueue admits the TrainJob (integration `trainer.kubeflow.org/trainjob`): it carries
`kueue.x-k8s.io/queue-name` and is created suspended; Kueue builds the pod sets from the
JobSet the runtime gives (one pod set `node`, count numNodes), writes its own runtime patch
(its flavor's node selector and tolerations) and un-suspends it. `node_pod_template` makes
that pod template here, the way the Trainer does, for the admission model and the tests.
"""

from __future__ import annotations

import copy
from typing import Any, Final, Literal

from manifests.jobs.pod import ContainerPort, restricted_container_context
from manifests.jobs.pytorchjob import (
    METRICS_PORT,
    QUEUE_LABEL,
    SAFE_TO_EVICT,
    JobSpec,
    parse_spec,
    pod_template,
)
from manifests.scheduling import PRIORITIES
from spec.labels import PART_OF
from spec.tenancy import TRAINING_PRIORITIES

API_VERSION: Final = "trainer.kubeflow.org/v1alpha1"
KIND: Final = "TrainJob"
RUNTIME_KIND: Final = "ClusterTrainingRuntime"
NODE: Final = "node"
"""The replicated job and the container the Trainer's torch plugin fills (constants.Node)."""
ANCESTOR_LABEL: Final = "trainer.kubeflow.org/trainjob-ancestor-step"
FRAMEWORK_LABEL: Final = "trainer.kubeflow.org/framework"
MASTER_PORT: Final = 29500
"""PET_MASTER_PORT as the torch plugin sets it (constants.ContainerTrainerPort)."""
PATCH_MANAGER: Final = "llm-platform.io/trainjob"
"""The manager of the runtime patch the platform writes (Kueue writes its own)."""
BACKOFF_LIMIT: Final = 3
"""Pod failures the Job takes before the TrainJob fails: the PyTorchJob's default
`max_restarts` as its backoffLimit. A runtime fixes it; torchrun's own restarts are per job."""
GRACE_S: Final = 300
"""Time for a rank to finish writing its checkpoint shard on SIGTERM."""
FAILED_EXIT_CODES: Final = tuple(range(1, 128))
"""A step fails at once on these (its own errors, as the PyTorchJob's ExitCode policy had it);
on 128-255 (torchrun itself killed: 130, 137, 143) its pod runs again, within the backoff
limit."""
TORCHRUN_PET_VARIABLES: Final = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)
"""What the torch plugin sets on the container `node`; its webhook refuses them in
`trainer.env`."""

RuntimeKind = Literal["deepspeed", "torch", "step"]
RUNTIME_KINDS: Final[tuple[RuntimeKind, ...]] = ("deepspeed", "torch", "step")


class TrainJobSpec(JobSpec):
    """A `JobSpec` with the runtime kind it runs on (`deepspeed`: the ZeRO trainer; `torch`:
    the parallel trainer). Lifecycle steps (`restart_policy: ExitCode`) run on the `step`
    runtime whatever this says."""

    framework: Literal["deepspeed", "torch"] = "deepspeed"


def runtime_kind(spec: JobSpec) -> RuntimeKind:
    if spec.restart_policy == "ExitCode":
        return "step"
    return spec.framework if isinstance(spec, TrainJobSpec) else "deepspeed"


def runtime_name(spec: JobSpec) -> str:
    """The ClusterTrainingRuntime of `spec`: its kind and its priority class."""
    return runtime_name_for(runtime_kind(spec), spec.priority_class)


def runtime_name_for(kind: RuntimeKind, priority_class: str) -> str:
    return f"llmp-{kind}-{priority_class.removeprefix('llmp-')}"


# --- the runtimes --------------------------------------------------------------------------


def cluster_training_runtime(kind: RuntimeKind, priority_class: str) -> dict[str, Any]:
    """One ClusterTrainingRuntime: a JobSet of one replicated job `node` whose pods carry
    what a TrainJob cannot set (priority, restart policy, grace, security context, port)."""
    container: dict[str, Any] = {
        "name": NODE,
        "securityContext": restricted_container_context().to_json(),
    }
    if kind != "step":  # both trainers serve the llmp_* metrics
        container["ports"] = [ContainerPort(name="metrics", container_port=METRICS_PORT).to_json()]
    pod: dict[str, Any] = {
        "restartPolicy": "Never" if kind == "step" else "OnFailure",
        "priorityClassName": priority_class,
        "terminationGracePeriodSeconds": GRACE_S,
        "containers": [container],
    }
    job: dict[str, Any] = {"backoffLimit": BACKOFF_LIMIT}
    if kind == "step":
        # The PyTorchJob's ExitCode policy: a step's own error (1-127) fails it at once; a
        # torchrun killed, or a pod that lost its node, runs again.
        job["podFailurePolicy"] = {
            "rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": NODE,
                        "operator": "In",
                        "values": list(FAILED_EXIT_CODES),
                    },
                },
            ]
        }
    job["template"] = {"metadata": {"annotations": {SAFE_TO_EVICT: "false"}}, "spec": pod}
    return {
        "apiVersion": API_VERSION,
        "kind": RUNTIME_KIND,
        "metadata": {
            "name": runtime_name_for(kind, priority_class),
            "labels": {FRAMEWORK_LABEL: "deepspeed" if kind == "deepspeed" else "torch", **PART_OF},
        },
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": NODE,
                            "replicas": 1,
                            "template": {
                                "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                                "spec": job,
                            },
                        }
                    ]
                }
            },
        },
    }


def cluster_training_runtimes() -> list[dict[str, Any]]:
    """Every runtime a TrainJob of the platform can name: each kind at each training priority
    class. None at `llmp-serving`: that class is the model servers', and a training job
    named with it is refused (spec.tenancy); a runtime at it would let a TrainJob applied by
    hand take the serving class past that check."""
    return [
        cluster_training_runtime(k, p.name)
        for k in RUNTIME_KINDS
        for p in PRIORITIES
        if p.name in TRAINING_PRIORITIES
    ]


# --- the TrainJob ----------------------------------------------------------------------------


def torchrun_command(spec: JobSpec) -> list[str]:
    """torchrun with the elastic range and the rendezvous the Trainer's PET_* variables name."""
    return [
        "torchrun",
        f"--nnodes={spec.nodes_min}:{spec.nodes_max}",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=$(PET_MASTER_ADDR):$(PET_MASTER_PORT)",
        f"--rdzv-id={spec.name}",
        f"--max-restarts={spec.max_restarts}",
        *spec.command,
    ]


def train_job(spec: JobSpec) -> dict[str, Any]:
    """The TrainJob body for `spec`, ready for the API server (or `kubectl apply`)."""
    template = pod_template(spec).to_json()
    pod = template["spec"]
    (container,) = pod["containers"]
    patch_pod: dict[str, Any] = {
        "serviceAccountName": pod["serviceAccountName"],
        "securityContext": pod["securityContext"],
        "affinity": pod["affinity"],
        "tolerations": pod["tolerations"],
        "volumes": pod["volumes"],
        "containers": [{"name": NODE, "volumeMounts": container["volumeMounts"]}],
    }
    labels = dict(template["metadata"]["labels"])
    # Kueue builds the pod set from the runtime's template with these patches applied (Trainer
    # v2.2.1's runtime framework): its topology request rides on the patch's pod metadata.
    patch_meta: dict[str, Any] = {"labels": labels}
    if spec.topology:
        patch_meta["annotations"] = dict(spec.topology)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "labels": {**spec.labels, QUEUE_LABEL: spec.queue_name, **PART_OF},
        },
        "spec": {
            "runtimeRef": {
                "name": runtime_name(spec),
                "apiGroup": API_VERSION.split("/")[0],
                "kind": RUNTIME_KIND,
            },
            # Created suspended: Kueue, not the Trainer, decides when pods start.
            "suspend": True,
            "trainer": {
                "image": spec.image,
                "command": torchrun_command(spec),
                "env": container["env"],
                "numNodes": spec.nodes_max,
                "numProcPerNode": spec.procs,
                "resourcesPerNode": container["resources"],
            },
            "runtimePatches": [
                {
                    "manager": PATCH_MANAGER,
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {
                                        "name": NODE,
                                        "template": {
                                            "spec": {
                                                "template": {
                                                    "metadata": patch_meta,
                                                    "spec": patch_pod,
                                                }
                                            }
                                        },
                                    }
                                ]
                            }
                        }
                    },
                }
            ],
        },
    }


def build(**fields: Any) -> dict[str, Any]:
    """`train_job(TrainJobSpec(**fields))` with pydantic's report cut to one line."""
    return train_job(parse_spec(TrainJobSpec, fields))


# --- what the Trainer makes of it ------------------------------------------------------------


def _upsert(items: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge by `name`, the later one winning (the Trainer's apply.UpsertEnvVars and its
    volume and mount merges)."""
    out = {i["name"]: i for i in items}
    for item in new:
        out[item["name"]] = item
    return list(out.values())


def node_pod_template(job: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    """The pod template of the JobSet's replicated job `node`, as Trainer v2.2.1 builds it
    from `runtime` and the TrainJob `job` (and as Kueue 0.19.2 builds its pod set from it):
    the runtime's template, the trainer's fields on the container `node`, the PET_*
    variables, then every runtime patch in order."""
    spec = job["spec"]
    ref = spec["runtimeRef"]
    if ref.get("kind", RUNTIME_KIND) != RUNTIME_KIND or ref["name"] != runtime["metadata"]["name"]:
        raise ValueError(
            f"TrainJob {job['metadata']['name']} names runtime {ref['name']}, "
            f"not {runtime['metadata']['name']}"
        )
    (replicated,) = [
        r for r in runtime["spec"]["template"]["spec"]["replicatedJobs"] if r["name"] == NODE
    ]
    template = copy.deepcopy(replicated["template"]["spec"]["template"])
    pod = template["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == NODE]
    trainer = spec.get("trainer") or {}
    for key in ("image", "command", "args"):
        if key in trainer:
            container[key] = list(trainer[key]) if key != "image" else trainer[key]
    if "resourcesPerNode" in trainer:
        container["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
    name = job["metadata"]["name"]
    nodes = trainer.get("numNodes", runtime["spec"]["mlPolicy"].get("numNodes", 1))
    pet: list[dict[str, Any]] = [
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": str(trainer.get("numProcPerNode", "auto"))},
        {
            "name": "PET_NODE_RANK",
            "valueFrom": {
                "fieldRef": {
                    "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                }
            },
        },
        {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": str(MASTER_PORT)},
    ]
    reserved = [e["name"] for e in trainer.get("env", []) if e["name"] in TORCHRUN_PET_VARIABLES]
    if reserved:
        raise ValueError(f"trainer.env must not set the torch plugin's {', '.join(reserved)}")
    container["env"] = _upsert(_upsert(container.get("env", []), trainer.get("env", [])), pet)
    for patch in spec.get("runtimePatches", []):
        jobs = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        for rjob in jobs:
            if rjob["name"] != NODE:
                continue
            ptemplate = rjob["template"]["spec"]["template"]
            meta = ptemplate.get("metadata", {})
            for key in ("labels", "annotations"):
                if meta.get(key):
                    template.setdefault("metadata", {}).setdefault(key, {}).update(meta[key])
            pspec = ptemplate.get("spec", {})
            for key in ("serviceAccountName", "securityContext", "affinity"):
                if key in pspec:
                    pod[key] = copy.deepcopy(pspec[key])
            if "nodeSelector" in pspec:
                pod.setdefault("nodeSelector", {}).update(pspec["nodeSelector"])
            if "tolerations" in pspec:
                pod["tolerations"] = [*pod.get("tolerations", []), *pspec["tolerations"]]
            if "volumes" in pspec:
                pod["volumes"] = _upsert(pod.get("volumes", []), pspec["volumes"])
            for cpatch in pspec.get("containers", []):
                if cpatch["name"] != NODE:
                    raise ValueError(f"runtime patch names container {cpatch['name']}: no such")
                if "volumeMounts" in cpatch:
                    container["volumeMounts"] = [
                        *container.get("volumeMounts", []),
                        *cpatch["volumeMounts"],
                    ]
                if "securityContext" in cpatch:
                    container["securityContext"] = copy.deepcopy(cpatch["securityContext"])
    return template
