"""`llmp verify`: what Pulumi cannot see of a deployed stack, read-only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from llmp import console
from llmp.commands import options
from llmp.errors import EXIT_FAILED, NO_CREDENTIALS, BadInput, Failed

_VERIFY_USAGE = "llmp verify takes STACK, or `storage STACK` (the same as `STACK --only storage`)"


def verify_command(
    target: Annotated[
        list[str],
        typer.Argument(
            metavar="[storage] STACK",
            help="Stack name: pretrain, finetune, inference... "
            "`storage STACK` is `STACK --only storage` (the older spelling).",
            show_default=False,
        ),
    ],
    plan_file: Annotated[
        Path | None,
        typer.Option("--plan", help="A plan.json written by `llmp synth` (default: synthesize)."),
    ] = None,
    outputs_file: Annotated[
        Path | None,
        typer.Option(
            "--outputs",
            help="`pulumi stack output --json` of the deployed stack: its region, cluster and "
            "node group names are the ones looked for.",
        ),
    ] = None,
    region: Annotated[
        str | None,
        typer.Option(
            "--region",
            help="Region (default: the outputs', else the plan's primary provider's).",
        ),
    ] = None,
    endpoint_url: options.EndpointUrl = None,
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            "--kubeconfig",
            metavar="FILE",
            help="Check the cluster too (the kubernetes rows). The stack's: `pulumi stack "
            "output kubeconfig --show-secrets > kubeconfig`.",
        ),
    ] = None,
    context: Annotated[
        str | None,
        typer.Option(
            "--context",
            metavar="NAME",
            help="The kubeconfig context to use (checks the cluster too).",
        ),
    ] = None,
    no_drift: Annotated[
        bool,
        typer.Option(
            "--no-drift",
            help="Do not run `pulumi preview --refresh --expect-no-changes` (the drift row).",
        ),
    ] = False,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            metavar="AREA",
            help="Check only this area: cluster, nodegroups, addons, storage, kubernetes or "
            "drift; repeatable.",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the rows as a JSON list (no table).")
    ] = False,
    preflight: Annotated[
        bool,
        typer.Option(
            "--preflight",
            help="Before a deploy, instead of the deployed stack: whether every pool's zones "
            "offer its instance type, and each EC2 vCPU quota covers the pools at max size "
            "(read live from the stack file's config).",
        ),
    ] = False,
) -> None:
    """Check what Pulumi cannot see of a deployed stack, read-only: one table of pass,
    fail or "not checked", with the reason for each row.

    AWS (describe and list calls): the EKS cluster, every node group and add-on ACTIVE
    without health issues, each node group on its launch template's latest version, the
    FSx file system and its data repository associations AVAILABLE. With --kubeconfig or
    --context, the cluster: Kueue's controller and ClusterQueues, the device plugins'
    DaemonSets, and the GPUs and EFA interfaces each GPU node advertises. Property drift
    is Pulumi's to see: the drift row runs `pulumi preview --refresh --expect-no-changes`
    when the Pulumi CLI is installed.

    With --preflight, before a deploy and instead of all that: whether every pool's zones
    offer its instance type (EC2 offerings by zone id) and each EC2 vCPU quota covers the
    pools at max size (Service Quotas), read live against the stack file's config.

    Exit 0: nothing fails ("not checked" rows alone do not fail); 1: a check failed; 2: bad
    input (unknown stack, unreadable plan or outputs, no or refused credentials,
    unreachable endpoint or cluster).
    """
    from llmp import verify
    from llmp.clients import kube
    from llmp.stacks import REPO_ROOT
    from llmp.verify import drift, readiness

    if len(target) == 1:
        stack, areas = target[0], list(only or verify.AREAS)
    elif len(target) == 2 and target[0] == "storage" and not only:
        stack, areas = target[1], ["storage"]
    else:
        raise BadInput(f"{_VERIFY_USAGE}, not: {' '.join(target)}")
    unknown = [a for a in areas if a not in verify.AREAS]
    if unknown:
        raise BadInput(f"--only {unknown[0]}: not an area; use one of {', '.join(verify.AREAS)}")
    areas = [a for a in verify.AREAS if a in areas]
    if endpoint_url is not None and not endpoint_url.startswith(("http://", "https://")):
        raise BadInput(f"--endpoint-url {endpoint_url}: not an http(s) URL")
    if preflight:
        _preflight(stack, region, endpoint_url, as_json)
        return
    plan = _verify_plan(stack, plan_file)
    outputs = None
    if outputs_file is not None:
        from llmp.plan import load_outputs

        outputs = load_outputs(outputs_file)
    apis = None
    if "kubernetes" in areas and (kubeconfig or context):
        apis = kube.load_apis(kubeconfig, context)
    findings: list[Any] = []
    region = region or (outputs.region if outputs else None) or plan.primary_region
    aws_areas = [a for a in areas if a in verify.AWS_AREAS]
    if aws_areas:
        findings += _verify_aws(plan, region, endpoint_url, outputs, aws_areas)
    if "kubernetes" in areas:
        findings += readiness.check(plan, apis)
    if "drift" in areas:
        findings += drift.check(stack, REPO_ROOT, enabled=not no_drift, notify=_progress)
    if as_json:
        console.write(json.dumps([f.to_dict() for f in findings], indent=2) + "\n")
    elif not findings:
        console.line(f"the plan of {stack} declares nothing in {', '.join(areas)}")
    else:
        scope = "" if areas == list(verify.AREAS) else f" ({', '.join(areas)})"
        where = f", {region}" if region and aws_areas else ""
        console.out.print(
            verify.render_table(findings, f"{stack}: what Pulumi cannot see{scope}{where}")
        )
        console.line(verify.summary(findings))
    if verify.failed(findings):
        raise typer.Exit(EXIT_FAILED)


def _preflight(stack: str, region: str | None, endpoint_url: str | None, as_json: bool) -> None:
    from llmp import verify
    from llmp.stacks import load_stack
    from llmp.verify import preflight

    cfg = load_stack(stack)
    region = region or cfg.region
    findings = _aws_call(lambda clients: preflight.check(cfg, clients, region), endpoint_url)
    if as_json:
        console.write(json.dumps([f.to_dict() for f in findings], indent=2) + "\n")
    else:
        console.out.print(verify.render_table(findings, f"{stack}: preflight, {region}"))
        console.line(verify.summary(findings))
    if verify.failed(findings):
        raise typer.Exit(EXIT_FAILED)


def _progress(text: str) -> None:
    console.line(text, to=console.err)


def _verify_aws(
    plan: Any, region: str | None, endpoint_url: str | None, outputs: Any, areas: list[str]
) -> list[Any]:
    from llmp import verify

    if not region:
        _aws_call(None, endpoint_url)  # no boto3 or no credentials say so first
        raise BadInput("the plan names no AWS region: pass --region")
    return _aws_call(
        lambda clients: verify.verify_aws(plan, clients, region, outputs, areas), endpoint_url
    )


def _aws_call(call: Any, endpoint_url: str | None) -> list[Any]:
    """`call(clients)` with the account's credentials, AWS's errors as one line each."""
    from llmp.clients import aws

    try:
        import boto3
        import botocore.exceptions as boto_errors
    except ImportError:
        raise BadInput("llmp verify needs boto3: pip install boto3") from None
    session = boto3.Session()
    if session.get_credentials() is None:
        raise BadInput(NO_CREDENTIALS)
    if call is None:
        return []
    try:
        result: list[Any] = call(aws.ClientFactory(session, endpoint_url))
        return result
    except boto_errors.NoCredentialsError:
        raise BadInput(NO_CREDENTIALS) from None
    except aws.CredentialsRejected as exc:
        raise BadInput(f"AWS refused the credentials: {exc}") from None
    except (boto_errors.EndpointConnectionError, boto_errors.ConnectTimeoutError) as exc:
        raise BadInput(f"cannot reach the endpoint: {exc}") from None
    except boto_errors.InvalidRegionError as exc:
        raise BadInput(f"--region: {exc}") from None
    except boto_errors.BotoCoreError as exc:
        raise Failed(f"verify failed: {exc}") from None


def _verify_plan(stack: str, plan_file: Path | None) -> Any:
    from llmp.plan import load_plan
    from llmp.plan.synth import synthesize_stack

    if plan_file is not None:
        plan = load_plan(plan_file)
        if plan.stack not in ("", stack):
            raise BadInput(f"{plan_file} is the plan of stack {plan.stack}, not {stack}")
        return plan
    return synthesize_stack(stack, quiet=True)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_command)
