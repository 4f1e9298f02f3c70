"""Data preparation: clean, deduplicate exactly and globally, tokenize, write token shards.

One Kubernetes Indexed Job runs `count` workers; worker `index` writes the
shards `part-<index>-of-<count>-shard-*.npy` and its manifest. Global exact deduplication needs
every copy of a document to meet in one place, so the partition is by
*content*, not by file: every worker streams the whole (sorted) input,
normalizes each document, hashes it (sha256), and keeps only the documents
whose hash falls in its partition (`hash mod count == index`). All copies of
a text hash alike, so they land in the same worker, whose seen-set drops all
but the first (first in the sorted input order, so reruns keep the same
copy). The price is that each worker reads the raw input in full; cleaning
and tokenizing, the expensive part, is still split `count` ways, and no
worker needs another's state. (At the scale where reading the corpus `count`
times costs more than a shuffle, a two-stage job that writes hash-bucketed
spill files would replace this; the output format would not change.)

Tokenizer: byte-level (UTF-8 bytes 0-255, end-of-document 256). It needs no
download, never changes, and round-trips every text exactly, which is what
the tests and a smoke-test training run need; a trained BPE tokenizer can
replace it behind the `Tokenizer` protocol, and the manifest records which
one wrote the shards.

Output, read by the trainer:
- `part-IIIII-of-NNNNN-shard-SSSSS.npy`, all in one flat directory (the
  trainer's `TokenShards` memory-maps every `.npy` of a directory): 1-D uint16
  (uint32 above 65,536 ids) token arrays, whole documents each ending in the
  end-of-document id;
- `manifest-IIIII-of-NNNNN.json`: the tokenizer, dtype, every shard with its
  token and document counts and sha256, and the cleaning statistics. The
  manifest is written last and atomically: a part without one is incomplete.

Reruns are deterministic: same input, same index/count, byte-identical output.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import sys
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, Protocol

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from workloads.jobs.pod import (
    FSX_MOUNT,
    Container,
    EnvVar,
    IndexedJob,
    IndexedJobSpec,
    ObjectMeta,
    PodSpec,
    PodTemplate,
    ResourceRequirements,
    check_dns_label,
    check_image,
    fsx_volume,
    non_root_pod_context,
    restricted_container_context,
)

FORMAT: Final = "llmp-tokens/1"
INPUT_SUFFIXES = (".txt", ".jsonl", ".txt.gz", ".jsonl.gz")
MIN_CHARS = 16
"""Shorter lines are navigation, page numbers and debris, not text worth training on."""
SHARD_TOKENS = 1 << 24
"""16 Mi tokens (32 MiB at uint16): big enough for sequential reads on Lustre, small
enough that a trainer can memory-map many of them."""
_WS = re.compile(r"\s+")
_DROP_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn"}


# --- cleaning --------------------------------------------------------------------------


def normalize_line(line: str) -> str:
    """NFKC (full-width, ligatures and compatibility forms fold to one spelling, so they
    deduplicate), control and format characters removed, whitespace runs to one space."""
    text = unicodedata.normalize("NFKC", line)
    text = _WS.sub(" ", text)
    text = "".join(c for c in text if unicodedata.category(c) not in _DROP_CATEGORIES)
    return text.strip()


def keep_line(line: str, min_chars: int) -> bool:
    return len(line) >= min_chars and any(c.isalpha() for c in line)


def clean_document(text: str, min_chars: int = MIN_CHARS) -> str:
    """The document's kept lines, normalized, joined by newlines ("" when nothing is kept)."""
    lines = (normalize_line(raw) for raw in text.splitlines())
    return "\n".join(line for line in lines if keep_line(line, min_chars))


