"""Asynchronous saves: the copy runs behind the training loop, yet a checkpoint holds the
state of the step it was taken at.

The unit tests drive `AsyncCheckpointEngine` in-process, as DeepSpeed does (`save` per
state dict, then `commit`), with a snapshot held back by a gate, so the order of events
is forced, not raced. The end-to-end test trains 2 CPU ranks
twice, once saving synchronously and once asynchronously with every snapshot delayed past
the next optimizer step (`slow_snapshot`), and compares the checkpoints tensor by tensor:
were the copy not waited for before the optimizer step, the asynchronous checkpoints would
hold later weights.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from deepspeed.runtime.checkpoint_engine.checkpoint_engine import CheckpointCommitInfo

from tests.workloads.training.harness import REPO, Run, job_config, kill_all
from workloads.training import checkpointing as ckpt
from workloads.training.data import write_synthetic_shards


class _Gate:
    """Replaces `checkpointing.snapshot`: each copy waits until the test opens the gate."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        self.copied = threading.Event()
        self.original = ckpt.snapshot

    def __call__(self, obj: Any, **kwargs: Any) -> Any:
        self.entered.set()
        assert self.open.wait(30), "the test never opened the gate"
        out = self.original(obj, **kwargs)
        self.copied.set()
        return out


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Gate]:
    g = _Gate()
    monkeypatch.setattr(ckpt, "snapshot", g)
    yield g
    g.open.set()  # never leave a copier thread blocked


def test_save_returns_before_the_copy_and_the_file_holds_the_state_at_save_time(
    gate: _Gate, tmp_path: Path
) -> None:
    engine = ckpt.AsyncCheckpointEngine()
    weights = torch.arange(1000, dtype=torch.float32)
    moments = {"exp_avg": torch.ones(10), "step": torch.tensor(3.0)}
    at_save = (weights.clone(), {k: v.clone() for k, v in moments.items()})
    engine.save({"module": {"w": weights}, "optimizer": moments}, str(tmp_path / "a.pt"))
    assert engine.pending() and not gate.entered.is_set()  # save() only queued it
    # The end of DeepSpeed's save_checkpoint: the copy starts, behind the caller's back.
    engine.commit(CheckpointCommitInfo(tag="t", save_dir=str(tmp_path), save_latest=False))
    assert gate.entered.wait(10)
    assert engine.pending() and not gate.copied.is_set()

    # The optimizer step comes next: it must wait for the copy, which the gate holds.
    waited: list[float] = []
    step = threading.Thread(target=lambda: waited.append(engine.wait_snapshot()))
    step.start()
    step.join(0.2)
    assert step.is_alive(), "wait_snapshot returned while the copy was still held"
    gate.open.set()
    step.join(10)
    assert not step.is_alive() and gate.copied.is_set() and waited[0] > 0
    weights.add_(1.0)  # what the optimizer step does, in place
    moments["exp_avg"].mul_(0.5)
    moments["step"] += 1

    engine.wait()
    assert not engine.pending() and engine.last_write_s > 0
    saved = torch.load(tmp_path / "a.pt")
    assert torch.equal(saved["module"]["w"], at_save[0])
    for k, v in at_save[1].items():
        assert torch.equal(saved["optimizer"][k], v), k
    engine.cleanup()


def test_a_finished_copy_costs_the_optimizer_step_no_wait(tmp_path: Path) -> None:
    engine = ckpt.AsyncCheckpointEngine()
    assert engine.wait_snapshot() == 0.0  # nothing queued
    engine.save({"w": torch.zeros(4)}, str(tmp_path / "b.pt"))
    engine.wait()
    assert engine.wait_snapshot() == 0.0
    engine.cleanup()


