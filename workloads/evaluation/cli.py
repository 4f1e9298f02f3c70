"""`python -m workloads.evaluation`: evaluate an exported model, gate it, report.

    python -m workloads.evaluation --model DIR [--tasks a,b] [--limit N]
        [--heldout DIR --seq-len N [--max-windows N]] [--thresholds FILE.yaml]
        [--batch-size N] [--device cpu] [--dtype float32] [--verbose]

Runs the shipped lm-eval tasks (all of them unless --tasks) on the Hugging Face
directory DIR, offline; with --heldout also the perplexity on held-out token shards.

stderr: the results table and, on failure, one line per reason; errors are one line.
stdout: one JSON line (model, tasks, limit, results, perplexity, passed, failures;
NaN and infinities as null) when something was evaluated.
Exit codes: 0 passed; 1 the gate failed or the evaluation itself failed;
2 bad input (nothing evaluated, nothing on stdout).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from contracts.gates import Thresholds, ThresholdsError, gate, load_thresholds, results_table
from workloads.evaluation import harness

if TYPE_CHECKING:
    from workloads.training.data import TokenShards

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
DTYPES = ("float32", "bfloat16", "float16", "auto")


class BadInput(Exception):
    """Exit 2: the arguments or the files they name are wrong."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (argparse prints usage plus a line)."""

    def error(self, message: str) -> NoReturn:
        _say(f"{message} (see --help)")
        raise SystemExit(EXIT_BAD_INPUT)


def _say(message: str) -> None:
    print(f"evaluation: {' '.join(message.split())}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(
        prog="python -m workloads.evaluation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, help="Hugging Face model directory")
    p.add_argument("--tasks", default=None, help="comma-separated shipped tasks (default: all)")
    p.add_argument("--limit", type=int, default=None, help="documents per task (default: all)")
    p.add_argument("--heldout", default=None, help="directory of held-out token shards")
    p.add_argument("--seq-len", type=int, default=None, help="window length for --heldout")
    p.add_argument("--max-windows", type=int, default=256, help="held-out windows to score")
    p.add_argument("--bin-dtype", choices=("uint16", "uint32"), default="uint16")
    p.add_argument("--thresholds", default=None, help="YAML: max_perplexity, tasks, tasks_max")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--verbose", action="store_true", help="keep lm-eval's warnings")
    return p.parse_args(argv)


def _positive(name: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise BadInput(f"{name} {value}: expected a positive integer")


def _task_list(raw: str | None) -> list[str] | None:
    if raw is None:
        return None
    names = [t.strip() for t in raw.split(",")]
    if not all(names):
        raise BadInput(f"--tasks {raw!r}: an empty name; expected names separated by commas")
    return names


def _validate(args: argparse.Namespace) -> tuple[list[str], Thresholds, TokenShards | None]:
    """The tasks to run, the thresholds and the held-out shards, or BadInput; cheap
    checks first, so a typo is reported before torch or lm-eval has loaded."""
    problem = harness.model_dir_problem(args.model)
    if problem:
        raise BadInput(f"--model {problem}")
    for name in ("limit", "seq_len", "max_windows", "batch_size"):
        _positive("--" + name.replace("_", "-"), getattr(args, name))
    if (args.heldout is None) != (args.seq_len is None):
        raise BadInput("--heldout and --seq-len go together: the shards and their window length")
    try:
        thresholds = load_thresholds(args.thresholds) if args.thresholds else Thresholds()
    except ThresholdsError as e:
        raise BadInput(f"--thresholds {e}") from None
    if thresholds.max_perplexity is not None and args.heldout is None:
        raise BadInput(
            f"--thresholds {args.thresholds}: max_perplexity needs --heldout DIR --seq-len N"
        )
    requested = _task_list(args.tasks)
    try:
        tasks = harness.expand_tasks(requested) if requested else harness.shipped_tasks()
    except harness.HarnessInputError as e:
        raise BadInput(f"--tasks {e}") from None
    not_run = [t for t in thresholds.task_names() if t not in tasks]
    if not_run:
        raise BadInput(
            f"--thresholds {args.thresholds} limits {', '.join(not_run)}, which this run does "
            f"not evaluate (tasks: {', '.join(tasks)}); add them to --tasks"
        )
    return tasks, thresholds, _open_shards(args)


def _open_shards(args: argparse.Namespace) -> TokenShards | None:
    if args.heldout is None:
        return None
    from workloads.training.data import TokenShards

    try:
        return TokenShards(args.heldout, args.seq_len, bin_dtype=args.bin_dtype)
    except (OSError, ValueError) as e:
        raise BadInput(f"--heldout {' '.join(str(e).split())}") from None


def _finite_or_none(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def _report(
    args: argparse.Namespace,
    tasks: list[str],
    results: dict[str, dict[str, float]],
    perplexity: float | None,
    failures: list[str],
) -> dict[str, Any]:
    return {
        "model": str(Path(args.model).resolve()),
        "tasks": tasks,
        "limit": args.limit,
        "results": {
            t: {m: _finite_or_none(v) for m, v in metrics.items()} for t, metrics in results.items()
        },
        "perplexity": _finite_or_none(perplexity),
        "passed": not failures,
        "failures": failures,
    }


def _heldout(args: argparse.Namespace, shards: TokenShards | None) -> float | None:
    if shards is None:
        return None
    from workloads.evaluation.perplexity import heldout_perplexity, load_causal_lm

    with tempfile.TemporaryDirectory(prefix="llmp-eval-") as tmp, harness.offline(Path(tmp)):
        model = load_causal_lm(args.model, device=args.device, dtype=args.dtype)
    try:
        return heldout_perplexity(model, shards, args.max_windows, batch_size=args.batch_size)
    except ValueError as e:  # token ids outside the vocabulary: shards of another model
        raise BadInput(f"--heldout {args.heldout}: {e}") from None


def run(args: argparse.Namespace) -> int:
    tasks, thresholds, shards = _validate(args)
    try:
        with harness.stdout_to_stderr():
            perplexity = _heldout(args, shards)
            results = harness.run_harness(
                args.model,
                tasks,
                limit=args.limit,
                batch_size=args.batch_size,
                device=args.device,
                dtype=args.dtype,
                verbose=args.verbose,
            )
    except (BadInput, harness.HarnessInputError):
        raise
    except Exception as e:  # the evaluation broke: report it as a failure, one line
        _say(f"evaluation of {args.model} failed: {type(e).__name__}: {e}")
        return EXIT_FAILED
    failures = gate(results, perplexity, thresholds)
    print(results_table(results), file=sys.stderr)
    if perplexity is not None:
        print(f"held-out perplexity ({args.heldout}): {perplexity:.4f}", file=sys.stderr)
    for reason in failures:
        _say(f"FAIL {reason}")
    print(json.dumps(_report(args, tasks, results, perplexity, failures)), flush=True)
    return EXIT_FAILED if failures else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    try:
        return run(parse_args(argv))
    except SystemExit as e:  # argparse: --help (0) or a usage error (already said)
        return e.code if isinstance(e.code, int) else EXIT_BAD_INPUT
    except (BadInput, harness.HarnessInputError) as e:
        _say(str(e))
        return EXIT_BAD_INPUT
    except Exception as e:  # anything else is a bug here, but still never a traceback
        _say(f"{type(e).__name__}: {e}")
        return EXIT_BAD_INPUT
