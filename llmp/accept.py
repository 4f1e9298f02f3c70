"""In-cluster acceptance of a deployed stack (`llmp accept STACK`).

`pulumi up` finishing says the cloud accepted the resources; it does not say the
GPU nodes work. This module runs the platform's two acceptance jobs on the
deployed cluster through the Kubernetes API (the official Python client) and
judges their output against the catalog:

- **nodes** (read only): every GPU pool of the stack file has at least `min_size`
  Ready, schedulable nodes, each advertising all its GPUs (and, on EFA pools, all its
  EFA interfaces) to the scheduler. A node whose device plugin advertises nothing
  would leave the jobs below pending until they time out, so it is named here.
- **dcgm**: `workloads/jobs/dcgm_diag.py`, one pod per usable node of each NVIDIA
  pool, `dcgmi diag -r LEVEL -j`, judged per node by `dcgm_diag.judge`.
- **fabric**: `workloads/jobs/fabric.py`, 2-node nccl-tests over EFA on each EFA
  pool with a catalog threshold, judged by `fabric.evaluate`.

Every object gets the labels `llm-platform/accept-run=<run id>` and
`llm-platform/accept-check`, and a name with the run id in it, so two runs never
collide and `kubectl delete jobs -l llm-platform/accept-run=<id>` cleans up after
an interrupted one. The jobs are created together and scheduled by the cluster (and
by Kueue in a tenant namespace); each is waited for until it ends or its timeout
(also its `activeDeadlineSeconds`) passes, then the pods' logs are read and judged,
and the jobs are deleted unless asked to keep them.

Kubernetes is reached through two API objects (`CoreV1Api` and `BatchV1Api`, or
anything with the same few methods), so the tests drive the whole run against a
fake API without a cluster.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from spec.catalog import catalog
from spec.platform import PlatformConfig
from workloads.jobs import dcgm_diag, fabric
from workloads.jobs.pod import JOB_NAME_LABEL, POOL_LABEL
from workloads.kueue import LOCAL_QUEUE

RUN_LABEL = "llm-platform/accept-run"
CHECK_LABEL = "llm-platform/accept-check"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
NAME_LIMIT = 40
"""Both job builders cap names at 40: pod host names are <job>-<index> under a DNS label."""
POLL_SECONDS = 10.0
REQUEST_TIMEOUT = (10, 60)
"""Connect and read timeouts of every API call: a private endpoint out of reach must not hang."""
FABRIC_TIMEOUT_MINUTES = 30

Check = Literal["nodes", "dcgm", "fabric"]
Result = Literal["pass", "warn", "fail", "not checked"]


class AcceptError(Exception):
    """Bad input or no usable cluster: one line, exit 2, nothing was created."""


class CoreApi(Protocol):
    """The calls of kubernetes.client.CoreV1Api this module makes."""

    def list_node(self, **kwargs: Any) -> Any: ...
    def read_namespaced_secret(self, name: str, namespace: str, **kwargs: Any) -> Any: ...
    def create_namespaced_service(self, namespace: str, body: Any, **kwargs: Any) -> Any: ...
    def delete_namespaced_service(self, name: str, namespace: str, **kwargs: Any) -> Any: ...
    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> Any: ...
    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> Any: ...


class BatchApi(Protocol):
    """The calls of kubernetes.client.BatchV1Api this module makes."""

    def create_namespaced_job(self, namespace: str, body: Any, **kwargs: Any) -> Any: ...
    def read_namespaced_job(self, name: str, namespace: str, **kwargs: Any) -> Any: ...
    def delete_namespaced_job(self, name: str, namespace: str, **kwargs: Any) -> Any: ...


@dataclass(frozen=True)
class KubeApis:
    core: CoreApi
    batch: BatchApi
    host: str
    """The API server's address, for messages."""


# --- what the stack declares ----------------------------------------------------------


@dataclass(frozen=True)
class PoolTarget:
    """One GPU pool of the stack file, and where its acceptance jobs run."""

    pool: str
    instance_type: str
    efa: bool
    min_size: int
    desired_size: int
    namespace: str
    queue_name: str | None


