"""Tokenized shards and a deterministic sample stream.

Shards are flat token arrays: `.npy` (any unsigned dtype, header says which) or
headerless `.bin` (dtype from config). They are memory-mapped, so a rank only
pages in the windows it reads, which matters on FSx where a shard is gigabytes.

The stream is indexed by *global sample number* `g`, not by (rank, step): the
checkpoint records how many samples were consumed, and the next step hands
samples `consumed + i` to ranks by position. A resume at another world size
therefore continues exactly where the old job stopped, without replay or skip.
Within an epoch, windows are visited in a pseudo-random order given by an
affine bijection `j -> (a*j + b) mod N`: O(1) memory for billions of windows,
where a stored permutation would not fit.
"""

from __future__ import annotations

import bisect
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workloads.training import s3io

SHARD_SUFFIXES = (".npy", ".bin")


def position(g: int, n: int, seed: int) -> int:
    """Which of `n` items global sample `g` reads: epoch `g // n` visits all `n` once, in
    the order of the affine bijection `j -> (a*j + b) mod n` drawn for that epoch."""
    epoch, j = divmod(g, n)
    rng = np.random.default_rng([seed, epoch])
    a = int(rng.integers(1, max(2, n)))
    while math.gcd(a, n) != 1:
        a += 1
    b = int(rng.integers(0, n))
    return (a * j + b) % n


class TokenShards:
    def __init__(
        self,
        path: str | Path,
        seq_len: int,
        bin_dtype: str = "uint16",
        seed: int = 0,
        cache: str | Path | None = None,
    ) -> None:
        """`path`: a directory, or `s3://bucket/prefix/` (shards fetched on first use into
        `cache`, default `$LLMP_SHARD_CACHE` or the temporary directory; `s3io`)."""
        self.seq_len = seq_len
        self.seed = seed
        self.arrays: list[Any] = []
        for f, arr in self._open(path, bin_dtype, cache):
            if arr.ndim != 1 or arr.dtype.kind != "u":
                raise ValueError(
                    f"{f}: expected a 1-D unsigned token array, got {arr.dtype} {arr.shape}"
                )
            self.arrays.append(arr)
        # A window is seq_len + 1 tokens; windows do not straddle shards.
        counts = [max(0, (len(a) - 1) // seq_len) for a in self.arrays]
        self.starts = list(np.cumsum([0, *counts]))
        self.n_windows = int(self.starts[-1])
        if self.n_windows == 0:
            raise ValueError(
                f"shards in {path} are shorter than one window of {seq_len + 1} tokens"
            )

    @staticmethod
    def _open(
        path: str | Path, bin_dtype: str, cache: str | Path | None
    ) -> Iterator[tuple[str, Any]]:
        if s3io.is_s3(path):
            where = (
                cache
                or os.environ.get("LLMP_SHARD_CACHE")
                or Path(tempfile.gettempdir(), "llmp-shards")
            )
            shards = s3io.s3_shards(str(path), SHARD_SUFFIXES, where, bin_dtype)
            if not shards:
                raise FileNotFoundError(f"no {SHARD_SUFFIXES} token shards in {path}")
            yield from ((f"s3://{s.bucket}/{s.key}", s) for s in shards)
            return
        files = sorted(p for p in Path(path).iterdir() if p.suffix in SHARD_SUFFIXES)
        if not files:
            raise FileNotFoundError(f"no {SHARD_SUFFIXES} token shards in {path}")
        for f in files:
            arr = (
                np.load(f, mmap_mode="r")
                if f.suffix == ".npy"
                else np.memmap(f, dtype=bin_dtype, mode="r")
            )
            yield str(f), arr

    def sample(self, g: int) -> np.ndarray:
        w = position(g, self.n_windows, self.seed)
        shard = bisect.bisect_right(self.starts, w) - 1
        off = (w - self.starts[shard]) * self.seq_len
        return np.asarray(self.arrays[shard][off : off + self.seq_len + 1], dtype=np.int64)

    def batch(self, first: int, size: int) -> torch.Tensor:
        """Samples `first .. first + size - 1` as a `[size, seq_len + 1]` int64 tensor."""
        return torch.from_numpy(np.stack([self.sample(first + i) for i in range(size)]))


def micro_batch_start(consumed: int, micro_step: int, rank: int, world: int, micro: int) -> int:
    """First global sample of `rank`'s micro-batch `micro_step` in the step from `consumed`."""
    return consumed + (micro_step * world + rank) * micro


def write_synthetic_shards(
    path: str | Path,
    n_shards: int,
    tokens_per_shard: int,
    vocab: int,
    seed: int = 0,
    dtype: str = "uint16",
) -> list[Path]:
    """Learnable token shards for tests and benchmarks: a noisy affine recurrence, so a
    tiny model's loss falls within a few dozen steps (uniform noise would never fall)."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    written = []
    for s in range(n_shards):
        toks = np.empty(tokens_per_shard, dtype=np.int64)
        toks[0] = rng.integers(vocab)
        noise = rng.random(tokens_per_shard) < 0.05
        rand = rng.integers(0, vocab, tokens_per_shard)
        for i in range(1, tokens_per_shard):
            toks[i] = rand[i] if noise[i] else (3 * toks[i - 1] + 7) % vocab
        f = out / f"shard-{s:05d}.npy"
        np.save(f, toks.astype(dtype))
        written.append(f)
    return written
