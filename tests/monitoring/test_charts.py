"""The monitoring charts' values against the pinned charts, and the monitors and rules against
the pinned Prometheus operator's CRDs.

Test data (tests/monitoring/data/, each file compact JSON with sorted keys, gzipped), read at
the published tags the catalog cites:

- prometheus-community/helm-charts tag kube-prometheus-stack-88.5.3:
  charts/kube-prometheus-stack/values.yaml (sha256 659289e3cc0ff503db75dd2969c8fe7295657357b82f
  f085d0b2a824d68b7755); its subcharts' values at their own tags, kube-state-metrics-8.4.0
  (a4dea7869dc7b21d16a5bfc6de666e66b92f0fe1ae48c100344eb6d97cef16a4) and
  prometheus-node-exporter-4.56.1 (428cec4fb54b0c0a58480d067f13b7f6851102fb5c5c1b282bf6f376073f
  21f0), and grafana-community/helm-charts tag grafana-12.11.1, charts/grafana/values.yaml
  (653e88838eb7553f561d2e6ffa3cbaa7d5b5029398af6ea2fdd2c27793853a68);
- the `v1` openAPIV3Schema of ServiceMonitor, PodMonitor and PrometheusRule, descriptions
  removed (what the operator's stripped-down-crds.yaml removes), from the same chart tag's
  charts/crds/crds/crd-{servicemonitors,podmonitors,prometheusrules}.yaml: the operator's
  v0.93.1 files (sha256 3322d612f23bf144c887c94bf247b0b4a69189adf37c0d482d2c6267ffe906ab,
  41de2587baafa31240438654a3ae5dc19ef40296c31cb186855fa4ce85b03fb9,
  72b1e5f9959e67990d1598eb31b24ca4415007e31df3916356ef216316b2bf40);
- open-telemetry/opentelemetry-helm-charts tag opentelemetry-collector-0.170.0:
  charts/opentelemetry-collector/values.yaml (b0f5026aa169be664ba735c23ef12eed7a976c33abe2d1b4d
  7201a9f2fd5ffcc) and values.schema.json (ebee2734490717c722533b61647f9f5052fe4d437adf8734f2a7
  30f7a4bac210), which helm applies to the merged values at install.

A bump of a pin must refresh its files: the first test fails until it does.
"""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from monitoring import rules
from monitoring.charts import (
    KPS,
    NODE_EXPORTER_ARGS,
    OTEL,
    alertmanager_values,
    kube_prometheus_stack_values,
    monitors,
    otel_values,
    pins,
)
from spec.monitoring import AlertThresholds, StragglerWatchConfig
from tests.manifests.serving.test_multinode import _unknown_fields

DATA = Path(__file__).with_name("data")
KPS_VERSION = "88.5.3"
OPERATOR_VERSION = "v0.93.1"
OTEL_VERSION = "0.170.0"
SUBCHARTS = {
    "grafana": "grafana-12.11.1",
    "kube-state-metrics": "kube-state-metrics-8.4.0",
    "prometheus-node-exporter": "prometheus-node-exporter-4.56.1",
}
FREE_FORM = {
    # Maps whose content is ours, not the chart's: a claim template, Alertmanager's
    # configuration, grafana.ini.
    ("prometheus", "prometheusSpec", "storageSpec"),
    ("alertmanager", "config"),
    ("grafana", "grafana.ini"),
}


@functools.cache
def _data(name: str) -> Any:
    return json.loads(gzip.decompress((DATA / name).read_bytes()))


def _kps_defaults() -> dict[str, Any]:
    """The chart's values with each subchart's own defaults under its key (the chart's
    values for a subchart override the subchart's, as helm merges them)."""
    defaults = dict(_data(f"{KPS}-{KPS_VERSION}.values.json.gz"))
    for key, release in SUBCHARTS.items():
        defaults[key] = {**_data(f"{release}.values.json.gz"), **(defaults.get(key) or {})}
    return defaults


def _unknown_keys(ours: dict[str, Any], theirs: Any, path: tuple[str, ...] = ()) -> list[str]:
    """Keys we set that the chart's values do not have: helm would ignore them silently."""
    unknown: list[str] = []
    for key, value in ours.items():
        at = (*path, key)
        if not isinstance(theirs, dict) or key not in theirs:
            unknown.append(".".join(at))
        elif at not in FREE_FORM and isinstance(value, dict) and value:
            unknown += _unknown_keys(value, theirs[key], at)
    return unknown


def _helm_merge(defaults: Any, values: Any) -> Any:
    """Helm's coalescing of user values over the chart's: maps merge, anything else replaces."""
    if isinstance(defaults, dict) and isinstance(values, dict):
        merged = dict(defaults)
        for key, value in values.items():
            merged[key] = _helm_merge(defaults.get(key), value)
        return merged
    return values


