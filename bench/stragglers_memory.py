"""`llmp stragglers` on a sparse trace: peak memory must follow the input, not its grid
(prints; asserts nothing).

Writes a step-times file of about 3.5 MB (JSON lines) whose rows are scattered over a
large steps x ranks grid: every row its own step and its own rank, numbers up to
`--spread`, as a hostile or broken writer could produce. A dense steps x ranks matrix of
it would be rows^2 cells (about 13 GiB of float64 at 42,000 rows); the analysis keeps
one cell per row and builds dense blocks of a bounded size. Then, in a child process,
it reads the file and runs the analysis (`read_file` + `analyse`, what `llmp
stragglers FILE` calls) and prints that child's peak resident memory (`ru_maxrss` of
`resource.getrusage(RUSAGE_CHILDREN)`, interpreter and imports included) and its wall
time.

    .venv/bin/python bench/stragglers_memory.py [--rows 42000] [--spread 1000000000]
        [--nodes 500] [--phases]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from workloads.diagnosis import stragglers as st
t0 = time.perf_counter()
trace = st.read_file(Path(sys.argv[2]))
report = st.analyse(trace)
print(json.dumps({"wall": time.perf_counter() - t0, "steps": report.steps,
                  "ranks": report.ranks, "nodes": report.nodes, "cells": trace.n_cells}))
"""


def write_trace(path: Path, rows: int, spread: int, nodes: int, phases: bool) -> None:
    rng = random.Random(0)
    steps = rng.sample(range(spread), rows)
    ranks = rng.sample(range(spread), rows)
    with path.open("w") as f:
        for step, rank in zip(steps, ranks, strict=True):
            row: dict[str, object] = {
                "step": step,
                "rank": rank,
                "node": f"ip-10-0-{rank % nodes // 250}-{rank % 250}",
                "seconds": round(1 + rng.random() / 10, 4),
            }
            if phases:
                row["compute_s"] = round(0.7 + rng.random() / 10, 4)
            f.write(json.dumps(row) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=42_000)
    parser.add_argument("--spread", type=int, default=1_000_000_000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--phases", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sparse.jsonl"
        write_trace(path, args.rows, args.spread, args.nodes, args.phases)
        size = path.stat().st_size
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(REPO), str(path)],
            capture_output=True,
            text=True,
            check=True,
        )
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    got = json.loads(done.stdout)
    dense_gib = got["steps"] * got["ranks"] * 8 / 2**30
    print(
        f"stragglers sparse trace: {size / 1e6:.1f} MB, {got['cells']:,} rows, "
        f"{got['steps']:,} steps x {got['ranks']:,} ranks on {got['nodes']:,} nodes "
        f"(a dense float64 grid: {dense_gib:,.1f} GiB); peak RSS {peak_kib / 1024:,.0f} MiB, "
        f"{got['wall']:.1f} s"
    )


if __name__ == "__main__":
    main()
