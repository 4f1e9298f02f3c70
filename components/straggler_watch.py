"""StragglerWatch: the straggler watcher (workloads/diagnosis/watch.py) running in the cluster.

Owns, for a stack whose `monitoring.stragglers.enabled` is on (and monitoring is):

- a **ServiceAccount** `llmp-straggler-watch` in `monitoring`, its token mounted only when the
  watcher quarantines (it reads Prometheus over HTTP and needs no Kubernetes API otherwise);
- a **Deployment** of one replica (Recreate: two watchers would double each quarantine
  decision) running `python -m workloads.diagnosis.watch` from the trainer image (the
  analysis is the trainer image's own workloads/ package, so the watcher judges step times
  with the code of the release that wrote them), reading the stack's Prometheus (the
  kube-prometheus-stack Service in `monitoring`) and serving `/metrics` on port `metrics`;
  on the system pool, no root, a read-only root file system, every capability dropped;
- a **PodMonitor** scraping it without honorLabels: its series keep the target's `namespace`
  (`monitoring`) and `job` (`llmp-straggler-watch`, its pods' `app.kubernetes.io/name`), which
  the straggler rules select on, so no tenant pod can publish findings or health in its name;
  the job judged is in labels of the watcher's own (`training_namespace`, `training_job`),
  and a **NetworkPolicy** admitting only that scrape
  (from `monitoring`, to port `metrics`); its egress (Prometheus, and with `quarantine` the
  API server) is left open, as for the rest of `monitoring`;
- with `quarantine`: a **ClusterRole** limited to what a quarantine does (get, list and patch
  nodes; list pods; create pods/eviction) and its **ClusterRoleBinding**.

The alerts on its metrics (`LlmpSlowNode`, `LlmpStragglerWatchDown`,
`LlmpStragglerWatchFailing`) are monitoring/rules.py's `stragglers` group, deployed with the
other rules by `Monitoring`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.apps.v1 import (
    DeploymentInitArgs,
    DeploymentSpecArgs,
    DeploymentStrategyArgs,
)
from pulumi_kubernetes.core.v1 import (
    ContainerArgs,
    ContainerPortArgs,
    HTTPGetActionArgs,
    PodSpecArgs,
    PodTemplateSpecArgs,
    ProbeArgs,
    ResourceRequirementsArgs,
    ServiceAccountInitArgs,
)
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, ObjectMetaArgs
from pulumi_kubernetes.networking.v1 import (
    NetworkPolicyIngressRuleArgs,
    NetworkPolicyInitArgs,
    NetworkPolicyPeerArgs,
    NetworkPolicyPortArgs,
    NetworkPolicySpecArgs,
)
from pulumi_kubernetes.rbac.v1 import (
    ClusterRoleBindingInitArgs,
    ClusterRoleInitArgs,
    PolicyRuleArgs,
    RoleRefArgs,
    SubjectArgs,
)

from manifests.hardening import container_context, pod_context
from monitoring.charts import KPS, NAMESPACE, STRAGGLER_WATCH
from monitoring.models import Endpoint, LabelSelector, Metadata, Monitor, MonitorSpec
from monitoring.models import NamespaceSelector as MonitorNamespaces
from spec.labels import PART_OF, POOL_LABEL

NAME = STRAGGLER_WATCH
PORT = 9400
"""The watcher's /metrics port (workloads.diagnosis.watch.DEFAULT_PORT)."""
MODULE = "workloads.diagnosis.watch"
PROMETHEUS_URL = f"http://{KPS}-prometheus.{NAMESPACE}:9090"
"""The stack's Prometheus: kube-prometheus-stack's Service in `monitoring`."""
RUN_AS = 10400
"""A uid of its own, not the trainer's 1000: the image's code is root's and read-only to
anyone, and the watcher writes nothing."""
SELECTOR = {"app.kubernetes.io/name": NAME}
LABELS = {**PART_OF, **SELECTOR}
QUARANTINE_RULES = [
    PolicyRuleArgs(api_groups=[""], resources=["nodes"], verbs=["get", "list", "patch"]),
    PolicyRuleArgs(api_groups=[""], resources=["pods"], verbs=["list"]),
    PolicyRuleArgs(api_groups=[""], resources=["pods/eviction"], verbs=["create"]),
]
"""What workloads/diagnosis/isolation.py calls: list (and patch) nodes, list the pods on a
node, evict them; nothing else."""


@dataclass(frozen=True, kw_only=True)
class StragglerWatchArgs:
    image: pulumi.Input[str]
    """The trainer image, pinned by tag or digest (it holds workloads/diagnosis)."""
    prometheus_url: str = PROMETHEUS_URL
    interval_seconds: int = 60
    window: str = "6m"
    resolution: str = "15s"
    threshold: float = 0.05
    persist: float = 0.5
    quarantine: bool = False
    """Quarantine a node flagged `quarantine_after_runs` runs in a row (adds the ClusterRole)."""
    quarantine_after_runs: int = 3
    max_quarantined: int = 2
    namespace: pulumi.Input[str] = NAMESPACE
    wait_for: list[pulumi.Resource] = field(default_factory=list)
    """What its PodMonitor needs first: the Prometheus operator's CRDs."""


def command(args: StragglerWatchArgs) -> list[str]:
    """The container's command line: the watcher with the stack's settings."""
    line = [
        "python",
        "-m",
        MODULE,
        "--prometheus",
        args.prometheus_url,
        "--address",
        "0.0.0.0",  # the pod's own address: Prometheus scrapes it from outside the pod
        "--port",
        str(PORT),
        "--interval",
        str(args.interval_seconds),
        "--window",
        args.window,
        "--resolution",
        args.resolution,
        "--threshold",
        f"{args.threshold:g}",
        "--persist",
        f"{args.persist:g}",
    ]
    if args.quarantine:
        line += [
            "--quarantine",
            "--quarantine-after",
            str(args.quarantine_after_runs),
            "--max-quarantined",
            str(args.max_quarantined),
        ]
    return line


