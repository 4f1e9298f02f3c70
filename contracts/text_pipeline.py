"""`TextPipelineConfig`: every threshold of the text pipeline, validated once.

Where a threshold comes from a published filter, its field says which and what the
default is there. The references are the Gopher paper (Rae et al. 2021, "Scaling
Language Models", arXiv:2112.11446, appendix A.1.1 and table A1), the C4 paper
(Raffel et al. 2020, JMLR 21, section 2.2) and datatrove 0.10's implementations of
both (`GopherQualityFilter`, `GopherRepetitionFilter`, `C4QualityFilter`,
`LanguageFilter`, `MinhashConfig`), whose defaults are the ones used here unless a
field says otherwise. The code is ours (see `quality.py`); datatrove is only the
reference and the benchmark's peer.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

PiiKind = Literal[
    "email",
    "phone",
    "ipv4",
    "ipv6",
    "aws_access_key",
    "aws_secret_key",
    "private_key",
    "api_key",
]
PII_KINDS: tuple[PiiKind, ...] = (
    "email",
    "phone",
    "ipv4",
    "ipv6",
    "aws_access_key",
    "aws_secret_key",
    "private_key",
    "api_key",
)
GOPHER_STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NormalizationConfig(_Model):
    form: Literal["NFC", "NFKC", "NFD", "NFKD"] = Field(
        "NFKC",
        description="Unicode normal form. NFKC folds full-width, ligature and compatibility "
        "forms to one spelling, so copies that differ only there deduplicate.",
    )
    drop_control: bool = Field(
        True, description="Remove control, format, surrogate and private-use characters."
    )
    collapse_whitespace: bool = Field(
        True, description="Runs of whitespace inside a line become one space."
    )


class CleaningConfig(_Model):
    min_line_chars: int = Field(
        16,
        ge=0,
        description="Lines shorter than this (after normalization) or without a letter are "
        "dropped: navigation, page numbers, debris. The old data-prep job's value.",
    )
    min_doc_chars: int = Field(
        100, ge=0, description="Documents shorter than this after cleaning are dropped."
    )


class GopherQualityConfig(_Model):
    """Gopher's quality rules (arXiv:2112.11446, A.1.1; datatrove `GopherQualityFilter`)."""

    enabled: bool = Field(True, description="Apply the Gopher quality rules.")
    min_words: int = Field(50, ge=0, description="Gopher and datatrove: 50 words.")
    max_words: int = Field(100_000, ge=1, description="Gopher and datatrove: 100,000 words.")
    min_mean_word_length: float = Field(3, ge=0, description="Gopher and datatrove: 3 chars.")
    max_mean_word_length: float = Field(10, gt=0, description="Gopher and datatrove: 10 chars.")
    max_symbol_word_ratio: float = Field(
        0.1,
        ge=0,
        description="Hash signs, and separately ellipses, per word. Gopher/datatrove: 0.1.",
    )
    max_ellipsis_lines_fraction: float = Field(
        0.3, ge=0, le=1, description="Lines ending in an ellipsis. Gopher/datatrove: 0.3."
    )
    max_bullet_lines_fraction: float = Field(
        0.9, ge=0, le=1, description="Lines starting with a bullet. Gopher/datatrove: 0.9."
    )
    min_alpha_words_fraction: float = Field(
        0.8,
        ge=0,
        le=1,
        description="Words with at least one alphabetic character. Gopher/datatrove: 0.8.",
    )
    min_stop_words: int = Field(
        2, ge=0, description="Distinct stop words present. Gopher/datatrove: 2."
    )
    stop_words: tuple[str, ...] = Field(
        GOPHER_STOP_WORDS, description="Gopher's English stop words (datatrove's list)."
    )


class C4Config(_Model):
    """C4's rules (JMLR 21 (2020) 2.2; datatrove `C4QualityFilter`, line-level by default)."""

    enabled: bool = Field(True, description="Apply the C4 rules.")
    terminal_punctuation: bool = Field(
        True,
        description="Keep only lines ending in . ? ! \" ' (not an ellipsis). C4/datatrove: on.",
    )
    min_words_per_line: int = Field(
        3, ge=0, description="Shorter lines are dropped. C4/datatrove: 3 words."
    )
    max_word_length: int = Field(
        1000, ge=1, description="Lines with a longer word are dropped. datatrove: 1000 chars."
    )
    min_sentences: int = Field(
        5,
        ge=0,
        description="Documents with fewer sentences (after line filtering) are dropped. "
        "C4/datatrove: 5. Sentences are counted by terminal punctuation, not by nltk's punkt.",
    )
    remove_citations: bool = Field(
        True, description="Strip [1], [edit], [citation needed]. datatrove: on."
    )
    drop_lorem_ipsum: bool = Field(True, description="Drop documents with 'lorem ipsum'.")
    drop_javascript_lines: bool = Field(True, description="Drop lines mentioning javascript.")
    drop_curly_bracket: bool = Field(True, description="Drop documents containing '{'.")
    drop_policy_lines: bool = Field(
        True, description="Drop lines about cookies and terms of use (C4's code, datatrove)."
    )


