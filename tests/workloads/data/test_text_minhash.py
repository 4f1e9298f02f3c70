"""MinHash-LSH on in-memory lists (the API the benchmark uses) and the functions of its
three Ray shuffles (run here on pyarrow tables), the tokenizer, shards and input splits,
all without Ray."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from contracts.text_pipeline import NearDedupConfig, TrainTokenizerConfig
from tests.workloads.data import corpus
from workloads.data.text import minhash as minhash_mod
from workloads.data.text.minhash import (
    UnionFind,
    band_keys,
    candidate_pairs,
    exact_jaccard,
    jaccard,
    minhash,
    near_duplicates,
    shingle_hashes,
    signature,
)
from workloads.data.text.pipeline import _range_lines
from workloads.data.text.shards import load_manifests
from workloads.data.text.tokenizer import (
    TokenizerError,
    canonical_json,
    load_tokenizer,
    tokenizer_sha256,
    train_tokenizer,
)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> corpus.Planted:
    return corpus.build(tmp_path_factory.mktemp("corpus") / "in")


def test_planted_clusters_are_near_and_pairs_just_below(planted: corpus.Planted) -> None:
    near = [exact_jaccard(c[0], m) for c in planted.clusters for m in c[1:]]
    below = [exact_jaccard(a, b) for a, b in planted.below_pairs]
    assert min(near) >= 0.88
    assert min(below) >= 0.55 and max(below) <= 0.72


def test_near_duplicates_collapse_clusters_and_merge_nothing_else(
    planted: corpus.Planted,
) -> None:
    docs = [(planted.ids[t], t) for t in planted.unique]
    docs += [(planted.ids[t], t) for c in planted.clusters for t in c]
    docs += [(planted.ids[t], t) for pair in planted.below_pairs for t in pair]
    random.Random(0).shuffle(docs)  # input order must not matter
    kept = near_duplicates(docs, NearDedupConfig())
    for members in planted.clusters:
        ids = [planted.ids[t] for t in members]
        assert {kept[i] for i in ids} == {min(ids)}
    roots = set(kept.values())
    assert len(roots) == len(planted.unique) + len(planted.clusters) + 2 * len(planted.below_pairs)
    assert kept == near_duplicates(sorted(docs), NearDedupConfig())


def _edited_pair(seed: int) -> tuple[str, str]:
    rng = random.Random(seed)
    a = corpus.layout(corpus.prose_sentences(rng, 30))
    return a, corpus.edit_words(a, rng, rng.randint(4, 40))


@pytest.mark.parametrize(
    ("seed", "merged"),
    [
        (413, True),  # true Jaccard 0.820, signature estimate 0.795
        (535, False),  # true Jaccard 0.764, signature estimate 0.804
    ],
)
def test_candidates_are_verified_by_the_exact_jaccard(seed: int, merged: bool) -> None:
    """Pairs on either side of the threshold whose signature estimate lies on the other
    side: a check by the estimate would get both wrong."""
    cfg = NearDedupConfig()
    a, b = _edited_pair(seed)
    ha, hb = (shingle_hashes(t, cfg.shingle_words, cfg.seed) for t in (a, b))
    sa, sb = minhash(ha, cfg), minhash(hb, cfg)
    exact, estimate = jaccard(ha, hb), float(np.mean(sa == sb))
    assert set(band_keys(sa, cfg)) & set(band_keys(sb, cfg))  # a candidate pair
    assert (exact >= cfg.threshold) is merged and (estimate >= cfg.threshold) is not merged
    assert abs(exact - (0.82 if merged else 0.76)) < 0.01
    kept = near_duplicates([("x/1", a), ("x/2", b)], cfg)
    assert kept == ({"x/1": "x/1", "x/2": "x/1"} if merged else {"x/1": "x/1", "x/2": "x/2"})


def test_signature_is_stable_and_estimates_jaccard() -> None:
    cfg = NearDedupConfig()
    rng = random.Random(1)
    a = corpus.layout(corpus.prose_sentences(rng, 30))
    b = corpus.edit_words(a, rng, 6)
    sa, sb = signature(a, cfg), signature(b, cfg)
    assert sa is not None and sb is not None and sa.dtype == np.uint32
    assert np.array_equal(sa, signature(a, cfg))  # type: ignore[arg-type]
    assert abs(float(np.mean(sa == sb)) - exact_jaccard(a, b)) < 0.12
    assert signature("!!! ???", cfg) is None


def test_union_find_roots_at_the_smallest_id_and_pairs_stay_linear() -> None:
    uf = UnionFind()
    for a, b in [("d", "c"), ("z", "y"), ("c", "b"), ("y", "b")]:
        uf.union(a, b)
    assert uf.clusters() == {k: "b" for k in "bcdyz"}
    pairs = list(candidate_pairs([f"{i:03d}" for i in range(100)]))
    assert len(pairs) == 197 and ("000", "099") in pairs and ("098", "099") in pairs


def test_tokenizer_round_trips_any_text_and_hashes_canonically(tmp_path: Path) -> None:
    texts = [corpus.layout(corpus.prose_sentences(random.Random(i), 12)) for i in range(60)]
    cfg = TrainTokenizerConfig(vocab_size=600, sample_documents=60)
    tok = train_tokenizer(texts, cfg, "<|endoftext|>")
    again = train_tokenizer(texts, cfg, "<|endoftext|>")
    assert tokenizer_sha256(tok) == tokenizer_sha256(again)
    assert tok.token_to_id("<|endoftext|>") == 0 and tok.get_vocab_size() == 600
    for text in [
        "plain ASCII, with  two spaces\tand a tab\n",
        "Grüße aus Köln, naïve café, Ελληνικά, русский, 日本語のテキスト",
        "emoji 🎉👩‍👩‍👧 and a ZWJ, math ∑∫√, control \x07 and NUL \x00",
        "<|endoftext|> is just text here",
    ]:
        ids = tok.encode(text).ids
        assert tok.decode(ids, skip_special_tokens=False) == text
    loaded = load_tokenizer(canonical_json(tok), "<|endoftext|>", "t.json")
    assert tokenizer_sha256(loaded) == tokenizer_sha256(tok)
    with pytest.raises(TokenizerError, match="has no token '<eos>'"):
        load_tokenizer(canonical_json(tok), "<eos>", "t.json")
    with pytest.raises(TokenizerError, match=r"t.json: not a tokenizer.json"):
        load_tokenizer("{}", "<eos>", "t.json")


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def size(self) -> int:
        return len(self.data)

    def seek(self, pos: int) -> None:
        self.pos = pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += len(out)
        return out


@pytest.mark.parametrize("block", [1, 7, 64, 1000, 10**6])
def test_byte_ranges_own_every_line_exactly_once(block: int) -> None:
    rng = random.Random(block)
    lines = [json.dumps({"text": "x" * rng.randrange(0, 90)}).encode() + b"\n" for _ in range(50)]
    data = b"".join(lines) + b'{"text": "no newline at the end"}'
    got: list[tuple[int, bytes]] = []
    for start in range(0, len(data), block):
        got.extend(_range_lines(_Bytes(data), start, min(start + block, len(data))))
    expected, offset = [], 0
    for line in data.splitlines(keepends=True):
        expected.append((offset, line))
        offset += len(line)
    assert got == expected


def test_manifests_of_the_old_format_still_load(tmp_path: Path) -> None:
    v1 = {
        "format": "llmp-tokens/1",
        "index": 0,
        "count": 1,
        "source": "s3://b/raw/x/",
        "min_chars": 16,
        "tokenizer": {"name": "bytes-utf8", "vocab_size": 257, "eos_id": 256},
        "dtype": "uint16",
        "shards": [],
        "stats": {
            "input_files": 1,
            "documents_read": 0,
            "documents_empty": 0,
            "documents_other_partitions": 0,
            "duplicates_dropped": 0,
            "documents_kept": 0,
            "tokens": 0,
        },
    }
    (tmp_path / "manifest-00000-of-00001.json").write_text(json.dumps(v1))
    assert load_manifests(tmp_path)[0].format == "llmp-tokens/1"
    (tmp_path / "manifest-00000-of-00002.json").write_text(json.dumps({**v1, "count": 2}))
    with pytest.raises(ValueError, match="parts missing or written by different runs"):
        load_manifests(tmp_path)


def _shuffle(tables: list[pa.Table], fn: Callable[[pa.Table], pa.Table]) -> list[pa.Table]:
    """A group-by on `part` and a map over the groups, as Ray Data's, in this process."""
    rows = pa.concat_tables(tables)
    parts = np.unique(rows.column("part").to_numpy())
    return [fn(rows.filter(pc.equal(rows.column("part"), int(p)))) for p in parts]


