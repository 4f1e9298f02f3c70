"""A fake vLLM: an OpenAI-compatible streaming server whose timing the caller sets.

It is what `llmp loadtest`'s tests and the benchmarks in `bench/` run against: no model,
no GPU, but the behaviour of a vLLM replica under load that a load test has to see.

- **API.** `POST /v1/completions` and `POST /v1/chat/completions` (SSE with
  `stream: true`, one JSON object otherwise), `GET /v1/models`, `GET /health`,
  `GET /metrics` (vLLM's gauge and counter names), and `GET /fake/stats` (the
  server-side timings of every request, for an independent measurement).
- **Tokens.** A token is a whitespace-separated word of the prompt (chat messages are
  joined with newlines); the answer is `max_tokens` words (or `output_tokens` when set).
- **Time to first token.** `ttft_s`, plus the time waiting for a slot, plus a prefill of
  `prefill_s_per_token` per prompt token not found in the prefix cache. Prefills of one
  replica run one at a time (a GPU prefills one batch at a time), so TTFT grows with the
  prompt length and with the number of requests arriving together.
- **Decode.** `itl_s` between tokens at one running sequence, stretched by
  `itl_slowdown_per_seq` for each other running sequence (a bigger batch steps slower).
- **Concurrency.** At most `max_num_seqs` requests run; the others wait in FIFO order,
  as in vLLM's scheduler.
- **Shedding** (off by default): with `shed_above` set, a request arriving while that many
  are already in flight (running or waiting) is refused at once with 429 and a
  `Retry-After` header: the effect of the serving gateway's concurrency guard.
- **Prefix cache.** Per replica, an LRU of `cache_blocks` blocks of `block_tokens`
  tokens, each keyed by a hash of the whole prompt up to its end (vLLM's automatic prefix
  caching). The longest run of cached blocks from the start of the prompt is not
  prefilled again; the usage chunk reports it as `prompt_tokens_details.cached_tokens`.

`python -m tests.llmp.fake_vllm --replicas N` serves N independent replicas on 127.0.0.1 and
prints their URLs as one JSON line; it stops by itself after `--lifetime` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import sys
import time
import uuid
from collections import OrderedDict
from dataclasses import asdict, dataclass, field, replace
from typing import Any

MAX_BODY_BYTES = 64 * 1024 * 1024
REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
}


async def _sleep_until(deadline: float) -> None:
    """Sleep until `deadline` on time.monotonic()'s clock (at once if it has passed)."""
    await asyncio.sleep(max(deadline - time.monotonic(), 0.0))


@dataclass(frozen=True)
class FakeModel:
    """How one replica behaves. Times are seconds."""

    name: str = "default"
    ttft_s: float = 0.02
    prefill_s_per_token: float = 0.0
    itl_s: float = 0.01
    itl_slowdown_per_seq: float = 0.0
    max_num_seqs: int = 256
    shed_above: int | None = None
    retry_after_s: int = 1
    block_tokens: int = 16
    cache_blocks: int = 4096
    output_tokens: int | None = None
    api_key: str | None = None
    error_every: int = 0  # every k-th request (1-based) answers 500; 0 never

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or self.block_tokens < 1 or self.cache_blocks < 0:
            raise ValueError("max_num_seqs and block_tokens >= 1, cache_blocks >= 0")
        if self.shed_above is not None and self.shed_above < 1:
            raise ValueError("shed_above must be at least 1")
        if min(self.ttft_s, self.prefill_s_per_token, self.itl_s) < 0:
            raise ValueError("times must not be negative")


@dataclass
class RequestRecord:
    """What the server saw of one request (times from the server's monotonic clock)."""

    status: int
    arrival: float
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    start: float | None = None  # got a running slot
    first_token: float | None = None
    token_times: list[float] = field(default_factory=list)
    end: float | None = None

    def summary(self) -> dict[str, Any]:
        itl = [b - a for a, b in zip(self.token_times, self.token_times[1:], strict=False)]
        return {
            "status": self.status,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "output_tokens": self.output_tokens,
            "queue_s": None if self.start is None else self.start - self.arrival,
            "ttft_s": None if self.first_token is None else self.first_token - self.arrival,
            "itl_s": itl,
            "latency_s": None if self.end is None else self.end - self.arrival,
        }