class RepetitionConfig(_Model):
    """Gopher's repetition rules (arXiv:2112.11446, table A1; datatrove
    `GopherRepetitionFilter`, whose defaults are the table's)."""

    enabled: bool = Field(True, description="Apply the Gopher repetition rules.")
    max_duplicate_line_fraction: float = Field(0.3, ge=0, le=1, description="Table A1: 0.30.")
    max_duplicate_paragraph_fraction: float = Field(0.3, ge=0, le=1, description="Table A1: 0.30.")
    max_duplicate_line_char_fraction: float = Field(0.2, ge=0, le=1, description="Table A1: 0.20.")
    max_duplicate_paragraph_char_fraction: float = Field(
        0.2, ge=0, le=1, description="Table A1: 0.20."
    )
    top_ngram_char_fraction: dict[int, float] = Field(
        {2: 0.2, 3: 0.18, 4: 0.16},
        description="n -> max fraction of characters in the most frequent n-gram. "
        "Table A1: 2: 0.20, 3: 0.18, 4: 0.16.",
    )
    duplicate_ngram_char_fraction: dict[int, float] = Field(
        {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10},
        description="n -> max fraction of characters in repeated n-grams. "
        "Table A1: 5: 0.15 down to 10: 0.10.",
    )


class LanguageConfig(_Model):
    enabled: bool = Field(True, description="Identify the language (py3langid) and filter.")
    allowed: tuple[str, ...] = Field(("en",), min_length=1, description="ISO 639-1 codes to keep.")
    min_confidence: float = Field(
        0.65,
        ge=0,
        le=1,
        description="Normalized probability of the top language. datatrove LanguageFilter: "
        "0.65 (with fastText; py3langid's probabilities are on the same 0-1 scale).",
    )
    sample_chars: int = Field(
        10_000, ge=100, description="Classify on the first this many characters."
    )


class PiiConfig(_Model):
    kinds: tuple[PiiKind, ...] = Field(PII_KINDS, description="Kinds to redact.")
    replacements: dict[PiiKind, str] = Field(
        {kind: f"<{kind.upper()}>" for kind in PII_KINDS},
        description="The token each kind is replaced by.",
    )

    @model_validator(mode="after")
    def _every_kind_replaced(self) -> Self:
        missing = [k for k in self.kinds if k not in self.replacements]
        if missing:
            raise ValueError(f"pii.replacements has no token for {', '.join(missing)}")
        return self


class NearDedupConfig(_Model):
    """MinHash-LSH (datatrove `MinhashConfig` defaults: 5-word shingles, 14 bands x 8
    rows = 112 permutations). With 14 x 8 a pair at Jaccard 0.8 becomes a candidate with
    probability 0.92, at 0.9 with 0.9996; every candidate is then verified."""

    enabled: bool = Field(True, description="Drop near-duplicates.")
    shingle_words: int = Field(5, ge=1, description="Words per shingle. datatrove: 5.")
    num_perm: int = Field(112, ge=2, description="MinHash permutations. datatrove: 112.")
    bands: int = Field(14, ge=1, description="LSH bands. datatrove: 14.")
    rows: int = Field(8, ge=1, description="Signature rows per band. datatrove: 8.")
    threshold: float = Field(
        0.8,
        gt=0,
        le=1,
        description="A candidate pair merges when its exact shingle Jaccard is at least this.",
    )
    seed: int = Field(1, ge=0, description="Seed of the permutations and the shingle hash.")

    @model_validator(mode="after")
    def _bands_cover_signature(self) -> Self:
        if self.bands * self.rows != self.num_perm:
            raise ValueError(
                f"dedup.near: bands * rows must equal num_perm "
                f"({self.bands} * {self.rows} != {self.num_perm})"
            )
        return self


class DedupConfig(_Model):
    exact: bool = Field(True, description="Drop exact copies of the cleaned text.")
    near: NearDedupConfig = Field(
        default_factory=NearDedupConfig, description="MinHash-LSH near-deduplication."
    )


