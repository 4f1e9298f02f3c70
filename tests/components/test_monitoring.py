"""Monitoring: EBS CSI add-on and gp3 class, the `monitoring` namespace, the Prometheus operator
CRDs before the pinned charts, monitors and rules as custom resources, logs to a Pulumi-made
log group and traces to X-Ray or OTLP, each through its own Pod Identity role."""

from __future__ import annotations

import json

import pulumi
import pytest
import yaml

from components.monitoring import (
    DASHBOARD_LABEL,
    EBS_POLICY_ARN,
    GRAFANA_ADMIN_SECRET,
    GRAFANA_PASSWORD_KEY,
    SECRET_CONFIG_NAMESPACE,
    dashboard_files,
    ebs_addon_version,
    grafana_password_warning,
    log_group_name,
)
from monitoring import rules
from monitoring.charts import (
    CLOUDWATCH_EXPORTER,
    CLOUDWATCH_EXPORTER_SERVICE_ACCOUNT,
    FLUENT_BIT_SERVICE_ACCOUNT,
    OTEL_SERVICE_ACCOUNT,
    cloudwatch_exporter_values,
)
from spec.catalog import catalog
from spec.monitoring import AlertThresholds
from spec.stackfile import load_config
from tests.conftest import STACKS, raw_stack, with_section

RELEASE = "kubernetes:helm.sh/v3:Release"
CONFIG_FILE = "kubernetes:yaml/v2:ConfigFile"
ADDON = "aws:eks/addon:Addon"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"
NAMESPACE = "kubernetes:core/v1:Namespace"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
SECRET = "kubernetes:core/v1:Secret"
SERVICE_MONITOR = "kubernetes:monitoring.coreos.com/v1:ServiceMonitor"
POD_MONITOR = "kubernetes:monitoring.coreos.com/v1:PodMonitor"
PROMETHEUS_RULE = "kubernetes:monitoring.coreos.com/v1:PrometheusRule"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"


def _ours(plan) -> list[dict]:
    return [r for r in plan.resources if r.name.startswith("monitoring")]


def _releases(plan) -> dict[str, dict]:
    return {
        r.name.removeprefix("monitoring-"): r
        for r in plan.by_type(RELEASE)
        if r.name.startswith("monitoring-")
    }


def _kps(plan) -> dict:
    return _releases(plan)["kube-prometheus-stack"].inputs["values"]


def _lustre_capacity(stack: str) -> int | None:
    storage = load_config(raw_stack(stack)).storage
    return storage.lustre.storage_capacity_gib if storage and storage.lustre else None


def _monitoring(synth, overrides: dict, **secrets):
    raw = with_section("pretrain", "monitoring", overrides)
    for key, value in secrets.items():
        raw[f"{SECRET_CONFIG_NAMESPACE}:{key}"] = {"secure": value}
    return synth(raw)


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_gets_the_component_with_children_parented(plans, stack: str) -> None:
    plan = plans(stack)
    component = plan.one("llmp:monitoring:Monitoring", "monitoring")
    children = [r for r in _ours(plan) if r.urn != component.urn]
    assert children and all(r.parent == component.urn for r in children)
    outputs = dict(plan.outputs["monitoring"])
    topics = outputs.pop("alert_topics")
    assert outputs == {"namespace": "monitoring", "log_group": f"/llm-platform/{stack}/containers"}
    assert sorted(topics) == ["critical", "warning"]


