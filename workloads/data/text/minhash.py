"""MinHash-LSH near-deduplication: the same signature and band code under two drivers.

API
---
- `near_duplicates(docs, cfg) -> dict[str, str]`: in memory. `docs` is an iterable of
  `(doc_id, text)`; the result maps every doc id to the kept doc id of its cluster (itself
  for a document with no near-duplicate). For tests and for the benchmark that compares
  this code with datatrove's on one corpus.
- `near_dedup_clusters(ds, cfg) -> dict[str, str]`: the same on a Ray Dataset with
  `doc_id` and `text` columns, for the documents in clusters of two or more only.
- `near_dedup(ds, cfg) -> ray.data.Dataset`: `ds` without the documents that are not the
  kept one of their cluster.

How
---
1. Signature (`signature`): the document's words (lower-cased `\\w+` runs) form
   `shingle_words`-word shingles; each shingle is hashed with xxh64 (seeded, stable
   across processes and machines, unlike Python's salted `hash()`) to 32 bits, and
   `num_perm` universal hashes `(a*h + b) mod (2**61 - 1)` of that set, vectorized in
   numpy, give one minimum each: a `num_perm` uint32 signature.
2. Bands (`band_keys`): the signature cut into `bands` runs of `rows`; each run, with
   its band index, hashes (xxh64) to one uint64 key. Two documents whose signatures agree
   on a whole band share that key: a pair at Jaccard s becomes a candidate with
   probability 1 - (1 - s**rows)**bands, the only source of missed near-duplicates.
3. Candidates: the documents sharing a key form a bucket; a bucket of several yields
   candidate pairs (a, b), a < b: each member with the bucket's smallest id and with its
   successor in id order (2k pairs, not k^2, for a bucket of k: a large bucket of
   boilerplate stays linear). A pair colliding in several bands is checked once.
4. Verification: a candidate pair merges only if the *exact* Jaccard of the two
   documents' shingle-hash sets (`jaccard`, sorted uint32 arrays) is at least
   `threshold`, as NeMo Curator's and text-dedup's false-positive checks do. A band
   collision alone never merges two documents (unrelated documents that share a
   boilerplate band stay apart), and, unlike a check by the signature's estimate (error
   sqrt(J(1-J)/num_perm), 0.036 at J=0.8 with 112 permutations), a pair at true 0.82
   is never rejected by chance. (Exact up to 32-bit shingle-hash collisions: about
   n^2/2**33 for n shingles, 1e-4 at n=1000, each moving J by 1/|union|.)
5. Connected components: union-find over the verified edges, on the driver; memory is
   O(verified pairs), at most two per near-duplicate per band. The root of each
   component is its smallest doc id, which is the document kept, so the result depends
   on the input alone, never on Ray's block order.

Cost. In memory, every document's shingle hashes (4 bytes a shingle, about the size of
the text) are held until the buckets are known, then only the candidates', with the set
of candidate pairs, for step 4.
On Ray, steps 3-4 are three shuffles, each a Ray Data `groupby("part").map_groups`
(Ray's `Dataset.join` would need polars, not installed), none through the driver. Each
groups by a COARSE key, `part`: the fine key mod P (`key mod P` for a band key, already a
hash; `xxh64(doc_id) mod P` for a doc id), P = `num_partitions`, by default
`default_partitions()`, twice the cluster's CPUs. Grouping by the fine key itself would
make one Python call per bucket or document (~56k calls for the bands of 4,000
documents); one call per partition instead sorts the partition's rows by the fine key
(pyarrow `sort_indices`) and finds the runs of equal keys with numpy, for all buckets or
documents at once: no per-row Python but the per-document work (shingles, one `jaccard`
per candidate pair). The partition is a column computed from the data, so the result
depends neither on Ray's shuffle settings nor on its block order.
  S1 band rows `(key, doc_id)`, `bands` per document (no signature travels), grouped by
     `key mod P`; sorted by (key, doc id), each run of one key is a bucket, and each of
     its candidate pairs emits one reference row to each side.
  S2 the input's `(doc_id, text)` with those references, grouped by `xxh64(doc_id) mod P`
     (a join of the corpus with the distinct candidate ids, by `index_in` within the
     partition): a document with no reference emits nothing; a candidate emits its
     shingle hashes once as a pair's `a`, and once per distinct pair in which it is `b`.
     The whole corpus text crosses this shuffle once.
  S3 those shingle rows grouped by `xxh64(a) mod P`: the exact Jaccard of `a` with each
     `b`; only the verified pairs reach the driver. Shingle hashes travel only for
     candidate documents: the near-duplicate fraction of the corpus plus band
     collisions, one copy per document as `a` and one per pair as `b`.
A partition holds about 1/P of a shuffle's rows in one worker: P must grow with the
corpus (the pipeline's `shuffle_partitions`) once 1/P of the band rows or text outgrows it.
`ds` is read twice (bands, and the text in S2): materialize it first if that is costly.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from contracts.text_pipeline import NearDedupConfig

if TYPE_CHECKING:
    import ray.data

_PRIME = np.uint64((1 << 61) - 1)
_MAX32 = np.uint64(0xFFFFFFFF)
_WORD = re.compile(r"\w+")
_CHUNK = 4096
"""Shingles per vectorized step: bounds the (shingles x num_perm) matrix to ~4 MB."""


@lru_cache(maxsize=8)
def _permutations(num_perm: int, seed: int) -> tuple[npt.NDArray[np.uint64], ...]:
    # a, b < 2**32 and h < 2**32 keep a*h + b below 2**64: no silent uint64 wrap-around.
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 1 << 32, size=num_perm, dtype=np.uint64)
    b = rng.integers(0, 1 << 32, size=num_perm, dtype=np.uint64)
    return a, b


def shingle_hashes(text: str, shingle_words: int, seed: int) -> npt.NDArray[np.uint32]:
    """The sorted distinct 32-bit hashes of the text's word shingles (a short text is one
    shingle)."""
    words = _WORD.findall(text.lower())
    if not words:
        return np.empty(0, dtype=np.uint32)
    n = max(1, len(words) - shingle_words + 1)
    grams = {" ".join(words[i : i + shingle_words]) for i in range(n)}
    values = [xxhash.xxh64_intdigest(g, seed) & 0xFFFFFFFF for g in grams]
    return np.unique(np.array(values, dtype=np.uint32))


def minhash(hashes: npt.NDArray[np.uint32], cfg: NearDedupConfig) -> npt.NDArray[np.uint32]:
    """The `num_perm` uint32 MinHash signature of a non-empty shingle-hash set."""
    a, b = _permutations(cfg.num_perm, cfg.seed)
    sig = np.full(cfg.num_perm, _MAX32, dtype=np.uint64)
    wide = hashes.astype(np.uint64)
    for start in range(0, wide.size, _CHUNK):
        h = wide[start : start + _CHUNK, None]
        values = ((h * a[None, :] + b[None, :]) % _PRIME) & _MAX32
        np.minimum(sig, values.min(axis=0), out=sig)
    return sig.astype(np.uint32)


def signature(text: str, cfg: NearDedupConfig) -> npt.NDArray[np.uint32] | None:
    """The MinHash signature (`num_perm` uint32), or None for a text without words."""
    hashes = shingle_hashes(text, cfg.shingle_words, cfg.seed)
    return minhash(hashes, cfg) if hashes.size else None


def band_keys(sig: npt.NDArray[np.uint32], cfg: NearDedupConfig) -> list[int]:
    """One uint64 key per band: xxh64 of the band index and the band's rows."""
    rows = sig.reshape(cfg.bands, cfg.rows)
    return [xxhash.xxh64_intdigest(band.tobytes(), seed=index) for index, band in enumerate(rows)]


