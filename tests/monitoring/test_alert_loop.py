"""The alert loops end to end on a real Prometheus and Alertmanager (tests/monitoring/servers.py):
exporters serve the series the cluster's would (dcgm-exporter, kube-state-metrics, the
CloudWatch exporter for FSx, a trainer, vLLM's histograms with its buckets), Prometheus
scrapes them as the platform's monitors do and evaluates the platform's rules (every `for`
scaled from minutes to seconds), Alertmanager routes with the platform's tree and inhibitions,
and a webhook stands in for PagerDuty and Slack: the receiver an alert reaches is the path it
was posted to.

- a fatal XID (79, a node-replacement class, the one NVSentinel quarantines on) pages the team
  whose pod held the GPU, with the node and the XID, and mutes that node's other alerts;
- a node carrying the quarantine taint fires NodeQuarantined, which mutes its GPU's alerts
  (inhibited in Alertmanager, never at the webhook) while another node's page;
- vLLM's TTFT over the SLO target in 40 % of requests burns the budget: the 1h/5m page fires
  for that model and SLI, not for the inter-token latency that is within target;
- FSx almost full and its export backlog, and a checkpoint older than twice its interval,
  reach the channel they are routed to.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from monitoring import alertmanager as am
from spec.labels import QUARANTINE_TAINT
from spec.serving import ITL_BUCKETS, TTFT_BUCKETS
from tests.monitoring import servers

FOR_SCALE = 1 / 60
"""Every `for` of the rules in seconds where the stack has minutes (2m: 2s)."""
PATIENCE_S = 120.0
"""How long a test waits for an alert (the machine is shared: a generous bound, not a figure)."""
XID_NODE = "ip-10-0-1-11.ec2.internal"
QUARANTINED = "ip-10-0-1-12.ec2.internal"
HEALTHY = "ip-10-0-1-13.ec2.internal"
TEAM_NS = "foundation"
TRAINING_JOB = "llama-70b"
ROUTING = am.AlertRouting(
    platform=am.Audience(name="platform", slack_channel="#llm-alerts", pagerduty=True),
    teams=[
        am.Audience(
            name="foundation", slack_channel="#foundation", pagerduty=True, namespaces=[TEAM_NS]
        )
    ],
    info_slack_channel="#llm-info",
    group_wait="1s",
    group_interval="1s",
    repeat_interval="1h",
)


def _gauge(name: str, samples: list[tuple[dict[str, str], float]]) -> str:
    lines = [f"# TYPE {name} gauge"]
    for labels, value in samples:
        text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines.append(f"{name}{{{text}}} {value!r}")
    return "\n".join(lines) + "\n"


def _gpu(node: str, **more: str) -> dict[str, str]:
    return {"gpu": "0", "UUID": f"GPU-{node[:12]}", "Hostname": node, **more}


class VllmTraffic:
    """vLLM's two latency histograms (its names, its buckets, label `model_name`) in a
    registry of their own, fed requests on a thread: `slow_share` of first tokens after 3 s
    (over llama-8b's 2.5 s target), every gap between tokens 40 ms (within 0.1 s)."""

    def __init__(self, model: str, slow_share: float) -> None:
        from prometheus_client import CollectorRegistry, Histogram

        self.registry = CollectorRegistry()
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            ["model_name"],
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ["model_name"],
            buckets=ITL_BUCKETS,
            registry=self.registry,
        )
        self.model, self.slow_share = model, slow_share
        # Zero before the first request, as a server that just started: increase() then
        # counts every request from the first scrape on.
        self.ttft.labels(model)
        self.itl.labels(model)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        rng = random.Random(0)
        while not self.stop.wait(0.02):
            self.ttft.labels(self.model).observe(3.0 if rng.random() < self.slow_share else 0.4)
            for _ in range(8):
                self.itl.labels(self.model).observe(0.04)


@dataclass
class Loop:
    prometheus: servers.Prometheus
    alertmanager: servers.Alertmanager
    webhook: servers.Webhook
    exporters: dict[str, servers.Exporter]


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loop]:
    prometheus_bin, alertmanager_bin, _ = servers.binaries()
    tmp = tmp_path_factory.mktemp("alert-loop")
    with contextlib.ExitStack() as stack:
        yield from _run_loop(stack, prometheus_bin, alertmanager_bin, tmp)