@pytest.mark.parametrize("stack", STACKS)
def test_alerts_reach_kms_encrypted_sns_topics_and_saved_queries_exist(plans, stack: str) -> None:
    plan = plans(stack)
    topics = plan.by_type("aws:sns/topic:Topic")
    names = sorted(r.inputs["name"] for r in topics)
    assert names == [f"{stack}-alerts-critical", f"{stack}-alerts-warning"]
    assert all(r.inputs.get("kmsMasterKeyId") for r in topics)
    am_values = _kps(plan)["alertmanager"]
    assert am_values["serviceAccount"]["name"] == "alertmanager"
    receivers = {r["name"]: r for r in am_values["config"]["receivers"]}
    # No receiver secrets in these stacks: SNS only, and no Secret to mount.
    assert "sns_configs" in receivers["platform-critical"]
    assert "pagerduty_configs" not in receivers["platform-critical"]
    assert not am_values["alertmanagerSpec"].get("secrets")
    assert not [r for r in plan.by_type(SECRET) if r.name == "monitoring-alert-receivers"]
    pod_identity = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
    association = plan.one(pod_identity, "monitoring-alertmanager")
    assert association.inputs["serviceAccount"] == "alertmanager"
    queries = plan.by_type("aws:cloudwatch/queryDefinition:QueryDefinition")
    titles = {q.inputs["name"].rsplit("/", 1)[1] for q in queries}
    assert {"errors by pod", "slow requests", "OOM kills", "GPU XIDs"} <= titles


def test_receiver_secrets_are_mounted_files_never_in_the_plan(synth) -> None:
    alerting = {"platform": {"slack_channel": "#llm-alerts", "pagerduty": True}}
    plan = _monitoring(
        synth,
        {"alerting": alerting},
        slackWebhookUrl="https://hooks.slack.test/T0/B0/zzz",
        pagerdutyRoutingKey="pd-routing-0123",
    )
    dumped = json.dumps(plan.to_dict())
    assert "hooks.slack.test" not in dumped and "pd-routing-0123" not in dumped
    secret = plan.one(SECRET, "monitoring-alert-receivers")
    assert secret.inputs["metadata"]["name"] == "alertmanager-receivers"
    am_values = _kps(plan)["alertmanager"]
    assert am_values["alertmanagerSpec"]["secrets"] == ["alertmanager-receivers"]
    receivers = {r["name"]: r for r in am_values["config"]["receivers"]}
    pager = receivers["platform-critical"]["pagerduty_configs"][0]
    assert pager["routing_key_file"].endswith("/alertmanager-receivers/pagerduty-platform")
    slack = receivers["platform-warning"]["slack_configs"][0]
    assert slack["api_url_file"].endswith("/alertmanager-receivers/slack-platform")
    assert secret.urn in _releases(plan)["kube-prometheus-stack"].dependencies


def test_receiver_keys_are_the_ones_the_stack_file_accepts() -> None:
    from components.monitoring import PAGERDUTY_KEY, SLACK_KEY, receiver_secret_key
    from spec import keys

    assert (SLACK_KEY, PAGERDUTY_KEY) == keys.RECEIVER_KEYS
    for kind in keys.RECEIVER_KEYS:
        for audience in ("platform", "foundation", "vision-eval"):
            assert keys.monitoring_secret_key(receiver_secret_key(kind, audience))
    assert not keys.monitoring_secret_key("slackWebhook")
    assert not keys.monitoring_secret_key("slackWebhookUrl-")


def test_a_receiver_without_its_secret_is_off_and_named(synth, monkeypatch) -> None:
    warned: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *a, **k: warned.append(message))
    teams = {"foundation": {"slack_channel": "#foundation", "pagerduty": True}}
    plan = _monitoring(synth, {"alerting": {"teams": teams}})
    assert any("slackWebhookUrl-foundation" in w for w in warned), warned
    assert any("pagerdutyRoutingKey-foundation" in w for w in warned), warned
    assert any("critical alerts page nobody" in w for w in warned), warned
    receivers = {r["name"] for r in _kps(plan)["alertmanager"]["config"]["receivers"]}
    assert not {"foundation-critical", "foundation-warning"} & receivers


@pytest.mark.parametrize("stack", STACKS)
def test_charts_are_pinned_from_the_catalog_into_the_namespace(plans, stack: str) -> None:
    releases = _releases(plans(stack))
    pins = catalog().monitoring
    assert pins is not None
    # The CloudWatch exporter only where there is a file system to watch.
    expected = set(pins.charts) - (
        {CLOUDWATCH_EXPORTER} if _lustre_capacity(stack) is None else set()
    )
    assert set(releases) == expected
    for key, chart in pins.charts.items():
        if key not in releases:
            continue
        inputs = releases[key].inputs
        assert inputs["version"] == chart.version
        assert inputs["repositoryOpts"]["repo"] == chart.repository
        assert inputs["namespace"] == "monitoring"
        assert inputs["createNamespace"] is False


