"""Crash-safe checkpoints on a shared file system (FSx for Lustre).

Layout under the checkpoint root::

    tmp-step-N/          being written (any number of ranks, any state)
    step-N/              published: MANIFEST.json (every file and its size), COMPLETE
    universal-step-N/    step-N converted for a resume at another world size
    latest               text: the tag of the newest published checkpoint

Protocol: every rank writes its DeepSpeed shards under `tmp-step-N`; once *all*
ranks report their writes durable (a collective), rank 0 lists the files into
the manifest, writes `COMPLETE` last, renames the directory to `step-N` and
only then replaces `latest` (temp file + `os.replace`). A job killed at any
instant leaves either a `tmp-*` directory, which is never read, or a complete
`step-N`. Resume does not trust `latest` alone: it takes the newest `step-N`
whose marker exists and whose files match the manifest sizes, which also
rejects a checkpoint damaged after publication (truncated copy, lost OST).
That rule is `completeness.judge_checkpoint`, shared with `llmp dr
restore-point`, which applies it to the checkpoints' replicas in S3.

Asynchronous saves: DeepSpeed writes through a pluggable checkpoint engine.
`AsyncCheckpointEngine` snapshots each state dict to host memory (a copy of
the tensors, which is what the training loop waits for) and writes it from a
background thread, so training resumes while the bytes go to disk. DeepSpeed's
own decoupled engine needs its FastPersist/AIO ops and an accelerator; this
one works on CPU and GPU alike.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

from workloads.training.completeness import (
    COMPLETE,
    LATEST,
    MANIFEST,
    STEP_RE,
    TMP_RE,
    Verdict,
    judge_checkpoint,
)

_UNI_RE = re.compile(r"^universal-step-(\d+)$")


def tag(step: int) -> str:
    return f"step-{step}"


def tmp_tag(step: int) -> str:
    return f"tmp-step-{step}"


def universal_tag(step: int) -> str:
    return f"universal-step-{step}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durable(path: Path, data: bytes) -> None:
    """Write `path` atomically: a reader sees the old content or all of the new one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _files(root: Path) -> dict[str, int]:
    return {
        str(p.relative_to(root)): p.stat().st_size
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in (MANIFEST, COMPLETE)
    }


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path
    meta: dict[str, Any]

    @property
    def tag(self) -> str:
        return self.path.name

    @property
    def world_size(self) -> int:
        return int(self.meta["world_size"])


def judge(path: Path) -> Verdict:
    """The completeness rule (`completeness.judge_checkpoint`) applied to a directory."""

    def size_of(rel: str) -> int | None:
        try:
            return (path / rel).stat().st_size
        except (OSError, ValueError):
            return None

    return judge_checkpoint(
        path.name,
        has_marker=(path / COMPLETE).is_file(),
        read_manifest=(path / MANIFEST).read_bytes,
        size_of=size_of,
    )


def read_complete(path: Path) -> Checkpoint | None:
    """The checkpoint at `path` if it is complete and intact, else None (never raises)."""
    verdict = judge(path)
    if not verdict.complete or verdict.step is None:
        return None
    return Checkpoint(verdict.step, path, verdict.manifest)


def complete_checkpoints(root: str | Path) -> list[Checkpoint]:
    """Complete checkpoints under `root`, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = (read_complete(p) for p in root.iterdir() if p.is_dir())
    return sorted((c for c in found if c is not None), key=lambda c: c.step)


def select_resume(root: str | Path) -> Checkpoint | None:
    """The newest complete checkpoint; partial or damaged ones are skipped, not fatal."""
    found = complete_checkpoints(root)
    return found[-1] if found else None


def publish(root: str | Path, step: int, meta: dict[str, Any]) -> Checkpoint:
    """Rank 0, after every rank's writes to `tmp-step-N` are durable: seal and publish it."""
    root = Path(root)
    tmp, final = root / tmp_tag(step), root / tag(step)
    files = _files(tmp)
    for rel in files:  # shards were fsynced by their writers; the directories were not
        _fsync_dir((tmp / rel).parent)
    manifest = {
        **meta,
        "step": step,
        "files": files,
        "bytes": sum(files.values()),
        "time": time.time(),
    }
    _write_durable(tmp / MANIFEST, json.dumps(manifest, indent=1).encode())
    _write_durable(tmp / COMPLETE, b"")
    if final.exists():  # a re-save of the same step (e.g. SIGTERM right after an interval save)
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    _write_durable(root / LATEST, tag(step).encode())
    return Checkpoint(step, final, manifest)


