"""Alert and recording rules, with thresholds from the stack's `monitoring.alerts` config.

One source for two outputs: PrometheusRule objects per stack (components/monitoring.py) and
the committed rule files `monitoring/rules/<group>.yaml` (with the default thresholds), which
`promtool check rules` and `promtool test rules` exercise. Annotations are plain text (no
templates): the labels of an alert carry the GPU, node, pod or job it is about.

Choices:
- FSx for Lustre is watched through its own CloudWatch metrics, which the Prometheus
  CloudWatch exporter (components/monitoring.py, stacks with `storage.lustre` only) turns into
  `aws_fsx_*` series: the FSx CSI driver does not implement NodeGetVolumeStats, so kubelet
  publishes no `kubelet_volume_stats_*` for FSx claims. The storage group exists only for a
  stack with a file system; it needs the file system's capacity (free bytes are what
  CloudWatch reports). `AgeOfOldestQueuedMessage`'s unit is not stated where we could read it;
  third-party plots show seconds, so its threshold is in seconds.
- XIDs alert per class of the catalog's `gpu_xids` (what the XID needs: a new node, a GPU
  reset, a job restart, nothing), on dcgm-exporter's `DCGM_EXP_XID_ERRORS_COUNT`: the count of
  each XID (label `xid`) within the exporter's window (`--xid-count-window-size`, 5 minutes by
  default), so an alert fires for a new XID and resolves once the window has passed.
  `DCGM_FI_DEV_XID_ERRORS` holds the last XID forever and would page on an old one. A code in
  no class fires the unclassified warning.
- A training GPU is idle when DCGM's utilisation of a GPU held by a Running pod labelled
  `llm-platform/job-kind: training` (kube-state-metrics `kube_pod_labels`, allow-listed)
  stays under the threshold.
- Inference errors are the API server's 5xx share of `http_requests_total`; burn-rate
  alerts follow the SRE workbook (14.4x over 1h and 5m, 6x over 6h and 30m).
- Slow nodes come from the straggler watcher (workloads/diagnosis/watch.py, stacks with
  `monitoring.stragglers.enabled`), which runs the `llmp stragglers` analysis every minute and
  publishes the nodes it flags. Its group is the one place annotations use templates: the
  alert is about one node of one job, and its runbook is the command to run for that job.
  The watcher's own silence alerts too (absent, or a last run older than five intervals).
- Labels a tenant cannot forge: no monitor of tenant pods honours the exposition's labels, so
  `namespace` is always Kubernetes'; a training job's series are matched on (namespace, job),
  never on `job` alone (two namespaces may run jobs of one name), and the watcher's series on
  its own target (`namespace="monitoring"`, `job="llmp-straggler-watch"`), where only the
  watcher publishes: the job it judges is in `training_namespace` and `training_job`.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from monitoring.charts import NAMESPACE as MONITORING_NAMESPACE
from monitoring.charts import STRAGGLER_WATCH
from monitoring.models import Metadata, PrometheusRule, Rule, RuleGroup, RuleSpec
from spec.catalog import GpuXids, catalog
from spec.labels import QUARANTINE_TAINT
from spec.monitoring import AlertThresholds, StragglerWatchConfig
from spec.promql import matchers
from spec.storage import LustreConfig

RULES_DIR = Path(__file__).with_name("rules")
ERROR_RATIO_WINDOWS = ("5m", "30m", "1h", "6h")
"""Windows of the recorded 5xx ratio: the long and short window of each burn-rate alert."""
FAST_BURN = 14.4
"""Error budget burn factor of the fast alert, over 1h and 5m (SRE workbook)."""
SLOW_BURN = 6.0
"""Error budget burn factor of the slow alert, over 6h and 30m (SRE workbook)."""


XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
"""dcgm-exporter's count of each XID (label `xid`) within its window; 0 without `xid` when none."""
FSX_FREE_BYTES = "aws_fsx_free_data_storage_capacity_minimum"
"""CloudWatch AWS/FSx FreeDataStorageCapacity (bytes, Minimum), as the exporter names it."""
FSX_EXPORT_AGE = "aws_fsx_age_of_oldest_queued_message_maximum"
"""CloudWatch AWS/FSx AgeOfOldestQueuedMessage (Maximum), label `publisher` (AutoExport)."""
DEFAULT_FSX_CAPACITY_GIB: int = LustreConfig.model_fields["storage_capacity_gib"].default
"""The capacity the committed storage rules are written for (`storage.lustre`'s default)."""
GIB = 1024**3


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
    labels: dict[str, str] | None = None,
) -> Rule:
    return Rule(
        alert=name,
        expr=expr,
        **{"for": for_},
        labels={"severity": severity, **(labels or {})},
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
            *xid_rules(),
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


def xid_matcher(codes: list[int]) -> str:
    """A fully anchored PromQL regex of XID codes: `13|31` matches neither 131 nor 3."""
    return "|".join(str(code) for code in sorted(codes))


def xid_rules(xids: GpuXids | None = None) -> list[Rule]:
    """One alert per XID class of the catalog, plus one for a code no class lists.

    Each fires while the exporter's window holds a new XID of the class on a GPU (labels
    `xid`, `gpu`, `Hostname`, and the GPU pod's `namespace`/`pod`), and resolves once the
    window has passed: an old XID does not keep paging.
    """
    table = xids or catalog().gpu_xids
    if table is None:
        raise ValueError("the catalog has no gpu_xids table")
    out = [
        _alert(
            cls.alert,
            f'{XID_COUNT}{{xid=~"{xid_matcher(list(cls.codes))}"}} > 0',
            "0s",
            cls.severity,
            cls.summary,
            cls.runbook,
            labels={"xid_class": name},
        )
        for name, cls in table.classes.items()
    ]
    other = table.unclassified
    out.append(
        _alert(
            other.alert,
            # The exporter's no-XID sample has no `xid` label (and the value 0).
            f'{XID_COUNT}{{xid!="",xid!~"{xid_matcher(table.classified)}"}} > 0',
            "0s",
            other.severity,
            other.summary,
            other.runbook,
            labels={"xid_class": "unclassified"},
        )
    )
    return out


def fsx_free_bytes_threshold(t: AlertThresholds, capacity_gib: int) -> int:
    """Free bytes under which the file system counts as full: (1 - fsx_used_ratio) x capacity."""
    return round((1 - t.fsx_used_ratio) * capacity_gib * GIB)


def storage_rules(t: AlertThresholds, capacity_gib: int = DEFAULT_FSX_CAPACITY_GIB) -> RuleGroup:
    """FSx for Lustre from its CloudWatch metrics: fullness, the auto-export backlog (the
    disaster-recovery RPO assumes it stays short) and the metrics' own absence."""
    free = fsx_free_bytes_threshold(t, capacity_gib)
    percent = f"{(1 - t.fsx_used_ratio) * 100:g}%"
    minutes = f"{t.fsx_export_age_seconds / 60:g}"
    return RuleGroup(
        name="storage",
        rules=[
            _alert(
                "FsxFileSystemAlmostFull",
                f"{FSX_FREE_BYTES} < {free}",
                "5m",
                "warning",
                f"The FSx for Lustre file system has under {percent} of its "
                f"{capacity_gib} GiB free.",
                "Delete old checkpoints from /checkpoints (auto-export has copied them to S3) "
                "or grow storage.lustre.storage_capacity_gib (1200 GiB or a multiple of 2400).",
            ),
            _alert(
                "FsxAutoExportBacklog",
                f'{FSX_EXPORT_AGE}{{publisher="AutoExport"}} > {t.fsx_export_age_seconds}',
                "5m",
                "warning",
                f"Files on FSx have waited over {minutes} minutes for auto-export to S3: "
                "a disaster now loses more than the recovery plan assumes.",
                "Read the file system's log group /aws/fsx/<cluster>-lustre for failed exports "
                "(S3ExportAccessDenied, the key policy); otherwise checkpoints are written "
                "faster than FSx exports them: checkpoint less often or raise throughput.",
            ),
            _alert(
                "FsxMetricsMissing",
                f"absent({FSX_FREE_BYTES})",
                "15m",
                "warning",
                "No FSx metrics reach Prometheus: the FSx alerts cannot fire.",
                "Check the prometheus-cloudwatch-exporter pod in monitoring (logs, "
                "cloudwatch_exporter_scrape_error) and its Pod Identity role's CloudWatch "
                "permissions; silence here is not health.",
            ),
        ],
    )


TFLOPS_PER_GPU = "llmp_train_tflops_per_gpu"
"""Achieved model TFLOPS per GPU of a training job's last step (both trainers)."""
MFU = "llmp_train_mfu"
"""Model FLOPs utilisation of a pretraining job's last step (both trainers)."""
LOSS = "llmp_train_loss"
STEP = "llmp_train_step"
"""The last optimizer step of a training job: what the loss's fall is counted per."""
LOSS_SMOOTHING = "5m"
"""The loss at each end of `loss_window` is its mean over this long: one step's loss is one
batch's, noisier than the fall asked for."""
TRAINING_RUNNING = (
    'kube_pod_labels{label_llm_platform_job_kind="training"} and on (namespace, pod) '
    '(kube_pod_status_phase{phase="Running"} == 1)'
)


def node_rules() -> RuleGroup:
    """A node out of service: Alertmanager mutes that node's other alerts while it fires."""
    return RuleGroup(
        name="nodes",
        rules=[
            _alert(
                "NodeQuarantined",
                f'max by (node) (kube_node_spec_taint{{key="{QUARANTINE_TAINT}"}}) > 0',
                "0s",
                "warning",
                "A node is quarantined (GPU fault or persistently slow): its other alerts are "
                "muted.",
                "`kubectl describe node`: the taint's value says who (gpu-fault: NVSentinel, "
                "slow: the straggler watcher); EKS auto-repair replaces a faulty node, "
                "`kubectl uncordon` and removing the taint return a repaired one.",
            )
        ],
    )


def loss_not_falling(t: AlertThresholds) -> str:
    """True for a job whose loss fell by less than `min_loss_drop_per_step` times the steps it
    took over `loss_window` (each end smoothed over LOSS_SMOOTHING). By (namespace, job): the
    series of a job restarted on other pods (new `pod`, `instance`) still compare."""
    w, s = t.loss_window, LOSS_SMOOTHING

    def job(expr: str) -> str:
        return f"max by (namespace, job) ({expr})"

    fell = f"{job(f'avg_over_time({LOSS}[{s}] offset {w})')} - {job(f'avg_over_time({LOSS}[{s}])')}"
    steps = f"{job(STEP)} - {job(f'{STEP} offset {w}')}"
    return f"({fell}) < {_num(t.min_loss_drop_per_step)} * ({steps})"


def training_performance_rules(t: AlertThresholds) -> list[Rule]:
    """The seed's targets as alerts: TFLOPS per GPU, GPU utilisation of training pods, MFU
    against the stack's target, and a loss that falls as fast as the stack asks."""
    util = _num(t.min_gpu_utilization * 100)
    return [
        _alert(
            "TrainingMfuLow",
            f"{MFU} < {_num(t.min_mfu)}",
            t.training_performance_for,
            "warning",
            f"A pretraining job's model FLOPs utilisation is under {_num(t.min_mfu)}.",
            "Compare llmp_train_phase_seconds (data_wait, collective, checkpoint) with compute; "
            "then the parallel layout (TP within a node, the pipeline bubble), the micro-batch "
            "size, bf16 and compile in the job file.",
        ),
        _alert(
            "TrainingLossNotFalling",
            loss_not_falling(t),
            t.training_performance_for,
            "warning",
            f"A training job's loss fell by under {_num(t.min_loss_drop_per_step)} per step "
            f"over {t.loss_window}.",
            "Look at llmp_train_grad_norm (spikes, or zero: frozen weights) and the learning "
            "rate; a plateau late in a run is normal: set monitoring.alerts."
            "min_loss_drop_per_step from the run's own curve.",
        ),
        _alert(
            "TrainingTflopsLow",
            f"{TFLOPS_PER_GPU} < {_num(t.min_tflops_per_gpu)}",
            t.training_performance_for,
            "warning",
            f"A training job achieves under {_num(t.min_tflops_per_gpu)} TFLOPS per GPU.",
            "Compare llmp_train_phase_seconds: data_wait (loader, FSx), collective (EFA, "
            "NCCL fell back to sockets), checkpoint stalls; then the MFU against the "
            "model's parallel layout.",
        ),
        _alert(
            "TrainingGpuUtilizationLow",
            f"avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL) < {util} "
            f"and on (namespace, pod) ({TRAINING_RUNNING})",
            t.training_performance_for,
            "warning",
            f"A training pod's GPUs average under {util}% utilisation.",
            "Look at the job's step phases (data_wait, collective, checkpoint) and its "
            "node's GPU clocks; a hung rank shows as GpuIdleOnTrainingPod.",
        ),
    ]


def training_rules(t: AlertThresholds) -> RuleGroup:
    keep = 1 - t.throughput_drop_ratio
    step = "avg_over_time(llmp_train_step_seconds[5m])"
    return RuleGroup(
        name="training",
        rules=[
            *training_performance_rules(t),
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
                # By (namespace, job): a job's name is unique in its namespace only.
                f"{step} > on (namespace, job) group_left() "
                f"({_num(t.straggler_ratio)} * quantile by (namespace, job) (0.5, {step}))",
                "10m",
                "warning",
                "A rank's step time stays above its job's median (straggler).",
                "Inspect the rank's node (GPU clocks, XID, EFA errors); cordon it and let "
                "the elastic job resume without it.",
            ),
        ],
    )


