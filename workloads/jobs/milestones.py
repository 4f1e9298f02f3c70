"""Milestone checkpoints: copy every Nth step out of the short-lived runs prefix, complete.

With `storage.buckets.<name>.retention`, the checkpoints bucket keeps every
checkpoint only `keep_days` under the runs prefix (where the file system's
data repository association exports `/checkpoints/<job>/step-N/`), and a
lifecycle rule expires them there. A checkpoint whose step is a multiple of
`--every-steps` is a milestone: this copier makes a server-side copy of it
under the milestone prefix (`<milestones><job>/step-N/`), which the bucket's
lifecycle tiers and keeps. S3 lifecycle rules filter by prefix, tags and size,
and overlapping rules take the shortest expiry, so a milestone cannot stay
beside the checkpoints that expire: it has to move.

The rules, so that a milestone is never taken for complete when it is not:

- only a checkpoint complete *in S3* is copied, by the trainer's own rule
  (`contracts.checkpoints.judge_checkpoint`: `COMPLETE` marker,
  `MANIFEST.json`, every file of the manifest at its size). The export is
  asynchronous, so a checkpoint sealed on Lustre may still be partial in S3;
  it is copied on a later run;
- every object but the `COMPLETE` marker is copied first (boto3's managed
  copy: CopyObject, or multipart UploadPartCopy above 5 GB), the copy is
  judged again at the destination, and only then is the marker copied: an
  interrupted run leaves an unsealed milestone, never a false one;
- idempotent: a milestone already complete at the destination is skipped,
  and an object already there at its size is not copied again.

It runs in the cluster as the CronJob of `components/checkpoint_milestones.py`
(the trainer image, a Pod Identity role limited to the bucket's two prefixes),
and by hand:

    python -m workloads.jobs.milestones copy --bucket B --runs-prefix runs/ \\
        --milestone-prefix milestones/ --every-steps 5000 [--dry-run]
    python -m workloads.jobs.milestones restore --bucket B --runs-prefix runs/ \\
        --milestone-prefix milestones/ --job JOB --step N

`restore` copies a milestone back under the runs prefix (marker last, again),
where the file system can import it (an FSx import task on `/checkpoints`) and
the trainer resume from it; it expires there again after the recent window.

Imports nothing heavy (boto3 only, and only when a client is made).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from contracts.checkpoints import COMPLETE, MANIFEST, ManifestMissing, Verdict, judge_checkpoint
from workloads.training import s3io

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

_STEP_DIR = re.compile(r"(?:^|/)(step-(\d+))/")
_PREFIX = re.compile(r"^([^/]+/)+$")
_JOB = re.compile(r"^[^/]+(/[^/]+)*$")

GIB = 1024**3
SINGLE_COPY_MAX = 5 * GIB
"""CopyObject copies objects up to 5 GB; larger ones need multipart UploadPartCopy."""
PART_SIZE = GIB
"""Parts of a multipart copy: few requests per shard, well inside S3's 10,000 parts."""


class BadInput(Exception):
    """A wrong argument or a bucket that cannot be reached: one line, exit 2."""


class CopyFailed(Exception):
    """S3 refused or broke a copy: one line, exit 1."""


@dataclass(frozen=True)
class Outcome:
    """What one run did with one milestone checkpoint."""

    source: str
    """`<runs prefix><job>/step-N/`."""
    destination: str
    step: int
    action: str
    """`copied`, `present` (complete at the destination already), `not complete` (in
    S3, yet: skipped), `would copy` (--dry-run)."""
    reason: str
    objects_copied: int = 0
    bytes_copied: int = 0


def transfer_config() -> Any:
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(multipart_threshold=SINGLE_COPY_MAX, multipart_chunksize=PART_SIZE)


def _objects(s3: Any, bucket: str, prefix: str) -> Iterator[tuple[str, int]]:
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            yield obj["Key"], int(obj["Size"])


def checkpoint_dirs(s3: Any, bucket: str, prefix: str) -> dict[str, dict[str, int]]:
    """`<job>/step-N/` (relative to `prefix`) -> {file relative to it: size}, for every
    published checkpoint directory at any depth under `prefix` (`tmp-step-N` and
    `universal-step-N` are not checkpoints to keep)."""
    dirs: dict[str, dict[str, int]] = {}
    for key, size in _objects(s3, bucket, prefix):
        rel = key[len(prefix) :]
        match = _STEP_DIR.search(rel)
        if match is None:
            continue
        directory = rel[: match.end()]
        dirs.setdefault(directory, {})[rel[match.end() :]] = size
    return dirs


