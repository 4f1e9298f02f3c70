"""`llmp loadtest` against a peer client, guidellm, on the same fake vLLM and prompts: TTFT
and ITL percentiles agree (bench/loadtest.py prints the full table, 30 requests, where
all agree within 5%). Skipped when guidellm is not importable."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    importlib.util.find_spec("guidellm") is None,
    reason="guidellm (the peer client, requirements-dev.txt) is not installed",
)
def test_ttft_and_itl_agree_with_guidellm_within_5_percent() -> None:
    spec = importlib.util.spec_from_file_location("bench_loadtest", REPO / "bench/loadtest.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_loadtest"] = bench
    spec.loader.exec_module(bench)
    # Prompts of one length: with 8 requests, percentiles of lengths that vary would
    # depend on which requests each client counts (guidellm may leave some out). The two
    # clients run at once, so a stall of the host the rest of the suite shares slows both;
    # each figure is the least of three rounds, the reading least moved by that stall. A
    # client that measures something else (another event, a handshake per request) still
    # differs in every round.
    rows = bench.peer_comparison(n=8, stdev=0, rounds=3)
    assert [name for name, _, _ in rows][:2] == ["TTFT p50 (ms)", "TTFT p90 (ms)"]
    misses = [(n, o, t) for n, o, t in rows if not _agrees(n, o, t)]
    assert not misses, misses


def _agrees(name: str, ours: float, theirs: float) -> bool:
    # The medians and every inter-token percentile must agree within 5%. A TTFT tail
    # percentile of 8 requests is one request: one scheduling stall of the shared test
    # host moves it, so it is held to 15% here (bench/loadtest.py measures 30).
    tail = name.startswith("TTFT") and "p50" not in name
    limit = 0.15 if tail else 0.05
    return theirs > 0 and abs(ours - theirs) / theirs < limit
