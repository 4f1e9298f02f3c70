"""The data jobs' RayJob: valid for the pinned KubeRay CRD, its pods valid Kubernetes pods, and
the shape Kueue and KubeRay need (suspended, queued, fixed workers, the head without tasks).

The CRD schema is test data: the `v1` openAPIV3Schema of
ray-operator/config/crd/bases/ray.io_rayjobs.yaml at ray-project/kuberay tag v1.7.0 (the
catalog's `kuberay-operator` pin; the file's sha256 01a5cf3b17c1769fda44af7e82debcd98722f0c2
7b9ab84d084681c6649121f5, identical to the chart's crds/ray.io_rayjobs.yaml), as compact JSON
with sorted keys, gzipped (1.39 MB -> 13 KB). A bump of the pin must refresh it.
"""

from __future__ import annotations

import functools
import gzip
import json
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from llmp.jobs import prepare
from llmp.jobs.data import DataPrepared
from manifests import kueue
from manifests.jobs import rayjob
from spec.catalog import catalog
from spec.labels import CPU_POOL_TAINT, JOB_KIND_LABEL, POOL_LABEL, TEAM_LABEL
from tests.manifests.serving.test_multinode import _unknown_fields

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = Path(__file__).with_name("data") / "ray.io_rayjobs_v1.schema.json.gz"
TEXT = ROOT / "examples/data-text.yaml"
MULTIMODAL = ROOT / "examples/data-multimodal.yaml"
WEB = ROOT / "examples/data-web.yaml"


@functools.cache
def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(gzip.decompress(SCHEMA.read_bytes()))
    return loaded


@functools.cache
def _prepared(path: Path) -> DataPrepared:
    prepared = prepare(str(path))
    assert isinstance(prepared, DataPrepared)
    return prepared


def _rayjob(path: Path) -> dict[str, Any]:
    config_map, job = _prepared(path).manifests
    assert config_map["kind"] == "ConfigMap"
    return job


def _version() -> str:
    from spec.stackfile import load_config
    from tests.conftest import raw_stack

    return load_config(raw_stack("pretrain")).cluster.version


def _templates(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cluster = job["spec"]["rayClusterSpec"]
    return {
        "head": cluster["headGroupSpec"]["template"],
        "workers": cluster["workerGroupSpecs"][0]["template"],
        "submitter": job["spec"]["submitterPodTemplate"],
    }


@pytest.mark.parametrize("path", [TEXT, WEB, MULTIMODAL], ids=["text", "web", "multimodal"])
def test_the_rayjob_is_valid_for_the_pinned_kuberay_crd(path: Path) -> None:
    job = _rayjob(path)
    jsonschema.Draft7Validator(_schema()).validate(job)
    # A typo would pass the schema (CRDs allow unknown fields) and be pruned: none here.
    assert _unknown_fields(job, _schema()) == []


def test_the_schema_refuses_what_kuberay_would() -> None:
    job = _rayjob(TEXT)
    bad = json.loads(json.dumps(job))
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].pop("groupName")
    with pytest.raises(jsonschema.ValidationError, match="groupName"):
        jsonschema.Draft7Validator(_schema()).validate(bad)
    typo = json.loads(json.dumps(job))
    typo["spec"]["shutdownAfterJobsFinish"] = True
    assert _unknown_fields(typo, _schema()) == [".spec.shutdownAfterJobsFinish"]


@pytest.mark.parametrize("path", [TEXT, WEB, MULTIMODAL], ids=["text", "web", "multimodal"])
def test_the_configmap_and_every_pod_template_pass_kubernetes_validate(path: Path) -> None:
    config_map, job = _prepared(path).manifests
    version = _version()
    kubernetes_validate.validate(config_map, version, strict=True)
    for name, template in _templates(job).items():
        pod = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": name, "namespace": job["metadata"]["namespace"]},
            "template": template,
        }
        kubernetes_validate.validate(pod, version, strict=True)


