"""Kubernetes rules. The stacks declare no workloads yet: each test adds one."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.policies.conftest import add, hits, names, res

K8S_RULES = [
    "k8s-gpu-limits",
    "k8s-image-pinned",
    "k8s-serving-probes",
    "k8s-serving-pdb",
    "k8s-no-privileged",
    "k8s-namespace-quota",
]
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
LABELS = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/component": "serving"}


def container(**overrides: Any) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": "server",
        "image": "vllm/vllm-openai:v0.11.0",
        "resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"nvidia.com/gpu": 1}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8000}},
    }
    c.update(overrides)
    return {k: v for k, v in c.items() if v is not None}


def pod_spec(*containers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "containers": list(containers) or [container()],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        **extra,
    }


def workload(kind: str, spec: dict[str, Any], namespace: str = "serving") -> dict[str, Any]:
    template = {"metadata": {"labels": dict(LABELS)}, "spec": spec}
    bodies = {
        "Pod": spec,
        "Deployment": {"replicas": 2, "selector": {"matchLabels": LABELS}, "template": template},
        "StatefulSet": {
            "serviceName": "x",
            "selector": {"matchLabels": LABELS},
            "template": template,
        },
        "DaemonSet": {"selector": {"matchLabels": LABELS}, "template": template},
        "Job": {"template": template},
        "CronJob": {"schedule": "@daily", "jobTemplate": {"spec": {"template": template}}},
        "JobSet": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": template}}}]},
        "PyTorchJob": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": template}}},
    }
    metadata = {"name": "vllm", "namespace": namespace}
    if kind == "Pod":
        metadata["labels"] = dict(LABELS)
    return {"apiVersion": "v1", "kind": kind, "metadata": metadata, "spec": bodies[kind]}


TYPES = {
    "Pod": "kubernetes:core/v1:Pod",
    "Deployment": DEPLOYMENT,
    "StatefulSet": "kubernetes:apps/v1:StatefulSet",
    "DaemonSet": "kubernetes:apps/v1:DaemonSet",
    "Job": "kubernetes:batch/v1:Job",
    "CronJob": "kubernetes:batch/v1:CronJob",
    "JobSet": "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet",
    "PyTorchJob": "kubernetes:kubeflow.org/v1:PyTorchJob",
}


def deploy(p: dict, kind: str = "Deployment", spec: dict | None = None, **kw: Any) -> dict:
    return add(p, TYPES[kind], f"serve-{kind.lower()}", workload(kind, spec or pod_spec(), **kw))


def pdb(p: dict, labels: dict[str, str] | None = None, namespace: str = "serving") -> dict:
    return add(
        p,
        PDB,
        "serve-pdb",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "vllm", "namespace": namespace},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels or LABELS}},
        },
    )


@pytest.mark.parametrize("stack", ["pretrain", "finetune", "inference"])
@pytest.mark.parametrize("rule", K8S_RULES)
def test_k8s_rule_is_quiet_on_the_stacks(plan, stack: str, rule: str) -> None:
    assert hits(plan(stack), rule) == []


@pytest.mark.parametrize("kind", sorted(TYPES))
def test_a_good_workload_of_every_kind_passes(plan, kind: str) -> None:
    p = plan("inference")
    deploy(p, kind)
    pdb(p)
    for rule in K8S_RULES:
        if rule == "k8s-no-privileged":
            continue
        assert hits(p, rule) == [], rule


@pytest.mark.parametrize("kind", sorted(TYPES))
def test_gpu_limits_fire_on_requests_without_limits(plan, kind: str) -> None:
    p = plan("inference")
    deploy(p, kind, pod_spec(container(resources={"requests": {"nvidia.com/gpu": 1}})))
    assert names(hits(p, "k8s-gpu-limits")) == {f"serve-{kind.lower()}"}


def test_gpu_limits_fire_on_a_pod_on_gpu_nodes_without_gpus(plan) -> None:
    p = plan("inference")
    deploy(p, spec=pod_spec(container(resources={"limits": {"cpu": "2"}})))
    assert "targets GPU nodes" in hits(p, "k8s-gpu-limits")[0].message


def test_gpu_limits_spare_a_device_plugin_daemonset(plan) -> None:
    p = plan("inference")
    deploy(p, "DaemonSet", pod_spec(container(resources=None)))
    assert hits(p, "k8s-gpu-limits") == []


@pytest.mark.parametrize(
    ("image", "fires"),
    [
        ("vllm/vllm-openai:v0.11.0", False),
        ("registry:5000/team/server@sha256:" + "a" * 64, False),
        ("vllm/vllm-openai:latest", True),
        ("vllm/vllm-openai", True),
        ("registry:5000/team/server", True),
    ],
)
def test_image_pinned(plan, image: str, fires: bool) -> None:
    p = plan("inference")
    deploy(p, spec=pod_spec(container(image=image)))
    assert bool(hits(p, "k8s-image-pinned")) is fires


def test_image_pinned_checks_init_containers(plan) -> None:
    p = plan("inference")
    deploy(p, "Job", pod_spec(container(), initContainers=[container(name="i", image="busybox")]))
    assert "busybox" in hits(p, "k8s-image-pinned")[0].message


def test_serving_probes_fire_without_probes(plan) -> None:
    p = plan("inference")
    deploy(p, spec=pod_spec(container(readinessProbe=None)))
    assert "readinessProbe" in hits(p, "k8s-serving-probes")[0].message


def test_serving_probes_apply_to_a_serving_label_outside_the_namespace(plan) -> None:
    p = plan("inference")
    deploy(p, spec=pod_spec(container(livenessProbe=None)), namespace="default")
    assert names(hits(p, "k8s-serving-probes")) == {"serve-deployment"}
    p2 = plan("inference")
    r = deploy(p2, "Job", pod_spec(container(livenessProbe=None)), namespace="training")
    r.inputs["spec"]["template"]["metadata"]["labels"] = {"app": "train"}
    assert hits(p2, "k8s-serving-probes") == []


def test_serving_pdb_fires_without_a_matching_budget(plan) -> None:
    p = plan("inference")
    deploy(p)
    assert names(hits(p, "k8s-serving-pdb")) == {"serve-deployment"}
    pdb(p, labels={"app.kubernetes.io/name": "other"})
    assert names(hits(p, "k8s-serving-pdb")) == {"serve-deployment"}
    pdb(p, namespace="default")
    assert names(hits(p, "k8s-serving-pdb")) == {"serve-deployment"}
    pdb(p)
    assert hits(p, "k8s-serving-pdb") == []


@pytest.mark.parametrize(
    "change",
    [
        {"hostNetwork": True},
        {"hostPID": True},
        {"containers": [container(securityContext={"privileged": True})]},
    ],
)
def test_no_privileged_fires(plan, change: dict) -> None:
    p = plan("inference")
    deploy(p, spec={**pod_spec(), **change})
    assert names(hits(p, "k8s-no-privileged")) == {"serve-deployment"}


def test_no_privileged_allows_listed_system_daemonsets(plan) -> None:
    p = plan("inference")
    r = deploy(p, "DaemonSet", {**pod_spec(), "hostNetwork": True}, namespace="kube-system")
    r.inputs["metadata"]["name"] = "aws-node"
    assert hits(p, "k8s-no-privileged") == []
    config = {"k8s-no-privileged": {"allowed-daemonsets": []}}
    assert names(hits(p, "k8s-no-privileged", config)) == {"serve-daemonset"}


def test_namespace_quota_fires_without_a_quota(plan) -> None:
    p = plan("inference")
    namespace = res(p, "tenancy-serving-ns")
    extra = copy.deepcopy(namespace)
    extra.name = "ns-research"
    extra.urn = namespace.urn.replace("tenancy-serving-ns", "ns-research")
    extra.inputs["metadata"]["name"] = "research"
    p.resources.append(extra)
    assert names(hits(p, "k8s-namespace-quota")) == {"ns-research"}
    quota = add(
        p,
        "kubernetes:core/v1:ResourceQuota",
        "research-quota",
        {"kind": "ResourceQuota", "metadata": {"namespace": "research"}, "spec": {}},
    )
    assert hits(p, "k8s-namespace-quota") == []
    quota.inputs["metadata"]["namespace"] = "research-xyz"  # an auto-named namespace
    quota.dependencies = [extra.urn]
    assert hits(p, "k8s-namespace-quota") == []


# --- Kubeflow Trainer v2: TrainJobs and their runtimes -------------------------------------

TRAINJOB = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"
RUNTIME = "kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime"


def _trainjob(**overrides: Any) -> dict[str, Any]:
    from manifests.jobs.trainjob import build

    fields: dict[str, Any] = {
        "name": "run",
        "namespace": "chat",
        "image": "registry.example.com/trainer:1.0",
        "command": ["train.py"],
        "instance_type": "p5.48xlarge",
        "node_pool": "h100",
        "nodes_min": 1,
        "nodes_max": 2,
        "checkpoint_dir": "/fsx/checkpoints/run",
        "queue_name": "default",
    }
    return build(**{**fields, **overrides})


def _patched_pod(body: dict[str, Any]) -> dict[str, Any]:
    (patch,) = body["spec"]["runtimePatches"]
    (job,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod: dict[str, Any] = job["template"]["spec"]["template"]["spec"]
    return pod


def test_a_trainjob_the_builder_renders_passes_every_workload_rule(plan) -> None:
    p = plan("finetune")
    add(p, TRAINJOB, "train-run", _trainjob())
    for rule in K8S_RULES:
        assert hits(p, rule) == [], rule


def test_the_rules_read_a_trainjobs_trainer_and_its_runtime_patches(plan) -> None:
    p = plan("finetune")
    body = _trainjob()
    body["spec"]["trainer"]["image"] = "registry.example.com/trainer:latest"
    limits = body["spec"]["trainer"]["resourcesPerNode"]["limits"]
    del limits["nvidia.com/gpu"]
    _patched_pod(body)["containers"][0]["securityContext"] = {"privileged": True}
    add(p, TRAINJOB, "train-run", body)
    assert "uses the latest tag" in hits(p, "k8s-image-pinned")[0].message
    assert "requests nvidia.com/gpu without a limit" in hits(p, "k8s-gpu-limits")[0].message
    assert names(hits(p, "k8s-no-privileged")) == {"train-run"}


def test_the_platforms_runtimes_pass_and_a_privileged_runtime_does_not(plan) -> None:
    from manifests.jobs.trainjob import cluster_training_runtimes

    p = plan("finetune")
    runtimes = cluster_training_runtimes()
    for runtime in runtimes:
        add(p, RUNTIME, f"runtime-{runtime['metadata']['name']}", runtime)
    for rule in K8S_RULES:
        assert hits(p, rule) == [], rule
    bad = copy.deepcopy(runtimes[0])
    (job,) = bad["spec"]["template"]["spec"]["replicatedJobs"]
    (node,) = job["template"]["spec"]["template"]["spec"]["containers"]
    node["securityContext"]["privileged"] = True
    node["image"] = "pytorch/pytorch"
    add(p, RUNTIME, "runtime-bad", bad)
    assert names(hits(p, "k8s-no-privileged")) == {"runtime-bad"}
    assert names(hits(p, "k8s-image-pinned")) == {"runtime-bad"}
