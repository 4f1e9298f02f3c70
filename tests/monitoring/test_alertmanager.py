"""Alertmanager's configuration: amtool accepts it, and `amtool config routes test` sends
each label set to the receiver the routing tree promises; the node-down inhibition mutes
only that node's alerts.

amtool missing: these tests skip, unless LLMP_REQUIRE_AMTOOL=1 (CI), then they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from monitoring import alertmanager as am
from monitoring import rules
from spec.monitoring import AlertThresholds

AMTOOL = shutil.which("amtool")
CRITICAL_TOPIC = "arn:aws:sns:us-east-1:123456789012:inference-alerts-critical"
WARNING_TOPIC = "arn:aws:sns:us-east-1:123456789012:inference-alerts-warning"


def amtool() -> str:
    if AMTOOL is None:
        if os.environ.get("LLMP_REQUIRE_AMTOOL") == "1":
            pytest.fail("amtool is required (LLMP_REQUIRE_AMTOOL=1) but not on PATH")
        pytest.skip("amtool not installed (apt-get install prometheus-alertmanager)")
    return AMTOOL


def full_routing() -> am.AlertRouting:
    return am.AlertRouting(
        platform=am.Audience(name="platform", slack_channel="#llm-alerts", pagerduty=True),
        teams=[
            am.Audience(
                name="foundation",
                slack_channel="#foundation",
                pagerduty=True,
                namespaces=["foundation"],
            ),
            # Slack only: its critical alerts page the platform.
            am.Audience(name="vision", slack_channel="#vision", namespaces=["vision", "eval"]),
            # Nothing usable: no routes, everything falls through.
            am.Audience(name="speech", namespaces=["speech"]),
        ],
        sns_topics={"critical": CRITICAL_TOPIC, "warning": WARNING_TOPIC},
        info_slack_channel="#llm-info",
    )


def _write(tmp_path: Path, routing: am.AlertRouting) -> Path:
    path = tmp_path / "alertmanager.yaml"
    path.write_text(yaml.safe_dump(am.alertmanager_config(routing), sort_keys=False))
    return path


def _route(tool: str, config: Path, *labels: str) -> str:
    result = subprocess.run(
        [tool, "config", "routes", "test", f"--config.file={config}", *labels],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


ROUTES = [
    (("severity=critical", "team=foundation"), "foundation-critical"),
    (
        ("severity=critical", "namespace=foundation", "alertname=CheckpointStale"),
        "foundation-critical",
    ),
    (("severity=warning", "namespace=foundation"), "foundation-warning"),
    (("severity=warning", "namespace=eval"), "vision-warning"),
    # vision has no pager: its critical alerts page the platform
    (("severity=critical", "namespace=vision"), "platform-critical"),
    # speech has no receiver at all
    (("severity=warning", "namespace=speech"), "platform-warning"),
    (("severity=critical", "node=gpu-7", "alertname=GpuXidNodeReplacement"), "platform-critical"),
    (("severity=warning", "alertname=GpuTemperatureHigh"), "platform-warning"),
    (("severity=info", "alertname=GpuXidInformational"), "platform-info"),
    (("severity=info", "namespace=foundation"), "platform-info"),
    (("alertname=Watchdog", "severity=none"), "null"),
    (("alertname=InfoInhibitor", "severity=none"), "null"),
    # a namespace is matched whole: foundation-eval is nobody's
    (("severity=critical", "namespace=foundation-eval"), "platform-critical"),
    (("alertname=SomethingWithoutSeverity",), "platform-warning"),
]


def test_amtool_accepts_the_config(tmp_path: Path) -> None:
    tool = amtool()
    for routing in (full_routing(), am.AlertRouting(platform=am.Audience(name="platform"))):
        config = _write(tmp_path, routing)
        result = subprocess.run([tool, "check-config", str(config)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(("labels", "receiver"), ROUTES)
def test_amtool_routes_each_label_set_to_its_receiver(
    tmp_path: Path, labels: tuple[str, ...], receiver: str
) -> None:
    tool = amtool()
    assert _route(tool, _write(tmp_path, full_routing()), *labels) == receiver


def test_without_receivers_every_alert_still_has_a_route(tmp_path: Path) -> None:
    tool = amtool()
    config = _write(tmp_path, am.AlertRouting(platform=am.Audience(name="platform")))
    assert _route(tool, config, "severity=critical", "team=foundation") == "platform-critical"
    assert _route(tool, config, "severity=warning") == "platform-warning"


def test_receivers_use_secret_files_and_sns_never_a_secret_value() -> None:
    config = am.alertmanager_config(full_routing())
    by_name = {r["name"]: r for r in config["receivers"]}
    pager = by_name["foundation-critical"]["pagerduty_configs"][0]
    assert pager["routing_key_file"] == f"{am.SECRET_DIR}/pagerduty-foundation"
    assert "routing_key" not in pager
    slack = by_name["platform-warning"]["slack_configs"][0]
    assert slack["api_url_file"] == f"{am.SECRET_DIR}/slack-platform"
    assert "api_url" not in slack
    sns = by_name["platform-critical"]["sns_configs"][0]
    assert sns["topic_arn"] == CRITICAL_TOPIC and sns["sigv4"] == {"region": "us-east-1"}
    assert by_name["vision-warning"]["sns_configs"][0]["attributes"]["team"] == "vision"
    # warnings never page
    assert "pagerduty_configs" not in by_name["platform-warning"]
    assert "speech-critical" not in by_name and "vision-critical" not in by_name


def test_node_down_alerts_mute_only_their_node() -> None:
    rule = am.inhibit_rules()[-1]
    assert rule["equal"] == ["node"]
    sources = am.node_down_sources()
    # kube-prometheus-stack's, ours, and the XID classes that take the node out of service
    assert {"KubeNodeNotReady", "NodeQuarantined", "GpuXidNodeReplacement"} <= set(sources)
    assert "GpuXidApplication" not in sources
    # a source must name its node, or it would mute every alert without one
    assert 'node=~".+"' in rule["source_matchers"]
    # the node alerts the rules define are all sources
    node_alerts = {r.alert for g in rules.rule_files(AlertThresholds())["nodes"] for r in g.rules}
    assert node_alerts <= set(sources)


def test_dcgm_series_carry_the_node_label_the_inhibition_matches() -> None:
    from monitoring.charts import monitors

    dcgm = next(m for m in monitors("monitoring") if m.metadata.name == "dcgm-exporter")
    relabel = dcgm.dump()["spec"]["endpoints"][0]["metricRelabelings"][0]
    assert relabel["sourceLabels"] == ["Hostname"] and relabel["targetLabel"] == "node"


def test_routing_tree_shows(tmp_path: Path) -> None:
    tool = amtool()
    config = _write(tmp_path, full_routing())
    result = subprocess.run(
        [tool, "config", "routes", "show", f"--config.file={config}"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # the team routes come before the platform's catch-alls
    first_team = next(i for i, line in enumerate(lines) if "foundation-critical" in line)
    platform = next(i for i, line in enumerate(lines) if "receiver: platform-critical" in line)
    assert first_team < platform
    assert not any("speech" in line for line in lines)
