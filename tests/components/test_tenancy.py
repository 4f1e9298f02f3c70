"""Tenancy: per tenant a namespace, quota, limits, network fence, RBAC through an access
entry, a LocalQueue, and a workload role that reaches only its own S3 prefixes; the
`tenants` config refuses what the pools cannot supply."""

from __future__ import annotations

import json

import pytest

from llmp.plan.synth import STAND_IN_S3_RANGES
from spec.errors import ConfigError
from spec.stackfile import load_config
from tests.conftest import raw_stack

NS = "kubernetes:core/v1:Namespace"
QUOTA = "kubernetes:core/v1:ResourceQuota"
LIMITS = "kubernetes:core/v1:LimitRange"
NETPOL = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
SA = "kubernetes:core/v1:ServiceAccount"
LOCAL_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"
ACCESS = "aws:eks/accessEntry:AccessEntry"
IAM_ROLE = "aws:iam/role:Role"
IAM_POLICY = "aws:iam/rolePolicy:RolePolicy"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"


def _in(plan, type_: str, namespace: str) -> list[dict]:
    return [r for r in plan.by_type(type_) if r.inputs["metadata"].get("namespace") == namespace]


def _tenant_like(plan) -> list[dict]:
    """Namespaces other than monitoring's own (components/monitoring.py)."""
    return [r for r in plan.by_type(NS) if not r.name.startswith("monitoring-")]


def test_every_finetune_tenant_gets_its_objects(plans) -> None:
    plan = plans("finetune")
    namespaces = {r.inputs["metadata"]["name"]: r for r in _tenant_like(plan)}
    assert set(namespaces) == {"chat", "code", "eval"}
    for tenant, ns in namespaces.items():
        labels = ns.inputs["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
        assert labels["llm-platform/tenant"] == tenant
        assert ns.parent.endswith("::tenancy")
        quotas = {r.inputs["metadata"]["name"] for r in _in(plan, QUOTA, tenant)}
        assert quotas == {"llmp-quota", "llmp-priorities"}
        assert len(_in(plan, LIMITS, tenant)) == 1
        assert len(_in(plan, ROLE, tenant)) == 1 and len(_in(plan, BINDING, tenant)) == 1
        assert len(_in(plan, LOCAL_QUEUE, tenant)) == 1
        assert {r.inputs["metadata"]["name"] for r in _in(plan, SA, tenant)} == {"training"}
        policies = {r.inputs["metadata"]["name"] for r in _in(plan, NETPOL, tenant)}
        assert policies == {
            "default-deny",
            "allow-dns",
            "allow-same-namespace",
            "allow-monitoring",
            "allow-kuberay",
            "allow-aws-apis",
        }
        # Objects in the namespace take its name as data: created after it.
        for r in _in(plan, QUOTA, tenant) + _in(plan, LOCAL_QUEUE, tenant):
            assert ns.urn in r.dependencies


def test_quota_sums_the_tenant_gpus_per_accelerator_resource(plans) -> None:
    def quota(plan, ns: str, name: str = "llmp-quota") -> dict:
        (found,) = [r for r in _in(plan, QUOTA, ns) if r.inputs["metadata"]["name"] == name]
        return found.inputs["spec"]

    hard = quota(plans("finetune"), "chat")["hard"]
    assert hard == {
        "requests.nvidia.com/gpu": "24",
        "requests.aws.amazon.com/neuron": "0",
        "requests.cpu": "768",
        "requests.memory": "8192Gi",
        "persistentvolumeclaims": "8",
        "requests.storage": "2048Gi",
        "services.loadbalancers": "0",
        "services.nodeports": "0",
    }
    # No pod of the serving class in a training tenant's namespace.
    priorities = quota(plans("finetune"), "chat", "llmp-priorities")
    assert priorities["hard"] == {"pods": "0"}
    assert priorities["scopeSelector"]["matchExpressions"] == [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["llmp-serving"]}
    ]
    serving = quota(plans("inference"), "serving")["hard"]
    assert serving["requests.nvidia.com/gpu"] == "64"  # serving GPUs


