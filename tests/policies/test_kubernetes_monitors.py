"""The monitor rule: honorLabels only on monitors of platform namespaces' pods (DCGM in
gpu-operator), never on tenants' pods, whose series would then name any namespace or job."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import STACKS
from tests.policies.conftest import add, hits, inputs, names

RULE = "k8s-monitor-honor-labels"
POD_MONITOR = "kubernetes:monitoring.coreos.com/v1:PodMonitor"
SERVICE_MONITOR = "kubernetes:monitoring.coreos.com/v1:ServiceMonitor"


def _monitor(
    p: Any,
    name: str,
    selector: dict[str, Any] | None,
    *,
    kind: str = POD_MONITOR,
    honor: bool | None = True,
    namespace: str = "monitoring",
) -> None:
    endpoint: dict[str, Any] = {"port": "metrics"}
    if honor is not None:
        endpoint["honorLabels"] = honor
    key = "podMetricsEndpoints" if kind == POD_MONITOR else "endpoints"
    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": name}}, key: [endpoint]}
    if selector is not None:
        spec["namespaceSelector"] = selector
    body = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": kind.rsplit(":", 1)[-1],
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    add(p, kind, name, body)


@pytest.mark.parametrize("stack", STACKS)
def test_quiet_on_the_stacks(plan, stack: str) -> None:
    assert hits(plan(stack), RULE) == []


def test_the_stacks_dcgm_monitor_is_checked_and_passes(plan) -> None:
    p = plan()
    dcgm = inputs(p, "monitoring-servicemonitor-dcgm-exporter", SERVICE_MONITOR)
    assert dcgm["spec"]["endpoints"][0]["honorLabels"] is True
    assert hits(p, RULE) == []
    # The same monitor reaching tenants' pods is what the rule is for.
    dcgm["spec"]["namespaceSelector"] = {"any": True}
    [v] = hits(p, RULE)
    assert v.resource == "monitoring-servicemonitor-dcgm-exporter"
    assert "ServiceMonitor dcgm-exporter honours the scraped labels of pods in every namespace" in (
        v.message
    )


@pytest.mark.parametrize(
    ("selector", "namespace", "where"),
    [
        ({"any": True}, "monitoring", "every namespace"),
        ({"matchNames": ["serving", "gpu-operator"]}, "monitoring", "serving"),
        ({"matchNames": ["team-a", "team-b"]}, "monitoring", "team-a, team-b"),
        (None, "team-a", "team-a"),  # no selector: the monitor's own namespace
        ({}, "team-a", "team-a"),
    ],
)
def test_honor_labels_on_tenants_pods_fires(
    plan, selector: dict[str, Any] | None, namespace: str, where: str
) -> None:
    p = plan()
    _monitor(p, "tenant-trainer", selector, namespace=namespace)
    _monitor(p, "tenant-svc", selector, namespace=namespace, kind=SERVICE_MONITOR)
    found = hits(p, RULE)
    assert names(found) == {"tenant-trainer", "tenant-svc"}
    assert all(f"pods in {where}:" in v.message and "\n" not in v.message for v in found)


@pytest.mark.parametrize(
    ("selector", "honor", "namespace"),
    [
        ({"matchNames": ["gpu-operator", "kube-system", "nvsentinel"]}, True, "monitoring"),
        (None, True, "monitoring"),  # its own namespace, a platform one
        ({"any": True}, False, "monitoring"),
        ({"any": True}, None, "monitoring"),
    ],
)
def test_platform_pods_or_no_honor_labels_pass(
    plan, selector: dict[str, Any] | None, honor: bool | None, namespace: str
) -> None:
    p = plan()
    _monitor(p, "platform-exporter", selector, honor=honor, namespace=namespace)
    assert hits(p, RULE) == []


def test_the_platform_namespaces_are_configurable(plan) -> None:
    p = plan()
    _monitor(p, "team-exporter", {"matchNames": ["observability"]})
    assert names(hits(p, RULE)) == {"team-exporter"}
    config = {RULE: {"platform-namespaces": ["observability", "gpu-operator"]}}
    assert hits(p, RULE, config) == []
    # The list replaces the defaults: with none, even the GPU operator's DCGM monitor fires.
    assert names(hits(p, RULE, {RULE: {"platform-namespaces": []}})) == {
        "team-exporter",
        "monitoring-servicemonitor-dcgm-exporter",
    }