def test_ebs_csi_addon_role_and_gp3_class(plans) -> None:
    plan = plans("pretrain")
    addon = plan.one(ADDON, "monitoring-aws-ebs-csi-driver")
    inputs = addon.inputs
    assert inputs["addonVersion"] == ebs_addon_version("1.35") == "v1.59.0-eksbuild.1"
    (association,) = inputs["podIdentityAssociations"]
    assert association["serviceAccount"] == "ebs-csi-controller-sa"
    role = plan.one(ROLE, "monitoring-ebs-csi")
    assert "pods.eks.amazonaws.com" in role.inputs["assumeRolePolicy"]
    assert association["roleArn"].endswith("/monitoring-ebs-csi")
    assert plan.one(ATTACHMENT, "monitoring-ebs-csi").inputs["policyArn"] == EBS_POLICY_ARN
    assert plan.one(NODE_GROUP, "cluster-system").urn in addon.dependencies
    sc = plan.one(STORAGE_CLASS, "monitoring-gp3").inputs
    assert sc["provisioner"] == "ebs.csi.aws.com"
    assert sc["parameters"]["type"] == "gp3"
    assert sc["parameters"]["encrypted"] == "true"
    assert sc["volumeBindingMode"] == "WaitForFirstConsumer"


def test_ebs_pin_is_required_for_the_cluster_version() -> None:
    with pytest.raises(ValueError, match=r"pins no aws-ebs-csi-driver for Kubernetes 1\.99"):
        ebs_addon_version("1.99")


def test_namespace_is_privileged_for_node_agents_and_capped(plans) -> None:
    plan = plans("pretrain")
    labels = plan.one(NAMESPACE, "monitoring-namespace").inputs["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/warn"] == "baseline"
    assert labels["pod-security.kubernetes.io/audit"] == "baseline"
    assert labels["app.kubernetes.io/part-of"] == "llm-platform"
    quota = plan.one("kubernetes:core/v1:ResourceQuota", "monitoring-quota").inputs
    assert quota["metadata"]["namespace"] == "monitoring"
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "0"
    limits = plan.one("kubernetes:core/v1:LimitRange", "monitoring-limits").inputs
    (item,) = limits["spec"]["limits"]
    assert {"cpu", "memory"} <= set(item["default"]) & set(item["defaultRequest"])


def test_crds_are_applied_first_from_the_pinned_release(plans) -> None:
    plan = plans("pretrain")
    crds = plan.one(CONFIG_FILE, "monitoring-crds")
    pins = catalog().monitoring
    assert pins is not None
    assert crds.inputs["file"] == pins.prometheus_operator_crds.url
    assert "/releases/download/v" in pins.prometheus_operator_crds.url
    kps = _releases(plan)["kube-prometheus-stack"]
    assert crds.urn in kps.dependencies
    for type_ in (SERVICE_MONITOR, POD_MONITOR, PROMETHEUS_RULE):
        objects = plan.by_type(type_)
        assert objects
        assert all(crds.urn in r.dependencies for r in objects)
    assert _kps(plan)["crds"] == {"enabled": False}


def test_kube_prometheus_stack_waits_for_storage_namespace_and_system_pool(plans) -> None:
    plan = plans("pretrain")
    deps = set(_releases(plan)["kube-prometheus-stack"].dependencies)
    for type_, name in [
        (NAMESPACE, "monitoring-namespace"),
        (STORAGE_CLASS, "monitoring-gp3"),
        (ADDON, "monitoring-aws-ebs-csi-driver"),
        (NODE_GROUP, "cluster-system"),
    ]:
        assert plan.one(type_, name).urn in deps


