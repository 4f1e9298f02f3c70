"""Held-out perplexity of a Hugging Face causal LM on the trainer's own token shards.

The lm-eval text task measures perplexity on prose through the model's tokenizer;
this measures it on the exact token stream the model was trained against (held-out
shards of `workloads.training.data.TokenShards`), which is the number the promotion
gate already uses for the trainer's native checkpoints, so the two are comparable.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported when used: `python -m workloads.evaluation` with a
    # wrong argument should say so at once, not after torch has loaded
    from workloads.training.data import TokenShards

# math.exp overflows above ~709.78; a mean CE that large is a broken model anyway.
_MAX_EXP_ARG = 709.0


def _vocab_size(model: Any) -> int | None:
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    return int(embeddings.num_embeddings) if embeddings is not None else None


def heldout_perplexity(
    model: Any, shards: TokenShards, max_windows: int, batch_size: int = 16
) -> float:
    """exp(mean next-token cross-entropy) over the first `max_windows` windows.

    Each window (`seq_len + 1` tokens) is passed as `input_ids` and `labels`; the
    model shifts the labels, so a window contributes `seq_len` predictions and its
    batch's mean loss is weighted by `size * seq_len` tokens (an unweighted mean of
    batch losses would over-count a short last batch). NaN when the mean is not
    finite, inf when it is too large to exponentiate. Token ids outside the model's
    vocabulary raise ValueError rather than an index error deep inside the embedding.
    """
    import torch

    if max_windows < 1:
        raise ValueError(f"max_windows {max_windows}: expected at least one window")
    if batch_size < 1:
        raise ValueError(f"batch_size {batch_size}: expected a positive integer")
    n = min(shards.n_windows, max_windows)
    vocab = _vocab_size(model)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.inference_mode():
            for first in range(0, n, batch_size):
                size = min(batch_size, n - first)
                windows = shards.batch(first, size)
                if vocab is not None and int(windows.max()) >= vocab:
                    raise ValueError(
                        f"held-out token id {int(windows.max())} (windows {first}.."
                        f"{first + size - 1}) is outside the model's vocabulary of {vocab}: "
                        "the shards were tokenized for another model"
                    )
                windows = windows.to(device)
                loss = model(input_ids=windows, labels=windows).loss
                tokens = size * shards.seq_len
                total += float(loss) * tokens
                count += tokens
    finally:
        model.train(was_training)
    mean = total / count
    if not math.isfinite(mean):
        return float("nan")
    return math.exp(mean) if mean < _MAX_EXP_ARG else float("inf")


def load_causal_lm(model_dir: str | Path, device: str = "cpu", dtype: str = "float32") -> Any:
    """The model in `model_dir` as transformers loads it, local files only, in eval mode."""
    import transformers

    # Typed as Any: transformers' decorator stubs type the classmethod's first argument
    # as a model instance, which mypy then rejects for a path.
    auto: Any = transformers.AutoModelForCausalLM
    model = auto.from_pretrained(str(model_dir), dtype=dtype, local_files_only=True)
    return model.to(device).eval()
