"""`llmp accept`: the acceptance jobs on the deployed cluster, judged."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from llmp import console
from llmp.commands import options
from llmp.errors import EXIT_FAILED, Failed, prefixed


def accept_command(
    stack: options.Stack,
    pool: Annotated[
        list[str] | None,
        typer.Option("--pool", metavar="POOL", help="Accept this GPU pool only (repeatable)."),
    ] = None,
    kubeconfig: options.Kubeconfig = None,
    context: options.Context = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            metavar="NS",
            help="Run the jobs here (default: per pool, the first tenant with a GPU quota on it).",
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="MIN",
            help="Minutes each job may take from its creation, queueing included (default: "
            "the DCGM level's deadline from the catalog; 30 for fabric).",
        ),
    ] = None,
    skip_fabric: Annotated[
        bool, typer.Option("--skip-fabric", help="Do not run the 2-node nccl-tests job.")
    ] = False,
    skip_dcgm: Annotated[
        bool, typer.Option("--skip-dcgm", help="Do not run the DCGM diagnostics.")
    ] = False,
    dcgm_level: Annotated[
        int | None,
        typer.Option(
            "--dcgm-level",
            metavar="LEVEL",
            help="dcgmi diag level: 1 (seconds), 2 (minutes, default), 3 (about 15 minutes).",
        ),
    ] = None,
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave the jobs and their pods for inspection.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the verdict as JSON on stdout (no table).")
    ] = False,
) -> None:
    """Run the acceptance jobs on the deployed cluster and judge them: the pools' nodes
    (Ready, GPUs and EFA advertised), DCGM diagnostics on every GPU node, and the 2-node
    EFA fabric test, against the catalog's thresholds. Needs a real cluster.

    Progress goes to stderr, the verdict table to stdout. The jobs are deleted at the end
    unless --keep. Exit 0: every check passed (warnings allowed); 1: a check failed or
    timed out, or nothing could be checked; 2: bad input, or no usable cluster.
    """
    from llmp import accept
    from llmp.accept.jobs import RUN_LABEL
    from llmp.clients import kube

    options = accept.AcceptOptions(
        pools=tuple(pool or ()),
        namespace=namespace,
        timeout_minutes=timeout,
        dcgm=not skip_dcgm,
        fabric=not skip_fabric,
        level=dcgm_level,
        keep=keep,
    )
    run_id = accept.new_run_id()
    try:
        with prefixed("accept"):
            accept.check_options(options)
            cfg = accept.load_stack_config(stack)
            accept.pool_targets(cfg, options.pools, options.namespace)  # before any cluster call
            apis = kube.load_apis(kubeconfig, context)
            report = accept.run_acceptance(
                cfg, stack, apis, options, run_id=run_id, progress=console.err
            )
    except KeyboardInterrupt:
        raise Failed(
            f"accept: interrupted; run {run_id}'s jobs were deleted unless --keep "
            f"(kubectl get jobs -A -l {RUN_LABEL}={run_id})"
        ) from None
    if as_json:
        console.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        console.out.print(accept.verdict_table(report))
        console.out.print(accept.verdict_line(report), highlight=False)
        if report.kept:
            console.out.print(f"kept: {', '.join(report.kept)} (--keep)", highlight=False)
    for problem in report.cleanup_errors:
        console.line(f"accept: {problem}", to=console.err)
    if not report.passed:
        raise typer.Exit(EXIT_FAILED)


def register(app: typer.Typer) -> None:
    app.command("accept")(accept_command)
