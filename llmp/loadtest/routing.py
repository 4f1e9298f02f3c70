"""Client-side routing for `llmp loadtest` across several replicas of one model.

Two policies, so that a load test can measure what KV-cache-aware routing changes:

- `round-robin`: replica i, i+1, ... in turn (what a plain Kubernetes Service gives, on
  average).
- `endpoint-picker`: our implementation of the scheduling policy of the Gateway API
  Inference Extension's endpoint picker (EPP), as llm-d-router v0.10.0 ships it in its
  default profile: three scorers, each in [0, 1], summed with weights, highest total wins
  (`max-score-picker`, ties broken at random):
  - `queue-scorer` (weight 2): (max queue - queue) / (max queue - min queue) over the
    candidates, from each replica's `vllm:num_requests_waiting`; all equal -> 1;
  - `kv-cache-utilization-scorer` (weight 2): 1 - `vllm:kv_cache_usage_perc`;
  - `prefix-cache-scorer` (weight 3): matched blocks / prompt blocks, where the match
    comes from the approximate prefix producer: the prompt's tokens hashed in chained
    blocks (64 tokens: the EPP's floor), looked up in a per-replica LRU of the blocks the
    picker itself sent there (31,250 blocks each), longest run from the start.
  The replicas' metrics are scraped from `/metrics` every 50 ms, as the EPP does.

This is not the EPP: it is its policy, re-implemented to run in the load-test harness
against the fake server (`tests.llmp.fake_vllm`); the real router runs in the cluster as an
Envoy ext_proc service. Tokens here are whitespace-separated words.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections import OrderedDict
from typing import Any

POLICIES = ("round-robin", "endpoint-picker")
QUEUE_WEIGHT = 2.0
KV_WEIGHT = 2.0
PREFIX_WEIGHT = 3.0
PREFIX_BLOCK_TOKENS = 64
LRU_BLOCKS_PER_SERVER = 31_250
METRICS_INTERVAL_S = 0.05


class RoundRobin:
    name = "round-robin"

    def __init__(self, n: int) -> None:
        self.n = n
        self.next = 0

    def pick(self, tokens: list[str]) -> int:
        i = self.next
        self.next = (self.next + 1) % self.n
        return i

    async def start(self, client: Any, urls: list[str]) -> None:
        return None

    async def stop(self) -> None:
        return None


def block_hashes(tokens: list[str], block_tokens: int) -> list[bytes]:
    """Chained hashes of the prompt's full blocks: block k's hash covers blocks 0..k."""
    h = hashlib.blake2b(digest_size=16)
    out = []
    for b in range(len(tokens) // block_tokens):
        h.update("\x00".join(tokens[b * block_tokens : (b + 1) * block_tokens]).encode())
        out.append(h.copy().digest())
    return out


class EndpointPicker:
    name = "endpoint-picker"

    def __init__(
        self,
        n: int,
        *,
        seed: int = 0,
        block_tokens: int = PREFIX_BLOCK_TOKENS,
        lru_blocks: int = LRU_BLOCKS_PER_SERVER,
    ) -> None:
        self.n = n
        self.block_tokens = block_tokens
        self.lru_blocks = lru_blocks
        self.index: list[OrderedDict[bytes, None]] = [OrderedDict() for _ in range(n)]
        self.waiting = [0.0] * n
        self.kv_usage = [0.0] * n
        self.rng = random.Random(seed)
        self._scraper: asyncio.Task[None] | None = None

    def scores(self, tokens: list[str]) -> list[float]:
        blocks = block_hashes(tokens, self.block_tokens)
        lo, hi = min(self.waiting), max(self.waiting)
        out = []
        for i in range(self.n):
            queue = 1.0 if hi == lo else (hi - self.waiting[i]) / (hi - lo)
            kv = 1.0 - min(max(self.kv_usage[i], 0.0), 1.0)
            matched = 0
            for h in blocks:
                if h not in self.index[i]:
                    break
                matched += 1
            prefix = matched / len(blocks) if blocks else 0.0
            out.append(QUEUE_WEIGHT * queue + KV_WEIGHT * kv + PREFIX_WEIGHT * prefix)
        return out

    def pick(self, tokens: list[str]) -> int:
        scores = self.scores(tokens)
        best = max(scores)
        choice = self.rng.choice([i for i, s in enumerate(scores) if s == best])
        lru = self.index[choice]
        for h in block_hashes(tokens, self.block_tokens):
            lru[h] = None
            lru.move_to_end(h)
        while len(lru) > self.lru_blocks:
            lru.popitem(last=False)
        return choice

    def observe(self, i: int, metrics_text: str) -> None:
        """The two gauges the picker scores by, from a replica's /metrics text."""
        for line in metrics_text.splitlines():
            name, _, value = line.rpartition(" ")
            try:
                v = float(value)
            except ValueError:
                continue
            if name.startswith("vllm:num_requests_waiting"):
                self.waiting[i] = v
            elif name.startswith("vllm:kv_cache_usage_perc"):
                self.kv_usage[i] = v

    async def start(self, client: Any, urls: list[str]) -> None:
        import httpx

        async def scrape() -> None:
            while True:
                for i, url in enumerate(urls):
                    try:
                        text = await _metrics_text(client, f"{url}/metrics")
                        if text is not None:
                            self.observe(i, text)
                    except (httpx.HTTPError, TimeoutError):  # a missed scrape keeps the old
                        pass
                await asyncio.sleep(METRICS_INTERVAL_S)

        self._scraper = asyncio.create_task(scrape())

    async def stop(self) -> None:
        if self._scraper is not None:
            self._scraper.cancel()
            await asyncio.gather(self._scraper, return_exceptions=True)


def make_router(policy: str, n: int, seed: int = 0) -> RoundRobin | EndpointPicker:
    if policy == "round-robin":
        return RoundRobin(n)
    if policy == "endpoint-picker":
        return EndpointPicker(n, seed=seed)
    raise ValueError(f"unknown routing policy {policy!r}; one of {', '.join(POLICIES)}")


MAX_METRICS_BYTES = 4 << 20
"""A replica's /metrics page (vLLM's is tens of kB); a longer one is not scraped."""


async def _metrics_text(client: Any, url: str) -> str | None:
    """The /metrics text of a replica within a second and MAX_METRICS_BYTES; None when it
    answers otherwise (not 200, too long): the old values stay."""
    async with asyncio.timeout(1.0), client.stream("GET", url, timeout=1.0) as resp:
        if resp.status_code != 200:
            return None
        body = b""
        async for chunk in resp.aiter_bytes():
            body += chunk
            if len(body) > MAX_METRICS_BYTES:
                return None
        return body.decode("utf-8", "replace")