def test_default_deny_then_narrow_allows(plans) -> None:
    by_name = {
        r.inputs["metadata"]["name"]: r.inputs["spec"]
        for r in _in(plans("pretrain"), NETPOL, "foundation")
    }
    deny = by_name["default-deny"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    dns = by_name["allow-dns"]["egress"][0]
    assert dns["to"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "kube-system"
    }
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
    monitoring = by_name["allow-monitoring"]["ingress"][0]["from"][0]
    assert monitoring["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    # HTTPS to S3's ranges (its prefix list; offline, the documentation ranges stand in)
    # and to no other address outside the VPC.
    # Inside the VPC, the KMS interface endpoint's addresses only (its network interfaces,
    # one per private subnet; offline, RFC 2544 stand-ins).
    https = by_name["allow-aws-apis"]["egress"][1]
    blocks = [t["ipBlock"] for t in https["to"]]
    assert blocks[:3] == [{"cidr": c} for c in STAND_IN_S3_RANGES]
    assert [b["cidr"] for b in blocks[3:]] == ["198.18.0.1/32", "198.18.0.2/32", "198.18.0.3/32"]
    assert https["ports"] == [{"protocol": "TCP", "port": 443}]


def test_admin_role_maps_to_the_tenant_group(plans) -> None:
    plan = plans("finetune")
    entries = {r.name: r.inputs for r in plan.by_type(ACCESS)}
    assert entries["tenancy-chat-access"]["kubernetesGroups"] == ["llmp:tenant:chat"]
    assert entries["tenancy-chat-access"]["principalArn"].endswith(":role/llm-chat-team")
    assert "tenancy-eval-access" not in entries  # no admin_role_arn
    binding = _in(plan, BINDING, "chat")[0].inputs
    assert binding["subjects"] == [
        {"kind": "Group", "name": "llmp:tenant:chat", "apiGroup": "rbac.authorization.k8s.io"}
    ]


def test_workload_role_reaches_only_its_own_prefixes(plans) -> None:
    plan = plans("finetune")
    policy = json.loads(plan.one(IAM_POLICY, "tenancy-code-workload-s3").inputs["policy"])
    listing, objects, kms = policy["Statement"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["teams/code/*"]}}
    assert all("*" not in arn for arn in listing["Resource"])
    assert len(objects["Resource"]) == 2
    assert all(arn.endswith("/teams/code/*") for arn in objects["Resource"])
    assert kms["Condition"]["StringEquals"]["kms:ViaService"] == "s3.us-west-2.amazonaws.com"
    association = plan.one(ASSOCIATION, "tenancy-code-workload").inputs
    assert (association["namespace"], association["serviceAccount"]) == ("code", "training")
    trust = json.loads(plan.one(IAM_ROLE, "tenancy-code-workload").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}


def test_a_tenant_without_prefixes_gets_no_workload_role(plans) -> None:
    plan = plans("inference")
    assert [r for r in plan.by_type(IAM_ROLE) if r.name.startswith("tenancy-")] == []


def test_tenant_namespaces_have_one_owner_and_hold_the_volumes(plans) -> None:
    plan = plans("pretrain")
    assert [r.name for r in _tenant_like(plan)] == ["tenancy-foundation-ns"]
    claim = plan.one("kubernetes:core/v1:PersistentVolumeClaim", "volumes-fsx-pvc-foundation")
    ns = plan.one(NS, "tenancy-foundation-ns")
    assert claim.inputs["metadata"]["namespace"] == "foundation"
    assert ns.urn in claim.dependencies
    quotas = [r for r in plan.by_type(QUOTA) if r.inputs["metadata"]["namespace"] == "foundation"]
    # The tenancy's, not a second one from StorageVolumes.
    assert {q.name for q in quotas} == {"tenancy-foundation-quota", "tenancy-foundation-priorities"}


def test_a_volume_namespace_that_is_no_tenant_stays_with_storage(synth) -> None:
    raw = raw_stack("finetune")
    raw["llm-platform:storage"]["lustre"]["mount_namespaces"] = ["chat", "scratch"]
    plan = synth(raw)
    owners = {r.inputs["metadata"]["name"]: r.name for r in plan.by_type(NS)}
    assert owners["scratch"] == "volumes-ns-scratch"
    assert owners["chat"] == "tenancy-chat-ns"


def test_without_kueue_there_is_no_local_queue(synth) -> None:
    raw = raw_stack("finetune")
    raw["llm-platform:addons"] = {"kueue": False}
    assert synth(raw).by_type(LOCAL_QUEUE) == []


def test_no_tenants_no_tenancy_objects(synth) -> None:
    raw = raw_stack("finetune")
    del raw["llm-platform:tenants"]
    raw["llm-platform:storage"]["lustre"]["mount_namespaces"] = ["training"]
    plan = synth(raw)
    assert [r.name for r in _tenant_like(plan)] == ["volumes-ns-training"]
    assert plan.by_type(LOCAL_QUEUE) == []


# ---------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------


def _load(stack: str, tenants: dict) -> None:
    raw = raw_stack(stack)
    raw["llm-platform:tenants"] = tenants
    load_config(raw)


BASE = {"cpu": 8, "memory_gib": 64}


@pytest.mark.parametrize(
    ("tenants", "message"),
    [
        (
            {"chat": {**BASE, "gpu_quota": {"h200": 8}}},
            "config error: llm-platform:tenants.chat.gpu_quota.h200 = 'h200': not a pool in "
            "node_pools (a100-spot, h100)",
        ),
        (
            {"a": {**BASE, "gpu_quota": {"h100": 10}}, "b": {**BASE, "gpu_quota": {"h100": 8}}},
            "config error: llm-platform:tenants.b.gpu_quota.h100 = 8: tenants are promised 18 "
            "GPUs of h100, which supplies 16 at max_size; lower the quotas or raise max_size",
        ),
        (
            {"Chat": BASE},
            "config error: llm-platform:tenants.Chat = 'Chat': tenant names are namespace "
            "names: lowercase letters, digits and '-', up to 32, starting with a letter",
        ),
        ({"kube-system": BASE}, "is a system namespace"),
        ({"chat": {**BASE, "gpu_quota": {"h100": -1}}}, "tenants.chat.gpu_quota.h100 = -1"),
        ({"chat": {**BASE, "s3_prefixes": ["teams/*"]}}, "tenants.chat.s3_prefixes.0"),
        ({"chat": {**BASE, "admin_role_arn": "admin"}}, "not an IAM role ARN"),
        ({"chat": {"cpu": 8}}, "tenants.chat.memory_gib = <missing>: required"),
        ({"chat": {**BASE, "serving_gpus": {"h100": 17}}}, "tenants are promised 17 GPUs"),
    ],
)
def test_bad_tenants_are_one_line_errors(tenants: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load("finetune", tenants)
    text = str(err.value)
    assert "\n" not in text
    assert message in text


def test_prefixes_need_the_datasets_and_checkpoints_buckets() -> None:
    with pytest.raises(ConfigError, match=r"needs storage\.buckets datasets and checkpoints"):
        _load("inference", {"serving": {**BASE, "s3_prefixes": ["x/"]}})


def test_addons_defaults_are_on_and_unknown_keys_refused() -> None:
    cfg = load_config(raw_stack("pretrain"))
    assert all(cfg.addons.model_dump().values())
    raw = raw_stack("pretrain")
    raw["llm-platform:addons"] = {"kueu": False}
    with pytest.raises(ConfigError, match=r"addons\.kueu = False: unknown key"):
        load_config(raw)
