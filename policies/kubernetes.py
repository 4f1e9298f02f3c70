"""Kubernetes workloads: GPU limits, pinned images, serving health, no privileged pods or
hostPath volumes, quotas on every namespace, no honoured scrape labels on tenants' pods;
and what a tenant namespace may declare: egress, exposed Services, the volumes it binds,
and the serving namespace's ports.

Pod specs are found in every workload kind the platform runs: Pod, Deployment,
StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, JobSet, LeaderWorkerSet, Kubeflow's
PyTorchJob, and Kubeflow Trainer v2's runtimes (their JobSet template; a runtime's container
may leave the image to the TrainJob) and TrainJob (the pod its trainer fields and runtime
patches make: the image, resources per node, security contexts, volumes, tolerations, node
selector). A **serving** workload is one in namespace `serving`,
or one with a label whose value is `serving` (on the object or its pod
template). A **tenant namespace** is a Namespace the stack creates with the label
`llm-platform/tenant`; an object is in it when it names it, or (its namespace not known yet
in a preview) when it depends on that Namespace.
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

from policies.props import (
    UNKNOWN,
    Report,
    depends_on,
    deps_of_type,
    get,
    is_map,
    items,
    known,
    of_type,
    plain,
    wide_prefix,
)
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
    elif kind in RUNTIME_KINDS:
        templates = [
            get(job, "template", "spec", "template")
            for job in items(get(spec, "template", "spec", "replicatedJobs"))
        ]
    elif kind == "TrainJob":
        return _train_job_pods(spec)
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


RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")


def _train_job_pods(spec: Any) -> list[tuple[dict[str, str], Mapping[str, Any]]]:
    """The pod of a TrainJob's trainer node as far as the TrainJob sets it: the container
    `node` from `trainer` (image, resourcesPerNode) and every runtime patch's pod fields."""
    trainer = get(spec, "trainer")
    node: dict[str, Any] = {"name": "node", "image": get(trainer, "image")}
    if is_map(get(trainer, "resourcesPerNode")):
        node["resources"] = get(trainer, "resourcesPerNode")
    pod: dict[str, Any] = {}
    labels: dict[str, str] = {}
    containers: list[Any] = []
    for patch in items(get(spec, "runtimePatches")):
        path = ("trainingRuntimeSpec", "template", "spec", "replicatedJobs")
        for job in items(get(patch, *path)):
            template = get(job, "template", "spec", "template")
            labels.update(_labels(get(template, "metadata")))
            patched = get(template, "spec")
            if not is_map(patched):
                continue
            for key in patched:
                if key == "containers":
                    containers += [c for c in items(patched[key]) if is_map(c)]
                elif key == "initContainers":
                    pod["initContainers"] = list(items(patched[key]))
                else:
                    pod[key] = patched[key]
    for patch in containers:
        if get(patch, "name") == "node" and get(patch, "securityContext") is not None:
            node["securityContext"] = get(patch, "securityContext")
    others = [c for c in containers if get(c, "name") != "node"]
    pod["containers"] = [node, *others]
    return [(labels, pod)]


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
    kind, pods = _workload(args)
    for _, pod in pods:
        for container in _containers(pod):
            if kind in RUNTIME_KINDS and get(container, "image") is None:
                continue  # a Trainer runtime leaves the image to the TrainJob, checked there
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


# ---------------------------------------------------------------------------
# Tenancy: what a tenant namespace (label `llm-platform/tenant`) may declare
# ---------------------------------------------------------------------------

NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
SERVICE = "kubernetes:core/v1:Service"
PERSISTENT_VOLUME = "kubernetes:core/v1:PersistentVolume"
PERSISTENT_VOLUME_CLAIM = "kubernetes:core/v1:PersistentVolumeClaim"
LUSTRE_FILE_SYSTEM = "aws:fsx/lustreFileSystem:LustreFileSystem"
LUSTRE_DRIVER = "fsx.csi.aws.com"
"""The FSx for Lustre CSI driver (manifests.volumes.LUSTRE_DRIVER)."""
TENANTS_DIR = "tenants"
"""A tenant's directory on a shared file system is `/tenants/<name>` (components.lustre)."""
METADATA_NAME = "kubernetes.io/metadata.name"
"""The label Kubernetes puts on every namespace: its name."""
DNS_PORT = 53
EXPOSED_SERVICE_TYPES = ("LoadBalancer", "NodePort")


