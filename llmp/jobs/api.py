"""`llmp job` on the cluster: apply, follow, list, logs, cancel.

Everything goes through the official Kubernetes client (`llmp.clients.kube.load_apis`):

- **apply** is server-side (`PATCH` with `application/apply-patch+yaml`, field manager
  `llmp`): the API server merges and owns the fields, as `kubectl apply --server-side`
  does; the client's generated `patch_*` methods cannot send that content type, so the
  request goes through its `ApiClient.call_api`.
- **state** is read from three objects: the TrainJob (`trainer.kubeflow.org/v1alpha1`,
  Kubeflow Trainer v2.2: its conditions Suspended, Complete, Failed), the Kueue Workload
  that Kueue creates for it (owned by the job: QuotaReserved, the admission checks' states,
  Admitted with its ClusterQueue and flavors, Evicted/Preempted), and the job's pods (label
  `llm-platform/job`; the JobSet names them `<job>-node-0-<index>-<suffix>`, with the index
  in `batch.kubernetes.io/job-completion-index`, the container `node`). Rank 0's node is
  index 0, whose log gives the training steps (`workloads/training/train.py` prints JSON
  `step` events).
- a data job is a KubeRay **RayJob** instead (`ray.io/v1`): its `status.jobDeploymentStatus`
  (Initializing, Running, Complete, Failed, Retrying, ...) and `jobStatus` (Ray's: PENDING,
  RUNNING, SUCCEEDED, FAILED, STOPPED) say where it is, as Kueue reads them (finished when
  the deployment is Complete or Failed, succeeded when Ray's job SUCCEEDED); its Workload is
  owned by the RayJob; its log is the submitter pod's, which follows the driver's output
  (`ray job logs --follow`). Every command finds a job of either kind by its name.
- `llmp.jobs.state.state_of` turns them into one `State` (phase, what it means, whether it
  is over); it is a pure function, so every waiting reason is tested without a cluster.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from llmp.clients.kube import REQUEST_TIMEOUT, KubeApis, fatal, reason, status_of
from llmp.errors import BadInput, Failed
from llmp.jobs.state import Snapshot, State, is_ray, state_of
from manifests.jobs.jobfile import CONFIG_KEY, JOB_LABEL, config_map_name
from manifests.volumes import LUSTRE_CLAIM
from spec import readers

FIELD_MANAGER: Final = "llmp"
TRAINER: Final = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")
KUEUE: Final = ("kueue.x-k8s.io", "v1beta2")
KUBERAY: Final = ("ray.io", "v1", "rayjobs")
SUBMITTER_COMPONENT: Final = "ray-submitter"
SUBMITTER_CONTAINER: Final = "ray-job-submitter"
"""The `app.kubernetes.io/component` of a RayJob's submitter pod (manifests/jobs/rayjob.py)."""
NODE_CONTAINER: Final = "node"
"""The trainer's container in a TrainJob's pods (the Trainer's constants.Node)."""
COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
POLL_S: Final = 5.0
STEP_EVERY_S: Final = 30.0
"""While training, `follow` prints a step line at most this often."""
_now: Callable[[], float] = time.monotonic
_sleep: Callable[[float], None] = time.sleep
"""The clock `follow` uses unless given one (tests set a fake one here)."""

_PATHS: Final = {
    ("v1", "ConfigMap"): "/api/v1/namespaces/{ns}/configmaps/{name}",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): (
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}"
    ),
    ("ray.io/v1", "RayJob"): "/apis/ray.io/v1/namespaces/{ns}/rayjobs/{name}",
}


class JobError(BadInput):
    """A job that is not there, or a cluster that is not the stack's: exit 2."""


class JobFailed(Failed):
    """The job failed, or did not get where it was going in time: exit 1."""


def _api_failure(exc: Exception, apis: KubeApis, doing: str) -> Exception:
    return fatal(exc, apis.host, doing) or Failed(f"cannot {doing}: {reason(exc)}")


# --- reading ----------------------------------------------------------------------------


def _plain(apis: KubeApis, obj: Any) -> Any:
    """A client model (V1Pod...) as the API's JSON (camelCase dicts)."""
    if isinstance(obj, dict):
        return obj
    return apis.core.api_client.sanitize_for_serialization(obj)


