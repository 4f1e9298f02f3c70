"""`llmp job` data kinds: a job file checked against its stack, rendered as a ConfigMap and a
RayJob, refused with one line where the cluster would refuse it or never admit it, and a
RayJob's state read as Kueue reads it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from llmp.cli import app
from llmp.jobs import api as job_api
from llmp.jobs import prepare
from llmp.jobs import state as job_state
from llmp.jobs.checks import JobFileError
from tests.llmp.job_files import job_file

ROOT = Path(__file__).resolve().parents[2]
TEXT = ROOT / "examples/data-text.yaml"
MULTIMODAL = ROOT / "examples/data-multimodal.yaml"
WEB = ROOT / "examples/data-web.yaml"


def test_dry_run_prints_where_head_and_workers_run_and_what_kueue_admits() -> None:
    result = CliRunner().invoke(app, ["job", "submit", str(TEXT), "--dry-run"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "head on the system pool: 2 vCPUs, 8Gi" in out
    assert "4 workers on CPU pool data (m7i.4xlarge), one per node: 13 vCPUs, 54Gi each" in out
    assert "ClusterQueue foundation, flavor cpu" in out
    assert "Kueue admits head, 4 workers and the submitter at once: 54.5 vCPUs" in out
    assert "kind: RayJob" in out and "kind: ConfigMap" in out
    summary = out.split("apiVersion:")[0]
    assert all(len(line) <= 80 for line in summary.splitlines())


def test_a_multimodal_job_on_a_gpu_pool_waits_for_its_nodes() -> None:
    prepared = prepare(str(MULTIMODAL))
    lines = prepared.summary()
    assert any("flavor cpu, pool-h100" in line for line in lines)
    assert any("8 nvidia.com/gpu" in line for line in lines)
    assert any("gpu-provisioning check" in line for line in lines)
    assert all(len(line) <= 80 for line in "\n".join(lines).splitlines())


def _error(tmp_path: Path, base: Path = TEXT, **changes: Any) -> str:
    with pytest.raises(JobFileError) as caught:
        prepare(job_file(tmp_path, base, **changes))
    message = str(caught.value)
    assert "\n" not in message
    return message.split(": ", 1)[1]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"pool": "h100"},
            "pool = 'h100': a GPU pool (node_pools): data-text runs on CPU workers; give a CPU "
            "pool of cpu_pools (data)",
        ),
        (
            {"workers": 9},
            "workers = 9: one worker per node, and pool data has at most 8 nodes "
            "(cpu_pools.data.max_size)",
        ),
        ({"nodes": 2}, "nodes = 2: kind data-text takes no nodes"),
        ({"workers": None}, "workers = <missing>: required by kind data-text"),
        ({"pipeline__dedup__nope": 1}, "pipeline.dedup.nope = 1: unknown key"),
        ({"input": "/tmp/raw"}, "input = '/tmp/raw': s3://bucket/prefix/ of the stack's"),
        (
            {"output": "s3://acme-llm-pretrain-datasets/elsewhere/"},
            "output = 's3://acme-llm-pretrain-datasets/elsewhere/': tenant foundation's "
            "workload role (service account training) may write only",
        ),
        ({"gpus_per_node": 1}, "gpus_per_node = 1: pool data is a CPU pool: no GPUs"),
    ],
)
def test_bad_data_job_files_are_refused_in_one_line(
    tmp_path: Path, changes: dict[str, Any], expected: str
) -> None:
    assert _error(tmp_path, **changes).startswith(expected)


def test_a_web_job_runs_the_web_pipeline_with_its_source_manifest_in_the_config_map() -> None:
    prepared = prepare(str(WEB))
    config_map, job = prepared.manifests
    assert prepared.summary()[0].endswith("checked (data-web, RayJob)")
    assert job["spec"]["entrypoint"].startswith("python -m workloads.data.web --config ")
    pipeline = json.loads(config_map["data"]["pipeline.json"])
    assert [s["licence"] for s in pipeline["sources"]] == [
        "Common Crawl terms of use",
        "contract ACME-2026-017 (text and data mining for model training)",
    ]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"pipeline__sources": []},
            "pipeline.sources = []: no sources: every input file needs a source",
        ),
        (
            {"pool": "h100"},
            "pool = 'h100': a GPU pool (node_pools): data-web runs on CPU workers",
        ),
        ({"pipeline__urls__blocklists__Bad": "x"}, "pipeline.urls.blocklists = "),
    ],
)
def test_bad_web_job_files_are_refused_in_one_line(
    tmp_path: Path, changes: dict[str, Any], expected: str
) -> None:
    assert _error(tmp_path, WEB, **changes).startswith(expected)


def test_a_web_source_without_a_licence_is_refused_in_one_line(tmp_path: Path) -> None:
    import yaml

    data = yaml.safe_load(WEB.read_text())
    del data["pipeline"]["sources"][1]["licence"]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(JobFileError) as caught:
        prepare(str(path))
    message = str(caught.value)
    assert "\n" not in message
    assert message.endswith("pipeline.sources.1.licence = <missing>: required")


def test_a_multimodal_pipeline_rule_is_keyed_to_its_block(tmp_path: Path) -> None:
    got = _error(tmp_path, MULTIMODAL, pipeline__stages=["clip"])
    assert got.startswith("pipeline = ")
    assert "'clip' needs 'frames'" in got


def test_a_tenant_without_quota_on_the_gpu_pool_is_refused(tmp_path: Path) -> None:
    got = _error(tmp_path, MULTIMODAL, tenant="eval")
    assert got.startswith("pool = 'h100': tenant eval has no quota on this pool")


def test_a_stack_without_kuberay_refuses_a_data_job() -> None:
    from llmp.jobs.checks import load_job_file
    from llmp.jobs.data import check_data
    from llmp.stacks import load_stack

    job = load_job_file(str(TEXT))
    cfg = load_stack(job.stack)
    off = cfg.model_copy(update={"addons": cfg.addons.model_copy(update={"kuberay": False})})
    with pytest.raises(JobFileError) as caught:
        check_data(str(TEXT), job, off)
    assert str(caught.value).endswith(
        "kind = 'data-text': stack pretrain has no KubeRay operator to run a RayJob "
        "(addons.kuberay: false)"
    )


def _ray(status: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "RayJob", "metadata": {"uid": "u1"}, "status": status, "spec": {}}


def _workload(admitted: bool) -> dict[str, Any]:
    conds = [{"type": "QuotaReserved", "status": "True"}]
    if admitted:
        conds.append({"type": "Admitted", "status": "True"})
    return {
        "metadata": {"ownerReferences": [{"kind": "RayJob", "uid": "u1"}]},
        "status": {
            "conditions": conds,
            "admission": {
                "clusterQueue": "foundation",
                "podSetAssignments": [{"flavors": {"cpu": "cpu"}}],
            },
        },
    }


def test_a_rayjobs_state_is_read_as_kueue_reads_it() -> None:
    snap = job_state.Snapshot("foundation", "web-clean", _ray({"jobDeploymentStatus": "New"}))
    assert job_state.state_of(snap).phase == "created"
    wl = _workload(admitted=True)
    assert job_api.workload_of(_ray({}), [wl]) is wl
    running = _ray({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})
    pods = [{"metadata": {"name": "p"}, "status": {"phase": "Running"}, "spec": {"nodeName": "n"}}]
    state = job_state.state_of(job_state.Snapshot("foundation", "web-clean", running, wl, pods))
    assert (state.phase, state.detail) == (
        "running",
        "Ray job RUNNING; 1/1 pods running on 1 nodes",
    )
    done = _ray({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"})
    ok = job_state.state_of(job_state.Snapshot("foundation", "web-clean", done, wl))
    assert ok.done and ok.ok and ok.phase == "succeeded"
    failed = _ray({"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "message": "exit 1"})
    bad = job_state.state_of(job_state.Snapshot("foundation", "web-clean", failed, wl))
    assert bad.done and not bad.ok and bad.detail == "Failed (Ray job FAILED): exit 1"
    # Complete without SUCCEEDED (stopped) is not a success: Kueue's rule.
    stopped = _ray({"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED"})
    assert not job_state.state_of(job_state.Snapshot("f", "w", stopped, wl)).ok
    queued = job_state.state_of(job_state.Snapshot("f", "w", running, _workload(False)))
    assert queued.phase == "admitted"


def test_the_submitters_pod_carries_the_drivers_log() -> None:
    pods = [
        {"metadata": {"name": "w-head", "labels": {"app.kubernetes.io/component": "ray-head"}}},
        {
            "metadata": {
                "name": "w-abcde",
                "creationTimestamp": "2026-12-02T00:00:00Z",
                "labels": {"app.kubernetes.io/component": "ray-submitter"},
            }
        },
    ]
    assert job_api.submitter_pod(pods) == "w-abcde"
    assert job_api.submitter_pod(pods[:1]) is None
