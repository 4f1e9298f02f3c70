"""Tensor x pipeline x data parallel pretraining whose checkpoints load at any layout.

`python -m workloads.training.parallel --config job.json` (the job file's `kind:
pretrain-3d`, `parallel: {tp, pp}`) trains the same Hugging Face Llama-family model as
`workloads.training.train` (built by `workloads.training.model`, the class vLLM serves)
sharded over a 3-D device mesh (pp, dp, tp):

- **TP** (`sharding.tp_plan`): torch.distributed.tensor.parallel's `ColwiseParallel` on
  q/k/v and gate/up, `RowwiseParallel` on o and down; weights are DTensors, each rank
  computes whole heads (tp divides the attention and the key/value heads).
- **PP**: the decoder layers split into pp contiguous stages (`sharding.Stage`), run by
  torch.distributed.pipelining's `PipelineStage` and `Schedule1F1B` (or `ScheduleGPipe`).
- **DP**: FSDP2 (`fully_shard`) over the dp dimension, per decoder layer and per stage,
  composed with TP (2-D DTensors); with dp = 1 there is no FSDP.
- **Checkpoints** (`checkpoint`): torch.distributed.checkpoint with fully-qualified names
  (each stage saves only its layers, under the names they have in the whole model) and the
  optimizer flattened per parameter, so any layout loads any other's; sealed and published
  by the DP trainer's protocol (`checkpointing.publish`: tmp-step-N, MANIFEST.json,
  COMPLETE, step-N, latest) and chosen on resume by its completeness rule.

Why torch-native, not Megatron-Core or DeepSpeed's pipeline engine: Megatron-Core's
parallel layers and its distributed checkpoint need CUDA on most paths (`torch.cuda` at
initialization, fused kernels), so nothing of it runs in the CPU tests, and its models are
its own (GPTModel), not the transformers classes the platform exports and serves; the
wheel downloads, it would not be tested here. DeepSpeed's `PipelineModule` wants the model
rewritten as a flat list of layers and its universal checkpoints need a conversion
(`ds_to_universal`) before each change of layout. The torch-native stack (torchtitan's
approach) keeps the transformers modules as they are, runs on gloo on the CPU and on NCCL
on GPUs by the same code, and DCP reshards at load without a conversion step. Nothing new
to install: it is torch 2.13's own.

What the CPU test proves (tests/workloads/training/test_parallel.py, 4 ranks, gloo): a
checkpoint written at tp 2 x pp 2 x dp 1 loads at tp 1 x pp 2 x dp 2 and at tp 4 x pp 1
x dp 1 with every parameter and every Adam state, made whole, bit-identical to the saved
one, and the next steps' losses equal the uninterrupted run's (to 1e-5 relative: TP changes
the order of the sums). So the layout arithmetic, the FQNs, the TP plan on HF's modules,
the stage split, 1F1B, FSDP x TP and DCP's resharding are right.

Telemetry is the ZeRO trainer's (`workloads.training.telemetry`): the `llmp_*` gauges on
the pods' metrics port, step times for `llmp stragglers`, TensorBoard scalars; `compile`,
`bf16` and `model.gradient_checkpointing` are job options here too.

What only GPUs show, not tested here: NCCL (TP all-reduces on NVLink, FSDP and pipeline
traffic over EFA with aws-ofi-nccl), bf16 (autocast; the test runs fp32), throughput, MFU
and the pipeline bubble at scale, memory at real sizes, and the rendezvous of torchrun
across nodes. Known limits: a fresh start builds the whole model on every rank before
cutting it to the stage (host memory bounds the model size; meta-device initialization
would lift that), saves are synchronous (`checkpoint.async_save` is not read; DCP's
`async_save` is the next step), the gradient norm makes each sharded
parameter's norm whole one at a time (one small collective each), a model with tied
embeddings cannot be split into stages, and `llmp promote` reads DeepSpeed checkpoints, not
these (`torch.distributed.checkpoint.format_utils.dcp_to_torch_save` is the way to whole
weights).

This package's `config` imports no torch: `llmp job` checks job files with it.
"""
