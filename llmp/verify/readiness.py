"""The `kubernetes` rows of `llmp verify`: whether what the plan installs in the cluster runs.

A refresh reads back the Kubernetes objects Pulumi created (a Helm release, a
ClusterQueue), not whether what runs from them works. These rows read the cluster
through `llmp.clients.kube` (get and list calls only), each for what the plan installs:

- Kueue: its controller Deployment (`<release>-controller-manager` in the release's
  namespace) available, and every ClusterQueue of the plan `Active` (else Kueue's
  reason, e.g. a ResourceFlavor that does not exist);
- device plugins: the GPU operator's `nvidia-device-plugin-daemonset` (the operator
  creates it in its namespace) and every DaemonSet of the EFA device plugin's Helm
  release (Helm's `meta.helm.sh/release-name` annotation), ready on every node they are
  scheduled to;
- devices advertised: on every Ready node of each GPU pool (label `llm-platform/pool`),
  the accelerators (`nvidia.com/gpu`, `aws.amazon.com/neuron`) and, on EFA pools, the
  `vpc.amazonaws.com/efa` interfaces of its instance type (the catalog's counts) in
  allocatable, which is what the scheduler places GPU jobs against.

Without a kubeconfig every row is "not checked" and says how to enable it. A read the
cluster refuses (403) or fails is a failed row; a cluster out of reach, or refusing
the credentials (401), is bad input (`KubeError`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmp.clients import kube
from llmp.plan import Plan, Resource
from llmp.verify.findings import FAIL, NODE_GROUP, NOT_CHECKED, PASS, Finding, Status
from spec.labels import POOL_LABEL

AREA = "kubernetes"
RELEASE = "kubernetes:helm.sh/v3:Release"
CLUSTER_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
HELM_RELEASE = "meta.helm.sh/release-name"
NVIDIA_DEVICE_PLUGIN = "nvidia-device-plugin-daemonset"
REFUSED = frozenset({401})
"""Only rejected credentials stop the run; a 403 is a refused read: that row fails."""
ENABLE = "needs the cluster: pass --kubeconfig FILE or --context NAME"
_SHOWN = 4

Outcome = tuple[Status, str]


@dataclass(frozen=True)
class Check:
    resource: str
    check: str
    run: Callable[[kube.KubeApis], Outcome]


def check(plan: Plan, apis: kube.KubeApis | None) -> list[Finding]:
    """The rows of every check the plan implies; "not checked" ones without `apis`."""
    rows = []
    for c in checks(plan):
        status, reason = c.run(apis) if apis is not None else (NOT_CHECKED, ENABLE)
        rows.append(Finding(c.resource, c.check, status, reason, AREA))
    return rows


def checks(plan: Plan) -> list[Check]:
    """What the plan installs that can be seen running: Kueue, the device plugins, the pools."""
    releases = {_chart(r): r for r in plan.by_type(RELEASE)}
    out = []
    if kueue := releases.get("kueue"):
        ns = str(kueue.inputs.get("namespace"))
        name = f"{kueue.inputs.get('name')}-controller-manager"
        out.append(Check(f"{ns}/{name}", "Kueue controller", _deployment(ns, name)))
        for queue in plan.by_type(CLUSTER_QUEUE):
            name = str(queue.inputs["metadata"]["name"])
            out.append(Check(name, "ClusterQueue", _cluster_queue(queue, name)))
    if operator := releases.get("gpu-operator"):
        plugin = (operator.inputs.get("values") or {}).get("devicePlugin") or {}
        ns, name = str(operator.inputs.get("namespace")), NVIDIA_DEVICE_PLUGIN
        if plugin.get("enabled", True):
            out.append(Check(f"{ns}/{name}", "device plugin", _daemon_set(ns, name)))
    if efa := releases.get("aws-efa-k8s-device-plugin"):
        ns, name = str(efa.inputs.get("namespace")), str(efa.inputs.get("name"))
        out.append(Check(f"{ns}/{name}", "device plugin", _release_daemon_sets(ns, name)))
    for pool, devices in gpu_pools(plan):
        out.append(Check(pool, "devices advertised", _advertised(pool, devices)))
    return out


def _chart(release: Resource) -> str:
    """The chart's name: `oci://registry.k8s.io/kueue/charts/kueue` is `kueue`."""
    return str(release.inputs.get("chart", "")).rsplit("/", 1)[-1]


def gpu_pools(plan: Plan) -> list[tuple[str, kube.Devices]]:
    """(pool, what its nodes advertise) of every node group of accelerated instances. A
    Capacity Block group names its instance type in its launch template only."""
    out = []
    for group in plan.by_type(NODE_GROUP):
        labels = group.inputs.get("labels") or {}
        types = group.inputs.get("instanceTypes") or [
            t.inputs.get("instanceType") for t in plan.dependencies_of(group, LAUNCH_TEMPLATE)
        ]
        instance_type = next((t for t in types if t), None)
        if not labels.get(POOL_LABEL) or not instance_type:
            continue
        try:
            devices = kube.Devices.of(instance_type, labels.get("llm-platform/efa") == "true")
        except ValueError:  # no accelerators, or a type the catalog does not list
            continue
        out.append((str(labels[POOL_LABEL]), devices))
    return sorted(out, key=lambda p: p[0])


