"""The straggler watcher (workloads/diagnosis/watch.py) against a real Prometheus (Debian's,
tests/monitoring/servers.py) holding a simulated training run's step times as rank 0's gauges
scraped every 15 s, backfilled into its TSDB; the watcher's clock is the simulation's, and
every run asks the server about its own instant (the test moves it a minute per run), so a
25-minute story takes seconds and every query is answered by Prometheus itself. A node planted
to turn slow shows in the metrics within the window; a node flagged in N runs in a row is
quarantined on the fake Kubernetes API (tests/llmp/kube_fake.py: no kube-apiserver runs here)
within the cap; a failing Prometheus is counted, never fatal; a node no longer slow, and a job
that ended, leave no series behind. A job is its namespace and name: a job of the same name in
another namespace, or series of another namespace in an answer, count for nothing; impossible
step times (NaN, negative, infinite, not a number) skip the job, logged, never quarantine; a
node the job has no pod on is never quarantined."""

from __future__ import annotations

import hashlib
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from spec.labels import JOB_KIND_LABEL, QUARANTINE_TAINT, TRAINING_JOB_LABEL
from spec.promql import selector
from tests.llmp.kube_fake import FakeClock, FakeCluster, FakeNode, node_pod
from tests.monitoring import servers
from workloads.diagnosis import watch

JOB = "llama-70b"
NS = "foundation"
J = {"training_namespace": NS, "training_job": JOB}
"""The labels of the watcher's findings about JOB (its own `namespace`/`job` are the target's)."""
NODES = [f"ip-10-0-1-{n}.ec2.internal" for n in (11, 12, 13, 14)]
SLOW, SLOWER = NODES[2], NODES[3]
RANKS_PER_NODE = 2
STEP_S = 1.0
SLOW_FACTOR = 1.3
GPU_TAINT = ("nvidia.com/gpu", "true", "NoSchedule")
TRAINING = {JOB_KIND_LABEL: "training"}


@dataclass
class SimJob:
    nodes: list[str]
    slow: dict[str, tuple[float, float]] = field(default_factory=dict)
    """node -> (from, until) simulated seconds during which its ranks are SLOW_FACTOR slower."""
    start: float = 0.0
    end: float = float("inf")
    namespace: str = NS
    name: str | None = None
    """The job's name (`job`); None: its key in SimPrometheus.jobs."""
    poison: dict[int, str] = field(default_factory=dict)
    """rank -> the value string Prometheus answers for each of its samples (NaN, -3, ...)."""

    def ranks(self) -> dict[int, str]:
        return {i * RANKS_PER_NODE + r: node for i, node in enumerate(self.nodes) for r in range(2)}

    def step_seconds(self, rank: int, node: str, t: float) -> float:
        """The rank's last step time at simulated time t: 1 s, +-2 % of noise that differs
        at every sample (so consecutive samples are distinct steps), slower while planted."""
        digest = hashlib.sha256(f"{rank}:{round(t)}".encode()).digest()
        noise = 1 + (digest[0] / 255 - 0.5) * 0.04
        slow_from, slow_until = self.slow.get(node, (float("inf"), float("inf")))
        return STEP_S * noise * (SLOW_FACTOR if slow_from <= t < slow_until else 1.0)


