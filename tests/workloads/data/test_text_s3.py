"""The text pipeline on S3, for real: a small planted corpus (uncompressed JSONL in several
byte ranges, a .jsonl.gz, a Parquet file of several row groups) in a moto bucket on
127.0.0.1, `python -m workloads.data.text --input s3://… --output s3://…`, the shards read
back by the trainer's `TokenShards` through boto3, and the output byte-identical to a
run on local files.

The endpoint reaches the Ray workers the way production's does: the driver reads
`AWS_ENDPOINT_URL` and ships it with each task (the workers' credentials are their own:
the `ray_local` session's dummy ones here, Pod Identity on EKS).
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from contracts.text_pipeline import TextPipelineConfig
from tests.conftest import reset_moto, use_dummy_credentials
from tests.workloads.data import corpus
from workloads.data.text.__main__ import main
from workloads.data.text.pipeline import filter_text, input_splits
from workloads.data.text.shards import Manifest
from workloads.training.data import TokenShards

BUCKET = "llmp-text-s3-test"
CONFIG: dict[str, Any] = {
    "tokenizer": {"train": {"vocab_size": 400, "sample_documents": 100}},
    "shards": {"parts": 2, "shard_tokens": 4_000},
    "block_size_bytes": 8_192,
    "shuffle_partitions": 2,
}
EMAIL = "grace.lantern7@harbor-mail.example.com"
PHONE = "555-867-5309"


def _corpus(root: Path) -> dict[str, Any]:
    """60 documents: 40 (two with PII) in raw/a/part-0.jsonl, 10 and an exact copy of a
    JSONL one in raw/a/part-1.jsonl.gz, 9 in raw/b/rows.parquet (row groups of 4)."""
    rng = random.Random(11)
    docs = [corpus.layout(corpus.prose_sentences(rng, 18)) for _ in range(59)]
    for i, value in ((3, EMAIL), (17, PHONE)):
        sents = corpus.prose_sentences(rng, 18)
        sents.insert(7, f"For questions the team can be reached at {value} during the week.")
        docs[i] = corpus.layout(sents)
    jsonl, gz, rows = docs[:40], [*docs[40:50], docs[5]], docs[50:]
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    with (root / "a" / "part-0.jsonl").open("wb") as f:
        f.writelines(
            (json.dumps({"text": t, "id": i}) + "\n").encode() for i, t in enumerate(jsonl)
        )
    with gzip.open(root / "a" / "part-1.jsonl.gz", "wb") as f:
        f.writelines((json.dumps({"text": t}) + "\n").encode() for t in gz)
    pq.write_table(pa.table({"text": rows}), root / "b" / "rows.parquet", row_group_size=4)
    return {"unique": docs, "uploaded": len(jsonl) + len(gz) + len(rows)}


@pytest.fixture(scope="module")
def s3_run(
    ray_local: None, moto_server: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("text-s3")
    planted = _corpus(root / "raw")
    (root / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_credentials(mp, root)
        mp.setenv("AWS_ENDPOINT_URL", reset_moto(moto_server))  # boto3 and pyarrow read it
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        for f in sorted(p for p in (root / "raw").rglob("*") if p.is_file()):
            s3.upload_file(str(f), BUCKET, f"raw/{f.relative_to(root / 'raw')}")
        splits = input_splits(f"s3://{BUCKET}/raw/", CONFIG["block_size_bytes"])
        cfg = ["--config", str(root / "config.yaml")]
        code = main([*cfg, "--input", f"s3://{BUCKET}/raw/", "--output", f"s3://{BUCKET}/tokens/"])
        objects = {
            o["Key"]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
            for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="tokens/")["Contents"]
        }
        shards = TokenShards(f"s3://{BUCKET}/tokens/", seq_len=64, cache=root / "cache")
        local_code = main([*cfg, "--input", str(root / "raw"), "--output", str(root / "local")])
    return {
        **planted,
        "root": root,
        "code": code,
        "local_code": local_code,
        "splits": splits,
        "objects": objects,
        "shards": shards,
    }


def test_the_input_is_cut_into_ranges_row_groups_and_a_whole_gz(s3_run: dict[str, Any]) -> None:
    files, splits = s3_run["splits"]
    assert files == 3
    kinds = [(s.rel, s.kind) for s in splits]
    assert kinds.count(("a/part-0.jsonl", "jsonl")) >= 4  # several byte ranges
    assert kinds.count(("a/part-1.jsonl.gz", "jsonl.gz")) == 1
    assert kinds.count(("b/rows.parquet", "parquet")) == 3  # 9 rows in groups of 4


def test_the_s3_run_writes_flat_shards_and_manifests_with_the_counts(
    s3_run: dict[str, Any],
) -> None:
    assert s3_run["code"] == 0
    names = sorted(s3_run["objects"])
    assert all(n.count("/") == 1 for n in names)  # flat under tokens/, no marker object
    assert "tokens/manifest-00000-of-00002.json" in names
    assert "tokens/manifest-00001-of-00002.json" in names
    assert "tokens/tokenizer.json" in names
    assert any(n.startswith("tokens/part-00000-of-00002-shard-") for n in names)
    assert all(n.endswith((".npy", ".json")) for n in names)
    manifests = [
        Manifest.model_validate_json(s3_run["objects"][f"tokens/manifest-0000{i}-of-00002.json"])
        for i in range(2)
    ]
    stats = manifests[0].stats
    assert manifests[0].source == f"s3://{BUCKET}/raw/"
    assert stats.input_files == 3
    assert stats.documents_read == s3_run["uploaded"] == 60
    assert stats.exact_duplicates_dropped == 1
    assert stats.pii_redacted["email"] == 1 and stats.pii_redacted["phone"] == 1
    cfg = TextPipelineConfig.model_validate(CONFIG)
    assert all(filter_text(t, cfg)[0] for t in s3_run["unique"])  # all pass the filters
    assert stats.documents_kept == len(s3_run["unique"]) == 59
    assert sum(m.documents for m in manifests) == 59
    for m in manifests:
        for shard in m.shards:
            assert f"tokens/{shard.path}" in s3_run["objects"]
    text = b"".join(s3_run["objects"].values())
    assert EMAIL.encode() not in text and PHONE.encode() not in text


def test_the_trainer_reads_the_shards_from_s3(s3_run: dict[str, Any]) -> None:
    shards: TokenShards = s3_run["shards"]
    local = s3_run["root"] / "local"
    expected = [np.load(p) for p in sorted(local.glob("part-*.npy"))]
    assert [np.asarray(a[:]).tolist() for a in shards.arrays] == [a.tolist() for a in expected]
    batch = shards.batch(0, 2)
    assert tuple(batch.shape) == (2, 65) and int(batch.max()) < 400


def test_the_s3_output_equals_a_local_run_byte_for_byte(s3_run: dict[str, Any]) -> None:
    assert s3_run["local_code"] == 0
    local = s3_run["root"] / "local"
    objects = {k.removeprefix("tokens/"): v for k, v in s3_run["objects"].items()}
    assert sorted(objects) == sorted(p.name for p in local.iterdir())
    for name, data in objects.items():
        mine = (local / name).read_bytes()
        if name.startswith("manifest-"):  # equal but for the input each run names
            a, b = json.loads(data), json.loads(mine)
            assert (a.pop("source"), b.pop("source")) == (
                f"s3://{BUCKET}/raw/",
                str(local.parent / "raw"),
            )
            assert a == b, name
        else:
            assert data == mine, name
