"""Rewards for GRPO: rules a test can check, and a reward model from a local directory.

A reward function takes the records (prompt and whatever else the record holds),
the completions as text, and whether each ended its turn (emitted the end-of-turn
token within `max_new_tokens`), and returns one score per completion.

- `answer_match`: 1.0 when the record's `answer` appears in the completion (after
  collapsing whitespace), else 0.0: the verifiable reward of math and code RL
  (DeepSeekMath's GRPO, RLVR).
- `format`: 1.0 when the completion ended its turn, else 0.0: the length and format
  rewards that keep a policy from rambling.
- a reward model: a transformers sequence-classification model (one logit) read
  with `local_files_only`, scoring prompt and completion as its chat template
  renders them, the usual RLHF reward-model interface (OpenRLHF's and TRL's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from contracts.training import RewardConfig

RewardFn = Callable[[list[dict[str, Any]], list[str], list[bool]], list[float]]


def _normal(text: str) -> str:
    return " ".join(text.split())


def answer_match(
    records: list[dict[str, Any]], completions: list[str], ended: list[bool]
) -> list[float]:
    out = []
    for record, text in zip(records, completions, strict=True):
        if "answer" not in record:
            raise ValueError("answer_match needs an `answer` in every grpo record")
        out.append(1.0 if _normal(str(record["answer"])) in _normal(text) else 0.0)
    return out


def format_reward(
    records: list[dict[str, Any]], completions: list[str], ended: list[bool]
) -> list[float]:
    return [1.0 if e else 0.0 for e in ended]


RULES: dict[str, RewardFn] = {"answer_match": answer_match, "format": format_reward}


class RewardModel:
    """A sequence classifier's first logit on the conversation (prompt, completion)."""

    def __init__(self, path: str, device: torch.device | None = None) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        if self.tok.pad_token_id is None:
            self.tok.pad_token = self.tok.eos_token
        self.model = AutoModelForSequenceClassification.from_pretrained(
            path, local_files_only=True
        ).eval()
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tok.pad_token_id
        self.device = device or torch.device("cpu")
        self.model.to(self.device)

    def _text(self, record: dict[str, Any], completion: str) -> str:
        prompt = record["prompt"]
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        messages = [*messages, {"role": "assistant", "content": completion}]
        if getattr(self.tok, "chat_template", None):
            return str(self.tok.apply_chat_template(messages, tokenize=False))
        return "\n".join(m["content"] for m in messages)

    @torch.no_grad()
    def __call__(
        self, records: list[dict[str, Any]], completions: list[str], ended: list[bool]
    ) -> list[float]:
        texts = [self._text(r, c) for r, c in zip(records, completions, strict=True)]
        enc = self.tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        logits = self.model(**{k: v.to(self.device) for k, v in enc.items()}).logits
        return [float(x) for x in logits[:, 0].float().cpu()]


def reward_function(cfg: RewardConfig, device: torch.device | None = None) -> RewardFn:
    if cfg.rule is not None:
        return RULES[cfg.rule]
    assert cfg.model is not None  # RewardConfig requires one of the two
    return RewardModel(cfg.model, device)
