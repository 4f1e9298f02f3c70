"""helm-chart-pinned and kueue-local-queue-per-namespace: quiet on every stack, fire when broken."""

from __future__ import annotations

import pytest

from tests.conftest import STACKS
from tests.policies.conftest import add, hits, names, res

RELEASE = "kubernetes:helm.sh/v3:Release"
KUSTOMIZE = "kubernetes:kustomize/v2:Directory"


@pytest.mark.parametrize("stack", STACKS)
def test_both_rules_are_quiet_on_every_stack(plan, stack: str) -> None:
    p = plan(stack)
    assert hits(p, "helm-chart-pinned") == []
    assert hits(p, "kueue-local-queue-per-namespace") == []


@pytest.mark.parametrize("version", [None, "", "latest", "^1.2.0", "~3.5", "1.*", ">=0.19"])
def test_helm_chart_pinned_fires_on_a_floating_version(plan, version) -> None:
    p = plan("finetune")
    release = res(p, "addons-kueue", RELEASE)
    if version is None:
        release.inputs.pop("version")
    else:
        release.inputs["version"] = version
    assert names(hits(p, "helm-chart-pinned")) == {"addons-kueue"}


def test_helm_chart_pinned_covers_remote_kustomizations(plan) -> None:
    # The platform installs no kustomization since Trainer v2 (a chart): the rule still
    # holds one to a tag.
    p = plan("pretrain")
    url = "https://github.com/kubeflow/trainer.git/manifests/overlays/manager"
    directory = add(p, KUSTOMIZE, "addons-remote", {"directory": f"{url}?ref=v2.2.1"})
    assert hits(p, "helm-chart-pinned") == []
    directory.inputs["directory"] = f"{url}?ref=master"
    assert names(hits(p, "helm-chart-pinned")) == {"addons-remote"}
    directory.inputs["directory"] = "https://github.com/x/y.git/manifests"
    assert names(hits(p, "helm-chart-pinned")) == {"addons-remote"}
    directory.inputs["directory"] = "./manifests/local"
    assert hits(p, "helm-chart-pinned") == []


def test_local_queue_rule_fires_for_a_tenant_namespace_without_a_queue(plan) -> None:
    p = plan("finetune")
    p.resources = [r for r in p.resources if r.name != "tenancy-eval-local-queue"]
    assert names(hits(p, "kueue-local-queue-per-namespace")) == {"tenancy-eval-ns"}


def test_local_queue_rule_follows_the_queue_to_its_namespace(plan) -> None:
    p = plan("finetune")
    queue = res(p, "tenancy-eval-local-queue")
    namespace = res(p, "tenancy-eval-ns")
    queue.inputs["metadata"]["namespace"] = "eval-xyz"  # an auto-named namespace
    assert namespace.urn in queue.dependencies
    assert hits(p, "kueue-local-queue-per-namespace") == []
    queue.dependencies.remove(namespace.urn)
    assert names(hits(p, "kueue-local-queue-per-namespace")) == {"tenancy-eval-ns"}


def test_local_queue_rule_ignores_other_namespaces_and_stacks_without_kueue(plan) -> None:
    p = plan("finetune")
    add(
        p,
        "kubernetes:core/v1:Namespace",
        "ns-scratch",
        {"kind": "Namespace", "metadata": {"name": "scratch", "labels": {}}},
    )
    assert hits(p, "kueue-local-queue-per-namespace") == []
    p.resources = [r for r in p.resources if not r.type.startswith("kubernetes:kueue")]
    assert hits(p, "kueue-local-queue-per-namespace") == []
