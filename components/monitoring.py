"""Monitoring: metrics (kube-prometheus-stack), logs (Fluent Bit to CloudWatch), traces (OTel).

Owns, for every stack whose `monitoring.enabled` is on:

- **EBS CSI driver** as an EKS managed add-on (pinned per Kubernetes version in the catalog)
  with a Pod Identity role holding the AWS managed `AmazonEBSCSIDriverPolicy`, and a `gp3`
  encrypted StorageClass (WaitForFirstConsumer), so Prometheus' volume binds in the zone of
  its pod.
- **Namespace `monitoring`** (the name tenant NetworkPolicies admit scrapes from) with a
  ResourceQuota (no GPUs) and a LimitRange (chart pods without requests still count against
  the quota). Pod Security `enforce: privileged`, `warn`/`audit: baseline`: node-exporter
  needs hostNetwork, hostPID and a hostPath of `/`, Fluent Bit a hostPath of `/var/log`,
  which baseline refuses; the baseline warnings keep anything else that needs privileges
  visible.
- **Prometheus operator CRDs** applied server-side from the operator's release asset
  (`kubernetes.yaml.v2.ConfigFile`), separate from the chart (`crds.enabled: false`): helm
  never upgrades CRDs, and the monitors and rules below need them before the chart is ready.
- **kube-prometheus-stack** pinned: Prometheus with `retention` and a gp3 claim of
  `storage_gib`, selecting every ServiceMonitor/PodMonitor/PrometheusRule (not only the
  release's); Grafana (when `grafana`) with the dashboards sidecar and one ConfigMap per
  `monitoring/dashboards/*.json` (read at synth time); kube-state-metrics exposing the pod
  label `llm-platform/job-kind`; node-exporter with `--collector.ethtool` (ENA allowance
  counters) on every node, GPU nodes included.
- **Monitors** (typed in monitoring/models.py): the DCGM exporter's Service in
  `gpu-operator` (honorLabels, the one monitor that has it: the exporter is platform-owned
  and its metrics carry the GPU pod's namespace and pod), training pods
  (`llm-platform/job-kind: training`, port `metrics`; `job` from the JobSet controller's
  pod label) and vLLM Services (`llm-platform/scrape: "true"`, port `metrics`) in any
  namespace: tenants' pods, whose series keep Kubernetes' namespace.
- **Alert and recording rules** of monitoring/rules.py with the stack's thresholds.
- **Logs** (when `logs`): aws-for-fluent-bit to a Pulumi-made log group
  `/llm-platform/<stack>/containers` with `log_retention_days`; its Pod Identity role may only
  write streams of that group.
- **Traces** (when `traces`): an OpenTelemetry collector Deployment receiving OTLP and
  exporting to AWS X-Ray (Pod Identity role; X-Ray takes no resource ARNs) or to
  `otlp_endpoint`.
- **FSx metrics** (stacks with `storage.lustre`): the Prometheus CloudWatch exporter reading
  the file system's AWS/FSx `FreeDataStorageCapacity` and auto-export
  `AgeOfOldestQueuedMessage` through its own Pod Identity role (CloudWatch read actions, which
  take no resource ARN), scraped by its chart's ServiceMonitor; the `storage` rules alert on
  them with the file system's capacity. The FSx CSI driver publishes no volume stats.

Grafana's admin password is the secret config `llm-platform-monitoring:grafanaAdminPassword`
(`pulumi config set --secret llm-platform-monitoring:grafanaAdminPassword <password>`);
without it the login form and basic auth are off (anonymous access stays off), so nobody can
sign in with the password the chart makes up (a random one in a Secret since
kube-prometheus-stack 79; `prom-operator` before), and the program warns.

Ordering: the CRDs first; the chart after them, the namespace, the StorageClass, the EBS
add-on and the system pool (helm waits for the operator's Deployment); the charts whose pods
take AWS credentials after their Pod Identity association; the FSx rules after their exporter
(which waits for the file system's id), so FsxMetricsMissing does not fire during a build.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    LimitRangeItemArgs,
    LimitRangeSpecArgs,
    NamespaceInitArgs,
    ResourceQuotaSpecArgs,
)
from pulumi_kubernetes.meta.v1 import ObjectMetaArgs

from components.cluster import managed_addon
from components.helm import pinned_release
from components.iam import addon_role, allow, pod_identity_role, policy_document
from monitoring import alertmanager as am
from monitoring import log_queries, rules
from monitoring.charts import (
    CLOUDWATCH_EXPORTER,
    CLOUDWATCH_EXPORTER_SERVICE_ACCOUNT,
    FLUENT_BIT,
    FLUENT_BIT_SERVICE_ACCOUNT,
    KPS,
    NAMESPACE,
    OTEL,
    OTEL_SERVICE_ACCOUNT,
    STORAGE_CLASS,
    alertmanager_values,
    cloudwatch_exporter_values,
    fluent_bit_values,
    kube_prometheus_stack_values,
    monitors,
    otel_values,
    pins,
)
from monitoring.models import (
    PrometheusRule,
)
from spec.labels import PART_OF

EBS_ADDON = "aws-ebs-csi-driver"
EBS_SERVICE_ACCOUNT = "ebs-csi-controller-sa"
EBS_POLICY_ARN = "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"
DASHBOARDS_DIR = Path(__file__).resolve().parent.parent / "monitoring" / "dashboards"
DASHBOARD_LABEL = {"grafana_dashboard": "1"}
SECRET_CONFIG_NAMESPACE = "llm-platform-monitoring"
GRAFANA_PASSWORD_KEY = "grafanaAdminPassword"
GRAFANA_ADMIN_SECRET = "grafana-admin"

POD_SECURITY = {
    # node-exporter (hostNetwork, hostPID, hostPath /) and Fluent Bit (hostPath /var/log)
    # need what baseline refuses; warn and audit at baseline keep other pods honest.
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/warn": "baseline",
    "pod-security.kubernetes.io/audit": "baseline",
}
QUOTA = {
    "requests.nvidia.com/gpu": "0",
    "requests.cpu": "16",
    "requests.memory": "64Gi",
    "persistentvolumeclaims": "10",
}
"""Monitoring takes no GPU; CPU and memory leave room for Prometheus on a large cluster."""


def ebs_addon_version(kubernetes_version: str) -> str:
    versions = pins().ebs_csi_driver
    if kubernetes_version not in versions:
        pinned = ", ".join(sorted(versions)) or "none"
        raise ValueError(
            f"catalog.yaml pins no {EBS_ADDON} for Kubernetes {kubernetes_version} under "
            f"monitoring.ebs_csi_driver (pinned for: {pinned})"
        )
    return versions[kubernetes_version].version


def log_group_name(stack: str) -> str:
    return f"/llm-platform/{stack}/containers"


def grafana_password_warning() -> str:
    """What the program says when Grafana has no admin password: which key, and how to set it."""
    key = f"{SECRET_CONFIG_NAMESPACE}:{GRAFANA_PASSWORD_KEY}"
    return (
        f"monitoring: Grafana's login form is off: {key} is not set; set it with "
        f"`pulumi config set --secret {key} <password>`"
    )


def cloudwatch_read_policy() -> str:
    # CloudWatch's metric read actions take no resource ARN.
    actions = ["cloudwatch:GetMetricData", "cloudwatch:GetMetricStatistics"]
    actions.append("cloudwatch:ListMetrics")
    return policy_document(allow("ReadMetrics", actions, "*"))


SLACK_KEY = "slackWebhookUrl"
PAGERDUTY_KEY = "pagerdutyRoutingKey"


def receiver_secret_key(kind: str, audience: str) -> str:
    """The secret config key of an audience's Slack webhook URL or PagerDuty routing key:
    `slackWebhookUrl` for the platform, `slackWebhookUrl-<team>` for a team."""
    return kind if audience == am.PLATFORM else f"{kind}-{audience}"


def receiver_warning(audience: str, what: str, kind: str) -> str:
    key = f"{SECRET_CONFIG_NAMESPACE}:{receiver_secret_key(kind, audience)}"
    return (
        f"monitoring: alerts of {audience} reach no {what}: {key} is not set; set it with "
        f"`pulumi config set --secret {key} <value>`"
    )


def sns_key_policy(key_arn: str) -> str:
    """The alert topics' key: the account's IAM delegation, plus CloudWatch alarms, which
    publish to an encrypted topic only if the key policy lets the service use the key."""
    _, partition, _, _, account, _ = key_arn.split(":", 5)
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "EnableIamPolicies",
                    "Effect": "Allow",
                    "Principal": {"AWS": f"arn:{partition}:iam::{account}:root"},
                    "Action": "kms:*",
                    "Resource": "*",
                },
                {
                    "Sid": "CloudWatchAlarms",
                    "Effect": "Allow",
                    "Principal": {"Service": "cloudwatch.amazonaws.com"},
                    "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
                    "Resource": "*",
                    "Condition": {"StringEquals": {"aws:SourceAccount": account}},
                },
            ],
        }
    )


def sns_publish_policy(topic_arns: list[str], key_arn: str) -> str:
    return policy_document(
        allow("PublishAlerts", ["sns:Publish"], topic_arns),
        allow("EncryptAlerts", ["kms:GenerateDataKey*", "kms:Decrypt"], key_arn),
    )


def dashboard_files(directory: Path = DASHBOARDS_DIR) -> list[Path]:
    """The dashboards Grafana gets, one ConfigMap each (none is fine)."""
    return sorted(directory.glob("*.json")) if directory.is_dir() else []


def storage_class_args() -> k8s.storage.v1.StorageClassInitArgs:
    return k8s.storage.v1.StorageClassInitArgs(
        metadata=ObjectMetaArgs(name=STORAGE_CLASS, labels=PART_OF),
        provisioner="ebs.csi.aws.com",
        parameters={"type": "gp3", "encrypted": "true", "fsType": "ext4"},
        reclaim_policy="Delete",
        volume_binding_mode="WaitForFirstConsumer",
        allow_volume_expansion=True,
    )


def log_policy(log_group_arn: str) -> str:
    actions = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
    resources = [log_group_arn, f"{log_group_arn}:log-stream:*"]
    return policy_document(allow("WriteContainerLogs", actions, resources))


def xray_policy() -> str:
    # X-Ray's write actions take no resource ARN.
    actions = ["xray:PutTraceSegments", "xray:PutTelemetryRecords"]
    return policy_document(allow("PutTraces", actions, "*"))


@dataclass(frozen=True, kw_only=True)
class FileSystemMetrics:
    """The FSx for Lustre file system whose CloudWatch metrics are exported and alerted on."""

    file_system_id: pulumi.Input[str]


@dataclass(frozen=True, kw_only=True)
class AlertReceivers:
    """Who alerts reach (monitoring/alertmanager.py): the receivers asked for; each is used
    only once its secret config is set."""

    sns: bool = True
    """SNS topics per paging severity (critical, warning), KMS-encrypted."""
    platform: am.Audience = field(default_factory=lambda: am.Audience(name=am.PLATFORM))
    teams: Sequence[am.Audience] = ()
    info_slack_channel: str | None = None
    group_wait: str = "30s"
    group_interval: str = "5m"
    repeat_interval: str = "4h"


@dataclass(frozen=True, kw_only=True)
class LogQueries:
    """Saved CloudWatch Logs Insights queries on the container log group."""

    slow_request_seconds: float = 10


@dataclass(frozen=True, kw_only=True)
class MonitoringArgs:
    rules: Sequence[PrometheusRule]
    """The alert rules to deploy (`monitoring.rules.prometheus_rules`); the storage ones wait
    for the FSx exporter."""
    retention: str = "15d"
    """Prometheus TSDB retention."""
    storage_gib: int = 100
    """Prometheus volume (gp3)."""
    grafana: bool = True
    logs: bool = True
    """Fluent Bit shipping container logs to CloudWatch Logs."""
    log_retention_days: int = 30
    traces: bool = True
    """An OpenTelemetry collector for traces."""
    otlp_endpoint: str | None = None
    """Where traces go; None: AWS X-Ray."""
    stack: str
    cluster_name: pulumi.Input[str]
    kubernetes_version: str
    region: str
    system_nodes: list[pulumi.Resource] = field(default_factory=list)
    """What a controller Deployment needs first (the system node group)."""
    file_system: FileSystemMetrics | None = None
    """The stack's FSx for Lustre file system; None: no CloudWatch exporter, no storage rules."""
    alerting: AlertReceivers = field(default_factory=AlertReceivers)
    log_queries: LogQueries | None = field(default_factory=LogQueries)
    """None: no saved queries (they need `logs`)."""


