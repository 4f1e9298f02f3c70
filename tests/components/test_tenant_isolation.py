"""An attacker's journey through the finetune stack's rendered plan, for every ordered pair
of tenants (A attacks B), and each tenant's own access as the control:

- S3: A's workload role against B's objects, evaluated by moto's IAM policy evaluator;
- FSx: the directory A's volume mounts, the uid its pods must run as (admission), the
  owner of B's directories and where A's export writes;
- network: A's pods to B's pods, every port, through the rendered NetworkPolicies;
- RBAC: A's group reading Secrets and creating Services in B's namespace, through the
  rendered Roles and RoleBindings;
- admission (CEL, evaluated with cel-python): A's pod as B's uid, A's LoadBalancer
  Service, A's pod under a platform service account;
- Kueue: a bare pod of A's (no queue name) is Kueue's, not free to run.

The matrix is printed (`pytest -s`), every cell must read `denied`, and each tenant's own
access `allowed`.
"""

from __future__ import annotations

import copy
import ipaddress
import json
from itertools import permutations
from typing import Any

import celpy
import pytest
import yaml
from moto.iam.access_control import IAMPolicy, PermissionResult

from components.addons import kueue_manager_config
from manifests import admission

NS = "kubernetes:core/v1:Namespace"
NETPOL = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
PV = "kubernetes:core/v1:PersistentVolume"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
DIRECTORY = "aws:s3/bucketObjectv2:BucketObjectv2"
IAM_POLICY = "aws:iam/rolePolicy:RolePolicy"
VAP = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
VAP_BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"
LOCAL_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"
TENANTS = ("chat", "code", "eval")
BUCKETS = ("acme-llm-finetune-datasets", "acme-llm-finetune-checkpoints")
PREFIX = {t: f"teams/{t}/" for t in TENANTS}


@pytest.fixture(scope="module")
def plan(plans):  # type: ignore[no-untyped-def]
    return plans("finetune")


def _ns(r: Any) -> str | None:
    return r.inputs["metadata"].get("namespace")


# --- S3 ----------------------------------------------------------------------------


def s3_access(plan: Any, attacker: str, victim: str) -> bool:
    """May A's workload role read or write any of B's objects in either bucket?"""
    document = plan.one(IAM_POLICY, f"tenancy-{attacker}-workload-s3").inputs["policy"]
    policy = IAMPolicy(document)
    # The buckets' ARNs as the plan has them (the mock engine's), shared by every tenant.
    buckets = {
        arn.split(f"/{PREFIX[attacker]}")[0]
        for st in json.loads(document)["Statement"]
        if st["Sid"] == "ReadWriteOwnPrefixes"
        for arn in st["Resource"]
    }
    assert len(buckets) == len(BUCKETS)
    return any(
        policy.is_action_permitted(action, f"{bucket}/{PREFIX[victim]}x")
        == PermissionResult.PERMITTED
        for bucket in buckets
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")
    )


# --- FSx ---------------------------------------------------------------------------


def _uid(plan: Any, tenant: str) -> int:
    """The uid admission holds A's pods to (the literal in its policy's CEL)."""
    (policy,) = [
        r for r in plan.by_type(VAP) if r.inputs["metadata"]["name"] == f"llmp-tenant-pods-{tenant}"
    ]
    text = json.dumps(policy.inputs["spec"]["validations"])
    return int(text.split("runAsUser == ")[1].split(" ")[0])


