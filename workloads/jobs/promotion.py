"""Model promotion: newest complete checkpoint -> a Hugging Face directory vLLM serves ->
evaluation gate -> S3.

`python -m workloads.jobs.promotion --checkpoints DIR --job-config FILE --bucket B
--name MODEL [--prefix revisions/] [--heldout DIR] [--eval-config FILE]
[--dtype bfloat16|float32] [--endpoint-url URL] [--out DIR]`

1. Select the newest *complete* checkpoint under DIR with the trainer's own rule
   (`checkpointing.select_resume`: a `step-N` with its `COMPLETE` marker whose files
   match the manifest sizes; `latest`, `tmp-*` and damaged directories are ignored).
2. Consolidate its ZeRO shards with DeepSpeed's `get_fp32_state_dict_from_zero_checkpoint`
   into the training job's model (`--job-config`: architecture, base weights, LoRA) and
   write a Hugging Face directory: `model.safetensors`, `config.json` whose
   `architectures` the pinned vLLM serves (refused otherwise), `generation_config.json`
   and the tokenizer's files. A LoRA job's adapters are merged into the base for
   serving, and also written as a peft adapter under `adapter/` (`--enable-lora`).
3. Check the export: transformers loads the directory, and its logits on a probe batch
   match the checkpoint's (max abs difference within the tolerance of `--dtype`).
4. Evaluate what will be published: held-out perplexity on token shards (`--heldout`)
   and lm-evaluation-harness tasks that ship in the repo (`--eval-config`: tasks, limit
   and thresholds). The gate fails (exit 1, nothing published) on NaN, on a perplexity
   above `max_perplexity` or a task metric below its minimum.
5. Publish to `s3://B/<prefix>/<name>/<UTC yyyymmddThhmmssZ>-step-<N>/`: every file,
   each checked by size after upload, then `manifest.json` (sha256 and size of every
   file, the evaluation and its thresholds, the export check), and `COMPLETE` last. A
   reader trusts a revision only when `COMPLETE` exists; a failed upload removes what
   it wrote. `<name>/<revision>` is what `serving.models[].revision` names.

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
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

if not torch.cuda.is_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")

from contracts import architectures as vllm_architectures
from contracts import revisions
from contracts.training import JobConfig
from spec.errors import validation_line
from workloads.evaluation import Thresholds, heldout_perplexity, run_harness
from workloads.evaluation import gate as evaluation_gate
from workloads.training import checkpointing as ckpt
from workloads.training import model as hf
from workloads.training import s3io
from workloads.training.data import TokenShards

MANIFEST = revisions.MANIFEST
COMPLETE = revisions.COMPLETE
ADAPTER_DIR = "adapter"
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
LOGIT_TOLERANCE = {"float32": 1e-4, "bfloat16": 0.25}
"""Max abs logit difference the export may show against the checkpoint's fp32 model: fp32
is the same arithmetic; bf16 rounds every weight to 8 mantissa bits (a relative 2^-9),
which moves logits of a few units by hundredths. A wrong mapping moves them by units."""

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


class BadInput(Exception):
    """Exit 2: the inputs are wrong, nothing was evaluated or published."""


class PromotionFailed(Exception):
    """Exit 1: the gate failed or publishing failed."""


class EvalConfig(BaseModel):
    """`--eval-config`: what a revision is evaluated on and the thresholds it must meet."""

    model_config = ConfigDict(extra="forbid")

    tasks: list[str] = Field(
        default_factory=list, description="lm-evaluation-harness tasks (workloads/evaluation)"
    )
    limit: int | None = Field(None, ge=1, description="items per task (all when unset)")
    max_eval_windows: int = Field(1024, ge=1, description="held-out windows for perplexity")
    thresholds: Thresholds = Field(default_factory=Thresholds)


@dataclass
class Exported:
    step: int
    tag: str
    architecture: str
    dtype: str
    directory: Path
    files: dict[str, Path] = field(default_factory=dict)
    check: dict[str, Any] = field(default_factory=dict)
    loaded: Any = None
    """The directory as transformers loads it (fp32, eval): what the export check ran and
    what the evaluation scores."""


# ---------------------------------------------------------------------------
# Consolidation and export
# ---------------------------------------------------------------------------


def consolidate(checkpoint: ckpt.Checkpoint, trainable_only: bool) -> dict[str, torch.Tensor]:
    """The checkpoint's fp32 master weights as one state dict (contiguous, unshared);
    `trainable_only`: the LoRA adapters, which is all a LoRA job's checkpoints hold."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    # zero_to_fp32 prints progress (stdout) and progress bars (stderr); stdout carries our
    # JSON result and errors are one line, so its chatter is dropped.
    chatter = io.StringIO()
    with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
        sd = get_fp32_state_dict_from_zero_checkpoint(
            str(checkpoint.path.parent),
            tag=checkpoint.tag,
            exclude_frozen_parameters=trainable_only,
        )
    return {k: v.detach().float().contiguous().clone() for k, v in sd.items()}


