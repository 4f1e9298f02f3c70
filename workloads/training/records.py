"""Chat, preference and prompt records for SFT, DPO and GRPO, tokenized with the model's
own chat template.

Records are JSON lines, one file or a directory of `*.jsonl` read in name order:

- sft: `{"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...]}`
- dpo: `{"prompt": str | messages, "chosen": str, "rejected": str}`
- grpo: `{"prompt": str | messages, ...}`; other keys go to the reward (`answer`, say)

They are sampled like token shards (`data.position`): by global sample number, in a
seeded order per epoch, so a resume at another world size continues the same stream.

Loss masks. SFT trains on the assistant turns only. When the chat template marks them
(`{% generation %}`, as TRL's and several model templates do), transformers' own
`return_assistant_tokens_mask` gives the mask. Otherwise (most released templates,
Llama 3's and Qwen's among them) a turn's tokens are found by rendering the
conversation up to the turn with the generation prompt and up to the end of it: the
difference is the assistant's reply, including its end-of-turn token, which the model
must learn to emit. A template whose renderings are not prefixes of each other cannot
be split that way, and is refused with the turn where it breaks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from workloads.training.data import position

IGNORE = -100
"""The label of a token that carries no loss (transformers' and PyTorch's convention)."""

_GENERATION_TAG = re.compile(r"{%-?\s*generation\s*-?%}")
ROLES = ("system", "user", "assistant", "tool")


class RecordError(ValueError):
    """A record that the task cannot use: `file:line: what is wrong`."""


def read_records(path: str | Path, task: str) -> list[dict[str, Any]]:
    """Every record under `path`, checked for the fields `task` needs."""
    root = Path(path)
    files = sorted(root.glob("*.jsonl")) if root.is_dir() else [root]
    if not files or not files[0].is_file():
        raise RecordError(f"{root}: no JSONL records (a .jsonl file or a directory of them)")
    records: list[dict[str, Any]] = []
    for f in files:
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise RecordError(f"{f}:{n}: not JSON ({exc})") from None
            problem = _problem(record, task)
            if problem:
                raise RecordError(f"{f}:{n}: {problem}")
            records.append(record)
    if not records:
        raise RecordError(f"{root}: the JSONL files hold no records")
    return records


def _messages_problem(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty list"
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            return f"messages[{i}] needs a role, one of {', '.join(ROLES)}"
        if not isinstance(m.get("content"), str):
            return f"messages[{i}] needs a string content"
    return None


def _problem(record: Any, task: str) -> str | None:
    if not isinstance(record, dict):
        return "a record is a JSON object"
    if task == "sft":
        problem = _messages_problem(record.get("messages"))
        if problem is None and not any(m["role"] == "assistant" for m in record["messages"]):
            return "no assistant turn: nothing to learn"
        return problem
    prompt = record.get("prompt")
    if not isinstance(prompt, str):
        problem = _messages_problem(prompt)
        if problem:
            return f"prompt must be a string or messages ({problem})"
    if task == "dpo":
        for key in ("chosen", "rejected"):
            if not isinstance(record.get(key), str):
                return f"{key} must be a string (the assistant's reply)"
    return None


class Records:
    """The record stream, indexed by global sample number."""

    def __init__(self, records: list[dict[str, Any]], seed: int = 0) -> None:
        self.records = records
        self.seed = seed

    def __len__(self) -> int:
        return len(self.records)

    def sample(self, g: int) -> dict[str, Any]:
        return self.records[position(g, len(self.records), self.seed)]

    def batch(self, first: int, size: int) -> list[dict[str, Any]]:
        return [self.sample(first + i) for i in range(size)]


# ---------------------------------------------------------------------------
# Tokenization
# ---------------------------------------------------------------------------


def _ids(encoded: Any) -> list[int]:
    """apply_chat_template returns a list, or a BatchEncoding, depending on the version."""
    if isinstance(encoded, dict) or hasattr(encoded, "input_ids"):
        encoded = encoded["input_ids"]
    return [int(t) for t in encoded]


def _render(tok: Any, messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
    return _ids(
        tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt)
    )


def has_generation_marks(tok: Any) -> bool:
    template = getattr(tok, "chat_template", None)
    return isinstance(template, str) and bool(_GENERATION_TAG.search(template))


def sft_example(
    tok: Any, messages: list[dict[str, str]], max_len: int
) -> tuple[list[int], list[int]]:
    """(input ids, labels) of a conversation: labels are the ids on assistant turns and
    IGNORE elsewhere; truncated to `max_len` tokens."""
    if has_generation_marks(tok):
        out = tok.apply_chat_template(
            messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        ids = [int(t) for t in out["input_ids"]]
        mask = list(out["assistant_masks"])
        labels = [t if m else IGNORE for t, m in zip(ids, mask, strict=True)]
    else:
        ids = _render(tok, messages, False)
        labels = [IGNORE] * len(ids)
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before = _render(tok, messages[:i], True)
            through = _render(tok, messages[: i + 1], False)
            if ids[: len(before)] != before or ids[: len(through)] != through:
                raise RecordError(
                    f"the chat template does not render turn {i} as a prefix of the "
                    "conversation; give it {% generation %} marks"
                )
            labels[len(before) : len(through)] = ids[len(before) : len(through)]
    return ids[:max_len], labels[:max_len]


def prompt_ids(tok: Any, prompt: str | list[dict[str, str]]) -> list[int]:
    """A prompt as the model sees it before its reply: the template's generation prompt."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    return _render(tok, messages, True)


def reply_ids(tok: Any, text: str) -> list[int]:
    """An assistant reply and the end of its turn, as the model must produce them."""
    return [int(t) for t in tok(text, add_special_tokens=False)["input_ids"]] + [
        int(tok.eos_token_id)
    ]


def pair_example(prompt: list[int], reply: list[int], max_len: int) -> tuple[list[int], list[int]]:
    """Prompt + reply within `max_len`: the prompt loses its oldest tokens first; labels only
    on the reply."""
    reply = reply[:max_len]
    prompt = prompt[max(0, len(prompt) - (max_len - len(reply))) :]
    return prompt + reply, [IGNORE] * len(prompt) + reply


@dataclass
class Batch:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor

    def to(self, device: torch.device) -> Batch:
        return Batch(
            self.input_ids.to(device), self.attention_mask.to(device), self.labels.to(device)
        )


def collate(rows: list[tuple[list[int], list[int]]], pad_id: int, left: bool = False) -> Batch:
    """Rows of (ids, labels) padded to the longest; `left` pads before (for generation)."""
    width = max(len(ids) for ids, _ in rows)
    ids_t = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels_t = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    mask_t = torch.zeros((len(rows), width), dtype=torch.long)
    for r, (ids, labels) in enumerate(rows):
        n = len(ids)
        cols = slice(width - n, width) if left else slice(0, n)
        ids_t[r, cols] = torch.tensor(ids, dtype=torch.long)
        labels_t[r, cols] = torch.tensor(labels, dtype=torch.long)
        mask_t[r, cols] = 1
    return Batch(ids_t, mask_t, labels_t)
