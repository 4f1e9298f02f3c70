"""Data prep on a small generated corpus: exact global dedup across 2 workers, loadable shards,
token counts, determinism; and the Indexed Job that runs it."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.workloads.jobs.k8s import as_pod, policy_violations, validate
from workloads.jobs.data_prep import (
    ByteTokenizer,
    DataPrepSpec,
    clean_document,
    data_prep_job,
    iter_shards,
    load_manifests,
    main,
    normalize_line,
    prepare,
)

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "sigma"]


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) + "."


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, set[str]]:
    """Three files (.txt, .jsonl, .txt.gz) with duplicates within and across files, copies
    that differ only in Unicode form or whitespace, and junk. Returns the unique clean docs."""
    rng = random.Random(7)
    unique = [_sentence(rng) for _ in range(300)]
    src = tmp_path / "raw"
    (src / "b").mkdir(parents=True)
    junk = ["", "   ", "ok", "12345 67890 1234", "\t\t", "---- ---- ---- ----"]
    a = unique[:200] + unique[:50] + junk  # duplicates inside one file
    # The same texts spelt differently: full-width letters fold under NFKC, runs of spaces
    # and a zero-width space disappear.
    variants = [
        unique[10].replace("alpha", "\uff41\uff4c\uff50\uff48\uff41"),
        "  " + unique[11].replace(" ", "   ") + "  ",
        unique[12].replace(" ", " \u200b", 1),
    ]
    (src / "a.txt").write_text("\n".join(a + variants) + "\n")
    records = [{"text": t} for t in unique[150:300] + unique[0:30]]  # across files
    records.append({"text": "short\n" + unique[299]})  # a junk line inside a document
    (src / "b" / "c.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    (src / "b" / "d.txt.gz").write_bytes(gzip.compress("\n".join(unique[100:120]).encode()))
    (src / "ignored.csv").write_text("not,an,input\n")
    return src, {clean_document(t) for t in unique}


def _documents(output: Path) -> list[str]:
    tok = ByteTokenizer()
    docs: list[str] = []
    for array in iter_shards(output):
        ends = np.flatnonzero(np.asarray(array) == tok.eos_id)
        start = 0
        for end in ends:
            docs.append(tok.decode(np.asarray(array[start:end])))
            start = end + 1
        assert start == len(array), "every shard ends at a document boundary"
    return docs


def test_normalization() -> None:
    assert normalize_line("  \uff46\uff55\uff4c\uff4c\u00a0width\u200b\tline ") == "full width line"
    assert clean_document("a real line of text\nx\n\n  another real line  ") == (
        "a real line of text\nanother real line"
    )


def test_two_workers_dedup_exactly_and_globally(tmp_path: Path, corpus: Any) -> None:
    src, expected = corpus
    out = tmp_path / "out"
    manifests = [
        prepare(source=str(src), output=out, index=i, count=2, shard_tokens=2000) for i in (0, 1)
    ]
    docs = _documents(out)
    assert len(docs) == len(set(docs)), "no document survives twice, in either worker"
    assert set(docs) == expected, "every distinct clean document survives once"
    # Each worker kept only its partition, and both saw the whole corpus.
    for m in manifests:
        assert m.stats.input_files == 3
        assert m.stats.documents_kept > 0
    assert sum(m.stats.documents_kept for m in manifests) == len(expected)
    assert manifests[0].stats.documents_read == manifests[1].stats.documents_read
    dropped = sum(m.stats.duplicates_dropped for m in manifests)
    # In a.txt 50 copies and 3 spelling variants; in c.jsonl 50 + 30 copies of a.txt's and
    # unique[299] again (its junk line cleaned away); in d.txt.gz 20 copies.
    assert dropped == 50 + 3 + 50 + 30 + 1 + 20


def test_shards_load_and_token_counts_match(tmp_path: Path, corpus: Any) -> None:
    src, expected = corpus
    out = tmp_path / "out"
    for i in (0, 1):
        prepare(source=str(src), output=out, index=i, count=2, shard_tokens=2000)
    manifests = load_manifests(out)
    assert [m.index for m in manifests] == [0, 1]
    assert all(m.dtype == "uint16" and m.tokenizer.vocab_size == 257 for m in manifests)
    shards = [s for m in manifests for s in m.shards]
    assert len(shards) > 2, "small shard_tokens forces several shards per worker"
    for shard in shards:
        data = (out / shard.path).read_bytes()
        assert hashlib.sha256(data).hexdigest() == shard.sha256
        array = np.load(out / shard.path)
        assert array.dtype == np.uint16 and array.size == shard.tokens
    # Byte-level: every document costs its UTF-8 length plus one end-of-document token.
    want = sum(len(d.encode()) + 1 for d in expected)
    assert sum(a.size for a in iter_shards(out)) == want
    assert sum(m.stats.tokens for m in manifests) == want


def test_reruns_are_byte_identical(tmp_path: Path, corpus: Any) -> None:
    src, _ = corpus

    def run(out: Path) -> dict[str, bytes]:
        for i in (0, 1):
            prepare(source=str(src), output=out, index=i, count=2, shard_tokens=2000)
        return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.*"))}

    first = run(tmp_path / "one")
    assert run(tmp_path / "two") == first
    assert run(tmp_path / "one") == first, "rerunning into the same directory replaces cleanly"


def test_the_trainers_reader_loads_the_shards(tmp_path: Path, corpus: Any) -> None:
    pytest.importorskip("torch")
    from workloads.training.data import TokenShards

    src, _ = corpus
    out = tmp_path / "out"
    for i in (0, 1):
        prepare(source=str(src), output=out, index=i, count=2, shard_tokens=4000)
    shards = TokenShards(out, seq_len=64)
    total = sum(a.size for a in iter_shards(out))
    assert sum(a.size for a in shards.arrays) == total


def test_a_missing_part_is_refused(tmp_path: Path, corpus: Any) -> None:
    src, _ = corpus
    prepare(source=str(src), output=tmp_path / "out", index=1, count=2)
    with pytest.raises(ValueError, match="parts missing"):
        load_manifests(tmp_path / "out")


def test_cli_reads_the_index_from_the_job_controller(
    tmp_path: Path, corpus: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    src, _ = corpus
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "1")
    assert main(["--input", str(src), "--output", str(tmp_path / "o"), "--count", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["index"] == 1
    assert main(["--input", str(tmp_path / "nope"), "--output", str(tmp_path), "--count", "2"]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_s3_input(tmp_path: Path, corpus: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3
    from moto import mock_aws

    src, expected = corpus
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="llmp-datasets")
        for path in src.rglob("*"):
            if path.is_file():
                key = f"raw/web/{path.relative_to(src)}"
                s3.put_object(Bucket="llmp-datasets", Key=key, Body=path.read_bytes())
        for i in (0, 1):
            prepare(source="s3://llmp-datasets/raw/web/", output=tmp_path / "s3", index=i, count=2)
    local = tmp_path / "local"
    for i in (0, 1):
        prepare(source=str(src), output=local, index=i, count=2)
    assert set(_documents(tmp_path / "s3")) == expected
    assert [p.read_bytes() for p in sorted((tmp_path / "s3").rglob("*.npy"))] == [
        p.read_bytes() for p in sorted(local.rglob("*.npy"))
    ]


def _job(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "name": "prep-web",
        "namespace": "training",
        "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/llmp-workloads:0.1.0",
        "dataset": "web",
        "datasets_bucket": "llmp-prod-datasets",
        "count": 8,
        "parallelism": 4,
    }
    return data_prep_job(DataPrepSpec.model_validate({**fields, **overrides}))


def test_indexed_job_validates_and_reads_s3_writes_fsx() -> None:
    job = _job()
    validate(job)
    validate(as_pod(job["spec"]["template"]))
    assert policy_violations(job, "kubernetes:batch/v1:Job") == []
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 8, 4)
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (c,) = pod["containers"]
    args = dict(zip(c["args"][::2], c["args"][1::2], strict=True))
    assert args["--input"] == "s3://llmp-prod-datasets/raw/web/"
    assert args["--output"] == "/fsx/datasets/tokenized/web"
    assert args["--count"] == "8"
    assert "--index" not in args, "each pod takes its index from JOB_COMPLETION_INDEX"
    assert pod["volumes"] == [{"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx-lustre"}}]
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_indexed_job_with_a_queue_is_created_suspended() -> None:
    job = _job(queue_name="cpu-batch")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "cpu-batch"
    assert job["spec"]["suspend"] is True
    validate(job)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"image": "python"}, "has no tag"),
        ({"output_root": "/data"}, "must be under /fsx/"),
        ({"dataset": "Web_Crawl"}, "must be a DNS label"),
    ],
)
def test_bad_data_prep_specs(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _job(**overrides)
