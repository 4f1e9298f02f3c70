"""The 3-D trainer's config and the layout arithmetic: torch-free, so `llmp job` checks with it.

`ParallelConfig` is the job file's `parallel:` block (tp, pp, optionally dp, the pipeline
schedule); `ParallelJobConfig` is the trainer's whole config: the DP trainer's `JobConfig`
(model, data, checkpoint, steps, optimizer settings), without what is DeepSpeed's alone
(zero_stage, offload, `extra_ds`, DPO and GRPO), plus `parallel` and `global_batch_size`.

The global batch is fixed in samples, not per rank: each data-parallel rank takes
`global_batch_size / dp` samples per step, in micro-batches of `micro_batch_size` (the
pipeline's micro-batches), so a job resumed at another dp (nodes lost, or a new layout)
takes the same optimizer step on the same samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from contracts.training import DpoConfig, GrpoConfig, JobConfig, _Strict

DEEPSPEED_ONLY = (
    "zero_stage",
    "offload_optimizer",
    "pin_memory",
    "extra_ds",
    "dpo",
    "grpo",
    "gradient_accumulation_steps",
)
"""JobConfig's settings that the 3-D trainer does not read; refused when set."""


class ParallelConfig(_Strict):
    """How the ranks are laid out: tensor x pipeline x data parallel (tp innermost)."""

    tp: int = Field(
        1, ge=1, description="tensor-parallel ranks: within a node (NVLink); divides the heads"
    )
    pp: int = Field(1, ge=1, description="pipeline stages: the decoder layers split into pp")
    dp: int | None = Field(
        None,
        ge=1,
        description="data-parallel replicas (FSDP); default: world / (tp x pp) at each start",
    )
    schedule: Literal["1f1b", "gpipe"] = Field(
        "1f1b", description="pipeline schedule (torch.distributed.pipelining)"
    )


class ParallelJobConfig(JobConfig):
    """`python -m workloads.training.parallel`'s config."""

    task: Literal["pretrain"] = "pretrain"
    parallel: ParallelConfig = ParallelConfig()
    global_batch_size: int = Field(
        8, ge=1, description="samples per optimizer step, the same at every layout"
    )
    optimizer: Literal["torch"] = Field(
        "torch", description="torch.optim.AdamW over DTensors", exclude=True
    )
    # DeepSpeed's, unused here: out of the dump, refused when set (`_not_deepspeed`).
    zero_stage: Literal[1, 2, 3] = Field(3, exclude=True)
    offload_optimizer: bool = Field(False, exclude=True)
    pin_memory: bool = Field(True, exclude=True)
    extra_ds: dict[str, Any] = Field(default_factory=dict, exclude=True)
    dpo: DpoConfig = Field(DpoConfig(), exclude=True)
    grpo: GrpoConfig | None = Field(None, exclude=True)
    gradient_accumulation_steps: int = Field(1, ge=1, exclude=True)

    @model_validator(mode="after")
    def _not_deepspeed(self) -> ParallelJobConfig:
        given = [k for k in DEEPSPEED_ONLY if k in self.model_fields_set]
        if given:
            raise ValueError(
                f"sets {', '.join(given)}: DeepSpeed's, not the 3-D trainer's (micro-batches "
                "per step are global_batch_size / (dp x micro_batch_size))"
            )
        if self.model.lora is not None:
            raise ValueError("model.lora: the 3-D trainer trains all weights (pretraining)")
        if self.data.path.startswith("s3://"):
            raise ValueError("data.path: the 3-D trainer reads token shards from a file system")
        if getattr(self.checkpoint, "restore_from", None) is not None:
            raise ValueError("checkpoint.restore_from: not read by the 3-D trainer")
        if self.model.pretrained is None:
            problem = model_problem(self.parallel, self.model.dimensions())
            if problem is not None:
                raise ValueError(problem)
        if self.parallel.dp is not None:
            problem = batch_problem(self, self.parallel.dp)
            if problem is not None:
                raise ValueError(problem)
        return self

    def microbatches(self, dp: int) -> int:
        """Micro-batches each data-parallel rank runs per step at `dp`."""
        return self.global_batch_size // (dp * self.micro_batch_size)


