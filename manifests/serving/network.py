"""The serving namespace's flows, by port: what each pod there may receive, and from whom.

NetworkPolicies are a union of allows: a flow passes where any policy selecting the
receiving pod (ingress) and any selecting the sending pod (egress) allow it, past the
tenant's default deny. These are the serving namespace's own, made by the serving
component, and they are all it needs inside the namespace and from `monitoring`:

| flow | port | from | to |
|---|---|---|---|
| the ALB | 8080 `http`, 8081 `health` | the VPC (ip targets) | model pods |
| scrapes | 8090 `metrics` | Prometheus pods in `monitoring` | model pods |
| a picked request | 8082 `peer` | the model's own pods (gateways) | the model's pods |
| the picker's scrape | 8090 `metrics` | the model's picker | the model's pods |
| ext_proc | 9002 `grpc` | the model's pods (gateways) | the model's picker |
| a group's Ray and NCCL | every port | pods of the same LeaderWorkerSet | those pods |

vLLM's own port (8000) is in no policy: it listens on the pod's loopback only. Nothing else
of the namespace reaches a model port, and another model's pods do not reach this model's
`peer` port. Each allow is written on both ends (ingress of the receiver, egress of the
sender), so the flows hold once tenancy stops allowing all ports within the namespace.

What tenancy's namespace-wide policies must then stop allowing here: `allow-same-namespace`
(every port, both ways, among all pods) and `allow-monitoring` (every port from any pod of
`monitoring`); monitoring needs `metrics_ports()` only, which `allow-prometheus` here
already grants to Prometheus. The namespace keeps tenancy's default deny, DNS, the AWS
APIs (the Pod Identity agent, HTTPS outside the VPC) and the KubeRay rule, and the
component's own egress rules (the traces, the picker's API server).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, ObjectMetaArgs
from pulumi_kubernetes.networking.v1 import (
    NetworkPolicyEgressRuleArgs,
    NetworkPolicyIngressRuleArgs,
    NetworkPolicyInitArgs,
    NetworkPolicyPeerArgs,
    NetworkPolicyPortArgs,
    NetworkPolicySpecArgs,
)

from manifests.serving import METRICS_PORT, PEER_PORT, gateway, multinode, router, vllm
from spec.labels import PART_OF

MONITORING_NAMESPACE = "monitoring"
"""Where Prometheus runs (components.monitoring)."""
PROMETHEUS_SELECTOR = {"app.kubernetes.io/name": "prometheus"}
"""The label prometheus-operator puts on every Prometheus server pod it runs."""
METADATA_NAME = "kubernetes.io/metadata.name"
MODEL_PODS = {"app.kubernetes.io/name": "vllm"}
"""Every model server pod (each model, each track, a group's leader and workers)."""


def metrics_ports() -> list[int]:
    """The ports of the serving namespace that `monitoring` scrapes: the gateways'
    `metrics` listener, on the model pods (`MODEL_PODS`). Nothing else there is scraped."""
    return [METRICS_PORT]


def _meta(namespace: pulumi.Input[str], name: str) -> ObjectMetaArgs:
    return ObjectMetaArgs(name=name, namespace=namespace, labels=dict(PART_OF))


def _pods(labels: Mapping[str, str]) -> NetworkPolicyPeerArgs:
    """Pods of this namespace (a peer without a namespace selector is the policy's own)."""
    return NetworkPolicyPeerArgs(pod_selector=LabelSelectorArgs(match_labels=dict(labels)))


def _tcp(*ports: int) -> list[NetworkPolicyPortArgs]:
    return [NetworkPolicyPortArgs(protocol="TCP", port=p) for p in ports]


def _ingress(
    namespace: pulumi.Input[str],
    name: str,
    to: Mapping[str, str],
    sources: list[NetworkPolicyPeerArgs],
    ports: list[NetworkPolicyPortArgs] | None,
) -> NetworkPolicyInitArgs:
    return NetworkPolicyInitArgs(
        metadata=_meta(namespace, name),
        spec=NetworkPolicySpecArgs(
            pod_selector=LabelSelectorArgs(match_labels=dict(to)),
            policy_types=["Ingress"],
            ingress=[NetworkPolicyIngressRuleArgs(from_=sources, ports=ports)],
        ),
    )


def _egress(
    namespace: pulumi.Input[str],
    name: str,
    sender: Mapping[str, str],
    targets: list[NetworkPolicyPeerArgs],
    ports: list[NetworkPolicyPortArgs] | None,
) -> NetworkPolicyInitArgs:
    return NetworkPolicyInitArgs(
        metadata=_meta(namespace, name),
        spec=NetworkPolicySpecArgs(
            pod_selector=LabelSelectorArgs(match_labels=dict(sender)),
            policy_types=["Egress"],
            egress=[NetworkPolicyEgressRuleArgs(to=targets, ports=ports)],
        ),
    )


def prometheus_policy_args(namespace: pulumi.Input[str]) -> NetworkPolicyInitArgs:
    """Prometheus (its pods in `monitoring`) to the model pods' `metrics` port only."""
    prometheus = NetworkPolicyPeerArgs(
        namespace_selector=LabelSelectorArgs(match_labels={METADATA_NAME: MONITORING_NAMESPACE}),
        pod_selector=LabelSelectorArgs(match_labels=dict(PROMETHEUS_SELECTOR)),
    )
    return _ingress(namespace, "allow-prometheus", MODEL_PODS, [prometheus], _tcp(*metrics_ports()))


def picked_policies_args(
    namespace: pulumi.Input[str], model: str
) -> dict[str, NetworkPolicyInitArgs]:
    """An endpoint-picker model: its gateways to each other's `peer` port and to its
    picker's gRPC, its picker to their `metrics` port; each on both ends."""
    pods = vllm.selector(model)
    picker = router.picker_selector(model)
    return {
        f"{model}-peer-in": _ingress(
            namespace, f"{model}-peer-in", pods, [_pods(pods)], _tcp(PEER_PORT)
        ),
        f"{model}-gateway-out": NetworkPolicyInitArgs(
            metadata=_meta(namespace, f"{model}-gateway-out"),
            spec=NetworkPolicySpecArgs(
                pod_selector=LabelSelectorArgs(match_labels=dict(pods)),
                policy_types=["Egress"],
                egress=[
                    NetworkPolicyEgressRuleArgs(to=[_pods(pods)], ports=_tcp(PEER_PORT)),
                    NetworkPolicyEgressRuleArgs(
                        to=[_pods(picker)], ports=_tcp(router.EXT_PROC_PORT)
                    ),
                ],
            ),
        ),
        f"{model}-picker-scrape-in": _ingress(
            namespace, f"{model}-picker-scrape-in", pods, [_pods(picker)], _tcp(METRICS_PORT)
        ),
        f"{model}-picker-in": _ingress(
            namespace, f"{model}-picker-in", picker, [_pods(pods)], _tcp(router.EXT_PROC_PORT)
        ),
        f"{model}-picker-scrape-out": _egress(
            namespace, f"{model}-picker-scrape-out", picker, [_pods(pods)], _tcp(METRICS_PORT)
        ),
    }


def group_policy_args(namespace: pulumi.Input[str], workload: str) -> NetworkPolicyInitArgs:
    """The pods of one LeaderWorkerSet to each other, every port both ways: Ray's head and
    workers (GCS 6379, the object and node managers, worker ports) and NCCL's bootstrap
    sockets pick ports at run time. No other pod reaches them."""
    group = {multinode.NAME_LABEL: workload}
    name = f"{workload}-group"
    return NetworkPolicyInitArgs(
        metadata=_meta(namespace, name),
        spec=NetworkPolicySpecArgs(
            pod_selector=LabelSelectorArgs(match_labels=group),
            policy_types=["Ingress", "Egress"],
            ingress=[NetworkPolicyIngressRuleArgs(from_=[_pods(group)])],
            egress=[NetworkPolicyEgressRuleArgs(to=[_pods(group)])],
        ),
    )


def serving_network_policies(
    namespace: pulumi.Input[str],
    *,
    vpc_cidr: str,
    picked_models: Sequence[str] = (),
    groups: Sequence[str] = (),
    traces: gateway.TraceCollector | None = None,
) -> dict[str, NetworkPolicyInitArgs]:
    """Every NetworkPolicy of the serving namespace's flows (the table above), by name:
    `picked_models` route by the endpoint picker, `groups` are the LeaderWorkerSets (one
    per multi-node model and track), `traces` the collector the pods send spans to."""
    policies = {
        "allow-alb": gateway.alb_network_policy_args(namespace, vpc_cidr, MODEL_PODS),
        "allow-prometheus": prometheus_policy_args(namespace),
    }
    for model in picked_models:
        policies |= picked_policies_args(namespace, model)
    for workload in groups:
        policies[f"{workload}-group"] = group_policy_args(namespace, workload)
    if traces is not None:
        policies["allow-traces"] = gateway.traces_network_policy_args(namespace, traces, MODEL_PODS)
    return policies
