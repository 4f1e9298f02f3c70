"""Near-dedup against a peer: our MinHash-LSH and datatrove's on the same corpus.

datatrove (Hugging Face's pipeline library, the one FineWeb was built with) and
`workloads.data.text.minhash` run the same near-duplicate detection on the same
synthetic corpus, with the same shingles (5-word n-grams of the same words: datatrove is
given a whitespace word tokenizer, so neither side's word splitting differs), the same
number of permutations and the same bands x rows. Printed per run: documents kept, the
planted clusters collapsed to one document, origins lost (an origin none of whose
documents was kept: a false merge into another's cluster), seconds, and documents per
second per core (datatrove's LocalPipelineExecutor with one task and one worker, ours in
one process, and, with `--ray`, our Ray Data version of the same code on `--cpus` CPUs,
whose figure on a corpus this small is mostly Ray's task start-up). Then the overlap of
the two kept sets.

The two differ in one rule: datatrove merges every pair that shares a band (no
verification), ours merges a candidate pair only if its exact shingle Jaccard reaches the
threshold. So datatrove can merge documents below the threshold, and we cannot.

The corpus is made here from a seeded RNG: `--base` distinct documents of synthetic prose
(words drawn from a Zipf-like vocabulary of 20,000 made-up words), then, for a third of
them, a cluster of 1-4 near-copies (2-6 words substituted, inserted or deleted, which keeps
the 5-shingle Jaccard above 0.8 for ~300-word documents) and an exact copy for some.
Ground truth is each document's origin. Nothing is read from or written to the network.

    .venv/bin/python bench/dedup_peer.py [--base 2000] [--threshold 0.8] [--ray]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SHINGLE_WORDS = 5
BANDS = 14
ROWS = 8
SEED = 1


@dataclass(frozen=True)
class Corpus:
    docs: list[tuple[str, str]]
    """(doc_id, text), in id order."""
    origin: dict[str, str]
    """doc_id -> the id of the base document it was made from (itself for a base)."""

    @property
    def clusters(self) -> dict[str, list[str]]:
        """Planted clusters of two or more documents: origin -> members."""
        by: dict[str, list[str]] = {}
        for doc_id, base in self.origin.items():
            by.setdefault(base, []).append(doc_id)
        return {k: sorted(v) for k, v in by.items() if len(v) > 1}


def _vocabulary(rng: np.random.Generator, size: int = 20_000) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: set[str] = set()
    while len(words) < size:
        n = int(rng.integers(2, 10))
        words.add("".join(rng.choice(letters, n)))
    return sorted(words)


def make_corpus(base: int, seed: int = 0, words: int = 300) -> Corpus:
    rng = np.random.default_rng(seed)
    vocab = _vocabulary(rng)
    # Zipf-like frequencies: common words recur across documents, as in prose, while
    # 5-word runs stay rare (unrelated documents share almost no shingles).
    weights = 1.0 / np.arange(1, len(vocab) + 1) ** 0.9
    weights /= weights.sum()
    docs: list[tuple[str, str]] = []
    origin: dict[str, str] = {}

    def add(doc_id: str, tokens: list[str], base_id: str) -> None:
        sentences = [" ".join(tokens[i : i + 15]) for i in range(0, len(tokens), 15)]
        docs.append((doc_id, ". ".join(s.capitalize() for s in sentences) + "."))
        origin[doc_id] = base_id

    for b in range(base):
        base_id = f"doc-{b:06d}-0"
        tokens = [vocab[i] for i in rng.choice(len(vocab), words, p=weights)]
        add(base_id, tokens, base_id)
        if b % 3:
            continue
        for c in range(1, int(rng.integers(2, 6))):
            variant = list(tokens)
            for _ in range(int(rng.integers(2, 7))):
                at = int(rng.integers(0, len(variant)))
                edit = int(rng.integers(0, 3))
                if edit == 0:
                    variant[at] = vocab[int(rng.integers(0, len(vocab)))]
                elif edit == 1:
                    variant.insert(at, vocab[int(rng.integers(0, len(vocab)))])
                else:
                    del variant[at]
            add(f"doc-{b:06d}-{c}", variant, base_id)
        if b % 2 == 0:
            add(f"doc-{b:06d}-x", tokens, base_id)  # an exact copy
    docs.sort()
    return Corpus(docs=docs, origin=origin)


# --- datatrove ---------------------------------------------------------------------------


def run_datatrove(corpus: Corpus, workdir: Path) -> tuple[set[str], float]:
    """datatrove's four MinHash stages (signatures, buckets, clusters, filter) in one
    process; returns the kept ids and the seconds of all four."""
    from datatrove.data import Document
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.utils.hashing import HashConfig
    from datatrove.utils.logging import logger
    from datatrove.utils.word_tokenizers import WordTokenizer

    logger.remove()  # its per-stage log lines and stats tables; the figures are ours

    class Whitespace(WordTokenizer):
        """The words our shingles use: whitespace-separated (datatrove's English default is
        NLTK's punkt, whose data would have to be downloaded)."""

        def __init__(self) -> None:
            super().__init__("en")

        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            raise NotImplementedError

    def documents(data: Any = None, rank: int = 0, world_size: int = 1) -> Iterator[Document]:
        for doc_id, text in corpus.docs:
            yield Document(text=text, id=doc_id)

    kept_file = workdir / "kept.jsonl"

    def collect(data: Iterable[Document], rank: int = 0, world_size: int = 1) -> Iterator[Any]:
        with kept_file.open("w") as f:
            for doc in data:
                f.write(json.dumps(doc.id) + "\n")
        yield from ()

    config = MinhashConfig(
        n_grams=SHINGLE_WORDS,
        num_buckets=BANDS,
        hashes_per_bucket=ROWS,
        seed=SEED,
        hash_config=HashConfig(precision=64),
    )
    sigs, buckets, clusters = workdir / "sigs", workdir / "buckets", workdir / "remove"

    def stage(pipeline: list[Any], tasks: int = 1) -> None:
        executor = LocalPipelineExecutor(
            pipeline=pipeline,
            tasks=tasks,
            workers=1,
            logging_dir=str(workdir / f"logs-{len(list(workdir.iterdir()))}"),
            skip_completed=False,
        )
        with open(os.devnull, "w") as null, redirect_stdout(null), redirect_stderr(null):
            executor.run()  # it prints a stats table per stage

    started = time.perf_counter()
    stage(
        [
            documents,
            MinhashDedupSignature(output_folder=str(sigs), config=config, language=Whitespace()),
        ]
    )
    stage(
        [MinhashDedupBuckets(input_folder=str(sigs), output_folder=str(buckets), config=config)],
        tasks=BANDS,
    )
    stage(
        [MinhashDedupCluster(input_folder=str(buckets), output_folder=str(clusters), config=config)]
    )
    stage([documents, MinhashDedupFilter(input_folder=str(clusters)), collect])
    seconds = time.perf_counter() - started
    kept = {json.loads(line) for line in kept_file.read_text().splitlines()}
    return kept, seconds


# --- ours --------------------------------------------------------------------------------


def _near_config(threshold: float) -> Any:
    from contracts.text_pipeline import TextPipelineConfig

    cfg = TextPipelineConfig.model_validate(
        {
            "dedup": {
                "near": {
                    "shingle_words": SHINGLE_WORDS,
                    "num_perm": BANDS * ROWS,
                    "bands": BANDS,
                    "rows": ROWS,
                    "threshold": threshold,
                    "seed": SEED,
                }
            }
        }
    )
    return cfg


def run_ours(corpus: Corpus, threshold: float) -> tuple[set[str], float]:
    from workloads.data.text import minhash

    cfg = _near_config(threshold)
    started = time.perf_counter()
    keeper = minhash.near_duplicates(corpus.docs, cfg.dedup.near)
    seconds = time.perf_counter() - started
    return {d for d, _ in corpus.docs if keeper.get(d, d) == d}, seconds


def run_ours_on_ray(corpus: Corpus, threshold: float, cpus: int) -> tuple[set[str], float]:
    import ray
    import ray.data

    from workloads.data.text import minhash
    from workloads.data.text.pipeline import shuffle_partitions

    cfg = _near_config(threshold)
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    try:
        ds = ray.data.from_items(
            [{"doc_id": d, "text": t} for d, t in corpus.docs],
            override_num_blocks=4 * cpus,
        )
        started = time.perf_counter()
        partitions = shuffle_partitions(cfg)  # the pipeline's default
        kept_rows = minhash.near_dedup(ds, cfg.dedup.near, partitions).take_all()
        seconds = time.perf_counter() - started
    finally:
        ray.shutdown()
    return {r["doc_id"] for r in kept_rows}, seconds


# --- the comparison ----------------------------------------------------------------------


def judge(corpus: Corpus, kept: set[str]) -> dict[str, int]:
    """Clusters collapsed to one document, and documents lost to a false merge (an origin
    with no document kept at all: it was merged into another origin's cluster)."""
    clusters = corpus.clusters
    collapsed = sum(1 for members in clusters.values() if len(kept & set(members)) == 1)
    kept_origins = {corpus.origin[d] for d in kept}
    origins = set(corpus.origin.values())
    return {
        "collapsed": collapsed,
        "clusters": len(clusters),
        "origins_lost": len(origins - kept_origins),
        "expected_kept": len(origins),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--base", type=int, default=2000, help="distinct base documents")
    parser.add_argument("--threshold", type=float, default=0.8, help="Jaccard threshold")
    parser.add_argument("--ray", action="store_true", help="also time our Ray version")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    corpus = make_corpus(args.base)
    n = len(corpus.docs)
    print(
        f"corpus: {n:,} documents, {args.base:,} origins, {len(corpus.clusters):,} planted clusters"
    )
    print(
        f"shingles of {SHINGLE_WORDS} words, {BANDS} bands x {ROWS} rows, "
        f"Jaccard threshold {args.threshold}"
    )
    work = Path(tempfile.mkdtemp(prefix="dedup-peer-"))
    try:
        theirs, t_theirs = run_datatrove(corpus, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ours, t_ours = run_ours(corpus, args.threshold)
    rows = [("llmp (1 process)", ours, t_ours, 1), ("datatrove (1 task)", theirs, t_theirs, 1)]
    if args.ray:
        on_ray, t_ray = run_ours_on_ray(corpus, args.threshold, args.cpus)
        rows.insert(1, (f"llmp on Ray ({args.cpus} CPUs)", on_ray, t_ray, args.cpus))

    print()
    print(f"{'':24} {'kept':>7} {'collapsed':>11} {'lost':>5} {'seconds':>8} {'docs/s/core':>12}")
    for name, kept, seconds, cores in rows:
        j = judge(corpus, kept)
        print(
            f"{name:24} {len(kept):>7,} {j['collapsed']:>5,}/{j['clusters']:<5,} "
            f"{j['origins_lost']:>5,} {seconds:>8.2f} {n / seconds / cores:>12,.0f}"
        )
    both = ours & theirs
    print()
    print(
        f"kept by both: {len(both):,}; only llmp: {len(ours - theirs):,}; "
        f"only datatrove: {len(theirs - ours):,}"
    )
    print(
        f"expected kept (one per origin): {judge(corpus, ours)['expected_kept']:,}; "
        f"overlap of the kept sets (Jaccard): {len(both) / len(ours | theirs):.4f}"
    )


if __name__ == "__main__":
    main()