def pool_targets(
    cfg: PlatformConfig, pools: Iterable[str] = (), namespace: str | None = None
) -> list[PoolTarget]:
    """The pools to accept (all, or those named) and each one's namespace and Kueue queue.

    Without --namespace a pool's jobs run in the first tenant namespace (by name) with a
    GPU quota on that pool: that is where quota, queue and network policy allow GPU jobs.
    """
    names = list(pools) or sorted(cfg.node_pools)
    unknown = [p for p in names if p not in cfg.node_pools]
    if unknown:
        known = ", ".join(sorted(cfg.node_pools)) or "none"
        raise AcceptError(f"no node pool {', '.join(unknown)} in the stack; its pools: {known}")
    targets = []
    for name in names:
        pool = cfg.node_pools[name]
        ns = namespace or next(
            (t for t in sorted(cfg.tenants) if cfg.tenants[t].gpu_quota.get(name)), None
        )
        if ns is None:
            raise AcceptError(
                f"no tenant has a gpu_quota on pool {name}, so no namespace may run its jobs: "
                "pass --namespace NS"
            )
        queue = LOCAL_QUEUE if cfg.addons.kueue and ns in cfg.tenants else None
        targets.append(
            PoolTarget(
                pool=name,
                instance_type=pool.instance_type,
                efa=pool.efa,
                min_size=pool.min_size,
                desired_size=pool.desired_size,
                namespace=ns,
                queue_name=queue,
            )
        )
    return targets


# --- results ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One row of the verdict table."""

    pool: str
    check: Check
    subject: str
    result: Result
    detail: str
    job: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "check": self.check,
            "subject": self.subject,
            "result": self.result,
            "detail": self.detail,
            "job": self.job,
        }


@dataclass
class AcceptReport:
    stack: str
    run_id: str
    api_server: str
    findings: list[Finding] = field(default_factory=list)
    cleanup_errors: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    @property
    def ran_a_job(self) -> bool:
        return any(f.check != "nodes" and f.result != "not checked" for f in self.findings)

    @property
    def passed(self) -> bool:
        """No failure, and at least one job was judged: an acceptance of nothing is no pass."""
        return self.ran_a_job and not any(f.result == "fail" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "run_id": self.run_id,
            "api_server": self.api_server,
            "passed": self.passed,
            "counts": dict(Counter(f.result for f in self.findings)),
            "findings": [f.to_dict() for f in self.findings],
            "cleanup_errors": self.cleanup_errors,
            "kept": self.kept,
        }


# --- talking to the API ----------------------------------------------------------------


