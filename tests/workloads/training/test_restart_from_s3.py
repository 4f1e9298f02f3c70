"""A restart that reads S3 instead of the file system (the recovery `llmp dr plan` models):
2 real ranks (gloo, ZeRO-3) pull their restore point from a bucket into an empty checkpoint
directory and train on token shards read from the bucket, against a moto server on
127.0.0.1, and continue exactly as a resume from the local copy does.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.conftest import reset_moto, use_dummy_credentials
from tests.workloads.training.harness import Run, job_config, kill_all
from workloads.training import checkpointing as ckpt
from workloads.training.data import write_synthetic_shards

BUCKET = "acme-llm-pretrain-checkpoints"
REGION = "us-east-1"


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    spawned: list[subprocess.Popen[bytes]] = []
    yield spawned
    kill_all(spawned)  # every rank this test started, by its own PID


@pytest.fixture
def s3(moto_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    use_dummy_credentials(monkeypatch, tmp_path, REGION)
    url = reset_moto(moto_server)
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)  # the ranks' boto3 reads it
    client = boto3.client("s3", region_name=REGION, endpoint_url=url)
    client.create_bucket(Bucket=BUCKET)
    return client


def upload(s3: Any, local: Path, prefix: str) -> None:
    for f in sorted(p for p in local.rglob("*") if p.is_file()):
        s3.upload_file(str(f), BUCKET, prefix + str(f.relative_to(local)))


def test_a_restart_from_s3_continues_as_a_local_resume_does(
    s3: Any, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    tokens = tmp_path / "tokens"
    write_synthetic_shards(tokens, n_shards=2, tokens_per_shard=20_000, vocab=256)
    first = Run(
        tmp_path / "first", job_config(tmp_path / "first", tokens, max_steps=8), 2, [], procs.append
    )
    assert first.wait(150) == [0, 0], first.stderr_tail()
    saved = tmp_path / "first" / "ckpt"
    assert [c.step for c in ckpt.complete_checkpoints(saved)] == [4, 8]
    # The run's last checkpoint says so: retention keeps it beside the milestones.
    assert [c.meta["final"] for c in ckpt.complete_checkpoints(saved)] == [False, True]

    # What the region held: the exported checkpoints and the token shards, in S3 only.
    upload(s3, saved, "runs/base/")
    upload(s3, tokens, "tokenized/web/")

    # The reference: a resume from a local copy, as on the file system.
    local = tmp_path / "local"
    shutil.copytree(saved, local / "ckpt")
    ref = Run(local, job_config(local, tokens, max_steps=10), 2, [], procs.append)

    # The restart: an empty checkpoint directory, everything read from S3.
    restart = tmp_path / "restart"
    cfg = job_config(
        restart, tokens, max_steps=10, checkpoint={"restore_from": f"s3://{BUCKET}/runs/base/"}
    )
    cfg["data"]["path"] = f"s3://{BUCKET}/tokenized/web/"
    cache = tmp_path / "shard-cache"
    remote = Run(restart, cfg, 2, [], procs.append, env={"LLMP_SHARD_CACHE": str(cache)})
    assert ref.wait(150) == [0, 0], ref.stderr_tail()
    assert remote.wait(150) == [0, 0], remote.stderr_tail()

    (pull,) = remote.of("restore_pull")
    assert (pull["action"], pull["step"]) == ("pulled", 8)
    assert pull["source"] == f"s3://{BUCKET}/runs/base/step-8/"
    (resume,) = remote.of("resume")
    assert (resume["step"], resume["universal"]) == (8, False)
    assert sorted(p.name for p in cache.rglob("*.npy")) == ["shard-00000.npy", "shard-00001.npy"]
    losses = {e["step"]: e["loss"] for e in remote.of("step")}
    expected = {e["step"]: e["loss"] for e in ref.of("step")}
    assert sorted(losses) == [9, 10]
    assert losses == pytest.approx(expected, rel=1e-6)
    # It checkpoints on its own file system from there, as any run does.
    assert [c.step for c in ckpt.complete_checkpoints(restart / "ckpt")][-1] == 10


def test_a_restore_point_s3_cannot_give_is_one_line_on_every_rank(
    s3: Any, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    tokens = tmp_path / "tokens"
    write_synthetic_shards(tokens, n_shards=1, tokens_per_shard=5_000, vocab=256)
    cfg = job_config(tmp_path, tokens, checkpoint={"restore_from": "s3://no-such-bucket/runs/x/"})
    run = Run(tmp_path / "run", cfg, 2, [], procs.append)
    assert run.wait(120) == [1, 1]
    for rank in (0, 1):
        err = (tmp_path / "run" / f"rank{rank}.err").read_text().strip().splitlines()
        assert err[-1].startswith("train: checkpoint.restore_from: s3://no-such-bucket/runs/x/:")
        assert "no bucket no-such-bucket" in err[-1] and "Traceback" not in "\n".join(err)
