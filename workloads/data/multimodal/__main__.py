"""`python -m workloads.data.multimodal`: the multimodal pipeline, as the RayJob runs it.

    python -m workloads.data.multimodal --config FILE.yaml --input DIR_OR_S3 --output DIR
        [--address ADDR]

Ray: `ray.init(address=...)` joins the cluster named by --address or RAY_ADDRESS (a KubeRay
RayJob's submitter sets RAY_ADDRESS); with neither, a local Ray starts. Everything that can be
checked before Ray starts is: the config, the model directories, the input listing.

Failures: bad input (config, model path, input that is not media) is one line on stderr and
exit 2, nothing written. A corrupt file among others is recorded in the manifest as failed
with its reason and the job goes on: exit 0 with a line on stderr counting the failures, or
exit 1 when every file failed. stdout: one JSON line of the manifest's totals.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import NoReturn

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line."""

    def error(self, message: str) -> NoReturn:
        _say(f"{message} (see --help)")
        raise SystemExit(EXIT_BAD_INPUT)


def _say(message: str) -> None:
    print(f"multimodal: {' '.join(message.split())}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Validate, connect to Ray, run, report; the exit code."""
    p = _Parser(prog="python -m workloads.data.multimodal", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="YAML or JSON MultimodalPipelineConfig")
    p.add_argument("--input", required=True, help="media directory, file, or s3:// prefix")
    p.add_argument("--output", required=True, help="output directory or s3:// prefix")
    p.add_argument("--address", help="Ray address (default: RAY_ADDRESS, else a local Ray)")
    args = p.parse_args(argv)

    from contracts.multimodal_pipeline import MultimodalConfigError, load_config
    from workloads.data.engine import connect
    from workloads.data.multimodal.models import ModelPathError, check_model_dir
    from workloads.data.multimodal.pipeline import InputError, list_media, run

    try:
        config = load_config(args.config)
        for stage, uri in (("clip", config.models.clip), ("asr", config.models.whisper)):
            if config.runs(stage) and uri:  # type: ignore[arg-type]
                check_model_dir(uri)
        list_media(args.input)
    except (MultimodalConfigError, ModelPathError, InputError) as e:
        _say(str(e))
        return EXIT_BAD_INPUT

    connect(args.address)
    manifest = run(config, args.input, args.output)
    totals = manifest["totals"]
    print(json.dumps(totals, sort_keys=True))
    if totals["failed"]:
        failed = [f["path"] for f in manifest["files"] if f["status"] != "ok"]
        _say(
            f"{totals['failed']} of {totals['files']} files failed, reasons in "
            f"{args.output}/manifest.json: {', '.join(failed[:5])}"
        )
    return EXIT_FAILED if totals["files"] and not totals["ok"] else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
