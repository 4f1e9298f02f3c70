"""A Kubernetes API in memory: the few calls `llmp accept` and `llmp verify` make
(CoreV1Api, BatchV1Api, AppsV1Api, CustomObjectsApi).

It answers with the official client's own model classes (V1Node, V1Job, V1Pod...), so
an attribute the real API objects lack fails here too, refuses a keyword argument the
real client's method would refuse (read from the generated client), and raises the
client's ApiException with a Status body for refusals. Jobs run on a script driven by a fake
clock: each pod is Pending for a while, then Running, then Succeeded or Failed with
the log the script gives it; Kueue admits a suspended Job after a delay (or never);
the Job's conditions follow the pods the way the Job controller sets them
(Complete, SuccessCriteriaMet for a success policy, Failed with FailedIndexes or
DeadlineExceeded). Pod logs come back as the real client returns them: raw bytes with
`_preload_content=False`, and otherwise through the client's deserializer, which
json-decodes a JSON log into a dict and returns its repr. Deployments, DaemonSets and
Kueue ClusterQueues are what a test puts in (`deployment`, `daemon_set`,
`cluster_queue` build them). For a quarantine (`llmp stragglers --quarantine`): nodes carry
taints, annotations and a resourceVersion that `patch_node` checks and bumps; pods on nodes
(`node_pod`) are listed by node and label, and evicted through the Eviction API, which a
PodDisruptionBudget can refuse (429).
"""

from __future__ import annotations

import datetime
import functools
import inspect
import json
import re
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from llmp.clients.kube import KubeApis

HELM_RELEASE = "meta.helm.sh/release-name"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
EPOCH = datetime.datetime(2026, 11, 30, tzinfo=datetime.UTC)


class FakeClock:
    """Time for both sides: the run's clock and sleep, and the pods' progress."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@functools.cache
def accepted_kwargs(api: str, method: str) -> frozenset[str]:
    """The keyword arguments the real client's method takes (it raises on any other)."""
    source = inspect.getsource(getattr(getattr(client, api), f"{method}_with_http_info"))
    lists = re.findall(r"all_params(?: = |\.extend\()\s*\[(.*?)\]", source, re.S)
    assert lists, method
    return frozenset(name for block in lists for name in re.findall(r"'(\w+)'", block))


def api_error(status: int, reason: str, message: str) -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = json.dumps({"kind": "Status", "status": "Failure", "message": message})
    return exc


@dataclass
class PodScript:
    """What one pod of a job does: where it runs, how long it waits and runs, how it ends."""

    log: str = ""
    succeeds: bool = True
    pending_s: float = 0.0
    running_s: float = 0.0
    schedulable: bool = True
    unschedulable_message: str = "0/16 nodes are available: 16 Insufficient nvidia.com/gpu."


@dataclass
class JobScript:
    """How the cluster treats one job: pods by index (the last entry repeats), Kueue's delay."""

    pods: list[PodScript] = field(default_factory=lambda: [PodScript()])
    admit_after_s: float | None = 0.0
    """Kueue unsuspends the Job after this long; None: never (no quota)."""

    def pod(self, index: int) -> PodScript:
        return self.pods[min(index, len(self.pods) - 1)]


@dataclass
class FakeNode:
    name: str
    pool: str
    gpus: int = 8
    efa: int = 32
    ready: bool = True
    cordoned: bool = False
    taints: list[tuple[str, str | None, str]] = field(default_factory=list)
    """(key, value, effect) of each taint, as `patch_node` leaves them."""
    annotations: dict[str, str] = field(default_factory=dict)
    version: int = 1
    """metadata.resourceVersion: every patch bumps it; a patch naming an older one is a 409."""

    def model(self) -> client.V1Node:
        return client.V1Node(
            metadata=client.V1ObjectMeta(
                name=self.name,
                labels={"llm-platform/pool": self.pool},
                annotations=dict(self.annotations) or None,
                resource_version=str(self.version),
            ),
            spec=client.V1NodeSpec(
                unschedulable=self.cordoned or None,
                taints=[client.V1Taint(key=k, value=v, effect=e) for k, v, e in self.taints]
                or None,
            ),
            status=client.V1NodeStatus(
                conditions=[
                    client.V1NodeCondition(type="Ready", status="True" if self.ready else "False")
                ],
                allocatable={
                    "cpu": "191450m",
                    "memory": "2002Gi",
                    "nvidia.com/gpu": str(self.gpus),
                    "vpc.amazonaws.com/efa": str(self.efa),
                },
            ),
        )


