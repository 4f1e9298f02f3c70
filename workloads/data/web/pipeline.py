"""The web pipeline on Ray Data: WARC records to documents, then the text pipeline.

1. Preflight, on the driver, before any Ray work: the input lists into WARC/WET files;
   each belongs to a source of the source manifest (`WebPipelineConfig.sources`, the
   longest `prefix` of its path), and a file that no source covers stops the run (one
   line, exit 2): nothing is read that no licence covers. The block lists are read.
2. Read (`_read_warc_split`, one task per split of `extract.block_size_bytes`; `warc`
   says how a range finds its first record): every response or WET conversion record
   becomes a row (`doc_id` `<relative path>@<record offset>`, its text or the reason it
   was dropped: status, block list, opt-out, not HTML, nothing extracted) with `meta`,
   the page's url, WARC-Date and source.
3. The text pipeline's stages (`workloads.data.text.pipeline.run_from`): cleaning, PII,
   language (added to `meta`), quality, exact and near dedup; then the per-source
   quotas; the tokenizer, the shards, a per-document index per part, and manifests that
   carry the source manifest with each source's documents in the part.

Every choice is a function of the input: ids are offsets, the quota keeps the smallest
hashes of ids, the text pipeline orders by id. The same archives and config give
byte-identical output.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
from pyarrow import fs as pafs
from tokenizers import Tokenizer

from contracts.web_pipeline import WebPipelineConfig
from workloads.data.engine import filesystem as _filesystem
from workloads.data.engine import s3_endpoint
from workloads.data.text.pipeline import (
    InputError,
    Provenance,
    _resolve_tokenizer_path,
    read_splits,
    run_from,
)
from workloads.data.text.shards import Manifest, SourceRecord
from workloads.data.text.tokenizer import load_tokenizer
from workloads.data.web.extract import page_document, parse_domains
from workloads.data.web.warc import byte_ranges, is_warc, read_range

_READ_BATCH = 512


def _read_text(path: str, input_uri: str, what: str) -> str:
    absolute = "://" in path or os.path.isabs(path)
    uri = path if absolute else f"{input_uri.rstrip('/')}/{path}"
    filesystem, where = _filesystem(uri)
    if filesystem.get_file_info(where).type != pafs.FileType.File:
        raise InputError(f"{what} {path}: no such file at {uri}")
    with filesystem.open_input_stream(where) as f:
        return bytes(f.read()).decode("utf-8", errors="replace")


def warc_files(cfg: WebPipelineConfig, input_uri: str) -> list[tuple[str, int, str]]:
    """(relative path, size, source name) of every WARC/WET file under the input, in path
    order; refuses an input with none, or a file that no source covers."""
    filesystem, root = _filesystem(input_uri)
    if filesystem.get_file_info(root).type != pafs.FileType.Directory:
        raise InputError(f"--input {input_uri}: not a directory or an s3:// prefix")
    infos = filesystem.get_file_info(pafs.FileSelector(root, recursive=True))
    files = sorted(
        (i for i in infos if i.type == pafs.FileType.File and is_warc(i.path)),
        key=lambda i: i.path,
    )
    if not files:
        raise InputError(f"--input {input_uri}: no .warc, .warc.gz, .wet or .wet.gz files")
    out = []
    for info in files:
        rel = info.path[len(root) + 1 :]
        source = cfg.source_of(rel)
        if source is None:
            prefixes = ", ".join(repr(s.prefix) for s in cfg.sources)
            raise InputError(
                f"--input {input_uri}: {rel} is in no source of the source manifest "
                f"(prefixes {prefixes}): add a source with its licence, or move the file"
            )
        out.append((rel, int(info.size or 0), source.name))
    return out


def preflight(
    cfg: WebPipelineConfig, input_uri: str
) -> tuple[list[str], int, dict[str, frozenset[str]], tuple[Tokenizer, str] | None]:
    """(splits as JSON, WARC files, block lists, loaded tokenizer): everything checked
    before any Ray work. Raises `InputError` or `TokenizerError` with one line."""
    files = warc_files(cfg, input_uri)
    splits = [
        json.dumps({"rel": rel, "start": a, "end": b, "size": size, "source": source})
        for rel, size, source in files
        for a, b in byte_ranges(size, cfg.extract.block_size_bytes)
    ]
    blocklists = {
        name: parse_domains(_read_text(path, input_uri, f"urls.blocklists.{name}"))
        for name, path in sorted(cfg.urls.blocklists.items())
    }
    loaded = None
    if cfg.tokenizer.path is not None:
        data, where = _resolve_tokenizer_path(cfg.tokenizer.path, input_uri)
        loaded = (load_tokenizer(data, cfg.tokenizer.eos_token, where), where)
    return splits, len(files), blocklists, loaded


def _read_warc_split(
    batch: dict[str, Any],
    uri: str,
    endpoint: str | None,
    cfg: WebPipelineConfig,
    blocklists: dict[str, frozenset[str]],
) -> Iterator[dict[str, Any]]:
    filesystem, root = _filesystem(uri, endpoint)
    for raw in batch["split"]:
        split = json.loads(raw)
        rows: list[tuple[str, str, str, str]] = []
        with filesystem.open_input_file(f"{root}/{split['rel']}") as f:
            gz = split["rel"].endswith(".gz")
            for page in read_range(f, split["start"], split["end"], split["size"], gz):
                text, reason = page_document(page, cfg, blocklists)
                meta = {"url": page.url, "date": page.date, "source": split["source"]}
                rows.append(
                    (
                        f"{split['rel']}@{page.offset:012d}",
                        text,
                        reason,
                        json.dumps(meta, sort_keys=True, ensure_ascii=False),
                    )
                )
        for i in range(0, len(rows), _READ_BATCH):
            chunk = rows[i : i + _READ_BATCH]
            yield {
                name: np.array([r[j] for r in chunk], dtype=object)
                for j, name in enumerate(("doc_id", "text", "reason", "meta"))
            }


def source_records(cfg: WebPipelineConfig) -> list[SourceRecord]:
    return [
        SourceRecord(
            name=s.name,
            prefix=s.prefix,
            licence=s.licence,
            terms=s.terms,
            approved_by=s.approved_by,
            approved_on=s.approved_on.isoformat(),
            max_documents=s.max_documents,
        )
        for s in cfg.sources
    ]


def run(cfg: WebPipelineConfig, input_uri: str, output_uri: str) -> list[Manifest]:
    """The whole pipeline on the connected Ray cluster; returns the manifests written."""
    splits, files, blocklists, loaded = preflight(cfg, input_uri)
    endpoint = s3_endpoint()  # to the tasks, as the text pipeline's; never a credential
    reader = partial(
        _read_warc_split, uri=input_uri, endpoint=endpoint, cfg=cfg, blocklists=blocklists
    )
    quotas = {s.name: s.max_documents for s in cfg.sources if s.max_documents is not None}
    return run_from(
        read_splits(splits, reader),
        cfg,
        input_uri=input_uri,
        output_uri=output_uri,
        input_files=files,
        loaded=loaded,
        endpoint=endpoint,
        provenance=Provenance(sources=source_records(cfg), quotas=quotas),
    )
