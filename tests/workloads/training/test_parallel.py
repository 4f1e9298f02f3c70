"""The 3-D trainer (workloads/training/parallel): checkpoints written at one TP x PP x DP layout
load, exactly, at others, and training goes on along the same curve.

Four real ranks (torch.multiprocessing, gloo on the CPU, a file store: nothing listens):

1. the entry point's own `main` (argument parsing, layout, resume, loop, JSON events)
   trains 4 steps at tp 2 x pp 2 x dp 1 and publishes step-2 and step-4;
2. the same four processes, in a new process group, resume (the trainer's own rule: the
   newest complete checkpoint) from a directory holding that step-2 alone, at tp 1 x pp 2
   x dp 2, at tp 4 x pp 1 x dp 1 and at tp 2 x pp 1 x dp 2 (FSDP over TP): every
   parameter and every optimizer state, made whole from its shards, equals what
   `dcp_to_torch_save` reads back from the checkpoint, bit for bit, and the ranks together
   hold all of it; then each takes steps 3 and 4, whose losses match the uninterrupted
   run's (step 4's depends on the resharded Adam moments).

The ranks are forked from the test process once it has imported torch, transformers and
DeepSpeed: four fresh interpreters importing them would take most of a minute on two cores.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from contracts.parallel import (
    Layout,
    ParallelConfig,
    ParallelJobConfig,
    batch_problem,
    layout_for,
    placement_problem,
)

REPO = Path(__file__).resolve().parents[3]
WORLD = 4
SAVED_AT = Layout(tp=2, pp=2, dp=1)
LOADED_AT = [Layout(tp=1, pp=2, dp=2), Layout(tp=4, pp=1, dp=1), Layout(tp=2, pp=1, dp=2)]
STEPS = 4
RESUME_STEP = 2


def job_config(tmp: Path, layout: Layout, **changes: Any) -> dict[str, Any]:
    """A 4-layer Llama (4 heads, 4 kv heads: tp 4 still has whole heads), fp32, 8 samples
    a step in micro-batches of 2 (4 micro-batches at dp 1, 2 at dp 2: 1F1B needs >= pp)."""
    return {
        "model": {
            "seq_len": 16,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
        },
        "data": {"path": str(tmp / "data")},
        "checkpoint": {"dir": str(tmp / "ckpt"), "interval_steps": 2, "keep_last": 3},
        "max_steps": STEPS,
        "micro_batch_size": 2,
        "global_batch_size": 8,
        "bf16": False,
        "lr": 0.01,
        "parallel": {"tp": layout.tp, "pp": layout.pp},
        **changes,
    }


def _rank(rank: int, tmp: str) -> None:
    """One rank: the entry point at SAVED_AT, then loads at each of LOADED_AT."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from workloads.training.parallel import __main__ as entry
    from workloads.training.parallel.trainer import Trainer

    torch.set_num_threads(1)
    root = Path(tmp)
    events = root / "events.jsonl"
    with open(events if rank == 0 else os.devnull, "w") as out, contextlib.redirect_stdout(out):
        code = entry.main(
            [
                "--config",
                str(root / "saved.json"),
                "--rank",
                str(rank),
                "--world-size",
                str(WORLD),
                "--init-method",
                f"file://{root / 'store-saved'}",
            ]
        )
    assert code == 0
    reference = root / "reference.pt"
    resumable = root / "resumable"  # what a new job finds: step-2 alone, as tp 2 x pp 2 wrote it
    if rank == 0:
        import shutil

        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        dcp_to_torch_save(str(root / "ckpt" / f"step-{RESUME_STEP}"), str(reference))
        shutil.copytree(root / "ckpt" / f"step-{RESUME_STEP}", resumable / f"step-{RESUME_STEP}")
        (root / "reference.ready").touch()
    while not (root / "reference.ready").exists():
        time.sleep(0.05)
    saved = torch.load(reference, weights_only=False)
    job = ParallelJobConfig.model_validate(json.loads((root / "saved.json").read_text()))
    results = []
    checkpoints = job.checkpoint.model_copy(update={"dir": str(resumable)})
    for i, layout in enumerate(LOADED_AT):
        # One process group per layout, as a job restarted at another layout has: meshes
        # built one after another in one process group may share cached groups.
        dist.init_process_group(
            "gloo", init_method=f"file://{root / f'store-{i}'}", rank=rank, world_size=WORLD
        )
        trainer = Trainer(
            job.model_copy(
                update={
                    "parallel": ParallelConfig(tp=layout.tp, pp=layout.pp),
                    "checkpoint": checkpoints,
                }
            ),
            layout,
            torch.device("cpu"),
        )
        # The entry point's resume: the newest complete checkpoint, by the completeness rule.
        resumed = trainer.resume()
        assert resumed is not None and resumed[0] == RESUME_STEP
        assert resumed[1]["layout"] == {"tp": 2, "pp": 2, "dp": 1}
        compared, differ, sharded = [], [], 0
        for key, whole in trainer.full_state().items():
            section, _, name = key.partition(".")
            compared.append(key)
            if not torch.equal(whole, saved[section][name]):
                differ.append(key)
        for p in trainer.module.parameters():
            sharded += isinstance(p, DTensor)
        losses = {s: trainer.step(s).loss for s in range(RESUME_STEP + 1, STEPS + 1)}
        results.append(
            {
                "layout": str(layout),
                "stage": trainer.stage_index,
                "compared": compared,
                "differ": differ,
                "dtensor_params": sharded,
                "losses": losses,
            }
        )
        dist.barrier()
        del trainer
        dist.destroy_process_group()
    (root / f"loaded-{rank}.json").write_text(json.dumps(results))