def _step(directory: str) -> int:
    match = _STEP_DIR.search(directory)
    assert match is not None  # checkpoint_dirs only returns step-N directories
    return int(match.group(2))


def judge(s3: Any, bucket: str, directory_key: str, files: dict[str, int]) -> Verdict:
    """The completeness rule on the objects of one checkpoint directory in S3."""
    tag = directory_key.rstrip("/").rsplit("/", 1)[-1]

    def read_manifest() -> bytes:
        if MANIFEST not in files:
            raise ManifestMissing(directory_key + MANIFEST)
        body: bytes = s3.get_object(Bucket=bucket, Key=directory_key + MANIFEST)["Body"].read()
        return body

    return judge_checkpoint(
        tag, has_marker=COMPLETE in files, read_manifest=read_manifest, size_of=files.get
    )


def _listing(s3: Any, bucket: str, directory_key: str) -> dict[str, int]:
    return {key[len(directory_key) :]: size for key, size in _objects(s3, bucket, directory_key)}


def copy_checkpoint(
    s3: Any,
    bucket: str,
    source: str,
    destination: str,
    files: dict[str, int],
    copy: Callable[[str, str], None] | None = None,
) -> tuple[int, int]:
    """Copy the checkpoint directory `source` (its `files`, judged complete) to
    `destination` in the same bucket, the `COMPLETE` marker last and only once the copy is
    complete by the rule. Objects already at the destination at their size are kept.
    Returns (objects copied, bytes copied)."""
    config = transfer_config()

    def managed_copy(src: str, dst: str) -> None:
        s3.copy({"Bucket": bucket, "Key": src}, bucket, dst, Config=config)

    do_copy = copy or managed_copy
    present = _listing(s3, bucket, destination)
    copied, copied_bytes = 0, 0
    for rel in sorted(r for r in files if r != COMPLETE):
        if present.get(rel) == files[rel]:
            continue
        do_copy(source + rel, destination + rel)
        copied, copied_bytes = copied + 1, copied_bytes + files[rel]
    landed = _listing(s3, bucket, destination)
    # Judged as if sealed: every file of the manifest must be there at its size first.
    verdict = judge(s3, bucket, destination, {**landed, COMPLETE: 0})
    if not verdict.complete:
        raise CopyFailed(f"s3://{bucket}/{destination}: the copy is not complete: {verdict.reason}")
    if landed.get(COMPLETE) != files[COMPLETE]:
        do_copy(source + COMPLETE, destination + COMPLETE)
        copied, copied_bytes = copied + 1, copied_bytes + files[COMPLETE]
    return copied, copied_bytes


def copy_milestones(
    s3: Any,
    bucket: str,
    runs_prefix: str,
    milestone_prefix: str,
    every_steps: int,
    *,
    dry_run: bool = False,
    copy: Callable[[str, str], None] | None = None,
) -> list[Outcome]:
    """Copy every complete milestone checkpoint under `runs_prefix` that is not complete
    under `milestone_prefix` yet. `copy(src_key, dst_key)` replaces boto3's managed copy
    (tests use it to see the order)."""
    sources = checkpoint_dirs(s3, bucket, runs_prefix)
    done = checkpoint_dirs(s3, bucket, milestone_prefix)
    outcomes = []
    for directory in sorted(sources, key=lambda d: (d.rsplit("/step-", 1)[0], _step(d))):
        step = _step(directory)
        src, dst = runs_prefix + directory, milestone_prefix + directory
        if step % every_steps and not _final(s3, bucket, src, sources[directory]):
            continue
        there = done.get(directory)
        if there is not None and (verdict := judge(s3, bucket, dst, there)).complete:
            outcomes.append(Outcome(src, dst, step, "present", verdict.reason))
            continue
        verdict = judge(s3, bucket, src, sources[directory])
        if not verdict.complete:
            outcomes.append(Outcome(src, dst, step, "not complete", verdict.reason))
            continue
        if dry_run:
            outcomes.append(Outcome(src, dst, step, "would copy", verdict.reason))
            continue
        n, size = copy_checkpoint(s3, bucket, src, dst, sources[directory], copy)
        outcomes.append(Outcome(src, dst, step, "copied", verdict.reason, n, size))
    return outcomes


