"""PyTorch + DeepSpeed pre-training entry point that the training job container runs.

`python -m workloads.training.train --config job.json` (one process per rank,
started by torchrun or by the operator). Modules:

- `model`: a small GPT-style decoder and its FLOP count (for MFU).
- `data`: tokenized shards on FSx, sampled deterministically by global sample
  index so a resume (even at another world size) continues the same stream.
- `ds_config`: the typed job config and the DeepSpeed config generated from it,
  validated by DeepSpeed's own config classes.
- `checkpointing`: atomic, manifest-checked checkpoints, retention, resume
  selection, asynchronous writes and universal-checkpoint conversion.
- `train`: the loop, logging, SIGTERM handling.
"""
