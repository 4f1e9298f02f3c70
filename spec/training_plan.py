"""A training run planned before it is bought: compute, time, cost, memory per GPU, checkpoint.

Pure arithmetic on a model's shape, the catalog's instance facts and prices, and an
utilisation assumption; `llmp plan train` prints it. Conventions, and where they come from:

- **Compute**: 6 x N x D FLOPs for N parameters and D tokens (forward 2, backward 4 per
  parameter and token; Kaplan et al. 2020, the count GPT-3's 3.14e23 uses). Attention's
  own FLOPs (6 x layers x sequence x hidden per token) are left out, as they are there;
  they add under 3% at GPT-3's shape.
- **Throughput**: MFU x the GPU's dense BF16 peak (catalog), or an achieved TFLOPS per GPU
  given directly. Time = FLOPs / (GPUs x achieved FLOP/s).
- **Model states per GPU** (bytes), DeepSpeed's own accounting (its
  `estimate_zero2_model_states_mem_needs` and `estimate_zero3_...`, the peers of the
  tests): 2 per parameter for bf16 weights, 2 for bf16 gradients, 16 for the optimizer
  (fp32 gradients, fp32 master weights, Adam's momentum and variance). Over the
  model-parallel shard of Phi = N / (TP x PP) parameters (with a model's full shape, the
  heaviest pipeline stage's, as `spec.serving_memory` counts it), ZeRO partitions over
  the DP = GPUs / (TP x PP) replicas: stage 0 nothing (20 Phi), stage 1 the optimizer
  (4 Phi + 16 Phi / DP), stage 2 gradients too (2 Phi + 18 Phi / DP), stage 3 the weights
  too (20 Phi / DP), plus the largest layer gathered whole, its weights and gradients
  (4 bytes per parameter). DeepSpeed's ZeRO-3 estimator counts 18 Phi / DP: it leaves
  the partitioned bf16 gradients out.
- **Activations** of the heaviest pipeline stage (the first, which under 1F1B holds PP
  micro-batches of its layers: the whole model's layers' worth), per micro-batch of one
  sequence: 34 x sequence x hidden bytes per layer with FlashAttention (no attention
  score matrix) and sequence parallelism over TP (Korthikanti et al. 2022, "Reducing
  Activation Recomputation in Large Transformer Models", table 2 without its 5as/h term);
  with full activation checkpointing only each layer's input, 2 x sequence x hidden.
  Not counted: the allocator's fragmentation, NCCL buffers, the CUDA context.
- **Checkpoint**: 14 bytes per parameter for a resumable save (bf16 weights 2, fp32
  master 4, Adam momentum and variance 8); the fp32 gradients are not saved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from spec.catalog import InstanceType, catalog
from spec.serving_memory import GIB, ModelShape

WEIGHT_BYTES = 2
GRADIENT_BYTES = 2
OPTIMIZER_BYTES = 16
"""fp32 gradients 4, fp32 master weights 4, Adam momentum 4 and variance 4 (DeepSpeed's)."""
CHECKPOINT_BYTES = 14
"""bf16 weights 2, fp32 master 4, Adam momentum and variance 8 per parameter."""
ACTIVATION_BYTES = 34
"""Per layer, token and hidden unit, with FlashAttention and sequence parallelism."""
CHECKPOINTED_ACTIVATION_BYTES = 2
"""Only each layer's bf16 input, under full activation checkpointing."""

ZeroStage = Literal[0, 1, 2, 3]
Capacity = Literal["ON_DEMAND", "CAPACITY_BLOCK", "SPOT"]


DEFAULT_MFU = 0.4
"""The MFU `llmp plan train` assumes unless told: Llama 3 405B's 38-43% on 16k H100s."""


class PlanError(ValueError):
    """An impossible plan: one line naming the option and what would be right."""


@dataclass(frozen=True)
class Model:
    """What the planner needs of a model: its parameters and the shape of its layers."""

    parameters: float
    layers: int
    hidden_size: int
    sequence_length: int
    vocab_size: int = 0
    """0 where unknown: the embedding is then not a candidate for the largest layer."""
    shape: ModelShape | None = None
    """The full shape (heads, KV heads, MLP width, vocabulary) where given."""

    def layer_parameters(self) -> float:
        if self.shape is not None:
            return self.shape.layer_linear() + 2 * self.hidden_size
        return 12 * self.hidden_size**2  # attention 4h^2, an MLP of 4h: 8h^2

    def largest_layer(self) -> float:
        """Parameters of the largest single layer (ZeRO-3 gathers one whole at a time)."""
        return max(self.layer_parameters(), self.vocab_size * self.hidden_size)

    def stage_parameters(self, tensor_parallel: int, pipeline_parallel: int) -> float:
        """Parameters one GPU holds of the heaviest pipeline stage, before ZeRO."""
        if self.shape is not None:
            return self.shape.stage_weight_bytes(pipeline_parallel) / 2 / tensor_parallel
        return self.parameters / (tensor_parallel * pipeline_parallel)

    def flops(self, tokens: float) -> float:
        return 6 * self.parameters * tokens


@dataclass(frozen=True)
class Layout:
    gpus: int
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    micro_batch: int = 1
    activation_checkpointing: bool = False

    @property
    def data_parallel(self) -> int:
        return self.gpus // (self.tensor_parallel * self.pipeline_parallel)


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU, by what holds them."""

    weights: float
    gradients: float
    optimizer: float
    gathered: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.gathered + self.activations

    @property
    def model_states(self) -> float:
        return self.total - self.activations


def memory(model: Model, layout: Layout, zero: ZeroStage) -> Memory:
    """Memory per GPU of the heaviest pipeline stage under ZeRO stage `zero`."""
    tp, pp, dp = layout.tensor_parallel, layout.pipeline_parallel, layout.data_parallel
    phi = model.stage_parameters(tp, pp)
    weights, grads, optim = WEIGHT_BYTES * phi, GRADIENT_BYTES * phi, OPTIMIZER_BYTES * phi
    gathered = 0.0
    if zero >= 1:
        optim /= dp
    if zero >= 2:
        grads /= dp
    if zero == 3:
        weights /= dp
        gathered = (WEIGHT_BYTES + GRADIENT_BYTES) * model.largest_layer() / tp
    per_token = (
        CHECKPOINTED_ACTIVATION_BYTES if layout.activation_checkpointing else ACTIVATION_BYTES
    )
    activations = (
        per_token
        * model.sequence_length
        * layout.micro_batch
        * model.hidden_size
        * model.layers
        / tp
    )
    return Memory(weights, grads, optim, gathered, activations)


@dataclass(frozen=True)
class TrainingPlan:
    model: Model
    tokens: float
    instance_type: str
    layout: Layout
    achieved_tflops: float
    """Per GPU."""
    capacity_type: Capacity = "ON_DEMAND"

    @property
    def instance(self) -> InstanceType:
        return catalog().instance(self.instance_type)

    @property
    def peak_tflops(self) -> float:
        acc = self.instance.accelerator
        if acc is None or acc.peak_bf16_tflops is None:
            raise PlanError(
                f"--gpu-type {self.instance_type}: the catalog has no dense BF16 peak for it; "
                "give --tflops instead of --mfu"
            )
        return acc.peak_bf16_tflops

    @property
    def gpus_per_node(self) -> int:
        return self.instance.gpu_count

    @property
    def nodes(self) -> int:
        return math.ceil(self.layout.gpus / self.gpus_per_node)

    @property
    def flops(self) -> float:
        return self.model.flops(self.tokens)

    @property
    def gpu_hours(self) -> float:
        return self.flops / (self.achieved_tflops * 1e12) / 3600

    @property
    def hours(self) -> float:
        return self.gpu_hours / self.layout.gpus

    @property
    def tokens_per_second_per_gpu(self) -> float:
        return self.achieved_tflops * 1e12 / (6 * self.model.parameters)

    def node_price(self, capacity: Capacity | None = None) -> float | None:
        capacity = capacity or self.capacity_type
        spec = self.instance
        if capacity == "CAPACITY_BLOCK":
            return spec.capacity_block_usd_per_hour
        if capacity == "SPOT":
            return spec.on_demand_usd_per_hour * (1 - catalog().spot_discount_assumption)
        return spec.on_demand_usd_per_hour

    def cost(self, capacity: Capacity | None = None) -> float | None:
        """USD for whole nodes over the run's hours."""
        price = self.node_price(capacity)
        return None if price is None else price * self.nodes * self.hours

    def gpu_memory_gib(self) -> float:
        acc = self.instance.accelerator
        assert acc is not None  # the planner's types are accelerated
        return acc.memory_gib / acc.count

    def memory(self, zero: ZeroStage) -> Memory:
        return memory(self.model, self.layout, zero)

    @property
    def checkpoint_bytes(self) -> float:
        return CHECKPOINT_BYTES * self.model.parameters


def gpus_for_hours(
    model: Model, tokens: float, hours: float, tflops: float, per_node: int, model_parallel: int = 1
) -> int:
    """The fewest GPUs, in whole nodes and whole model replicas (TP x PP), that train
    `tokens` within `hours` at `tflops` per GPU."""
    gpus = model.flops(tokens) / (tflops * 1e12 * hours * 3600)
    step = math.lcm(per_node, model_parallel)
    return math.ceil(gpus / step) * step


def check_layout(layout: Layout, model: Model, gpus_per_node: int) -> None:
    """PlanError (one line) where the layout cannot run."""
    tp, pp = layout.tensor_parallel, layout.pipeline_parallel
    if layout.gpus % (tp * pp):
        raise PlanError(
            f"--gpus {layout.gpus} is not a multiple of TP x PP = {tp * pp}; use "
            f"{(layout.gpus // (tp * pp) or 1) * tp * pp}"
        )
    if tp > gpus_per_node:
        raise PlanError(
            f"--tp {tp} spans more than a node's {gpus_per_node} GPUs: tensor parallelism "
            "stays on NVLink; use pipeline parallelism across nodes"
        )
    if pp > model.layers:
        raise PlanError(f"--pp {pp} exceeds the model's {model.layers} layers")


def gib(value: float) -> float:
    return value / GIB
