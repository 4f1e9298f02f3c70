"""Saved CloudWatch Logs Insights queries on the container log group (components/monitoring.py).

Fluent Bit (aws-for-fluent-bit, its Kubernetes filter on) ships each container line as a
JSON record: the line in `log`, the pod in `kubernetes.namespace_name`,
`kubernetes.pod_name`, `kubernetes.container_name` and `kubernetes.host` (the node). A JSON
line (the trainer's events, an access log in JSON) is parsed by Insights itself, so its
fields are queryable by name.
"""

from __future__ import annotations

from dataclasses import dataclass

POD = "kubernetes.namespace_name, kubernetes.pod_name"


@dataclass(frozen=True)
class LogQuery:
    key: str
    """Resource name part (`<component>-query-<key>`)."""
    title: str
    """The saved query's name after `llm-platform/<stack>/` (Insights folders by `/`)."""
    text: str


def queries(slow_request_seconds: float) -> list[LogQuery]:
    slow_ms = round(slow_request_seconds * 1000)
    return [
        LogQuery(
            "errors-by-pod",
            "errors by pod",
            "fields @timestamp, @message\n"
            "| filter log like /(?i)(error|exception|traceback|fatal)/\n"
            f"| stats count(*) as errors by {POD}\n"
            "| sort errors desc\n"
            "| limit 50",
        ),
        LogQuery(
            "slow-requests",
            "slow requests",
            # The gateway's JSON access log (duration in ms, the model's path).
            "fields @timestamp, kubernetes.pod_name, path, response_code, duration_ms\n"
            f"| filter kubernetes.container_name = 'gateway' and duration_ms > {slow_ms}\n"
            "| sort duration_ms desc\n"
            "| limit 100",
        ),
        LogQuery(
            "oom-kills",
            "OOM kills",
            "fields @timestamp, kubernetes.host, @message\n"
            "| filter log like /(?i)(out of memory|oom-kill|oomkilled|killed process)/\n"
            f"| stats count(*) as kills by kubernetes.host, {POD}\n"
            "| sort kills desc",
        ),
        LogQuery(
            "gpu-xids",
            "GPU XIDs",
            "fields @timestamp, kubernetes.host, log\n"
            "| filter log like /NVRM: Xid/\n"
            "| parse log /Xid \\(PCI:(?<pci>[^)]+)\\): (?<xid>\\d+)/\n"
            "| stats count(*) as events, latest(@timestamp) as last by kubernetes.host, pci, xid\n"
            "| sort last desc",
        ),
        LogQuery(
            "training-steps",
            "training throughput",
            "fields @timestamp, kubernetes.pod_name, step, loss, tokens_per_s, "
            "tflops_per_device, mfu\n"
            "| filter event = 'step'\n"
            "| stats avg(tokens_per_s) as tokens_s, avg(tflops_per_device) as tflops, "
            "avg(mfu) as mfu by bin(5m), kubernetes.pod_name",
        ),
    ]