def test_prometheus_retention_volume_and_selectors(plans, synth) -> None:
    spec = _kps(plans("pretrain"))["prometheus"]["prometheusSpec"]
    assert spec["retention"] == "15d"
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "gp3"
    assert claim["resources"]["requests"]["storage"] == "100Gi"
    for key in ("serviceMonitor", "podMonitor", "rule"):
        assert spec[f"{key}SelectorNilUsesHelmValues"] is False
    custom = _monitoring(synth, {"retention": "30d", "storage_gib": 500})
    spec = _kps(custom)["prometheus"]["prometheusSpec"]
    assert spec["retention"] == "30d"
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["resources"]["requests"]["storage"] == "500Gi"


def test_exporters_expose_job_kind_and_ena_counters(plans) -> None:
    values = _kps(plans("pretrain"))
    assert values["kube-state-metrics"]["metricLabelsAllowlist"] == [
        "pods=[llm-platform/job-kind]",
        "nodes=[llm-platform/pool]",
    ]
    node_exporter = values["prometheus-node-exporter"]
    assert "--collector.ethtool" in node_exporter["extraArgs"]
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert gpu in node_exporter["tolerations"]


def test_grafana_sidecar_and_one_config_map_per_dashboard(plans) -> None:
    plan = plans("pretrain")
    grafana = _kps(plan)["grafana"]
    assert grafana["enabled"] is True
    sidecar = grafana["sidecar"]["dashboards"]
    assert sidecar["enabled"] is True
    assert (sidecar["label"], sidecar["labelValue"]) == ("grafana_dashboard", "1")
    maps = [r for r in plan.by_type(CONFIG_MAP) if r.name.startswith("monitoring-dashboard-")]
    files = dashboard_files()
    assert len(maps) == len(files)
    for path in files:
        inputs = plan.one(CONFIG_MAP, f"monitoring-dashboard-{path.stem}").inputs
        assert inputs["metadata"]["namespace"] == "monitoring"
        assert DASHBOARD_LABEL.items() <= inputs["metadata"]["labels"].items()
        assert inputs["data"] == {path.name: path.read_text()}


def test_dashboard_glob_tolerates_no_files(tmp_path) -> None:
    assert dashboard_files(tmp_path) == []
    assert dashboard_files(tmp_path / "missing") == []


def test_without_a_password_the_warning_says_how_to_set_one(synth, monkeypatch) -> None:
    warned: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *a, **k: warned.append(message))
    _monitoring(synth, {})
    key = f"{SECRET_CONFIG_NAMESPACE}:{GRAFANA_PASSWORD_KEY}"
    assert key == "llm-platform-monitoring:grafanaAdminPassword"
    assert warned.count(grafana_password_warning()) == 1
    assert f"`pulumi config set --secret {key} <password>`" in grafana_password_warning()
    warned.clear()
    _monitoring(synth, {}, **{GRAFANA_PASSWORD_KEY: "s3cret"})
    assert grafana_password_warning() not in warned


def test_the_monitoring_docs_document_the_grafana_password_key() -> None:
    from pathlib import Path

    page = " ".join((Path(__file__).parents[2] / "docs/monitoring.md").read_text().split())
    key = f"{SECRET_CONFIG_NAMESPACE}:{GRAFANA_PASSWORD_KEY}"
    assert f"pulumi config set --secret {key} <password>" in page


def test_without_a_password_grafana_login_is_off(plans) -> None:
    plan = plans("pretrain")
    ini = _kps(plan)["grafana"]["grafana.ini"]
    assert ini["auth"]["disable_login_form"] is True
    assert ini["auth.basic"]["enabled"] is False
    assert ini["auth.anonymous"]["enabled"] is False
    assert not [r for r in plan.by_type(SECRET) if r.name.startswith("monitoring-")]


