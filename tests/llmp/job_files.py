"""Job files changed for a test: a copy of an example with some keys changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def job_file(tmp_path: Path, base: Path, **changes: Any) -> str:
    """A copy of `base` with keys changed: `a__b` is `a.b` (None removes the key)."""
    raw = yaml.safe_load(base.read_text())
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        at = raw
        for key in parents:
            at = at.setdefault(key, {})
        if value is None:
            at.pop(leaf, None)
        else:
            at[leaf] = value
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(path)
