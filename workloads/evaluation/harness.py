"""lm-evaluation-harness on a local Hugging Face model directory, with no network.

`run_harness` is a thin, strict wrapper around `lm_eval.simple_evaluate(model="hf")`:

- Only the tasks in `TASKS_DIR` exist for it (`TaskManager(include_defaults=False)`):
  lm-eval's own 200-odd task families fetch their data from the Hub, so leaving them
  out makes an offline run a property of the task list, not of luck.
- Offline for the duration of the call, by environment *and* by the libraries'
  module constants: `huggingface_hub`, `datasets` and `evaluate` read
  `HF_HUB_OFFLINE` & co. once, at import, so setting the variables after a caller
  has imported transformers would change nothing. Both are restored afterwards.
  Any Hub request then raises `OfflineModeIsEnabled` before a socket is opened.
  lm-eval's one Hub call on this path, `HfApi().model_info(pretrained)` for the
  "model_sha" it records, is also defused by passing the directory as an absolute
  path: a relative one ("model") is a valid repository id and would be looked up.
- `HF_DATASETS_CACHE` points into a temporary directory that is removed afterwards,
  so nothing is written outside it (the shipped tasks build their splits in memory
  and write nothing there either).
- stdout is routed to stderr at the file-descriptor level: DeepSpeed's logger (which
  transformers/accelerate import) and lm-eval's few `print`s write to stdout, and
  callers print one JSON line there.
- lm-eval's environment report (`add_env_info`: `pip list`, `nvidia-smi`, `lscpu`,
  2-3 s a call) is skipped; it only feeds result fields this wrapper discards.
- No standard errors: `bootstrap_iters=0`. The gate compares point estimates, and
  lm-eval's bootstrap of perplexities is 100 000 resamples in a process pool.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

from workloads import hub

TASKS_DIR = Path(__file__).resolve().parent / "tasks"

OFFLINE_ENV = hub.OFFLINE_ENV
stdout_to_stderr = hub.stdout_to_stderr
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


class HarnessInputError(ValueError):
    """The model directory or the task list is wrong; nothing was evaluated."""


def model_dir_problem(model_dir: str | Path) -> str | None:
    """Why `model_dir` is not a Hugging Face model directory lm-eval can load, or None.

    Checked up front because lm-eval would otherwise treat a missing path as a Hub
    repository id and fail, offline, with a message about the network.
    """
    path = Path(model_dir)
    expected = "a Hugging Face model directory (config.json, weights, tokenizer files)"
    if not path.is_dir():
        return f"{path}: no such directory; expected {expected}"
    config = path / "config.json"
    if not config.is_file():
        return f"{path}: no config.json; expected {expected}"
    try:
        parsed = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"{config}: not readable JSON ({e}); expected the config save_pretrained writes"
    if not isinstance(parsed, dict) or "model_type" not in parsed:
        return f"{config}: no model_type; expected the config save_pretrained writes"
    if not any(next(path.glob(p), None) for p in WEIGHT_PATTERNS):
        return f"{path}: no weights (*.safetensors or pytorch_model*.bin); expected {expected}"
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        return f"{path}: no tokenizer ({', '.join(TOKENIZER_FILES)}); expected {expected}"
    return None


def _task_manager() -> Any:
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(TASKS_DIR), include_defaults=False)


def available_tasks() -> list[str]:
    """Every task and tag name shipped in `TASKS_DIR` (the tag `llmp` names them all)."""
    return list(_task_manager().all_tasks)


def shipped_tasks() -> list[str]:
    """The individual shipped tasks (no tags): what a run without a task list evaluates."""
    return list(_task_manager().all_subtasks)


def expand_tasks(names: Sequence[str]) -> list[str]:
    """Task and tag names -> the individual tasks they run, deduplicated, in order.

    Results are keyed by individual task, so this is what a thresholds file may name.
    Raises HarnessInputError for an unknown name.
    """
    manager = _task_manager()
    _check_tasks(names, manager.all_tasks)
    out: list[str] = []
    for name in names:
        entry = manager.task_index[name]
        members = sorted(entry.tags) if name in manager.all_tags else [name]
        out.extend(m for m in members if m not in out)
    return out


def _check_tasks(tasks: Sequence[str], known: Sequence[str]) -> None:
    if not tasks:
        raise HarnessInputError(f"no tasks given; the shipped tasks are {', '.join(known)}")
    unknown = [t for t in tasks if t not in known]
    if unknown:
        raise HarnessInputError(
            f"unknown task {', '.join(map(repr, unknown))}: the tasks shipped in "
            f"{TASKS_DIR} are {', '.join(known)}"
        )


def offline(cache_dir: Path) -> contextlib.AbstractContextManager[None]:
    """Hub, datasets and evaluate offline; the datasets cache under `cache_dir`."""
    return hub.offline(cache_dir / "datasets")


@contextlib.contextmanager
def _quiet_lm_eval(verbose: bool) -> Iterator[None]:
    """lm-eval's logger at ERROR (its per-task warnings are about options we set on
    purpose) and its environment report skipped; both restored afterwards."""
    import lm_eval.evaluator

    logger = logging.getLogger("lm_eval")
    level = logger.level
    with contextlib.ExitStack() as stack:
        if hasattr(lm_eval.evaluator, "add_env_info"):
            stack.enter_context(
                mock.patch.object(lm_eval.evaluator, "add_env_info", lambda storage: None)
            )
        if not verbose:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            logger.setLevel(level)


def flatten_results(raw: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """lm-eval's `results` -> task -> metric -> value.

    lm-eval keys a metric as "<metric>,<filter>"; the default filter "none" is
    stripped ("acc,none" -> "acc"), any other is kept ("exact_match,strict").
    Standard-error entries and non-numeric fields (alias, sample counts) are dropped.
    """
    out: dict[str, dict[str, float]] = {}
    for task in sorted(raw):
        metrics: dict[str, float] = {}
        for key, value in raw[task].items():
            metric, sep, filt = key.partition(",")
            if not sep or metric.endswith("_stderr"):
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            metrics[metric if filt == "none" else key] = float(value)
        if metrics:
            out[task] = dict(sorted(metrics.items()))
    return out


def run_harness(
    model_dir: str | Path,
    tasks: Sequence[str],
    *,
    limit: int | None = None,
    batch_size: int = 8,
    device: str = "cpu",
    dtype: str = "float32",
    verbose: bool = False,
) -> dict[str, dict[str, float]]:
    """Evaluate the model in `model_dir` on shipped `tasks`; task -> metric -> value.

    `limit` caps the documents per task (the first N, in file order). Raises
    `HarnessInputError` for a bad directory or an unknown task before loading anything.
    """
    problem = model_dir_problem(model_dir)
    if problem:
        raise HarnessInputError(problem)
    if limit is not None and limit < 1:
        raise HarnessInputError(f"limit {limit}: expected a positive number of documents")
    if batch_size < 1:
        raise HarnessInputError(f"batch_size {batch_size}: expected a positive integer")
    names = [tasks] if isinstance(tasks, str) else list(tasks)
    manager = _task_manager()
    _check_tasks(names, manager.all_tasks)

    import lm_eval

    path = str(Path(model_dir).resolve())
    with (
        tempfile.TemporaryDirectory(prefix="llmp-eval-") as tmp,
        offline(Path(tmp)),
        stdout_to_stderr(),
        _quiet_lm_eval(verbose),
    ):
        raw = lm_eval.simple_evaluate(
            model="hf",
            model_args={"pretrained": path, "tokenizer": path, "dtype": dtype},
            tasks=names,
            task_manager=manager,
            batch_size=batch_size,
            device=device,
            limit=limit,
            bootstrap_iters=0,
            log_samples=False,
        )
    if raw is None:  # only a non-zero rank of a distributed run gets None
        return {}
    return flatten_results(raw["results"])