@dataclass
class _Job:
    body: dict[str, Any]
    created: float
    script: JobScript
    node_names: list[str]

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"]["namespace"])

    @property
    def spec(self) -> dict[str, Any]:
        return self.body["spec"]  # type: ignore[no-any-return]

    def admitted_at(self) -> float | None:
        if not self.spec.get("suspend"):
            return self.created
        if self.script.admit_after_s is None:
            return None
        return self.created + self.script.admit_after_s


class FakeCluster:
    """Nodes, Secrets, Services, Jobs and their pods; every call is recorded in `calls`."""

    def __init__(
        self,
        clock: FakeClock,
        nodes: list[FakeNode],
        scripts: dict[str, JobScript] | None = None,
        secrets: set[tuple[str, str]] | None = None,
        host: str = "https://ABCDEF0123456789.gr7.us-east-1.eks.amazonaws.com",
    ) -> None:
        self.clock = clock
        self.nodes = nodes
        self.scripts = scripts or {}
        """Keyed by job-name prefix ("dcgm-h100", "fabric-h100"): the run id varies."""
        self.secrets = secrets if secrets is not None else set()
        self.host = host
        self.jobs: dict[tuple[str, str], _Job] = {}
        self.services: dict[tuple[str, str], dict[str, Any]] = {}
        self.deleted: list[tuple[str, str, str, str | None]] = []
        self.created: list[dict[str, Any]] = []
        """Every object created, in order, as sent (kept after it is deleted)."""
        self.deployments: dict[tuple[str, str], client.V1Deployment] = {}
        self.daemon_sets: dict[tuple[str, str], client.V1DaemonSet] = {}
        self.cluster_objects: dict[tuple[str, str], dict[str, Any]] = {}
        """(plural, name) -> a cluster-scoped custom object (Kueue's ClusterQueues)."""
        self.pods: list[client.V1Pod] = []
        """Pods running on the nodes, outside any Job (`node_pod` builds them)."""
        self.evictions: list[tuple[str, str]] = []
        """(namespace, pod) of every Eviction the API accepted, in order."""
        self.pdb_blocked: set[tuple[str, str]] = set()
        """(namespace, pod) whose eviction a PodDisruptionBudget refuses (429)."""
        self.node_patches: list[tuple[str, dict[str, Any]]] = []
        """(node, body) of every patch the API accepted."""
        self.calls: list[str] = []
        self.fail: dict[str, Exception] = {}
        """Method name -> the exception that call raises (unreachable, forbidden...)."""
        self.core = _Core(self)
        self.batch = _Batch(self)
        self.apps = _Apps(self)
        self.custom = _Custom(self)

    def apis(self) -> KubeApis:
        return KubeApis(
            core=self.core, batch=self.batch, apps=self.apps, custom=self.custom, host=self.host
        )

    def add(self, *objects: Any) -> FakeCluster:
        """Put Deployments, DaemonSets (models) and ClusterQueues (dicts) in the cluster."""
        for o in objects:
            if isinstance(o, client.V1Deployment):
                self.deployments[(o.metadata.namespace, o.metadata.name)] = o
            elif isinstance(o, client.V1DaemonSet):
                self.daemon_sets[(o.metadata.namespace, o.metadata.name)] = o
            else:
                self.cluster_objects[("clusterqueues", o["metadata"]["name"])] = o
        return self

    # --- shared ---------------------------------------------------------------------------

    def _call(self, api: str, method: str, kwargs: dict[str, Any]) -> None:
        unknown = set(kwargs) - accepted_kwargs(api, method)
        assert not unknown, f"{api}.{method} takes no {sorted(unknown)}"
        self.calls.append(method)
        if method in self.fail:
            raise self.fail[method]

    def _script(self, job_name: str) -> JobScript:
        for prefix, script in self.scripts.items():
            if job_name.startswith(prefix):
                return script
        return JobScript()

    def _pool_nodes(self, body: dict[str, Any]) -> list[str]:
        terms = body["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        expressions = terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][
            0
        ]
        pool = next(
            e["values"][0]
            for e in expressions["matchExpressions"]
            if e["key"] == "llm-platform/pool"
        )
        return [n.name for n in self.nodes if n.pool == pool and n.ready and not n.cordoned]

    def created_jobs(self) -> list[dict[str, Any]]:
        return [body for body in self.created if body["kind"] == "Job"]

    # --- the simulation -----------------------------------------------------------------

    def pod_states(self, job: _Job) -> list[tuple[int, str, PodScript, float]]:
        """(index, phase, script, since) of every pod that exists now."""
        admitted = job.admitted_at()
        if admitted is None or self.clock.now < admitted:
            return []
        out = []
        for index in range(int(job.spec["completions"])):
            script = job.script.pod(index)
            age = self.clock.now - admitted
            if not script.schedulable or age < script.pending_s:
                phase = "Pending"
            elif age < script.pending_s + script.running_s:
                phase = "Running"
            else:
                phase = "Succeeded" if script.succeeds else "Failed"
            out.append((index, phase, script, admitted))
        return out

    def job_model(self, job: _Job) -> client.V1Job:
        states = self.pod_states(job)
        phases = [phase for _, phase, _, _ in states]
        conditions = []
        admitted = job.admitted_at()
        deadline = job.spec.get("activeDeadlineSeconds")
        finished = len(states) == job.spec["completions"] and all(
            p in ("Succeeded", "Failed") for p in phases
        )
        success_index = (
            (job.spec.get("successPolicy") or {}).get("rules", [{}])[0].get("succeededIndexes")
        )
        if success_index is not None and any(
            i == int(success_index) and p == "Succeeded" for i, p, _, _ in states
        ):
            conditions += [_condition("SuccessCriteriaMet"), _condition("Complete")]
        elif finished and all(p == "Succeeded" for p in phases):
            conditions.append(_condition("Complete"))
        elif finished:
            conditions.append(_condition("Failed", "FailedIndexes", "Job has failed indexes"))
        elif (
            deadline is not None and admitted is not None and self.clock.now - admitted >= deadline
        ):
            conditions.append(
                _condition(
                    "Failed", "DeadlineExceeded", "Job was active longer than specified deadline"
                )
            )
        suspended = admitted is None or self.clock.now < admitted
        return client.V1Job(
            metadata=client.V1ObjectMeta(name=job.name, namespace=job.namespace),
            spec=client.V1JobSpec(template=client.V1PodTemplateSpec(), suspend=suspended),
            status=client.V1JobStatus(
                active=sum(p in ("Pending", "Running") for p in phases) or None,
                ready=sum(p == "Running" for p in phases) or None,
                succeeded=sum(p == "Succeeded" for p in phases) or None,
                failed=sum(p == "Failed" for p in phases) or None,
                conditions=conditions or None,
            ),
        )

    def pod_models(self, job: _Job) -> list[client.V1Pod]:
        container = job.spec["template"]["spec"]["containers"][0]["name"]
        pods = []
        for index, phase, script, since in self.pod_states(job):
            scheduled = script.schedulable
            node = job.node_names[index] if scheduled and index < len(job.node_names) else None
            conditions = None
            if not scheduled:
                conditions = [
                    client.V1PodCondition(
                        type="PodScheduled",
                        status="False",
                        reason="Unschedulable",
                        message=script.unschedulable_message,
                    )
                ]
            pods.append(
                client.V1Pod(
                    metadata=client.V1ObjectMeta(
                        name=f"{job.name}-{index}-x7k2p",
                        namespace=job.namespace,
                        labels={JOB_NAME_LABEL: job.name, INDEX_LABEL: str(index)},
                        creation_timestamp=EPOCH + datetime.timedelta(seconds=since),
                    ),
                    spec=client.V1PodSpec(
                        containers=[client.V1Container(name=container)], node_name=node
                    ),
                    status=client.V1PodStatus(phase=phase, conditions=conditions),
                )
            )
        return pods

    def log_of(self, pod_name: str, namespace: str) -> str:
        for job in self.jobs.values():
            prefix = f"{job.name}-"
            if job.namespace == namespace and pod_name.startswith(prefix):
                index = int(pod_name[len(prefix) :].split("-")[0])
                return job.script.pod(index).log
        raise api_error(404, "Not Found", f'pods "{pod_name}" not found')


