"""The newest complete checkpoint in a bucket (a replica, after a disaster), by the
trainer's own rule: what `llmp dr restore-point` reports.

The file system's data repository association exports a job's checkpoint
directory `/checkpoints/<job>/step-N/` to `s3://BUCKET/<prefix><job>/step-N/`,
and S3 replication copies those objects to the recovery region, each on its
own schedule. A checkpoint directory in the replica can therefore be partial
in every way the trainer never sees on Lustre: a `COMPLETE` marker without the
shards it seals, a shard still missing or a stale copy of another size, a
`tmp-step-N` exported before the rename. So the choice is made with the
trainer's own rule (`contracts.checkpoints.judge_checkpoint`) on the
objects present, never with the `latest` pointer, which may name a checkpoint
whose objects have not all arrived.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from contracts.checkpoints import (
    COMPLETE,
    LATEST,
    MANIFEST,
    ManifestMissing,
    judge_checkpoint,
    step_of,
)

_STEP_DIR = re.compile(r"(?:^|/)((?:tmp-)?step-\d+)/")


@dataclass(frozen=True)
class Candidate:
    """One checkpoint directory under the prefix and what the rule says of it."""

    tag: str
    step: int | None
    status: str
    """`restore point`, `skipped` (newer, not complete), `older` (not examined)."""
    reason: str
    files: int
    bytes: int
    uri: str


@dataclass
class RestorePoint:
    bucket: str
    prefix: str
    chosen: Candidate | None
    candidates: list[Candidate] = field(default_factory=list)
    """Newest first."""
    latest: str | None = None
    """What the `latest` object says, if there is one (informational: never trusted)."""
    deeper_roots: list[str] = field(default_factory=list)
    """Prefixes further down that hold checkpoints, when none sit right under `prefix`."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "prefix": self.prefix,
            "restore_point": asdict(self.chosen) if self.chosen else None,
            "candidates": [asdict(c) for c in self.candidates],
            "latest": self.latest,
            "deeper_roots": self.deeper_roots,
        }


def normalize_prefix(prefix: str) -> str:
    """A directory prefix: no leading slash, one trailing slash (empty for the bucket root)."""
    prefix = prefix.lstrip("/")
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


def _objects(s3: Any, bucket: str, prefix: str) -> Iterator[tuple[str, int]]:
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            yield obj["Key"], int(obj["Size"])


def find_restore_point(s3: Any, bucket: str, prefix: str = "") -> RestorePoint:
    """The newest complete checkpoint directly under `prefix` in `bucket`.

    `s3` is a boto3 S3 client. Checkpoints newer than the chosen one are listed
    with the reason each is skipped; older ones are listed unexamined. Client
    errors (no such bucket, access denied) propagate.
    """
    prefix = normalize_prefix(prefix)
    dirs: dict[str, dict[str, int]] = {}
    deeper: set[str] = set()
    latest_key = None
    for key, size in _objects(s3, bucket, prefix):
        rel = key[len(prefix) :]
        tag, sep, rest = rel.partition("/")
        if not sep:
            if rel == LATEST:
                latest_key = key
            continue
        if step_of(tag) is not None:
            dirs.setdefault(tag, {})[rest] = size
        elif match := _STEP_DIR.search(rel):
            deeper.add(prefix + rel[: match.start(1)])
    result = RestorePoint(bucket, prefix, None)
    if latest_key is not None:
        body = s3.get_object(Bucket=bucket, Key=latest_key)["Body"].read()
        result.latest = body.decode("utf-8", "replace").strip()[:200]
    if not dirs:
        result.deeper_roots = sorted(deeper)[:10]
    ordered = sorted(dirs, key=lambda t: (step_of(t) or 0, t.startswith("step-")), reverse=True)
    for tag in ordered:
        files = dirs[tag]
        uri = f"s3://{bucket}/{prefix}{tag}/"
        size = sum(v for k, v in files.items() if k not in (MANIFEST, COMPLETE))
        count = len([k for k in files if k not in (MANIFEST, COMPLETE)])
        if result.chosen is not None:
            result.candidates.append(Candidate(tag, step_of(tag), "older", "", count, size, uri))
            continue
        verdict = judge_checkpoint(
            tag,
            has_marker=COMPLETE in files,
            read_manifest=_manifest_reader(s3, bucket, f"{prefix}{tag}/{MANIFEST}", files),
            size_of=files.get,
        )
        status = "restore point" if verdict.complete else "skipped"
        candidate = Candidate(tag, verdict.step, status, verdict.reason, count, size, uri)
        result.candidates.append(candidate)
        if verdict.complete:
            result.chosen = candidate
    return result


def _manifest_reader(s3: Any, bucket: str, key: str, files: dict[str, int]) -> Callable[[], bytes]:
    def read() -> bytes:
        if MANIFEST not in files:
            raise ManifestMissing(key)
        body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        return body

    return read
