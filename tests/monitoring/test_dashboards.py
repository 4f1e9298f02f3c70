"""Dashboards: committed JSON equals the generator's, every query parses (promtool, as recording
rules) and reads only inventory metrics, and every dashboard is well formed.

promtool missing: the parse test skips, unless LLMP_REQUIRE_PROMTOOL=1 (CI), then it fails.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitoring import dashboards, rules
from monitoring.inventory import ALL_METRICS
from spec.catalog import catalog
from spec.monitoring import AlertThresholds
from tests.monitoring.promql import metric_names
from tests.monitoring.test_rules import promtool

GENERATED = dashboards.dashboards()
# Grafana variables -> values that make plain PromQL
SUBSTITUTIONS = {"$__rate_interval": "5m", "$namespace": "ns", "$job": "j", "$model": "m"}


def _plain(expr: str) -> str:
    for variable, value in SUBSTITUTIONS.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, expr
    return expr


def _all_expressions() -> list[tuple[str, str]]:
    return [(uid, e) for uid, d in GENERATED.items() for e in dashboards.expressions(d)]


def test_committed_dashboards_equal_the_generated_ones() -> None:
    generated = {f"{uid}.json": dashboards.file_text(d) for uid, d in GENERATED.items()}
    committed = {p.name: p.read_text() for p in dashboards.DASHBOARDS_DIR.glob("*.json")}
    assert committed == generated, "run `python -m monitoring` and commit the result"


def test_three_dashboards_with_uid_title_and_schema() -> None:
    assert set(GENERATED) == {"llmp-cluster-gpus", "llmp-training-job", "llmp-inference-slo"}
    for uid, d in GENERATED.items():
        assert d["uid"] == uid and len(uid) <= 40
        assert d["title"].strip()
        assert d["schemaVersion"] == 39


def test_every_row_has_a_panel_and_ids_are_unique() -> None:
    for uid, d in GENERATED.items():
        panels = d["panels"]
        assert panels and panels[0]["type"] == "row", uid
        rows = [i for i, p in enumerate(panels) if p["type"] == "row"]
        for start, end in zip(rows, [*rows[1:], len(panels)], strict=True):
            assert end - start > 1, f"{uid}: row {panels[start]['title']!r} has no panel"
        ids = [p["id"] for p in panels]
        assert len(ids) == len(set(ids)), uid
        for p in panels:
            grid = p["gridPos"]
            assert grid["x"] + grid["w"] <= 24, (uid, p["title"])


def _overlap(a: dict[str, int], b: dict[str, int]) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def test_panels_do_not_overlap() -> None:
    for uid, d in GENERATED.items():
        grids = [p["gridPos"] for p in d["panels"]]
        for i, a in enumerate(grids):
            for b in grids[i + 1 :]:
                assert not _overlap(a, b), (uid, a, b)


def test_prometheus_datasource_variable_is_used_everywhere() -> None:
    for uid, d in GENERATED.items():
        variables = {v["name"]: v for v in d["templating"]["list"]}
        source = variables["datasource"]
        assert source["type"] == "datasource" and source["query"] == "prometheus", uid
        for p in d["panels"]:
            if p["type"] == "row":
                continue
            assert p["targets"], (uid, p["title"])
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            for t in p["targets"]:
                assert t["datasource"] == p["datasource"]
        for v in variables.values():
            if v["type"] == "query":
                assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_templated_dashboards() -> None:
    def names(d: dict[str, Any]) -> set[str]:
        return {v["name"] for v in d["templating"]["list"]}

    assert names(GENERATED["llmp-training-job"]) == {"datasource", "namespace", "job"}
    assert names(GENERATED["llmp-inference-slo"]) == {"datasource", "model"}
    # A job's name is unique in its namespace only: every query names both, and every
    # grouping by job groups by namespace too.
    for e in dashboards.expressions(GENERATED["llmp-training-job"]):
        assert "$job" in e and 'namespace="$namespace"' in e, e
        for grouping in re.findall(r"\b(?:by|on) \(([^)]*)\)", e):
            names_ = [n.strip() for n in grouping.split(",")]
            assert "job" not in names_ or "namespace" in names_, e
    jobs = next(
        v for v in GENERATED["llmp-training-job"]["templating"]["list"] if v["name"] == "job"
    )
    assert 'namespace="$namespace"' in jobs["query"]["query"]


def test_every_metric_is_in_the_inventory() -> None:
    for uid, expr in _all_expressions():
        assert metric_names(expr) <= ALL_METRICS, (uid, expr, metric_names(expr) - ALL_METRICS)
    for d in GENERATED.values():
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                found = re.fullmatch(
                    r"label_values\(([^,{]+)(\{[^}]*\})?, \w+\)", v["query"]["query"]
                )
                assert found and found.group(1) in ALL_METRICS, v["query"]


def test_the_asked_for_series_are_shown() -> None:
    text = {uid: " ".join(dashboards.expressions(d)) for uid, d in GENERATED.items()}
    for metric in (
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_EXP_XID_ERRORS_COUNT",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "node_infiniband_port_errors_received_total",
        "node_ethtool_pps_allowance_exceeded",
        "kube_node_labels",
    ):
        assert metric in text["llmp-cluster-gpus"], metric
    for metric in (
        "llmp_train_tokens_per_second",
        "llmp_train_step_seconds",
        "llmp_checkpoint_last_success_timestamp_seconds",
        "llmp_train_phase_seconds",
        "llmp_checkpoint_stall_seconds",
        "llmp_checkpoint_write_seconds",
        "DCGM_FI_DEV_GPU_UTIL",
    ):
        assert metric in text["llmp-training-job"], metric
    for metric in (
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "llmp:vllm_error_ratio:rate1h",
    ):
        assert metric in text["llmp-inference-slo"], metric


def test_new_xids_are_shown_by_the_class_that_alerts_on_them() -> None:
    table = catalog().gpu_xids
    assert table is not None
    (panel,) = [
        p for p in GENERATED["llmp-cluster-gpus"]["panels"] if p["title"] == "New XIDs by class"
    ]
    legends = [t["legendFormat"] for t in panel["targets"]]
    assert legends == [*table.classes, "unclassified"]
    # the same matchers as the alerts of each class
    alerts = rules.alerts(AlertThresholds())
    for target, cls in zip(panel["targets"], table.classes.values(), strict=False):
        matcher = alerts[cls.alert].expr.split("{", 1)[1].split("}", 1)[0]
        assert matcher in target["expr"], cls.alert


def test_promtool_parses_every_expression(tmp_path: Path) -> None:
    tool = promtool()
    groups = [
        {
            "name": uid,
            "rules": [
                {"record": f"dashboard:{uid.replace('-', '_')}:{i}", "expr": _plain(expr)}
                for i, expr in enumerate(dashboards.expressions(d))
            ],
        }
        for uid, d in GENERATED.items()
    ]
    path = tmp_path / "dashboards.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False, width=1000))
    result = subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_all_expressions())} rules found" in result.stdout


@pytest.mark.parametrize("uid", sorted(GENERATED))
def test_dashboard_round_trips_through_json(uid: str) -> None:
    import json

    assert json.loads(dashboards.file_text(GENERATED[uid])) == GENERATED[uid]


def test_the_phase_panels_name_every_phase_the_trainer_publishes() -> None:
    from workloads.diagnosis.stragglers import PHASE_METRIC, PHASES

    panels = {p["title"]: p for p in GENERATED["llmp-training-job"]["panels"]}
    stacked = panels["Step time by phase, median rank"]
    assert stacked["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    for title in ("Step time by phase, median rank", "Slowest rank in each phase"):
        (target,) = panels[title]["targets"]
        # one series per phase, named by it: every one of PHASES shows, whatever its number
        assert target["expr"].endswith(f'{PHASE_METRIC}{{namespace="$namespace",job="$job"}})')
        assert "by (phase)" in target["expr"] and target["legendFormat"] == "{{phase}}"
    assert len(PHASES) == 5
