"""The text pipeline on Ray Data: read in blocks, filter, redact, deduplicate, tokenize,
write the shards the trainer reads.

Stages (each a Ray Data operator; no worker holds the corpus):

1. Read (`input_splits`, `_read_split`): the driver lists the input files and cuts them
   into splits from metadata alone: uncompressed JSONL in byte ranges of
   `block_size_bytes` (a range owns the lines that start in it), a compressed file
   whole, Parquet by row group. One task reads one split. Ray's own `read_json` and
   `read_parquet` do not say where a row sits in its file, and the document id must be
   a function of the input: `<relative path>@<byte offset>` for JSONL (offset of the
   line, in the decompressed stream for .gz), `<relative path>#<row>` for Parquet.
2. Filter (`process_batch`, one pass): normalize and clean (`clean`), redact PII
   (`pii`; before the filters, so no later stage or statistic sees a raw address),
   identify the language (`langid`), then Gopher repetition, Gopher quality and C4
   (`quality`; the FineWeb order). A dropped document keeps a row with its reason, so
   the statistics are counted per block from the data, and a retried task counts
   nothing twice.
3. Exact dedup: group by the sha256 of the final text (a shuffle), keep the smallest id.
4. Near dedup (`minhash`): MinHash-LSH in three shuffles (band rows grouped into
   buckets by key, candidate pairs joined with their texts by doc id, verified against
   the exact Jaccard threshold by pair side), union-find over the verified edges on the
   driver, the smallest id of each cluster kept.
5. Tokenizer (`tokenizer`): loaded from a path, or trained on the driver on the sample
   of kept documents with the smallest seeded hash of their id (each block proposes
   its own smallest, the driver keeps the global smallest: the same sample whatever the
   block order), in doc-id order.
6. Tokenize (`encode_batch` in `map_batches`) and write: each document goes to part
   `xxh64(doc_id) mod parts`; a group-by on the part (a shuffle) hands each part to one
   task, which sorts its documents by id and writes its shards. The driver writes the
   manifests last.

Stages 2-6 are `run_from`, which the web pipeline (`workloads.data.web`) calls on its own
read stage. Its rows carry a `meta` column (url, date, source; the language is added in
stage 2) and a `Provenance`: after near dedup each source is cut to its quota (the
documents with the smallest xxh64 of their id: `apply_quotas`), each part writes a
per-document index beside its shards, and the manifests carry the source manifest.

Determinism: every choice (which copy is kept, the sample, a part's content and order)
is a function of document ids and texts, so the same input and config give
byte-identical shards, tokenizer.json and manifests, however Ray schedules the blocks.
"""

from __future__ import annotations

import heapq
import json
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import xxhash
from pyarrow import fs as pafs
from pyarrow import parquet as pq
from tokenizers import Tokenizer

from contracts.text_pipeline import TextPipelineConfig
from workloads.data.engine import filesystem as _filesystem
from workloads.data.engine import s3_endpoint
from workloads.data.text import minhash
from workloads.data.text.clean import clean_document, text_hash
from workloads.data.text.langid import identify, language_filter
from workloads.data.text.pii import redact
from workloads.data.text.quality import c4_filter, gopher_quality, gopher_repetition
from workloads.data.text.shards import (
    DOCUMENTS_SUFFIX,
    Dtype,
    Manifest,
    OutputDir,
    PipelineStats,
    ShardInfo,
    ShardWriter,
    SourceRecord,
    TokenizerInfoV2,
    documents_name,
    manifest_json,
    manifest_name,
    part_name,
    token_dtype,
)
from workloads.data.text.tokenizer import (
    TOKENIZER_FILE,
    cached_tokenizer,
    canonical_json,
    load_tokenizer,
    tokenizer_sha256,
    train_tokenizer,
)

JSONL_SUFFIXES = (".jsonl", ".json")
GZ_SUFFIXES = (".jsonl.gz", ".json.gz")
PARQUET_SUFFIXES = (".parquet",)
_READ_BATCH = 1024


