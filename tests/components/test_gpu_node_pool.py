"""GpuNodePool: EFA layout, one subnet, placement group, capacity types, taints, RAID0."""

from __future__ import annotations

import base64

import pytest

from components.gpu_node_pool import efa_network_interfaces
from components.managed_nodes import hugepages_script
from llmp.synth import autoname
from tests.conftest import inputs_of, with_section

LT = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
PG = "aws:ec2/placementGroup:PlacementGroup"


def interfaces(template: dict) -> list[tuple[int, int, str]]:
    return [
        (n["networkCardIndex"], n["deviceIndex"], n["interfaceType"])
        for n in template["networkInterfaces"]
    ]


def test_pretrain_template_has_32_efa_interfaces_in_the_current_layout(plans) -> None:
    template = inputs_of(plans("pretrain"), LT, "gpu-h100-nodes")
    layout = interfaces(template)
    assert layout[0] == (0, 0, "interface")
    assert layout[1] == (0, 1, "efa-only")
    assert layout[2:] == [(card, 0, "efa-only") for card in range(1, 32)]
    assert sum(kind == "efa-only" for _, _, kind in layout) == 32
    for nic in template["networkInterfaces"]:
        assert nic["securityGroups"] == ["sg-cluster-eks-cluster", "network-efa-id"]
        assert nic["deleteOnTermination"] == "true"


def test_efa_layout_follows_the_instance_type() -> None:
    p4d = efa_network_interfaces(4, ["sg"])
    assert [(n.network_card_index, n.device_index, n.interface_type) for n in p4d] == [
        (0, 0, "interface"),
        (0, 1, "efa-only"),
        (1, 0, "efa-only"),
        (2, 0, "efa-only"),
        (3, 0, "efa-only"),
    ]
    with pytest.raises(ValueError):
        efa_network_interfaces(0, ["sg"])


def test_efa_node_group_sits_in_one_subnet_with_a_cluster_placement_group(plans) -> None:
    plan = plans("pretrain")
    group = inputs_of(plan, NODE_GROUP, "gpu-h100-nodes")
    assert group["subnetIds"] == ["network-private-us-east-1a-id"]
    (placement,) = plan.by_type(PG)
    assert placement.inputs["strategy"] == "cluster"
    template = inputs_of(plan, LT, "gpu-h100-nodes")
    assert template["placement"]["groupName"] == autoname(placement.name)
    assert "instanceMarketOptions" not in template


def test_capacity_block_pool_targets_its_reservation_without_a_placement_group(plans) -> None:
    plan = plans("pretrain")
    template = inputs_of(plan, LT, "gpu-h100-block-nodes")
    assert template["instanceMarketOptions"] == {"marketType": "capacity-block"}
    target = template["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": "cr-0a1b2c3d4e5f60718"}
    assert "placement" not in template
    group = inputs_of(plan, NODE_GROUP, "gpu-h100-block-nodes")
    assert group["capacityType"] == "CAPACITY_BLOCK"
    assert group["subnetIds"] == ["network-private-us-east-1a-id"]


def test_capacity_block_instance_type_is_in_the_template_not_the_node_group(plans) -> None:
    # EKS refuses a capacity-block node group with instanceTypes: the launch template
    # names the type (EKS user guide; terraform-aws-eks eks-managed-node-group).
    plan = plans("pretrain")
    assert inputs_of(plan, LT, "gpu-h100-block-nodes")["instanceType"] == "p5.48xlarge"
    assert "instanceTypes" not in inputs_of(plan, NODE_GROUP, "gpu-h100-block-nodes")
    # Every other pool keeps the type on the node group and none in its template.
    assert inputs_of(plan, NODE_GROUP, "gpu-h100-nodes")["instanceTypes"] == ["p5.48xlarge"]
    assert "instanceType" not in inputs_of(plan, LT, "gpu-h100-nodes")


def test_on_demand_reservation_is_targeted_without_the_block_market(synth) -> None:
    plan = synth(
        with_section(
            "pretrain",
            "node_pools",
            {"h100": {"capacity_reservation_id": "cr-0123456789abcdef0", "placement_group": None}},
        )
    )
    template = inputs_of(plan, LT, "gpu-h100-nodes")
    assert "instanceMarketOptions" not in template
    assert template["capacityReservationSpecification"]["capacityReservationTarget"] == {
        "capacityReservationId": "cr-0123456789abcdef0"
    }
    assert not plan.by_type(PG)


def test_placement_group_can_be_switched_off(synth) -> None:
    plan = synth(with_section("pretrain", "node_pools", {"h100": {"placement_group": False}}))
    assert not plan.by_type(PG)
    assert "placement" not in inputs_of(plan, LT, "gpu-h100-nodes")


