"""The tokenizer: HF `tokenizers` byte-level BPE, trained on a deterministic sample or
loaded from a tokenizer.json.

Byte-level: every UTF-8 byte is in the initial alphabet, so any text encodes and decodes
back exactly (no unknown token). Its identity is the sha256 of its canonical JSON (keys
sorted, no whitespace): the manifest records it, and the canonical JSON is what is
written next to the shards, so the file's own sha256 is the recorded one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from functools import lru_cache

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from contracts.text_pipeline import TrainTokenizerConfig

TOKENIZER_FILE = "tokenizer.json"


class TokenizerError(ValueError):
    """A tokenizer that cannot be loaded or lacks the end-of-document token."""


def canonical_json(tokenizer: Tokenizer) -> str:
    return json.dumps(json.loads(tokenizer.to_str()), sort_keys=True, separators=(",", ":"))


def tokenizer_sha256(tokenizer: Tokenizer) -> str:
    return hashlib.sha256(canonical_json(tokenizer).encode()).hexdigest()


def train_tokenizer(texts: Iterable[str], cfg: TrainTokenizerConfig, eos_token: str) -> Tokenizer:
    """A byte-level BPE trained on `texts` (in the order given: pass a sorted sample)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        special_tokens=[eos_token],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def load_tokenizer(data: str, eos_token: str, where: str) -> Tokenizer:
    """A tokenizer from tokenizer.json's text; `where` names it in errors."""
    try:
        tokenizer = Tokenizer.from_str(data)
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TokenizerError(f"{where}: not a tokenizer.json ({first})") from None
    if tokenizer.token_to_id(eos_token) is None:
        raise TokenizerError(f"{where}: has no token {eos_token!r} (tokenizer.eos_token)")
    return tokenizer


@lru_cache(maxsize=2)
def cached_tokenizer(data: str) -> Tokenizer:
    """One tokenizer per worker process and tokenizer: parsing a big vocabulary per batch
    would cost more than encoding it."""
    return Tokenizer.from_str(data)