def fsx_access(plan: Any, attacker: str, victim: str) -> bool:
    """Can A's pods reach B's files: does A's volume mount a directory holding B's, may A
    run as B's uid, or does A's export write into B's prefix?"""
    (pv,) = [r for r in plan.by_type(PV) if r.inputs["spec"]["claimRef"]["namespace"] == attacker]
    mounted = "/" + pv.inputs["spec"]["csi"]["volumeAttributes"]["mountname"].split("/", 1)[1]
    victims = [
        r.inputs["fileSystemPath"]
        for r in plan.by_type(DRA)
        if r.inputs["fileSystemPath"].startswith(f"/tenants/{victim}/")
    ]
    assert len(victims) == 2
    reaches_directory = any(
        p == mounted or p.startswith(mounted.rstrip("/") + "/") for p in victims
    )
    owners = {
        int(r.inputs["metadata"]["file-owner"])
        for r in plan.by_type(DIRECTORY)
        if r.inputs["key"] == PREFIX[victim]
    }
    runs_as_owner = _uid(plan, attacker) in owners
    exports_there = any(
        r.inputs["fileSystemPath"].startswith(mounted + "/")
        and PREFIX[victim] in r.inputs["dataRepositoryPath"]
        for r in plan.by_type(DRA)
    )
    return reaches_directory or runs_as_owner or exports_there


# --- network -----------------------------------------------------------------------


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return True
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _peer_admits(peer: dict[str, Any], ns: str, pod: dict[str, str], ip: str | None) -> bool:
    if "ipBlock" in peer:
        if ip is None:
            return False
        block = peer["ipBlock"]
        addr = ipaddress.ip_address(ip)
        return addr in ipaddress.ip_network(block["cidr"]) and not any(
            addr in ipaddress.ip_network(e) for e in block.get("except", [])
        )
    ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
    ns_ok = _selects(ns_sel, {"kubernetes.io/metadata.name": ns}) if ns_sel is not None else None
    pod_ok = _selects(pod_sel, pod)
    if ns_ok is None:  # a podSelector alone: pods of the policy's own namespace
        return False
    return ns_ok and pod_ok


def _admitted(
    policies: list[dict[str, Any]], direction: str, port: int, peer_ok: Any
) -> bool:
    """Kubernetes semantics: isolated in `direction` once any policy of that type selects
    the pod; then allowed only if some rule admits the peer (`peer_ok`) on the port."""
    kind = direction.capitalize()
    typed = [p for p in policies if kind in p.get("policyTypes", [])]
    if not typed:
        return True
    side = "from" if direction == "ingress" else "to"
    for p in typed:
        for rule in p.get(direction, []):
            peers, ports = rule.get(side), rule.get("ports")
            admits = peers is None or any(peer_ok(x) for x in peers)
            on_port = ports is None or any(q.get("port") in (None, port) for q in ports)
            if admits and on_port:
                return True
    return False


def ingress_allowed(
    plan: Any, dst_ns: str, src_ns: str, port: int, dst_pod: dict[str, str] | None = None
) -> bool:
    """May a pod of `src_ns` reach a pod of `dst_ns` on `port`?"""
    policies = [
        r.inputs["spec"]
        for r in plan.by_type(NETPOL)
        if _ns(r) == dst_ns and _selects(r.inputs["spec"].get("podSelector"), dst_pod or {})
    ]
    return _admitted(policies, "ingress", port, lambda x: _peer_admits(x, src_ns, {}, None))


def network_access(plan: Any, attacker: str, victim: str) -> bool:
    return any(ingress_allowed(plan, victim, attacker, port) for port in range(1, 65536, 7))


# --- RBAC --------------------------------------------------------------------------


def rbac_allows(
    plan: Any, group: str, ns: str, verb: str, resource: str, api_group: str = ""
) -> bool:
    roles = {r.inputs["metadata"]["name"]: r.inputs for r in plan.by_type(ROLE) if _ns(r) == ns}
    for b in plan.by_type(BINDING):
        if _ns(b) != ns:
            continue
        if not any(s["kind"] == "Group" and s["name"] == group for s in b.inputs["subjects"]):
            continue
        role = roles[b.inputs["roleRef"]["name"]]
        for rule in role["rules"]:
            if (
                api_group in rule["apiGroups"]
                and resource in rule["resources"]
                and verb in rule["verbs"]
            ):
                return True
    return False


# --- admission (CEL) ---------------------------------------------------------------