def trained_model(job: JobConfig, sd: dict[str, torch.Tensor]) -> Any:
    """The job's model (peft-wrapped for LoRA) with the checkpoint's weights, fp32, eval."""
    model = hf.build(job.model)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if job.model.lora is not None:
        missing = [k for k in missing if "lora_" in k]  # the frozen base is `pretrained`'s
    if missing or unexpected:
        names = (missing or unexpected)[:3]
        what = "lacks" if missing else "has unknown"
        raise BadInput(
            f"the checkpoint {what} weights of the job's model ({', '.join(names)}...): "
            "is --job-config the config it was trained with?"
        )
    return model.float().eval()


def _generation_config(job: JobConfig, tok: Any) -> Any:
    from transformers import GenerationConfig

    if job.model.pretrained is not None:
        with contextlib.suppress(OSError):
            return GenerationConfig.from_pretrained(job.model.pretrained, local_files_only=True)
    return GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )


def for_older_readers(out: Path) -> None:
    """Make the directory readable by the transformers 4.x inside the vLLM image as well as
    by transformers 5, which wrote it. Version 5 writes RoPE as `rope_parameters` (4.x then
    silently uses its default theta: wrong for Llama 3's 500000), the dtype as `dtype`, and
    a tokenizer class `TokenizersBackend` with a list of `extra_special_tokens`, which 4.x
    cannot load. The 4.x spellings are added beside (config) or instead of (tokenizer)
    them; version 5 reads both."""
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    rope = config.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" in rope:
        config.setdefault("rope_theta", rope["rope_theta"])
        if rope.get("rope_type", "default") != "default":
            config.setdefault("rope_scaling", {k: v for k, v in rope.items() if k != "rope_theta"})
    if "dtype" in config:
        config.setdefault("torch_dtype", config["dtype"])
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")

    tok_path = out / "tokenizer_config.json"
    if not tok_path.exists():
        return
    tok = json.loads(tok_path.read_text())
    if tok.get("tokenizer_class") == "TokenizersBackend":
        tok["tokenizer_class"] = "PreTrainedTokenizerFast"
    extra = tok.pop("extra_special_tokens", None)
    if isinstance(extra, list):
        tok["additional_special_tokens"] = extra
    elif extra is not None:
        tok["extra_special_tokens"] = extra
    for key in ("backend", "is_local", "local_files_only"):
        tok.pop(key, None)
    tok_path.write_text(json.dumps(tok, indent=2, sort_keys=True) + "\n")


def _probe(tokens: torch.Tensor | None, vocab: int) -> torch.Tensor:
    if tokens is not None:
        return tokens
    return torch.randint(0, vocab, (4, 32), generator=torch.Generator().manual_seed(0))


@torch.no_grad()
def logits_of(model: Any, tokens: torch.Tensor) -> torch.Tensor:
    return model(input_ids=tokens).logits.float()


def export(
    checkpoint: ckpt.Checkpoint,
    job: JobConfig,
    out: Path,
    dtype: str = "bfloat16",
    probe: torch.Tensor | None = None,
) -> Exported:
    """Write the Hugging Face directory of `checkpoint` into `out` and check it loads and
    gives the checkpoint's logits."""
    from transformers import AutoModelForCausalLM

    try:
        tok = hf.load_tokenizer(job.model)
    except (OSError, ValueError) as exc:
        raise BadInput(
            f"no tokenizer to serve with: {str(exc).splitlines()[0]} (set model.tokenizer "
            "or model.pretrained in the job config)"
        ) from None
    model = trained_model(job, consolidate(checkpoint, job.model.lora is not None))
    architecture = type(hf.base_model(model)).__name__
    reason = vllm_architectures.unsupported_reason(architecture)
    if reason is not None:
        raise BadInput(reason)
    tokens = _probe(probe, hf.base_model(model).config.vocab_size)
    want = logits_of(model, tokens)

    out.mkdir(parents=True, exist_ok=True)
    if job.model.lora is not None:
        model.save_pretrained(str(out / ADAPTER_DIR), safe_serialization=True)
        model = model.merge_and_unload()
    model.generation_config = _generation_config(job, tok)
    with hf.quiet():
        model.to(DTYPES[dtype]).save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    if job.model.lora is not None:
        (out / ADAPTER_DIR / "README.md").unlink(missing_ok=True)  # peft's model-card stub
    for_older_readers(out)

    with hf.quiet():
        loaded = AutoModelForCausalLM.from_pretrained(
            str(out), local_files_only=True, dtype=torch.float32
        ).eval()
    got = logits_of(loaded, tokens)
    diff = float((got - want).abs().max())
    check = {
        "loaded_by": "transformers.AutoModelForCausalLM",
        "architecture": type(loaded).__name__,
        "max_abs_logit_diff": diff,
        "tolerance": LOGIT_TOLERANCE[dtype],
        "probe_tokens": list(tokens.shape),
        "vllm_version": vllm_architectures.VLLM_VERSION,
    }
    if not diff <= LOGIT_TOLERANCE[dtype]:
        raise PromotionFailed(
            f"the export's logits differ from the checkpoint's by {diff:.3g} "
            f"(tolerance {LOGIT_TOLERANCE[dtype]} at {dtype}): not promoted"
        )
    files = {p.relative_to(out).as_posix(): p for p in sorted(out.rglob("*")) if p.is_file()}
    return Exported(checkpoint.step, checkpoint.tag, architecture, dtype, out, files, check, loaded)


