"""Where model weights come from: a directory on FSx, or an s3:// prefix copied once per node.

Production points `models.clip` / `models.whisper` at a Hugging Face model directory: on the
FSx for Lustre volume mounted into every Ray worker, or an s3:// prefix. An s3:// prefix is
copied to local disk (`LLMP_MODEL_CACHE`, default /tmp/llmp-models) the first time an actor
on that node needs it, under a file lock, so N actors on one node copy it once and every actor
then loads from local disk with `from_pretrained(local_dir)`. Nothing is ever fetched from the
Hugging Face Hub (`local_files_only=True` everywhere).

`model_digest` is what the manifest records: the sha256 of the model's config and weights
files, so a manifest says exactly which weights produced its embeddings and transcripts.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path
from typing import Any

from workloads.data.engine import filesystem

_DIGESTED = (
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
)
_WEIGHTS = (".safetensors", ".bin")


class ModelPathError(ValueError):
    """A model path that does not hold a Hugging Face model directory."""


def _fs(uri: str) -> tuple[Any, str]:
    """The file system of `uri` (on the driver: its own S3 endpoint, `engine.filesystem`)."""
    return filesystem(uri if "://" in uri else str(Path(uri).resolve()))


def _model_files(uri: str) -> tuple[Any, list[str]]:
    from pyarrow import fs

    filesystem, root = _fs(uri)
    info = filesystem.get_file_info(root)
    if info.type != fs.FileType.Directory:
        raise ModelPathError(f"{uri}: no such model directory")
    names = sorted(
        i.base_name
        for i in filesystem.get_file_info(fs.FileSelector(root, recursive=False))
        if i.type == fs.FileType.File
    )
    if "config.json" not in names:
        raise ModelPathError(f"{uri}: not a Hugging Face model directory (no config.json)")
    if not any(n.endswith(_WEIGHTS) for n in names):
        raise ModelPathError(f"{uri}: no weights in it (*.safetensors or *.bin)")
    return filesystem, [f"{root}/{n}" for n in names]


def check_model_dir(uri: str) -> None:
    """Raise `ModelPathError` (one line) unless `uri` holds config.json and weights."""
    _model_files(uri)


def model_digest(uri: str) -> dict[str, Any]:
    """sha256 of each config and weights file, and one over all of them (name-ordered)."""
    filesystem, paths = _model_files(uri)
    files: dict[str, str] = {}
    for p in paths:
        name = p.rsplit("/", 1)[-1]
        if name not in _DIGESTED and not name.endswith(_WEIGHTS):
            continue
        h = hashlib.sha256()
        with filesystem.open_input_stream(p) as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
        files[name] = h.hexdigest()
    total = hashlib.sha256("".join(f"{n}\0{d}\n" for n, d in files.items()).encode())
    return {"path": uri, "sha256": total.hexdigest(), "files": files}


def local_model_dir(uri: str, endpoint: str | None = None) -> Path:
    """A local directory holding the model: `uri` itself, or its copy on this node's disk;
    `endpoint`: the driver's S3 endpoint (an actor does not have the driver's environment)."""
    if "://" not in uri or uri.startswith("file://"):
        return Path(uri.removeprefix("file://"))
    from pyarrow import fs

    cache = Path(os.environ.get("LLMP_MODEL_CACHE", "/tmp/llmp-models"))
    dest = cache / hashlib.sha256(uri.encode()).hexdigest()[:16]
    done = dest / ".complete"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            src, root = filesystem(uri, endpoint)
            fs.copy_files(root, str(dest), source_filesystem=src)
            done.touch()
    return dest
