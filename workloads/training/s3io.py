"""Training straight from S3: pull a restore point, read token shards lazily.

A training restart after a disaster need not wait for the file system's data
repository associations (the longest part of a recovery, `llmp dr plan`): the
trainer can take both things it reads from the replicated buckets itself.

- **The restore point** (`pull_restore_point`, `train.py --restore-from`): the
  newest checkpoint under an S3 prefix that is complete by the trainer's own rule
  (`restore.find_restore_point`, the rule `llmp dr restore-point` applies) is
  downloaded into the checkpoint root as `tmp-step-N`, checked against its
  manifest, sealed with `COMPLETE` and renamed to `step-N`, then `latest` is
  replaced: the same protocol as a save, so a pull killed half-way leaves a
  `tmp-*` directory that is never read, and the resume that follows is the
  ordinary one. Nothing is pulled when the root already holds a complete
  checkpoint at least as new.
- **Token shards** (`S3Shard`, a `data.path` of `s3://bucket/prefix/`): the
  shards are listed (names and sizes; a `.npy` header is a ranged GET of its
  first bytes), and each is downloaded whole into a local cache the first time
  a sample falls in it, then memory-mapped. A rank fetches only the shards its
  samples touch; a shard already cached (same size) is not fetched again.

The client is boto3's default: credentials from the pod's identity, the
endpoint from `AWS_ENDPOINT_URL` when set (what the tests point at a local
moto server).
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from contracts.checkpoints import COMPLETE, LATEST, MANIFEST, judge_checkpoint
from contracts.uri import S3_SCHEME, S3Error, is_s3, split_uri


def client() -> Any:
    """A boto3 S3 client with the default credential chain and endpoint."""
    try:
        import boto3
    except ImportError:
        raise S3Error("reading from S3 needs boto3 (pip install boto3)") from None
    return boto3.client("s3")


def classify(exc: Exception, bucket: str) -> tuple[bool, str] | None:
    """(the caller's input is at fault, one line) for a boto3 error, None for another error.

    Bad input: no credentials, an endpoint that cannot be reached, no such bucket, access
    denied; anything else S3 answered is a failure of the operation (its code and message).
    """
    from botocore import exceptions as boto

    if isinstance(exc, boto.NoCredentialsError):
        return True, "no AWS credentials"
    if isinstance(exc, boto.EndpointConnectionError | boto.ConnectTimeoutError):
        return True, f"cannot reach the endpoint: {exc}"
    if isinstance(exc, boto.ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        if code in ("NoSuchBucket", "404"):
            return True, f"no bucket {bucket}"
        if code in ("AccessDenied", "403"):
            return True, f"s3://{bucket}: access denied ({exc})"
        return False, f"{code or '?'} {err.get('Message', '')}".rstrip()
    if isinstance(exc, boto.BotoCoreError):
        return False, str(exc)
    return None


def _call(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        bucket = what[len(S3_SCHEME) :].partition("/")[0] if is_s3(what) else what
        found = classify(e, bucket)
        if found is None:
            raise
        raise S3Error(f"{what}: {found[1]}") from None


# --------------------------------------------------------------------------- restore point


@dataclass(frozen=True)
class Pulled:
    """What `pull_restore_point` did: the step now complete locally, and how."""

    step: int | None
    action: str
    """`pulled`, `already local` (a complete checkpoint at least as new is there) or
    `nothing to pull` (no complete checkpoint under the prefix)."""
    files: int = 0
    bytes: int = 0
    source: str = ""


def pull_restore_point(s3: Any, uri: str, root: str | Path, *, workers: int = 16) -> Pulled:
    """Make the newest complete checkpoint under `uri` a published checkpoint in `root`."""
    from contracts.restore import find_restore_point
    from workloads.training.checkpointing import select_resume, swap_in, tag, tmp_tag

    bucket, prefix = split_uri(uri)
    root = Path(root)
    point = _call(f"s3://{bucket}/{prefix}", find_restore_point, s3, bucket, prefix)
    chosen = point.chosen
    local = select_resume(root, recover_aside=True)
    if chosen is None or chosen.step is None:
        step = local.step if local else None
        return Pulled(step, "nothing to pull", source=f"s3://{bucket}/{prefix}")
    if local is not None and local.step >= chosen.step:
        return Pulled(local.step, "already local", source=chosen.uri)
    step = chosen.step
    key_prefix = f"{prefix}{chosen.tag}/"
    tmp = root / tmp_tag(step)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    keys = [
        (key, size)
        for key, size in _list(s3, bucket, key_prefix)
        if key[len(key_prefix) :] != COMPLETE  # sealed last, here, after the check
    ]

    def fetch(item: tuple[str, int]) -> None:
        key, _ = item
        dest = tmp / key[len(key_prefix) :]
        dest.parent.mkdir(parents=True, exist_ok=True)
        _call(f"s3://{bucket}/{key}", s3.download_file, bucket, key, str(dest))

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(fetch, keys))
    problem = _mismatch(tmp)
    if problem is not None:
        raise S3Error(f"{chosen.uri}: the pulled copy is not intact: {problem}")
    (tmp / COMPLETE).write_bytes(b"")
    final = root / tag(step)
    swap_in(tmp, final)  # the local step-N (damaged, or it would have won) aside, then gone
    latest = root / f".{LATEST}.tmp"
    latest.write_text(tag(step))
    os.replace(latest, root / LATEST)
    total = sum(size for _, size in keys)
    return Pulled(step, "pulled", len(keys), total, chosen.uri)


def _mismatch(path: Path) -> str | None:
    """Why the files under `path` do not match its manifest, or None when they do
    (the completeness rule, with the marker taken as given: it is what is decided)."""

    def size_of(rel: str) -> int | None:
        try:
            return (path / rel).stat().st_size
        except (OSError, ValueError):
            return None

    verdict = judge_checkpoint(
        path.name.removeprefix("tmp-"),
        has_marker=True,
        read_manifest=(path / MANIFEST).read_bytes,
        size_of=size_of,
    )
    return None if verdict.complete else str(verdict.reason)


def _list(s3: Any, bucket: str, prefix: str) -> list[tuple[str, int]]:
    paginator = s3.get_paginator("list_objects_v2")
    out: list[tuple[str, int]] = []
    where = f"s3://{bucket}/{prefix}"
    pages = _call(where, lambda: list(paginator.paginate(Bucket=bucket, Prefix=prefix)))
    for page in pages:
        out.extend((o["Key"], int(o["Size"])) for o in page.get("Contents", []))
    return out


# --------------------------------------------------------------------------- shards


class S3Shard:
    """One token shard in S3, downloaded into `cache` on first access, then memory-mapped.

    Behaves as the 1-D array `TokenShards` reads: `len`, `dtype`, `ndim` and slices."""

    def __init__(
        self, s3: Any, bucket: str, key: str, size: int, cache: Path, bin_dtype: str
    ) -> None:
        self._s3, self.bucket, self.key, self.size = s3, bucket, key, size
        self.path = cache / bucket / key
        self._lock = threading.Lock()
        self._array: np.ndarray | None = None
        if key.endswith(".npy"):
            self.dtype, shape, self._offset = self._npy_header()
            if len(shape) != 1:
                raise S3Error(f"s3://{bucket}/{key}: expected a 1-D token array, got {shape}")
            self._len = int(shape[0])
        else:
            self.dtype, self._offset = np.dtype(bin_dtype), 0
            self._len = size // self.dtype.itemsize
        self.ndim = 1

    def _npy_header(self) -> tuple[np.dtype, tuple[int, ...], int]:
        where = f"s3://{self.bucket}/{self.key}"
        head = _call(
            where, self._s3.get_object, Bucket=self.bucket, Key=self.key, Range="bytes=0-4095"
        )["Body"].read()
        buf = io.BytesIO(head)
        try:
            version = np.lib.format.read_magic(buf)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(buf)
            else:
                shape, _, dtype = np.lib.format.read_array_header_2_0(buf)
        except ValueError as e:
            raise S3Error(f"{where}: not a .npy file: {e}") from None
        return np.dtype(dtype), tuple(shape), buf.tell()

    def __len__(self) -> int:
        return self._len

    def _local(self) -> np.ndarray:
        with self._lock:
            if self._array is None:
                if not (self.path.is_file() and self.path.stat().st_size == self.size):
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    # Ranks of every node may fetch one shard at once into a shared cache:
                    # each into its own part file, the last rename wins (same bytes).
                    who = f"{socket.gethostname()}.{os.getpid()}"
                    part = self.path.with_name(f".{self.path.name}.{who}.part")
                    _call(
                        f"s3://{self.bucket}/{self.key}",
                        self._s3.download_file,
                        self.bucket,
                        self.key,
                        str(part),
                    )
                    os.replace(part, self.path)
                self._array = np.memmap(
                    self.path, dtype=self.dtype, mode="r", offset=self._offset, shape=(self._len,)
                )
            return self._array

    def __getitem__(self, index: Any) -> np.ndarray:
        return self._local()[index]


def s3_shards(
    uri: str, suffixes: tuple[str, ...], cache: str | Path, bin_dtype: str, s3: Any = None
) -> list[S3Shard]:
    """The token shards directly under `uri`, in name order, none fetched yet."""
    bucket, prefix = split_uri(uri)
    s3 = s3 or client()
    listed = _list(s3, bucket, prefix)
    found = [
        (key, size)
        for key, size in listed
        if "/" not in key[len(prefix) :] and key.endswith(suffixes)
    ]
    return [S3Shard(s3, bucket, key, size, Path(cache), bin_dtype) for key, size in sorted(found)]