def jaccard(a: npt.NDArray[np.uint32], b: npt.NDArray[np.uint32]) -> float:
    """The exact Jaccard of two sorted distinct shingle-hash arrays."""
    if not a.size and not b.size:
        return 1.0
    common = np.intersect1d(a, b, assume_unique=True).size
    return common / (a.size + b.size - common)


def exact_jaccard(a: str, b: str, shingle_words: int = 5, seed: int = 0) -> float:
    """The Jaccard of two texts' shingle sets (the tests plant and check pairs by it)."""
    return jaccard(shingle_hashes(a, shingle_words, seed), shingle_hashes(b, shingle_words, seed))


def candidate_pairs(members: list[str]) -> Iterator[tuple[str, str]]:
    """A bucket's candidate pairs: each member with the smallest and with its successor."""
    ordered = sorted(set(members))
    for i in range(1, len(ordered)):
        yield ordered[0], ordered[i]
        if i > 1:
            yield ordered[i - 1], ordered[i]


class UnionFind:
    """Disjoint sets whose root is always the smallest member."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        root = x
        while (up := self.parent.get(root, root)) != root:
            root = up
        while (up := self.parent.get(x, x)) != root:
            self.parent[x] = root
            x = up
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            low, high = (ra, rb) if ra < rb else (rb, ra)
            self.parent[high] = low
            self.parent.setdefault(low, low)

    def clusters(self) -> dict[str, str]:
        """Every member that was ever joined -> its root."""
        return {x: self.find(x) for x in self.parent}


def near_duplicates(docs: Iterable[tuple[str, str]], cfg: NearDedupConfig) -> dict[str, str]:
    """doc_id -> the kept doc id of its cluster, for every document (in memory)."""
    buckets: dict[int, list[str]] = defaultdict(list)
    shingles: dict[str, npt.NDArray[np.uint32]] = {}
    ids: list[str] = []
    for doc_id, text in docs:
        ids.append(doc_id)
        hashes = shingle_hashes(text, cfg.shingle_words, cfg.seed)
        if hashes.size:
            shingles[doc_id] = hashes
            for key in band_keys(minhash(hashes, cfg), cfg):
                buckets[key].append(doc_id)
    pairs = {
        p for members in buckets.values() if len(members) > 1 for p in candidate_pairs(members)
    }
    del buckets
    candidates = {d for pair in pairs for d in pair}
    shingles = {d: h for d, h in shingles.items() if d in candidates}
    uf = UnionFind()
    for a, b in pairs:
        if jaccard(shingles[a], shingles[b]) >= cfg.threshold:
            uf.union(a, b)
    return {doc_id: uf.find(doc_id) for doc_id in ids}


# --- on Ray Data -------------------------------------------------------------------------

_BAND = pa.schema([("key", pa.uint64()), ("doc_id", pa.string()), ("part", pa.int64())])
_REF = pa.schema(
    [("doc_id", pa.string()), ("a", pa.string()), ("text", pa.string()), ("part", pa.int64())]
)
"""S2's rows: a document (`a` null, `text` set) or a reference to it from a candidate
pair (`text` null; `a` is the pair's smaller id: the document itself, or its partner)."""
_SIDE = pa.schema(
    [("a", pa.string()), ("b", pa.string()), ("sh", pa.binary()), ("part", pa.int64())]
)
"""S3's rows: `a`'s shingle hashes (`b` null), or `b`'s for the pair (a, b)."""
_EDGE = pa.schema([("a", pa.string()), ("b", pa.string())])


def default_partitions() -> int:
    """Partitions of each near-dedup shuffle when none is given: twice the CPUs of the
    connected Ray cluster (of this machine if Ray is not started yet), at least 1."""
    import ray

    cpus = ray.cluster_resources().get("CPU", 0) if ray.is_initialized() else os.cpu_count()
    return max(1, int(cpus or 0) * 2)


def _id_parts(ids: pa.Array | pa.ChunkedArray, parts: int) -> pa.Array:
    """The coarse partition of each doc id: `xxh64(id) mod parts` (stable everywhere)."""
    return pa.array([xxhash.xxh64_intdigest(d) % parts for d in ids.to_pylist()], type=pa.int64())


def _band_rows(batch: dict[str, Any], cfg: NearDedupConfig, parts: int) -> pa.Table:
    keys: list[int] = []
    ids: list[str] = []
    for doc_id, text in zip(batch["doc_id"], batch["text"], strict=True):
        sig = signature(str(text), cfg)
        if sig is not None:
            keys.extend(band_keys(sig, cfg))
            ids.extend([str(doc_id)] * cfg.bands)
    key = np.array(keys, dtype=np.uint64)
    part = (key % np.uint64(parts)).astype(np.int64)
    return pa.table([pa.array(key, pa.uint64()), pa.array(ids, pa.string()), part], schema=_BAND)


def _runs(*sorted_columns: npt.NDArray[Any] | pa.Array | pa.ChunkedArray) -> npt.NDArray[np.intp]:
    """The start of each run of equal rows in columns sorted together."""
    n = len(sorted_columns[0])
    if not n:
        return np.empty(0, dtype=np.intp)
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for column in sorted_columns:
        if isinstance(column, np.ndarray):
            new[1:] |= column[1:] != column[:-1]
        else:
            differs = pc.fill_null(pc.not_equal(column[1:], column[:-1]), True)
            new[1:] |= differs.to_numpy(zero_copy_only=False)
    return np.flatnonzero(new)


def _bucket_refs(group: pa.Table, parts: int) -> pa.Table:
    """S1, one coarse partition of band rows: the rows sorted by (key, doc_id), each run
    of one key a bucket, its candidate pairs (`candidate_pairs`, for all buckets at once)
    as one reference row to each of the two documents."""
    rows = group.select(["key", "doc_id"])
    rows = rows.take(pc.sort_indices(rows, [("key", "ascending"), ("doc_id", "ascending")]))
    keys, ids = rows.column("key").to_numpy(), rows.column("doc_id").combine_chunks()
    distinct = _runs(keys, ids)  # a document twice in one bucket counts once
    keys, ids = keys[distinct], ids.take(pa.array(distinct))
    starts = _runs(keys)
    sizes = np.diff(np.append(starts, keys.size))
    first = np.repeat(starts, sizes)  # each row's bucket's first (smallest) member
    pos = np.arange(keys.size) - first
    with_first = np.flatnonzero(pos >= 1)
    with_prev = np.flatnonzero(pos >= 2)
    a = np.concatenate([first[with_first], with_prev - 1])
    b = np.concatenate([with_first, with_prev])
    docs = ids.take(pa.array(np.stack([a, b], axis=1).ravel()))
    smaller = ids.take(pa.array(np.repeat(a, 2)))
    texts = pa.nulls(len(docs), pa.string())
    return pa.table([docs, smaller, texts, _id_parts(docs, parts)], schema=_REF)


def _doc_rows(batch: pa.Table, parts: int) -> pa.Table:
    ids, texts = batch.column("doc_id").cast(pa.string()), batch.column("text").cast(pa.string())
    nulls = pa.nulls(batch.num_rows, pa.string())
    return pa.table([ids, nulls, texts, _id_parts(ids, parts)], schema=_REF)


def _doc_sides(group: pa.Table, cfg: NearDedupConfig, parts: int) -> pa.Table:
    """S2, one coarse partition of documents and references: each distinct reference
    (doc, a) to a document present -> the document's shingle hashes, as `a` when a is the
    document itself, else as `b` of the pair (a, doc). The shingles are computed once per
    candidate document, the output rows are gathered with `take`."""
    is_doc = pc.is_valid(group.column("text"))
    texts = group.filter(is_doc).select(["doc_id", "text"])
    texts = texts.take(pc.sort_indices(texts, [("doc_id", "ascending")]))
    refs = group.filter(pc.invert(is_doc)).select(["doc_id", "a"])
    refs = refs.take(pc.sort_indices(refs, [("doc_id", "ascending"), ("a", "ascending")]))
    refs = refs.take(pa.array(_runs(refs.column("doc_id"), refs.column("a"))))
    # the document of each reference: the first of its id in sorted order, null if absent
    at = pc.index_in(refs.column("doc_id"), value_set=texts.column("doc_id").combine_chunks())
    refs = refs.filter(pc.is_valid(at))
    at_np = pc.drop_null(at).to_numpy(zero_copy_only=False)
    needed, inverse = np.unique(at_np, return_inverse=True)
    chosen = texts.column("text").take(pa.array(needed.astype(np.int64))).to_pylist()
    shingles = pa.array(
        [shingle_hashes(t, cfg.shingle_words, cfg.seed).tobytes() for t in chosen], pa.binary()
    )
    doc, a = refs.column("doc_id"), refs.column("a")
    side_b = pc.if_else(pc.equal(doc, a), pa.scalar(None, pa.string()), doc)
    sh = shingles.take(pa.array(inverse.astype(np.int64)))
    return pa.table([a, side_b, sh, _id_parts(a, parts)], schema=_SIDE)


def _verified_edges(group: pa.Table, threshold: float) -> pa.Table:
    """S3, one coarse partition of shingle rows: each pair (a, b) whose `a` row is present
    and whose exact Jaccard is at least `threshold` (one `jaccard` per candidate pair)."""
    is_a = pc.is_null(group.column("b"))
    mine = group.filter(is_a).select(["a", "sh"])
    pairs = group.filter(pc.invert(is_a)).select(["a", "b", "sh"])
    at = pc.index_in(pairs.column("a"), value_set=mine.column("a").combine_chunks())
    pairs = pairs.filter(pc.is_valid(at))
    at_list = pc.drop_null(at).to_pylist()
    sh_a = mine.column("sh").to_pylist()
    sh_b = pairs.column("sh").to_pylist()
    keep = np.array(
        [
            jaccard(np.frombuffer(sh_a[i], np.uint32), np.frombuffer(s, np.uint32)) >= threshold
            for i, s in zip(at_list, sh_b, strict=True)
        ],
        dtype=bool,
    )
    edges = pairs.select(["a", "b"]).filter(pa.array(keep, pa.bool_()))
    return edges.cast(_EDGE)


def near_dedup_clusters(
    ds: ray.data.Dataset, cfg: NearDedupConfig, num_partitions: int | None = None
) -> dict[str, str]:
    """doc_id -> kept doc id, for the documents in a cluster of two or more.
    `num_partitions`: the coarse partitions of each of the three shuffles, one Python call
    each (default: `default_partitions()`, twice the cluster's CPUs)."""
    parts = num_partitions or default_partitions()
    docs = ds.select_columns(["doc_id", "text"])
    refs = (
        docs.map_batches(partial(_band_rows, cfg=cfg, parts=parts), batch_format="numpy")
        .groupby("part", num_partitions=parts)
        .map_groups(partial(_bucket_refs, parts=parts), batch_format="pyarrow")
    )
    sides = (
        docs.map_batches(partial(_doc_rows, parts=parts), batch_format="pyarrow")
        .union(refs)
        .groupby("part", num_partitions=parts)
        .map_groups(partial(_doc_sides, cfg=cfg, parts=parts), batch_format="pyarrow")
    )
    edges = sides.groupby("part", num_partitions=parts).map_groups(
        partial(_verified_edges, threshold=cfg.threshold), batch_format="pyarrow"
    )
    uf = UnionFind()
    for row in edges.iter_rows():
        uf.union(str(row["a"]), str(row["b"]))
    return uf.clusters()


def near_dedup(
    ds: ray.data.Dataset, cfg: NearDedupConfig, num_partitions: int | None = None
) -> ray.data.Dataset:
    """`ds` keeping one document per near-duplicate cluster: the smallest doc id."""
    clusters = near_dedup_clusters(ds, cfg, num_partitions)
    dropped = frozenset(d for d, root in clusters.items() if d != root)
    return drop_ids(ds, dropped)


def _drop_batch(batch: dict[str, Any], dropped: frozenset[str]) -> dict[str, Any]:
    keep = np.array([str(d) not in dropped for d in batch["doc_id"]], dtype=bool)
    return {name: column[keep] for name, column in batch.items()}


def drop_ids(ds: ray.data.Dataset, dropped: frozenset[str]) -> ray.data.Dataset:
    if not dropped:
        return ds
    return ds.map_batches(partial(_drop_batch, dropped=dropped), batch_format="numpy")
