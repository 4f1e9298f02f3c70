"""The milestone copier against moto: only complete milestone steps, marker last, idempotent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from contracts.checkpoints import COMPLETE, MANIFEST
from workloads.jobs.milestones import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    copy_milestones,
    main,
    restore_milestone,
)

BUCKET = "acme-llm-pretrain-checkpoints"
RUNS, MILESTONES = "runs/", "milestones/"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import boto3
    from moto import mock_aws

    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(var, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client


def put_checkpoint(
    s3: Any,
    prefix: str,
    job: str,
    step: int,
    *,
    marker: bool = True,
    missing: str | None = None,
    final: bool = False,
) -> dict[str, bytes]:
    """A checkpoint as the file system exports it: shards, MANIFEST.json, COMPLETE."""
    shards = {
        "global_step/mp_rank_00_model_states.pt": b"m" * (100 + step % 7),
        "global_step/zero_pp_rank_0_mp_rank_00_optim_states.pt": b"o" * 300,
    }
    manifest = {
        "step": step,
        "files": {rel: len(body) for rel, body in shards.items()},
        "final": final,
    }
    objects = {**shards, MANIFEST: json.dumps(manifest).encode()}
    if marker:
        objects[COMPLETE] = b"ok\n"
    for rel, body in objects.items():
        if rel != missing:
            s3.put_object(Bucket=BUCKET, Key=f"{prefix}{job}/step-{step}/{rel}", Body=body)
    return objects


def keys(s3: Any, prefix: str) -> dict[str, bytes]:
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = s3.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read()
    return out


def test_only_complete_milestone_steps_are_copied(s3: Any) -> None:
    complete = put_checkpoint(s3, RUNS, "llama-70b", 10000)
    put_checkpoint(s3, RUNS, "llama-70b", 10500)  # not a milestone step
    put_checkpoint(s3, RUNS, "llama-70b", 15000, marker=False)  # unsealed
    put_checkpoint(
        s3, RUNS, "llama-70b", 20000, missing="global_step/mp_rank_00_model_states.pt"
    )  # the export has not brought every shard yet
    s3.put_object(Bucket=BUCKET, Key=f"{RUNS}llama-70b/tmp-step-25000/{MANIFEST}", Body=b"{}")
    s3.put_object(Bucket=BUCKET, Key=f"{RUNS}llama-70b/latest", Body=b"step-10500")

    outcomes = copy_milestones(s3, BUCKET, RUNS, MILESTONES, 5000)

    by_step = {o.step: o for o in outcomes}
    assert set(by_step) == {10000, 15000, 20000}
    assert by_step[10000].action == "copied"
    assert by_step[10000].objects_copied == len(complete)
    assert by_step[15000].action == "not complete"
    assert "COMPLETE marker" in by_step[15000].reason
    assert by_step[20000].action == "not complete"
    assert "mp_rank_00_model_states.pt is missing" in by_step[20000].reason
    copied = keys(s3, MILESTONES)
    assert copied == {f"{MILESTONES}llama-70b/step-10000/{rel}": b for rel, b in complete.items()}


def test_the_marker_is_copied_last(s3: Any) -> None:
    put_checkpoint(s3, RUNS, "team/job", 5000)
    order: list[str] = []

    def copy(src: str, dst: str) -> None:
        order.append(dst.rsplit("/", 1)[-1])
        s3.copy_object(Bucket=BUCKET, Key=dst, CopySource={"Bucket": BUCKET, "Key": src})

    (outcome,) = copy_milestones(s3, BUCKET, RUNS, MILESTONES, 5000, copy=copy)
    assert outcome.destination == f"{MILESTONES}team/job/step-5000/"
    assert order[-1] == COMPLETE
    assert order.count(COMPLETE) == 1 and len(order) == 4


def test_an_interrupted_copy_is_never_sealed_and_resumes(s3: Any) -> None:
    put_checkpoint(s3, RUNS, "job", 5000)
    calls: list[str] = []

    def broken(src: str, dst: str) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise ConnectionError("network gone")
        s3.copy_object(Bucket=BUCKET, Key=dst, CopySource={"Bucket": BUCKET, "Key": src})

    with pytest.raises(ConnectionError):
        copy_milestones(s3, BUCKET, RUNS, MILESTONES, 5000, copy=broken)
    partial = keys(s3, MILESTONES)
    assert partial and not any(k.endswith(COMPLETE) for k in partial)

    (outcome,) = copy_milestones(s3, BUCKET, RUNS, MILESTONES, 5000)
    assert outcome.action == "copied"
    # The object that made it the first time is not copied again.
    assert outcome.objects_copied == 4 - len(partial)
    assert any(k.endswith(COMPLETE) for k in keys(s3, MILESTONES))


def test_a_second_run_copies_nothing(s3: Any) -> None:
    put_checkpoint(s3, RUNS, "job", 5000)
    put_checkpoint(s3, RUNS, "job", 10000)
    first = copy_milestones(s3, BUCKET, RUNS, MILESTONES, 5000)
    assert [o.action for o in first] == ["copied", "copied"]

    def refuse(src: str, dst: str) -> None:
        raise AssertionError(f"copied again: {dst}")

    second = copy_milestones(s3, BUCKET, RUNS, MILESTONES, 5000, copy=refuse)
    assert [o.action for o in second] == ["present", "present"]


def test_a_milestone_outlives_its_expired_source(s3: Any) -> None:
    put_checkpoint(s3, RUNS, "job", 5000)
    copy_milestones(s3, BUCKET, RUNS, MILESTONES, 5000)
    for key in keys(s3, RUNS):  # what the runs/ expiry does after keep_days
        s3.delete_object(Bucket=BUCKET, Key=key)
    assert copy_milestones(s3, BUCKET, RUNS, MILESTONES, 5000) == []
    assert len(keys(s3, MILESTONES)) == 4


def test_dry_run_copies_nothing(s3: Any) -> None:
    put_checkpoint(s3, RUNS, "job", 5000)
    (outcome,) = copy_milestones(s3, BUCKET, RUNS, MILESTONES, 5000, dry_run=True)
    assert outcome.action == "would copy"
    assert keys(s3, MILESTONES) == {}


def test_restore_copies_a_milestone_back_under_runs(s3: Any) -> None:
    objects = put_checkpoint(s3, MILESTONES, "job", 5000)
    outcome = restore_milestone(s3, BUCKET, RUNS, MILESTONES, "job", 5000)
    assert outcome.action == "restored"
    assert keys(s3, RUNS) == {f"{RUNS}job/step-5000/{rel}": b for rel, b in objects.items()}


def test_entry_point_prints_one_line_per_milestone(
    s3: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    put_checkpoint(s3, RUNS, "job", 5000)
    argv = ["copy", "--bucket", BUCKET, "--runs-prefix", RUNS, "--milestone-prefix", MILESTONES]
    assert main([*argv, "--every-steps", "5000"], s3=s3) == EXIT_OK
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["action"] == "copied"
    assert lines[-1] == {"event": "summary", "bucket": BUCKET, "copied": 1}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--every-steps", "0"], "a whole number of steps"),
        (["--every-steps", "5000", "--milestone-prefix", "runs/keep/"], "must not overlap"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    s3: Any, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    base = ["copy", "--bucket", BUCKET, "--runs-prefix", RUNS, "--milestone-prefix", MILESTONES]
    with pytest.raises(SystemExit) as exit_:
        main([*base, *argv], s3=s3)
    assert exit_.value.code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_missing_bucket_is_one_line(s3: Any, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["copy", "--bucket", "nope-nope", "--runs-prefix", RUNS]
    argv += ["--milestone-prefix", MILESTONES, "--every-steps", "5000"]
    assert main(argv, s3=s3) == EXIT_BAD_INPUT
    assert capsys.readouterr().err.strip() == "milestones: no bucket nope-nope"


def test_a_runs_last_checkpoint_is_kept_like_a_milestone(s3: Any) -> None:
    """train.py marks the checkpoint at max_steps `final`: the result of a run outlives the
    recent window even when its step is not a multiple of the milestone interval."""
    put_checkpoint(s3, RUNS, "sft-8b", 10500)  # not a milestone, not final: expires
    put_checkpoint(s3, RUNS, "sft-8b", 12345, final=True)
    outcomes = copy_milestones(s3, BUCKET, RUNS, MILESTONES, 5000)
    assert [(o.step, o.action) for o in outcomes] == [(12345, "copied")]
    assert f"{MILESTONES}sft-8b/step-12345/{COMPLETE}" in keys(s3, MILESTONES)