# --- reading ----------------------------------------------------------------------------


def _get(apis: kube.KubeApis, what: str, call: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """(the object, None), or (None, the failed row: missing, refused or failed); KubeError
    when the cluster is out of reach or refuses the credentials."""
    try:
        return call(*args, _request_timeout=kube.REQUEST_TIMEOUT, **kw), None
    except Exception as exc:
        if unusable := kube.fatal(exc, apis.host, f"read {what}", REFUSED):
            raise unusable from None
        if (status := kube.status_of(exc)) is None:
            raise
        return None, (
            FAIL,
            f"no {what}" if status == 404 else f"cannot read {what}: {kube.reason(exc)}",
        )


def _deployment(ns: str, name: str) -> Callable[[kube.KubeApis], Outcome]:
    def run(apis: kube.KubeApis) -> Outcome:
        found, failed = _get(
            apis, f"Deployment {ns}/{name}", apis.apps.read_namespaced_deployment, name, ns
        )
        if failed:
            return failed
        want = found.spec.replicas if found.spec.replicas is not None else 1
        have = found.status.available_replicas or 0
        text = f"{have} of {want} replicas available"
        if want and have >= want:
            return PASS, text
        available = next((c for c in found.status.conditions or [] if c.type == "Available"), None)
        if available is not None and available.status != "True" and available.reason:
            text += f": {available.reason}" + (
                f": {available.message}" if available.message else ""
            )
        return FAIL, text if want else "scaled to 0 replicas"

    return run


def _cluster_queue(queue: Resource, name: str) -> Callable[[kube.KubeApis], Outcome]:
    group, _, version = str(queue.inputs.get("apiVersion")).partition("/")

    def run(apis: kube.KubeApis) -> Outcome:
        read = apis.custom.get_cluster_custom_object
        found, failed = _get(
            apis, f"ClusterQueue {name}", read, group, version, "clusterqueues", name
        )
        if failed:
            return failed
        conditions = (found.get("status") or {}).get("conditions") or []
        active = next((c for c in conditions if c.get("type") == "Active"), None)
        if active is None:
            return FAIL, "no Active condition: Kueue has not reconciled it (is its controller up?)"
        if active.get("status") == "True":
            return PASS, "Active"
        why = ": ".join(str(active[k]) for k in ("reason", "message") if active.get(k))
        return FAIL, "not Active" + (f": {kube.one_line(why)}" if why else "")

    return run


def _ready(ds: Any) -> Outcome:
    desired = ds.status.desired_number_scheduled or 0
    ready = ds.status.number_ready or 0
    text = f"{ds.metadata.name} {ready} of {desired} ready"
    if ready >= desired:
        return PASS, text + (" (no node to run on)" if not desired else "")
    return FAIL, text


def _daemon_set(ns: str, name: str) -> Callable[[kube.KubeApis], Outcome]:
    def run(apis: kube.KubeApis) -> Outcome:
        found, failed = _get(
            apis, f"DaemonSet {ns}/{name}", apis.apps.read_namespaced_daemon_set, name, ns
        )
        return failed or _ready(found)

    return run


def _release_daemon_sets(ns: str, release: str) -> Callable[[kube.KubeApis], Outcome]:
    def run(apis: kube.KubeApis) -> Outcome:
        listed, failed = _get(apis, f"DaemonSets of {ns}", apis.apps.list_namespaced_daemon_set, ns)
        if failed:
            return failed
        mine = [
            d for d in listed.items if (d.metadata.annotations or {}).get(HELM_RELEASE) == release
        ]
        if not mine:
            return FAIL, f"no DaemonSet of Helm release {release} in {ns}"
        outcomes = [_ready(d) for d in sorted(mine, key=lambda d: d.metadata.name)]
        status = FAIL if any(s == FAIL for s, _ in outcomes) else PASS
        return status, "; ".join(text for _, text in outcomes)

    return run


def _advertised(pool: str, devices: kube.Devices) -> Callable[[kube.KubeApis], Outcome]:
    def run(apis: kube.KubeApis) -> Outcome:
        selector = f"{POOL_LABEL}={pool}"
        listed, failed = _get(
            apis, f"nodes of pool {pool}", apis.core.list_node, label_selector=selector
        )
        if failed:
            return failed
        nodes = list(listed.items)
        ready = [n for n in nodes if kube.readiness(n) != "not Ready"]
        others = f"; {len(nodes) - len(ready)} not Ready" if len(nodes) > len(ready) else ""
        if not ready:
            return NOT_CHECKED, f"no Ready node in the pool ({len(nodes)} nodes)"
        short = [f"{n.metadata.name} {s}" for n in ready if (s := kube.shortfall(n, devices))]
        if short:
            shown = short[:_SHOWN] + (
                [f"{len(short) - _SHOWN} more"] if len(short) > _SHOWN else []
            )
            return FAIL, f"{len(short)} of {len(ready)} Ready nodes: " + "; ".join(shown) + others
        return PASS, f"{len(ready)} Ready nodes advertise {devices}{others}"

    return run