def deployment(namespace: str, name: str, replicas: int = 1, available: int = 1) -> Any:
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(),
            template=client.V1PodTemplateSpec(),
        ),
        status=client.V1DeploymentStatus(
            replicas=replicas,
            available_replicas=available or None,
            conditions=[
                client.V1DeploymentCondition(
                    type="Available",
                    status="True" if available >= replicas else "False",
                    reason="MinimumReplicasAvailable"
                    if available >= replicas
                    else "MinimumReplicasUnavailable",
                )
            ],
        ),
    )


def daemon_set(
    namespace: str, name: str, desired: int, ready: int, release: str | None = None
) -> Any:
    """A DaemonSet; `release`: the Helm release that installed it (Helm's annotation)."""
    return client.V1DaemonSet(
        metadata=client.V1ObjectMeta(
            name=name, namespace=namespace, annotations={HELM_RELEASE: release} if release else None
        ),
        spec=client.V1DaemonSetSpec(
            selector=client.V1LabelSelector(), template=client.V1PodTemplateSpec()
        ),
        status=client.V1DaemonSetStatus(
            desired_number_scheduled=desired,
            current_number_scheduled=desired,
            number_misscheduled=0,
            number_ready=ready,
            number_available=ready or None,
            number_unavailable=(desired - ready) or None,
            updated_number_scheduled=desired,
        ),
    )


