"""The Hugging Face libraries held offline, and stdout kept for a caller's JSON line.

The workloads read models, tokenizers and datasets from local directories only. The
environment variables that say so (`HF_HUB_OFFLINE`, ...) are read by
`huggingface_hub`, `datasets` and `evaluate` once, at import: a process that has
already imported transformers ignores a later change. `offline()` sets both, the
environment and those module constants, for the duration of a call and restores them
afterwards, so any hub request fails with `OfflineModeIsEnabled` before a socket opens.

Libraries of the field also print to stdout (DeepSpeed's logger, llm-compressor's
loguru sink, lm-eval's bootstrap), where the jobs write their one JSON result:
`stdout_to_stderr()` moves it, Python objects and file descriptor 1, for a while.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final
from unittest import mock

OFFLINE_ENV: Final = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_EVALUATE_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}


@contextlib.contextmanager
def offline(datasets_cache: Path | None = None) -> Iterator[None]:
    """Hub, datasets, transformers and evaluate offline; the datasets cache moved to
    `datasets_cache` when given (a throwaway directory: nothing written elsewhere)."""
    import datasets.config
    import huggingface_hub.constants

    env = dict(OFFLINE_ENV)
    consts: list[tuple[Any, str, Any]] = [
        (huggingface_hub.constants, "HF_HUB_OFFLINE", True),
        (datasets.config, "HF_HUB_OFFLINE", True),
        (datasets.config, "HF_DATASETS_OFFLINE", True),
    ]
    if datasets_cache is not None:
        env["HF_DATASETS_CACHE"] = str(datasets_cache)
        consts.append((datasets.config, "HF_DATASETS_CACHE", datasets_cache))
    if "evaluate.config" in sys.modules:
        consts.append((sys.modules["evaluate.config"], "HF_EVALUATE_OFFLINE", True))
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, env))
        for module, name, value in consts:
            stack.enter_context(mock.patch.object(module, name, value))
        yield


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Everything written to stdout (Python objects and fd 1) goes to stderr meanwhile."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no fd 1 (a closed or redirected-away stdout): Python-level only
        saved = -1
    try:
        if saved >= 0:
            os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if saved >= 0:
            os.dup2(saved, 1)
            os.close(saved)