def _final(s3: Any, bucket: str, prefix: str, files: dict[str, int]) -> bool:
    """Whether the checkpoint at `prefix` is its run's last (`final` in its manifest, as
    train.py writes it at max_steps): kept like a milestone, whatever its step."""
    if MANIFEST not in files:
        return False
    try:
        body = s3.get_object(Bucket=bucket, Key=prefix + MANIFEST)["Body"].read()
        return json.loads(body).get("final") is True
    except (ValueError, AttributeError):
        return False


def restore_milestone(
    s3: Any, bucket: str, runs_prefix: str, milestone_prefix: str, job: str, step: int
) -> Outcome:
    """Copy the milestone `<job>/step-<step>/` back under `runs_prefix`, marker last."""
    directory = f"{job}/step-{step}/"
    src, dst = milestone_prefix + directory, runs_prefix + directory
    files = _listing(s3, bucket, src)
    if not files:
        raise BadInput(f"no milestone s3://{bucket}/{src}")
    verdict = judge(s3, bucket, src, files)
    if not verdict.complete:
        raise BadInput(f"milestone s3://{bucket}/{src} is not complete: {verdict.reason}")
    n, size = copy_checkpoint(s3, bucket, src, dst, files)
    return Outcome(src, dst, step, "restored", verdict.reason, n, size)


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def _prefix_arg(value: str) -> str:
    if not _PREFIX.match(value):
        raise argparse.ArgumentTypeError(f"{value!r}: a key prefix ending in '/', e.g. runs/")
    return value


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: a whole number of steps, 1 or more")
    return n


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2, no usage dump
        _error(message)
        sys.exit(EXIT_BAD_INPUT)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = _Parser(prog="python -m workloads.jobs.milestones", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, help_ in (
        ("copy", "copy complete milestone checkpoints to the milestone prefix"),
        ("restore", "copy one milestone back under the runs prefix"),
    ):
        c = sub.add_parser(name, help=help_)
        c.add_argument("--bucket", required=True, help="the checkpoints bucket")
        c.add_argument("--runs-prefix", type=_prefix_arg, required=True, help="e.g. runs/")
        c.add_argument(
            "--milestone-prefix", type=_prefix_arg, required=True, help="e.g. milestones/"
        )
        c.add_argument("--endpoint-url", default=None, help="S3 endpoint other than AWS's")
        if name == "copy":
            c.add_argument("--every-steps", type=_positive, required=True, help="milestone step")
            c.add_argument("--dry-run", action="store_true", help="say what would be copied")
        else:
            c.add_argument("--job", required=True, help="the job's path under the prefixes")
            c.add_argument("--step", type=_positive, required=True, help="the milestone's step")
    args = p.parse_args(argv)
    if args.runs_prefix.startswith(args.milestone_prefix) or args.milestone_prefix.startswith(
        args.runs_prefix
    ):
        p.error("--runs-prefix and --milestone-prefix must not overlap")
    if args.command == "restore" and not _JOB.match(args.job.strip("/")):
        p.error(f"--job {args.job!r}: the job's folder under the prefixes, e.g. llama-70b")
    return args


def _error(message: str) -> None:
    print(f"milestones: {' '.join(message.split())}", file=sys.stderr, flush=True)


def s3_client(endpoint_url: str | None) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint_url)


def run(args: argparse.Namespace, s3: Any) -> list[Outcome]:
    import botocore.exceptions as boto_errors

    try:
        if args.command == "copy":
            return copy_milestones(
                s3,
                args.bucket,
                args.runs_prefix,
                args.milestone_prefix,
                args.every_steps,
                dry_run=args.dry_run,
            )
        job = args.job.strip("/")
        return [
            restore_milestone(
                s3, args.bucket, args.runs_prefix, args.milestone_prefix, job, args.step
            )
        ]
    except (boto_errors.BotoCoreError, boto_errors.ClientError) as exc:
        bad, line = s3io.classify(exc, args.bucket) or (False, str(exc))
        raise (BadInput(line) if bad else CopyFailed(f"s3://{args.bucket}: {line}")) from None


def main(argv: list[str] | None = None, s3: Any | None = None) -> int:
    args = parse_args(argv)
    client = s3 if s3 is not None else s3_client(args.endpoint_url)
    try:
        outcomes = run(args, client)
    except BadInput as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    except CopyFailed as exc:
        _error(str(exc))
        return EXIT_FAILED
    for outcome in outcomes:
        print(json.dumps({"event": "milestone", **asdict(outcome)}, sort_keys=True), flush=True)
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.action] = counts.get(outcome.action, 0) + 1
    print(json.dumps({"event": "summary", "bucket": args.bucket, **counts}), flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