def node_pod(
    namespace: str,
    name: str,
    node: str,
    labels: dict[str, str] | None = None,
    phase: str = "Running",
    grace_s: int = 300,
) -> client.V1Pod:
    """A pod scheduled on `node` (what the kubelet runs there), for `FakeCluster.pods`."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, labels=labels or {}),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="main")],
            node_name=node,
            termination_grace_period_seconds=grace_s,
        ),
        status=client.V1PodStatus(phase=phase),
    )


def cluster_queue(
    name: str, active: bool = True, reason: str = "Ready", message: str = "Can admit new workloads"
) -> dict[str, Any]:
    """A Kueue ClusterQueue as the API returns it (a dict: a custom resource)."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "status": {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True" if active else "False",
                    "reason": reason,
                    "message": message,
                }
            ]
        },
    }


def _condition(kind: str, reason: str | None = None, message: str | None = None) -> Any:
    return client.V1JobCondition(type=kind, status="True", reason=reason, message=message)


class _Core:
    def __init__(self, cluster: FakeCluster) -> None:
        self.c = cluster

    def list_node(self, label_selector: str = "", **_: Any) -> client.V1NodeList:
        self.c._call("CoreV1Api", "list_node", {"label_selector": label_selector, **_})
        if not label_selector:
            return client.V1NodeList(items=[n.model() for n in self.c.nodes])
        key, _, value = label_selector.partition("=")
        assert key == "llm-platform/pool", label_selector
        return client.V1NodeList(items=[n.model() for n in self.c.nodes if n.pool == value])

    def patch_node(self, name: str, body: dict[str, Any], **kwargs: Any) -> client.V1Node:
        """A strategic-merge patch of the fields a quarantine sets: spec.unschedulable,
        spec.taints (a list without a merge key, so it replaces the node's), annotations
        (merged); metadata.resourceVersion, when given, must be the node's (else 409)."""
        self.c._call("CoreV1Api", "patch_node", {"name": name, "body": body, **kwargs})
        node = next((n for n in self.c.nodes if n.name == name), None)
        if node is None:
            raise api_error(404, "Not Found", f'nodes "{name}" not found')
        metadata = body.get("metadata", {})
        assert set(metadata) <= {"resourceVersion", "annotations"}, metadata
        assert set(body.get("spec", {})) <= {"unschedulable", "taints"}, body
        version = metadata.get("resourceVersion")
        if version is not None and version != str(node.version):
            raise api_error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on nodes "{name}": the object has been modified',
            )
        spec = body.get("spec", {})
        if "unschedulable" in spec:
            node.cordoned = bool(spec["unschedulable"])
        if "taints" in spec:
            for taint in spec["taints"]:
                assert set(taint) <= {"key", "value", "effect", "timeAdded"}, taint
                assert taint["effect"] in ("NoSchedule", "PreferNoSchedule", "NoExecute"), taint
            node.taints = [(t["key"], t.get("value"), t["effect"]) for t in spec["taints"]]
        node.annotations.update(metadata.get("annotations", {}))
        node.version += 1
        self.c.node_patches.append((name, json.loads(json.dumps(body))))
        return node.model()

    def list_pod_for_all_namespaces(
        self, field_selector: str = "", label_selector: str = "", **kwargs: Any
    ) -> client.V1PodList:
        self.c._call(
            "CoreV1Api",
            "list_pod_for_all_namespaces",
            {"field_selector": field_selector, "label_selector": label_selector, **kwargs},
        )
        key, _, node = field_selector.partition("=")
        assert key == "spec.nodeName", field_selector
        wanted = dict(term.split("=", 1) for term in label_selector.split(",") if label_selector)
        items = [
            p
            for p in self.c.pods
            if p.spec.node_name == node
            and all((p.metadata.labels or {}).get(k) == v for k, v in wanted.items())
        ]
        return client.V1PodList(items=items)

    def create_namespaced_pod_eviction(
        self, name: str, namespace: str, body: Any, **kwargs: Any
    ) -> Any:
        """The Eviction API: 429 where a PodDisruptionBudget allows no disruption; otherwise
        the pod is deleted gracefully (deletionTimestamp set, its own grace period runs)."""
        self.c._call(
            "CoreV1Api",
            "create_namespaced_pod_eviction",
            {"name": name, "namespace": namespace, "body": body, **kwargs},
        )
        assert isinstance(body, client.V1Eviction), body
        assert (body.metadata.name, body.metadata.namespace) == (name, namespace), body
        pod = next(
            (
                p
                for p in self.c.pods
                if (p.metadata.namespace, p.metadata.name) == (namespace, name)
            ),
            None,
        )
        if pod is None:
            raise api_error(404, "Not Found", f'pods "{name}" not found')
        if (namespace, name) in self.c.pdb_blocked:
            raise api_error(
                429,
                "Too Many Requests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            )
        pod.metadata.deletion_timestamp = EPOCH + datetime.timedelta(seconds=self.c.clock.now)
        self.c.evictions.append((namespace, name))
        return {"kind": "Status", "status": "Success"}

    def read_namespaced_secret(self, name: str, namespace: str, **_: Any) -> client.V1Secret:
        self.c._call("CoreV1Api", "read_namespaced_secret", _)
        if (namespace, name) not in self.c.secrets:
            raise api_error(404, "Not Found", f'secrets "{name}" not found')
        return client.V1Secret(metadata=client.V1ObjectMeta(name=name, namespace=namespace))

    def create_namespaced_service(self, namespace: str, body: dict[str, Any], **_: Any) -> Any:
        self.c._call("CoreV1Api", "create_namespaced_service", _)
        assert body["metadata"]["namespace"] == namespace
        self.c.services[(namespace, body["metadata"]["name"])] = body
        self.c.created.append(body)
        return body

    def delete_namespaced_service(self, name: str, namespace: str, **_: Any) -> Any:
        self.c._call("CoreV1Api", "delete_namespaced_service", _)
        if self.c.services.pop((namespace, name), None) is None:
            raise api_error(404, "Not Found", f'services "{name}" not found')
        self.c.deleted.append(("Service", namespace, name, None))

    def list_namespaced_pod(self, namespace: str, label_selector: str = "", **_: Any) -> Any:
        self.c._call("CoreV1Api", "list_namespaced_pod", {"label_selector": label_selector, **_})
        key, _, name = label_selector.partition("=")
        assert key == JOB_NAME_LABEL, label_selector
        job = self.c.jobs.get((namespace, name))
        return client.V1PodList(items=self.c.pod_models(job) if job else [])

    def read_namespaced_pod_log(
        self, name: str, namespace: str, container: str | None = None, **kwargs: Any
    ) -> Any:
        self.c._call("CoreV1Api", "read_namespaced_pod_log", {"container": container, **kwargs})
        text = self.c.log_of(name, namespace)
        if kwargs.get("_preload_content", True) is False:
            return urllib3.HTTPResponse(body=text.encode(), preload_content=True)
        try:  # what ApiClient.deserialize does with a `str` response
            return str(json.loads(text))
        except ValueError:
            return text


class _Batch:
    def __init__(self, cluster: FakeCluster) -> None:
        self.c = cluster

    def create_namespaced_job(self, namespace: str, body: dict[str, Any], **_: Any) -> Any:
        self.c._call("BatchV1Api", "create_namespaced_job", _)
        key = (namespace, body["metadata"]["name"])
        assert body["metadata"]["namespace"] == namespace
        if key in self.c.jobs:
            raise api_error(409, "Conflict", f'jobs.batch "{key[1]}" already exists')
        self.c.jobs[key] = _Job(
            json.loads(json.dumps(body)),
            self.c.clock.now,
            self.c._script(key[1]),
            self.c._pool_nodes(body),
        )
        self.c.created.append(body)
        return body

    def read_namespaced_job(self, name: str, namespace: str, **_: Any) -> client.V1Job:
        self.c._call("BatchV1Api", "read_namespaced_job", _)
        job = self.c.jobs.get((namespace, name))
        if job is None:
            raise api_error(404, "Not Found", f'jobs.batch "{name}" not found')
        return self.c.job_model(job)

    def delete_namespaced_job(
        self, name: str, namespace: str, propagation_policy: str | None = None, **_: Any
    ) -> Any:
        self.c._call(
            "BatchV1Api", "delete_namespaced_job", {"propagation_policy": propagation_policy, **_}
        )
        if self.c.jobs.pop((namespace, name), None) is None:
            raise api_error(404, "Not Found", f'jobs.batch "{name}" not found')
        self.c.deleted.append(("Job", namespace, name, propagation_policy))


class _Apps:
    def __init__(self, cluster: FakeCluster) -> None:
        self.c = cluster

    def read_namespaced_deployment(self, name: str, namespace: str, **_: Any) -> Any:
        self.c._call("AppsV1Api", "read_namespaced_deployment", _)
        found = self.c.deployments.get((namespace, name))
        if found is None:
            raise api_error(404, "Not Found", f'deployments.apps "{name}" not found')
        return found

    def read_namespaced_daemon_set(self, name: str, namespace: str, **_: Any) -> Any:
        self.c._call("AppsV1Api", "read_namespaced_daemon_set", _)
        found = self.c.daemon_sets.get((namespace, name))
        if found is None:
            raise api_error(404, "Not Found", f'daemonsets.apps "{name}" not found')
        return found

    def list_namespaced_daemon_set(self, namespace: str, **_: Any) -> Any:
        self.c._call("AppsV1Api", "list_namespaced_daemon_set", _)
        items = [d for (ns, _name), d in sorted(self.c.daemon_sets.items()) if ns == namespace]
        return client.V1DaemonSetList(items=items)


class _Custom:
    def __init__(self, cluster: FakeCluster) -> None:
        self.c = cluster

    def get_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, **kwargs: Any
    ) -> Any:
        self.c._call(
            "CustomObjectsApi",
            "get_cluster_custom_object",
            {"group": group, "version": version, "plural": plural, "name": name, **kwargs},
        )
        found = self.c.cluster_objects.get((plural, name))
        if found is None:
            raise api_error(404, "Not Found", f'{plural}.{group} "{name}" not found')
        return found
