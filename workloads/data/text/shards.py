"""The output contract the trainer reads, and the writer of one part.

One flat directory (the trainer's `TokenShards` memory-maps every `.npy` in it):
- `part-IIIII-of-NNNNN-shard-SSSSS.npy`: 1-D uint16 (uint32 above 65,536 ids) token
  arrays of whole documents, each ending in the end-of-document id;
- `manifest-IIIII-of-NNNNN.json`, one per part, written last and atomically (a rename
  on a file system; a single PUT on S3, which is atomic too): a part without one is
  incomplete. Format `llmp-tokens/2` is `/1` (the old Indexed Job's) plus the
  tokenizer's sha256 and path, the config and its sha256, and the run's statistics per
  stage; every part carries the same run statistics and its own shards.
- `tokenizer.json`: the tokenizer that wrote the shards (canonical JSON, see
  `tokenizer.py`), for the trainer and the server to load.
- from a pipeline that knows its sources (the web one, `workloads.data.web`): each
  manifest also carries `sources`, the source manifest (name, licence, terms, who
  approved, and how many of this part's documents came from each), and names
  `part-IIIII-of-NNNNN-docs.jsonl`, one line per document of the part in shard order
  (its id, url, fetch date, language, source, shard and tokens), so every token can be
  traced to its page and its licence. The text pipeline's manifests have neither key.

`load_manifests` and `iter_shards` read both formats.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import numpy as np
import numpy.typing as npt
from pyarrow import fs as pafs
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from workloads.data.engine import filesystem

DOCUMENTS_SUFFIX: Final = "-docs.jsonl"
FORMAT_V1: Final = "llmp-tokens/1"
FORMAT: Final = "llmp-tokens/2"
Dtype = Literal["uint16", "uint32"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ShardInfo(_Frozen):
    path: str = Field(description="Relative to the output directory.")
    tokens: int
    documents: int
    sha256: str


class TokenizerInfo(_Frozen):
    name: str
    vocab_size: int
    eos_id: int


class TokenizerInfoV2(TokenizerInfo):
    eos_token: str
    sha256: str = Field(description="sha256 of the tokenizer's canonical JSON.")
    path: str = Field(description="The tokenizer.json written beside the shards.")
    source: str = Field(description="'trained' or the path it was loaded from.")


class StatsV1(_Frozen):
    input_files: int
    documents_read: int
    documents_empty: int
    documents_other_partitions: int
    duplicates_dropped: int
    documents_kept: int
    tokens: int


class ManifestV1(_Frozen):
    """The old Indexed Job's manifest, still readable."""

    format: Literal["llmp-tokens/1"] = FORMAT_V1
    index: int
    count: int
    source: str
    min_chars: int
    tokenizer: TokenizerInfo
    dtype: Dtype
    shards: list[ShardInfo]
    stats: StatsV1


class PipelineStats(_Frozen):
    """Counts of the whole run, stage by stage."""

    input_files: int
    documents_read: int
    dropped: dict[str, dict[str, int]] = Field(
        description="stage -> reason -> documents dropped (clean, language, gopher_quality, "
        "c4, repetition)."
    )
    pii_redacted: dict[str, int] = Field(
        description="Replacements per kind, in the documents that passed the filters."
    )
    documents_filtered: int = Field(description="Documents that passed every filter.")
    exact_duplicates_dropped: int
    near_duplicate_clusters: int = Field(description="Clusters of two or more documents.")
    near_duplicates_dropped: int
    documents_kept: int
    tokens: int


class SourceRecord(_Frozen):
    """One source of the source manifest, as a part's manifest carries it."""

    name: str
    prefix: str
    licence: str
    terms: str
    approved_by: str
    approved_on: str
    max_documents: int | None = None
    documents: int = Field(0, description="Documents of this part from this source.")


class Manifest(_Frozen):
    format: Literal["llmp-tokens/2"] = FORMAT
    index: int
    count: int
    source: str
    tokenizer: TokenizerInfoV2
    dtype: Dtype
    config: dict[str, Any] = Field(description="The TextPipelineConfig, as JSON.")
    config_sha256: str
    shards: list[ShardInfo]
    documents: int = Field(description="Documents in this part.")
    tokens: int = Field(description="Tokens in this part.")
    stats: PipelineStats
    sources: list[SourceRecord] | None = Field(
        None, description="The source manifest (web pipeline only)."
    )
    documents_file: str | None = Field(
        None, description="The part's per-document index (web pipeline only)."
    )


def manifest_json(manifest: Manifest) -> dict[str, Any]:
    """The manifest as written: the keys only a web run has are left out of a text run's,
    which stays as it was."""
    body = manifest.model_dump(mode="json")
    for key in ("sources", "documents_file"):
        if body[key] is None:
            del body[key]
    return body