def prune(root: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` complete checkpoints, their universal
    conversions, and partial directories older than the newest complete one.

    Only call when no save is in flight (rank 0 right after `publish`), so a
    `tmp-*` being written is never mistaken for a leftover.
    """
    root = Path(root)
    done = complete_checkpoints(root)
    keep = {c.step for c in done[-keep_last:]}
    newest = max(keep, default=-1)
    removed = []
    for p in root.iterdir():
        if not p.is_dir():
            continue
        m_step, m_tmp, m_uni = STEP_RE.match(p.name), TMP_RE.match(p.name), _UNI_RE.match(p.name)
        stale = (
            (m_step and int(m_step.group(1)) not in keep and int(m_step.group(1)) < newest)
            or (m_tmp and int(m_tmp.group(1)) <= newest)
            or (m_uni and int(m_uni.group(1)) not in keep)
        )
        if stale:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def to_universal(ckpt: Checkpoint) -> str:
    """Convert `ckpt` with DeepSpeed's `ds_to_universal` (once; cached beside it) and
    return the tag to load with `checkpoint.load_universal`.

    Universal checkpoints store each parameter (and its Adam moments) whole, so any
    world size and ZeRO stage can re-partition them; this is DeepSpeed's supported
    path for elastic resume. The output is built under a temporary name and renamed,
    so a crash mid-conversion is simply redone.
    """
    from deepspeed.checkpoint import ds_to_universal

    root = ckpt.path.parent
    out = root / universal_tag(ckpt.step)
    if (out / COMPLETE).is_file():
        return out.name
    tmp = root / f"tmp-{out.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    args = argparse.Namespace(
        input_folder=str(ckpt.path),
        output_folder=str(tmp),
        num_extract_workers=1,
        num_merge_workers=1,
        keep_temp_folder=False,
        strict=True,
        inject_missing_state=True,
    )
    ds_to_universal.main(args)
    _write_durable(tmp / COMPLETE, b"")
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    _fsync_dir(root)
    return out.name


def snapshot(obj: Any) -> Any:
    """A deep copy whose tensors live in host memory: what must be frozen before training
    may mutate the originals again. A tensor referenced twice is copied once."""
    memo: dict[int, Any] = {}

    def copy_tensor(t: torch.Tensor) -> torch.Tensor:
        if t.device.type == "cpu":
            return t.detach().clone()
        return t.detach().to("cpu", non_blocking=False)

    def walk(o: Any) -> Any:
        if isinstance(o, torch.Tensor):
            key = id(o)
            if key not in memo:
                memo[key] = copy_tensor(o)
            return memo[key]
        # Exact types only: subclasses (OrderedDict, torch.Size, named tuples) must keep
        # their type for whoever loads the file, so they go through deepcopy below.
        if type(o) is dict:
            return {k: walk(v) for k, v in o.items()}
        if type(o) is list:
            return [walk(v) for v in o]
        if type(o) is tuple:
            return tuple(walk(v) for v in o)
        if isinstance(o, dict) and not any(isinstance(v, torch.Tensor) for v in o.values()):
            return copy.deepcopy(o)
        if isinstance(o, dict):  # OrderedDict of tensors (module state dicts)
            d = copy.copy(o)
            for k, v in o.items():
                d[k] = walk(v)
            return d
        return copy.deepcopy(o)

    return walk(obj)


def _save_durable(state: Any, path: str) -> None:
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())


class SyncCheckpointEngine(TorchCheckpointEngine):
    """DeepSpeed's torch engine plus fsync: a shard counts as written only once durable."""

    def save(self, state_dict: Any, path: str) -> None:
        _save_durable(state_dict, path)


class AsyncCheckpointEngine(TorchCheckpointEngine):
    """Snapshot on the training thread, write on a background thread.

    `pending()` tells the loop whether this rank's writes are still running;
    `wait()` blocks until they are done and re-raises a write error, so a failed
    write can never be published.
    """

    def __init__(self, config_params: Any = None) -> None:
        super().__init__(config_params)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-writer")
        self._futures: list[Future[None]] = []
        self._lock = threading.Lock()

    def save(self, state_dict: Any, path: str) -> None:
        frozen = snapshot(state_dict)
        with self._lock:
            self._futures.append(self._pool.submit(_save_durable, frozen, path))

    def preserves_storage_sharing(self) -> bool:
        # False tells DeepSpeed to skip its own clone before save(): `snapshot` already makes
        # compact copies, and a second copy would double the stall.
        return False

    def pending(self) -> bool:
        with self._lock:
            return any(not f.done() for f in self._futures)

    def wait(self) -> None:
        with self._lock:
            futures, self._futures = self._futures, []
        for f in futures:
            f.result()

    def cleanup(self) -> None:
        self.wait()
        self._pool.shutdown(wait=True)
