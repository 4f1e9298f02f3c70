"""A canary's share of a model's traffic: the ALB's weighted target groups.

The front door is ALB -> the model's Service (each pod's gateway sidecar) -> vLLM
on localhost, so a split must happen before a pod is chosen: at the ALB. The AWS
Load Balancer Controller's documented way is a forward action on the Ingress
(`alb.ingress.kubernetes.io/actions.<name>`, `forwardConfig.targetGroups` with a
weight each) that a path names as its backend (service `<name>`, port
`use-annotation`): one listener rule, two target groups, the ALB's weighted
random choice per request. Envoy's weighted clusters would not fit: the gateway
is a sidecar of one pod and reaches only its own vLLM.

Each revision keeps its own Service, so the series Prometheus scrapes from it
carry its name as `service` (prometheus-operator's ServiceMonitor labels every
target so): `<model>` for the stable, `<model>-canary` for the canary; that is
the revision label the canary's SLO is judged by (`llmp canary`).

Stickiness stays off: API clients keep no cookies, and a retried request may land
on either revision, which is what the weight means.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from pulumi_kubernetes.meta.v1 import ObjectMetaArgs
from pulumi_kubernetes.networking.v1 import (
    HTTPIngressPathArgs,
    HTTPIngressRuleValueArgs,
    IngressBackendArgs,
    IngressInitArgs,
    IngressRuleArgs,
    IngressServiceBackendArgs,
    IngressSpecArgs,
    ServiceBackendPortArgs,
)

from manifests.serving.vllm import CANARY, workload_name

ACTION_PREFIX = "alb.ingress.kubernetes.io/actions."
USE_ANNOTATION = "use-annotation"
"""The port name that tells the Load Balancer Controller the backend is an action."""


def action_name(model: str) -> str:
    """The forward action of a canaried model (a backend service name, at most 63)."""
    return f"{model}-weighted"


def forward_action(model: str, weight: int, port: str = "http") -> str:
    """The action's JSON: the stable's Service at 100 - weight, the canary's at weight."""
    groups = [
        {"serviceName": workload_name(model), "servicePort": port, "weight": 100 - weight},
        {"serviceName": workload_name(model, CANARY), "servicePort": port, "weight": weight},
    ]
    config = {"targetGroups": groups, "targetGroupStickinessConfig": {"enabled": False}}
    return json.dumps({"type": "forward", "forwardConfig": config}, separators=(",", ":"))


def weighted_ingress(base: IngressInitArgs, weights: Mapping[str, int]) -> IngressInitArgs:
    """`base` (the gateway's Ingress, a path per model to its Service) with each model of
    `weights` (model -> the canary's percent) routed through its forward action."""
    if not weights:
        return base
    meta = base.metadata
    spec = base.spec
    assert isinstance(meta, ObjectMetaArgs) and isinstance(spec, IngressSpecArgs)
    annotations = dict(cast(Mapping[str, Any], meta.annotations or {}))
    for model, weight in sorted(weights.items()):
        annotations[ACTION_PREFIX + action_name(model)] = forward_action(model, weight)
    found: set[str] = set()

    def path(p: HTTPIngressPathArgs) -> HTTPIngressPathArgs:
        backend = p.backend
        assert isinstance(backend, IngressBackendArgs)
        service = backend.service
        assert isinstance(service, IngressServiceBackendArgs)
        name = service.name
        if name not in weights:
            return p
        found.add(str(name))
        return HTTPIngressPathArgs(
            path=p.path,
            path_type=p.path_type,
            backend=IngressBackendArgs(
                service=IngressServiceBackendArgs(
                    name=action_name(str(name)),
                    port=ServiceBackendPortArgs(name=USE_ANNOTATION),
                )
            ),
        )

    rules = []
    for rule in cast(Sequence[IngressRuleArgs], spec.rules or []):
        assert isinstance(rule, IngressRuleArgs)
        http = rule.http
        assert isinstance(http, HTTPIngressRuleValueArgs)
        paths = [path(p) for p in http.paths]  # type: ignore[union-attr, arg-type]
        rules.append(IngressRuleArgs(host=rule.host, http=HTTPIngressRuleValueArgs(paths=paths)))
    missing = set(weights) - found
    if missing:
        raise ValueError(f"the Ingress routes no path to {', '.join(sorted(missing))}")
    return IngressInitArgs(
        metadata=ObjectMetaArgs(
            name=meta.name,
            namespace=meta.namespace,
            labels=meta.labels,
            annotations=annotations,
        ),
        spec=IngressSpecArgs(
            ingress_class_name=spec.ingress_class_name,
            default_backend=spec.default_backend,
            tls=spec.tls,
            rules=rules,
        ),
    )
