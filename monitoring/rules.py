"""Alert and recording rules, with thresholds from the stack's `monitoring.alerts` config.

One source for two outputs: PrometheusRule objects per stack (components/monitoring.py) and
the committed rule files `monitoring/rules/<group>.yaml` (with the default thresholds), which
`promtool check rules` and `promtool test rules` exercise. Annotations are plain text (no
templates): the labels of an alert carry the GPU, node, pod or job it is about.

Choices:
- FSx fullness uses the kubelet's volume stats of the `fsx-lustre` claims
  (`kubelet_volume_stats_*`); no CloudWatch exporter (YACE) is installed.
- A training GPU is idle when DCGM's utilisation of a GPU held by a Running pod labelled
  `llm-platform/job-kind: training` (kube-state-metrics `kube_pod_labels`, allow-listed)
  stays under the threshold.
- Inference errors are the API server's 5xx share of `http_requests_total`; burn-rate
  alerts follow the SRE workbook (14.4x over 1h and 5m, 6x over 6h and 30m).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from infra.config import AlertThresholds
from monitoring.models import Metadata, PrometheusRule, Rule, RuleGroup, RuleSpec

RULES_DIR = Path(__file__).with_name("rules")
ERROR_RATIO_WINDOWS = ("5m", "30m", "1h", "6h")
"""Windows of the recorded 5xx ratio: the long and short window of each burn-rate alert."""
FAST_BURN = 14.4
"""Error budget burn factor of the fast alert, over 1h and 5m (SRE workbook)."""
SLOW_BURN = 6.0
"""Error budget burn factor of the slow alert, over 6h and 30m (SRE workbook)."""


def error_ratio(window: str) -> str:
    """The series of the inference 5xx ratio over `window` (a recording rule)."""
    return f"llmp:vllm_error_ratio:rate{window}"


def _alert(
    name: str,
    expr: str,
    for_: str,
    severity: str,
    summary: str,
    runbook: str,
) -> Rule:
    return Rule(
        alert=name,
        expr=expr,
        **{"for": for_},
        labels={"severity": severity},
        annotations={"summary": summary, "runbook": runbook},
    )


def _num(value: float) -> str:
    return f"{value:g}"


def gpu_rules(t: AlertThresholds) -> RuleGroup:
    training_running = (
        'kube_pod_labels{label_llm_platform_job_kind="training"} and on (namespace, pod) '
        '(kube_pod_status_phase{phase="Running"} == 1)'
    )
    return RuleGroup(
        name="gpu",
        rules=[
            _alert(
                "GpuIdleOnTrainingPod",
                f"(DCGM_FI_DEV_GPU_UTIL < {_num(t.gpu_idle_util_percent)}) "
                f"and on (namespace, pod) ({training_running})",
                f"{t.gpu_idle_seconds}s",
                "warning",
                "A GPU of a running training pod is idle.",
                "Check the job's logs for a hang (NCCL timeout, data loader stall); "
                "restart from the last checkpoint if stuck.",
            ),
            _alert(
                "GpuXidError",
                "DCGM_FI_DEV_XID_ERRORS > 0",
                "0s",
                "critical",
                "A GPU reported an XID error.",
                "Look up the XID code (value) in NVIDIA's XID table; cordon the node if it "
                "is 48, 63, 64, 74, 79 or 94-95 and let node auto-repair replace it.",
            ),
            _alert(
                "GpuEccDoubleBitError",
                "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0",
                "0s",
                "critical",
                "A GPU had an uncorrectable (double-bit) ECC error.",
                "Cordon and drain the node; the GPU needs a reset or replacement.",
            ),
            _alert(
                "GpuNvlinkErrors",
                "increase(DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL[5m]) "
                f"> {_num(t.nvlink_errors)}",
                "0s",
                "warning",
                "NVLink replay errors on a GPU.",
                "Check nvidia-smi nvlink -e on the node; drain it if errors keep rising.",
            ),
            _alert(
                "GpuTemperatureCritical",
                f"DCGM_FI_DEV_GPU_TEMP > {_num(t.gpu_temp_critical_c)}",
                "1m",
                "critical",
                "A GPU is too hot.",
                "Check the node's cooling and power cap; drain the node if it stays hot.",
            ),
            _alert(
                "GpuTemperatureHigh",
                f"DCGM_FI_DEV_GPU_TEMP > {_num(t.gpu_temp_warning_c)}",
                "5m",
                "warning",
                "A GPU runs hot.",
                "Watch for throttling (SM clock drop); open an AWS case if it persists.",
            ),
        ],
    )


def storage_rules(t: AlertThresholds) -> RuleGroup:
    claim = '{persistentvolumeclaim="fsx-lustre"}'
    return RuleGroup(
        name="storage",
        rules=[
            _alert(
                "FsxVolumeAlmostFull",
                f"kubelet_volume_stats_used_bytes{claim} / "
                f"kubelet_volume_stats_capacity_bytes{claim} > {_num(t.fsx_used_ratio)}",
                "5m",
                "warning",
                "The FSx for Lustre file system is almost full.",
                "Delete old checkpoints (they are exported to S3) or grow storage_capacity_gib.",
            ),
        ],
    )


def training_rules(t: AlertThresholds) -> RuleGroup:
    keep = 1 - t.throughput_drop_ratio
    step = "avg_over_time(llmp_train_step_seconds[5m])"
    return RuleGroup(
        name="training",
        rules=[
            _alert(
                "CheckpointStale",
                "time() - llmp_checkpoint_last_success_timestamp_seconds "
                f"> {2 * t.checkpoint_interval_seconds}",
                "0s",
                "warning",
                "A training job has not checkpointed for twice its interval.",
                "Check the checkpoint writer's logs and FSx/S3 health; a crash now loses "
                "more work than planned.",
            ),
            _alert(
                "TrainingThroughputDrop",
                f"llmp_train_tokens_per_second < {_num(keep)} * "
                "quantile_over_time(0.5, llmp_train_tokens_per_second[1h])",
                "10m",
                "warning",
                "A training job runs well below its recent median throughput.",
                "Look for a straggler rank, a throttled GPU or a slow data loader.",
            ),
            _alert(
                "TrainingStragglerRank",
                f"{step} > on (job) group_left() "
                f"({_num(t.straggler_ratio)} * quantile by (job) (0.5, {step}))",
                "10m",
                "warning",
                "A rank's step time stays above its job's median (straggler).",
                "Inspect the rank's node (GPU clocks, XID, EFA errors); cordon it and let "
                "the elastic job resume without it.",
            ),
        ],
    )


def inference_rules(t: AlertThresholds) -> list[RuleGroup]:
    budget = 1 - t.inference_availability
    errors = 'http_requests_total{status="5xx"}'
    total = "http_requests_total"
    recording = [
        Rule(
            record=error_ratio(w),
            expr=f"sum by (namespace) (rate({errors}[{w}])) / "
            f"sum by (namespace) (rate({total}[{w}]))",
        )
        for w in ERROR_RATIO_WINDOWS
    ]
    alerts = [
        _alert(
            "InferenceLatencyP99High",
            "histogram_quantile(0.99, sum by (namespace, le) "
            "(rate(vllm:e2e_request_latency_seconds_bucket[5m]))) "
            f"> {_num(t.inference_p99_seconds)}",
            "5m",
            "warning",
            "Inference p99 latency is above the SLO.",
            "Check vllm:num_requests_waiting and KV cache use; scale the model's replicas.",
        ),
        _alert(
            "InferenceErrorBudgetFastBurn",
            f"{error_ratio('1h')} > {_num(FAST_BURN * budget)} and "
            f"{error_ratio('5m')} > {_num(FAST_BURN * budget)}",
            "2m",
            "critical",
            "Inference burns its error budget 14x too fast.",
            "Look at the 5xx responses and the model server's logs; roll back a new revision.",
        ),
        _alert(
            "InferenceErrorBudgetSlowBurn",
            f"{error_ratio('6h')} > {_num(SLOW_BURN * budget)} and "
            f"{error_ratio('30m')} > {_num(SLOW_BURN * budget)}",
            "15m",
            "warning",
            "Inference burns its error budget 6x too fast.",
            "Find the failing requests (5xx by model) before the monthly budget is gone.",
        ),
    ]
    return [
        RuleGroup(name="inference-recording", rules=recording),
        RuleGroup(name="inference", rules=alerts),
    ]


def rule_files(t: AlertThresholds) -> dict[str, list[RuleGroup]]:
    """File stem -> the rule groups it holds."""
    return {
        "gpu": [gpu_rules(t)],
        "storage": [storage_rules(t)],
        "training": [training_rules(t)],
        "inference": inference_rules(t),
    }


def alerts(t: AlertThresholds) -> dict[str, Rule]:
    return {
        r.alert: r for groups in rule_files(t).values() for g in groups for r in g.rules if r.alert
    }


def file_text(groups: list[RuleGroup]) -> str:
    data = {"groups": [g.dump() for g in groups]}
    return yaml.safe_dump(data, sort_keys=False, width=1000)


def prometheus_rules(t: AlertThresholds, namespace: str) -> list[PrometheusRule]:
    return [
        PrometheusRule(
            metadata=Metadata(
                name=f"llmp-{stem}",
                namespace=namespace,
                labels={"app.kubernetes.io/part-of": "llm-platform"},
            ),
            spec=RuleSpec(groups=groups),
        )
        for stem, groups in rule_files(t).items()
    ]


def write(directory: Path = RULES_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for stem, groups in rule_files(AlertThresholds()).items():
        path = directory / f"{stem}.yaml"
        path.write_text(file_text(groups))
        out.append(path)
    return out


def expressions(groups: list[RuleGroup]) -> list[str]:
    return [r.expr for g in groups for r in g.rules]