def _api_error(exc: Exception, host: str, doing: str) -> AcceptError | None:
    """One line for the errors that mean "no usable cluster": unreachable, refused, no RBAC."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(exc, ApiException):
        if exc.status in (401, 403):
            return AcceptError(
                f"the cluster API at {host} refused to {doing}: {exc.status} {exc.reason}: "
                f"{_api_message(exc)}"
            )
        return None
    if isinstance(exc, HTTPError | OSError):
        reason = getattr(exc, "reason", None) or exc
        return AcceptError(f"cannot reach the cluster API at {host}: {_one_line(str(reason))}")
    return None


def _api_message(exc: Any) -> str:
    """The `message` of a Kubernetes Status body, else the HTTP reason."""
    import json

    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    return _one_line(str(body.get("message") or exc.reason or "no detail"))


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _status(exc: Exception) -> int | None:
    from kubernetes.client.exceptions import ApiException

    return exc.status if isinstance(exc, ApiException) else None


class _ErrorLog(logging.Handler):
    """Collects the error lines the kubernetes config loader logs instead of raising."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def load_apis(kubeconfig: str | None, context: str | None) -> KubeApis:
    """API objects from a kubeconfig (default: $KUBECONFIG, else ~/.kube/config).

    The stack's `kubeconfig` output is one (a secret output: `pulumi stack output
    kubeconfig --show-secrets > kubeconfig`); its user runs `aws eks get-token`, so the
    AWS CLI and credentials must be at hand. `aws eks update-kubeconfig` writes one too.
    """
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError:
        raise AcceptError(
            "llmp accept needs the kubernetes client: pip install kubernetes"
        ) from None
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    configuration = client.Configuration()
    # The client logs a failed exec plugin (`aws eks get-token`) and goes on without
    # credentials; catch that log line to say it once, instead of a 401 later.
    logged = _ErrorLog()
    root = logging.getLogger()
    root.addHandler(logged)
    try:
        config.load_kube_config(
            config_file=kubeconfig,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except ConfigException as exc:
        hint = ""
        if "No configuration found" in str(exc) or "Invalid kube-config file" in str(exc):
            hint = (
                "; write the stack's with `pulumi stack output kubeconfig --show-secrets > "
                "kubeconfig` and pass --kubeconfig kubeconfig"
            )
        reason = _one_line(str(exc)).rstrip(".")
        raise AcceptError(f"cannot use kubeconfig {where}: {reason}{hint}") from None
    except (OSError, ValueError, TypeError) as exc:
        raise AcceptError(f"cannot read kubeconfig {where}: {_one_line(str(exc))}") from None
    finally:
        root.removeHandler(logged)
    if logged.messages:
        raise AcceptError(
            f"kubeconfig {where}: its credential command failed: {_one_line(logged.messages[0])}"
        )
    # Fail fast on an endpoint out of reach; urllib3 would otherwise retry each call 3 times.
    configuration.retries = 1
    api_client = client.ApiClient(configuration)
    return KubeApis(
        core=client.CoreV1Api(api_client),
        batch=client.BatchV1Api(api_client),
        host=configuration.host,
    )


# --- the nodes --------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolNodes:
    target: PoolTarget
    usable: list[str]
    """Ready, schedulable, advertising every GPU (and EFA interface): where jobs can run."""
    finding: Finding


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _node_problem(node: Any, gpu_resource: str, gpus: int, efa: int) -> str | None:
    conditions = {c.type: c.status for c in (node.status.conditions or [])}
    if conditions.get("Ready") != "True":
        return "not Ready"
    if node.spec.unschedulable:
        return "cordoned"
    allocatable = node.status.allocatable or {}
    if _quantity(allocatable.get(gpu_resource, 0)) < gpus:
        return f"advertises {_quantity(allocatable.get(gpu_resource, 0))} of {gpus} {gpu_resource}"
    if efa and _quantity(allocatable.get(fabric.EFA_RESOURCE, 0)) < efa:
        have = _quantity(allocatable.get(fabric.EFA_RESOURCE, 0))
        return f"advertises {have} of {efa} {fabric.EFA_RESOURCE}"
    return None


def inspect_pool(apis: KubeApis, target: PoolTarget) -> PoolNodes:
    """Read the pool's nodes (label llm-platform/pool) and judge them against the stack file."""
    itype = catalog().instance(target.instance_type)
    kind = catalog().accelerator_kind(target.instance_type)
    assert kind is not None  # node_pools entries are accelerated (infra/config.py)
    try:
        listed = apis.core.list_node(
            label_selector=f"{POOL_LABEL}={target.pool}", _request_timeout=REQUEST_TIMEOUT
        )
    except Exception as exc:
        raise _api_error(exc, apis.host, "list nodes") or exc from None
    efa = itype.efa_interfaces if target.efa else 0
    usable, problems = [], []
    for node in listed.items:
        name = node.metadata.name
        problem = _node_problem(node, kind.resource, itype.gpu_count, efa)
        if problem:
            problems.append(f"{name} {problem}")
        else:
            usable.append(name)
    sizes = f"min {target.min_size}, desired {target.desired_size}"
    detail = f"{len(usable)} usable of {len(listed.items)} nodes ({sizes})"
    result: Result = "pass"
    if problems:
        result = "fail"
        detail += ": " + "; ".join(problems)
    if len(usable) < target.min_size:
        result = "fail"
        detail += f"; fewer usable nodes than min_size {target.min_size}"
    return PoolNodes(target, sorted(usable), Finding(target.pool, "nodes", "pool", result, detail))


# --- the jobs ---------------------------------------------------------------------------

JobState = Literal["created", "queued", "pending", "running", "succeeded", "failed", "timed out"]
FINAL: frozenset[str] = frozenset({"succeeded", "failed", "timed out"})


@dataclass
class AcceptJob:
    """One acceptance job of this run, its manifests, and what the wait loop saw of it."""

    check: Literal["dcgm", "fabric"]
    target: PoolTarget
    name: str
    manifests: list[dict[str, Any]]
    timeout_s: float
    expected_pods: int
    level: int | None = None
    state: JobState = "created"
    detail: str = ""
    started: float = 0.0
    ended: float | None = None
    pods: list[Any] = field(default_factory=list)
    created: list[tuple[str, str]] = field(default_factory=list)
    """(kind, name) of what the API accepted, for the clean-up."""

    def elapsed(self, now: float) -> float:
        return (self.ended if self.ended is not None else now) - self.started


def job_name(check: str, pool: str, run_id: str) -> str:
    """`<check>-<pool>-<run id>`, the pool shortened (with a hash of it) to fit 40 characters."""
    budget = NAME_LIMIT - len(check) - len(run_id) - 2
    part = pool
    if len(pool) > budget:
        digest = hashlib.sha1(pool.encode()).hexdigest()[:4]
        part = f"{pool[: budget - 5].rstrip('-')}-{digest}"
    return f"{check}-{part}-{run_id}"


def _labelled(manifest: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """The run's labels on the object and on its pod template (to find and delete it all)."""
    out = {**manifest, "metadata": {**manifest["metadata"]}}
    out["metadata"]["labels"] = {**out["metadata"].get("labels", {}), **labels}
    template = manifest.get("spec", {}).get("template")
    if template is not None:
        meta = {**template.get("metadata", {})}
        meta["labels"] = {**meta.get("labels", {}), **labels}
        out["spec"] = {**manifest["spec"], "template": {**template, "metadata": meta}}
    return out


def plan_jobs(
    pools: list[PoolNodes],
    run_id: str,
    *,
    dcgm: bool,
    fabric_check: bool,
    level: int | None,
    timeout_minutes: float | None,
) -> tuple[list[AcceptJob], list[Finding]]:
    """The jobs to create, and a "not checked" row for every check that cannot run."""
    jobs: list[AcceptJob] = []
    skipped: list[Finding] = []
    thresholds = catalog().fabric_acceptance.thresholds
    for p in pools:
        t = p.target
        acc = catalog().instance(t.instance_type).accelerator
        nvidia = acc is not None and acc.kind == "nvidia"
        if dcgm:
            if not nvidia:
                skipped.append(_not_checked(t, "dcgm", f"{t.instance_type} has no NVIDIA GPUs"))
            elif not p.usable:
                skipped.append(_not_checked(t, "dcgm", "no usable node in the pool"))
            else:
                jobs.append(_dcgm_job(t, p.usable, run_id, level, timeout_minutes))
        if fabric_check and t.efa:
            if not nvidia:
                why = f"{t.instance_type}: nccl-tests needs NVIDIA GPUs"
                skipped.append(_not_checked(t, "fabric", why))
            elif t.instance_type not in thresholds:
                why = f"{t.instance_type} has no fabric_acceptance threshold in the catalog"
                skipped.append(_not_checked(t, "fabric", why))
            elif len(p.usable) < 2:
                why = f"needs 2 usable nodes, the pool has {len(p.usable)}"
                skipped.append(_not_checked(t, "fabric", why))
            else:
                jobs.append(_fabric_job(t, run_id, timeout_minutes))
    return jobs, skipped


def _not_checked(t: PoolTarget, check: Check, why: str) -> Finding:
    return Finding(t.pool, check, "pool", "not checked", why)


def _dcgm_job(
    t: PoolTarget, nodes: list[str], run_id: str, level: int | None, timeout_min: float | None
) -> AcceptJob:
    name = job_name("dcgm", t.pool, run_id)
    spec = dcgm_diag.DcgmDiagSpec(
        instance_type=t.instance_type,
        node_pool=t.pool,
        namespace=t.namespace,
        nodes=len(nodes),
        name=name,
        level=level,
        queue_name=t.queue_name,
        deadline_seconds=round(timeout_min * 60) if timeout_min else None,
    )
    labels = {RUN_LABEL: run_id, CHECK_LABEL: "dcgm"}
    manifests = [_labelled(m, labels) for m in dcgm_diag.dcgm_diag_manifests(spec)]
    return AcceptJob("dcgm", t, name, manifests, spec.deadline, len(nodes), level=spec.run_level)


def _fabric_job(t: PoolTarget, run_id: str, timeout_min: float | None) -> AcceptJob:
    name = job_name("fabric", t.pool, run_id)
    deadline = round((timeout_min or FABRIC_TIMEOUT_MINUTES) * 60)
    spec = fabric.FabricSpec(
        instance_type=t.instance_type,
        node_pool=t.pool,
        namespace=t.namespace,
        name=name,
        queue_name=t.queue_name,
        deadline_seconds=deadline,
    )
    labels = {RUN_LABEL: run_id, CHECK_LABEL: "fabric"}
    manifests = [_labelled(m, labels) for m in fabric.fabric_manifests(spec)]
    return AcceptJob("fabric", t, name, manifests, deadline, spec.nodes)


def _create(apis: KubeApis, job: AcceptJob, now: float) -> Finding | None:
    """Create the job's objects (Service first: the pods' DNS names need it)."""
    job.started = now
    for manifest in job.manifests:
        kind = manifest["kind"]
        try:
            if kind == "Service":
                apis.core.create_namespaced_service(
                    job.target.namespace, manifest, _request_timeout=REQUEST_TIMEOUT
                )
            elif kind == "Job":
                apis.batch.create_namespaced_job(
                    job.target.namespace, manifest, _request_timeout=REQUEST_TIMEOUT
                )
            else:  # pragma: no cover - the builders return Services and Jobs only
                raise ValueError(f"no create call for {kind}")
        except Exception as exc:
            if _status(exc) is None and (fatal := _api_error(exc, apis.host, f"create a {kind}")):
                raise fatal from None
            job.state, job.ended = "failed", now
            reason = f"{_status(exc)} {_api_message(exc)}" if _status(exc) else _one_line(str(exc))
            job.detail = f"could not create {kind} {job.name}: {reason}"
            return Finding(job.target.pool, job.check, job.name, "fail", job.detail, job.name)
        job.created.append((kind, manifest["metadata"]["name"]))
    return None


def _condition(job: Any, kind: str) -> Any:
    for c in job.status.conditions or []:
        if c.type == kind and c.status == "True":
            return c
    return None


def _pod_note(pods: list[Any]) -> str:
    """Why pods wait: the scheduler's message, or a container's waiting reason."""
    for pod in pods:
        if pod.status.phase != "Pending":
            continue
        for c in pod.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False" and c.message:
                return _one_line(c.message, 160)
        for cs in pod.status.container_statuses or []:
            waiting = cs.state.waiting if cs.state else None
            if waiting and waiting.reason:
                note = f"{waiting.reason}: {waiting.message}" if waiting.message else waiting.reason
                return _one_line(note, 160)
    return ""


def _refresh(apis: KubeApis, job: AcceptJob, now: float) -> None:
    """One look at the Job and its pods; the state the progress display shows."""
    ns = job.target.namespace
    try:
        seen = apis.batch.read_namespaced_job(job.name, ns, _request_timeout=REQUEST_TIMEOUT)
        pods = apis.core.list_namespaced_pod(
            ns, label_selector=f"{JOB_NAME_LABEL}={job.name}", _request_timeout=REQUEST_TIMEOUT
        ).items
    except Exception as exc:
        if fatal := _api_error(exc, apis.host, f"read job {job.name}"):
            raise fatal from None
        raise
    job.pods = list(pods)
    phases = Counter(p.status.phase for p in pods)
    summary = ", ".join(f"{n} {phase.lower()}" for phase, n in sorted(phases.items()))
    if failed := _condition(seen, "Failed"):
        job.state, job.ended = "failed", now
        job.detail = f"{failed.reason or 'Failed'}: {_one_line(failed.message or '', 160)}"
        return
    if _condition(seen, "Complete") or _condition(seen, "SuccessCriteriaMet"):
        job.state, job.ended, job.detail = "succeeded", now, summary
        return
    state: JobState
    if seen.spec.suspend:
        state, detail = "queued", "suspended, waiting for Kueue to admit it"
    elif phases.get("Running"):
        state, detail = "running", summary
    else:
        note = _pod_note(pods)
        state, detail = "pending", "; ".join(part for part in (summary, note) if part)
    job.detail = detail or "no pods yet"
    if job.elapsed(now) >= job.timeout_s:
        job.state, job.ended = "timed out", now
    else:
        job.state = state


# --- judging ----------------------------------------------------------------------------


def _log(apis: KubeApis, pod: Any, container: str) -> str:
    """A container's log as text. `_preload_content=False`: the client otherwise json-decodes
    a `str` response and hands back the repr of a dict for a log that is one JSON document
    (ApiClient.deserialize), which is exactly what `dcgmi diag -j` writes."""
    response = apis.core.read_namespaced_pod_log(
        pod.metadata.name,
        pod.metadata.namespace,
        container=container,
        _preload_content=False,
        _request_timeout=REQUEST_TIMEOUT,
    )
    try:
        data = response.data
    finally:
        release = getattr(response, "release_conn", None)
        if release is not None:
            release()
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)


def _read_log(apis: KubeApis, pod: Any, container: str) -> tuple[str | None, str]:
    """(the log, "") or (None, why it could not be read); a cluster gone or refusing is fatal."""
    try:
        return _log(apis, pod, container), ""
    except Exception as exc:
        if fatal := _api_error(exc, apis.host, "read pod logs"):
            raise fatal from None
        reason = f"{_status(exc)} {_api_message(exc)}" if _status(exc) else _one_line(str(exc))
        return None, f"could not read the log: {reason}"


def _by_index(pods: list[Any]) -> dict[int, Any]:
    """The newest pod of each completion index."""
    newest: dict[int, Any] = {}
    for pod in pods:
        raw = (pod.metadata.labels or {}).get(INDEX_LABEL)
        raw = raw or (pod.metadata.annotations or {}).get(INDEX_LABEL)
        if raw is None or not str(raw).isdigit():
            continue
        index = int(raw)
        when = pod.metadata.creation_timestamp
        if index not in newest or (when and when > newest[index].metadata.creation_timestamp):
            newest[index] = pod
    return newest


def _unfinished(job: AcceptJob, pod: Any | None) -> str | None:
    """Why a pod has no log to judge, or None when it ran to an end."""
    if pod is None:
        return f"job {job.state} before this pod was created ({job.detail or 'no pods'})"
    if pod.status.phase in ("Succeeded", "Failed"):
        return None
    note = _pod_note([pod])
    return f"job {job.state} with this pod {pod.status.phase}" + (f": {note}" if note else "")


def judge_dcgm(apis: KubeApis, job: AcceptJob) -> list[Finding]:
    pods = _by_index(job.pods)
    findings = []
    for index in range(job.expected_pods):
        pod = pods.get(index)
        subject = (pod.spec.node_name if pod else None) or f"index {index}"
        if reason := _unfinished(job, pod):
            findings.append(Finding(job.target.pool, "dcgm", subject, "fail", reason, job.name))
            continue
        text, why = _read_log(apis, pod, dcgm_diag.CONTAINER)
        if text is None:
            findings.append(Finding(job.target.pool, "dcgm", subject, "fail", why, job.name))
            continue
        verdict = dcgm_diag.judge(text, job.target.instance_type, job.level, node=subject)
        result: Result = "fail" if not verdict.passed else "warn" if verdict.warnings else "pass"
        findings.append(
            Finding(job.target.pool, "dcgm", subject, result, verdict.detail(), job.name)
        )
    return findings


def judge_fabric(apis: KubeApis, job: AcceptJob) -> list[Finding]:
    pods = _by_index(job.pods)
    nodes = sorted({p.spec.node_name for p in pods.values() if p.spec.node_name})
    subject = ", ".join(nodes) or f"{job.expected_pods} nodes"
    launcher = pods.get(0)

    def row(result: Result, detail: str) -> list[Finding]:
        return [Finding(job.target.pool, "fabric", subject, result, detail, job.name)]

    if reason := _unfinished(job, launcher):
        return row("fail", reason)
    assert launcher is not None
    text, why = _read_log(apis, launcher, "nccl-tests")
    if text is None:
        return row("fail", why)
    try:
        verdict = fabric.evaluate(text, job.target.instance_type)
    except ValueError as exc:
        last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "empty log")
        return row("fail", f"{exc}; the log ends: {_one_line(last, 160)}")
    run = verdict.run
    detail = (
        f"transport {run.transport}, peak busbw {run.peak_busbw_gbps:.1f} GB/s at "
        f"{run.peak.size_bytes} B (threshold {verdict.threshold_gbps:g}), average "
        f"{run.avg_busbw_gbps:.1f} GB/s"
    )
    if verdict.reasons:
        detail += ": " + "; ".join(verdict.reasons)
    return row("pass" if verdict.passed else "fail", detail)


