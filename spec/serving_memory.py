"""GPU memory of a served model: weights, LoRA slots and KV cache per GPU, in bytes.

Pure arithmetic on a model's shape (the numbers of its `config.json`), shared by the
config check (`spec.serving.engine_plan`) and whatever reports it. What vLLM v0.11.0
holds per GPU, and how it is counted here:

- **weights**: parameters x bytes per weight, over the tensor-parallel GPUs. A dense
  decoder with a gated MLP (Llama, Mistral, Qwen) has per layer q and o (hidden x heads x
  head_dim each), k and v (hidden x KV heads x head_dim each), gate, up and down (hidden x
  intermediate each) and two norms; plus the embedding, the LM head unless tied, and the
  final norm. Quantized linear layers (AWQ, GPTQ: 4 bits) carry a 16-bit scale per group
  of 128 and a 4-bit zero point: 4.16 bits; embeddings and the LM head stay 16-bit.
- **KV cache**: 2 (K and V) x layers x KV heads per GPU x head_dim x bytes, per token.
  vLLM replicates KV heads when there are fewer than GPUs, so a GPU holds at least one.
- **LoRA**: vLLM reserves, for each of `max_loras` slots, A and B matrices of
  `max_lora_rank` for q/k/v, o, gate/up and down of every layer (16-bit).
- **EAGLE draft head**: one decoder layer of the target's shape and its 2h x h input
  projection (it shares the target's embedding and LM head), and that layer's KV cache.
- **pipeline parallel** (a replica over several nodes): each stage holds its share of the
  layers, rounded up (vLLM splits them evenly, the remainder on the first stages), their
  weights and their KV cache; the first stage holds the embedding, the last the LM head,
  so the heaviest stage holds one vocabulary x hidden matrix (both on one stage only when
  there is one stage). The figure is that heaviest stage's, per GPU.

Not counted: activations of a step and CUDA graphs, which vLLM's profiling finds at
start; they are why the default `gpu_memory_utilization` stays at 0.90 rather than 1.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3
_GROUP = 128
"""AWQ/GPTQ quantization group: one 16-bit scale and one 4-bit zero point per 128 weights."""


@dataclass(frozen=True)
class ModelShape:
    hidden_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool = False
    parameters: int | None = None
    """Total parameters when the dense count does not apply (mixture of experts)."""
    weight_bits: int = 16

    def layer_linear(self) -> int:
        """Parameters of one decoder layer's linear projections."""
        h, hd = self.hidden_size, self.head_dim
        attention = 2 * h * self.heads * hd + 2 * h * self.kv_heads * hd
        return attention + 3 * h * self.intermediate_size

    def embeddings(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)

    def dense_parameters(self) -> int:
        norms = self.layers * 2 * self.hidden_size + self.hidden_size
        return self.layers * self.layer_linear() + self.embeddings() + norms

    def total_parameters(self) -> int:
        return self.parameters or self.dense_parameters()

    def weight_bytes(self) -> float:
        """Bytes of the weights as vLLM loads them."""
        if self.weight_bits == 16:
            return 2.0 * self.total_parameters()
        linear = self.total_parameters() - self.embeddings()
        bits = self.weight_bits + (16 + 4) / _GROUP if self.weight_bits == 4 else 8
        return linear * bits / 8 + 2.0 * self.embeddings()

    def stage_layers(self, pipeline_parallel: int) -> int:
        """Decoder layers of the heaviest pipeline stage."""
        return -(-self.layers // pipeline_parallel)

    def stage_weight_bytes(self, pipeline_parallel: int) -> float:
        """Bytes of the heaviest pipeline stage's weights (all of them for one stage)."""
        if pipeline_parallel == 1:
            return self.weight_bytes()
        embedding = self.vocab_size * self.hidden_size
        linear = self.total_parameters() - self.embeddings()
        share = self.stage_layers(pipeline_parallel) / self.layers
        if self.weight_bits == 16:
            bits = 16.0
        else:
            bits = self.weight_bits + (16 + 4) / _GROUP if self.weight_bits == 4 else 8
        return linear * share * bits / 8 + 2.0 * embedding

    def kv_heads_per_gpu(self, tensor_parallel: int) -> int:
        return max(1, self.kv_heads // tensor_parallel)


@dataclass(frozen=True)
class MemoryNeed:
    """Per GPU: bytes that do not grow with the batch, and KV cache bytes per token."""

    weights: float
    lora: float
    draft: float
    kv_per_token: float

    @property
    def fixed(self) -> float:
        return self.weights + self.lora + self.draft

    def describe(self) -> str:
        """`weights 35.2` (+ `LoRA 0.4`, `draft head 0.9`), in GiB."""
        parts = [f"weights {self.weights / GIB:.1f}"]
        if self.lora:
            parts.append(f"LoRA {self.lora / GIB:.1f}")
        if self.draft:
            parts.append(f"draft head {self.draft / GIB:.1f}")
        return " + ".join(parts)


def lora_bytes(shape: ModelShape, slots: int, rank: int) -> float:
    """vLLM's LoRA buffers: per slot and layer, A (in x r) and B (r x out) of each projection."""
    h, hd, i = shape.hidden_size, shape.head_dim, shape.intermediate_size
    qkv_out = (shape.heads + 2 * shape.kv_heads) * hd
    ins_outs = (h + qkv_out) + (shape.heads * hd + h) + (h + 2 * i) + (i + h)
    return 2.0 * slots * shape.layers * rank * ins_outs


def memory_need(
    shape: ModelShape,
    *,
    tensor_parallel: int,
    pipeline_parallel: int = 1,
    kv_bytes: int = 2,
    lora_slots: int = 0,
    lora_rank: int = 0,
    draft_head: bool = False,
) -> MemoryNeed:
    """Per GPU of the heaviest pipeline stage (`pipeline_parallel` 1: the whole model over
    `tensor_parallel` GPUs). The draft head runs on the last stage."""
    tp, pp = tensor_parallel, pipeline_parallel
    kv_layer_token = 2 * shape.kv_heads_per_gpu(tp) * shape.head_dim * kv_bytes
    draft = 0.0
    if draft_head:
        h = shape.hidden_size
        draft = 2.0 * (shape.layer_linear() + 2 * h * h) / tp
    layers = shape.stage_layers(pp)
    return MemoryNeed(
        weights=shape.stage_weight_bytes(pp) / tp,
        lora=lora_bytes(shape, lora_slots, lora_rank)
        * (layers / shape.layers if pp > 1 else 1)
        / tp,
        draft=draft,
        kv_per_token=float(kv_layer_token * (layers + (1 if draft_head else 0))),
    )
