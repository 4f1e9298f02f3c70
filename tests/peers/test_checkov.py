"""checkov's Kubernetes framework over the rendered manifests of every stack: nothing fails.

The manifests are written exactly as `llmp synth` writes them (`write_plan`),
and checkov runs once per stack in a subprocess, offline:

- `checkov_offline.py` cuts the network (checkov asks PyPI for updates on
  import, whatever its flags) and reports any attempt as `NETWORK-ATTEMPT`;
- `--skip-download` and `BC_SKIP_MAPPING=TRUE` skip every Prisma Cloud call,
  and no API key reaches it (BC_*, PRISMA_*, CKV_* are dropped from its
  environment);
- it runs in an empty directory, so no `.checkov.yaml` is picked up.

Checkov's bundled Kubernetes checks all target workloads, RBAC and PSPs; the
platform's own checks (`checkov_checks/`) cover the kinds it renders today.
Skips come only from `checkov-skips.yaml` at the repository root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmp.plan.synth import write_plan
from llmp.stacks import REPO_ROOT
from tests.conftest import STACKS

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "checkov_offline.py"
PLATFORM_CHECKS = HERE / "checkov_checks"
SKIPS_FILE = REPO_ROOT / "checkov-skips.yaml"
TIMEOUT_S = 180

# Passed checks per stack: the platform's checks (part-of label on namespaces, volumes,
# claims, priority classes, quotas and limit ranges; Pod Security, retention, quota and
# limit-range contents) plus checkov's bundled RBAC and ServiceAccount checks on each
# tenant's Role, RoleBinding and `training` ServiceAccount (one tenant in pretrain and
# inference, three in finetune). Inference adds checkov's bundled workload checks on its two
# vLLM Deployments (probes, limits, security contexts; not the digest while vLLM and Envoy go
# by tag, a resource skip each), its Services and the model servers' ServiceAccount (the
# gateway keys are in Secrets Manager, in no Secret).
# Pretrain's checkpoint retention adds checkov's workload checks on the milestone copier's
# CronJob (limits, security contexts; its image goes by release tag, a resource skip) and
# its ServiceAccount: 86. Inference's endpoint picker (llama-8b routes by it) adds checkov's
# workload checks on its Deployment and pod template (probes, limits, security contexts,
# digest, no automatic token), its Role, RoleBinding, ServiceAccount and Service: 102.
# A tenant refused some PriorityClasses has a quota scoped to them (pods: 0): the part-of
# label and the quota check pass on it, 2 per such tenant (pretrain's foundation and
# finetune's three; inference's serving tenant may use every class).
PRIORITY_QUOTA = 2
EXPECTED_PASSED = {
    "pretrain": 26 + 86 + PRIORITY_QUOTA,
    "finetune": 70 + 3 * PRIORITY_QUOTA,
    "inference": 208 + 102,
}
# Monitoring (every stack): part-of and Pod Security on its Namespace (privileged, allowed by
# name in CKV_LLMP_2 with warn/audit baseline), part-of and contents on its ResourceQuota and
# LimitRange. Its StorageClass, dashboard ConfigMaps and monitors have no check.
MONITORING_PASSED = 6
# The straggler watcher (monitoring.stragglers, on in pretrain and finetune): checkov's
# workload checks on its Deployment and its pod template, its ServiceAccount, and the
# platform's part-of checks; its image digest is the one resource skip (checkov-skips.yaml).
STRAGGLER_WATCH_STACKS = ("pretrain", "finetune")
STRAGGLER_WATCH_PASSED = 89


def _resource_names(plans: Any, stack: str) -> set[str]:
    """checkov's names (KIND.NAMESPACE.NAME) of a stack's rendered objects."""
    names = set()
    for m in plans(stack).manifests():
        meta = m.get("metadata", {})
        names.add(f"{m['kind']}.{meta.get('namespace', 'default')}.{meta.get('name')}")
    return names


@pytest.mark.parametrize("stack", STACKS)
def test_each_resource_skip_is_still_needed(plans, checkov_report, stack: str) -> None:
    """A skip of one resource covers a failure wherever that resource is rendered."""
    present = _resource_names(plans, stack)
    expected = {(check, name) for check, name in resource_skips() if name in present}
    _, used = _failed(checkov_report(stack))
    assert used == expected


def test_each_resource_skip_names_a_rendered_resource(plans) -> None:
    rendered = set().union(*(_resource_names(plans, stack) for stack in STACKS))
    # The serving example's objects and its LeaderWorkerSet's pods, which
    # tests/peers/test_checkov_multinode.py scans with these skips.
    from tests.manifests.serving.test_multinode import _plan

    for m in _plan().manifests():
        meta = m.get("metadata", {})
        rendered.add(f"{m['kind']}.{meta.get('namespace', 'default')}.{meta.get('name')}")
    rendered |= {"Pod.serving.llama-405b-leader", "Pod.serving.llama-405b-worker"}
    assert {name for _, name in resource_skips()} <= rendered


def load_skips() -> list[dict[str, str]]:
    """Every entry; one with a `workload` applies only to that workload's own scan."""
    skips = yaml.safe_load(SKIPS_FILE.read_text()) or []
    assert isinstance(skips, list)
    for entry in skips:
        assert set(entry) in (
            {"id", "reason"},
            {"id", "reason", "workload"},
            {"id", "reason", "resource"},
        ), entry
        assert str(entry["reason"]).strip(), f"{entry['id']}: a skip needs a reason"
    ids = [(e["id"], e.get("workload"), e.get("resource")) for e in skips]
    assert len(ids) == len(set(ids)), "duplicate ids in checkov-skips.yaml"
    return skips