# --- the progress display ---------------------------------------------------------------


def _clock_text(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


_STATE_STYLE = {
    "succeeded": "green",
    "failed": "bold red",
    "timed out": "bold red",
    "running": "cyan",
    "queued": "yellow",
    "pending": "yellow",
}


def progress_table(jobs: list[AcceptJob], now: float) -> Table:
    table = Table(title="acceptance jobs", title_justify="left")
    for column in ("job", "pool", "state", "elapsed / timeout", "pods"):
        table.add_column(column, overflow="fold")
    for job in jobs:
        table.add_row(
            Text(job.name),
            Text(job.target.pool),
            Text(job.state, style=_STATE_STYLE.get(job.state, "")),
            Text(f"{_clock_text(job.elapsed(now))} / {_clock_text(job.timeout_s)}"),
            Text(job.detail),
        )
    return table


class ProgressView:
    """A live table of the jobs on the given console (stderr: stdout stays the verdict)."""

    def __init__(self, console: Console | None):
        self._live = Live(console=console, auto_refresh=False) if console else None

    def __enter__(self) -> ProgressView:
        if self._live:
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live:
            self._live.stop()

    def update(self, jobs: list[AcceptJob], now: float) -> None:
        if self._live:
            self._live.update(Group(progress_table(jobs, now)), refresh=True)


# --- the run ----------------------------------------------------------------------------


@dataclass(frozen=True)
class AcceptOptions:
    pools: tuple[str, ...] = ()
    namespace: str | None = None
    timeout_minutes: float | None = None
    dcgm: bool = True
    fabric: bool = True
    level: int | None = None
    keep: bool = False
    poll_seconds: float = POLL_SECONDS


MAX_TIMEOUT_MINUTES = 24 * 60


def check_options(options: AcceptOptions) -> None:
    """Refuse what no run can use, before any file or cluster is read."""
    levels = dcgm_diag.diagnostic_catalog().levels
    if options.level is not None and options.level not in levels:
        known = ", ".join(str(n) for n in sorted(levels))
        raise AcceptError(f"--dcgm-level {options.level}: DCGM level is one of {known}")
    timeout = options.timeout_minutes
    if timeout is not None and not (math.isfinite(timeout) and 1 <= timeout <= MAX_TIMEOUT_MINUTES):
        raise AcceptError(f"--timeout {timeout:g}: give 1 to {MAX_TIMEOUT_MINUTES} minutes")
    if not (options.dcgm or options.fabric):
        raise AcceptError("--skip-dcgm and --skip-fabric together leave nothing to run")


def new_run_id() -> str:
    """Six hex digits: unique enough per cluster, short enough for 40-character job names."""
    return secrets.token_hex(3)


def _check_ssh_secret(apis: KubeApis, jobs: list[AcceptJob]) -> None:
    """The fabric pods mount Secret fabric-ssh; without it they wait forever in
    ContainerCreating. Say so before creating anything (a 403 here is not fatal: the
    caller may create jobs without reading Secrets)."""
    for ns in sorted({j.target.namespace for j in jobs if j.check == "fabric"}):
        try:
            apis.core.read_namespaced_secret(
                fabric.SSH_SECRET, ns, _request_timeout=REQUEST_TIMEOUT
            )
        except Exception as exc:
            if _status(exc) == 404:
                raise AcceptError(
                    f"namespace {ns} has no Secret {fabric.SSH_SECRET}, which the fabric job "
                    "mounts: create it as workloads/jobs/fabric.py says, or pass --skip-fabric"
                ) from None
            if _status(exc) in (401, 403):
                continue
            raise _api_error(exc, apis.host, "read a Secret") or exc from None


def run_acceptance(
    cfg: PlatformConfig,
    stack: str,
    apis: KubeApis,
    options: AcceptOptions,
    *,
    run_id: str | None = None,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
    progress: Console | None = None,
) -> AcceptReport:
    """Inspect the pools, create the jobs, wait, judge, clean up; AcceptError before anything
    was created when the input or the cluster is unusable."""
    clock = clock or time.monotonic
    sleep = sleep or time.sleep
    check_options(options)
    run_id = run_id or new_run_id()
    if not re.fullmatch(r"[a-z0-9]{1,8}", run_id):
        raise AcceptError(f"run id {run_id!r}: 1-8 lowercase letters or digits")
    targets = pool_targets(cfg, options.pools, options.namespace)
    report = AcceptReport(stack=stack, run_id=run_id, api_server=apis.host)
    pools = [inspect_pool(apis, t) for t in targets]
    report.findings.extend(p.finding for p in pools)
    try:
        jobs, not_checked = plan_jobs(
            pools,
            run_id,
            dcgm=options.dcgm,
            fabric_check=options.fabric,
            level=options.level,
            timeout_minutes=options.timeout_minutes,
        )
    except ValueError as exc:
        raise AcceptError(str(exc)) from None
    report.findings.extend(not_checked)
    _check_ssh_secret(apis, jobs)
    try:
        for job in jobs:
            if failed := _create(apis, job, clock()):
                report.findings.append(failed)
        live = [j for j in jobs if j.state not in FINAL]
        with ProgressView(progress) as view:
            while True:
                now = clock()
                for job in live:
                    if job.state not in FINAL:
                        _refresh(apis, job, now)
                view.update(jobs, now)
                if all(j.state in FINAL for j in live):
                    break
                sleep(options.poll_seconds)
        for job in live:
            judge = judge_dcgm if job.check == "dcgm" else judge_fabric
            report.findings.extend(judge(apis, job))
    finally:
        if options.keep:
            report.kept = [name for j in jobs for kind, name in j.created if kind == "Job"]
        else:
            report.cleanup_errors = cleanup(apis, jobs)
    # Pool by pool, in the stack's order: its nodes, then its diagnostics, then its fabric.
    pool_order = {t.pool: i for i, t in enumerate(targets)}
    check_order = {"nodes": 0, "dcgm": 1, "fabric": 2}
    report.findings.sort(key=lambda f: (pool_order[f.pool], check_order[f.check], f.subject))
    return report


def cleanup(apis: KubeApis, jobs: list[AcceptJob]) -> list[str]:
    """Delete what this run created (pods go with their Job); the errors, one line each."""
    errors = []
    for job in jobs:
        for kind, name in reversed(job.created):
            try:
                if kind == "Job":
                    apis.batch.delete_namespaced_job(
                        name,
                        job.target.namespace,
                        propagation_policy="Background",
                        _request_timeout=REQUEST_TIMEOUT,
                    )
                else:
                    apis.core.delete_namespaced_service(
                        name, job.target.namespace, _request_timeout=REQUEST_TIMEOUT
                    )
            except Exception as exc:
                if _status(exc) == 404:
                    continue
                reason = _api_message(exc) if _status(exc) else _one_line(str(exc))
                errors.append(f"could not delete {kind} {job.target.namespace}/{name}: {reason}")
    return errors


# --- the verdict table ------------------------------------------------------------------

_RESULT_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "not checked": "dim"}


