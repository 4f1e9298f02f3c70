"""Typed Prometheus-operator objects (monitoring.coreos.com/v1): only the fields we set."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

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
    source_labels: list[str] = Field(alias="sourceLabels")
    target_label: str = Field(alias="targetLabel")
    regex: str = "(.*)"
    replacement: str = "$1"
    action: Literal["replace"] = "replace"


class Endpoint(_Model):
    port: str
    path: str = "/metrics"
    interval: str = "30s"
    honor_labels: bool | None = Field(None, alias="honorLabels")
    metric_relabelings: list[Relabeling] | None = Field(None, alias="metricRelabelings")


class MonitorSpec(_Model):
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
