"""The typed job config and the DeepSpeed config generated from it.

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
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelConfig(_Strict):
    """The decoder's shape (workloads.training.model builds it); here, so the job config
    parses without torch (the operator CLI checks job files with it)."""

    vocab_size: int = Field(256, ge=2)
    seq_len: int = Field(32, ge=2)
    n_layer: int = Field(2, ge=1)
    n_head: int = Field(2, ge=1)
    d_model: int = Field(32, ge=2)

    @model_validator(mode="after")
    def _heads_divide_width(self) -> ModelConfig:
        if self.d_model % self.n_head:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_head {self.n_head}")
        return self


class DataConfig(_Strict):
    path: str = Field(description="directory of token shards, e.g. /fsx/datasets/<name>/tokens")
    bin_dtype: Literal["uint16", "uint32"] = "uint16"
    seed: int = 0


class CheckpointConfig(_Strict):
    dir: str = Field(description="checkpoint root, e.g. /fsx/checkpoints/<job>")
    interval_steps: int = Field(100, ge=1)
    keep_last: int = Field(3, ge=1)
    async_save: bool = True
    save_on_sigterm: bool = True


class JobConfig(_Strict):
    model: ModelConfig = ModelConfig()
    data: DataConfig
    checkpoint: CheckpointConfig

    max_steps: int = Field(100, ge=0)
    micro_batch_size: int = Field(4, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    zero_stage: Literal[1, 2, 3] = 3
    offload_optimizer: bool = False
    pin_memory: bool = True
    bf16: bool = True
    optimizer: Literal["deepspeed", "torch"] = Field(
        "deepspeed",
        description="deepspeed: DeepSpeed's (fused/CPU) Adam, built on first use; "
        "torch: torch.optim.AdamW, needs no compiled ops (CPU tests)",
    )
    lr: float = Field(3e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, ge=0)
    warmup_steps: int = Field(0, ge=0)
    peak_tflops_per_device: float | None = Field(
        None, gt=0, description="for MFU; default from instance_type"
    )
    instance_type: str | None = Field(None, description="catalog instance type, e.g. p5.48xlarge")
    step_sleep_s: float = Field(0.0, ge=0, description="test hook: widen the window between steps")
    extra_ds: dict[str, Any] = Field(
        default_factory=dict, description="deep-merged into the DeepSpeed config"
    )

    def peak_tflops(self) -> float | None:
        """Peak dense BF16 TFLOPS of one accelerator: explicit, else from the platform catalog."""
        if self.peak_tflops_per_device is not None:
            return self.peak_tflops_per_device
        if self.instance_type is None:
            return None
        from spec.catalog import catalog

        acc = catalog().instance(self.instance_type).accelerator
        return None if acc is None else acc.peak_bf16_tflops


def load_job_config(path: str | Path) -> JobConfig:
    text = Path(path).read_text()
    raw = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    return JobConfig.model_validate(raw)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = (
            _merge(out[k], v)
            if isinstance(v, dict) and isinstance(out.get(k), dict)
            else copy.deepcopy(v)
        )
    return out


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