def skip_ids(workload: str | None = None) -> set[str]:
    """The ids skipped for the stacks' manifests (workload None) or for one workload's; not
    those of one resource (`resource_skips`), which checkov still runs."""
    return {
        e["id"]
        for e in load_skips()
        if e.get("workload") in (None, workload) and "resource" not in e
    }


def resource_skips() -> set[tuple[str, str]]:
    """(check id, checkov's resource name) of the skips of one resource of the stacks."""
    return {(e["id"], e["resource"]) for e in load_skips() if "resource" in e}


def _failed(report: dict[str, Any]) -> tuple[list[str], set[tuple[str, str]]]:
    """The failures no skip covers, and the resource skips that covered one."""
    scoped = resource_skips()
    failed, used = [], set()
    for c in report["results"].get("failed_checks", []):
        key = (c["check_id"], c["resource"])
        if key in scoped:
            used.add(key)
        else:
            failed.append(f"{c['check_id']} {c['resource']}: {c['check_name']}")
    return failed, used


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("BC_", "PRISMA_", "CKV_", "CHECKOV_"))
    }
    env.update({"BC_SKIP_MAPPING": "TRUE", "LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1"})
    return env


def run_checkov(
    directory: Path, workdir: Path, workload: str | None = None
) -> tuple[list[dict[str, Any]], str]:
    """checkov's JSON reports (one per framework) and its stderr."""
    args = [
        sys.executable,
        str(RUNNER),
        "--directory",
        str(directory),
        "--framework",
        "kubernetes",
        "--output",
        "json",
        "--skip-download",
        "--external-checks-dir",
        str(PLATFORM_CHECKS),
    ]
    skipped = sorted(skip_ids(workload))
    if skipped:
        args += ["--skip-check", ",".join(skipped)]
    workdir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        args,
        cwd=workdir,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert "NETWORK-ATTEMPT" not in proc.stderr, proc.stderr
    # 0: nothing failed; 1: failed checks (reported below); anything else: a crash.
    assert proc.returncode in (0, 1), proc.stderr[-4000:]
    data = json.loads(proc.stdout)
    return (data if isinstance(data, list) else [data]), proc.stderr


def _kubernetes_report(reports: list[dict[str, Any]]) -> dict[str, Any]:
    for report in reports:
        if report.get("check_type") == "kubernetes":
            return report
    # checkov prints a bare summary when it found nothing to check.
    (summary,) = reports
    return {"check_type": "kubernetes", "results": {}, "summary": summary}


@pytest.fixture(scope="module")
def checkov_report(
    plans, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], dict[str, Any]]:
    """checkov_report("pretrain") -> checkov's kubernetes report of that stack (run once)."""
    cache: dict[str, dict[str, Any]] = {}

    def get(stack: str) -> dict[str, Any]:
        if stack not in cache:
            root = tmp_path_factory.mktemp(f"checkov-{stack}")
            target = write_plan(plans(stack), root / "out")
            reports, _ = run_checkov(target / "manifests", root / "work")
            cache[stack] = _kubernetes_report(reports)
        return cache[stack]

    return get


def test_skips_file_lists_each_skip_once_with_a_reason() -> None:
    for entry in load_skips():
        assert str(entry["id"]).startswith("CKV"), entry


