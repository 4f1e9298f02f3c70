"""`llmp`: the operator's command line beside `pulumi`.

Exit codes: 0 fine, 1 the program or a check failed, 2 bad input (config,
arguments). Errors are one line on stderr.
"""

from __future__ import annotations

import json
import os
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
    # Markdown reflows a docstring's paragraphs to the terminal's width ("rich" keeps the
    # source's line breaks after the first paragraph, which wrap badly at 80 columns).
    rich_markup_mode="markdown",
    help="Operate the llm-platform stacks: synthesize offline, inspect, check.",
)


class _PipeConsole(Console):
    """stdout that a reader may close early (`llmp cost pretrain | head`): the rest of
    the output is dropped and the command ends with its own exit code. rich's default
    exits 1, which here says that a check failed."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        # Python flushes stdout at exit: into /dev/null, not into the closed pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


out = _PipeConsole()
err = Console(stderr=True)

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2

DR_OUT_DIR = Path("out") / "dr"
"""Where `llmp dr plan` writes by default, relative to the working directory like `llmp
synth`'s out/: not stacks/, whose every file the tests and CI synthesize."""


def _fail(message: str, code: int) -> typer.Exit:
    err.print(message, markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _print_version(value: bool) -> None:
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("llm-platform")
    except PackageNotFoundError:
        installed = "unknown (the llm-platform package is not installed: pip install -e .)"
    out.print(f"llmp {installed}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit()


@app.callback()
def _main(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print llmp's version (the installed llm-platform package's) and exit.",
        ),
    ] = False,
) -> None:
    """Operate the llm-platform stacks: synthesize offline, inspect, check."""


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
) -> None:
    """Run the Pulumi program under the mock runtime: no CLI, no credentials, no network.

    Prints the resource tree and counts per type, writes out/STACK/plan.json
    (secrets redacted) and every Kubernetes object to out/STACK/manifests/, then
    evaluates the policy pack on the plan like `llmp policy` (the stack file's GPU
    budget included), unless --no-policy.

    Exit 0: synthesized, no mandatory violation; 1: the program failed or a mandatory
    policy violation; 2: bad input (unknown stack, invalid stack file).
    """
    from llmp.synth import StackNotFound, SynthError, plan_text, synthesize_stack, write_plan
    from spec.errors import ConfigError

    # A bad policy config is bad input: refused before anything is synthesized or written.
    overrides = _policy_overrides(policy_config) if policy else None
    try:
        plan = synthesize_stack(stack, config)
    except StackNotFound as exc:
        hint = " (or pass --config FILE)" if exc.missing_file and config is None else ""
        raise _fail(f"{exc}{hint}", EXIT_BAD_INPUT) from None
    except ConfigError as exc:
        raise _fail(str(exc), EXIT_BAD_INPUT) from None
    except SynthError as exc:
        raise _fail(f"synth failed: {exc}", EXIT_FAILED) from None
    try:
        target = write_plan(plan, out_dir)
    except OSError as exc:
        raise _fail(f"cannot write {out_dir}: {exc.strerror or exc}", EXIT_BAD_INPUT) from None
    if as_json:
        sys.stdout.write(plan_text(plan))
        if policy:
            _run_policy(plan.to_dict(), overrides, as_json=False, stack_file=config, to=err)
        return
    _print_tree(plan.resources, plan.stack)
    _print_counts(plan.resources)
    cost = plan.outputs.get("cost", {})
    if cost:
        hourly = cost["usd_per_hour"]
        out.print(
            f"cost: ${hourly['min']:,.2f}/h at min, ${hourly['desired']:,.2f}/h at desired, "
            f"${hourly['max']:,.2f}/h at max size; "
            f"${cost['usd_per_month_with_storage']:,.0f}/month at desired, storage included "
            f"(prices of {cost['prices_as_of']}, "
            f"{cost['price_region']}; `llmp cost {plan.stack}` itemizes it)",
            highlight=False,
        )
    out.print(
        f"wrote {target / 'plan.json'} and {len(plan.manifests())} manifests", highlight=False
    )
    if policy:
        _run_policy(plan.to_dict(), overrides, as_json=False, stack_file=config, to=out)


