"""Deploying into what exists: every example stack of examples/stacks/ synthesized, and
what each creates, adopts and leaves alone (program/adoption.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from llmp.errors import BadInput
from llmp.plan import Plan
from llmp.plan.synth import synthesize, synthesize_stack
from llmp.stacks import stack_name_problem
from spec.stackfile import load_stack_file
from tests.conftest import config_error, merge

EXAMPLES = Path(__file__).resolve().parents[2] / "examples/stacks"
OWNED_BY_THE_NETWORK_TEAM = {
    "aws:ec2/vpc:Vpc",
    "aws:ec2/subnet:Subnet",
    "aws:ec2/natGateway:NatGateway",
    "aws:ec2/eip:Eip",
    "aws:ec2/internetGateway:InternetGateway",
    "aws:ec2/routeTable:RouteTable",
    "aws:ec2/routeTableAssociation:RouteTableAssociation",
}
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
ADDON = "aws:eks/addon:Addon"


def example(name: str) -> dict[str, Any]:
    return load_stack_file(str(EXAMPLES / f"Pulumi.{name}.yaml"))


_plans: dict[str, Plan] = {}


def plan_of(name: str, outputs: Path | None = None) -> Plan:
    key = f"{name}:{outputs}"
    if key not in _plans:
        _plans[key] = synthesize_stack(
            name, EXAMPLES / f"Pulumi.{name}.yaml", quiet=True, shared_outputs_file=outputs
        )
    return _plans[key]


def counts(plan: Plan) -> Counter[str]:
    return Counter(r.type for r in plan.resources)


@pytest.mark.parametrize(
    "name", sorted(p.name.split(".")[1] for p in EXAMPLES.glob("Pulumi.*.yaml"))
)
def test_every_example_stack_synthesizes_and_is_priced(name: str) -> None:
    assert stack_name_problem(name) is None
    plan = plan_of(name)
    assert plan.resources
    assert not plan.outputs["cost"].get("not_priced")


@pytest.mark.parametrize(
    "name", sorted(p.name.split(".")[1] for p in EXAMPLES.glob("Pulumi.*.yaml"))
)
def test_every_input_of_an_example_stack_is_classified_for_llmp_diff(name: str) -> None:
    from llmp.plan.leaves import leaves
    from spec.replacement import replacement_table

    plan = plan_of(name)
    found = {(r.type, path) for r in plan.resources if r.custom for path in leaves(r.inputs)}
    assert replacement_table().unclassified(sorted(found)) == []


def test_the_existing_vpc_stack_creates_no_vpc_subnet_route_or_nat() -> None:
    plan = plan_of("existing-vpc")
    assert not OWNED_BY_THE_NETWORK_TEAM & set(counts(plan))
    existing = example("existing-vpc")["llm-platform:network"]["existing"]
    (endpoint,) = plan.by_type("aws:ec2/vpcEndpoint:VpcEndpoint")
    assert endpoint.inputs["vpcId"] == existing["vpc_id"]
    assert endpoint.inputs["routeTableIds"] == existing["private_route_table_ids"]
    groups = plan.by_type("aws:ec2/securityGroup:SecurityGroup")
    assert {g.inputs["vpcId"] for g in groups} == {existing["vpc_id"]}
    gpu_subnet = existing["private_subnets"]["us-east-1a"]["id"]
    pools = [g for g in plan.by_type(NODE_GROUP) if g.name.startswith("gpu-")]
    assert [g.inputs["subnetIds"] for g in pools] == [[gpu_subnet]]
    (fsx,) = plan.by_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    assert fsx.inputs["subnetIds"] == gpu_subnet  # the GPU pool's subnet
    net = plan.outputs["adopted"]["network"]
    assert net["created"] == ["S3 gateway endpoint network-s3", "EFA security group network-efa"]
    assert net["vpc_id"] == existing["vpc_id"]
    assert "network" not in plan.outputs["cost"]["components"] or (
        plan.outputs["cost"]["components"]["network"]["usd_per_month"] == 0
    )
    assert plan.outputs["cost"]["not_billed"][0].startswith("network: the VPC")


def test_the_existing_vpc_stack_with_the_vpc_s_endpoint_creates_none() -> None:
    raw = example("existing-vpc")
    key = "llm-platform:network"
    raw[key] = merge(raw[key], {"existing": {"s3_gateway_endpoint_id": "vpce-0a1b2c3d4e5f60099"}})
    plan = synthesize("existing-vpc", raw)
    assert not plan.by_type("aws:ec2/vpcEndpoint:VpcEndpoint")
    assert (
        "the VPC's endpoint vpce-0a1b2c3d4e5f60099" in plan.outputs["adopted"]["network"]["s3_via"]
    )


def test_the_existing_cluster_stack_creates_no_cluster_and_only_the_missing_addons() -> None:
    plan = plan_of("existing-cluster")
    types = counts(plan)
    assert "aws:eks/cluster:Cluster" not in types
    # No envelope-encryption key of a cluster (the alert topics' key is monitoring's).
    assert [r.name for r in plan.by_type("aws:kms/key:Key")] == ["monitoring-alerts"]
    assert not OWNED_BY_THE_NETWORK_TEAM & set(types)
    eks_addons = sorted(r.inputs["addonName"] for r in plan.by_type(ADDON))
    storage_addons = {"aws-ebs-csi-driver"}  # the monitoring volumes' driver
    assert set(eks_addons) - storage_addons == {
        "eks-pod-identity-agent",
        "eks-node-monitoring-agent",
    }
    cluster = plan.outputs["adopted"]["cluster"]
    assert cluster["left_alone"] == [
        "vpc-cni v1.21.1-eksbuild.1 (the catalog pins v1.22.4-eksbuild.3): installed by "
        "the cluster's owner, left as it is"
    ]
    assert cluster["endpoint"] == "read from EKS at deploy time"
    assert cluster["node_role"] == "the stack's own"
    (group,) = plan.by_type(NODE_GROUP)
    assert group.inputs["clusterName"] == "platform-eks"
    assert group.inputs["nodeRoleArn"].endswith(":role/cluster-node")
    (provider,) = plan.by_type("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == "[secret]" or "stand-in" in json.dumps(provider.inputs)


def test_the_team_stack_reads_the_shared_stack_s_outputs_file() -> None:
    outputs_file = EXAMPLES / "shared.outputs.json"
    shared = json.loads(outputs_file.read_text())
    plan = plan_of("team", outputs_file)
    types = counts(plan)
    assert not OWNED_BY_THE_NETWORK_TEAM & set(types)
    assert "aws:eks/cluster:Cluster" not in types
    assert ADDON not in types  # the shared stack installs every managed add-on
    (group,) = plan.by_type(NODE_GROUP)
    assert group.inputs["clusterName"] == shared["cluster_name"]
    assert group.inputs["subnetIds"] == [shared["private_subnet_ids"]["us-east-1b"]]
    assert group.inputs["nodeRoleArn"] == shared["node_role_arn"]
    assert plan.outputs["adopted"]["network"]["vpc_id"] == shared["vpc_id"]
    assert plan.outputs["adopted"]["cluster"]["source"] == "acme/llm-platform/shared"


def test_the_team_stack_reads_the_shared_stack_s_plan_without_a_file() -> None:
    shared = plan_of("shared")
    plan = plan_of("team")
    (group,) = plan.by_type(NODE_GROUP)
    assert group.inputs["subnetIds"] == [shared.outputs["private_subnet_ids"]["us-east-1b"]]
    assert group.inputs["clusterName"] == shared.outputs["cluster_name"] == "shared-llm"


def test_the_shared_stack_exports_what_team_stacks_read() -> None:
    from spec.sharing import SHARED_CLUSTER_OUTPUTS, SHARED_NETWORK_OUTPUTS

    outputs = plan_of("shared").outputs
    assert set(SHARED_NETWORK_OUTPUTS + SHARED_CLUSTER_OUTPUTS) <= set(outputs)
    assert "eks-node-monitoring-agent" in outputs["cluster_addons"]


def test_a_team_stack_without_its_shared_stack_s_outputs_is_one_line(tmp_path: Path) -> None:
    lone = tmp_path / "Pulumi.team.yaml"
    lone.write_text((EXAMPLES / "Pulumi.team.yaml").read_text())
    with pytest.raises(BadInput) as info:
        synthesize_stack("team", lone, quiet=True)
    assert "--shared-outputs FILE" in str(info.value)
    assert "\n" not in str(info.value)


def test_outputs_that_lack_what_the_team_reads_are_named(tmp_path: Path) -> None:
    partial = tmp_path / "outputs.json"
    partial.write_text(json.dumps({"vpc_id": "vpc-1", "private_subnet_ids": {}}))
    with pytest.raises(BadInput) as info:
        synthesize_stack("team", EXAMPLES / "Pulumi.team.yaml", shared_outputs_file=partial)
    assert "lack cluster_name" in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        (
            {"network": {"existing": {"private_subnets": {"us-east-1a": {"cidr": "10.9.0.0/19"}}}}},
            "network.existing.private_subnets.us-east-1a.cidr",
        ),
        (
            {"network": {"existing": {"private_route_table_ids": []}}},
            "list the private subnets' route tables",
        ),
        (
            {"network": {"existing": {"private_subnets": {"us-east-1b": None}}}},
            "one subnet per AZ",
        ),
        (
            {
                "network": {"existing": None},
                "cluster": {"existing": {"name": "x", "security_group_id": "sg-0a1b2c3d4e5f60031"}},
            },
            "an adopted cluster lives in a VPC the stack does not create",
        ),
    ],
)
def test_bad_adoption_config_is_one_line(overrides: dict[str, Any], fragment: str) -> None:
    raw = example("existing-vpc")
    for section, value in overrides.items():
        key = f"llm-platform:{section}"
        raw[key] = merge(raw.get(key, {}), value)
    assert fragment in config_error(raw)


def test_dr_says_the_adopted_parts_must_exist_in_the_recovery_region_first() -> None:
    from llmp.dr.config import RecoveryOptions, build_recovery_config

    rc = build_recovery_config(
        example("existing-cluster"), RecoveryOptions("existing-cluster", "us-west-2")
    )
    actions = [n.text for n in rc.notes if n.level == "action"]
    assert any(a.startswith("adopted first: the VPC") and "us-west-2a" in a for a in actions)
    assert any(a.startswith("adopted first: EKS cluster platform-eks") for a in actions)
    assert sorted(rc.cfg.network.existing.private_subnets) == ["us-west-2a", "us-west-2b"]


CLUSTER_SCOPED_KINDS = {
    "Namespace",
    "PriorityClass",
    "PersistentVolume",
    "StorageClass",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "IngressClass",
    "ResourceFlavor",
    "ClusterQueue",
    "Cohort",
    "AdmissionCheck",
    "ProvisioningRequestConfig",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}
CLUSTER_WIDE_TYPES = {
    "kubernetes:helm.sh/v3:Release",
    "kubernetes:helm.sh/v4:Chart",
    "kubernetes:kustomize/v2:Directory",
    "kubernetes:yaml/v2:ConfigFile",
    "kubernetes:yaml/v2:ConfigGroup",
    ADDON,
}
"""Releases, manifests and EKS add-ons: each installs cluster-wide controllers or CRDs."""


def cluster_scoped(plan: Plan) -> set[tuple[str, str]]:
    """(kind, name) of every cluster-scoped Kubernetes object, and every cluster-wide
    release or add-on by its type and name."""
    out = set()
    for r in plan.resources:
        kind = r.type.rsplit(":", 1)[-1]
        if r.type.startswith("kubernetes:") and kind in CLUSTER_SCOPED_KINDS:
            out.add((kind, r.inputs["metadata"]["name"]))
        elif r.type in CLUSTER_WIDE_TYPES:
            name = r.inputs.get("name") or r.inputs.get("addonName") or r.name
            out.add((r.type, str(name)))
    return out


def test_two_team_stacks_on_one_shared_cluster_declare_no_cluster_scoped_object_twice() -> None:
    outputs_file = EXAMPLES / "shared.outputs.json"
    shared = plan_of("shared")
    code, vision = plan_of("team", outputs_file), plan_of("team-vision", outputs_file)
    ours, theirs, platform = cluster_scoped(code), cluster_scoped(vision), cluster_scoped(shared)
    assert ours and theirs
    assert not ours & theirs
    assert not (ours | theirs) & platform
    # A team stack installs nothing cluster-wide: no release, manifest, add-on or priority.
    for plan in (code, vision):
        assert not {t for t, _ in cluster_scoped(plan)} & CLUSTER_WIDE_TYPES
        assert not plan.by_type("kubernetes:scheduling.k8s.io/v1:PriorityClass")
    assert ("ClusterQueue", "vision-vision") in theirs
    assert ("ResourceFlavor", "vision-pool-h100") in theirs
    assert ("Namespace", "team-code") in ours  # the stack's name, where `team` is unset
    # What the shared stack owns: Kueue and its cpu flavor, the checks, the autoscaler.
    kinds = {k for k, _ in platform}
    assert {"PriorityClass", "ResourceFlavor", "AdmissionCheck"} <= kinds
    releases = {n for t, n in platform if t == "kubernetes:helm.sh/v3:Release"}
    assert {"kueue", "cluster-autoscaler", "aws-efa-k8s-device-plugin"} <= releases


def test_a_team_stack_s_queues_join_the_shared_stack_s_cohort_on_its_own_nodes() -> None:
    shared = plan_of("shared").outputs["scheduling"]
    plan = plan_of("team-vision")
    queues = {
        r.inputs["metadata"]["name"]: r.inputs["spec"]
        for r in plan.by_type("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")
    }
    assert set(queues) == {"vision-vision", "vision-spare"}
    for spec in queues.values():
        assert spec["cohortName"] == shared["cohort"]
        flavors = [f["name"] for f in spec["resourceGroups"][0]["flavors"]]
        assert flavors == [shared["cpu_flavor"], "vision-pool-h100"]
    checks = queues["vision-vision"]["admissionChecksStrategy"]["admissionChecks"]
    assert checks == [{"name": shared["provisioning_check"], "onFlavors": ["vision-pool-h100"]}]
    (flavor,) = plan.by_type("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor")
    (group,) = plan.by_type(NODE_GROUP)
    labels = flavor.inputs["spec"]["nodeLabels"]
    assert labels == {"llm-platform/pool": "h100", "llm-platform/team": "vision"}
    assert labels.items() <= group.inputs["labels"].items()
    (local,) = plan.by_type("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue")
    assert local.inputs["metadata"]["namespace"] == "vision-vision"
    assert local.inputs["spec"]["clusterQueue"] == "vision-vision"


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        (
            {"monitoring": {"enabled": True}},
            "monitoring.enabled = True: monitoring is cluster-wide",
        ),
        ({"shared_stack": {"team": "Code_Models"}}, "shared_stack.team"),
    ],
)
def test_a_team_stack_bringing_cluster_wide_parts_is_one_line(
    overrides: dict[str, Any], fragment: str
) -> None:
    raw = example("team-vision")
    for section, value in overrides.items():
        key = f"llm-platform:{section}"
        raw[key] = merge(raw.get(key, {}), value)
    assert fragment in config_error(raw)


def test_dr_of_a_team_stack_says_the_steps_through_the_shared_stack() -> None:
    from llmp.dr.config import DrError, RecoveryOptions, build_recovery_config

    with pytest.raises(DrError) as info:
        build_recovery_config(example("team"), RecoveryOptions("team", "us-west-2"))
    message = str(info.value)
    assert "\n" not in message
    assert "1. `llmp dr plan --from shared --region us-west-2`" in message
    assert "shared_stack.name acme/llm-platform/shared-dr" in message
    assert "3. `llmp synth team-dr`" in message
