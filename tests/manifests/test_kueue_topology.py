"""Kueue's Topology Aware Scheduling: the Topology of the EC2 network labels, the TAS flavor
of a topology-aware pool, the pod sets that ask for a level, and where Kueue 0.19 places them.

The journey: a stack declares a topology-aware pool (`node_pools.<p>.topology_aware`), the
program renders a Topology (`topology.k8s.aws/network-node-layer-1..3`, then the node) and a
flavor that names it; a job file asks for `topology: {required: layer-3}`; `llmp job`
renders the TrainJob with Kueue's pod-set annotation; Kueue's admission rule, fed the plan's
objects and the cluster's nodes with their network labels, puts every node of the job under
one layer-3 network node, or says why no block has room.

Test data (tests/manifests/data/, compact JSON, gzipped): the `v1beta2` openAPIV3Schema,
descriptions removed, of config/components/crd/bases/kueue.x-k8s.io_{topologies,
resourceflavors,clusterqueues}.yaml at kubernetes-sigs/kueue tag v0.19.2 (sha256
f703575d3bb64d26f6e839f831e01646367ed41a89b3abf163f8e842ca1c4d2b,
19e339c47e9ca3fa2c9eeddd27715a512f765c4794ed859733408a9715720173,
e0a5fc9b370c70f3d993d4f599865817338ecf94187b30b15b12ff33c579bd55), the catalog's Kueue pin.
"""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

import jsonschema
import pydantic
import pytest

from llmp.jobs import check
from llmp.jobs.checks import JobFileError
from manifests import kueue
from manifests.jobs import trainjob
from manifests.jobs.jobfile import JobFile
from manifests.queues import pool_capacities, tenant_shares
from spec.catalog import catalog
from spec.labels import POOL_LABEL
from spec.platform import PlatformConfig
from spec.stackfile import load_config
from tests.conftest import config_error, with_section
from tests.manifests.jobs.test_trainjob import trainjob_schema
from tests.manifests.serving.test_multinode import _unknown_fields

DATA = Path(__file__).with_name("data")
POOL = "h100-block"
"""pretrain's Capacity Block pool: 16 p5 nodes the block's reservation placed, no placement
group (it would starve the block): where Kueue's topology is what keeps a gang close."""
LAYER = kueue.NETWORK_LAYER_LABEL
RUNTIMES = trainjob.cluster_training_runtimes()


@functools.cache
def schema(kind: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        gzip.decompress((DATA / f"kueue.x-k8s.io_{kind}_v1beta2.schema.json.gz").read_bytes())
    )
    return loaded


def valid(obj: dict[str, Any], kind: str) -> None:
    jsonschema.Draft7Validator(schema(kind)).validate(obj)
    assert _unknown_fields(obj, schema(kind)) == []


def tas_stack(**pool: Any) -> PlatformConfig:
    """pretrain with its Capacity Block pool topology-aware."""
    return load_config(
        with_section("pretrain", "node_pools", {POOL: {"topology_aware": True, **pool}})
    )


def block_nodes(blocks: list[int], pool: str = POOL) -> list[kueue.TopologyNode]:
    """p5 nodes of `pool`, `blocks[i]` of them under the layer-3 network node `nn-l3-<i>`
    (two layer-3 nodes per layer-2 node, one layer-1 node), each with the EFA installer's
    huge pages."""
    nodes = []
    for b, count in enumerate(blocks):
        for i in range(count):
            labels = {
                POOL_LABEL: pool,
                f"{LAYER}1": "nn-l1-0",
                f"{LAYER}2": f"nn-l2-{b // 2}",
                f"{LAYER}3": f"nn-l3-{b}",
            }
            nodes.append(
                kueue.instance_node(
                    f"ip-10-0-{b}-{i}", "p5.48xlarge", labels, hugepages_2mi_mib=5120
                )
            )
    return nodes


def job_file(**overrides: Any) -> JobFile:
    raw = {
        "kind": "pretrain",
        "name": "llama-pretrain",
        "stack": "pretrain",
        "tenant": "foundation",
        "pool": POOL,
        "nodes": 16,
        "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:v1",
        "data": "/fsx/tokens/web",
        "checkpoint": "/fsx/checkpoints/llama-pretrain",
        "trainer": {"model": {"pretrained": "/fsx/models/llama-3.1-8b"}},
        **overrides,
    }
    return JobFile.model_validate(raw)


