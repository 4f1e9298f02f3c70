"""`llmp loadtest URL`: drive an OpenAI-compatible endpoint with streaming requests.

Closed loop: `concurrency` workers each send one request at a time
(`/v1/completions`, or `/v1/chat/completions` with `--chat`, always `stream: true`)
until `--requests` have been sent or `--duration` seconds have passed, whichever
comes first. It always stops by itself: requests are capped (`MAX_REQUESTS`), the
duration is capped (`MAX_DURATION_S`), each request has a timeout, and in-flight
requests are cancelled at `duration + timeout`.

Measured from the Server-Sent Events stream, per request:
- TTFT: from sending the request to the first chunk that carries text;
- inter-token latency (ITL): between successive text-carrying chunks;
- output tokens: the final `usage.completion_tokens` when the server sends it
  (`stream_options.include_usage`), else the number of text-carrying chunks.
An error is a transport failure or timeout, a non-2xx status, an `error` object in the
stream, or a stream that ends without `data: [DONE]`.

The prompt is `--prompt-tokens` repetitions of a word that is one token in common
BPE vocabularies: an approximation of the prompt length, not an exact count.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from llmp import errors

MAX_REQUESTS = 1_000_000
MAX_DURATION_S = 24 * 3600.0
MAX_CONCURRENCY = 4096
PROMPT_WORD = "hello"


class BadInput(errors.BadInput):
    """Exit 2: bad arguments or an unreachable endpoint."""


@dataclass(frozen=True)
class Options:
    url: str
    chat: bool = False
    concurrency: int = 1
    requests: int | None = None
    duration_s: float | None = None
    api_key: str | None = None
    model: str = "default"
    prompt_tokens: int = 128
    max_tokens: int = 128
    timeout_s: float = 60.0
    slo_ttft_p99_ms: float | None = None
    slo_error_rate: float | None = None


@dataclass
class Sample:
    ok: bool
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    output_tokens: int = 0
    latency_s: float = 0.0
    error: str | None = None


@dataclass
class Report:
    url: str
    concurrency: int
    requests: int
    errors: int
    error_rate: float
    wall_s: float
    output_tokens: int
    output_tokens_per_s: float
    ttft_ms: dict[str, float | None]
    itl_ms: dict[str, float | None]
    latency_ms: dict[str, float | None]
    error_kinds: dict[str, int]
    slo_missed: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def endpoint_url(url: str, chat: bool) -> str:
    """The request URL: a full `.../completions` URL as given, else the OpenAI path
    appended to a base (`http://host:8000`, `http://host:8000/v1`)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(f"not an http(s) URL: {url!r}")
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise BadInput(f"bad port in URL: {url!r}") from None
    path = parts.path.rstrip("/")
    if not path.endswith("/completions"):
        if not path.endswith("/v1"):
            path += "/v1"
        path += "/chat/completions" if chat else "/completions"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def validate(opts: Options) -> None:
    if not 1 <= opts.concurrency <= MAX_CONCURRENCY:
        raise BadInput(f"--concurrency must be between 1 and {MAX_CONCURRENCY}")
    if opts.requests is not None and not 1 <= opts.requests <= MAX_REQUESTS:
        raise BadInput(f"--requests must be between 1 and {MAX_REQUESTS}")
    if opts.duration_s is not None and not 0 < opts.duration_s <= MAX_DURATION_S:
        raise BadInput(f"--duration must be in (0, {MAX_DURATION_S:.0f}] seconds")
    if opts.prompt_tokens < 1 or opts.max_tokens < 1:
        raise BadInput("--prompt-tokens and --max-tokens must be at least 1")
    if not opts.timeout_s > 0:
        raise BadInput("--timeout must be positive")
    if opts.slo_error_rate is not None and not 0 <= opts.slo_error_rate <= 1:
        raise BadInput("--slo-error-rate is a fraction between 0 and 1")
    if opts.slo_ttft_p99_ms is not None and not opts.slo_ttft_p99_ms > 0:
        raise BadInput("--slo-ttft-p99 must be positive (milliseconds)")


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def request_body(opts: Options) -> dict[str, Any]:
    prompt = " ".join([PROMPT_WORD] * opts.prompt_tokens)
    body: dict[str, Any] = {
        "model": opts.model,
        "max_tokens": opts.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
    }
    if opts.chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def _chunk_text(chunk: dict[str, Any], chat: bool) -> str:
    texts = []
    for choice in chunk.get("choices") or []:
        if chat:
            texts.append((choice.get("delta") or {}).get("content") or "")
        else:
            texts.append(choice.get("text") or "")
    return "".join(texts)


async def one_request(client: Any, url: str, body: dict[str, Any], opts: Options) -> Sample:
    import httpx

    t0 = time.perf_counter()
    last: float | None = None
    sample = Sample(ok=False)
    chunks = 0
    done = False
    try:
        async with client.stream("POST", url, json=body) as resp:
            if resp.status_code // 100 != 2:
                await resp.aread()
                sample.error = f"HTTP {resp.status_code}"
                return sample
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                try:
                    chunk = json.loads(data)
                except ValueError:
                    sample.error = "bad SSE payload"
                    return sample
                if not isinstance(chunk, dict):
                    sample.error = "bad SSE payload"
                    return sample
                if chunk.get("error"):
                    sample.error = "error event"
                    return sample
                usage = chunk.get("usage")
                if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                    sample.output_tokens = int(usage["completion_tokens"])
                if _chunk_text(chunk, opts.chat):
                    now = time.perf_counter()
                    if last is None:
                        sample.ttft_s = now - t0
                    else:
                        sample.itl_s.append(now - last)
                    last = now
                    chunks += 1
    except httpx.TimeoutException:
        sample.error = "timeout"
        return sample
    except httpx.HTTPError as exc:
        sample.error = type(exc).__name__
        return sample
    if not done:
        sample.error = "stream ended without [DONE]"
        return sample
    sample.ok = True
    sample.output_tokens = sample.output_tokens or chunks
    sample.latency_s = time.perf_counter() - t0
    return sample


