"""The jobs of `llmp accept`: built (`plan_jobs`: a DCGM diagnostic on every usable node
of an NVIDIA pool, a 2-node EFA fabric test), created, watched (`refresh`), judged from
their logs (`judge`) and deleted (`cleanup`). Every object carries the labels
`llm-platform/accept-run=<run id>` and `llm-platform/accept-check`, and the run id in its
name, so two runs never collide.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from llmp.clients.kube import (
    REQUEST_TIMEOUT,
    KubeApis,
    api_message,
    fatal,
    one_line,
    reason,
    status_of,
)
from manifests.jobs import dcgm_diag, fabric
from manifests.jobs.pod import JOB_NAME_LABEL
from spec.catalog import catalog

RUN_LABEL = "llm-platform/accept-run"
CHECK_LABEL = "llm-platform/accept-check"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
NAME_LIMIT = 40
"""Both job builders cap names at 40: pod host names are <job>-<index> under a DNS label."""
FABRIC_TIMEOUT_MINUTES = 30

Check = Literal["nodes", "dcgm", "fabric"]
Result = Literal["pass", "warn", "fail", "not checked"]
JobState = Literal["created", "queued", "pending", "running", "succeeded", "failed", "timed out"]
FINAL: frozenset[str] = frozenset({"succeeded", "failed", "timed out"})


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
    topology: dict[str, str] = field(default_factory=dict)
    """On a topology-aware pool, the Kueue annotations its checks' pods carry (unconstrained:
    a check needs nodes of the pool, not nodes close together); empty elsewhere."""
    partitioned: bool = False
    """The pool's GPUs are MIG-partitioned: no whole GPU for the DCGM diagnostic or NCCL."""


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
        return asdict(self)


@dataclass(frozen=True)
class PoolNodes:
    target: PoolTarget
    usable: list[str]
    """Ready, schedulable, advertising every GPU (and EFA interface): where jobs can run."""
    finding: Finding


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

    def row(self, subject: str, result: Result, detail: str) -> Finding:
        return Finding(self.target.pool, self.check, subject, result, detail, self.name)


# --- building ---------------------------------------------------------------------------


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

        def skip(check: Check, why: str, t: PoolTarget = t) -> None:
            skipped.append(Finding(t.pool, check, "pool", "not checked", why))

        acc = catalog().instance(t.instance_type).accelerator
        nvidia = acc is not None and acc.kind == "nvidia"
        if t.partitioned:
            why = (
                "its GPUs are MIG partitions; the DCGM diagnostic and the fabric test take "
                "whole GPUs"
            )
            if dcgm:
                skip("dcgm", why)
            if fabric_check and t.efa:
                skip("fabric", why)
            continue
        if dcgm:
            if not nvidia:
                skip("dcgm", f"{t.instance_type} has no NVIDIA GPUs")
            elif not p.usable:
                skip("dcgm", "no usable node in the pool")
            else:
                jobs.append(_dcgm_job(t, p.usable, run_id, level, timeout_minutes))
        if fabric_check and t.efa:
            if not nvidia:
                skip("fabric", f"{t.instance_type}: nccl-tests needs NVIDIA GPUs")
            elif t.instance_type not in thresholds:
                why = f"{t.instance_type} has no fabric_acceptance threshold in the catalog"
                skip("fabric", why)
            elif len(p.usable) < 2:
                skip("fabric", f"needs 2 usable nodes, the pool has {len(p.usable)}")
            else:
                jobs.append(_fabric_job(t, run_id, timeout_minutes))
    return jobs, skipped


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
        topology=t.topology,
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
        topology=t.topology,
    )
    labels = {RUN_LABEL: run_id, CHECK_LABEL: "fabric"}
    manifests = [_labelled(m, labels) for m in fabric.fabric_manifests(spec)]
    return AcceptJob("fabric", t, name, manifests, deadline, spec.nodes)


