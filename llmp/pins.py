"""Every pin of the project, with the day it was last verified and how old that is.

Two kinds of pins:

- the catalog's (spec/catalog.yaml): charts, images, add-on builds, manifests. Each
  carries a `verified` record (against what it was checked, where, and the day), and
  the pinned value sits beside it: `version` (or a manifest's `ref`, a CRD file's `url`)
  next to `verified`, `X` or `X_image` next to `X_verified`;
- the Python requirements files (requirements*.txt, images/*/requirements*.txt): every
  `name==version` line, verified on the day the file's `# pins checked against PyPI:
  YYYY-MM-DD` line names (one per file: whoever re-checks the file's pins moves it).

`llmp pins` lists them and fails when one was last verified longer ago than a threshold,
so a repository that stops re-checking its pins hears about it in CI.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from spec.catalog import Catalog, Verified

DEFAULT_MAX_AGE_DAYS = 180
"""A pin verified longer ago than this is stale: its upstream has very likely moved."""

REQUIREMENTS_GLOBS = ("requirements*.txt", "images/*/requirements*.txt")
CHECKED_LINE = re.compile(r"^#\s*pins checked against PyPI:\s*(\d{4}-\d{2}-\d{2})\b", re.M)
_PINNED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")


@dataclass(frozen=True)
class Pin:
    """One pinned version and the evidence for it."""

    key: str
    """Where it is pinned: a catalog path (`addon_charts.kueue`) or `FILE:package`."""
    version: str
    against: str
    where: str
    checked: datetime.date | None
    """None: the pin names no day it was verified (a requirements file without its line)."""

    def age_days(self, today: datetime.date) -> int | None:
        return None if self.checked is None else (today - self.checked).days

    def stale(self, today: datetime.date, max_age_days: int) -> bool:
        age = self.age_days(today)
        return age is None or age > max_age_days

    def to_dict(self, today: datetime.date) -> dict[str, Any]:
        return {
            "key": self.key,
            "version": self.version,
            "against": self.against,
            "where": self.where,
            "checked": self.checked.isoformat() if self.checked else None,
            "age_days": self.age_days(today),
        }


def _pinned_value(parent: Any, field: str) -> str:
    """The value a `verified` field vouches for, read beside it on `parent`."""
    if field == "verified":
        names = ["version", "ref", "url"]
    else:
        stem = field.removesuffix("_verified")
        names = [stem, f"{stem}_image"]
    for name in names:
        value = _get(parent, name)
        if isinstance(value, str) and value:
            return value
    raise ValueError(f"{field} names no pinned value beside it (looked for {', '.join(names)})")


def _get(parent: Any, name: str) -> Any:
    if isinstance(parent, Mapping):
        return parent.get(name)
    return getattr(parent, name, None)


def _walk(node: Any, path: str) -> Iterator[tuple[str, Any, str, Verified]]:
    """(path of the parent, the parent, the field's name, the Verified) for every record."""
    if isinstance(node, BaseModel):
        items: list[tuple[str, Any]] = [(k, getattr(node, k)) for k in type(node).model_fields]
    elif isinstance(node, Mapping):
        items = [(str(k), v) for k, v in node.items()]
    elif isinstance(node, list | tuple):
        items = [(str(i), v) for i, v in enumerate(node)]
    else:
        return
    for name, value in items:
        if isinstance(value, Verified):
            yield path, node, name, value
        else:
            yield from _walk(value, f"{path}.{name}" if path else name)


def catalog_pins(catalog: Catalog) -> list[Pin]:
    """Every pin of the catalog with its `verified` record, in the catalog's order."""
    pins = []
    for path, parent, field, verified in _walk(catalog, ""):
        key = path if field == "verified" else f"{path}.{field.removesuffix('_verified')}"
        pins.append(
            Pin(
                key=key,
                version=_pinned_value(parent, field),
                against=verified.against,
                where=verified.where,
                checked=verified.checked,
            )
        )
    return pins


def requirement_pins(root: Path) -> list[Pin]:
    """Every `name==version` of the requirements files under `root`, dated by the file's
    `# pins checked against PyPI:` line."""
    pins = []
    files = sorted({p for pattern in REQUIREMENTS_GLOBS for p in root.glob(pattern)})
    for path in files:
        text = path.read_text(encoding="utf-8")
        dates = CHECKED_LINE.findall(text)
        if len(dates) > 1:
            raise ValueError(
                f"{path.relative_to(root)}: {len(dates)} 'pins checked' lines; keep one"
            )
        checked = datetime.date.fromisoformat(dates[0]) if dates else None
        rel = path.relative_to(root).as_posix()
        for line in text.splitlines():
            match = _PINNED.match(line.strip())
            if match:
                pins.append(
                    Pin(
                        key=f"{rel}:{match.group(1)}",
                        version=match.group(3),
                        against="PyPI",
                        where=rel,
                        checked=checked,
                    )
                )
    return pins


def all_pins(catalog: Catalog, root: Path) -> list[Pin]:
    return [*catalog_pins(catalog), *requirement_pins(root)]


def stale(pins: list[Pin], today: datetime.date, max_age_days: int) -> list[Pin]:
    return [p for p in pins if p.stale(today, max_age_days)]
