"""TrainJob builder and the platform's ClusterTrainingRuntimes: what Kubeflow Trainer v2.2.1,
JobSet and Kueue need, validated against the CRD schemas vendored from their tags, and the pod
the Trainer makes of both carrying everything the PyTorchJob builder's pod carried.

Schemas (the storage version's openAPIV3Schema, gzipped JSON, in `data/`):
kubeflow/trainer tag v2.2.1 manifests/base/crds/trainer.kubeflow.org_{trainjobs,
clustertrainingruntimes}.yaml, and kubernetes-sigs/jobset tag v0.11.0
config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml.
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from manifests import kueue
from manifests.jobs import pytorchjob, trainjob
from spec.tenancy import SERVING_PRIORITY, TRAINING_PRIORITIES
from tests.manifests.jobs.k8s import as_pod, policy_violations, validate
from tests.manifests.jobs.test_pytorchjob import BASE
from tests.manifests.serving.test_multinode import _unknown_fields

DATA = Path(__file__).with_name("data")


@functools.cache
def _schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(gzip.decompress((DATA / name).read_bytes()))
    return loaded


def trainjob_schema() -> dict[str, Any]:
    return _schema("trainer.kubeflow.org_trainjobs_v1alpha1.schema.json.gz")


def runtime_schema() -> dict[str, Any]:
    return _schema("trainer.kubeflow.org_clustertrainingruntimes_v1alpha1.schema.json.gz")


def jobset_schema() -> dict[str, Any]:
    return _schema("jobset.x-k8s.io_jobsets_v1alpha2.schema.json.gz")


def job(**overrides: Any) -> dict[str, Any]:
    return trainjob.build(**{**BASE, **overrides})


def runtime_of(body: dict[str, Any]) -> dict[str, Any]:
    name = body["spec"]["runtimeRef"]["name"]
    (found,) = [r for r in trainjob.cluster_training_runtimes() if r["metadata"]["name"] == name]
    return found


def node(body: dict[str, Any]) -> dict[str, Any]:
    return trainjob.node_pod_template(body, runtime_of(body))


def env(template: dict[str, Any]) -> dict[str, str]:
    (container,) = template["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def jobset(body: dict[str, Any]) -> dict[str, Any]:
    """The JobSet the Trainer creates: the runtime's template, the node count, the pod."""
    spec = copy.deepcopy(runtime_of(body)["spec"]["template"]["spec"])
    (rjob,) = spec["replicatedJobs"]
    nodes = body["spec"]["trainer"]["numNodes"]
    rjob["template"]["spec"].update(parallelism=nodes, completions=nodes)
    rjob["template"]["spec"]["template"] = node(body)
    name = body["metadata"]["name"]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": body["metadata"]["namespace"]},
        "spec": spec,
    }


