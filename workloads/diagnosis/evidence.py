"""Evidence from outside the trace, per node, listed beside the cause the trace points to.

The trace says *that* a node's compute, collective, data wait or checkpoint phase runs
long; exporters can say *why*. The analysis never infers a cause from evidence: it names
the cause from the phases and lists what the exporters saw on the same node next to it,
so the reader can check the story (a node slow in compute whose GPUs report
HW_SLOWDOWN is a node to replace; one slow in compute with clean GPUs may be
imbalanced data).

Two sources, both optional:

- `--evidence FILE`: JSON `{node: {metric: value}}`, any metric. Names below are
  interpreted; others are listed as given, their cause read from the name (DCGM_ ->
  compute, node_infiniband_/node_ethtool_/efa -> communication, fsx/lustre -> I/O).
- with `--prometheus`, instant queries of what the platform's exporters publish per node
  (monitoring/inventory.py): dcgm-exporter's throttle reasons (by `Hostname`), XIDs and
  NVLink replays; node-exporter's EFA receive errors (`infiniband` collector) and ENA
  allowance counters (`ethtool` collector), by `instance`; the counters as their
  increase over the analysed range. FSx for Lustre has no per-client metric in the stack
  (its CloudWatch metrics are per file system), so I/O evidence comes from the file only.

The throttle-reason bitmask (`DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`, renamed
`DCGM_FI_DEV_CLOCKS_EVENT_REASONS` in DCGM 3.2) is NVML's `nvmlClocksThrottleReasons`; a
node's value is the OR over its GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spec.errors import show
from spec.readers import ReadError, key_path, load_json_file, unprintable
from workloads.diagnosis import prometheus
from workloads.diagnosis.trace import BadInput

COMPUTE, COMMUNICATION, IO, CHECKPOINT, OTHER = (
    "compute",
    "communication",
    "io",
    "checkpoint",
    "other",
)

THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
"""NVML's clocks throttle (event) reasons, bit -> name."""

SLOWING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
"""The reasons that lower clocks under load: power cap, HW slowdown, thermal, power brake
(idle, application clocks, sync boost and display clocks are not faults)."""

THROTTLE_METRICS = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")

KNOWN: dict[str, tuple[str, str]] = {
    **{m: (COMPUTE, "GPU clock throttle reasons") for m in THROTTLE_METRICS},
    "DCGM_FI_DEV_XID_ERRORS": (COMPUTE, "last XID error"),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": (COMMUNICATION, "NVLink replays"),
    "node_infiniband_port_errors_received_total": (COMMUNICATION, "EFA receive errors"),
    "node_ethtool_bw_in_allowance_exceeded": (COMMUNICATION, "ENA inbound bandwidth shaped"),
    "node_ethtool_bw_out_allowance_exceeded": (COMMUNICATION, "ENA outbound bandwidth shaped"),
    "node_ethtool_pps_allowance_exceeded": (COMMUNICATION, "ENA packets/s shaped"),
}
"""Metrics interpreted by name: metric -> (the cause it bears on, what it is)."""

# (metric, PromQL with {range}, the label naming the node, how a node's series combine)
QUERIES: tuple[tuple[str, str, str, str], ...] = (
    *((m, m, "Hostname", "or") for m in THROTTLE_METRICS),
    ("DCGM_FI_DEV_XID_ERRORS", "max by (Hostname) (DCGM_FI_DEV_XID_ERRORS)", "Hostname", "max"),
    (
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "sum by (Hostname) (increase(DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL[{range}]))",
        "Hostname",
        "sum",
    ),
    *(
        (m, f"sum by (instance) (increase({m}[{{range}}]))", "instance", "sum")
        for m in (
            "node_infiniband_port_errors_received_total",
            "node_ethtool_bw_in_allowance_exceeded",
            "node_ethtool_bw_out_allowance_exceeded",
            "node_ethtool_pps_allowance_exceeded",
        )
    ),
)


@dataclass(frozen=True)
class Evidence:
    metric: str
    value: float
    cause: str  # the cause it bears on: compute, communication, io, checkpoint, other
    meaning: str  # the value read: "hw_slowdown, sw_thermal_slowdown", "12 EFA receive errors"
    alarming: bool  # a fault sign (a slowing throttle reason, an error count > 0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "value": self.value,
            "cause": self.cause,
            "meaning": self.meaning,
            "alarming": self.alarming,
        }


