"""Reading a data pipeline's config: one line on a bad value (what, where), for `llmp job`
before it submits and for the pipeline when it starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

if TYPE_CHECKING:
    pass


M = TypeVar("M", bound=BaseModel)


class PipelineConfigError(ValueError):
    """A pipeline config that cannot be used: one line."""


def one_line(err: ValidationError, source: str) -> str:
    """pydantic's errors as `source: key.path: what (got value)`, joined by `; `."""
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
        lines.append(f"{source}: {where}: {msg.removeprefix('Value error, ')}"[:240])
        if "input" in e and not isinstance(e["input"], dict):
            lines[-1] += f" (got {e['input']!r})"[:60]
    return "; ".join(lines)


def parse_config(data: Any, model: type[M], source: str = "config") -> M:
    """A mapping validated by `model` (an empty document is all defaults)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PipelineConfigError(
            f"{source}: expected a mapping of {model.__name__} keys, got {type(data).__name__}"
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise PipelineConfigError(one_line(exc, source)) from None


def load_config(path: str | Path, model: type[M]) -> M:
    """The `.yaml`/`.yml`/`.json` file at `path`, validated by `model`."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise PipelineConfigError(
            f"{file}: cannot read the config file ({exc.strerror or exc})"
        ) from None
    try:
        data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        kind = "JSON" if file.suffix == ".json" else "YAML"
        raise PipelineConfigError(f"{file}: not valid {kind}: {first}") from None
    return parse_config(data, model, str(file))