# ---------------------------------------------------------------------------
# Evaluation and gate
# ---------------------------------------------------------------------------


def evaluate(exported: Exported, shards: TokenShards | None, config: EvalConfig) -> dict[str, Any]:
    """Held-out perplexity and the harness's tasks on the exported directory itself (as
    transformers loaded it for the export check; the harness loads it its own way)."""
    result: dict[str, Any] = {"heldout_perplexity": None, "tasks": {}}
    if shards is not None:
        result["heldout_perplexity"] = heldout_perplexity(
            exported.loaded, shards, config.max_eval_windows
        )
    if config.tasks:
        result["tasks"] = run_harness(exported.directory, config.tasks, limit=config.limit)
    return result


# ---------------------------------------------------------------------------
# Publishing
# ---------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def build_manifest(
    exported: Exported,
    evaluation: dict[str, Any],
    config: EvalConfig,
    revision: str,
    serving_revision: str,
    source: str,
) -> dict[str, Any]:
    return {
        "revision": revision,
        "serving_revision": serving_revision,
        "step": exported.step,
        "source_checkpoint": exported.tag,
        "source": source,
        "architecture": exported.architecture,
        "dtype": exported.dtype,
        "export_check": exported.check,
        "evaluation": {
            **evaluation,
            "limit": config.limit,
            "thresholds": config.thresholds.model_dump(mode="json"),
        },
        "files": {
            name: {"sha256": sha256_of(path), "bytes": path.stat().st_size}
            for name, path in sorted(exported.files.items())
        },
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def publish(
    s3: Any,
    bucket: str,
    key_prefix: str,
    exported: Exported,
    manifest: dict[str, Any],
    *,
    kms: Any,
    signing_key: str | None = None,
) -> None:
    """Upload the files, then manifest.json, then COMPLETE (last): the manifest's digest
    signed by the stack's revision-signing key (`signing_key`, default the models bucket's
    `revisions.signing_key_alias`; `kms`: a KMS client). On failure remove what this call
    wrote, so no half revision is left behind (it could not be trusted anyway: it has no
    COMPLETE)."""
    key_id = signing_key or revisions.signing_key_alias(bucket)
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
        complete = revisions.seal(kms, key_id, body)
        s3.put_object(Bucket=bucket, Key=key_prefix + COMPLETE, Body=complete)
    except BaseException:
        for key in written:
            with contextlib.suppress(Exception):
                s3.delete_object(Bucket=bucket, Key=key)
        raise


def s3_client(endpoint_url: str | None) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint_url)


def kms_client(endpoint_url: str | None) -> Any:
    import boto3

    return boto3.client("kms", endpoint_url=endpoint_url)


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def _load_job(path: str) -> JobConfig:
    from contracts.training import load_job_config

    try:
        return load_job_config(path)
    except ValidationError as exc:
        raise BadInput(f"{path}: {validation_line(exc)}") from None
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: {str(exc).splitlines()[0]}") from None


def load_eval_config(path: str | None, max_perplexity: float | None) -> EvalConfig:
    raw: Any = {}
    if path is not None:
        try:
            raw = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise BadInput(f"{path}: {str(exc).splitlines()[0]}") from None
    try:
        config = EvalConfig.model_validate(raw)
    except ValidationError as exc:
        raise BadInput(f"{path or '--eval-config'}: {validation_line(exc)}") from None
    if max_perplexity is not None:
        thresholds = config.thresholds.model_copy(update={"max_perplexity": max_perplexity})
        config = config.model_copy(update={"thresholds": thresholds})
    return config