def verdict_table(report: AcceptReport) -> Table:
    table = Table(title=f"acceptance of {report.stack} (run {report.run_id})", title_justify="left")
    for column in ("pool", "check", "subject", "result", "detail"):
        table.add_column(column, overflow="fold")
    for f in report.findings:
        table.add_row(
            Text(f.pool),
            Text(f.check),
            Text(f.subject),
            Text(f.result, style=_RESULT_STYLE.get(f.result, "")),
            Text(f.detail),
        )
    return table


def verdict_line(report: AcceptReport) -> str:
    counts = Counter(f.result for f in report.findings)
    parts = ", ".join(f"{counts.get(r, 0)} {r}" for r in ("pass", "warn", "fail", "not checked"))
    if report.passed:
        return f"accepted: {parts}"
    if not report.ran_a_job:
        return f"not accepted: no acceptance job ran ({parts})"
    return f"not accepted: {parts}"


def load_stack_config(stack: str) -> PlatformConfig:
    """The stack file's validated config: pools, instance types, sizes, tenants."""
    from llmp.synth import REPO_ROOT, STACKS_DIR, stack_file, stack_name_problem
    from spec.errors import ConfigError
    from spec.stackfile import load_config, load_stack_file

    if problem := stack_name_problem(stack):
        raise AcceptError(problem)
    path = stack_file(stack)
    if not path.exists():
        known = sorted(p.name.split(".")[1] for p in STACKS_DIR.glob("Pulumi.*.yaml"))
        shown = path.relative_to(REPO_ROOT)
        raise AcceptError(f"no stack file {shown}; known stacks: {', '.join(known)}")
    try:
        return load_config(load_stack_file(str(path)))
    except ConfigError as exc:
        raise AcceptError(str(exc)) from None
