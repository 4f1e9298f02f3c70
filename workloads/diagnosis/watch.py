"""The straggler watcher: the `llmp stragglers` analysis, every minute, on every training job.

`python -m workloads.diagnosis.watch --prometheus URL` runs in the cluster (one pod in
`monitoring`, the trainer image; components/straggler_watch.py deploys it). Each run:

1. finds the training jobs Prometheus has step times of now: `count by (namespace, job)
   (llmp_train_step_seconds)` (read-only: an instant query). A job is its namespace and its
   name: `namespace` is Kubernetes' label of the pod that published the series and `job` the
   JobSet controller's pod label (monitoring/charts.py: no tenant monitor honours the
   exposition's labels), so a pod can speak only for jobs of its own namespace;
2. reads each job's last `--window` of step times, `{namespace=...,job=...}` (spec/promql.py
   quotes them), and analyses it (workloads/diagnosis/stragglers.py: `query_prometheus`,
   `analyse`). Step times that cannot be (not a number, negative, infinite, NaN) are one
   `input` error: the job is skipped, nothing judged, no streak counted;
3. publishes what it found on its own `/metrics` (`--port`): per job (labels
   `training_namespace`, `training_job`: `namespace` and `job` are the watcher's own target's,
   which the alerts select on) the nodes flagged slow
   and the `--top` nodes losing the most time (`llmp_straggler_node_ratio`, `_flagged`,
   `_share`, `_flagged_runs`), the job's `llmp_straggler_job_slowdown_ratio`, and the
   watcher's own health (`llmp_straggler_last_run_timestamp_seconds`,
   `llmp_straggler_errors_total{kind}`). The series are those of the last run only: a node
   no longer slow, or a job that ended, has none (the alert `LlmpSlowNode` resolves);
4. with `--quarantine`, isolates a node flagged in `--quarantine-after` runs in a row
   (workloads/diagnosis/isolation.py: cordon, taint, evict its training pods) while at most
   `--max-quarantined` nodes carry the quarantine taint; every action is logged and counted
   (`llmp_straggler_quarantine_actions_total{action}`). A node is acted on only where the job
   that blames it runs a pod (`jobset.sigs.k8s.io/jobset-name` of the job, in its namespace):
   the `node` label is rank 0's word for where each rank runs, and a job's series must not
   take out a node it does not use (one `input` error, logged once, and left alone).

Nothing that fails stops the loop: a Prometheus out of reach, a job whose series cannot be
read, a cluster that refuses a write are each one log line and one count in
`llmp_straggler_errors_total{kind}` (prometheus, input, analysis, quarantine). A job that
Prometheus failed to answer for, or whose analysis raised, keeps the findings of its last good
run (unknown is not healthy); one whose step times cannot be read (or are gone: it ended) has
none. Either way its quarantine streaks start again: a streak counts runs that saw the node
slow, in a row.
A run takes about persist x window to flag a node that turned slow (the share of the window's
steps it must be slow in), plus up to one interval.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spec.labels import JOB_KIND_LABEL, TRAINING_JOB_LABEL
from spec.monitoring import duration_seconds
from workloads.diagnosis import isolation, prometheus
from workloads.diagnosis import stragglers as st
from workloads.kube_api import REQUEST_TIMEOUT, KubeApis, NoCluster, in_cluster_apis, reason

log = logging.getLogger("llmp.stragglers.watch")

PREFIX = "llmp_straggler_"
DEFAULT_PORT = 9400
ERROR_KINDS = ("prometheus", "input", "analysis", "quarantine")
"""What `llmp_straggler_errors_total{kind}` counts: Prometheus out of reach or failing, step
times that cannot be read as such, an analysis that raised, a quarantine the cluster refused."""
ACTIONS = ("quarantined", "already_quarantined", "refused")
METRICS = (
    f"{PREFIX}node_ratio",
    f"{PREFIX}node_flagged",
    f"{PREFIX}node_share",
    f"{PREFIX}node_flagged_runs",
    f"{PREFIX}job_slowdown_ratio",
    f"{PREFIX}jobs",
    f"{PREFIX}last_run_timestamp_seconds",
    f"{PREFIX}quarantine_enabled",
    f"{PREFIX}errors_total",
    f"{PREFIX}quarantine_actions_total",
)
"""Every series the watcher publishes (monitoring/inventory.py lists them for the rules)."""
JOB_LABELS = ("training_namespace", "training_job")
"""The labels of a finding naming the job it judges (`namespace`, `job` are the target's)."""
JobKey = tuple[str, str]
"""A training job: (namespace, name)."""
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
_NODE_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?$")


def job_name(key: JobKey) -> str:
    """`namespace/job`, as the log and the annotations name a job."""
    return f"{key[0]}/{key[1]}"


@dataclass(frozen=True, kw_only=True)
class WatchSettings:
    prometheus: str
    interval_s: float = 60.0
    window: str = "4m"
    resolution: str = "15s"
    threshold: float = 0.05
    persist: float = 0.5
    top: int = 3
    """Nodes per job published beside the flagged ones (most time lost first)."""
    quarantine: bool = False
    quarantine_after: int = 3
    max_quarantined: int = 2
    timeout_s: float = 30.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> WatchSettings:
        """The settings of a command line that `parser()` parsed."""
        return cls(
            prometheus=args.prometheus,
            interval_s=args.interval,
            window=args.window,
            resolution=args.resolution,
            threshold=args.threshold,
            persist=args.persist,
            top=args.top,
            quarantine=args.quarantine,
            quarantine_after=args.quarantine_after,
            max_quarantined=args.max_quarantined,
        )

    def check(self) -> None:
        """ValueError (one line) for a setting that cannot work."""
        if not self.prometheus.startswith(("http://", "https://")):
            raise ValueError(f"--prometheus {self.prometheus}: an http:// or https:// URL")
        for flag, value in (("--window", self.window), ("--resolution", self.resolution)):
            try:
                duration_seconds(value)
            except ValueError:
                raise ValueError(f"{flag} {value}: a duration such as 15s, 6m or 1h") from None
        if not self.interval_s > 0:
            raise ValueError(f"--interval {self.interval_s:g}: more than 0 seconds")
        if not 0 <= self.threshold < float("inf"):
            raise ValueError(f"--threshold {self.threshold}: a number >= 0")
        if not 0 < self.persist <= 1:
            raise ValueError(f"--persist {self.persist}: in (0, 1]")
        if self.top < 0:
            raise ValueError(f"--top {self.top}: 0 or more")
        if self.quarantine_after < 1:
            raise ValueError(f"--quarantine-after {self.quarantine_after}: at least 1")
        if self.max_quarantined < 1:
            raise ValueError(f"--max-quarantined {self.max_quarantined}: at least 1")


@dataclass(frozen=True)
class NodeFinding:
    node: str
    ratio: float
    flagged: bool
    share: float
    lost_s: float
    slow_fraction: float
    ranks: tuple[int, ...]
    cause: str | None = None
    """The cause with the largest share of the node's lost time (stragglers.CAUSES, or
    `other`); None where the trace has no phases or the node loses nothing of its own."""

    @property
    def named(self) -> bool:
        """A real node name (a rank whose series named none is reported as rank-N)."""
        return not (len(self.ranks) == 1 and self.node == f"rank-{self.ranks[0]}")


@dataclass(frozen=True)
class JobFinding:
    namespace: str
    job: str
    slowdown_ratio: float
    """The job's step time over what it would be if every rank ran at the step's median."""
    steps: int
    nodes: tuple[NodeFinding, ...]
    """The flagged nodes and the `top` losing the most time, most time lost first."""


@dataclass
class RunSummary:
    """What one run saw and did (for the log and the tests)."""

    jobs: list[str] = field(default_factory=list)
    """`namespace/job` of each job watched."""
    flagged: list[tuple[str, str]] = field(default_factory=list)
    """(`namespace/job`, node) of each node flagged."""
    errors: list[tuple[str, str]] = field(default_factory=list)
    """(kind, line) of each failure."""
    outcomes: list[isolation.NodeOutcome] = field(default_factory=list)


RUNNING_JOBS = f"count by (namespace, job) ({st.METRIC})"
"""The jobs with step times now: by namespace and name (a name is unique in its namespace)."""


def running_jobs(url: str, timeout: float, at: float | None = None) -> list[JobKey]:
    """(namespace, job) of the training step-time series Prometheus holds at `at` (Unix
    seconds; None: Prometheus' now); a series without either label names no job that can be
    scoped, and is left out."""
    params = {"query": RUNNING_JOBS, **({"time": f"{at:.3f}"} if at is not None else {})}
    try:
        data = prometheus.query(url, "query", params, timeout)
    except st.BadInput as exc:  # Prometheus refused our own query: it is Prometheus' fault
        raise st.SourceUnavailable(str(exc)) from None
    found = set()
    for s in data.get("result") or []:
        labels = (s.get("metric") or {}) if isinstance(s, dict) else {}
        namespace, job = labels.get("namespace"), labels.get("job")
        if isinstance(namespace, str) and isinstance(job, str) and namespace and job:
            found.add((namespace, job))
    return sorted(found)


def findings(key: JobKey, report: st.Report, top: int) -> JobFinding:
    ranked = list(report.by_node)  # most time lost first
    chosen = [s for i, s in enumerate(ranked) if s.flagged or i < top]
    nodes = tuple(
        NodeFinding(
            s.name,
            s.median_ratio,
            s.flagged,
            s.share,
            s.lost_s,
            s.slow_fraction,
            tuple(s.ranks),
            s.cause.name if s.cause is not None else None,
        )
        for s in chosen
    )
    ratio = report.actual_s / report.at_median_s if report.at_median_s > 0 else 1.0
    return JobFinding(key[0], key[1], ratio, report.steps, nodes)


class _Findings:
    """A collector that publishes the findings of the last run, and only those."""

    def __init__(self, watcher: Watcher) -> None:
        self._watcher = watcher

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        w = self._watcher
        with w.lock:
            jobs = dict(w.jobs)
            streaks = dict(w.streaks)
            last_run = w.last_run
        ratio = GaugeMetricFamily(
            f"{PREFIX}node_ratio",
            "The node's median step time over the other nodes' median (last window).",
            labels=[*JOB_LABELS, "node"],
        )
        flagged = GaugeMetricFamily(
            f"{PREFIX}node_flagged",
            "1 when the node is slow in at least the persist share of the window's steps.",
            labels=[*JOB_LABELS, "node"],
        )
        share = GaugeMetricFamily(
            f"{PREFIX}node_share",
            "The share of the job's slowdown the node explains.",
            labels=[*JOB_LABELS, "node"],
        )
        runs = GaugeMetricFamily(
            f"{PREFIX}node_flagged_runs",
            "Runs in a row that flagged the node (quarantine acts at --quarantine-after).",
            labels=[*JOB_LABELS, "node"],
        )
        slowdown = GaugeMetricFamily(
            f"{PREFIX}job_slowdown_ratio",
            "The job's step time over its time if every rank ran at the step's median.",
            labels=list(JOB_LABELS),
        )
        for key, found in sorted(jobs.items()):
            slowdown.add_metric(list(key), found.slowdown_ratio)
            for n in found.nodes:
                ratio.add_metric([*key, n.node], n.ratio)
                flagged.add_metric([*key, n.node], 1.0 if n.flagged else 0.0)
                share.add_metric([*key, n.node], n.share)
                runs.add_metric([*key, n.node], float(streaks.get((*key, n.node), 0)))
        yield from (ratio, flagged, share, runs, slowdown)
        yield GaugeMetricFamily(f"{PREFIX}jobs", "Training jobs watched.", value=len(jobs))
        if last_run is not None:
            yield GaugeMetricFamily(
                f"{PREFIX}last_run_timestamp_seconds",
                "When the last run ended (Unix time).",
                value=last_run,
            )
        yield GaugeMetricFamily(
            f"{PREFIX}quarantine_enabled",
            "1 when the watcher quarantines persistently slow nodes.",
            value=1.0 if w.settings.quarantine else 0.0,
        )


class _ClusterRefused(Exception):
    """The cluster would not say which pods run on a node (one line)."""


class Watcher:
    """One run at a time (`run_once`), or every `interval_s` until stopped (`run_forever`)."""

    def __init__(
        self,
        settings: WatchSettings,
        *,
        registry: Any = None,
        apis: KubeApis | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        from prometheus_client import CollectorRegistry, Counter

        settings.check()
        if settings.quarantine and apis is None:
            raise ValueError("--quarantine needs the cluster's API")
        self.settings = settings
        self.apis = apis
        self.clock = clock
        self.lock = threading.Lock()
        self.jobs: dict[JobKey, JobFinding] = {}
        self.streaks: dict[tuple[str, str, str], int] = {}
        """(namespace, job, node) -> runs in a row that flagged the node for that job."""
        self.last_run: float | None = None
        self._announced: dict[str, str] = {}
        """node -> the last quarantine outcome logged for it (an outcome is logged once)."""
        self.registry = registry if registry is not None else CollectorRegistry()
        self.errors = Counter(
            f"{PREFIX}errors",
            "Failures of the watcher's runs, by kind; none stops the loop.",
            ["kind"],
            registry=self.registry,
        )
        self.actions = Counter(
            f"{PREFIX}quarantine_actions",
            "Quarantine outcomes, each counted (and logged) once per node and streak.",
            ["action"],
            registry=self.registry,
        )
        for kind in ERROR_KINDS:
            self.errors.labels(kind)
        for action in ACTIONS:
            self.actions.labels(action)
        self.registry.register(_Findings(self))

    # --- one run -------------------------------------------------------------------------

    def run_once(self) -> RunSummary:
        summary = RunSummary()
        s = self.settings
        now = self.clock()  # every query of the run is of this instant
        try:
            jobs = running_jobs(s.prometheus, s.timeout_s, at=now)
        except st.SourceUnavailable as exc:
            self._failed(summary, "prometheus", f"cannot list the training jobs: {exc}")
            with self.lock:
                self.streaks.clear()  # an unobserved run breaks every streak
                self.last_run = self.clock()
            return summary
        summary.jobs = [job_name(key) for key in jobs]
        found: dict[JobKey, JobFinding] = {}
        failed: set[JobKey] = set()
        for key in jobs:
            namespace, job = key
            name = job_name(key)
            try:
                trace = st.query_prometheus(
                    s.prometheus, job, s.window, s.resolution, end=now, namespace=namespace
                )
                report = st.analyse(trace, s.threshold, s.persist)
                found[key] = findings(key, report, s.top)
            except st.SourceUnavailable as exc:
                self._failed(summary, "prometheus", f"job {name}: {exc}")
                failed.add(key)
            except st.BadInput as exc:  # impossible step times among them: skipped
                self._failed(summary, "input", f"job {name}: {exc}; not judged")
            except Exception as exc:  # a failed analysis must not stop the others
                self._failed(summary, "analysis", f"job {name}: {type(exc).__name__}: {exc}")
                failed.add(key)
        with self.lock:
            previous = self.jobs
            jobs_now = dict(found)
            for key in failed:
                if key in previous:
                    jobs_now[key] = previous[key]  # unknown is not healthy: keep the last
            streaks: dict[tuple[str, str, str], int] = {}
            for key, f in found.items():
                for n in f.nodes:
                    if n.flagged:
                        streak = (*key, n.node)
                        streaks[streak] = self.streaks.get(streak, 0) + 1
            self._log_changes(previous, found)
            self.jobs, self.streaks = jobs_now, streaks
        summary.flagged = sorted((f"{ns}/{job}", node) for ns, job, node in streaks)
        if s.quarantine:
            self._quarantine(summary, found, streaks)
        with self.lock:
            self.last_run = self.clock()
        return summary

    def _failed(self, summary: RunSummary, kind: str, line: str) -> None:
        self.errors.labels(kind).inc()
        summary.errors.append((kind, line))
        log.error("%s error: %s", kind, line)

    def _log_changes(
        self, previous: dict[JobKey, JobFinding], now: dict[JobKey, JobFinding]
    ) -> None:
        def flagged(jobs: dict[JobKey, JobFinding]) -> dict[tuple[JobKey, str], NodeFinding]:
            return {(k, n.node): n for k, f in jobs.items() for n in f.nodes if n.flagged}

        before, after = flagged(previous), flagged(now)
        for (key, node), n in sorted(after.items()):
            if (key, node) not in before:
                log.warning(
                    "job %s: node %s is slow: %.3fx the other nodes' median step time, "
                    "%.0f%% of the job's slowdown (rank %s; cause: %s)",
                    job_name(key),
                    node,
                    n.ratio,
                    100 * n.share,
                    ", ".join(str(r) for r in n.ranks),
                    n.cause or "not known",
                )
        for key, node in sorted(set(before) - set(after)):
            if key in now:
                log.info("job %s: node %s is no longer slow", job_name(key), node)

    # --- quarantine ----------------------------------------------------------------------

    def _quarantine(
        self,
        summary: RunSummary,
        found: dict[JobKey, JobFinding],
        streaks: dict[tuple[str, str, str], int],
    ) -> None:
        s = self.settings
        due: dict[str, list[tuple[JobKey, NodeFinding, int]]] = {}
        for key, f in found.items():
            for n in f.nodes:
                runs = streaks.get((*key, n.node), 0)
                if n.flagged and n.named and runs >= s.quarantine_after:
                    due.setdefault(n.node, []).append((key, n, runs))
        # A node no longer due starts afresh: slow again later, it is acted on again.
        self._announced = {k: v for k, v in self._announced.items() if k in due}
        pending: list[tuple[JobKey, NodeFinding, int]] = []
        for node, blamed in sorted(due.items()):
            if self._announced.get(node) in ("quarantined", "already_quarantined"):
                continue
            blamed.sort(key=lambda item: -item[1].lost_s)  # the job losing most speaks first
            try:
                verified = [b for b in blamed if self._runs_on(node, b[0])]
            except _ClusterRefused as exc:
                self._failed(summary, "quarantine", str(exc))
                return
            if verified:
                pending.append(verified[0])
                continue
            if self._announced.get(node) == "unverified":
                continue  # said once per streak; asked again every run
            self._announced[node] = "unverified"
            jobs = ", ".join(job_name(key) for key, _, _ in blamed)
            self._failed(
                summary,
                "input",
                f"node {node}: flagged by job {jobs}, which runs no pod there; not quarantined",
            )
        if not pending:
            return
        pending.sort(key=lambda item: -item[1].lost_s)  # the cap keeps the worst
        targets = [
            isolation.Target(
                n.node,
                f"llmp straggler watcher: {n.ratio:.3f}x the other nodes' median step time, "
                f"slow in {n.slow_fraction:.0%} of {found[key].steps} steps of the last "
                f"{s.window}, flagged in {runs} runs in a row (job {job_name(key)})",
            )
            for key, n, runs in pending
        ]
        assert self.apis is not None
        try:
            report = isolation.quarantine(
                self.apis,
                targets,
                max_quarantined=s.max_quarantined,
                dry_run=False,
                now=datetime.datetime.fromtimestamp(self.clock(), datetime.UTC),
            )
        except isolation.IsolationError as exc:
            self._failed(summary, "quarantine", str(exc))
            return
        except Exception as exc:  # the cluster client's own errors must not stop the loop
            self._failed(summary, "quarantine", f"{type(exc).__name__}: {exc}")
            return
        for outcome in report.outcomes:
            summary.outcomes.append(outcome)
            action = outcome.action.replace(" ", "_")
            if self._announced.get(outcome.node) == action:
                continue
            self._announced[outcome.node] = action
            self.actions.labels(action).inc()
            line = outcome.line()
            if action == "refused":
                held = ", ".join(report.quarantined_before) or "none"
                line += f" ({s.max_quarantined} may carry the taint; already: {held})"
            log.warning("quarantine: %s", line)

    def _runs_on(self, node: str, key: JobKey) -> bool:
        """Whether a training pod of job `key` (its namespace, the JobSet controller's jobset-name
        label) is on `node`: what a job's series say about a node is taken only from a job
        that uses it. Names no pod or node can have are no."""
        namespace, job = key
        if not (_NODE_NAME.match(node) and job and _LABEL_VALUE.match(job)):
            return False
        assert self.apis is not None
        try:
            # The pods on the node (what the quarantine lists too: its role may list pods,
            # cluster-wide), of the job by its labels, then of the job's namespace.
            listed = self.apis.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}",
                label_selector=f"{JOB_KIND_LABEL}=training,{TRAINING_JOB_LABEL}={job}",
                _request_timeout=REQUEST_TIMEOUT,
            )
        except Exception as exc:
            raise _ClusterRefused(f"cannot list the pods on {node}: {reason(exc)}") from None
        return any(
            p.metadata.namespace == namespace
            and p.metadata.deletion_timestamp is None
            and (p.status is None or p.status.phase not in ("Succeeded", "Failed"))
            for p in listed.items or []
        )

    # --- the loop ------------------------------------------------------------------------

    def run_forever(self, stop: threading.Event) -> None:
        """Run every `interval_s` (from one run's start to the next) until `stop` is set."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.run_once()
            except Exception as exc:  # the last guard: the loop itself never dies
                self.errors.labels("analysis").inc()
                log.error("analysis error: run failed: %s: %s", type(exc).__name__, exc)
            stop.wait(max(0.0, self.settings.interval_s - (time.monotonic() - started)))


# --- the command ---------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2: no usage block
        self.exit(2, f"{self.prog}: {message}\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m workloads.diagnosis.watch",
        description="Watch every training job in Prometheus for slow nodes; publish them as "
        "metrics, and optionally quarantine a node slow for several runs in a row.",
    )
    p.add_argument("--prometheus", required=True, help="Prometheus' URL (read only).")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="/metrics port.")
    p.add_argument(
        "--address", default="127.0.0.1", help="Address /metrics listens on (a pod: 0.0.0.0)."
    )
    p.add_argument("--interval", type=float, default=60.0, help="Seconds between runs.")
    p.add_argument("--window", default="4m", help="Step times analysed per run (15m, 1h).")
    p.add_argument("--resolution", default="15s", help="query_range step.")
    p.add_argument("--threshold", type=float, default=0.05, help="Slow: above median x (1+t).")
    p.add_argument("--persist", type=float, default=0.5, help="Flag when slow in this share.")
    p.add_argument("--top", type=int, default=3, help="Unflagged nodes published per job.")
    p.add_argument("--quarantine", action="store_true", help="Quarantine persistent ones.")
    p.add_argument("--quarantine-after", type=int, default=3, help="Runs in a row flagged.")
    p.add_argument("--max-quarantined", type=int, default=2, help="Nodes tainted at most.")
    p.add_argument("--once", action="store_true", help="One run; print the metrics; exit.")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr
    )
    settings = WatchSettings.from_args(args)
    try:
        settings.check()
        apis = in_cluster_apis() if settings.quarantine else None
    except (ValueError, NoCluster) as exc:
        print(f"stragglers watch: {exc}", file=sys.stderr)
        return 2
    try:
        import prometheus_client
    except ImportError:
        print("stragglers watch: needs prometheus_client", file=sys.stderr)
        return 2
    watcher = Watcher(settings, apis=apis)
    if args.once:
        watcher.run_once()
        sys.stdout.write(prometheus_client.generate_latest(watcher.registry).decode())
        return 0
    try:
        server, _ = prometheus_client.start_http_server(
            args.port, addr=args.address, registry=watcher.registry
        )
    except OSError as exc:
        print(
            f"stragglers watch: cannot listen on {args.address}:{args.port}: {exc}", file=sys.stderr
        )
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    log.info(
        "watching %s every %gs (window %s, quarantine %s) on :%d",
        settings.prometheus,
        settings.interval_s,
        settings.window,
        f"after {settings.quarantine_after} runs, at most {settings.max_quarantined}"
        if settings.quarantine
        else "off",
        args.port,
    )
    try:
        watcher.run_forever(stop)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