@pytest.fixture(scope="module")
def resharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch.distributed.pipelining  # noqa: F401
    import torch.multiprocessing as mp
    import transformers.models.llama.modeling_llama  # noqa: F401

    from workloads.training.data import write_synthetic_shards
    from workloads.training.parallel import checkpoint, trainer  # noqa: F401

    tmp = tmp_path_factory.mktemp("parallel")
    write_synthetic_shards(tmp / "data", n_shards=2, tokens_per_shard=4000, vocab=256)
    (tmp / "saved.json").write_text(json.dumps(job_config(tmp, SAVED_AT)))
    checkpoint._checkpointing()
    # Forked from a process that has imported torch, transformers and DeepSpeed once: four
    # interpreters importing them again would be most of the test's time on two cores.
    mp.start_processes(_rank, args=(str(tmp),), nprocs=WORLD, join=True, start_method="fork")
    return tmp


def _events(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "events.jsonl").read_text().splitlines()]


def test_a_tp2_pp2_checkpoint_loads_exactly_at_other_layouts_and_continues(
    resharded: Path,
) -> None:
    events = _events(resharded)
    assert events[0]["event"] == "start" and events[0]["layout"] == str(SAVED_AT)
    uninterrupted = {e["step"]: e["loss"] for e in events if e["event"] == "step"}
    assert sorted(uninterrupted) == list(range(1, STEPS + 1))
    assert uninterrupted[STEPS] < uninterrupted[1]  # it learns
    published = [e["step"] for e in events if e["event"] == "checkpoint_published"]
    assert published == [2, 4]
    manifest = json.loads((resharded / "ckpt" / "step-2" / "MANIFEST.json").read_text())
    assert manifest["layout"] == {"tp": 2, "pp": 2, "dp": 1}
    assert manifest["format"] == "torch.distributed.checkpoint"
    assert (resharded / "ckpt" / "latest").read_text() == "step-4"

    import torch

    saved = torch.load(resharded / "reference.pt", weights_only=False)
    whole_tensors = {
        f"{section}.{key}"
        for section, entries in saved.items()
        for key, value in entries.items()
        if isinstance(value, torch.Tensor)
    }
    print(f"\nsaved at {SAVED_AT} (world {WORLD}); losses {_fmt(uninterrupted)}")
    for i, layout in enumerate(LOADED_AT):
        ranks = [json.loads((resharded / f"loaded-{r}.json").read_text())[i] for r in range(WORLD)]
        # Every rank compared its whole state (parameters, Adam moments and steps) and
        # found it equal to the checkpoint's, bit for bit.
        assert all(r["differ"] == [] for r in ranks), [r["differ"] for r in ranks]
        # ... and together the ranks hold all of it: no tensor of the checkpoint is left out.
        assert {k for r in ranks for k in r["compared"]} == whole_tensors
        stages = {r["stage"] for r in ranks}
        assert stages == set(range(layout.pp))
        # Sharded for real: TP and/or FSDP made the parameters DTensors.
        assert all(r["dtensor_params"] > 0 for r in ranks)
        losses = {int(s): v for s, v in ranks[0]["losses"].items()}
        for step, loss in losses.items():
            assert loss == pytest.approx(uninterrupted[step], rel=1e-5, abs=1e-6), (layout, step)
        apart = max(abs(loss - uninterrupted[step]) for step, loss in losses.items())
        print(
            f"loaded step-{RESUME_STEP} at {layout}: "
            f"all {len(whole_tensors)} tensors (parameters, Adam moments and steps) equal, "
            f"whole, on its {WORLD} ranks; losses {_fmt(losses)} "
            f"(max |difference| {apart:.1e})"
        )


