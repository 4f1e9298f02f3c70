"""Our near-dedup against datatrove's on one planted corpus (bench/dedup_peer.py prints the
full table): the same shingles, permutations and bands find the same clusters."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]

pytest.importorskip("datatrove")


@pytest.fixture(scope="module")
def bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_dedup_peer", REPO / "bench/dedup_peer.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_dedup_peer"] = module
    spec.loader.exec_module(module)
    return module


def test_both_collapse_the_planted_clusters_and_agree(bench: Any, tmp_path: Path) -> None:
    corpus = bench.make_corpus(300, seed=3)
    ours, _ = bench.run_ours(corpus, 0.8)
    theirs, _ = bench.run_datatrove(corpus, tmp_path)
    mine, peer = bench.judge(corpus, ours), bench.judge(corpus, theirs)
    assert mine["clusters"] == 100
    # Ours merges only verified pairs: no origin is ever lost to a false merge.
    assert mine["origins_lost"] == 0
    assert mine["collapsed"] >= 0.95 * mine["clusters"]
    assert peer["collapsed"] >= 0.95 * peer["clusters"]
    overlap = len(ours & theirs) / len(ours | theirs)
    assert overlap >= 0.97, (len(ours), len(theirs), overlap)