# --- creating and watching --------------------------------------------------------------


def create(apis: KubeApis, job: AcceptJob, now: float) -> Finding | None:
    """Create the job's objects (Service first: the pods' DNS names need it)."""
    job.started = now
    ns = job.target.namespace
    for manifest in job.manifests:
        kind = manifest["kind"]
        try:
            if kind == "Service":
                apis.core.create_namespaced_service(ns, manifest, _request_timeout=REQUEST_TIMEOUT)
            elif kind == "Job":
                apis.batch.create_namespaced_job(ns, manifest, _request_timeout=REQUEST_TIMEOUT)
            else:  # pragma: no cover - the builders return Services and Jobs only
                raise ValueError(f"no create call for {kind}")
        except Exception as exc:
            if status_of(exc) is None and (refused := fatal(exc, apis.host, f"create a {kind}")):
                raise refused from None
            job.state, job.ended = "failed", now
            job.detail = f"could not create {kind} {job.name}: {reason(exc)}"
            return job.row(job.name, "fail", job.detail)
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
                return one_line(c.message, 160)
        for cs in pod.status.container_statuses or []:
            waiting = cs.state.waiting if cs.state else None
            if waiting and waiting.reason:
                note = f"{waiting.reason}: {waiting.message}" if waiting.message else waiting.reason
                return one_line(note, 160)
    return ""


def refresh(apis: KubeApis, job: AcceptJob, now: float) -> None:
    """One look at the Job and its pods; the state the progress display shows."""
    ns = job.target.namespace
    try:
        seen = apis.batch.read_namespaced_job(job.name, ns, _request_timeout=REQUEST_TIMEOUT)
        pods = apis.core.list_namespaced_pod(
            ns, label_selector=f"{JOB_NAME_LABEL}={job.name}", _request_timeout=REQUEST_TIMEOUT
        ).items
    except Exception as exc:
        raise fatal(exc, apis.host, f"read job {job.name}") or exc from None
    job.pods = list(pods)
    phases = Counter(p.status.phase for p in pods)
    summary = ", ".join(f"{n} {phase.lower()}" for phase, n in sorted(phases.items()))
    if failed := _condition(seen, "Failed"):
        job.state, job.ended = "failed", now
        job.detail = f"{failed.reason or 'Failed'}: {one_line(failed.message or '', 160)}"
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


def _read_log(apis: KubeApis, pod: Any, container: str) -> tuple[str | None, str]:
    """(the log, "") or (None, why it could not be read); a cluster gone or refusing is fatal.

    `_preload_content=False`: the client otherwise json-decodes a `str` response and hands
    back the repr of a dict for a log that is one JSON document (ApiClient.deserialize),
    which is exactly what `dcgmi diag -j` writes."""
    try:
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
            if (release := getattr(response, "release_conn", None)) is not None:
                release()
    except Exception as exc:
        if refused := fatal(exc, apis.host, "read pod logs"):
            raise refused from None
        return None, f"could not read the log: {reason(exc)}"
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data), ""


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


def judge(apis: KubeApis, job: AcceptJob) -> list[Finding]:
    return _judge_dcgm(apis, job) if job.check == "dcgm" else [_judge_fabric(apis, job)]


def _judge_dcgm(apis: KubeApis, job: AcceptJob) -> list[Finding]:
    pods = _by_index(job.pods)
    findings = []
    for index in range(job.expected_pods):
        pod = pods.get(index)
        subject = (pod.spec.node_name if pod else None) or f"index {index}"
        if why := _unfinished(job, pod):
            findings.append(job.row(subject, "fail", why))
            continue
        text, why = _read_log(apis, pod, dcgm_diag.CONTAINER)
        if text is None:
            findings.append(job.row(subject, "fail", why))
            continue
        verdict = dcgm_diag.judge(text, job.target.instance_type, job.level, node=subject)
        result: Result = "fail" if not verdict.passed else "warn" if verdict.warnings else "pass"
        findings.append(job.row(subject, result, verdict.detail()))
    return findings