def test_kueue_unsuspends_it_and_kuberay_cleans_up_after_it() -> None:
    spec = _rayjob(TEXT)["spec"]
    assert spec["suspend"] is True and spec["shutdownAfterJobFinishes"] is True
    assert spec["submissionMode"] == "K8sJobMode" and spec["ttlSecondsAfterFinished"] == 3600
    assert _rayjob(TEXT)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    cluster = spec["rayClusterSpec"]
    assert cluster["rayVersion"] == "2.60.0" and cluster["enableInTreeAutoscaling"] is False
    (group,) = cluster["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 4
    assert group["groupName"] != "head"  # Kueue's webhook reserves it


def test_the_ray_version_is_the_one_the_repo_pins() -> None:
    pins = (ROOT / "requirements-dev.txt").read_text()
    assert f"ray[data]=={rayjob.RAY_VERSION}" in pins


def test_the_entrypoint_is_the_pipeline_with_quoted_arguments() -> None:
    spec = _rayjob(TEXT)["spec"]
    assert shlex.split(spec["entrypoint"]) == [
        "python",
        "-m",
        "workloads.data.text",
        "--config",
        "/etc/llmp/pipeline.json",
        "--input",
        "s3://acme-llm-pretrain-datasets/raw/web/",
        "--output",
        "/fsx/datasets/foundation/web-clean",
    ]
    odd = rayjob.entrypoint("m", ["--input", "/fsx/a b;rm -rf /"])
    assert shlex.split(odd)[-1] == "/fsx/a b;rm -rf /"


def test_the_head_runs_no_tasks_on_the_system_pool_and_workers_take_their_pool() -> None:
    job = _rayjob(TEXT)
    cluster = job["spec"]["rayClusterSpec"]
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    templates = _templates(job)

    def pools(t: dict[str, Any]) -> list[str]:
        terms = t["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        return [
            v for e in terms[0]["matchExpressions"] if e["key"] == POOL_LABEL for v in e["values"]
        ]

    assert pools(templates["head"]) == pools(templates["submitter"]) == ["system"]
    assert pools(templates["workers"]) == ["data"]
    assert templates["workers"]["spec"]["tolerations"] == [
        {"key": CPU_POOL_TAINT, "operator": "Exists", "effect": "NoSchedule"}
    ]
    worker = templates["workers"]["spec"]["containers"][0]
    assert worker["resources"]["requests"] == worker["resources"]["limits"]
    params = cluster["workerGroupSpecs"][0]["rayStartParams"]
    assert params["num-cpus"] == worker["resources"]["requests"]["cpu"] == "13"
    # The object store fits its /dev/shm, inside the container's memory limit.
    shm = next(v for v in templates["workers"]["spec"]["volumes"] if v["name"] == "dshm")
    assert int(params["object-store-memory"]) == kueue.quantity(shm["emptyDir"]["sizeLimit"])
    assert kueue.quantity(shm["emptyDir"]["sizeLimit"]) < kueue.quantity(
        worker["resources"]["limits"]["memory"]
    )


def test_every_pod_runs_as_the_tenants_role_with_fsx_and_the_config() -> None:
    templates = _templates(_rayjob(TEXT))
    for name in ("head", "workers"):
        spec = templates[name]["spec"]
        assert spec["serviceAccountName"] == "training"  # Pod Identity: the tenant's prefixes
        claims = [
            v["persistentVolumeClaim"]["claimName"]
            for v in spec["volumes"]
            if "persistentVolumeClaim" in v
        ]
        assert claims == ["fsx-lustre"]
        mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
        assert {"/fsx", "/dev/shm", "/etc/llmp"} <= mounts
        assert spec["securityContext"]["runAsNonRoot"] is True
        ctx = spec["containers"][0]["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False and ctx["capabilities"] == {"drop": ["ALL"]}
        assert templates[name]["metadata"]["labels"][JOB_KIND_LABEL] == "data"
        assert templates[name]["metadata"]["labels"]["llm-platform/job"] == "web-clean"
        ports = {p["name"]: p["containerPort"] for p in spec["containers"][0]["ports"]}
        assert ports["metrics"] == 8080
    # The submitter only calls the dashboard: no role, no token; KubeRay writes its command.
    submitter = templates["submitter"]["spec"]
    assert submitter["serviceAccountName"] == "default"
    assert submitter["automountServiceAccountToken"] is False
    assert "command" not in submitter["containers"][0]
    assert submitter["containers"][0]["name"] == "ray-job-submitter"


def test_a_multimodal_worker_asks_for_its_gpus_and_tolerates_the_gpu_taint() -> None:
    job = _rayjob(MULTIMODAL)
    worker = _templates(job)["workers"]["spec"]
    resources = worker["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == "4"
    assert "vpc.amazonaws.com/efa" not in resources["limits"]  # no collectives
    params = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["rayStartParams"]
    assert params["num-gpus"] == "4"
    taint = catalog().accelerator_kinds["nvidia"].taint_key
    assert [t["key"] for t in worker["tolerations"]] == [taint]


def test_on_a_shared_cluster_the_workers_select_their_teams_pool() -> None:
    """Two team stacks may both name a CPU pool `data`; Kueue's cpu flavor has no node
    labels, so the workers themselves select the team's nodes."""
    spec = _prepared(TEXT).job.ray_job_spec(
        instance_type="m7i.4xlarge",
        pool_taint=CPU_POOL_TAINT,
        gpus_per_worker=0,
        service_account="training",
        team="code-models",
    )
    worker = rayjob.ray_job(spec)["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    terms = worker["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms and all(
        {"key": TEAM_LABEL, "operator": "In", "values": ["code-models"]} in t["matchExpressions"]
        for t in terms
    )
    own = rayjob.ray_job(
        _prepared(TEXT).job.ray_job_spec(
            instance_type="m7i.4xlarge",
            pool_taint=CPU_POOL_TAINT,
            gpus_per_worker=0,
            service_account="training",
        )
    )["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert TEAM_LABEL not in json.dumps(own)
