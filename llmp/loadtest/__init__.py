"""`llmp loadtest URL [URL...]`: drive an OpenAI-compatible endpoint with streaming requests.

Two ways to send (`/v1/completions`, or `/v1/chat/completions` with `--chat`, always
`stream: true`), as the field's benchmark clients do:
- closed loop (the default): `concurrency` workers each send one request at a time;
- open loop (`--rate R`): requests arrive at R per second, with Poisson (exponential
  gaps, the default) or constant arrivals, whatever the server's state; `--concurrency`
  then caps the requests in flight (unbounded by default). Several rates (`--rate 2,4,8`)
  are a sweep: one run per rate, one report each.
Either stops after `--requests` or when `--duration` seconds have passed, whichever comes
first. It always stops by itself: requests are capped (`MAX_REQUESTS`), the duration is
capped (`MAX_DURATION_S`), each request has a timeout, and in-flight requests are
cancelled at `duration + timeout`.

Connections are kept alive and reused, as guidellm and the OpenAI SDK keep them: only
the first request on each connection pays for the TCP (and TLS) handshake.

Each request is measured from its Server-Sent Events stream (`llmp.loadtest.request`):
TTFT, inter-token latency (ITL), output tokens, and cached prompt tokens, giving the prefix
hit rate. An error is a transport failure or timeout, a non-2xx status, an `error` object
in the stream, or a stream that ends without `data: [DONE]`. A 429 is also counted apart as
shed (refused by a concurrency guard); `accepted` is every other request.

Goodput (`--goodput ttft:MS,itl:MS,e2el:MS`) is the share of all requests sent that
succeeded inside every given per-request SLO (TTFT; mean ITL of the request, the
time per output token; end-to-end latency), as vLLM's benchmark defines it.

Prompts are words drawn from a fixed vocabulary of common English words, each one token
in common BPE vocabularies (llmp/loadtest/words.txt): the length is an approximation,
not an exact count. Their length is `--prompt-tokens`, or normal around it with
`--prompt-tokens-stdev`; with `--prefix-tokens P` each prompt starts with one of
`--prefix-groups` shared prefixes of P words (a system prompt, a few-shot header), drawn
uniformly. `--seed` fixes prompts and arrivals.

With several URLs (replicas of one model) each request goes to one of them as
`--routing` says: `round-robin`, or `endpoint-picker` (llmp.loadtest.routing: the Gateway API
Inference Extension endpoint picker's scoring, re-implemented client-side).

The command (`llmp.commands.loadtest`) renders a report as a table.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib.resources import files
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from llmp import errors
from llmp.loadtest import routing
from llmp.loadtest.request import Sample, one_request
from spec.readers import host_problem, redact_url, visible

MAX_REQUESTS = 1_000_000
MAX_DURATION_S = 24 * 3600.0
MAX_CONCURRENCY = 4096
MAX_RATE = 100_000.0
MAX_PROMPT_TOKENS = 1_000_000
ARRIVALS = ("poisson", "constant")
GOODPUT_METRICS = ("ttft", "itl", "e2el")
# One token each in common BPE vocabularies (GPT-2, Llama 3): prompts made of them have
# about as many tokens as words. The list ships with the package, one word a line.
VOCABULARY: tuple[str, ...] = tuple(
    files("llmp.loadtest").joinpath("words.txt").read_text(encoding="utf-8").split()
)


class BadInput(errors.BadInput):
    """Exit 2: bad arguments or an unreachable endpoint."""


@dataclass(frozen=True)
class Options:
    url: str
    chat: bool = False
    concurrency: int | None = None  # closed loop: 1; open loop: unbounded
    requests: int | None = None
    duration_s: float | None = None
    api_key: str | None = None
    model: str = "default"
    prompt_tokens: int = 128
    max_tokens: int = 128
    timeout_s: float = 60.0
    slo_ttft_p99_ms: float | None = None
    slo_error_rate: float | None = None
    rate: float | None = None
    arrival: str = "poisson"
    seed: int = 0
    prompt_tokens_stdev: float = 0.0
    prefix_tokens: int = 0
    prefix_groups: int = 1
    goodput_ms: dict[str, float] = field(default_factory=dict)
    urls: tuple[str, ...] = ()  # more replicas of the same model, after `url`
    routing: str = "round-robin"

    @property
    def all_urls(self) -> list[str]:
        return [self.url, *self.urls]


@dataclass
class Report:
    url: str
    concurrency: int | None
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
    # Per request: (latency - TTFT) / (output tokens - 1), vLLM's TPOT (guidellm's ITL).
    tpot_ms: dict[str, float | None] = field(default_factory=dict)
    # Open loop: how late the client sent requests against its schedule (waits at the
    # --concurrency cap included). A p99 near the mean gap means the client, not the
    # server, limited the rate it offered.
    send_lag_ms: dict[str, float | None] = field(default_factory=dict)
    rate: float | None = None
    arrival: str | None = None
    accepted: int = 0
    shed: int = 0
    goodput: float | None = None
    goodput_rps: float | None = None
    goodput_slo_ms: dict[str, float] = field(default_factory=dict)
    prefix_hit_rate: float | None = None
    routing: str | None = None
    per_replica: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_rates(text: str) -> list[float]:
    """`--rate 2` or a sweep `--rate 1,2,4.5` (requests per second)."""
    rates = []
    for part in text.split(","):
        try:
            r = float(part)
        except ValueError:
            raise BadInput(f"--rate: {part.strip()!r} is not a number (e.g. 4 or 1,2,4)") from None
        if not 0 < r <= MAX_RATE or math.isnan(r):
            raise BadInput(f"--rate: {part.strip()} must be in (0, {MAX_RATE:g}] requests/s")
        rates.append(r)
    return rates


def parse_goodput(text: str) -> dict[str, float]:
    """`ttft:300,itl:50,e2el:2000` (milliseconds) -> {"ttft": 300.0, ...}."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition(":")
        name = name.strip().lower()
        try:
            ms = float(value)
        except ValueError:
            ms = -1.0
        if not sep or name not in GOODPUT_METRICS or not ms > 0:
            raise BadInput(
                f"--goodput: {part!r} is not METRIC:MS with METRIC one of "
                f"{', '.join(GOODPUT_METRICS)} and MS > 0 (e.g. ttft:300,itl:50)"
            )
        out[name] = ms
    return out


