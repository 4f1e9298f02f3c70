"""`llmp loadtest`: stream requests at an OpenAI-compatible endpoint and judge the SLO.

The run is `llmp.loadtest`'s; this module takes the options and shows its reports: a table
per report (`render`), or one row per rate of a sweep (`render_sweep`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from llmp import console
from llmp.errors import Failed, prefixed
from spec.readers import visible

if TYPE_CHECKING:
    from llmp.loadtest import Report


def loadtest(
    url: Annotated[
        list[str],
        typer.Argument(
            help="OpenAI-compatible base URL(s), e.g. http://host:8000; several are "
            "replicas of one model, routed by --routing."
        ),
    ],
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            help="Closed loop: requests in flight (default 1). "
            "With --rate: the cap on them (default none).",
        ),
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option(
            "--rate",
            metavar="R[,R...]",
            help="Open loop: R requests/s; several rates are a sweep, one run each.",
        ),
    ] = None,
    arrival: Annotated[
        str, typer.Option("--arrival", help="With --rate: poisson or constant.")
    ] = "poisson",
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
    prompt_tokens: Annotated[
        int, typer.Option("--prompt-tokens", help="Prompt words after any shared prefix.")
    ] = 128,
    prompt_tokens_stdev: Annotated[
        float, typer.Option("--prompt-tokens-stdev", help="Normal spread of the length.")
    ] = 0.0,
    prefix_tokens: Annotated[
        int, typer.Option("--prefix-tokens", help="A shared prefix of N words per prompt.")
    ] = 0,
    prefix_groups: Annotated[
        int, typer.Option("--prefix-groups", help="Distinct shared prefixes, drawn uniformly.")
    ] = 1,
    max_tokens: Annotated[int, typer.Option("--max-tokens")] = 128,
    seed: Annotated[int, typer.Option("--seed", help="Fixes prompts and arrivals.")] = 0,
    routing: Annotated[
        str,
        typer.Option(
            "--routing",
            help="Across several URLs: round-robin or endpoint-picker (prefix- and load-aware).",
        ),
    ] = "round-robin",
    chat: Annotated[bool, typer.Option("--chat", help="Use /v1/chat/completions.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Per request, seconds.")] = 60.0,
    slo_ttft_p99: Annotated[
        float | None, typer.Option("--slo-ttft-p99", metavar="MS", help="Fail above this.")
    ] = None,
    slo_error_rate: Annotated[
        float | None, typer.Option("--slo-error-rate", metavar="FRACTION", help="Fail above.")
    ] = None,
    goodput: Annotated[
        str | None,
        typer.Option(
            "--goodput",
            metavar="ttft:MS,itl:MS,e2el:MS",
            help="Per-request SLOs: report the share of requests inside all.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    output: Annotated[
        Path | None, typer.Option("--output", help="Also write the JSON report to FILE.")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Let --output replace an existing FILE.")
    ] = False,
) -> None:
    """Stream requests at an OpenAI-compatible endpoint; report TTFT, inter-token latency,
    tokens/s, shed (429) and errors, goodput and prefix-cache hits. Exit 1 when an SLO is
    missed (or every request failed), 2 on bad input or an unreachable endpoint."""
    import asyncio

    from llmp import loadtest as lt
    from llmp.files import refuse, write_file

    if output is not None:  # before the run, not after it
        with prefixed("loadtest"):
            refuse(output, force=force, what="--output")
    with prefixed("loadtest"):
        rates = lt.parse_rates(rate) if rate is not None else [None]
        opts = lt.Options(
            url=url[0], urls=tuple(url[1:]), chat=chat, concurrency=concurrency,
            requests=requests, duration_s=duration, api_key=api_key, model=model,
            prompt_tokens=prompt_tokens, max_tokens=max_tokens, timeout_s=timeout,
            slo_ttft_p99_ms=slo_ttft_p99, slo_error_rate=slo_error_rate, rate=rates[0],
            arrival=arrival, seed=seed, prompt_tokens_stdev=prompt_tokens_stdev,
            prefix_tokens=prefix_tokens, prefix_groups=prefix_groups,
            goodput_ms=lt.parse_goodput(goodput) if goodput else {}, routing=routing,
        )  # fmt: skip
        lt.validate(opts)
        with _progress() as progress:
            if len(rates) > 1:
                reports = asyncio.run(lt.sweep(opts, [r for r in rates if r is not None], progress))
            else:
                reports = [asyncio.run(lt.run(opts, progress))]
    doc: object = (
        reports[0].to_dict() if len(reports) == 1 else {"sweep": [r.to_dict() for r in reports]}
    )
    if output is not None:
        with prefixed("loadtest"):
            write_file(output, json.dumps(doc, indent=2) + "\n", force=force, what="--output")
    if as_json:
        print(json.dumps(doc, indent=2))
    elif len(reports) == 1:
        console.out.print(render(reports[0]))
    else:
        console.out.print(render_sweep(reports))
    missed = [
        f"{'' if r.rate is None or len(reports) == 1 else f'at {r.rate:g}/s: '}{m}"
        for r in reports
        for m in r.slo_missed
    ]
    if missed:
        raise Failed(f"loadtest: SLO missed: {'; '.join(missed)}")


@contextlib.contextmanager
def _progress() -> Iterator[Callable[[int, int | None], None] | None]:
    """A progress bar on stderr when it is a terminal; nothing in a pipe."""
    if not console.err.is_terminal:
        yield None
        return
    from rich.progress import Progress

    with Progress(console=console.err, transient=True) as bar:
        task = bar.add_task("requests", total=None)

        def update(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def render(report: Report) -> Any:
    """A rich Table of the report."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(f"loadtest {visible(report.url)}"))
    table.add_column("metric")
    table.add_column("p50", justify="right")
    table.add_column("p99", justify="right")
    for name, d in (
        ("TTFT (ms)", report.ttft_ms),
        ("inter-token latency (ms)", report.itl_ms),
        ("request latency (ms)", report.latency_ms),
    ):
        table.add_row(name, _fmt(d["p50"]), _fmt(d["p99"]))
    table.add_section()
    table.add_row("requests", str(report.requests), "")
    if report.shed:
        table.add_row("accepted / shed (429)", f"{report.accepted} / {report.shed}", "")
    errors = f"{report.errors} ({report.error_rate:.1%})"
    if report.error_kinds:
        errors += " " + ", ".join(f"{k}: {n}" for k, n in report.error_kinds.items())
    table.add_row("errors", errors, "")
    table.add_row("output tokens/s", f"{report.output_tokens_per_s:,.1f}", "")
    if report.goodput is not None:
        table.add_row("goodput", f"{report.goodput:.1%} ({report.goodput_rps:g} req/s)", "")
    if report.prefix_hit_rate is not None:
        table.add_row("prefix cache hits", f"{report.prefix_hit_rate:.1%}", "")
    if report.routing:
        spread = " ".join(str(n) for n in report.per_replica)
        table.add_row(f"routing: {report.routing}", spread, "")
    load = (f"{report.concurrency}" if report.rate is None
            else f"{report.rate:g}/s {report.arrival}")  # fmt: skip
    table.add_row("load / wall (s)", f"{load} / {report.wall_s:.2f}", "")
    if report.send_lag_ms:
        lag = report.send_lag_ms
        table.add_row("sent late by (ms)", _fmt(lag["p50"]), _fmt(lag["p99"]))
    return table


def render_sweep(reports: Sequence[Report]) -> Any:
    """One row per rate of a sweep (times in ms), narrow enough for 80 columns."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    shown = visible(reports[0].url) if reports else ""
    table = Table(title=escape(f"loadtest sweep {shown}"), box=box.SIMPLE)
    for col in ("rate/s", "sent", "shed", "err", "TTFT p50", "TTFT p99", "ITL p50",
                "ITL p99", "tok/s", "good"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in reports:
        table.add_row(
            f"{r.rate:g}", str(r.requests), str(r.shed), str(r.errors),
            _fmt(r.ttft_ms["p50"]), _fmt(r.ttft_ms["p99"]),
            _fmt(r.itl_ms["p50"]), _fmt(r.itl_ms["p99"]),
            f"{r.output_tokens_per_s:,.0f}",
            "-" if r.goodput is None else f"{r.goodput:.0%}",
        )  # fmt: skip
    return table


def register(app: typer.Typer) -> None:
    app.command("loadtest")(loadtest)