class InputError(ValueError):
    """Input that cannot be read: a missing directory, no input files, a bad tokenizer."""


@dataclass(frozen=True)
class Split:
    rel: str
    kind: str
    start: int = 0
    end: int = -1
    row_group: int = 0
    first_row: int = 0


def shuffle_partitions(cfg: TextPipelineConfig) -> int:
    """The partitions of every shuffle: `cfg.shuffle_partitions`, else
    `minhash.default_partitions()` (twice the cluster's CPUs)."""
    return cfg.shuffle_partitions or minhash.default_partitions()


def _kind(name: str) -> str | None:
    if name.endswith(GZ_SUFFIXES):
        return "jsonl.gz"
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return None


def input_splits(uri: str, block_size: int) -> tuple[int, list[Split]]:
    """(input files, their splits in path order), from listings and footers only."""
    filesystem, root = _filesystem(uri)
    info = filesystem.get_file_info(root)
    if info.type != pafs.FileType.Directory:
        raise InputError(f"--input {uri}: not a directory or an s3:// prefix")
    files = sorted(
        (
            i
            for i in filesystem.get_file_info(pafs.FileSelector(root, recursive=True))
            if i.type == pafs.FileType.File and _kind(i.path) and "/." not in i.path
        ),
        key=lambda i: i.path,
    )
    if not files:
        raise InputError(f"--input {uri}: no .jsonl, .jsonl.gz or .parquet files")
    splits: list[Split] = []
    for f in files:
        rel = f.path[len(root) + 1 :]
        kind = _kind(f.path)
        if kind == "jsonl":
            size = int(f.size or 0)
            for start in range(0, max(size, 1), block_size):
                splits.append(Split(rel, kind, start, min(start + block_size, size)))
        elif kind == "parquet":
            with filesystem.open_input_file(f.path) as handle:
                meta = pq.ParquetFile(handle).metadata
            first = 0
            for g in range(meta.num_row_groups):
                splits.append(Split(rel, kind, row_group=g, first_row=first))
                first += meta.row_group(g).num_rows
        else:
            splits.append(Split(rel, "jsonl.gz"))
    return len(files), splits


