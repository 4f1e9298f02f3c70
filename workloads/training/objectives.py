"""What one micro-batch costs, per task: the loss the engine backpropagates and the metrics
the step event reports.

- pretrain: next-token cross-entropy on a window of token shards.
- sft: the same loss on the assistant tokens only (`records.sft_example`).
- dpo: the sigmoid DPO loss of Rafailov et al. (2023) on (chosen, rejected) pairs,
  against a frozen reference. Our own few lines rather than TRL's `DPOTrainer`,
  because the trainer keeps its own loop: DeepSpeed ZeRO 1-3 with the atomic,
  asynchronous, reshardable checkpoints and the elastic and SIGTERM handling of
  `train`, which TRL's Trainer-based classes replace with their own. The loss is
  eq. 7 of the paper, the `sigmoid` loss of TRL's DPOTrainer (trl 1.16.0,
  `_compute_loss`), checked in tests/workloads/training/test_objectives.py.
- grpo: GRPO (Shao et al. 2024): `group_size` completions per prompt sampled from
  the policy (HF `generate`; on GPU pools at scale the rollouts are vLLM's, see
  the README), rewards normalized within each group into advantages, a per-token
  policy-gradient loss with the k3 KL estimate to the reference (as in TRL's
  GRPOTrainer, one update per rollout so the importance ratio is 1 with its
  gradient kept).

The reference is the base model: with LoRA the policy with its adapters disabled
(no second copy); without, a second model from `pretrained`, frozen, partitioned
by ZeRO-3 like the policy when the job runs stage 3.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from contracts.training import JobConfig
from workloads.training import records as rec
from workloads.training.data import TokenShards
from workloads.training.rewards import RewardFn, reward_function


class Objective(Protocol):
    metrics: tuple[str, ...]
    """Names of the values `__call__` returns besides the loss; reported per step."""

    def __call__(self, engine: Any, first: int, size: int) -> tuple[torch.Tensor, list[float]]: ...


def token_logps(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities of `labels` (shifted: position t predicts t+1) and the
    mask of the tokens that count; both `[batch, seq - 1]`."""
    targets = labels[:, 1:]
    mask = targets != rec.IGNORE
    logps = -F.cross_entropy(
        logits[:, :-1].float().transpose(1, 2),
        targets.masked_fill(~mask, 0),
        reduction="none",
    )
    return logps * mask, mask


