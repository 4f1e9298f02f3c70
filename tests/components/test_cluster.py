"""Cluster: encryption, logs, endpoint, access entries, add-ons and their ordering."""

from __future__ import annotations

import json

from spec.catalog import catalog
from tests.conftest import inputs_of, with_section

CLUSTER = "aws:eks/cluster:Cluster"
ADDON = "aws:eks/addon:Addon"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"


def test_secrets_are_envelope_encrypted_with_a_rotating_key(plans) -> None:
    plan = plans("pretrain")
    key = plan.one("aws:kms/key:Key", "cluster-secrets")
    assert key.inputs["enableKeyRotation"] is True
    eks = inputs_of(plan, CLUSTER, "cluster-eks")
    encryption = eks["encryptionConfig"]
    assert encryption["resources"] == ["secrets"]
    assert encryption["provider"]["keyArn"].endswith(f":key/{key.name}")
    assert key.urn in plan.one(CLUSTER, "cluster-eks").dependencies


def test_version_logs_and_private_endpoint(plans) -> None:
    eks = inputs_of(plans("pretrain"), CLUSTER, "cluster-eks")
    assert eks["version"] == catalog().eks.default_version
    assert "audit" in eks["enabledClusterLogTypes"]
    assert eks["vpcConfig"]["endpointPrivateAccess"] is True
    assert eks["vpcConfig"]["endpointPublicAccess"] is False
    assert "publicAccessCidrs" not in eks["vpcConfig"]
    assert eks["accessConfig"]["authenticationMode"] == "API"
    assert eks["bootstrapSelfManagedAddons"] is False
    assert eks["deletionProtection"] is True


def test_log_group_exists_before_the_cluster_with_retention(plans) -> None:
    plan = plans("pretrain")
    group = plan.one("aws:cloudwatch/logGroup:LogGroup", "cluster-logs")
    assert group.inputs["name"] == "/aws/eks/llm-platform-pretrain/cluster"
    assert group.inputs["retentionInDays"] == 90
    assert group.urn in plan.one(CLUSTER, "cluster-eks").dependencies


def test_public_endpoint_is_restricted_to_configured_cidrs(synth) -> None:
    plan = synth(
        with_section(
            "pretrain",
            "cluster",
            {"endpoint_public_access": True, "public_access_cidrs": ["203.0.113.0/24"]},
        )
    )
    vpc = inputs_of(plan, CLUSTER, "cluster-eks")["vpcConfig"]
    assert vpc["endpointPublicAccess"] is True
    assert vpc["publicAccessCidrs"] == ["203.0.113.0/24"]


def test_admin_roles_get_access_entries_with_cluster_admin(synth) -> None:
    role = "arn:aws:iam::123456789012:role/platform-admin"
    plan = synth(with_section("pretrain", "cluster", {"admin_role_arns": [role]}))
    (entry,) = plan.by_type("aws:eks/accessEntry:AccessEntry")
    assert entry.inputs["principalArn"] == role
    (assoc,) = plan.by_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
    assert assoc.inputs["policyArn"].endswith("/AmazonEKSClusterAdminPolicy")
    assert assoc.inputs["accessScope"] == {"type": "cluster"}
    assert entry.urn in assoc.dependencies


def test_core_addons_are_pinned_from_the_catalog(plans) -> None:
    plan = plans("pretrain")
    pins = catalog().eks.versions[catalog().eks.default_version].addons
    # The cluster's own add-ons (monitoring's EBS CSI driver is pinned in its own section).
    addons = {
        a.inputs["addonName"]: a.inputs
        for a in plan.by_type(ADDON)
        if a.name.startswith("cluster-")
    }
    gpu_pins = catalog().gpu_node_addons[catalog().eks.default_version]
    assert set(addons) == set(pins) | set(gpu_pins)  # pretrain has GPU pools
    for name, inputs in addons.items():
        assert inputs["addonVersion"] == (pins.get(name) or gpu_pins[name]).version


