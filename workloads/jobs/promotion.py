"""Model promotion: newest complete checkpoint -> fp32 safetensors -> held-out gate -> S3.

`python -m workloads.jobs.promotion --checkpoints DIR --heldout DIR --bucket B
--prefix revisions/ [--max-perplexity X] [--endpoint-url URL] [--job-config FILE]`

1. Select the newest *complete* checkpoint under DIR with the trainer's own rule
   (`checkpointing.select_resume`: a `step-N` with its `COMPLETE` marker whose files
   match the manifest sizes; `latest`, `tmp-*` and damaged directories are ignored).
2. Consolidate its ZeRO shards into one fp32 state dict with DeepSpeed's
   `get_fp32_state_dict_from_zero_checkpoint` and write `model.safetensors` plus
   `config.json` (architecture, model dims, source step).
3. Rebuild the model *from those files* (not from the shards) and measure perplexity
   on the held-out token shards (`TokenShards`, every window once, up to
   `--max-eval-windows`).
4. Gate: perplexity NaN/inf, or above `--max-perplexity`, fails (exit 1) and publishes
   nothing.
5. Publish to `s3://B/<prefix>/<UTC yyyymmddThhmmssZ>-step-<N>/`: the weights and
   config first, each checked by size after upload, then `manifest.json` (sha256 and
   size of every file, perplexity, source), and `COMPLETE` last. A reader trusts a
   revision only when `COMPLETE` exists; a failed upload removes what it wrote.

Model dims come from `--job-config` (the training job's config) when given;
otherwise they are read off the weight shapes, and `--n-head` (which no shape
determines) is required.

Exit codes: 0 promoted; 1 gate failed or publishing failed; 2 bad input (no complete
checkpoint, unreadable held-out data or config, unreachable endpoint, missing bucket).
stdout: one JSON line on success; errors: one line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import io
import json
import math
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")

from workloads.training import checkpointing as ckpt
from workloads.training.data import TokenShards
from workloads.training.model import GPT, ModelConfig

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
MANIFEST = "manifest.json"
COMPLETE = "COMPLETE"
ARCHITECTURE = "workloads.training.model.GPT"

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
_BLOCK_RE = re.compile(r"^blocks\.(\d+)\.")


class BadInput(Exception):
    """Exit 2: the inputs are wrong, nothing was evaluated or published."""


class PromotionFailed(Exception):
    """Exit 1: the gate failed or publishing failed."""


@dataclass(frozen=True)
class Exported:
    step: int
    tag: str
    model: ModelConfig
    files: dict[str, Path]


# ---------------------------------------------------------------------------
# Consolidation
# ---------------------------------------------------------------------------


def consolidate(checkpoint: ckpt.Checkpoint) -> dict[str, torch.Tensor]:
    """The checkpoint's fp32 master weights as one state dict (contiguous, unshared)."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    # zero_to_fp32 prints progress (stdout) and progress bars (stderr); stdout carries our
    # JSON result and errors are one line, so its chatter is dropped.
    chatter = io.StringIO()
    with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
        sd = get_fp32_state_dict_from_zero_checkpoint(
            str(checkpoint.path.parent), tag=checkpoint.tag
        )
    return {k: v.detach().float().contiguous().clone() for k, v in sd.items()}


def infer_model_config(sd: dict[str, torch.Tensor], n_head: int) -> ModelConfig:
    try:
        vocab, d_model = sd["tok_emb.weight"].shape
        seq_len = sd["pos_emb.weight"].shape[0]
    except KeyError as exc:
        raise BadInput(f"the checkpoint is not a {ARCHITECTURE}: no {exc}") from None
    layers = {int(m.group(1)) for k in sd if (m := _BLOCK_RE.match(k))}
    return ModelConfig(
        vocab_size=int(vocab),
        seq_len=int(seq_len),
        n_layer=len(layers),
        n_head=n_head,
        d_model=int(d_model),
    )


def model_from_state_dict(cfg: ModelConfig, sd: dict[str, torch.Tensor]) -> GPT:
    model = GPT(cfg)
    try:
        model.load_state_dict(sd, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0:2]
        raise BadInput(f"weights do not fit the model config: {' '.join(first)}") from None
    return model.eval()


