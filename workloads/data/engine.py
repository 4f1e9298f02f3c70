"""What both data pipelines' command lines share: their config file and their Ray.

- `load_config(path, model)`: a YAML or JSON file (the RayJob mounts `pipeline.json` from
  its ConfigMap) validated by the pipeline's pydantic model, every mistake one line that
  names the file, the key path and what is wrong (`cfg.yaml: video.fsp: unknown key (got
  2)`), never a traceback.
- `connect(address)`: inside a KubeRay RayJob the submitter sets RAY_ADDRESS and the
  driver joins that cluster; `--address` names one explicitly; without either a local Ray
  starts (a laptop, the tests). An already started Ray (a test session's) is used as it is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

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


def connect(address: str | None = None) -> None:
    """Join the Ray cluster at `address` or $RAY_ADDRESS, else start a local one."""
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(include_dashboard=False, log_to_driver=False)
