"""Elastic recovery on the CPU: lose a node, go on smaller, grow back (prints; asserts nothing).

Runs the same drill as tests/workloads/training/test_recovery.py (`elastic.drill`):
stock torchrun agents as nodes, nnodes 2:3, c10d rendezvous on a FileStore, the
real entry point on gloo, everything on loopback. One node is SIGKILLed while a
save is in flight; a replacement starts once the survivors train again. Prints
the world sizes, the step each resume started from, the loss before and after,
and how long each transition took.

    .venv/bin/python bench/recovery.py [--nproc-per-node 1] [--max-steps 45] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.workloads.training.elastic import DrillError, Elastic, drill, format_report  # noqa: E402
from workloads.training.data import write_synthetic_shards  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc-per-node", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=45)
    ap.add_argument("--kill-after-step", type=int, default=12)
    ap.add_argument("--step-sleep-s", type=float, default=0.4)
    ap.add_argument("--keep", type=Path, default=None, help="work here and keep the logs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmpdir:
        work = args.keep or Path(tmpdir)
        write_synthetic_shards(work / "tokens", n_shards=2, tokens_per_shard=20_000, vocab=256)
        t0 = time.monotonic()
        try:
            report = drill(
                work / "run",
                work / "tokens",
                elastic=Elastic(nproc_per_node=args.nproc_per_node),
                max_steps=args.max_steps,
                kill_after_step=args.kill_after_step,
                step_sleep_s=args.step_sleep_s,
                log=lambda m: print(f"[{time.monotonic() - t0:6.1f} s] {m}", flush=True),
            )
        except DrillError as exc:
            print(f"drill failed: {exc}", file=sys.stderr)
            return 1
        print()
        print(format_report(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
