"""CpuNodePool: the pretrain stack's `data` pool as the plan declares it (a tainted CPU node
group on the standard AMI, autoscaled from zero), the Cluster Autoscaler finding it and
allowed to resize it, Kueue admitting a data job onto it in the tenant's `cpu` flavor, its
cost lines, and the recovery stack re-creating it."""

from __future__ import annotations

import io
from typing import Any

import pytest

from components.cpu_node_pool import CpuNodePool, CpuNodePoolArgs
from components.managed_nodes import CA_ENABLED_TAG, ELASTIC_TAG, NODE_TEMPLATE, PoolSize
from llmp.plan.synth import run
from manifests import kueue
from spec.catalog import catalog
from spec.labels import CPU_POOL_TAINT, POOL_LABEL
from spec.stackfile import load_config
from tests.conftest import raw_stack

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
ASG_TAG = "aws:autoscaling/tag:Tag"
GROUP = "cpu-data-nodes"
TENANT = "foundation"


def _group(plan: Any) -> Any:
    return plan.one(NODE_GROUP, GROUP)


def _asg_tags(plan: Any) -> dict[str, str]:
    tags = [r for r in plan.by_type(ASG_TAG) if r.parent.endswith("::cpu-data")]
    assert {r.inputs["autoscalingGroupName"] for r in tags} == {f"eks-{GROUP}-asg"}
    return {r.inputs["tag"]["key"]: r.inputs["tag"]["value"] for r in tags}


def test_the_data_pool_is_a_tainted_cpu_node_group_autoscaled_from_zero(plans) -> None:
    plan = plans("pretrain")
    group = _group(plan).inputs
    assert group["instanceTypes"] == ["m7i.4xlarge"]
    assert group["amiType"] == catalog().cpu_ami_type == "AL2023_x86_64_STANDARD"
    assert group["capacityType"] == "ON_DEMAND"
    assert group["scalingConfig"] == {"minSize": 0, "desiredSize": 0, "maxSize": 8}
    assert group["labels"][POOL_LABEL] == "data"
    assert group["taints"] == [{"key": CPU_POOL_TAINT, "value": "data", "effect": "NO_SCHEDULE"}]
    assert CPU_POOL_TAINT == "llm-platform/cpu-pool"  # what the RayJob builder tolerates
    # Every AZ of the network: CPU work needs no single-AZ fabric.
    assert len(group["subnetIds"]) == 3
    assert group["nodeRepairConfig"] == {"enabled": True}
    # The same node role as the system pool's and the GPU pools'.
    assert group["nodeRoleArn"] == plan.one(NODE_GROUP, "cluster-system").inputs["nodeRoleArn"]
    assert group["nodeRoleArn"] == plan.one(NODE_GROUP, "gpu-h100-nodes").inputs["nodeRoleArn"]
    # Nodes join once vpc-cni and kube-proxy are active.
    deps = _group(plan).dependencies
    assert any(d.endswith("::cluster-vpc-cni") for d in deps)
    assert any(d.endswith("::cluster-kube-proxy") for d in deps)
    assert plan.outputs["cpu_pools"] == {"data": GROUP}


def test_its_launch_template_is_the_floor_every_pool_gets(plans) -> None:
    template = plans("pretrain").one(TEMPLATE, GROUP).inputs
    assert template["metadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpTokens": "required",
        "httpPutResponseHopLimit": 1,
    }
    (disk,) = template["blockDeviceMappings"]
    assert disk["ebs"] == {
        "volumeSize": 200,
        "volumeType": "gp3",
        "encrypted": "true",
        "deleteOnTermination": "true",
    }
    assert "imageId" not in template and "userData" not in template  # EKS's AL2023 AMI
    for spec in template["tagSpecifications"]:
        assert spec["tags"][POOL_LABEL] == "data"


def test_the_autoscaler_discovers_it_may_resize_it_and_scales_it_from_zero(plans) -> None:
    from tests.components.test_node_autoscaler import RESIZE, _allowed, _policy, _release

    plan = plans("pretrain")
    cluster = plan.outputs["cluster_name"]
    tags = _asg_tags(plan)
    # EKS puts its two discovery tags on every managed node group's ASG; ours is the third.
    on_group = {CA_ENABLED_TAG: "true", f"k8s.io/cluster-autoscaler/{cluster}": "owned", **tags}
    discovery = _release(plan).inputs["values"]["autoDiscovery"]["tags"]
    for wanted in discovery:
        key, _, value = wanted.partition("=")
        assert key in on_group and (not value or on_group[key] == value), wanted
    policy = _policy(plan)
    for action in RESIZE:
        assert _allowed(policy, action, on_group), action
    # At zero nodes it simulates one from these: a pod that selects the pool and tolerates
    # its taint fits the simulated node; the labels and taint are the node group's own.
    group = _group(plan).inputs
    labels = {
        k.removeprefix(f"{NODE_TEMPLATE}/label/"): v
        for k, v in tags.items()
        if k.startswith(f"{NODE_TEMPLATE}/label/")
    }
    assert labels == group["labels"]
    assert tags[f"{NODE_TEMPLATE}/taint/{CPU_POOL_TAINT}"] == "data:NoSchedule"
    assert tags[f"{NODE_TEMPLATE}/resources/ephemeral-storage"] == "200Gi"
    assert tags[ELASTIC_TAG] == "true"


