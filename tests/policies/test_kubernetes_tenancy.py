"""Tenancy rules: what a tenant namespace (label `llm-platform/tenant`) may declare, the
serving namespace's door, and hostPath anywhere. Each starts from a stack's plan, which
passes, and changes one thing."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from components.lustre import TENANTS_ROOT
from components.tenancy import METADATA, TENANT_LABEL
from manifests.volumes import LUSTRE_DRIVER
from policies import kubernetes
from tests.conftest import STACKS
from tests.policies.conftest import add, hits, inputs, names, res

EGRESS = "k8s-tenant-egress"
SERVING_PORTS = "k8s-serving-ingress-ports"
SERVICES = "k8s-tenant-service-types"
HOST_PATH = "k8s-no-host-path"
VOLUMES = "k8s-tenant-volumes"
RULES = [EGRESS, SERVING_PORTS, SERVICES, HOST_PATH, VOLUMES]
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
SERVICE = "kubernetes:core/v1:Service"
PV = "kubernetes:core/v1:PersistentVolume"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"


def messages(plan: Any, rule: str, config: dict[str, Any] | None = None) -> list[str]:
    return [v.message for v in hits(plan, rule, config)]


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("rule", RULES)
def test_quiet_on_the_stacks(plan, stack: str, rule: str) -> None:
    assert hits(plan(stack), rule) == []


def test_the_policy_pack_reads_the_platforms_names() -> None:
    assert kubernetes.TENANT_LABEL == TENANT_LABEL
    assert kubernetes.METADATA_NAME == METADATA
    assert kubernetes.LUSTRE_DRIVER == LUSTRE_DRIVER
    assert f"/{kubernetes.TENANTS_DIR}" == TENANTS_ROOT


# ---------------------------------------------------------------------------
# k8s-tenant-egress
# ---------------------------------------------------------------------------

AWS_APIS = "tenancy-chat-allow-aws-apis"
DNS = "tenancy-chat-allow-dns"


def _egress(p: Any, name: str) -> list[dict[str, Any]]:
    egress: list[dict[str, Any]] = inputs(p, name, NETWORK_POLICY)["spec"]["egress"]
    return egress


def test_egress_the_stacks_dns_and_s3_rules_are_checked_and_pass(plan) -> None:
    p = plan("finetune")
    [dns] = _egress(p, DNS)
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert {port["port"] for port in dns["ports"]} == {53}
    pod_identity, s3 = _egress(p, AWS_APIS)
    assert pod_identity["to"] == [{"ipBlock": {"cidr": "169.254.170.23/32"}}]
    # S3's ranges, then the KMS endpoint's addresses (stand-ins offline).
    assert [b["ipBlock"]["cidr"] for b in s3["to"]] == [
        "192.0.2.0/24",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "198.18.0.1/32",
        "198.18.0.2/32",
    ]
    assert hits(p, EGRESS) == []


@pytest.mark.parametrize(
    ("cidr", "prefix"),
    [("0.0.0.0/0", 0), ("::/0", 0), ("0.0.0.0/1", 1), ("10.0.0.0/7", 7), ("2600::/31", 31)],
)
def test_egress_to_a_wide_ip_block_fires(plan, cidr: str, prefix: int) -> None:
    p = plan("finetune")
    _egress(p, AWS_APIS)[1]["to"].append({"ipBlock": {"cidr": cidr, "except": ["10.0.0.0/8"]}})
    assert messages(p, EGRESS) == [
        f"NetworkPolicy allow-aws-apis in tenant namespace chat: egress rule 2 allows port "
        f"443/TCP to ipBlock {cidr} (a /{prefix}, `except` or not); list only the ranges it "
        "needs (IPv4 /8 or longer, IPv6 /32 or longer)"
    ]


@pytest.mark.parametrize("cidr", ["10.0.0.0/8", "2600:1f00::/32", "52.216.0.0/15"])
def test_egress_to_a_range_of_8_or_32_or_longer_passes(plan, cidr: str) -> None:
    p = plan("finetune")
    _egress(p, AWS_APIS)[1]["to"].append({"ipBlock": {"cidr": cidr}})
    assert hits(p, EGRESS) == []


def test_egress_without_to_fires(plan) -> None:
    p = plan("finetune")
    del _egress(p, AWS_APIS)[1]["to"]
    _egress(p, AWS_APIS).append({"to": []})  # an empty `to` is every address too
    assert messages(p, EGRESS) == [
        "NetworkPolicy allow-aws-apis in tenant namespace chat: egress rule 2 has no `to`: it "
        "allows port 443/TCP to every address; name the destinations (pods, namespaces, or "
        "ipBlocks of /8 or longer)",
        "NetworkPolicy allow-aws-apis in tenant namespace chat: egress rule 3 has no `to`: it "
        "allows every port to every address; name the destinations (pods, namespaces, or "
        "ipBlocks of /8 or longer)",
    ]


def test_egress_dns_without_to_fires(plan) -> None:
    p = plan("finetune")
    del _egress(p, DNS)[0]["to"]
    assert messages(p, EGRESS) == [
        "NetworkPolicy allow-dns in tenant namespace chat: egress rule 1 allows ports 53/UDP, "
        "53/TCP to every address (DNS to any resolver is a way out); name kube-dns in `to` "
        "(namespace kube-system, pods k8s-app: kube-dns)"
    ]


def test_egress_outside_tenant_namespaces_is_not_this_rules(plan) -> None:
    p = plan("finetune")
    scrape = inputs(p, "straggler-watch-scrape", NETWORK_POLICY)
    assert scrape["metadata"]["namespace"] == "monitoring"
    scrape["spec"]["egress"] = [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]
    assert hits(p, EGRESS) == []


def test_egress_finds_the_tenant_through_the_namespace_it_depends_on(plan) -> None:
    """In a preview the namespace may not be known yet: the edge to the Namespace says."""
    p = plan("finetune")
    policy = inputs(p, AWS_APIS, NETWORK_POLICY)
    policy["metadata"]["namespace"] = UNKNOWN_STRING_VALUE
    assert res(p, "tenancy-chat-ns").urn in res(p, AWS_APIS).dependencies
    policy["spec"]["egress"][1]["to"] = [{"ipBlock": {"cidr": "0.0.0.0/0"}}]
    assert names(hits(p, EGRESS)) == {AWS_APIS}


# ---------------------------------------------------------------------------
# k8s-serving-ingress-ports
# ---------------------------------------------------------------------------

GROUP = {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": "llama-405b"}}


def _ingress(p: Any, name: str) -> dict[str, Any]:
    rule: dict[str, Any] = inputs(p, name, NETWORK_POLICY)["spec"]["ingress"][0]
    return rule


def test_serving_ports_the_groups_shape_passes(plan) -> None:
    """The policy manifests/serving/network.py writes for a LeaderWorkerSet: its pods admit
    each other on every port (Ray and NCCL pick ports at run time)."""
    p = plan("inference")
    add(
        p,
        NETWORK_POLICY,
        "serving-llama-405b-group",
        {
            "metadata": {"name": "llama-405b-group", "namespace": "serving"},
            "spec": {
                "podSelector": GROUP,
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": GROUP}]}],
                "egress": [{"to": [{"podSelector": GROUP}]}],
            },
        },
    )
    # Tenancy's namespace-wide allow is the same shape: every pod admits every pod.
    same = _ingress(p, "tenancy-serving-allow-same-namespace")
    assert "ports" not in same and same["from"][0]["namespaceSelector"] == {
        "matchLabels": {METADATA: "serving"}
    }
    assert hits(p, SERVING_PORTS) == []


@pytest.mark.parametrize(
    ("policy", "name", "change", "source"),
    [
        ("serving-allow-alb", "allow-alb", {}, "ipBlock 10.30.0.0/16"),
        (
            "serving-allow-prometheus",
            "allow-prometheus",
            {},
            "namespaces kubernetes.io/metadata.name=monitoring",
        ),
        (
            "serving-allow-prometheus",
            "allow-prometheus",
            {"from": [{"namespaceSelector": {}, "podSelector": GROUP}]},
            "every namespace",
        ),
        (
            "tenancy-serving-allow-kuberay",
            "allow-kuberay",
            {
                "from": [
                    {
                        "namespaceSelector": {
                            "matchExpressions": [{"key": "team", "operator": "Exists"}]
                        }
                    }
                ]
            },
            "namespaces team Exists",
        ),
    ],
)
def test_serving_ports_an_all_port_allow_from_outside_fires(
    plan, policy: str, name: str, change: dict[str, Any], source: str
) -> None:
    p = plan("inference")
    rule = _ingress(p, policy)
    del rule["ports"]
    rule.update(change)
    assert messages(p, SERVING_PORTS) == [
        f"NetworkPolicy {name} in serving: ingress rule 1 admits {source} on every port; name "
        "the ports it serves"
    ]


def test_serving_ports_a_port_entry_without_a_port_is_every_port(plan) -> None:
    p = plan("inference")
    _ingress(p, "serving-allow-alb")["ports"] = [{"protocol": "TCP"}]
    assert messages(p, SERVING_PORTS) == [
        "NetworkPolicy allow-alb in serving: ingress rule 1 admits ipBlock 10.30.0.0/16 on "
        "every TCP port; name the ports it serves"
    ]


def test_serving_ports_an_all_port_allow_from_anywhere_fires(plan) -> None:
    p = plan("inference")
    rule = _ingress(p, "serving-allow-alb")
    del rule["ports"], rule["from"]
    assert messages(p, SERVING_PORTS) == [
        "NetworkPolicy allow-alb in serving: ingress rule 1 admits every source on every "
        "port; name the ports it serves"
    ]


def test_serving_ports_other_pods_of_the_namespace_on_every_port_fires(plan) -> None:
    p = plan("inference")
    del _ingress(p, "serving-llama-8b-picker-in")["ports"]
    assert messages(p, SERVING_PORTS) == [
        "NetworkPolicy llama-8b-picker-in in serving: ingress rule 1 admits pods "
        "app.kubernetes.io/instance=llama-8b, app.kubernetes.io/name=vllm on every port; name "
        "the ports, or admit only the pods the policy selects (one group)"
    ]


def test_serving_ports_apply_to_the_serving_namespace_only(plan) -> None:
    p = plan("finetune")
    del _ingress(p, "tenancy-chat-allow-monitoring")["ports"]
    assert hits(p, SERVING_PORTS) == []


# ---------------------------------------------------------------------------
# k8s-tenant-service-types
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["LoadBalancer", "NodePort"])
def test_service_types_an_exposed_service_in_a_tenant_namespace_fires(plan, kind: str) -> None:
    p = plan("inference")
    service = inputs(p, "serving-llama-8b", SERVICE)
    assert (service["metadata"]["namespace"], service["spec"]["type"]) == ("serving", "ClusterIP")
    service["spec"]["type"] = kind
    assert messages(p, SERVICES) == [
        f"Service llama-8b in tenant namespace serving is of type {kind}: it is reachable from "
        "outside the cluster; use ClusterIP behind the platform's Ingress"
    ]


def test_service_types_the_namespace_may_come_from_the_dependency(plan) -> None:
    p = plan("finetune")
    service = add(
        p,
        SERVICE,
        "chat-notebook",
        {
            "metadata": {"name": "notebook", "namespace": UNKNOWN_STRING_VALUE},
            "spec": {"type": "NodePort", "ports": [{"port": 8888}]},
        },
    )
    assert hits(p, SERVICES) == []
    service.dependencies = [res(p, "tenancy-chat-ns").urn]
    assert messages(p, SERVICES) == [
        "Service notebook in tenant namespace chat is of type NodePort: it is reachable from "
        "outside the cluster; use ClusterIP behind the platform's Ingress"
    ]


def test_service_types_outside_tenant_namespaces_are_not_this_rules(plan) -> None:
    p = plan("inference")
    add(
        p,
        SERVICE,
        "ingress-nginx",
        {
            "metadata": {"name": "ingress-nginx", "namespace": "kube-system"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 443}]},
        },
    )
    assert hits(p, SERVICES) == []


# ---------------------------------------------------------------------------
# k8s-no-host-path
# ---------------------------------------------------------------------------

DAEMONSET = "kubernetes:apps/v1:DaemonSet"
HOST_VOLUME = {"name": "containerd", "hostPath": {"path": "/run/containerd/containerd.sock"}}


def _daemonset(p: Any, namespace: str, name: str) -> None:
    labels = {"app": name}
    pod = {
        "containers": [{"name": "agent", "image": "agent:1.0"}],
        "volumes": [{"name": "scratch", "emptyDir": {}}, HOST_VOLUME],
    }
    add(
        p,
        DAEMONSET,
        f"{namespace}-{name}",
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod},
            },
        },
    )


@pytest.mark.parametrize(
    ("type_", "kind", "body"),
    [
        ("kubernetes:core/v1:Pod", "Pod", lambda pod: pod),
        (
            "kubernetes:batch/v1:Job",
            "Job",
            lambda pod: {"template": {"metadata": {}, "spec": pod}},
        ),
        (
            "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet",
            "LeaderWorkerSet",
            lambda pod: {
                "leaderWorkerTemplate": {
                    "leaderTemplate": {"spec": {"containers": pod["containers"]}},
                    "workerTemplate": {"spec": pod},
                }
            },
        ),
    ],
)
def test_host_path_in_a_workload_fires(plan, type_: str, kind: str, body: Any) -> None:
    p = plan("finetune")
    pod = {"containers": [{"name": "trainer", "image": "trainer:1.0"}], "volumes": [HOST_VOLUME]}
    add(
        p,
        type_,
        "chat-debug",
        {"kind": kind, "metadata": {"name": "debug", "namespace": "chat"}, "spec": body(pod)},
    )
    assert messages(p, HOST_PATH) == [
        f"{kind} debug mounts hostPath /run/containerd/containerd.sock (volume containerd): "
        "only allow-listed system DaemonSets may; use a PersistentVolumeClaim or an emptyDir"
    ]


def test_host_path_allows_listed_system_daemonsets(plan) -> None:
    p = plan("inference")
    _daemonset(p, "kube-system", "fsx-csi-node")
    assert hits(p, HOST_PATH) == []
    config = {HOST_PATH: {"allowed-daemonsets": ["kube-system/other"]}}
    assert messages(p, HOST_PATH, config) == [
        "DaemonSet fsx-csi-node mounts hostPath /run/containerd/containerd.sock (volume "
        "containerd): only allow-listed system DaemonSets may; use a PersistentVolumeClaim or "
        "an emptyDir"
    ]


def test_host_path_fires_on_an_unlisted_daemonset_of_a_system_namespace(plan) -> None:
    p = plan("inference")
    _daemonset(p, "kube-system", "log-shipper")
    assert names(hits(p, HOST_PATH)) == {"kube-system-log-shipper"}


# ---------------------------------------------------------------------------
# k8s-tenant-volumes
# ---------------------------------------------------------------------------


def test_volumes_the_stacks_claims_are_checked_and_pass(plan) -> None:
    p = plan("finetune")
    for tenant in ("chat", "code", "eval"):
        pv = inputs(p, f"volumes-fsx-pv-{tenant}", PV)["spec"]
        assert pv["claimRef"]["namespace"] == tenant
        assert pv["csi"]["volumeAttributes"]["mountname"] == f"lustre-fs-mount/tenants/{tenant}"
        assert inputs(p, f"volumes-fsx-pvc-{tenant}", PVC)["spec"]["volumeName"] == (
            f"fsx-lustre-{tenant}"
        )
    assert hits(p, VOLUMES) == []
    # One tenant's file system is its own: pretrain's mounts the root.
    pretrain = plan("pretrain")
    mount = inputs(pretrain, "volumes-fsx-pv-foundation", PV)["spec"]["csi"]["volumeAttributes"]
    assert mount["mountname"] == "lustre-fs-mount"
    assert hits(pretrain, VOLUMES) == []


def test_volumes_a_claim_of_another_tenants_volume_fires(plan) -> None:
    p = plan("finetune")
    inputs(p, "volumes-fsx-pvc-chat", PVC)["spec"]["volumeName"] = "fsx-lustre-code"
    assert messages(p, VOLUMES) == [
        "PersistentVolume fsx-lustre-code is reserved for namespace code (claimRef) but bound "
        "by claim fsx-lustre of tenant namespace chat: bind the claim only to a volume whose "
        "claimRef names chat"
    ]


@pytest.mark.parametrize(
    ("claim_ref", "shown"),
    [
        ({"name": "model-weights"}, "(none)"),
        (None, "(none)"),
        ({"namespace": "default", "name": "model-weights"}, "default"),
    ],
)
def test_volumes_a_volume_not_reserved_for_the_namespace_fires(
    plan, claim_ref: dict[str, str] | None, shown: str
) -> None:
    p = plan("inference")
    spec = inputs(p, "volumes-s3-pv-serving", PV)["spec"]
    if claim_ref is None:
        del spec["claimRef"]
    else:
        spec["claimRef"] = claim_ref
    assert messages(p, VOLUMES) == [
        f"PersistentVolume s3-models-serving is reserved for namespace {shown} (claimRef) but "
        "bound by claim model-weights of tenant namespace serving: bind the claim only to a "
        "volume whose claimRef names serving"
    ]


def test_volumes_a_claim_of_a_volume_the_stack_does_not_make_fires(plan) -> None:
    p = plan("inference")
    claim = res(p, "volumes-s3-pvc-serving")
    claim.inputs["spec"]["volumeName"] = "pvc-0a1b2c"
    claim.dependencies = [d for d in claim.dependencies if ":PersistentVolume::" not in d]
    assert messages(p, VOLUMES) == [
        "PersistentVolumeClaim model-weights in tenant namespace serving binds PersistentVolume "
        "pvc-0a1b2c, which the stack does not make: bind only a volume made for the namespace"
    ]


@pytest.mark.parametrize(
    ("mountname", "what"),
    [
        ("lustre-fs-mount", "the root"),
        ("lustre-fs-mount/", "the root"),
        ("lustre-fs-mount/tenants", "/tenants"),
        ("lustre-fs-mount/tenants/code", "/tenants/code"),
        ("lustre-fs-mount/tenants/chat/..", "/tenants/chat/.."),
        ("lustre-fs-mount/datasets", "/datasets"),
    ],
)
def test_volumes_a_tenant_mounting_more_than_its_directory_of_a_shared_file_system_fires(
    plan, mountname: str, what: str
) -> None:
    p = plan("finetune")
    inputs(p, "volumes-fsx-pv-chat", PV)["spec"]["csi"]["volumeAttributes"]["mountname"] = mountname
    assert messages(p, VOLUMES) == [
        f"PersistentVolume fsx-lustre-chat of tenant namespace chat mounts {what} of a file "
        f"system 3 tenants share (mountname {mountname}): mount only "
        "lustre-fs-mount/tenants/chat"
    ]


def test_volumes_the_file_system_may_come_from_the_dependency(plan) -> None:
    """In a preview the file system's id is not known yet: the PVs' edge to it says."""
    p = plan("finetune")
    for tenant in ("chat", "code", "eval"):
        csi = inputs(p, f"volumes-fsx-pv-{tenant}", PV)["spec"]["csi"]
        csi["volumeHandle"] = UNKNOWN_STRING_VALUE
    csi["volumeAttributes"]["mountname"] = "lustre-fs-mount"
    assert names(hits(p, VOLUMES)) == {"volumes-fsx-pv-eval"}


@pytest.mark.parametrize(
    ("subdirectory", "namespace", "own"),
    [
        ("tenants/chat", "chat", True),
        ("tenants/chat", "team-chat", True),  # a team stack's namespace: TEAM-NAME
        ("tenants/chat", "code", False),
        ("tenants/chat/x", "chat", False),
        ("tenants/..", "..", False),
        ("tenants", "chat", False),
        ("", "chat", False),
    ],
)
def test_volumes_a_tenants_own_directory(subdirectory: str, namespace: str, own: bool) -> None:
    assert kubernetes._own_directory(subdirectory, namespace) is own
