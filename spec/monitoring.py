"""`monitoring`: metrics, logs, traces and the alert thresholds."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from spec.base import Section, cloudwatch_retention
from spec.errors import FieldError
from spec.images import TrainerImageRef

_DURATION = re.compile(r"^[0-9]+(ms|s|m|h|d|w|y)$")
_SHORT_DURATION = re.compile(r"^([1-9][0-9]*)(s|m|h)$")
_SECONDS = {"s": 1, "m": 60, "h": 3600}


def duration_seconds(text: str) -> int:
    """Seconds of a short Prometheus duration (30s, 6m, 1h); ValueError for anything else."""
    m = _SHORT_DURATION.match(text)
    if not m:
        raise ValueError(text)
    return int(m.group(1)) * _SECONDS[m.group(2)]


class AlertThresholds(Section):
    """Alert thresholds of the PrometheusRules (monitoring/rules.py)."""

    gpu_idle_util_percent: float = Field(
        10, gt=0, le=100, description="GPU utilisation (%) under which a training GPU is idle."
    )
    gpu_idle_seconds: int = Field(60, ge=30, description="How long a training GPU may stay idle.")
    gpu_temp_warning_c: float = Field(80, gt=0, description="GPU temperature warning (5 min).")
    gpu_temp_critical_c: float = Field(85, gt=0, description="GPU temperature critical (1 min).")
    nvlink_errors: float = Field(10, ge=0, description="NVLink replay/recovery/CRC errors per 5m.")
    fsx_used_ratio: float = Field(0.8, gt=0, lt=1, description="FSx volume fullness that alerts.")
    fsx_export_age_seconds: int = Field(
        1800,
        ge=60,
        description=(
            "Age (seconds) of the oldest file queued for auto-export to S3 that alerts: files "
            "not yet in S3 are what a disaster loses (default: 3x the catalog's export lag)."
        ),
    )
    checkpoint_interval_seconds: int = Field(
        1800, ge=60, description="Expected checkpoint interval; alert at twice this age."
    )
    throughput_drop_ratio: float = Field(
        0.2, gt=0, lt=1, description="Tokens/s this far below the job's 1h median alerts."
    )
    straggler_ratio: float = Field(
        1.2, gt=1, description="A rank's step time over this multiple of the job median."
    )
    inference_p99_seconds: float = Field(
        10, gt=0, description="Inference SLO: p99 end-to-end request latency (seconds)."
    )
    inference_availability: float = Field(
        0.999, gt=0, lt=1, description="Inference SLO: share of successful requests."
    )
    min_tflops_per_gpu: float = Field(
        120,
        gt=0,
        description="Training: achieved TFLOPS per GPU under which a job underperforms "
        "(the seed's 120 on H100/H200).",
    )
    min_gpu_utilization: float = Field(
        0.85,
        gt=0,
        le=1,
        description="Training: average GPU utilisation of a job's GPUs (0-1) under which it "
        "underperforms (the seed's 85%).",
    )
    min_mfu: float = Field(
        0.35,
        gt=0,
        le=1,
        description="Training: model FLOPs utilisation (0-1, against the GPU's dense BF16 peak) "
        "under which a pretraining job underperforms; published runs at scale reach 0.36-0.43 "
        "(MT-NLG 530B, Llama 3 405B on 16k H100s).",
    )
    training_performance_for: str = Field(
        "15m",
        description="How long a training job stays under min_tflops_per_gpu, "
        "min_gpu_utilization or min_mfu before it alerts (a Prometheus duration).",
    )
    min_loss_drop_per_step: float = Field(
        0.01,
        ge=0,
        description="Training: the loss must fall by at least this much per optimizer step, "
        "measured over loss_window (the seed's 0.01); a healthy run's loss falls far slower "
        "once past its first steps, so set it from the run's own curve.",
    )
    loss_window: str = Field(
        "30m",
        description="The window over which the loss's fall is compared with "
        "min_loss_drop_per_step times the steps taken in it (a Prometheus duration).",
    )

    @field_validator("training_performance_for", "loss_window")
    @classmethod
    def _for(cls, v: str) -> str:
        try:
            duration_seconds(v)
        except ValueError:
            raise FieldError((), v, "a duration in s, m or h, such as 15m") from None
        return v


SEVERITIES = ("critical", "warning", "info")
"""Alert severities the rules use, most urgent first."""
TEAM_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")
_SLACK_CHANNEL = re.compile(r"^[#@][A-Za-z0-9._-]{1,80}$")


class ReceiverConfig(Section):
    """Where one audience's alerts go. A receiver's secret lives in secret config; it is off
    (its alerts fall through to the platform's) until that secret is set."""

    slack_channel: str | None = Field(
        None,
        description="Slack channel of warnings (critical too without PagerDuty), e.g. "
        "#llm-alerts; the webhook URL is the secret config "
        "`llm-platform-monitoring:slackWebhookUrl` (a team's: `slackWebhookUrl-<team>`).",
    )
    pagerduty: bool = Field(
        False,
        description="Page critical alerts through PagerDuty (Events API v2); the routing key "
        "is the secret config `llm-platform-monitoring:pagerdutyRoutingKey` (a team's: "
        "`pagerdutyRoutingKey-<team>`).",
    )

    @field_validator("slack_channel")
    @classmethod
    def _channel(cls, v: str | None) -> str | None:
        if v is not None and not _SLACK_CHANNEL.match(v):
            raise FieldError((), v, "a Slack channel such as #llm-alerts")
        return v


class TeamReceiverConfig(ReceiverConfig):
    """One team's receivers (`monitoring.alerting.teams.<team>`): its alerts are those with
    `team: <team>` or from its namespaces."""

    namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces whose alerts are the team's (default: the tenant namespace "
        "of the team's name).",
    )

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        for i, ns in enumerate(v):
            if not TEAM_NAME.match(ns):
                raise FieldError((i,), ns, "a namespace name (lower case, digits, -)")
        return v