def _data_job(workers: int, cpu: str, memory: str) -> list[kueue.PodSet]:
    """A Ray data job's pod sets as Kueue sees them: the head on the system pool, the
    workers on the data pool (selected by the pool label, the taint tolerated)."""
    head = {
        "spec": {"nodeSelector": {POOL_LABEL: "system"}, "containers": [_container("2", "8Gi")]}
    }
    worker = {
        "spec": {
            "nodeSelector": {POOL_LABEL: "data"},
            "tolerations": [
                {
                    "key": CPU_POOL_TAINT,
                    "operator": "Equal",
                    "value": "data",
                    "effect": "NoSchedule",
                }
            ],
            "containers": [_container(cpu, memory)],
        }
    }
    return [
        kueue.PodSet(name="head", count=1, template=head),
        kueue.PodSet(name="workers", count=workers, template=worker),
    ]


def _container(cpu: str, memory: str) -> dict[str, Any]:
    return {"name": "ray", "resources": {"requests": {"cpu": cpu, "memory": memory}}}


def _queues(plan: Any) -> tuple[list[kueue.ResourceFlavor], list[kueue.ClusterQueue]]:
    manifests = plan.manifests()
    flavors = [
        kueue.ResourceFlavor.model_validate(m) for m in manifests if m["kind"] == "ResourceFlavor"
    ]
    queues = [
        kueue.ClusterQueue.model_validate(m) for m in manifests if m["kind"] == "ClusterQueue"
    ]
    return flavors, queues


def test_a_data_job_is_admitted_in_the_cpu_flavor_within_the_tenant_s_quota(plans) -> None:
    plan = plans("pretrain")
    flavors, queues = _queues(plan)
    (queue,) = [q for q in queues if q.metadata.name == TENANT]
    checks = [
        kueue.AdmissionCheck.model_validate(m)
        for m in plan.manifests()
        if m["kind"] == "AdmissionCheck"
    ]
    # Four workers of 16 CPU: admitted at once in the cpu flavor (no provisioning check:
    # the autoscaler brings the nodes for the pending pods).
    job = kueue.admit(_data_job(4, "16", "48Gi"), queue, flavors, cohort=queues, checks=checks)
    assert job.state == kueue.ADMITTED, job.problems
    assert job.flavors["workers"] == {"cpu": kueue.CPU_FLAVOR, "memory": kueue.CPU_FLAVOR}
    assert job.flavors["head"] == {"cpu": kueue.CPU_FLAVOR, "memory": kueue.CPU_FLAVOR}
    # The cpu flavor imposes no node label or toleration that would pull the pods elsewhere.
    (cpu,) = [f for f in flavors if f.metadata.name == kueue.CPU_FLAVOR]
    assert not cpu.spec.node_labels and not cpu.spec.tolerations
    # The head's 2 CPU and workers of the whole quota (tenants.foundation.cpu): refused.
    quota = load_config(raw_stack("pretrain")).tenants[TENANT].cpu
    over = kueue.admit(
        _data_job(quota // 16, "16", "48Gi"), queue, flavors, cohort=queues, checks=checks
    )
    assert not over.admitted
    assert over.problems == [
        f"workers: no flavor of ClusterQueue {TENANT} fits (cpu: cpu {quota} > {quota - 2})"
    ]


def test_the_data_job_s_workers_fit_the_pool_and_only_they_land_there(plans) -> None:
    cfg = load_config(raw_stack("pretrain"))
    pool = cfg.cpu_pools["data"]
    itype = catalog().instance(pool.instance_type)
    # One 14-CPU, 48 GiB worker per node leaves the kubelet and DaemonSets their share;
    # four of them are half the pool at its max size.
    assert itype.vcpus > 14 and itype.memory_gib > 48
    assert pool.max_size >= 4
    assert cfg.tenants[TENANT].cpu >= 4 * 14
    # The node's taint keeps off every pod that does not tolerate it (the add-ons).
    group = _group(plans("pretrain")).inputs
    (taint,) = group["taints"]
    worker = _data_job(1, "14", "48Gi")[1].template["spec"]
    assert any(
        t["key"] == taint["key"] and t.get("value") == taint["value"] for t in worker["tolerations"]
    )
    assert worker["nodeSelector"].items() <= group["labels"].items()


def test_the_cost_output_prices_the_pool_from_min_to_max(plans) -> None:
    cost = plans("pretrain").outputs["cost"]
    price = catalog().instance("m7i.4xlarge").on_demand_usd_per_hour
    data = cost["cpu_pools"]["data"]
    assert data["instance_type"] == "m7i.4xlarge" and data["capacity_type"] == "ON_DEMAND"
    assert data["nodes"] == {"min": 0, "desired": 0, "max": 8}
    assert data["usd_per_hour"] == {"min": 0, "desired": 0, "max": round(8 * price, 2)}
    assert "data" not in cost["node_pools"] and "data" not in cost["pricing_modes"]
    component = cost["components"]["cpu-data"]
    assert component["kind"] == "platform"  # overhead, not GPU spend
    assert [line["what"] for line in component["lines"]] == [
        "0 x m7i.4xlarge on-demand",
        "root volumes: 0 x 200 GiB gp3",
    ]
    at_max = f"${8 * price:.2f}/h at max"
    assert component["note"] == f"autoscaled: 0 to 8 nodes, $0.00/h at min, {at_max}"
    pools = [cost["system_pool"], *cost["node_pools"].values(), *cost["cpu_pools"].values()]
    for size in ("min", "desired", "max"):
        total = sum(cost["overhead_usd_per_hour"].values())
        total += sum(p["usd_per_hour"][size] for p in pools)
        assert cost["usd_per_hour"][size] == pytest.approx(total, abs=0.01)


def test_llmp_cost_shows_the_pool_in_its_tables(plans) -> None:
    from rich.console import Console

    from llmp.cost.tables import render

    console = Console(file=io.StringIO(), width=80, color_system=None)
    for renderable in render("pretrain", plans("pretrain").outputs["cost"]):
        console.print(renderable)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    rows = [line for line in text.splitlines() if "data (cpu)" in line]
    assert len(rows) == 2, text  # the sizes table and the per-node prices table
    assert "0/0/8" in rows[0] and "6.45" in rows[0]
    assert "$0.8064" in rows[1]
    assert "cpu-data" in text


def test_the_recovery_stack_re_creates_the_pool_after_its_cluster() -> None:
    from llmp import dr
    from llmp.dr.config import RecoveryOptions

    key = "arn:aws:kms:us-west-2:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    plan = dr.make_plan(
        raw_stack("pretrain"), RecoveryOptions("pretrain", "us-west-2", replica_key_arn=key)
    )
    groups = {r.type: r for r in plan.recreated}.get(NODE_GROUP)
    assert groups is not None and GROUP in groups.created
    assert plan.config.cfg.cpu_pools["data"].max_size == 8
    needs = {q.code: q for q in plan.quotas}
    assert "data" in needs["L-1216C47A"].pools


