"""The DeepSpeed config generated from the typed job config (`contracts.training`).

Jobs describe *what* they want (ZeRO stage, offload, precision, batch shape);
this module turns that into DeepSpeed's JSON and immediately constructs
DeepSpeed's own `DeepSpeedConfig` from it, so a bad value fails when the job
starts parsing its config, not after the model is built and the cluster is
paying for GPUs. DeepSpeed's pydantic sections (`zero_optimization`, ...)
forbid unknown keys; its top level does not, so `extra_ds` keys are checked
against the key names DeepSpeed declares in `deepspeed.runtime.constants`.
"""

from __future__ import annotations

import copy
from typing import Any

from contracts.training import JobConfig, _merge


def build_ds_config(job: JobConfig, load_universal: bool = False) -> dict[str, Any]:
    """DeepSpeed's JSON for `job`.

    `train_batch_size` is left out on purpose: DeepSpeed derives it from micro batch x
    accumulation x world size, so the same config is valid after a resume at another
    world size (the global batch changes with it; the sample stream does not).
    """
    zero: dict[str, Any] = {"stage": job.zero_stage}
    if job.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": job.pin_memory}
    if job.zero_stage == 3:
        # Never gather the full 16-bit model onto rank 0 on save: at 70B that is an OOM and a
        # stall on every checkpoint. Consolidated weights come from zero_to_fp32 offline.
        zero["stage3_gather_16bit_weights_on_model_save"] = False
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": job.micro_batch_size,
        "gradient_accumulation_steps": job.gradient_accumulation_steps,
        "gradient_clipping": job.grad_clip,
        "zero_optimization": zero,
        "bf16": {"enabled": job.bf16},
        "steps_per_print": 10**9,  # we log ourselves, as JSON
        "wall_clock_breakdown": False,
        "checkpoint": {"load_universal": load_universal},
    }
    if job.optimizer == "deepspeed":
        cfg["optimizer"] = {
            "type": "AdamW",
            "params": {"lr": job.lr, "weight_decay": job.weight_decay, "betas": [0.9, 0.95]},
        }
    elif job.offload_optimizer:
        # A torch optimizer on offloaded state is slow, correct; DeepSpeed refuses it unless told
        cfg["zero_force_ds_cpu_optimizer"] = False
    if job.warmup_steps:
        cfg["scheduler"] = {
            "type": "WarmupLR",
            "params": {
                "warmup_min_lr": 0.0,
                "warmup_max_lr": job.lr,
                "warmup_num_steps": job.warmup_steps,
            },
        }
    return _merge(cfg, job.extra_ds)


def _known_top_level_keys() -> set[str]:
    from deepspeed.runtime import constants

    keys = {v for k, v in vars(constants).items() if k.isupper() and isinstance(v, str)}
    # Sections whose names live in their own modules' constants.
    keys |= {
        "zero_optimization",
        "bf16",
        "fp16",
        "optimizer",
        "scheduler",
        "activation_checkpointing",
        "flops_profiler",
        "comms_logger",
        "tensorboard",
        "wandb",
        "csv_monitor",
        "aio",
        "compile",
        "data_efficiency",
        "compression_training",
        "autotuning",
        "elasticity",
        "nebula",
        "monitor_config",
    }
    return keys


def validate_ds_config(cfg: dict[str, Any]) -> Any:
    """Construct DeepSpeed's config object from `cfg`; raise ValueError on anything it rejects.

    Returns the `DeepSpeedConfig`, so callers can read derived values from it.
    """
    unknown = sorted(set(cfg) - _known_top_level_keys())
    if unknown:
        raise ValueError(f"unknown DeepSpeed config keys: {unknown}")
    from deepspeed.runtime.config import DeepSpeedConfig

    try:
        return DeepSpeedConfig(copy.deepcopy(cfg))
    except Exception as exc:  # pydantic.ValidationError, AssertionError, DeepSpeedConfigError...
        raise ValueError(f"invalid DeepSpeed config: {exc}") from exc
