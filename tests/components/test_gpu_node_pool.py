"""GpuNodePool: EFA layout, one subnet, placement group, capacity types, taints, RAID0."""

from __future__ import annotations

import base64
from fractions import Fraction

import pytest

from components.gpu_node_pool import GpuNodePool, GpuNodePoolArgs, efa_network_interfaces
from components.managed_nodes import PoolSize, hugepages_script
from llmp.plan.synth import autoname, run
from manifests import kueue
from manifests.jobs import pytorchjob
from manifests.jobs.dcgm_diag import DcgmDiagSpec, dcgm_diag_manifests
from manifests.jobs.fabric import FabricSpec, fabric_manifests
from spec.catalog import catalog
from spec.labels import POOL_LABEL
from spec.stackfile import load_config
from tests.conftest import inputs_of, raw_stack, with_section

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


# --- elastic pools: the Auto Scaling group's tags for the Cluster Autoscaler -----------------

TAG = "aws:autoscaling/tag:Tag"
TEMPLATE = "k8s.io/cluster-autoscaler/node-template"


def asg_tags(plan, pool: str) -> dict[str, str]:
    """The tags `pool`'s GpuNodePool puts on its node group's Auto Scaling group."""
    out = {}
    for r in plan.by_type(TAG):
        if r.parent.endswith(f"::gpu-{pool}"):
            assert r.inputs["tag"]["key"] not in out
            out[r.inputs["tag"]["key"]] = r.inputs["tag"]["value"]
    return out


def test_an_elastic_pool_tags_its_auto_scaling_group_for_scale_from_zero(plans) -> None:
    plan = plans("finetune")
    assert asg_tags(plan, "h100") == {
        "llm-platform/elastic": "true",
        f"{TEMPLATE}/label/llm-platform/accelerator": "H100",
        f"{TEMPLATE}/label/llm-platform/capacity-type": "on_demand",
        f"{TEMPLATE}/label/llm-platform/checkpointing": "false",
        f"{TEMPLATE}/label/llm-platform/efa": "true",
        f"{TEMPLATE}/label/llm-platform/pool": "h100",
        f"{TEMPLATE}/label/nvidia.com/gpu": "true",
        f"{TEMPLATE}/taint/nvidia.com/gpu": "true:NoSchedule",
        f"{TEMPLATE}/resources/ephemeral-storage": "500Gi",
        f"{TEMPLATE}/resources/hugepages-2Mi": "5120Mi",
        f"{TEMPLATE}/resources/nvidia.com/gpu": "8",
        f"{TEMPLATE}/resources/vpc.amazonaws.com/efa": "32",
    }
    spot = asg_tags(plan, "a100-spot")
    assert spot[f"{TEMPLATE}/label/llm-platform/capacity-type"] == "spot"
    assert spot[f"{TEMPLATE}/label/llm-platform/checkpointing"] == "true"
    assert spot[f"{TEMPLATE}/resources/vpc.amazonaws.com/efa"] == "4"  # p4de


def test_the_tags_name_the_node_groups_own_auto_scaling_group(plans) -> None:
    plan = plans("finetune")
    group = plan.one(NODE_GROUP, "gpu-h100-nodes")
    tags = [r for r in plan.by_type(TAG) if r.parent.endswith("::gpu-h100")]
    assert tags
    for r in tags:
        # the node group's output resources[0].autoscalingGroups[0].name, as the mock names it
        assert r.inputs["autoscalingGroupName"] == "eks-gpu-h100-nodes-asg"
        assert group.urn in r.dependencies
        # they describe the group to the autoscaler; the launch template tags the instances
        assert r.inputs["tag"]["propagateAtLaunch"] is False


def test_a_fixed_pool_tags_nothing(plans, synth) -> None:
    # pretrain's two GPU pools are fixed: only its CPU pool (always elastic) tags its group.
    tagged = {r.parent.rsplit("::", 1)[1] for r in plans("pretrain").by_type(TAG)}
    assert tagged == {"cpu-data"}
    raw = with_section("finetune", "node_pools", {"h100": {"elastic": False}})
    plan = synth(raw)
    assert asg_tags(plan, "h100") == {}
    assert asg_tags(plan, "a100-spot")


def test_inference_pools_without_efa_or_huge_pages_advertise_neither(plans) -> None:
    tags = asg_tags(plans("inference"), "l40s")
    assert tags[f"{TEMPLATE}/resources/nvidia.com/gpu"] == "4"
    assert tags[f"{TEMPLATE}/label/llm-platform/efa"] == "false"
    assert f"{TEMPLATE}/resources/vpc.amazonaws.com/efa" not in tags
    assert f"{TEMPLATE}/resources/hugepages-2Mi" not in tags


