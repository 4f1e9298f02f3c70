"""The per-revision SLO ratios of a model with a live canary (the serving example's
llama-8b): recorded by the Service each series was scraped from, and what promtool
computes from synthetic vLLM histograms is what `llmp canary` reads."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from monitoring import serving_slo
from spec.stackfile import load_config, load_stack_file
from tests.monitoring.test_rules import promtool

EXAMPLE = Path(__file__).resolve().parents[2] / "examples/stacks/Pulumi.serving-405b.yaml"
TTFT = "vllm:time_to_first_token_seconds"
RECORD = "llmp:vllm_slo_errors_by_revision:ratio_rate"


def _serving() -> Any:
    serving = load_config(load_stack_file(str(EXAMPLE))).serving
    assert serving is not None
    return serving


def _series(service: str, good: int, total: int) -> list[dict[str, str]]:
    labels = f'model_name="llama-8b",service="{service}",pod="p",engine="0"'
    return [
        {"series": f'{TTFT}_bucket{{{labels},le="2.5"}}', "values": f"0+{good}x120"},
        {"series": f"{TTFT}_count{{{labels}}}", "values": f"0+{total}x120"},
    ]


def test_a_live_canary_gets_ratios_by_revision_and_a_model_without_none() -> None:
    recording = serving_slo.recording_rules(_serving())
    by_revision = [r for r in recording.rules if r.record and r.record.startswith(RECORD)]
    assert {(r.labels["service"], r.labels["sli"], r.record) for r in by_revision} == {
        (service, sli, f"{RECORD}{w}")
        for service in ("llama-8b", "llama-8b-canary")
        for sli in serving_slo.SLIS
        for w in ("1h", "5m")
    }
    assert all(r.labels["model_name"] == "llama-8b" for r in by_revision)
    committed = serving_slo.recording_rules(serving_slo.committed_stack())
    assert not [r for r in committed.rules if r.record and r.record.startswith(RECORD)]


def test_promtool_computes_each_revisions_ratio(tmp_path: Path) -> None:
    tool = promtool()
    rules = tmp_path / "rules.yaml"
    groups = [g.dump() for g in serving_slo.rule_groups(_serving())]
    rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False, width=1000))
    check = subprocess.run([tool, "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    # A minute: the stable 1000 requests, none late; the canary 100, 25 late.
    series = _series("llama-8b", 1000, 1000) + _series("llama-8b-canary", 75, 100)
    expected = [
        {
            "expr": f'{RECORD}{w}{{service="{service}",sli="ttft"}}',
            "eval_time": "90m",
            "exp_samples": [
                {
                    "labels": f'{RECORD}{w}{{model_name="llama-8b",service="{service}",'
                    'sli="ttft"}',
                    "value": value,
                }
            ],
        }
        for w in ("1h", "5m")
        for service, value in (("llama-8b", 0), ("llama-8b-canary", 0.25))
    ]
    unit = tmp_path / "test.yaml"
    test = {"interval": "1m", "input_series": series, "promql_expr_test": expected}
    unit.write_text(
        yaml.safe_dump(
            {"rule_files": [rules.name], "evaluation_interval": "1m", "tests": [test]},
            sort_keys=False,
        )
    )
    result = subprocess.run(
        [tool, "test", "rules", unit.name], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_revision_without_traffic_records_no_ratio(tmp_path: Path) -> None:
    """0/0 is no observation, not NaN: the ratio divides by a total above 0 only, so what
    Prometheus returns for a revision is a ratio in [0, 1] or nothing (`llmp canary` refuses
    anything else)."""
    tool = promtool()
    rules = tmp_path / "rules.yaml"
    groups = [g.dump() for g in serving_slo.rule_groups(_serving())]
    rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False, width=1000))
    series = _series("llama-8b", 1000, 1000) + _series("llama-8b-canary", 0, 0)
    expected = [
        {
            "expr": f'{RECORD}1h{{service="llama-8b-canary",sli="ttft"}}',
            "eval_time": "90m",
            "exp_samples": [],
        }
    ]
    unit = tmp_path / "test.yaml"
    test = {"interval": "1m", "input_series": series, "promql_expr_test": expected}
    unit.write_text(
        yaml.safe_dump(
            {"rule_files": [rules.name], "evaluation_interval": "1m", "tests": [test]},
            sort_keys=False,
        )
    )
    result = subprocess.run(
        [tool, "test", "rules", unit.name], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
