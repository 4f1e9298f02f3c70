"""Topology Aware Scheduling and MIG end to end on a stack: the plan the program declares
(under the mock engine, as `llmp synth` runs it), and Kueue's admission fed what the plan
records, not what the builders would make.

The stack is pretrain with its Capacity Block pool `h100-block` topology-aware and a
2-node p5 pool `eval` partitioned into two 3g.40gb per GPU, 8 of its GPUs the tenant's.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from llmp.jobs import check
from llmp.plan import Plan
from llmp.plan.policy import evaluate
from manifests import kueue
from manifests.volumes import NAMESPACE_QUOTA
from spec.stackfile import load_config
from tests.conftest import merge
from tests.manifests.test_kueue_mig import mig_raw, promote_file
from tests.manifests.test_kueue_topology import POOL, block_nodes, job_file

RELEASE = "kubernetes:helm.sh/v3:Release"


def raw() -> dict[str, Any]:
    return merge(mig_raw(), {"llm-platform:node_pools": {POOL: {"topology_aware": True}}})


@pytest.fixture(scope="module")
def plan() -> Plan:
    from llmp.plan.synth import synthesize

    return synthesize("pretrain", raw())


def _objects(plan: Plan) -> dict[str, list[dict[str, Any]]]:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for m in plan.manifests():
        by_kind.setdefault(m["kind"], []).append(m)
    return by_kind


def _admit(plan: Plan, manifest: dict[str, Any], nodes: list[kueue.TopologyNode] | None):
    objects = _objects(plan)
    flavors = [kueue.ResourceFlavor.model_validate(m) for m in objects["ResourceFlavor"]]
    queues = [kueue.ClusterQueue.model_validate(m) for m in objects["ClusterQueue"]]
    topologies = [kueue.Topology.model_validate(m) for m in objects["Topology"]]
    runtimes = objects["ClusterTrainingRuntime"]
    queue = next(q for q in queues if q.metadata.name == manifest["metadata"]["namespace"])
    return kueue.admit(
        kueue.pod_sets(manifest, runtimes),
        queue,
        flavors,
        cohort=queues,
        topologies=topologies,
        nodes=nodes,
    )


def test_the_plan_declares_the_topology_and_the_tas_flavor(plan: Plan) -> None:
    objects = _objects(plan)
    (topology,) = objects["Topology"]
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == kueue.network_levels(3)
    flavors = {f["metadata"]["name"]: f["spec"] for f in objects["ResourceFlavor"]}
    assert flavors[f"pool-{POOL}"]["topologyName"] == topology["metadata"]["name"]
    # The Topology waits for Kueue's CRDs, as the flavors do.
    (resource,) = [r for r in plan.by_type("kubernetes:kueue.x-k8s.io/v1beta2:Topology")]
    assert any("Release" in d for d in resource.dependencies)


def test_a_16_node_job_on_the_plans_queues_fits_one_block_or_waits(plan: Plan) -> None:
    cfg = load_config(raw())
    body = check("job.yaml", job_file(topology={"required": "layer-3"}), cfg).manifests[-1]
    one_block = _admit(plan, body, block_nodes([16]))
    assert one_block.state == kueue.ADMITTED, one_block.problems
    assert one_block.placements["node"].domains == [("nn-l1-0", "nn-l2-0", "nn-l3-0")]
    split = _admit(plan, body, block_nodes([12, 4]))
    assert split.problems == [
        'node: topology "ec2-network-3" allows to fit only 12 out of 16 pod(s)'
    ]


def test_the_mig_pool_is_partitioned_by_the_gpu_operator_and_offered_to_kueue(plan: Plan) -> None:
    (operator,) = [r.inputs for r in plan.by_type(RELEASE) if r.inputs["name"] == "gpu-operator"]
    values = operator["values"]
    assert values["mig"] == {"strategy": "mixed"}
    configs = yaml.safe_load(values["migManager"]["config"]["data"]["config.yaml"])
    assert configs["mig-configs"]["llmp-eval"][0]["mig-devices"] == {"3g.40gb": 2}
    groups = {
        r.inputs["nodeGroupName"]: r.inputs for r in plan.by_type("aws:eks/nodeGroup:NodeGroup")
    }
    assert groups["gpu-eval-nodes"]["labels"]["nvidia.com/mig.config"] == "llmp-eval"
    assert "nvidia.com/mig.config" not in groups["gpu-h100-nodes"]["labels"]
    quotas = [
        r.inputs
        for r in plan.by_type("kubernetes:core/v1:ResourceQuota")
        if r.inputs["metadata"]["name"] == NAMESPACE_QUOTA
    ]
    hard = next(q["spec"]["hard"] for q in quotas if q["metadata"]["namespace"] == "foundation")
    # The tenant's 8 GPUs of the MIG pool are 16 partitions in its namespace too.
    assert hard["requests.nvidia.com/mig-3g.40gb"] == "16"
    cfg = load_config(raw())
    body = check("promote.yaml", promote_file(), cfg).manifests[-1]
    admitted = _admit(plan, body, None)
    assert admitted.state == kueue.ADMITTED, admitted.problems
    assert admitted.flavors["node"]["nvidia.com/mig-3g.40gb"] == "pool-eval"


def test_the_policy_pack_finds_nothing_new_to_refuse(plan: Plan) -> None:
    mandatory = [v for v in evaluate(plan) if v.level == "mandatory"]
    assert mandatory == []
