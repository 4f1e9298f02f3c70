"""DCGM diagnostics: the per-node Indexed Job, and the verdict read from `dcgmi diag -j`.

The samples under data/ were written for these tests in the layout DCGM 4.6's
`dcgmi diag -r 2 -j` prints for a p5.48xlarge (8 H100, PCI device 2330): jsoncpp's
styled writer (sorted keys, 3-space indent), the "DCGM Diagnostic" object with the
software, memory and pcie tests per GPU, `entity_groups` and `metadata`, as NVIDIA's
dcgmi/Diag.cpp and testing/python3/dcgm_diag_schema.json define them. Error codes,
categories, severities and messages are DCGM's (dcgmlib/dcgm_errors.h, dcgm_errors.c):

- pass: every test passes on all 8 GPUs;
- memory fail: GPU 3 "Found 4 faulty memory elements" (DCGM_FR_FAULTY_MEMORY, 52,
  hardware memory, severity ISOLATE);
- pcie warn: GPU 5 a clock event from a power violation (DCGM_FR_CLOCKS_EVENT_POWER, 12,
  hardware power, severity MONITOR), which dcgmi's JSON prints as "Fail";
- truncated: the memory-fail output cut off at 40%, as a log is when the pod dies mid-write.
"""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from manifests.jobs.dcgm_diag import (
    DcgmDiagSpec,
    DiagOutputError,
    dcgm_diag_manifests,
    diag_script,
    judge,
    parse,
)
from spec.catalog import catalog
from tests.manifests.jobs.k8s import as_pod, policy_violations, validate

DATA = Path(__file__).with_name("data")
PASS = (DATA / "dcgm_diag_p5_level2_pass.json").read_text()
MEMORY_FAIL = (DATA / "dcgm_diag_p5_level2_memory_fail.json").read_text()
PCIE_WARN = (DATA / "dcgm_diag_p5_level2_pcie_warn.json").read_text()
TRUNCATED = (DATA / "dcgm_diag_p5_level2_truncated.log").read_text()
P5 = "p5.48xlarge"


def _doc(text: str = PASS) -> dict[str, Any]:
    return copy.deepcopy(json.loads(text))


def _test(doc: dict[str, Any], name: str) -> dict[str, Any]:
    for category in doc["DCGM Diagnostic"]["test_categories"]:
        for test in category["tests"]:
            if test["name"] == name:
                return test  # type: ignore[no-any-return]
    raise KeyError(name)


# --- the samples ------------------------------------------------------------------------


def test_a_healthy_node_passes_with_every_test_on_every_gpu() -> None:
    verdict = judge(PASS, P5, node="ip-10-10-1-17")
    assert verdict.passed and not verdict.warnings and not verdict.skipped
    assert verdict.run is not None
    assert verdict.run.tests == ["memory", "pcie", "software"]
    assert verdict.run.gpus == frozenset(range(8))
    assert (verdict.run.version, verdict.run.driver) == ("4.6.0", "570.172.08")
    assert len(verdict.run.results) == 24 and len(verdict.run.summaries) == 3
    assert verdict.summary() == (
        "PASS ip-10-10-1-17 (p5.48xlarge, level 2): memory, pcie, software passed on 8/8 GPUs"
    )


def test_faulty_memory_on_one_gpu_fails_the_node_and_names_it() -> None:
    verdict = judge(MEMORY_FAIL, P5, node="ip-10-10-1-18")
    assert not verdict.passed
    assert verdict.failures == (
        "memory on GPU 3 failed: Found 4 faulty memory elements on GPU 3 (DCGM error 52)",
    )
    assert verdict.summary() == (
        "FAIL ip-10-10-1-18 (p5.48xlarge, level 2): memory, pcie, software ran on 8/8 GPUs; "
        "memory on GPU 3 failed: Found 4 faulty memory elements on GPU 3 (DCGM error 52)"
    )


