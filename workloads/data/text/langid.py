"""Language identification with py3langid, whose model ships inside its wheel: nothing
downloads. The model takes about a second to load, so each worker process loads it once
(`identifier()` is cached) and every document after that reuses it."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from contracts.text_pipeline import LanguageConfig


@lru_cache(maxsize=1)
def identifier() -> Any:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def identify(text: str, sample_chars: int = 10_000) -> tuple[str, float]:
    """(ISO 639-1 code, normalized probability) of the text's first `sample_chars`."""
    lang, prob = identifier().classify(text[:sample_chars])
    return str(lang), float(prob)


def language_filter(text: str, cfg: LanguageConfig) -> str | None:
    """The reason a document is dropped (`lang_de`, `low_confidence`) or None."""
    lang, prob = identify(text, cfg.sample_chars)
    if lang not in cfg.allowed:
        return f"lang_{lang}"
    if prob < cfg.min_confidence:
        return "low_confidence"
    return None