def _fmt(losses: dict[int, float]) -> str:
    return ", ".join(f"step {s} {v:.6f}" for s, v in sorted(losses.items()))


# --- bad input: one line, exit 2 ----------------------------------------------------------


def _entry(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workloads.training.parallel", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_bad_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    cfg = job_config(tmp_path, Layout(tp=3, pp=1, dp=1))
    path = tmp_path / "job.json"
    path.write_text(json.dumps(cfg))
    result = _entry(["--config", str(path)])
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "tp 3 must divide the attention heads (4)" in line


def test_a_world_that_is_not_a_whole_layout_is_refused_before_training(tmp_path: Path) -> None:
    from workloads.training.data import write_synthetic_shards

    write_synthetic_shards(tmp_path / "data", n_shards=1, tokens_per_shard=200, vocab=256)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job_config(tmp_path, SAVED_AT)))
    result = _entry(["--config", str(path), "--rank", "0", "--world-size", "3"])
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line == "parallel: world 3 is not a multiple of tp 2 x pp 2 = 4"


# --- the arithmetic -----------------------------------------------------------------------


def test_the_layout_at_a_world_is_tp_by_pp_by_the_rest() -> None:
    assert layout_for(ParallelConfig(tp=8, pp=4), 128) == Layout(tp=8, pp=4, dp=4)
    with pytest.raises(ValueError, match=r"tp 8 x pp 4 x dp 2 = 64 ranks, but the world is 128"):
        layout_for(ParallelConfig(tp=8, pp=4, dp=2), 128)


def test_the_stages_split_the_layers_contiguously() -> None:
    from workloads.training.parallel.sharding import stage_layers

    assert [list(stage_layers(10, 4, s)) for s in range(4)] == [
        [0, 1, 2],
        [3, 4, 5],
        [6, 7],
        [8, 9],
    ]


@pytest.mark.parametrize(
    ("parallel", "nodes", "expected"),
    [
        ({"tp": 16}, range(2, 3), ("parallel.tp", "tp must divide its 8 GPUs")),
        ({"tp": 3}, range(2, 3), ("parallel.tp", "tp must divide its 8 GPUs")),
        (
            {"tp": 8, "pp": 4, "dp": 2},
            range(16, 17),
            ("parallel", "tp 8 x pp 4 x dp 2 = 64 GPUs, but nodes 16 x 8 GPUs per node = 128"),
        ),
        (
            {"tp": 8, "pp": 2},
            range(12, 17),
            ("parallel", "nodes 13 x 8 GPUs per node = 104 is not a multiple of tp 8 x pp 2"),
        ),
        ({"tp": 8, "pp": 2, "dp": 6}, range(12, 17), ("parallel.dp", "leave dp out")),
    ],
)
def test_a_layout_that_does_not_fit_the_nodes_says_the_arithmetic(
    parallel: dict[str, int], nodes: range, expected: tuple[str, str]
) -> None:
    problem = placement_problem(ParallelConfig.model_validate(parallel), nodes, 8)
    assert problem is not None
    assert problem[0] == expected[0] and expected[1] in problem[1]
    assert placement_problem(ParallelConfig(tp=8, pp=2), range(12, 17, 2), 8) is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"parallel": {"tp": 2, "pp": 5}}, "pp 5 is more stages than the model's 4"),
        ({"zero_stage": 2}, "sets zero_stage: DeepSpeed's"),
        ({"gradient_accumulation_steps": 4}, "sets gradient_accumulation_steps"),
        ({"parallel": {"tp": 1, "pp": 2, "dp": 3}}, "global_batch_size 8 is not a multiple"),
        (
            {"parallel": {"tp": 1, "pp": 4, "dp": 2}},
            "schedule 1f1b needs at least pp 4 micro-batches per step; dp 2 gets",
        ),
    ],
)
def test_the_trainer_config_refuses_what_it_cannot_run(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        ParallelJobConfig.model_validate(job_config(tmp_path, SAVED_AT, **changes))


def test_the_dumped_config_reads_back_without_deepspeeds_keys(tmp_path: Path) -> None:
    job = ParallelJobConfig.model_validate(job_config(tmp_path, SAVED_AT))
    dumped = job.model_dump(mode="json")
    assert not {"zero_stage", "extra_ds", "optimizer", "gradient_accumulation_steps"} & set(dumped)
    assert ParallelJobConfig.model_validate(dumped) == job
    assert batch_problem(job, 2) is None and job.microbatches(2) == 2