def cause_of(metric: str) -> str:
    if metric in KNOWN:
        return KNOWN[metric][0]
    low = metric.lower()
    if "nvlink" in low or low.startswith(("node_infiniband_", "node_ethtool_")) or "efa" in low:
        return COMMUNICATION
    if metric.startswith("DCGM_"):
        return COMPUTE
    if "fsx" in low or "lustre" in low:
        return IO
    if "checkpoint" in low:
        return CHECKPOINT
    return OTHER


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def describe(metric: str, value: float) -> Evidence:
    """One metric's value read as evidence."""
    cause = cause_of(metric)
    if metric in THROTTLE_METRICS:
        mask = int(value)
        names = throttle_names(mask)
        meaning = ", ".join(names) if names else "none"
        return Evidence(metric, value, cause, f"throttle: {meaning}", bool(mask & SLOWING))
    if metric == "DCGM_FI_DEV_XID_ERRORS":
        return Evidence(metric, value, cause, f"XID {value:g}" if value else "no XID", value > 0)
    if metric in KNOWN:
        what = KNOWN[metric][1]
        return Evidence(metric, value, cause, f"{value:g} x {what}", value > 0)
    return Evidence(metric, value, cause, f"{metric} = {value:g}", False)


def read_evidence(path: Path) -> dict[str, dict[str, float]]:
    """`--evidence FILE`: {node: {metric: number}}, read as spec.readers reads every file
    (size, depth, number length, duplicate keys); names must be printable text."""
    try:
        body = load_json_file(path)
    except ReadError as e:
        raise BadInput(str(e)) from None
    if not isinstance(body, dict):
        raise BadInput(
            f'{path}: expected {{"node": {{"metric": value}}}}, got a {type(body).__name__}'
        )
    out: dict[str, dict[str, float]] = {}
    for node, metrics in body.items():
        where = key_path([node])
        if (bad := unprintable(node)) is not None:
            raise BadInput(f"{path}: {where}: a node name holds the character {bad}")
        if not isinstance(metrics, dict):
            raise BadInput(f"{path}: {where}: expected {{metric: number}}, got {show(metrics)}")
        for metric, value in metrics.items():
            where = key_path([node, metric])
            if (bad := unprintable(metric)) is not None:
                raise BadInput(f"{path}: {where}: a metric name holds the character {bad}")
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BadInput(f"{path}: {where}: not a number: {show(value)}")
            if not math.isfinite(value):
                raise BadInput(f"{path}: {where}: not a finite number: {show(value)}")
            out.setdefault(str(node), {})[str(metric)] = float(value)
    return out


def node_matcher(names: list[str]) -> dict[str, str]:
    """label value -> trace node: the name, and its first DNS label where that is unique
    (an exporter's `ip-10-0-1-17` is the trace's `ip-10-0-1-17.ec2.internal`)."""
    out = {n: n for n in names}
    short: dict[str, list[str]] = {}
    for n in names:
        short.setdefault(n.split(".")[0], []).append(n)
    for s, full in short.items():
        if len(full) == 1:
            out.setdefault(s, full[0])
    return out


def match(label: str, matcher: dict[str, str]) -> str | None:
    host = label.rsplit(":", 1)[0] if label.count(":") == 1 else label  # instance host:port
    for candidate in (label, host, host.split(".")[0]):
        if candidate in matcher:
            return matcher[candidate]
    return None


def query_evidence(
    url: str, nodes: list[str], range_: str, timeout: float = 30.0
) -> tuple[dict[str, dict[str, float]], list[str]]:
    """Instant queries of QUERIES, joined to the trace's nodes ({node: {metric: value}}),
    and a line for each query that failed: evidence is an aside, its absence no failure."""
    matcher = node_matcher(nodes)
    out: dict[str, dict[str, float]] = {}
    problems: list[str] = []
    for metric, promql, label, combine in QUERIES:
        try:
            data = prometheus.query(url, "query", {"query": promql.format(range=range_)}, timeout)
        except (prometheus.SourceUnavailable, BadInput) as e:
            problems.append(f"evidence {metric}: {e}")
            continue
        for series in data.get("result") or []:
            labels = series.get("metric") or {}
            node = match(str(labels.get(label, "")), matcher)
            try:
                value = float((series.get("value") or [0, "nan"])[1])
            except (TypeError, ValueError):
                continue
            if node is None or not math.isfinite(value):
                continue
            seen = out.setdefault(node, {})
            if metric not in seen:
                seen[metric] = value
            elif combine == "or":
                seen[metric] = float(int(seen[metric]) | int(value))
            elif combine == "max":
                seen[metric] = max(seen[metric], value)
            else:
                seen[metric] += value
    return out, problems
