"""`llmp synth STACK`: the real program under Pulumi's mock runtime, and its policy pack."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from llmp import console
from llmp.commands import options
from llmp.errors import BadInput
from llmp.plan import Plan, short_type


def synth(
    stack: options.Stack,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="Read this stack file instead of stacks/Pulumi.STACK.yaml."),
    ] = None,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Where STACK/plan.json and STACK/manifests/ go.")
    ] = Path("out"),
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Write into an OUT/STACK/ that llmp synth did not write (nothing there is "
            "removed but what llmp synth wrote itself).",
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the plan as JSON on stdout (no tree).")
    ] = False,
    policy: Annotated[
        bool,
        typer.Option(
            "--policy/--no-policy",
            help="Then run the policy pack on the plan, exit 1 on a mandatory violation "
            "(the default; --policy is accepted and changes nothing). --no-policy skips it.",
        ),
    ] = True,
    policy_config: Annotated[
        Path | None,
        typer.Option("--policy-config", help="CrossGuard policy-config JSON for the policy pack."),
    ] = None,
    shared_outputs: Annotated[
        Path | None,
        typer.Option(
            "--shared-outputs",
            metavar="FILE",
            help="For a team stack: its shared stack's `pulumi stack output --json` (default: "
            "that stack's synthesized plan, from its stack file beside this one).",
        ),
    ] = None,
) -> None:
    """Run the Pulumi program under the mock runtime: no CLI, no credentials, no network.

    Prints the resource tree and counts per type, writes out/STACK/plan.json
    (secrets redacted) and every Kubernetes object to out/STACK/manifests/, then
    evaluates the policy pack on the plan like `llmp policy` (the stack file's GPU
    budget included), unless --no-policy. A rerun removes only the files an earlier
    `llmp synth` wrote there (it keeps their list in the directory); a directory it
    did not write is refused unless --force.

    Exit 0: synthesized, no mandatory violation; 1: the program failed or a mandatory
    policy violation; 2: bad input (unknown stack, invalid stack file).
    """
    from llmp.commands.policy import policy_overrides, run_policy
    from llmp.plan.synth import check_out_dir, synthesize_stack, write_plan
    from llmp.stacks import stack_name_problem

    # A bad policy config is bad input: refused before anything is synthesized or written.
    overrides = policy_overrides(policy_config) if policy else None
    if stack_name_problem(stack) is None:  # else synthesize_stack says what is wrong
        check_out_dir(out_dir, stack, force=force)
    plan = synthesize_stack(stack, config, hint=config is None, shared_outputs_file=shared_outputs)
    try:
        target = write_plan(plan, out_dir, force=force)
    except OSError as exc:
        raise BadInput(f"cannot write {out_dir}: {exc.strerror or exc}") from None
    if as_json:
        console.write(plan.text())
        if policy:
            run_policy(plan, overrides, stack_file=config, to_stderr=True)
        return
    print_tree(plan)
    print_counts(plan)
    print_adopted(plan)
    cost = plan.outputs.get("cost", {})
    if cost:
        hourly = cost["usd_per_hour"]
        itemize = f"llmp cost {plan.stack}" + (f" --config {config}" if config else "")
        console.notice(
            f"cost: ${hourly['min']:,.2f}/h at min, ${hourly['desired']:,.2f}/h at desired, "
            f"${hourly['max']:,.2f}/h at max size; "
            f"${cost['usd_per_month_with_storage']:,.0f}/month at desired, storage included "
            f"(prices of {cost['prices_as_of']}, "
            f"{cost['price_region']}; `{itemize}` itemizes it)",
            to=console.out,
        )
    print_quotas(stack, config)
    print_bandwidth(stack, config)
    console.notice(
        f"wrote {target / 'plan.json'} and {len(plan.manifests())} manifests", to=console.out
    )
    if policy:
        run_policy(plan, overrides, stack_file=config)


GUIDE = 4
"""Columns a tree level adds in front of a label (`├── `, `│   `)."""


def tree_label(name: str, type_: str, room: int) -> Text:
    """A resource in the tree: its name and its short type on one line where both fit in
    `room` columns, else the type on the line under the name; either broken where it
    would not fit alone (`broken`), never cut."""
    short = short_type(type_)
    if len(name) + 1 + len(short) <= room:
        return Text.assemble(name, " ", (short, "dim"))
    label = Text("\n".join(console.broken(name, room, "-_.")))
    label.append("\n")
    label.append("\n".join(console.broken(short, room, "/:")), style="dim")
    return label


def print_tree(plan: Plan) -> None:
    """The resources under their parents, each line within the console's width."""
    children: dict[str | None, list[str]] = {}
    for r in plan.resources:
        children.setdefault(r.parent, []).append(r.urn)
    width = console.out.width
    root = Tree(Text(plan.stack, style="bold"))

    def add(node: Tree, parent: str | None, depth: int) -> None:
        for urn in children.get(parent, []):
            r = plan.by_urn[urn]
            room = max(width - GUIDE * depth, 20)
            add(node.add(tree_label(r.name, r.type, room)), urn, depth + 1)

    for parent in [p for p in children if p is None or p not in plan.by_urn]:
        add(root, parent, 1)
    console.out.print(root)