STRAGGLER_WATCH_TARGET = matchers({"namespace": MONITORING_NAMESPACE, "job": STRAGGLER_WATCH})
"""The watcher's own series: its target's labels, which no tenant pod's series can carry."""
STRAGGLER_JOB = ("training_namespace", "training_job")
"""The labels of the watcher's findings naming the training job they judge."""
STRAGGLER_LAST_RUN = "llmp_straggler_last_run_timestamp_seconds"
STRAGGLER_STALE_RUNS = 5
"""The watcher is down once its last run is this many intervals old."""
PROMETHEUS_PORT_FORWARD = (
    "kubectl -n monitoring port-forward svc/kube-prometheus-stack-prometheus 9090"
)


def straggler_rules(w: StragglerWatchConfig) -> RuleGroup:
    """The straggler watcher's findings and its own health."""
    stale = STRAGGLER_STALE_RUNS * w.interval_seconds
    watcher = f"{{{STRAGGLER_WATCH_TARGET}}}"
    last_run = f"{STRAGGLER_LAST_RUN}{watcher}"
    return RuleGroup(
        name="stragglers",
        rules=[
            _alert(
                "LlmpSlowNode",
                # The ratio is the value: the annotation quotes it.
                f"llmp_straggler_node_ratio{watcher} and on ({', '.join(STRAGGLER_JOB)}, node) "
                f"(llmp_straggler_node_flagged{watcher} == 1)",
                # No wait of its own: the watcher flags a node only once it was slow in
                # `persist` of a window's steps, so a `for` would only delay the page
                # (docs/measurements.md: the slow node's page within five minutes).
                "0s",
                "warning",
                "Node {{ $labels.node }} slows training job {{ $labels.training_namespace }}/"
                "{{ $labels.training_job }}: "
                '{{ $value | printf "%.2f" }}x the other nodes\' median step time.',
                f"`{PROMETHEUS_PORT_FORWARD}`, then `llmp stragglers --prometheus "
                "http://localhost:9090 --namespace {{ $labels.training_namespace }} --job "
                "{{ $labels.training_job }} --range 30m`; check the node's "
                "GPU clocks, XIDs and EFA errors, and take it out with `--quarantine "
                "--kubeconfig kubeconfig` if it stays slow.",
            ),
            _alert(
                "LlmpStragglerWatchDown",
                f"absent({last_run}) or time() - {last_run} > {stale}",
                "10m",
                "warning",
                "The straggler watcher has not run: slow nodes go unnoticed.",
                "`kubectl -n monitoring logs deploy/llmp-straggler-watch` and its pod's events "
                "(image pull, crash loop); silence here is not health.",
            ),
            _alert(
                "LlmpStragglerWatchFailing",
                f"sum(rate(llmp_straggler_errors_total{watcher}[15m])) * {w.interval_seconds} "
                "> 0.5",
                "5m",
                "warning",
                "Most runs of the straggler watcher fail (Prometheus, the step times, or the "
                "cluster refusing a quarantine).",
                "`kubectl -n monitoring logs deploy/llmp-straggler-watch`: each failure is one "
                "line naming its kind (llmp_straggler_errors_total{kind}).",
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


DEFAULT_WATCH = StragglerWatchConfig()
"""The watcher settings the committed straggler rules are written for (the defaults)."""


def rule_files(
    t: AlertThresholds,
    fsx_capacity_gib: int | None = DEFAULT_FSX_CAPACITY_GIB,
    stragglers: StragglerWatchConfig | None = DEFAULT_WATCH,
) -> dict[str, list[RuleGroup]]:
    """File stem -> the rule groups it holds; no `storage` without a file system (None), no
    `stragglers` without the watcher (None)."""
    files = {"gpu": [gpu_rules(t)], "nodes": [node_rules()]}
    if fsx_capacity_gib is not None:
        files["storage"] = [storage_rules(t, fsx_capacity_gib)]
    files["training"] = [training_rules(t)]
    files["inference"] = inference_rules(t)
    if stragglers is not None:
        files["stragglers"] = [straggler_rules(stragglers)]
    return files


def alerts(
    t: AlertThresholds,
    fsx_capacity_gib: int | None = DEFAULT_FSX_CAPACITY_GIB,
    stragglers: StragglerWatchConfig | None = DEFAULT_WATCH,
) -> dict[str, Rule]:
    return {
        r.alert: r
        for groups in rule_files(t, fsx_capacity_gib, stragglers).values()
        for g in groups
        for r in g.rules
        if r.alert
    }


def file_text(groups: list[RuleGroup]) -> str:
    data = {"groups": [g.dump() for g in groups]}
    return yaml.safe_dump(data, sort_keys=False, width=1000)


def rule_name(stem: str) -> str:
    """The PrometheusRule holding the groups of `monitoring/rules/<stem>.yaml`."""
    return f"llmp-{stem}"


def prometheus_rules(
    t: AlertThresholds,
    namespace: str,
    fsx_capacity_gib: int | None = None,
    stragglers: StragglerWatchConfig | None = None,
) -> list[PrometheusRule]:
    """The stack's PrometheusRules; the storage ones only with the file system's capacity,
    the straggler ones only with the watcher's settings (a stack that runs it)."""
    return [
        PrometheusRule(
            metadata=Metadata(
                name=rule_name(stem),
                namespace=namespace,
                labels={"app.kubernetes.io/part-of": "llm-platform"},
            ),
            spec=RuleSpec(groups=groups),
        )
        for stem, groups in rule_files(t, fsx_capacity_gib, stragglers).items()
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
