"""A Kubernetes API server over HTTP on 127.0.0.1, for `llmp job` through the real client.

`tests/llmp/kube_fake.py` fakes the client's methods; this fakes the server, so what the
official client puts on the wire (paths, query strings, the server-side apply content
type and field manager, JSON bodies) is what is checked. It serves the few resources
`llmp job` touches: namespaces, PersistentVolumeClaims, ConfigMaps, pods and their logs,
Kueue LocalQueues and Workloads, and Kubeflow Trainer v2 TrainJobs. Objects live in a dict; a
`Cluster` script, driven by the test's fake clock, plays the controllers: Kueue making a
Workload, reserving quota, waiting on its provisioning check and admitting; the training
operator un-suspending the job and making pods; the pods running and rank 0 logging steps;
the job succeeding.

The server listens on 127.0.0.1 only, on a port the kernel picks, in a daemon thread, and
`stop()` shuts it down (the test's fixture always calls it).
"""

from __future__ import annotations

import datetime
import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

EPOCH = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
APPLY = "application/apply-patch+yaml"

_CORE = re.compile(
    r"^/api/v1/namespaces/(?P<ns>[^/]+)(?:/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?P<log>/log)?)?)?$"
)
_GROUP = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?$"
)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None


@dataclass
class Store:
    """Objects by (api prefix, namespace, plural, name)."""

    objects: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)

    def put(self, api: str, ns: str, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", ns)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", EPOCH.isoformat().replace("+00:00", "Z"))
        self.objects[(api, ns, plural, meta["name"])] = obj
        return obj

    def get(self, api: str, ns: str, plural: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((api, ns, plural, name))

    def items(self, api: str, ns: str | None, plural: str) -> list[dict[str, Any]]:
        return [
            o
            for (a, n, p, _), o in sorted(self.objects.items())
            if a == api and p == plural and (ns is None or n == ns)
        ]


class FakeApiServer:
    """The HTTP server; `on_request` runs before each request is answered (the script)."""

    def __init__(self, store: Store, on_request: Callable[[], None] = lambda: None) -> None:
        self.store = store
        self.on_request = on_request
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self) -> None:
                url = urlparse(self.path)
                query = parse_qs(url.query)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with server.lock:
                    server.store.requests.append(
                        Request(self.command, url.path, query, self.headers.get("Content-Type"))
                    )
                    server.on_request()
                    code, answer, ctype = server.answer(
                        self.command, url.path, query, body, self.headers.get("Content-Type")
                    )
                self._send(code, answer, ctype)

            do_GET = do_PATCH = do_DELETE = do_POST = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": {"token": "fake-token"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                    "current-context": "fake",
                }
            )
        )
        return path

    # --- routing ----------------------------------------------------------------------

    def answer(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes, ctype: str | None
    ) -> tuple[int, Any, str]:
        core = _CORE.match(path)
        group = _GROUP.match(path)
        if core:
            ns, plural, name, log = core["ns"], core["plural"], core["name"], core["log"]
            if plural is None:
                if ("v1", "", "namespaces", ns) in self.store.objects:
                    return 200, self.store.objects[("v1", "", "namespaces", ns)], "application/json"
                return (
                    404,
                    _status(404, "NotFound", f'namespaces "{ns}" not found'),
                    "application/json",
                )
            if log:
                text = self.store.logs.get((ns, name or ""))
                if text is None:
                    return (
                        404,
                        _status(404, "NotFound", f'pods "{name}" not found'),
                        "application/json",
                    )
                tail = query.get("tailLines")
                lines = text.splitlines(keepends=True)
                if tail:
                    lines = lines[-int(tail[0]) :]
                return 200, "".join(lines).encode(), "text/plain"
            return self._object(method, "v1", ns, plural, name, query, body, ctype)
        if group:
            api = f"{group['group']}/{group['version']}"
            return self._object(
                method, api, group["ns"], group["plural"], group["name"], query, body, ctype
            )
        return 404, _status(404, "NotFound", f"no route {path}"), "application/json"

    def _object(
        self,
        method: str,
        api: str,
        ns: str | None,
        plural: str,
        name: str | None,
        query: dict[str, list[str]],
        body: bytes,
        ctype: str | None,
    ) -> tuple[int, Any, str]:
        js = "application/json"
        if name is None:
            if method != "GET":
                return 405, _status(405, "MethodNotAllowed", method), js
            items = self.store.items(api, ns, plural)
            for selector in query.get("labelSelector", []):
                key, _, value = selector.partition("=")
                items = [o for o in items if (o["metadata"].get("labels") or {}).get(key) == value]
            return 200, {"kind": "List", "apiVersion": api, "metadata": {}, "items": items}, js
        assert ns is not None
        if method == "GET":
            obj = self.store.get(api, ns, plural, name)
            if obj is None:
                return 404, _status(404, "NotFound", f'{plural} "{name}" not found'), js
            return 200, obj, js
        if method == "PATCH":
            if ctype != APPLY:
                return 415, _status(415, "UnsupportedMediaType", f"{ctype}"), js
            if not query.get("fieldManager"):
                return 422, _status(422, "Invalid", "fieldManager is required for apply"), js
            obj = json.loads(body)
            if obj["metadata"].get("name") != name or obj["metadata"].get("namespace") != ns:
                return 400, _status(400, "BadRequest", "name or namespace does not match"), js
            existing = self.store.get(api, ns, plural, name)
            if existing is not None:
                obj["metadata"]["uid"] = existing["metadata"]["uid"]
                obj["status"] = existing.get("status", {})
            return 200, self.store.put(api, ns, plural, obj), js
        if method == "DELETE":
            obj = self.store.objects.pop((api, ns, plural, name), None)
            if obj is None:
                return 404, _status(404, "NotFound", f'{plural} "{name}" not found'), js
            return 200, {"kind": "Status", "status": "Success"}, js
        return 405, _status(405, "MethodNotAllowed", method), js


