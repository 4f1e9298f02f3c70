"""Grafana dashboards as code: plain dicts (schemaVersion 39), committed as
`monitoring/dashboards/<uid>.json` by `python -m monitoring`.

Three dashboards, each with a Prometheus data source variable (`datasource`) that every panel
and query uses:

- **llmp-cluster-gpus**: GPU utilisation, temperature, power, memory and SM clock per node
  (DCGM's `Hostname`), new XIDs by class (the catalog's `gpu_xids`) and the last XID per GPU,
  the ECC/NVLink error counters, NVLink/PCIe bandwidth, EFA traffic
  and errors (node exporter `infiniband`), the ENA allowance counters (node exporter
  `ethtool`) and the node count per pool (kube-state-metrics `kube_node_labels`, with the
  `llm-platform/pool` label allow-listed).
- **llmp-training-job**: templated on `namespace` and `job` (the labels of the `llmp_*`
  metrics: Kubernetes' namespace of the pod, and the PyTorchJob's name from the training
  operator's pod label; a job's name is unique in its namespace only): tokens/s, step time
  per rank with the job's median, the straggler ratio (slowest rank over median), the age
  of the last checkpoint, TFLOPS per GPU and MFU against the alert rules' targets, the
  loss, its fall per step (what the loss alert compares), the gradient norm, where a step's
  time goes (`llmp_train_phase_seconds`: data wait, compute, collective, optimizer,
  checkpoint; the median rank stacked, and the slowest rank in each), the last
  checkpoint's stall and background write seconds, and the GPU utilisation of the job's
  pods (the operator names them `<job>-worker-<i>`).
- **llmp-inference-slo**: templated on vLLM's `model_name`: request rate, p50/p99 end-to-end
  latency and time to first token, queue depth, KV cache use, and the 5xx error ratio with its
  burn rate against the availability SLO (the recording rules of `monitoring.rules`).

Only metrics of `monitoring.inventory` are read; tests check that and parse every expression
with promtool.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from monitoring.rules import (
    ERROR_RATIO_WINDOWS,
    FAST_BURN,
    LOSS_SMOOTHING,
    SLOW_BURN,
    XID_COUNT,
    error_ratio,
    xid_matcher,
)
from spec.catalog import catalog
from spec.monitoring import AlertThresholds

DASHBOARDS_DIR = Path(__file__).with_name("dashboards")
SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"
TAGS = ["llm-platform"]

Panel = dict[str, Any]


def _target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref}


def _targets(queries: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [_target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(queries)]


def _by(label: str, aggregation: str, expr: str, suffix: str = "") -> tuple[str, str]:
    """`aggregation by (label) (expr)` with the legend `{{label}}`: one series per value of the
    grouping label, named by it, so the query and its legend cannot name different labels."""
    legend = f"{{{{{label}}}}} {suffix}" if suffix else f"{{{{{label}}}}}"
    return f"{aggregation} by ({label}) ({expr})", legend


def timeseries(
    title: str,
    queries: list[tuple[str, str]],
    unit: str = "short",
    description: str = "",
    stack: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
    target: float | None = None,
) -> Panel:
    """`target`: a dashed line at that value (a threshold of the alert rules), red below it."""
    defaults: dict[str, Any] = {
        "unit": unit,
        "custom": {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 10 if stack else 0,
            "showPoints": "never",
            "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        },
    }
    if target is not None:
        defaults["custom"]["thresholdsStyle"] = {"mode": "dashed"}
        defaults["thresholds"] = {
            "mode": "absolute",
            "steps": [{"color": "red", "value": None}, {"color": "green", "value": target}],
        }
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": _targets(queries),
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {"displayMode": "table", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }


def stat(
    title: str,
    queries: list[tuple[str, str]],
    unit: str = "short",
    description: str = "",
    thresholds: list[tuple[float | None, str]] | None = None,
) -> Panel:
    steps = [{"color": color, "value": value} for value, color in (thresholds or [(None, "green")])]
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": _targets(queries),
        "fieldConfig": {
            "defaults": {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps}},
            "overrides": [],
        },
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "textMode": "auto",
        },
    }


def _xid_class_queries() -> list[tuple[str, str]]:
    """One query per XID class of the catalog, and one for codes no class lists."""
    table = catalog().gpu_xids
    assert table is not None
    queries: list[tuple[str, str]] = [
        (f'sum({XID_COUNT}{{xid=~"{xid_matcher(list(cls.codes))}"}}) or vector(0)', name)
        for name, cls in table.classes.items()
    ]
    unclassified = f'{XID_COUNT}{{xid!="",xid!~"{xid_matcher(table.classified)}"}}'
    queries.append((f"sum({unclassified}) or vector(0)", "unclassified"))
    return queries


def _layout(rows: list[tuple[str, list[Panel]]], width: int = 8, height: int = 8) -> list[Panel]:
    """Rows of panels, `24 // width` panels a line; ids and gridPos in order."""
    panels: list[Panel] = []
    y = 0
    for title, row_panels in rows:
        panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "panels": [],
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            }
        )
        y += 1
        per_line = 24 // width
        for i, panel in enumerate(row_panels):
            x = (i % per_line) * width
            if i and i % per_line == 0:
                y += height
            panel["gridPos"] = {"h": height, "w": width, "x": x, "y": y}
            panels.append(panel)
        y += height
    for i, panel in enumerate(panels, start=1):
        panel["id"] = i
    return panels


def _datasource_variable() -> dict[str, Any]:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "regex": "",
        "hide": 0,
        "refresh": 1,
        "current": {},
        "options": [],
    }


def _query_variable(
    name: str, label: str, metric: str, label_name: str, multi: bool = False
) -> dict[str, Any]:
    query = f"label_values({metric}, {label_name})"
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-variable"},
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "multi": multi,
        "includeAll": multi,
        "hide": 0,
        "regex": "",
        "current": {},
        "options": [],
    }


def _dashboard(
    uid: str,
    title: str,
    description: str,
    rows: list[tuple[str, list[Panel]]],
    variables: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": TAGS,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "timezone": "utc",
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [_datasource_variable(), *(variables or [])]},
        "panels": _layout(rows),
    }


# --- the dashboards ---------------------------------------------------------------------


def cluster_gpus() -> dict[str, Any]:
    node = "Hostname"
    nvlink_errors = [
        ("REPLAY", "replay"),
        ("RECOVERY", "recovery"),
        ("CRC_FLIT", "CRC flit"),
        ("CRC_DATA", "CRC data"),
    ]
    gpus = [
        timeseries(
            "GPU utilisation per node (mean of its GPUs)",
            [_by(node, "avg", "DCGM_FI_DEV_GPU_UTIL")],
            unit="percent",
            minimum=0,
            maximum=100,
        ),
        timeseries(
            "GPU temperature per node (hottest GPU)",
            [_by(node, "max", "DCGM_FI_DEV_GPU_TEMP")],
            unit="celsius",
        ),
        timeseries(
            "GPU power per node",
            [_by(node, "sum", "DCGM_FI_DEV_POWER_USAGE")],
            unit="watt",
        ),
        timeseries(
            "GPU memory used per node",
            [
                (
                    f"sum by ({node}) (DCGM_FI_DEV_FB_USED) / "
                    f"(sum by ({node}) (DCGM_FI_DEV_FB_USED) "
                    f"+ sum by ({node}) (DCGM_FI_DEV_FB_FREE))",
                    "{{Hostname}}",
                )
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
        ),
        timeseries(
            "GPU memory free per node",
            [_by(node, "sum", "DCGM_FI_DEV_FB_FREE")],
            unit="mbytes",
        ),
        timeseries(
            "SM clock per node (slowest GPU)",
            [_by(node, "min", "DCGM_FI_DEV_SM_CLOCK")],
            unit="rotmhz",
            description="A drop at full load means thermal or power throttling.",
        ),
    ]
    errors = [
        stat(
            "GPUs with a new XID",
            [
                (
                    f'count(sum by (Hostname, gpu) ({XID_COUNT}{{xid!=""}}) > 0) or vector(0)',
                    "GPUs",
                )
            ],
            thresholds=[(None, "green"), (1, "red")],
            description="GPUs with an XID in dcgm-exporter's window (5 minutes by default), "
            "informational ones included.",
        ),
        timeseries(
            "New XIDs by class",
            _xid_class_queries(),
            description="XIDs in dcgm-exporter's window, by what they need (infra/catalog.yaml "
            "gpu_xids); each class has its alert.",
        ),
        timeseries(
            "Last XID code per GPU",
            [("DCGM_FI_DEV_XID_ERRORS > 0", "{{Hostname}} GPU {{gpu}}")],
            description="The last XID a GPU reported since its driver loaded: it stays after "
            "the fault; new ones are counted above.",
        ),
        timeseries(
            "ECC errors per node",
            [
                _by(node, "sum", f"increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[{RATE}])", "double-bit"),
                _by(node, "sum", f"increase(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL[{RATE}])", "single-bit"),
            ],
            description="Any double-bit error: drain the node.",
        ),
        *(
            timeseries(
                f"NVLink {text} errors per GPU",
                [
                    (
                        f"sum by (Hostname, gpu) "
                        f"(increase(DCGM_FI_DEV_NVLINK_{field}_ERROR_COUNT_TOTAL[{RATE}])) > 0",
                        "{{Hostname}} GPU {{gpu}}",
                    )
                ],
            )
            for field, text in nvlink_errors
        ),
    ]
    fabric = [
        timeseries(
            "NVLink bandwidth per node",
            [_by(node, "sum", f"rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL[{RATE}])")],
            description="Rate of DCGM's NVLink bandwidth counter, all links of all GPUs.",
        ),
        timeseries(
            "PCIe bandwidth per node",
            [
                _by(node, "sum", "DCGM_FI_PROF_PCIE_TX_BYTES", "tx"),
                _by(node, "sum", "DCGM_FI_PROF_PCIE_RX_BYTES", "rx"),
            ],
            unit="Bps",
        ),
        timeseries(
            "EFA traffic per node",
            [
                _by(
                    "instance",
                    "sum",
                    f"rate(node_infiniband_port_data_received_bytes_total[{RATE}])",
                    "rx",
                ),
                _by(
                    "instance",
                    "sum",
                    f"rate(node_infiniband_port_data_transmitted_bytes_total[{RATE}])",
                    "tx",
                ),
            ],
            unit="Bps",
        ),
        timeseries(
            "EFA receive errors per device",
            [
                (
                    "sum by (instance, device) "
                    f"(increase(node_infiniband_port_errors_received_total[{RATE}])) > 0",
                    "{{instance}} {{device}}",
                )
            ],
        ),
        timeseries(
            "ENA allowance exceeded (packets queued or dropped)",
            [
                (
                    "sum by (instance, device) "
                    f"(increase(node_ethtool_{name}_allowance_exceeded[{RATE}])) > 0",
                    f"{{{{instance}}}} {{{{device}}}} {text}",
                )
                for name, text in (("bw_in", "bw in"), ("bw_out", "bw out"), ("pps", "pps"))
            ],
            description="ENA shaping by the instance's allowances (node exporter ethtool).",
        ),
    ]
    nodes = [
        timeseries(
            "Nodes per pool",
            [_by("label_llm_platform_pool", "count", "kube_node_labels")],
            stack=True,
            description="Needs kube-state-metrics to allow-list the llm-platform/pool node label.",
        ),
        stat(
            "GPU nodes reporting",
            [("count(count by (Hostname) (DCGM_FI_DEV_GPU_UTIL))", "nodes")],
        ),
        stat(
            "GPUs reporting",
            [("count(DCGM_FI_DEV_GPU_UTIL)", "GPUs")],
        ),
    ]
    return _dashboard(
        "llmp-cluster-gpus",
        "LLM platform / Cluster GPUs and fabric",
        "GPU health and load per node, NVLink, PCIe, EFA and ENA, and nodes per pool.",
        [("GPUs", gpus), ("GPU errors", errors), ("Fabric", fabric), ("Nodes", nodes)],
    )


def training_job() -> dict[str, Any]:
    job = 'namespace="$namespace",job="$job"'
    step = f"llmp_train_step_seconds{{{job}}}"
    median = f"quantile by (namespace, job) (0.5, {step})"
    pods = 'namespace="$namespace",pod=~"$job-worker-.*"'
    checkpoint_age = f"time() - llmp_checkpoint_last_success_timestamp_seconds{{{job}}}"
    phase = f"llmp_train_phase_seconds{{{job}}}"
    throughput = [
        timeseries(
            "Tokens per second",
            [(f"llmp_train_tokens_per_second{{{job}}}", "{{job}}")],
            description="Of the last step, at its slowest rank.",
        ),
        stat(
            "Last checkpoint age",
            [(checkpoint_age, "age")],
            unit="s",
            thresholds=[(None, "green"), (3600, "orange"), (7200, "red")],
        ),
        stat(
            "Straggler ratio (slowest rank / median)",
            [(f"max by (namespace, job) ({step}) / {median}", "ratio")],
            unit="none",
            thresholds=[(None, "green"), (AlertThresholds().straggler_ratio, "red")],
        ),
    ]
    steps_ = [
        timeseries(
            "Step time per rank and the median",
            [(step, "rank {{rank}} ({{node}})"), (median, "median")],
            unit="s",
        ),
        timeseries(
            "Straggler ratio per rank",
            [
                (
                    f"{step} / on (namespace, job) group_left() {median}",
                    "rank {{rank}} ({{node}})",
                )
            ],
            unit="none",
        ),
        timeseries(
            "Checkpoint age",
            [(checkpoint_age, "age")],
            unit="s",
        ),
    ]
    phases = [
        timeseries(
            "Step time by phase, median rank",
            [_by("phase", "quantile", f"0.5, {phase}")],
            unit="s",
            stack=True,
            description="Each phase's median over the ranks, stacked: about the median step "
            "time. The step-time exchange, where a rank waits for the slowest, is in no phase.",
        ),
        timeseries(
            "Slowest rank in each phase",
            [_by("phase", "max", phase)],
            unit="s",
            description="A phase far above its median line: one rank's data, compute, "
            "collective or optimizer is slow (`llmp stragglers` names it and the cause).",
        ),
        timeseries(
            "Checkpoint stall and write",
            [
                (f"llmp_checkpoint_stall_seconds{{{job}}}", "stall (training waited)"),
                (f"llmp_checkpoint_write_seconds{{{job}}}", "write (in the background)"),
            ],
            unit="s",
            description="Of the last published checkpoint. Stall: what the training loop "
            "waited for it (the save call, the snapshot's copy if still running at the next "
            "optimizer step, the agreement that every rank's shards are durable). Write: from "
            "the save to the slowest rank's last shard on disk.",
        ),
    ]
    t = AlertThresholds()
    window, smooth = t.loss_window, LOSS_SMOOTHING
    loss = f"llmp_train_loss{{{job}}}"
    steps = f"llmp_train_step{{{job}}}"
    efficiency = [
        timeseries(
            "TFLOPS per GPU",
            [(f"llmp_train_tflops_per_gpu{{{job}}}", "{{job}}")],
            description="Model TFLOPS per GPU of the last step, at its slowest rank "
            "(6N + attention FLOPs per token, PaLM's count); the dashed line is "
            "monitoring.alerts.min_tflops_per_gpu's default (TrainingTflopsLow).",
            target=t.min_tflops_per_gpu,
        ),
        timeseries(
            "MFU",
            [(f"llmp_train_mfu{{{job}}}", "{{job}}")],
            unit="percentunit",
            minimum=0,
            description="TFLOPS per GPU over the GPU's dense BF16 peak (the catalog's), "
            "pretraining only; the dashed line is min_mfu's default (TrainingMfuLow).",
            target=t.min_mfu,
        ),
        timeseries(
            "Loss",
            [(loss, "{{job}}")],
            description="Mean loss over the ranks of the last step.",
        ),
        timeseries(
            f"Loss fall per step over {window}",
            [
                (
                    f"(avg_over_time({loss}[{smooth}] offset {window}) - "
                    f"avg_over_time({loss}[{smooth}])) / ({steps} - {steps} offset {window})",
                    "{{job}}",
                )
            ],
            description="What TrainingLossNotFalling compares with min_loss_drop_per_step "
            "(the dashed line, its default): the loss's fall over the window per step taken.",
            target=t.min_loss_drop_per_step,
        ),
        timeseries(
            "Gradient norm",
            [(f"llmp_train_grad_norm{{{job}}}", "{{job}}")],
            description="Global norm before clipping: spikes precede loss spikes; a norm near "
            "0 means nothing trains.",
        ),
        stat("Step", [(steps, "step")], description="The last optimizer step."),
    ]
    gpus = [
        timeseries(
            "GPU utilisation of the job's pods",
            [_by("pod", "avg", f"DCGM_FI_DEV_GPU_UTIL{{{pods}}}")],
            unit="percent",
            minimum=0,
            maximum=100,
        ),
        timeseries(
            "Least busy GPU per pod",
            [_by("pod", "min", f"DCGM_FI_DEV_GPU_UTIL{{{pods}}}")],
            unit="percent",
            minimum=0,
            maximum=100,
        ),
        timeseries(
            "GPU memory used per pod",
            [_by("pod", "sum", f"DCGM_FI_DEV_FB_USED{{{pods}}}")],
            unit="mbytes",
        ),
    ]
    return _dashboard(
        "llmp-training-job",
        "LLM platform / Training job",
        "One training job: throughput, TFLOPS per GPU, MFU, loss, step times per rank, "
        "stragglers, step phases, checkpoints, GPUs.",
        [
            ("Throughput and checkpoints", throughput),
            ("Efficiency and loss", efficiency),
            ("Steps", steps_),
            ("Step phases and checkpoint stall", phases),
            ("GPUs", gpus),
        ],
        [
            _query_variable("namespace", "Namespace", "llmp_train_tokens_per_second", "namespace"),
            _query_variable(
                "job", "Job", 'llmp_train_tokens_per_second{namespace="$namespace"}', "job"
            ),
        ],
    )


def inference_slo() -> dict[str, Any]:
    t = AlertThresholds()
    budget = 1 - t.inference_availability
    model = 'model_name=~"$model"'

    def quantile(q: float, metric: str) -> str:
        return (
            f"histogram_quantile({q}, sum by (model_name, le) (rate({metric}{{{model}}}[{RATE}])))"
        )

    e2e = "vllm:e2e_request_latency_seconds_bucket"
    ttft = "vllm:time_to_first_token_seconds_bucket"
    traffic = [
        timeseries(
            "Requests per second per model",
            [_by("model_name", "sum", f"rate(vllm:request_success_total{{{model}}}[{RATE}])")],
            unit="reqps",
        ),
        timeseries(
            "Queue depth (waiting requests)",
            [_by("model_name", "sum", f"vllm:num_requests_waiting{{{model}}}")],
        ),
        timeseries(
            "Running requests",
            [_by("model_name", "sum", f"vllm:num_requests_running{{{model}}}")],
        ),
    ]
    latency = [
        timeseries(
            "End-to-end latency p50 / p99",
            [
                (quantile(0.5, e2e), "{{model_name}} p50"),
                (quantile(0.99, e2e), "{{model_name}} p99"),
            ],
            unit="s",
            description=f"The p99 SLO is {t.inference_p99_seconds:g} s.",
        ),
        timeseries(
            "Time to first token p50 / p99",
            [
                (quantile(0.5, ttft), "{{model_name}} p50"),
                (quantile(0.99, ttft), "{{model_name}} p99"),
            ],
            unit="s",
        ),
        timeseries(
            "KV cache use",
            [_by("model_name", "max", f"vllm:kv_cache_usage_perc{{{model}}}")],
            unit="percentunit",
            minimum=0,
            maximum=1,
            description="Near 1, requests queue or get preempted.",
        ),
    ]
    errors = [
        timeseries(
            "Error ratio (5xx share)",
            [(error_ratio(w), f"{{{{namespace}}}} {w}") for w in ("5m", "1h", "6h")],
            unit="percentunit",
        ),
        timeseries(
            "Error budget burn rate",
            [
                (f"{error_ratio(w)} / {budget:g}", f"{{{{namespace}}}} {w}")
                for w in ERROR_RATIO_WINDOWS
            ],
            unit="none",
            description="1 spends the budget in exactly the SLO window; the fast-burn alert "
            f"fires at {FAST_BURN:g} (1h and 5m), the slow one at {SLOW_BURN:g} (6h and 30m).",
        ),
        stat(
            "Availability (last 1h)",
            [(f"1 - max({error_ratio('1h')})", "availability")],
            unit="percentunit",
            thresholds=[(None, "red"), (t.inference_availability, "green")],
        ),
    ]
    return _dashboard(
        "llmp-inference-slo",
        "LLM platform / Inference SLO",
        "vLLM per model: traffic, latency, time to first token, queue, KV cache, error budget.",
        [("Traffic", traffic), ("Latency", latency), ("Errors and error budget", errors)],
        [_query_variable("model", "Model", "vllm:num_requests_running", "model_name", True)],
    )


def dashboards() -> dict[str, dict[str, Any]]:
    """uid -> dashboard."""
    return {d["uid"]: d for d in (cluster_gpus(), training_job(), inference_slo())}


def file_text(dashboard: dict[str, Any]) -> str:
    return json.dumps(dashboard, indent=2) + "\n"


def expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard's panels."""
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def write(directory: Path = DASHBOARDS_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for uid, dashboard in dashboards().items():
        path = directory / f"{uid}.json"
        path.write_text(file_text(dashboard))
        out.append(path)
    return out