def doc_hash(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def owner(digest: bytes, count: int) -> int:
    """The worker that owns a document: a pure function of its normalized content."""
    return int.from_bytes(digest[:8], "big") % count


# --- tokenizing ------------------------------------------------------------------------


class Tokenizer(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def eos_id(self) -> int: ...

    def encode(self, text: str) -> npt.NDArray[np.uint32]: ...


@dataclass(frozen=True)
class ByteTokenizer:
    name: str = "bytes-utf8"
    vocab_size: int = 257
    eos_id: int = 256

    def encode(self, text: str) -> npt.NDArray[np.uint32]:
        ids = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint32)
        return np.append(ids, np.uint32(self.eos_id))

    def decode(self, ids: npt.NDArray[Any]) -> str:
        return bytes(int(i) for i in ids if int(i) != self.eos_id).decode("utf-8")


def token_dtype(vocab_size: int) -> Literal["uint16", "uint32"]:
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


# --- input -----------------------------------------------------------------------------


def _documents(name: str, data: bytes) -> Iterator[str]:
    if name.endswith(".gz"):
        data = gzip.decompress(data)
    text = data.decode("utf-8", errors="replace")
    if name.removesuffix(".gz").endswith(".jsonl"):
        for line in text.splitlines():
            if line.strip():
                record = json.loads(line)
                if isinstance(record, dict) and isinstance(record.get("text"), str):
                    yield record["text"]
    else:
        yield from text.splitlines()


def list_inputs(source: str) -> list[str]:
    """Input files in a fixed order (sorted names): the order decides which copy is kept."""
    if source.startswith("s3://"):
        bucket, _, prefix = source.removeprefix("s3://").partition("/")
        import boto3  # only workers reading S3 need it

        pages = boto3.client("s3").get_paginator("list_objects_v2")
        keys = [
            obj["Key"]
            for page in pages.paginate(Bucket=bucket, Prefix=prefix)
            for obj in page.get("Contents", [])
            if obj["Key"].endswith(INPUT_SUFFIXES)
        ]
        return [f"s3://{bucket}/{k}" for k in sorted(keys)]
    root = Path(source)
    if not root.is_dir():
        raise ValueError(f"input {source} is not a directory or an s3:// prefix")
    return sorted(
        str(p) for p in root.rglob("*") if p.is_file() and p.name.endswith(INPUT_SUFFIXES)
    )


def read_input(path: str) -> bytes:
    if path.startswith("s3://"):
        import boto3

        bucket, _, key = path.removeprefix("s3://").partition("/")
        body = boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"]
        return bytes(body.read())
    return Path(path).read_bytes()


# --- output ----------------------------------------------------------------------------


class ShardInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str = Field(description="Relative to the output directory.")
    tokens: int
    documents: int
    sha256: str


class TokenizerInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    vocab_size: int
    eos_id: int


class Stats(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    input_files: int
    documents_read: int
    documents_empty: int
    documents_other_partitions: int
    duplicates_dropped: int
    documents_kept: int
    tokens: int


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    format: Literal["llmp-tokens/1"] = FORMAT
    index: int
    count: int
    source: str
    min_chars: int
    tokenizer: TokenizerInfo
    dtype: Literal["uint16", "uint32"]
    shards: list[ShardInfo]
    stats: Stats


def part_name(index: int, count: int) -> str:
    return f"part-{index:05d}-of-{count:05d}"


def manifest_name(index: int, count: int) -> str:
    return f"manifest-{index:05d}-of-{count:05d}.json"


@dataclass
class _ShardWriter:
    directory: Path
    part: str
    dtype: str
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
        (self.directory / name).write_bytes(data)
        self.shards.append(
            ShardInfo(
                path=name,
                tokens=int(array.size),
                documents=self.pending_docs,
                sha256=hashlib.sha256(data).hexdigest(),
            )
        )
        self.pending, self.pending_tokens, self.pending_docs = [], 0, 0


def prepare(
    *,
    source: str,
    output: str | Path,
    index: int,
    count: int,
    min_chars: int = MIN_CHARS,
    shard_tokens: int = SHARD_TOKENS,
    tokenizer: Tokenizer | None = None,
) -> Manifest:
    """Run worker `index` of `count`: returns the manifest it wrote."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"index {index} is not in 0..{count - 1}")
    if shard_tokens < 1 or min_chars < 1:
        raise ValueError("shard_tokens and min_chars must be positive")
    tok: Tokenizer = tokenizer or ByteTokenizer()
    dtype = token_dtype(tok.vocab_size)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    part = part_name(index, count)
    staging = out / f".{part}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    writer = _ShardWriter(staging, part, dtype, shard_tokens)

    seen: set[bytes] = set()
    read = empty = other = dups = tokens = 0
    inputs = list_inputs(source)
    for path in inputs:
        for raw in _documents(path, read_input(path)):
            read += 1
            text = clean_document(raw, min_chars)
            if not text:
                empty += 1
                continue
            digest = doc_hash(text)
            if owner(digest, count) != index:
                other += 1
                continue
            if digest in seen:
                dups += 1
                continue
            seen.add(digest)
            ids = tok.encode(text)
            tokens += len(ids)
            writer.add(ids)
    writer.flush()

    # Swap in the new shards: the manifest goes first and comes back last, so a reader
    # that trusts manifests never sees a half-replaced part.
    (out / manifest_name(index, count)).unlink(missing_ok=True)
    for stale in out.glob(f"{part}-shard-*.npy"):
        stale.unlink()
    for fresh in sorted(staging.iterdir()):
        fresh.rename(out / fresh.name)
    staging.rmdir()
    manifest = Manifest(
        index=index,
        count=count,
        source=source,
        min_chars=min_chars,
        tokenizer=TokenizerInfo(name=tok.name, vocab_size=tok.vocab_size, eos_id=tok.eos_id),
        dtype=dtype,
        shards=writer.shards,
        stats=Stats(
            input_files=len(inputs),
            documents_read=read,
            documents_empty=empty,
            documents_other_partitions=other,
            duplicates_dropped=dups,
            documents_kept=len(seen),
            tokens=tokens,
        ),
    )
    tmp = out / f".{manifest_name(index, count)}.tmp"
    tmp.write_text(json.dumps(manifest.model_dump(mode="json"), indent=1, sort_keys=True) + "\n")
    os.replace(tmp, out / manifest_name(index, count))
    return manifest


def load_manifests(output: str | Path) -> list[Manifest]:
    """Every part's manifest; refuses a dataset with a part missing or parts that disagree."""
    out = Path(output)
    manifests = [
        Manifest.model_validate_json(p.read_text()) for p in sorted(out.glob("manifest-*.json"))
    ]
    if not manifests:
        raise ValueError(f"{out} has no manifest")
    count = manifests[0].count
    if sorted(m.index for m in manifests) != list(range(count)) or any(
        (m.count, m.tokenizer, m.dtype) != (count, manifests[0].tokenizer, manifests[0].dtype)
        for m in manifests
    ):
        raise ValueError(f"{out}: parts missing or written by different runs")
    return manifests


def iter_shards(output: str | Path) -> Iterator[npt.NDArray[Any]]:
    """The token arrays of a dataset, memory-mapped, in part and shard order."""
    out = Path(output)
    for manifest in load_manifests(out):
        for shard in manifest.shards:
            array = np.load(out / shard.path, mmap_mode="r", allow_pickle=False)
            if array.dtype != np.dtype(manifest.dtype) or array.size != shard.tokens:
                raise ValueError(f"{shard.path} does not match its manifest")
            yield array


# --- the Kubernetes Job ----------------------------------------------------------------

DATA_PREP_CONTAINER = "data-prep"


class DataPrepSpec(BaseModel):
    """An indexed data-prep Job: S3 `raw/` prefix of the datasets bucket -> FSx token shards."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    namespace: str
    image: str = Field(description="An image with this package (workloads/) and numpy, pinned.")
    dataset: str = Field(description="Name under raw/ in S3 and under the FSx output root.")
    datasets_bucket: str
    raw_prefix: str = "raw/"
    output_root: str = f"{FSX_MOUNT}/datasets/tokenized"
    count: int = Field(ge=1, le=1000, description="Indexes (partitions) of the dataset.")
    parallelism: int | None = Field(None, ge=1, description="Default: all indexes at once.")
    backoff_limit_per_index: int = Field(3, ge=0)
    min_chars: int = Field(MIN_CHARS, ge=1)
    cpu: str = "4"
    memory: str = "16Gi"
    service_account: str = "training"
    queue_name: str | None = None
    run_as_user: int = Field(1000, ge=1)


def _check_data_prep(spec: DataPrepSpec) -> None:
    check_dns_label(spec.name, "name", 52)
    check_dns_label(spec.namespace, "namespace")
    check_dns_label(spec.dataset, "dataset")
    check_image(spec.image)
    if spec.queue_name is not None:
        check_dns_label(spec.queue_name, "queue name")
    if not spec.output_root.startswith(FSX_MOUNT + "/"):
        raise ValueError(f"output root {spec.output_root} must be under {FSX_MOUNT}/ (FSx)")


def data_prep_job(spec: DataPrepSpec) -> dict[str, Any]:
    """The batch/v1 Job body. Each pod reads JOB_COMPLETION_INDEX (set by the Job controller
    for Indexed Jobs) as its `--index`, so the pods differ only in that variable."""
    _check_data_prep(spec)
    fsx, fsx_mount = fsx_volume()
    prefix = spec.raw_prefix.strip("/")
    source = f"s3://{spec.datasets_bucket}/{prefix + '/' if prefix else ''}{spec.dataset}/"
    output = f"{spec.output_root.rstrip('/')}/{spec.dataset}"
    container = Container(
        name=DATA_PREP_CONTAINER,
        image=spec.image,
        command=["python", "-m", "workloads.jobs.data_prep"],
        args=[
            "--input",
            source,
            "--output",
            output,
            "--count",
            str(spec.count),
            "--min-chars",
            str(spec.min_chars),
        ],
        env=[EnvVar(name="PYTHONUNBUFFERED", value="1")],
        resources=ResourceRequirements(
            limits={"memory": spec.memory},
            requests={"cpu": spec.cpu, "memory": spec.memory},
        ),
        volume_mounts=[fsx_mount],
        security_context=restricted_container_context(),
    )
    labels = {"app.kubernetes.io/name": spec.name, "app.kubernetes.io/component": "data-prep"}
    job_labels = {"app.kubernetes.io/part-of": "llm-platform"}
    if spec.queue_name:
        job_labels["kueue.x-k8s.io/queue-name"] = spec.queue_name
    job = IndexedJob(
        metadata=ObjectMeta(name=spec.name, namespace=spec.namespace, labels=job_labels),
        spec=IndexedJobSpec(
            completions=spec.count,
            parallelism=min(spec.parallelism or spec.count, spec.count),
            backoff_limit_per_index=spec.backoff_limit_per_index,
            ttl_seconds_after_finished=7 * 24 * 3600,
            suspend=True if spec.queue_name else None,
            template=PodTemplate(
                metadata=ObjectMeta(labels=labels),
                spec=PodSpec(
                    service_account_name=spec.service_account,
                    # Restartable per index and never urgent: it yields to training.
                    priority_class_name="llmp-preemptible",
                    # backoffLimitPerIndex requires Never: the Job, not the kubelet, retries.
                    restart_policy="Never",
                    security_context=non_root_pod_context(spec.run_as_user),
                    containers=[container],
                    volumes=[fsx],
                ),
            ),
        ),
    )
    return job.to_json()


# --- CLI -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.jobs.data_prep", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument("--input", required=True, help="directory or s3://bucket/prefix/")
    parser.add_argument("--output", required=True, help="output directory (FSx)")
    parser.add_argument(
        "--index",
        type=int,
        default=None,
        help="this worker's partition (default: $JOB_COMPLETION_INDEX)",
    )
    parser.add_argument("--count", type=int, required=True, help="number of partitions")
    parser.add_argument("--min-chars", type=int, default=MIN_CHARS)
    parser.add_argument("--shard-tokens", type=int, default=SHARD_TOKENS)
    args = parser.parse_args(argv)
    try:
        index = args.index
        if index is None:
            env = os.environ.get("JOB_COMPLETION_INDEX")
            if env is None or not env.isdigit():
                raise ValueError("no --index and no JOB_COMPLETION_INDEX")
            index = int(env)
        manifest = prepare(
            source=args.input,
            output=args.output,
            index=index,
            count=args.count,
            min_chars=args.min_chars,
            shard_tokens=args.shard_tokens,
        )
    except (ValueError, OSError) as exc:
        print(f"data_prep: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"index": index, "count": args.count, **manifest.stats.model_dump()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
