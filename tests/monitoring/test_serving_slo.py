"""Serving latency SLOs: the committed rules are the inference stack's, promtool checks them,
and promtool unit tests on synthetic vLLM histograms show each burn-rate alert fires on
its burn and stays quiet below it (and without traffic).

promtool missing: these tests skip, unless LLMP_REQUIRE_PROMTOOL=1 (CI), then they fail.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitoring import serving_slo
from monitoring.inventory import ALL_METRICS
from tests.monitoring.promql import metric_names
from tests.monitoring.test_rules import promtool

COMMITTED = serving_slo.SLO_DIR / "inference.yaml"
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
MINUTES = 6 * 60


def test_committed_rules_are_the_inference_stacks() -> None:
    expected = serving_slo.file_text(serving_slo.committed_stack())
    assert COMMITTED.read_text() == expected, "run `python -m monitoring.serving_slo`"


def test_each_model_reads_its_own_bucket_and_objective() -> None:
    text = COMMITTED.read_text()
    # llama-8b keeps the default TTFT target (2.5 s); llama-70b's stack sets 5 s.
    assert f'{TTFT}_bucket{{model_name="llama-8b",le="2.5"}}' in text
    assert f'{TTFT}_bucket{{model_name="llama-70b",le="5.0"}}' in text
    assert f'{ITL}_bucket{{model_name="llama-8b",le="0.1"}}' in text
    # 14.4 x (1 - 0.99) and 1 x (1 - 0.99).
    assert '{model_name="llama-8b",sli="ttft"} > 0.144 and' in text
    assert '{model_name="llama-8b",sli="ttft"} > 0.01 and' in text


def test_rule_metrics_are_in_the_inventory() -> None:
    for group in serving_slo.rule_groups(serving_slo.committed_stack()):
        for rule in group.rules:
            assert metric_names(rule.expr) <= ALL_METRICS | {
                serving_slo.error_ratio(w) for w in serving_slo.WINDOWS
            }, rule.expr


def test_promtool_check_rules() -> None:
    result = subprocess.run(
        [promtool(), "check", "rules", str(COMMITTED)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 44 rules found" in result.stdout


def _series(
    metric: str, model: str, le: str, bad_share: float, per_min: int = 1000
) -> list[dict[str, str]]:
    """Cumulative histogram counters growing by `per_min` observations a minute, of which
    `bad_share` are over the target (above bucket `le`)."""
    good = round(per_min * (1 - bad_share))
    labels = f'model_name="{model}",engine="0"'
    return [
        {"series": f'{metric}_bucket{{{labels},le="{le}"}}', "values": f"0+{good}x{MINUTES}"},
        {"series": f'{metric}_bucket{{{labels},le="+Inf"}}', "values": f"0+{per_min}x{MINUTES}"},
        {"series": f"{metric}_count{{{labels}}}", "values": f"0+{per_min}x{MINUTES}"},
    ]


def _alert(name: str, model: str, sli: str, severity: str) -> dict[str, Any]:
    [rule] = [
        r
        for r in serving_slo.alert_rules(serving_slo.committed_stack()).rules
        if r.alert == name
        and r.labels
        and r.labels["model_name"] == model
        and r.labels["sli"] == sli
    ]
    return {
        "exp_labels": {"severity": severity, "model_name": model, "sli": sli},
        "exp_annotations": rule.annotations,
    }


NAMES = {a.name: a for a in serving_slo.BURN_ALERTS}


def _expect(at: str, firing: set[str], model: str = "llama-8b", sli: str = "ttft") -> list:
    return [
        {
            "eval_time": at,
            "alertname": name,
            "exp_alerts": [_alert(name, model, sli, NAMES[name].severity)]
            if name in firing
            else [],
        }
        for name in NAMES
    ]


# (what, series, [(eval time, alerts expected to fire)]). The budget is 1% (objective 0.99).
CASES: dict[str, tuple[list[dict[str, str]], list[tuple[str, set[str]]]]] = {
    # 20% of first tokens late: 20x the budget's rate; the page of 1h/5m (14.4x) and 6h/30m
    # (6x) fire within their `for`; 3x (for 1h) and 1x (for 3h) later.
    "fast-burn": (
        _series(TTFT, "llama-8b", "2.5", 0.20),
        [("10m", {"ServingLatencyBudgetBurn1h"}), ("5h", set(NAMES))],
    ),
    # 8% late (8x): 6h/30m pages, 1h/5m (14.4x) stays quiet.
    "six-x-burn": (
        _series(TTFT, "llama-8b", "2.5", 0.08),
        [
            ("30m", {"ServingLatencyBudgetBurn6h"}),
            ("5h", {n for n in NAMES if n != "ServingLatencyBudgetBurn1h"}),
        ],
    ),
    # 2% late (2x): only the 3-day ticket (1x), after its 3h `for`.
    "slow-burn": (
        _series(TTFT, "llama-8b", "2.5", 0.02),
        [("2h", set()), ("5h", {"ServingLatencyBudgetBurn3d"})],
    ),
    # 0.5% late: within the budget; nothing fires.
    "within-budget": (
        _series(TTFT, "llama-8b", "2.5", 0.005),
        [("30m", set()), ("5h", set())],
    ),
    # No requests: 0/0 is no ratio, no alert.
    "no-traffic": (
        _series(TTFT, "llama-8b", "2.5", 0.5, per_min=0),
        [("5h", set())],
    ),
}


def _tests() -> list[dict[str, Any]]:
    tests = []
    for series, checks in CASES.values():
        tests.append(
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [e for at, firing in checks for e in _expect(at, firing)],
            }
        )
    # Inter-token latency of the other model, against its own objective: 30% of the gaps
    # over 0.1 s page; the TTFT alerts of the same model stay quiet.
    itl = _series(ITL, "llama-70b", "0.1", 0.30) + _series(TTFT, "llama-70b", "5.0", 0.0)
    tests.append(
        {
            "interval": "1m",
            "input_series": itl,
            "alert_rule_test": [
                *_expect("10m", {"ServingLatencyBudgetBurn1h"}, "llama-70b", "itl"),
                *_expect("10m", set(), "llama-70b", "ttft"),
            ],
        }
    )
    return tests


def _merge_same_time(tests: list[dict[str, Any]]) -> None:
    """promtool wants one entry per (eval_time, alertname): join the expected alerts."""
    for test in tests:
        merged: dict[tuple[str, str], dict[str, Any]] = {}
        for entry in test["alert_rule_test"]:
            key = (entry["eval_time"], entry["alertname"])
            if key in merged:
                merged[key]["exp_alerts"] += entry["exp_alerts"]
            else:
                merged[key] = {**entry, "exp_alerts": list(entry["exp_alerts"])}
        test["alert_rule_test"] = list(merged.values())


def test_promtool_each_burn_alert_fires_on_its_burn_and_not_below(tmp_path: Path) -> None:
    tool = promtool()
    rules = tmp_path / "serving-slo.yaml"
    rules.write_text(COMMITTED.read_text())
    tests = _tests()
    _merge_same_time(tests)
    unit = tmp_path / "serving-slo.test.yaml"
    unit.write_text(
        yaml.safe_dump(
            {"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests},
            sort_keys=False,
        )
    )
    result = subprocess.run(
        [tool, "test", "rules", unit.name], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_burn_alert_is_exercised_firing_and_quiet() -> None:
    fired = {n for _, checks in CASES.values() for _, firing in checks for n in firing}
    quiet = {
        n for _, checks in CASES.values() for _, firing in checks for n in NAMES if n not in firing
    }
    assert fired == quiet == set(NAMES)


@pytest.mark.parametrize("model", ["llama-8b", "llama-70b"])
def test_every_model_has_both_slis_in_every_window(model: str) -> None:
    groups = serving_slo.rule_groups(serving_slo.committed_stack())
    records = {
        (r.record, r.labels["sli"])
        for r in groups[0].rules
        if r.labels and r.labels["model_name"] == model
    }
    assert records == {
        (serving_slo.error_ratio(w), sli) for w in serving_slo.WINDOWS for sli in serving_slo.SLIS
    }