def model_problem(parallel: ParallelConfig, dims: dict[str, Any]) -> str | None:
    """Why a model of these dimensions cannot be split so, or None. A `pretrained` model's
    shape is its config.json's, which the trainer checks when it reads it."""
    heads, kv, layers = (
        dims["num_attention_heads"],
        dims["num_key_value_heads"],
        dims["num_hidden_layers"],
    )
    tp, pp = parallel.tp, parallel.pp
    if heads % tp or kv % tp:
        return (
            f"tp {tp} must divide the attention heads ({heads}) and the key/value heads ({kv}): "
            "each tensor-parallel rank computes whole heads"
        )
    if pp > layers:
        return f"pp {pp} is more stages than the model's {layers} decoder layers"
    return None


def batch_problem(job: ParallelJobConfig, dp: int) -> str | None:
    """Why the global batch does not split over `dp` replicas in whole micro-batches."""
    per = dp * job.micro_batch_size
    if job.global_batch_size % per:
        return (
            f"global_batch_size {job.global_batch_size} is not a multiple of dp {dp} x "
            f"micro_batch_size {job.micro_batch_size} = {per}"
        )
    micro, pp = job.microbatches(dp), job.parallel.pp
    if job.parallel.schedule == "1f1b" and pp > 1 and micro < pp:
        return (
            f"schedule 1f1b needs at least pp {pp} micro-batches per step; dp {dp} gets "
            f"global_batch_size {job.global_batch_size} / {per} = {micro} (raise the batch "
            "or use schedule gpipe)"
        )
    return None


@dataclass(frozen=True)
class Layout:
    """A world's ranks as (pp, dp, tp), tp innermost: torchrun numbers a node's processes
    consecutively, so a tensor-parallel group is one node's GPUs when tp divides them."""

    tp: int
    pp: int
    dp: int

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    def __str__(self) -> str:
        return f"tp {self.tp} x pp {self.pp} x dp {self.dp}"


def layout_for(parallel: ParallelConfig, world: int) -> Layout:
    """The layout at `world` ranks; ValueError with the arithmetic when it does not fit."""
    group = parallel.tp * parallel.pp
    if world % group:
        raise ValueError(
            f"world {world} is not a multiple of tp {parallel.tp} x pp {parallel.pp} = {group}"
        )
    dp = world // group
    if parallel.dp is not None and parallel.dp != dp:
        raise ValueError(
            f"tp {parallel.tp} x pp {parallel.pp} x dp {parallel.dp} = "
            f"{group * parallel.dp} ranks, but the world is {world}"
        )
    return Layout(tp=parallel.tp, pp=parallel.pp, dp=dp)


def placement_problem(
    parallel: ParallelConfig, nodes: range, gpus_per_node: int
) -> tuple[str, str] | None:
    """(key, why) when the layout does not fit `nodes` x `gpus_per_node`, else None: TP
    within a node, and every node count the job may run at (elastic) a whole layout."""
    tp, pp = parallel.tp, parallel.pp
    if tp > gpus_per_node or gpus_per_node % tp:
        return (
            "parallel.tp",
            f"tensor parallelism stays within a node: tp must divide its {gpus_per_node} GPUs "
            "(gpus_per_node)",
        )
    if parallel.dp is not None and len(nodes) > 1:
        return (
            "parallel.dp",
            f"nodes {nodes.start}..{nodes.stop - 1} is elastic: leave dp out, it is "
            "world / (tp x pp) at each size",
        )
    for n in nodes:
        world = n * gpus_per_node
        if parallel.dp is not None and tp * pp * parallel.dp != world:
            return (
                "parallel",
                f"tp {tp} x pp {pp} x dp {parallel.dp} = {tp * pp * parallel.dp} GPUs, but "
                f"nodes {n} x {gpus_per_node} GPUs per node = {world}",
            )
        if world % (tp * pp):
            return (
                "parallel",
                f"nodes {n} x {gpus_per_node} GPUs per node = {world} is not a multiple of "
                f"tp {tp} x pp {pp} = {tp * pp}"
                + (" (every size of the elastic range must be)" if len(nodes) > 1 else ""),
            )
    return None