def _tenants(resources: list[PolicyResource]) -> dict[str, PolicyResource]:
    """The tenant namespaces the stack creates (label `llm-platform/tenant`), by name."""
    out = {}
    for ns in of_type(resources, NAMESPACE):
        if TENANT_LABEL in known(lambda ns=ns: _labels(get(ns.props, "metadata")), {}):
            out[known(lambda ns=ns: get(ns.props, "metadata", "name"), None) or ns.name] = ns
    return out


def _tenant_of(r: PolicyResource, tenants: Mapping[str, PolicyResource]) -> str | None:
    """The tenant namespace `r` lives in: the one it names or, when its namespace is not
    known yet, the tenant Namespace it takes it from (a dependency edge)."""
    ns = known(lambda: get(r.props, "metadata", "namespace"))
    if ns is not UNKNOWN:
        return ns if isinstance(ns, str) and ns in tenants else None
    return next((name for name, t in tenants.items() if depends_on(r, t)), None)


def _name(r: PolicyResource, props: Any) -> str:
    name = get(props, "metadata", "name")
    return name if isinstance(name, str) else r.name


def _ports(ports: list[Any]) -> str:
    """A NetworkPolicy rule's ports as `port 443/TCP`, `ports 53/UDP, 53/TCP`, `every port`."""
    if not ports:
        return "every port"
    shown = []
    for p in ports:
        protocol, port, end = get(p, "protocol") or "TCP", get(p, "port"), get(p, "endPort")
        span = port if end is None else f"{port}-{end}"
        shown.append(f"every {protocol} port" if port is None else f"{span}/{protocol}")
    if len(shown) == 1 and get(ports[0], "port") is None:
        return shown[0]
    return ("port " if len(shown) == 1 else "ports ") + ", ".join(shown)


def _egress_problems(rule: Any) -> list[str]:
    ports = items(get(rule, "ports"))
    to = items(get(rule, "to"))
    if not to:
        if ports and all(get(p, "port") == DNS_PORT for p in ports):
            return [
                f"allows {_ports(ports)} to every address (DNS to any resolver is a way out); "
                "name kube-dns in `to` (namespace kube-system, pods k8s-app: kube-dns)"
            ]
        return [
            f"has no `to`: it allows {_ports(ports)} to every address; name the destinations "
            "(pods, namespaces, or ipBlocks of /8 or longer)"
        ]
    out = []
    for peer in to:
        cidr = get(peer, "ipBlock", "cidr")
        prefix = wide_prefix(cidr)
        if prefix is not None:
            out.append(
                f"allows {_ports(ports)} to ipBlock {cidr} (a /{prefix}, `except` or not); "
                "list only the ranges it needs (IPv4 /8 or longer, IPv6 /32 or longer)"
            )
    return out


def k8s_tenant_egress(args: StackValidationArgs, report: Report) -> None:
    """No NetworkPolicy in a tenant namespace allows egress to 0.0.0.0/0, ::/0 or any ipBlock
    wider than an IPv4 /8 or an IPv6 /32 (whatever its `except`), nor has an egress rule
    without `to` (every address; DNS names kube-dns): a tenant's pods reach S3's ranges and
    the cluster, not the internet."""
    tenants = _tenants(args.resources)
    for policy in of_type(args.resources, NETWORK_POLICY):
        ns = _tenant_of(policy, tenants)
        egress = known(lambda p=policy: plain(get(p.props, "spec", "egress")), None) if ns else None
        if egress is None:
            continue
        name = known(lambda p=policy: _name(p, p.props), policy.name)
        for n, rule in enumerate(items(egress), 1):
            for problem in _egress_problems(rule):
                report(
                    f"NetworkPolicy {name} in tenant namespace {ns}: egress rule {n} {problem}",
                    policy.urn,
                )


def _selector(value: Any) -> dict[str, Any]:
    """A label selector without its empty parts (absent and `{}` both select every pod)."""
    selector = plain(value) if is_map(value) else {}
    return {k: v for k, v in selector.items() if v}


def _shown(selector: dict[str, Any]) -> str:
    """A selector as `key=value, key In (a, b)`."""
    match = selector.get("matchLabels") or {}
    terms = [f"{k}={match[k]}" for k in sorted(match)]
    for e in selector.get("matchExpressions") or []:
        values = ", ".join(str(v) for v in e.get("values") or [])
        terms.append(f"{e.get('key')} {e.get('operator')}" + (f" ({values})" if values else ""))
    return ", ".join(terms)


