"""Alert rules: committed files equal the generator's, promtool checks them, and a promtool unit
test per alert shows it fires when it should and stays quiet when it should not.

promtool missing: these tests skip, unless LLMP_REQUIRE_PROMTOOL=1 (CI), then they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import AlertThresholds
from monitoring import rules
from monitoring.inventory import ALL_METRICS

PROMTOOL = shutil.which("promtool")


def promtool() -> str:
    if PROMTOOL is None:
        if os.environ.get("LLMP_REQUIRE_PROMTOOL") == "1":
            pytest.fail("promtool is required (LLMP_REQUIRE_PROMTOOL=1) but not on PATH")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return PROMTOOL


T = AlertThresholds()
POD = 'namespace="foundation",pod="train-0"'
FSX = 'namespace="a",persistentvolumeclaim="fsx-lustre"'
VLLM = "vllm:e2e_request_latency_seconds_bucket"
GPU = f'Hostname="node-1",gpu="0",{POD}'
TRAINING = [
    {
        "series": f'kube_pod_labels{{{POD},label_llm_platform_job_kind="training"}}',
        "values": "1x20",
    },
    {"series": f'kube_pod_status_phase{{{POD},phase="Running"}}', "values": "1x20"},
]

# alert -> (input series, eval time when it fires, labels it fires with, eval time when quiet)
CASES: dict[str, dict[str, Any]] = {
    "GpuIdleOnTrainingPod": {
        # busy for 5 minutes, then idle
        "input": [
            {"series": f"DCGM_FI_DEV_GPU_UTIL{{{GPU}}}", "values": "90x4 3x15"},
            *TRAINING,
        ],
        "fire": (
            "8m",
            {"Hostname": "node-1", "gpu": "0", "namespace": "foundation", "pod": "train-0"},
        ),
        "quiet": "4m",
    },
    "GpuXidError": {
        "input": [{"series": 'DCGM_FI_DEV_XID_ERRORS{Hostname="n",gpu="1"}', "values": "0x4 79x5"}],
        "fire": ("6m", {"Hostname": "n", "gpu": "1"}),
        "quiet": "3m",
    },
    "GpuEccDoubleBitError": {
        "input": [
            {"series": 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{Hostname="n",gpu="2"}', "values": "0x4 1x5"}
        ],
        "fire": ("6m", {"Hostname": "n", "gpu": "2"}),
        "quiet": "3m",
    },
    "GpuNvlinkErrors": {
        "input": [
            {
                "series": 'DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL{Hostname="n",gpu="3"}',
                "values": "0+1x10 10+20x10",
            }
        ],
        "fire": ("15m", {"Hostname": "n", "gpu": "3"}),
        "quiet": "8m",
    },
    "GpuTemperatureCritical": {
        "input": [{"series": 'DCGM_FI_DEV_GPU_TEMP{Hostname="n",gpu="4"}', "values": "84x5 90x5"}],
        "fire": ("8m", {"Hostname": "n", "gpu": "4"}),
        "quiet": "5m",
    },
    "GpuTemperatureHigh": {
        "input": [{"series": 'DCGM_FI_DEV_GPU_TEMP{Hostname="n",gpu="5"}', "values": "79x5 82x10"}],
        "fire": ("12m", {"Hostname": "n", "gpu": "5"}),
        # hot for 3 minutes only: under the 5 minutes it needs
        "quiet": "9m",
    },
    "FsxVolumeAlmostFull": {
        "input": [
            {
                "series": f"kubelet_volume_stats_used_bytes{{{FSX}}}",
                "values": "50x5 90x10",
            },
            {
                "series": f"kubelet_volume_stats_capacity_bytes{{{FSX}}}",
                "values": "100x15",
            },
        ],
        "fire": ("14m", {"namespace": "a", "persistentvolumeclaim": "fsx-lustre"}),
        "quiet": "5m",
    },
    "CheckpointStale": {
        # last success at t=0; the interval is 1800 s, so stale after 3600 s
        "input": [
            {"series": 'llmp_checkpoint_last_success_timestamp_seconds{job="j"}', "values": "0x80"}
        ],
        "fire": ("70m", {"job": "j"}),
        "quiet": "50m",
    },
    "TrainingThroughputDrop": {
        "input": [{"series": 'llmp_train_tokens_per_second{job="j"}', "values": "1000x60 500x30"}],
        "fire": ("80m", {"job": "j"}),
        "quiet": "55m",
    },
    "TrainingStragglerRank": {
        "input": [
            {"series": 'llmp_train_step_seconds{job="j",rank="0",node="a"}', "values": "1x40"},
            {"series": 'llmp_train_step_seconds{job="j",rank="1",node="b"}', "values": "1x40"},
            {"series": 'llmp_train_step_seconds{job="j",rank="2",node="c"}', "values": "1x10 2x30"},
        ],
        "fire": ("35m", {"job": "j", "rank": "2", "node": "c"}),
        "quiet": "10m",
    },
    "InferenceLatencyP99High": {
        "input": [
            {
                "series": f'{VLLM}{{namespace="serving",le="{le}"}}',
                "values": values,
            }
            # 100 requests a minute: under 1 s for 10 minutes, then 20 s
            for le, values in (
                ("1", "0+100x10 1000+0x20"),
                ("20", "0+100x10 1000+0x20"),
                ("30", "0+100x30"),
                ("+Inf", "0+100x30"),
            )
        ],
        "fire": ("25m", {"namespace": "serving"}),
        "quiet": "9m",
    },
    "InferenceErrorBudgetFastBurn": {
        "input": [
            {
                "series": 'http_requests_total{namespace="serving",status="2xx"}',
                "values": "0+100x120",
            },
            {
                "series": 'http_requests_total{namespace="serving",status="5xx"}',
                "values": "0x60 0+20x60",
            },
        ],
        "fire": ("100m", {"namespace": "serving"}),
        "quiet": "60m",
    },
    "InferenceErrorBudgetSlowBurn": {
        "input": [
            {
                "series": 'http_requests_total{namespace="serving",status="2xx"}',
                "values": "0+1000x480",
            },
            {
                "series": 'http_requests_total{namespace="serving",status="5xx"}',
                "values": "0+10x480",
            },
        ],
        "fire": ("420m", {"namespace": "serving"}),
        "quiet": "10m",
    },
}


def test_committed_rule_files_equal_the_generated_ones() -> None:
    generated = {f"{s}.yaml": rules.file_text(g) for s, g in rules.rule_files(T).items()}
    committed = {p.name: p.read_text() for p in rules.RULES_DIR.glob("*.yaml")}
    assert committed == generated, "run `python -m monitoring` and commit the result"


def test_every_alert_has_a_one_line_runbook_and_a_severity() -> None:
    for name, rule in rules.alerts(T).items():
        assert rule.annotations and "\n" not in rule.annotations["runbook"].strip(), name
        assert rule.labels and rule.labels["severity"] in ("warning", "critical"), name


def test_every_alert_has_a_unit_test() -> None:
    assert set(CASES) == set(rules.alerts(T))


def test_thresholds_come_from_config() -> None:
    hot = AlertThresholds(gpu_temp_critical_c=90, gpu_temp_warning_c=82, fsx_used_ratio=0.7)
    got = rules.alerts(hot)
    assert got["GpuTemperatureCritical"].expr == "DCGM_FI_DEV_GPU_TEMP > 90"
    assert got["GpuTemperatureHigh"].expr == "DCGM_FI_DEV_GPU_TEMP > 82"
    assert got["FsxVolumeAlmostFull"].expr.endswith("> 0.7")


def test_rule_metrics_are_in_the_inventory() -> None:
    from tests.monitoring.promql import metric_names

    for groups in rules.rule_files(T).values():
        for expr in rules.expressions(groups):
            assert metric_names(expr) <= ALL_METRICS, expr


@pytest.mark.parametrize("path", sorted(rules.RULES_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_promtool_check_rules(path: Path) -> None:
    result = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _unit_tests() -> dict[str, Any]:
    alerts = rules.alerts(T)
    tests = []
    for name, case in CASES.items():
        at, labels = case["fire"]
        rule = alerts[name]
        assert rule.labels is not None and rule.annotations is not None
        tests.append(
            {
                "name": name,
                "interval": "1m",
                "input_series": case["input"],
                "alert_rule_test": [
                    {
                        "eval_time": at,
                        "alertname": name,
                        "exp_alerts": [
                            {
                                "exp_labels": {**rule.labels, **labels},
                                "exp_annotations": rule.annotations,
                            }
                        ],
                    },
                    {"eval_time": case["quiet"], "alertname": name, "exp_alerts": []},
                ],
            }
        )
    return {
        "rule_files": [str(p) for p in sorted(rules.RULES_DIR.glob("*.yaml"))],
        "evaluation_interval": "1m",
        "tests": tests,
    }


def test_promtool_unit_tests_one_per_alert(tmp_path: Path) -> None:
    tool = promtool()
    path = tmp_path / "rules_test.yaml"
    path.write_text(yaml.safe_dump(_unit_tests(), sort_keys=False))
    result = subprocess.run([tool, "test", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") >= 1
