"""`llmp dr restore-point`: the newest complete checkpoint in a replica bucket, by the
trainer's own rule, against a moto server on 127.0.0.1 holding complete and partial ones.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from contracts import restore as rp
from contracts.checkpoints import ManifestMissing, judge_checkpoint
from llmp.cli import app
from tests.conftest import reset_moto, use_dummy_credentials

BUCKET = "acme-llm-pretrain-checkpoints-us-west-2"
PREFIX = "runs/llama/"
REGION = "us-west-2"

# Two ranks' shards of a tiny checkpoint, as `checkpointing.publish` lays one out.
SHARDS = {
    "mp_rank_00_model_states.pt": b"m" * 700,
    "zero_pp_rank_0_mp_rank_00_optim_states.pt": b"a" * 1500,
    "zero_pp_rank_1_mp_rank_00_optim_states.pt": b"b" * 1500,
}


def checkpoint_objects(
    step: int,
    *,
    tag: str | None = None,
    complete: bool = True,
    manifest: bool = True,
    missing: str | None = None,
    truncated: str | None = None,
) -> dict[str, bytes]:
    """Relative path -> bytes of one checkpoint directory, damaged as asked."""
    tag = tag or f"step-{step}"
    files = dict(SHARDS)
    objects = {f"{tag}/{rel}": data for rel, data in files.items() if rel != missing}
    if truncated:
        objects[f"{tag}/{truncated}"] = files[truncated][:-10]
    if manifest:
        doc = {
            "step": step,
            "world_size": 2,
            "files": {rel: len(data) for rel, data in files.items()},
        }
        objects[f"{tag}/MANIFEST.json"] = json.dumps(doc).encode()
    if complete:
        objects[f"{tag}/COMPLETE"] = b""
    return objects


def layout() -> dict[str, bytes]:
    """Complete 100 and 200; then only partial ones, each damaged another way."""
    objects: dict[str, bytes] = {}
    objects |= checkpoint_objects(100)
    objects |= checkpoint_objects(200)
    objects |= checkpoint_objects(300, missing="zero_pp_rank_1_mp_rank_00_optim_states.pt")
    objects |= checkpoint_objects(400, complete=False)
    objects |= checkpoint_objects(500, truncated="mp_rank_00_model_states.pt")
    objects |= checkpoint_objects(600, tag="tmp-step-600", complete=False, manifest=False)
    objects |= checkpoint_objects(700, manifest=False)
    objects["latest"] = b"step-500"  # the pointer moved; not all of step-500 arrived
    return objects


@pytest.fixture
def s3(moto_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    use_dummy_credentials(monkeypatch, tmp_path)
    url = reset_moto(moto_server)
    client = boto3.client("s3", region_name=REGION, endpoint_url=url)
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    for rel, data in layout().items():
        client.put_object(Bucket=BUCKET, Key=PREFIX + rel, Body=data)
    client.endpoint = url
    return client


def test_the_newest_complete_checkpoint_wins(s3) -> None:
    result = rp.find_restore_point(s3, BUCKET, PREFIX)
    assert result.chosen is not None
    assert result.chosen.tag == "step-200" and result.chosen.step == 200
    assert result.chosen.uri == f"s3://{BUCKET}/{PREFIX}step-200/"
    assert result.chosen.files == 3 and result.chosen.bytes == 3700
    by_tag = {c.tag: c for c in result.candidates}
    assert [c.tag for c in result.candidates] == [
        "step-700",
        "tmp-step-600",
        "step-500",
        "step-400",
        "step-300",
        "step-200",
        "step-100",
    ]
    assert by_tag["step-700"].reason == "no MANIFEST.json"
    assert by_tag["tmp-step-600"].reason.startswith("temporary")
    assert by_tag["step-500"].reason == (
        "mp_rank_00_model_states.pt is 690 bytes; the manifest says 700"
    )
    assert by_tag["step-400"].reason.startswith("no COMPLETE marker")
    assert by_tag["step-300"].reason.startswith(
        "zero_pp_rank_1_mp_rank_00_optim_states.pt is missing"
    )
    assert {c.status for c in result.candidates[:5]} == {"skipped"}
    assert by_tag["step-100"].status == "older"
    assert result.latest == "step-500"  # reported, not trusted


@pytest.mark.full_tier("the trainer's checkpoint selection (torch)")
def test_the_rule_is_the_trainers(s3, tmp_path: Path) -> None:
    """The same directories on a file system: train.py's resume picks the same checkpoint
    and gives the same reason for every one it skips."""
    from workloads.training import checkpointing
    root = tmp_path / "ckpt"
    for rel, data in layout().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    chosen = checkpointing.select_resume(root)
    assert chosen is not None and chosen.step == 200
    result = rp.find_restore_point(s3, BUCKET, PREFIX)
    for candidate in result.candidates:
        if candidate.status != "older":
            assert checkpointing.judge(root / candidate.tag).reason == candidate.reason


def test_steps_are_compared_as_numbers(s3) -> None:
    """step-1000 is newer than step-999, although it sorts first as text."""
    for rel, data in {**checkpoint_objects(999), **checkpoint_objects(1000)}.items():
        s3.put_object(Bucket=BUCKET, Key=PREFIX + rel, Body=data)
    result = rp.find_restore_point(s3, BUCKET, PREFIX)
    assert result.chosen is not None and result.chosen.tag == "step-1000"
    assert [c.tag for c in result.candidates[:3]] == ["step-1000", "step-999", "step-700"]


def test_a_listing_longer_than_one_page_is_read_to_its_end(s3) -> None:
    """ListObjectsV2 returns at most 1,000 keys a call. A checkpoint of 1,001 shards
    straddles two pages: read from the first page alone it would lack shards."""
    shards = {f"shard-{i:04d}.pt": b"x" * (i % 7 + 1) for i in range(1001)}
    objects = {f"step-2000/{rel}": data for rel, data in shards.items()}
    manifest = {"step": 2000, "files": {rel: len(data) for rel, data in shards.items()}}
    objects["step-2000/MANIFEST.json"] = json.dumps(manifest).encode()
    objects["step-2000/COMPLETE"] = b""

    def put(item: tuple[str, bytes]) -> None:
        s3.put_object(Bucket=BUCKET, Key=PREFIX + item[0], Body=item[1])

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(put, objects.items()))
    calls: list[str] = []
    s3.meta.events.register(
        "before-call.s3.ListObjectsV2", lambda **kwargs: calls.append(kwargs["model"].name)
    )
    result = rp.find_restore_point(s3, BUCKET, PREFIX)
    assert len(calls) >= 2  # the listing did go past its first page
    assert result.chosen is not None and result.chosen.tag == "step-2000"
    assert result.chosen.files == 1001
    assert result.chosen.bytes == sum(len(data) for data in shards.values())


def test_no_complete_checkpoint_and_deeper_roots(s3) -> None:
    s3.delete_objects(
        Bucket=BUCKET,
        Delete={"Objects": [{"Key": f"{PREFIX}{rel}"} for rel in layout() if rel.startswith(
            ("step-100/", "step-200/"))]},
    )  # fmt: skip
    result = rp.find_restore_point(s3, BUCKET, PREFIX)
    assert result.chosen is None
    assert all(c.status == "skipped" for c in result.candidates)
    top = rp.find_restore_point(s3, BUCKET, "")
    assert top.candidates == [] and top.deeper_roots == [PREFIX]


def test_cli_json_and_exit_codes(s3) -> None:
    runner = CliRunner()
    base = ["dr", "restore-point", "--bucket", BUCKET, "--region", REGION]
    base += ["--endpoint-url", s3.endpoint]
    found = runner.invoke(app, [*base, "--prefix", "runs/llama", "--json"])
    assert found.exit_code == 0, found.output
    doc = json.loads(found.stdout)
    assert doc["restore_point"]["tag"] == "step-200"
    assert doc["prefix"] == PREFIX
    text = runner.invoke(app, [*base, "--prefix", PREFIX])
    assert text.exit_code == 0
    assert "restore point: s3://" in text.stdout and "step-500" in text.stdout
    none = runner.invoke(app, [*base, "--prefix", "runs/other/"])
    assert none.exit_code == 1
    assert "no checkpoint directories" in none.stdout
    missing = runner.invoke(app, [*base[:2], "--bucket", "no-such-bucket", *base[4:]])
    assert missing.exit_code == 2
    assert missing.stderr == "cannot read s3://no-such-bucket/: NoSuchBucket\n"


def test_cli_without_credentials_is_bad_input(monkeypatch, tmp_path) -> None:
    use_dummy_credentials(monkeypatch, tmp_path)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    result = CliRunner().invoke(app, ["dr", "restore-point", "--bucket", BUCKET])
    assert result.exit_code == 2
    assert result.stderr.startswith("no AWS credentials") and result.stderr.count("\n") == 1


def test_judge_checkpoint_without_any_storage() -> None:
    def manifest(doc: Any) -> Any:
        return lambda: json.dumps(doc).encode()

    def none() -> bytes:
        raise ManifestMissing("x")

    sizes = {"a": 3}
    ok = judge_checkpoint(
        "step-7", has_marker=True, read_manifest=manifest({"step": 7, "files": sizes}),
        size_of=sizes.get,
    )  # fmt: skip
    assert ok.complete and ok.step == 7 and ok.manifest["files"] == sizes
    cases = {
        "not a checkpoint name (step-N)": ("latest", True, manifest({}), sizes.get),
        "no MANIFEST.json": ("step-7", True, none, sizes.get),
        "MANIFEST.json is not JSON": ("step-7", True, lambda: b"{", sizes.get),
        "MANIFEST.json is of step 8, not 7": (
            "step-7", True, manifest({"step": 8, "files": sizes}), sizes.get,
        ),
        "MANIFEST.json has no `files` map of path to size": (
            "step-7", True, manifest({"step": 7, "files": ["a"]}), sizes.get,
        ),
    }  # fmt: skip
    for reason, (tag, marker, reader, size_of) in cases.items():
        verdict = judge_checkpoint(tag, has_marker=marker, read_manifest=reader, size_of=size_of)
        assert not verdict.complete and verdict.reason == reason
