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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