AnyManifest = ManifestV1 | Manifest
_ANY: TypeAdapter[AnyManifest] = TypeAdapter(Annotated[AnyManifest, Field(discriminator="format")])


def token_dtype(vocab_size: int) -> Dtype:
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def part_name(index: int, count: int) -> str:
    return f"part-{index:05d}-of-{count:05d}"


def documents_name(index: int, count: int) -> str:
    return f"{part_name(index, count)}{DOCUMENTS_SUFFIX}"


def manifest_name(index: int, count: int) -> str:
    return f"manifest-{index:05d}-of-{count:05d}.json"


class OutputDir:
    """A directory on the local file system (FSx is mounted) or under an s3:// prefix,
    through pyarrow's file systems (S3 credentials: the pod's, at run time; the endpoint:
    `endpoint`, the driver's, else this process's `AWS_ENDPOINT_URL[_S3]`)."""

    def __init__(self, uri: str, endpoint: str | None = None) -> None:
        self.uri = uri
        self.fs, self.root = filesystem(uri, endpoint)
        self.local = isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def makedirs(self) -> None:
        """The directory locally; on S3 (no directories) a check that the bucket exists,
        before any work, and no empty `prefix/` marker object beside the shards."""
        if self.local:
            self.fs.create_dir(self.root, recursive=True)
            return
        bucket = self.root.split("/", 1)[0]
        if self.fs.get_file_info(bucket).type != pafs.FileType.Directory:
            raise FileNotFoundError(f"{self.uri}: no such bucket {bucket}")

    def names(self) -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)

    def write(self, name: str, data: bytes) -> None:
        """Whole or not at all: a temporary name and a rename locally, one PUT on S3."""
        if self.local:
            tmp = self.path(f".{name}.tmp")
            with self.fs.open_output_stream(tmp) as out:
                out.write(data)
            os.replace(tmp, self.path(name))
        else:
            with self.fs.open_output_stream(self.path(name)) as out:
                out.write(data)

    def delete(self, name: str) -> None:
        self.fs.delete_file(self.path(name))


@dataclass
class ShardWriter:
    """Cuts a part's token stream into shards of about `shard_tokens` (whole documents)."""

    out: OutputDir
    part: str
    dtype: Dtype
    shard_tokens: int
    pending: list[npt.NDArray[np.uint32]] = field(default_factory=list)
    pending_tokens: int = 0
    pending_docs: int = 0
    shards: list[ShardInfo] = field(default_factory=list)

    def add(self, ids: npt.NDArray[np.uint32]) -> None:
        self.pending.append(ids)
        self.pending_tokens += len(ids)
        self.pending_docs += 1
        if self.pending_tokens >= self.shard_tokens:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        name = f"{self.part}-shard-{len(self.shards):05d}.npy"
        array = np.concatenate(self.pending).astype(self.dtype)
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=False)
        data = buf.getvalue()
        self.out.write(name, data)
        self.shards.append(
            ShardInfo(
                path=name,
                tokens=int(array.size),
                documents=self.pending_docs,
                sha256=hashlib.sha256(data).hexdigest(),
            )
        )
        self.pending, self.pending_tokens, self.pending_docs = [], 0, 0


def _check_parts(out: Path, manifests: list[AnyManifest]) -> None:
    first = manifests[0]
    same = (first.count, first.tokenizer, first.dtype)
    if sorted(m.index for m in manifests) != list(range(first.count)) or any(
        (m.count, m.tokenizer, m.dtype) != same or type(m) is not type(first) for m in manifests
    ):
        raise ValueError(f"{out}: parts missing or written by different runs")


def load_manifests(output: str | Path) -> list[AnyManifest]:
    """Every part's manifest (format /1 or /2), in part order; refuses a dataset with a
    part missing or parts that disagree."""
    out = Path(output)
    manifests = [_ANY.validate_json(p.read_text()) for p in sorted(out.glob("manifest-*.json"))]
    if not manifests:
        raise ValueError(f"{out} has no manifest")
    _check_parts(out, manifests)
    return sorted(manifests, key=lambda m: m.index)


def iter_shards(output: str | Path) -> Iterator[npt.NDArray[Any]]:
    """The token arrays of a dataset, memory-mapped, in part and shard order."""
    out = Path(output)
    for manifest in load_manifests(out):
        for shard in manifest.shards:
            array = np.load(out / shard.path, mmap_mode="r", allow_pickle=False)
            if array.dtype != np.dtype(manifest.dtype) or array.size != shard.tokens:
                raise ValueError(f"{shard.path} does not match its manifest")
            yield array
