"""`llmp promote`: a revision through the gate into the models bucket, then the stack's
served model pointed at it, so that the next `llmp diff` / `pulumi up` rolls it out.

Two ways in:

- From checkpoints (a host or pod with the tenant's FSx mounted and the trainer's
  packages): the promotion job's own code (`workloads.jobs.promotion.promote`) exports,
  checks, evaluates and publishes, here.
- From a revision already published (by the promotion job in the cluster): its
  `COMPLETE` marker and `manifest.json` are read back from the bucket (read-only), the
  marker must seal that manifest (KMS verifies its signature with the stack's
  revision-signing key, `alias/<models bucket>-revisions`: a bare sha256, which anyone
  who can write the prefix can compute, is refused), and the manifest's architecture
  must be one the pinned vLLM serves.

Then `serving.models[<model>].revision` changes in the stack file, and nothing else:
one line is rewritten in place (comments and layout stay), and the file is parsed again
to prove that the value is the only difference. A model written in flow style
(`- {name: ..., revision: ...}`) is not edited; the change is printed instead.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from llmp.errors import NO_CREDENTIALS, BadInput, Failed

SERVING_KEY = "llm-platform:serving"
_ITEM_NAME = re.compile(
    r"^(?P<indent>\s*)-(?P<gap>\s+)name:\s*(?P<q>['\"]?)(?P<name>[^'\"#\s]+)(?P=q)\s*(#.*)?$"
)
KEY = re.compile(
    r"^(?P<head>\s*(?P<key>[A-Za-z_]+):\s*)(?P<value>[^#\s][^#]*?)?(?P<tail>\s*(#.*)?)$"
)
"""A `key: value` line of a block mapping (no value: a nested mapping follows)."""
_REVISION = re.compile(r"^(?P<head>\s*revision:\s*)(?P<value>[^#\s][^#]*?)(?P<tail>\s*(#.*)?)$")


@dataclass(frozen=True)
class Target:
    """Where a stack serves a model from: the bucket, the mounted prefix, the revision now."""

    stack: str
    stack_file: Path
    model: str
    bucket: str
    prefix: str
    current: str


@dataclass(frozen=True)
class StackChange:
    path: Path
    model: str
    old: str
    new: str
    text: str
    """The new file's text; None-like empty when it cannot be edited in place."""
    diff: str
    written: bool


def target(stack: str, model: str) -> Target:
    from llmp.stacks import load_stack, stack_path

    cfg = load_stack(stack)
    if cfg.serving is None:
        raise BadInput(f"stack {stack} serves no models (no llm-platform:serving)")
    names = [m.name for m in cfg.serving.models]
    if model not in names:
        raise BadInput(f"stack {stack} serves no model {model!r}; it serves {', '.join(names)}")
    weights = cfg.storage.model_weights if cfg.storage is not None else None
    if cfg.storage is None or weights is None:
        raise BadInput(f"stack {stack} mounts no models bucket (storage.model_weights)")
    current = next(m.revision for m in cfg.serving.models if m.name == model)
    return Target(
        stack=stack,
        stack_file=stack_path(stack),
        model=model,
        bucket=cfg.storage.bucket_name(weights.bucket),
        prefix=weights.prefix,
        current=current,
    )


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _significant(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def key_line(lines: list[str], model: str, path: tuple[str, ...]) -> int | None:
    """The index of the line holding `path` (("revision",), ("canary", "weight")) in the
    block-style item `- name: MODEL` of the serving section, at the item's own key level
    (a canary's `revision` is not the model's), or None when the file does not spell it
    that way."""
    in_serving, serving_indent = False, 0
    column: int | None = None
    depth: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        if not _significant(line):
            continue
        indent = _indent(line)
        if line.strip().rstrip(":") == SERVING_KEY and line.rstrip().endswith(":"):
            in_serving, serving_indent, column = True, indent, None
            continue
        if in_serving and indent <= serving_indent:
            in_serving = False
        if not in_serving:
            continue
        item = _ITEM_NAME.match(line)
        if item:
            hit = item.group("name") == model
            column = len(item.group("indent")) + 1 + len(item.group("gap")) if hit else None
            depth = []
            continue
        if column is None:
            continue
        if indent < column:
            column = None
            continue
        key = KEY.match(line)
        if key is None:
            continue
        while depth and depth[-1][0] >= indent:
            depth.pop()
        depth.append((indent, key.group("key")))
        if depth[0][0] == column and tuple(k for _, k in depth) == path:
            return i
    return None


def change_revision(target: Target, revision: str, *, write: bool) -> StackChange:
    """The stack file with the model's revision set to `revision` (written when `write`)."""
    from spec.serving import ServingModelConfig

    try:
        ServingModelConfig.model_validate(
            {"name": target.model, "revision": revision, "node_pool": "x"}
        )
    except ValueError:
        raise BadInput(f"revision {revision!r} is not a path under the models prefix") from None
    old_text = target.stack_file.read_text()
    lines = old_text.splitlines(keepends=True)
    index = key_line(lines, target.model, ("revision",))
    if index is None:
        return StackChange(target.stack_file, target.model, target.current, revision, "", "", False)
    m = _REVISION.match(lines[index].rstrip("\n"))
    assert m is not None
    newline = "\n" if lines[index].endswith("\n") else ""
    lines[index] = f"{m.group('head')}{revision}{m.group('tail')}{newline}"
    new_text = "".join(lines)
    _only_the_revision_changed(old_text, new_text, target.model, revision)
    diff = "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile=f"a/{shown_path(target.stack_file)}",
            tofile=f"b/{shown_path(target.stack_file)}",
            n=2,
        )
    )
    if write:
        from llmp.files import replace_file

        replace_file(target.stack_file, new_text, stack=target.stack)  # atomic: all or nothing
    return StackChange(
        target.stack_file, target.model, target.current, revision, new_text, diff, write
    )