class TrainTokenizerConfig(_Model):
    vocab_size: int = Field(
        32_000, ge=300, le=1 << 20, description="Target vocabulary (bytes and eos included)."
    )
    sample_documents: int = Field(
        100_000,
        ge=1,
        description="Train on this many kept documents: those with the smallest "
        "seeded hash of their doc id, so the sample does not depend on block order.",
    )
    min_frequency: int = Field(2, ge=1, description="A merge needs this many occurrences.")
    seed: int = Field(0, ge=0, description="Seed of the sample's hash.")


class TokenizerConfig(_Model):
    path: str | None = Field(
        None,
        description="A tokenizer.json, or a directory holding one; relative paths are "
        "under --input. Exclusive with train.",
    )
    train: TrainTokenizerConfig | None = Field(
        None, description="Train a byte-level BPE on a sample of the kept documents."
    )
    eos_token: str = Field("<|endoftext|>", min_length=1, description="Ends every document.")

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.path is None) == (self.train is None):
            raise ValueError("tokenizer: set exactly one of path or train")
        return self


class ShardsConfig(_Model):
    shard_tokens: int = Field(
        1 << 24,
        ge=1,
        description="Tokens per shard: 16 Mi (32 MiB at uint16) reads sequentially on "
        "Lustre and memory-maps cheaply.",
    )
    parts: int = Field(
        16,
        ge=1,
        le=100_000,
        description="Output parts: documents go to part xxh64(doc_id) mod parts; one "
        "worker writes a part, so a part must fit in a worker's memory.",
    )


class TextPipelineConfig(_Model):
    normalization: NormalizationConfig = Field(
        default_factory=NormalizationConfig, description="Unicode normalization."
    )
    cleaning: CleaningConfig = Field(
        default_factory=CleaningConfig, description="Line and document cleaning."
    )
    gopher_quality: GopherQualityConfig = Field(
        default_factory=GopherQualityConfig, description="Gopher quality rules."
    )
    c4: C4Config = Field(default_factory=C4Config, description="C4 rules.")
    repetition: RepetitionConfig = Field(
        default_factory=RepetitionConfig, description="Gopher repetition rules."
    )
    language: LanguageConfig = Field(
        default_factory=LanguageConfig, description="Language identification."
    )
    pii: PiiConfig = Field(default_factory=PiiConfig, description="PII redaction.")
    dedup: DedupConfig = Field(default_factory=DedupConfig, description="Deduplication.")
    tokenizer: TokenizerConfig = Field(
        default_factory=lambda: TokenizerConfig(train=TrainTokenizerConfig()),
        description="Where the tokenizer comes from.",
    )
    shards: ShardsConfig = Field(default_factory=ShardsConfig, description="Output shards.")
    block_size_bytes: int = Field(
        64 << 20,
        ge=1 << 10,
        description="Uncompressed JSONL files are read in byte ranges of this size (one "
        "task each); compressed files and Parquet row groups are read whole.",
    )

    shuffle_partitions: int | None = Field(
        None,
        ge=1,
        description="Partitions of each shuffle (the group-bys of exact dedup, the three "
        "of near dedup, and parts). Default: twice the Ray cluster's CPUs "
        "(`minhash.default_partitions`). Near dedup makes one Python call per partition, "
        "so a partition holds 1/N of the band rows: raise it when they outgrow a worker.",
    )

    @model_validator(mode="after")
    def _ranges(self) -> Self:
        g = self.gopher_quality
        if g.min_words > g.max_words:
            raise ValueError(f"gopher_quality: min_words {g.min_words} > max_words {g.max_words}")
        if g.min_mean_word_length > g.max_mean_word_length:
            raise ValueError(
                "gopher_quality: min_mean_word_length > max_mean_word_length "
                f"({g.min_mean_word_length} > {g.max_mean_word_length})"
            )
        for name, table in (
            ("top_ngram_char_fraction", self.repetition.top_ngram_char_fraction),
            ("duplicate_ngram_char_fraction", self.repetition.duplicate_ngram_char_fraction),
        ):
            bad = [n for n, f in table.items() if n < 1 or not 0 <= f <= 1]
            if bad:
                raise ValueError(
                    f"repetition.{name}: n must be >= 1 and fractions in 0..1 (got {bad[0]})"
                )
        return self

    def sha256(self) -> str:
        """The config's identity in the manifest: a hash of its canonical JSON."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()
