"""Quality filters of the Gopher and C4 kind, as plain functions of a text.

Each filter returns the reason it drops a document (a short name that the manifest
counts) or None. `c4_filter` also rewrites the text (C4 removes lines, not only whole
documents), so it returns the kept text too. The rules follow datatrove 0.10's
`GopherQualityFilter`, `C4QualityFilter` and `GopherRepetitionFilter` (see
`config.py` for the thresholds and their sources); the differences are on purpose:
words are whitespace tokens (datatrove uses a language's word tokenizer, which needs
nltk or spaCy data), and C4 sentences are counted by terminal punctuation (datatrove
uses nltk's punkt, a download).
"""

from __future__ import annotations

import re
from collections import Counter

from contracts.text_pipeline import C4Config, GopherQualityConfig, RepetitionConfig

# Unicode dashes, quotes and bullets as escapes: they look like their ASCII cousins.
_PUNCT = frozenset(
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\u2026\u2014\u2013\u201c\u201d\u2018\u2019\u00ab\u00bb\u201e\u2022\u00b7"
)
_BULLETS = ("•", "-", "*", "‣", "◦", "▪")
_ELLIPSES = ("...", "…")
_TERMINAL = (".", "?", "!", '"', "'", "\u201d", "\u2019")
_CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]", re.IGNORECASE)
_SENTENCE_END = re.compile("[.!?]+(?=[\"'\u201d\u2019)\\]]*(?:\\s|$))")
_POLICY = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
_WORD = re.compile("\\w+(?:['\u2019]\\w+)*")
_PARAGRAPH = re.compile(r"\n{2,}")
_LINES = re.compile(r"\n+")


def gopher_quality(text: str, cfg: GopherQualityConfig) -> str | None:
    words = text.split()
    if not words:
        return "no_words"
    content = [w for w in words if any(c not in _PUNCT for c in w)]
    if len(content) < cfg.min_words:
        return "too_few_words"
    if len(content) > cfg.max_words:
        return "too_many_words"
    mean = sum(len(w) for w in content) / len(content)
    if mean < cfg.min_mean_word_length:
        return "mean_word_length_low"
    if mean > cfg.max_mean_word_length:
        return "mean_word_length_high"
    if text.count("#") / len(words) > cfg.max_symbol_word_ratio:
        return "hash_ratio"
    if sum(text.count(e) for e in _ELLIPSES) / len(words) > cfg.max_symbol_word_ratio:
        return "ellipsis_ratio"
    lines = [line for line in text.splitlines() if line.strip()]
    if sum(line.lstrip().startswith(_BULLETS) for line in lines) / len(lines) > (
        cfg.max_bullet_lines_fraction
    ):
        return "bullet_lines"
    if sum(line.rstrip().endswith(_ELLIPSES) for line in lines) / len(lines) > (
        cfg.max_ellipsis_lines_fraction
    ):
        return "ellipsis_lines"
    alpha = sum(any(c.isalpha() for c in w) for w in words)
    if alpha / len(words) < cfg.min_alpha_words_fraction:
        return "alpha_words"
    lowered = {w.lower().strip("".join(_PUNCT)) for w in words}
    if len(lowered.intersection(cfg.stop_words)) < cfg.min_stop_words:
        return "stop_words"
    return None


def count_sentences(line: str) -> int:
    return len(_SENTENCE_END.findall(line))


def c4_filter(text: str, cfg: C4Config) -> tuple[str, str | None]:
    """(kept text, reason the document is dropped or None)."""
    kept: list[str] = []
    sentences = 0
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            if kept and kept[-1]:
                kept.append("")
            continue
        words = line.split()
        if any(len(w) > cfg.max_word_length for w in words):
            continue
        if cfg.remove_citations:
            line = _CITATION.sub("", line).strip()
        if cfg.terminal_punctuation and (not line.endswith(_TERMINAL) or line.endswith(_ELLIPSES)):
            continue
        if len(words) < cfg.min_words_per_line:
            continue
        lowered = line.lower()
        if cfg.drop_lorem_ipsum and "lorem ipsum" in lowered:
            return "", "lorem_ipsum"
        if cfg.drop_javascript_lines and "javascript" in lowered:
            continue
        if cfg.drop_curly_bracket and "{" in line:
            return "", "curly_bracket"
        if cfg.drop_policy_lines and any(p in lowered for p in _POLICY):
            continue
        sentences += count_sentences(line)
        kept.append(line)
    out = "\n".join(kept).strip()
    if not out:
        return "", "no_lines"
    if sentences < cfg.min_sentences:
        return "", "too_few_sentences"
    return out, None


def _duplicates(items: list[str]) -> tuple[int, int]:
    """(repeated elements, characters in them): every occurrence after the first."""
    seen: set[str] = set()
    count = chars = 0
    for item in items:
        if item in seen:
            count += 1
            chars += len(item)
        else:
            seen.add(item)
    return count, chars


def _top_ngram_chars(words: list[str], n: int) -> int:
    grams = Counter(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))
    if not grams:
        return 0
    gram, count = grams.most_common(1)[0]
    return len(gram) * count


def _repeated_ngram_chars(words: list[str], n: int) -> int:
    """Characters covered by n-grams seen before, not counting an overlap twice (Gopher's
    rule: after a repeat, skip past it)."""
    seen: set[tuple[str, ...]] = set()
    chars = i = 0
    while i <= len(words) - n:
        gram = tuple(words[i : i + n])
        if gram in seen:
            chars += sum(len(w) for w in gram)
            i += n
        else:
            seen.add(gram)
            i += 1
    return chars


def gopher_repetition(text: str, cfg: RepetitionConfig) -> str | None:
    if not text:
        return "empty"
    paragraphs = _PARAGRAPH.split(text.strip())
    count, chars = _duplicates(paragraphs)
    if count / len(paragraphs) > cfg.max_duplicate_paragraph_fraction:
        return "duplicate_paragraphs"
    if chars / len(text) > cfg.max_duplicate_paragraph_char_fraction:
        return "duplicate_paragraph_chars"
    lines = _LINES.split(text)
    count, chars = _duplicates(lines)
    if count / len(lines) > cfg.max_duplicate_line_fraction:
        return "duplicate_lines"
    if chars / len(text) > cfg.max_duplicate_line_char_fraction:
        return "duplicate_line_chars"
    words = _WORD.findall(text.lower())
    for n, limit in sorted(cfg.top_ngram_char_fraction.items()):
        if _top_ngram_chars(words, n) / len(text) > limit:
            return f"top_{n}_gram"
    for n, limit in sorted(cfg.duplicate_ngram_char_fraction.items()):
        if _repeated_ngram_chars(words, n) / len(text) > limit:
            return f"duplicate_{n}_grams"
    return None