def test_a_secret_password_goes_to_a_secret_the_chart_reads(synth) -> None:
    plan = _monitoring(synth, {}, **{GRAFANA_PASSWORD_KEY: "s3cret"})
    secret = plan.one(SECRET, "monitoring-grafana-admin")
    assert secret.inputs["metadata"]["name"] == GRAFANA_ADMIN_SECRET
    assert "s3cret" not in json.dumps(plan.to_dict())
    grafana = _kps(plan)["grafana"]
    assert grafana["admin"]["existingSecret"] == GRAFANA_ADMIN_SECRET
    assert "grafana.ini" not in grafana
    assert secret.urn in _releases(plan)["kube-prometheus-stack"].dependencies


def test_grafana_off_drops_it_and_its_dashboards(synth) -> None:
    plan = _monitoring(synth, {"grafana": False})
    assert _kps(plan)["grafana"] == {"enabled": False}
    assert not [r for r in plan.by_type(CONFIG_MAP) if r.name.startswith("monitoring-")]


def test_monitors_select_dcgm_training_pods_and_vllm(plans) -> None:
    plan = plans("pretrain")
    dcgm = plan.one(SERVICE_MONITOR, "monitoring-servicemonitor-dcgm-exporter").inputs
    assert dcgm["metadata"]["namespace"] == "monitoring"
    assert dcgm["spec"]["namespaceSelector"] == {"matchNames": ["gpu-operator"]}
    assert dcgm["spec"]["endpoints"][0]["honorLabels"] is True
    training = plan.one(POD_MONITOR, "monitoring-podmonitor-training").inputs["spec"]
    assert training["selector"]["matchLabels"] == {"llm-platform/job-kind": "training"}
    assert training["podMetricsEndpoints"][0]["port"] == "metrics"
    # Tenants make training pods: their series keep Kubernetes' namespace and pod, and `job`
    # is the JobSet controller's pod label (a TrainJob's name), not what the process claims
    # (dropped).
    assert "honorLabels" not in training["podMetricsEndpoints"][0]
    assert training["jobLabel"] == "jobset.sigs.k8s.io/jobset-name"
    assert training["podMetricsEndpoints"][0]["metricRelabelings"] == [
        {"action": "labeldrop", "regex": "exported_job"}
    ]
    assert training["namespaceSelector"] == {"any": True}
    # DCGM (the GPU operator's, platform-owned) is the only monitor honouring labels.
    honouring = [
        r.name
        for r in [*plan.by_type(SERVICE_MONITOR), *plan.by_type(POD_MONITOR)]
        for e in [
            *r.inputs["spec"].get("endpoints", []),
            *r.inputs["spec"].get("podMetricsEndpoints", []),
        ]
        if e.get("honorLabels")
    ]
    assert honouring == ["monitoring-servicemonitor-dcgm-exporter"]
    vllm = plan.one(SERVICE_MONITOR, "monitoring-servicemonitor-vllm").inputs["spec"]
    assert vllm["selector"]["matchLabels"] == {"llm-platform/scrape": "true"}
    assert vllm["endpoints"][0]["port"] == "metrics"


def test_prometheus_rules_come_from_monitoring_rules_with_the_stack_thresholds(
    plans, synth
) -> None:
    plan = plans("pretrain")
    watch = load_config(raw_stack("pretrain")).monitoring.stragglers
    assert watch.enabled  # its rules come with the watcher
    expected = rules.prometheus_rules(
        AlertThresholds(), "monitoring", fsx_capacity_gib=48000, stragglers=watch
    )
    for rule in expected:
        inputs = plan.one(PROMETHEUS_RULE, f"monitoring-prometheusrule-{rule.metadata.name}")
        assert inputs.inputs["spec"] == rule.dump()["spec"]
    assert len(plan.by_type(PROMETHEUS_RULE)) == len(expected)
    custom = _monitoring(synth, {"alerts": {"gpu_temp_critical_c": 90}})
    gpu = custom.one(PROMETHEUS_RULE, "monitoring-prometheusrule-llmp-gpu").inputs["spec"]
    assert "DCGM_FI_DEV_GPU_TEMP > 90" in json.dumps(gpu)


