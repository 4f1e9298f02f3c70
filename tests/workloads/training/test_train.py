"""Real multi-process training on CPU (2 ranks, gloo, ZeRO-3): train, crash, resume, reshard, stop.

Each launch costs ~10-20 s of process start-up and tiny-model steps; the module
shares one trained run (`trained`) between the tests that only read its checkpoints.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.workloads.training.harness import Run, job_config, kill_all, listening_on_any
from workloads.training import checkpointing as ckpt
from workloads.training.data import write_synthetic_shards

Launch = Callable[..., Run]


@pytest.fixture(scope="module")
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    spawned: list[subprocess.Popen[bytes]] = []
    yield spawned
    kill_all(spawned)  # every rank this module started, by its own PID


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tokens")
    write_synthetic_shards(path, n_shards=2, tokens_per_shard=20_000, vocab=256)
    return path


@pytest.fixture(scope="module")
def launch(procs: list[subprocess.Popen[bytes]]) -> Launch:
    def _launch(
        workdir: Path, cfg: dict[str, Any], world: int = 2, extra: list[str] | None = None
    ) -> Run:
        return Run(workdir, cfg, world, extra or [], procs.append)

    return _launch


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, data: Path, launch: Launch) -> Run:
    """2 ranks, ZeRO-3, 16 steps, a checkpoint every 4, keep the last 2."""
    tmp = tmp_path_factory.mktemp("trained")
    run = launch(tmp, job_config(tmp, data, max_steps=16))
    run.wait_for(lambda ev: any(e["event"] == "step" for e in ev), 120)
    wildcard = [s for p in run.procs for s in listening_on_any(p.pid)]
    assert run.wait(120) == [0, 0], run.stderr_tail()
    run.wildcard_listeners = wildcard  # type: ignore[attr-defined]
    return run


def test_zero3_trains_logs_and_checkpoints(trained: Run) -> None:
    steps = trained.of("step")
    assert [e["step"] for e in steps] == list(range(1, 17))
    losses = [e["loss"] for e in steps]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.3, losses
    for e in steps:
        assert e["tokens_per_s"] > 0 and e["mfu"] is not None and e["mfu"] > 0
        assert e["slowest_rank"] in (0, 1) and e["step_time_max_s"] >= e["step_time_min_s"] > 0
    assert [e["step"] for e in trained.of("checkpoint_published")] == [4, 8, 12, 16]
    root = trained.workdir / "ckpt"
    assert [c.step for c in ckpt.complete_checkpoints(root)] == [
        12,
        16,
    ]  # keep_last=2 pruned 4 and 8
    assert (root / "latest").read_text() == "step-16"
    assert not list(root.glob("tmp-*"))
    assert trained.wildcard_listeners == []  # type: ignore[attr-defined]


def test_truncated_or_unsealed_checkpoints_are_ignored(trained: Run, tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    shutil.copytree(trained.workdir / "ckpt", root)
    shard = next((root / "step-16").glob("*optim_states.pt"))
    os.truncate(shard, shard.stat().st_size // 2)  # a copy cut short after publication
    (root / "tmp-step-20").mkdir()  # a save interrupted before sealing
    shutil.copy(shard, root / "tmp-step-20" / shard.name)
    unsealed = root / "step-24"  # a directory that has the final name but no marker
    shutil.copytree(root / "step-12", unsealed)
    (unsealed / ckpt.COMPLETE).unlink()
    assert (root / "latest").read_text() == "step-16"  # the pointer still names the damaged one
    chosen = ckpt.select_resume(root)
    assert chosen is not None and chosen.tag == "step-12"


def test_kill_9_one_rank_then_restart_loses_at_most_one_interval(
    tmp_path: Path, data: Path, launch: Launch
) -> None:
    interval = 4
    cfg = job_config(tmp_path, data, max_steps=1000, checkpoint={"interval_steps": interval})
    first = launch(tmp_path / "run1", cfg)
    first.wait_for(
        lambda ev: any(e["event"] == "checkpoint_published" and e["step"] >= 8 for e in ev), 150
    )
    published = max(e["step"] for e in first.of("checkpoint_published"))
    first.wait_for(
        lambda ev: max(e.get("step", 0) for e in ev if e["event"] == "step") >= published + 2, 60
    )
    first.signal(1, signal.SIGKILL)
    last_logged = max(e["step"] for e in first.of("step"))
    # Rank 0 is now stuck in a collective; the operator (JobSet) restarts the whole group.
    kill_all(first.procs)

    second = launch(tmp_path / "run2", cfg, extra=["--max-steps", str(last_logged + 2)])
    assert second.wait(150) == [0, 0], second.stderr_tail()
    resume = second.of("resume")[0]
    assert resume["tag"].startswith("step-") and not resume["universal"]
    assert last_logged - resume["step"] <= interval
    assert next(e["step"] for e in second.of("step")) == resume["step"] + 1


def test_two_rank_checkpoint_resumes_on_one_rank_with_same_weights(
    trained: Run, tmp_path: Path, launch: Launch
) -> None:
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    root = tmp_path / "ckpt"
    shutil.copytree(trained.workdir / "ckpt", root)
    cfg = job_config(tmp_path, Path(_data_dir(trained)), max_steps=16)  # checkpoint dir: the copy
    exported = tmp_path / "fp32-world1.pt"
    one = launch(tmp_path / "run", cfg, world=1, extra=["--export-fp32", str(exported)])
    assert one.wait(120) == [0], one.stderr_tail()
    resume = one.of("resume")[0]
    assert resume == {**resume, "step": 16, "universal": True, "from_world_size": 2}
    assert (root / "universal-step-16" / ckpt.COMPLETE).is_file()

    before = get_fp32_state_dict_from_zero_checkpoint(str(root), tag="step-16")
    after = torch.load(exported)
    assert sorted(before) == sorted(after)
    for name, tensor in before.items():
        assert torch.equal(tensor.float(), after[name]), name


def _data_dir(run: Run) -> str:
    return str(json.loads((run.workdir / "job.json").read_text())["data"]["path"])


def test_sigterm_on_one_rank_checkpoints_and_exits_zero(
    tmp_path: Path, data: Path, launch: Launch
) -> None:
    cfg = job_config(tmp_path, data, max_steps=1000, checkpoint={"interval_steps": 1000})
    run = launch(tmp_path, cfg)
    run.wait_for(lambda ev: sum(e["event"] == "step" for e in ev) >= 3, 120)
    run.signal(1, signal.SIGTERM)  # spot reclaim of one node: only its pod is told
    assert run.wait(60) == [0, 0], run.stderr_tail()
    exit_event = run.of("exit")[0]
    assert exit_event["reason"] == "sigterm"
    chosen = ckpt.select_resume(tmp_path / "ckpt")
    assert chosen is not None and chosen.step == exit_event["step"] >= 3