def test_built_alone_from_its_args() -> None:
    def program() -> None:
        CpuNodePool(
            "cpu-etl",
            CpuNodePoolArgs(
                pool_name="etl",
                instance_type="c7i.4xlarge",
                size=PoolSize(min_size=1, desired_size=1, max_size=4),
                capacity_type="SPOT",
                checkpointing=True,
                node_group_name="vision-cpu-etl-nodes",
                labels={"llm-platform/team": "vision"},
                cluster_name="c1",
                cluster_version="1.35",
                node_role_arn="arn:aws:iam::123456789012:role/nodes",
                subnet_ids=["subnet-a"],
                wait_for=[],
                tags={"team": "vision"},
            ),
        )

    plan = run("alone", "eu-west-1", program)
    group = plan.one(NODE_GROUP, "cpu-etl-nodes").inputs
    assert group["nodeGroupName"] == "vision-cpu-etl-nodes"  # unique on a shared cluster
    assert group["capacityType"] == "SPOT"
    assert group["labels"]["llm-platform/checkpointing"] == "true"
    assert group["labels"]["llm-platform/team"] == "vision"
    tags = {r.inputs["tag"]["key"]: r.inputs["tag"]["value"] for r in plan.by_type(ASG_TAG)}
    assert tags[f"{NODE_TEMPLATE}/label/llm-platform/team"] == "vision"
    assert tags[f"{NODE_TEMPLATE}/taint/{CPU_POOL_TAINT}"] == "etl:NoSchedule"


@pytest.mark.parametrize(
    ("instance_type", "size", "message"),
    [
        ("p5.48xlarge", PoolSize(max_size=2), "is accelerated"),
        ("c7i.4xlarge", PoolSize(min_size=2, desired_size=2, max_size=2), "min_size must be below"),
    ],
)
def test_it_refuses_what_is_no_cpu_pool(instance_type: str, size: PoolSize, message: str) -> None:
    args = CpuNodePoolArgs(
        pool_name="x",
        instance_type=instance_type,
        size=size,
        cluster_name="c1",
        cluster_version="1.35",
        node_role_arn="arn:aws:iam::123456789012:role/nodes",
        subnet_ids=["subnet-a"],
        wait_for=[],
        tags={},
    )

    def program() -> None:
        CpuNodePool("cpu-x", args)

    with pytest.raises(Exception, match=message):
        run("alone", "eu-west-1", program)
