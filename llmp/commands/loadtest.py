"""`llmp loadtest`: stream requests at an OpenAI-compatible endpoint and judge the SLO."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from llmp import console
from llmp.errors import Failed, prefixed


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
    with prefixed("loadtest"):
        report = asyncio.run(lt.run(opts))
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        console.out.print(lt.render(report))
    if report.slo_missed:
        raise Failed(f"loadtest: SLO missed: {'; '.join(report.slo_missed)}")


def register(app: typer.Typer) -> None:
    app.command("loadtest")(loadtest)