def _only_namespace(selector: Any, namespace: str) -> bool:
    """Whether a namespaceSelector admits no namespace but `namespace` (by its name label)."""
    if get(selector, "matchLabels", METADATA_NAME) == namespace:
        return True
    return any(
        get(e, "key") == METADATA_NAME
        and get(e, "operator") == "In"
        and items(get(e, "values")) == [namespace]
        for e in items(get(selector, "matchExpressions"))
    )


def _from_outside(peer: Any, namespace: str) -> str | None:
    """What of outside `namespace` an ingress peer admits (None: only the namespace's pods)."""
    cidr = get(peer, "ipBlock", "cidr")
    if cidr is not None:
        return f"ipBlock {cidr}"
    selector = get(peer, "namespaceSelector")
    if selector is None or _only_namespace(selector, namespace):
        return None
    if not _selector(selector):
        return "every namespace"
    return f"namespaces {_shown(_selector(selector))}"


def k8s_serving_ingress_ports(args: ResourceValidationArgs, report: Report) -> None:
    """A NetworkPolicy of the `serving` namespace that admits ingress from outside it (an
    ipBlock, another namespace, or any source) names its ports; without ports it admits only
    the pods it selects from each other (one LeaderWorkerSet group's Ray and NCCL)."""
    if args.resource_type != NETWORK_POLICY or _namespace(args.props) != SERVING:
        return
    spec = get(args.props, "spec")
    name = get(args.props, "metadata", "name") or args.name
    own = _selector(get(spec, "podSelector"))
    for n, rule in enumerate(items(get(spec, "ingress")), 1):
        ports = items(get(rule, "ports"))
        if ports and all(get(p, "port") is not None for p in ports):
            continue
        where = f"NetworkPolicy {name} in {SERVING}: ingress rule {n} admits"
        sources = items(get(rule, "from"))
        if not sources:
            report(f"{where} every source on {_ports(ports)}; name the ports it serves")
        for peer in sources:
            outside = _from_outside(peer, SERVING)
            if outside is not None:
                report(f"{where} {outside} on {_ports(ports)}; name the ports it serves")
            elif (pods := _selector(get(peer, "podSelector"))) != own:
                shown = f"pods {_shown(pods)}" if pods else "every pod of the namespace"
                report(
                    f"{where} {shown} on {_ports(ports)}; name the ports, or admit only the "
                    "pods the policy selects (one group)"
                )


def k8s_tenant_service_types(args: StackValidationArgs, report: Report) -> None:
    """No Service in a tenant namespace is of type LoadBalancer or NodePort: a tenant's
    services are ClusterIP, published only through the platform's Ingress (ALB and WAF)."""
    tenants = _tenants(args.resources)
    for service in of_type(args.resources, SERVICE):
        ns = _tenant_of(service, tenants)
        kind = known(lambda s=service: get(s.props, "spec", "type"), None) if ns else None
        if kind in EXPOSED_SERVICE_TYPES:
            name = known(lambda s=service: _name(s, s.props), service.name)
            report(
                f"Service {name} in tenant namespace {ns} is of type {kind}: it is reachable "
                "from outside the cluster; use ClusterIP behind the platform's Ingress",
                service.urn,
            )


def k8s_no_host_path(args: ResourceValidationArgs, report: Report) -> None:
    """No pod template mounts a hostPath volume (the node's files: its kubelet, its runtime
    socket, other pods' volumes), except allow-listed system DaemonSets
    (`allowed-daemonsets`)."""
    kind, pods = _workload(args)
    if not pods:
        return
    name = get(args.props, "metadata", "name") or args.name
    if kind == "DaemonSet" and f"{_namespace(args.props)}/{name}" in _allowed(args):
        return
    for _, pod in pods:
        for volume in items(get(pod, "volumes")):
            path = get(volume, "hostPath", "path")
            if get(volume, "hostPath") is not None:
                report(
                    f"{kind} {name} mounts hostPath {path} (volume {get(volume, 'name')}): "
                    "only allow-listed system DaemonSets may; use a PersistentVolumeClaim or "
                    "an emptyDir"
                )


