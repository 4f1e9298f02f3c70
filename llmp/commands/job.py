"""`llmp job`: submit a job file, follow it, list, explain, read logs, cancel."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from llmp import console
from llmp.commands import options

if TYPE_CHECKING:
    from llmp.clients.kube import KubeApis
    from llmp.jobs.state import State

app = typer.Typer(
    help="Run training jobs on a stack: submit a job file, follow, list, status, logs, cancel.",
    no_args_is_help=True,
)

Namespace = Annotated[
    str | None,
    typer.Option(
        "--namespace", "-n", metavar="NS", help="The tenant's namespace (default: find it)."
    ),
]
Name = Annotated[str, typer.Argument(help="The job's name (the job file's `name`).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def _apis(kubeconfig: str | None, context: str | None) -> KubeApis:
    from llmp.clients.kube import load_apis

    return load_apis(kubeconfig, context)


def _state_json(state: State) -> dict[str, Any]:
    return {
        "phase": state.phase,
        "detail": state.detail,
        "done": state.done,
        "ok": state.ok,
        "waiting_for": state.waiting_for,
        "cluster_queue": state.cluster_queue,
        "flavors": list(state.flavors),
    }


@app.command("submit")
def submit(
    file: Annotated[str, typer.Argument(metavar="FILE", help="The job file (YAML).")],
    stack: Annotated[
        str | None, typer.Option("--stack", help="Another stack than the file's `stack`.")
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Check and print the manifests (YAML); touch no cluster."),
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", help="Apply and return; do not follow the job.")
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", metavar="MIN", help="Stop following after MIN minutes."),
    ] = None,
    kubeconfig: options.Kubeconfig = None,
    context: options.Context = None,
    config: options.ConfigFile = None,
) -> None:
    """Check a job file against its stack, apply it, and follow it to its end.

    A training run (kind pretrain, sft, dpo, grpo) or a lifecycle step (promote, quantize).
    Checked offline first (the same checks with --dry-run): the pool is one of the
    stack's, the tenant has a quota on it, the nodes fit the pool, the namespace has the
    FSx claim, and Kueue admits the job against the stack's queues. Then the namespace,
    claim and LocalQueue (and, for promote.from_job, the training job's ConfigMap) are
    checked on the cluster, the ConfigMap and TrainJob are applied server-side, and the
    job is followed: queued, provisioning, admitted (which ClusterQueue and flavor), pods
    running, training steps, and its end. Ctrl-C stops following; the job keeps running.

    Exit 0: succeeded (or applied, with --detach; checked, with --dry-run); 1: failed or
    timed out; 2: bad input (the file, the stack, a cluster that is not the stack's).
    """
    from llmp.jobs import api as job_api
    from llmp.jobs import manifests_yaml, prepare

    prepared = prepare(file, stack, config)
    for line in prepared.summary():
        console.line(line, to=console.err)
    if dry_run:
        console.write(manifests_yaml(prepared))
        return
    apis = _apis(kubeconfig, context)
    job = prepared.job
    for applied in job_api.submit(apis, prepared.manifests, job.queue, prepared.from_job):
        console.line(f"applied {applied} (server-side, field manager {job_api.FIELD_MANAGER})")
    if detach:
        return
    try:
        job_api.follow(
            apis,
            job.namespace,
            job.name,
            emit=console.line,
            timeout_s=None if timeout is None else timeout * 60,
            max_steps=prepared.max_steps,
        )
    except KeyboardInterrupt:
        console.line(
            f"stopped following; the job goes on: llmp job status {job.name} -n {job.namespace}",
            to=console.err,
        )
        raise typer.Exit(130) from None


@app.command("status")
def status(
    name: Name,
    namespace: Namespace = None,
    as_json: AsJson = False,
    kubeconfig: options.Kubeconfig = None,
    context: options.Context = None,
) -> None:
    """Where a job is, and why it waits (quota, capacity, preemption).

    Exit 0: the job is running or succeeded; 1: it failed; 2: no such job.
    """
    from llmp.jobs import api as job_api
    from llmp.jobs.state import explain, state_of

    apis = _apis(kubeconfig, context)
    ns = job_api.find_namespace(apis, name, namespace)
    snap = job_api.snapshot(apis, ns, name)
    state = state_of(snap)
    if state.phase == "gone":
        raise job_api.JobError(f"no job {name} in namespace {ns}")
    if as_json:
        console.write(json.dumps({"namespace": ns, "name": name, **_state_json(state)}) + "\n")
    else:
        console.line(f"job {ns}/{name}: {state.phase}")
        console.line(job_api.wrapped("  ", state.detail, 2))
        for line in explain(state):
            console.line(f"  {line}")
    if state.done and not state.ok:
        raise typer.Exit(1)


@app.command("list")
def list_(
    namespace: Namespace = None,
    as_json: AsJson = False,
    kubeconfig: options.Kubeconfig = None,
    context: options.Context = None,
) -> None:
    """The training jobs and their states (every namespace unless --namespace)."""
    from llmp.jobs import api as job_api

    jobs = job_api.list_jobs(_apis(kubeconfig, context), namespace)
    if as_json:
        rows = [
            {
                "namespace": j.namespace,
                "name": j.name,
                "nodes": j.nodes,
                "created": j.created,
                **_state_json(j.state),
            }
            for j in jobs
        ]
        console.write(json.dumps(rows, indent=2) + "\n")
        return
    if not jobs:
        console.line("no jobs" + (f" in namespace {namespace}" if namespace else ""))
        return
    width = max(len(f"{j.namespace}/{j.name}") for j in jobs)
    console.line(f"{'JOB':<{width}}  {'NODES':<7} {'STATE':<12} DETAIL")
    room = max(20, job_api.WIDTH - width - 23)
    for j in jobs:
        detail = j.state.detail
        detail = detail if len(detail) <= room else detail[: room - 3] + "..."
        console.line(
            f"{j.namespace + '/' + j.name:<{width}}  {j.nodes:<7} {j.state.phase:<12} {detail}"
        )


@app.command("logs")
def logs(
    name: Name,
    namespace: Namespace = None,
    worker: Annotated[int, typer.Option("--worker", help="Which worker (0: rank 0).")] = 0,
    tail: Annotated[
        int | None, typer.Option("--tail", metavar="N", help="Only the last N lines.")
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Stream new lines.")] = False,
    kubeconfig: options.Kubeconfig = None,
    context: options.Context = None,
) -> None:
    """A worker's log (rank 0's JSON events by default); a data job's driver output."""
    from llmp.jobs import api as job_api

    apis = _apis(kubeconfig, context)
    ns = job_api.find_namespace(apis, name, namespace)
    pod, container = job_api.log_target(apis, ns, name, worker)
    response = job_api.read_log(apis, ns, pod, tail=tail, follow=follow, container=container)
    if response is None:
        raise job_api.JobError(f"no log for {ns}/{pod}: the pod does not exist or has not started")
    if follow:
        for chunk in response.stream():
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        return
    sys.stdout.buffer.write(response.data)


@app.command("cancel")
def cancel(
    name: Name,
    namespace: Namespace = None,
    kubeconfig: options.Kubeconfig = None,
    context: options.Context = None,
) -> None:
    """Delete the job: its pods stop (SIGTERM: rank 0 checkpoints), its quota is freed."""
    from llmp.jobs import api as job_api

    apis = _apis(kubeconfig, context)
    ns = job_api.find_namespace(apis, name, namespace)
    for deleted in job_api.cancel(apis, ns, name):
        console.line(f"deleted {deleted}")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="job")
