"""Kubernetes workloads: GPU limits, pinned images, serving health, no privileged pods,
quotas on every namespace, no honoured scrape labels on tenants' pods.

Pod specs are found in every workload kind the platform runs: Pod, Deployment,
StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, JobSet, LeaderWorkerSet and
Kubeflow's PyTorchJob. A **serving** workload is one in namespace `serving`,
or one with a label whose value is `serving` (on the object or its pod
template).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pulumi_policy import (
    PolicyResource,
    ResourceValidationArgs,
    StackValidationArgs,
)

from policies.props import Report, depends_on, get, is_map, items, known, of_type, plain
from spec.labels import ACCELERATOR_LABEL
from spec.tenancy import RESERVED_NAMESPACES

ACCELERATOR_RESOURCES = ("nvidia.com/gpu", "aws.amazon.com/neuron", "aws.amazon.com/neuroncore")
GPU_TAINTS = ("nvidia.com/gpu", "aws.amazon.com/neuron")
GPU_NODE_LABELS = ("nvidia.com/gpu", "aws.amazon.com/neuron", ACCELERATOR_LABEL)
NAMESPACE = "kubernetes:core/v1:Namespace"
RESOURCE_QUOTA = "kubernetes:core/v1:ResourceQuota"
PDB_TYPES = (
    "kubernetes:policy/v1:PodDisruptionBudget",
    "kubernetes:policy/v1beta1:PodDisruptionBudget",
)
SERVING = "serving"
REPLICATED = ("Deployment", "StatefulSet", "ReplicaSet", "LeaderWorkerSet")
DEFAULT_ALLOWED_DAEMONSETS = [
    "kube-system/aws-node",
    "kube-system/kube-proxy",
    "kube-system/eks-pod-identity-agent",
    "kube-system/ebs-csi-node",
    "kube-system/fsx-csi-node",
    "kube-system/s3-csi-node",
    "kube-system/mountpoint-s3-csi-node",
    "kube-system/aws-efa-k8s-device-plugin",
    "kube-system/nvidia-device-plugin-daemonset",
    "kube-system/neuron-device-plugin-daemonset",
    "gpu-operator/nvidia-dcgm-exporter",
    "gpu-operator/nvidia-device-plugin-daemonset",
    "monitoring/node-exporter",
]


def kind_of(args_type: str, props: Any) -> str:
    kind = get(props, "kind")
    return kind if isinstance(kind, str) else args_type.rsplit(":", 1)[-1]


def pod_templates(kind: str, props: Any) -> list[tuple[dict[str, str], Mapping[str, Any]]]:
    """(pod labels, pod spec) of every pod template a workload declares."""
    spec = get(props, "spec")
    templates: list[Any] = []
    if kind == "Pod":
        return [(_labels(get(props, "metadata")), spec)] if is_map(spec) else []
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        templates = [get(spec, "template")]
    elif kind == "CronJob":
        templates = [get(spec, "jobTemplate", "spec", "template")]
    elif kind == "JobSet":
        templates = [
            get(job, "template", "spec", "template") for job in items(get(spec, "replicatedJobs"))
        ]
    elif kind == "LeaderWorkerSet":
        lws = get(spec, "leaderWorkerTemplate")
        templates = [get(lws, "leaderTemplate"), get(lws, "workerTemplate")]
    elif kind in ("PyTorchJob", "MPIJob", "TFJob"):
        replica_specs = get(spec, f"{kind[:-3].lower()}ReplicaSpecs") or get(
            spec, "pytorchReplicaSpecs"
        )
        if is_map(replica_specs):
            templates = [get(replica_specs[k], "template") for k in replica_specs]
    return [
        (_labels(get(t, "metadata")), get(t, "spec"))
        for t in templates
        if is_map(t) and is_map(get(t, "spec"))
    ]


def _labels(metadata: Any) -> dict[str, str]:
    labels = get(metadata, "labels")
    return {k: labels[k] for k in labels} if is_map(labels) else {}


def _containers(pod: Any, *, init: bool = True) -> list[Any]:
    keys = ("containers", "initContainers") if init else ("containers",)
    return [c for key in keys for c in items(get(pod, key)) if is_map(c)]


def _namespace(props: Any) -> str:
    return get(props, "metadata", "namespace") or "default"


def _workload(args: ResourceValidationArgs) -> tuple[str, list[tuple[dict[str, str], Any]]]:
    if not args.resource_type.startswith("kubernetes:"):
        return "", []
    kind = kind_of(args.resource_type, args.props)
    return kind, pod_templates(kind, args.props)


def _accelerators(container: Any, section: str) -> set[str]:
    values = get(container, "resources", section)
    return {r for r in ACCELERATOR_RESOURCES if is_map(values) and r in list(values)}


def _targets_gpu_nodes(pod: Any) -> bool:
    tolerations = items(get(pod, "tolerations"))
    if any(get(t, "key") in GPU_TAINTS for t in tolerations):
        return True
    selector = get(pod, "nodeSelector")
    return is_map(selector) and any(k in GPU_NODE_LABELS for k in selector)


def k8s_gpu_limits(args: ResourceValidationArgs, report: Report) -> None:
    """GPU containers declare accelerator limits (nvidia.com/gpu, aws.amazon.com/neuron);
    a pod that targets GPU nodes must ask for at least one accelerator."""
    kind, pods = _workload(args)
    for _, pod in pods:
        limited = False
        for container in _containers(pod):
            requested = _accelerators(container, "requests")
            limits = _accelerators(container, "limits")
            limited = limited or bool(limits)
            for resource in sorted(requested - limits):
                report(
                    f"container {get(container, 'name')} requests {resource} without a limit; "
                    "extended resources are set as limits"
                )
        if not limited and kind != "DaemonSet" and _targets_gpu_nodes(pod):
            report(
                "the pod targets GPU nodes (toleration or node selector) but no container "
                "has an nvidia.com/gpu or aws.amazon.com/neuron limit"
            )


def image_problem(image: Any) -> str | None:
    if not isinstance(image, str) or not image:
        return "no image"
    if "@sha256:" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"image {image} has no tag (means latest)"
    if last.rsplit(":", 1)[-1] == "latest":
        return f"image {image} uses the latest tag"
    return None


def k8s_image_pinned(args: ResourceValidationArgs, report: Report) -> None:
    """Container images are pinned by tag or digest, never `latest`."""
    _, pods = _workload(args)
    for _, pod in pods:
        for container in _containers(pod):
            problem = image_problem(get(container, "image"))
            if problem:
                report(f"container {get(container, 'name')}: {problem}; pin a version or digest")


def is_serving(props: Any, pod_labels: Mapping[str, str]) -> bool:
    if _namespace(props) == SERVING:
        return True
    labels = {**_labels(get(props, "metadata")), **pod_labels}
    return SERVING in labels.values()


def k8s_serving_probes(args: ResourceValidationArgs, report: Report) -> None:
    """Serving containers have readiness and liveness probes."""
    _, pods = _workload(args)
    for labels, pod in pods:
        if not is_serving(args.props, labels):
            continue
        for container in _containers(pod, init=False):
            missing = [p for p in ("readinessProbe", "livenessProbe") if get(container, p) is None]
            if missing:
                report(f"serving container {get(container, 'name')} lacks {', '.join(missing)}")


def _selects(selector: Any, labels: Mapping[str, str]) -> bool:
    if not is_map(selector):
        return False
    match = get(selector, "matchLabels") or {}
    if any(labels.get(k) != match[k] for k in match):
        return False
    for expression in items(get(selector, "matchExpressions")):
        key, op = get(expression, "key"), get(expression, "operator")
        values = set(items(get(expression, "values")))
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def k8s_serving_pdb(args: StackValidationArgs, report: Report) -> None:
    """Every replicated serving workload has a PodDisruptionBudget that selects its pods."""
    budgets = []
    for pdb in of_type(args.resources, *PDB_TYPES):
        props = known(lambda p=pdb: plain(p.props), None)
        if props is not None:
            budgets.append((_namespace(props), get(props, "spec", "selector")))
    for r in args.resources:
        if not r.resource_type.startswith("kubernetes:"):
            continue
        props = known(lambda r=r: plain(r.props), None)
        if props is None:
            continue
        kind = kind_of(r.resource_type, props)
        if kind not in REPLICATED:
            continue
        for labels, _ in pod_templates(kind, props):
            if not is_serving(props, labels):
                continue
            ns = _namespace(props)
            if not any(ns == b_ns and _selects(sel, labels) for b_ns, sel in budgets):
                report(
                    f"serving {kind} {get(props, 'metadata', 'name') or r.name} in {ns} has no "
                    "PodDisruptionBudget selecting its pods",
                    r.urn,
                )


def _allowed(args: ResourceValidationArgs) -> set[str]:
    configured = args.get_config().get("allowed-daemonsets")
    return set(DEFAULT_ALLOWED_DAEMONSETS if configured is None else configured)


def k8s_no_privileged(args: ResourceValidationArgs, report: Report) -> None:
    """No privileged containers or host namespaces, except allow-listed system DaemonSets."""
    kind, pods = _workload(args)
    if not pods:
        return
    name = get(args.props, "metadata", "name") or args.name
    if kind == "DaemonSet" and f"{_namespace(args.props)}/{name}" in _allowed(args):
        return
    for _, pod in pods:
        for flag in ("hostNetwork", "hostPID", "hostIPC"):
            if get(pod, flag) is True:
                report(f"{kind} {name} sets {flag}: not allowed outside system DaemonSets")
        for container in _containers(pod):
            if get(container, "securityContext", "privileged") is True:
                report(f"container {get(container, 'name')} of {kind} {name} is privileged")


def _uncovered(
    namespaces: list[PolicyResource], objects: list[PolicyResource]
) -> list[tuple[str, PolicyResource]]:
    """(name, Namespace) of each namespace that none of the namespaced `objects` lives in.

    An object names its namespace (none: `default`), or takes it from the Namespace (a
    dependency edge).
    """
    covered = {known(lambda o=o: _namespace(o.props), None) for o in objects}
    out = []
    for ns in namespaces:
        name = known(lambda ns=ns: get(ns.props, "metadata", "name"), None) or ns.name
        if name not in covered and not any(depends_on(o, ns) for o in objects):
            out.append((name, ns))
    return out


def k8s_namespace_quota(args: StackValidationArgs, report: Report) -> None:
    """Every namespace the stack creates has a ResourceQuota (no tenant takes every GPU)."""
    quotas = of_type(args.resources, RESOURCE_QUOTA)
    for name, ns in _uncovered(of_type(args.resources, NAMESPACE), quotas):
        report(f"namespace {name} has no ResourceQuota", ns.urn)


HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
HELM_CHART_V4 = "kubernetes:helm.sh/v4:Chart"
KUSTOMIZE_V2 = "kubernetes:kustomize/v2:Directory"
_FLOATING = {"", "latest", "main", "master", "head", "*"}


def _version_problem(version: Any) -> str | None:
    if not isinstance(version, str) or not version.strip():
        return "has no chart version (helm takes the newest)"
    if version.strip().lower() in _FLOATING or any(c in version for c in "^~*<>| "):
        return f"chart version {version!r} floats; pin an exact version"
    return None


def helm_chart_pinned(args: ResourceValidationArgs, report: Report) -> None:
    """Helm releases and charts name an exact chart version, and remote kustomizations a
    fixed `?ref=` tag (never a branch, `latest`, a range, or nothing)."""
    if args.resource_type in (HELM_RELEASE, HELM_CHART_V4):
        problem = _version_problem(get(args.props, "version"))
        if problem:
            report(f"{get(args.props, 'chart') or args.name} {problem}")
    elif args.resource_type == KUSTOMIZE_V2:
        directory = get(args.props, "directory")
        if not isinstance(directory, str) or "://" not in directory:
            return  # a local directory is pinned by this repository's commit
        ref = directory.partition("?ref=")[2].split("&", 1)[0]
        if ref.strip().lower() in _FLOATING:
            report(f"{directory} has no fixed ?ref= (a tag or commit); it follows a branch")


def _is_kueue(resource_type: str, kind: str) -> bool:
    """A Kueue object of `kind`, at any API version."""
    return resource_type.startswith("kubernetes:kueue.x-k8s.io/") and resource_type.endswith(
        f":{kind}"
    )


TENANT_LABEL = "llm-platform/tenant"


def kueue_local_queue_per_namespace(args: StackValidationArgs, report: Report) -> None:
    """Where Kueue runs (a ClusterQueue exists), every tenant namespace (label
    `llm-platform/tenant`) has a LocalQueue, so its jobs are queued and held to quota."""
    if not any(_is_kueue(r.resource_type, "ClusterQueue") for r in args.resources):
        return
    queues = [r for r in args.resources if _is_kueue(r.resource_type, "LocalQueue")]
    tenants = [
        ns
        for ns in of_type(args.resources, NAMESPACE)
        if TENANT_LABEL in known(lambda ns=ns: _labels(get(ns.props, "metadata")), {})
    ]
    for name, ns in _uncovered(tenants, queues):
        report(f"tenant namespace {name} has no Kueue LocalQueue", ns.urn)


INGRESS = "kubernetes:networking.k8s.io/v1:Ingress"
_ALB = "alb.ingress.kubernetes.io/"


def k8s_alb_ingress_https(args: ResourceValidationArgs, report: Report) -> None:
    """Ingresses on the AWS Load Balancer Controller listen on HTTPS only, with an ACM
    certificate, and an internet-facing one has a WAF web ACL (`wafv2-acl-arn`)."""
    if args.resource_type != INGRESS:
        return
    notes = get(args.props, "metadata", "annotations")
    notes = {k: notes[k] for k in notes} if is_map(notes) else {}
    alb = get(args.props, "spec", "ingressClassName") == "alb" or any(
        k.startswith(_ALB) for k in notes
    )
    if not alb:
        return
    name = get(args.props, "metadata", "name") or args.name
    raw = notes.get(f"{_ALB}listen-ports")
    try:
        ports = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        ports = None
    if not isinstance(ports, list) or not ports:
        report(f"ingress {name}: no listen-ports (the ALB defaults to HTTP:80); list HTTPS:443")
    else:
        plain_http = [p for p in ports if isinstance(p, dict) and "HTTP" in p]
        if plain_http and f"{_ALB}ssl-redirect" not in notes:
            report(f"ingress {name} listens on HTTP without ssl-redirect; serve HTTPS only")
    if not notes.get(f"{_ALB}certificate-arn"):
        report(f"ingress {name} has no certificate-arn: its HTTPS listener needs one")
    if notes.get(f"{_ALB}scheme") == "internet-facing" and not notes.get(f"{_ALB}wafv2-acl-arn"):
        report(f"ingress {name} is internet-facing without a WAF (wafv2-acl-arn)")


MONITORS = {
    "kubernetes:monitoring.coreos.com/v1:PodMonitor": "podMetricsEndpoints",
    "kubernetes:monitoring.coreos.com/v1:ServiceMonitor": "endpoints",
}
"""Prometheus-operator monitors by type, and where each lists its endpoints."""
DEFAULT_PLATFORM_NAMESPACES = sorted(
    (RESERVED_NAMESPACES - {"default", "kube-public", "kube-node-lease"})
    | {"kuberay-system", "lws-system", "keda"}
)
"""Namespaces only the platform makes pods in (no tenant may be named so)."""


def _platform_namespaces(args: ResourceValidationArgs) -> set[str]:
    configured = args.get_config().get("platform-namespaces")
    return set(DEFAULT_PLATFORM_NAMESPACES if configured is None else configured)


def k8s_monitor_honor_labels(args: ResourceValidationArgs, report: Report) -> None:
    """A PodMonitor or ServiceMonitor that sets honorLabels selects only platform namespaces
    (`platform-namespaces`): on a tenant's pods the exposition's labels would win over the
    namespace, pod and job Kubernetes gives them, and a pod could publish series in another
    namespace's, job's or node's name."""
    endpoints_key = MONITORS.get(args.resource_type)
    if endpoints_key is None:
        return
    spec = get(args.props, "spec")
    if not any(get(e, "honorLabels") is True for e in items(get(spec, endpoints_key))):
        return
    kind = args.resource_type.rsplit(":", 1)[-1]
    name = get(args.props, "metadata", "name") or args.name
    selector = get(spec, "namespaceSelector")
    platform = _platform_namespaces(args)
    if get(selector, "any") is True:
        where = "every namespace"
    else:
        # No matchNames: the monitor's own namespace (prometheus-operator's default).
        selected = [n for n in items(get(selector, "matchNames")) if isinstance(n, str)]
        outside = sorted(set(selected or [_namespace(args.props)]) - platform)
        if not outside:
            return
        where = ", ".join(outside)
    report(
        f"{kind} {name} honours the scraped labels of pods in {where}: a tenant's pod could "
        "publish series in another's name; drop honorLabels or select only platform "
        "namespaces"
    )
