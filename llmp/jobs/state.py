"""What a job's objects on the cluster mean: one `State` (phase, detail, whether it is over).

`state_of` reads a `Snapshot`, what the cluster says about one job at one moment
(`llmp.jobs.api.snapshot` reads it), into one State:

- a TrainJob's conditions (Kubeflow Trainer v2.2.1, `trainer.kubeflow.org/v1alpha1`:
  Suspended, Complete, Failed; there is no Restarting condition: a node's container the
  kubelet starts again says it), or a RayJob's `status.jobDeploymentStatus` and Ray's
  `jobStatus`, as Kueue reads them (finished when the deployment is Complete or Failed,
  succeeded when Ray's job SUCCEEDED; KubeRay retrying it is a restart);
- the Kueue Workload made for it: QuotaReserved, the admission checks' states, Admitted
  with its ClusterQueue and flavors, Evicted/Preempted;
- its pods (pending ones say why), and rank 0's last training step.

It is a pure function, so every waiting reason is tested without a cluster; `explain`
says what a waiting job waits for and what would move it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spec.labels import JOB_KIND_LABEL


@dataclass
class Snapshot:
    """What the cluster says about one job at one moment."""

    namespace: str
    name: str
    job: dict[str, Any] | None
    workload: dict[str, Any] | None = None
    pods: list[dict[str, Any]] = field(default_factory=list)
    last_step: dict[str, Any] | None = None
    max_steps: int | None = None
    """The trainer's max_steps, when the caller knows it (submit does)."""


def _conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    if not obj:
        return {}
    return {c.get("type", ""): c for c in (obj.get("status") or {}).get("conditions") or []}


def _true(conds: dict[str, dict[str, Any]], kind: str) -> bool:
    return conds.get(kind, {}).get("status") == "True"


def is_ray(job: dict[str, Any]) -> bool:
    """A data job's RayJob, not a TrainJob."""
    return job.get("kind") == "RayJob"


@dataclass(frozen=True)
class State:
    phase: str
    """created, queued, provisioning, preempted, admitted, starting, running, training,
    restarting, succeeded, failed, gone."""
    detail: str
    done: bool = False
    ok: bool = False
    waiting_for: str | None = None
    """While it waits: quota, capacity or preemption."""
    cluster_queue: str | None = None
    flavors: tuple[str, ...] = ()


def why_queued(message: str) -> tuple[str, str]:
    """Kueue's QuotaReserved message -> (quota | capacity, one sentence)."""
    text = " ".join(message.split())
    if "maximum capacity" in text or "unavailable in ClusterQueue" in text:
        return "quota", f"it can never fit its queue: {text}"
    if "insufficient" in text or "quota" in text:
        return "quota", f"the queue's quota and what the cohort lends are in use: {text}"
    if "inactive" in text.lower() or "stopped" in text.lower():
        return "quota", f"the queue does not admit now: {text}"
    return "quota", text or "waiting for Kueue to reserve quota"


def _admission(wl: dict[str, Any]) -> tuple[str | None, tuple[str, ...]]:
    adm = (wl.get("status") or {}).get("admission") or {}
    flavors: set[str] = set()
    for ps in adm.get("podSetAssignments") or []:
        flavors.update((ps.get("flavors") or {}).values())
    return adm.get("clusterQueue"), tuple(sorted(flavors))


def _pending_reason(pod: dict[str, Any]) -> str:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return " ".join(str(cond.get("message") or cond.get("reason") or "").split())
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting:
            return f"{waiting.get('reason', '')} {waiting.get('message', '')}".strip()
    return ""


def _step_detail(step: dict[str, Any], max_steps: int | None = None) -> str:
    parts = [f"step {step.get('step')}" + (f"/{max_steps}" if max_steps else "")]
    if step.get("loss") is not None:
        parts.append(f"loss {step['loss']}")
    if step.get("tokens_per_s"):
        parts.append(f"{step['tokens_per_s']:,.0f} tokens/s")
    return ", ".join(parts)