@pytest.mark.parametrize("stack", STACKS)
def test_storage_rules_only_with_a_file_system_and_its_capacity(plans, stack: str) -> None:
    plan = plans(stack)
    names = {r.inputs["metadata"]["name"] for r in plan.by_type(PROMETHEUS_RULE)}
    capacity = _lustre_capacity(stack)
    if capacity is None:
        # No file system, no exporter: FsxMetricsMissing would fire for ever.
        assert "llmp-storage" not in names
        return
    spec = plan.one(PROMETHEUS_RULE, "monitoring-prometheusrule-llmp-storage").inputs["spec"]
    (group,) = spec["groups"]
    full = {r["alert"]: r for r in group["rules"]}["FsxFileSystemAlmostFull"]
    free = rules.fsx_free_bytes_threshold(AlertThresholds(), capacity)
    assert full["expr"] == f"{rules.FSX_FREE_BYTES} < {free}"
    assert free == round(0.2 * capacity * 1024**3)


def test_fsx_metrics_exporter_reads_this_file_system_through_its_own_role(plans) -> None:
    plan = plans("pretrain")
    release = _releases(plan)[CLOUDWATCH_EXPORTER]
    inputs = release.inputs
    values = inputs["values"]
    assert values == json.loads(json.dumps(cloudwatch_exporter_values("us-east-1", "lustre-fs-id")))
    # No aws.* values: no AWS variables in the pod, so Pod Identity's credentials are used.
    assert "aws" not in values
    assert values["serviceAccount"] == {
        "create": True,
        "name": CLOUDWATCH_EXPORTER_SERVICE_ACCOUNT,
    }
    assert values["serviceMonitor"]["enabled"] is True
    config = yaml.safe_load(values["config"])
    assert config["region"] == "us-east-1"
    assert config["set_timestamp"] is False
    metrics = {m["aws_metric_name"]: m for m in config["metrics"]}
    assert set(metrics) == {"FreeDataStorageCapacity", "AgeOfOldestQueuedMessage"}
    for metric in metrics.values():
        assert metric["aws_namespace"] == "AWS/FSx"
        assert metric["aws_dimension_select"]["FileSystemId"] == ["lustre-fs-id"]
        # Every dimension listed and selected: no ListMetrics calls, nothing else matched.
        assert set(metric["aws_dimension_select"]) == set(metric["aws_dimensions"])
    assert metrics["FreeDataStorageCapacity"]["aws_statistics"] == ["Minimum"]
    assert metrics["AgeOfOldestQueuedMessage"]["aws_dimension_select"]["Publisher"] == [
        "AutoExport"
    ]
    policy = json.loads(plan.one(ROLE_POLICY, "monitoring-cloudwatch-exporter").inputs["policy"])
    (statement,) = policy["Statement"]
    assert sorted(statement["Action"]) == [
        "cloudwatch:GetMetricData",
        "cloudwatch:GetMetricStatistics",
        "cloudwatch:ListMetrics",
    ]
    assert statement["Resource"] == "*"
    association = plan.one(ASSOCIATION, "monitoring-cloudwatch-exporter")
    assert association.inputs["namespace"] == "monitoring"
    assert association.inputs["serviceAccount"] == CLOUDWATCH_EXPORTER_SERVICE_ACCOUNT
    deps = set(release.dependencies)
    assert association.urn in deps
    # its chart's ServiceMonitor needs the CRDs
    assert plan.one(CONFIG_FILE, "monitoring-crds").urn in deps
    # the FSx rules arrive with their exporter, not while the file system is being created
    storage_rule = plan.one(PROMETHEUS_RULE, "monitoring-prometheusrule-llmp-storage")
    assert release.urn in storage_rule.dependencies
    gpu_rule = plan.one(PROMETHEUS_RULE, "monitoring-prometheusrule-llmp-gpu")
    assert release.urn not in gpu_rule.dependencies
    assert not [r for r in plans("inference").by_type(ROLE) if "cloudwatch" in r.name]


def test_the_exporter_config_cannot_hold_a_template() -> None:
    # The chart renders `config` through tpl.
    with pytest.raises(ValueError, match="template"):
        cloudwatch_exporter_values("us-east-1", "fs-{{ .Release.Name }}")


