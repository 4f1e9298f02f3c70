"""`llmp stragglers` at scale: wall time and peak memory per input format (prints; asserts
nothing).

Generates a trace of 10,240 ranks (1,280 nodes x 8) x 200 steps with a seeded RNG: per
rank and step the five phases of a step (data wait, compute, collective, optimizer,
checkpoint; `seconds` their sum, about 1 s), lognormal noise, and one node planted slow
in compute, 1.2x the others' step time. It writes it as JSON lines (what train.py
`--step-times` writes, phases included), CSV and Parquet, then for each file runs the
analysis (`read_file` + `analyse`, the library `llmp stragglers` calls) in a child
process and reads that child's peak resident memory (`ru_maxrss` from `os.wait4`, so each
figure is that one process's, interpreter and imports included; a small launcher starts
the children, as a child's figure includes what it was forked from). The baseline is another
child that only parses the JSON lines file line by line with the standard library's
`json.loads`; ratio = analysis wall / that parse's wall (both timed inside the child, from
opening the file to the answer, interpreter start-up excluded).

    .venv/bin/python bench/stragglers.py [--ranks 10240] [--steps 200] [--per-node 8]
        [--formats jsonl,csv,parquet] [--no-phases]

For scale: the implementation before the columnar one took 8 min 6 s and 630 MB on the
10,240 x 200 JSON lines trace without phases (measured once; not rerun here).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workloads.diagnosis.trace import PHASES  # noqa: E402

# Each phase's share of a ~1 s step on a healthy rank; the slow node's compute grows by
# 0.2 s, which makes its step 1.2x the others'.
BASE = {"data_wait": 0.05, "compute": 0.70, "collective": 0.20, "optimizer": 0.05}
CHECKPOINT_EVERY, CHECKPOINT_S = 50, 1.0
SLOW_EXTRA_S = 0.2

CHILD = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
t0 = time.perf_counter()
if sys.argv[2] == "parse":
    with open(sys.argv[3]) as f:
        rows = sum(1 for line in f if line.strip() and json.loads(line) is not None)
    print(json.dumps({"wall": time.perf_counter() - t0, "rows": rows}))
else:
    from workloads.diagnosis import stragglers as st
    report = st.analyse(st.read_file(Path(sys.argv[3])))
    wall = time.perf_counter() - t0
    top = report.by_node[0]
    print(json.dumps({
        "wall": wall,
        "node": top.name,
        "ratio": top.median_ratio,
        "flagged": [s.name for s in report.by_node if s.flagged],
        "cause": top.cause.name if top.cause else None,
    }))
"""


