"""PyTorch + DeepSpeed training entry point that the training job container runs:
pretraining, SFT, DPO and GRPO of Hugging Face models.

`python -m workloads.training.train --config job.json` (one process per rank,
started by torchrun or by the operator). Modules:

- `model`: the transformers model (from a config or local base weights, LoRA by peft)
  and its FLOP count (for MFU).
- `records`: chat, preference and prompt records, tokenized with the chat template.
- `objectives`: the loss of each task (pretrain, sft, dpo, grpo); `rewards`: GRPO's.
- `data`: tokenized shards on FSx, sampled deterministically by global sample
  index so a resume (even at another world size) continues the same stream.
- `ds_config`: the typed job config and the DeepSpeed config generated from it,
  validated by DeepSpeed's own config classes.
- `checkpointing`: atomic, manifest-checked checkpoints, retention, resume
  selection, asynchronous writes and universal-checkpoint conversion.
- `train`: the loop, logging, SIGTERM handling.
"""
