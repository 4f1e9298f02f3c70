"""In-cluster acceptance of a deployed stack (`llmp accept STACK`).

`pulumi up` finishing says the cloud accepted the resources, not that the GPU nodes work.
Per GPU pool of the stack file, through the Kubernetes API (`llmp.clients.kube`):

- **nodes** (read only): at least `min_size` Ready, schedulable nodes, each advertising all
  its GPUs (and, on EFA pools, EFA interfaces); the others are named and left out;
- **dcgm** and **fabric**: the jobs of `llmp.accept.jobs`, created together, scheduled by
  the cluster (and Kueue), waited for until they end or time out, judged from their pods'
  logs, and deleted unless kept (`kubectl delete jobs -l llm-platform/accept-run=<id>`
  after an interrupted run).
"""

from __future__ import annotations

import math
import re
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from llmp.accept import jobs as accept_jobs
from llmp.accept.jobs import FINAL, Finding, PoolNodes, PoolTarget, Result
from llmp.clients import kube
from llmp.clients.kube import REQUEST_TIMEOUT, KubeApis, KubeError
from manifests.jobs import dcgm_diag, fabric
from manifests.kueue import LOCAL_QUEUE, TopologyRequest
from spec.platform import PlatformConfig

POLL_SECONDS = 10.0
MAX_TIMEOUT_MINUTES = 24 * 60


class AcceptError(KubeError):
    """Bad input or no usable cluster: one line, exit 2, nothing was created."""


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
        topology = (
            TopologyRequest("unconstrained").annotations() if pool.topology_aware and queue else {}
        )
        targets.append(
            PoolTarget(
                name,
                pool.instance_type,
                pool.efa,
                pool.min_size,
                pool.desired_size,
                ns,
                queue,
                topology,
                partitioned=pool.mig is not None,
            )
        )
    return targets


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


def inspect_pool(apis: KubeApis, target: PoolTarget) -> PoolNodes:
    """Read the pool's nodes (label llm-platform/pool) and judge them against the stack file."""
    devices = kube.Devices.of(target.instance_type, target.efa)
    nodes = kube.pool_nodes(apis, target.pool)
    usable, problems = [], []
    for node in nodes:
        name = node.metadata.name
        if problem := kube.readiness(node) or kube.shortfall(node, devices):
            problems.append(f"{name} {problem}")
        else:
            usable.append(name)
    sizes = f"min {target.min_size}, desired {target.desired_size}"
    detail = f"{len(usable)} usable of {len(nodes)} nodes ({sizes})"
    result: Result = "pass"
    if problems:
        result = "fail"
        detail += ": " + "; ".join(problems)
    if len(usable) < target.min_size:
        result = "fail"
        detail += f"; fewer usable nodes than min_size {target.min_size}"
    return PoolNodes(target, sorted(usable), Finding(target.pool, "nodes", "pool", result, detail))


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


def _check_ssh_secret(apis: KubeApis, jobs: list[accept_jobs.AcceptJob]) -> None:
    """The fabric pods mount Secret fabric-ssh; without it they wait forever in
    ContainerCreating. Say so before creating anything (a 403 here is not fatal: the
    caller may create jobs without reading Secrets)."""
    for ns in sorted({j.target.namespace for j in jobs if j.check == "fabric"}):
        try:
            apis.core.read_namespaced_secret(
                fabric.SSH_SECRET, ns, _request_timeout=REQUEST_TIMEOUT
            )
        except Exception as exc:
            if kube.status_of(exc) == 404:
                raise AcceptError(
                    f"namespace {ns} has no Secret {fabric.SSH_SECRET}, which the fabric job "
                    "mounts: create it as manifests/jobs/fabric.py says, or pass --skip-fabric"
                ) from None
            if kube.status_of(exc) in (401, 403):
                continue
            raise kube.fatal(exc, apis.host, "read a Secret") or exc from None


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
    """Inspect the pools, create the jobs, wait, judge, clean up; AcceptError (or KubeError)
    before anything was created when the input or the cluster is unusable."""
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
        jobs, not_checked = accept_jobs.plan_jobs(
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
            if failed := accept_jobs.create(apis, job, clock()):
                report.findings.append(failed)
        live = [j for j in jobs if j.state not in FINAL]
        with accept_jobs.progress_view(progress) as redraw:
            while True:
                now = clock()
                for job in live:
                    if job.state not in FINAL:
                        accept_jobs.refresh(apis, job, now)
                redraw(jobs, now)
                if all(j.state in FINAL for j in live):
                    break
                sleep(options.poll_seconds)
        for job in live:
            report.findings.extend(accept_jobs.judge(apis, job))
    finally:
        if options.keep:
            report.kept = [name for j in jobs for kind, name in j.created if kind == "Job"]
        else:
            report.cleanup_errors = accept_jobs.cleanup(apis, jobs)
    # Pool by pool, in the stack's order: its nodes, then its diagnostics, then its fabric.
    pool_order = {t.pool: i for i, t in enumerate(targets)}
    check_order = {"nodes": 0, "dcgm": 1, "fabric": 2}
    report.findings.sort(key=lambda f: (pool_order[f.pool], check_order[f.check], f.subject))
    return report


# --- the verdict ------------------------------------------------------------------------

_RESULT_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "not checked": "dim"}


def verdict_table(report: AcceptReport) -> Table:
    rows = [(f.pool, f.check, f.subject, f.result, f.detail) for f in report.findings]
    title = f"acceptance of {report.stack} (run {report.run_id})"
    columns = ("pool", "check", "subject", "result", "detail")
    return accept_jobs.table(title, columns, rows, _RESULT_STYLE, 3)


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
    from llmp.stacks import load_stack
    from spec.errors import ConfigError

    try:
        return load_stack(stack)
    except ConfigError as exc:
        raise AcceptError(str(exc)) from None