def _file_system(pv: PolicyResource) -> str | None:
    """The FSx for Lustre file system an FSx PV mounts: its volumeHandle or, not known yet,
    the file system resource it depends on; None for any other volume."""
    if known(lambda: get(pv.props, "spec", "csi", "driver"), None) != LUSTRE_DRIVER:
        return None
    handle = known(lambda: get(pv.props, "spec", "csi", "volumeHandle"), None)
    if isinstance(handle, str):
        return handle
    systems = deps_of_type(pv, LUSTRE_FILE_SYSTEM)
    return systems[0].urn if len(systems) == 1 else None


def _own_directory(subdirectory: str, namespace: str) -> bool:
    """Whether `subdirectory` (no leading /) is `tenants/<tenant>` of the tenant whose
    namespace is `namespace` (its name, or `TEAM-<name>` on a team stack)."""
    head, _, tenant = subdirectory.partition("/")
    return (
        head == TENANTS_DIR
        and bool(tenant)
        and "/" not in tenant
        and tenant not in (".", "..")
        and (namespace == tenant or namespace.endswith(f"-{tenant}"))
    )


def k8s_tenant_volumes(args: StackValidationArgs, report: Report) -> None:
    """A PersistentVolumeClaim in a tenant namespace binds (`volumeName`) only a
    PersistentVolume the stack makes for that namespace (its claimRef names it), and a tenant's
    PV of an FSx for Lustre file system that tenants share mounts only the tenant's directory
    (`mountname` `<mount>/tenants/<tenant>`), never the root or another's."""
    tenants = _tenants(args.resources)
    volumes = of_type(args.resources, PERSISTENT_VOLUME)
    by_name = {known(lambda v=v: _name(v, v.props), v.name): v for v in volumes}
    for claim in of_type(args.resources, PERSISTENT_VOLUME_CLAIM):
        ns = _tenant_of(claim, tenants)
        bound = known(lambda c=claim: get(c.props, "spec", "volumeName"), UNKNOWN) if ns else None
        if bound is None:
            continue  # no tenant's, or provisioned on demand
        claim_name = known(lambda c=claim: _name(c, c.props), claim.name)
        pv = by_name.get(bound) if isinstance(bound, str) else None
        if pv is None:
            deps = deps_of_type(claim, PERSISTENT_VOLUME)
            pv = deps[0] if len(deps) == 1 else None
        if pv is None:
            if isinstance(bound, str):
                report(
                    f"PersistentVolumeClaim {claim_name} in tenant namespace {ns} binds "
                    f"PersistentVolume {bound}, which the stack does not make: bind only a "
                    "volume made for the namespace",
                    claim.urn,
                )
            continue
        reserved = known(lambda v=pv: get(v.props, "spec", "claimRef", "namespace"))
        if reserved is not UNKNOWN and reserved != ns:
            pv_name = known(lambda v=pv: _name(v, v.props), pv.name)
            report(
                f"PersistentVolume {pv_name} is reserved for namespace {reserved or '(none)'} "
                f"(claimRef) but bound by claim {claim_name} of tenant namespace {ns}: bind the "
                f"claim only to a volume whose claimRef names {ns}",
                pv.urn,
            )
    systems: dict[str, set[str]] = {}
    owners: list[tuple[PolicyResource, str, str]] = []
    for pv in volumes:
        fs = _file_system(pv)
        ns = known(lambda v=pv: get(v.props, "spec", "claimRef", "namespace"), None)
        if fs is not None and isinstance(ns, str) and ns in tenants:
            systems.setdefault(fs, set()).add(ns)
            owners.append((pv, fs, ns))
    for pv, fs, ns in owners:
        mount = known(lambda v=pv: get(v.props, "spec", "csi", "volumeAttributes", "mountname"))
        if len(systems[fs]) < 2 or not isinstance(mount, str):
            continue
        root, _, subdirectory = mount.strip("/").partition("/")
        if _own_directory(subdirectory.strip("/"), ns):
            continue
        pv_name = known(lambda v=pv: _name(v, v.props), pv.name)
        what = f"/{subdirectory.strip('/')}" if subdirectory.strip("/") else "the root"
        report(
            f"PersistentVolume {pv_name} of tenant namespace {ns} mounts {what} of a file "
            f"system {len(systems[fs])} tenants share (mountname {mount}): mount only "
            f"{root}/{TENANTS_DIR}/{ns}",
            pv.urn,
        )
