"""Alertmanager's configuration: receivers, the routing tree and the inhibitions.

kube-prometheus-stack renders it from `alertmanager.config` (components/monitoring.py). The
tree, top to bottom (first match wins, no `continue`):

1. `Watchdog` and `InfoInhibitor` (kube-prometheus-stack's own) go nowhere.
2. Per team and severity that the team has a receiver for (critical: its PagerDuty;
   warning: its Slack channel): alerts labelled `team: <team>`, then alerts from the team's
   namespaces, go to `<team>-<severity>` (its pager or channel, and the SNS topic with the
   attribute `team`). A team without its own pager has its critical alerts page the
   platform.
3. `severity: critical` goes to `platform-critical` (PagerDuty, SNS, Slack).
4. `severity: info` goes to `platform-info` (a Slack channel) or nowhere.
5. Anything else (warnings, and alerts without a severity) goes to `platform-warning`
   (Slack, SNS).

A receiver integrates only what is configured *and* has its secret: Slack's webhook URL
and PagerDuty's routing key are files of the Secret `alertmanager-receivers`, mounted
into the Alertmanager pods (`api_url_file`, `routing_key_file`), never in the config
itself. A team with no usable receiver for a severity gets no route for it: its alerts
fall through to the platform's.

SNS (`sns_configs`): one topic per paging severity, signed with SigV4 from the pod's own
credentials (EKS Pod Identity of the `alertmanager` service account). The message
attributes `severity`, `team` and `alertname` let a subscription filter.

Inhibitions:
- critical mutes warning and info of the same alert and namespace; warning mutes info
  (kube-prometheus-stack's defaults, kept);
- `InfoInhibitor` mutes info alerts of its namespace (the chart's default rules use it);
- a node that is down (`KubeNodeNotReady`, `KubeNodeUnreachable`), out of service
  (`NodeQuarantined`: NVSentinel or the straggler watcher tainted it) or whose GPU needs a
  reset or the node a replacement (the XID classes the catalog quarantines) mutes every
  other alert on that node (`equal: [node]`; the DCGM series get `node` from their
  `Hostname` at scrape time). The source must carry a node: with `equal`, a label missing on
  both sides counts as equal, and a node-less source would mute every node-less alert.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spec.catalog import catalog

SECRET_NAME = "alertmanager-receivers"
"""The Kubernetes Secret holding the receivers' webhook URLs and routing keys."""
SECRET_DIR = f"/etc/alertmanager/secrets/{SECRET_NAME}"
"""Where the operator mounts it (`alertmanagerSpec.secrets`)."""
SERVICE_ACCOUNT = "alertmanager"
"""Alertmanager's service account: its Pod Identity role may publish to the SNS topics."""
PLATFORM = "platform"
NULL = "null"
PAGED = ("critical", "warning")
"""The severities with an SNS topic each."""
NODE_DOWN_ALERTS = ("KubeNodeNotReady", "KubeNodeUnreachable", "NodeQuarantined")
"""Node-level alerts with a `node` label: kube-prometheus-stack's two, and ours."""
GROUP_BY = ("alertname", "namespace", "node")

SLACK_TITLE = "[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }} ({{ .Alerts | len }})"
SLACK_TEXT = (
    "{{ range .Alerts }}*{{ .Labels.severity }}* {{ .Annotations.summary }}\n"
    "{{ if .Labels.node }}node: {{ .Labels.node }}  {{ end }}"
    "{{ if .Labels.namespace }}namespace: {{ .Labels.namespace }}  {{ end }}"
    "{{ if .Labels.job }}job: {{ .Labels.job }}{{ end }}\n"
    "runbook: {{ .Annotations.runbook }}\n{{ end }}"
)
SNS_SUBJECT = "[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }}"
SNS_MESSAGE = (
    "{{ range .Alerts }}{{ .Labels.severity }}: {{ .Annotations.summary }}\n"
    "labels: {{ range .Labels.SortedPairs }}{{ .Name }}={{ .Value }} {{ end }}\n"
    "runbook: {{ .Annotations.runbook }}\n\n{{ end }}"
)
PAGERDUTY_DESCRIPTION = "{{ .CommonLabels.alertname }}: {{ .CommonAnnotations.summary }}"


def slack_key(audience: str) -> str:
    """The Secret key (file name) of an audience's Slack webhook URL."""
    return f"slack-{audience}"


def pagerduty_key(audience: str) -> str:
    """The Secret key (file name) of an audience's PagerDuty routing key."""
    return f"pagerduty-{audience}"


@dataclass(frozen=True, kw_only=True)
class Audience:
    """One audience (the platform, or a team) with the receivers it can actually use: a
    Slack channel or PagerDuty only where its secret is set."""

    name: str
    slack_channel: str | None = None
    pagerduty: bool = False
    namespaces: Sequence[str] = ()
    """A team's namespaces (the platform has none: it takes what is left)."""


@dataclass(frozen=True, kw_only=True)
class AlertRouting:
    platform: Audience
    teams: Sequence[Audience] = ()
    sns_topics: Mapping[str, str] = field(default_factory=dict)
    """Severity (critical, warning) -> topic ARN; empty: no SNS."""
    region: str = "us-east-1"
    """The topics' region (SigV4)."""
    info_slack_channel: str | None = None
    """Info alerts to this channel through the platform's webhook; None: nowhere."""
    group_wait: str = "30s"
    group_interval: str = "5m"
    repeat_interval: str = "4h"


def node_down_sources() -> list[str]:
    """Alerts that say a node is down or out of service: they mute the node's other alerts."""
    xids = catalog().gpu_xids
    quarantined = [c.alert for c in xids.classes.values() if c.quarantine] if xids else []
    return [*NODE_DOWN_ALERTS, *quarantined]