def test_gpu_nodes_are_tainted_labelled_repaired_and_use_the_nvidia_ami(plans) -> None:
    group = inputs_of(plans("pretrain"), NODE_GROUP, "gpu-h100-nodes")
    assert group["amiType"] == "AL2023_x86_64_NVIDIA"
    assert group["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert group["labels"]["nvidia.com/gpu"] == "true"
    assert group["labels"]["llm-platform/pool"] == "h100"
    assert group["labels"]["llm-platform/efa"] == "true"
    assert group["nodeRepairConfig"] == {"enabled": True}
    assert group["updateConfig"] == {"maxUnavailable": 1}
    assert group["scalingConfig"] == {"minSize": 16, "desiredSize": 16, "maxSize": 16}
    assert group["capacityType"] == "ON_DEMAND"
    assert group["launchTemplate"] == {"id": "gpu-h100-nodes-id", "version": "1"}


def test_local_nvme_is_assembled_as_raid0_by_nodeadm(plans) -> None:
    template = inputs_of(plans("pretrain"), LT, "gpu-h100-nodes")
    user_data = base64.b64decode(template["userData"]).decode()
    assert "Content-Type: application/node.eks.aws" in user_data
    assert "strategy: RAID0" in user_data
    assert user_data.startswith("MIME-Version: 1.0")


def test_efa_nodes_reserve_at_least_the_fabric_tests_huge_pages(plans) -> None:
    template = inputs_of(plans("pretrain"), LT, "gpu-h100-nodes")
    user_data = base64.b64decode(template["userData"]).decode()
    # 5120 MiB of 2 MiB pages: what the fabric test requests as hugepages-2Mi.
    assert 'Content-Type: text/x-shellscript; charset="us-ascii"' in user_data
    assert hugepages_script(2560) in user_data
    assert user_data.rstrip().endswith("--LLMP--")
    assert user_data.count("--LLMP\n") == 2
    inference = inputs_of(plans("inference"), LT, "gpu-l40s-nodes")
    assert "nr_hugepages" not in base64.b64decode(inference["userData"]).decode()


def test_templates_encrypt_the_root_volume_and_require_imdsv2(plans) -> None:
    plan = plans("pretrain")
    for template in plan.by_type(LT):
        inputs = template.inputs
        (disk,) = inputs["blockDeviceMappings"]
        assert disk["ebs"]["encrypted"] == "true"
        assert disk["ebs"]["volumeType"] == "gp3"
        assert inputs["metadataOptions"]["httpTokens"] == "required"
        assert inputs["metadataOptions"]["httpPutResponseHopLimit"] == 1
        kinds = {spec["resourceType"] for spec in inputs["tagSpecifications"]}
        assert kinds == {"instance", "volume", "network-interface"}
        for spec in inputs["tagSpecifications"]:
            assert spec["tags"]["cost-center"] == "cc-4100"
            assert spec["tags"]["stack"] == "pretrain"


def test_spot_pool_in_finetune(plans) -> None:
    group = inputs_of(plans("finetune"), NODE_GROUP, "gpu-a100-spot-nodes")
    assert group["capacityType"] == "SPOT"
    assert group["instanceTypes"] == ["p4de.24xlarge"]
    assert group["subnetIds"] == ["network-private-us-west-2b-id"]


def test_inference_pools_spread_over_every_az_without_efa(plans) -> None:
    plan = plans("inference")
    for pool in ("l40s", "h200"):
        group = inputs_of(plan, NODE_GROUP, f"gpu-{pool}-nodes")
        assert len(group["subnetIds"]) == 3
        assert group["labels"]["llm-platform/efa"] == "false"
        assert "networkInterfaces" not in inputs_of(plan, LT, f"gpu-{pool}-nodes")
    assert not plan.by_type(PG)


@pytest.mark.parametrize(
    ("reserved", "after", "written"),
    [
        (21121, 21121, False),  # the EFA installer's reservation on a p5 (42242Mi): kept
        (2560, 2560, False),
        (0, 2560, True),  # nothing reserved: raised, and persisted for later boots
        (1000, 2560, True),
    ],
)
def test_huge_pages_are_raised_to_the_minimum_and_never_lowered(
    tmp_path, reserved: int, after: int, written: bool
) -> None:
    import os
    import subprocess

    proc = tmp_path / "nr_hugepages"
    proc.write_text(f"{reserved}\n")
    conf = tmp_path / "90-llm-platform-hugepages.conf"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # `sysctl --load FILE` applies the file: here, into the stand-in for /proc.
    sysctl = bin_dir / "sysctl"
    sysctl.write_text(f'#!/bin/bash\nsed -n "s/^vm.nr_hugepages = //p" "$2" > {proc}\n')
    sysctl.chmod(0o755)
    script = tmp_path / "hugepages.sh"
    script.write_text(hugepages_script(2560, conf=str(conf), proc=str(proc)))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run(["bash", str(script)], check=True, env=env, timeout=30)
    assert int(proc.read_text()) == after
    assert conf.exists() is written