def _vap_admits(plan: Any, policy_name: str, obj: dict[str, Any], groups: list[str]) -> bool:
    (policy,) = [r for r in plan.by_type(VAP) if r.inputs["metadata"]["name"] == policy_name]
    spec = policy.inputs["spec"]
    env = celpy.Environment()
    request = celpy.json_to_cel({"userInfo": {"groups": groups}})
    activation: dict[str, Any] = {"object": celpy.json_to_cel(obj), "request": request}
    for cond in spec.get("matchConditions", []):
        if not env.program(env.compile(cond["expression"])).evaluate(activation):
            return True  # not this policy's request
    variables = {
        v["name"]: env.program(env.compile(v["expression"])).evaluate(activation)
        for v in spec.get("variables", [])
    }
    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()}
    )
    return all(
        bool(env.program(env.compile(v["expression"])).evaluate(activation))
        for v in spec["validations"]
    )


def _pod(uid: int, account: str = "training", volumes: list[Any] | None = None) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "serviceAccountName": account,
            "securityContext": {"runAsUser": uid, "runAsGroup": uid, "runAsNonRoot": True},
            "containers": [{"name": "c", "image": "x"}],
            "volumes": volumes or [],
        },
    }


def pod_as(plan: Any, attacker: str, uid: int, **kw: Any) -> bool:
    return _vap_admits(
        plan, f"llmp-tenant-pods-{attacker}", _pod(uid, **kw), [f"llmp:tenant:{attacker}"]
    )


# --- Kueue -------------------------------------------------------------------------


def bare_pod_runs_unqueued(plan: Any, tenant: str) -> bool:
    """A pod without a queue name in the tenant's namespace: Kueue's pod webhook leaves it
    alone only outside managedJobsNamespaceSelector, or where no LocalQueue `default`
    exists to default it to and manageJobsWithoutQueueName is off (v0.19.2's
    pod_webhook.go Default)."""
    config = kueue_manager_config()
    labels = plan.one(NS, f"tenancy-{tenant}-ns").inputs["metadata"]["labels"]
    selector = config["managedJobsNamespaceSelector"]
    managed = all(
        (e["operator"] == "Exists" and e["key"] in labels)
        for e in selector.get("matchExpressions", [])
    ) and _selects(selector, labels)
    has_default = any(
        _ns(r) == tenant and r.inputs["metadata"]["name"] == "default"
        for r in plan.by_type(LOCAL_QUEUE)
    )
    return not managed or (not has_default and not config["manageJobsWithoutQueueName"])


# --- the matrix --------------------------------------------------------------------

CELLS = ("S3", "FSx", "network", "Secrets", "Services", "bare pod", "pod as B's uid")


def _cells(plan: Any, a: str, b: str) -> dict[str, bool]:
    """True: A reaches B's (or, with a == b, its own) by that path."""
    group = f"llmp:tenant:{a}"
    own = a == b
    return {
        "S3": s3_access(plan, a, b),
        "FSx": fsx_access(plan, a, b),
        "network": network_access(plan, a, b),
        "Secrets": rbac_allows(plan, group, b, "get", "secrets"),
        "Services": rbac_allows(plan, group, b, "create", "services"),
        # Own: a bare pod is admitted by Kueue through the queue; no one's runs unqueued.
        "bare pod": (not bare_pod_runs_unqueued(plan, a))
        if own
        else bare_pod_runs_unqueued(plan, a),
        "pod as B's uid": pod_as(plan, a, _uid(plan, b)),
    }


def test_every_pair_of_tenants_is_denied_and_each_its_own_allowed(plan) -> None:
    lines = [f"{'A -> B':<14}" + "".join(f"{c:>15}" for c in CELLS)]
    for a, b in [*permutations(TENANTS, 2), *((t, t) for t in TENANTS)]:
        cells = _cells(plan, a, b)
        expected = a == b
        word = {True: "allowed", False: "denied"}
        lines.append(f"{a + ' -> ' + b:<14}" + "".join(f"{word[cells[c]]:>15}" for c in CELLS))
        wrong = [c for c in CELLS if cells[c] != expected]
        assert not wrong, f"{a} -> {b}: {wrong}"
    print("\n" + "\n".join(lines))