def admit_on(
    cfg: PlatformConfig, manifest: dict[str, Any], nodes: list[kueue.TopologyNode] | None
) -> kueue.Admission:
    pools = pool_capacities(cfg)
    flavors, queues = kueue.platform_queues(pools, tenant_shares(cfg))
    queue = next(q for q in queues if q.metadata.name == manifest["metadata"]["namespace"])
    return kueue.admit(
        kueue.pod_sets(manifest, RUNTIMES),
        queue,
        flavors,
        cohort=queues,
        topologies=kueue.topologies(pools),
        nodes=nodes,
    )


# --- the objects ---------------------------------------------------------------------------


def test_the_topology_has_the_types_network_layers_then_the_node() -> None:
    three = catalog().instance("p5.48xlarge").network_topology_layers
    four = catalog().instance("p6-b200.48xlarge").network_topology_layers
    assert (three, four) == (3, 4)
    assert kueue.network_levels(3) == [
        f"{LAYER}1",
        f"{LAYER}2",
        f"{LAYER}3",
        "kubernetes.io/hostname",
    ]
    assert kueue.network_levels(4)[3] == f"{LAYER}4"
    # A level the nodes lack would hide every node from the flavor: g5 reports no topology.
    assert catalog().instance("g5.48xlarge").network_topology_layers is None


def test_topology_flavor_and_queue_validate_against_kueues_v1beta2_crds() -> None:
    cfg = tas_stack()
    pools = pool_capacities(cfg)
    (topology,) = kueue.topologies(pools)
    flavors, queues = kueue.platform_queues(pools, tenant_shares(cfg))
    manifest = topology.manifest()
    assert manifest["apiVersion"] == "kueue.x-k8s.io/v1beta2" and manifest["kind"] == "Topology"
    assert manifest["metadata"]["name"] == "ec2-network-3"
    valid(manifest, "topologies")
    by_name = {f.metadata.name: f.manifest() for f in flavors}
    assert by_name[f"pool-{POOL}"]["spec"]["topologyName"] == "ec2-network-3"
    assert "topologyName" not in by_name["pool-h100"]["spec"]  # the other pool: quota only
    for flavor in by_name.values():
        valid(flavor, "resourceflavors")
    for queue in queues:
        valid(queue.manifest(), "clusterqueues")


def test_the_models_refuse_what_kueues_crd_validations_refuse() -> None:
    with pytest.raises(pydantic.ValidationError, match="lowest level"):
        kueue.TopologySpec(
            levels=[
                kueue.TopologyLevel(node_label="kubernetes.io/hostname"),
                kueue.TopologyLevel(node_label=f"{LAYER}1"),
            ]
        )
    with pytest.raises(pydantic.ValidationError, match="unique"):
        kueue.TopologySpec(levels=[kueue.TopologyLevel(node_label=f"{LAYER}1")] * 2)
    with pytest.raises(pydantic.ValidationError, match="nodeLabel is required"):
        kueue.ResourceFlavorSpec(topologyName="ec2-network-3")


def test_a_pool_whose_type_reports_no_topology_cannot_be_topology_aware() -> None:
    raw = with_section(
        "inference",
        "node_pools",
        {"g5": {"instance_type": "g5.48xlarge", "max_size": 1, "topology_aware": True}},
    )
    message = config_error(raw)
    assert "node_pools.g5.topology_aware" in message
    assert "reports no EC2 network topology" in message


# --- the journey: a job file, its TrainJob, Kueue's placement --------------------------------


def _rendered(cfg: PlatformConfig, job: JobFile) -> dict[str, Any]:
    prepared = check("job.yaml", job, cfg)
    body = prepared.manifests[-1]
    assert body["kind"] == "TrainJob"
    return body


