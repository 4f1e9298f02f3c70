"""The 3-D training loop: one optimizer step of the global batch over a (pp, dp, tp) mesh.

`Trainer(job, layout, device)` is one rank: its stage (`sharding.build_stage`), AdamW over
its parameters (DTensors where sharded), the pipeline schedule when pp > 1, and the token
shards. `step(n)` takes optimizer step n (1-based) on global samples `(n-1) x B .. n x B - 1`
(B = `global_batch_size`): data-parallel rank r reads its B / dp of them, in micro-batches of
`micro_batch_size`; the loss is the mean over the global batch whatever the layout, which is
what makes a resumed run at another layout continue the same curve.

Pipeline: `torch.distributed.pipelining.PipelineStage` around the stage module and
`Schedule1F1B` (or `ScheduleGPipe`) over pp; the schedule scales the gradients by the number
of micro-batches. With pp = 1 the micro-batches run in a plain loop (FSDP reduces the
gradients on the last one only).

Gradient clipping: the norm of the whole model, each parameter's (sharded) norm made whole
with its DTensor, summed, then summed over the pipeline stages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.tensor import DTensor

from contracts.parallel import Layout, ParallelJobConfig
from workloads.training.data import TokenShards
from workloads.training.parallel import checkpoint, sharding
from workloads.training.telemetry import StepClock


@dataclass(frozen=True)
class StepResult:
    step: int
    loss: float
    grad_norm: float
    lr: float
    seconds: float
    phases: tuple[float, ...]
    """This rank's seconds in each of the stragglers' PHASES, in their order (checkpoint 0:
    saves are the caller's)."""


def _loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))


