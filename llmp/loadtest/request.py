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
import json
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sample:
    """One request as its stream showed it."""

    ok: bool
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
    texts = []
    for choice in chunk.get("choices") or []:
        if chat:
            texts.append((choice.get("delta") or {}).get("content") or "")
        else:
            texts.append(choice.get("text") or "")
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
            if resp.status_code // 100 != 2:
                await resp.aread()
                sample.error = f"HTTP {resp.status_code}"
                sample.shed = resp.status_code == 429
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
                if isinstance(usage, dict):
                    _read_usage(sample, usage)
                if _chunk_text(chunk, chat):
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
