"""`llmp cost`: what a stack costs, from its plan, a plan file, outputs or a revision."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmp import console
from llmp.commands import options
from llmp.errors import NO_CREDENTIALS, BadInput


def cost_command(
    stack: Annotated[
        str | None,
        typer.Argument(help="Stack name, synthesized offline (omit it with --plan or --outputs)."),
    ] = None,
    plan_file: Annotated[
        Path | None, typer.Option("--plan", help="A plan.json written by `llmp synth`.")
    ] = None,
    outputs_file: Annotated[
        Path | None,
        typer.Option("--outputs", help="`pulumi stack output --json` of a deployed stack."),
    ] = None,
    compare: Annotated[
        str | None,
        typer.Option(
            "--compare",
            metavar="OTHER",
            help="Side by side with OTHER: a stack name, STACK@REF (the stack at git "
            "revision REF, e.g. pretrain@main), a plan.json or an outputs JSON file.",
        ),
    ] = None,
    prices: Annotated[
        str,  # a costs.PriceMode, checked below (llmp.cost is imported lazily)
        typer.Option(
            "--prices",
            metavar="catalog|live|auto",
            help="catalog (the default): the catalog's dated prices, offline; live: the AWS "
            "Price List's on-demand prices (needs credentials and the network); auto: live "
            "when boto3 finds credentials, else the catalog's. Files keep their prices.",
        ),
    ] = "catalog",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the estimate (with --compare: both and deltas).")
    ] = False,
    config: options.ConfigFile = None,
) -> None:
    """What a stack costs: per component with priced lines, GPU pools against platform
    overhead, hourly at min/desired/max size, each GPU pool on-demand, spot and capacity
    block, what the estimate leaves out, and the prices' date.

    Offline by default: the catalog's prices, no credentials looked up, no network.

    Exit 0; 1: synthesis or the live Price List failed; 2: bad input.
    """
    from llmp import cost as costs
    from llmp.cost import tables
    from llmp.cost.pricing import has_credentials

    mode = prices.lower()
    if mode not in {m.value for m in costs.PriceMode}:
        raise BadInput(f"--prices {prices}: expected catalog, live or auto")
    given = [s for s in (stack, plan_file, outputs_file) if s is not None]
    if len(given) != 1:
        raise BadInput("give one of STACK, --plan FILE or --outputs FILE (e.g. llmp cost pretrain)")
    if config is not None and (stack is None or _fixed_prices(stack)):
        raise BadInput("--config FILE: the stack file of STACK; give a stack name with it")
    # Files and revisions keep the prices they were estimated with; stack names re-price.
    fixed = [s for s in (stack, compare) if s is not None and _fixed_prices(s)]
    stack_specs = [s for s in (stack, compare) if s is not None and not _fixed_prices(s)]
    files = [str(f) for f in (plan_file, outputs_file) if f is not None] + fixed
    if mode == "live" and files:
        raise BadInput(
            f"--prices live re-prices a stack from its config; {files[0]} keeps the prices it "
            "was estimated with (use --prices catalog, or give a stack name)"
        )
    pricer = None
    if mode != "catalog" and stack_specs:
        session = costs.boto3_session()
        if has_credentials(session):
            pricer = costs.LivePricer(session, strict=mode == "live")
        elif mode == "live":
            raise BadInput(f"--prices live: {NO_CREDENTIALS} (or use --prices catalog)")
    if plan_file is not None:
        first = costs.load_cost_file(plan_file, expect="plan")
    elif outputs_file is not None:
        first = costs.load_cost_file(outputs_file, expect="outputs")
    else:
        assert stack is not None
        first = costs.load_cost_source(stack, pricer, config)
    sources = [first]
    if compare is not None:
        sources.append(costs.load_cost_source(compare, pricer))
    for warning in pricer.warnings if pricer else []:
        console.notice(warning)
    if as_json:
        console.write(costs.to_json(sources) + "\n")
        return
    parts = tables.render(*sources[0]) if len(sources) == 1 else tables.render_comparison(*sources)
    for part in parts:
        console.out.print(part, highlight=False)


def _fixed_prices(spec: str) -> bool:
    from llmp import cost as costs

    return costs.is_file_spec(spec) or costs.is_revision_spec(spec)


def register(app: typer.Typer) -> None:
    app.command("cost")(cost_command)
