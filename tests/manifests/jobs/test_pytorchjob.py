"""PyTorchJob builder: what the training operator, Kueue, the scheduler and NCCL need, and
refusals of specs that could only fail on the cluster."""

from __future__ import annotations

from typing import Any

import pytest

from manifests.jobs.pytorchjob import JobSpec, build
from spec.catalog import catalog
from tests.manifests.jobs.k8s import as_pod, policy_violations, validate

BASE: dict[str, Any] = {
    "name": "llama-8b",
    "namespace": "training",
    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
    "command": ["-m", "workloads.training.train", "--config", "/fsx/configs/8b.yaml"],
    "instance_type": "p5.48xlarge",
    "node_pool": "p5",
    "nodes_min": 2,
    "nodes_max": 4,
    "checkpoint_dir": "/fsx/checkpoints/llama-8b",
    "queue_name": "training",
}


def job(**overrides: Any) -> dict[str, Any]:
    return build(**{**BASE, **overrides})


def pod(body: dict[str, Any]) -> dict[str, Any]:
    return body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]


def container(body: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod(body)["containers"]
    return only


def env(body: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(body)["env"] if "value" in e}


def test_elastic_policy_replicas_and_kueue() -> None:
    body = job()
    assert body["apiVersion"] == "kubeflow.org/v1" and body["kind"] == "PyTorchJob"
    assert body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    assert body["spec"]["elasticPolicy"] == {
        "minReplicas": 2,
        "maxReplicas": 4,
        "maxRestarts": 3,
        "rdzvBackend": "c10d",
    }
    # spec.nprocPerNode: the webhook deprecates elasticPolicy.nProcPerNode.
    assert body["spec"]["nprocPerNode"] == "8"
    worker = body["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 4 and worker["restartPolicy"] == "OnFailure"
    # Created suspended: Kueue, not the operator, decides when pods start.
    assert body["spec"]["runPolicy"]["suspend"] is True
    # The operator's PET_* variables drive torchrun; the command adds no conflicting flags.
    assert container(body)["command"] == ["torchrun", *BASE["command"]]
    assert container(body)["name"] == "pytorch"


def test_pod_lands_on_its_pool_with_whole_instance_resources() -> None:
    spec = pod(job())
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert {e["key"]: e["values"] for e in term["matchExpressions"]} == {
        "llm-platform/pool": ["p5"],
        "node.kubernetes.io/instance-type": ["p5.48xlarge"],
    }
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert spec["priorityClassName"] == "llmp-training"
    assert spec["serviceAccountName"] == "training"
    res = container(job())["resources"]
    for section in ("limits", "requests"):
        assert res[section]["nvidia.com/gpu"] == "8"
        assert res[section]["vpc.amazonaws.com/efa"] == "32"
        # libfabric is told not to use huge pages (DataLoader workers fork): none requested
        assert "hugepages-2Mi" not in res[section]
    assert res["requests"]["memory"] == res["limits"]["memory"]
    assert "cpu" not in res["limits"]


def test_volumes_fsx_and_shared_memory() -> None:
    spec = pod(job())
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["fsx"]["persistentVolumeClaim"] == {"claimName": "fsx-lustre"}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    mounts = {m["mountPath"]: m["name"] for m in container(job())["volumeMounts"]}
    assert mounts == {"/fsx": "fsx", "/dev/shm": "dshm"}


def test_environment_follows_the_efa_guidance() -> None:
    e = env(job())
    assert e["NCCL_SOCKET_IFNAME"] == "^lo"
    assert e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert e["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert e["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert e["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"].startswith("/fsx/checkpoints/llama-8b/")
    for unset in ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "RDMAV_FORK_SAFE", "FI_EFA_FORK_SAFE"):
        assert unset not in e
    # awsome-distributed-ai's EFA cheatsheet: DataLoader workers fork, and fork()
    # fails with ENOMEM once libfabric's huge-page pool is used up.
    assert e["FI_EFA_USE_HUGE_PAGE"] == "0"
    assert "FI_EFA_USE_HUGE_PAGE" not in env(job(instance_type="g6e.12xlarge"))  # no EFA


def test_security_context_is_restricted() -> None:
    spec = pod(job())
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    ctx = container(job())["securityContext"]
    assert ctx["privileged"] is False and ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))


