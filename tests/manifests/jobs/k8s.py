"""Checks every job test shares: Kubernetes' own schema, and the platform's policy rules."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import kubernetes_validate

from policies.kubernetes import (
    k8s_gpu_limits,
    k8s_image_pinned,
    k8s_no_privileged,
)

VERSION = "1.35"


def validate(manifest: dict[str, Any]) -> None:
    """Strict: an unknown or misspelt field fails, as kubectl --validate=strict would."""
    kubernetes_validate.validate(manifest, VERSION, strict=True)


def as_pod(template: dict[str, Any], name: str = "probe") -> dict[str, Any]:
    """A Pod wrapping a pod template: the schema of a custom resource's embedded template."""
    metadata = {**template.get("metadata", {}), "name": name, "namespace": "training"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


def policy_violations(manifest: dict[str, Any], type_: str) -> list[str]:
    """The Kubernetes workload rules of the CrossGuard pack, run on one manifest."""
    args = SimpleNamespace(
        resource_type=type_,
        props=manifest,
        name=manifest["metadata"]["name"],
        get_config=lambda: {},
    )
    found: list[str] = []
    for rule in (k8s_gpu_limits, k8s_image_pinned, k8s_no_privileged):
        rule(args, lambda message, urn=None: found.append(message))  # type: ignore[arg-type]
    return found


def node_template(train_job: dict[str, Any]) -> dict[str, Any]:
    """The pod template the Trainer makes of a TrainJob on the platform's runtime it names
    (its trainer node, `manifests.jobs.trainjob.node_pod_template`)."""
    from manifests.jobs.trainjob import cluster_training_runtimes, node_pod_template

    name = train_job["spec"]["runtimeRef"]["name"]
    (runtime,) = [r for r in cluster_training_runtimes() if r["metadata"]["name"] == name]
    return node_pod_template(train_job, runtime)