def _get(
    apis: KubeApis, api: tuple[str, str, str], kind: str, namespace: str, name: str
) -> dict[str, Any] | None:
    group, version, plural = api
    try:
        job = apis.custom.get_namespaced_custom_object(
            group, version, namespace, plural, name, _request_timeout=REQUEST_TIMEOUT
        )
    except Exception as exc:
        if status_of(exc) == 404:
            return None
        raise _api_failure(exc, apis, f"read {kind} {namespace}/{name}") from None
    return dict(job)


def get_job(apis: KubeApis, namespace: str, name: str) -> dict[str, Any] | None:
    """The job called `name`: its TrainJob, else its RayJob (a data job)."""
    job = _get(apis, TRAINER, "TrainJob", namespace, name)
    if job is None:
        job = _get(apis, KUBERAY, "RayJob", namespace, name)
    return job


def _workloads(apis: KubeApis, namespace: str) -> list[dict[str, Any]]:
    group, version = KUEUE
    try:
        listed = apis.custom.list_namespaced_custom_object(
            group, version, namespace, "workloads", _request_timeout=REQUEST_TIMEOUT
        )
    except Exception as exc:
        if status_of(exc) == 404:  # Kueue not installed: no workload will ever come
            return []
        raise _api_failure(exc, apis, f"list Kueue workloads in {namespace}") from None
    return list(listed.get("items") or [])


