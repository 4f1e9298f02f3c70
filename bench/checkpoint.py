"""Checkpoint stall, synchronous vs asynchronous, and resume time (prints; asserts nothing).

Runs the real entry point (`workloads.training.train`) as 2 CPU ranks (gloo,
ZeRO-3, loopback only) on a model whose checkpoint is >= 200 MB across both
ranks, once with `async_save: false` and once with `async_save: true`, and
reads the stalls from the JSON event log. Then it resumes the async run's last
checkpoint (same world size) and reports the load time.

Two stall figures per checkpoint, both what rank 0's training loop waited for:

- save call: `checkpoint_saved.stall_s`, the `save_checkpoint` call (how this bench
  measured the stall before the snapshot copy moved off the training thread);
- total: `checkpoint_published.stall_s`, the save call plus, for async saves, the wait
  for the snapshot's copy before the next optimizer step (0 when it finished during
  forward and backward) and the loop's agreement that every rank's writes are durable
  (rank 0 then publishes on a thread of its own). For sync saves both are the same.
  The target applies to the total.

The last figure of each mode is the sum of the steps' times (slowest rank, checkpoint
phases included): on this 2-core machine the overlapped copy and write compete with
compute for the cores, which a GPU node's copy engines and many cores do not.

Both stalls are taken over the interval checkpoints (steps 2, 4, 6 by default), each followed
by a step, as before; the save at the last step (7), which the exit waits for and no
step follows, is left out of both.

    .venv/bin/python bench/checkpoint.py [--steps 7] [--interval 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workloads.training.data import write_synthetic_shards  # noqa: E402


def launch(
    work: Path, cfg: dict[str, Any], world: int, extra: list[str]
) -> tuple[list[dict[str, Any]], float]:
    work.mkdir(parents=True, exist_ok=True)
    (work / "job.json").write_text(json.dumps(cfg))
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "GLOO_SOCKET_IFNAME": "lo",
        "DS_ACCELERATOR": "cpu",
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONUNBUFFERED": "1",
    }
    store = work / f"store-{time.monotonic_ns()}"
    procs = []
    t0 = time.perf_counter()
    try:
        for rank in range(world):
            cmd = [
                sys.executable,
                "-m",
                "workloads.training.train",
                "--config",
                str(work / "job.json"),
                "--rank",
                str(rank),
                "--world-size",
                str(world),
                "--init-method",
                f"file://{store}",
                *extra,
            ]
            with (
                open(work / f"rank{rank}.out", "wb") as out,
                open(work / f"rank{rank}.err", "wb") as err,
            ):
                procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=err))
        codes = [p.wait(timeout=900) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if codes != [0] * world:
        raise SystemExit(f"ranks exited {codes}; see {work}/rank*.err")
    events = [
        json.loads(line)
        for line in (work / "rank0.out").read_text().splitlines()
        if line.startswith("{")
    ]
    return events, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--interval", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as tmpdir:
        tmp = Path(tmpdir)
        write_synthetic_shards(tmp / "data", 1, 50_000, args.vocab)
        model = {
            "vocab_size": args.vocab,
            "seq_len": 64,
            "num_hidden_layers": args.layers,
            "num_attention_heads": 8,
            "hidden_size": args.d_model,
            "intermediate_size": 4 * args.d_model,
        }
        stalls: dict[str, list[float]] = {}
        totals: dict[str, list[float]] = {}
        size = 0
        for mode in ("sync", "async"):
            cfg = {
                "model": model,
                "data": {"path": str(tmp / "data")},
                "checkpoint": {
                    "dir": str(tmp / mode / "ckpt"),
                    "interval_steps": args.interval,
                    "keep_last": 2,
                    "async_save": mode == "async",
                },
                "max_steps": args.steps,
                "micro_batch_size": 2,
                "zero_stage": 3,
                "bf16": False,
                "optimizer": "torch",
            }
            events, _ = launch(tmp / mode, cfg, 2, [])
            in_loop = [e for e in events if e.get("step", 0) < args.steps]
            stalls[mode] = [e["stall_s"] for e in in_loop if e["event"] == "checkpoint_saved"]
            published = [e for e in in_loop if e["event"] == "checkpoint_published"]
            totals[mode] = [e["stall_s"] for e in published]
            size = max(e["bytes"] for e in published)
            steps = [
                e["step_time_max_s"]
                for e in events
                if e["event"] == "step" and e["ckpt_stall_s"] == 0
            ]
            writes = [e["background_write_s"] for e in published]
            # Each step's slowest rank, checkpoint phases included: the loop's time, what an
            # overlapped copy or write costs where it competes with compute for the cores.
            loop = sum(e["step_time_max_s"] for e in events if e["event"] == "step")
            print(
                f"{mode:5s} checkpoint: {size / 1e6:.0f} MB on 2 ranks; stall per ckpt (s): "
                f"save call {', '.join(f'{s:.3f}' for s in stalls[mode])}, "
                f"total {', '.join(f'{s:.3f}' for s in totals[mode])}; "
                f"background write {', '.join(f'{s:.3f}' for s in writes)}; "
                f"median step without checkpoint {sorted(steps)[len(steps) // 2]:.3f} s; "
                f"all {args.steps} steps {loop:.2f} s"
            )
        for name, figures in (("save call", stalls), ("total", totals)):
            mean = {m: sum(v) / len(v) for m, v in figures.items()}
            print(
                f"async/sync mean stall ({name}): {mean['async']:.3f} s / {mean['sync']:.3f} s = "
                f"{100 * mean['async'] / mean['sync']:.1f}%"
                + (" (target <= 10%)" if name == "total" else "")
            )
        events, wall = launch(tmp / "async", {**cfg}, 2, ["--max-steps", str(args.steps)])
        resume = next(e for e in events if e["event"] == "resume")
        print(
            f"resume of {size / 1e6:.0f} MB at 2 ranks: load_checkpoint {resume['load_s']:.3f} s; "
            f"process start to exit {wall:.1f} s"
        )


if __name__ == "__main__":
    main()