def test_a_16_node_job_is_admitted_into_one_network_block() -> None:
    cfg = tas_stack()
    body = _rendered(cfg, job_file(topology={"required": "layer-3"}))
    (pod_set,) = kueue.pod_sets(body, RUNTIMES)
    assert kueue.TopologyRequest.of(pod_set.template) == kueue.TopologyRequest(
        "required", f"{LAYER}3"
    )
    result = admit_on(cfg, body, block_nodes([16, 8, 8]))
    assert result.state == kueue.ADMITTED, result.problems
    placed = result.placements["node"]
    assert placed.level == f"{LAYER}3"
    assert placed.domains == [("nn-l1-0", "nn-l2-0", "nn-l3-0")]
    assert sorted(placed.pods) == sorted(f"ip-10-0-0-{i}" for i in range(16))
    assert set(placed.pods.values()) == {1}  # one pod per node: each takes the node's 8 GPUs
    print(
        f"\nTAS: {result.state}: node x {sum(placed.pods.values())} in "
        f"{placed.level.rsplit('/', 1)[1]} {placed.domains[0][-1]} "
        f"(flavor {result.flavors['node']['nvidia.com/gpu']})"
    )


def test_a_16_node_job_that_no_block_holds_waits_and_says_why() -> None:
    cfg = tas_stack()
    body = _rendered(cfg, job_file(topology={"required": "layer-3"}))
    result = admit_on(cfg, body, block_nodes([12, 4]))
    assert result.state == kueue.NOT_ADMITTED
    assert result.problems == [
        'node: topology "ec2-network-3" allows to fit only 12 out of 16 pod(s)'
    ]
    print(f"\nTAS: {result.state}: {result.problems[0]}")
    # Quota alone would admit it: the 16 nodes are the tenant's 128 GPUs.
    quota_only = admit_on(cfg, body, None)
    assert quota_only.state == kueue.ADMITTED and quota_only.topology_unchecked == ["node"]


def test_a_preferred_level_climbs_to_the_layer_that_holds_the_job() -> None:
    cfg = tas_stack()
    body = _rendered(cfg, job_file())  # the default: preferred at the lowest layer
    (pod_set,) = kueue.pod_sets(body, RUNTIMES)
    assert kueue.TopologyRequest.of(pod_set.template) == kueue.TopologyRequest(
        "preferred", f"{LAYER}3"
    )
    result = admit_on(cfg, body, block_nodes([12, 4]))
    assert result.state == kueue.ADMITTED, result.problems
    placed = result.placements["node"]
    # nn-l3-0 and nn-l3-1 share the layer-2 node nn-l2-0: one hop up, not across the fabric.
    assert placed.level == f"{LAYER}2" and placed.domains == [("nn-l1-0", "nn-l2-0")]
    assert len(placed.pods) == 16


def test_best_fit_keeps_the_larger_block_for_a_larger_job() -> None:
    cfg = tas_stack(max_size=16)
    small = _rendered(cfg, job_file(nodes=4, topology={"required": "layer-3"}))
    result = admit_on(cfg, small, block_nodes([12, 4]))
    # Both blocks hold 4 nodes; Kueue takes the one that leaves the least room (BestFit).
    assert result.placements["node"].domains == [("nn-l1-0", "nn-l2-0", "nn-l3-1")]


def test_nodes_missing_a_level_label_are_not_the_flavors() -> None:
    cfg = tas_stack()
    body = _rendered(cfg, job_file(topology={"required": "layer-3"}))
    nodes = block_nodes([16])
    unlabelled = [
        kueue.TopologyNode(
            name=n.name, labels={k: v for k, v in n.labels.items() if k != f"{LAYER}3"}, free=n.free
        )
        for n in nodes
    ]
    result = admit_on(cfg, body, unlabelled)
    assert result.problems == [f"node: no topology domains at level: {LAYER}1"]


def test_a_job_without_a_topology_request_finds_no_flavor_on_a_tas_pool() -> None:
    """Kueue 0.19 places a pod set that asks for no topology only on flavors without one
    (flavorassigner: "supports only TopologyAwareScheduling"): what `llmp job` avoids by
    giving every job on such a pool a request."""
    cfg = tas_stack()
    body = _rendered(cfg, job_file())
    for patch in body["spec"]["runtimePatches"]:
        template = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        template["template"]["spec"]["template"]["metadata"].pop("annotations")
    result = admit_on(cfg, body, block_nodes([16]))
    (problem,) = result.problems
    assert 'Flavor "pool-h100-block" supports only TopologyAwareScheduling' in problem


