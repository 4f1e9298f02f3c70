"""Writing a file the user named: atomically, never over a file without --force, and never
over another stack's stack file.

Every command that writes a file (`llmp loadtest --output`, `llmp policy --write-config
--to`, `llmp diff --markdown`, `llmp dr plan --out`, `llmp synth --out`, the stack-file
edits of `llmp promote` and `llmp canary`) writes through `write_file` or `replace_file`:

- atomic: the bytes go to a temporary file in the same directory, which is fsynced and
  then renamed over the target (`os.replace`), and the directory fsynced; a reader, or a
  kill at any instant, sees the old file or the whole new one, never half of it;
- an existing file is refused unless `force` (one line: what, where, and --force);
- a stack file (`Pulumi.NAME.yaml`, the project's `Pulumi.yaml`, or any file whose
  `config:` holds the project's keys) is written only by the command that owns that
  stack (`own_stack`), whatever `force` says: `--force` means "replace what I wrote
  before", never "replace the stack I read from".

Refusals are `FileRefused` (bad input, exit 2).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

from llmp.errors import BadInput

__all__ = ["FileRefused", "refuse", "replace_file", "stack_of_file", "write_file"]

_STACK_FILE = re.compile(r"^Pulumi\.(?P<stack>.+)\.ya?ml$")
_PROJECT_FILE = ("Pulumi.yaml", "Pulumi.yml")
_SNIFF_BYTES = 256 * 1024
"""How much of an existing file is read to tell whether it is a stack file."""


class FileRefused(BadInput):
    """A file the user named is not written: one line, exit 2."""


def _project_keys_in(path: Path) -> bool:
    """Whether the file at `path` reads as a stack file of this project (its `config:`
    sets `llm-platform:` keys), whatever its name."""
    from llmp.stacks import PROJECT

    try:
        with path.open("rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError:
        return False
    # A top-level `config:` setting keys of the project: a stack file, not a Kubernetes
    # object (whose top-level keys are apiVersion, kind, metadata, ...).
    key = rb"(?m)^[ \t]+[\"']?" + re.escape(PROJECT.encode()) + rb":"
    return re.search(rb"(?m)^config:", head) is not None and re.search(key, head) is not None


def stack_of_file(path: Path) -> str | None:
    """The stack whose stack file `path` is (`*` for the project file or a stack file
    whose name does not say whose it is), or None when it is no stack file."""
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):
        resolved = path
    for candidate in (path, resolved):
        if candidate.name in _PROJECT_FILE:
            return "*"
        m = _STACK_FILE.match(candidate.name)
        if m:
            return m.group("stack")
    if resolved.is_file() and _project_keys_in(resolved):
        return "*"
    return None


def refuse(path: Path, *, force: bool, what: str, own_stack: str | None = None) -> None:
    """FileRefused when `path` may not be written: another stack's stack file (always),
    a directory, or an existing file without `force`. `what` names it as the user gave
    it (`--output`, `--to`)."""
    owner = stack_of_file(path)
    if owner is not None and owner != own_stack:
        whose = "a stack file" if owner == "*" else f"{owner}'s stack file"
        raise FileRefused(f"{what} {path} is {whose}: never overwritten, even with --force")
    if path.is_dir():
        raise FileRefused(f"{what} {path}: a directory; name a file")
    if not force and (path.exists() or path.is_symlink()):
        raise FileRefused(f"{what} {path} exists; pass --force to overwrite it")


def _atomic_write(path: Path, data: bytes) -> None:
    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # not every file system lets a directory be fsynced
        dfd = os.open(parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _data(content: str | bytes) -> bytes:
    return content.encode() if isinstance(content, str) else content


def write_file(
    path: Path,
    content: str | bytes,
    *,
    force: bool,
    what: str,
    own_stack: str | None = None,
) -> Path:
    """Write a file the user named (`refuse` first, then atomically); FileRefused, or
    BadInput for a file that cannot be written."""
    refuse(path, force=force, what=what, own_stack=own_stack)
    try:
        _atomic_write(path, _data(content))
    except OSError as exc:
        raise BadInput(f"{what} {path}: cannot write it: {exc.strerror or exc}") from None
    return path


def replace_file(path: Path, content: str | bytes, *, stack: str) -> Path:
    """Replace the stack file of `stack` that a command edits (`llmp promote`, `llmp
    canary`) atomically: a kill leaves the old file or the new one, never half. `path` is
    the file the command read `stack` from (stacks/Pulumi.STACK.yaml or --config FILE)."""
    if path.is_dir():
        raise FileRefused(f"stack file {path} of {stack}: a directory")
    try:
        _atomic_write(path, _data(content))
    except OSError as exc:
        raise BadInput(f"cannot write {path}: {exc.strerror or exc}") from None
    return path