SCRAPE_S = 15.0
"""How often the history has rank 0's gauges scraped (the watcher's --resolution)."""
SIM_END_S = 40 * 60.0
"""The history runs from simulated 0 to here: every test's runs fit in it."""


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class SimPrometheus:
    """A real Prometheus (tests/monitoring/servers.py) holding the simulated jobs' step times
    as rank 0's gauges scraped every SCRAPE_S from simulated 0 to SIM_END_S, backfilled when
    the server starts (at the first use of `url`, once the test has set its jobs). Simulated
    time t is Unix time `base + t`; `clock` is the watcher's clock on it (`now` seconds in),
    so every run queries the server at its own simulated instant.

    What no real server does goes through a proxy in front of it (servers.Proxy): `fail`
    answers every request with that HTTP status; `leak` drops the matchers of the step-time
    queries, as a Prometheus (or a proxy) ignoring them would; a rank's `poison` that is no
    number is put into the answers (NaN, -3, +Inf are stored samples). `queries` records every
    query the watcher sent. A job that ended leaves the instant query 5 minutes later (the
    lookback: backfilled samples carry no staleness marker, as a scrape that stops would)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.now = 0.0
        self.jobs: dict[str, SimJob] = {}
        self.leak = False
        self.base = time.time() - 6 * 60
        """Unix time of simulated 0: simulated 6 minutes (most tests' first run) is about now,
        so the command's own clock (`--once`) reads the history too."""
        self._proxy: servers.Proxy | None = None
        self._prometheus: servers.Prometheus | None = None

    def clock(self) -> float:
        return self.base + self.now

    @property
    def fail(self) -> int | None:
        return self.proxy.fail

    @fail.setter
    def fail(self, status: int | None) -> None:
        self.proxy.fail = status

    @property
    def queries(self) -> list[str]:
        return [q.get("query", [""])[0] for q in self.proxy.queries]

    @property
    def url(self) -> str:
        return self.proxy.url

    @property
    def proxy(self) -> servers.Proxy:
        if self._proxy is None:
            binary, _, promtool = servers.binaries()
            self._prometheus = servers.Prometheus(
                binary, self.workdir, history=self.history(), promtool=promtool
            )
            self._proxy = servers.Proxy(self._prometheus.url, query=self._leak, answer=self._poison)
        return self._proxy

    def stop(self) -> None:
        if self._proxy is not None:
            self._proxy.stop()
        if self._prometheus is not None:
            self._prometheus.stop()

    def history(self) -> str:
        samples = []
        ticks = [k * SCRAPE_S for k in range(int(SIM_END_S / SCRAPE_S) + 1)]
        for key, sim in self.jobs.items():
            job = _quoted(sim.name or key)
            for rank, node in sim.ranks().items():
                labels = f'namespace="{sim.namespace}",job="{job}",rank="{rank}",node="{node}"'
                poison = sim.poison.get(rank)
                stored = poison if poison is not None and _is_number(poison) else None
                for t in ticks:
                    if not sim.start <= t < sim.end:
                        continue
                    value = float(stored) if stored is not None else sim.step_seconds(rank, node, t)
                    samples.append((f"llmp_train_step_seconds{{{labels}}}", self.base + t, value))
        return servers.openmetrics({"llmp_train_step_seconds": ("gauge", samples)})

    def _leak(self, query: str) -> str:
        if self.leak and query.startswith("llmp_train_step_seconds{"):
            return "llmp_train_step_seconds"
        return query

    def _poison(self, query: str, body: dict[str, Any]) -> dict[str, Any]:
        forged = {
            (sim.namespace, sim.name or key, str(rank)): raw
            for key, sim in self.jobs.items()
            for rank, raw in sim.poison.items()
            if raw is None or not _is_number(raw)
        }
        if forged and query.startswith("llmp_train_step_seconds"):
            for s in body["data"]["result"]:
                m = s["metric"]
                raw = forged.get((m.get("namespace"), m.get("job"), m.get("rank")), "")
                if raw != "":
                    s["values"] = [[t, raw] for t, _ in s["values"]]
        return body


def _is_number(text: str | None) -> bool:
    try:
        float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[SimPrometheus]:
    sim = SimPrometheus(tmp_path / "prometheus")
    try:
        yield sim
    finally:
        sim.stop()


def make_watcher(prometheus: SimPrometheus, s: watch.WatchSettings, **kw: Any) -> watch.Watcher:
    """A watcher on the simulated clock: each run asks the server about its own instant."""
    return watch.Watcher(s, clock=prometheus.clock, **kw)


def samples(watcher: watch.Watcher) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample the watcher publishes now: (name, sorted labels) -> value."""
    text = generate_latest(watcher.registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def node_series(
    watcher: watch.Watcher, metric: str, namespace: str = NS
) -> dict[tuple[str, str], float]:
    """(training job, node) -> value of the watcher's series `metric` about jobs of
    `namespace`."""
    return {
        (dict(labels)["training_job"], dict(labels)["node"]): value
        for (name, labels), value in samples(watcher).items()
        if name == metric and dict(labels)["training_namespace"] == namespace
    }


def value(watcher: watch.Watcher, metric: str, **labels: str) -> float | None:
    return samples(watcher).get((metric, tuple(sorted(labels.items()))))


def settings(url: str, **kwargs: Any) -> watch.WatchSettings:
    return watch.WatchSettings(prometheus=url, window="6m", resolution="15s", **kwargs)


def advance(prometheus: SimPrometheus, watcher: watch.Watcher, minutes: int) -> list[Any]:
    """A run a minute, `minutes` times: what each run saw."""
    out = []
    for _ in range(minutes):
        prometheus.now += 60
        out.append(watcher.run_once())
    return out


# --- detection -----------------------------------------------------------------------------


def test_a_node_turning_slow_shows_in_the_metrics_within_the_window(
    prometheus: SimPrometheus,
) -> None:
    slow_at = 15 * 60
    prometheus.jobs[JOB] = SimJob(NODES, slow={SLOW: (slow_at, float("inf"))})
    watcher = make_watcher(prometheus, settings(prometheus.url))
    prometheus.now = 6 * 60  # a whole window of healthy steps
    first = None
    while prometheus.now < slow_at + 10 * 60:
        watcher.run_once()
        flagged = node_series(watcher, "llmp_straggler_node_flagged")
        if prometheus.now < slow_at:
            assert not any(flagged.values()), (prometheus.now, flagged)
        elif first is None and flagged.get((JOB, SLOW)) == 1:
            first = prometheus.now
        prometheus.now += 60
    assert first is not None, "the slow node was never flagged"
    delay = first - slow_at
    print(f"flagged {delay:.0f} s after it turned slow ({(first - slow_at) // 60 + 1} runs)")
    # Flagged once slow in `persist` (half) of the 6-minute window, and within 5 minutes.
    assert 0 < delay <= watch.WatchSettings(prometheus="http://p").persist * 360 + 60
    assert delay <= 300
    ratio = node_series(watcher, "llmp_straggler_node_ratio")
    assert ratio[(JOB, SLOW)] == pytest.approx(SLOW_FACTOR, rel=0.03)
    # Only the slow node is flagged; the top nodes beside it are published, not flagged.
    flagged = node_series(watcher, "llmp_straggler_node_flagged")
    assert {k for k, v in flagged.items() if v == 1} == {(JOB, SLOW)}
    assert len(flagged) == 3  # --top 3 (the slow one among them)
    assert value(watcher, "llmp_straggler_job_slowdown_ratio", **J) > 1.1  # type: ignore[operator]
    assert value(watcher, "llmp_straggler_jobs") == 1
    # Runs in a row that flagged it: the streak the quarantine counts.
    runs = node_series(watcher, "llmp_straggler_node_flagged_runs")
    assert runs[(JOB, SLOW)] >= 5


def test_the_metrics_endpoint_serves_the_findings_on_loopback(prometheus: SimPrometheus) -> None:
    from prometheus_client import start_http_server

    prometheus.jobs[JOB] = SimJob(NODES, slow={SLOW: (0, float("inf"))})
    prometheus.now = 6 * 60
    watcher = make_watcher(prometheus, settings(prometheus.url, top=0))
    watcher.run_once()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=watcher.registry)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics") as r:
            text = r.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    lines = [ln for ln in text.splitlines() if ln.startswith("llmp_straggler_node_")]
    print("\n".join(lines))
    finding = f'node="{SLOW}",training_job="{JOB}",training_namespace="{NS}"'
    assert f"llmp_straggler_node_flagged{{{finding}}} 1.0" in lines
    assert any(ln.startswith(f"llmp_straggler_node_ratio{{{finding}}} 1.") for ln in lines)
    assert "llmp_straggler_last_run_timestamp_seconds" in text
    assert 'llmp_straggler_errors_total{kind="prometheus"} 0.0' in text
    assert "llmp_straggler_quarantine_enabled 0.0" in text


def test_every_published_series_is_in_the_watchers_list(prometheus: SimPrometheus) -> None:
    prometheus.jobs[JOB] = SimJob(NODES, slow={SLOW: (0, float("inf"))})
    prometheus.now = 6 * 60
    watcher = make_watcher(prometheus, settings(prometheus.url))
    watcher.run_once()
    names = {name for name, _ in samples(watcher) if not name.endswith("_created")}
    assert names == set(watch.METRICS)


# --- stale series ----------------------------------------------------------------------------


def test_a_node_no_longer_slow_and_a_job_that_ended_leave_no_series(
    prometheus: SimPrometheus,
) -> None:
    prometheus.jobs[JOB] = SimJob(NODES, slow={SLOW: (0, 10 * 60)})
    prometheus.jobs["other"] = SimJob(["a", "b"], end=12 * 60)
    prometheus.now = 6 * 60
    watcher = make_watcher(prometheus, settings(prometheus.url, top=0))  # flagged nodes only
    watcher.run_once()
    assert node_series(watcher, "llmp_straggler_node_flagged") == {(JOB, SLOW): 1}
    other = {"training_namespace": NS, "training_job": "other"}
    assert value(watcher, "llmp_straggler_job_slowdown_ratio", **other) is not None
    advance(prometheus, watcher, 10)  # healthy for 6 minutes: a whole window
    assert node_series(watcher, "llmp_straggler_node_flagged") == {}
    assert node_series(watcher, "llmp_straggler_node_ratio") == {}
    assert node_series(watcher, "llmp_straggler_node_flagged_runs") == {}
    # `other` ended at 12 minutes; Prometheus' instant query still counts it for its 5-minute
    # lookback (these samples have no staleness marker): by 18 minutes its series are gone.
    assert value(watcher, "llmp_straggler_job_slowdown_ratio", **other) is not None
    advance(prometheus, watcher, 2)
    assert value(watcher, "llmp_straggler_job_slowdown_ratio", **other) is None
    assert value(watcher, "llmp_straggler_job_slowdown_ratio", **J) is not None
    assert value(watcher, "llmp_straggler_jobs") == 1


# --- failures --------------------------------------------------------------------------------


def test_a_failing_prometheus_is_counted_and_the_loop_goes_on(
    prometheus: SimPrometheus, caplog: pytest.LogCaptureFixture
) -> None:
    prometheus.jobs[JOB] = SimJob(NODES, slow={SLOW: (0, float("inf"))})
    prometheus.now = 6 * 60
    watcher = make_watcher(prometheus, settings(prometheus.url))
    watcher.run_once()
    prometheus.fail = 503
    prometheus.now += 60
    summary = watcher.run_once()
    assert [kind for kind, _ in summary.errors] == ["prometheus"]
    [(_, line)] = summary.errors
    assert "HTTP 503" in line and "\n" not in line
    assert value(watcher, "llmp_straggler_errors_total", kind="prometheus") == 1
    # The run still ended (the watcher is alive), and what it knew stays published.
    assert value(watcher, "llmp_straggler_last_run_timestamp_seconds") == prometheus.clock()
    assert node_series(watcher, "llmp_straggler_node_flagged")[(JOB, SLOW)] == 1
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "\n" not in errors[0].getMessage()
    # Out of reach altogether: counted the same way.
    prometheus.fail = None
    gone = watch.Watcher(settings("http://127.0.0.1:9"))
    assert [k for k, _ in gone.run_once().errors] == ["prometheus"]
    assert value(gone, "llmp_straggler_errors_total", kind="prometheus") == 1
    # Back: the next run publishes again, and its streak starts afresh.
    watcher.run_once()
    assert node_series(watcher, "llmp_straggler_node_flagged_runs")[(JOB, SLOW)] == 1


def test_a_job_whose_query_fails_keeps_the_others_going(prometheus: SimPrometheus) -> None:
    prometheus.jobs[JOB] = SimJob(NODES, slow={SLOW: (0, float("inf"))})
    prometheus.jobs["broken"] = SimJob(["a"])
    prometheus.now = 6 * 60
    # The server fails the broken job's queries only (out of memory on its series).
    prometheus.proxy.fail_if = lambda query: 500 if "broken" in query else None
    watcher = make_watcher(prometheus, settings(prometheus.url))
    summary = watcher.run_once()
    assert summary.jobs == [f"{NS}/broken", f"{NS}/{JOB}"]
    assert [(k, "broken" in line) for k, line in summary.errors] == [("prometheus", True)]
    assert node_series(watcher, "llmp_straggler_node_flagged")[(JOB, SLOW)] == 1


def test_the_loop_runs_until_stopped(prometheus: SimPrometheus) -> None:
    prometheus.jobs[JOB] = SimJob(NODES)
    prometheus.now = 6 * 60
    watcher = make_watcher(prometheus, settings(prometheus.url, interval_s=0.01))
    stop = threading.Event()
    runs = []
    real = watcher.run_once

    def run_once() -> watch.RunSummary:
        runs.append(real())
        if len(runs) == 3:
            prometheus.fail = 502  # a failure mid-loop does not end it
        if len(runs) == 5:
            stop.set()
        return runs[-1]

    watcher.run_once = run_once  # type: ignore[method-assign]
    loop = threading.Thread(target=watcher.run_forever, args=(stop,))
    loop.start()
    loop.join(timeout=60)
    assert not loop.is_alive()
    assert len(runs) == 5
    assert value(watcher, "llmp_straggler_errors_total", kind="prometheus") == 2


# --- quarantine ------------------------------------------------------------------------------


def cluster(*extra_taints: tuple[str, str, str]) -> FakeCluster:
    nodes = [FakeNode(n, "h100", taints=[GPU_TAINT]) for n in NODES]
    nodes.append(FakeNode("ip-10-0-2-99.ec2.internal", "h100", taints=[GPU_TAINT, *extra_taints]))
    fake = FakeCluster(FakeClock(), nodes)
    fake.pods = [
        node_pod(NS, f"{JOB}-worker-{i}", n, {**TRAINING, TRAINING_JOB_LABEL: JOB})
        for i, n in enumerate(NODES)
    ]
    return fake


def test_a_node_flagged_n_runs_in_a_row_is_quarantined_within_the_cap(
    prometheus: SimPrometheus, caplog: pytest.LogCaptureFixture
) -> None:
    # Two slow nodes, SLOWER the worse; NVSentinel already holds one node: with a cap of 2,
    # only the worse one may be quarantined.
    prometheus.jobs[JOB] = SimJob(NODES, slow={SLOW: (0, float("inf")), SLOWER: (0, float("inf"))})
    prometheus.jobs[JOB].step_seconds = _worse(prometheus.jobs[JOB])  # type: ignore[method-assign]
    fake = cluster((QUARANTINE_TAINT, "gpu-fault", "NoSchedule"))
    prometheus.now = 6 * 60
    watcher = make_watcher(
        prometheus,
        settings(prometheus.url, quarantine=True, quarantine_after=3, max_quarantined=2),
        apis=fake.apis(),
    )
    runs = [watcher.run_once(), *advance(prometheus, watcher, 1)]
    assert all(not r.outcomes for r in runs)
    assert not fake.node_patches  # flagged in 2 runs: not yet
    third = advance(prometheus, watcher, 1)[0]
    assert [(o.node, o.action) for o in third.outcomes] == [
        (SLOWER, "quarantined"),
        (SLOW, "refused"),
    ]
    quarantined = next(n for n in fake.nodes if n.name == SLOWER)
    assert quarantined.cordoned and (QUARANTINE_TAINT, "slow", "NoSchedule") in quarantined.taints
    assert (
        "flagged in 3 runs in a row (job foundation/llama-70b)"
        in quarantined.annotations["llm-platform/quarantine-reason"]
    )
    assert fake.evictions == [("foundation", f"{JOB}-worker-3")]
    assert not next(n for n in fake.nodes if n.name == SLOW).cordoned
    assert value(watcher, "llmp_straggler_quarantine_actions_total", action="quarantined") == 1
    assert value(watcher, "llmp_straggler_quarantine_actions_total", action="refused") == 1
    # Later runs: the quarantined node is left alone, the refusal is not counted again.
    advance(prometheus, watcher, 3)
    assert [name for name, _ in fake.node_patches] == [SLOWER]
    assert value(watcher, "llmp_straggler_quarantine_actions_total", action="refused") == 1
    lines = [r.getMessage() for r in caplog.records if "quarantine:" in r.getMessage()]
    assert len(lines) == 2 and all("\n" not in ln for ln in lines)
    assert "refused" in lines[1] and "2 may carry the taint" in lines[1]


def _worse(job: SimJob) -> Any:
    base = job.step_seconds

    def step_seconds(rank: int, node: str, t: float) -> float:
        return base(rank, node, t) * (1.2 if node == SLOWER else 1.0)

    return step_seconds


def test_no_quarantine_without_n_runs_in_a_row(prometheus: SimPrometheus) -> None:
    prometheus.jobs[JOB] = SimJob(NODES, slow={SLOW: (0, float("inf"))})
    fake = cluster()
    prometheus.now = 6 * 60
    watcher = make_watcher(
        prometheus, settings(prometheus.url, quarantine=True, quarantine_after=3), apis=fake.apis()
    )
    advance(prometheus, watcher, 2)
    prometheus.fail = 503  # an unobserved run breaks the streak
    advance(prometheus, watcher, 1)
    prometheus.fail = None
    advance(prometheus, watcher, 2)
    assert not fake.node_patches
    advance(prometheus, watcher, 1)
    assert [name for name, _ in fake.node_patches] == [SLOW]


def test_a_cluster_that_refuses_the_watcher_is_counted_not_fatal(
    prometheus: SimPrometheus,
) -> None:
    from tests.llmp.kube_fake import api_error

    prometheus.jobs[JOB] = SimJob(NODES, slow={SLOW: (0, float("inf"))})
    fake = cluster()
    fake.fail["list_node"] = api_error(403, "Forbidden", 'nodes is forbidden: User "x"')
    prometheus.now = 6 * 60
    watcher = make_watcher(
        prometheus, settings(prometheus.url, quarantine=True, quarantine_after=1), apis=fake.apis()
    )
    summary = watcher.run_once()
    [(kind, line)] = summary.errors
    assert kind == "quarantine" and "refused to list nodes: 403 Forbidden" in line
    assert value(watcher, "llmp_straggler_errors_total", kind="quarantine") == 1
    assert node_series(watcher, "llmp_straggler_node_flagged")[(JOB, SLOW)] == 1


# --- what a tenant's series cannot do ------------------------------------------------------------


def test_a_job_of_the_same_name_in_another_namespace_is_judged_apart(
    prometheus: SimPrometheus,
) -> None:
    # tenant-b runs a job of the same name, one of its nodes slow; foundation's is healthy.
    prometheus.jobs[JOB] = SimJob(NODES)
    other_nodes = [f"ip-10-0-9-{n}.ec2.internal" for n in (1, 2, 3)]
    prometheus.jobs["b"] = SimJob(
        other_nodes, namespace="tenant-b", name=JOB, slow={other_nodes[0]: (0, float("inf"))}
    )
    prometheus.now = 6 * 60
    watcher = make_watcher(prometheus, settings(prometheus.url, top=0))
    summary = watcher.run_once()
    assert summary.jobs == [f"{NS}/{JOB}", f"tenant-b/{JOB}"]
    assert node_series(watcher, "llmp_straggler_node_flagged") == {}
    assert node_series(watcher, "llmp_straggler_node_flagged", "tenant-b") == {
        (JOB, other_nodes[0]): 1
    }
    # Each job's step times were asked for by namespace and name, quoted.
    ranges = [q for q in prometheus.queries if q.startswith("llmp_train_step_seconds")]
    assert set(ranges) == {
        selector("llmp_train_step_seconds", {"namespace": ns, "job": JOB})
        for ns in (NS, "tenant-b")
    }


def test_series_of_another_namespace_in_an_answer_are_not_counted(
    prometheus: SimPrometheus,
) -> None:
    # A Prometheus (or a proxy) that ignores the matchers answers tenant-b's slow series too:
    # the watcher counts only the series of the job it asked for.
    prometheus.jobs[JOB] = SimJob(NODES)
    prometheus.jobs["b"] = SimJob(
        NODES, namespace="tenant-b", name=JOB, slow={SLOW: (0, float("inf"))}, end=0
    )
    prometheus.leak = True
    prometheus.now = 6 * 60
    watcher = make_watcher(prometheus, settings(prometheus.url, top=0))
    summary = watcher.run_once()
    assert summary.jobs == [f"{NS}/{JOB}"] and not summary.errors
    assert node_series(watcher, "llmp_straggler_node_flagged") == {}
    assert value(watcher, "llmp_straggler_job_slowdown_ratio", **J) < 1.05  # type: ignore[operator]


def test_a_hostile_job_name_is_one_quoted_value(prometheus: SimPrometheus) -> None:
    name = 'x"} or vector(1) or llmp_train_step_seconds{job="y'
    prometheus.jobs["x"] = SimJob(NODES, name=name, slow={SLOW: (0, float("inf"))})
    prometheus.now = 6 * 60
    watcher = make_watcher(prometheus, settings(prometheus.url, top=0))
    watcher.run_once()
    assert selector("llmp_train_step_seconds", {"namespace": NS, "job": name}) in (
        prometheus.queries
    )
    assert node_series(watcher, "llmp_straggler_node_flagged") == {(name, SLOW): 1}


@pytest.mark.parametrize("poison", ["NaN", "-3", "+Inf", "fast", None])
def test_impossible_step_times_skip_the_job_logged_never_quarantined(
    prometheus: SimPrometheus, caplog: pytest.LogCaptureFixture, poison: str | None
) -> None:
    # The slow node's first rank answers an impossible value: nothing is judged on it, so
    # nothing is flagged or quarantined, however many runs (quarantine after 1).
    job = SimJob(NODES, slow={SLOW: (0, float("inf"))})
    job.poison = {4: poison}  # type: ignore[dict-item]
    prometheus.jobs[JOB] = job
    fake = cluster()
    prometheus.now = 6 * 60
    watcher = make_watcher(
        prometheus, settings(prometheus.url, quarantine=True, quarantine_after=1), apis=fake.apis()
    )
    runs = advance(prometheus, watcher, 3)
    assert all([k for k, _ in r.errors] == ["input"] for r in runs), runs[0].errors
    [(_, line)] = runs[0].errors
    assert line.startswith(f"job {NS}/{JOB}: ") and line.endswith("; not judged")
    assert "\n" not in line
    assert not fake.node_patches and not fake.evictions
    assert node_series(watcher, "llmp_straggler_node_flagged") == {}
    assert value(watcher, "llmp_straggler_errors_total", kind="input") == 3
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 3 and all("\n" not in e for e in errors)


def test_a_node_the_job_has_no_pod_on_is_not_quarantined(
    prometheus: SimPrometheus, caplog: pytest.LogCaptureFixture
) -> None:
    # Rank 0 names the node each rank runs on: a job's series blaming a node where it runs
    # nothing (another tenant's pods are there) take nothing out; logged and counted once.
    prometheus.jobs[JOB] = SimJob(NODES, slow={SLOW: (0, float("inf"))})
    fake = cluster()
    fake.pods = [
        p if p.spec.node_name != SLOW else node_pod("tenant-b", "theirs-0", SLOW, p.metadata.labels)
        for p in fake.pods
    ]
    prometheus.now = 6 * 60
    watcher = make_watcher(
        prometheus, settings(prometheus.url, quarantine=True, quarantine_after=1), apis=fake.apis()
    )
    first, *later = [watcher.run_once(), *advance(prometheus, watcher, 2)]
    [(kind, line)] = first.errors
    assert kind == "input" and line == (
        f"node {SLOW}: flagged by job {NS}/{JOB}, which runs no pod there; not quarantined"
    )
    assert all(not r.errors and not r.outcomes for r in later)
    assert not fake.node_patches and not fake.evictions
    # Still published: the finding is the job's to see; only the action needs the proof.
    assert node_series(watcher, "llmp_straggler_node_flagged")[(JOB, SLOW)] == 1
    # A pod of the job lands there: the next run acts (each run asks again).
    fake.pods.append(node_pod(NS, f"{JOB}-worker-9", SLOW, {**TRAINING, TRAINING_JOB_LABEL: JOB}))
    [run] = advance(prometheus, watcher, 1)
    assert [(o.node, o.action) for o in run.outcomes] == [(SLOW, "quarantined")]


# --- the command -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prometheus", "prometheus:9090"], "an http:// or https:// URL"),
        (["--prometheus", "http://p", "--window", "6 minutes"], "--window 6 minutes: a duration"),
        (["--prometheus", "http://p", "--persist", "0"], "--persist 0.0: in (0, 1]"),
        (["--prometheus", "http://p", "--max-quarantined", "0"], "--max-quarantined 0: at least 1"),
        (["--window", "6m"], "the following arguments are required: --prometheus"),
        (
            ["--prometheus", "http://p", "--quarantine"],
            "no in-cluster Kubernetes API",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    try:
        code = watch.main(args)
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_once_prints_the_metrics_of_one_run(
    prometheus: SimPrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    prometheus.jobs[JOB] = SimJob(NODES, slow={SLOW: (0, float("inf"))})
    prometheus.now = 6 * 60
    assert watch.main(["--prometheus", prometheus.url, "--once"]) == 0
    out = capsys.readouterr().out
    finding = f'node="{SLOW}",training_job="{JOB}",training_namespace="{NS}"'
    assert f"llmp_straggler_node_flagged{{{finding}}} 1.0" in out