def test_trainjob_names_its_runtime_queue_and_nodes_and_is_created_suspended() -> None:
    body = job()
    assert body["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and body["kind"] == "TrainJob"
    assert body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    assert body["spec"]["suspend"] is True
    assert body["spec"]["runtimeRef"] == {
        "name": "llmp-deepspeed-training",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    trainer = body["spec"]["trainer"]
    # The gang is the elastic range's top, as the PyTorchJob's Worker replicas were.
    assert trainer["numNodes"] == 4 and trainer["numProcPerNode"] == 8
    assert trainer["image"] == BASE["image"]


def test_torchrun_gets_the_elastic_range_from_the_command_and_rendezvous_from_pet() -> None:
    # Trainer v2.2 has no elastic policy (#3235): PET_NNODES is a fixed count, which
    # torchrun's --nnodes flag overrides; the rendezvous is the plugin's master address.
    command = job(max_restarts=5)["spec"]["trainer"]["command"]
    assert command == [
        "torchrun",
        "--nnodes=2:4",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=$(PET_MASTER_ADDR):$(PET_MASTER_PORT)",
        "--rdzv-id=llama-8b",
        "--max-restarts=5",
        *BASE["command"],
    ]
    e = env(node(job()))
    assert e["PET_NNODES"] == "4" and e["PET_NPROC_PER_NODE"] == "8"
    assert e["PET_MASTER_ADDR"] == "llama-8b-node-0-0.llama-8b"
    assert e["PET_MASTER_PORT"] == "29500"
    # Kubernetes expands $(VAR) in the command only for variables the container defines.
    (container,) = node(job())["spec"]["containers"]
    names = [v["name"] for v in container["env"]]
    assert {"PET_MASTER_ADDR", "PET_MASTER_PORT"} <= set(names)


@pytest.mark.parametrize(
    "instance_type",
    ["p5.48xlarge", "p5en.48xlarge", "p4d.24xlarge", "g6e.12xlarge", "trn1.32xlarge"],
)
def test_the_trainers_pod_carries_everything_the_pytorchjob_pod_did(instance_type: str) -> None:
    pool = {"g6e.12xlarge": "g6e", "trn1.32xlarge": "trn1"}.get(instance_type, "p5")
    fields = {**BASE, "instance_type": instance_type, "node_pool": pool}
    before = pytorchjob.build(**fields)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    after = node(trainjob.build(**fields))
    # The pod: service account, priority, grace, affinity, tolerations, security, volumes.
    for key in (
        "serviceAccountName",
        "priorityClassName",
        "terminationGracePeriodSeconds",
        "affinity",
        "tolerations",
        "securityContext",
        "volumes",
    ):
        assert after["spec"][key] == before["spec"][key], key
    assert after["spec"]["restartPolicy"] == "OnFailure"
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
    (old,) = before["spec"]["containers"]
    (new,) = after["spec"]["containers"]
    for key in ("image", "resources", "volumeMounts", "securityContext", "ports"):
        assert new.get(key) == old.get(key), key
    # The environment: the PyTorchJob's (EFA, NCCL, checkpoints, metrics), then PET_*.
    names = [e["name"] for e in new["env"]]
    assert names == [e["name"] for e in old["env"]] + list(trainjob.TORCHRUN_PET_VARIABLES)
    assert new["env"][: len(old["env"])] == old["env"]
    assert new["name"] == "node"


def test_every_object_validates_against_the_vendored_crds_with_no_pruned_field() -> None:
    for body in (
        job(),
        job(priority_class="llmp-preemptible"),
        job(framework="torch"),
    ):
        jsonschema.Draft7Validator(trainjob_schema()).validate(body)
        assert _unknown_fields(body, trainjob_schema()) == []
        set_ = jobset(body)
        jsonschema.Draft7Validator(jobset_schema()).validate(set_)
        assert _unknown_fields(set_, jobset_schema()) == []
    for runtime in trainjob.cluster_training_runtimes():
        jsonschema.Draft7Validator(runtime_schema()).validate(runtime)
        assert _unknown_fields(runtime, runtime_schema()) == [], runtime["metadata"]["name"]


def test_the_schemas_refuse_what_the_api_server_would() -> None:
    bad = job()
    del bad["spec"]["runtimeRef"]
    with pytest.raises(jsonschema.ValidationError, match="runtimeRef"):
        jsonschema.Draft7Validator(trainjob_schema()).validate(bad)
    typo = job()
    typo["spec"]["trainer"]["numNode"] = 4
    assert _unknown_fields(typo, trainjob_schema()) == [".spec.trainer.numNode"]
    # v2.1's podTemplateOverrides and v2.0's elasticPolicy are gone at v2.2.1.
    old = job()
    old["spec"]["podTemplateOverrides"] = []
    assert _unknown_fields(old, trainjob_schema()) == [".spec.podTemplateOverrides"]
    # The torch policy is an empty object at v2.2.1 (no elasticPolicy, no numProcPerNode):
    # the API server prunes anything put in it.
    torch = runtime_schema()["properties"]["spec"]["properties"]["mlPolicy"]["properties"]["torch"]
    assert torch["type"] == "object" and "properties" not in torch
    assert "x-kubernetes-preserve-unknown-fields" not in torch


@pytest.mark.parametrize(
    "instance_type",
    ["p5.48xlarge", "p5en.48xlarge", "p4d.24xlarge", "g6e.12xlarge", "trn1.32xlarge"],
)
def test_the_pod_validates_strictly_and_passes_the_policy_pack(instance_type: str) -> None:
    pool = {"g6e.12xlarge": "g6e", "trn1.32xlarge": "trn1"}.get(instance_type, "p5")
    body = job(instance_type=instance_type, node_pool=pool)
    template = node(body)
    validate(as_pod(template))
    assert policy_violations(body, "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob") == []
    assert policy_violations(jobset(body), "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet") == []


def test_a_runtime_per_kind_and_priority_class_and_the_job_picks_its_own() -> None:
    runtimes = {r["metadata"]["name"]: r for r in trainjob.cluster_training_runtimes()}
    assert len(runtimes) == len(trainjob.RUNTIME_KINDS) * len(TRAINING_PRIORITIES)
    for priority in TRAINING_PRIORITIES:
        body = job(priority_class=priority)
        pod = node(body)["spec"]
        assert pod["priorityClassName"] == priority
        assert body["spec"]["runtimeRef"]["name"] in runtimes
    # The model servers' class has no training runtime: a TrainJob cannot take it.
    classes = {
        r["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
            "priorityClassName"
        ]
        for r in runtimes.values()
    }
    assert classes == set(TRAINING_PRIORITIES) and SERVING_PRIORITY not in classes
    assert job(priority_class="llmp-training-critical")["spec"]["runtimeRef"]["name"] == (
        "llmp-deepspeed-training-critical"
    )
    parallel = job(framework="torch")
    assert parallel["spec"]["runtimeRef"]["name"] == "llmp-torch-training"
    (container,) = node(parallel)["spec"]["containers"]
    # The parallel trainer serves the llmp_* metrics too, on the port the PodMonitor scrapes.
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [
        ("metrics", pytorchjob.METRICS_PORT)
    ]
    labels = {
        n: r["metadata"]["labels"]["trainer.kubeflow.org/framework"] for n, r in runtimes.items()
    }
    assert labels["llmp-deepspeed-training"] == "deepspeed"
    assert labels["llmp-torch-training"] == labels["llmp-step-training"] == "torch"


def test_a_lifecycle_step_fails_on_its_own_errors_and_runs_again_when_killed() -> None:
    body = job(
        job_kind="promotion",
        restart_policy="ExitCode",
        nodes_min=1,
        nodes_max=1,
        procs_per_node=1,
        checkpoint_dir=None,
        trainer_metrics=False,
    )
    assert body["spec"]["runtimeRef"]["name"] == "llmp-step-training"
    (rjob,) = runtime_of(body)["spec"]["template"]["spec"]["replicatedJobs"]
    spec = rjob["template"]["spec"]
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    ignore, fail = spec["podFailurePolicy"]["rules"]
    assert ignore == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    assert fail["action"] == "FailJob"
    assert fail["onExitCodes"] == {
        "containerName": "node",
        "operator": "In",
        "values": list(range(1, 128)),  # 128-255 (torchrun killed) is retried
    }
    assert node(body)["metadata"]["labels"]["llm-platform/job-kind"] == "promotion"


def test_kueue_makes_one_gang_of_the_node_pods() -> None:
    body = job()
    (pod_set,) = kueue.pod_sets(body, trainjob.cluster_training_runtimes())
    assert (pod_set.name, pod_set.count) == ("node", 4)
    requests = pod_set.requests()
    assert requests["nvidia.com/gpu"] == 8 and requests["vpc.amazonaws.com/efa"] == 32
    with pytest.raises(kueue.AdmissionError, match="names runtime llmp-deepspeed-training"):
        kueue.pod_sets(body)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"framework": "jax"}, "framework"),
        ({"efa_per_node": 33}, "efa_per_node 33: p5.48xlarge takes at most 32 EFA interfaces"),
        ({"nodes_min": 5}, "nodes_min 5 is above nodes_max 4"),
        ({"priority_class": "urgent"}, "is not one of"),
        ({"name": "Llama_8B"}, "must be a DNS label"),
    ],
)
def test_bad_specs_fail_with_one_line(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as exc:
        job(**overrides)
    text = str(exc.value)
    assert message in text and "\n" not in text


def test_the_trainer_refuses_its_own_variables_in_trainer_env() -> None:
    body = job()
    body["spec"]["trainer"]["env"].append({"name": "PET_NNODES", "value": "2"})
    with pytest.raises(ValueError, match="must not set the torch plugin's PET_NNODES"):
        node(body)
