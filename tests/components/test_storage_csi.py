"""StorageVolumes: namespaces, CSI drivers, static PV/PVC pairs and the driver's IAM.

The component runs alone under the mock runtime: a tiny program (written to a
temporary directory) creates the two providers, a VPC standing in for the node
groups the drivers wait for, and one `StorageVolumes`.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.storage_csi import NamespaceQuota
from llmp.plan.synth import Plan, run_program
from spec.catalog import catalog
from spec.stackfile import load_config
from tests.conftest import STACKS, raw_stack

NAMESPACE = "kubernetes:core/v1:Namespace"
PV = "kubernetes:core/v1:PersistentVolume"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
QUOTA = "kubernetes:core/v1:ResourceQuota"
LIMITS = "kubernetes:core/v1:LimitRange"
RELEASE = "kubernetes:helm.sh/v3:Release"
ADDON = "aws:eks/addon:Addon"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
VPC = "aws:ec2/vpc:Vpc"

REGION = "us-east-1"
BUCKET_ARN = "arn:aws:s3:::acme-models"

_PROGRAM = """
import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.storage_csi import (
    LustreVolume,
    ModelWeightsVolume,
    NamespaceQuota,
    StorageVolumes,
    StorageVolumesArgs,
)

aws_provider = aws.Provider("aws", region="{region}")
k8s_provider = k8s.Provider("k8s", kubeconfig="{{}}")
nodes = aws.ec2.Vpc(
    "nodes", cidr_block="10.0.0.0/16", opts=pulumi.ResourceOptions(provider=aws_provider)
)
lustre = {lustre}
weights = {weights}
quota = {quota}
StorageVolumes(
    "storage",
    StorageVolumesArgs(
        cluster_name="llm-platform-test",
        kubernetes_version="{version}",
        lustre=LustreVolume(**lustre) if lustre else None,
        model_weights=ModelWeightsVolume(**weights) if weights else None,
        wait_for=[nodes],
        **({{"namespace_quota": NamespaceQuota(**quota)}} if quota else {{}}),
    ),
    opts=pulumi.ResourceOptions(providers=[aws_provider, k8s_provider]),
)
"""

LUSTRE: dict[str, Any] = {
    "file_system_id": "fs-0123456789abcdef0",
    "dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
    "mount_name": "abcdefgh",
    "capacity_gib": 2400,
    "namespaces": ["training", "eval"],
}
WEIGHTS: dict[str, Any] = {
    "bucket_name": "acme-models",
    "bucket_arn": BUCKET_ARN,
    "prefix": "llama/",
    "region": REGION,
    "namespaces": ["serving", "eval"],
}


def _run(
    directory: Path,
    *,
    lustre: dict[str, Any] | None = LUSTRE,
    weights: dict[str, Any] | None = WEIGHTS,
    version: str = "1.35",
    quota: dict[str, Any] | None = None,
) -> Plan:
    directory.mkdir(parents=True, exist_ok=True)
    source = _PROGRAM.format(
        region=REGION, lustre=lustre, weights=weights, version=version, quota=quota
    )
    (directory / "__main__.py").write_text(textwrap.dedent(source))
    return run_program("test", REGION, directory)


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> Plan:
    return _run(tmp_path_factory.mktemp("storage"))


@pytest.fixture
def variant(tmp_path: Path) -> Callable[..., Plan]:
    return lambda **kwargs: _run(tmp_path, **kwargs)


def _by_k8s_name(plan: Plan, type_: str) -> dict[tuple[str | None, str], dict[str, Any]]:
    out = {}
    for r in plan.by_type(type_):
        meta = r.inputs["metadata"]
        out[(meta.get("namespace"), meta["name"])] = r
    return out


def _urn(plan: Plan, type_: str) -> str:
    (resource,) = plan.by_type(type_)
    return str(resource.urn)


# --- namespaces -------------------------------------------------------------------


def test_one_namespace_per_distinct_name_with_pod_security_labels(plan: Plan) -> None:
    namespaces = _by_k8s_name(plan, NAMESPACE)
    assert set(namespaces) == {(None, "training"), (None, "eval"), (None, "serving")}
    for r in namespaces.values():
        labels = r.inputs["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
        assert labels["pod-security.kubernetes.io/warn"] == "restricted"
        assert labels["pod-security.kubernetes.io/audit"] == "restricted"
        assert labels["app.kubernetes.io/part-of"] == "llm-platform"


def test_every_namespace_has_a_quota_and_container_defaults(plan: Plan) -> None:
    namespaces = _by_k8s_name(plan, NAMESPACE)
    quotas = _by_k8s_name(plan, QUOTA)
    limits = _by_k8s_name(plan, LIMITS)
    names = {ns for _, ns in namespaces}
    assert set(quotas) == {(ns, "llmp-quota") for ns in names}
    assert set(limits) == {(ns, "llmp-limits") for ns in names}
    default = NamespaceQuota()
    for ns in names:
        namespace_urn = namespaces[(None, ns)].urn
        quota, limit = quotas[(ns, "llmp-quota")], limits[(ns, "llmp-limits")]
        # In the namespace through data: created after it, deleted before it.
        assert namespace_urn in quota.dependencies
        assert namespace_urn in limit.dependencies
        assert quota.inputs["metadata"]["labels"] == {
            "app.kubernetes.io/part-of": "llm-platform"
        }
        assert quota.inputs["spec"]["hard"] == {
            "requests.nvidia.com/gpu": str(default.accelerators),
            "requests.aws.amazon.com/neuron": str(default.accelerators),
            "requests.cpu": default.cpu,
            "requests.memory": default.memory,
            "persistentvolumeclaims": str(default.persistent_volume_claims),
        }
        (item,) = limit.inputs["spec"]["limits"]
        assert item == {
            "type": "Container",
            "defaultRequest": {
                "cpu": default.default_request_cpu,
                "memory": default.default_request_memory,
            },
            "default": {"cpu": default.default_limit_cpu, "memory": default.default_limit_memory},
        }


def test_every_accelerator_resource_of_the_catalog_is_capped(plan: Plan) -> None:
    (quota, *_) = plan.by_type(QUOTA)
    hard = quota.inputs["spec"]["hard"]
    for kind in catalog().accelerator_kinds.values():
        assert f"requests.{kind.resource}" in hard


def test_namespace_quota_is_an_argument(variant) -> None:
    plan = variant(
        weights=None,
        quota={"accelerators": 16, "cpu": "512", "memory": "4Ti", "persistent_volume_claims": 4},
    )
    for r in plan.by_type(QUOTA):
        hard = r.inputs["spec"]["hard"]
        assert hard["requests.nvidia.com/gpu"] == "16"
        assert (hard["requests.cpu"], hard["requests.memory"]) == ("512", "4Ti")
        assert hard["persistentvolumeclaims"] == "4"
    assert len(plan.by_type(QUOTA)) == len(plan.by_type(LIMITS)) == 2


@pytest.mark.parametrize("stack", STACKS)
def test_default_quota_caps_nothing_a_stack_could_run(stack: str) -> None:
    # Until per-tenant quotas: one namespace may use every node of every pool at its max size.
    cfg = load_config(raw_stack(stack))
    instances = [
        (catalog().instance(pool.instance_type), pool.max_size) for pool in cfg.node_pools.values()
    ]
    default = NamespaceQuota()
    assert sum(t.gpu_count * n for t, n in instances) <= default.accelerators
    assert sum(t.vcpus * n for t, n in instances) <= int(default.cpu)
    assert (
        sum(t.memory_gib * n for t, n in instances) <= int(default.memory.removesuffix("Ti")) * 1024
    )


def test_children_are_named_after_the_component_and_parented_to_it(plan: Plan) -> None:
    (component,) = plan.by_type("llmp:storage:StorageVolumes")
    assert component.dependencies == []
    children = [r for r in plan.resources if r.parent == component.urn]
    assert children
    assert all(r.name.startswith("storage-") for r in children)
    assert len(children) == len(plan.resources) - 4  # providers, the VPC and the component


def test_kubernetes_objects_use_the_kubernetes_provider_and_aws_the_aws_one(plan: Plan) -> None:
    for r in plan.resources:
        if r.type.startswith("kubernetes:"):
            assert r.provider.endswith("pulumi:providers:kubernetes::k8s"), r.urn
        elif r.type.startswith("aws:") and r.type != VPC:
            assert r.provider.endswith("pulumi:providers:aws::aws"), r.urn


# --- FSx for Lustre -------------------------------------------------------------


def test_one_static_lustre_pv_per_namespace_pre_bound_to_its_claim(plan: Plan) -> None:
    pvs = {k: v for k, v in _by_k8s_name(plan, PV).items() if k[1].startswith("fsx-")}
    assert set(pvs) == {(None, "fsx-lustre-training"), (None, "fsx-lustre-eval")}
    for (_, pv_name), r in pvs.items():
        spec = r.inputs["spec"]
        ns = pv_name.removeprefix("fsx-lustre-")
        assert spec["csi"] == {
            "driver": "fsx.csi.aws.com",
            "volumeHandle": LUSTRE["file_system_id"],
            "volumeAttributes": {"dnsname": LUSTRE["dns_name"], "mountname": LUSTRE["mount_name"]},
        }
        assert spec["mountOptions"] == ["flock"]
        assert spec["accessModes"] == ["ReadWriteMany"]
        assert spec["capacity"] == {"storage": "2400Gi"}
        assert spec["persistentVolumeReclaimPolicy"] == "Retain"
        assert spec["storageClassName"] == ""
        assert spec["claimRef"] == {"namespace": ns, "name": "fsx-lustre"}


def test_lustre_claims_bind_their_pv_by_name_and_depend_on_it_and_the_namespace(
    plan: Plan,
) -> None:
    pvs = _by_k8s_name(plan, PV)
    namespaces = _by_k8s_name(plan, NAMESPACE)
    claims = {k: v for k, v in _by_k8s_name(plan, PVC).items() if k[1] == "fsx-lustre"}
    assert set(claims) == {("training", "fsx-lustre"), ("eval", "fsx-lustre")}
    for (ns, _), r in claims.items():
        spec = r.inputs["spec"]
        pv = pvs[(None, f"fsx-lustre-{ns}")]
        assert spec["volumeName"] == pv.inputs["metadata"]["name"]
        assert spec["storageClassName"] == ""
        assert spec["accessModes"] == ["ReadWriteMany"]
        assert spec["resources"] == {"requests": {"storage": "2400Gi"}}
        assert pv.urn in r.dependencies
        assert namespaces[(None, ns)].urn in r.dependencies


def test_fsx_driver_chart_is_pinned_and_runs_on_accelerated_nodes(plan: Plan) -> None:
    (release,) = plan.by_type(RELEASE)
    inputs = release.inputs
    pin = catalog().charts["aws-fsx-csi-driver"]
    assert inputs["chart"] == "aws-fsx-csi-driver"
    assert inputs["version"] == pin.version
    assert inputs["repositoryOpts"] == {"repo": pin.repository}
    assert pin.repository == "https://kubernetes-sigs.github.io/aws-fsx-csi-driver"
    assert inputs["namespace"] == "kube-system"
    values = inputs["values"]
    assert values["controller"]["replicaCount"] == 2
    node = values["node"]
    assert node["tolerateAllTaints"] is False
    tolerated = {(t.get("key"), t["effect"]) for t in node["tolerations"]}
    assert ("nvidia.com/gpu", "NoSchedule") in tolerated
    assert ("aws.amazon.com/neuron", "NoSchedule") in tolerated
    for kind in catalog().accelerator_kinds.values():
        assert (kind.taint_key, "NoSchedule") in tolerated


def test_fsx_driver_needs_no_iam(plan: Plan) -> None:
    # Static provisioning only: the single role is Mountpoint's.
    (role,) = plan.by_type(ROLE)
    assert "pods.eks.amazonaws.com" in role.inputs["assumeRolePolicy"]
    assert role.name == "storage-s3-csi"


# --- Mountpoint for S3 ----------------------------------------------------------


def test_mountpoint_addon_is_pinned_with_a_pod_identity_role(plan: Plan) -> None:
    (addon,) = plan.by_type(ADDON)
    inputs = addon.inputs
    assert inputs["addonName"] == "aws-mountpoint-s3-csi-driver"
    pin = catalog().storage_addons["1.35"]["aws-mountpoint-s3-csi-driver"]
    assert inputs["addonVersion"] == pin.version
    assert pin.version.startswith("v2.") and "-eksbuild." in pin.version
    assert inputs["clusterName"] == "llm-platform-test"
    (association,) = inputs["podIdentityAssociations"]
    assert association["serviceAccount"] == "s3-csi-driver-sa"
    role = plan.one(ROLE, "storage-s3-csi")
    assert association["roleArn"].endswith(":role/storage-s3-csi")
    assert role.urn in addon.dependencies
    trust = json.loads(role.inputs["assumeRolePolicy"])
    (statement,) = trust["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]


def test_driver_policy_is_read_only_and_scoped_to_the_prefix(plan: Plan) -> None:
    (policy,) = plan.by_type(ROLE_POLICY)
    role = plan.one(ROLE, "storage-s3-csi")
    assert role.urn in policy.dependencies
    statements = {s["Sid"]: s for s in json.loads(policy.inputs["policy"])["Statement"]}
    actions = {s["Action"] for s in statements.values()}
    assert actions == {"s3:ListBucket", "s3:GetObject", "kms:Decrypt"}
    assert all(s["Effect"] == "Allow" for s in statements.values())
    listing = statements["ListModels"]
    assert listing["Resource"] == BUCKET_ARN
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["llama/*"]}}
    assert statements["ReadModels"]["Resource"] == f"{BUCKET_ARN}/llama/*"
    kms = statements["DecryptThroughS3"]
    assert kms["Condition"] == {"StringEquals": {"kms:ViaService": f"s3.{REGION}.amazonaws.com"}}


def test_whole_bucket_policy_has_no_prefix_condition(variant) -> None:
    plan = variant(lustre=None, weights={**WEIGHTS, "prefix": ""})
    (policy,) = plan.by_type(ROLE_POLICY)
    statements = {s["Sid"]: s for s in json.loads(policy.inputs["policy"])["Statement"]}
    assert "Condition" not in statements["ListModels"]
    assert statements["ReadModels"]["Resource"] == f"{BUCKET_ARN}/*"
    for r in plan.by_type(PV):
        assert not any(o.startswith("prefix") for o in r.inputs["spec"]["mountOptions"])


def test_one_read_only_s3_pv_per_namespace_pre_bound_to_its_claim(plan: Plan) -> None:
    pvs = {k: v for k, v in _by_k8s_name(plan, PV).items() if k[1].startswith("s3-")}
    assert set(pvs) == {(None, "s3-models-serving"), (None, "s3-models-eval")}
    handles = set()
    for (_, pv_name), r in pvs.items():
        spec = r.inputs["spec"]
        ns = pv_name.removeprefix("s3-models-")
        assert spec["csi"]["driver"] == "s3.csi.aws.com"
        assert spec["csi"]["volumeAttributes"] == {"bucketName": "acme-models"}
        handles.add(spec["csi"]["volumeHandle"])
        assert spec["mountOptions"] == [
            "read-only",
            "allow-other",
            f"region {REGION}",
            "prefix llama/",
        ]
        assert spec["accessModes"] == ["ReadOnlyMany"]
        assert spec["capacity"] == {"storage": "1Ti"}
        assert spec["persistentVolumeReclaimPolicy"] == "Retain"
        assert spec["storageClassName"] == ""
        assert spec["claimRef"] == {"namespace": ns, "name": "model-weights"}
    assert len(handles) == len(pvs)


def test_model_weight_claims_bind_their_pv(plan: Plan) -> None:
    pvs = _by_k8s_name(plan, PV)
    namespaces = _by_k8s_name(plan, NAMESPACE)
    claims = {k: v for k, v in _by_k8s_name(plan, PVC).items() if k[1] == "model-weights"}
    assert set(claims) == {("serving", "model-weights"), ("eval", "model-weights")}
    for (ns, _), r in claims.items():
        pv = pvs[(None, f"s3-models-{ns}")]
        spec = r.inputs["spec"]
        assert spec["volumeName"] == f"s3-models-{ns}"
        assert spec["accessModes"] == ["ReadOnlyMany"]
        assert spec["storageClassName"] == ""
        assert pv.urn in r.dependencies
        assert namespaces[(None, ns)].urn in r.dependencies


# --- switches and ordering ------------------------------------------------------


def test_without_lustre_there_is_no_fsx_driver_nor_volume(variant) -> None:
    plan = variant(lustre=None)
    assert plan.by_type(RELEASE) == []
    assert not [
        r for r in plan.by_type(PV) if r.inputs["spec"]["csi"]["driver"].startswith("fsx")
    ]
    assert {k[1] for k in _by_k8s_name(plan, NAMESPACE)} == {"serving", "eval"}
    assert {k[1] for k in _by_k8s_name(plan, PVC)} == {"model-weights"}
    assert {k[0] for k in _by_k8s_name(plan, QUOTA)} == {"serving", "eval"}


def test_without_model_weights_there_is_no_mountpoint_driver_nor_iam(variant) -> None:
    plan = variant(weights=None)
    for type_ in (ADDON, ROLE, ROLE_POLICY):
        assert plan.by_type(type_) == []
    assert not [
        r for r in plan.by_type(PV) if r.inputs["spec"]["csi"]["driver"].startswith("s3")
    ]
    assert {k[1] for k in _by_k8s_name(plan, NAMESPACE)} == {"training", "eval"}


def test_without_either_only_the_component_is_left(variant) -> None:
    plan = variant(lustre=None, weights=None)
    assert [r.type for r in plan.resources if r.type not in {VPC}] == [
        "pulumi:providers:aws",
        "pulumi:providers:kubernetes",
        "llmp:storage:StorageVolumes",
    ]


def test_drivers_wait_for_the_nodes_and_nothing_else_does(plan: Plan) -> None:
    nodes = _urn(plan, VPC)
    waiting = {r.type for r in plan.resources if nodes in r.dependencies}
    assert waiting == {RELEASE, ADDON}


def test_an_unpinned_kubernetes_version_is_refused(variant) -> None:
    with pytest.raises(ValueError, match="pins no aws-mountpoint-s3-csi-driver"):
        variant(version="1.99")
