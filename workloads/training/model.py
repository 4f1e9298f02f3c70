"""Hugging Face causal LMs for the trainer: built from a config, or loaded from base weights.

A job either pretrains from scratch (`ModelConfig`'s dimensions and `architecture`,
a transformers `model_type`: Llama or Qwen families) or starts from a base
checkpoint: `pretrained` is a local directory (FSx, or a copy from S3) read with
`local_files_only=True`, so nothing is fetched from a hub at run time. Either way
the module is the transformers class vLLM serves (`LlamaForCausalLM`, ...), so
what the trainer saves exports as the same architecture without a conversion.

LoRA (peft) wraps the model when `lora` is set: the base is frozen, only the
adapters train, and checkpoints hold the adapters alone (the base is the
`pretrained` directory, which the job reads again on resume).

The FLOP count for MFU comes from the config on the meta device: no memory, and
the same count whatever the architecture.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import torch

from contracts.training import ARCHITECTURES, ModelConfig

__all__ = [
    "ModelConfig",
    "base_model",
    "build",
    "flops_per_token",
    "hf_config",
    "load_tokenizer",
    "param_count",
]


@contextlib.contextmanager
def quiet() -> Any:
    """transformers draws progress bars (stderr) and may print (stdout): stdout is the
    trainer's JSON event log and the promotion's result, stderr their one-line errors."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    chatter = io.StringIO()
    with contextlib.redirect_stdout(chatter):
        yield


def hf_config(cfg: ModelConfig) -> Any:
    """The transformers config: the base model's own, or one made from the dimensions."""
    from transformers import AutoConfig

    if cfg.pretrained is not None:
        config = AutoConfig.from_pretrained(cfg.pretrained, local_files_only=True)
        architectures = getattr(config, "architectures", None) or []
        if not any(a.endswith("ForCausalLM") for a in architectures):
            raise ValueError(
                f"{cfg.pretrained}: config.json declares {architectures or 'no architectures'}, "
                "not a causal LM"
            )
        return config
    return AutoConfig.for_model(
        cfg.architecture,
        **cfg.dimensions(),
        max_position_embeddings=cfg.seq_len + 1,
        architectures=[ARCHITECTURES[cfg.architecture]],
    )


def build(cfg: ModelConfig, *, lora: bool = True) -> Any:
    """The model to train: base weights or a fresh init (seeded by the caller), LoRA-wrapped
    when configured (unless `lora=False`: the frozen reference of DPO and GRPO)."""
    from transformers import AutoModelForCausalLM

    with quiet():
        if cfg.pretrained is not None:
            model = AutoModelForCausalLM.from_pretrained(
                cfg.pretrained, local_files_only=True, dtype=torch.float32
            )
        else:
            model = AutoModelForCausalLM.from_config(hf_config(cfg))
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    if lora and cfg.lora is not None:
        import peft

        model = peft.get_peft_model(  # type: ignore[assignment, unused-ignore]
            model,
            peft.LoraConfig(
                r=cfg.lora.r,
                lora_alpha=cfg.lora.alpha,
                lora_dropout=cfg.lora.dropout,
                target_modules=list(cfg.lora.target_modules),
                task_type="CAUSAL_LM",
            ),
        )
    return model


def base_model(model: Any) -> Any:
    """The transformers model under a peft wrapper (the model itself without one)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def load_tokenizer(cfg: ModelConfig) -> Any:
    """The job's tokenizer, from a local directory only."""
    from transformers import AutoTokenizer

    path = cfg.tokenizer_path
    if path is None:
        raise ValueError("no tokenizer: set model.pretrained or model.tokenizer")
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def param_count(config: Any) -> int:
    """Parameters that cost matmul FLOPs: all but the input embedding (a lookup), with the
    output head counted once more when it shares the embedding's weights."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight.numel()
    tied = bool(getattr(config, "tie_word_embeddings", False))
    return int(total - embedding + (embedding if tied else 0))


def flops_per_token(config: Any, seq_len: int) -> float:
    """Training FLOPs per token: 6N for the dense matmuls (forward + backward) plus the
    attention score/value term 12 * L * d * T (PaLM appendix B), which is what MFU is
    conventionally quoted against."""
    layers, width = config.num_hidden_layers, config.hidden_size
    return 6.0 * param_count(config) + 12.0 * layers * width * seq_len