def dpo_loss(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-pair sigmoid DPO loss and the implicit rewards beta * log(pi/ref) of each reply."""
    chosen_reward = beta * (chosen - ref_chosen)
    rejected_reward = beta * (rejected - ref_rejected)
    loss = -F.logsigmoid(chosen_reward - rejected_reward)
    return loss, chosen_reward.detach(), rejected_reward.detach()


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """(r - mean of its group) / (std of its group + eps); groups are consecutive rows."""
    groups = rewards.view(-1, group_size)
    mean = groups.mean(dim=1, keepdim=True)
    std = groups.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
    return ((groups - mean) / (std + eps)).reshape(-1)


def grpo_token_loss(
    logps: torch.Tensor,
    ref_logps: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean over sequences of the mean over their completion tokens of
    -(ratio * A - beta * KL), ratio = exp(logp - logp.detach()) (value 1, gradient of logp);
    KL is the k3 estimator exp(ref - logp) - (ref - logp) - 1. Returns (loss, mean KL)."""
    ratio = torch.exp(logps - logps.detach())
    per_token = -ratio * advantages.unsqueeze(1)
    kl = torch.zeros_like(logps)
    if ref_logps is not None and beta > 0:
        delta = ref_logps - logps
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + beta * kl
    tokens = mask.sum(dim=1).clamp(min=1)
    loss = ((per_token * mask).sum(dim=1) / tokens).mean()
    mean_kl = ((kl * mask).sum(dim=1) / tokens).mean()
    return loss, mean_kl.detach()


class Reference:
    """Log-probabilities under the frozen base model."""

    def __init__(self, module: Any | None) -> None:
        self.module = module  # None: the policy with its LoRA adapters disabled

    @contextlib.contextmanager
    def _model(self, engine: Any) -> Iterator[Any]:
        if self.module is not None:
            yield self.module
            return
        with engine.module.disable_adapter():
            yield engine.module

    @torch.no_grad()
    def logits(self, engine: Any, **inputs: torch.Tensor) -> torch.Tensor:
        with self._model(engine) as model:
            return model(**inputs).logits


class Pretrain:
    metrics: tuple[str, ...] = ()

    def __init__(self, shards: TokenShards, device: torch.device) -> None:
        self.shards = shards
        self.device = device

    def __call__(self, engine: Any, first: int, size: int) -> tuple[torch.Tensor, list[float]]:
        window = self.shards.batch(first, size).to(self.device)
        return engine(input_ids=window, labels=window).loss, []


class Sft:
    metrics: tuple[str, ...] = ("tokens_in_loss",)

    def __init__(self, data: rec.Records, tok: Any, seq_len: int, device: torch.device) -> None:
        self.data, self.tok, self.seq_len, self.device = data, tok, seq_len, device

    def __call__(self, engine: Any, first: int, size: int) -> tuple[torch.Tensor, list[float]]:
        rows = [
            rec.sft_example(self.tok, r["messages"], self.seq_len)
            for r in self.data.batch(first, size)
        ]
        b = rec.collate(rows, self.tok.pad_token_id).to(self.device)
        out = engine(input_ids=b.input_ids, attention_mask=b.attention_mask, labels=b.labels)
        return out.loss, [float((b.labels[:, 1:] != rec.IGNORE).sum())]


class Dpo:
    metrics: tuple[str, ...] = ("reward_accuracy", "reward_margin")

    def __init__(
        self,
        data: rec.Records,
        tok: Any,
        seq_len: int,
        beta: float,
        reference: Reference,
        device: torch.device,
    ) -> None:
        self.data, self.tok, self.seq_len = data, tok, seq_len
        self.beta, self.reference, self.device = beta, reference, device

    def __call__(self, engine: Any, first: int, size: int) -> tuple[torch.Tensor, list[float]]:
        rows = []
        pairs = self.data.batch(first, size)
        for key in ("chosen", "rejected"):
            for r in pairs:
                prompt = rec.prompt_ids(self.tok, r["prompt"])
                reply = rec.reply_ids(self.tok, r[key])
                rows.append(rec.pair_example(prompt, reply, self.seq_len))
        b = rec.collate(rows, self.tok.pad_token_id).to(self.device)
        inputs = {"input_ids": b.input_ids, "attention_mask": b.attention_mask}
        ref_lp, _ = token_logps(self.reference.logits(engine, **inputs), b.labels)
        lp, _ = token_logps(engine(**inputs).logits, b.labels)
        seq, ref_seq = lp.sum(dim=1), ref_lp.sum(dim=1)
        loss, chosen_r, rejected_r = dpo_loss(
            seq[:size], seq[size:], ref_seq[:size], ref_seq[size:], self.beta
        )
        return loss.mean(), [
            float((chosen_r > rejected_r).float().mean()),
            float((chosen_r - rejected_r).mean()),
        ]


class Grpo:
    metrics: tuple[str, ...] = ("reward", "kl", "completion_tokens")

    def __init__(
        self,
        job: JobConfig,
        data: rec.Records,
        tok: Any,
        reference: Reference | None,
        reward: RewardFn,
        device: torch.device,
        synced: bool,
    ) -> None:
        assert job.grpo is not None
        self.cfg, self.seq_len = job.grpo, job.model.seq_len
        self.data, self.tok, self.reference, self.reward = data, tok, reference, reward
        self.device, self.synced = device, synced

    def _rollouts(
        self, engine: Any, prompts: list[list[int]]
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        g = self.cfg.group_size
        budget = self.seq_len - self.cfg.max_new_tokens
        rows = [(p[-budget:], p[-budget:]) for p in prompts for _ in range(g)]
        b = rec.collate(rows, self.tok.pad_token_id, left=True).to(self.device)
        module = engine.module
        module.eval()
        with torch.no_grad():
            out = module.generate(
                input_ids=b.input_ids,
                attention_mask=b.attention_mask,
                do_sample=True,
                temperature=self.cfg.temperature,
                top_k=0,
                max_new_tokens=self.cfg.max_new_tokens,
                pad_token_id=self.tok.pad_token_id,
                eos_token_id=self.tok.eos_token_id,
                use_cache=True,
                synced_gpus=self.synced,
            )
        module.train()
        return out, b.attention_mask, b.input_ids.shape[1]

    def __call__(self, engine: Any, first: int, size: int) -> tuple[torch.Tensor, list[float]]:
        records = self.data.batch(first, size)
        prompts = [rec.prompt_ids(self.tok, r["prompt"]) for r in records]
        out, prompt_mask, width = self._rollouts(engine, prompts)
        completion = out[:, width:]
        is_eos = completion == self.tok.eos_token_id
        # Tokens up to and including the first end-of-turn count; what generate pads after
        # it does not.
        after_eos = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
        completion_mask = (~after_eos).long()
        ended = is_eos.any(dim=1)
        texts = self.tok.batch_decode(completion * completion_mask, skip_special_tokens=True)
        g = self.cfg.group_size
        rewards = torch.tensor(
            self.reward([r for r in records for _ in range(g)], texts, ended.tolist()),
            dtype=torch.float32,
            device=self.device,
        )
        advantages = group_advantages(rewards, g)
        attention = torch.cat([prompt_mask, completion_mask], dim=1)
        labels = out.masked_fill(attention == 0, rec.IGNORE)
        labels[:, :width] = rec.IGNORE
        inputs = {
            "input_ids": out,
            "attention_mask": attention,
            "position_ids": (attention.cumsum(dim=1) - 1).clamp(min=0),
        }
        lp, mask = token_logps(engine(**inputs).logits, labels)
        ref_lp = None
        if self.reference is not None and self.cfg.beta > 0:
            ref_lp, _ = token_logps(self.reference.logits(engine, **inputs), labels)
        loss, kl = grpo_token_loss(lp, ref_lp, advantages, mask, self.cfg.beta)
        return loss, [
            float(rewards.mean()),
            float(kl),
            float(completion_mask.sum(1).float().mean()),
        ]


def objective(
    job: JobConfig,
    device: torch.device,
    *,
    reference: Reference | None = None,
    synced: bool = False,
) -> Objective:
    """The task's objective; reads its data and tokenizer (ValueError on bad records)."""
    if job.task == "pretrain":
        return Pretrain(
            TokenShards(job.data.path, job.model.seq_len, job.data.bin_dtype, job.data.seed),
            device,
        )
    from workloads.training.model import load_tokenizer

    tok = load_tokenizer(job.model)
    data = rec.Records(rec.read_records(job.data.path, job.task), job.data.seed)
    if job.task == "sft":
        return Sft(data, tok, job.model.seq_len, device)
    assert reference is not None, "dpo and grpo need the reference"
    if job.task == "dpo":
        return Dpo(data, tok, job.model.seq_len, job.dpo.beta, reference, device)
    assert job.grpo is not None
    if job.grpo.max_new_tokens >= job.model.seq_len:
        raise ValueError(
            f"grpo.max_new_tokens {job.grpo.max_new_tokens} leaves no room for the prompt "
            f"in seq_len {job.model.seq_len}"
        )
    return Grpo(job, data, tok, reference, reward_function(job.grpo.reward, device), device, synced)
