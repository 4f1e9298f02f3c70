"""Alert rules: committed files equal the generator's, promtool checks them, and a promtool unit
test per alert shows it fires when it should and stays quiet when it should not.

promtool missing: these tests skip, unless LLMP_REQUIRE_PROMTOOL=1 (CI), then they fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitoring import rules
from monitoring.inventory import ALL_METRICS
from spec.catalog import catalog
from spec.monitoring import AlertThresholds

PROMTOOL = shutil.which("promtool")


def promtool() -> str:
    if PROMTOOL is None:
        if os.environ.get("LLMP_REQUIRE_PROMTOOL") == "1":
            pytest.fail("promtool is required (LLMP_REQUIRE_PROMTOOL=1) but not on PATH")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return PROMTOOL


T = AlertThresholds()
POD = 'namespace="foundation",pod="train-0"'
VLLM = "vllm:e2e_request_latency_seconds_bucket"
GPU = f'Hostname="node-1",gpu="0",{POD}'
XIDS = catalog().gpu_xids
assert XIDS is not None
XID_GPU = {"Hostname": "node-1", "gpu": "1", "namespace": "foundation", "pod": "train-0"}
GIB = 1024**3
FULL_AT = rules.fsx_free_bytes_threshold(T, rules.DEFAULT_FSX_CAPACITY_GIB)
FS = 'file_system_id="fs-0123456789abcdef0"'
TJ = 'namespace="foundation",job="j"'
"""A training job's series: the pod's namespace and the operator's job label (no honorLabels)."""
WATCHER = {"namespace": "monitoring", "job": "llmp-straggler-watch"}
W = 'namespace="monitoring",job="llmp-straggler-watch"'
"""The straggler watcher's target: only it publishes series with these labels."""
WJ = f'{W},training_namespace="foundation",training_job="j"'
TENANT = 'namespace="foundation",job="j"'
"""A tenant's training pod: any series it publishes carries its own namespace and job."""
FORGED = f'{TENANT},training_namespace="foundation",training_job="j"'