class PrefixCache:
    """An LRU of prompt blocks, keyed by the hash of the prompt up to each block's end."""

    def __init__(self, block_tokens: int, capacity_blocks: int) -> None:
        self.block_tokens = block_tokens
        self.capacity = capacity_blocks
        self.blocks: OrderedDict[bytes, None] = OrderedDict()
        self.queries = 0  # prompt tokens looked up (vLLM's prefix_cache_queries)
        self.hits = 0  # of them found (prefix_cache_hits)

    def block_keys(self, tokens: list[str]) -> list[bytes]:
        keys = []
        h = hashlib.blake2b(digest_size=16)
        full = len(tokens) // self.block_tokens
        for b in range(full):
            chunk = tokens[b * self.block_tokens : (b + 1) * self.block_tokens]
            h.update("\x00".join(chunk).encode() + b"\x01")
            keys.append(h.copy().digest())
        return keys

    def lookup_and_insert(self, tokens: list[str]) -> int:
        """Cached tokens at the start of the prompt; then the prompt's blocks are cached."""
        keys = self.block_keys(tokens)
        hit_blocks = 0
        for k in keys:
            if k not in self.blocks:
                break
            hit_blocks += 1
        # The last prompt token is always computed (vLLM recomputes it for the logits).
        cached = min(hit_blocks * self.block_tokens, max(len(tokens) - 1, 0))
        self.queries += len(tokens)
        self.hits += cached
        if self.capacity:
            for k in keys:
                self.blocks[k] = None
                self.blocks.move_to_end(k)
            while len(self.blocks) > self.capacity:
                self.blocks.popitem(last=False)
        return cached


class Replica:
    """One fake vLLM process: its scheduler state, prefix cache and records."""

    def __init__(self, model: FakeModel) -> None:
        self.model = model
        self.cache = PrefixCache(model.block_tokens, model.cache_blocks)
        self.running = 0
        self.waiting: list[asyncio.Future[None]] = []
        self.prefill_lock = asyncio.Lock()
        self.records: list[RequestRecord] = []
        self.count = 0
        self.kv_tokens = 0  # tokens held by running sequences
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []

    @property
    def in_flight(self) -> int:
        return self.running + len(self.waiting)

    async def acquire(self) -> None:
        if self.running < self.model.max_num_seqs and not self.waiting:
            self.running += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut in self.waiting:
                self.waiting.remove(fut)
            elif fut.done() and not fut.cancelled():
                self.release()  # the slot was handed over as the client left
            raise

    def release(self) -> None:
        while self.waiting:
            fut = self.waiting.pop(0)
            if not fut.done():
                fut.set_result(None)  # the slot passes to the next in line
                return
        self.running -= 1

    def metrics(self) -> str:
        m = self.model.name
        capacity = max(self.model.cache_blocks * self.model.block_tokens, 1)
        lines = [
            f'vllm:num_requests_running{{model_name="{m}"}} {self.running}',
            f'vllm:num_requests_waiting{{model_name="{m}"}} {len(self.waiting)}',
            f'vllm:kv_cache_usage_perc{{model_name="{m}"}} {min(self.kv_tokens / capacity, 1.0)}',
            f'vllm:prefix_cache_queries_total{{model_name="{m}"}} {self.cache.queries}',
            f'vllm:prefix_cache_hits_total{{model_name="{m}"}} {self.cache.hits}',
            f'vllm:request_success_total{{model_name="{m}"}} '
            f"{sum(1 for r in self.records if r.status == 200 and r.end is not None)}",
        ]
        return "\n".join(lines) + "\n"

    def stats(self) -> dict[str, Any]:
        return {
            "model": asdict(self.model) | {"api_key": None},
            "requests": [r.summary() for r in self.records],
            "prefix_cache": {"queries": self.cache.queries, "hits": self.cache.hits},
        }


def prompt_tokens(body: dict[str, Any], chat: bool) -> list[str]:
    if chat:
        parts = []
        for message in body.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                content = " ".join(
                    p.get("text", "") for p in content if isinstance(p, dict) and p.get("text")
                )
            if isinstance(content, str):
                parts.append(content)
        return "\n".join(parts).split()
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        prompt = " ".join(str(p) for p in prompt)
    return str(prompt).split()