def test_logs_go_to_a_pulumi_log_group_through_a_scoped_role(plans) -> None:
    plan = plans("pretrain")
    group = plan.one(LOG_GROUP, "monitoring-logs").inputs
    assert group["name"] == log_group_name("pretrain") == "/llm-platform/pretrain/containers"
    assert group["retentionInDays"] == 30
    policy = json.loads(plan.one(ROLE_POLICY, "monitoring-fluent-bit").inputs["policy"])
    (statement,) = policy["Statement"]
    assert sorted(statement["Action"]) == [
        "logs:CreateLogStream",
        "logs:DescribeLogStreams",
        "logs:PutLogEvents",
    ]
    arn = statement["Resource"][0]
    assert arn.endswith(":loggroup/monitoring-logs")
    assert statement["Resource"] == [arn, f"{arn}:log-stream:*"]
    association = plan.one(ASSOCIATION, "monitoring-fluent-bit").inputs
    assert association["namespace"] == "monitoring"
    assert association["serviceAccount"] == FLUENT_BIT_SERVICE_ACCOUNT
    release = _releases(plan)["aws-for-fluent-bit"]
    values = release.inputs["values"]
    assert values["cloudWatchLogs"]["logGroupName"] == group["name"]
    assert values["cloudWatchLogs"]["autoCreateGroup"] is False
    assert values["serviceAccount"]["name"] == FLUENT_BIT_SERVICE_ACCOUNT
    assert plan.one(ASSOCIATION, "monitoring-fluent-bit").urn in release.dependencies


def test_log_retention_follows_config_and_logs_can_be_off(synth) -> None:
    plan = _monitoring(synth, {"log_retention_days": 90})
    assert plan.one(LOG_GROUP, "monitoring-logs").inputs["retentionInDays"] == 90
    off = _monitoring(synth, {"logs": False})
    assert not [r for r in off.resources if r.type == LOG_GROUP and "monitoring" in r.name]
    assert "aws-for-fluent-bit" not in _releases(off)
    assert off.outputs["monitoring"].get("log_group") is None  # None outputs are dropped


def test_traces_go_to_xray_through_their_own_role(plans) -> None:
    plan = plans("pretrain")
    values = _releases(plan)["opentelemetry-collector"].inputs["values"]
    assert values["mode"] == "deployment"
    assert values["image"]["repository"] == "otel/opentelemetry-collector-contrib"
    assert values["serviceAccount"]["name"] == OTEL_SERVICE_ACCOUNT
    config = values["config"]
    assert config["exporters"] == {"awsxray": {"region": "us-east-1"}}
    assert config["service"]["pipelines"]["traces"]["exporters"] == ["awsxray"]
    policy = json.loads(plan.one(ROLE_POLICY, "monitoring-otel").inputs["policy"])
    (statement,) = policy["Statement"]
    assert statement["Action"] == ["xray:PutTraceSegments", "xray:PutTelemetryRecords"]
    assert statement["Resource"] == "*"
    association = plan.one(ASSOCIATION, "monitoring-otel").inputs
    assert association["serviceAccount"] == OTEL_SERVICE_ACCOUNT


def test_traces_to_otlp_need_no_aws_role_and_can_be_off(synth) -> None:
    endpoint = "https://otlp.example.com:4317"
    plan = _monitoring(synth, {"traces_exporter": "otlp", "otlp_endpoint": endpoint})
    config = _releases(plan)["opentelemetry-collector"].inputs["values"]["config"]
    assert config["exporters"] == {"otlp": {"endpoint": endpoint}}
    assert not [r for r in plan.by_type(ROLE) if r.name == "monitoring-otel"]
    off = _monitoring(synth, {"traces": False})
    assert "opentelemetry-collector" not in _releases(off)


def test_monitoring_off_creates_nothing(synth) -> None:
    plan = _monitoring(synth, {"enabled": False})
    assert _ours(plan) == []
    assert "monitoring" not in plan.outputs
