"""`custom_dataset` for the llmp_* tasks: JSONL files that ship next to the YAML.

Why not `datasets.load_dataset("json", data_files=...)`, which the YAML's
`dataset_path: json` names? Because `datasets` resolves relative `data_files` against
the *current directory*, not the YAML, and writes Arrow copies into its cache. This
loader resolves `dataset_kwargs.data_files` against this directory and builds the
splits in memory (`Dataset.from_list`): the tasks work from any working directory,
read nothing but the shipped files, write nothing, and never touch the Hub.

lm-eval calls it as `custom_dataset(**metadata, **dataset_kwargs)`; only
`data_files` (split -> file name relative to this directory) is used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets

HERE = Path(__file__).resolve().parent


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file; a malformed line names its file and line number."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{number}: not a JSON object: {e.msg}") from None
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def load(data_files: dict[str, str], **_: Any) -> datasets.DatasetDict:
    """split -> in-memory Dataset of the rows of `HERE / data_files[split]`."""
    return datasets.DatasetDict(
        {
            split: datasets.Dataset.from_list(read_jsonl(HERE / name))
            for split, name in data_files.items()
        }
    )
