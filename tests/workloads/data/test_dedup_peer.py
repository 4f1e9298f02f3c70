"""Our near-dedup against datatrove's on one planted corpus (bench/dedup_peer.py prints the
full table): the same shingles, permutations and bands find the same clusters."""

from __future__ import annotations

import importlib.util
import json
import subprocess
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


def _datatrove_keeps(base: int, seed: int, workdir: Path) -> set[str]:
    """datatrove's kept ids, from its own process: importing datatrove adds a loguru sink
    on the sys.stderr of the moment (a test's captured stream, closed after it), which would
    break every later test whose libraries log through loguru (llm-compressor's)."""
    script = (
        "import json, pathlib, sys\n"
        f"sys.path.insert(0, {str(REPO / 'bench')!r})\n"
        "import dedup_peer as d\n"
        f"corpus = d.make_corpus({base}, seed={seed})\n"
        f"kept, _ = d.run_datatrove(corpus, pathlib.Path({str(workdir)!r}))\n"
        "print(json.dumps(sorted(kept)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_both_collapse_the_planted_clusters_and_agree(bench: Any, tmp_path: Path) -> None:
    corpus = bench.make_corpus(300, seed=3)
    ours, _ = bench.run_ours(corpus, 0.8)
    theirs = _datatrove_keeps(300, 3, tmp_path)
    mine, peer = bench.judge(corpus, ours), bench.judge(corpus, theirs)
    assert mine["clusters"] == 100
    # Ours merges only verified pairs: no origin is ever lost to a false merge.
    assert mine["origins_lost"] == 0
    assert mine["collapsed"] >= 0.95 * mine["clusters"]
    assert peer["collapsed"] >= 0.95 * peer["clusters"]
    overlap = len(ours & theirs) / len(ours | theirs)
    assert overlap >= 0.97, (len(ours), len(theirs), overlap)