@pytest.mark.parametrize("stack", STACKS)
def test_no_check_fails_on_the_rendered_manifests(plans, checkov_report, stack: str) -> None:
    report = checkov_report(stack)
    summary = report["summary"]
    failed, used = _failed(report)
    assert failed == []
    assert summary["failed"] == len(used)
    assert summary["parsing_errors"] == 0
    watch = STRAGGLER_WATCH_PASSED if stack in STRAGGLER_WATCH_STACKS else 0
    assert summary["passed"] == EXPECTED_PASSED[stack] + MONITORING_PASSED + watch
    manifests = plans(stack).manifests()
    # checkov also scans each Deployment's pod template as a Pod of its own.
    templates = sum(1 for m in manifests if m["kind"] == "Deployment")
    # checkov does not count ConfigMaps (Grafana's dashboards) as resources.
    config_maps = sum(1 for m in manifests if m["kind"] == "ConfigMap")
    # Nor a file holding `{{`, which it takes for a Helm template and leaves unparsed: the
    # straggler alerts' annotations are Prometheus templates (a PrometheusRule: no check).
    templated = sum(1 for m in manifests if m["kind"] != "ConfigMap" and "{{" in json.dumps(m))
    assert summary["resource_count"] == len(manifests) - config_maps - templated + templates


@pytest.mark.parametrize("stack", STACKS)
def test_every_skip_comes_from_the_skips_file(checkov_report, stack: str) -> None:
    allowed = skip_ids()
    skipped = {c["check_id"] for c in checkov_report(stack)["results"].get("skipped_checks", [])}
    assert skipped <= allowed


@pytest.mark.parametrize("stack", STACKS)
def test_the_platform_checks_ran(checkov_report, stack: str) -> None:
    passed = {c["check_id"] for c in checkov_report(stack)["results"].get("passed_checks", [])}
    assert {f"CKV_LLMP_{i}" for i in range(1, 6)} <= passed


def test_bundled_checks_run_offline_and_catch_a_bad_pod(tmp_path: Path) -> None:
    # The harness itself: a Pod in the default namespace, no limits, privileged.
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "canary"},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox", "securityContext": {"privileged": True}}
            ]
        },
    }
    (manifests / "pod.yaml").write_text(yaml.safe_dump(pod))
    report = _kubernetes_report(run_checkov(manifests, tmp_path / "work")[0])
    failed = {c["check_id"] for c in report["results"]["failed_checks"]}
    # Default namespace, privileged container, no CPU limits.
    assert {"CKV_K8S_21", "CKV_K8S_16", "CKV_K8S_11"} <= failed


def test_the_dcgm_diagnostic_job_passes_checkov(plans, tmp_path: Path) -> None:
    """`llmp accept` creates the DCGM job at run time in a tenant namespace (no plan holds
    it): scan it beside that namespace's NetworkPolicies, which CKV2_K8S_6 looks for."""
    from manifests.jobs.dcgm_diag import COMPONENT, DcgmDiagSpec, dcgm_diag_manifests

    manifests = tmp_path / "manifests"
    manifests.mkdir()
    spec = DcgmDiagSpec(
        instance_type="p5.48xlarge",
        node_pool="h100",
        namespace="foundation",
        nodes=16,
        queue_name="default",
    )
    (job,) = dcgm_diag_manifests(spec)
    (manifests / "job-foundation-dcgm-diag.yaml").write_text(yaml.safe_dump(job))
    policies = [
        m
        for m in plans("pretrain").manifests()
        if m["kind"] == "NetworkPolicy" and m["metadata"]["namespace"] == "foundation"
    ]
    assert policies
    for policy in policies:
        name = policy["metadata"]["name"]
        (manifests / f"networkpolicy-foundation-{name}.yaml").write_text(yaml.safe_dump(policy))
    report = _kubernetes_report(run_checkov(manifests, tmp_path / "work", workload=COMPONENT)[0])
    failed = [
        f"{c['check_id']} {c['resource']}: {c['check_name']}"
        for c in report["results"].get("failed_checks", [])
    ]
    assert failed == []
    assert report["summary"]["parsing_errors"] == 0
    passed = {c["check_id"] for c in report["results"].get("passed_checks", [])}
    # Among them: limits, no privilege escalation, capabilities dropped, read-only root,
    # no service-account token, seccomp, a NetworkPolicy selecting the pods.
    assert {"CKV_K8S_11", "CKV_K8S_20", "CKV_K8S_37", "CKV_K8S_22", "CKV_K8S_38"} <= passed
    assert {"CKV_K8S_31", "CKV2_K8S_6"} <= passed
    # The workload's own skips are each still needed: no digest pinned (checked on a
    # registry, not here), and root for the DCGM host engine.
    scoped = {e["id"] for e in load_skips() if e.get("workload") == COMPONENT}
    assert scoped == {"CKV_K8S_43", "CKV_K8S_23", "CKV_K8S_40"}
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert "@sha256:" not in container["image"]
    assert "runAsNonRoot" not in container["securityContext"]
    assert "runAsUser" not in job["spec"]["template"]["spec"]["securityContext"]
