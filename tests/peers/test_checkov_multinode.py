"""checkov over the serving example (examples/stacks/Pulumi.serving-405b.yaml), as `llmp
synth` writes its manifests, plus its LeaderWorkerSet's leader and worker templates as Pods:
checkov does not look inside a custom resource, and those are the pods the cluster runs.
The same skips as the stacks' (checkov-skips.yaml), nothing more."""

from __future__ import annotations

from pathlib import Path

import yaml

from llmp.plan.synth import write_plan
from tests.manifests.serving.test_multinode import _lws, _plan
from tests.peers.test_checkov import _failed, _kubernetes_report, run_checkov


def test_the_canary_and_the_groups_pods_pass_checkov(tmp_path: Path) -> None:
    target = write_plan(_plan(), tmp_path / "out")
    group = _lws()["spec"]["leaderWorkerTemplate"]
    for role in ("leader", "worker"):
        template = group[f"{role}Template"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                **template["metadata"],
                "name": f"llama-405b-{role}",
                "namespace": "serving",
            },
            "spec": template["spec"],
        }
        (target / "manifests" / f"lws-{role}.yaml").write_text(yaml.safe_dump(pod))
    reports, _ = run_checkov(target / "manifests", tmp_path / "work")
    report = _kubernetes_report(reports)
    failed, used = _failed(report)
    assert failed == []
    # The skips this scan used are still needed: the images pinned by tag, not digest.
    assert {check for check, _ in used} <= {"CKV_K8S_43"}
    assert report["summary"]["parsing_errors"] == 0
    checked = {c["resource"] for c in report["results"]["passed_checks"]}
    for name in ("Pod.serving.llama-405b-leader", "Pod.serving.llama-405b-worker"):
        assert name in checked
    assert any("llama-8b-canary" in r for r in checked)