def deployment_args(args: StragglerWatchArgs) -> DeploymentInitArgs:
    probe = HTTPGetActionArgs(path="/metrics", port="metrics")
    container = ContainerArgs(
        name="watch",
        image=args.image,
        image_pull_policy="Always",
        command=command(args),
        ports=[ContainerPortArgs(name="metrics", container_port=PORT)],
        resources=ResourceRequirementsArgs(
            requests={"cpu": "100m", "memory": "256Mi"},
            limits={"cpu": "1", "memory": "1Gi"},
        ),
        readiness_probe=ProbeArgs(http_get=probe, period_seconds=15),
        liveness_probe=ProbeArgs(http_get=probe, period_seconds=30, failure_threshold=4),
        security_context=container_context(RUN_AS),
    )
    return DeploymentInitArgs(
        metadata=ObjectMetaArgs(name=NAME, namespace=args.namespace, labels=LABELS),
        spec=DeploymentSpecArgs(
            replicas=1,
            selector=LabelSelectorArgs(match_labels=SELECTOR),
            strategy=DeploymentStrategyArgs(type="Recreate"),
            revision_history_limit=5,
            template=PodTemplateSpecArgs(
                metadata=ObjectMetaArgs(labels=LABELS),
                spec=PodSpecArgs(
                    service_account_name=NAME,
                    automount_service_account_token=args.quarantine,
                    node_selector={POOL_LABEL: "system"},
                    security_context=pod_context(RUN_AS),
                    containers=[container],
                ),
            ),
        ),
    )


def pod_monitor(namespace: str = NAMESPACE) -> Monitor:
    return Monitor(
        kind="PodMonitor",
        metadata=Metadata(name=NAME, namespace=namespace, labels=dict(PART_OF)),
        spec=MonitorSpec(
            selector=LabelSelector(match_labels=SELECTOR),
            namespace_selector=MonitorNamespaces(match_names=[namespace]),
            # No honorLabels: the findings name the job they judge in labels of their own
            # (training_namespace, training_job), and `namespace`/`job` stay the target's.
            job_label="app.kubernetes.io/name",
            pod_metrics_endpoints=[Endpoint(port="metrics")],
        ),
    )


def network_policy_args(namespace: pulumi.Input[str]) -> NetworkPolicyInitArgs:
    return NetworkPolicyInitArgs(
        metadata=ObjectMetaArgs(name=NAME, namespace=namespace, labels=LABELS),
        spec=NetworkPolicySpecArgs(
            pod_selector=LabelSelectorArgs(match_labels=SELECTOR),
            policy_types=["Ingress"],
            ingress=[
                NetworkPolicyIngressRuleArgs(
                    from_=[
                        NetworkPolicyPeerArgs(
                            namespace_selector=LabelSelectorArgs(
                                match_labels={"kubernetes.io/metadata.name": NAMESPACE}
                            )
                        )
                    ],
                    ports=[NetworkPolicyPortArgs(port="metrics", protocol="TCP")],
                )
            ],
        ),
    )


def cluster_role_args() -> ClusterRoleInitArgs:
    return ClusterRoleInitArgs(
        metadata=ObjectMetaArgs(name=NAME, labels=LABELS), rules=QUARANTINE_RULES
    )


def cluster_role_binding_args(namespace: pulumi.Input[str]) -> ClusterRoleBindingInitArgs:
    return ClusterRoleBindingInitArgs(
        metadata=ObjectMetaArgs(name=NAME, labels=LABELS),
        role_ref=RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=NAME),
        subjects=[SubjectArgs(kind="ServiceAccount", name=NAME, namespace=namespace)],
    )


class StragglerWatch(pulumi.ComponentResource):
    deployment: k8s.apps.v1.Deployment

    def __init__(
        self, name: str, args: StragglerWatchArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("llmp:monitoring:StragglerWatch", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # No ordering among these: a pod whose ServiceAccount or binding is not there yet is
        # retried by its ReplicaSet, and a quarantine refused meanwhile is one counted error.
        k8s.core.v1.ServiceAccount(
            f"{name}-account",
            ServiceAccountInitArgs(
                metadata=ObjectMetaArgs(name=NAME, namespace=args.namespace, labels=LABELS),
                automount_service_account_token=args.quarantine,
            ),
            opts=child,
        )
        if args.quarantine:
            k8s.rbac.v1.ClusterRole(f"{name}-role", cluster_role_args(), opts=child)
            k8s.rbac.v1.ClusterRoleBinding(
                f"{name}-binding", cluster_role_binding_args(args.namespace), opts=child
            )
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment", deployment_args(args), opts=child
        )
        k8s.networking.v1.NetworkPolicy(
            f"{name}-scrape", network_policy_args(args.namespace), opts=child
        )
        manifest = pod_monitor().dump()
        k8s.apiextensions.CustomResource(
            f"{name}-podmonitor",
            api_version=manifest["apiVersion"],
            kind=manifest["kind"],
            metadata=ObjectMetaArgs(
                name=manifest["metadata"]["name"],
                namespace=args.namespace,
                labels=manifest["metadata"]["labels"],
            ),
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.wait_for),
        )
        self.register_outputs({"deployment": self.deployment.metadata.apply(lambda m: m.name)})
