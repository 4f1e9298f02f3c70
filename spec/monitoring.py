"""`monitoring`: metrics, logs, traces and the alert thresholds."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from spec.base import Section, cloudwatch_retention
from spec.errors import FieldError

_DURATION = re.compile(r"^[0-9]+(ms|s|m|h|d|w|y)$")


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

    @field_validator("retention")
    @classmethod
    def _retention(cls, v: str) -> str:
        if not _DURATION.match(v):
            raise FieldError((), v, "a Prometheus duration such as 15d or 12h")
        return v

    _log_retention = field_validator("log_retention_days")(cloudwatch_retention)

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