def export(
    checkpoint: ckpt.Checkpoint, cfg: ModelConfig | None, n_head: int | None, out: Path
) -> Exported:
    """Write model.safetensors and config.json for `checkpoint` into `out`."""
    from safetensors.torch import save_file

    sd = consolidate(checkpoint)
    if cfg is None:
        if n_head is None:
            raise BadInput("pass --job-config (or --n-head): no weight shape gives the head count")
        try:
            cfg = infer_model_config(sd, n_head)
        except ValueError as exc:
            raise BadInput(f"model config: {exc}") from None
    model_from_state_dict(cfg, sd)  # fail before writing anything if the dims are wrong
    out.mkdir(parents=True, exist_ok=True)
    weights = out / WEIGHTS
    save_file(
        sd,
        str(weights),
        metadata={"format": "pt", "step": str(checkpoint.step), "source": checkpoint.tag},
    )
    config = {
        "architecture": ARCHITECTURE,
        "dtype": "float32",
        "model": cfg.model_dump(),
        "step": checkpoint.step,
        "source_checkpoint": checkpoint.tag,
        "source_world_size": checkpoint.meta.get("world_size"),
        "source_zero_stage": checkpoint.meta.get("zero_stage"),
    }
    (out / CONFIG).write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
    return Exported(checkpoint.step, checkpoint.tag, cfg, {WEIGHTS: weights, CONFIG: out / CONFIG})


def load_promoted(directory: str | Path) -> GPT:
    """The model a promoted revision describes: config.json + model.safetensors."""
    from safetensors.torch import load_file

    directory = Path(directory)
    config = json.loads((directory / CONFIG).read_text())
    if config.get("architecture") != ARCHITECTURE:
        raise BadInput(f"{directory / CONFIG}: not a {ARCHITECTURE}")
    cfg = ModelConfig.model_validate(config["model"])
    return model_from_state_dict(cfg, load_file(str(directory / WEIGHTS)))


# ---------------------------------------------------------------------------
# Evaluation and gate
# ---------------------------------------------------------------------------


@torch.no_grad()
def perplexity(model: GPT, shards: TokenShards, max_windows: int, batch_size: int = 16) -> float:
    """exp(mean next-token cross-entropy) over the first `max_windows` windows of the
    held-out stream (each window once; all windows when there are fewer)."""
    n = min(shards.n_windows, max_windows)
    total, count = 0.0, 0
    for first in range(0, n, batch_size):
        size = min(batch_size, n - first)
        loss = model(shards.batch(first, size))
        tokens = size * shards.seq_len
        total += float(loss) * tokens
        count += tokens
    mean = total / count
    return math.exp(mean) if math.isfinite(mean) else float("nan")


def gate(ppl: float, max_perplexity: float | None) -> str | None:
    """Why the model may not be promoted, or None."""
    if not math.isfinite(ppl):
        return f"held-out perplexity is {ppl}"
    if max_perplexity is not None and ppl > max_perplexity:
        return f"held-out perplexity {ppl:.4g} exceeds the limit {max_perplexity:.4g}"
    return None


# ---------------------------------------------------------------------------
# Publishing
# ---------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def revision_name(step: int, now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.UTC)
    return f"{now.astimezone(dt.UTC):%Y%m%dT%H%M%SZ}-step-{step}"


def revision_prefix(prefix: str, revision: str) -> str:
    base = prefix.strip("/")
    return f"{base}/{revision}/" if base else f"{revision}/"