def _range_lines(f: Any, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """(offset, line) of the lines that start in [start, end): Hadoop's rule, so every
    line belongs to exactly one range."""
    size = f.size()
    pos = max(0, start - 1)
    f.seek(pos)
    data = f.read(end - pos)
    while data and not data.endswith(b"\n") and f.tell() < size:
        more = f.read(1 << 16)
        cut = more.find(b"\n")
        data += more if cut < 0 else more[: cut + 1]
        if cut >= 0:
            break
    skip = 0
    if start > 0:
        cut = data.find(b"\n")
        skip = len(data) if cut < 0 else cut + 1
    offset = pos + skip
    for line in data[skip:].splitlines(keepends=True):
        yield offset, line
        offset += len(line)


def _record_text(line: bytes) -> str | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    text = record.get("text") if isinstance(record, dict) else None
    return text if isinstance(text, str) else None


def _read_split(batch: dict[str, Any], uri: str, endpoint: str | None) -> Iterator[dict[str, Any]]:
    filesystem, root = _filesystem(uri, endpoint)
    for raw in batch["split"]:
        split = Split(**json.loads(raw))
        path = f"{root}/{split.rel}"
        rows: list[tuple[str, str, str]] = []
        if split.kind == "parquet":
            with filesystem.open_input_file(path) as f:
                table = pq.ParquetFile(f).read_row_group(split.row_group)
            texts = table.column("text").to_pylist() if "text" in table.column_names else []
            if not texts:
                texts = [None] * table.num_rows
            for j, text in enumerate(texts):
                doc_id = f"{split.rel}#{split.first_row + j:012d}"
                ok = isinstance(text, str)
                rows.append((doc_id, text if ok else "", "" if ok else "read/no_text"))
        else:
            if split.kind == "jsonl":
                with filesystem.open_input_file(path) as f:
                    lines = list(_range_lines(f, split.start, split.end))
            else:
                lines = list(_gz_lines(filesystem.open_input_stream(path, compression="gzip")))
            for offset, line in lines:
                if not line.strip():
                    continue
                text = _record_text(line)
                doc_id = f"{split.rel}@{offset:012d}"
                rows.append((doc_id, text or "", "" if text is not None else "read/no_text"))
        for i in range(0, len(rows), _READ_BATCH):
            chunk = rows[i : i + _READ_BATCH]
            yield {
                "doc_id": np.array([r[0] for r in chunk], dtype=object),
                "text": np.array([r[1] for r in chunk], dtype=object),
                "reason": np.array([r[2] for r in chunk], dtype=object),
            }


def _gz_lines(stream: Any) -> Iterator[tuple[int, bytes]]:
    """(offset in the decompressed stream, line), read in 1 MiB chunks (pyarrow's stream
    decompresses: `open_input_stream(..., compression="gzip")`)."""
    offset, rest = 0, b""
    with stream:
        while chunk := stream.read(1 << 20):
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                yield offset, line
                offset += len(line) + 1
    if rest:
        yield offset, rest


# --- filtering -----------------------------------------------------------------------------


def filter_text(text: str, cfg: TextPipelineConfig) -> tuple[str, str, dict[str, int]]:
    """(final text or "", "stage/reason" or "", PII replacements per kind) of one
    document: the stages 2 of the module docstring, as a plain function."""
    cleaned = clean_document(text, cfg.normalization, cfg.cleaning)
    if not cleaned:
        return "", "clean/too_short", {}
    redacted, counts = redact(cleaned, cfg.pii)
    if cfg.language.enabled and (why := language_filter(redacted, cfg.language)):
        return "", f"language/{why}", counts
    if cfg.repetition.enabled and (why := gopher_repetition(redacted, cfg.repetition)):
        return "", f"repetition/{why}", counts
    if cfg.gopher_quality.enabled and (why := gopher_quality(redacted, cfg.gopher_quality)):
        return "", f"gopher_quality/{why}", counts
    if cfg.c4.enabled:
        redacted, why = c4_filter(redacted, cfg.c4)
        if why:
            return "", f"c4/{why}", counts
    return redacted, "", counts


def process_batch(batch: dict[str, Any], cfg: TextPipelineConfig) -> dict[str, Any]:
    """Stage 2 on a block. A `meta` column (JSON per document: a web page's url, date and
    source) passes through, with the identified language added to each kept document's."""
    texts, reasons, hashes = [], [], []
    pii: dict[str, list[int]] = {k: [] for k in cfg.pii.kinds}
    for text, reason in zip(batch["text"], batch["reason"], strict=True):
        counts: dict[str, int] = {}
        out = ""
        if not reason:
            out, reason, counts = filter_text(str(text), cfg)
        texts.append(out)
        reasons.append(reason)
        hashes.append(text_hash(out) if out else "")
        for kind, column in pii.items():
            column.append(counts.get(kind, 0) if not reason else 0)
    extra: dict[str, Any] = {}
    if "meta" in batch:
        metas = []
        for meta, out in zip(batch["meta"], texts, strict=True):
            record = json.loads(meta)
            if out:
                record["language"] = identify(out, cfg.language.sample_chars)[0]
            metas.append(json.dumps(record, sort_keys=True))
        extra["meta"] = np.array(metas, dtype=object)
    return {
        "doc_id": batch["doc_id"],
        "text": np.array(texts, dtype=object),
        "reason": np.array(reasons, dtype=object),
        "hash": np.array(hashes, dtype=object),
        **{f"pii_{k}": np.array(v, dtype=np.int64) for k, v in pii.items()},
        **extra,
    }


def _block_stats(batch: dict[str, Any]) -> dict[str, Any]:
    stats: Counter[str] = Counter()
    stats["documents"] = len(batch["doc_id"])
    for reason in batch["reason"]:
        stats[f"drop:{reason}" if reason else "kept"] += 1
    for name, column in batch.items():
        if name.startswith("pii_"):
            stats[name] += int(column.sum())
    return {"stats": np.array([json.dumps(dict(stats))], dtype=object)}


def _keep_passed(batch: dict[str, Any]) -> dict[str, Any]:
    keep = np.array([not r for r in batch["reason"]], dtype=bool)
    return {k: batch[k][keep] for k in ("doc_id", "text", "hash", "meta") if k in batch}


def _smallest_id(group: dict[str, Any]) -> dict[str, Any]:
    i = int(np.argmin(np.array([str(d) for d in group["doc_id"]], dtype=object)))
    return {k: group[k][i : i + 1] for k in ("doc_id", "text", "meta") if k in group}


def _source_of(meta: Any) -> str:
    return str(json.loads(meta)["source"])


def _block_quota(batch: dict[str, Any], quotas: dict[str, int]) -> dict[str, Any]:
    """Each block's candidates for every quota: its `quota` smallest (xxh64(id), id)."""
    by: dict[str, list[tuple[int, str]]] = {}
    for doc_id, meta in zip(batch["doc_id"], batch["meta"], strict=True):
        source = _source_of(meta)
        if source in quotas:
            by.setdefault(source, []).append((xxhash.xxh64_intdigest(str(doc_id)), str(doc_id)))
    # One row per candidate (count 0), and one per source with the block's count (no id).
    rows = [(s, k, d, 0) for s, keys in by.items() for k, d in heapq.nsmallest(quotas[s], keys)]
    rows += [(s, 0, "", len(keys)) for s, keys in by.items()]
    return {
        "source": np.array([r[0] for r in rows], dtype=object),
        "key": np.array([r[1] for r in rows], dtype=np.uint64),
        "doc_id": np.array([r[2] for r in rows], dtype=object),
        "count": np.array([r[3] for r in rows], dtype=np.int64),
    }


def _within_quota(batch: dict[str, Any], limits: dict[str, tuple[int, str]]) -> dict[str, Any]:
    keep = []
    for doc_id, meta in zip(batch["doc_id"], batch["meta"], strict=True):
        limit = limits.get(_source_of(meta))
        keep.append(limit is None or (xxhash.xxh64_intdigest(str(doc_id)), str(doc_id)) <= limit)
    mask = np.array(keep, dtype=bool)
    return {name: column[mask] for name, column in batch.items()}


def apply_quotas(kept: Any, quotas: dict[str, int]) -> tuple[Any, dict[str, int]]:
    """(`kept` with at most `quotas[source]` documents of each source, documents dropped
    per source). The ones kept have the smallest (xxh64(doc_id), doc_id), whatever the
    block order: each block proposes its own smallest per source, the driver finds each
    source's cut-off, a map keeps those at or below it."""
    proposals = kept.map_batches(
        partial(_block_quota, quotas=quotas), batch_size=None, batch_format="numpy"
    ).take_all()
    by: dict[str, list[tuple[int, str]]] = {}
    totals: Counter[str] = Counter()
    for row in proposals:
        source = str(row["source"])
        if row["doc_id"]:
            by.setdefault(source, []).append((int(row["key"]), str(row["doc_id"])))
        totals[source] += int(row["count"])
    limits = {
        source: heapq.nsmallest(quotas[source], keys)[-1]
        for source, keys in by.items()
        if totals[source] > quotas[source]
    }
    dropped = {s: totals[s] - quotas[s] for s in sorted(limits)}
    if not limits:
        return kept, dropped
    return kept.map_batches(partial(_within_quota, limits=limits), batch_format="numpy"), dropped


# --- tokenizer sample, tokenizing, writing ---------------------------------------------------


def _sample_key(doc_id: str, seed: int) -> int:
    return xxhash.xxh64_intdigest(doc_id, seed)


def _block_sample(batch: dict[str, Any], n: int, seed: int) -> dict[str, Any]:
    rows = heapq.nsmallest(
        n,
        (
            (_sample_key(str(d), seed), str(d), str(t))
            for d, t in zip(batch["doc_id"], batch["text"], strict=True)
        ),
    )
    return {
        "key": np.array([r[0] for r in rows], dtype=np.uint64),
        "doc_id": np.array([r[1] for r in rows], dtype=object),
        "text": np.array([r[2] for r in rows], dtype=object),
    }


def part_of(doc_id: str, parts: int) -> int:
    return xxhash.xxh64_intdigest(doc_id) % parts


def _encode(batch: dict[str, Any], tokenizer_json: str, eos_id: int, parts: int) -> dict[str, Any]:
    tokenizer = cached_tokenizer(tokenizer_json)
    encodings = tokenizer.encode_batch([str(t) for t in batch["text"]])
    ids = [
        np.append(np.asarray(e.ids, dtype=np.uint32), np.uint32(eos_id)).tobytes()
        for e in encodings
    ]
    extra = {"meta": batch["meta"]} if "meta" in batch else {}
    return {
        "doc_id": batch["doc_id"],
        "ids": np.array(ids, dtype=object),
        "part": np.array([part_of(str(d), parts) for d in batch["doc_id"]], dtype=np.int64),
        **extra,
    }


def _write_part(
    group: dict[str, Any],
    out_uri: str,
    endpoint: str | None,
    parts: int,
    dtype: Dtype,
    shard_tokens: int,
) -> dict[str, Any]:
    index = int(group["part"][0])
    order = sorted(range(len(group["doc_id"])), key=lambda i: str(group["doc_id"][i]))
    out = OutputDir(out_uri, endpoint)
    writer = ShardWriter(out, part_name(index, parts), dtype, shard_tokens)
    lines, sources = [], Counter[str]()
    for i in order:
        ids = np.frombuffer(group["ids"][i], dtype=np.uint32)
        if "meta" in group:
            record = json.loads(group["meta"][i])
            record.update(id=str(group["doc_id"][i]), shard=len(writer.shards), tokens=len(ids))
            lines.append(json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")
            sources[record["source"]] += 1
        writer.add(ids)
    writer.flush()
    if lines:
        # Shard numbers were taken before each add; a flush inside add closes the shard
        # that the document went into, so the numbers hold.
        out.write(documents_name(index, parts), "".join(lines).encode())
    shards = [s.model_dump() for s in writer.shards]
    return {
        "part": np.array([index]),
        "shards": np.array([json.dumps(shards)], dtype=object),
        "sources": np.array([json.dumps(dict(sorted(sources.items())))], dtype=object),
    }


def _resolve_tokenizer_path(path: str, input_uri: str) -> tuple[str, str]:
    """(uri of the tokenizer.json, what to call it in errors)."""
    absolute = "://" in path or os.path.isabs(path)
    uri = path if absolute else f"{input_uri.rstrip('/')}/{path}"
    filesystem, where = _filesystem(uri)
    info = filesystem.get_file_info(where)
    if info.type == pafs.FileType.Directory:
        where = f"{where}/{TOKENIZER_FILE}"
        info = filesystem.get_file_info(where)
    if info.type != pafs.FileType.File:
        raise InputError(f"tokenizer.path {path}: no tokenizer.json at {uri}")
    with filesystem.open_input_stream(where) as f:
        return f.read().decode("utf-8"), uri


def _clear_output(out: OutputDir) -> None:
    """Manifests first: from then on a reader sees an incomplete dataset, never a
    manifest whose shards are being replaced."""
    names = out.names()
    for name in names:
        if name.startswith("manifest-") and name.endswith(".json"):
            out.delete(name)
    for name in names:
        part = name.startswith("part-") and name.endswith((".npy", DOCUMENTS_SUFFIX))
        if part or name == TOKENIZER_FILE:
            out.delete(name)


def preflight(
    cfg: TextPipelineConfig, input_uri: str
) -> tuple[int, list[Split], tuple[Tokenizer, str] | None]:
    """What can be checked before any Ray work: the input lists, the tokenizer loads.
    Raises `InputError` or `TokenizerError` with one line."""
    input_files, splits = input_splits(input_uri, cfg.block_size_bytes)
    loaded = None
    if cfg.tokenizer.path is not None:
        data, where = _resolve_tokenizer_path(cfg.tokenizer.path, input_uri)
        loaded = (load_tokenizer(data, cfg.tokenizer.eos_token, where), where)
    return input_files, splits, loaded


def run(cfg: TextPipelineConfig, input_uri: str, output_uri: str) -> list[Manifest]:
    """The whole pipeline on the connected Ray cluster; returns the manifests written."""
    input_files, splits, tok_text = preflight(cfg, input_uri)
    # The tasks run in other processes (other pods): the driver's S3 endpoint goes with
    # them; credentials do not (each worker's own chain: Pod Identity on EKS).
    endpoint = s3_endpoint()
    items = [json.dumps(s.__dict__, sort_keys=True) for s in splits]
    raw = read_splits(items, partial(_read_split, uri=input_uri, endpoint=endpoint))
    return run_from(
        raw,
        cfg,
        input_uri=input_uri,
        output_uri=output_uri,
        input_files=input_files,
        loaded=tok_text,
        endpoint=endpoint,
    )


def read_splits(splits: list[str], reader: Any) -> Any:
    """A dataset of `reader`'s rows, one task per split (a JSON string each)."""
    import ray.data

    items = [{"split": s} for s in splits]
    return ray.data.from_items(items, override_num_blocks=max(1, len(items))).map_batches(
        reader, batch_size=1, batch_format="numpy"
    )


@dataclass(frozen=True)
class Provenance:
    """What a pipeline that knows its sources (the web one) adds to the text pipeline's
    run: the source manifest carried to every part's manifest, and per-source quotas. Its
    documents carry a `meta` column (JSON with at least `source`)."""

    sources: list[SourceRecord]
    quotas: dict[str, int]


def run_from(
    raw: Any,
    cfg: TextPipelineConfig,
    *,
    input_uri: str,
    output_uri: str,
    input_files: int,
    loaded: tuple[Tokenizer, str] | None,
    endpoint: str | None,
    provenance: Provenance | None = None,
) -> list[Manifest]:
    """Stages 2-6 on `raw`, a dataset of (doc_id, text, reason[, meta]) rows: a row with a
    reason is counted as dropped by it and goes no further."""
    tok_text = loaded
    processed = raw.map_batches(partial(process_batch, cfg=cfg), batch_format="numpy").materialize()
    totals: Counter[str] = Counter()
    for row in processed.map_batches(
        _block_stats, batch_size=None, batch_format="numpy"
    ).iter_rows():
        totals.update(json.loads(row["stats"]))

    kept = processed.map_batches(_keep_passed, batch_format="numpy").materialize()
    filtered = kept.count()
    partitions = shuffle_partitions(cfg)
    if cfg.dedup.exact and filtered:
        kept = (
            kept.groupby("hash", num_partitions=partitions)
            .map_groups(_smallest_id, batch_format="numpy")
            .materialize()
        )
    else:
        columns = ["doc_id", "text", *(["meta"] if provenance else [])]
        kept = kept.select_columns(columns).materialize()
    after_exact = kept.count()

    clusters: dict[str, str] = {}
    if cfg.dedup.near.enabled and after_exact:
        clusters = minhash.near_dedup_clusters(kept, cfg.dedup.near, partitions)
        dropped = frozenset(d for d, root in clusters.items() if d != root)
        kept = minhash.drop_ids(kept, dropped).materialize()
    after_near = kept.count()
    quota_dropped: dict[str, int] = {}
    if provenance and provenance.quotas and after_near:
        kept, quota_dropped = apply_quotas(kept, provenance.quotas)
        kept = kept.materialize()
    final_docs = kept.count()

    if tok_text is not None:
        tokenizer, source = tok_text
    else:
        train = cfg.tokenizer.train
        assert train is not None  # the config's validator: exactly one of path, train
        proposals = kept.map_batches(
            partial(_block_sample, n=train.sample_documents, seed=train.seed),
            batch_size=None,
            batch_format="numpy",
        ).take_all()
        best = heapq.nsmallest(
            train.sample_documents, ((int(r["key"]), str(r["doc_id"])) for r in proposals)
        )
        by_id = {str(r["doc_id"]): str(r["text"]) for r in proposals}
        sample = [by_id[d] for d in sorted(d for _, d in best)]
        tokenizer, source = train_tokenizer(sample, train, cfg.tokenizer.eos_token), "trained"
    eos_id = tokenizer.token_to_id(cfg.tokenizer.eos_token)
    if eos_id is None:  # a loaded one is checked in load_tokenizer; a trained one has it
        raise InputError(f"the tokenizer has no {cfg.tokenizer.eos_token!r} token")
    vocab = tokenizer.get_vocab_size()
    dtype = token_dtype(vocab)
    tok_json = canonical_json(tokenizer)
    parts = cfg.shards.parts

    out = OutputDir(output_uri, endpoint)
    out.makedirs()
    _clear_output(out)
    written: dict[int, list[dict[str, Any]]] = {}
    part_sources: dict[int, dict[str, int]] = {}
    if final_docs:
        encoded = kept.map_batches(
            partial(_encode, tokenizer_json=tok_json, eos_id=eos_id, parts=parts),
            batch_format="numpy",
        )
        results = encoded.groupby("part", num_partitions=partitions).map_groups(
            partial(
                _write_part,
                out_uri=output_uri,
                endpoint=endpoint,
                parts=parts,
                dtype=dtype,
                shard_tokens=cfg.shards.shard_tokens,
            ),
            batch_format="numpy",
        )
        for r in results.iter_rows():
            written[int(r["part"])] = json.loads(r["shards"])
            part_sources[int(r["part"])] = json.loads(r["sources"])
    out.write(TOKENIZER_FILE, tok_json.encode())

    dropped_by: dict[str, dict[str, int]] = {}
    for key, n in sorted(totals.items()):
        if key.startswith("drop:"):
            stage, _, reason = key.removeprefix("drop:").partition("/")
            dropped_by.setdefault(stage, {})[reason] = n
    if quota_dropped:
        dropped_by["quota"] = quota_dropped
    tokens_by_part = {p: sum(s["tokens"] for s in shards) for p, shards in written.items()}
    stats = PipelineStats(
        input_files=input_files,
        documents_read=totals["documents"],
        dropped=dropped_by,
        pii_redacted={k: totals[f"pii_{k}"] for k in cfg.pii.kinds},
        documents_filtered=filtered,
        exact_duplicates_dropped=filtered - after_exact,
        near_duplicate_clusters=len(set(clusters.values())),
        near_duplicates_dropped=after_exact - after_near,
        documents_kept=final_docs,
        tokens=sum(tokens_by_part.values()),
    )
    info = TokenizerInfoV2(
        name="bpe-bytelevel" if source == "trained" else os.path.basename(source.rstrip("/")),
        vocab_size=vocab,
        eos_id=eos_id,
        eos_token=cfg.tokenizer.eos_token,
        sha256=tokenizer_sha256(tokenizer),
        path=TOKENIZER_FILE,
        source=source,
    )
    manifests = []
    for index in range(parts):
        shards = written.get(index, [])
        manifest = Manifest(
            index=index,
            count=parts,
            source=input_uri,
            tokenizer=info,
            dtype=dtype,
            config=cfg.model_dump(mode="json"),
            config_sha256=cfg.sha256(),
            shards=[ShardInfo.model_validate(s) for s in shards],
            documents=sum(s["documents"] for s in shards),
            tokens=tokens_by_part.get(index, 0),
            stats=stats,
            sources=None
            if provenance is None
            else [
                s.model_copy(update={"documents": part_sources.get(index, {}).get(s.name, 0)})
                for s in provenance.sources
            ],
            documents_file=documents_name(index, parts)
            if provenance is not None and shards
            else None,
        )
        body = json.dumps(manifest_json(manifest), indent=1, sort_keys=True) + "\n"
        out.write(manifest_name(index, parts), body.encode())
        manifests.append(manifest)
    return manifests