class AlertingConfig(Section):
    """Alertmanager's routes: critical pages, warnings go to chat and SNS, info nowhere; a
    team's alerts go to its own receivers first. Child alerts of a node that is down,
    cordoned for a GPU fault or being replaced are inhibited."""

    sns: bool = Field(
        True,
        description="SNS topics (KMS-encrypted) per severity, `<stack>-alerts-critical` and "
        "`-warning`, which Alertmanager publishes to; subscribe to them (email, chat, a "
        "pager) outside the stack.",
    )
    platform: ReceiverConfig = Field(
        default_factory=ReceiverConfig,
        description="The platform team's receivers: every alert no team route takes.",
    )
    info_slack_channel: str | None = Field(
        None,
        description="Slack channel of info alerts (the platform webhook); none: info alerts "
        "go nowhere.",
    )
    teams: dict[str, TeamReceiverConfig] = Field(
        default_factory=dict, description="Routes per team, each with its own receivers."
    )
    group_wait: str = Field("30s", description="Alertmanager group_wait.")
    group_interval: str = Field("5m", description="Alertmanager group_interval.")
    repeat_interval: str = Field("4h", description="Alertmanager repeat_interval.")

    @field_validator("teams")
    @classmethod
    def _teams(cls, v: dict[str, TeamReceiverConfig]) -> dict[str, TeamReceiverConfig]:
        for name in v:
            if not TEAM_NAME.match(name) or name == "platform":
                raise FieldError((name,), name, "a team name (lower case, digits, -), not platform")
        return v

    @field_validator("info_slack_channel")
    @classmethod
    def _info_channel(cls, v: str | None) -> str | None:
        return ReceiverConfig._channel(v)

    @field_validator("group_wait", "group_interval", "repeat_interval")
    @classmethod
    def _interval(cls, v: str) -> str:
        if not _DURATION.match(v):
            raise FieldError((), v, "a duration such as 30s, 5m or 4h")
        return v

    def team_namespaces(self, team: str) -> list[str]:
        return list(self.teams[team].namespaces) or [team]


class RequestLogsConfig(Section):
    """The serving ALB's access logs and the WAF's logs in S3 (stacks with `serving`)."""

    enabled: bool = Field(
        True,
        description="ALB access logs into the `logs` bucket (prefix alb/) and WAF logs into "
        "a bucket `aws-waf-logs-<bucket prefix>-serving`.",
    )
    expire_days: int = Field(90, ge=1, le=3650, description="Days the ALB and WAF logs are kept.")


class LogQueriesConfig(Section):
    """Saved CloudWatch Logs Insights queries on the container log group."""

    enabled: bool = Field(
        True,
        description="Errors by pod, slow requests, OOM kills and GPU XIDs as saved queries "
        "(needs `logs`).",
    )
    slow_request_seconds: float = Field(
        10, gt=0, description="A request slower than this is slow (the slow-requests query)."
    )