def test_a_monitor_level_clock_event_is_a_warning_not_a_failure() -> None:
    verdict = judge(PCIE_WARN, P5)
    assert verdict.passed
    assert verdict.warnings == (
        "pcie on GPU 5 (monitor-level): Detected clocks event due to power violation in "
        "GPU 5. (DCGM error 12)",
    )
    # dcgmi's JSON says Fail for it; the severity is what makes it a warning.
    (gpu5,) = [r for r in verdict.run.results if r.test == "pcie" and r.gpu == 5]  # type: ignore[union-attr]
    assert gpu5.raw_status == "Fail" and gpu5.monitor_only


def test_output_cut_short_fails_with_the_reason() -> None:
    verdict = judge(TRUNCATED, P5, node="ip-10-10-1-19")
    assert not verdict.passed and verdict.run is None
    (reason,) = verdict.failures
    assert reason.startswith("not dcgmi diag JSON: the JSON is cut short or broken (line ")


# --- the judge's rules -------------------------------------------------------------------


def test_a_monitor_level_error_of_a_software_category_still_fails() -> None:
    doc = _doc(PCIE_WARN)
    for result in _test(doc, "pcie")["results"]:
        for warning in result.get("warnings", []):
            # DCGM_FR_CUDA_API: severity MONITOR, category SOFTWARE_CUDA: the test could not look.
            warning.update(error_id=62, error_category=6, warning="cudaMalloc failed")
    verdict = judge(json.dumps(doc), P5)
    assert not verdict.passed
    assert verdict.failures == ("pcie on GPU 5 failed: cudaMalloc failed (DCGM error 62)",)


def test_skips_are_counted_and_reported_and_do_not_fail() -> None:
    doc = _doc()
    result = _test(doc, "memory")["results"][7]
    result["status"] = "Skip"
    result["warnings"] = [
        {
            "warning": "ECC memory on GPU 7 is not currently active.",
            "error_id": 55,
            "error_category": 10,
            "error_severity": 5,
        }
    ]
    verdict = judge(json.dumps(doc), P5)
    assert verdict.passed
    assert verdict.skipped == (
        "memory on GPU 7 skipped: ECC memory on GPU 7 is not currently active. (DCGM error 55)",
    )
    assert verdict.detail() == (
        "memory, pcie, software ran on 8/8 GPUs; 1 skipped: memory on GPU 7 skipped: ECC "
        "memory on GPU 7 is not currently active. (DCGM error 55)"
    )


def test_warn_status_and_a_pass_with_messages_are_warnings() -> None:
    doc = _doc()
    _test(doc, "software")["results"][2]["status"] = "Warn"
    _test(doc, "pcie")["results"][4]["warnings"] = [{"warning": "replays seen"}]
    verdict = judge(json.dumps(doc), P5)
    assert verdict.passed
    assert verdict.warnings == ("software on GPU 2", "pcie on GPU 4: replays seen")


def test_a_gpu_missing_from_the_run_fails_the_node() -> None:
    doc = _doc()
    doc["entity_groups"][0]["entities"].pop()
    for category in doc["DCGM Diagnostic"]["test_categories"]:
        for test in category["tests"]:
            test["results"] = [r for r in test["results"] if r["entity_id"] != 7]
    verdict = judge(json.dumps(doc), P5)
    assert verdict.failures == ("DCGM saw 7 GPUs (0, 1, 2, 3, 4, 5, 6); p5.48xlarge has 8",)
    # The same output is complete for an instance type with fewer GPUs.
    assert judge(json.dumps(doc), "g6e.12xlarge").passed


def test_a_test_of_the_level_without_a_result_fails() -> None:
    doc = _doc()
    categories = doc["DCGM Diagnostic"]["test_categories"]
    doc["DCGM Diagnostic"]["test_categories"] = [
        c for c in categories if c["category"] != "Integration"
    ]
    verdict = judge(json.dumps(doc), P5)
    assert verdict.failures == ("no result for pcie (level 2 runs software, pcie, memory)",)
    # Level 1 runs the software checks only, so a level-2 output satisfies it; level 3 does not.
    assert judge(PASS, P5, level=1).passed
    (missing,) = judge(PASS, P5, level=3).failures
    assert missing.startswith("no result for diagnostic, memory_bandwidth, targeted_stress")


