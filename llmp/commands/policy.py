"""`llmp policy`: the CrossGuard pack, in-process, against a stack's plan."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from llmp import console
from llmp.errors import EXIT_FAILED, BadInput
from llmp.plan import Plan, load_plan


def policy_command(
    target: Annotated[
        str | None,
        typer.Argument(
            metavar="STACK",
            help="Stack name, synthesized offline (no cloud). A path ending in .json is "
            "read as a plan file, like --plan.",
            show_default=False,
        ),
    ] = None,
    plan_file: Annotated[
        Path | None,
        typer.Option(
            "--plan",
            metavar="FILE",
            help="A plan.json written by `llmp synth` (out/STACK/plan.json) instead of STACK.",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the violations as a JSON list (no table).")
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="CrossGuard policy-config JSON, e.g. "
            '{"s3-access-logging": "disabled", "gpu-budget": {"gpu-budget-usd-per-hour": 900}}; '
            "applied over the defaults and what the plan's stack file implies.",
        ),
    ] = None,
    write_config: Annotated[
        str | None,
        typer.Option(
            "--write-config",
            metavar="STACK",
            help="Instead of evaluating a plan, write the policy config STACK's stack file "
            "implies (GPU budget, FSx node pool; merged with --config) to --to, for "
            "`pulumi preview --policy-pack policies --policy-pack-config FILE`.",
        ),
    ] = None,
    to: Annotated[
        Path | None,
        typer.Option(
            "--to", help="Where --write-config writes (default out/STACK/policy-config.json)."
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Let --write-config replace an existing --to FILE.")
    ] = False,
) -> None:
    """Evaluate the CrossGuard policy pack (policies/) in-process against a stack's plan:
    STACK synthesized offline, or a plan file (--plan FILE).

    Every rule gets the arguments CrossGuard gives it during `pulumi preview`; the
    stack file's GPU budget and FSx node pool reach the rules as policy config.

    Exit 0: no mandatory violation (advisory ones are listed); 1: a mandatory
    violation, or the program failed; 2: bad input (unknown stack, invalid stack
    file, missing, unreadable or malformed plan or config).
    """
    overrides = policy_overrides(config)
    if write_config is not None:
        if target is not None or plan_file is not None:
            raise BadInput(
                "--write-config STACK writes a config and evaluates nothing: "
                "give it without STACK or --plan"
            )
        _write_policy_config(write_config, overrides, to, force=force)
        return
    # A plan file positionally is the older spelling (`llmp policy out/STACK/plan.json`).
    if target is not None and _is_plan_path(target):
        target, plan_file = (None, Path(target)) if plan_file is None else (target, plan_file)
    if (target is None) == (plan_file is None):
        raise BadInput(
            "give one of STACK or --plan FILE (e.g. llmp policy pretrain, or "
            "llmp policy --plan out/pretrain/plan.json)"
        )
    if plan_file is not None:
        plan = load_plan(plan_file)
    else:
        from llmp.plan.synth import synthesize_stack

        assert target is not None
        plan = synthesize_stack(target, quiet=True)
    run_policy(plan, overrides, as_json=as_json, stack_file=None)


def _is_plan_path(spec: str) -> bool:
    """A positional `llmp policy` argument that names a file: stack names hold no '/'
    and do not end in .json."""
    return spec.endswith(".json") or "/" in spec or "\\" in spec


def policy_overrides(path: Path | None) -> dict[str, Any] | None:
    """The policy config of --config/--policy-config FILE, checked; None without one."""
    if path is None:
        return None
    from llmp.plan.policy import load_policy_config

    return load_policy_config(path)


def _write_policy_config(
    stack: str, overrides: dict[str, Any] | None, to: Path | None, *, force: bool = False
) -> None:
    """Write the policy config; --to FILE is refused when it exists (unless `force`), the
    default out/STACK/policy-config.json is llmp's own and replaced."""
    from llmp.files import refuse, write_file
    from llmp.plan.policy import stack_policy_config
    from llmp.stacks import stack_file
    from policies.config import merge

    if not stack_file(stack).exists():
        raise BadInput(f"no stack file {stack_file(stack).name} for stack {stack}")
    if to is not None:
        refuse(to, force=force, what="--to")
    implied = stack_policy_config(stack)
    target = to or Path("out") / stack / "policy-config.json"
    text = json.dumps(merge(implied, overrides), indent=2, sort_keys=True) + "\n"
    write_file(target, text, force=force or to is None, what="--to")
    console.line(f"wrote {target}")


def run_policy(
    plan: Plan,
    overrides: dict[str, Any] | None,
    *,
    as_json: bool = False,
    stack_file: Path | None,
    to_stderr: bool = False,
) -> None:
    """Evaluate the pack on `plan` and print the violations; exit 1 on a mandatory one.

    `stack_file`: the file the plan was synthesized from, whose GPU budget and FSx pool
    configure the rules (None: the plan's stack's own file, when there is one)."""
    from llmp.plan.policy import evaluate, failed, stack_policy_config
    from policies.config import merge

    if stack_file is not None:
        implied = stack_policy_config(plan.stack, stack_file)
        violations = evaluate(plan, merge(implied, overrides), stack_config=False)
    else:
        violations = evaluate(plan, overrides)
    if as_json:
        console.write(json.dumps([v.to_dict() for v in violations], indent=2) + "\n")
    else:
        _print_violations(violations, plan.stack, console.err if to_stderr else console.out)
    if failed(violations):
        raise typer.Exit(EXIT_FAILED)


_LEVEL_STYLE = {"mandatory": "bold red", "advisory": "yellow"}


def _print_violations(violations: list[Any], stack: str, to: Console) -> None:
    """A table that fits 80 columns (the level, then the rule and resource with the
    message under them), and a last line that names the mandatory rules."""

    counts = Counter(v.level for v in violations)
    mandatory = sorted({v.rule for v in violations if v.level == "mandatory"})
    summary = (
        f"policy: {counts.get('mandatory', 0)} mandatory"
        + (f" ({', '.join(mandatory)})" if mandatory else "")
        + f", {counts.get('advisory', 0)} advisory"
    )
    if not violations:
        to.print(f"{summary} violations in {stack or 'the plan'}", highlight=False)
        return
    table = Table(title=f"policy violations in {stack or 'the plan'}", title_justify="left")
    table.add_column("level", overflow="fold")
    table.add_column("rule: resource, the message", overflow="fold", ratio=1)
    order = {"mandatory": 0, "advisory": 1}
    for v in sorted(violations, key=lambda v: (order.get(v.level, 2), v.rule, v.resource)):
        table.add_row(
            Text(v.level, style=_LEVEL_STYLE.get(v.level, "")),
            Group(
                Text(f"{v.rule}: {v.resource}", style="bold"),
                Padding(Text(v.message), (0, 0, 0, 2)),
            ),
        )
    to.print(table)
    to.print(f"{summary} violations in {stack or 'the plan'}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("policy")(policy_command)
