"""The seeds' check at real time: a slow rank, from injection to a page.

A CPU training run of gloo ranks (workloads/training/train.py, each rank saying it runs on a
node of its own through NODE_NAME) serves its step times and phases on rank 0's `/metrics`;
a real Prometheus scrapes it as the platform's `training` PodMonitor would (the `job` label
the target's, the process' own dropped) and evaluates the platform's rules; the straggler
watcher (workloads/diagnosis/watch.py, its own loop, on a thread) reads that Prometheus and
publishes its findings on its `/metrics`, which Prometheus scrapes as the watcher's target
(`namespace="monitoring"`, `job="llmp-straggler-watch"`); `LlmpSlowNode` fires, Alertmanager
routes it with the platform's tree, and a webhook receives it.

One rank is slowed on purpose once the run is warm: a sleep injected into its step
(train.py's LLMP_INJECT_STEP_DELAY_FILE, which only that rank is given: the test writes the
seconds into the file), after its last in-step collective, so the rank's own step time grows.
Throttling the rank's whole process from the outside (SIGSTOP/SIGCONT, as `cpulimit` does)
was tried first and does not show: the collectives inside the step (ZeRO-1's gradient
reduction and its optimizer's all-gather) make the other ranks wait for it there, so every
rank's `llmp_train_step_seconds` grows alike (the wait lands in their collective and optimizer
phases) and no rank stands out; docs/monitoring.md has the measured phases. The times are
wall-clock: injection, the watcher's first run naming the node (diagnosis), and the webhook's
receipt of the alert.

tests/workloads/diagnosis/test_slow_rank_loop.py runs it with short windows and every `for`
scaled to seconds; bench/slow_rank_loop.py runs it with the stack's own settings and prints
the figures (tests never assert a time).
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitoring import alertmanager as am
from monitoring.charts import NAMESPACE as MONITORING_NAMESPACE
from monitoring.charts import STRAGGLER_WATCH
from tests.monitoring import servers
from tests.workloads.training.harness import Run, job_config, kill_all
from workloads.diagnosis import watch
from workloads.training.data import write_synthetic_shards
from workloads.training.train import INJECT_DELAY_ENV

NAMESPACE = "foundation"
JOB = "llama-cpu"


def node_of(rank: int) -> str:
    return f"ip-10-0-1-{11 + rank}.ec2.internal"


@dataclass(frozen=True, kw_only=True)
class LoopSettings:
    ranks: int = 3
    slow_rank: int = 2
    delay_s: float = 0.06
    """What the slow rank sleeps more in each step once injected (its steps: ~0.14 s)."""
    scrape_interval: str = "1s"
    """Prometheus' scrape and evaluation interval (kube-prometheus-stack's: 30s)."""
    for_scale: float = 1 / 60
    """Each rule's `for`, scaled (1: the platform's own, LlmpSlowNode's 2 minutes)."""
    window: str = "60s"
    resolution: str = "1s"
    interval_s: float = 5.0
    threshold: float = 0.05
    """The watcher's (the stack's: 4m, 15s, 60 s, 0.05)."""
    group_wait: str = "1s"
    """Alertmanager's (the platform's: 30s)."""
    warm_s: float = 60.0
    """Healthy training before the injection: at least one window of it."""
    zero_stage: int = 1
    """ZeRO-1: the collectives (the gradients' reduction, the updated partitions' all-gather)
    are timed as collective and optimizer. Under ZeRO-3 the parameter all-gathers sit inside
    forward and backward (compute), so every rank's compute includes its wait for the
    throttled one, and every rank looks as slow."""
    step_sleep_s: float = 0.1
    """Added to every rank's step: the run uses under a core (the machine is shared)."""
    patience_s: float = 600.0
    """How long to wait for the diagnosis and then the page before giving up."""


class FalseAlarm(AssertionError):
    """The slow node paged before anything slowed it: the run measures nothing."""


