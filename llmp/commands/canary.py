"""`llmp canary`: judge a canary on its SLO burn; promote it or roll it back in the stack."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from llmp import console
from llmp.commands import options


def canary(
    stack: options.Stack,
    model: Annotated[str, typer.Argument(help="The served model (serving.models[].name).")],
    prometheus_url: Annotated[
        str | None,
        typer.Option(
            "--prometheus-url",
            metavar="URL",
            help="The stack's Prometheus (e.g. a port-forward); default: serving.prometheus_url.",
        ),
    ] = None,
    config_file: Annotated[
        Path | None,
        typer.Option("--config", metavar="FILE", help="Another stack file than the stack's."),
    ] = None,
    write: Annotated[
        bool,
        typer.Option("--write/--no-write", help="Write the verdict to the stack file (default)."),
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the judgement as JSON.")] = False,
) -> None:
    """Judge MODEL's canary over its window on Prometheus: promote (exit 0; revision <- the
    canary's, weight 0), roll back (exit 1; weight 0) or wait (exit 3; nothing written)."""
    from llmp.serving import canary as c
    from llmp.stacks import stack_path
    from spec.stackfile import load_config, load_stack_file

    path = stack_path(stack, config_file)
    url = prometheus_url
    if url is None:
        cfg = load_config(load_stack_file(str(path)))
        url = cfg.serving.prometheus_url if cfg.serving is not None else ""
    judgement = c.judge(stack, url, model, config_file)
    diff = ""
    if judgement.changes:
        diff = c.apply(path, model, judgement.changes, write=write)
    if as_json:
        out = {**judgement.to_dict(), "diff": diff, "written": bool(diff) and write}
        console.write(json.dumps(out, sort_keys=True) + "\n")
    else:
        console.write("\n".join([judgement.line(), *judgement.details()]) + "\n")
        if diff:
            verb = "changed" if write else "would change (--no-write)"
            console.write(f"{verb}:\n{diff}")
            console.write(f"next: llmp diff --base HEAD {stack}; then pulumi up\n")
    if judgement.exit_code:
        raise typer.Exit(judgement.exit_code)


def register(app: typer.Typer) -> None:
    app.command("canary")(canary)