def _simulated_node(tags: dict[str, str], instance_type: str, zone: str) -> dict:
    """The node the Cluster Autoscaler builds for a group at zero (aws_manager.go
    buildNodeFromTemplate at the pinned tag): capacity from the instance type, generic
    labels, then the node-template tags."""
    itype = catalog().instance(instance_type)
    capacity: dict[str, Fraction] = {
        "pods": Fraction(110),
        "cpu": Fraction(itype.vcpus),
        "memory": Fraction(itype.memory_gib * 2**30),
        "nvidia.com/gpu": Fraction(itype.gpu_count if itype.accelerator.kind == "nvidia" else 0),
    }
    labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/zone": zone,
    }
    taints = []
    for key, value in tags.items():
        if key.startswith(f"{TEMPLATE}/resources/"):
            capacity[key.removeprefix(f"{TEMPLATE}/resources/")] = kueue.quantity(value)
        elif key.startswith(f"{TEMPLATE}/label/"):
            labels[key.removeprefix(f"{TEMPLATE}/label/")] = value
        elif key.startswith(f"{TEMPLATE}/taint/"):
            taint_value, effect = value.split(":")
            taints.append((key.removeprefix(f"{TEMPLATE}/taint/"), taint_value, effect))
    return {"capacity": capacity, "labels": labels, "taints": taints}