@dataclass
class LoopResult:
    injected_at: float
    diagnosed_at: float
    received_at: float
    finding: watch.NodeFinding
    """The watcher's finding of the slow node at its first run that flagged it."""
    flagged: list[str]
    """Every node flagged at that run."""
    receiver: str
    alert: dict[str, str]
    """The labels of LlmpSlowNode as the webhook received it."""
    received: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    """(receiver, labels) of every alert the webhook received in firing state."""
    flagged_before: list[float] = field(default_factory=list)
    """The slow node's ratio at each watcher run that flagged it before the injection
    (false alarms; the diagnosis counts only runs after it)."""

    @property
    def to_diagnosis_s(self) -> float:
        return self.diagnosed_at - self.injected_at

    @property
    def to_receiver_s(self) -> float:
        return self.received_at - self.injected_at


def routing(group_wait: str) -> am.AlertRouting:
    return am.AlertRouting(
        platform=am.Audience(name="platform", slack_channel="#llm-alerts", pagerduty=True),
        teams=[
            am.Audience(
                name="foundation",
                slack_channel="#foundation",
                pagerduty=True,
                namespaces=[NAMESPACE],
            )
        ],
        group_wait=group_wait,
        group_interval=group_wait,
        repeat_interval="1h",
    )


def _first_flag(
    watcher: watch.Watcher, node: str, seen: dict[str, Any], armed: threading.Event
) -> None:
    """Wrap the watcher's runs: once `armed` (the injection), note the time and finding of
    the first run that flags `node`; before it, the ratio of every run that does (a false
    alarm: the host's noise above the threshold)."""
    real = watcher.run_once

    def run_once() -> watch.RunSummary:
        summary = real()
        if "at" not in seen:
            found = watcher.jobs.get((NAMESPACE, JOB))
            flagged = [n for n in (found.nodes if found else ()) if n.flagged]
            mine = [n for n in flagged if n.node == node]
            if mine and armed.is_set():
                seen.update(at=time.time(), finding=mine[0], flagged=[n.node for n in flagged])
            elif mine:
                seen.setdefault("before", []).append(mine[0].ratio)
        return summary

    watcher.run_once = run_once  # type: ignore[method-assign]


def run_loop(tmp: Path, settings: LoopSettings) -> LoopResult:
    """Train, inject, and wait for the diagnosis and the page; everything stopped after."""
    prometheus_bin, alertmanager_bin, _ = servers.binaries()
    with contextlib.ExitStack() as stack:
        return _run(stack, tmp, settings, prometheus_bin, alertmanager_bin)


