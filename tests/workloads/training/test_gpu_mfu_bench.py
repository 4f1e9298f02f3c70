"""bench/gpu_mfu.py, the GPU check's script, in its tiny mode on the CPU: its default path
(bf16, compiled, the 3-D trainer at world 1) runs and prints every figure it promises. The
figures themselves are a GPU's to give; nothing here asserts a value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.workloads.training.harness import REPO


def test_the_gpu_mfu_bench_runs_tiny_on_the_cpu(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "2"}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    done = subprocess.run(
        [sys.executable, "bench/gpu_mfu.py", "--tiny", "--warmup", "1", "--steps", "2"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = {line.split("  ")[0]: line for line in done.stdout.splitlines()}
    for label in ("device", "model", "options", "flops per token", "timed steps", "tokens/s"):
        assert label in lines, done.stdout
    assert lines["options"].endswith("bf16 True, compile True, checkpointing False")
    assert lines["timed steps"].startswith("timed steps      2 ")
    assert "TFLOPS per GPU" in done.stdout
    # No catalog peak for a CPU: MFU is not made up.
    assert "MFU              n/a" in done.stdout