def endpoint_url(url: str, chat: bool) -> str:
    """The request URL: a full `.../completions` URL as given, else the OpenAI path
    appended to a base (`http://host:8000`, `http://host:8000/v1`)."""
    shown = visible(redact_url(url), 60)
    try:
        parts = urlsplit(url.strip())
    except ValueError as exc:  # an unclosed IPv6 bracket, say
        raise BadInput(f"not a URL: {shown} ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(f"not an http(s) URL: {shown}; give one like http://host:8000")
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise BadInput(f"bad port in URL: {shown}; a port is 1 to 65535") from None
    problem = host_problem(parts.hostname)
    if problem is not None:
        raise BadInput(f"not a host name in URL {shown}: {problem}")
    path = parts.path.rstrip("/")
    if not path.endswith("/completions"):
        if not path.endswith("/v1"):
            path += "/v1"
        path += "/chat/completions" if chat else "/completions"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def validate(opts: Options) -> None:
    if opts.concurrency is not None and not 1 <= opts.concurrency <= MAX_CONCURRENCY:
        raise BadInput(f"--concurrency must be between 1 and {MAX_CONCURRENCY}")
    if opts.requests is not None and not 1 <= opts.requests <= MAX_REQUESTS:
        raise BadInput(f"--requests must be between 1 and {MAX_REQUESTS}")
    if opts.duration_s is not None and not 0 < opts.duration_s <= MAX_DURATION_S:
        raise BadInput(f"--duration must be in (0, {MAX_DURATION_S:.0f}] seconds")
    if opts.prompt_tokens < 1 or opts.max_tokens < 1:
        raise BadInput("--prompt-tokens and --max-tokens must be at least 1")
    if opts.prompt_tokens > MAX_PROMPT_TOKENS or opts.prefix_tokens > MAX_PROMPT_TOKENS:
        raise BadInput(f"--prompt-tokens and --prefix-tokens are at most {MAX_PROMPT_TOKENS}")
    if not opts.timeout_s > 0:
        raise BadInput("--timeout must be positive")
    if opts.slo_error_rate is not None and not 0 <= opts.slo_error_rate <= 1:
        raise BadInput("--slo-error-rate is a fraction between 0 and 1")
    if opts.slo_ttft_p99_ms is not None and not opts.slo_ttft_p99_ms > 0:
        raise BadInput("--slo-ttft-p99 must be positive (milliseconds)")
    if opts.rate is not None and (not 0 < opts.rate <= MAX_RATE or math.isnan(opts.rate)):
        raise BadInput(f"--rate must be in (0, {MAX_RATE:g}] requests/s")
    if opts.arrival not in ARRIVALS:
        raise BadInput(f"--arrival must be one of {', '.join(ARRIVALS)}, not {opts.arrival!r}")
    if not 0 <= opts.prompt_tokens_stdev <= MAX_PROMPT_TOKENS:
        raise BadInput("--prompt-tokens-stdev must be 0 or more")
    if opts.prefix_tokens < 0 or not 1 <= opts.prefix_groups <= 100_000:
        raise BadInput("--prefix-tokens must be 0 or more, --prefix-groups 1 to 100000")
    if opts.routing not in routing.POLICIES:
        raise BadInput(
            f"--routing must be one of {', '.join(routing.POLICIES)}, not {opts.routing!r}"
        )


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class Prompts:
    """The prompts of a run, reproducible from `seed`: words of VOCABULARY, an optional
    shared prefix (one of `prefix_groups`), then a part of the request's own."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.rng = random.Random(opts.seed)
        self.prefixes = [
            random.Random(f"{opts.seed}-prefix-{g}").choices(VOCABULARY, k=opts.prefix_tokens)
            for g in range(opts.prefix_groups if opts.prefix_tokens else 0)
        ]

    def length(self) -> int:
        o = self.opts
        if not o.prompt_tokens_stdev:
            return o.prompt_tokens
        n = round(self.rng.gauss(o.prompt_tokens, o.prompt_tokens_stdev))
        return min(max(n, 1), MAX_PROMPT_TOKENS)

    def next(self) -> list[str]:
        words = list(self.rng.choice(self.prefixes)) if self.prefixes else []
        words += self.rng.choices(VOCABULARY, k=self.length())
        return words


def request_body(opts: Options, words: list[str] | None = None) -> dict[str, Any]:
    prompt = " ".join(words if words is not None else Prompts(opts).next())
    body: dict[str, Any] = {
        "model": opts.model,
        "max_tokens": opts.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
        "ignore_eos": True,  # vLLM: always max_tokens, so runs compare
    }
    if opts.chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


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


Progress = Callable[[int, int | None], None]  # (done, total or None)


def _base(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


async def run(opts: Options, progress: Progress | None = None) -> Report:
    import anyio.lowlevel
    import httpx

    validate(opts)
    urls = [endpoint_url(u, opts.chat) for u in opts.all_urls]
    for u in dict.fromkeys(urls):
        await _reachable(u, opts.timeout_s)
    total = opts.requests if opts.requests is not None else MAX_REQUESTS
    if opts.requests is None and opts.duration_s is None:
        total = 100
    duration = opts.duration_s if opts.duration_s is not None else MAX_DURATION_S
    prompts = Prompts(opts)
    router = routing.make_router(opts.routing, len(urls), opts.seed) if len(urls) > 1 else None
    arrivals = random.Random(f"{opts.seed}-arrivals")
    headers = {"Accept": "text/event-stream"}
    if opts.api_key:
        headers["Authorization"] = f"Bearer {opts.api_key}"
    samples: list[Sample] = []
    issued = 0
    open_loop = opts.rate is not None
    cap = opts.concurrency or (MAX_CONCURRENCY if open_loop else 1)
    start = time.perf_counter()
    stop_issuing = start + duration

    def report_progress() -> None:
        if progress is not None:
            progress(len(samples), None if opts.requests is None and opts.duration_s else total)

    async def one(client: httpx.AsyncClient, due: float | None = None) -> None:
        sent = time.perf_counter() - start
        words = prompts.next()
        replica = router.pick(words) if router is not None else 0
        body = request_body(opts, words)
        try:  # a total cap: httpx's timeout is per read, and a trickle never trips it
            async with asyncio.timeout(opts.timeout_s):
                sample = await one_request(client, urls[replica], body, opts.chat)
        except TimeoutError:
            sample = Sample(ok=False, error="timeout")
        sample.replica = replica
        if due is not None:
            sample.due_s, sample.lag_s = due, max(sent - due, 0.0)
        samples.append(sample)
        report_progress()

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal issued
        while issued < total and time.perf_counter() < stop_issuing:
            issued += 1
            await one(client)

    async def arrive(client: httpx.AsyncClient) -> None:
        nonlocal issued
        assert opts.rate is not None
        slots = asyncio.Semaphore(cap)
        in_flight: set[asyncio.Task[None]] = set()
        next_at = start
        while issued < total:
            gap = arrivals.expovariate(opts.rate) if opts.arrival == "poisson" else 1 / opts.rate
            next_at += gap if issued else 0.0
            if next_at >= stop_issuing:
                break
            await asyncio.sleep(max(next_at - time.perf_counter(), 0))
            await slots.acquire()  # at the cap, an arrival waits for a request to end
            issued += 1

            async def bounded(due: float = next_at - start) -> None:
                try:
                    await one(client, due)
                finally:
                    slots.release()

            task = asyncio.create_task(bounded())
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        if in_flight:
            await asyncio.gather(*in_flight)

    # Connections are kept and reused, as the field's clients (guidellm, the OpenAI SDK)
    # do: a request's TTFT is then the server's and one round trip, not a TCP (and TLS)
    # handshake each time; only the first request on each connection pays that.
    limits = httpx.Limits(max_connections=cap, max_keepalive_connections=cap)
    timeout = httpx.Timeout(opts.timeout_s)
    async with httpx.AsyncClient(
        headers=headers, limits=limits, timeout=timeout, trust_env=False
    ) as client, httpx.AsyncClient(trust_env=False) as scrape_client:  # fmt: skip
        if router is not None:
            await router.start(scrape_client, [_base(u) for u in urls])
        # The clock starts once the clients exist: making them takes a while (TLS
        # contexts), and arrivals due meanwhile would otherwise go out in a burst. The
        # transport's async backend (anyio's, which httpcore runs on) is loaded on its
        # first use: loaded here, it is not in the first request's TTFT (0.2 s of it
        # without compiled bytecode).
        await anyio.lowlevel.checkpoint()
        start = time.perf_counter()
        stop_issuing = start + duration
        if open_loop:
            tasks = [asyncio.create_task(arrive(client))]
        else:
            tasks = [asyncio.create_task(worker(client)) for _ in range(cap)]
        # Hard stop: whatever is still in flight after duration + timeout is cancelled.
        hard = None if opts.duration_s is None else duration + opts.timeout_s
        _, pending = await asyncio.wait(tasks, timeout=hard)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        lost = issued - len(samples)
        if lost > 0:
            samples.extend(Sample(ok=False, error="cancelled at deadline") for _ in range(lost))
        if router is not None:
            await router.stop()
    wall = time.perf_counter() - start
    report = summarize(opts, ", ".join(urls), samples, wall)
    report.per_replica = [sum(1 for s in samples if s.replica == i) for i in range(len(urls))]
    report.routing = router.name if router is not None else None
    return report


async def sweep(opts: Options, rates: Sequence[float], progress: Progress | None = None
                ) -> list[Report]:  # fmt: skip
    """One run per rate, in the order given, on the same prompts (same seed)."""
    from dataclasses import replace

    return [await run(replace(opts, rate=r), progress) for r in rates]


def _ms(values: Sequence[float]) -> dict[str, float | None]:
    def r(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 2)

    mean = sum(values) / len(values) if values else None
    return {
        "mean": r(mean),
        "p50": r(percentile(values, 50)),
        "p90": r(percentile(values, 90)),
        "p99": r(percentile(values, 99)),
    }


def is_good(s: Sample, slo_ms: dict[str, float]) -> bool:
    """A request inside every per-request SLO given (milliseconds)."""
    if not s.ok:
        return False
    if "ttft" in slo_ms and (s.ttft_s is None or s.ttft_s * 1000 > slo_ms["ttft"]):
        return False
    if "itl" in slo_ms and s.itl_s and sum(s.itl_s) / len(s.itl_s) * 1000 > slo_ms["itl"]:
        return False
    return not ("e2el" in slo_ms and s.latency_s * 1000 > slo_ms["e2el"])


def summarize(opts: Options, url: str, samples: list[Sample], wall_s: float) -> Report:
    ok = [s for s in samples if s.ok]
    errors = len(samples) - len(ok)
    shed = sum(1 for s in samples if s.shed)
    error_rate = errors / len(samples) if samples else 1.0
    kinds: dict[str, int] = {}
    for s in samples:
        if not s.ok:
            kinds[s.error or "error"] = kinds.get(s.error or "error", 0) + 1
    tokens = sum(s.output_tokens for s in ok)
    ttft = [s.ttft_s for s in ok if s.ttft_s is not None]
    itl = [x for s in ok for x in s.itl_s]
    with_usage = [s for s in ok if s.cached_tokens is not None and s.prompt_tokens]
    prompt_total = sum(s.prompt_tokens or 0 for s in with_usage)
    good = None
    if opts.goodput_ms:
        good = sum(1 for s in samples if is_good(s, opts.goodput_ms))
    report = Report(
        url=redact_url(url),  # a password in a URL is neither printed nor saved
        concurrency=opts.concurrency if opts.rate is not None else opts.concurrency or 1,
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
        tpot_ms=_ms([sum(s.itl_s) / len(s.itl_s) for s in ok if s.itl_s]),
        send_lag_ms=_ms([s.lag_s for s in samples if s.lag_s is not None])
        if opts.rate is not None else {},
        rate=opts.rate,
        arrival=opts.arrival if opts.rate is not None else None,
        accepted=len(samples) - shed,
        shed=shed,
        goodput=None if good is None or not samples else round(good / len(samples), 6),
        goodput_rps=None if good is None or wall_s <= 0 else round(good / wall_s, 3),
        goodput_slo_ms=dict(opts.goodput_ms),
        prefix_hit_rate=(
            round(sum(s.cached_tokens or 0 for s in with_usage) / prompt_total, 6)
            if prompt_total
            else None
        ),
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
