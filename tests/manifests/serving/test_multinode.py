"""A model larger than a node: the memory arithmetic that says so, the LeaderWorkerSet the
program declares for it (checked against the pinned CRD's schema, its pod templates as core
PodTemplates by kubernetes-validate), and Kueue admitting each group as one workload.

The CRD schema is test data: the `v1` openAPIV3Schema of
charts/lws/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml at kubernetes-sigs/lws tag
v0.10.0 (the catalog's pin; the file's sha256 4c5518df96ae0456ff66ec3d4337f5419aa42daae5b15c
68878b85a2aee8556e), as compact JSON, gzipped (634 KB -> 104 KB). Checked in because the
tests run offline, and a copy pinned beside the chart pin is what a bump must refresh.
"""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from components.addons import kueue_manager_config
from llmp.plan import Plan
from llmp.plan.synth import synthesize_stack
from manifests import kueue
from manifests.queues import pool_capacities, tenant_shares
from manifests.serving import keys, multinode, vllm
from spec.errors import FieldError
from spec.serving import ServingModelConfig, engine_plan
from spec.serving_memory import GIB, memory_need
from spec.stackfile import load_config, load_stack_file
from tests.conftest import config_error, merge

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples/stacks/Pulumi.serving-405b.yaml"
SCHEMA = Path(__file__).with_name("data") / "leaderworkerset.x-k8s.io_v1.schema.json.gz"
LWS_TYPE = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
LLAMA_405B = {
    "hidden_size": 16384,
    "num_hidden_layers": 126,
    "num_attention_heads": 128,
    "num_key_value_heads": 8,
    "intermediate_size": 53248,
    "vocab_size": 128256,
}


def _405b(nodes: int, **more: Any) -> ServingModelConfig:
    return ServingModelConfig.model_validate(
        {
            "name": "llama-405b",
            "revision": "llama-3.1-405b-instruct/2026-11-01",
            "node_pool": "h200x",
            "gpus_per_replica": 8,
            "nodes_per_replica": nodes,
            "max_model_len": 131072,
            "architecture": LLAMA_405B,
            "engine": {"max_num_seqs": 16},
            **more,
        }
    )


@functools.cache
def _plan() -> Plan:
    return synthesize_stack("serving-405b", EXAMPLE, quiet=True)


def _lws() -> dict[str, Any]:
    (manifest,) = [m for m in _plan().manifests() if m.get("kind") == "LeaderWorkerSet"]
    return manifest