def _series(metric: str, labels: dict[str, str]) -> str:
    return metric + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _xid_case(code: str) -> dict[str, Any]:
    """An XID of `code` on one GPU: counted in the exporter's window for 5 minutes, then gone
    (stale) while the exporter's no-XID sample (0, no `xid` label) stays."""
    return {
        "input": [
            {
                "series": _series(rules.XID_COUNT, {**XID_GPU, "xid": code}),
                "values": "_x4 1x4 stale",
            },
            {"series": _series(rules.XID_COUNT, XID_GPU), "values": "0x20"},
        ],
        "fire": ("6m", {**XID_GPU, "xid": code}),
        # after the window: an old XID does not keep firing
        "quiet": "12m",
    }


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
    "GpuXidNodeReplacement": _xid_case("79"),
    "GpuXidGpuReset": _xid_case("48"),
    "GpuXidApplication": _xid_case("13"),
    "GpuXidInformational": _xid_case("45"),
    "GpuXidUnclassified": _xid_case("999"),
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
    "FsxFileSystemAlmostFull": {
        # half free for 5 minutes, then 10% free
        "input": [
            {
                "series": f"{rules.FSX_FREE_BYTES}{{{FS}}}",
                "values": f"{600 * GIB}x5 {120 * GIB}x10",
            }
        ],
        "fire": ("12m", {"file_system_id": "fs-0123456789abcdef0"}),
        "quiet": "5m",
    },
    "FsxAutoExportBacklog": {
        # a minute behind for 10 minutes, then an hour
        "input": [
            {
                "series": f'{rules.FSX_EXPORT_AGE}{{{FS},publisher="AutoExport"}}',
                "values": "60x10 3600x10",
            }
        ],
        "fire": ("17m", {"file_system_id": "fs-0123456789abcdef0", "publisher": "AutoExport"}),
        "quiet": "9m",
    },
    "FsxMetricsMissing": {
        # the exporter reports for 5 minutes, then nothing (down, or no FSx data)
        "input": [{"series": f"{rules.FSX_FREE_BYTES}{{{FS}}}", "values": f"{600 * GIB}x5 stale"}],
        "fire": ("25m", {}),
        "quiet": "15m",
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
    "TrainingTflopsLow": {
        # 150 TFLOPS for 10 minutes, then 90 (under the seed's 120) for 30
        "input": [{"series": 'llmp_train_tflops_per_gpu{job="j"}', "values": "150x10 90x30"}],
        "fire": ("30m", {"job": "j"}),
        # under 120 for 10 minutes only: under the 15 it needs
        "quiet": "20m",
    },
    "TrainingMfuLow": {
        # MFU 0.4 for 10 minutes, then 0.2 (under the default 0.35) for 30
        "input": [{"series": 'llmp_train_mfu{job="j"}', "values": "0.4x10 0.2x30"}],
        "fire": ("30m", {"job": "j"}),
        "quiet": "20m",
    },
    "TrainingLossNotFalling": {
        # 10 steps a minute; the loss falls 0.2 a minute (0.02 a step) for 40 minutes, then
        # stays at 2: over the 30m window the fall drops under 0.01 x 300 steps at ~58m, and
        # fires 15m later. A job on other pods after a restart is the same job.
        "input": [
            {"series": f'llmp_train_loss{{{TJ},pod="j-node-0-0"}}', "values": "10-0.2x40 2x50"},
            {"series": f'llmp_train_step{{{TJ},pod="j-node-0-0"}}', "values": "0+10x90"},
        ],
        "fire": ("80m", {"namespace": "foundation", "job": "j"}),
        "quiet": "50m",
    },
    "TrainingGpuUtilizationLow": {
        # two GPUs of one pod: 95% and 90% (avg 92.5), then 80% and 70% (avg 75 < 85)
        "input": [
            {
                "series": f'DCGM_FI_DEV_GPU_UTIL{{Hostname="n",gpu="0",{POD}}}',
                "values": "95x10 80x30",
            },
            {
                "series": f'DCGM_FI_DEV_GPU_UTIL{{Hostname="n",gpu="1",{POD}}}',
                "values": "90x10 70x30",
            },
            {
                "series": f'kube_pod_labels{{{POD},label_llm_platform_job_kind="training"}}',
                "values": "1x40",
            },
            {"series": f'kube_pod_status_phase{{{POD},phase="Running"}}', "values": "1x40"},
        ],
        "fire": ("30m", {"namespace": "foundation", "pod": "train-0"}),
        "quiet": "20m",
    },
    "NodeQuarantined": {
        "input": [
            {
                "series": 'kube_node_spec_taint{node="gpu-7",key="llm-platform/quarantined",'
                'value="gpu-fault",effect="NoSchedule"}',
                "values": "_x5 1x5",
            },
            {
                "series": 'kube_node_spec_taint{node="gpu-8",key="nvidia.com/gpu",'
                'value="true",effect="NoSchedule"}',
                "values": "1x10",
            },
        ],
        "fire": ("7m", {"node": "gpu-7"}),
        "quiet": "3m",
    },
    "TrainingStragglerRank": {
        # A job is (namespace, job): the fast ranks of a job of the same name in another
        # namespace do not lower this job's median (pooled with them, the median would be
        # 0.1 s and this job's healthy ranks would fire too).
        "input": [
            {"series": f'llmp_train_step_seconds{{{TJ},rank="{r}",node="{n}"}}', "values": v}
            for r, n, v in (("0", "a", "1x40"), ("1", "b", "1x40"), ("2", "c", "1x10 2x30"))
        ]
        + [
            {
                "series": f'llmp_train_step_seconds{{namespace="other",job="j",rank="{r}"}}',
                "values": "0.1x40",
            }
            for r in range(4)
        ],
        "fire": ("35m", {"namespace": "foundation", "job": "j", "rank": "2", "node": "c"}),
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
    "LlmpSlowNode": {
        # the watcher publishes node b of job foundation/j for 10 minutes, flagged from the
        # 4th: the alert fires at once (the watcher's window is the wait), quotes the ratio
        # and names the job in its runbook
        # command. A tenant pod publishing the same findings (its own namespace and job, as
        # no tenant monitor honours labels) fires nothing: node c is never named.
        "input": [
            {
                "series": f'llmp_straggler_node_ratio{{{WJ},node="b"}}',
                "values": "1.01x3 1.3x10 stale",
            },
            {"series": f'llmp_straggler_node_flagged{{{WJ},node="b"}}', "values": "0x3 1x10 stale"},
            {"series": f'llmp_straggler_node_ratio{{{WJ},node="a"}}', "values": "1x15"},
            {"series": f'llmp_straggler_node_flagged{{{WJ},node="a"}}', "values": "0x15"},
            {"series": f'llmp_straggler_node_ratio{{{FORGED},node="c"}}', "values": "9x15"},
            {"series": f'llmp_straggler_node_flagged{{{FORGED},node="c"}}', "values": "1x15"},
        ],
        "fire": (
            "7m",
            {**WATCHER, "training_namespace": "foundation", "training_job": "j", "node": "b"},
        ),
        "quiet": "2m",
        "annotations": {
            "summary": "Node b slows training job foundation/j: 1.30x the other nodes' median "
            "step time.",
            "runbook": f"`{rules.PROMETHEUS_PORT_FORWARD}`, then `llmp stragglers --prometheus "
            "http://localhost:9090 --namespace foundation --job j --range 30m`; check the "
            "node's GPU clocks, XIDs and EFA errors, and take it out with `--quarantine "
            "--kubeconfig kubeconfig` if it stays slow.",
        },
    },
    "LlmpStragglerWatchDown": {
        # runs every minute (the timestamp follows the clock) for 10 minutes, then hangs: the
        # last run grows old (5 intervals), and 10 minutes later the alert fires
        # A tenant pod publishing a fresh timestamp of its own does not hide it.
        "input": [
            {
                "series": f"llmp_straggler_last_run_timestamp_seconds{{{W}}}",
                "values": "0+60x10 600x30",
            },
            {
                "series": f"llmp_straggler_last_run_timestamp_seconds{{{TENANT}}}",
                "values": "0+60x40",
            },
        ],
        "fire": ("28m", WATCHER),
        "quiet": "12m",
    },
    "LlmpStragglerWatchFailing": {
        # one error a minute, i.e. every run, from the 20th minute
        "input": [
            {
                "series": f'llmp_straggler_errors_total{{{W},kind="prometheus"}}',
                "values": "0x20 1+1x40",
            },
            # A tenant's own counter of that name is not the watcher's: it adds nothing.
            {
                "series": f'llmp_straggler_errors_total{{{TENANT},kind="prometheus"}}',
                "values": "0+10x60",
            },
        ],
        "fire": ("45m", {}),
        "quiet": "20m",
    },
}


def test_committed_rule_files_equal_the_generated_ones() -> None:
    generated = {f"{s}.yaml": rules.file_text(g) for s, g in rules.rule_files(T).items()}
    committed = {p.name: p.read_text() for p in rules.RULES_DIR.glob("*.yaml")}
    assert committed == generated, "run `python -m monitoring` and commit the result"


def test_every_alert_has_a_one_line_runbook_and_a_severity() -> None:
    for name, rule in rules.alerts(T).items():
        assert rule.annotations and "\n" not in rule.annotations["runbook"].strip(), name
        assert rule.labels and rule.labels["severity"] in ("info", "warning", "critical"), name


def test_every_alert_has_a_unit_test() -> None:
    assert set(CASES) == set(rules.alerts(T))


def test_thresholds_come_from_config() -> None:
    hot = AlertThresholds(
        gpu_temp_critical_c=90,
        gpu_temp_warning_c=82,
        fsx_used_ratio=0.7,
        fsx_export_age_seconds=900,
    )
    got = rules.alerts(hot)
    assert got["GpuTemperatureCritical"].expr == "DCGM_FI_DEV_GPU_TEMP > 90"
    assert got["GpuTemperatureHigh"].expr == "DCGM_FI_DEV_GPU_TEMP > 82"
    assert got["FsxFileSystemAlmostFull"].expr.endswith(f"< {round(0.3 * 1200 * GIB)}")
    assert got["FsxAutoExportBacklog"].expr.endswith("> 900")
    slow = rules.alerts(AlertThresholds(min_tflops_per_gpu=300, min_gpu_utilization=0.9))
    assert slow["TrainingTflopsLow"].expr == "llmp_train_tflops_per_gpu < 300"
    assert slow["TrainingGpuUtilizationLow"].expr.startswith(
        "avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL) < 90 "
    )


def test_seed_targets_are_the_default_thresholds() -> None:
    got = rules.alerts(T)
    assert got["TrainingTflopsLow"].expr == "llmp_train_tflops_per_gpu < 120"
    assert "(DCGM_FI_DEV_GPU_UTIL) < 85 " in got["TrainingGpuUtilizationLow"].expr
    assert got["TrainingTflopsLow"].for_ == "15m"
    assert got["TrainingMfuLow"].expr == "llmp_train_mfu < 0.35"
    assert "< 0.01 * (max by (namespace, job) (llmp_train_step)" in (
        got["TrainingLossNotFalling"].expr
    )
    assert "offset 30m" in got["TrainingLossNotFalling"].expr


def test_mfu_and_loss_targets_come_from_config() -> None:
    got = rules.alerts(
        AlertThresholds(min_mfu=0.5, min_loss_drop_per_step=0.001, loss_window="2h")
    )
    assert got["TrainingMfuLow"].expr == "llmp_train_mfu < 0.5"
    loss = got["TrainingLossNotFalling"].expr
    assert "< 0.001 * (" in loss and "offset 2h" in loss and "offset 30m" not in loss


def test_fsx_fullness_is_the_free_share_of_the_configured_capacity() -> None:
    # 48000 GiB at 80% used: under 9600 GiB free alerts, in bytes as CloudWatch reports them.
    full = rules.alerts(T, fsx_capacity_gib=48000)["FsxFileSystemAlmostFull"]
    assert full.expr == f"{rules.FSX_FREE_BYTES} < {9600 * GIB}"
    assert full.annotations is not None and "48000 GiB" in full.annotations["summary"]


def test_fsx_alerts_read_cloudwatch_not_the_kubelet() -> None:
    # The FSx CSI driver implements no NodeGetVolumeStats: kubelet has no stats of its claims.
    storage = rules.rule_files(T)["storage"]
    for expr in rules.expressions(storage):
        assert "kubelet_volume_stats" not in expr, expr
    assert {r.alert for g in storage for r in g.rules} == {
        "FsxFileSystemAlmostFull",
        "FsxAutoExportBacklog",
        "FsxMetricsMissing",
    }
    assert rules.alerts(T)["FsxMetricsMissing"].expr == f"absent({rules.FSX_FREE_BYTES})"


def test_straggler_rules_only_with_the_watcher_and_its_interval() -> None:
    from spec.monitoring import StragglerWatchConfig

    assert "stragglers" not in rules.rule_files(T, stragglers=None)
    watch = StragglerWatchConfig(enabled=True, image_tag="trainer-v0.1.0", interval_seconds=120)
    stems = [r.metadata.name for r in rules.prometheus_rules(T, "monitoring", stragglers=watch)]
    assert stems[-1] == "llmp-stragglers"
    down = rules.alerts(T, stragglers=watch)["LlmpStragglerWatchDown"]
    assert down.expr.endswith(f"> {5 * 120}")
    slow = rules.alerts(T)["LlmpSlowNode"]
    assert slow.labels == {"severity": "warning"} and slow.for_ == "0s"
    assert slow.annotations is not None
    assert "llmp stragglers --prometheus" in slow.annotations["runbook"]
    assert (
        "--namespace {{ $labels.training_namespace }} --job {{ $labels.training_job }}"
        in slow.annotations["runbook"]
    )


def test_rules_match_a_training_job_on_its_namespace_and_the_watcher_on_its_target() -> None:
    # No tenant monitor honours the exposition's labels: `namespace` is Kubernetes', so a rule
    # that groups or joins training series by job groups by (namespace, job), and one about the
    # watcher reads only the watcher's own target.
    alerts = rules.alerts(T)
    for rule in alerts.values():
        for grouping in re.findall(r"\b(?:by|on) \(([^)]*)\)", rule.expr):
            names = [n.strip() for n in grouping.split(",")]
            if "job" in names:
                assert "namespace" in names, (rule.alert, rule.expr)
        if "llmp_straggler_" in rule.expr:
            selectors = re.findall(r"llmp_straggler_[a-z_]+(\{[^}]*\})?", rule.expr)
            assert selectors and all(W in sel for sel in selectors), (rule.alert, rule.expr)


def test_the_watchers_metrics_are_the_inventorys() -> None:
    # The journey: what the watcher publishes is what the rules may read, and nothing else.
    from monitoring.inventory import INVENTORY
    from workloads.diagnosis.watch import METRICS

    assert INVENTORY["straggler-watch"] == set(METRICS)


def test_no_storage_rules_without_a_file_system() -> None:
    assert "storage" not in rules.rule_files(T, fsx_capacity_gib=None)
    stems = [r.metadata.name for r in rules.prometheus_rules(T, "monitoring")]
    assert stems == ["llmp-gpu", "llmp-nodes", "llmp-training", "llmp-inference"]
    with_fsx = rules.prometheus_rules(T, "monitoring", fsx_capacity_gib=4800)
    assert [r.metadata.name for r in with_fsx] == [
        "llmp-gpu",
        "llmp-nodes",
        "llmp-storage",
        "llmp-training",
        "llmp-inference",
    ]


def test_export_backlog_default_is_three_times_the_recovery_plans_export_lag() -> None:
    # The disaster-recovery RPO counts on auto-export keeping up (catalog recovery.fsx_auto_export).
    recovery = catalog().recovery
    assert recovery is not None
    assert T.fsx_export_age_seconds == 3 * recovery.fsx_auto_export.minutes * 60


def _xid_matchers() -> dict[str, tuple[str, set[int]]]:
    """alert -> (matcher operator, the codes its `xid` matcher lists)."""
    out = {}
    for rule in rules.xid_rules():
        found = re.findall(r'xid(=~|!~)"([0-9|]+)"', rule.expr)
        assert len(found) == 1, rule.expr
        op, codes = found[0]
        assert rule.alert is not None
        out[rule.alert] = (op, {int(c) for c in codes.split("|")})
    return out


def test_every_xid_class_is_in_exactly_one_matcher_and_unclassified_excludes_them_all() -> None:
    matchers = _xid_matchers()
    positive = {alert: codes for alert, (op, codes) in matchers.items() if op == "=~"}
    assert set(positive) == {cls.alert for cls in XIDS.classes.values()}
    for name, cls in XIDS.classes.items():
        holding = [alert for alert, codes in positive.items() if set(cls.codes) & codes]
        assert holding == [cls.alert], name
        assert positive[cls.alert] == set(cls.codes), name
    op, excluded = matchers[XIDS.unclassified.alert]
    assert op == "!~" and excluded == set(XIDS.classified)
    # the exporter's no-XID sample has no `xid`: it must not count as an unknown code
    assert 'xid!=""' in rules.alerts(T)[XIDS.unclassified.alert].expr


def test_xid_classes_page_by_what_they_need() -> None:
    got = rules.alerts(T)
    severity = {
        name: (got[cls.alert].labels or {})["severity"] for name, cls in XIDS.classes.items()
    }
    assert severity == {
        "node_replacement": "critical",
        "gpu_reset": "critical",
        "application": "warning",
        "informational": "info",
    }
    assert (got[XIDS.unclassified.alert].labels or {})["severity"] == "warning"
    assert {79, 54, 151} <= set(XIDS.codes("node_replacement"))
    assert {48, 62, 63, 64, 74, 95, 109, 110, 119, 120, 136, 140, 143, 155} <= set(
        XIDS.codes("gpu_reset")
    )
    assert set(XIDS.codes("application")) == {8, 13, 31, 32, 43, 68, 69, 94}
    assert set(XIDS.codes("informational")) == {38, 44, 45, 92, 121}
    # Every code the EKS node monitoring agent (v1.7.0) treats as fatal gets its node
    # repaired: none of them may sit in a class that says the node is healthy.
    agent_fatal = {46, 48, 54, 62, 63, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143}
    agent_fatal |= {151, 155, 156, 158}
    assert agent_fatal <= set(XIDS.codes("node_replacement")) | set(XIDS.codes("gpu_reset"))
    for rule in rules.xid_rules():
        assert rule.for_ == "0s", rule.alert
        assert "DCGM_FI_DEV_XID_ERRORS" not in rule.expr  # the last XID, held forever


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
                                # a templated annotation: as Prometheus expands it
                                "exp_annotations": case.get("annotations", rule.annotations),
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


def test_promtool_an_xid_pages_only_its_class_and_only_while_it_is_new(tmp_path: Path) -> None:
    """XID 79 pages node replacement, 13 warns as an application error and pages nothing
    critical, 999 is unclassified; once the exporter's window has passed (the XID series
    stale, DCGM_FI_DEV_XID_ERRORS still holding the last code) nothing fires."""
    tool = promtool()
    alerts = rules.alerts(T)
    gpus = {"79": "1", "13": "2", "999": "3"}
    series = []
    for code, gpu in gpus.items():
        labels = {"Hostname": "node-1", "gpu": gpu}
        series.append(
            {"series": _series(rules.XID_COUNT, {**labels, "xid": code}), "values": "_x2 1x4 stale"}
        )
        series.append({"series": _series(rules.XID_COUNT, labels), "values": "0x20"})
        series.append({"series": _series("DCGM_FI_DEV_XID_ERRORS", labels), "values": f"{code}x20"})

    def expect(name: str, code: str | None) -> list[dict[str, Any]]:
        if code is None:
            return []
        rule = alerts[name]
        assert rule.labels is not None and rule.annotations is not None
        labels = {**rule.labels, "Hostname": "node-1", "gpu": gpus[code], "xid": code}
        return [{"exp_labels": labels, "exp_annotations": rule.annotations}]

    now = {
        "GpuXidNodeReplacement": "79",
        "GpuXidGpuReset": None,
        "GpuXidApplication": "13",
        "GpuXidInformational": None,
        "GpuXidUnclassified": "999",
    }
    checks = [
        {"eval_time": "4m", "alertname": name, "exp_alerts": expect(name, code)}
        for name, code in now.items()
    ]
    checks += [{"eval_time": "15m", "alertname": name, "exp_alerts": []} for name in now]
    doc = {
        "rule_files": [str(rules.RULES_DIR / "gpu.yaml")],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": checks}],
    }
    path = tmp_path / "xid_test.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = subprocess.run([tool, "test", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_one_per_alert(tmp_path: Path) -> None:
    tool = promtool()
    path = tmp_path / "rules_test.yaml"
    path.write_text(yaml.safe_dump(_unit_tests(), sort_keys=False))
    result = subprocess.run([tool, "test", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") >= 1
