"""Training straight from S3 (`workloads.training.s3io`), against a moto server on
127.0.0.1: a restore point pulled into an empty checkpoint root by the trainer's own
rule, and token shards read lazily, one shard fetched when a sample first falls in it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest

from tests.conftest import reset_moto, use_dummy_credentials
from tests.contracts.test_restore import BUCKET, PREFIX, REGION, layout
from workloads.training import s3io
from workloads.training.checkpointing import select_resume
from workloads.training.data import TokenShards, write_synthetic_shards

URI = f"s3://{BUCKET}/{PREFIX}"


@pytest.fixture
def s3(moto_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    use_dummy_credentials(monkeypatch, tmp_path, REGION)
    url = reset_moto(moto_server)
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    client = boto3.client("s3", region_name=REGION, endpoint_url=url)
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    return client


def put(s3: Any, objects: dict[str, bytes]) -> None:
    for rel, data in objects.items():
        s3.put_object(Bucket=BUCKET, Key=PREFIX + rel, Body=data)


def test_the_restore_point_is_pulled_and_published_like_a_save(s3, tmp_path: Path) -> None:
    put(s3, layout())  # complete 100 and 200, newer ones damaged each its own way
    root = tmp_path / "ckpt"
    pulled = s3io.pull_restore_point(s3, URI, root)
    assert (pulled.action, pulled.step, pulled.files) == ("pulled", 200, 4)  # 3 + MANIFEST
    assert pulled.source == f"{URI}step-200/"
    local = select_resume(root)
    assert local is not None and local.step == 200 and local.world_size == 2
    assert (root / "latest").read_text() == "step-200"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-200"]
    for rel, data in layout().items():
        if rel.startswith("step-200/") and not rel.endswith("COMPLETE"):
            assert (root / rel).read_bytes() == data
    # A second pull finds the checkpoint there and fetches nothing.
    again = s3io.pull_restore_point(s3, URI, root)
    assert (again.action, again.step, again.files) == ("already local", 200, 0)


def test_a_local_checkpoint_newer_than_the_replica_is_kept(s3, tmp_path: Path) -> None:
    put(s3, layout())
    root = tmp_path / "ckpt"
    s3io.pull_restore_point(s3, URI, root)
    (root / "step-200").rename(root / "step-900")  # as if training had gone on
    manifest = root / "step-900" / "MANIFEST.json"
    manifest.write_text(manifest.read_text().replace('"step": 200', '"step": 900'))
    result = s3io.pull_restore_point(s3, URI, root)
    assert (result.action, result.step) == ("already local", 900)


def test_nothing_to_pull_is_said_not_guessed(s3, tmp_path: Path) -> None:
    result = s3io.pull_restore_point(s3, URI, tmp_path / "ckpt")
    assert (result.action, result.step) == ("nothing to pull", None)


def test_a_copy_that_changes_under_the_pull_is_never_published(
    s3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(s3, layout())
    real = s3.download_file

    def short(bucket: str, key: str, dest: str) -> None:  # a shard replaced mid-pull
        real(bucket, key, dest)
        if key.endswith("mp_rank_00_model_states.pt"):
            Path(dest).write_bytes(b"m" * 10)

    monkeypatch.setattr(s3, "download_file", short)
    root = tmp_path / "ckpt"
    with pytest.raises(s3io.S3Error, match=r"not intact: mp_rank_00_model_states\.pt is 10"):
        s3io.pull_restore_point(s3, URI, root)
    assert select_resume(root) is None
    assert not (root / "step-200").exists() and not (root / "latest").exists()


def test_s3_errors_are_one_line(s3, tmp_path: Path) -> None:
    with pytest.raises(s3io.S3Error) as info:
        s3io.pull_restore_point(s3, "s3://no-such-bucket-here/runs/", tmp_path)
    assert "\n" not in str(info.value) and "no bucket no-such-bucket-here" in str(info.value)
    with pytest.raises(s3io.S3Error, match="not an s3://bucket/prefix URI"):
        s3io.split_uri("/fsx/checkpoints")


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_shards_read_from_s3_are_the_shards_on_disk(s3, tmp_path: Path, dtype: str) -> None:
    local = tmp_path / "tokens"
    files = write_synthetic_shards(local, n_shards=3, tokens_per_shard=3000, vocab=500)
    raw = np.load(files[1]).astype(dtype)
    raw.tofile(local / "extra.bin")  # a headerless shard beside the .npy ones
    for f in sorted(local.iterdir()):
        s3.upload_file(str(f), BUCKET, f"tokenized/run/{f.name}")
    s3.put_object(Bucket=BUCKET, Key="tokenized/run/sub/ignored.npy", Body=b"x")
    cache = tmp_path / "cache"
    remote = TokenShards(f"s3://{BUCKET}/tokenized/run", 64, bin_dtype=dtype, cache=cache)
    disk = TokenShards(local, 64, bin_dtype=dtype)
    assert remote.n_windows == disk.n_windows and remote.starts == disk.starts
    assert not cache.exists()  # listing and .npy headers only: nothing fetched yet
    first = remote.sample(0)
    assert np.array_equal(first, disk.sample(0))
    fetched = sorted(p.name for p in cache.rglob("*") if p.is_file())
    assert len(fetched) == 1  # only the shard that sample lives in
    batch = remote.batch(5, 40)
    assert np.array_equal(batch.numpy(), disk.batch(5, 40).numpy())


def test_no_shards_under_the_prefix_is_one_clear_error(s3, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no .* token shards in s3://"):
        TokenShards(f"s3://{BUCKET}/tokenized/none/", 64, cache=tmp_path)