@app.command("policy")
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
) -> None:
    """Evaluate the CrossGuard policy pack (policies/) in-process against a stack's plan:
    STACK synthesized offline, or a plan file (--plan FILE).

    Every rule gets the arguments CrossGuard gives it during `pulumi preview`; the
    stack file's GPU budget and FSx node pool reach the rules as policy config.

    Exit 0: no mandatory violation (advisory ones are listed); 1: a mandatory
    violation, or the program failed; 2: bad input (unknown stack, invalid stack
    file, missing, unreadable or malformed plan or config).
    """
    overrides = _policy_overrides(config)
    if write_config is not None:
        if target is not None or plan_file is not None:
            raise _fail(
                "--write-config STACK writes a config and evaluates nothing: "
                "give it without STACK or --plan",
                EXIT_BAD_INPUT,
            )
        _write_policy_config(write_config, overrides, to)
        return
    # A plan file positionally is the older spelling (`llmp policy out/STACK/plan.json`).
    if target is not None and _is_plan_path(target):
        target, plan_file = (None, Path(target)) if plan_file is None else (target, plan_file)
    if (target is None) == (plan_file is None):
        raise _fail(
            "give one of STACK or --plan FILE (e.g. llmp policy pretrain, or "
            "llmp policy --plan out/pretrain/plan.json)",
            EXIT_BAD_INPUT,
        )
    from llmp.policy import PlanError, load_plan

    if plan_file is not None:
        try:
            plan = load_plan(plan_file)
        except PlanError as exc:
            raise _fail(str(exc), EXIT_BAD_INPUT) from None
    else:
        assert target is not None
        plan = _synthesized_plan(target)
    _run_policy(plan, overrides, as_json=as_json, stack_file=None, to=out)


def _is_plan_path(spec: str) -> bool:
    """A positional `llmp policy` argument that names a file: stack names hold no '/'
    and do not end in .json."""
    return spec.endswith(".json") or "/" in spec or "\\" in spec


def _synthesized_plan(stack: str) -> dict[str, Any]:
    """The plan of `stack` synthesized offline, as `llmp synth` records it."""
    import contextlib
    import io

    from llmp.synth import StackNotFound, SynthError, synthesize_stack
    from spec.errors import ConfigError

    # The program's warnings (a secret not yet set, say) are for `llmp synth`; the
    # one-line error is printed once stderr is ours again.
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return synthesize_stack(stack).to_dict()
    except (ConfigError, StackNotFound) as exc:
        raise _fail(str(exc), EXIT_BAD_INPUT) from None
    except SynthError as exc:
        raise _fail(f"synth of {stack} failed: {exc}", EXIT_FAILED) from None


