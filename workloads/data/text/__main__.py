"""`python -m workloads.data.text --config FILE --input DIR_OR_S3 --output DIR_OR_S3`.

Inside a KubeRay RayJob the submitter sets RAY_ADDRESS and the driver joins that
cluster; without it (or `--address`) a local Ray starts. Bad config or input: one line
on stderr, exit 2. A failure while the cluster runs: one line, exit 1. The last line on
stdout is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from contracts.pipeline import PipelineConfigError, load_config
from contracts.text_pipeline import TextPipelineConfig
from workloads.data.engine import connect
from workloads.data.text.pipeline import InputError, preflight, run
from workloads.data.text.shards import Manifest
from workloads.data.text.tokenizer import TokenizerError

PROG = "python -m workloads.data.text"


def main(argv: list[str] | None = None) -> int:
    return command(PROG, __doc__, TextPipelineConfig, preflight, run, argv)


def command(
    prog: str,
    doc: str | None,
    model: type[TextPipelineConfig],
    preflight: Callable[[Any, str], object],
    run: Callable[[Any, str, str], list[Manifest]],
    argv: list[str] | None = None,
) -> int:
    """The command line of a pipeline that ends in the text pipeline's shards (this one,
    and the web one): its config, `preflight` before Ray, `run` on it, the summary."""
    parser = argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n", 1)[0])
    parser.add_argument("--config", required=True, help=f"{model.__name__} as YAML or JSON")
    parser.add_argument("--input", required=True, help="directory or s3://bucket/prefix/")
    parser.add_argument("--output", required=True, help="directory (FSx) or s3:// prefix")
    parser.add_argument("--address", default=None, help="Ray address (default: $RAY_ADDRESS)")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, model)
    except PipelineConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    try:
        preflight(cfg, args.input)  # bad input fails here, before a cluster is joined
    except (InputError, TokenizerError, OSError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    try:
        connect(args.address)
        import ray.data

        ray.data.DataContext.get_current().enable_progress_bars = False
        manifests = run(cfg, args.input, args.output)
    except (InputError, TokenizerError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a task's failure arrives wrapped: keep its first line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
        print(f"{prog}: failed: {first}", file=sys.stderr)
        return 1
    stats = manifests[0].stats
    summary = {
        "output": args.output,
        "parts": len(manifests),
        "tokenizer_sha256": manifests[0].tokenizer.sha256,
        **stats.model_dump(mode="json"),
    }
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
