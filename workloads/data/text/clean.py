"""Normalization and cleaning: one spelling per text, debris lines gone.

Normalization runs first so that everything after it (PII patterns, filters, the exact
and near-duplicate hashes) sees one spelling of each text: NFKC folds full-width forms
and ligatures, so copies that differ only there hash alike.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

from contracts.text_pipeline import CleaningConfig, NormalizationConfig

_WS = re.compile(r"[^\S\n]+")
_DROP_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})


def normalize_line(line: str, cfg: NormalizationConfig) -> str:
    text = unicodedata.normalize(cfg.form, line)
    if cfg.collapse_whitespace:
        text = _WS.sub(" ", text)
    if cfg.drop_control:
        text = "".join(c for c in text if unicodedata.category(c) not in _DROP_CATEGORIES)
    return text.strip()


def _keep_line(line: str, min_chars: int) -> bool:
    return len(line) >= min_chars and any(c.isalpha() for c in line)


def clean_document(text: str, norm: NormalizationConfig, cleaning: CleaningConfig) -> str:
    """The document's kept lines, normalized, joined by newlines ("" when too short).

    Blank lines survive as paragraph breaks (one empty line), which the repetition
    filter's paragraph rules need."""
    out: list[str] = []
    for raw in text.splitlines():
        line = normalize_line(raw, norm)
        if not line:
            if out and out[-1]:
                out.append("")
        elif _keep_line(line, cleaning.min_line_chars):
            out.append(line)
    doc = "\n".join(out).strip()
    return doc if len(doc) >= cleaning.min_doc_chars else ""


def text_hash(text: str) -> str:
    """The exact-duplicate key: sha256 of the cleaned, redacted text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