def shown_path(path: Path) -> str:
    from llmp.stacks import REPO_ROOT

    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def _only_the_revision_changed(old_text: str, new_text: str, model: str, revision: str) -> None:
    before, after = yaml.safe_load(old_text), yaml.safe_load(new_text)
    for m in before["config"][SERVING_KEY]["models"]:
        if m["name"] == model:
            m["revision"] = revision
    if before != after:
        raise Failed("editing the stack file would change more than the revision; not written")


# ---------------------------------------------------------------------------
# Publishing, or reading what was published
# ---------------------------------------------------------------------------


def promote_checkpoints(
    target: Target,
    *,
    checkpoints: str,
    job_config: str,
    heldout: str | None,
    eval_config: str | None,
    dtype: str,
    endpoint_url: str | None,
) -> dict[str, Any]:
    """Run the promotion job's code here: export, check, evaluate, publish."""
    try:
        from workloads.jobs import promotion
    except ImportError as exc:
        raise BadInput(
            f"promoting from checkpoints needs the trainer's packages ({exc.name} is "
            "missing): pip install -r requirements-dev.txt, or run it in the trainer image"
        ) from None
    argv = ["--checkpoints", checkpoints, "--job-config", job_config, "--dtype", dtype]
    argv += ["--bucket", target.bucket, "--name", target.model, "--prefix", target.prefix]
    for flag, value in (
        ("--heldout", heldout),
        ("--eval-config", eval_config),
        ("--endpoint-url", endpoint_url),
    ):
        if value is not None:
            argv += [flag, value]
    args = promotion.parse_args(argv)  # the promotion job's own flags and defaults
    try:
        return promotion.promote(args)
    except promotion.BadInput as exc:
        raise BadInput(str(exc)) from None
    except promotion.PromotionFailed as exc:
        raise Failed(str(exc)) from None


def published(target: Target, revision: str, endpoint_url: str | None) -> dict[str, Any]:
    """The manifest of a published revision, checked: sealed by COMPLETE, servable."""
    import boto3
    import botocore.exceptions as boto_errors

    from contracts import architectures as vllm_architectures
    from contracts import revisions

    key = revisions.key_prefix(target.prefix, revision)
    where = f"s3://{target.bucket}/{key}"
    signing_key = revisions.signing_key_alias(target.bucket)
    s3 = boto3.client("s3", endpoint_url=endpoint_url)
    kms = boto3.client("kms", endpoint_url=endpoint_url)
    try:
        body = s3.get_object(Bucket=target.bucket, Key=key + revisions.MANIFEST)["Body"].read()
        seal = s3.get_object(Bucket=target.bucket, Key=key + revisions.COMPLETE)["Body"].read()
        untrusted = revisions.check_seal(kms, signing_key, body, seal)
    except boto_errors.NoCredentialsError:
        raise BadInput(NO_CREDENTIALS) from None
    except boto_errors.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in ("NoSuchKey", "404"):
            raise BadInput(
                f"{where} is not a published revision (no manifest or COMPLETE)"
            ) from None
        if code == "NoSuchBucket":
            raise BadInput(f"no bucket {target.bucket}") from None
        if code in ("NotFoundException", "DisabledException", "InvalidKeyUsageException"):
            raise Failed(
                f"{where}: cannot verify its seal: the stack's signing key {signing_key}: {code}"
            ) from None
        raise Failed(f"reading {where}: {exc}") from None
    except boto_errors.BotoCoreError as exc:
        raise BadInput(f"reading {where}: {exc}") from None
    if untrusted is not None:
        raise Failed(f"{where}: {untrusted}: not trusted")
    manifest: dict[str, Any] = json.loads(body)
    reason = vllm_architectures.unsupported_reason(str(manifest.get("architecture")))
    if reason is not None:
        raise Failed(f"{where}: {reason}")
    return {**manifest, "uri": where}