def _is_training(job: dict[str, Any]) -> bool:
    """A training run (it resumes from its checkpoints), not a lifecycle step (which starts
    over): its pods' `llm-platform/job-kind`."""
    kind = "training"
    for patch in (job.get("spec") or {}).get("runtimePatches") or []:
        spec = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        for rjob in (spec.get("spec") or {}).get("replicatedJobs") or []:
            template = (((rjob.get("template") or {}).get("spec") or {}).get("template")) or {}
            labels = (template.get("metadata") or {}).get("labels") or {}
            kind = labels.get(JOB_KIND_LABEL, kind)
    return bool(kind == "training")


def _ray_state(job: dict[str, Any]) -> tuple[State | None, dict[str, dict[str, Any]]]:
    """A RayJob's end (as Kueue reads it: rayjob.Finished), or the conditions the rest of
    `state_of` reads (`Restarting` while KubeRay retries it)."""
    status = job.get("status") or {}
    deployment = status.get("jobDeploymentStatus") or ""
    ray = status.get("jobStatus") or ""
    message = " ".join(str(status.get("message") or status.get("reason") or "").split())
    if deployment in ("Complete", "Failed") or deployment == "ValidationFailed":
        if ray == "SUCCEEDED" and deployment == "Complete":
            return State(
                "succeeded", "the Ray job SUCCEEDED; its cluster is deleted", True, True
            ), {}
        detail = f"{deployment}" + (f" (Ray job {ray})" if ray else "")
        return State("failed", f"{detail}: {message}" if message else detail, done=True), {}
    conds: dict[str, dict[str, Any]] = {}
    if deployment == "Retrying":
        conds["Restarting"] = {"status": "True", "message": message or "the Ray job failed"}
    return None, conds


def _restarted_pod(pods: list[dict[str, Any]]) -> str | None:
    """A TrainJob has no Restarting condition: a node's container the kubelet is starting
    again (restarted, not running now) says it."""
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            restarts = int(cs.get("restartCount") or 0)
            if restarts and "running" not in (cs.get("state") or {}):
                name = (pod.get("metadata") or {}).get("name", "?")
                return f"pod {name} restarted {restarts} time" + ("s" if restarts > 1 else "")
    return None