class Monitoring(pulumi.ComponentResource):
    alert_topics: dict[str, pulumi.Output[str]]
    """Severity -> SNS topic ARN (empty without SNS): where CloudWatch alarms send too."""
    namespace: pulumi.Output[str]
    releases: dict[str, k8s.helm.v3.Release]
    log_group_name: pulumi.Output[str] | None
    crds: list[pulumi.Resource]
    """What a monitor or rule of another component waits for (the Prometheus operator CRDs)."""

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmp:monitoring:Monitoring", name, None, opts)
        pinned = pins()
        # Check the pins before anything is registered.
        ebs_version = ebs_addon_version(args.kubernetes_version)
        child = pulumi.ResourceOptions(parent=self)
        self.releases = {}

        def release(
            key: str,
            values: pulumi.Input[dict[str, Any]],
            depends_on: list[pulumi.Resource],
        ) -> k8s.helm.v3.Release:
            created = pinned_release(
                f"{name}-{key}",
                key,
                pinned.charts[key],
                namespace=NAMESPACE,
                create_namespace=False,
                values=values,
                opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on),
            )
            self.releases[key] = created
            return created

        # EBS CSI driver: the add-on, its role, and the gp3 class.
        ebs_role = addon_role(
            f"{name}-ebs-csi",
            parent=self,
            description="EBS CSI driver controller through EKS Pod Identity",
            managed_policy_arn=EBS_POLICY_ARN,
        )
        ebs_addon = managed_addon(
            f"{name}-{EBS_ADDON}",
            EBS_ADDON,
            ebs_version,
            parent=self,
            cluster_name=args.cluster_name,
            role=(ebs_role.arn, EBS_SERVICE_ACCOUNT),
            # The controller is a Deployment: the add-on is ACTIVE only once it runs.
            depends_on=args.system_nodes,
        )
        storage_class = k8s.storage.v1.StorageClass(
            f"{name}-{STORAGE_CLASS}", storage_class_args(), opts=child
        )

        ns = k8s.core.v1.Namespace(
            f"{name}-namespace",
            NamespaceInitArgs(
                metadata=ObjectMetaArgs(name=NAMESPACE, labels={**PART_OF, **POD_SECURITY})
            ),
            opts=child,
        )
        self.namespace = ns.metadata.apply(lambda m: m.name or NAMESPACE)
        namespace = self.namespace
        k8s.core.v1.ResourceQuota(
            f"{name}-quota",
            metadata=ObjectMetaArgs(name="llmp-quota", namespace=namespace, labels=PART_OF),
            spec=ResourceQuotaSpecArgs(hard=dict(QUOTA)),
            opts=child,
        )
        k8s.core.v1.LimitRange(
            f"{name}-limits",
            metadata=ObjectMetaArgs(name="llmp-defaults", namespace=namespace, labels=PART_OF),
            spec=LimitRangeSpecArgs(
                limits=[
                    LimitRangeItemArgs(
                        type="Container",
                        default={"cpu": "500m", "memory": "512Mi"},
                        default_request={"cpu": "100m", "memory": "128Mi"},
                    )
                ]
            ),
            opts=child,
        )

        crds = k8s.yaml.v2.ConfigFile(
            f"{name}-crds", file=pinned.prometheus_operator_crds.url, opts=child
        )
        after_crds = [crds]
        self.crds = [crds]

        admin_secret = None
        password = pulumi.Config(SECRET_CONFIG_NAMESPACE).get_secret(GRAFANA_PASSWORD_KEY)
        if args.grafana and password is not None:
            secret = k8s.core.v1.Secret(
                f"{name}-grafana-admin",
                metadata=ObjectMetaArgs(
                    name=GRAFANA_ADMIN_SECRET, namespace=namespace, labels=PART_OF
                ),
                string_data={"admin-user": "admin", "admin-password": password},
                opts=child,
            )
            admin_secret = GRAFANA_ADMIN_SECRET
            secrets: list[pulumi.Resource] = [secret]
        else:
            secrets = []
            if args.grafana:
                pulumi.log.warn(grafana_password_warning())
        if args.grafana:
            for path in dashboard_files():
                k8s.core.v1.ConfigMap(
                    f"{name}-dashboard-{path.stem}",
                    metadata=ObjectMetaArgs(
                        name=f"grafana-dashboard-{path.stem}",
                        namespace=namespace,
                        labels={**PART_OF, **DASHBOARD_LABEL},
                    ),
                    data={path.name: path.read_text()},
                    opts=child,
                )

        alertmanager, alerting_deps = self._alerting(name, args, namespace)
        values = kube_prometheus_stack_values(
            retention=args.retention,
            storage_gib=args.storage_gib,
            grafana=args.grafana,
            admin_secret=admin_secret,
            alertmanager=alertmanager,
        )
        release(
            KPS,
            values,
            [
                ns,
                *after_crds,
                storage_class,
                ebs_addon,
                *secrets,
                *alerting_deps,
                *args.system_nodes,
            ],
        )

        # The FSx rules arrive with their exporter: FsxMetricsMissing would otherwise fire
        # while the file system is still being created (20 minutes or more).
        fsx_exporter: list[pulumi.Resource] = []
        if args.file_system is not None:
            _, cloudwatch_association = pod_identity_role(
                f"{name}-cloudwatch-exporter",
                parent=self,
                description="Prometheus CloudWatch exporter reading the FSx metrics",
                policy=cloudwatch_read_policy(),
                cluster_name=args.cluster_name,
                namespace=NAMESPACE,
                service_account=CLOUDWATCH_EXPORTER_SERVICE_ACCOUNT,
            )
            region = args.region
            exporter = release(
                CLOUDWATCH_EXPORTER,
                pulumi.Output.from_input(args.file_system.file_system_id).apply(
                    lambda fs_id: cloudwatch_exporter_values(region, fs_id)
                ),
                # Its ServiceMonitor needs the CRDs when helm renders it.
                [ns, *after_crds, cloudwatch_association, *args.system_nodes],
            )
            fsx_exporter.append(exporter)

        cr_opts = pulumi.ResourceOptions(parent=self, depends_on=after_crds)
        fsx_rule_opts = pulumi.ResourceOptions(parent=self, depends_on=[*after_crds, *fsx_exporter])
        objects: list[Any] = [*monitors(NAMESPACE), *args.rules]
        for obj in objects:
            manifest = obj.dump()
            metadata = manifest["metadata"]
            k8s.apiextensions.CustomResource(
                f"{name}-{manifest['kind'].lower()}-{metadata['name']}",
                api_version=manifest["apiVersion"],
                kind=manifest["kind"],
                metadata=ObjectMetaArgs(
                    name=metadata["name"], namespace=namespace, labels=metadata.get("labels")
                ),
                spec=manifest["spec"],
                opts=fsx_rule_opts if metadata["name"] == rules.rule_name("storage") else cr_opts,
            )

        self.log_group_name = None
        if args.logs:
            group = aws.cloudwatch.LogGroup(
                f"{name}-logs",
                name=log_group_name(args.stack),
                retention_in_days=args.log_retention_days,
                opts=child,
            )
            _, association = pod_identity_role(
                f"{name}-fluent-bit",
                parent=self,
                description="Fluent Bit writing container logs to CloudWatch Logs",
                policy=group.arn.apply(log_policy),
                cluster_name=args.cluster_name,
                namespace=NAMESPACE,
                service_account=FLUENT_BIT_SERVICE_ACCOUNT,
            )
            release(
                FLUENT_BIT,
                fluent_bit_values(args.region, log_group_name(args.stack)),
                [ns, group, association],
            )
            self.log_group_name = group.name
            if args.log_queries is not None:
                for query in log_queries.queries(args.log_queries.slow_request_seconds):
                    aws.cloudwatch.QueryDefinition(
                        f"{name}-query-{query.key}",
                        name=f"llm-platform/{args.stack}/{query.title}",
                        log_group_names=[group.name],
                        query_string=query.text,
                        opts=child,
                    )

        if args.traces:
            deps: list[pulumi.Resource] = [ns, *args.system_nodes]
            if args.otlp_endpoint is None:
                _, otel_association = pod_identity_role(
                    f"{name}-otel",
                    parent=self,
                    description="OpenTelemetry collector exporting traces to AWS X-Ray",
                    policy=xray_policy(),
                    cluster_name=args.cluster_name,
                    namespace=NAMESPACE,
                    service_account=OTEL_SERVICE_ACCOUNT,
                )
                deps.append(otel_association)
            release(OTEL, otel_values(args.otlp_endpoint, args.region), deps)

        self.register_outputs(
            {
                "namespace": self.namespace,
                "releases": sorted(self.releases),
                "log_group_name": self.log_group_name,
                "alert_topics": self.alert_topics,
            }
        )

    def _alerting(
        self, name: str, args: MonitoringArgs, namespace: pulumi.Input[str]
    ) -> tuple[dict[str, Any], list[pulumi.Resource]]:
        """Alertmanager's values: the SNS topics and their publisher role, the receivers'
        Secret from secret config, and the routing tree of what is configured."""
        child = pulumi.ResourceOptions(parent=self)
        alerting = args.alerting
        deps: list[pulumi.Resource] = []
        self.alert_topics = {}
        if alerting.sns:
            key = aws.kms.Key(
                f"{name}-alerts",
                description=f"SNS alert topics of {args.stack}",
                enable_key_rotation=True,
                deletion_window_in_days=30,
                opts=child,
            )
            aws.kms.KeyPolicy(
                f"{name}-alerts-key-policy",
                key_id=key.key_id,
                policy=key.arn.apply(sns_key_policy),
                opts=child,
            )
            for severity in am.PAGED:
                topic = aws.sns.Topic(
                    f"{name}-alerts-{severity}",
                    name=f"{args.stack}-alerts-{severity}",
                    kms_master_key_id=key.arn,
                    opts=child,
                )
                self.alert_topics[severity] = topic.arn
            topics = list(self.alert_topics.values())
            _, association = pod_identity_role(
                f"{name}-alertmanager",
                parent=self,
                description="Alertmanager publishing alerts to the SNS alert topics",
                policy=pulumi.Output.all(key.arn, *topics).apply(
                    lambda v: sns_publish_policy(list(v[1:]), v[0])
                ),
                cluster_name=args.cluster_name,
                namespace=NAMESPACE,
                service_account=am.SERVICE_ACCOUNT,
            )
            deps.append(association)

        config = pulumi.Config(SECRET_CONFIG_NAMESPACE)
        files: dict[str, pulumi.Output[str]] = {}

        def usable(wanted: am.Audience) -> am.Audience:
            channel, pager = wanted.slack_channel, wanted.pagerduty
            if channel is not None:
                url = config.get_secret(receiver_secret_key(SLACK_KEY, wanted.name))
                if url is None:
                    pulumi.log.warn(receiver_warning(wanted.name, f"Slack ({channel})", SLACK_KEY))
                    channel = None
                else:
                    files[am.slack_key(wanted.name)] = url
            if pager:
                routing_key = config.get_secret(receiver_secret_key(PAGERDUTY_KEY, wanted.name))
                if routing_key is None:
                    pulumi.log.warn(receiver_warning(wanted.name, "PagerDuty", PAGERDUTY_KEY))
                    pager = False
                else:
                    files[am.pagerduty_key(wanted.name)] = routing_key
            return am.Audience(
                name=wanted.name,
                slack_channel=channel,
                pagerduty=pager,
                namespaces=wanted.namespaces,
            )

        platform = usable(alerting.platform)
        teams = [usable(t) for t in alerting.teams]
        if not alerting.sns and not files:
            pulumi.log.warn(
                "monitoring: no alert receiver is configured (no SNS, Slack or PagerDuty): "
                "alerts stay in Alertmanager"
            )
        elif not platform.pagerduty:
            where = f"the SNS topic {args.stack}-alerts-critical" if alerting.sns else "no pager"
            pulumi.log.warn(
                "monitoring: critical alerts page nobody: the platform has no PagerDuty "
                "(monitoring.alerting.platform.pagerduty and the secret config "
                f"{SECRET_CONFIG_NAMESPACE}:{PAGERDUTY_KEY}); they reach {where}"
            )
        secret_names: list[str] = []
        if files:
            receivers_secret = k8s.core.v1.Secret(
                f"{name}-alert-receivers",
                metadata=ObjectMetaArgs(name=am.SECRET_NAME, namespace=namespace, labels=PART_OF),
                string_data=files,
                opts=child,
            )
            deps.append(receivers_secret)
            secret_names.append(am.SECRET_NAME)

        region = args.region

        def render(arns: list[str]) -> dict[str, Any]:
            return am.alertmanager_config(
                am.AlertRouting(
                    platform=platform,
                    teams=teams,
                    sns_topics=dict(zip(am.PAGED, arns, strict=True)) if arns else {},
                    region=region,
                    info_slack_channel=alerting.info_slack_channel,
                    group_wait=alerting.group_wait,
                    group_interval=alerting.group_interval,
                    repeat_interval=alerting.repeat_interval,
                )
            )

        routed: Any = (
            pulumi.Output.all(*self.alert_topics.values()).apply(render)
            if self.alert_topics
            else render([])
        )
        return alertmanager_values(routed, secret_names, am.SERVICE_ACCOUNT), deps
