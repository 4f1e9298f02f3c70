"""When is a checkpoint complete: one rule for the trainer's resume and for disaster recovery.

A checkpoint directory `step-N` is complete when

1. its name is `step-N` (a `tmp-step-N` is a save in flight, never read);
2. its `COMPLETE` marker exists;
3. its `MANIFEST.json` is a JSON object whose `step` is N and whose `files`
   maps every file of the checkpoint (relative path) to its size in bytes;
4. every file in the manifest exists with exactly that size.

On the file system (`checkpointing.read_complete`) the rename from `tmp-step-N`
already makes 1-2 atomic; 3-4 catch damage after publication (a truncated
copy, a lost OST). In S3 there is no rename: the file system's export and
cross-region replication copy objects one by one and in any order, so a
`COMPLETE` marker can arrive before the shards it seals. There, 3-4 are what
tell a usable restore point from a partial copy (`llmp dr restore-point`).

This module imports nothing heavy (no torch), so the operator's CLI can use it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MANIFEST = "MANIFEST.json"
COMPLETE = "COMPLETE"
LATEST = "latest"
STEP_RE = re.compile(r"^step-(\d+)$")
TMP_RE = re.compile(r"^tmp-step-(\d+)$")


class ManifestMissing(Exception):
    """Raised by a manifest reader when there is no manifest to read."""


@dataclass(frozen=True)
class Verdict:
    """Whether the checkpoint `tag` is complete, and if not, the first reason why not."""

    tag: str
    step: int | None
    complete: bool
    reason: str
    manifest: dict[str, Any] = field(default_factory=dict)


def step_of(tag: str) -> int | None:
    """N of a published `step-N` or an unpublished `tmp-step-N`; None for anything else."""
    match = STEP_RE.match(tag) or TMP_RE.match(tag)
    return int(match.group(1)) if match else None


def judge_checkpoint(
    tag: str,
    *,
    has_marker: bool,
    read_manifest: Callable[[], bytes | str],
    size_of: Callable[[str], int | None],
) -> Verdict:
    """Apply the completeness rule to one checkpoint, wherever its files live.

    `read_manifest()` returns the manifest's bytes (raising ManifestMissing, OSError
    or KeyError when there is none); `size_of(rel)` is the size of the checkpoint's
    file `rel`, or None when it does not exist. Never raises for bad content.
    """
    published = STEP_RE.match(tag)
    step = step_of(tag)
    if not published:
        if TMP_RE.match(tag):
            return Verdict(tag, step, False, "temporary (tmp-step-N): the save never published")
        return Verdict(tag, None, False, "not a checkpoint name (step-N)")
    if not has_marker:
        return Verdict(
            tag, step, False, f"no {COMPLETE} marker: unsealed, or the marker has not arrived"
        )
    try:
        manifest = json.loads(read_manifest())
    except (ManifestMissing, OSError, KeyError):
        return Verdict(tag, step, False, f"no {MANIFEST}")
    except (ValueError, RecursionError):
        return Verdict(tag, step, False, f"{MANIFEST} is not JSON")
    if not isinstance(manifest, dict):
        return Verdict(tag, step, False, f"{MANIFEST} is not a JSON object")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(size, int) and not isinstance(size, bool) for size in files.values()
    ):
        return Verdict(tag, step, False, f"{MANIFEST} has no `files` map of path to size")
    try:
        recorded = int(manifest["step"])
    except (KeyError, TypeError, ValueError):
        return Verdict(tag, step, False, f"{MANIFEST} has no step")
    if recorded != step:
        return Verdict(tag, step, False, f"{MANIFEST} is of step {recorded}, not {step}")
    for rel, size in files.items():
        actual = size_of(rel)
        if actual is None:
            return Verdict(tag, step, False, f"{rel} is missing ({size} bytes in the manifest)")
        if actual != size:
            return Verdict(tag, step, False, f"{rel} is {actual} bytes; the manifest says {size}")
    return Verdict(tag, step, True, f"complete: {len(files)} files", manifest)