def _run(
    stack: contextlib.ExitStack,
    tmp: Path,
    settings: LoopSettings,
    prometheus_bin: str,
    alertmanager_bin: str,
) -> LoopResult:
    from prometheus_client import start_http_server

    s = settings
    slow_node = node_of(s.slow_rank)
    webhook = servers.Webhook()
    stack.callback(webhook.stop)
    alertmanager = servers.Alertmanager(
        alertmanager_bin, tmp / "am", servers.webhook_config(routing(s.group_wait), webhook.url)
    )
    stack.callback(alertmanager.stop)

    # The training run: rank 0 serves every rank's step times.
    data = tmp / "tokens"
    write_synthetic_shards(data, n_shards=2, tokens_per_shard=20_000, vocab=256)
    metrics_port = servers.free_port()
    cfg = job_config(
        tmp,
        data,
        max_steps=1_000_000,
        step_sleep_s=s.step_sleep_s,
        zero_stage=s.zero_stage,
        checkpoint={"interval_steps": 1_000_000},
    )
    extra = ["--metrics-port", str(metrics_port), "--metrics-addr", "127.0.0.1"]
    extra += ["--job-name", "a claim nothing reads"]
    inject = tmp / "inject-delay"
    procs: list[subprocess.Popen[bytes]] = []
    stack.callback(kill_all, procs)
    run = Run(
        tmp / "run",
        cfg,
        s.ranks,
        extra,
        procs.append,
        rank_env={r: {"NODE_NAME": node_of(r)} for r in range(s.ranks)}
        | {s.slow_rank: {"NODE_NAME": slow_node, INJECT_DELAY_ENV: str(inject)}},
    )

    # The watcher's /metrics: scraped from its first run on (down until then).
    watcher_target = f"127.0.0.1:{servers.free_port()}"
    jobs = [
        servers.monitor_job(
            "training",
            JOB,
            f"127.0.0.1:{metrics_port}",
            {"namespace": NAMESPACE, "pod": f"{JOB}-master-0"},
        ),
        servers.ScrapeJob(
            job=STRAGGLER_WATCH, target=watcher_target, labels={"namespace": MONITORING_NAMESPACE}
        ),
    ]
    prometheus = servers.Prometheus(
        prometheus_bin,
        tmp / "prom",
        jobs=jobs,
        rule_files=servers.platform_rule_files(s.for_scale),
        alertmanager=alertmanager.url,
        interval=s.scrape_interval,
    )
    stack.callback(prometheus.stop)
    watcher = watch.Watcher(
        watch.WatchSettings(
            prometheus=prometheus.url,
            interval_s=s.interval_s,
            window=s.window,
            resolution=s.resolution,
            threshold=s.threshold,
        )
    )
    port = int(watcher_target.rsplit(":", 1)[1])
    server, server_thread = start_http_server(port, addr="127.0.0.1", registry=watcher.registry)
    stack.callback(server_thread.join, 5)
    stack.callback(server.server_close)
    stack.callback(server.shutdown)
    seen: dict[str, Any] = {}
    stop = threading.Event()
    armed = threading.Event()
    _first_flag(watcher, slow_node, seen, armed)
    loop = threading.Thread(target=watcher.run_forever, args=(stop,), daemon=True)
    loop.start()
    stack.callback(loop.join, 30)
    stack.callback(stop.set)

    run.wait_for(lambda ev: any(e["event"] == "step" for e in ev), 300)
    servers.wait_until(
        lambda: prometheus.query(f'llmp_train_step_seconds{{job="{JOB}"}}'),
        120,
        "the trainer's step times in Prometheus",
    )
    time.sleep(s.warm_s)
    healthy = watcher.jobs.get((NAMESPACE, JOB))
    assert healthy is not None, "the watcher has not judged the job before the injection"
    assert not [n.node for n in healthy.nodes if n.flagged], healthy

    inject.write_text(f"{s.delay_s}\n")
    injected_at = time.time()
    armed.set()

    def diagnosed() -> bool:
        if any(p.poll() is not None for p in procs):
            raise AssertionError(f"a rank exited:\n{run.stderr_tail()}")
        return "at" in seen

    servers.wait_until(diagnosed, s.patience_s, f"the watcher to flag {slow_node}", every=0.1)
    before = seen.get("before", [])
    paged_early = [
        at
        for _, labels, at in webhook.received()
        if labels.get("alertname") == "LlmpSlowNode" and at < injected_at
    ]
    if paged_early:
        # Still firing, so Alertmanager sends nothing new: this run measures nothing.
        raise FalseAlarm(
            f"LlmpSlowNode paged before the injection: the watcher flagged {slow_node} "
            f"{len(before)} times before it (up to {max(before, default=0):.2f}x the "
            f"others' median, threshold {s.threshold:g}): the host's noise is above it"
        )
    receiver, alert, received_at = webhook.wait_for(
        "LlmpSlowNode", s.patience_s, since=injected_at, node=slow_node
    )
    return LoopResult(
        injected_at=injected_at,
        diagnosed_at=seen["at"],
        received_at=received_at,
        finding=seen["finding"],
        flagged=seen["flagged"],
        receiver=receiver,
        alert=alert,
        received=[(r, labels) for r, labels, _ in webhook.received()],
        flagged_before=before,
    )
