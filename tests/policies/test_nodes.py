"""Node pool rules: EFA subnets and placement, taints, repair, AMI, IMDS, disks."""

from __future__ import annotations

import pytest

from tests.policies.conftest import hits, inputs, names, res

NODE_RULES = [
    "efa-single-subnet",
    "efa-placement-group",
    "gpu-node-taint",
    "node-repair-enabled",
    "accelerated-ami-type",
    "imdsv2-required",
    "imds-hop-limit",
    "ebs-encrypted",
]
NG = "aws:eks/nodeGroup:NodeGroup"
LT = "aws:ec2/launchTemplate:LaunchTemplate"


@pytest.mark.parametrize("stack", ["pretrain", "finetune", "inference"])
@pytest.mark.parametrize("rule", NODE_RULES)
def test_node_rule_is_quiet_on_the_stacks(plan, stack: str, rule: str) -> None:
    assert hits(plan(stack), rule) == []


def test_efa_single_subnet_fires_on_two_subnets(plan) -> None:
    p = plan()
    group = res(p, "gpu-h100-nodes", NG)
    group.inputs["subnetIds"].append("network-private-us-east-1b-id")
    assert names(hits(p, "efa-single-subnet")) == {"gpu-h100-nodes"}


def test_efa_single_subnet_ignores_non_efa_groups(plan) -> None:
    p = plan("inference")
    assert len(inputs(p, "gpu-l40s-nodes", NG)["subnetIds"]) == 3
    assert hits(p, "efa-single-subnet") == []


def test_placement_group_fires_on_efa_on_demand_without_one(plan) -> None:
    p = plan()
    del inputs(p, "gpu-h100-nodes", LT)["placement"]
    assert names(hits(p, "efa-placement-group")) == {"gpu-h100-nodes"}


def test_placement_group_not_needed_for_a_capacity_block(plan) -> None:
    p = plan()
    template = inputs(p, "gpu-h100-block-nodes", LT)
    assert "placement" not in template
    del template["capacityReservationSpecification"]
    assert hits(p, "efa-placement-group") == []  # still a capacity-block market
    del template["instanceMarketOptions"]
    assert names(hits(p, "efa-placement-group")) == {"gpu-h100-block-nodes"}


def test_gpu_taint_fires_without_the_taint(plan) -> None:
    p = plan("inference")
    inputs(p, "gpu-l40s-nodes", NG)["taints"] = []
    inputs(p, "gpu-h200-nodes", NG)["taints"][0]["effect"] = "PREFER_NO_SCHEDULE"
    assert names(hits(p, "gpu-node-taint")) == {"gpu-l40s-nodes", "gpu-h200-nodes"}


def test_gpu_taint_wants_neuron_for_trainium(plan) -> None:
    p = plan()
    group = inputs(p, "gpu-h100-nodes", NG)
    group["instanceTypes"] = ["trn1.32xlarge"]
    group["amiType"] = "AL2023_x86_64_NEURON"
    assert "aws.amazon.com/neuron" in hits(p, "gpu-node-taint")[0].message


def test_node_repair_fires_when_off_on_gpu_groups_only(plan) -> None:
    p = plan()
    inputs(p, "cluster-system", NG)["nodeRepairConfig"]["enabled"] = False
    assert hits(p, "node-repair-enabled") == []
    inputs(p, "gpu-h100-nodes", NG)["nodeRepairConfig"]["enabled"] = False
    assert names(hits(p, "node-repair-enabled")) == {"gpu-h100-nodes"}


def test_accelerated_ami_type_fires_on_the_cpu_ami(plan) -> None:
    p = plan()
    inputs(p, "gpu-h100-nodes", NG)["amiType"] = "AL2023_x86_64_STANDARD"
    assert names(hits(p, "accelerated-ami-type")) == {"gpu-h100-nodes"}


def test_imdsv2_fires_on_optional_tokens(plan) -> None:
    p = plan()
    inputs(p, "cluster-system", LT)["metadataOptions"]["httpTokens"] = "optional"
    assert names(hits(p, "imdsv2-required")) == {"cluster-system"}


def test_imds_hop_limit_fires_on_two(plan) -> None:
    p = plan()
    inputs(p, "cluster-system", LT)["metadataOptions"]["httpPutResponseHopLimit"] = 2
    assert names(hits(p, "imds-hop-limit")) == {"cluster-system"}


def test_ebs_encrypted_fires_on_a_plain_volume(plan) -> None:
    p = plan()
    inputs(p, "gpu-h100-nodes", LT)["blockDeviceMappings"][0]["ebs"]["encrypted"] = "false"
    assert names(hits(p, "ebs-encrypted")) == {"gpu-h100-nodes"}
