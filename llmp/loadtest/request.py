"""One `llmp loadtest` request: a streamed completion, measured from its Server-Sent Events.

Per request:
- TTFT: from sending the request to the first chunk that carries text;
- inter-token latency (ITL): between successive text-carrying chunks;
- output tokens: the final `usage.completion_tokens` when the server sends it
  (`stream_options.include_usage`), else the number of text-carrying chunks;
- cached prompt tokens: `usage.prompt_tokens_details.cached_tokens` (vLLM reports its
  prefix-cache hits there).
An error is a transport failure or timeout, a non-2xx status, an `error` object in the
stream, or a stream that ends without `data: [DONE]`; a 429 is also marked shed (refused
by a concurrency guard).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from spec.readers import ReadError, parse_json

MAX_LINE_BYTES = 1 << 20
"""One Server-Sent Events line: a chunk of a few tokens is a few hundred bytes."""
MAX_RESPONSE_BYTES = 256 << 20
"""One streamed response (a million tokens at ~200 bytes a chunk); past it the request is
an error, and nothing more of it is read."""


class TooLarge(Exception):
    """A line or a response past its cap: `kind` says which."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


async def lines_of(
    chunks: AsyncIterator[bytes],
    max_line: int = MAX_LINE_BYTES,
    max_total: int = MAX_RESPONSE_BYTES,
) -> AsyncIterator[str]:
    """The lines of a byte stream, each at most `max_line` bytes and all of them at most
    `max_total` (TooLarge past either): memory is one line, whatever the server sends."""
    buffer = b""
    total = 0
    async for chunk in chunks:
        total += len(chunk)
        if total > max_total:
            raise TooLarge("response too large")
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line.rstrip(b"\r").decode("utf-8", "replace")
        if len(buffer) > max_line:
            raise TooLarge("SSE line too long")
    if buffer:
        yield buffer.rstrip(b"\r").decode("utf-8", "replace")


@dataclass
class Sample:
    """One request as its stream showed it."""

    ok: bool
    # Open loop only: when the schedule said to send it (seconds after the run's start),
    # and how much later it went (the client's own lag, not the server's).
    due_s: float | None = None
    lag_s: float | None = None
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    output_tokens: int = 0
    latency_s: float = 0.0
    error: str | None = None
    shed: bool = False
    prompt_tokens: int | None = None  # from usage
    cached_tokens: int | None = None
    replica: int = 0


def _chunk_text(chunk: dict[str, Any], chat: bool) -> str:
    """The text a chunk carries; ValueError for a chunk whose choices are not as the
    OpenAI API sends them (a list of objects, text as strings)."""
    choices = chunk.get("choices") or []
    if not isinstance(choices, list):
        raise ValueError("choices is no list")
    texts = []
    for choice in choices:
        if not isinstance(choice, dict):
            raise ValueError("a choice is no object")
        if chat:
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise ValueError("a delta is no object")
            text = delta.get("content") or ""
        else:
            text = choice.get("text") or ""
        if not isinstance(text, str):
            raise ValueError("a text is no string")
        texts.append(text)
    return "".join(texts)


def _read_usage(sample: Sample, usage: dict[str, Any]) -> None:
    with contextlib.suppress(TypeError, ValueError):
        if usage.get("completion_tokens") is not None:
            sample.output_tokens = int(usage["completion_tokens"])
        if usage.get("prompt_tokens") is not None:
            sample.prompt_tokens = int(usage["prompt_tokens"])
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            sample.cached_tokens = int(details["cached_tokens"])


async def one_request(client: Any, url: str, body: dict[str, Any], chat: bool) -> Sample:
    """Send `body` to `url` with `stream: true` and measure the stream (`chat`: the text is in
    `delta.content`, as /v1/chat/completions sends it)."""
    import httpx

    t0 = time.perf_counter()
    last: float | None = None
    sample = Sample(ok=False)
    chunks = 0
    done = False
    try:
        async with client.stream("POST", url, json=body) as resp:
            if resp.status_code // 100 != 2:  # its body is not read: it could be endless
                sample.error = f"HTTP {resp.status_code}"
                sample.shed = resp.status_code == 429
                return sample
            async for line in lines_of(resp.aiter_bytes()):
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                try:
                    chunk = parse_json(data, "SSE chunk", max_bytes=MAX_LINE_BYTES)
                    if not isinstance(chunk, dict):
                        raise ValueError("not an object")
                    text = _chunk_text(chunk, chat)
                except (ReadError, ValueError):
                    sample.error = "bad SSE payload"
                    return sample
                if chunk.get("error"):
                    sample.error = "error event"
                    return sample
                usage = chunk.get("usage")
                if isinstance(usage, dict):
                    _read_usage(sample, usage)
                if text:
                    now = time.perf_counter()
                    if last is None:
                        sample.ttft_s = now - t0
                    else:
                        sample.itl_s.append(now - last)
                    last = now
                    chunks += 1
    except TooLarge as exc:
        sample.error = exc.kind
        return sample
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
