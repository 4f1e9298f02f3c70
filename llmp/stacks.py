"""The repository's stack files: where they are, what names a stack may take, and a stack's
validated config read without running the program (no Pulumi: `llmp job` and `llmp dr`
read stacks through here, the mock engine in `llmp.plan.synth` runs them).
"""

from __future__ import annotations

import re
from pathlib import Path

from llmp.errors import BadInput
from spec.platform import PlatformConfig
from spec.stackfile import load_config

PROJECT = "llm-platform"


REPO_ROOT = Path(__file__).resolve().parents[1]


PROGRAM_DIR = REPO_ROOT / "program"


STACKS_DIR = REPO_ROOT / "stacks"


class StackNotFound(BadInput):
    """No stack file for the named stack (`missing_file`), or a name that is not a stack's."""

    def __init__(self, message: str, missing_file: bool = False):
        super().__init__(message)
        self.missing_file = missing_file


def stack_file(stack: str) -> Path:
    return STACKS_DIR / f"Pulumi.{stack}.yaml"


_STACK_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}")


def stack_name_problem(stack: str) -> str | None:
    """Why `stack` is not a stack name (one line), or None when it is one.

    The name becomes a file name (stacks/Pulumi.STACK.yaml, out/STACK/, a path
    inside a git revision): no paths.
    """
    if _STACK_NAME.fullmatch(stack):
        return None
    return f"not a stack name: {stack!r}; stack names take letters, digits, '-', '_' and '.'"


def stack_path(stack: str, config_file: Path | None = None, *, hint: bool = False) -> Path:
    """The stack file of `stack` (or `config_file`), which must exist: StackNotFound for a
    name that is not a stack's or has no file (`hint`: saying that --config names another)."""
    problem = stack_name_problem(stack)
    if problem is not None:
        raise StackNotFound(problem)
    path = config_file or stack_file(stack)
    try:
        exists = path.exists()
    except (OSError, ValueError):
        exists = False
    if not exists:
        known = sorted(p.name.split(".")[1] for p in STACKS_DIR.glob("Pulumi.*.yaml"))
        shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
        more = " (or pass --config FILE)" if hint else ""
        raise StackNotFound(
            f"no stack file {shown}; known stacks: {', '.join(known)}{more}", missing_file=True
        )
    return path


def load_stack(stack: str, config_file: Path | None = None) -> PlatformConfig:
    """The stack file's validated config (`config_file`'s, when given), without running the
    program: StackNotFound, or ConfigError for a file that cannot be read or holds bad
    config."""
    from spec.stackfile import load_stack_file

    path = stack_path(stack, config_file, hint=config_file is None)
    return load_config(load_stack_file(str(path)))
