"""Typed Prometheus-operator objects (monitoring.coreos.com/v1): only the fields we set."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

API_VERSION: Literal["monitoring.coreos.com/v1"] = "monitoring.coreos.com/v1"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class Metadata(_Model):
    name: str
    namespace: str
    labels: dict[str, str] = Field(default_factory=dict)


class LabelSelector(_Model):
    match_labels: dict[str, str] = Field(alias="matchLabels")


class NamespaceSelector(_Model):
    any: bool | None = None
    match_names: list[str] | None = Field(None, alias="matchNames")


class Relabeling(_Model):
    """`replace` (source labels, target label) or `labeldrop` (the labels `regex` names)."""

    source_labels: list[str] | None = Field(None, alias="sourceLabels")
    target_label: str | None = Field(None, alias="targetLabel")
    regex: str = "(.*)"
    replacement: str | None = "$1"
    action: Literal["replace", "labeldrop"] = "replace"

    @model_validator(mode="after")
    def _complete(self) -> Relabeling:
        if self.action == "replace" and not (self.source_labels and self.target_label):
            raise ValueError("a replace relabeling names its source labels and target label")
        if self.action == "labeldrop" and (
            self.source_labels or self.target_label or self.replacement is not None
        ):
            raise ValueError("a labeldrop relabeling takes only a regex of label names")
        return self


class Endpoint(_Model):
    port: str
    path: str = "/metrics"
    interval: str = "30s"
    honor_labels: bool | None = Field(None, alias="honorLabels")
    metric_relabelings: list[Relabeling] | None = Field(None, alias="metricRelabelings")


class MonitorSpec(_Model):
    job_label: str | None = Field(None, alias="jobLabel")
    """The pod's (PodMonitor) or Service's (ServiceMonitor) label whose value becomes the
    target's `job`; without it (or where the object lacks the label) the operator's default."""
    selector: LabelSelector
    namespace_selector: NamespaceSelector = Field(alias="namespaceSelector")
    endpoints: list[Endpoint] | None = None
    pod_metrics_endpoints: list[Endpoint] | None = Field(None, alias="podMetricsEndpoints")


class Monitor(_Model):
    api_version: Literal["monitoring.coreos.com/v1"] = Field(API_VERSION, alias="apiVersion")
    kind: Literal["ServiceMonitor", "PodMonitor"]
    metadata: Metadata
    spec: MonitorSpec


class Rule(_Model):
    alert: str | None = None
    record: str | None = None
    expr: str
    for_: str | None = Field(None, alias="for")
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class RuleGroup(_Model):
    name: str
    interval: str | None = None
    rules: list[Rule]


class RuleSpec(_Model):
    groups: list[RuleGroup]


class PrometheusRule(_Model):
    api_version: Literal["monitoring.coreos.com/v1"] = Field(API_VERSION, alias="apiVersion")
    kind: Literal["PrometheusRule"] = "PrometheusRule"
    metadata: Metadata
    spec: RuleSpec
