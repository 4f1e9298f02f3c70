"""What runs on each node pool, read from a plan: who feels a pool's roll or replacement.

- **serving**: the Deployments whose pods require the pool (node affinity or selector on
  `llm-platform/pool`), with the PodDisruptionBudget that selects them and the replica
  range KEDA scales them in;
- **training**: a GPU pool whose Kueue ResourceFlavor (`nodeLabels` on the pool label) a
  tenant's ClusterQueue other than serving's holds admits that tenant's jobs: a
  synchronous job restarts every rank from its last checkpoint when one of its pods is
  evicted;
- **data**: a CPU pool (`cpu_pools` of the cost output) runs the Ray data jobs, whose tasks
  Ray retries on the nodes that stay;
- **system**: the system pool runs the add-ons' controllers (Kueue, the device plugins'
  operators, monitoring).

`effect` says, for one pool and one kind of disruption, what each of them lives through.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmp.plan import Plan, Resource
from spec.labels import POOL_LABEL

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
FLAVOR_SUFFIX = ":ResourceFlavor"
SCALED_OBJECT = "kubernetes:keda.sh/v1alpha1:ScaledObject"
SYSTEM_POOL = "system"
NAMESPACE_LABEL = "kubernetes.io/metadata.name"
SERVING_NAMESPACE = "serving"


@dataclass(frozen=True)
class Served:
    """A Deployment on the pool (a model server, or another service)."""

    name: str
    namespace: str
    replicas: str
    """How many replicas: fixed (`2`), or KEDA's range (`0-8`)."""
    budget: str | None
    """Its PodDisruptionBudget (`minAvailable 1`, `maxUnavailable 1`), or None."""
    model: bool
    """A vLLM model server (`app.kubernetes.io/name: vllm`)."""


@dataclass
class PoolWork:
    pool: str
    served: list[Served] = field(default_factory=list)
    training: bool = False
    data: bool = False
    system: bool = False

    @property
    def models(self) -> list[Served]:
        return [s for s in self.served if s.model]

    def kinds(self) -> list[str]:
        out = []
        if self.models:
            out.append("serving")
        if self.training:
            out.append("training")
        if self.data:
            out.append("data")
        if self.system:
            out.append("system")
        return out or ["nothing the plan declares"]


def _pod_pools(pod_spec: Mapping[str, Any]) -> set[str]:
    """The pools a pod spec requires (nodeSelector, or required node affinity with In)."""
    pools = set()
    selector = pod_spec.get("nodeSelector") or {}
    if POOL_LABEL in selector:
        pools.add(str(selector[POOL_LABEL]))
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            if expression.get("key") == POOL_LABEL and expression.get("operator") == "In":
                pools.update(str(v) for v in expression.get("values") or [])
    return pools


def _matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    wanted = selector.get("matchLabels") or {}
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def _budget(pdbs: Iterable[Resource], namespace: str, labels: Mapping[str, Any]) -> str | None:
    for pdb in pdbs:
        meta = pdb.inputs.get("metadata") or {}
        spec = pdb.inputs.get("spec") or {}
        if meta.get("namespace", "default") != namespace:
            continue
        if not _matches(spec.get("selector") or {}, labels):
            continue
        for key, label in (("minAvailable", "minAvailable"), ("maxUnavailable", "maxUnavailable")):
            if key in spec:
                return f"{label} {spec[key]}"
    return None


