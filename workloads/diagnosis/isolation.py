"""Take a GPU node out of service the way NVSentinel does (components/addons.py), for what
NVSentinel cannot see: a node that is persistently slow. The library behind `llmp stragglers
--quarantine` (llmp/diagnosis/quarantine.py adapts its errors to the CLI's) and the in-cluster
straggler watcher (workloads/diagnosis/watch.py): both hand it a `KubeApis` and the nodes to
isolate.

Quarantining a node cordons it, taints it `llm-platform/quarantined=slow:NoSchedule` (the key
NVSentinel's rules use, a value of our own), annotates it with why and when, and evicts its
training pods (`llm-platform/job-kind=training`) through the Eviction API: PodDisruptionBudgets
hold, and each pod keeps its own termination grace (300 s for a PyTorchJob rank to write its
checkpoint shard); the elastic job carries on, or restarts from its checkpoint, on the other
nodes. NoSchedule, not NoExecute, for NVSentinel's reason: a NoExecute taint evicts at once,
past the budgets, and takes the node's DaemonSets (device plugin, DCGM) with it.

A cap bounds it: nodes already carrying the taint, whoever set it, count against
`max_quarantined`, and a node beyond the cap is refused. A node that already carries the taint
is left as it is, so a second run changes nothing. A dry run reads the cluster and changes
nothing. Nothing here releases a node: `kubectl uncordon NODE` and `kubectl taint node NODE
llm-platform/quarantined-` do, once it has been looked at (or EKS replaces it).

Errors are one line each, all `IsolationError`s: `ClusterUnusable` (the API is out of reach or
refuses us), `NotANode` (a target the cluster does not have), `BadCap`, `IsolationFailed` (a
write the API refused).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from spec.labels import JOB_KIND_LABEL, QUARANTINE_TAINT
from workloads.kube_api import REQUEST_TIMEOUT, KubeApis, reason, status_of, unusable


class IsolationError(Exception):
    """A quarantine that could not be done: one line."""


class ClusterUnusable(IsolationError):
    """The cluster API is out of reach, or refuses us (401, 403)."""


class NotANode(IsolationError):
    """A target that is no node of the cluster."""


class BadCap(IsolationError):
    """A cap under 1."""


class IsolationFailed(IsolationError):
    """The API refused a write (a conflict, an eviction error)."""


SLOW = "slow"
"""The taint's value for a slow node (NVSentinel's is `gpu-fault`)."""
EFFECT = "NoSchedule"
REASON_ANNOTATION = "llm-platform/quarantine-reason"
SINCE_ANNOTATION = "llm-platform/quarantined-at"
TRAINING_PODS = f"{JOB_KIND_LABEL}=training"

Action = Literal["quarantined", "would quarantine", "already quarantined", "refused"]


@dataclass(frozen=True)
class Target:
    """A node to quarantine and the one line that says why (its annotation)."""

    node: str
    reason: str


@dataclass(frozen=True)
class NodeOutcome:
    node: str
    action: Action
    taint: str
    """The taint it carries (or would carry) as `key=value:effect`."""
    evicted: tuple[str, ...] = ()
    """namespace/pod of the training pods evicted (or that a dry run would evict)."""
    blocked: tuple[str, ...] = ()
    """namespace/pod whose eviction a PodDisruptionBudget refused for now."""

    def line(self) -> str:
        pods = ", ".join(self.evicted) or "none"
        if self.action == "quarantined":
            text = (
                f"{self.node}: quarantined (cordoned, {self.taint}); training pods evicted: {pods}"
            )
        elif self.action == "would quarantine":
            text = f"{self.node}: would quarantine (cordon, {self.taint}) and evict: {pods}"
        elif self.action == "already quarantined":
            text = f"{self.node}: already quarantined ({self.taint}); left as it is"
        else:
            text = f"{self.node}: refused, the cap of quarantined nodes is reached"
        if self.blocked:
            text += (
                f"; eviction refused by a PodDisruptionBudget for {', '.join(self.blocked)} "
                "(the node stays cordoned: run again later)"
            )
        return text


@dataclass(frozen=True)
class QuarantineReport:
    outcomes: list[NodeOutcome]
    cap: int
    quarantined_before: list[str]
    """Nodes that carried the taint before this run (they count against the cap)."""
    dry_run: bool
    host: str = ""

    @property
    def refused(self) -> list[str]:
        return [o.node for o in self.outcomes if o.action == "refused"]

    @property
    def blocked(self) -> list[str]:
        return [pod for o in self.outcomes for pod in o.blocked]

    def summary(self) -> str | None:
        """The one line a failed run ends with, or None when everything was done."""
        parts = []
        if self.refused:
            held = ", ".join(self.quarantined_before) or "none before this run"
            parts.append(
                f"refused {', '.join(self.refused)}: --max-quarantined {self.cap} nodes may carry "
                f"{QUARANTINE_TAINT} (already: {held})"
            )
        if self.blocked:
            parts.append(f"{len(self.blocked)} eviction(s) refused by a PodDisruptionBudget")
        return "; ".join(parts) or None

    def as_dict(self) -> dict[str, Any]:
        return {
            "acted": not self.dry_run,
            "dry_run": self.dry_run,
            "cap": self.cap,
            "quarantined_before": self.quarantined_before,
            "nodes": [
                {
                    "node": o.node,
                    "action": o.action,
                    "taint": o.taint,
                    "evicted": list(o.evicted),
                    "blocked": list(o.blocked),
                }
                for o in self.outcomes
            ],
        }


@dataclass
class _Node:
    name: str
    taints: list[dict[str, Any]] = field(default_factory=list)
    resource_version: str | None = None

    def quarantine_taint(self) -> str | None:
        for t in self.taints:
            if t["key"] == QUARANTINE_TAINT:
                return describe(t["key"], t.get("value"), t["effect"])
        return None


def describe(key: str, value: str | None, effect: str) -> str:
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


def check_cap(max_quarantined: int) -> None:
    if max_quarantined < 1:
        raise BadCap(f"max_quarantined {max_quarantined}: at least 1")


def quarantine(
    apis: KubeApis,
    targets: Sequence[Target],
    *,
    max_quarantined: int,
    dry_run: bool,
    now: datetime.datetime,
) -> QuarantineReport:
    """Quarantine `targets` in their order (the worst first, so the cap keeps the worst) until
    `max_quarantined` nodes carry the taint; refuse the rest. ClusterUnusable for a cluster
    that cannot be used, NotANode for a target that is no node of it, IsolationFailed for a
    refused write."""
    check_cap(max_quarantined)
    nodes = _nodes(apis)
    for t in targets:
        if t.node not in nodes:
            raise NotANode(
                f"{t.node} is not a node of the cluster at {apis.host}: the trace's node names "
                "must be the cluster's (kubectl get nodes)"
            )
    before = sorted(n.name for n in nodes.values() if n.quarantine_taint())
    held = len(before)
    ours = describe(QUARANTINE_TAINT, SLOW, EFFECT)
    outcomes: list[NodeOutcome] = []
    seen: set[str] = set()
    for target in targets:
        if target.node in seen:
            continue
        seen.add(target.node)
        node = nodes[target.node]
        existing = node.quarantine_taint()
        if existing:
            outcomes.append(NodeOutcome(node.name, "already quarantined", existing))
            continue
        if held >= max_quarantined:
            outcomes.append(NodeOutcome(node.name, "refused", ours))
            continue
        held += 1
        pods = _training_pods(apis, node.name)
        if dry_run:
            outcomes.append(NodeOutcome(node.name, "would quarantine", ours, tuple(pods)))
            continue
        _isolate(apis, node, target.reason, now)
        evicted, blocked = _evict(apis, pods)
        outcomes.append(NodeOutcome(node.name, "quarantined", ours, evicted, blocked))
    return QuarantineReport(outcomes, max_quarantined, before, dry_run, apis.host)


def _call(apis: KubeApis, doing: str, method: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return method(*args, _request_timeout=REQUEST_TIMEOUT, **kwargs)
    except Exception as exc:
        if line := unusable(exc, apis.host, doing):
            raise ClusterUnusable(line) from None
        raise IsolationFailed(f"cannot {doing}: {reason(exc)}") from None


def _nodes(apis: KubeApis) -> dict[str, _Node]:
    listed = _call(apis, "list nodes", apis.core.list_node)
    out = {}
    for item in listed.items:
        taints = [
            {"key": t.key, "value": t.value, "effect": t.effect, "timeAdded": t.time_added}
            for t in (item.spec.taints or [])
        ]
        out[item.metadata.name] = _Node(item.metadata.name, taints, item.metadata.resource_version)
    return out


def _training_pods(apis: KubeApis, node: str) -> list[str]:
    """namespace/name of the training pods on `node` that still run (not already leaving)."""
    listed = _call(
        apis,
        f"list the pods on {node}",
        apis.core.list_pod_for_all_namespaces,
        field_selector=f"spec.nodeName={node}",
        label_selector=TRAINING_PODS,
    )
    return sorted(
        f"{p.metadata.namespace}/{p.metadata.name}"
        for p in listed.items
        if p.metadata.deletion_timestamp is None
        and (p.status is None or p.status.phase not in ("Succeeded", "Failed"))
    )


def _isolate(apis: KubeApis, node: _Node, why: str, now: datetime.datetime) -> None:
    """Cordon, taint and annotate in one patch. Taints have no merge key (the list is replaced),
    so the node's own are sent back with ours, and the resourceVersion makes the API refuse
    the patch (409) if another controller changed the node since it was read."""
    taints = [
        {k: v.isoformat() if isinstance(v, datetime.datetime) else v for k, v in t.items() if v}
        for t in node.taints
    ]
    taints.append({"key": QUARANTINE_TAINT, "value": SLOW, "effect": EFFECT})
    body = {
        "metadata": {
            "resourceVersion": node.resource_version,
            "annotations": {
                REASON_ANNOTATION: why,
                SINCE_ANNOTATION: now.astimezone(datetime.UTC).isoformat(timespec="seconds"),
            },
        },
        "spec": {"unschedulable": True, "taints": taints},
    }
    try:
        apis.core.patch_node(node.name, body, _request_timeout=REQUEST_TIMEOUT)
    except Exception as exc:
        if line := unusable(exc, apis.host, f"patch node {node.name}"):
            raise ClusterUnusable(line) from None
        if status_of(exc) == 409:
            raise IsolationFailed(
                f"node {node.name} changed while it was being quarantined; run again"
            ) from None
        raise IsolationFailed(f"cannot quarantine {node.name}: {reason(exc)}") from None


def _evict(apis: KubeApis, pods: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Evict each pod (no grace period given: the pod's own holds). (evicted, blocked)."""
    from kubernetes import client

    evicted, blocked = [], []
    for pod in pods:
        namespace, name = pod.split("/", 1)
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        try:
            apis.core.create_namespaced_pod_eviction(
                name, namespace, body, _request_timeout=REQUEST_TIMEOUT
            )
        except Exception as exc:
            if line := unusable(exc, apis.host, f"evict {pod}"):
                raise ClusterUnusable(line) from None
            status = status_of(exc)
            if status == 429:
                blocked.append(pod)
                continue
            if status == 404:
                continue  # gone already: nothing left to evict
            raise IsolationFailed(f"cannot evict {pod}: {reason(exc)}") from None
        evicted.append(pod)
    return tuple(evicted), tuple(blocked)