def _trainjob(uid: int) -> dict[str, Any]:
    from manifests.jobs.trainjob import build

    return build(
        name="run",
        namespace="chat",
        image="registry.example.com/trainer:1.0",
        command=["train.py"],
        instance_type="p5.48xlarge",
        node_pool="h100",
        nodes_min=1,
        nodes_max=2,
        checkpoint_dir="/fsx/checkpoints/run",
        queue_name="default",
        run_as_user=uid,
    )


def _patched_pod(job: dict[str, Any]) -> dict[str, Any]:
    (patch,) = job["spec"]["runtimePatches"]
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod: dict[str, Any] = rjob["template"]["spec"]["template"]["spec"]
    return pod


def test_admission_refuses_exposure_and_borrowed_identities(plan) -> None:
    uid = _uid(plan, "chat")
    assert pod_as(plan, "chat", uid)
    assert not pod_as(plan, "chat", 0)  # root, whatever root squash would make of it
    assert not pod_as(plan, "chat", uid, account="serving-gateway")
    assert not pod_as(
        plan, "chat", uid, volumes=[{"name": "v", "csi": {"driver": "fsx.csi.aws.com"}}]
    )
    assert not pod_as(plan, "chat", uid, volumes=[{"name": "v", "hostPath": {"path": "/"}}])
    job = {
        "kind": "PyTorchJob",
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {"template": {"spec": _pod(_uid(plan, "code"))["spec"]}}
            }
        },
    }
    assert not _vap_admits(plan, "llmp-tenant-pods-chat", job, ["llmp:tenant:chat"])
    # A TrainJob's pods are the runtime's with its runtime patches laid over: those are held
    # to the tenant's uid, its accounts and its volumes.
    train = _trainjob(uid)
    assert _vap_admits(plan, "llmp-tenant-pods-chat", train, ["llmp:tenant:chat"])
    for change in (
        lambda pod: pod["securityContext"].update(runAsUser=0),
        lambda pod: pod.update(serviceAccountName="serving-gateway"),
        lambda pod: pod["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
        lambda pod: pod["containers"][0].update(securityContext={"runAsUser": 0}),
    ):
        bad = copy.deepcopy(train)
        change(_patched_pod(bad))
        assert not _vap_admits(plan, "llmp-tenant-pods-chat", bad, ["llmp:tenant:chat"])
    unpatched = copy.deepcopy(train)
    del unpatched["spec"]["runtimePatches"]  # the runtime's pod: the image's own user
    assert not _vap_admits(plan, "llmp-tenant-pods-chat", unpatched, ["llmp:tenant:chat"])
    second = copy.deepcopy(train)
    jobs = second["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    jobs["replicatedJobs"].append({"name": "other", "template": {}})
    assert not _vap_admits(plan, "llmp-tenant-pods-chat", second, ["llmp:tenant:chat"])
    # The platform's own pods in a shared namespace are not held to a tenant's uid.
    assert _vap_admits(plan, "llmp-tenant-pods-chat", _pod(1), ["system:serviceaccounts"])
    services = "llmp-tenant-services"
    for kind, ok in (("ClusterIP", True), ("LoadBalancer", False), ("NodePort", False)):
        service = {"kind": "Service", "spec": {"type": kind}}
        assert _vap_admits(plan, services, service, ["system:serviceaccounts"]) is ok
    ingress = {
        "kind": "Ingress",
        "metadata": {"annotations": {admission.SCHEME: "internet-facing"}},
    }
    assert not _vap_admits(plan, "llmp-tenant-ingresses", ingress, ["llmp:tenant:chat"])


def test_monitoring_reaches_only_the_metrics_ports(plan) -> None:
    from components.tenancy import METRICS_PORTS

    open_ports = [p for p in range(1, 65536) if ingress_allowed(plan, "chat", "monitoring", p)]
    assert open_ports == sorted(METRICS_PORTS)


def test_kueue_config_manages_workloads_without_a_queue_name() -> None:
    config = kueue_manager_config()
    assert config["manageJobsWithoutQueueName"] is True
    yaml.safe_dump(config)  # the chart takes it as YAML


# --- Egress ------------------------------------------------------------------------


def egress_allowed(plan: Any, ns: str, ip: str, port: int) -> bool:
    """May a pod of `ns` reach the address `ip` on `port`?"""
    policies = [
        r.inputs["spec"]
        for r in plan.by_type(NETPOL)
        if _ns(r) == ns and _selects(r.inputs["spec"].get("podSelector"), {})
    ]
    return _admitted(policies, "egress", port, lambda x: _peer_admits(x, "", {}, ip))


def test_a_tenant_pod_reaches_s3_and_nothing_else_outside_the_vpc(plan) -> None:
    from llmp.plan.synth import STAND_IN_S3_RANGES

    s3 = [str(next(ipaddress.ip_network(c).hosts())) for c in STAND_IN_S3_RANGES]
    elsewhere = ["8.8.8.8", "52.94.0.10", "1.1.1.1", "203.0.114.1"]
    for tenant in TENANTS:
        assert all(egress_allowed(plan, tenant, ip, 443) for ip in s3)
        assert not any(egress_allowed(plan, tenant, ip, 80) for ip in s3)
        assert not any(egress_allowed(plan, tenant, ip, p) for ip in elsewhere for p in (443, 80))
        # Inside the VPC: the Pod Identity agent's port and the KMS endpoint's addresses
        # (RFC 2544 stand-ins offline), no other host.
        assert egress_allowed(plan, tenant, "169.254.170.23", 80)
        assert egress_allowed(plan, tenant, "198.18.0.1", 443)
        assert not egress_allowed(plan, tenant, "198.18.0.1", 80)
        assert not egress_allowed(plan, tenant, "198.18.0.9", 443)
        assert not egress_allowed(plan, tenant, "10.60.0.10", 443)


def test_the_s3_endpoint_refuses_buckets_that_are_not_the_platforms(plan) -> None:
    """Evaluated by moto's IAM policy evaluator: even a role that may write anywhere copies
    nothing out through the endpoint to a bucket the policy does not name."""
    (endpoint,) = [
        e
        for e in plan.by_type("aws:ec2/vpcEndpoint:VpcEndpoint")
        if e.inputs["vpcEndpointType"] == "Gateway"
    ]
    policy = IAMPolicy(endpoint.inputs["policy"])

    def permitted(action: str, arn: str) -> bool:
        return policy.is_action_permitted(action, arn) == PermissionResult.PERMITTED

    own = "arn:aws:s3:::acme-llm-finetune-checkpoints/teams/chat/step-100/model.safetensors"
    assert permitted("s3:PutObject", own) and permitted("s3:GetObject", own)
    region = plan.outputs["region"]
    layers = f"arn:aws:s3:::prod-{region}-starport-layer-bucket/sha256/abc"
    assert permitted("s3:GetObject", layers) and not permitted("s3:PutObject", layers)
    for outside in (
        "arn:aws:s3:::attacker-exfil/model.safetensors",
        "arn:aws:s3:::acme-llm-finetunex-checkpoints/x",
        "arn:aws:s3:::acme-llm-pretrain-checkpoints/x",
    ):
        assert not permitted("s3:PutObject", outside), outside


def test_each_tenant_submits_training_and_data_jobs_in_its_own_namespace_only(plan) -> None:
    kinds = [("trainer.kubeflow.org", "trainjobs"), ("ray.io", "rayjobs"), ("batch", "jobs")]
    for a in TENANTS:
        for b in TENANTS:
            for api_group, resource in kinds:
                allowed = rbac_allows(plan, f"llmp:tenant:{a}", b, "create", resource, api_group)
                assert allowed == (a == b), (a, b, resource)