def _judge_fabric(apis: KubeApis, job: AcceptJob) -> Finding:
    pods = _by_index(job.pods)
    nodes = sorted({p.spec.node_name for p in pods.values() if p.spec.node_name})
    subject = ", ".join(nodes) or f"{job.expected_pods} nodes"
    launcher = pods.get(0)
    if why := _unfinished(job, launcher):
        return job.row(subject, "fail", why)
    text, why = _read_log(apis, launcher, "nccl-tests")
    if text is None:
        return job.row(subject, "fail", why)
    try:
        verdict = fabric.evaluate(text, job.target.instance_type)
    except ValueError as exc:
        last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "empty log")
        return job.row(subject, "fail", f"{exc}; the log ends: {one_line(last, 160)}")
    run = verdict.run
    detail = (
        f"transport {run.transport}, peak busbw {run.peak_busbw_gbps:.1f} GB/s at "
        f"{run.peak.size_bytes} B (threshold {verdict.threshold_gbps:g}), average "
        f"{run.avg_busbw_gbps:.1f} GB/s"
    )
    if verdict.reasons:
        detail += ": " + "; ".join(verdict.reasons)
    return job.row(subject, "pass" if verdict.passed else "fail", detail)


def cleanup(apis: KubeApis, jobs: list[AcceptJob]) -> list[str]:
    """Delete what this run created (pods go with their Job); the errors, one line each."""
    errors = []
    for job in jobs:
        ns = job.target.namespace
        for kind, name in reversed(job.created):
            try:
                if kind == "Job":
                    apis.batch.delete_namespaced_job(
                        name, ns, propagation_policy="Background", _request_timeout=REQUEST_TIMEOUT
                    )
                else:
                    apis.core.delete_namespaced_service(name, ns, _request_timeout=REQUEST_TIMEOUT)
            except Exception as exc:
                if status_of(exc) == 404:
                    continue
                why = api_message(exc) if status_of(exc) else one_line(str(exc))
                errors.append(f"could not delete {kind} {ns}/{name}: {why}")
    return errors


# --- the progress display ---------------------------------------------------------------

_STATE_STYLE = {"succeeded": "green", "running": "cyan", "queued": "yellow", "pending": "yellow"}
_STATE_STYLE |= dict.fromkeys(("failed", "timed out"), "bold red")


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


def table(
    title: str,
    columns: tuple[str, ...],
    rows: Iterable[tuple[str, ...]],
    styles: dict[str, str],
    styled: int,
) -> Table:
    """A table of text cells (no markup), column `styled` coloured by `styles`."""
    out = Table(title=title, title_justify="left")
    for column in columns:
        out.add_column(column, overflow="fold")
    for row in rows:
        out.add_row(
            *(Text(c, style=styles.get(c, "") if i == styled else "") for i, c in enumerate(row))
        )
    return out


def progress_table(jobs: list[AcceptJob], now: float) -> Table:
    columns = ("job", "pool", "state", "elapsed / timeout", "pods")
    clocks = [f"{_clock(j.elapsed(now))} / {_clock(j.timeout_s)}" for j in jobs]
    rows = [
        (j.name, j.target.pool, j.state, c, j.detail) for j, c in zip(jobs, clocks, strict=True)
    ]
    return table("acceptance jobs", columns, rows, _STATE_STYLE, 2)


@contextlib.contextmanager
def progress_view(console: Console | None) -> Iterator[Callable[[list[AcceptJob], float], None]]:
    """A live table of the jobs on `console` (stderr: stdout stays the verdict); yields the
    function that redraws it."""
    if console is None:
        yield lambda jobs, now: None
        return
    with Live(console=console, auto_refresh=False) as live:
        yield lambda jobs, now: live.update(progress_table(jobs, now), refresh=True)
