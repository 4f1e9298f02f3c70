"""Tiny Hugging Face models and tokenizers made in the test: nothing is downloaded.

`tiny_tokenizer` is a character-level tokenizer (HF `tokenizers` WordLevel over
single characters) with a ChatML chat template whose assistant turns are marked
`{% generation %}`, so `apply_chat_template(return_assistant_tokens_mask=True)`
works. `tiny_base_model` writes a base checkpoint directory as a user would
bring one (config.json, model.safetensors, tokenizer files,
generation_config.json) for a Llama- or Qwen2-family model of a few layers.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
CHARS = string.ascii_letters + string.digits + " \n.,:;!?'\"()+-*/=#_"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' %}"
    "{% generation %}{{ m['content'] }}<|im_end|>{% endgeneration %}"
    "{% else %}{{ m['content'] }}<|im_end|>{% endif %}\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_tokenizer(out: Path | None = None) -> Any:
    """A PreTrainedTokenizerFast of len(SPECIAL) + len(CHARS) tokens; saved to `out` if given."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate([*SPECIAL, *CHARS])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHAT_TEMPLATE,
    )
    if out is not None:
        tok.save_pretrained(str(out))
    return tok


def tiny_config(architecture: str = "llama", **over: Any) -> Any:
    """A transformers config of a few layers: `llama` (LlamaConfig) or `qwen2`."""
    from transformers import LlamaConfig, Qwen2Config

    vocab = len(SPECIAL) + len(CHARS)
    dims: dict[str, Any] = dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    dims.update(over)
    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config}[architecture]
    return cls(**dims)


def tiny_base_model(out: Path, architecture: str = "llama", seed: int = 0, **over: Any) -> Path:
    """A base checkpoint directory (weights, config, tokenizer, generation config)."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(architecture, **over))
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model.save_pretrained(str(out), safe_serialization=True)
    tiny_tokenizer(out)
    return out
