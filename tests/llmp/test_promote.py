"""`llmp promote`: the stack file's one-line edit, and serving a revision already published
(read back from a moto S3 on 127.0.0.1). Promotion from checkpoints, through the same
command, is in tests/workloads/test_lifecycle.py, where a model is trained."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from typer.testing import CliRunner

from contracts import revisions
from llmp.cli import app
from llmp.errors import BadInput
from llmp.serving import promote as p
from llmp.stacks import REPO_ROOT
from tests.conftest import create_signing_key

pytestmark = pytest.mark.usefixtures("aws_env")

STACK_FILE = REPO_ROOT / "stacks" / "Pulumi.inference.yaml"
BUCKET = "acme-llm-inference-models"  # storage.bucket_name_prefix + "-models"
REVISION = "llama-8b/20261201T120000Z-step-40"


def _target(tmp_path: Path, text: str | None = None) -> p.Target:
    copy = tmp_path / "Pulumi.inference.yaml"
    if text is None:
        shutil.copy(STACK_FILE, copy)
    else:
        copy.write_text(text)
    t = p.target("inference", "llama-8b")
    return p.Target(t.stack, copy, t.model, t.bucket, t.prefix, t.current)


def test_the_target_is_the_stacks_models_bucket_and_prefix() -> None:
    t = p.target("inference", "llama-8b")
    assert (t.bucket, t.prefix, t.current) == (
        BUCKET,
        "revisions/",
        "llama-3.1-8b-instruct/2026-10-01",
    )
    with pytest.raises(BadInput, match="serves no model 'gpt'; it serves llama-8b, llama-70b"):
        p.target("inference", "gpt")
    with pytest.raises(BadInput, match="serves no models"):
        p.target("pretrain", "llama-8b")


def test_one_line_changes_and_everything_else_stays(tmp_path: Path) -> None:
    target = _target(tmp_path)
    change = p.change_revision(target, REVISION, write=True)
    old, new = STACK_FILE.read_text(), target.stack_file.read_text()
    changed = [(a, b) for a, b in zip(old.splitlines(), new.splitlines(), strict=True) if a != b]
    assert changed == [
        ("        revision: llama-3.1-8b-instruct/2026-10-01", f"        revision: {REVISION}")
    ]
    # The other model, with a revision of the same date, is untouched.
    models = yaml.safe_load(new)["config"]["llm-platform:serving"]["models"]
    assert [m["revision"] for m in models] == [REVISION, "llama-3.1-70b-instruct-awq/2026-10-01"]
    assert change.written and change.old == "llama-3.1-8b-instruct/2026-10-01"
    assert f"+        revision: {REVISION}" in change.diff


def test_no_write_leaves_the_file(tmp_path: Path) -> None:
    target = _target(tmp_path)
    change = p.change_revision(target, REVISION, write=False)
    assert target.stack_file.read_text() == STACK_FILE.read_text()
    assert change.diff and not change.written


def test_a_flow_style_model_is_not_edited(tmp_path: Path) -> None:
    text = STACK_FILE.read_text()
    start = text.index("      - name: llama-8b")
    end = text.index("      - name: llama-70b")
    flow = "      - {name: llama-8b, revision: llama-3.1-8b-instruct/2026-10-01, node_pool: l40s}\n"
    target = _target(tmp_path, text[:start] + flow + text[end:])
    change = p.change_revision(target, REVISION, write=True)
    assert change.diff == "" and not change.written
    assert target.stack_file.read_text() == text[:start] + flow + text[end:]


def test_a_revision_that_is_not_a_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="not a path under the models prefix"):
        p.change_revision(_target(tmp_path), "../etc", write=False)


def _publish(
    endpoint: str,
    manifest: dict[str, Any],
    seal: Callable[[Any, bytes], bytes] | None = None,
    *,
    signing_key: bool = True,
) -> None:
    """The revision as the promotion job publishes it: COMPLETE signed by the stack's key
    (`seal`: what a forger writes instead, from a KMS client and the manifest's body)."""
    s3 = boto3.client("s3", endpoint_url=endpoint)
    kms = boto3.client("kms", endpoint_url=endpoint)
    s3.create_bucket(Bucket=BUCKET)
    if signing_key:
        create_signing_key(endpoint, BUCKET)
    body = json.dumps(manifest).encode()
    key = f"revisions/{REVISION}/"
    s3.put_object(Bucket=BUCKET, Key=key + "manifest.json", Body=body)
    if seal is None:
        complete = revisions.seal(kms, revisions.signing_key_alias(BUCKET), body)
    else:
        complete = seal(kms, body)
    s3.put_object(Bucket=BUCKET, Key=key + "COMPLETE", Body=complete)


def _unkeyed(kms: Any, body: bytes) -> bytes:
    """The seal as it was: a sha256 anyone who can write the prefix computes."""
    return hashlib.sha256(body).hexdigest().encode()


def _own_key(kms: Any, body: bytes) -> bytes:
    """Signed by a key of the forger's own."""
    key = kms.create_key(KeyUsage="SIGN_VERIFY", KeySpec="ECC_NIST_P256")["KeyMetadata"]
    return revisions.seal(kms, key["KeyId"], body)


def _other_manifest(kms: Any, body: bytes) -> bytes:
    """A genuine seal, of another manifest."""
    return revisions.seal(kms, revisions.signing_key_alias(BUCKET), body + b" ")


def _digest_swapped(kms: Any, body: bytes) -> bytes:
    """A genuine seal of another manifest, its sha256 rewritten to this one's."""
    doc = json.loads(_other_manifest(kms, body))
    doc["sha256"] = hashlib.sha256(body).hexdigest()
    return json.dumps(doc).encode()


MANIFEST = {
    "revision": REVISION.split("/")[1],
    "serving_revision": REVISION,
    "step": 40,
    "source_checkpoint": "step-40",
    "architecture": "LlamaForCausalLM",
    "dtype": "bfloat16",
    "export_check": {"max_abs_logit_diff": 0.05, "tolerance": 0.25, "vllm_version": "v0.11.0"},
    "evaluation": {"heldout_perplexity": 12.5, "tasks": {"llmp_arith": {"acc": 0.75}}},
    "files": {},
}


def test_serving_a_published_revision(
    endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _publish(endpoint, MANIFEST)
    target = _target(tmp_path)
    monkeypatch.setattr(p, "target", lambda stack, model: target)
    result = CliRunner().invoke(
        app,
        ["promote", "inference", "llama-8b", "--revision", REVISION, "--endpoint-url", endpoint],
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith("promoted llama-8b: step 40 of step-40\n")
    assert f"s3://{BUCKET}/revisions/{REVISION}/" in out
    assert "LlamaForCausalLM (vLLM v0.11.0 serves it)" in out
    assert "llmp_arith" in out and "0.7500" in out
    assert f"  + {REVISION}" in out and "next: llmp diff --base HEAD inference" in out
    assert all(len(line) <= 80 for line in out.splitlines() if line != str(target.stack_file))
    assert f"revision: {REVISION}" in target.stack_file.read_text()


@pytest.mark.parametrize(
    ("manifest", "seal", "code", "message"),
    [
        (MANIFEST, lambda kms, body: b"0" * 64, 1, "COMPLETE holds no signed seal"),
        (MANIFEST, _unkeyed, 1, "COMPLETE holds no signed seal (an unkeyed sha256 anyone"),
        (MANIFEST, _own_key, 1, f"COMPLETE's signature is not alias/{BUCKET}-revisions's"),
        (MANIFEST, _other_manifest, 1, "COMPLETE seals another manifest.json"),
        (MANIFEST, _digest_swapped, 1, "COMPLETE's signature is not alias/"),
        ({**MANIFEST, "architecture": "GPT"}, None, 1, "'GPT' is not a text-generation model"),
    ],
)
def test_an_untrusted_revision_is_not_served(
    endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    manifest: dict[str, Any],
    seal: Callable[[Any, bytes], bytes] | None,
    code: int,
    message: str,
) -> None:
    _publish(endpoint, manifest, seal)
    target = _target(tmp_path)
    monkeypatch.setattr(p, "target", lambda stack, model: target)
    result = CliRunner().invoke(
        app,
        ["promote", "inference", "llama-8b", "--revision", REVISION, "--endpoint-url", endpoint],
    )
    assert result.exit_code == code
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert target.stack_file.read_text() == STACK_FILE.read_text()


def test_a_stack_without_its_signing_key_serves_nothing(
    endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _publish(endpoint, MANIFEST, _own_key, signing_key=False)
    target = _target(tmp_path)
    monkeypatch.setattr(p, "target", lambda stack, model: target)
    result = CliRunner().invoke(
        app,
        ["promote", "inference", "llama-8b", "--revision", REVISION, "--endpoint-url", endpoint],
    )
    assert result.exit_code == 1
    assert result.stderr == (
        f"s3://{BUCKET}/revisions/{REVISION}/: cannot verify its seal: the stack's signing "
        f"key alias/{BUCKET}-revisions: NotFoundException\n"
    )
    assert target.stack_file.read_text() == STACK_FILE.read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--revision", "llama-8b/nope"], "is not a published revision"),
        ([], "give either --checkpoints DIR (with --job-config) or --revision REV"),
        (["--checkpoints", "/fsx/c"], "--checkpoints needs --job-config"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(endpoint: str, args: list[str], message: str) -> None:
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
    result = CliRunner().invoke(
        app, ["promote", "inference", "llama-8b", *args, "--endpoint-url", endpoint]
    )
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
