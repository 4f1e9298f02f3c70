"""The shipped evaluation datasets, generated deterministically and committed as JSONL.

The files under `tasks/data/` are what lm-eval reads; this module is how they were
made, so a reviewer can regenerate them and see that nothing was hand-tuned:

    python -m workloads.evaluation.taskdata          # rewrite tasks/data/*.jsonl
    python -m workloads.evaluation.taskdata --check  # exit 1 if a file differs

Generation uses only `random.Random(seed)` (stable across Python versions for
`randrange`/`shuffle`/`choice`), so the bytes are reproducible. Every text stays in
printable ASCII with no characters beyond letters, digits, space, newline and
`.,:;!?'"()+-*/=#_`, so even the tests' character-level tokenizer sees no unknowns.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent / "tasks" / "data"
ARITHMETIC_SEED = 20_240_611
COPY_SEED = 20_240_612
N_ARITHMETIC = 60
N_COPY = 40

# Original prose (written for this repository, so it cannot sit in any pre-training
# crawl): a small held-out text for loglikelihood_rolling. Short paragraphs keep a
# character-level model's rolling windows few.
HELDOUT_TEXT = (
    "The night shift noticed that the queue had stopped moving a little after two. "
    "Nothing had failed; the scheduler was simply waiting for a node that would never "
    "come back, and nobody had told it so.",
    "A checkpoint is only as good as the last file that was written to it. The marker "
    "goes in last, after every shard has been read back and its size compared with the "
    "manifest; a reader that finds no marker walks away.",
    "When the storage volume filled up, the trainer did not crash. It kept computing "
    "gradients for forty minutes and saved none of them, which is worse: the graphs "
    "looked healthy while the work was being thrown away.",
    "Mira asked why the evaluation ran on a tiny model in the tests. The answer was "
    "that the numbers do not matter there; what matters is that every task loads, every "
    "metric is computed, and nothing reaches for the network.",
    "The old rack had twelve machines and one switch. When the switch rebooted, all "
    "twelve lost their peers at once, and the job restarted from a snapshot that was "
    "already three hours old.",
    'Good alerts describe a symptom a person can act on. "Disk at 91 percent" is a '
    'fact; "the next checkpoint will not fit" is a reason to get out of bed.',
    "We measured the same model twice, a week apart, and got two different answers. "
    "The second run had quietly downloaded a newer copy of the benchmark. Since then "
    "every dataset ships with the code that reads it.",
    "Learning rate warmup is a promise to the optimizer: the first steps will be "
    "small, so the early statistics it keeps are not ruined by one unlucky batch.",
    "On Tuesday the bill doubled. A test cluster had been left with eight large nodes "
    "and an autoscaler whose lower bound was also eight, so it never scaled down.",
    "A held-out set is held out only until someone tunes against it. After the tenth "
    "time a threshold is nudged to let a model through, the set measures the threshold.",
    "Serving is a different animal from training. A training job wants throughput and "
    "forgives a slow step; a user waiting for a reply forgives nothing, and notices "
    "the slowest one in a hundred.",
    "The runbook said to drain the node first, then replace it. The second engineer "
    "did it in the other order, and learned why the runbook was written down.",
)


def arithmetic_items(n: int = N_ARITHMETIC, seed: int = ARITHMETIC_SEED) -> list[dict[str, Any]]:
    """`n` one- and two-digit sums, differences and small products, four choices each.

    The distractors are the answer's near neighbours (+-1, +-2, +-10), so a model has
    to read the operands rather than guess a plausible magnitude; the correct choice's
    position is shuffled so position bias cannot score above chance.
    """
    rng = random.Random(seed)
    items: list[dict[str, Any]] = []
    for _ in range(n):
        op = rng.choice("+-*")
        if op == "*":
            a, b = rng.randrange(2, 10), rng.randrange(2, 10)
            answer = a * b
        else:
            a, b = rng.randrange(1, 50), rng.randrange(1, 50)
            if op == "-" and b > a:
                a, b = b, a
            answer = a + b if op == "+" else a - b
        offsets = [d for d in (-10, -2, -1, 1, 2, 10) if answer + d >= 0]
        wrong = rng.sample(offsets, 3)
        choices = [str(answer), *(str(answer + d) for d in wrong)]
        rng.shuffle(choices)
        items.append(
            {"question": f"{a} {op} {b}", "choices": choices, "answer": choices.index(str(answer))}
        )
    return items


def copy_items(n: int = N_COPY, seed: int = COPY_SEED) -> list[dict[str, Any]]:
    """`n` random lowercase strings of 3-6 letters to repeat verbatim (generate_until)."""
    rng = random.Random(seed)
    return [
        {"source": "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randrange(3, 7)))}
        for _ in range(n)
    ]


def heldout_items() -> list[dict[str, Any]]:
    """The held-out paragraphs, one document each."""
    return [{"text": t} for t in HELDOUT_TEXT]


# file name -> generator; the YAML files under tasks/ name these files.
GENERATORS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "arithmetic.jsonl": arithmetic_items,
    "copy.jsonl": copy_items,
    "heldout_text.jsonl": heldout_items,
}


def render(rows: list[dict[str, Any]]) -> str:
    """JSONL with sorted keys and a trailing newline: one canonical byte form."""
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def write_task_data(out: Path = DATA_DIR) -> list[Path]:
    """Write every shipped dataset under `out`; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in GENERATORS.items():
        path = out / name
        path.write_text(render(make()), encoding="utf-8")
        written.append(path)
    return written


def stale_files(out: Path = DATA_DIR) -> list[str]:
    """Names of the shipped files whose bytes differ from what the generators make."""
    return [
        name
        for name, make in GENERATORS.items()
        if not (out / name).is_file() or (out / name).read_text(encoding="utf-8") != render(make())
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for name in stale:
            print(
                f"{DATA_DIR / name}: differs from its generator; run without --check",
                file=sys.stderr,
            )
        return 1 if stale else 0
    for path in write_task_data():
        print(path, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
