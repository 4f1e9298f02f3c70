"""Thresholds, the pass/fail gate over evaluation results, and the results table.

A thresholds file (YAML) says what a model must reach to pass:

    max_perplexity: 40           # held-out token shards (--heldout); lower is better
    tasks:                       # minimums: higher is better (acc, exact_match, ...)
      llmp_arith: {acc: 0.5, acc_norm: 0.5}
    tasks_max:                   # maximums: lower is better (perplexities, bits)
      llmp_heldout_text: {word_perplexity: 200, bits_per_byte: 1.2}

Minimums and maximums live in two maps, not in a naming convention on the metric
(a `max_` prefix), because metric names are lm-eval's and a task may define any
name; the direction is then stated where the number is, and a typo in it is an
unknown key, which the schema rejects, rather than a silently inverted test.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from spec import readers
from spec.errors import validation_line

Results = Mapping[str, Mapping[str, float]]


class ThresholdsError(ValueError):
    """A thresholds file that cannot be read or does not match the schema (one line)."""


def _check_limits(value: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    for task, metrics in value.items():
        if not metrics:
            raise ValueError(f"task {task!r} names no metric")
        for metric, limit in metrics.items():
            if not math.isfinite(limit):
                raise ValueError(f"{task}.{metric} is {limit}; expected a finite number")
    return value


class Thresholds(BaseModel):
    """What a model must reach. Every limit is inclusive: equal to the limit passes."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    max_perplexity: float | None = None
    tasks: dict[str, dict[str, float]] = {}
    tasks_max: dict[str, dict[str, float]] = {}

    @field_validator("max_perplexity")
    @classmethod
    def _perplexity_is_a_perplexity(cls, v: float | None) -> float | None:
        if v is not None and not (math.isfinite(v) and v >= 1.0):
            raise ValueError(f"is {v}; a perplexity is a finite number >= 1")
        return v

    @field_validator("tasks", "tasks_max")
    @classmethod
    def _finite(cls, v: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        return _check_limits(v)

    def task_names(self) -> list[str]:
        """Every task a limit is set for, sorted."""
        return sorted({*self.tasks, *self.tasks_max})


def load_thresholds(path: str | Path) -> Thresholds:
    """Parse a thresholds YAML file; every failure is a one-line ThresholdsError."""
    p = Path(path)
    try:
        raw: Any = readers.parse_yaml(readers.read_text(p), str(p))
    except readers.ReadError as e:  # size, UTF-8, YAML, depth, numbers, aliases, duplicates
        raise ThresholdsError(str(e)) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ThresholdsError(
            f"{p}: expected a mapping (max_perplexity, tasks, tasks_max), got {type(raw).__name__}"
        )
    try:
        return Thresholds.model_validate(raw)
    except ValidationError as e:
        raise ThresholdsError(f"{p}: {validation_line(e)}") from None


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _perplexity_reasons(perplexity: float | None, limit: float | None) -> list[str]:
    if perplexity is None:
        return (
            []
            if limit is None
            else [f"held-out perplexity was not measured; max_perplexity {_fmt(limit)} needs it"]
        )
    if not math.isfinite(perplexity):
        return [f"held-out perplexity is {perplexity}"]
    if limit is not None and perplexity > limit:
        return [f"held-out perplexity {_fmt(perplexity)} exceeds the maximum {_fmt(limit)}"]
    return []


def _limit_reasons(results: Results, limits: dict[str, dict[str, float]], lower: bool) -> list[str]:
    reasons = []
    for task in sorted(limits):
        for metric in sorted(limits[task]):
            limit = limits[task][metric]
            value = results.get(task, {}).get(metric)
            name = f"{task} {metric}"
            if value is None:
                got = "task was not evaluated" if task not in results else "metric is missing"
                reasons.append(f"{name}: {got}")
            elif not math.isfinite(value):
                continue  # reported once, by _non_finite_reasons
            elif lower and value > limit:
                reasons.append(f"{name} {_fmt(value)} exceeds the maximum {_fmt(limit)}")
            elif not lower and value < limit:
                reasons.append(f"{name} {_fmt(value)} is below the minimum {_fmt(limit)}")
    return reasons


def _non_finite_reasons(results: Results) -> list[str]:
    return [
        f"{task} {metric} is {value}"
        for task in sorted(results)
        for metric, value in sorted(results[task].items())
        if not math.isfinite(value)
    ]


def gate(results: Results, perplexity: float | None, thresholds: Thresholds) -> list[str]:
    """Why the model fails, in a stable order; empty when it passes.

    Fails: a limit not met; a limited task or metric missing from `results`; a
    `max_perplexity` without a measured perplexity; and any NaN or infinite value,
    limited or not (it means the evaluation or the model is broken, never a pass).
    """
    return [
        *_perplexity_reasons(perplexity, thresholds.max_perplexity),
        *_non_finite_reasons(results),
        *_limit_reasons(results, thresholds.tasks, lower=False),
        *_limit_reasons(results, thresholds.tasks_max, lower=True),
    ]


# results_table: task 34 + metric 24 + value 14 + two 2-space gaps = 76 columns.
_TASK_W, _METRIC_W, _VALUE_W = 34, 24, 14


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _value(v: float) -> str:
    if not math.isfinite(v):
        return str(v)
    return f"{v:.4f}" if abs(v) < 1e6 else f"{v:.4e}"


def results_table(results: Results) -> str:
    """Plain-text table, one metric a row, sorted by task then metric; no line > 80."""
    header = f"{'task':<{_TASK_W}}  {'metric':<{_METRIC_W}}  {'value':>{_VALUE_W}}"
    lines = [header, "-" * len(header)]
    for task in sorted(results):
        for metric, value in sorted(results[task].items()):
            lines.append(
                f"{_clip(task, _TASK_W):<{_TASK_W}}  {_clip(metric, _METRIC_W):<{_METRIC_W}}  "
                f"{_clip(_value(value), _VALUE_W):>{_VALUE_W}}"
            )
    if len(lines) == 2:
        lines.append("(no results)")
    return "\n".join(lines)
