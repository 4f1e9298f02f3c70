"""The monitoring stack's charts as values: what kube-prometheus-stack, Fluent Bit, the
OpenTelemetry collector and the CloudWatch exporter are installed with, and the monitors
that tell Prometheus what to scrape. Plain data: `components.monitoring` installs them."""

from __future__ import annotations

from typing import Any

import yaml

from monitoring.models import (
    Endpoint,
    LabelSelector,
    Metadata,
    Monitor,
    MonitorSpec,
    NamespaceSelector,
    Relabeling,
)
from spec.catalog import MonitoringPins, catalog
from spec.labels import JOB_KIND_LABEL, PART_OF, SCRAPE_LABEL, TRAINING_JOB_LABEL

NAMESPACE = "monitoring"
"""Where the monitoring stack runs."""
STRAGGLER_WATCH = "llmp-straggler-watch"
"""The straggler watcher's name (components/straggler_watch.py): its pods' `app.kubernetes.io/
name`, which its PodMonitor makes the `job` of its series (in `monitoring`)."""
RAY_NODE_LABEL = "ray.io/is-ray-node"
"""The label KubeRay sets (value `yes`) on every pod of a RayCluster, head and workers."""
STORAGE_CLASS = "gp3"
"""The StorageClass Prometheus's volume is claimed from (the component makes it)."""
KPS = "kube-prometheus-stack"
FLUENT_BIT = "aws-for-fluent-bit"
OTEL = "opentelemetry-collector"
CLOUDWATCH_EXPORTER = "prometheus-cloudwatch-exporter"
CLOUDWATCH_EXPORTER_SERVICE_ACCOUNT = "prometheus-cloudwatch-exporter"
CLOUDWATCH_SCRAPE_MINUTES = 2
"""How often Prometheus scrapes the exporter, which calls CloudWatch on every scrape (and is
billed per call): FSx publishes every minute, the alerts wait 5 minutes."""
FSX_CLOUDWATCH_METRICS: list[dict[str, Any]] = [
    # Free bytes: the lowest of the period is the one that fills the disk.
    {
        "aws_metric_name": "FreeDataStorageCapacity",
        "aws_dimensions": ["FileSystemId"],
        "aws_statistics": ["Minimum"],
    },
    # Auto-export queue age (Publisher=AutoExport): how far S3 lags the checkpoints.
    {
        "aws_metric_name": "AgeOfOldestQueuedMessage",
        "aws_dimensions": ["FileSystemId", "Publisher"],
        "aws_dimension_select": {"Publisher": ["AutoExport"]},
        "aws_statistics": ["Maximum"],
    },
]
"""AWS/FSx metrics the exporter reads. Every dimension is selected, so the exporter makes one
GetMetricStatistics call per metric per scrape and no ListMetrics call (its README)."""
FLUENT_BIT_SERVICE_ACCOUNT = "aws-for-fluent-bit"
OTEL_SERVICE_ACCOUNT = "opentelemetry-collector"

NODE_EXPORTER_ARGS = [
    # The pinned chart's defaults (replaced, not merged, when extraArgs is set; they follow
    # the chart: tests/monitoring/test_charts.py) ...
    "--collector.filesystem.mount-points-exclude="
    "^/(dev|proc|sys|run/containerd/.+|var/lib/docker/.+|var/lib/kubelet/.+)($|/)",
    "--collector.filesystem.fs-types-exclude="
    "^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|devtmpfs|fusectl|hugetlbfs|"
    "iso9660|mqueue|nsfs|overlay|proc|procfs|pstore|rpc_pipefs|securityfs|selinuxfs|squashfs|"
    "sysfs|tracefs|erofs)$",
    # ... and the ENA driver's allowance counters (bw_in/out, pps, conntrack exceeded).
    "--collector.ethtool",
]


def pins() -> MonitoringPins:
    pinned = catalog().monitoring
    if pinned is None:
        raise ValueError("catalog.yaml has no `monitoring` section: pin its charts first")
    return pinned


def cloudwatch_exporter_config(region: str, file_system_id: str) -> dict[str, Any]:
    """The exporter's config for one file system (prometheus/cloudwatch_exporter v0.16.0)."""
    metrics = [
        {
            "aws_namespace": "AWS/FSx",
            "aws_metric_name": spec["aws_metric_name"],
            # Exactly the metric's dimensions, each selected: no ListMetrics calls.
            "aws_dimensions": list(spec["aws_dimensions"]),
            "aws_dimension_select": {
                "FileSystemId": [file_system_id],
                **spec.get("aws_dimension_select", {}),
            },
            "aws_statistics": list(spec["aws_statistics"]),
        }
        for spec in FSX_CLOUDWATCH_METRICS
    ]
    return {
        "region": region,
        "period_seconds": 60,
        "range_seconds": 600,
        "delay_seconds": 300,
        # With CloudWatch's own (minutes old) timestamps an instant query at "now" sees no
        # sample, and the alerts would read silence: stamp samples at scrape time instead.
        "set_timestamp": False,
        "metrics": metrics,
    }