def build_manifest(exported: Exported, ppl: float, revision: str) -> dict[str, Any]:
    return {
        "revision": revision,
        "step": exported.step,
        "source_checkpoint": exported.tag,
        "heldout_perplexity": ppl,
        "files": {
            name: {"sha256": sha256_of(path), "bytes": path.stat().st_size}
            for name, path in sorted(exported.files.items())
        },
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def publish(
    s3: Any, bucket: str, key_prefix: str, exported: Exported, manifest: dict[str, Any]
) -> None:
    """Upload the files, then manifest.json, then COMPLETE (last). On failure remove what
    this call wrote, so no half revision is left behind (it could not be trusted anyway:
    it has no COMPLETE)."""
    existing = s3.list_objects_v2(Bucket=bucket, Prefix=key_prefix, MaxKeys=1)
    if existing.get("KeyCount", 0):
        raise PromotionFailed(f"s3://{bucket}/{key_prefix} already exists")
    written: list[str] = []
    try:
        for name, path in sorted(exported.files.items()):
            key = key_prefix + name
            s3.upload_file(str(path), bucket, key)
            written.append(key)
            size = s3.head_object(Bucket=bucket, Key=key)["ContentLength"]
            if size != manifest["files"][name]["bytes"]:
                raise PromotionFailed(f"s3://{bucket}/{key}: {size} bytes uploaded")
        body = json.dumps(manifest, indent=1, sort_keys=True).encode()
        s3.put_object(
            Bucket=bucket, Key=key_prefix + MANIFEST, Body=body, ContentType="application/json"
        )
        written.append(key_prefix + MANIFEST)
        s3.put_object(
            Bucket=bucket, Key=key_prefix + COMPLETE, Body=hashlib.sha256(body).hexdigest().encode()
        )
    except BaseException:
        for key in written:
            with contextlib.suppress(Exception):
                s3.delete_object(Bucket=bucket, Key=key)
        raise


def s3_client(endpoint_url: str | None) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint_url)


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def promote(args: argparse.Namespace, s3: Any | None = None) -> dict[str, Any]:
    import botocore.exceptions as boto_errors

    chosen = ckpt.select_resume(args.checkpoints)
    if chosen is None:
        raise BadInput(f"no complete checkpoint under {args.checkpoints}")
    cfg: ModelConfig | None = None
    bin_dtype = args.bin_dtype
    if args.job_config is not None:
        from workloads.training.ds_config import load_job_config

        try:
            job = load_job_config(args.job_config)
        except (OSError, ValueError) as exc:
            raise BadInput(f"{args.job_config}: {str(exc).splitlines()[0]}") from None
        cfg, bin_dtype = job.model, args.bin_dtype or job.data.bin_dtype
    with tempfile.TemporaryDirectory(prefix="promotion-") as scratch:
        out = Path(args.out) if args.out else Path(scratch)
        exported = export(chosen, cfg, args.n_head, out)
        try:
            shards = TokenShards(args.heldout, exported.model.seq_len, bin_dtype or "uint16")
        except (OSError, ValueError) as exc:
            raise BadInput(f"held-out data: {exc}") from None
        model = load_promoted(out)  # evaluate what will be published, not the shards
        ppl = perplexity(model, shards, args.max_eval_windows)
        reason = gate(ppl, args.max_perplexity)
        if reason is not None:
            raise PromotionFailed(f"not promoted: {reason} (step {exported.step})")
        revision = revision_name(exported.step)
        key_prefix = revision_prefix(args.prefix, revision)
        manifest = build_manifest(exported, ppl, revision)
        client = s3 if s3 is not None else s3_client(args.endpoint_url)
        try:
            publish(client, args.bucket, key_prefix, exported, manifest)
        except boto_errors.NoCredentialsError:
            raise BadInput("no AWS credentials") from None
        except (boto_errors.EndpointConnectionError, boto_errors.ConnectTimeoutError) as exc:
            raise BadInput(f"cannot reach the endpoint: {exc}") from None
        except boto_errors.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchBucket", "404"):
                raise BadInput(f"no bucket {args.bucket}") from None
            raise PromotionFailed(f"publishing failed: {exc}") from None
        except boto_errors.BotoCoreError as exc:
            raise PromotionFailed(f"publishing failed: {exc}") from None
    return {
        "event": "promoted",
        "uri": f"s3://{args.bucket}/{key_prefix}",
        "revision": revision,
        "step": exported.step,
        "heldout_perplexity": ppl,
        "files": manifest["files"],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoints", required=True, help="training checkpoint root")
    p.add_argument("--heldout", required=True, help="directory of held-out token shards")
    p.add_argument("--bucket", required=True, help="models bucket")
    p.add_argument("--prefix", default="revisions/", help="key prefix of revisions")
    p.add_argument("--max-perplexity", type=float, default=None, help="gate: fail above this")
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint other than AWS's (moto)")
    p.add_argument("--job-config", default=None, help="the training job's config (model dims)")
    p.add_argument("--n-head", type=int, default=None, help="head count without --job-config")
    p.add_argument("--bin-dtype", choices=("uint16", "uint32"), default=None)
    p.add_argument("--max-eval-windows", type=int, default=1024)
    p.add_argument("--out", default=None, help="keep the exported files here (default: temp)")
    return p.parse_args(argv)


def _error(message: str) -> None:
    print(f"promotion: {' '.join(message.split())}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None, s3: Any | None = None) -> int:
    args = parse_args(argv)
    if args.max_eval_windows < 1:
        _error("--max-eval-windows must be at least 1")
        return EXIT_BAD_INPUT
    if args.max_perplexity is not None and not args.max_perplexity > 0:
        _error("--max-perplexity must be a positive number")
        return EXIT_BAD_INPUT
    try:
        result = promote(args, s3)
    except BadInput as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    except PromotionFailed as exc:
        _error(str(exc))
        return EXIT_FAILED
    print(json.dumps(result, sort_keys=True), flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