def test_the_test_data_is_of_the_pinned_versions() -> None:
    pinned = pins()
    assert pinned.charts[KPS].version == KPS_VERSION
    assert pinned.charts[OTEL].version == OTEL_VERSION
    assert f"/download/{OPERATOR_VERSION}/stripped-down-crds.yaml" in (
        pinned.prometheus_operator_crds.url
    )
    assert f"appVersion {OPERATOR_VERSION}" in pinned.charts[KPS].verified.where
    for release in SUBCHARTS.values():
        assert release.rsplit("-", 1)[1] in pinned.charts[KPS].source


@pytest.mark.parametrize("grafana", [True, False], ids=["grafana", "no-grafana"])
@pytest.mark.parametrize("admin_secret", ["grafana-admin", None], ids=["password", "no-password"])
def test_kube_prometheus_stack_sets_only_keys_the_pinned_chart_has(
    grafana: bool, admin_secret: str | None
) -> None:
    values = kube_prometheus_stack_values(
        retention="15d",
        storage_gib=100,
        grafana=grafana,
        admin_secret=admin_secret,
        alertmanager=alertmanager_values({"route": {}}, ["alertmanager-receivers"]),
    )
    assert _unknown_keys(values, _kps_defaults()) == []


def test_a_key_the_chart_lacks_is_found() -> None:
    values = kube_prometheus_stack_values(retention="15d", storage_gib=100, grafana=True)
    values["prometheus"]["prometheusSpec"]["retension"] = "15d"
    values["grafana"]["sidecar"]["dashboard"] = {}
    assert _unknown_keys(values, _kps_defaults()) == [
        "prometheus.prometheusSpec.retension",
        "grafana.sidecar.dashboard",
    ]


def test_node_exporter_keeps_the_pinned_charts_default_args_and_adds_ethtool() -> None:
    # Setting extraArgs replaces the chart's list: ours must start with it.
    defaults = _data(f"{KPS}-{KPS_VERSION}.values.json.gz")["prometheus-node-exporter"]
    assert [*defaults["extraArgs"], "--collector.ethtool"] == NODE_EXPORTER_ARGS


def test_the_chart_gives_grafana_no_default_admin_password() -> None:
    # Since 79.x: without our Secret, the chart generates one (and our values turn the
    # login form off); `prom-operator` is gone.
    assert "adminPassword" not in _kps_defaults()["grafana"]


@pytest.mark.parametrize("endpoint", [None, "https://otlp.example.com:4317"], ids=["xray", "otlp"])
def test_otel_values_pass_the_pinned_charts_schema(endpoint: str | None) -> None:
    merged = _helm_merge(
        _data(f"{OTEL}-{OTEL_VERSION}.values.json.gz"), otel_values(endpoint, "us-east-1")
    )
    jsonschema.Draft7Validator(_data(f"{OTEL}-{OTEL_VERSION}.values.schema.json.gz")).validate(
        merged
    )


def test_the_otel_schema_refuses_a_renamed_value() -> None:
    # 0.162.0 renamed rewriteDeprecatedProcessorNames; the schema allows no other keys.
    values = {**otel_values(None, "us-east-1"), "rewriteDeprecatedProcessorNames": False}
    merged = _helm_merge(_data(f"{OTEL}-{OTEL_VERSION}.values.json.gz"), values)
    schema = _data(f"{OTEL}-{OTEL_VERSION}.values.schema.json.gz")
    with pytest.raises(jsonschema.ValidationError, match="rewriteDeprecatedProcessorNames"):
        jsonschema.Draft7Validator(schema).validate(merged)


def test_otel_config_uses_no_component_the_chart_rewrites_or_dropped() -> None:
    config = otel_values(None, "us-east-1")["config"]
    names = {*config["receivers"], *config["processors"], *config["exporters"]}
    assert not names & {"k8sattributes", "filelog"}
    assert "telemetry" not in config["service"]


def _objects() -> list[dict[str, Any]]:
    watch = StragglerWatchConfig(enabled=True, image_tag="trainer-v0.1.0", interval_seconds=120)
    prometheus_rules = rules.prometheus_rules(
        AlertThresholds(), "monitoring", fsx_capacity_gib=1200, stragglers=watch
    )
    return [obj.dump() for obj in [*monitors("monitoring"), *prometheus_rules]]


@pytest.mark.parametrize(
    "manifest", _objects(), ids=lambda m: f"{m['kind']}-{m['metadata']['name']}"
)
def test_monitors_and_rules_are_valid_for_the_pinned_operator_crds(
    manifest: dict[str, Any],
) -> None:
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
    schema = _data(f"monitoring.coreos.com_v1-{OPERATOR_VERSION.lstrip('v')}.schemas.json.gz")[
        manifest["kind"]
    ]
    jsonschema.Draft7Validator(schema).validate(manifest)
    # A typo passes the schema (unknown fields are allowed) and would be pruned: none here.
    assert _unknown_fields(manifest, schema) == []


def test_every_kind_the_platform_writes_has_its_schema() -> None:
    schemas = _data(f"monitoring.coreos.com_v1-{OPERATOR_VERSION.lstrip('v')}.schemas.json.gz")
    kinds = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    assert {m["kind"] for m in _objects()} == kinds
    assert set(schemas) == kinds