def _policy_overrides(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    from llmp.policy import PolicyConfigError, load_policy_config

    try:
        return load_policy_config(path)
    except PolicyConfigError as exc:
        raise _fail(str(exc), EXIT_BAD_INPUT) from None


def _write_policy_config(stack: str, overrides: dict[str, Any] | None, to: Path | None) -> None:
    from llmp.policy import stack_policy_config
    from llmp.synth import stack_file
    from policies.config import merge
    from spec.errors import ConfigError

    if not stack_file(stack).exists():
        raise _fail(f"no stack file {stack_file(stack).name} for stack {stack}", EXIT_BAD_INPUT)
    try:
        implied = stack_policy_config(stack)
    except ConfigError as exc:
        raise _fail(str(exc), EXIT_BAD_INPUT) from None
    target = to or Path("out") / stack / "policy-config.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(merge(implied, overrides), indent=2, sort_keys=True) + "\n")
    out.print(f"wrote {target}", highlight=False)


def _run_policy(
    plan: dict[str, Any],
    overrides: dict[str, Any] | None,
    *,
    as_json: bool,
    stack_file: Path | None,
    to: Console,
) -> None:
    from llmp.policy import PlanError, PolicyConfigError, evaluate, failed, stack_policy_config
    from policies.config import merge
    from spec.errors import ConfigError

    try:
        if stack_file is not None:
            implied = stack_policy_config(str(plan.get("stack")), stack_file)
            violations = evaluate(plan, merge(implied, overrides), stack_config=False)
        else:
            violations = evaluate(plan, overrides)
    except (PlanError, PolicyConfigError, ConfigError) as exc:
        raise _fail(str(exc), EXIT_BAD_INPUT) from None
    if as_json:
        sys.stdout.write(json.dumps([v.to_dict() for v in violations], indent=2) + "\n")
    else:
        _print_violations(violations, str(plan.get("stack", "")), to)
    if failed(violations):
        raise typer.Exit(EXIT_FAILED)


_LEVEL_STYLE = {"mandatory": "bold red", "advisory": "yellow"}


def _print_violations(violations: list[Any], stack: str, to: Console) -> None:
    """A table that fits 80 columns (the level, then the rule and resource with the
    message under them), and a last line that names the mandatory rules."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.text import Text

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
    table = Table(title="resources by type", title_justify="left")
    table.add_column("type", overflow="fold")
    table.add_column("count", justify="right", overflow="fold")
    counts = Counter(r["type"] for r in resources)
    for type_, n in sorted(counts.items()):
        table.add_row(type_, str(n))
    table.add_row("[bold]total[/bold]", f"[bold]{sum(counts.values())}[/bold]")
    out.print(table)


@app.command("config-reference")
def config_reference() -> None:
    """Print the Markdown reference of every stack-config key (the README embeds it)."""
    from spec.reference import config_reference as reference

    sys.stdout.write(reference())


@app.command("cost")
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
        str,  # a costs.PriceMode, checked below (llmp.costs is imported lazily)
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
) -> None:
    """What a stack costs: per component with priced lines, GPU pools against platform
    overhead, hourly at min/desired/max size, each GPU pool on-demand, spot and capacity
    block, what the estimate leaves out, and the prices' date.

    Offline by default: the catalog's prices, no credentials looked up, no network.

    Exit 0; 1: synthesis or the live Price List failed; 2: bad input.
    """
    from llmp import costs
    from llmp.pricing import PricingError, has_credentials

    mode = prices.lower()
    if mode not in {m.value for m in costs.PriceMode}:
        raise _fail(f"--prices {prices}: expected catalog, live or auto", EXIT_BAD_INPUT)
    given = [s for s in (stack, plan_file, outputs_file) if s is not None]
    if len(given) != 1:
        raise _fail(
            "give one of STACK, --plan FILE or --outputs FILE (e.g. llmp cost pretrain)",
            EXIT_BAD_INPUT,
        )
    # Files and revisions keep the prices they were estimated with; stack names re-price.
    fixed = [s for s in (stack, compare) if s is not None and _fixed_prices(s)]
    stack_specs = [s for s in (stack, compare) if s is not None and not _fixed_prices(s)]
    files = [str(f) for f in (plan_file, outputs_file) if f is not None] + fixed
    if mode == "live" and files:
        raise _fail(
            f"--prices live re-prices a stack from its config; {files[0]} keeps the prices it "
            "was estimated with (use --prices catalog, or give a stack name)",
            EXIT_BAD_INPUT,
        )
    pricer = None
    if mode != "catalog" and stack_specs:
        session = costs.boto3_session()
        if has_credentials(session):
            pricer = costs.LivePricer(session, strict=mode == "live")
        elif mode == "live":
            raise _fail(
                f"--prices live: {_NO_CREDENTIALS} (or use --prices catalog)", EXIT_BAD_INPUT
            )
    try:
        if plan_file is not None:
            first = costs.load_cost_file(plan_file, expect="plan")
        elif outputs_file is not None:
            first = costs.load_cost_file(outputs_file, expect="outputs")
        else:
            assert stack is not None
            first = costs.load_cost_source(stack, pricer)
        sources = [first]
        if compare is not None:
            sources.append(costs.load_cost_source(compare, pricer))
    except costs.CostSourceError as exc:
        raise _fail(str(exc), EXIT_BAD_INPUT) from None
    except (costs.CostSynthError, PricingError) as exc:
        raise _fail(str(exc), EXIT_FAILED) from None
    for warning in pricer.warnings if pricer else []:
        err.print(warning, markup=False, highlight=False, soft_wrap=True)
    if as_json:
        sys.stdout.write(costs.to_json(sources) + "\n")
        return
    parts = costs.render(*sources[0]) if len(sources) == 1 else costs.render_comparison(*sources)
    for part in parts:
        out.print(part, highlight=False)


def _fixed_prices(spec: str) -> bool:
    from llmp import costs

    return costs.is_file_spec(spec) or costs.is_revision_spec(spec)


_VERIFY_USAGE = "llmp verify takes STACK, or `storage STACK` (the same as `STACK --only storage`)"


@app.command("verify")
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
            help="`pulumi stack output --json` of the deployed stack: the cluster, node group "
            "and bucket names it exports are verified, and cross-checked with the plan.",
        ),
    ] = None,
    region: Annotated[
        str | None,
        typer.Option(
            "--region",
            help="Primary region (default: the outputs', else the plan's primary provider's).",
        ),
    ] = None,
    endpoint_url: Annotated[
        str | None,
        typer.Option("--endpoint-url", help="Another endpoint (moto, LocalStack) than AWS's."),
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            metavar="AREA",
            help="Check only this area: cluster, nodegroups, addons or storage; repeatable.",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the rows as a JSON list (no table).")
    ] = False,
) -> None:
    """Compare a deployed account with the stack's plan, read-only: one table of pass, fail or
    "not checked", with the reason for each.

    Reads (describe/get/list; nothing is written) the EKS cluster (ACTIVE, version, logging,
    secrets encryption, endpoint access, authentication), every managed node group and the
    launch template it runs (EFA interfaces and their layout, placement group, capacity
    reservation), the EKS add-ons, the buckets and the FSx for Lustre file system.

    Exit 0: nothing fails ("not checked" rows alone do not fail); 1: a check failed (missing,
    different, or a read the account refused); 2: bad input (unknown stack, unreadable plan or
    outputs, no or refused credentials, unreachable endpoint).
    """
    from llmp import verify

    if len(target) == 1:
        stack, areas = target[0], list(only or verify.AREAS)
    elif len(target) == 2 and target[0] == "storage" and not only:
        stack, areas = target[1], ["storage"]
    else:
        raise _fail(f"{_VERIFY_USAGE}, not: {' '.join(target)}", EXIT_BAD_INPUT)
    unknown = [a for a in areas if a not in verify.AREAS]
    if unknown:
        raise _fail(
            f"--only {unknown[0]}: not an area; use one of {', '.join(verify.AREAS)}",
            EXIT_BAD_INPUT,
        )
    if endpoint_url is not None and not endpoint_url.startswith(("http://", "https://")):
        raise _fail(f"--endpoint-url {endpoint_url}: not an http(s) URL", EXIT_BAD_INPUT)
    plan = _verify_plan(stack, plan_file)
    outputs = None
    if outputs_file is not None:
        try:
            outputs = verify.load_outputs_file(outputs_file)
        except verify.OutputsError as exc:
            raise _fail(str(exc), EXIT_BAD_INPUT) from None
    try:
        import boto3
        import botocore.exceptions as boto_errors
    except ImportError:
        raise _fail("llmp verify needs boto3: pip install boto3", EXIT_BAD_INPUT) from None
    session = boto3.Session()
    if session.get_credentials() is None:
        raise _fail(_NO_CREDENTIALS, EXIT_BAD_INPUT)
    region = region or (outputs.region if outputs else None) or verify.primary_region(plan)
    if not region:
        raise _fail("the plan names no AWS region: pass --region", EXIT_BAD_INPUT)
    try:
        findings = verify.verify_stack(
            plan, verify.ClientFactory(session, endpoint_url), region, outputs, areas
        )
    except boto_errors.NoCredentialsError:
        raise _fail(_NO_CREDENTIALS, EXIT_BAD_INPUT) from None
    except verify.CredentialsRejected as exc:
        raise _fail(f"AWS refused the credentials: {exc}", EXIT_BAD_INPUT) from None
    except (boto_errors.EndpointConnectionError, boto_errors.ConnectTimeoutError) as exc:
        raise _fail(f"cannot reach the endpoint: {exc}", EXIT_BAD_INPUT) from None
    except boto_errors.InvalidRegionError as exc:
        raise _fail(f"--region: {exc}", EXIT_BAD_INPUT) from None
    except boto_errors.BotoCoreError as exc:
        raise _fail(f"verify failed: {exc}", EXIT_FAILED) from None
    if as_json:
        sys.stdout.write(json.dumps([f.to_dict() for f in findings], indent=2) + "\n")
    elif not findings:
        out.print(f"the plan of {stack} declares nothing in {', '.join(areas)}", highlight=False)
    else:
        scope = "" if set(areas) == set(verify.AREAS) else f" ({', '.join(areas)})"
        out.print(verify.render_table(findings, f"{stack} against its plan{scope}, {region}"))
        out.print(verify.summary(findings), highlight=False)
    if verify.failed(findings):
        raise typer.Exit(EXIT_FAILED)


def _verify_plan(stack: str, plan_file: Path | None) -> dict[str, Any]:
    from llmp.synth import StackNotFound, SynthError, synthesize_stack
    from llmp.verify import PlanError, load_plan_file, validate_plan
    from spec.errors import ConfigError

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


@app.command()
def stragglers(
    source: Annotated[
        Path | None,
        typer.Argument(
            metavar="FILE",
            help="Step times, one row per rank per step: JSON lines (what train.py "
            "--step-times writes) or CSV with a header; columns step, rank, seconds and, "
            "optional, node.",
            show_default=False,
        ),
    ] = None,
    prometheus: Annotated[
        str | None, typer.Option("--prometheus", help="Read llmp_train_step_seconds from here.")
    ] = None,
    job: Annotated[str | None, typer.Option("--job", help="The job label (--prometheus).")] = None,
    range_: Annotated[str, typer.Option("--range", help="How far back (--prometheus).")] = "1h",
    resolution: Annotated[
        str, typer.Option("--resolution", help="query_range step (--prometheus).")
    ] = "15s",
    threshold: Annotated[
        float, typer.Option("--threshold", help="Slow means above median x (1 + this).")
    ] = 0.05,
    persist: Annotated[
        float, typer.Option("--persist", help="Flag when slow in at least this share of steps.")
    ] = 0.5,
    top: Annotated[int, typer.Option("--top", help="Rows per table.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Which ranks and nodes slow a synchronous job down, and by how much.

    FILE holds one row per rank per step. JSON lines, one object a line, e.g.
    {"step": 12, "rank": 3, "node": "ip-10-0-1-17", "seconds": 1.042}; or CSV (a .csv
    file, or a first line that is not JSON) whose header names the same columns, in any
    order. Columns: step (integer, required), rank (integer, required), seconds (the
    step's time on that rank, a number >= 0, required), node (optional: a rank without
    it is reported as its own node, rank-N). Other columns are ignored.

    Sample: examples/stragglers/step-times.jsonl (2 nodes x 8 ranks x 20 steps, one slow
    node). --prometheus reads the same from llmp_train_step_seconds{job,rank,node}.

    Exit 0: reported; 1: Prometheus unreachable or failing; 2: bad input.
    """
    from llmp import stragglers as st

    try:
        st.check_options(threshold, persist, top)
        trace = st.load(source, prometheus, job, range_, resolution)
        report = st.analyse(trace, threshold, persist)
    except st.BadInput as e:
        raise _fail(f"stragglers: {e}", EXIT_BAD_INPUT) from None
    except st.SourceUnavailable as e:
        raise _fail(f"stragglers: {e}", EXIT_FAILED) from None
    if as_json:
        print(st.to_json(report))
        return
    for part in st.render(report, top):
        out.print(part)


@app.command()
def loadtest(
    url: Annotated[str, typer.Argument(help="OpenAI-compatible base URL, e.g. http://host:8000")],
    concurrency: Annotated[int, typer.Option("--concurrency", help="Requests in flight.")] = 1,
    requests: Annotated[
        int | None, typer.Option("--requests", help="Stop after N requests (default 100).")
    ] = None,
    duration: Annotated[
        float | None, typer.Option("--duration", help="Stop sending after S seconds.")
    ] = None,
    api_key: Annotated[
        str | None, typer.Option("--api-key", envvar="LLMP_API_KEY", help="Bearer token.")
    ] = None,
    model: Annotated[str, typer.Option("--model", help="The `model` field.")] = "default",
    prompt_tokens: Annotated[int, typer.Option("--prompt-tokens")] = 128,
    max_tokens: Annotated[int, typer.Option("--max-tokens")] = 128,
    chat: Annotated[bool, typer.Option("--chat", help="Use /v1/chat/completions.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Per request, seconds.")] = 60.0,
    slo_ttft_p99: Annotated[
        float | None, typer.Option("--slo-ttft-p99", metavar="MS", help="Fail above this.")
    ] = None,
    slo_error_rate: Annotated[
        float | None, typer.Option("--slo-error-rate", metavar="FRACTION", help="Fail above.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Stream requests at an OpenAI-compatible endpoint; report TTFT, inter-token latency,
    tokens/s and errors. Exit 1 when an SLO is missed (or every request failed), 2 on
    bad input or an unreachable endpoint."""
    import asyncio

    from llmp import loadtest as lt

    opts = lt.Options(
        url, chat, concurrency, requests, duration, api_key, model, prompt_tokens, max_tokens,
        timeout, slo_ttft_p99, slo_error_rate,
    )  # fmt: skip
    try:
        report = asyncio.run(lt.run(opts))
    except lt.BadInput as e:
        raise _fail(f"loadtest: {e}", EXIT_BAD_INPUT) from None
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        out.print(lt.render(report))
    if report.slo_missed:
        raise _fail(f"loadtest: SLO missed: {'; '.join(report.slo_missed)}", EXIT_FAILED)


@app.command("diff")
def diff_command(
    stack: Annotated[str, typer.Argument(help="Stack name: pretrain, finetune, inference...")],
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
    from llmp.policy import PlanError, PolicyConfigError
    from llmp.revision import RevisionError, repo_root
    from llmp.synth import REPO_ROOT
    from spec.errors import ConfigError

    try:
        repo = repo_root(REPO_ROOT)
        report = plan_diff.build_report(stack, base, repo, head)
    except RevisionError as exc:
        raise _fail(str(exc), exc.exit_code) from None
    except (PlanError, PolicyConfigError, ConfigError) as exc:
        raise _fail(f"diff: {exc}", EXIT_BAD_INPUT) from None
    if markdown is not None:
        try:
            markdown.parent.mkdir(parents=True, exist_ok=True)
            markdown.write_text(plan_diff.render_markdown(report))
        except OSError as exc:
            raise _fail(f"cannot write {markdown}: {exc.strerror or exc}", EXIT_BAD_INPUT) from None
    if as_json:
        sys.stdout.write(json.dumps(plan_diff.report_to_json(report), indent=2) + "\n")
    else:
        plan_diff.render_terminal(report, out)
    code = plan_diff.exit_code(report, fail_on_replace)
    if code:
        raise typer.Exit(code)


@app.command("accept")
def accept_command(
    stack: Annotated[str, typer.Argument(help="Stack name: pretrain, finetune, inference...")],
    pool: Annotated[
        list[str] | None,
        typer.Option("--pool", metavar="POOL", help="Accept this GPU pool only (repeatable)."),
    ] = None,
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            "--kubeconfig",
            metavar="FILE",
            help="Default: $KUBECONFIG, else ~/.kube/config. The stack's: `pulumi stack output "
            "kubeconfig --show-secrets > kubeconfig` (or `aws eks update-kubeconfig`).",
        ),
    ] = None,
    context: Annotated[
        str | None, typer.Option("--context", help="The kubeconfig context to use.")
    ] = None,
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
        accept.check_options(options)
        cfg = accept.load_stack_config(stack)
        accept.pool_targets(cfg, options.pools, options.namespace)  # before any cluster call
        apis = accept.load_apis(kubeconfig, context)
        report = accept.run_acceptance(cfg, stack, apis, options, run_id=run_id, progress=err)
    except accept.AcceptError as exc:
        raise _fail(f"accept: {exc}", EXIT_BAD_INPUT) from None
    except KeyboardInterrupt:
        raise _fail(
            f"accept: interrupted; run {run_id}'s jobs were deleted unless --keep "
            f"(kubectl get jobs -A -l {accept.RUN_LABEL}={run_id})",
            EXIT_FAILED,
        ) from None
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        out.print(accept.verdict_table(report))
        out.print(accept.verdict_line(report), highlight=False)
        if report.kept:
            out.print(f"kept: {', '.join(report.kept)} (--keep)", highlight=False)
    for line in report.cleanup_errors:
        err.print(f"accept: {line}", markup=False, highlight=False, soft_wrap=True)
    if not report.passed:
        raise typer.Exit(EXIT_FAILED)


dr_app = typer.Typer(
    no_args_is_help=True,
    help="Disaster recovery: re-create a stack in another region; find the restore point.",
)
app.add_typer(dr_app, name="dr")


@dr_app.command("plan")
def dr_plan_command(
    source: Annotated[str, typer.Option("--from", help="The stack to recover, e.g. pretrain.")],
    region: Annotated[
        str, typer.Option("--region", help="Recovery region (where the replicas are).")
    ],
    stack: Annotated[
        str | None, typer.Option("--stack", help="Recovery stack name (default FROM-dr).")
    ] = None,
    zones: Annotated[
        str | None,
        typer.Option(
            "--zones",
            help="AZs of REGION, comma-separated, as many as the source has, in its order "
            "(default REGIONa,b,c...: check them).",
        ),
    ] = None,
    outputs_file: Annotated[
        Path | None,
        typer.Option(
            "--outputs",
            help="`pulumi stack output --json` of the source stack: real replica names and key.",
        ),
    ] = None,
    replica_key_arn: Annotated[
        str | None,
        typer.Option("--replica-key-arn", help="KMS key ARN of the replicas (if no --outputs)."),
    ] = None,
    reservation: Annotated[
        list[str] | None,
        typer.Option(
            "--reservation",
            metavar="POOL=cr-...",
            help="A capacity block bought in REGION for a pool (else block pools are left out).",
        ),
    ] = None,
    certificate_arn: Annotated[
        str | None,
        typer.Option("--certificate-arn", help="ACM certificate in REGION (stacks that serve)."),
    ] = None,
    replicate_to: Annotated[
        str | None,
        typer.Option("--replicate-to", help="Replicate the recovery stack's buckets here."),
    ] = None,
    bucket_prefix: Annotated[
        str | None,
        typer.Option("--bucket-prefix", help="Prefix of new buckets (default PREFIX-REGION)."),
    ] = None,
    checkpoint_interval: Annotated[
        int | None,
        typer.Option(
            "--checkpoint-interval",
            min=1,
            metavar="SECONDS",
            help="For the RPO (default monitoring.alerts.checkpoint_interval_seconds).",
        ),
    ] = None,
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Where the stack file and runbook go; the runbook says how to copy the "
            "stack file to stacks/ (--out stacks writes it there directly).",
        ),
    ] = DR_OUT_DIR,
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Write the recovery stack's config and runbook; report RTO, RPO and plan equivalence.

    The files go to out/dr/ by default, not stacks/: a stack file there is a stack every
    test and CI job synthesizes, so it is copied there (the runbook's first step) when the
    recovery is real.

    Exit 0: written, the recovery plan is equivalent to the source's; 1: synthesis failed
    or a difference no named reason explains; 2: bad input.
    """
    from llmp import dr
    from llmp.synth import StackNotFound, SynthError, stack_file, stack_name_problem
    from spec.errors import ConfigError
    from spec.stackfile import load_stack_file

    try:
        if problem := stack_name_problem(source):
            raise StackNotFound(f"--from: {problem}")
        if not stack_file(source).exists():
            raise StackNotFound(f"no stack file stacks/{stack_file(source).name} for --from")
        source_raw = load_stack_file(str(stack_file(source)))
        options = dr.RecoveryOptions(
            source_stack=source,
            region=region,
            stack=stack,
            zones=[z.strip() for z in zones.split(",")] if zones is not None else None,
            outputs=dr.load_outputs(outputs_file) if outputs_file is not None else None,
            replica_key_arn=replica_key_arn,
            reservations=dr.parse_reservations(reservation or []),
            certificate_arn=certificate_arn,
            replicate_to=replicate_to,
            bucket_prefix=bucket_prefix,
            checkpoint_interval_seconds=checkpoint_interval,
        )
        dr.check_out_dir(out_dir)
        if not force:
            dr.refuse_overwrite(options.stack_name, out_dir)
        plan = dr.make_plan(source_raw, options)
    except (ConfigError, StackNotFound, dr.DrError) as exc:
        raise _fail(str(exc), EXIT_BAD_INPUT) from None
    except FileExistsError as exc:
        raise _fail(f"{exc.args[0]} exists; pass --force to overwrite it", EXIT_BAD_INPUT) from None
    except SynthError as exc:
        raise _fail(f"synth failed: {exc}", EXIT_FAILED) from None
    try:
        written = dr.write_plan_files(plan, out_dir, force=force)
    except FileExistsError as exc:
        raise _fail(f"{exc.args[0]} exists; pass --force to overwrite it", EXIT_BAD_INPUT) from None
    except OSError as exc:
        raise _fail(f"cannot write {out_dir}: {exc.strerror or exc}", EXIT_BAD_INPUT) from None
    if as_json:
        doc = {**plan.to_dict(), "written": [str(p) for p in written]}
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    else:
        for part in dr.report_renderables(plan, written):
            out.print(part, highlight=False)
    if not plan.differences.equivalent:
        raise typer.Exit(EXIT_FAILED)


@dr_app.command("restore-point")
def dr_restore_point_command(
    bucket: Annotated[str, typer.Option("--bucket", help="The (replica) checkpoints bucket.")],
    prefix: Annotated[
        str, typer.Option("--prefix", help="The job's checkpoint prefix, e.g. runs/llama/.")
    ] = "",
    region: Annotated[str | None, typer.Option("--region", help="The bucket's region.")] = None,
    endpoint_url: Annotated[
        str | None,
        typer.Option("--endpoint-url", help="Another endpoint (moto, LocalStack) than AWS's."),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Also list the older checkpoints.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """The newest complete checkpoint under PREFIX, by the trainer's own rule (COMPLETE
    marker, manifest, every file at its recorded size), and why each newer one is skipped.

    Reads only (list and get). Exit 0: found; 1: no complete checkpoint; 2: bad input
    (no such bucket, no access, no credentials, unreachable endpoint).
    """
    from llmp import restore_point as rp

    try:
        import boto3
        import botocore.exceptions as boto_errors
    except ImportError:
        raise _fail(
            "llmp dr restore-point needs boto3: pip install boto3", EXIT_BAD_INPUT
        ) from None
    session = boto3.Session(region_name=region)
    if session.get_credentials() is None:
        raise _fail(_NO_CREDENTIALS, EXIT_BAD_INPUT)
    where = f"s3://{bucket}/{rp.normalize_prefix(prefix)}"
    try:
        s3 = session.client("s3", endpoint_url=endpoint_url)
        result = rp.find_restore_point(s3, bucket, prefix)
    except boto_errors.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        raise _fail(f"cannot read {where}: {code or exc}", EXIT_BAD_INPUT) from None
    except (boto_errors.EndpointConnectionError, boto_errors.ConnectTimeoutError) as exc:
        raise _fail(f"cannot reach the endpoint: {exc}", EXIT_BAD_INPUT) from None
    except boto_errors.NoCredentialsError:
        raise _fail(_NO_CREDENTIALS, EXIT_BAD_INPUT) from None
    except (boto_errors.BotoCoreError, ValueError) as exc:
        raise _fail(f"cannot read {where}: {exc}", EXIT_BAD_INPUT) from None
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        for part in rp.render(result, verbose=verbose):
            out.print(part, highlight=False)
    if result.chosen is None:
        raise typer.Exit(EXIT_FAILED)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
