"""`llmp`: the operator's command line beside `pulumi`.

Exit codes: 0 fine, 1 the program or a check failed, 2 bad input (config,
arguments). Errors are one line on stderr.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Operate the llm-platform stacks: synthesize offline, inspect, check.",
)
out = Console()
err = Console(stderr=True)

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


def _fail(message: str, code: int) -> typer.Exit:
    err.print(message, markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code)


@app.command()
def synth(
    stack: Annotated[str, typer.Argument(help="Stack name: pretrain, finetune, inference...")],
    config: Annotated[
        Path | None,
        typer.Option("--config", help="Read this stack file instead of stacks/Pulumi.STACK.yaml."),
    ] = None,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Where STACK/plan.json and STACK/manifests/ go.")
    ] = Path("out"),
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the plan as JSON on stdout (no tree).")
    ] = False,
) -> None:
    """Run the Pulumi program under the mock runtime: no CLI, no credentials, no network.

    Prints the resource tree and counts per type, writes out/STACK/plan.json
    (secrets redacted) and every Kubernetes object to out/STACK/manifests/.
    """
    from infra.config import ConfigError
    from llmp.synth import StackNotFound, SynthError, synthesize_stack, write_plan

    try:
        plan = synthesize_stack(stack, config)
    except (ConfigError, StackNotFound) as exc:
        raise _fail(str(exc), EXIT_BAD_INPUT) from None
    except SynthError as exc:
        raise _fail(f"synth failed: {exc}", EXIT_FAILED) from None
    target = write_plan(plan, out_dir)
    if as_json:
        sys.stdout.write(json.dumps(plan.to_dict(), indent=2, sort_keys=True) + "\n")
        return
    _print_tree(plan.resources, plan.stack)
    _print_counts(plan.resources)
    cost = plan.outputs.get("cost", {})
    if cost:
        hourly = cost["usd_per_hour"]
        out.print(
            f"cost: ${hourly['min']:,.2f}/h at min, ${hourly['desired']:,.2f}/h at desired, "
            f"${hourly['max']:,.2f}/h at max size; ${cost['usd_per_month_at_desired']:,.0f}/month "
            f"at desired (prices of {cost['prices_as_of']}, {cost['price_region']})",
            highlight=False,
        )
    out.print(
        f"wrote {target / 'plan.json'} and {len(plan.manifests())} manifests", highlight=False
    )


def _print_tree(resources: list[dict[str, Any]], stack: str) -> None:
    children: dict[str | None, list[dict[str, Any]]] = {}
    for r in resources:
        children.setdefault(r["parent"], []).append(r)
    root = Tree(f"[bold]{stack}[/bold]")

    def add(node: Tree, parent: str | None) -> None:
        for r in children.get(parent, []):
            add(node.add(f"{r['name']} [dim]{r['type']}[/dim]"), r["urn"])

    roots = [p for p in children if p is None or not any(r["urn"] == p for r in resources)]
    for parent in roots:
        add(root, parent)
    out.print(root)


def _print_counts(resources: list[dict[str, Any]]) -> None:
    table = Table(title="resources by type")
    table.add_column("type")
    table.add_column("count", justify="right")
    counts = Counter(r["type"] for r in resources)
    for type_, n in sorted(counts.items()):
        table.add_row(type_, str(n))
    table.add_row("[bold]total[/bold]", f"[bold]{sum(counts.values())}[/bold]")
    out.print(table)


@app.command("config-reference")
def config_reference() -> None:
    """Print the Markdown reference of every stack-config key (the README embeds it)."""
    from infra.config import config_reference as reference

    sys.stdout.write(reference())


verify_app = typer.Typer(
    no_args_is_help=True,
    help="Read-only checks of a deployed account against a stack's plan.",
)
app.add_typer(verify_app, name="verify")


@verify_app.command("storage")
def verify_storage(
    stack: Annotated[str, typer.Argument(help="Stack name: pretrain, finetune, inference...")],
    plan_file: Annotated[
        Path | None,
        typer.Option("--plan", help="A plan.json written by `llmp synth` (default: synthesize)."),
    ] = None,
    region: Annotated[
        str | None,
        typer.Option("--region", help="Primary region (default: the plan's primary provider's)."),
    ] = None,
    endpoint_url: Annotated[
        str | None,
        typer.Option("--endpoint-url", help="Another endpoint (moto, LocalStack) than AWS's."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the findings as a JSON list (no table).")
    ] = False,
) -> None:
    """Compare the deployed buckets, FSx file system and data repository associations
    with the plan, reading only (head/get/describe calls; nothing is written).

    Exit 0: no drift ("not checked" rows alone do not fail); 1: drift or missing
    resources; 2: bad input (unknown stack, unreadable plan, no credentials).
    """
    from llmp import verify

    plan = _verify_plan(stack, plan_file)
    try:
        import boto3
        import botocore.exceptions as boto_errors
    except ImportError:
        raise _fail("llmp verify needs boto3: pip install boto3", EXIT_BAD_INPUT) from None
    session = boto3.Session()
    if session.get_credentials() is None:
        raise _fail(_NO_CREDENTIALS, EXIT_BAD_INPUT)
    region = region or verify.primary_region(plan)
    if not region:
        raise _fail("the plan names no AWS region: pass --region", EXIT_BAD_INPUT)
    try:
        findings = verify.verify_storage(plan, verify.ClientFactory(session, endpoint_url), region)
    except boto_errors.NoCredentialsError:
        raise _fail(_NO_CREDENTIALS, EXIT_BAD_INPUT) from None
    except (boto_errors.EndpointConnectionError, boto_errors.ConnectTimeoutError) as exc:
        raise _fail(f"cannot reach the endpoint: {exc}", EXIT_BAD_INPUT) from None
    except boto_errors.BotoCoreError as exc:
        raise _fail(f"verify failed: {exc}", EXIT_FAILED) from None
    if as_json:
        sys.stdout.write(json.dumps([f.to_dict() for f in findings], indent=2) + "\n")
    elif not findings:
        out.print(f"the plan of {stack} declares no buckets and no file systems", highlight=False)
    else:
        _print_findings(findings, stack)
    if verify.failed(findings):
        raise typer.Exit(EXIT_FAILED)


def _verify_plan(stack: str, plan_file: Path | None) -> dict[str, Any]:
    from infra.config import ConfigError
    from llmp.synth import StackNotFound, SynthError, synthesize_stack
    from llmp.verify import PlanError, load_plan_file, validate_plan

    if plan_file is not None:
        try:
            plan = load_plan_file(plan_file)
        except PlanError as exc:
            raise _fail(str(exc), EXIT_BAD_INPUT) from None
        if plan.get("stack") not in (None, stack):
            raise _fail(
                f"{plan_file} is the plan of stack {plan['stack']}, not {stack}", EXIT_BAD_INPUT
            )
        return plan
    try:
        plan = synthesize_stack(stack).to_dict()
    except (ConfigError, StackNotFound) as exc:
        raise _fail(str(exc), EXIT_BAD_INPUT) from None
    except SynthError as exc:
        raise _fail(f"synth failed: {exc}", EXIT_FAILED) from None
    validate_plan(plan)
    return plan


_NO_CREDENTIALS = (
    "no AWS credentials: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
)
_STATUS_STYLE = {"ok": "green", "drift": "bold red", "missing": "bold red", "not checked": "yellow"}


def _print_findings(findings: list[Any], stack: str) -> None:
    from rich.text import Text

    table = Table(title=f"storage of {stack} against its plan")
    for column in ("resource", "check", "status", "detail"):
        table.add_column(column, overflow="fold")
    for f in findings:
        status = Text(f.status, style=_STATUS_STYLE.get(f.status, ""))
        table.add_row(Text(f.resource), Text(f.check), status, Text(f.detail))
    out.print(table)
    counts = Counter(f.status for f in findings)
    out.print(
        ", ".join(f"{counts.get(s, 0)} {s}" for s in ("ok", "drift", "missing", "not checked")),
        highlight=False,
    )


def main() -> None:
    app()


if __name__ == "__main__":
    main()