def test_a_level_the_topology_lacks_is_refused_by_the_flavor_and_by_llmp_job() -> None:
    cfg = tas_stack()
    body = _rendered(cfg, job_file(topology={"required": "layer-3"}))
    for patch in body["spec"]["runtimePatches"]:
        template = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        template["template"]["spec"]["template"]["metadata"]["annotations"] = {
            kueue.REQUIRED_TOPOLOGY: f"{LAYER}4"
        }
    result = admit_on(cfg, body, block_nodes([16]))
    (problem,) = result.problems
    assert 'Flavor "pool-h100-block" does not contain the requested level' in problem
    with pytest.raises(JobFileError) as info:
        check("job.yaml", job_file(topology={"required": "layer-4"}), cfg)
    assert str(info.value) == (
        "job file job.yaml: topology = {'required': 'layer-4'}: the p5.48xlarge nodes of pool "
        "h100-block have 3 network layers: one of layer-1, layer-2, layer-3, node"
    )


def test_the_trainjob_with_its_topology_request_is_valid_for_the_trainer_crd() -> None:
    cfg = tas_stack()
    body = _rendered(cfg, job_file(topology={"preferred": "layer-2"}))
    jsonschema.Draft7Validator(trainjob_schema()).validate(body)
    assert _unknown_fields(body, trainjob_schema()) == []
    (patch,) = body["spec"]["runtimePatches"]
    meta = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]
    assert meta["spec"]["template"]["metadata"]["annotations"] == {
        kueue.PREFERRED_TOPOLOGY: f"{LAYER}2"
    }


def test_llmp_job_says_where_kueue_will_place_it_and_refuses_a_request_off_a_tas_pool() -> None:
    cfg = tas_stack()
    prepared = check("job.yaml", job_file(topology={"required": "layer-3"}), cfg)
    assert any(n.startswith("topology: required network-node-layer-3") for n in prepared.notes)
    with pytest.raises(JobFileError) as info:
        check("job.yaml", job_file(pool="h100", topology={"required": "layer-3"}), cfg)
    assert str(info.value).startswith("job file job.yaml: topology = ")
    assert "pool h100 is not topology-aware" in str(info.value)
    with pytest.raises(pydantic.ValidationError, match="one of layer-1"):
        job_file(topology={"required": "rack"})
    with pytest.raises(pydantic.ValidationError, match="give one of"):
        job_file(topology={"required": "layer-3", "preferred": "layer-2"})


def test_a_multimodal_data_job_on_a_tas_pool_asks_for_any_placement_and_is_admitted() -> None:
    from llmp.jobs.data import check_data

    cfg = tas_stack()
    job = JobFile.model_validate(
        {
            "kind": "data-multimodal",
            "name": "frames",
            "stack": "pretrain",
            "tenant": "foundation",
            "pool": POOL,
            "workers": 2,
            "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:v1",
            "input": "/fsx/datasets/raw/video",
            "output": "/fsx/datasets/frames",
            "pipeline": {
                "models": {
                    "clip": "/fsx/datasets/models/clip-vit-b-32",
                    "whisper": "/fsx/datasets/models/whisper-small",
                },
                "compute": {"device": "cuda", "clip_actors": 4, "asr_actors": 4},
            },
        }
    )
    prepared = check_data("data.yaml", job, cfg)
    (rayjob,) = [m for m in prepared.manifests if m["kind"] == "RayJob"]
    head, workers, _ = kueue.pod_sets(rayjob)
    assert kueue.TopologyRequest.of(workers.template) == kueue.TopologyRequest("unconstrained")
    assert kueue.TopologyRequest.of(head.template) is None  # on the system pool: cpu flavor
    result = admit_on(cfg, rayjob, block_nodes([1, 1]))
    assert result.state == kueue.ADMITTED, result.problems
    assert sorted(result.placements["workers"].pods) == ["ip-10-0-0-0", "ip-10-0-1-0"]
