"""The pure stages without Ray: config rules, cleaning, quality filters, language, PII."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from contracts.text_pipeline import (
    C4Config,
    CleaningConfig,
    GopherQualityConfig,
    LanguageConfig,
    NormalizationConfig,
    PiiConfig,
    RepetitionConfig,
    TextPipelineConfig,
)
from tests.workloads.data import corpus
from workloads.data.text.clean import clean_document
from workloads.data.text.langid import language_filter
from workloads.data.text.pii import redact
from workloads.data.text.quality import c4_filter, gopher_quality, gopher_repetition


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"dedup": {"near": {"num_perm": 100}}}, "bands * rows must equal num_perm"),
        ({"gopher_quality": {"min_words": 10, "max_words": 5}}, "min_words 10 > max_words 5"),
        ({"tokenizer": {"path": "t.json", "train": {}}}, "exactly one of path or train"),
        ({"pii": {"kinds": ["email", "fax"]}}, "pii.kinds"),
        ({"shards": {"part": 3}}, "Extra inputs are not permitted"),
        ({"repetition": {"top_ngram_char_fraction": {"2": 1.5}}}, "fractions in 0..1"),
    ],
)
def test_config_rejects_inconsistent_fields(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("*", r"\*")):
        TextPipelineConfig.model_validate(fields)


def test_config_defaults_are_the_published_ones_and_hash_stably() -> None:
    cfg = TextPipelineConfig()
    assert (cfg.gopher_quality.min_words, cfg.gopher_quality.max_words) == (50, 100_000)
    assert cfg.repetition.duplicate_ngram_char_fraction[10] == 0.10
    assert cfg.c4.min_sentences == 5 and cfg.dedup.near.threshold == 0.8
    assert cfg.sha256() == TextPipelineConfig.model_validate(cfg.model_dump()).sha256()
    assert cfg.sha256() != TextPipelineConfig(shards={"parts": 2}).sha256()


def test_cleaning_folds_compatibility_forms_and_drops_debris() -> None:
    text = (
        "\uff34\uff48\uff45  \ufb01rst\u200b line of real text here.\n12\n\n\n"
        "Page 3 of 9\nA second line of text."
    )
    out = clean_document(text, NormalizationConfig(), CleaningConfig(min_doc_chars=0))
    assert out == "The first line of real text here.\n\nA second line of text."
    assert clean_document("short", NormalizationConfig(), CleaningConfig()) == ""


def _prose(seed: int = 0, n: int = 18) -> str:
    return corpus.layout(corpus.prose_sentences(random.Random(seed), n))


def test_prose_passes_every_quality_filter() -> None:
    text = _prose()
    assert gopher_quality(text, GopherQualityConfig()) is None
    assert gopher_repetition(text, RepetitionConfig()) is None
    kept, why = c4_filter(text, C4Config())
    assert why is None and kept == text


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("the and " * 10, "too_few_words"),
        (" ".join(["a", "of", "to", "be"] * 30), "mean_word_length_low"),
        (
            " ".join(["extraordinarily", "the", "and", "incomprehensibilities"] * 20),
            "mean_word_length_high",
        ),
        (_prose() + " #tag" * 60, "hash_ratio"),
        ("\n".join(f"- the {w} and the item" for w in corpus.NOUN[:60]), "bullet_lines"),
        ("\n".join(f"the {w} and the item went on..." for w in corpus.NOUN[:60]), "ellipsis_ratio"),
        (" ".join(f"{i}123 4567{i} the harbor lantern" for i in range(40)), "alpha_words"),
        (" ".join(corpus.NOUN * 2), "stop_words"),
    ],
)
def test_gopher_quality_rules(text: str, reason: str) -> None:
    assert gopher_quality(text, GopherQualityConfig()) == reason


def test_gopher_ellipsis_lines_rule() -> None:
    lines = [
        f"The {w} and the {v} went on and on"
        for w, v in zip(corpus.NOUN, corpus.VERB, strict=False)
    ]
    text = "\n".join(line + ("…" if i % 2 else ".") for i, line in enumerate(lines))
    cfg = GopherQualityConfig(max_symbol_word_ratio=1.0)
    assert gopher_quality(text, cfg) == "ellipsis_lines"


def test_c4_drops_lines_and_documents() -> None:
    prose = _prose()
    kept, why = c4_filter(
        prose + "\nclick here\nEnable JavaScript to see this page now.", C4Config()
    )
    assert why is None and kept == prose
    assert c4_filter(prose + "\nlorem ipsum dolor sit amet.", C4Config())[1] == "lorem_ipsum"
    assert c4_filter(prose + "\nint main() { return 0; }.", C4Config())[1] == "curly_bracket"
    assert c4_filter("One short sentence here. And another one.", C4Config())[1] == (
        "too_few_sentences"
    )
    assert c4_filter("no terminal punctuation\nnone here either", C4Config())[1] == "no_lines"
    cited, _ = c4_filter(prose.replace(".", "[12].", 1), C4Config())
    assert cited == prose


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("\n".join(["The same line of text is repeated."] * 10 + [_prose()]), "duplicate_lines"),
        (
            "\n\n".join(["A paragraph that repeats itself."] * 6 + [_prose(1)]),
            "duplicate_paragraphs",
        ),
        (_prose(2) + " " + "the harbor lantern " * 200, "top_2_gram"),
        (_prose(3) + "\n" + " ".join(_prose(4).split()[:80]) * 3, "duplicate_5_grams"),
    ],
)
def test_gopher_repetition_rules(text: str, reason: str) -> None:
    assert gopher_repetition(text, RepetitionConfig()) == reason


def test_language_filter_keeps_english_and_names_the_others() -> None:
    rng = random.Random(0)
    cfg = LanguageConfig()
    assert language_filter(_prose(), cfg) is None
    for pool, code in ((corpus.GERMAN, "de"), (corpus.FRENCH, "fr"), (corpus.SPANISH, "es")):
        text = corpus.layout([rng.choice(pool) for _ in range(12)])
        assert language_filter(text, cfg) == f"lang_{code}"


def test_every_planted_pii_kind_is_redacted_and_counted() -> None:
    planted = corpus._pii(random.Random(3))
    cfg = PiiConfig()
    for kind, values in planted.items():
        for value in values:
            text = corpus._pii_sentence(kind, value)
            out, counts = redact(text, cfg)
            assert value not in out, (kind, value, out)
            assert cfg.replacements[kind] in out
            assert counts[kind] == 1 and sum(counts.values()) == 1, (kind, value, counts)
    # The name of a secret stays; only its value goes.
    out, _ = redact("aws_secret_access_key = " + "a" * 40 + ".", cfg)
    assert out == "aws_secret_access_key = <AWS_SECRET_KEY>."
    out, counts = redact("api_key=0123456789abcdefXYZ and password: hunter2", cfg)
    assert out == "api_key=<API_KEY> and password: hunter2" and counts["api_key"] == 1


@pytest.mark.parametrize("text", corpus.LOOKALIKES)
def test_version_numbers_times_and_ids_are_not_pii(text: str) -> None:
    out, counts = redact(text, PiiConfig())
    assert out == text and sum(counts.values()) == 0


def test_only_configured_kinds_are_redacted() -> None:
    out, counts = redact("mail a@b.example.com from 10.0.0.1", PiiConfig(kinds=("email",)))
    assert out == "mail <EMAIL> from 10.0.0.1" and counts == {"email": 1}