def test_stacks_with_gpu_pools_run_the_node_monitoring_agent_on_gpu_nodes_too(
    plans, synth
) -> None:
    # Node auto-repair acts on GPU faults only through the agent's AcceleratedHardwareReady
    # condition; its DCGM host engine must tolerate the accelerator taints to run there.
    for stack in ("pretrain", "finetune", "inference"):
        plan = plans(stack)
        agent = inputs_of(plan, ADDON, "cluster-eks-node-monitoring-agent")
        pin = catalog().gpu_node_addons["1.35"]["eks-node-monitoring-agent"]
        assert agent["addonVersion"] == pin.version
        tolerations = json.loads(agent["configurationValues"])["dcgmAgent"]["tolerations"]
        assert {t["key"] for t in tolerations} == {"nvidia.com/gpu", "aws.amazon.com/neuron"}
        system = plan.one(NODE_GROUP, "cluster-system").urn
        depends = plan.one(ADDON, "cluster-eks-node-monitoring-agent").dependencies
        assert system in depends
    cpu_only = synth(
        {
            "aws:region": "us-east-1",
            "llm-platform:tags": {"team": "t", "cost_center": "c"},
            "llm-platform:network": {"availability_zones": ["us-east-1a", "us-east-1b"]},
        }
    )
    names = {a.inputs["addonName"] for a in cpu_only.by_type(ADDON)}
    assert "eks-node-monitoring-agent" not in names and "vpc-cni" in names


def test_vpc_cni_uses_its_own_pod_identity_role(plans) -> None:
    plan = plans("pretrain")
    cni = inputs_of(plan, ADDON, "cluster-vpc-cni")
    (assoc,) = cni["podIdentityAssociations"]
    assert assoc["serviceAccount"] == "aws-node"
    assert assoc["roleArn"].endswith("/cluster-vpc-cni")
    role = inputs_of(plan, "aws:iam/role:Role", "cluster-vpc-cni")
    trust = json.loads(role["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    node_policies = {
        r.inputs["policyArn"].rsplit("/", 1)[1]
        for r in plan.by_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if r.name.startswith("cluster-node-")
    }
    assert "AmazonEKS_CNI_Policy" not in node_policies


def test_every_node_group_waits_for_vpc_cni_and_coredns_waits_for_nodes(plans) -> None:
    plan = plans("pretrain")
    cni = plan.one(ADDON, "cluster-vpc-cni").urn
    for group in plan.by_type(NODE_GROUP):
        assert cni in group.dependencies, group.name
    coredns = plan.one(ADDON, "cluster-coredns")
    system = plan.one(NODE_GROUP, "cluster-system")
    assert system.urn in coredns.dependencies
    # The reverse would deadlock: vpc-cni must not wait for any node group.
    assert not any(
        g.urn in plan.one(ADDON, "cluster-vpc-cni").dependencies
        for g in plan.by_type(NODE_GROUP)
    )


def test_system_pool_is_cpu_and_untainted(plans) -> None:
    group = inputs_of(plans("pretrain"), NODE_GROUP, "cluster-system")
    assert group["amiType"] == "AL2023_x86_64_STANDARD"
    assert group["instanceTypes"] == ["m7i.4xlarge"]
    assert group["scalingConfig"] == {"minSize": 2, "desiredSize": 3, "maxSize": 6}
    assert not group.get("taints")


def test_kubernetes_provider_is_built_from_cluster_outputs(plans) -> None:
    plan = plans("pretrain")
    (provider,) = plan.by_type("pulumi:providers:kubernetes")
    kubeconfig = json.loads(provider.inputs["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == (
        "https://cluster-eks.mock.us-east-1.eks.amazonaws.com"
    )
    user = kubeconfig["users"][0]["user"]
    assert "token" not in user
    assert user["exec"]["args"][:4] == [
        "eks",
        "get-token",
        "--cluster-name",
        "llm-platform-pretrain",
    ]
    assert plan.one(CLUSTER, "cluster-eks").urn in provider.dependencies
    # Provider inputs travel as strings on the wire.
    assert provider.inputs["enableServerSideApply"] == "true"


def test_vpc_cni_enforces_network_policies_with_the_builds_own_agent(plans) -> None:
    cni = inputs_of(plans("pretrain"), ADDON, "cluster-vpc-cni")
    # Exactly this: no nodeAgent image, so a build of vpc-cni 1.23 brings the network
    # policy agent 1.4.1 it must run with (catalog, eks.versions."1.35".addons.vpc-cni).
    assert json.loads(cni["configurationValues"]) == {"enableNetworkPolicy": "true"}