def _slack(audience: Audience, channel: str) -> dict[str, Any]:
    return {
        "api_url_file": f"{SECRET_DIR}/{slack_key(audience.name)}",
        "channel": channel,
        "send_resolved": True,
        "title": SLACK_TITLE,
        "text": SLACK_TEXT,
    }


def _sns(routing: AlertRouting, severity: str, team: str) -> dict[str, Any]:
    return {
        "topic_arn": routing.sns_topics[severity],
        "sigv4": {"region": routing.region},
        "subject": SNS_SUBJECT,
        "message": SNS_MESSAGE,
        "attributes": {"severity": severity, "team": team},
        "send_resolved": True,
    }


def receivers_of(audience: Audience, routing: AlertRouting) -> dict[str, dict[str, Any]]:
    """Receiver name -> receiver, for the severities the audience can take (info only for
    the platform, with its info channel)."""
    out: dict[str, dict[str, Any]] = {}
    for severity in PAGED:
        receiver: dict[str, Any] = {"name": f"{audience.name}-{severity}"}
        if severity == "critical" and audience.pagerduty:
            receiver["pagerduty_configs"] = [
                {
                    "routing_key_file": f"{SECRET_DIR}/{pagerduty_key(audience.name)}",
                    "severity": "critical",
                    "description": PAGERDUTY_DESCRIPTION,
                    "send_resolved": True,
                }
            ]
        if audience.slack_channel:
            receiver["slack_configs"] = [_slack(audience, audience.slack_channel)]
        if severity in routing.sns_topics:
            receiver["sns_configs"] = [_sns(routing, severity, audience.name)]
        # A team takes a severity only with its own way to hear it: critical needs its pager
        # (a chat message does not wake anyone), warning its channel.
        own = audience.pagerduty if severity == "critical" else bool(audience.slack_channel)
        if audience.name == PLATFORM or own:
            out[receiver["name"]] = receiver
    if audience.name == PLATFORM:
        info: dict[str, Any] = {"name": f"{PLATFORM}-info"}
        if routing.info_slack_channel and audience.slack_channel:
            info["slack_configs"] = [_slack(audience, routing.info_slack_channel)]
        out[info["name"]] = info
    return out


def _namespace_matcher(namespaces: Sequence[str]) -> str:
    # Alertmanager anchors the regex; the names are validated (no regex characters).
    return f'namespace=~"{"|".join(sorted(namespaces))}"'


def team_routes(team: Audience, available: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """A team's routes: per severity it has a receiver for, its `team` label, then its
    namespaces."""
    routes = []
    for severity in PAGED:
        receiver = f"{team.name}-{severity}"
        if receiver not in available:
            continue
        for matcher in (f'team="{team.name}"', _namespace_matcher(team.namespaces)):
            routes.append({"receiver": receiver, "matchers": [matcher, f'severity="{severity}"']})
    return routes


def inhibit_rules() -> list[dict[str, Any]]:
    sources = "|".join(node_down_sources())
    return [
        {
            "source_matchers": ['severity="critical"'],
            "target_matchers": ['severity=~"warning|info"'],
            "equal": ["namespace", "alertname"],
        },
        {
            "source_matchers": ['severity="warning"'],
            "target_matchers": ['severity="info"'],
            "equal": ["namespace", "alertname"],
        },
        {
            "source_matchers": ['alertname="InfoInhibitor"'],
            "target_matchers": ['severity="info"'],
            "equal": ["namespace"],
        },
        {
            "source_matchers": [f'alertname=~"{sources}"', 'node=~".+"'],
            "target_matchers": [f'alertname!~"{sources}"'],
            "equal": ["node"],
        },
    ]


def alertmanager_config(routing: AlertRouting) -> dict[str, Any]:
    """The whole Alertmanager configuration (what `alertmanager.config` holds)."""
    receivers: dict[str, dict[str, Any]] = {NULL: {"name": NULL}}
    receivers.update(receivers_of(routing.platform, routing))
    routes: list[dict[str, Any]] = [
        {"receiver": NULL, "matchers": ['alertname=~"Watchdog|InfoInhibitor"']},
    ]
    for team in sorted(routing.teams, key=lambda t: t.name):
        own = receivers_of(team, routing)
        receivers.update(own)
        routes += team_routes(team, own)
    routes += [
        {"receiver": f"{PLATFORM}-critical", "matchers": ['severity="critical"']},
        {"receiver": f"{PLATFORM}-info", "matchers": ['severity="info"']},
    ]
    return {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": f"{PLATFORM}-warning",
            "group_by": list(GROUP_BY),
            "group_wait": routing.group_wait,
            "group_interval": routing.group_interval,
            "repeat_interval": routing.repeat_interval,
            "routes": routes,
        },
        "inhibit_rules": inhibit_rules(),
        "receivers": list(receivers.values()),
        "templates": ["/etc/alertmanager/config/*.tmpl"],
    }


def unconfigured(
    audiences: Mapping[str, tuple[str | None, bool]], present: Mapping[str, tuple[bool, bool]]
) -> list[str]:
    """What the config asks for but the secrets lack: audience -> (slack channel, pagerduty)
    asked, audience -> (slack secret set, pagerduty secret set). One line each."""
    lines = []
    for name, (channel, pager) in sorted(audiences.items()):
        has_slack, has_pager = present.get(name, (False, False))
        if channel and not has_slack:
            lines.append(f"{name}: Slack channel {channel} has no webhook URL")
        if pager and not has_pager:
            lines.append(f"{name}: PagerDuty has no routing key")
    return lines
