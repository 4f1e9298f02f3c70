"""The model of one rank: its pipeline stage's layers, tensor-parallel within the stage,
FSDP-sharded across the data-parallel replicas.

The device mesh is (pp, dp, tp) with tp innermost: torchrun numbers a node's processes
consecutively, so with tp dividing the GPUs per node a tensor-parallel group (the most
traffic, twice per layer in forward and in backward) stays on NVLink, and data parallelism
(a reduce-scatter per step) and the pipeline (activations between stages) cross EFA.

A stage keeps the transformers modules under their own names: `model.layers` becomes a
ModuleDict keyed by the original layer index, and the embedding (first stage), the final
norm and the head (last stage) stay where `LlamaForCausalLM` has them. Every parameter's
fully-qualified name is therefore the one it has in the whole model, which is what lets a
checkpoint written by one layout load at any other.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    parallelize_module,
)

from contracts.parallel import Layout, ParallelJobConfig, model_problem
from workloads.training import model as hf

MESH_DIMS = ("pp", "dp", "tp")


def tp_plan() -> dict[str, ParallelStyle]:
    """Megatron's split of a decoder layer: q/k/v and gate/up column-wise (each rank whole
    heads, a slice of the MLP), o and down row-wise (one all-reduce after each)."""
    return {
        "self_attn.q_proj": ColwiseParallel(),
        "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(),
        "mlp.gate_proj": ColwiseParallel(),
        "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(),
    }


def device_mesh(layout: Layout, device_type: str) -> DeviceMesh:
    return init_device_mesh(
        device_type, (layout.pp, layout.dp, layout.tp), mesh_dim_names=MESH_DIMS
    )


def stage_layers(num_layers: int, stages: int, stage: int) -> range:
    """The decoder layers of `stage`: contiguous, the first `num_layers % stages` stages
    one more than the others."""
    base, extra = divmod(num_layers, stages)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (1 if stage < extra else 0))


class Stage(nn.Module):
    """One pipeline stage of a Llama-family causal LM, its parameters under the whole
    model's names (`model.embed_tokens`, `model.layers.<i>`, `model.norm`, `lm_head`).

    forward: token ids (first stage) or hidden states -> hidden states, or logits (last).
    """

    def __init__(self, causal_lm: Any, layers: range, first: bool, last: bool) -> None:
        super().__init__()
        inner = causal_lm.model
        inner.layers = nn.ModuleDict({str(i): inner.layers[i] for i in layers})
        if not first:
            inner.embed_tokens = None
        if not last:
            inner.norm = None
        self.model = inner
        self.lm_head = causal_lm.lm_head if last else None
        self.first, self.last = first, last

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = self.model
        h = inner.embed_tokens(x) if self.first else x
        positions = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
        rope = inner.rotary_emb(h, positions)
        for layer in inner.layers.values():
            # No mask: SDPA is causal on its own when none is given (is_causal).
            h = layer(h, attention_mask=None, position_ids=positions, position_embeddings=rope)
        if self.last:
            assert self.lm_head is not None
            return self.lm_head(inner.norm(h))
        return h


def build_stage(
    job: ParallelJobConfig, layout: Layout, mesh: DeviceMesh, device: torch.device
) -> Stage:
    """This rank's stage: built whole from the seed (every rank the same weights), cut to
    its layers, tensor-parallel over mesh["tp"], its layers compiled when the job says
    `compile`, FSDP over mesh["dp"] when dp > 1. Activation checkpointing
    (`model.gradient_checkpointing`) is transformers' own, set by `model.build` on each
    decoder layer."""
    torch.manual_seed(job.data.seed)
    causal_lm = hf.build(job.model, lora=False)
    config = causal_lm.config
    if getattr(config, "tie_word_embeddings", False) and layout.pp > 1:
        raise ValueError(
            "model.tie_word_embeddings with pp > 1: the embedding (first stage) and the head "
            "(last stage) would have to share one weight across stages"
        )
    dims = {
        k: getattr(config, k)
        for k in ("num_attention_heads", "num_key_value_heads", "num_hidden_layers")
    }
    problem = model_problem(job.parallel, dims)
    if problem is not None:
        raise ValueError(problem)
    if config._attn_implementation != "sdpa":
        # The stage passes no mask: only SDPA then applies the causal one itself.
        causal_lm.set_attn_implementation("sdpa")
    stage_index = mesh.get_local_rank("pp")
    stage = Stage(
        causal_lm,
        stage_layers(config.num_hidden_layers, layout.pp, stage_index),
        first=stage_index == 0,
        last=stage_index == layout.pp - 1,
    )
    stage.to(device)
    if layout.tp > 1:
        for layer in stage.model.layers.values():
            parallelize_module(layer, mesh["tp"], tp_plan())
    if job.compile:
        # Per decoder layer, after TP and before FSDP (torchtitan's order): one graph reused
        # by every layer, FSDP's gathers and reductions left between the compiled regions.
        for layer in stage.model.layers.values():
            layer.compile()
    if layout.dp > 1:
        # Within a pipeline each micro-batch would all-gather again after a reshard.
        reshard = layout.pp == 1
        for layer in stage.model.layers.values():
            fully_shard(layer, mesh=mesh["dp"], reshard_after_forward=reshard)
        fully_shard(stage, mesh=mesh["dp"], reshard_after_forward=reshard)
    return stage