def print_counts(plan: Plan) -> None:
    """How many resources of each type (its short type: `short_type`)."""
    table = Table(title="resources by type", title_justify="left")
    table.add_column("type", overflow="fold")
    table.add_column("count", justify="right", overflow="fold")
    counts = Counter(short_type(r.type) for r in plan.resources)
    for type_, n in sorted(counts.items()):
        table.add_row(type_, str(n))
    table.add_row("[bold]total[/bold]", f"[bold]{sum(counts.values())}[/bold]")
    console.out.print(table)


def adopted_lines(plan: Plan) -> list[str]:
    """What the stack adopted and what it created beside it (the `adopted` output)."""
    adopted = plan.outputs.get("adopted") or {}
    lines = []
    net = adopted.get("network")
    if net:
        subnets = ", ".join(f"{z} {s['id']}" for z, s in net["private_subnets"].items())
        lines.append(f"adopted: VPC {net['vpc_id']} ({net['vpc_cidr']}, from {net['source']})")
        lines.append(f"adopted: private subnets {subnets}")
        if net.get("public_subnets"):
            public = ", ".join(f"{z} {i}" for z, i in net["public_subnets"].items())
            lines.append(f"adopted: public subnets {public}")
        lines.append(f"S3 traffic: through {net['s3_via']}")
        lines += [f"created: {c}" for c in net["created"]]
    clu = adopted.get("cluster")
    if clu:
        lines.append(
            f"adopted: EKS cluster {clu['name']} {clu['version']} (from {clu['source']}); "
            f"node role: {clu['node_role']}"
        )
        present = clu.get("addons_present") or {}
        if present:
            lines.append(
                "adopted: add-ons " + ", ".join(f"{a} {v}" for a, v in sorted(present.items()))
            )
        lines += [f"created: {c}" for c in clu["created"]]
        lines += [f"left alone: {c}" for c in clu["left_alone"]]
        if clu["endpoint"] == "read from EKS at deploy time":
            lines.append(
                "kubernetes provider: endpoint and CA read from EKS at deploy time; offline, "
                "stand-ins (set cluster.existing.endpoint and certificate_authority_data to "
                "use your own)"
            )
        else:
            lines.append(f"kubernetes provider: endpoint and CA from {clu['endpoint']}")
    return lines


def print_adopted(plan: Plan) -> None:
    for line in adopted_lines(plan):
        console.notice(line, to=console.out)


def print_quotas(stack: str, config: Path | None) -> None:
    """The EC2 vCPU quotas the pools need at max size, one line each (llmp.plan.quotas)."""
    from llmp.plan.quotas import quota_lines
    from llmp.stacks import load_stack

    for line in quota_lines(load_stack(stack, config)):
        console.notice(line, to=console.out)


def print_bandwidth(stack: str, config: Path | None) -> None:
    """The storage bandwidth model of the file system and its pool (spec.storage_bandwidth),
    one finding a line, its problems last (the fsx-feeds-gpus rule refuses those)."""
    from llmp.stacks import load_stack
    from spec.storage_bandwidth import bandwidth_plan

    plan = bandwidth_plan(load_stack(stack, config))
    if plan is None:
        return
    for line in plan.lines():
        console.notice(f"bandwidth: {line}", to=console.out)
    for problem in plan.problems():
        console.notice(f"bandwidth: too slow: {problem}", to=console.out)


def register(app: typer.Typer) -> None:
    app.command("synth")(synth)