def pool_work(plan: Plan | None) -> dict[str, PoolWork]:
    """Pool name -> what runs there, from the plan's Kubernetes objects and cost output."""
    if plan is None:
        return {}
    out: dict[str, PoolWork] = {}

    def of(pool: str) -> PoolWork:
        return out.setdefault(pool, PoolWork(pool))

    resources = plan.resources
    pdbs = [r for r in resources if r.type == PDB]
    scaled = {}
    for r in resources:
        if r.type == SCALED_OBJECT:
            spec = r.inputs.get("spec") or {}
            target = (spec.get("scaleTargetRef") or {}).get("name")
            low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", "?")
            scaled[target] = f"{low}-{high} (KEDA)"
    for r in resources:
        if r.type == DEPLOYMENT:
            meta = r.inputs.get("metadata") or {}
            spec = r.inputs.get("spec") or {}
            template = spec.get("template") or {}
            labels = (template.get("metadata") or {}).get("labels") or {}
            namespace = str(meta.get("namespace", "default"))
            name = str(meta.get("name", r.name))
            replicas = scaled.get(name) or str(spec.get("replicas", 1))
            for pool in _pod_pools(template.get("spec") or {}):
                of(pool).served.append(
                    Served(
                        name,
                        namespace,
                        replicas,
                        _budget(pdbs, namespace, labels),
                        labels.get("app.kubernetes.io/name") == "vllm",
                    )
                )
    flavors = {}
    for r in resources:
        if r.type.endswith(FLAVOR_SUFFIX) and r.type.startswith("kubernetes:kueue"):
            labels = (r.inputs.get("spec") or {}).get("nodeLabels") or {}
            if POOL_LABEL in labels:
                flavors[(r.inputs.get("metadata") or {}).get("name")] = str(labels[POOL_LABEL])
    for r in resources:
        if not (r.type.endswith(":ClusterQueue") and r.type.startswith("kubernetes:kueue")):
            continue
        spec = r.inputs.get("spec") or {}
        selector = (spec.get("namespaceSelector") or {}).get("matchLabels") or {}
        namespace = str(selector.get(NAMESPACE_LABEL, ""))
        if not namespace or namespace.endswith(SERVING_NAMESPACE):
            continue  # the cohort's spare queue, or serving's own (multi-node servers)
        for group in spec.get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                if flavor.get("name") in flavors:
                    of(flavors[flavor["name"]]).training = True
    cost = plan.outputs.get("cost")
    if isinstance(cost, Mapping):
        for pool in cost.get("cpu_pools") or {}:
            of(str(pool)).data = True
    of(SYSTEM_POOL).system = True
    for r in resources:
        if r.type == NODE_GROUP:
            label = (r.inputs.get("labels") or {}).get(POOL_LABEL)
            if label:
                of(str(label))
    return out


def effect(
    work: PoolWork, disruption: str, *, unavailable: int = 1, minutes: float = 0
) -> list[str]:
    """What each workload on the pool lives through: `disruption` is `roll` (nodes
    drained `unavailable` at a time), `create-first` (a new group comes up, then the old
    one drains) or `delete-first` (the pool has no nodes for ~`minutes`)."""
    lines = []
    for served in work.models:
        budget = (
            f", its PodDisruptionBudget {served.budget} holds each drain" if served.budget else ""
        )
        if disruption == "delete-first":
            lines.append(
                f"serving: model {served.name} ({served.namespace}) serves nothing for "
                f"~{minutes:g} min, until the new group's nodes join"
            )
        elif disruption == "roll":
            lines.append(
                f"serving: model {served.name} ({served.namespace}, replicas {served.replicas}) "
                f"loses up to {unavailable} replica(s) per wave{budget}; with one replica it "
                "stops serving while the pod moves"
            )
        else:
            lines.append(
                f"serving: model {served.name} ({served.namespace}) moves to the new nodes as "
                f"the old ones drain{budget}"
            )
    others = [s for s in work.served if not s.model]
    if others:
        names = ", ".join(f"{s.name} ({s.namespace})" for s in others)
        lines.append(f"services: {names} reschedule onto the other nodes")
    if work.training:
        if disruption == "delete-first":
            lines.append(
                f"training: a running job stops with the nodes and restarts every rank from "
                f"its last checkpoint once the new group's nodes join (~{minutes:g} min)"
            )
        else:
            lines.append(
                "training: a synchronous job restarts every rank from its last checkpoint each "
                "time one of its pods is evicted (the work since that checkpoint is lost); a "
                "job's `safe-to-evict: false` holds the Cluster Autoscaler, not this drain"
            )
    if work.data:
        lines.append("data: Ray retries the tasks of the evicted nodes on the others")
    if work.system:
        lines.append(
            "system: the add-ons' controllers (Kueue, the operators, monitoring) reschedule"
        )
    if not lines:
        lines.append("nothing the plan declares runs there (jobs submitted later may)")
    return lines