async def _reachable(url: str, timeout_s: float) -> None:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(parts.hostname, port), min(timeout_s, 10.0)
        )
    except (OSError, TimeoutError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise BadInput(f"cannot reach {parts.hostname}:{port}: {reason}") from None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


async def run(opts: Options) -> Report:
    import httpx

    validate(opts)
    url = endpoint_url(opts.url, opts.chat)
    await _reachable(url, opts.timeout_s)
    total = opts.requests if opts.requests is not None else MAX_REQUESTS
    if opts.requests is None and opts.duration_s is None:
        total = 100
    duration = opts.duration_s if opts.duration_s is not None else MAX_DURATION_S
    body = request_body(opts)
    headers = {"Accept": "text/event-stream"}
    if opts.api_key:
        headers["Authorization"] = f"Bearer {opts.api_key}"
    samples: list[Sample] = []
    issued = 0
    start = time.perf_counter()
    stop_issuing = start + duration

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal issued
        while issued < total and time.perf_counter() < stop_issuing:
            issued += 1
            try:  # a total cap: httpx's timeout is per read, and a trickle never trips it
                async with asyncio.timeout(opts.timeout_s):
                    sample = await one_request(client, url, body, opts)
            except TimeoutError:
                sample = Sample(ok=False, error="timeout")
            samples.append(sample)

    limits = httpx.Limits(max_connections=opts.concurrency, max_keepalive_connections=0)
    timeout = httpx.Timeout(opts.timeout_s)
    async with httpx.AsyncClient(
        headers=headers, limits=limits, timeout=timeout, trust_env=False
    ) as client:
        tasks = [asyncio.create_task(worker(client)) for _ in range(opts.concurrency)]
        # Hard stop: whatever is still in flight after duration + timeout is cancelled.
        hard = None if opts.duration_s is None else duration + opts.timeout_s
        _, pending = await asyncio.wait(tasks, timeout=hard)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if pending:
            samples.extend(Sample(ok=False, error="cancelled at deadline") for _ in pending)
    wall = time.perf_counter() - start
    return summarize(opts, url, samples, wall)


def _ms(values: Sequence[float]) -> dict[str, float | None]:
    def r(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 2)

    return {"p50": r(percentile(values, 50)), "p99": r(percentile(values, 99))}


def summarize(opts: Options, url: str, samples: list[Sample], wall_s: float) -> Report:
    ok = [s for s in samples if s.ok]
    errors = len(samples) - len(ok)
    error_rate = errors / len(samples) if samples else 1.0
    kinds: dict[str, int] = {}
    for s in samples:
        if not s.ok:
            kinds[s.error or "error"] = kinds.get(s.error or "error", 0) + 1
    tokens = sum(s.output_tokens for s in ok)
    ttft = [s.ttft_s for s in ok if s.ttft_s is not None]
    itl = [x for s in ok for x in s.itl_s]
    report = Report(
        url=url,
        concurrency=opts.concurrency,
        requests=len(samples),
        errors=errors,
        error_rate=round(error_rate, 6),
        wall_s=round(wall_s, 3),
        output_tokens=tokens,
        output_tokens_per_s=round(tokens / wall_s, 2) if wall_s > 0 else 0.0,
        ttft_ms=_ms(ttft),
        itl_ms=_ms(itl),
        latency_ms=_ms([s.latency_s for s in ok]),
        error_kinds=dict(sorted(kinds.items())),
        slo_missed=[],
    )
    report.slo_missed = slo_misses(opts, report)
    return report


def slo_misses(opts: Options, report: Report) -> list[str]:
    missed = []
    if report.requests and report.errors == report.requests:
        missed.append(f"all {report.requests} requests failed")
    if opts.slo_ttft_p99_ms is not None:
        p99 = report.ttft_ms["p99"]
        if p99 is None:
            missed.append("TTFT p99 unmeasured (no successful request)")
        elif p99 > opts.slo_ttft_p99_ms:
            missed.append(f"TTFT p99 {p99:.1f} ms > {opts.slo_ttft_p99_ms:g} ms")
    if opts.slo_error_rate is not None and report.error_rate > opts.slo_error_rate:
        missed.append(f"error rate {report.error_rate:.4g} > {opts.slo_error_rate:g}")
    return missed


def render(report: Report) -> Any:
    """A rich Table of the report."""
    from rich.table import Table

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:,.1f}"

    table = Table(title=f"loadtest {report.url}")
    table.add_column("metric")
    table.add_column("p50", justify="right")
    table.add_column("p99", justify="right")
    for name, d in (
        ("TTFT (ms)", report.ttft_ms),
        ("inter-token latency (ms)", report.itl_ms),
        ("request latency (ms)", report.latency_ms),
    ):
        table.add_row(name, fmt(d["p50"]), fmt(d["p99"]))
    table.add_section()
    table.add_row("requests", str(report.requests), "")
    errors = f"{report.errors} ({report.error_rate:.1%})"
    if report.error_kinds:
        errors += " " + ", ".join(f"{k}: {n}" for k, n in report.error_kinds.items())
    table.add_row("errors", errors, "")
    table.add_row("output tokens/s", f"{report.output_tokens_per_s:,.1f}", "")
    table.add_row("concurrency / wall (s)", f"{report.concurrency} / {report.wall_s:.2f}", "")
    return table