class Trainer:
    """One rank of a 3-D parallel run (every rank of the world constructs one, together)."""

    def __init__(self, job: ParallelJobConfig, layout: Layout, device: torch.device) -> None:
        if layout.world != dist.get_world_size():
            raise ValueError(
                f"{layout} = {layout.world} ranks, but the world is {dist.get_world_size()}"
            )
        self.job, self.layout, self.device = job, layout, device
        self.mesh = sharding.device_mesh(layout, device.type)
        self.stage_index = self.mesh.get_local_rank("pp")
        self.dp_rank = self.mesh.get_local_rank("dp")
        self.first = self.stage_index == 0
        self.last = self.stage_index == layout.pp - 1
        self.micro = job.microbatches(layout.dp)
        self.module = sharding.build_stage(job, layout, self.mesh, device)
        self.params = [p for p in self.module.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=job.lr, betas=(0.9, 0.95), weight_decay=job.weight_decay
        )
        self.data = TokenShards(
            job.data.path, job.model.seq_len, job.data.bin_dtype, seed=job.data.seed
        )
        self.clock = StepClock(device)
        self.schedule: Any = None
        if layout.pp > 1:
            from torch.distributed.pipelining import (
                PipelineStage,
                Schedule1F1B,
                ScheduleGPipe,
            )

            pipe = PipelineStage(
                self.module,
                self.stage_index,
                layout.pp,
                device,
                group=self.mesh.get_group("pp"),
            )
            kind = Schedule1F1B if job.parallel.schedule == "1f1b" else ScheduleGPipe
            self.schedule = kind(pipe, n_microbatches=self.micro, loss_fn=_loss)

    # --- one step ------------------------------------------------------------------------

    def batch(self, step: int) -> torch.Tensor:
        """This data-parallel rank's samples of optimizer step `step` (1-based)."""
        return self._read(step).to(self.device)

    def _read(self, step: int) -> torch.Tensor:
        per_rank = self.job.global_batch_size // self.layout.dp
        first = (step - 1) * self.job.global_batch_size + self.dp_rank * per_rank
        return self.data.batch(first, per_rank)

    def lr(self, step: int) -> float:
        warmup = self.job.warmup_steps
        return self.job.lr * (min(1.0, step / warmup) if warmup else 1.0)

    def step(self, step: int) -> StepResult:
        """Optimizer step `step`, timed by `self.clock`: reading the batch (data_wait), forward
        and backward with the pipeline's transfers and FSDP's gathers and reductions inside
        (compute), the loss's all-reduce (collective), clipping and the update (optimizer)."""
        clock = self.clock
        clock.start()
        tokens = self._read(step)
        clock.lap("data_wait")
        tokens = tokens.to(self.device)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        lr = self.lr(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        # On the device: NCCL reduces device tensors only.
        local = torch.zeros((), dtype=torch.float64, device=self.device)
        with self._precision():
            if self.schedule is not None:
                losses: list[torch.Tensor] = []
                if self.first:
                    self.schedule.step(inputs)
                elif self.last:
                    self.schedule.step(target=targets, losses=losses)
                else:
                    self.schedule.step()
                if self.last:
                    local = torch.stack([x.detach().double() for x in losses]).mean()
            else:
                sync = getattr(self.module, "set_requires_gradient_sync", None)
                for i, (x, y) in enumerate(
                    zip(inputs.chunk(self.micro), targets.chunk(self.micro), strict=True)
                ):
                    if sync is not None:
                        sync(i == self.micro - 1)
                    loss = _loss(self.module(x), y)
                    (loss / self.micro).backward()
                    local += loss.detach().double() / self.micro
        clock.lap("compute")
        loss_value = self._global_loss(local)
        clock.lap("collective")
        grad_norm = self._clip()
        self.optimizer.step()
        clock.lap("optimizer")
        return StepResult(step, loss_value, grad_norm, lr, clock.total(), tuple(clock.seconds()))

    def _precision(self) -> Any:
        if self.job.bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return torch.autocast(self.device.type, enabled=False)

    def _global_loss(self, local: torch.Tensor) -> float:
        """The mean loss over the global batch: the last stage's ranks hold it (each tp rank
        the same), the other stages add zero."""
        total = local.clone()
        dist.all_reduce(total)
        return float(total) / (self.layout.dp * self.layout.tp)

    def _clip(self) -> float:
        squares = torch.zeros((), dtype=torch.float64, device=self.device)
        for p in self.params:
            if p.grad is None:
                continue
            norm = torch.linalg.vector_norm(p.grad.detach(), dtype=torch.float32)
            if isinstance(norm, DTensor):
                norm = norm.full_tensor()
            squares += norm.double() ** 2
        if self.layout.pp > 1:
            dist.all_reduce(squares, group=self.mesh.get_group("pp"))
        total = math.sqrt(float(squares))
        clip = self.job.grad_clip
        if clip > 0 and total > clip:
            scale = clip / (total + 1e-6)
            for p in self.params:
                if p.grad is not None:
                    p.grad.detach().mul_(scale)
        return total

    # --- checkpoints ---------------------------------------------------------------------

    @property
    def root(self) -> Path:
        return Path(self.job.checkpoint.dir)

    def save(self, step: int) -> Path:
        path = checkpoint.save(
            self.root,
            step,
            self.module,
            self.optimizer,
            self.layout,
            {
                "global_batch_size": self.job.global_batch_size,
                "consumed_samples": step * self.job.global_batch_size,
            },
        )
        if dist.get_rank() == 0:
            checkpoint.prune(self.root, self.job.checkpoint.keep_last)
        return path

    def load(self, path: Path) -> None:
        checkpoint.load(path, self.module, self.optimizer)

    def resume(self) -> tuple[int, dict[str, Any]] | None:
        """Load the newest complete checkpoint, if any: (its step, its manifest)."""
        found = checkpoint.newest(self.root)
        if found is None:
            return None
        step, path, meta = found
        if int(meta.get("global_batch_size", self.job.global_batch_size)) != (
            self.job.global_batch_size
        ):
            raise ValueError(
                f"{path} trained with global_batch_size {meta['global_batch_size']}, this job "
                f"with {self.job.global_batch_size}: its sample stream would not continue"
            )
        self.load(Path(path))
        return step, meta

    def full_state(self) -> dict[str, torch.Tensor]:
        """Every entry of this rank's checkpoint state as a whole tensor (collective for
        sharded ones): what a load is compared against, and small-model export."""
        out: dict[str, torch.Tensor] = {}
        for section, entries in checkpoint.state(self.module, self.optimizer).items():
            for key, value in entries.items():
                if isinstance(value, DTensor):
                    value = value.full_tensor()
                if isinstance(value, torch.Tensor):
                    out[f"{section}.{key}"] = value.detach().cpu()
        return out