def state_of(snap: Snapshot) -> State:
    """The job's one state, from its TrainJob or RayJob, its Kueue Workload and its pods."""
    job, wl = snap.job, snap.workload
    if job is None:
        return State("gone", f"no TrainJob {snap.namespace}/{snap.name}", done=True)
    ray = is_ray(job)
    if ray:
        ended, jconds = _ray_state(job)
        if ended is not None:
            return ended
    resumes = not ray and _is_training(job)
    jconds = jconds if ray else _conditions(job)
    if _true(jconds, "Complete"):
        nodes = sum((p.get("status") or {}).get("phase") == "Succeeded" for p in snap.pods)
        done = f"{nodes} nodes succeeded" if nodes else "the TrainJob is complete"
        if snap.last_step:
            done += f"; last {_step_detail(snap.last_step, snap.max_steps)}"
        return State("succeeded", done, done=True, ok=True)
    if _true(jconds, "Failed"):
        msg = jconds["Failed"].get("message") or jconds["Failed"].get("reason") or ""
        return State("failed", " ".join(str(msg).split()) or "the job failed", done=True)
    if wl is None:
        return State("created", "suspended until Kueue creates its workload and admits it")
    wconds = _conditions(wl)
    queue, flavors = _admission(wl)
    if not _true(wconds, "QuotaReserved"):
        evicted = wconds.get("Evicted") if _true(wconds, "Evicted") else None
        preempted = wconds.get("Preempted") if _true(wconds, "Preempted") else None
        if evicted is not None or preempted is not None:
            cond = preempted or evicted or {}
            msg = " ".join(str(cond.get("message") or cond.get("reason") or "").split())
            return State(
                "preempted",
                f"evicted ({cond.get('reason', '')}): {msg}; requeued, it "
                + (
                    "resumes from its last checkpoint when admitted again"
                    if resumes
                    else "starts over when admitted again"
                ),
                waiting_for="preemption",
            )
        message = (wconds.get("QuotaReserved") or {}).get("message") or ""
        kind, sentence = why_queued(str(message))
        return State("queued", sentence, waiting_for=kind)
    if not _true(wconds, "Admitted"):
        checks = (wl.get("status") or {}).get("admissionChecks") or []
        waiting = [c for c in checks if c.get("state") != "Ready"]
        if waiting:
            text = "; ".join(
                f"{c.get('name')} {c.get('state')}: {' '.join(str(c.get('message', '')).split())}"
                for c in waiting
            )
            return State(
                "provisioning",
                f"quota reserved on {', '.join(flavors) or '?'}; waiting for nodes ({text})",
                waiting_for="capacity",
                cluster_queue=queue,
                flavors=flavors,
            )
        return State("admitted", "quota reserved; admission pending", cluster_queue=queue)
    where = f"ClusterQueue {queue}, flavor {', '.join(flavors)}"
    if not ray and "Restarting" not in jconds:
        restarted = _restarted_pod(snap.pods)
        if restarted is not None:
            jconds["Restarting"] = {"status": "True", "message": restarted}
    if _true(jconds, "Restarting"):
        msg = jconds["Restarting"].get("message") or "a worker failed"
        return State(
            "restarting",
            f"{' '.join(str(msg).split())}; "
            + (
                "the workers re-rendezvous and resume from the last checkpoint"
                if resumes
                else "its pod starts over"
            ),
            cluster_queue=queue,
            flavors=flavors,
        )
    phases = [(p.get("status") or {}).get("phase", "Pending") for p in snap.pods]
    running = phases.count("Running")
    if not snap.pods:
        return State("admitted", where, cluster_queue=queue, flavors=flavors)
    if running < len(phases):
        pending = next(
            (p for p in snap.pods if p.get("status", {}).get("phase") == "Pending"), None
        )
        why = _pending_reason(pending) if pending is not None else ""
        capacity = "Insufficient" in why or "didn't match" in why or "untolerated" in why
        return State(
            "starting",
            f"{running}/{len(phases)} pods running" + (f"; pending: {why}" if why else ""),
            waiting_for="capacity" if capacity else None,
            cluster_queue=queue,
            flavors=flavors,
        )
    nodes = sorted({p.get("spec", {}).get("nodeName") or "?" for p in snap.pods})
    if ray:
        status = job.get("status") or {}
        return State(
            "running",
            f"Ray job {status.get('jobStatus') or 'PENDING'}; {running}/{len(phases)} pods "
            f"running on {len(nodes)} nodes",
            cluster_queue=queue,
            flavors=flavors,
        )
    if snap.last_step is not None:
        return State(
            "training",
            _step_detail(snap.last_step, snap.max_steps),
            cluster_queue=queue,
            flavors=flavors,
        )
    return State(
        "running",
        f"{running}/{len(phases)} pods running on {len(nodes)} nodes ({', '.join(nodes[:3])}"
        + (", ..." if len(nodes) > 3 else "")
        + ")",
        cluster_queue=queue,
        flavors=flavors,
    )


def explain(state: State) -> list[str]:
    """What a waiting job is waiting for, and what would move it (for `llmp job status`)."""
    if state.waiting_for == "quota":
        return [
            "waiting for quota: Kueue admits it when the tenant's ClusterQueue, with what the",
            "cohort lends, holds every node's GPUs; running jobs finishing, a smaller",
            "nodes.max or a higher priority (which may preempt lower ones) move it.",
        ]
    if state.waiting_for == "capacity":
        return [
            "waiting for capacity: the quota is there but the nodes are not (yet); an elastic",
            "pool scales up for it (all nodes or none); a fixed pool waits for nodes to be",
            "repaired, replaced or freed.",
        ]
    if state.waiting_for == "preemption":
        return [
            "preempted: a job with a better claim (the quota's owner, or a higher priority)",
            "took the GPUs; it is requeued and resumes from its last checkpoint.",
        ]
    return []