def test_a_failed_test_summary_without_entity_results_fails() -> None:
    doc = _doc()
    software = _test(doc, "software")
    software["results"] = []
    software["test_summary"] = {
        "status": "Fail",
        "warnings": [{"warning": "Unable to load the NVML library", "error_id": 7}],
    }
    verdict = judge(json.dumps(doc), P5)
    assert verdict.failures == ("software failed: Unable to load the NVML library (DCGM error 7)",)


def test_an_unknown_status_fails() -> None:
    doc = _doc()
    _test(doc, "memory")["results"][0]["status"] = ""
    verdict = judge(json.dumps(doc), P5)
    assert verdict.failures == ("memory on GPU 0: status '' is not Pass/Fail/Warn/Skip",)


def test_a_runtime_error_fails_with_dcgms_message() -> None:
    text = json.dumps(
        {
            "DCGM Diagnostic": {
                "version": "4.6.0",
                "runtime_error": "Error: unable to establish a connection to the specified "
                "host: localhost",
            }
        }
    )
    verdict = judge(text, P5, node="n1")
    assert verdict.failures == (
        "dcgmi diag did not run: Error: unable to establish a connection to the specified "
        "host: localhost",
    )
    assert verdict.summary() == f"FAIL n1 (p5.48xlarge, level 2): {verdict.failures[0]}"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "the log is empty"),
        ("Error: Unable to connect to host engine.\n", "no JSON object in the log (it starts"),
        ('{"metadata": {"version": "4.6.0"}}', "no 'DCGM Diagnostic' object (top-level keys"),
        ('{"DCGM Diagnostic": {"test_categories": 3}}', "test_categories is 3, not a list"),
        (
            '{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": '
            '[{"name": "memory", "results": [{"entity_id": 0, "status": 1}]}]}]}}',
            "test_categories[0].tests[0].results[0].status is 1, not a string",
        ),
        ("[1, 2]", "the JSON document is [1, 2], not an object"),
    ],
)
def test_malformed_output_fails_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(DiagOutputError) as caught:
        parse(text)
    assert reason in str(caught.value)
    verdict = judge(text, P5)
    assert not verdict.passed and reason in verdict.failures[0]


def test_a_banner_around_the_json_is_ignored() -> None:
    text = "Started host engine version 4.6.0 using port number: 5555\n" + PASS + "\ndone\n"
    assert judge(text, P5).passed


def test_dcgm3_output_with_gpu_ids_is_read() -> None:
    # DCGM 3.3's dcgmi: "DCGM GPU Diagnostic", gpu_id as a string, serials at the top level.
    results = [{"gpu_id": str(g), "status": "Pass"} for g in range(8)]
    failing = [*results[:6], {"gpu_id": "6", "status": "Fail", "warnings": [
        {"warning": "Detected 2 volatile double-bit ECC error(s) in GPU 6.", "error_id": 4,
         "error_category": 10, "error_severity": 2}]}, results[7]]  # fmt: skip
    doc = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {"category": "Deployment", "tests": [{"name": "software", "results": results}]},
                {"category": "Hardware", "tests": [{"name": "memory", "results": failing}]},
                {"category": "Integration", "tests": [{"name": "pcie", "results": results}]},
            ]
        },
        "GPU Device Serials": {str(g): f"165282305{g}" for g in range(8)},
        "version": "3.3.9",
        "Driver Version Detected": "550.127.05",
    }
    verdict = judge(json.dumps(doc), P5)
    assert verdict.run is not None and verdict.run.version == "3.3.9"
    assert verdict.run.gpus == frozenset(range(8))
    assert verdict.failures == (
        "memory on GPU 6 failed: Detected 2 volatile double-bit ECC error(s) in GPU 6. "
        "(DCGM error 4)",
    )


