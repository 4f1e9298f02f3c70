"""The typed job config of the trainers: what a job asks for (model, data, ZeRO stage,
offload, precision, batch shape, alignment objectives), read by `llmp job` before it
submits and by the trainer when it starts. The DeepSpeed config generated from it is
`workloads.training.ds_config`'s (it needs DeepSpeed).
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


LR_DEFAULTS: dict[tuple[str, bool], float] = {
    # (task, LoRA): the peak learning rate of a published recipe for 7-8B models.
    ("pretrain", False): 3e-4,  # Llama 2 (arXiv 2307.09288, 2.2): 3e-4 at 7B and 13B
    ("pretrain", True): 2e-4,  # as LoRA SFT: adapters take the LoRA rate
    ("sft", False): 2e-5,  # Llama 2-Chat SFT (arXiv 2307.09288, 3.1) and Alpaca: 2e-5
    ("sft", True): 2e-4,  # QLoRA (arXiv 2305.14314, appendix): 2e-4 at 7B and 13B
    ("dpo", False): 5e-7,  # Zephyr (arXiv 2310.16944): DPO at 5e-7
    ("dpo", True): 5e-6,  # alignment-handbook's Zephyr QLoRA DPO recipe: 5e-6
    ("grpo", False): 1e-6,  # DeepSeekMath (arXiv 2402.03300, 4.2): policy at 1e-6
    ("grpo", True): 1e-5,  # no one recipe: 10x the full-weight rate, as for DPO
}
"""The learning rate a job gets when its config sets none, by task and by whether it trains
LoRA adapters (which take a rate about 10x that of all weights). The figures are the
papers' and recipes' as published, not re-measured here; a job that sets `lr` keeps its own."""

LR_RANGE = (1e-9, 1e-2)
"""The learning rates a job may set: no published recipe of these tasks trains above 1e-2
(small models from scratch peak near 6e-4-3e-3), and below 1e-9 bf16 weights do not move.
A value outside is a typo or a percentage (5 meant as 5e-5), and refused."""


def default_lr(task: str, lora: bool) -> float:
    return LR_DEFAULTS[(task, lora)]


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
    bf16: bool = Field(
        True,
        description="bfloat16 compute: DeepSpeed's bf16 mode (bf16 weights and activations, "
        "fp32 master weights) in the ZeRO trainer, autocast in the 3-D trainer",
    )
    compile: bool = Field(
        False,
        description="torch.compile the model (the inductor backend; on GPUs its Triton "
        "kernels, on the CPU C++): the ZeRO trainer through DeepSpeed's engine.compile, the "
        "3-D trainer each decoder layer after tensor parallelism, before FSDP",
    )
    optimizer: Literal["deepspeed", "torch"] = Field(
        "deepspeed",
        description="deepspeed: DeepSpeed's (fused/CPU) Adam, built on first use; "
        "torch: torch.optim.AdamW, needs no compiled ops (CPU tests)",
    )
    lr: float = Field(
        3e-4,
        gt=0,
        description="peak learning rate; unset: by task and method (LR_DEFAULTS: full SFT "
        "2e-5, LoRA 2e-4, DPO 5e-7, GRPO 1e-6, pretrain 3e-4); within 1e-9..1e-2",
    )
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, ge=0)
    warmup_steps: int = Field(0, ge=0)
    peak_tflops_per_device: float | None = Field(
        None, gt=0, description="for MFU; default from instance_type"
    )
    instance_type: str | None = Field(None, description="catalog instance type, e.g. p5.48xlarge")
    step_sleep_s: float = Field(0.0, ge=0, description="test hook: widen the window between steps")
    tensorboard_dir: str | None = Field(
        None,
        description="rank 0 writes TensorBoard event files here (the figures of the metrics: "
        "loss, tokens/s, TFLOPS per GPU, MFU, gradient norm, step phases), e.g. "
        "/fsx/checkpoints/<job>/tensorboard; unset: none",
    )
    extra_ds: dict[str, Any] = Field(
        default_factory=dict, description="deep-merged into the DeepSpeed config"
    )

    @field_validator("lr")
    @classmethod
    def _sane_lr(cls, v: float) -> float:
        low, high = LR_RANGE
        if not low <= v <= high:
            raise ValueError(
                f"{v:g} is not a learning rate of these tasks ({low:g}..{high:g}); e.g. "
                "full SFT 2e-5, LoRA 2e-4, DPO 5e-7; unset: the task's"
            )
        return v

    @model_validator(mode="after")
    def _lr_by_task(self) -> JobConfig:
        if "lr" not in self.model_fields_set:
            self.lr = default_lr(self.task, self.model.lora is not None)
        return self

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
