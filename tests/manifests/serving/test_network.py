"""Who reaches which port of a model pod: the serving namespace's NetworkPolicies, evaluated.

The policies are the inference stack's as the program declares them (the synthesized plan):
the serving component's by port (`manifests.serving.network`) and the tenancy component's
namespace-wide ones. The evaluator below is Kubernetes' NetworkPolicy semantics written out
(a union of allows; a pod selected by some policy of a direction is isolated in it; a flow
needs the receiver's ingress and the sender's egress): network-config-analyzer, the peer
DESIGN.md names, is not in this project's requirements (its wheel pins PyYAML, networkx and
lxml at versions other than the project's), so it does not run here.

Two policy sets are judged:

- **as it must be**: tenancy's policies for `serving` without `allow-same-namespace` and
  with `allow-monitoring` on `metrics_ports()` only (the change tenancy owes), plus the
  serving component's. Then Prometheus reaches only the metrics port, no other pod of the
  namespace reaches a model port, the ALB only the gateway's two ports, the picker and the
  gateways only what routing needs;
- **as it is now**: whatever the plan holds. Every flow past the first set comes from
  tenancy's two namespace-wide policies, and every port it reaches is still a gateway
  listener that checks a key or answers one read-only path: vLLM is on loopback, so the
  door holds before the fence does.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass, field
from typing import Any

from components import tenancy
from manifests.serving import gateway, network
from manifests.serving.multinode import plain
from tests.conftest import raw_stack

NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
VPC_CIDR = "10.30.0.0/16"
ALB_IP = "10.30.7.21"
"""An ALB node in a subnet of the VPC (target type ip: it connects from its own address)."""
TENANCY_WIDE = ("allow-same-namespace", "allow-monitoring")


@dataclass(frozen=True)
class Endpoint:
    """A pod (namespace, labels, the ports its containers declare) or an address outside."""

    name: str
    namespace: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    ports: frozenset[int] = frozenset()
    ip: str | None = None

    @property
    def is_pod(self) -> bool:
        return self.namespace is not None


def _matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    selector = selector or {}
    assert not selector.get("matchExpressions"), "the evaluator reads matchLabels only"
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _peer(peer: dict[str, Any], other: Endpoint, policy_ns: str) -> bool:
    if "ipBlock" in peer:
        # An ipBlock names addresses outside the cluster (what the API says it is for).
        if other.is_pod or other.ip is None:
            return False
        block = peer["ipBlock"]
        ip = ipaddress.ip_address(other.ip)
        excepted = any(ip in ipaddress.ip_network(c) for c in block.get("except") or [])
        return ip in ipaddress.ip_network(block["cidr"]) and not excepted
    if not other.is_pod:
        return False
    namespace_labels = {"kubernetes.io/metadata.name": other.namespace or ""}
    if "namespaceSelector" in peer:
        if not _matches(peer["namespaceSelector"], namespace_labels):
            return False
    elif other.namespace != policy_ns:
        return False
    return "podSelector" not in peer or _matches(peer["podSelector"], other.labels)


def _port(rule: dict[str, Any], port: int) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True
    for p in ports:
        assert isinstance(p.get("port", port), int), "the evaluator reads numbered ports"
        if p.get("protocol", "TCP") == "TCP" and p.get("port", port) <= port <= p.get(
            "endPort", p.get("port", port)
        ):
            return True
    return False


def _allowed(
    policies: list[dict[str, Any]], pod: Endpoint, other: Endpoint, port: int, way: str
) -> bool:
    """Whether `pod` admits (`Ingress`, `other` sends) or sends (`Egress`, to `other`)."""
    key, peers = ("ingress", "from") if way == "Ingress" else ("egress", "to")
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod.namespace
        and _matches(p["spec"].get("podSelector"), pod.labels)
        and way in p["spec"].get("policyTypes", ["Ingress"])
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get(key) or []:
            sources = rule.get(peers)
            hit = not sources or any(
                _peer(s, other, policy["metadata"]["namespace"]) for s in sources
            )
            if hit and _port(rule, port):
                return True
    return False


def reachable(policies: list[dict[str, Any]], src: Endpoint, dst: Endpoint) -> set[int]:
    """The ports of `dst` that `src` may open (TCP)."""
    return {
        port
        for port in dst.ports
        if _allowed(policies, dst, src, port, "Ingress")
        and (not src.is_pod or _allowed(policies, src, dst, port, "Egress"))
    }


# -- the stack -------------------------------------------------------------------------


@functools.cache
def _plan_policies() -> tuple[dict[str, Any], ...]:
    from llmp.plan.synth import synthesize

    plan = synthesize("inference", raw_stack("inference"))
    return tuple(r.inputs for r in plan.by_type(NETWORK_POLICY))


@functools.cache
def _pods() -> dict[str, Endpoint]:
    from llmp.plan.synth import synthesize

    plan = synthesize("inference", raw_stack("inference"))
    pods: dict[str, Endpoint] = {}
    for d in plan.by_type(DEPLOYMENT):
        meta = d.inputs["metadata"]
        if meta.get("namespace") != "serving":
            continue
        template = d.inputs["spec"]["template"]
        ports = {
            p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports") or []
        }
        pods[meta["name"]] = Endpoint(
            meta["name"], "serving", template["metadata"]["labels"], frozenset(ports)
        )
    return pods


def _serving_policies_now() -> list[dict[str, Any]]:
    return [p for p in _plan_policies() if p["metadata"]["namespace"] == "serving"]


def _serving_policies_as_they_must_be() -> list[dict[str, Any]]:
    """Tenancy's policies less its namespace-wide allows, its monitoring rule on the
    serving namespace's metrics ports, and the serving component's."""
    ours = [p for p in _serving_policies_now() if p["metadata"]["name"] not in TENANCY_WIDE]
    monitoring = tenancy.network_policies(
        "serving", "serving", VPC_CIDR, metrics_ports=network.metrics_ports()
    )["allow-monitoring"]
    return [*ours, plain(monitoring)]


PROMETHEUS = Endpoint("prometheus", "monitoring", {"app.kubernetes.io/name": "prometheus"})
GRAFANA = Endpoint("grafana", "monitoring", {"app.kubernetes.io/name": "grafana"})
STRANGER = Endpoint("debug", "serving", {"app": "debug"})
"""Any other pod a person of the serving tenant runs in the namespace."""
ALB = Endpoint("alb", ip=ALB_IP)


def _model_pods() -> list[Endpoint]:
    return [_pods()["llama-8b"], _pods()["llama-70b"]]


def test_the_model_pods_serve_gateway_ports_only_and_vllm_is_not_one() -> None:
    ports = {p.name: p.ports for p in _model_pods()}
    assert ports["llama-8b"] == {8080, 8081, 8082, 8090}
    assert ports["llama-70b"] == {8080, 8081, 8090}  # round-robin: no peer listener
    assert all(gateway.VLLM_PORT not in p.ports for p in _model_pods())


def test_prometheus_reaches_only_the_metrics_port_and_other_monitoring_pods_no_more() -> None:
    policies = _serving_policies_as_they_must_be()
    for pod in _model_pods():
        assert reachable(policies, PROMETHEUS, pod) == {gateway.METRICS_PORT}, pod.name
        assert reachable(policies, GRAFANA, pod) <= {gateway.METRICS_PORT}, pod.name
    assert network.metrics_ports() == [gateway.METRICS_PORT]


def test_another_pod_of_the_namespace_reaches_no_model_port_and_no_picker() -> None:
    policies = _serving_policies_as_they_must_be()
    for pod in [*_model_pods(), _pods()["llama-8b-epp"]]:
        assert reachable(policies, STRANGER, pod) == set(), pod.name


def test_the_alb_reaches_only_the_gateways_http_and_health_ports() -> None:
    policies = _serving_policies_as_they_must_be()
    for pod in _model_pods():
        assert reachable(policies, ALB, pod) == {gateway.API_PORT, gateway.HEALTH_PORT}
    assert reachable(policies, ALB, _pods()["llama-8b-epp"]) == set()


def test_routing_flows_are_the_models_own_and_by_port() -> None:
    policies = _serving_policies_as_they_must_be()
    small, large, picker = _pods()["llama-8b"], _pods()["llama-70b"], _pods()["llama-8b-epp"]
    other_replica = Endpoint("llama-8b-2", "serving", small.labels, small.ports)
    # A gateway forwards a picked request to another replica's peer port, asks its picker.
    assert reachable(policies, small, other_replica) == {gateway.PEER_PORT}
    assert reachable(policies, small, picker) == {9002}
    # The picker scrapes the metrics listener, and nothing else of the pods.
    assert reachable(policies, picker, small) == {gateway.METRICS_PORT}
    # Another model's gateways are not this model's peers; the round-robin model has none.
    assert reachable(policies, large, small) == set()
    assert reachable(policies, small, large) == set()
    assert reachable(policies, picker, large) == set()


def test_what_the_namespace_allows_today_past_that_is_tenancys_and_every_port_is_a_door() -> None:
    """The flows the plan allows beyond the fenced set all come from tenancy's two
    namespace-wide policies; each lands on a gateway listener that checks a client's key
    or serves one read-only path (vLLM listens on loopback)."""
    now, fenced = _serving_policies_now(), _serving_policies_as_they_must_be()
    without_wide = [p for p in now if p["metadata"]["name"] not in TENANCY_WIDE]
    config = gateway.envoy_config(
        gateway.GatewayModel(
            name="llama-8b",
            max_requests=40,
            clients=("chat-app",),
            routing="endpoint-picker",
            picker_host="epp",
        ),
        {"chat-app": "key"},
    )
    doors = {
        lst["address"]["socket_address"]["port_value"]: lst["name"]
        for lst in config["static_resources"]["listeners"]
    }
    keyed = {"api", "peer"}
    for src in (PROMETHEUS, GRAFANA, STRANGER, ALB, _pods()["llama-70b"]):
        for dst in _model_pods():
            extra = reachable(now, src, dst) - reachable(fenced, src, dst)
            assert extra <= reachable(now, src, dst) - reachable(without_wide, src, dst)
            for port in reachable(now, src, dst):
                assert port in doors, (src.name, dst.name, port)
                assert doors[port] in keyed | {"health", "metrics"}


def _policy(name: str, spec: dict[str, Any], namespace: str = "serving") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def test_the_evaluator_reads_isolation_peers_and_ports_as_kubernetes_does() -> None:
    pod = Endpoint("m", "serving", {"app": "m"}, frozenset({80, 443}))
    mine = Endpoint("c", "serving", {"app": "c"})
    theirs = Endpoint("c", "other", {"app": "c"})
    # Not selected by any policy: open both ways; selected for ingress: closed.
    assert reachable([], mine, pod) == {80, 443}
    deny = _policy("deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})
    assert reachable([deny], mine, pod) == set()
    assert reachable([deny], ALB, pod) == set()
    # A namespace and a pod selector in one peer are both required.
    both = _policy(
        "both",
        {
            "podSelector": {"matchLabels": {"app": "m"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": "other"}
                            },
                            "podSelector": {"matchLabels": {"app": "c"}},
                        }
                    ],
                    "ports": [{"port": 443, "protocol": "TCP"}],
                }
            ],
        },
    )
    assert reachable([both], theirs, pod) == {443}
    assert reachable([both], mine, pod) == set()
    # The sender's egress counts too; an ipBlock holds addresses, never pods.
    deny_there = _policy("deny", {"podSelector": {}, "policyTypes": ["Egress"]}, "other")
    assert reachable([both, deny_there], theirs, pod) == set()
    block = _policy(
        "block",
        {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"ipBlock": {"cidr": VPC_CIDR, "except": ["10.30.7.0/24"]}}]}],
        },
    )
    assert reachable([block], ALB, pod) == set()
    assert reachable([block], Endpoint("alb", ip="10.30.8.1"), pod) == {80, 443}
    assert reachable([block], mine, pod) == set()


def test_a_groups_ray_and_nccl_ports_are_open_to_its_own_pods_only() -> None:
    """A LeaderWorkerSet's leader and workers reach each other on every port (Ray's head and
    workers, NCCL's bootstrap pick ports at run time); no other pod reaches them."""
    from manifests.serving.multinode import NAME_LABEL, RAY_PORT

    deny = _policy("deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})
    policies = [deny, plain(network.group_policy_args("serving", "llama-405b"))]
    labels = {"app.kubernetes.io/name": "vllm", NAME_LABEL: "llama-405b"}
    ports = frozenset({RAY_PORT, 10001, 12345})
    leader = Endpoint("leader", "serving", {**labels, "role": "leader"}, ports)
    worker = Endpoint("worker", "serving", {**labels, "role": "worker"}, ports)
    other_group = Endpoint("other", "serving", {**labels, NAME_LABEL: "llama-405b-canary"})
    assert reachable(policies, worker, leader) == set(ports)
    assert reachable(policies, leader, worker) == set(ports)
    assert reachable(policies, other_group, leader) == set()
    assert reachable(policies, STRANGER, leader) == set()
    assert reachable(policies, PROMETHEUS, leader) == set()