def test_a_failed_copy_or_write_is_raised_not_published(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def broken(obj: Any, **kwargs: Any) -> Any:
        raise RuntimeError("host memory exhausted")

    engine = ckpt.AsyncCheckpointEngine()
    monkeypatch.setattr(ckpt, "snapshot", broken)
    engine.save({"w": torch.zeros(4)}, str(tmp_path / "c.pt"))
    with pytest.raises(RuntimeError, match="host memory"):
        engine.wait_snapshot()
    with pytest.raises(RuntimeError, match="host memory"):
        engine.wait()
    assert not (tmp_path / "c.pt").exists()
    monkeypatch.undo()
    engine.save({"w": torch.zeros(4)}, str(tmp_path / "missing" / "d.pt"))  # no such directory
    with pytest.raises(OSError):
        engine.wait()
    engine.cleanup()


# --------------------------------------------------------------------------- 2 real ranks


@pytest.fixture(scope="module")
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    spawned: list[subprocess.Popen[bytes]] = []
    yield spawned
    kill_all(spawned)


def _launch_slow(
    monkeypatch: pytest.MonkeyPatch,
    workdir: Path,
    cfg: dict[str, Any],
    delay_s: float,
    track: Callable[[subprocess.Popen[bytes]], None],
) -> Run:
    """`Run`, but each rank is `slow_snapshot DELAY`: the trainer with delayed copies."""
    real_popen = subprocess.Popen

    def popen(cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        assert cmd[1:3] == ["-m", "workloads.training.train"], cmd
        cmd = [cmd[0], "-m", "tests.workloads.training.slow_snapshot", str(delay_s), *cmd[3:]]
        return real_popen(cmd, **kwargs)

    with monkeypatch.context() as m:  # only while Run starts the ranks
        m.setattr(subprocess, "Popen", popen)
        return Run(workdir, cfg, 2, [], track)


def _tensors(obj: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, f"{prefix}/{k}")
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{prefix}/{i}")


def _checkpoint_tensors(step_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of every shard of one checkpoint, by file and path inside it."""
    out = {}
    for f in sorted(step_dir.glob("*.pt")):
        state = torch.load(f, map_location="cpu", weights_only=False)
        out.update({f"{f.name}{k}": t for k, t in _tensors(state)})
    return out


def test_async_checkpoints_hold_the_weights_of_their_step_while_training_goes_on(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "tokens"
    write_synthetic_shards(data, n_shards=2, tokens_per_shard=20_000, vocab=256)
    runs = {}
    for mode in ("sync", "async"):
        cfg = job_config(
            tmp_path / mode,
            data,
            max_steps=7,  # saves at 2, 4, 6, each followed by a step, and at the exit (7)
            checkpoint={"interval_steps": 2, "keep_last": 4, "async_save": mode == "async"},
        )
        if mode == "sync":
            runs[mode] = Run(tmp_path / mode, cfg, 2, [], procs.append)
        else:
            # Each copy starts 2 s late: well after the next step's optimizer step would
            # have run, had the loop not waited for the copy.
            runs[mode] = _launch_slow(monkeypatch, tmp_path / mode, cfg, 2.0, procs.append)
        assert runs[mode].wait(240) == [0, 0], runs[mode].stderr_tail()

    published = runs["async"].of("checkpoint_published")
    assert [e["step"] for e in published] == [2, 4, 6, 7]
    saved = {e["step"]: e for e in runs["async"].of("checkpoint_saved")}
    # The copy ran behind the loop: the save returned first, and the loop waited for
    # the copy before the next optimizer step, which the save's total stall counts.
    for e in published[:3]:
        assert e["stall_s"] > saved[e["step"]]["stall_s"], (e, saved[e["step"]])

    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    weights: dict[str, dict[int, dict[str, torch.Tensor]]] = {"sync": {}, "async": {}}
    for mode, run in runs.items():
        root = run.workdir / "ckpt"
        assert [c.step for c in ckpt.complete_checkpoints(root)] == [2, 4, 6, 7]
        for step in (2, 4, 6, 7):
            weights[mode][step] = get_fp32_state_dict_from_zero_checkpoint(
                str(root), tag=f"step-{step}"
            )
    for step in (2, 4, 6, 7):
        sync, asyn = weights["sync"][step], weights["async"][step]
        assert sorted(sync) == sorted(asyn)
        for name in sync:
            assert torch.equal(sync[name], asyn[name]), (step, name)
        # Every tensor of every shard (Adam moments, fp32 partitions, buffers), too.
        a = _checkpoint_tensors(runs["async"].workdir / "ckpt" / f"step-{step}")
        b = _checkpoint_tensors(runs["sync"].workdir / "ckpt" / f"step-{step}")
        assert sorted(a) == sorted(b)
        for key in a:
            assert torch.equal(a[key], b[key]), (step, key)
    # The comparison has teeth: training moves the weights between checkpoints.
    before, after = weights["sync"][2], weights["sync"][4]
    assert [n for n in before if not torch.equal(before[n], after[n])]


def test_slow_snapshot_runner_is_the_trainer() -> None:
    """The runner the end-to-end test launches adds nothing but the delay."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.workloads.training.slow_snapshot", "0", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": ""},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "--step-times" in result.stdout and "--config" in result.stdout