def test_nvvs_gpu_ids_lists_and_upper_case_statuses_are_read() -> None:
    doc = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {
                    "category": "Deployment",
                    "tests": [
                        {"name": "software", "results": [{"gpu_ids": "0,1,2,3", "status": "PASS"}]}
                    ],
                }
            ]
        }
    }
    run = parse(json.dumps(doc))
    assert [(r.entity, r.status) for r in run.results] == [
        ("GPU 0", "pass"), ("GPU 1", "pass"), ("GPU 2", "pass"), ("GPU 3", "pass"),
    ]  # fmt: skip
    assert judge(json.dumps(doc), "g6e.12xlarge", level=1).passed


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="DCGM level 4 is not in the catalog"):
        judge(PASS, P5, level=4)


# --- the catalog ---------------------------------------------------------------------------


def test_catalog_levels_grow_and_the_image_is_pinned() -> None:
    entry = catalog().dcgm_diagnostic
    assert entry is not None and entry.default_level == 2
    assert entry.image.startswith("nvcr.io/nvidia/cloud-native/dcgm:4.")
    levels = sorted(entry.levels)
    for lower, higher in itertools.pairwise(levels):
        assert set(entry.levels[lower].tests) < set(entry.levels[higher].tests)
        assert entry.levels[lower].deadline_minutes < entry.levels[higher].deadline_minutes
    assert entry.image_source and entry.levels_source


# --- the job ---------------------------------------------------------------------------------


def _manifests(**overrides: Any) -> list[dict[str, Any]]:
    fields = {"instance_type": P5, "node_pool": "h100", "namespace": "foundation", "nodes": 16}
    return dcgm_diag_manifests(DcgmDiagSpec.model_validate({**fields, **overrides}))


def test_job_validates_strictly_and_passes_the_policy_pack() -> None:
    (job,) = _manifests(queue_name="default")
    validate(job)
    validate(as_pod(job["spec"]["template"]))
    assert policy_violations(job, "kubernetes:batch/v1:Job") == []


def test_job_runs_one_pod_per_node_with_all_its_gpus() -> None:
    (job,) = _manifests()
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 16, 16)
    # One node's failure must not stop the others: per-index backoff, all indexes may fail.
    assert (spec["backoffLimitPerIndex"], spec["maxFailedIndexes"]) == (0, 16)
    assert "backoffLimit" not in spec and "suspend" not in spec
    assert spec["activeDeadlineSeconds"] == 20 * 60
    pod = spec["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {
        "labelSelector": {"matchLabels": {"batch.kubernetes.io/job-name": "dcgm-diag"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    match = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {e["key"]: e["values"] for e in match["nodeSelectorTerms"][0]["matchExpressions"]}
    assert keys == {"llm-platform/pool": ["h100"], "node.kubernetes.io/instance-type": [P5]}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert pod["automountServiceAccountToken"] is False
    (c,) = pod["containers"]
    assert c["image"] == catalog().dcgm_diagnostic.image  # type: ignore[union-attr]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "vpc.amazonaws.com/efa" not in c["resources"]["limits"]
    assert c["command"][:2] == ["/bin/bash", "-c"] and c["command"][2] == diag_script(2)
    assert c["command"][2].endswith("exec dcgmi diag -r 2 -j")
    assert c["securityContext"] == {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    assert {v["name"] for v in pod["volumes"]} == {m["name"] for m in c["volumeMounts"]}


def test_level_three_gets_its_longer_deadline_and_kueue_a_suspended_job() -> None:
    (job,) = _manifests(level=3, queue_name="default", nodes=2, name="dcgm-h100-run1")
    assert job["spec"]["activeDeadlineSeconds"] == 60 * 60
    assert "dcgmi diag -r 3 -j" in job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    (job,) = _manifests(deadline_seconds=600)
    assert job["spec"]["activeDeadlineSeconds"] == 600


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"instance_type": "trn1.32xlarge"}, "DCGM diagnostics run on NVIDIA GPU instances"),
        ({"level": 4}, "DCGM level 4 is not in the catalog; use one of 1, 2, 3"),
        ({"image": "nvcr.io/nvidia/cloud-native/dcgm:latest"}, "uses the latest tag"),
        ({"name": "Dcgm"}, "must be a DNS label"),
        ({"name": "d" * 41}, "at most 40 characters"),
    ],
)
def test_bad_diag_specs(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _manifests(**overrides)