def _unknown_fields(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Fields the API server would prune (not in the structural schema): a typo passes a
    JSON-schema validation of a CRD, whose objects allow additional properties."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    out: list[str] = []
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            if key not in schema["properties"]:
                out.append(f"{path}.{key}")
            else:
                out += _unknown_fields(item, schema["properties"][key], f"{path}.{key}")
    elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key, item in value.items():
            out += _unknown_fields(item, schema["additionalProperties"], f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += _unknown_fields(item, schema["items"], f"{path}[{i}]")
    return out


def test_405b_in_bf16_at_128k_context_needs_two_p5en_nodes() -> None:
    with pytest.raises(FieldError) as one:
        engine_plan(_405b(1), "p5en.48xlarge")
    assert "needs 220.5 GiB per GPU (weights 94.5 + KV cache 126.0" in str(one.value)
    assert "raise nodes_per_replica (pipeline parallel size over nodes)" in str(one.value)
    two = engine_plan(_405b(2), "p5en.48xlarge")
    assert (two.tensor_parallel_size, two.pipeline_parallel_size) == (8, 2)
    assert two.need_gib == 110.25 and two.budget_gib == 126.9
    # The heaviest stage: 63 of 126 layers and one vocabulary matrix, per GPU of 8.
    shape = _405b(2).architecture.shape("none")  # type: ignore[union-attr]
    layer = shape.layer_linear() + 2 * shape.hidden_size
    stage = (63 * layer + shape.vocab_size * shape.hidden_size) * 2 / 8
    assert abs(stage / GIB - 47.25) < 0.01
    need = memory_need(shape, tensor_parallel=8, pipeline_parallel=2)
    assert abs(need.weights - stage) < 1e-3 * GIB
    assert need.kv_per_token == 2 * 1 * 128 * 2 * 63  # one KV head per GPU, 63 layers


def test_a_replica_over_nodes_takes_whole_nodes_with_efa() -> None:
    with pytest.raises(FieldError, match=r"takes whole nodes: 8 GPUs of p5en\.48xlarge"):
        engine_plan(_405b(2, gpus_per_replica=4), "p5en.48xlarge")
    with pytest.raises(FieldError, match=r"g6e\.12xlarge has no EFA"):
        engine_plan(_405b(2, gpus_per_replica=4), "g6e.12xlarge")


def test_the_serving_queue_must_hold_the_groups_gpus() -> None:
    raw = load_stack_file(str(EXAMPLE))
    short = merge(raw, {"llm-platform:tenants": {"serving": {"gpu_quota": {"h200x": 16}}}})
    assert "tenants.serving.gpu_quota.h200x = 16" in config_error(short)
    assert "llama-405b 2 x 8 x 2" in config_error(short)


def test_the_lws_is_valid_for_the_pinned_crd_and_names_what_vllm_needs() -> None:
    lws = _lws()
    schema = json.loads(gzip.decompress(SCHEMA.read_bytes()))
    jsonschema.Draft7Validator(schema).validate(lws)
    assert _unknown_fields(lws, schema) == []
    group = lws["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2 and group["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert "replicas" not in lws["spec"]  # KEDA's, through the scale subresource
    assert lws["metadata"]["labels"][multinode.QUEUE_LABEL] == kueue.LOCAL_QUEUE
    leader = group["leaderTemplate"]["spec"]["containers"]
    assert [c["name"] for c in leader] == ["vllm", "gateway"]
    script = leader[0]["command"][2]
    assert "ray start --head --port=6379" in script
    assert '-ge "$LWS_GROUP_SIZE"' in script
    for flag in ("--tensor-parallel-size 8", "--pipeline-parallel-size 2"):
        assert flag in script
    assert "--distributed-executor-backend ray" in script
    worker = group["workerTemplate"]["spec"]["containers"]
    assert [c["name"] for c in worker] == ["vllm"]
    assert 'ray start --address="$LWS_LEADER_ADDRESS:6379"' in worker[0]["command"][2]
    # A worker serves no HTTP: it is alive while the group's Ray head answers it.
    check = ["/bin/bash", "-c", 'ray health-check --address="$LWS_LEADER_ADDRESS:6379"']
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert worker[0][probe]["exec"] == {"command": check}
        # The leader's server is on loopback: probed from inside its container.
        assert leader[0][probe]["exec"] == {"command": vllm.HEALTH_CHECK}
    assert "--host 127.0.0.1" in script
    assert "ports" not in worker[0] and "ports" not in leader[0]
    # Only the leader has a gateway, its keys and the account that reads them.
    leader_spec = group["leaderTemplate"]["spec"]
    worker_spec = group["workerTemplate"]["spec"]
    assert leader_spec["serviceAccountName"] == keys.MODEL_SERVER_SA
    assert keys.VOLUME in [v["name"] for v in leader_spec["volumes"]]
    assert "serviceAccountName" not in worker_spec
    assert keys.VOLUME not in [v["name"] for v in worker_spec["volumes"]]
    for pod in (leader[0], worker[0]):
        assert pod["resources"]["limits"]["vpc.amazonaws.com/efa"] == "16"
        assert pod["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_the_lws_pod_templates_validate_as_core_pod_templates() -> None:
    version = load_config(load_stack_file(str(EXAMPLE))).cluster.version
    group = _lws()["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": f"llama-405b-{role.lower()}", "namespace": "serving"},
            "template": group[role],
        }
        assert kubernetes_validate.validate(template, version, strict=True) == version


def test_the_service_selects_the_leaders_and_scaling_targets_the_lws() -> None:
    by_name = {(m["kind"], m["metadata"]["name"]): m for m in _plan().manifests()}
    service = by_name[("Service", "llama-405b")]
    assert service["spec"]["selector"] == multinode.leader_selector("llama-405b")
    leader_labels = _lws()["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"]
    assert leader_labels[multinode.ROLE_LABEL] == "leader"
    scaled = by_name[("ScaledObject", "llama-405b")]
    assert scaled["spec"]["scaleTargetRef"] == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": "llama-405b",
    }
    releases = [r for r in _plan().resources if r.name == "serving-lws"]
    (lws_release,) = releases
    assert lws_release.inputs["version"] == "0.10.0"
    assert lws_release.inputs["values"]["image"]["manager"] == {
        "tag": "v0.10.0",
        "pullPolicy": "IfNotPresent",
    }
    lws_resource = next(r for r in _plan().resources if r.type == LWS_TYPE)
    assert "serving-lws" in {d.rsplit("::", 1)[-1] for d in lws_resource.dependencies}


def test_kueue_admits_each_group_as_one_workload_and_asks_for_both_nodes() -> None:
    cfg = load_config(load_stack_file(str(EXAMPLE)))
    pools = pool_capacities(cfg)
    flavors, queues = kueue.platform_queues(pools, tenant_shares(cfg))
    provisioning = kueue.provisioning_check(pools)
    assert provisioning is not None
    excluded = tuple(kueue_manager_config()["resources"]["excludeResourcePrefixes"])
    sets = kueue.pod_sets(_lws())
    assert [(s.name, s.count) for s in sets] == [("leader", 1), ("worker", 1)]
    queue = next(q for q in queues if q.metadata.name == "serving")
    result = kueue.admit(
        sets, queue, flavors, cohort=queues, excluded=excluded, checks=[provisioning[0]]
    )
    assert result.admitted, result.problems
    flavor = kueue.flavor_name("h200x")
    on_pool = {"cpu": flavor, "memory": flavor, "nvidia.com/gpu": flavor}
    assert result.flavors == {"leader": on_pool, "worker": on_pool}
    # EFA is requested and excluded (no queue shares it); 16 GPUs for the group.
    assert sum(s.count * s.requests(excluded)["nvidia.com/gpu"] for s in sets) == 16
    assert all("vpc.amazonaws.com/efa" in kueue.pod_requests(s.template["spec"]) for s in sets)
    assert result.waiting_for == [kueue.PROVISIONING_CHECK]
    # The elastic pool's ProvisioningRequest: all of the group's nodes, all or nothing.
    assert result.state == kueue.WAITING_FOR_PROVISIONING
    assert provisioning[1].spec.provisioning_class_name == kueue.ATOMIC_SCALE_UP
    print(f"\nkueue: llama-405b group {[(s.name, s.count) for s in sets]} -> {result.state}")


def test_kueue_manages_pods_in_tenant_namespaces_only() -> None:
    config = kueue_manager_config()
    assert "leaderworkerset.x-k8s.io/leaderworkerset" in config["integrations"]["frameworks"]
    assert config["managedJobsNamespaceSelector"] == {
        "matchExpressions": [{"key": "llm-platform/tenant", "operator": "Exists"}]
    }


def test_a_single_node_model_renders_no_pipeline_flags() -> None:
    model = _405b(1, max_model_len=8192, engine={"max_num_seqs": 4})
    args = vllm.vllm_args(model, engine_plan(model, "p5en.48xlarge"))
    assert "--pipeline-parallel-size" not in args
    assert "--distributed-executor-backend" not in args
