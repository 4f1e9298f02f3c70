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
    policy: Annotated[
        bool,
        typer.Option(
            "--policy",
            help="Then run the policy pack on the plan (exit 1 on a mandatory violation).",
        ),
    ] = False,
    policy_config: Annotated[
        Path | None,
        typer.Option("--policy-config", help="CrossGuard policy-config JSON for --policy."),
    ] = None,
) -> None:
    """Run the Pulumi program under the mock runtime: no CLI, no credentials, no network.

    Prints the resource tree and counts per type, writes out/STACK/plan.json
    (secrets redacted) and every Kubernetes object to out/STACK/manifests/.
    With --policy, evaluates the policy pack on the plan like `llmp policy`.
    """
    from infra.config import ConfigError
    from llmp.synth import StackNotFound, SynthError, synthesize_stack, write_plan

    try:
        plan = synthesize_stack(stack, config)
    except (ConfigError, StackNotFound) as exc:
        raise _fail(str(exc), EXIT_BAD_INPUT) from None
    except SynthError as exc:
        raise _fail(f"synth failed: {exc}", EXIT_FAILED) from None
    try:
        target = write_plan(plan, out_dir)
    except OSError as exc:
        raise _fail(f"cannot write {out_dir}: {exc.strerror or exc}", EXIT_BAD_INPUT) from None
    overrides = _policy_overrides(policy_config) if policy else None
    if as_json:
        sys.stdout.write(json.dumps(plan.to_dict(), indent=2, sort_keys=True) + "\n")
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
            f"${hourly['max']:,.2f}/h at max size; ${cost['usd_per_month_at_desired']:,.0f}/month "
            f"at desired (prices of {cost['prices_as_of']}, {cost['price_region']})",
            highlight=False,
        )
    out.print(
        f"wrote {target / 'plan.json'} and {len(plan.manifests())} manifests", highlight=False
    )
    if policy:
        _run_policy(plan.to_dict(), overrides, as_json=False, stack_file=config, to=out)


@app.command("policy")
def policy_command(
    plan_file: Annotated[
        Path | None,
        typer.Argument(help="A plan.json written by `llmp synth` (out/STACK/plan.json)."),
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
    """Evaluate the CrossGuard policy pack (policies/) in-process against a plan.

    Every rule gets the arguments CrossGuard gives it during `pulumi preview`.
    Exit 0: no mandatory violation (advisory ones are listed); 1: a mandatory
    violation; 2: bad input (missing, unreadable or malformed plan or config).
    """
    overrides = _policy_overrides(config)
    if write_config is not None:
        _write_policy_config(write_config, overrides, to)
        return
    if plan_file is None:
        raise _fail(
            "name a plan file (llmp synth STACK writes out/STACK/plan.json)", EXIT_BAD_INPUT
        )
    from llmp.policy import PlanError, load_plan

    try:
        plan = load_plan(plan_file)
    except PlanError as exc:
        raise _fail(str(exc), EXIT_BAD_INPUT) from None
    _run_policy(plan, overrides, as_json=as_json, stack_file=None, to=out)


def _policy_overrides(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    from llmp.policy import PolicyConfigError, load_policy_config

    try:
        return load_policy_config(path)
    except PolicyConfigError as exc:
        raise _fail(str(exc), EXIT_BAD_INPUT) from None


def _write_policy_config(stack: str, overrides: dict[str, Any] | None, to: Path | None) -> None:
    from infra.config import ConfigError
    from llmp.policy import stack_policy_config
    from llmp.synth import stack_file
    from policies.config import merge

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
    from infra.config import ConfigError
    from llmp.policy import PlanError, PolicyConfigError, evaluate, failed, stack_policy_config
    from policies.config import merge

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
    from rich.text import Text

    counts = Counter(v.level for v in violations)
    summary = (
        f"policy: {counts.get('mandatory', 0)} mandatory, {counts.get('advisory', 0)} advisory"
    )
    if not violations:
        to.print(f"{summary} violations in {stack or 'the plan'}", highlight=False)
        return
    table = Table(title=f"policy violations in {stack or 'the plan'}")
    for column in ("rule", "resource", "message", "level"):
        table.add_column(column, overflow="fold")
    order = {"mandatory": 0, "advisory": 1}
    for v in sorted(violations, key=lambda v: (order.get(v.level, 2), v.rule, v.resource)):
        table.add_row(
            Text(v.rule),
            Text(v.resource),
            Text(v.message),
            Text(v.level, style=_LEVEL_STYLE.get(v.level, "")),
        )
    to.print(table)
    to.print(summary, highlight=False)


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


@app.command()
def stragglers(
    source: Annotated[
        Path | None, typer.Argument(help="Step times: JSON lines (train.py --step-times) or CSV.")
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
    """Which ranks and nodes slow a synchronous job down, and by how much (exit 0)."""
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
