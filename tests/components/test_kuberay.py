"""KubeRay on the platform: the pinned operator release, Kueue's RayJob integration, the
flows a RayJob needs through the tenant's NetworkPolicies, and Prometheus's scrape of Ray."""

from __future__ import annotations

import yaml

from components.addons import KUBERAY, KUEUE_FRAMEWORKS, kueue_manager_config
from components.tenancy import (
    KUBERAY_NAMESPACE,
    METRICS_PORTS,
    RAY_DASHBOARD_PORT,
    RAY_METRICS_PORT,
)
from monitoring.charts import RAY_NODE_LABEL, monitors
from spec.catalog import catalog

RELEASE = "kubernetes:helm.sh/v3:Release"
NETPOL = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


def test_the_operator_is_the_catalogs_pin_on_the_system_pool_without_a_batch_scheduler(
    plans,
) -> None:
    (release,) = [r for r in plans("pretrain").by_type(RELEASE) if r.inputs["name"] == KUBERAY]
    pin = catalog().addon_charts[KUBERAY]
    assert release.inputs["version"] == pin.version == "1.7.0"
    assert release.inputs["namespace"] == KUBERAY_NAMESPACE
    values = release.inputs["values"]
    assert values["nodeSelector"] == {"llm-platform/pool": "system"}
    assert values["resources"]["requests"] == values["resources"]["limits"]
    assert values["batchScheduler"] == {"enabled": False, "name": ""}
    assert values["metrics"]["enabled"] is True


def test_kueue_manages_rayjobs() -> None:
    assert "ray.io/rayjob" in KUEUE_FRAMEWORKS
    config = kueue_manager_config()
    assert "ray.io/rayjob" in config["integrations"]["frameworks"]
    yaml.safe_dump(config)  # what the chart value carries


def test_tenant_policies_admit_the_operator_to_the_head_dashboard_only(plans) -> None:
    policies = {
        r.inputs["metadata"]["name"]: r.inputs["spec"]
        for r in plans("pretrain").by_type(NETPOL)
        if r.inputs["metadata"]["namespace"] == "foundation"
    }
    kuberay = policies["allow-kuberay"]
    assert kuberay["podSelector"] == {"matchLabels": {"ray.io/node-type": "head"}}
    (rule,) = kuberay["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": RAY_DASHBOARD_PORT}]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": KUBERAY_NAMESPACE}}}
    ]
    # Head, workers and submitter talk on GCS, client, object manager and worker ports within
    # the namespace: every port, both ways; the scrape comes from `monitoring`, on the
    # metrics ports only (Ray's is 8080).
    same = policies["allow-same-namespace"]
    assert "ports" not in same["ingress"][0] and "ports" not in same["egress"][0]
    scrape = policies["allow-monitoring"]["ingress"][0]["ports"]
    assert {"protocol": "TCP", "port": RAY_METRICS_PORT} in scrape
    assert {p["port"] for p in scrape} == set(METRICS_PORTS)


def test_prometheus_scrapes_every_ray_pod_on_its_metrics_port() -> None:
    ray = next(m for m in monitors("monitoring") if m.metadata.name == "ray")
    manifest = ray.model_dump(by_alias=True, exclude_none=True)
    assert manifest["kind"] == "PodMonitor"
    assert manifest["spec"]["selector"] == {"matchLabels": {RAY_NODE_LABEL: "yes"}}
    assert manifest["spec"]["namespaceSelector"] == {"any": True}
    assert [e["port"] for e in manifest["spec"]["podMetricsEndpoints"]] == ["metrics"]
