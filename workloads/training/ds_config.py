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
from typing import Any, Literal, TypeVar, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
"""transformers model_type -> the class a config of it builds (and vLLM serves)."""

DIMENSIONS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "rope_theta",
    "tie_word_embeddings",
)
"""The shape of a model built from a config; a `pretrained` model brings its own."""
DEFAULT_DIMENSIONS: dict[str, Any] = {
    "vocab_size": 256,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": None,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LoraConfig(_Strict):
    """LoRA adapters (peft) on the attention and MLP projections; the base stays frozen."""

    r: int = Field(16, ge=1, description="adapter rank")
    alpha: int = Field(32, ge=1, description="scale numerator: updates are scaled by alpha/r")
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = Field(default_factory=lambda: list(LORA_TARGETS), min_length=1)


class ModelConfig(_Strict):
    """A Hugging Face causal LM: built from these dimensions (pretraining from scratch) or
    loaded from `pretrained`, a local directory of base weights (on FSx; nothing is
    downloaded). Here, torch-free, so the operator CLI checks job files with it."""

    architecture: Literal["llama", "qwen2", "qwen3"] = Field(
        "llama", description="transformers model_type of a model built from a config"
    )
    pretrained: str | None = Field(
        None, description="local directory of HF base weights (config.json, *.safetensors)"
    )
    tokenizer: str | None = Field(
        None, description="local tokenizer directory; default: `pretrained`"
    )
    seq_len: int = Field(32, ge=2, description="training window in tokens")
    # The shape of a model built from a config (defaults: a tiny model for tests); unset
    # with `pretrained`, whose config.json decides.
    vocab_size: int | None = Field(None, ge=2, description="default 256")
    hidden_size: int | None = Field(None, ge=2, description="default 32")
    intermediate_size: int | None = Field(None, ge=2, description="default 64")
    num_hidden_layers: int | None = Field(None, ge=1, description="default 2")
    num_attention_heads: int | None = Field(None, ge=1, description="default 2")
    num_key_value_heads: int | None = Field(None, ge=1, description="default: attention heads")
    rope_theta: float | None = Field(None, gt=0, description="default 10000")
    tie_word_embeddings: bool | None = Field(None, description="default false")
    gradient_checkpointing: bool = Field(False, description="recompute activations in backward")
    lora: LoraConfig | None = Field(None, description="train LoRA adapters instead of all weights")

    @model_validator(mode="after")
    def _shape(self) -> ModelConfig:
        if self.pretrained is not None:
            given = [d for d in DIMENSIONS if getattr(self, d) is not None]
            if given:
                raise ValueError(
                    f"sets {', '.join(given)} with pretrained: the base model's config.json "
                    "decides its shape"
                )
            return self
        dims = self.dimensions()
        heads, width, kv = (
            dims["num_attention_heads"],
            dims["hidden_size"],
            dims["num_key_value_heads"],
        )
        if width % heads:
            raise ValueError(f"hidden_size {width} is not divisible by num_attention_heads {heads}")
        if heads % kv:
            raise ValueError(f"num_attention_heads {heads} is not divisible by {kv} kv heads")
        return self

    def dimensions(self) -> dict[str, Any]:
        """The shape of a model built from this config, defaults filled in."""
        dims = {d: getattr(self, d) for d in DIMENSIONS}
        filled = {k: (DEFAULT_DIMENSIONS[k] if v is None else v) for k, v in dims.items()}
        if filled["num_key_value_heads"] is None:
            filled["num_key_value_heads"] = filled["num_attention_heads"]
        return filled

    @property
    def tokenizer_path(self) -> str | None:
        return self.tokenizer or self.pretrained


class DataConfig(_Strict):
    path: str = Field(
        description="pretrain: a directory of token shards (/fsx/datasets/<name>/tokens), "
        "or s3://bucket/prefix/ (each shard fetched on first use: a restart that does not "
        "wait for the file system's association); sft, dpo, grpo: a JSONL file or a "
        "directory of *.jsonl"
    )
    bin_dtype: Literal["uint16", "uint32"] = "uint16"
    seed: int = 0


class CheckpointConfig(_Strict):
    dir: str = Field(description="checkpoint root, e.g. /fsx/checkpoints/<job>")
    interval_steps: int = Field(100, ge=1)
    keep_last: int = Field(3, ge=1)
    async_save: bool = True
    save_on_sigterm: bool = True
    restore_from: str | None = Field(
        None,
        description="s3://bucket/prefix/<job>/: when `dir` holds no complete checkpoint as "
        "new as the newest complete one there, rank 0 pulls that one into `dir` first (a "
        "restart in a recovery region, before the file system's association exists)",
    )

    @field_validator("restore_from")
    @classmethod
    def _s3_uri(cls, v: str | None) -> str | None:
        if v is not None and not (v.startswith("s3://") and len(v) > len("s3://")):
            raise ValueError("must be an s3://bucket/prefix URI")
        return v


class DpoConfig(_Strict):
    """Direct preference optimization against the frozen base model (Rafailov et al. 2023)."""

    beta: float = Field(0.1, gt=0, description="strength of the KL anchor to the reference")


class RewardConfig(_Strict):
    """What scores a GRPO completion: a rule the trainer ships, or a reward model."""

    rule: Literal["answer_match", "format"] | None = Field(
        None,
        description="answer_match: 1 when the record's `answer` appears in the completion; "
        "format: 1 when the completion ends its turn within max_new_tokens",
    )
    model: str | None = Field(
        None, description="local directory of a sequence-classification reward model"
    )

    @model_validator(mode="after")
    def _one(self) -> RewardConfig:
        if (self.rule is None) == (self.model is None):
            raise ValueError("set exactly one of rule and model")
        return self


class GrpoConfig(_Strict):
    """Group relative policy optimization (Shao et al. 2024, DeepSeekMath): G completions per
    prompt, advantages normalized within the group, a KL penalty to the frozen base."""

    group_size: int = Field(8, ge=2, description="completions sampled per prompt")
    max_new_tokens: int = Field(64, ge=1)
    temperature: float = Field(1.0, gt=0)
    beta: float = Field(0.04, ge=0, description="KL penalty to the reference; 0: none")
    reward: RewardConfig


Task = Literal["pretrain", "sft", "dpo", "grpo"]
TASKS: tuple[str, ...] = get_args(Task)


class JobConfig(_Strict):
    task: Task = Field(
        "pretrain",
        description="pretrain: next-token loss on token shards; sft: chat records, loss on "
        "the assistant turns; dpo: preference pairs; grpo: prompts and a reward",
    )
    model: ModelConfig = ModelConfig()
    data: DataConfig
    checkpoint: CheckpointConfig
    dpo: DpoConfig = DpoConfig()
    grpo: GrpoConfig | None = None

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

    @model_validator(mode="after")
    def _task_needs(self) -> JobConfig:
        if self.task != "pretrain" and self.model.tokenizer_path is None:
            raise ValueError(f"task {self.task} needs model.pretrained or model.tokenizer")
        if self.task in ("dpo", "grpo") and self.model.pretrained is None:
            raise ValueError(
                f"task {self.task} needs model.pretrained: its weights are the frozen reference"
            )
        if self.task == "grpo" and self.grpo is None:
            raise ValueError("task grpo needs a grpo section (group_size, reward, ...)")
        return self

    def peak_tflops(self) -> float | None:
        """Peak dense BF16 TFLOPS of one accelerator: explicit, else from the platform catalog."""
        if self.peak_tflops_per_device is not None:
            return self.peak_tflops_per_device
        if self.instance_type is None:
            return None
        from spec.catalog import catalog

        acc = catalog().instance(self.instance_type).accelerator
        return None if acc is None else acc.peak_bf16_tflops


J = TypeVar("J", bound=BaseModel)


def load_job_config(path: str | Path, model: type[J] = JobConfig) -> J:  # type: ignore[assignment]
    """The job config at `path` (JSON by its suffix, else YAML), as `model`."""
    text = Path(path).read_text()
    raw = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    return model.model_validate(raw)


def read_job_config(path: str | Path, model: type[J]) -> tuple[J | None, str | None]:
    """`load_job_config`, or None and the one line that says why not (a trainer's entry
    point prints it and exits 2)."""
    from pydantic import ValidationError

    from spec.errors import validation_line

    try:
        return load_job_config(path, model), None
    except ValidationError as exc:
        return None, f"{path}: {validation_line(exc)}"
    except (OSError, ValueError) as exc:
        return None, f"{path}: {str(exc).splitlines()[0]}"


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