@pytest.mark.parametrize(
    "instance_type",
    ["p5.48xlarge", "p5en.48xlarge", "p4d.24xlarge", "g6e.12xlarge", "trn1.32xlarge"],
)
def test_pod_template_validates_strictly_and_passes_the_policy_pack(instance_type: str) -> None:
    body = job(instance_type=instance_type)
    validate(as_pod(body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]))
    assert policy_violations(body, "kubernetes:kubeflow.org/v1:PyTorchJob") == []


def test_neuron_uses_its_resource_and_taint_and_no_nccl_settings() -> None:
    body = job(instance_type="trn1.32xlarge", node_pool="trn1")
    kind = catalog().accelerator_kinds["neuron"]
    assert container(body)["resources"]["limits"][kind.resource] == "16"
    assert pod(body)["tolerations"][0]["key"] == kind.taint_key
    assert not any(k.startswith("NCCL_") for k in env(body))


def test_instance_without_efa_gets_no_efa_resource() -> None:
    body = job(instance_type="g6e.12xlarge", node_pool="g6e")
    assert "vpc.amazonaws.com/efa" not in container(body)["resources"]["limits"]


def test_explicit_counts_are_used() -> None:
    body = job(gpus_per_node=4, efa_per_node=16)
    assert body["spec"]["nprocPerNode"] == "4"
    assert container(body)["resources"]["limits"]["vpc.amazonaws.com/efa"] == "16"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"efa_per_node": 33}, "efa_per_node 33: p5.48xlarge takes at most 32 EFA interfaces"),
        ({"gpus_per_node": 9}, "gpus_per_node 9: p5.48xlarge has 8 H100 accelerators"),
        ({"gpus_per_node": 0}, "gpus_per_node 0"),
        ({"image": "nvcr.io/nvidia/pytorch:latest"}, "uses the latest tag"),
        ({"image": "nvcr.io/nvidia/pytorch"}, "has no tag"),
        ({"instance_type": "m7i.4xlarge"}, "m7i.4xlarge has no accelerator"),
        ({"instance_type": "p9.huge"}, "p9.huge is not in the catalog"),
        ({"nodes_min": 5}, "nodes_min 5 is above nodes_max 4"),
        ({"checkpoint_dir": "/tmp/ckpt"}, "must be a path under /fsx/"),
        ({"checkpoint_dir": "/fsx/../etc"}, "must be a path under /fsx/"),
        ({"name": "Llama_8B"}, "must be a DNS label"),
        ({"priority_class": "urgent"}, "is not one of"),
        ({"privileged": True}, "Extra inputs are not permitted"),
    ],
)
def test_bad_specs_fail_with_one_line(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as exc:
        job(**overrides)
    text = str(exc.value)
    assert message in text and "\n" not in text


def test_digest_pinned_image_is_accepted() -> None:
    image = "nvcr.io/nvidia/pytorch@sha256:" + "0" * 64
    assert container(job(image=image))["image"] == image


def test_spec_defaults_come_from_the_catalog() -> None:
    spec = JobSpec.model_validate({**BASE, "instance_type": "p4d.24xlarge"})
    assert (spec.gpus, spec.efa) == (8, 4)


def test_rank_zero_metrics_port_job_name_node_and_step_times() -> None:
    body = job()
    c = container(body)
    assert c["ports"] == [{"name": "metrics", "containerPort": 9300, "protocol": "TCP"}]
    e = env(body)
    assert e["LLMP_METRICS_PORT"] == "9300"
    assert e["LLMP_METRICS_ADDR"] == "0.0.0.0"
    assert e["LLMP_JOB_NAME"] == "llama-8b"
    assert e["LLMP_STEP_TIMES"] == "/fsx/checkpoints/llama-8b/step-times.jsonl"
    (node,) = [v for v in c["env"] if v["name"] == "NODE_NAME"]
    assert node == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    labels = body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
    assert labels["llm-platform/job-kind"] == "training"