def _run_loop(
    stack: contextlib.ExitStack, prometheus_bin: str, alertmanager_bin: str, tmp: Path
) -> Iterator[Loop]:
    traffic = VllmTraffic("llama-8b", slow_share=0.4)
    stack.callback(traffic.stop.set)
    webhook = servers.Webhook()
    stack.callback(webhook.stop)
    exporters = {
        name: servers.Exporter(tmp / name, registries=[traffic.registry] if name == "vllm" else [])
        for name in ("dcgm", "kube-state-metrics", "cloudwatch", "trainer", "vllm")
    }
    for e in exporters.values():
        stack.callback(e.stop)
    now = time.time()
    # The sources first: the XID, the quarantine taint, FSx, the checkpoint.
    exporters["dcgm"].write(
        "xid",
        _gauge(
            "DCGM_EXP_XID_ERRORS_COUNT",
            [
                (_gpu(XID_NODE, xid="79", namespace=TEAM_NS, pod=f"{TRAINING_JOB}-worker-0"), 1.0),
                (_gpu(HEALTHY), 0.0),  # the exporter's no-XID sample: no `xid` label
            ],
        ),
    )
    exporters["kube-state-metrics"].write(
        "taints",
        _gauge(
            "kube_node_spec_taint",
            [
                (
                    {
                        "node": QUARANTINED,
                        "key": QUARANTINE_TAINT,
                        "value": "slow",
                        "effect": "NoSchedule",
                    },
                    1.0,
                )
            ],
        ),
    )
    exporters["cloudwatch"].write(
        "fsx",
        _gauge(
            "aws_fsx_free_data_storage_capacity_minimum", [({"file_system_id": "fs-0abc"}, 1e10)]
        )
        + _gauge(
            "aws_fsx_age_of_oldest_queued_message_maximum",
            [({"file_system_id": "fs-0abc", "publisher": "AutoExport"}, 3600.0)],
        ),
    )
    exporters["trainer"].write(
        "checkpoint",
        _gauge(
            "llmp_checkpoint_last_success_timestamp_seconds",
            [({"job": "a claim nothing reads"}, now - 7200)],
        ),
    )
    jobs = [
        servers.monitor_job(
            "dcgm-exporter",
            "nvidia-dcgm-exporter",
            exporters["dcgm"].address,
            {"namespace": "gpu-operator"},
        ),
        servers.ScrapeJob(
            job="kube-state-metrics",
            target=exporters["kube-state-metrics"].address,
            labels={"namespace": "monitoring"},
            honor_labels=True,
        ),
        servers.ScrapeJob(
            job="prometheus-cloudwatch-exporter",
            target=exporters["cloudwatch"].address,
            labels={"namespace": "monitoring"},
        ),
        servers.monitor_job(
            "training",
            TRAINING_JOB,
            exporters["trainer"].address,
            {"namespace": TEAM_NS, "pod": f"{TRAINING_JOB}-master-0"},
        ),
        servers.monitor_job(
            "vllm",
            "llama-8b",
            exporters["vllm"].address,
            {"namespace": "serving", "service": "llama-8b", "pod": "llama-8b-0"},
        ),
    ]
    alertmanager = servers.Alertmanager(
        alertmanager_bin, tmp / "am", servers.webhook_config(ROUTING, webhook.url)
    )
    stack.callback(alertmanager.stop)
    prometheus = servers.Prometheus(
        prometheus_bin,
        tmp / "prom",
        jobs=jobs,
        rule_files=servers.platform_rule_files(FOR_SCALE),
        alertmanager=alertmanager.url,
    )
    stack.callback(prometheus.stop)
    for name, node in (("NodeQuarantined", QUARANTINED), ("GpuXidNodeReplacement", XID_NODE)):
        servers.wait_until(
            lambda: alertmanager.alerts(alertname=name, node=node),  # noqa: B023
            PATIENCE_S,
            f"{name} of {node} in Alertmanager",
        )
    # Then every node's GPU runs hot: only the healthy node's may page.
    exporters["dcgm"].write(
        "temperature",
        _gauge("DCGM_FI_DEV_GPU_TEMP", [(_gpu(n), 90.0) for n in (XID_NODE, QUARANTINED, HEALTHY)]),
    )
    yield Loop(prometheus, alertmanager, webhook, exporters)


def _suppressed(loop: Loop, name: str, node: str) -> list[dict[str, Any]]:
    return [
        a
        for a in loop.alertmanager.alerts(alertname=name, node=node)
        if a["status"]["state"] == "suppressed" and a["status"]["inhibitedBy"]
    ]


def test_the_servers_scrape_every_exporter_and_evaluate_every_rule(loop: Loop) -> None:
    servers.wait_until(loop.prometheus.targets_up, PATIENCE_S, "every target up")
    assert loop.prometheus.rule_errors() == []


def test_the_servers_listen_on_loopback_only(loop: Loop) -> None:
    from tests.workloads.training.harness import listening, listening_off_loopback

    for server in (loop.prometheus, loop.alertmanager):
        [pid] = servers.children(server.proc.pid)  # the server, under `timeout`
        assert listening(pid) and not listening_off_loopback(pid), (server.name, listening(pid))


def test_a_fatal_xid_pages_the_gpus_team_with_its_node_and_mutes_the_node(loop: Loop) -> None:
    receiver, labels, _ = loop.webhook.wait_for("GpuXidNodeReplacement", PATIENCE_S, node=XID_NODE)
    assert receiver == "foundation-critical"
    assert labels["xid"] == "79" and labels["xid_class"] == "node_replacement"
    assert labels["namespace"] == TEAM_NS and labels["severity"] == "critical"
    # The node's hot GPU: held back by the XID (a quarantine source), never notified.
    servers.wait_until(
        lambda: _suppressed(loop, "GpuTemperatureCritical", XID_NODE),
        PATIENCE_S,
        "the XID node's temperature alert inhibited",
    )