def cloudwatch_exporter_values(region: str, file_system_id: str) -> dict[str, Any]:
    config = yaml.safe_dump(cloudwatch_exporter_config(region, file_system_id), sort_keys=False)
    # The chart renders `config` through tpl: template braces would be evaluated.
    if "{{" in config:
        raise ValueError(f"cloudwatch exporter config holds a template: {config!r}")
    return {
        # No aws.* values: the chart then sets no AWS variables and the SDK's default
        # chain reads the Pod Identity credentials.
        "serviceAccount": {"create": True, "name": CLOUDWATCH_EXPORTER_SERVICE_ACCOUNT},
        # The exporter never calls the Kubernetes API.
        "rbac": {"create": False},
        "serviceMonitor": {
            "enabled": True,
            "interval": f"{CLOUDWATCH_SCRAPE_MINUTES}m",
            "timeout": "60s",
        },
        "config": config,
        "resources": {"requests": {"cpu": "50m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
        "containerSecurityContext": {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def grafana_values(enabled: bool, admin_secret: str | None) -> dict[str, Any]:
    if not enabled:
        return {"enabled": False}
    values: dict[str, Any] = {
        "enabled": True,
        "sidecar": {
            "dashboards": {
                "enabled": True,
                "label": "grafana_dashboard",
                "labelValue": "1",
                "searchNamespace": NAMESPACE,
            }
        },
    }
    if admin_secret:
        values["admin"] = {
            "existingSecret": admin_secret,
            "userKey": "admin-user",
            "passwordKey": "admin-password",
        }
    else:
        # No password configured: nobody signs in with the one the chart generates.
        values["grafana.ini"] = {
            "auth": {"disable_login_form": True},
            "auth.basic": {"enabled": False},
            "auth.anonymous": {"enabled": False},
        }
    return values


def alertmanager_values(
    config: Any, secrets: list[str], service_account: str = "alertmanager"
) -> dict[str, Any]:
    """Alertmanager with our configuration (monitoring/alertmanager.py), the receivers'
    Secret mounted under /etc/alertmanager/secrets/, and a service account of a fixed name
    (its Pod Identity role publishes to SNS)."""
    spec: dict[str, Any] = {"secrets": list(secrets)} if secrets else {}
    return {
        "enabled": True,
        "config": config,
        "serviceAccount": {"create": True, "name": service_account},
        "alertmanagerSpec": spec,
    }


def kube_prometheus_stack_values(
    *,
    retention: str,
    storage_gib: int,
    grafana: bool,
    admin_secret: str | None = None,
    alertmanager: dict[str, Any] | None = None,
) -> dict[str, Any]:
    claim = {
        "spec": {
            "storageClassName": STORAGE_CLASS,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": f"{storage_gib}Gi"}},
        }
    }
    values: dict[str, Any] = {
        "crds": {"enabled": False},
        "prometheus": {
            "prometheusSpec": {
                "retention": retention,
                "storageSpec": {"volumeClaimTemplate": claim},
                # Select every monitor and rule, not only those labelled with the release.
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "podMonitorSelectorNilUsesHelmValues": False,
                "ruleSelectorNilUsesHelmValues": False,
            }
        },
        "grafana": grafana_values(grafana, admin_secret),
        "kube-state-metrics": {
            # Pod job-kind for the GPU-idle alert; node pool for the per-pool panels.
            "metricLabelsAllowlist": [f"pods=[{JOB_KIND_LABEL}]", "nodes=[llm-platform/pool]"]
        },
        "prometheus-node-exporter": {
            "extraArgs": list(NODE_EXPORTER_ARGS),
            "tolerations": catalog().accelerator_tolerations(),
        },
    }
    if alertmanager is not None:
        values["alertmanager"] = alertmanager
    return values


def fluent_bit_values(region: str, log_group: str) -> dict[str, Any]:
    return {
        "serviceAccount": {"create": True, "name": FLUENT_BIT_SERVICE_ACCOUNT},
        "cloudWatchLogs": {
            "enabled": True,
            "region": region,
            "logGroupName": log_group,
            # The group is Pulumi's (retention); the role may not create groups.
            "autoCreateGroup": False,
        },
        "cloudWatch": {"enabled": False},
        "firehose": {"enabled": False},
        "kinesis": {"enabled": False},
        "elasticsearch": {"enabled": False},
        "tolerations": catalog().accelerator_tolerations(),
    }


def otel_collector_config(otlp_endpoint: str | None, region: str) -> dict[str, Any]:
    """Traces to X-Ray in `region`, or to `otlp_endpoint` when one is given."""
    if otlp_endpoint is None:
        exporter: dict[str, Any] = {"awsxray": {"region": region}}
    else:
        exporter = {"otlp": {"endpoint": otlp_endpoint}}
    return {
        "receivers": {
            "otlp": {
                "protocols": {
                    "grpc": {"endpoint": "${env:MY_POD_IP}:4317"},
                    "http": {"endpoint": "${env:MY_POD_IP}:4318"},
                }
            }
        },
        "processors": {"batch": {}, "memory_limiter": {"check_interval": "5s"}},
        "exporters": exporter,
        "service": {
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["memory_limiter", "batch"],
                    "exporters": list(exporter),
                },
            }
        },
    }


def otel_values(otlp_endpoint: str | None, region: str) -> dict[str, Any]:
    return {
        "mode": "deployment",
        "replicaCount": 2,
        "image": {"repository": pins().otel_collector_image},
        "serviceAccount": {"create": True, "name": OTEL_SERVICE_ACCOUNT},
        "config": otel_collector_config(otlp_endpoint, region),
    }


def monitors(namespace: str) -> list[Monitor]:
    """DCGM exporter, training pods, Ray pods and vLLM servers (monitoring/models.py)."""
    labels = dict(PART_OF)
    return [
        Monitor(
            kind="ServiceMonitor",
            metadata=Metadata(name="dcgm-exporter", namespace=namespace, labels=labels),
            spec=MonitorSpec(
                selector=LabelSelector(match_labels={"app": "nvidia-dcgm-exporter"}),
                namespace_selector=NamespaceSelector(match_names=["gpu-operator"]),
                # `node` from dcgm-exporter's Hostname (the node's name): Alertmanager's
                # node-down inhibition matches on `node`.
                endpoints=[
                    Endpoint(
                        port="gpu-metrics",
                        # The one monitor that keeps the exposition's labels: the exporter is
                        # the GPU operator's (namespace gpu-operator, platform-owned: no tenant
                        # makes pods there), and its series carry the namespace and pod of the
                        # pod *using* each GPU (kubelet's pod-resources API), which must win
                        # over the exporter's own. Tenant-reachable monitors never set it
                        # (policy rule `k8s-monitor-honor-labels`).
                        honor_labels=True,
                        metric_relabelings=[
                            Relabeling(
                                source_labels=["Hostname"],
                                target_label="node",
                                regex="(.+)",
                                replacement="$1",
                                action="replace",
                            )
                        ],
                    )
                ],
            ),
        ),
        Monitor(
            kind="PodMonitor",
            metadata=Metadata(name="training", namespace=namespace, labels=labels),
            spec=MonitorSpec(
                # Tenants make these pods: no honorLabels, so `namespace` and `pod` are
                # Kubernetes' (service discovery) and a pod cannot publish series claiming
                # another namespace. The job's name comes from the pod's own label, which
                # the JobSet controller sets (TRAINING_JOB_LABEL), not from what the
                # process says: it can only name a job in the pod's own namespace, so
                # everything that reads these series matches on (namespace, job).
                job_label=TRAINING_JOB_LABEL,
                selector=LabelSelector(match_labels={JOB_KIND_LABEL: "training"}),
                namespace_selector=NamespaceSelector(any=True),
                pod_metrics_endpoints=[
                    Endpoint(
                        port="metrics",
                        # train.py's own `job` label, renamed by Prometheus for clashing
                        # with the target's: a claim nothing may read.
                        metric_relabelings=[
                            Relabeling(action="labeldrop", regex="exported_job", replacement=None)
                        ],
                    )
                ],
            ),
        ),
        Monitor(
            kind="PodMonitor",
            metadata=Metadata(name="ray", namespace=namespace, labels=labels),
            spec=MonitorSpec(
                # Every pod of a RayCluster (head and workers) carries this KubeRay label;
                # each serves its node's Ray metrics on the port the RayJob builder names
                # `metrics` (manifests/jobs/rayjob.py, 8080). Tenant namespaces admit the
                # scrape from `monitoring` (components/tenancy.py).
                selector=LabelSelector(match_labels={RAY_NODE_LABEL: "yes"}),
                namespace_selector=NamespaceSelector(any=True),
                pod_metrics_endpoints=[Endpoint(port="metrics")],
            ),
        ),
        Monitor(
            kind="ServiceMonitor",
            metadata=Metadata(name="vllm", namespace=namespace, labels=labels),
            spec=MonitorSpec(
                selector=LabelSelector(match_labels={SCRAPE_LABEL: "true"}),
                namespace_selector=NamespaceSelector(any=True),
                endpoints=[Endpoint(port="metrics")],
            ),
        ),
    ]
