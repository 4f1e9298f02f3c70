"""A small GPT-style decoder: enough architecture to exercise ZeRO and checkpointing for real.

The output head is deliberately *not* tied to the token embedding: ZeRO-3
partitions and the universal-checkpoint converter handle one tensor per
parameter most simply, and a tiny model gains nothing from tying.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from workloads.training.ds_config import ModelConfig

__all__ = ["GPT", "ModelConfig", "flops_per_token", "param_count"]


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.out = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        shape = (b, t, self.n_head, c // self.n_head)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy of a `[batch, seq_len + 1]` window."""
        idx, targets = tokens[:, :-1], tokens[:, 1:]
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def param_count(cfg: ModelConfig) -> int:
    """Parameters that cost matmul FLOPs: everything but the position table (a lookup, no matmul).

    Computed from the config, not the module, because under ZeRO-3 the local
    module holds only empty placeholders.
    """
    d, L, V = cfg.d_model, cfg.n_layer, cfg.vocab_size
    per_block = (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d) + 4 * d
    return V * d + L * per_block + 2 * d + V * d


def flops_per_token(cfg: ModelConfig) -> float:
    """Training FLOPs per token: 6N for the dense matmuls (forward + backward) plus the
    attention score/value term 12 * L * d * T (PaLM appendix B), which is what MFU is
    conventionally quoted against."""
    return 6.0 * param_count(cfg) + 12.0 * cfg.n_layer * cfg.d_model * cfg.seq_len