# --- the controllers, scripted -----------------------------------------------------------


@dataclass
class Script:
    """When each controller acts, in seconds after the TrainJob appears."""

    workload_at: float = 5
    quota_at: float | None = 30
    """QuotaReserved; None: never (the cohort's quota stays in use)."""
    provisioned_at: float | None = 60
    """The ProvisioningRequest check turns Ready; None: no check on this flavor."""
    pods_at: float = 70
    running_at: float = 100
    steps_per_s: float = 0.5
    succeeded_at: float | None = 160
    preempted_at: float | None = None
    cluster_queue: str = "chat"
    flavor: str = "pool-h100"
    gpu_resource: str = "nvidia.com/gpu"
    quota_message: str = (
        "couldn't assign flavors to pod set node: insufficient unused quota for "
        "nvidia.com/gpu in flavor pool-h100, 8 more needed"
    )


class Cluster:
    """Plays Kueue, the Trainer and JobSet, the scheduler and rank 0 on the store."""

    def __init__(self, store: Store, clock: Callable[[], float], script: Script) -> None:
        self.store, self.clock, self.script = store, clock, script
        self.born: dict[str, float] = {}

    def tenant(self, ns: str, *, claim: bool = True, queue: bool = True) -> None:
        self.store.put("v1", "", "namespaces", {"metadata": {"name": ns}})
        if claim:
            self.store.put(
                "v1",
                ns,
                "persistentvolumeclaims",
                {"metadata": {"name": "fsx-lustre"}, "status": {"phase": "Bound"}},
            )
        if queue:
            self.store.put(
                "kueue.x-k8s.io/v1beta2",
                ns,
                "localqueues",
                {"metadata": {"name": "default"}, "spec": {"clusterQueue": ns}},
            )

    def __call__(self) -> None:
        for (api, ns, plural, name), job in list(self.store.objects.items()):
            if api == "trainer.kubeflow.org/v1alpha1" and plural == "trainjobs":
                key = f"{ns}/{name}"
                self.born.setdefault(key, self.clock())
                self._drive(ns, name, job, self.clock() - self.born[key])

    def _drive(self, ns: str, name: str, job: dict[str, Any], age: float) -> None:
        s = self.script
        wl_name = f"trainjob-{name}-1a2b3"
        replicas = job["spec"]["trainer"]["numNodes"]
        if age < s.workload_at:
            return
        conds: list[dict[str, Any]] = []
        status: dict[str, Any] = {"conditions": conds}
        wl = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": wl_name,
                "ownerReferences": [
                    {
                        "kind": "TrainJob",
                        "name": name,
                        "uid": job["metadata"]["uid"],
                        "apiVersion": "trainer.kubeflow.org/v1alpha1",
                    }
                ],
            },
            "status": status,
        }
        preempted = s.preempted_at is not None and age >= s.preempted_at
        reserved = s.quota_at is not None and age >= s.quota_at and not preempted
        if preempted:
            conds.append(
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": s.quota_message,
                }
            )
            conds.append(
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": "Preempted",
                    "message": "Preempted to accommodate a workload (UID: 42) due to "
                    "reclamation within the cohort",
                }
            )
            conds.append(
                {
                    "type": "Preempted",
                    "status": "True",
                    "reason": "InCohortReclamation",
                    "message": "Preempted to accommodate a workload (UID: 42) due to "
                    "reclamation within the cohort",
                }
            )
        elif not reserved:
            conds.append(
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": s.quota_message,
                }
            )
        else:
            conds.append({"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"})
            status["admission"] = {
                "clusterQueue": s.cluster_queue,
                "podSetAssignments": [
                    {
                        "name": "node",
                        "count": replicas,
                        "flavors": {"cpu": s.flavor, "memory": s.flavor, s.gpu_resource: s.flavor},
                    }
                ],
            }
            provisioned = s.provisioned_at is None or age >= s.provisioned_at
            if s.provisioned_at is not None:
                status["admissionChecks"] = [
                    {
                        "name": "gpu-provisioning",
                        "state": "Ready" if provisioned else "Pending",
                        "message": "Provisioned"
                        if provisioned
                        else f"Waiting for ProvisioningRequest {wl_name}-gpu-provisioning-1 to be "
                        "provisioned (best-effort-atomic-scale-up)",
                        "lastTransitionTime": EPOCH.isoformat(),
                    }
                ]
            if provisioned:
                conds.append({"type": "Admitted", "status": "True", "reason": "Admitted"})
                job["spec"]["suspend"] = False
        self.store.put("kueue.x-k8s.io/v1beta2", ns, "workloads", wl)
        admitted = any(c["type"] == "Admitted" for c in conds)
        if not admitted:
            self._drop_pods(ns, name)
            return
        if age >= s.pods_at:
            running = age >= s.running_at
            done = s.succeeded_at is not None and age >= s.succeeded_at
            for i in range(replicas):
                phase = "Succeeded" if done else "Running" if running else "Pending"
                pod: dict[str, Any] = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        # The JobSet's pod: <jobset>-<replicated job>-<job index>-<completion
                        # index>-<suffix>.
                        "name": f"{name}-node-0-{i}-x{i}z9q",
                        "namespace": ns,
                        "labels": {
                            "llm-platform/job": name,
                            "batch.kubernetes.io/job-completion-index": str(i),
                            "jobset.sigs.k8s.io/jobset-name": name,
                        },
                        "creationTimestamp": "2026-12-03T10:00:00Z",
                    },
                    "spec": {
                        "containers": [{"name": "node", "image": "x"}],
                        "nodeName": f"ip-10-20-0-{10 + i}.us-west-2.compute.internal"
                        if running
                        else None,
                    },
                    "status": {
                        "phase": phase,
                        "conditions": []
                        if running
                        else [
                            {
                                "type": "PodScheduled",
                                "status": "False",
                                "reason": "Unschedulable",
                                "message": "0/3 nodes are available: 3 Insufficient "
                                "nvidia.com/gpu. "
                                "preemption: 0/3 nodes are available",
                            }
                        ],
                    },
                }
                self.store.put("v1", ns, "pods", pod)
            if running:
                steps = int((min(age, s.succeeded_at or age) - s.running_at) * s.steps_per_s)
                lines = [json.dumps({"event": "start", "world_size": replicas * 8})]
                lines += [
                    json.dumps(
                        {
                            "event": "step",
                            "step": k,
                            "loss": round(10.4 - 0.01 * k, 3),
                            "tokens_per_s": 812345.6,
                        }
                    )
                    for k in range(1, steps + 1)
                ]
                if done:
                    lines.append(
                        json.dumps({"event": "exit", "reason": "max_steps", "step": steps})
                    )
                self.store.logs[(ns, f"{name}-node-0-0-x0z9q")] = "\n".join(lines) + "\n"
            # Trainer v2.2.1: Suspended False once Kueue lets it run, Complete at the end;
            # jobsStatus counts the JobSet's child Jobs (one, `node`).
            job_conds = [{"type": "Suspended", "status": "False", "reason": "Resumed"}]
            if done:
                job_conds.append(
                    {
                        "type": "Complete",
                        "status": "True",
                        "reason": "JobsCompleted",
                        "message": "jobset completed successfully",
                    }
                )
            child = {"name": "node", "ready": 0 if done else int(running), "failed": 0}
            child.update(succeeded=int(done), active=int(not done), suspended=0)
            job["status"] = {"conditions": job_conds, "jobsStatus": [child]}

    def _drop_pods(self, ns: str, name: str) -> None:
        for key in [
            k
            for k in self.store.objects
            if k[:3] == ("v1", ns, "pods") and k[3].startswith(f"{name}-node-0-")
        ]:
            del self.store.objects[key]