class _Http:
    """Just enough HTTP/1.1 for a load test: one request per connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def read_request(self) -> tuple[str, str, dict[str, str], bytes] | None:
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, _ = lines[0].split(" ", 2)
        except ValueError:
            return None
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length") or 0)
        if not 0 <= n <= MAX_BODY_BYTES:
            return None
        body = await self.reader.readexactly(n) if n else b""
        return method, target.split("?", 1)[0], headers, body

    async def respond(
        self, status: int, body: bytes, ctype: str = "application/json", extra: str = ""
    ) -> None:
        reason = REASONS.get(status, "Error")
        self.writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n".encode()
            + body
        )
        await self.writer.drain()

    async def start_stream(self) -> None:
        self.writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\nConnection: close\r\n\r\n"
        )
        await self.writer.drain()

    async def event(self, obj: dict[str, Any] | str) -> None:
        data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
        self.writer.write(f"data: {data}\n\n".encode())
        await self.writer.drain()


def _error(message: str, kind: str, code: int) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


class FakeVllm:
    """N replicas, each on its own 127.0.0.1 port, in one event loop."""

    def __init__(self, models: list[FakeModel]) -> None:
        self.replicas = [Replica(m) for m in models]
        self.servers: list[asyncio.Server] = []
        self.ports: list[int] = []
        self.t0 = time.monotonic()

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    async def start(self, ports: list[int] | None = None) -> None:
        for i in range(len(self.replicas)):
            port = ports[i] if ports else 0

            async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter,
                             i: int = i) -> None:  # fmt: skip
                await self._connection(self.replicas[i], r, w)

            server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
            self.servers.append(server)
            self.ports.append(server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        for s in self.servers:
            s.close()
        for s in self.servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(s.wait_closed(), 1.0)

    async def _connection(
        self, replica: Replica, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        http = _Http(reader, writer)
        try:
            req = await http.read_request()
            if req is not None:
                await self._dispatch(replica, http, *req)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away (a deadline, a cancelled run)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _dispatch(
        self, replica: Replica, http: _Http, method: str, path: str,
        headers: dict[str, str], raw: bytes,
    ) -> None:  # fmt: skip
        m = replica.model
        if method == "GET":
            if path == "/health":
                await http.respond(200, b"")
            elif path == "/metrics":
                await http.respond(200, replica.metrics().encode(), "text/plain; version=0.0.4")
            elif path == "/fake/stats":
                await http.respond(200, json.dumps(replica.stats()).encode())
            elif path == "/v1/models":
                model = {"id": m.name, "object": "model", "owned_by": "fake",
                         "root": m.name, "max_model_len": 1 << 20}  # fmt: skip
                await http.respond(200, json.dumps({"object": "list", "data": [model]}).encode())
            else:
                await http.respond(404, _error(f"no route {path}", "NotFoundError", 404))
            return
        if method != "POST" or path not in ("/v1/completions", "/v1/chat/completions"):
            await http.respond(404, _error(f"no route {method} {path}", "NotFoundError", 404))
            return
        now = time.monotonic() - self.t0
        replica.count += 1
        n = replica.count
        if m.api_key is not None and headers.get("authorization") != f"Bearer {m.api_key}":
            replica.records.append(RequestRecord(401, now))
            await http.respond(401, _error("bad API key", "AuthenticationError", 401))
            return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError
        except ValueError:
            replica.records.append(RequestRecord(400, now))
            await http.respond(400, _error("body is not a JSON object", "BadRequestError", 400))
            return
        replica.bodies.append(body)
        replica.paths.append(path)
        if m.shed_above is not None and replica.in_flight >= m.shed_above:
            replica.records.append(RequestRecord(429, now))
            await http.respond(
                429,
                _error("too many requests in flight", "RateLimitError", 429),
                extra=f"Retry-After: {m.retry_after_s}\r\n",
            )
            return
        if m.error_every and n % m.error_every == 0:
            replica.records.append(RequestRecord(500, now))
            await http.respond(500, _error("injected failure", "InternalServerError", 500))
            return
        await self._generate(replica, http, body, path.endswith("/chat/completions"), now)

    async def _generate(
        self, replica: Replica, http: _Http, body: dict[str, Any], chat: bool, arrival: float
    ) -> None:
        m = replica.model
        tokens = prompt_tokens(body, chat)
        try:
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        except (TypeError, ValueError):
            max_tokens = 16
        n_out = max(m.output_tokens if m.output_tokens is not None else max_tokens, 1)
        rec = RequestRecord(200, arrival, prompt_tokens=len(tokens), output_tokens=n_out)
        replica.records.append(rec)
        stream = bool(body.get("stream"))
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        created = int(time.time())

        def chunk(text: str | None, finish: str | None, first: bool = False) -> dict[str, Any]:
            if chat:
                delta: dict[str, Any] = {"content": text} if text is not None else {}
                if first:
                    delta["role"] = "assistant"
                choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
                kind = "chat.completion.chunk"
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": finish}
                kind = "text_completion"
            return {"id": rid, "object": kind, "created": created, "model": m.name,
                    "choices": [choice]}  # fmt: skip

        held = False
        kv_held = 0
        try:
            await replica.acquire()
            held = True
            rec.start = time.monotonic() - self.t0
            if stream:
                await http.start_stream()
            # Each step waits until its own deadline, not for its length from whenever
            # the last one woke: on a loaded host a late wake-up then delays one token,
            # not every token after it, and the stream keeps the timing it was given.
            async with replica.prefill_lock:
                cached = replica.cache.lookup_and_insert(tokens)
                rec.cached_tokens = cached
                due = time.monotonic() + m.prefill_s_per_token * (len(tokens) - cached)
                await _sleep_until(due)
            replica.kv_tokens += len(tokens)
            kv_held += len(tokens)
            due += m.ttft_s
            await _sleep_until(due)
            words = []
            for i in range(n_out):
                if i:
                    slow = 1 + m.itl_slowdown_per_seq * max(replica.running - 1, 0)
                    due += m.itl_s * slow
                    await _sleep_until(due)
                word = f" w{i}"
                words.append(word)
                replica.kv_tokens += 1
                kv_held += 1
                t = time.monotonic() - self.t0
                if rec.first_token is None:
                    rec.first_token = t
                rec.token_times.append(t)
                if stream:
                    last = i == n_out - 1
                    await http.event(chunk(word, "length" if last else None, first=i == 0))
            usage = {
                "prompt_tokens": len(tokens),
                "completion_tokens": n_out,
                "total_tokens": len(tokens) + n_out,
                "prompt_tokens_details": {"cached_tokens": rec.cached_tokens},
            }
            if stream:
                if (body.get("stream_options") or {}).get("include_usage"):
                    await http.event({**chunk(None, None), "choices": [], "usage": usage})
                await http.event("[DONE]")
            else:
                text = "".join(words)
                choice: dict[str, Any] = (
                    {"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "length"}
                    if chat else {"index": 0, "text": text, "finish_reason": "length"}
                )  # fmt: skip
                obj = {"id": rid, "object": "chat.completion" if chat else "text_completion",
                       "created": created, "model": m.name, "choices": [choice],
                       "usage": usage}  # fmt: skip
                await http.respond(200, json.dumps(obj).encode())
            rec.end = time.monotonic() - self.t0
        finally:
            if held:
                replica.kv_tokens -= kv_held
                replica.release()


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tests.llmp.fake_vllm",
        description="Serve fake vLLM replicas on 127.0.0.1 (see the module's docstring).",
    )
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--port", type=int, default=0, help="first port (0: any free ones)")
    p.add_argument("--model", default="default")
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--prefill-us-per-token", type=float, default=0.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--itl-slowdown-per-seq", type=float, default=0.0)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--shed-above", type=int, default=None)
    p.add_argument("--retry-after", type=int, default=1)
    p.add_argument("--block-tokens", type=int, default=16)
    p.add_argument("--cache-blocks", type=int, default=4096)
    p.add_argument("--output-tokens", type=int, default=None)
    p.add_argument("--api-key", default=None)
    p.add_argument("--lifetime", type=float, default=600.0, help="stop after S seconds")
    return p.parse_args(argv)


def model_from_args(a: argparse.Namespace) -> FakeModel:
    return FakeModel(
        name=a.model,
        ttft_s=a.ttft_ms / 1000,
        prefill_s_per_token=a.prefill_us_per_token / 1e6,
        itl_s=a.itl_ms / 1000,
        itl_slowdown_per_seq=a.itl_slowdown_per_seq,
        max_num_seqs=a.max_num_seqs,
        shed_above=a.shed_above,
        retry_after_s=a.retry_after,
        block_tokens=a.block_tokens,
        cache_blocks=a.cache_blocks,
        output_tokens=a.output_tokens,
        api_key=a.api_key,
    )


async def serve(models: list[FakeModel], lifetime_s: float, first_port: int = 0) -> None:
    fake = FakeVllm(models)
    ports = [first_port + i for i in range(len(models))] if first_port else None
    await fake.start(ports)
    print(json.dumps({"urls": fake.urls}), flush=True)
    try:
        await asyncio.sleep(lifetime_s)
    finally:
        await fake.stop()


def main(argv: list[str] | None = None) -> int:
    a = _parse_args(argv)
    if not 1 <= a.replicas <= 64 or not 0 < a.lifetime <= 24 * 3600 or math.isnan(a.lifetime):
        print("fake_vllm: --replicas must be 1-64 and --lifetime in (0, 86400]", file=sys.stderr)
        return 2
    try:
        model = model_from_args(a)
    except ValueError as exc:
        print(f"fake_vllm: {exc}", file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve([replace(model) for _ in range(a.replicas)], a.lifetime, a.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())


class FakeInThread:
    """The fake on its own event loop in a daemon thread (for tests): `configure()`
    replaces every replica's model and clears what they recorded; `close()` stops it."""

    def __init__(self, models: list[FakeModel]) -> None:
        import threading

        self.loop = asyncio.new_event_loop()
        self.fake = FakeVllm(models)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.fake.start(), self.loop).result(10)

    @property
    def urls(self) -> list[str]:
        return self.fake.urls

    @property
    def replicas(self) -> list[Replica]:
        return self.fake.replicas

    def configure(self, **changes: Any) -> None:
        async def apply() -> None:
            for i, r in enumerate(self.fake.replicas):
                self.fake.replicas[i] = Replica(replace(r.model, **changes))

        asyncio.run_coroutine_threadsafe(apply(), self.loop).result(10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.fake.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