def test_a_quarantined_nodes_other_alerts_are_muted_and_anothers_page(loop: Loop) -> None:
    receiver, labels, _ = loop.webhook.wait_for("NodeQuarantined", PATIENCE_S, node=QUARANTINED)
    assert receiver == "platform-warning" and labels["severity"] == "warning"
    receiver, _, _ = loop.webhook.wait_for("GpuTemperatureCritical", PATIENCE_S, node=HEALTHY)
    assert receiver == "platform-critical"
    [muted] = servers.wait_until(
        lambda: _suppressed(loop, "GpuTemperatureCritical", QUARANTINED),
        PATIENCE_S,
        "the quarantined node's temperature alert inhibited",
    )
    assert muted["labels"]["node"] == QUARANTINED
    # Its warning twin fires later (for 5m, scaled): by then it is muted as well.
    servers.wait_until(
        lambda: _suppressed(loop, "GpuTemperatureHigh", QUARANTINED),
        PATIENCE_S,
        "the quarantined node's warning inhibited",
    )
    notified = {
        (labels["alertname"], labels.get("node")) for _, labels, _ in loop.webhook.received()
    }
    for node in (QUARANTINED, XID_NODE):
        assert ("GpuTemperatureCritical", node) not in notified
        assert ("GpuTemperatureHigh", node) not in notified


def test_a_latency_burn_of_vllms_histograms_pages_its_model_and_sli(loop: Loop) -> None:
    receiver, labels, _ = loop.webhook.wait_for(
        "ServingLatencyBudgetBurn1h", PATIENCE_S, model_name="llama-8b", sli="ttft"
    )
    assert receiver == "platform-critical" and labels["severity"] == "critical"
    ratio = loop.prometheus.value(
        'llmp:vllm_slo_errors:ratio_rate5m{model_name="llama-8b",sli="ttft"}'
    )
    assert ratio is not None and 0.25 < ratio < 0.55  # 40 % of first tokens after 3 s
    assert loop.prometheus.value(
        'llmp:vllm_slo_errors:ratio_rate5m{model_name="llama-8b",sli="itl"}'
    ) == pytest.approx(0.0, abs=1e-9)
    # A model without traffic has no ratio (no 0/0) and stays quiet; so does the ITL SLI.
    assert loop.prometheus.query('llmp:vllm_slo_errors:ratio_rate5m{model_name="llama-70b"}') == []
    burns = {
        (labels["model_name"], labels["sli"])
        for _, labels in loop.webhook.alerts("ServingLatencyBudgetBurn1h")
    }
    assert burns == {("llama-8b", "ttft")}


def test_fsx_full_and_export_backlog_reach_the_platform_channel(loop: Loop) -> None:
    for name in ("FsxFileSystemAlmostFull", "FsxAutoExportBacklog"):
        receiver, labels, _ = loop.webhook.wait_for(name, PATIENCE_S)
        assert receiver == "platform-warning", (name, labels)
        assert labels["file_system_id"] == "fs-0abc"
    assert not loop.webhook.alerts("FsxMetricsMissing")


def test_a_stale_checkpoint_reaches_the_jobs_team_by_its_namespace(loop: Loop) -> None:
    receiver, labels, _ = loop.webhook.wait_for("CheckpointStale", PATIENCE_S)
    assert receiver == "foundation-warning"
    # `job` is the target's (the JobSet controller's pod label), never what the process said.
    assert labels["namespace"] == TEAM_NS and labels["job"] == TRAINING_JOB
    assert "exported_job" not in labels


def test_what_reached_the_webhook(loop: Loop, capsys: pytest.CaptureFixture[str]) -> None:
    """Every alert the webhook received, with its receiver and labels (printed for the docs)."""
    loop.webhook.wait_for("ServingLatencyBudgetBurn6h", PATIENCE_S, sli="ttft")
    seen = sorted({(r, tuple(sorted(labels.items()))) for r, labels, _ in loop.webhook.received()})
    with capsys.disabled():
        for receiver, labels in seen:
            print(f"{receiver:<20} " + " ".join(f"{k}={v}" for k, v in labels))
    assert all(
        r in {"platform-critical", "platform-warning", "foundation-critical", "foundation-warning"}
        for r, _ in seen
    )


def test_scaled_for_keeps_everything_but_the_wait() -> None:
    groups = [
        {"name": "g", "rules": [{"alert": "A", "expr": "x > 1", "for": "2m", "labels": {}}]},
        {
            "name": "h",
            "rules": [{"alert": "B", "expr": "y", "for": "0s"}, {"record": "r", "expr": "z"}],
        },
    ]
    assert servers.scaled_for(groups, 1 / 60) == [
        {"name": "g", "rules": [{"alert": "A", "expr": "x > 1", "for": "2s", "labels": {}}]},
        {
            "name": "h",
            "rules": [{"alert": "B", "expr": "y", "for": "0s"}, {"record": "r", "expr": "z"}],
        },
    ]