def promote(
    args: argparse.Namespace, s3: Any | None = None, kms: Any | None = None
) -> dict[str, Any]:
    import botocore.exceptions as boto_errors

    chosen = ckpt.select_resume(args.checkpoints)
    if chosen is None:
        raise BadInput(f"no complete checkpoint under {args.checkpoints}")
    job = _load_job(args.job_config)
    config = load_eval_config(args.eval_config, args.max_perplexity)
    if config.thresholds.max_perplexity is not None and args.heldout is None:
        raise BadInput("max_perplexity is set but no --heldout shards to measure it on")
    shards = None
    if args.heldout is not None:
        try:
            shards = TokenShards(
                args.heldout, job.model.seq_len, args.bin_dtype or job.data.bin_dtype
            )
        except (OSError, ValueError) as exc:
            raise BadInput(f"held-out data: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="promotion-") as scratch:
        out = Path(args.out) if args.out else Path(scratch)
        probe = None if shards is None else shards.batch(0, min(4, shards.n_windows))
        exported = export(chosen, job, out, args.dtype, probe)
        evaluation = evaluate(exported, shards, config)
        reasons = evaluation_gate(
            evaluation["tasks"], evaluation["heldout_perplexity"], config.thresholds
        )
        if reasons:
            raise PromotionFailed(f"not promoted: {'; '.join(reasons)} (step {exported.step})")
        revision = revisions.name(exported.step)
        serving_revision = f"{args.name}/{revision}"
        key_prefix = revisions.key_prefix(args.prefix, serving_revision)
        manifest = build_manifest(
            exported, evaluation, config, revision, serving_revision, str(args.checkpoints)
        )
        client = s3 if s3 is not None else s3_client(args.endpoint_url)
        try:
            signer = kms if kms is not None else kms_client(args.endpoint_url)
            publish(
                client, args.bucket, key_prefix, exported, manifest,
                kms=signer, signing_key=args.signing_key,
            )  # fmt: skip
        except (boto_errors.BotoCoreError, boto_errors.ClientError) as exc:
            bad, line = s3io.classify(exc, args.bucket) or (False, str(exc))
            failure = BadInput(line) if bad else PromotionFailed(f"publishing failed: {line}")
            raise failure from None
    return {
        "event": "promoted",
        "uri": f"s3://{args.bucket}/{key_prefix}",
        "revision": revision,
        "serving_revision": serving_revision,
        "step": exported.step,
        "source_checkpoint": exported.tag,
        "architecture": exported.architecture,
        "dtype": exported.dtype,
        "export_check": exported.check,
        "evaluation": manifest["evaluation"],
        "files": manifest["files"],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoints", required=True, help="training checkpoint root")
    p.add_argument("--job-config", required=True, help="the training job's config")
    p.add_argument("--bucket", required=True, help="models bucket")
    p.add_argument("--name", required=True, help="model name: revisions go under <prefix>/<name>/")
    p.add_argument("--prefix", default="revisions/", help="key prefix the servers mount")
    p.add_argument("--heldout", default=None, help="directory of held-out token shards")
    p.add_argument("--eval-config", default=None, help="YAML: tasks, limit, thresholds")
    p.add_argument("--max-perplexity", type=float, default=None, help="gate: fail above this")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16", help="served weights")
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint other than AWS's (moto)")
    p.add_argument(
        "--signing-key",
        default=None,
        help="KMS key that signs COMPLETE (default: alias/<bucket>-revisions, the stack's)",
    )
    p.add_argument("--bin-dtype", choices=("uint16", "uint32"), default=None)
    p.add_argument("--out", default=None, help="keep the exported files here (default: temp)")
    return p.parse_args(argv)


def _error(message: str) -> None:
    print(f"promotion: {' '.join(message.split())}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None, s3: Any | None = None, kms: Any | None = None) -> int:
    from transformers.utils import logging as hf_logging

    args = parse_args(argv)
    hf_logging.disable_progress_bar()  # stderr carries the one-line error, nothing else
    if not _NAME.match(args.name):
        _error(f"--name {args.name!r}: lowercase letters, digits, '.', '_' and '-'")
        return EXIT_BAD_INPUT
    if args.max_perplexity is not None and not args.max_perplexity > 0:
        _error("--max-perplexity must be a positive number")
        return EXIT_BAD_INPUT
    try:
        result = promote(args, s3, kms)
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