@pytest.mark.parametrize("parts", [1, 3, 16])
def test_ray_shuffles_give_the_in_memory_clusters(planted: corpus.Planted, parts: int) -> None:
    """The three shuffles' partition functions (S1 buckets, S2 sides, S3 edges), whatever
    the number of coarse partitions, find exactly `near_duplicates`' clusters."""
    cfg = NearDedupConfig()
    docs = [(planted.ids[t], t) for t in planted.unique]
    docs += [(planted.ids[t], t) for c in planted.clusters for t in c]
    docs += [(planted.ids[t], t) for pair in planted.below_pairs for t in pair]
    random.Random(parts).shuffle(docs)
    batches = [docs[i : i + 50] for i in range(0, len(docs), 50)]
    columns = [
        {"doc_id": np.array([d for d, _ in b]), "text": np.array([t for _, t in b])}
        for b in batches
    ]
    bands = [minhash_mod._band_rows(c, cfg, parts) for c in columns]
    refs = _shuffle(bands, partial(minhash_mod._bucket_refs, parts=parts))
    texts = [minhash_mod._doc_rows(pa.table(c), parts) for c in columns]
    sides = _shuffle(texts + refs, partial(minhash_mod._doc_sides, cfg=cfg, parts=parts))
    edges = _shuffle(sides, partial(minhash_mod._verified_edges, threshold=cfg.threshold))
    uf = UnionFind()
    for row in pa.concat_tables(edges).to_pylist():
        uf.union(row["a"], row["b"])
    expected = {d: k for d, k in near_duplicates(docs, cfg).items() if d != k or d in uf.parent}
    assert uf.clusters() == expected
    assert len({k for k in expected.values()}) == len(planted.clusters)