class StragglerWatchConfig(TrainerImageRef):
    """The straggler watcher (workloads/diagnosis/watch.py): every `interval_seconds` it finds
    the training jobs in Prometheus, runs the `llmp stragglers` analysis on each one's last
    `window`, and exports the slow nodes it finds as metrics (`llmp_straggler_*`) that the
    `LlmpSlowNode` alert reads; optionally it quarantines a node flagged in
    `quarantine_after_runs` runs in a row."""

    enabled: bool = Field(
        False,
        description="Run the watcher (one pod in `monitoring`, the trainer image); needs "
        "`image_tag` (or `image`).",
    )
    interval_seconds: int = Field(60, ge=15, le=3600, description="How often the watcher runs.")
    window: str = Field(
        "4m",
        description="How much recent step time each run analyses (30s, 4m, 1h). A node "
        "turned slow is flagged once it was slow in `persist` of the window's steps: about "
        "persist x window after it turned slow (4m: the page within the seeds' 5 minutes, "
        "docs/measurements.md).",
    )
    resolution: str = Field("15s", description="query_range step of the analysis.")
    threshold: float = Field(
        0.05, ge=0, le=10, description="Slow means above the other ranks' median x (1 + this)."
    )
    persist: float = Field(
        0.5, gt=0, le=1, description="A node is flagged when slow in this share of the steps."
    )
    quarantine: bool = Field(
        False,
        description="Quarantine (cordon, taint llm-platform/quarantined=slow:NoSchedule, evict "
        "its training pods) a node flagged in `quarantine_after_runs` runs in a row; gives the "
        "watcher a ClusterRole on nodes, pods and evictions.",
    )
    quarantine_after_runs: int = Field(
        3, ge=1, le=1000, description="Runs in a row a node must be flagged before quarantine."
    )
    max_quarantined: int = Field(
        2,
        ge=1,
        le=1000,
        description="At most this many nodes carry the quarantine taint, NVSentinel's "
        "included; beyond it a node is refused (and counted).",
    )

    @field_validator("window", "resolution")
    @classmethod
    def _duration(cls, v: str) -> str:
        try:
            duration_seconds(v)
        except ValueError:
            raise FieldError((), v, "a duration in s, m or h, such as 15s or 6m") from None
        return v

    @property
    def window_seconds(self) -> int:
        return duration_seconds(self.window)

    @model_validator(mode="after")
    def _complete(self) -> StragglerWatchConfig:
        if self.enabled:
            self._image_required("when enabled")
        if self.window_seconds < 4 * duration_seconds(self.resolution):
            raise FieldError(
                ("window",), self.window, f"at least 4 x resolution ({self.resolution})"
            )
        return self


OTEL_COLLECTOR_HOST = "opentelemetry-collector.monitoring.svc.cluster.local"
"""The OpenTelemetry collector's Service (release `opentelemetry-collector` in `monitoring`)."""
OTLP_GRPC_PORT = 4317
OTLP_HTTP_PORT = 4318


def collector_otlp_endpoint() -> str:
    """Where an in-cluster process sends OTLP traces over gRPC (vLLM's
    `--otlp-traces-endpoint`; Envoy's OpenTelemetry tracer takes the host and port)."""
    return f"http://{OTEL_COLLECTOR_HOST}:{OTLP_GRPC_PORT}"


class MonitoringConfig(Section):
    """Metrics (kube-prometheus-stack), logs (Fluent Bit to CloudWatch), traces (OTel)."""

    enabled: bool = Field(True, description="Prometheus, Grafana, alert rules and monitors.")
    retention: str = Field("15d", description="Prometheus TSDB retention (a Prometheus duration).")
    storage_gib: int = Field(100, ge=10, le=16384, description="Prometheus gp3 volume size.")
    grafana: bool = Field(True, description="Grafana with the platform dashboards.")
    logs: bool = Field(True, description="Fluent Bit shipping container logs to CloudWatch.")
    log_retention_days: int = Field(30, description="Retention of the container log group.")
    traces: bool = Field(True, description="OpenTelemetry collector for traces.")
    traces_exporter: Literal["xray", "otlp"] = Field("xray", description="Where traces go.")
    otlp_endpoint: str | None = Field(None, description="OTLP endpoint when exporter is otlp.")
    alerts: AlertThresholds = Field(default_factory=AlertThresholds)
    alerting: AlertingConfig = Field(default_factory=AlertingConfig)
    request_logs: RequestLogsConfig = Field(default_factory=RequestLogsConfig)
    log_queries: LogQueriesConfig = Field(default_factory=LogQueriesConfig)
    stragglers: StragglerWatchConfig = Field(default_factory=StragglerWatchConfig)

    @field_validator("retention")
    @classmethod
    def _retention(cls, v: str) -> str:
        if not _DURATION.match(v):
            raise FieldError((), v, "a Prometheus duration such as 15d or 12h")
        return v

    _log_retention = field_validator("log_retention_days")(cloudwatch_retention)

    @property
    def traces_endpoint(self) -> str | None:
        """The collector's OTLP gRPC endpoint where traces are on, else None: what the
        model servers and their gateways send spans to."""
        return collector_otlp_endpoint() if self.enabled and self.traces else None

    @model_validator(mode="after")
    def _exporter(self) -> MonitoringConfig:
        if self.traces and self.traces_exporter == "otlp" and not self.otlp_endpoint:
            raise FieldError(("otlp_endpoint",), None, "required when traces_exporter is otlp")
        if self.alerts.gpu_temp_warning_c >= self.alerts.gpu_temp_critical_c:
            raise FieldError(
                ("alerts", "gpu_temp_warning_c"),
                self.alerts.gpu_temp_warning_c,
                "must be below gpu_temp_critical_c",
            )
        return self