def generate(
    ranks: int, steps: int, per_node: int, phases: bool, seed: int = 7
) -> tuple[dict[str, np.ndarray], list[str], str]:
    """Row columns (step-major, like train.py writes), node names, the planted node."""
    rng = np.random.default_rng(seed)
    nodes = [f"node-{i:04d}" for i in range((ranks + per_node - 1) // per_node)]
    slow = int(rng.integers(len(nodes)))
    step_base = rng.lognormal(0, 0.05, size=(steps, 1))
    parts = {}
    for p in PHASES:
        if p == "checkpoint":
            stall = np.where(np.arange(1, steps + 1) % CHECKPOINT_EVERY == 0, CHECKPOINT_S, 0.0)
            value = np.broadcast_to(stall[:, None], (steps, ranks)).copy()
        else:
            value = BASE[p] * step_base * rng.lognormal(0, 0.03, size=(steps, ranks))
        parts[p] = value
    node_of = np.arange(ranks) // per_node
    parts["compute"][:, node_of == slow] += SLOW_EXTRA_S * step_base
    seconds = sum(parts.values())
    cols: dict[str, np.ndarray] = {
        "step": np.repeat(np.arange(1, steps + 1), ranks),
        "rank": np.tile(np.arange(ranks), steps),
        "node": np.tile(node_of, steps),
        "seconds": np.asarray(seconds).ravel(),
    }
    if phases:
        cols |= {f"{p}_s": v.ravel() for p, v in parts.items()}
    return cols, nodes, nodes[slow]


def _write_rows(path: Path, cols: dict[str, np.ndarray], header: str, fmt: str) -> None:
    """One formatted line per row (numpy's savetxt: a single `%` per row), step by step."""
    matrix = np.column_stack([cols[k].astype(np.float64) for k in cols])
    with path.open("w") as f:
        f.write(header)
        np.savetxt(f, matrix, fmt=fmt)


def write_jsonl(path: Path, cols: dict[str, np.ndarray], nodes: list[str]) -> None:
    # node names are node-NNNN (generate's): the node column is written as its number
    fields = {"step": "%d", "rank": "%d", "node": '"node-%04d"'}
    fmt = ", ".join(f'"{k}": {fields.get(k, "%.6f")}' for k in cols)
    _write_rows(path, cols, "", "{" + fmt + "}")


def write_csv(path: Path, cols: dict[str, np.ndarray], nodes: list[str]) -> None:
    fields = {"step": "%d", "rank": "%d", "node": "node-%04d"}
    fmt = ",".join(fields.get(k, "%.6f") for k in cols)
    _write_rows(path, cols, ",".join(cols) + "\n", fmt)


def write_parquet(path: Path, cols: dict[str, np.ndarray], nodes: list[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    node = pa.DictionaryArray.from_arrays(pa.array(cols["node"], pa.int32()), pa.array(nodes))
    table = pa.table({**{k: v for k, v in cols.items() if k != "node"}, "node": node})
    pq.write_table(table, path)


MEASURE = """
import json, os, subprocess, sys
repo, child, runs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
for mode, path in runs:
    proc = subprocess.Popen(
        [sys.executable, "-c", child, repo, mode, path],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code:
        sys.exit(f"{mode} {path} failed ({code}): {err.strip()[-400:]}")
    print(json.dumps({**json.loads(out), "peak_mb": usage.ru_maxrss / 1024}), flush=True)
"""


def measure(runs: list[tuple[str, Path]]) -> list[dict[str, Any]]:
    """Each run in a child process, with its peak RSS in MB (ru_maxrss, KiB on Linux).

    The children are started by a small launcher, not by this process: a child's
    ru_maxrss includes the memory of the process it was forked from until its exec, and
    this one holds the generated trace."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            MEASURE,
            str(REPO),
            CHILD,
            json.dumps([(mode, str(path)) for mode, path in runs]),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(done.stderr.strip()[-600:])
    return [json.loads(line) for line in done.stdout.splitlines()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=10_240)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--per-node", type=int, default=8)
    ap.add_argument("--formats", default="jsonl,csv,parquet")
    ap.add_argument("--no-phases", action="store_true", help="seconds only, no phase columns")
    args = ap.parse_args()
    writers = {"jsonl": write_jsonl, "csv": write_csv, "parquet": write_parquet}
    formats = [f for f in args.formats.split(",") if f]
    unknown = set(formats) - set(writers)
    if unknown:
        raise SystemExit(f"--formats: unknown {', '.join(sorted(unknown))} (jsonl, csv, parquet)")
    t0 = time.perf_counter()
    cols, nodes, planted = generate(args.ranks, args.steps, args.per_node, not args.no_phases)
    with tempfile.TemporaryDirectory(prefix="bench-stragglers-") as tmpdir:
        tmp = Path(tmpdir)
        paths = {}
        for fmt in dict.fromkeys(["jsonl", *formats]):
            paths[fmt] = tmp / f"steps.{fmt}"
            writers[fmt](paths[fmt], cols, nodes)
        sizes = ", ".join(f"{f} {p.stat().st_size / 1e6:.0f} MB" for f, p in paths.items())
        print(
            f"trace: {args.ranks} ranks x {args.steps} steps, {len(nodes)} nodes, "
            f"planted {planted} (compute +{SLOW_EXTRA_S:g} s, 1.2x), "
            f"phases {'no' if args.no_phases else 'yes'}; written in "
            f"{time.perf_counter() - t0:.1f} s ({sizes})"
        )
        del cols
        parse, *found = measure(
            [("parse", paths["jsonl"]), *(("analyse", paths[fmt]) for fmt in formats)]
        )
        print(
            f"json.loads, line by line: {parse['rows']} rows in {parse['wall']:.2f} s, "
            f"peak {parse['peak_mb']:.0f} MB"
        )
        for fmt, got in zip(formats, found, strict=True):
            cause = f", cause {got['cause']}" if got["cause"] else ""
            print(
                f"stragglers {args.ranks} ranks x {args.steps} steps ({fmt}): wall "
                f"{got['wall']:.2f} s, peak {got['peak_mb']:.0f} MB, json.loads parse "
                f"{parse['wall']:.2f} s, ratio {got['wall'] / parse['wall']:.2f}; found "
                f"{got['node']} at {got['ratio']:.3f}x{cause}"
                + ("" if got["flagged"] == [planted] else f" (flagged: {got['flagged']})")
            )


if __name__ == "__main__":
    main()
