"""Checkpoints any layout can load: torch.distributed.checkpoint (DCP) under the DP trainer's
publish protocol.

What is written: `get_state_dict(stage, optimizer)` of every rank, the model's entries by
their fully-qualified names in the whole model (each pipeline stage holds only its own
layers' names) and the optimizer's flattened to one entry per parameter and state
(`state.<fqn>.exp_avg`, `param_groups.<fqn>.lr`: no per-stage lists of parameters to
collide). Tensor-parallel and FSDP shards are DTensors that carry their placements, so
DCP's metadata says which slice of which whole tensor each file holds, and a load at
another layout reads the slices it now needs (DCP's resharding). A replicated tensor is
written once (DCP's planner deduplicates it across ranks).

The protocol is `workloads.training.checkpointing`'s: every rank writes under
`tmp-step-N`, DCP's save returns once its coordinator has written the metadata (a
collective), then rank 0 seals and publishes (`checkpointing.publish`: MANIFEST.json with
every file and its size, COMPLETE, rename to `step-N`, then `latest`), and resume takes
the newest checkpoint the completeness rule accepts (`checkpointing.select_resume`).
`checkpointing` is imported on rank 0 only, where it is used: it imports DeepSpeed.

Offline, `torch.distributed.checkpoint.format_utils.dcp_to_torch_save(step-N, file)`
turns a checkpoint into one file of whole tensors (no process group): the export path, and
what the tests compare a load against.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from contracts.parallel import Layout

FORMAT = "torch.distributed.checkpoint"
OPTIONS = StateDictOptions(flatten_optimizer_state_dict=True)


def _checkpointing() -> Any:
    """`workloads.training.checkpointing`, imported quietly: it imports DeepSpeed, which
    would otherwise print to stdout, the JSON event log (and on a CPU asks for its
    accelerator to be named, as train.py does)."""
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    with contextlib.redirect_stdout(io.StringIO()):
        from workloads.training import checkpointing
    return checkpointing


def state(stage: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """This rank's part of the checkpoint: `model` and `optim`, keyed by full names."""
    model_sd, optim_sd = get_state_dict(stage, optimizer, options=OPTIONS)
    return {"model": model_sd, "optim": optim_sd}


def save(
    root: Path,
    step: int,
    stage: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    layout: Layout,
    meta: dict[str, Any],
) -> Path:
    """Write and publish `step-N` (collective: every rank calls it); the published path."""
    tmp = root / f"tmp-step-{step}"
    if dist.get_rank() == 0:
        # A tmp-step-N of an earlier incarnation (another layout) would mix its files in.
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier()
    dcp.save(
        state(stage, optimizer),
        storage_writer=dcp.FileSystemWriter(str(tmp), sync_files=True),
    )
    published = root / f"step-{step}"
    if dist.get_rank() == 0:
        _checkpointing().publish(
            root,
            step,
            {
                **meta,
                "format": FORMAT,
                "world_size": layout.world,
                "layout": {"tp": layout.tp, "pp": layout.pp, "dp": layout.dp},
            },
        )
    dist.barrier()
    return published


def prune(root: Path, keep_last: int) -> None:
    """Rank 0, right after a publish: `checkpointing.prune`."""
    _checkpointing().prune(root, keep_last)


def newest(root: Path) -> tuple[int, str, dict[str, Any]] | None:
    """(step, path, manifest) of the newest complete checkpoint, agreed by every rank
    (rank 0 judges, the others take its answer)."""
    found: list[Any] = [None]
    if dist.get_rank() == 0:
        ckpt = _checkpointing().select_resume(root, recover_aside=True)
        if ckpt is not None:
            found[0] = (ckpt.step, str(ckpt.path), ckpt.meta)
    dist.broadcast_object_list(found, src=0)
    return found[0]


def load(path: Path, stage: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Fill this rank's stage and optimizer from the checkpoint at `path`, whatever layout
    wrote it (collective)."""
    current = state(stage, optimizer)
    dcp.load(current, storage_reader=dcp.FileSystemReader(str(path)))
    set_state_dict(
        stage,
        optimizer,
        model_state_dict=current["model"],
        optim_state_dict=current["optim"],
        options=OPTIONS,
    )
