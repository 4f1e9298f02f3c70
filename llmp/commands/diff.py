"""`llmp diff`: what a change does to a stack, offline: a PR preview."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from llmp import console
from llmp.commands import options
from llmp.errors import BadInput


def diff_command(
    stack: options.Stack,
    base: Annotated[
        str,
        typer.Option("--base", metavar="REF", help="Git revision to compare with (main, a SHA)."),
    ],
    head: Annotated[
        str | None,
        typer.Option(
            "--head", metavar="REF", help="Compare with this revision instead of the working tree."
        ),
    ] = None,
    markdown: Annotated[
        Path | None,
        typer.Option(
            "--markdown", metavar="FILE", help="Also write the report as a PR comment (Markdown)."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON on stdout (no tables).")
    ] = False,
    fail_on_replace: Annotated[
        bool,
        typer.Option(
            "--fail-on-replace", help="Exit 1 when a precious resource would be replaced."
        ),
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Let --markdown replace an existing FILE.")
    ] = False,
    config: options.ConfigFile = None,
) -> None:
    """What a change does to a stack: resources added, changed and deleted, precious
    replacements, the cost delta and new policy violations, offline.

    Synthesizes STACK at --base REF (a git worktree, with that revision's own code) and at
    the working tree (or --head REF). Precious resources: the cluster, node groups, the file
    system, buckets and KMS keys.

    No cloud credentials needed. Exit 0: reported; 1: a new mandatory policy violation, or a
    precious replacement with --fail-on-replace; 2: bad input (not a git repository, unknown
    revision, invalid stack file) or a side that cannot be synthesized.
    """
    from llmp import diff as plan_diff
    from llmp.diff.render import render_markdown, render_terminal
    from llmp.files import refuse, write_file
    from llmp.plan.revision import repo_root
    from llmp.stacks import REPO_ROOT
    from policies.config import PolicyConfigError
    from spec.errors import ConfigError

    if markdown is not None:  # before two synths, not after
        refuse(markdown, force=force, what="--markdown")
    repo = repo_root(REPO_ROOT)
    relpath = None
    if config is not None:
        # git reads the file at --base REF: it must be a path of the repository.
        try:
            relpath = config.resolve().relative_to(repo.resolve()).as_posix()
        except (OSError, ValueError):
            raise BadInput(
                f"--config {config}: not a file of the repository at {repo}; llmp diff reads "
                "it at --base REF too, so it must be one (examples/stacks/...)"
            ) from None
    try:
        report = plan_diff.build_report(stack, base, repo, head, relpath)
    except (ConfigError, PolicyConfigError) as exc:  # a side's stack file, or the pack's config
        raise BadInput(f"diff: {exc}") from None
    if markdown is not None:
        write_file(markdown, render_markdown(report), force=force, what="--markdown")
    if as_json:
        console.write(json.dumps(plan_diff.report_to_json(report), indent=2) + "\n")
    else:
        render_terminal(report, console.out)
    code = plan_diff.exit_code(report, fail_on_replace)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("diff")(diff_command)
