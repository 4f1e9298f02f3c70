"""`llmp loadtest` against a peer client, guidellm, on the same fake vLLM and prompts: TTFT
and ITL percentiles agree within 5% (bench/loadtest.py prints the full table). Skipped
when guidellm is not importable."""

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
    # depend on which requests each client counts (guidellm may leave some out).
    rows = bench.peer_comparison(n=8, stdev=0)
    assert [name for name, _, _ in rows][:2] == ["TTFT p50 (ms)", "TTFT p90 (ms)"]
    for name, ours, theirs in rows:
        assert theirs > 0 and abs(ours - theirs) / theirs < 0.05, (name, ours, theirs)