def _fits(pod: dict, node: dict) -> list[str]:
    """Why the scheduler would refuse `pod` on `node` (empty: it fits)."""
    why = []
    for resource, amount in kueue.pod_requests(pod).items():
        if amount > node["capacity"].get(resource, 0):
            why.append(f"{resource} {amount} > {node['capacity'].get(resource, 0)}")
    labels = node["labels"]
    for key, value in (pod.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            why.append(f"nodeSelector {key}={value}")
    required = (
        ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []

    def matches(expr: dict) -> bool:
        op, value = expr["operator"], labels.get(expr["key"])
        if op == "In":
            return value in expr["values"]
        if op == "NotIn":
            return value not in expr["values"]
        return (value is not None) == (op == "Exists")

    if required and not any(all(matches(e) for e in t["matchExpressions"]) for t in required):
        why.append("required node affinity")
    for key, value, effect in node["taints"]:
        tolerated = any(
            t.get("key") in (key, None)
            and (t.get("operator") == "Exists" or t.get("value") == value)
            and t.get("effect") in (effect, None)
            for t in pod.get("tolerations") or []
        )
        if not tolerated:
            why.append(f"taint {key}={value}:{effect}")
    return why


def _gpu_workloads(instance_type: str, pool: str, nodes: int) -> dict[str, dict]:
    """What the builders render for a pool: the PyTorchJob, and on NVIDIA pools the DCGM
    diagnostic and (where the catalog has a threshold) the 2-node fabric test."""
    out = {
        "pytorchjob": pytorchjob.build(
            name="train",
            namespace="team",
            image="registry.example.com/trainer:1.0",
            command=["train.py"],
            instance_type=instance_type,
            node_pool=pool,
            nodes_min=1,
            nodes_max=nodes,
            checkpoint_dir="/fsx/checkpoints/train",
            queue_name=kueue.LOCAL_QUEUE,
        )
    }
    if catalog().instance(instance_type).accelerator.kind == "nvidia":
        (out["dcgm-diag"],) = dcgm_diag_manifests(
            DcgmDiagSpec(
                instance_type=instance_type,
                node_pool=pool,
                namespace="team",
                nodes=nodes,
                queue_name=kueue.LOCAL_QUEUE,
            )
        )
        if instance_type in catalog().fabric_acceptance.thresholds and nodes >= 2:
            _, out["fabric"] = fabric_manifests(
                FabricSpec(
                    instance_type=instance_type,
                    node_pool=pool,
                    namespace="team",
                    nodes=nodes,
                    queue_name=kueue.LOCAL_QUEUE,
                )
            )
    return out


def test_every_training_pod_fits_the_node_an_elastic_pool_is_at_zero(plans) -> None:
    """The journey of a job on a pool at zero nodes: the autoscaler scales up only for pods
    that fit the node it simulates from the group's tags, so every pod the builders render
    for finetune's pools must fit it, EFA interfaces and huge pages included."""
    cfg = load_config(raw_stack("finetune"))
    plan = plans("finetune")
    checked = 0
    for name, pool in cfg.node_pools.items():
        assert pool.elastic, name
        node = _simulated_node(asg_tags(plan, name), pool.instance_type, cfg.pool_zones(pool)[0])
        for kind, manifest in _gpu_workloads(pool.instance_type, name, 2).items():
            for ps in kueue.pod_sets(manifest):
                assert _fits(ps.template["spec"], node) == [], (name, kind, ps.name)
                checked += 1
    assert checked == 6  # per pool: the PyTorchJob's workers, the DCGM diagnostic, the fabric


def test_every_model_server_fits_the_node_its_elastic_pool_is_at_zero(plans) -> None:
    """Serving's journey: KEDA adds a replica, it is pending, and the autoscaler adds a node
    only if the replica fits the node the pool's tags describe."""
    cfg = load_config(raw_stack("inference"))
    plan = plans("inference")
    servers = [m for m in plan.manifests() if m["kind"] == "Deployment"]
    checked = 0
    for manifest in servers:
        pod = manifest["spec"]["template"]["spec"]
        terms = (
            ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or {}
        ).get("nodeSelectorTerms") or []
        pools = {
            value
            for term in terms
            for expr in term["matchExpressions"]
            if expr["key"] == POOL_LABEL
            for value in expr["values"]
        }
        if not pools:
            continue  # the gateway and other Deployments of the system pool
        (name,) = pools
        pool = cfg.node_pools[name]
        for zone in cfg.pool_zones(pool):
            node = _simulated_node(asg_tags(plan, name), pool.instance_type, zone)
            assert _fits(pod, node) == [], (manifest["metadata"]["name"], zone)
        checked += 1
    assert checked == len(cfg.serving.models) == 2


def test_without_the_device_tags_a_fabric_pod_would_never_scale_a_pool_up(plans) -> None:
    tags = asg_tags(plans("finetune"), "h100")
    workloads = _gpu_workloads("p5.48xlarge", "h100", 2)
    (fabric,) = kueue.pod_sets(workloads["fabric"])
    bare = {k: v for k, v in tags.items() if "/resources/" not in k}
    why = _fits(fabric.template["spec"], _simulated_node(bare, "p5.48xlarge", "us-west-2a"))
    assert any(w.startswith("vpc.amazonaws.com/efa") for w in why), why
    assert any(w.startswith("hugepages-2Mi") for w in why), why
    # without the pool label, no job's node affinity (its Kueue flavor) selects the group
    unlabelled = {k: v for k, v in tags.items() if not k.endswith("/label/llm-platform/pool")}
    (worker,) = [ps for ps in kueue.pod_sets(workloads["pytorchjob"]) if ps.name == "worker"]
    why = _fits(worker.template["spec"], _simulated_node(unlabelled, "p5.48xlarge", "us-west-2a"))
    assert "required node affinity" in why


def alone_pool_args(**changes: object) -> GpuNodePoolArgs:
    """A pool's args as a test builds it alone, without a stack: `changes` replace fields."""
    fields: dict[str, object] = {
        "pool_name": "gpu",
        "instance_type": "p5.48xlarge",
        "size": PoolSize(min_size=0, desired_size=0, max_size=2),
        "cluster_name": "c",
        "cluster_version": "1.35",
        "cluster_security_group_id": "sg-c",
        "node_role_arn": "arn:aws:iam::123456789012:role/node",
        "subnet_ids": ["subnet-a"],
        "efa_security_group_id": "sg-efa",
        "wait_for": [],
        "tags": {},
        **changes,
    }
    return GpuNodePoolArgs(**fields)  # type: ignore[arg-type]


def test_a_neuron_pool_advertises_its_devices_and_taint() -> None:
    def program() -> None:
        GpuNodePool(
            "gpu-trn",
            alone_pool_args(
                pool_name="trn",
                instance_type="trn1.32xlarge",
                size=PoolSize(min_size=0, desired_size=0, max_size=4),
                elastic=True,
                efa=True,
                hugepages_2mi_mib=5120,
            ),
        )

    tags = asg_tags(run("alone", "us-east-1", program), "trn")
    assert tags[f"{TEMPLATE}/resources/aws.amazon.com/neuron"] == "16"
    assert tags[f"{TEMPLATE}/taint/aws.amazon.com/neuron"] == "true:NoSchedule"
    assert tags[f"{TEMPLATE}/resources/vpc.amazonaws.com/efa"] == "8"
    assert f"{TEMPLATE}/resources/nvidia.com/gpu" not in tags


def test_an_elastic_pool_needs_room_to_scale() -> None:
    fixed = alone_pool_args(
        pool_name="fixed", size=PoolSize(min_size=2, desired_size=2, max_size=2), elastic=True
    )

    def program() -> None:
        GpuNodePool("gpu", fixed)

    with pytest.raises(ValueError, match="min_size below max_size"):
        run("alone", "us-east-1", program)