def workload_of(job: dict[str, Any], workloads: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The Workload Kueue made for `job`: the one it owns (ownerReferences uid)."""
    uid = (job.get("metadata") or {}).get("uid")
    for wl in workloads:
        owners = (wl.get("metadata") or {}).get("ownerReferences") or []
        kind = job.get("kind", "TrainJob")
        if any(o.get("uid") == uid and o.get("kind") == kind for o in owners):
            return wl
    return None


def _pods(apis: KubeApis, namespace: str, name: str) -> list[dict[str, Any]]:
    try:
        listed = apis.core.list_namespaced_pod(
            namespace, label_selector=f"{JOB_LABEL}={name}", _request_timeout=REQUEST_TIMEOUT
        )
    except Exception as exc:
        raise _api_failure(exc, apis, f"list the pods of {namespace}/{name}") from None
    pods = [_plain(apis, p) for p in listed.items]
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def worker_pod(pods: list[dict[str, Any]], index: int = 0) -> str | None:
    """The pod at completion `index` of a TrainJob's nodes (rank 0's node is index 0): the
    newest one, a lost pod's replacement taking its index."""
    at = [
        p
        for p in pods
        if ((p.get("metadata") or {}).get("labels") or {}).get(COMPLETION_INDEX) == str(index)
    ]
    if not at:
        return None
    newest = max(at, key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
    return str(newest["metadata"]["name"])


def read_log(
    apis: KubeApis,
    namespace: str,
    pod: str,
    *,
    tail: int | None = None,
    follow: bool = False,
    container: str = NODE_CONTAINER,
) -> Any:
    """The pod's log as bytes (or, with `follow`, the streaming response)."""
    try:
        return apis.core.read_namespaced_pod_log(
            pod,
            namespace,
            container=container,
            tail_lines=tail,
            follow=follow,
            _preload_content=False,
            _request_timeout=None if follow else REQUEST_TIMEOUT,
        )
    except Exception as exc:
        if status_of(exc) in (400, 404):
            return None
        raise _api_failure(exc, apis, f"read the log of {namespace}/{pod}") from None


def log_target(apis: KubeApis, namespace: str, name: str, worker: int = 0) -> tuple[str, str]:
    """(pod, container) whose log `llmp job logs` reads: a TrainJob's node at completion index
    `worker`, or a RayJob's submitter, which follows the Ray driver's output (`ray job logs
    --follow`)."""
    job = get_job(apis, namespace, name)
    if job is None or not is_ray(job):
        pod = worker_pod(_pods(apis, namespace, name), worker)
        if pod is None:
            raise JobError(
                f"TrainJob {namespace}/{name} has no pod at index {worker} yet: it is queued "
                f"or starting (`llmp job status {name} -n {namespace}`)"
            )
        return pod, NODE_CONTAINER
    pod = submitter_pod(_pods(apis, namespace, name))
    if pod is None:
        raise JobError(
            f"RayJob {namespace}/{name} has no submitter pod yet: it is queued or its cluster "
            f"is starting (`llmp job status {name} -n {namespace}`)"
        )
    return pod, SUBMITTER_CONTAINER


def last_step(log: bytes | None) -> dict[str, Any] | None:
    """The last `step` event of rank 0's JSON-lines log."""
    found = None
    for raw in (log or b"").splitlines():
        try:  # a pod's log is the tenant's: deep, huge or repeated keys are no event
            event = readers.parse_json(raw, "log line", max_bytes=1 << 20)
        except readers.ReadError:
            continue
        if isinstance(event, dict) and event.get("event") == "step":
            found = event
    return found


def submitter_pod(pods: list[dict[str, Any]]) -> str | None:
    """A RayJob's submitter pod among its pods (the newest, if it was retried)."""
    found = [
        p
        for p in pods
        if ((p.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component")
        == SUBMITTER_COMPONENT
    ]
    found.sort(key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp", "")))
    return found[-1]["metadata"]["name"] if found else None


def snapshot(apis: KubeApis, namespace: str, name: str) -> Snapshot:
    job = get_job(apis, namespace, name)
    snap = Snapshot(namespace, name, job)
    if job is None:
        return snap
    snap.workload = workload_of(job, _workloads(apis, namespace))
    snap.pods = _pods(apis, namespace, name)
    if is_ray(job):
        return snap
    rank0 = worker_pod(snap.pods)
    started = any(
        p["metadata"]["name"] == rank0
        and p.get("status", {}).get("phase") in ("Running", "Succeeded", "Failed")
        for p in snap.pods
    )
    if started and rank0 is not None:
        response = read_log(apis, namespace, rank0, tail=200)
        snap.last_step = last_step(response.data if response is not None else None)
    return snap


# --- writing ----------------------------------------------------------------------------


def apply(apis: KubeApis, manifest: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply of one manifest (field manager `llmp`, conflicts forced)."""
    meta = manifest["metadata"]
    key = (manifest["apiVersion"], manifest["kind"])
    path = _PATHS[key].format(ns=meta["namespace"], name=meta["name"])
    try:
        return dict(
            apis.core.api_client.call_api(
                path,
                "PATCH",
                query_params=[("fieldManager", FIELD_MANAGER), ("force", "true")],
                header_params={
                    "Content-Type": "application/apply-patch+yaml",
                    "Accept": "application/json",
                },
                body=manifest,
                response_type="object",
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _request_timeout=REQUEST_TIMEOUT,
            )
        )
    except Exception as exc:
        doing = f"apply {manifest['kind']} {meta['namespace']}/{meta['name']}"
        raise _api_failure(exc, apis, doing) from None


def _must_exist(apis: KubeApis, read: Callable[[], Any], missing: str, doing: str) -> None:
    """Call `read`; a 404 is JobError(`missing`), any other failure is the API's."""
    try:
        read()
    except Exception as exc:
        if status_of(exc) == 404:
            raise JobError(missing) from None
        raise _api_failure(exc, apis, doing) from None


def training_config(apis: KubeApis, namespace: str, job: str, checkpoint: str) -> None:
    """The ConfigMap of training job `job` that a promote job mounts (promote.from_job) is
    there, holds a trainer config, and that config trained into `checkpoint`."""
    name = config_map_name(job)
    try:
        found = apis.core.read_namespaced_config_map(
            name, namespace, _request_timeout=REQUEST_TIMEOUT
        )
    except Exception as exc:
        if status_of(exc) == 404:
            raise JobError(
                f"namespace {namespace} has no ConfigMap {name}, the config training job {job} "
                f"ran with (promote.from_job; `llmp job cancel {job}` deletes it): give "
                "promote.job_config, a copy of it under /fsx/, instead"
            ) from None
        raise _api_failure(exc, apis, f"read ConfigMap {namespace}/{name}") from None
    data = _plain(apis, found).get("data") or {}
    try:
        trained = json.loads(data[CONFIG_KEY])["checkpoint"]["dir"]
    except (KeyError, TypeError, ValueError):
        raise JobError(
            f"ConfigMap {namespace}/{name} holds no trainer config ({CONFIG_KEY} with "
            "checkpoint.dir): is it a training job's?"
        ) from None
    if str(trained).rstrip("/") != checkpoint:
        raise JobError(
            f"training job {job} checkpointed to {trained} (ConfigMap {namespace}/{name}), "
            f"not to {checkpoint}, the job file's checkpoint"
        )


def preflight(
    apis: KubeApis,
    namespace: str,
    name: str,
    queue: str,
    from_job: tuple[str, str] | None = None,
) -> None:
    """The namespace, its FSx claim and its LocalQueue exist, and the name is free; with
    `from_job` (training job, checkpoint dir), that job's config is there (`training_config`)."""
    group, version = KUEUE
    t = REQUEST_TIMEOUT
    _must_exist(
        apis,
        lambda: apis.core.read_namespace(namespace, _request_timeout=t),
        f"namespace {namespace} does not exist on the cluster at {apis.host}: is this the "
        "stack's kubeconfig?",
        f"read namespace {namespace}",
    )
    _must_exist(
        apis,
        lambda: apis.core.read_namespaced_persistent_volume_claim(
            LUSTRE_CLAIM, namespace, _request_timeout=t
        ),
        f"namespace {namespace} has no PersistentVolumeClaim {LUSTRE_CLAIM}: the job mounts "
        "it at /fsx (storage.lustre.mount_namespaces)",
        f"read {namespace}/{LUSTRE_CLAIM}",
    )
    _must_exist(
        apis,
        lambda: apis.custom.get_namespaced_custom_object(
            group, version, namespace, "localqueues", queue, _request_timeout=t
        ),
        f"namespace {namespace} has no Kueue LocalQueue {queue}: the job would never be admitted",
        f"read LocalQueue {namespace}/{queue}",
    )
    if from_job is not None:
        training_config(apis, namespace, *from_job)
    existing = get_job(apis, namespace, name)
    if existing is not None:
        state = state_of(Snapshot(namespace, name, existing))
        raise JobError(
            f"job {namespace}/{name} exists ({state.phase}); `llmp job cancel {name} -n "
            f"{namespace}` first, or give the job file another name"
        )


def submit(
    apis: KubeApis,
    manifests: list[dict[str, Any]],
    queue: str,
    from_job: tuple[str, str] | None = None,
) -> list[str]:
    """Preflight, then apply every manifest in order; returns what was applied."""
    job = manifests[-1]["metadata"]
    preflight(apis, job["namespace"], job["name"], queue, from_job)
    applied = []
    for manifest in manifests:
        apply(apis, manifest)
        meta = manifest["metadata"]
        applied.append(f"{manifest['kind']} {meta['namespace']}/{meta['name']}")
    return applied


def cancel(apis: KubeApis, namespace: str, name: str) -> list[str]:
    """Delete the TrainJob or RayJob (its pods, RayCluster and Workload go with it) and its
    ConfigMap."""
    found = get_job(apis, namespace, name)
    ray = found is not None and is_ray(found)
    group, version, plural = KUBERAY if ray else TRAINER
    kind = "RayJob" if ray else "TrainJob"
    try:
        apis.custom.delete_namespaced_custom_object(
            group,
            version,
            namespace,
            plural,
            name,
            propagation_policy="Background",
            _request_timeout=REQUEST_TIMEOUT,
        )
    except Exception as exc:
        if status_of(exc) == 404:
            raise JobError(f"no job {name} in namespace {namespace}") from None
        raise _api_failure(exc, apis, f"delete {kind} {namespace}/{name}") from None
    deleted = [f"{kind} {namespace}/{name}"]
    try:
        apis.core.delete_namespaced_config_map(
            config_map_name(name), namespace, _request_timeout=REQUEST_TIMEOUT
        )
        deleted.append(f"ConfigMap {namespace}/{config_map_name(name)}")
    except Exception as exc:
        if status_of(exc) != 404:
            raise _api_failure(exc, apis, f"delete ConfigMap {namespace}/{name}-config") from None
    return deleted


# --- following and listing ----------------------------------------------------------------


WIDTH: Final = 80


def wrapped(first: str, text: str, indent: int) -> str:
    """`first` then `text`, wrapped at 80 columns, continuation lines indented `indent`."""
    return textwrap.fill(
        first + text,
        WIDTH,
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def _elapsed(seconds: float) -> str:
    s = int(seconds)
    return f"{s}s" if s < 60 else f"{s // 60}m{s % 60:02d}s"


def follow(
    apis: KubeApis,
    namespace: str,
    name: str,
    *,
    emit: Callable[[str], None],
    timeout_s: float | None = None,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
    poll_s: float = POLL_S,
    max_steps: int | None = None,
) -> State:
    """Poll the job until it ends, emitting a line per change of state (and a training line
    at most every STEP_EVERY_S); JobFailed when it fails or `timeout_s` passes first."""
    clock = clock or _now
    sleep = sleep or _sleep
    start = clock()
    last: tuple[str, str] | None = None
    last_step_at = -STEP_EVERY_S
    while True:
        snap = snapshot(apis, namespace, name)
        snap.max_steps = max_steps
        state = state_of(snap)
        now = clock() - start
        changed = last is None or state.phase != last[0] or state.detail != last[1]
        steady = last is not None and state.phase == last[0] == "training"
        if changed and (not steady or now - last_step_at >= STEP_EVERY_S or state.done):
            emit(wrapped(f"{_elapsed(now):>7}  {state.phase:<12} ", state.detail, 22))
            last = (state.phase, state.detail)
            if state.phase == "training":
                last_step_at = now
        if state.done:
            if not state.ok:
                raise JobFailed(f"job {namespace}/{name} {state.phase}: {state.detail}")
            return state
        if timeout_s is not None and now >= timeout_s:
            raise JobFailed(
                f"job {namespace}/{name} still {state.phase} after {_elapsed(now)}: "
                f"{state.detail} (it keeps going: `llmp job status {name} -n {namespace}`)"
            )
        sleep(poll_s)


@dataclass(frozen=True)
class Listed:
    namespace: str
    name: str
    state: State
    nodes: str
    created: str


def _list(
    apis: KubeApis, api: tuple[str, str, str], kind: str, namespace: str | None
) -> list[dict[str, Any]]:
    group, version, plural = api
    try:
        if namespace is None:
            listed = apis.custom.list_cluster_custom_object(
                group, version, plural, _request_timeout=REQUEST_TIMEOUT
            )
        else:
            listed = apis.custom.list_namespaced_custom_object(
                group, version, namespace, plural, _request_timeout=REQUEST_TIMEOUT
            )
    except Exception as exc:
        if namespace is None and status_of(exc) == 403:
            raise JobError(
                "listing jobs in every namespace is not allowed for this identity: pass "
                "--namespace (your tenant's)"
            ) from None
        if kind == "RayJob" and status_of(exc) == 404:  # KubeRay not installed: no data jobs
            return []
        raise _api_failure(exc, apis, f"list {kind}s") from None
    return [{"kind": kind, **item} for item in listed.get("items") or []]


def list_jobs(apis: KubeApis, namespace: str | None) -> list[Listed]:
    """The TrainJobs and RayJobs in `namespace` (every namespace when None), their states."""
    jobs = _list(apis, TRAINER, "TrainJob", namespace)
    jobs += _list(apis, KUBERAY, "RayJob", namespace)
    out = []
    workloads: dict[str, list[dict[str, Any]]] = {}
    for job in jobs:
        meta = job.get("metadata") or {}
        ns = meta.get("namespace", namespace or "")
        if ns not in workloads:
            workloads[ns] = _workloads(apis, ns)
        snap = Snapshot(ns, meta.get("name", ""), job, workload_of(job, workloads[ns]))
        snap.pods = _pods(apis, ns, snap.name)
        nodes = elastic_range(job)
        if is_ray(job):
            cluster = (job.get("spec") or {}).get("rayClusterSpec") or {}
            groups = cluster.get("workerGroupSpecs") or []
            nodes = f"1+{sum(int(g.get('replicas', 1)) for g in groups)}"
        out.append(Listed(ns, snap.name, state_of(snap), nodes, meta.get("creationTimestamp", "")))
    return sorted(out, key=lambda j: (j.namespace, j.name))


def elastic_range(job: dict[str, Any]) -> str:
    """A TrainJob's nodes as `min..max`: torchrun's `--nnodes` in its trainer command (the
    Trainer has no elastic policy of its own), else its fixed `numNodes`."""
    trainer = (job.get("spec") or {}).get("trainer") or {}
    for arg in trainer.get("command") or []:
        if isinstance(arg, str) and arg.startswith("--nnodes="):
            low, _, high = arg.removeprefix("--nnodes=").partition(":")
            return f"{low}..{high or low}"
    count = trainer.get("numNodes", "?")
    return f"{count}..{count}"


def find_namespace(apis: KubeApis, name: str, namespace: str | None) -> str:
    """`namespace`, or the one namespace holding a job called `name`."""
    if namespace is not None:
        return namespace
    found = sorted({j.namespace for j in list_jobs(apis, None) if j.name == name})
    if not found:
        raise JobError(f"no job {name} in any namespace")
    if len(found) > 1:
        raise JobError(f"jobs named {name} in {', '.join(found)}: pass --namespace")
    return found[0]
