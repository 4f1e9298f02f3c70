"""The journey: a planted corpus through the Ray pipeline (twice: the API, then the
command line), the shards decoded and read by the trainer's TokenShards."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from tokenizers import Tokenizer

from contracts.text_pipeline import TextPipelineConfig
from tests.workloads.data import corpus
from workloads.data.text.__main__ import main
from workloads.data.text.pipeline import filter_text, run
from workloads.data.text.shards import Manifest, iter_shards, load_manifests
from workloads.training.data import TokenShards

CONFIG: dict[str, Any] = {
    "tokenizer": {"train": {"vocab_size": 1000, "sample_documents": 200}},
    "shards": {"parts": 3, "shard_tokens": 20_000},
    "block_size_bytes": 65_536,
    "shuffle_partitions": 4,
}


@pytest.fixture(scope="module")
def result(ray_local: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("pipeline")
    planted = corpus.build(root / "in")
    cfg = TextPipelineConfig.model_validate(CONFIG)
    manifests = run(cfg, str(root / "in"), str(root / "out1"))
    (root / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    code = main(
        ["--config", str(root / "config.yaml"), "--input", str(root / "in"),
         "--output", str(root / "out2")]
    )  # fmt: skip
    return {"root": root, "planted": planted, "cfg": cfg, "manifests": manifests, "code": code}


def _documents(out: Path) -> list[str]:
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    eos = load_manifests(out)[0].tokenizer.eos_id
    texts = []
    for array in iter_shards(out):
        ids = np.asarray(array, dtype=np.int64)
        ends = np.flatnonzero(ids == eos)
        assert ends.size and ends[-1] == ids.size - 1  # whole documents only
        for a, b in zip(np.r_[0, ends[:-1] + 1], ends, strict=True):
            texts.append(tok.decode(ids[a:b].tolist(), skip_special_tokens=False))
    return texts


def test_every_planted_outcome(result: dict[str, Any]) -> None:
    planted: corpus.Planted = result["planted"]
    cfg: TextPipelineConfig = result["cfg"]
    docs = _documents(result["root"] / "out1")
    kept = set(docs)
    stats = result["manifests"][0].stats
    final = {t: filter_text(t, cfg)[0] for t in planted.ids}

    collapsed = 0
    for members in planted.clusters:
        present = [t for t in members if final[t] in kept]
        first = min(members, key=lambda t: planted.ids[t])
        collapsed += present == [first]
    lost = [t for t in planted.unique if final[t] not in kept]
    below = sum(final[a] in kept and final[b] in kept for a, b in planted.below_pairs)
    dropped = planted.foreign + list(planted.junk.values())
    leaked = [t for t in dropped if final[t] and final[t] in kept]
    pii_total = sum(len(v) for v in planted.pii.values())
    pii_found = sum(stats.pii_redacted.values())
    print(
        f"\nnear-dup clusters collapsed {collapsed}/{len(planted.clusters)}; "
        f"below-threshold pairs kept apart {below}/{len(planted.below_pairs)}; "
        f"unique lost {len(lost)}; kept {len(docs)}/{planted.expected_kept}; "
        f"exact dropped {stats.exact_duplicates_dropped}/{len(planted.exact_copies)}; "
        f"PII {pii_found}/{pii_total} "
        + ", ".join(f"{k} {stats.pii_redacted[k]}/{len(v)}" for k, v in planted.pii.items())
    )
    assert collapsed == len(planted.clusters)
    assert below == len(planted.below_pairs) and not lost and not leaked
    assert len(docs) == len(kept) == planted.expected_kept == stats.documents_kept
    assert stats.exact_duplicates_dropped == len(planted.exact_copies)
    assert stats.near_duplicate_clusters == len(planted.clusters)
    assert stats.near_duplicates_dropped == sum(len(c) - 1 for c in planted.clusters)
    assert stats.dropped["language"] == {"lang_de": 6, "lang_fr": 6, "lang_es": 6, "lang_zxx": 1}
    assert sum(sum(r.values()) for r in stats.dropped.values()) == len(dropped) + 1
    assert stats.dropped["read"] == {"no_text": 1}  # the line that is not JSON
    assert {k: stats.pii_redacted[k] for k in planted.pii} == {
        k: len(v) for k, v in planted.pii.items()
    }
    text = "\n".join(docs)
    for kind, values in planted.pii.items():
        for value in values:
            assert value not in text, (kind, value)
    for kind in planted.pii:
        assert cfg.pii.replacements[kind] in text
    for look in planted.lookalikes:
        assert look in text


def test_manifest_records_tokenizer_config_and_shards(result: dict[str, Any]) -> None:
    out = result["root"] / "out1"
    manifests = load_manifests(out)
    assert [m.index for m in manifests] == [0, 1, 2]
    m = manifests[0]
    assert isinstance(m, Manifest) and m.format == "llmp-tokens/2"
    assert m.config_sha256 == result["cfg"].sha256()
    assert m.tokenizer.path == "tokenizer.json" and m.tokenizer.vocab_size == 1000
    import hashlib

    assert hashlib.sha256((out / "tokenizer.json").read_bytes()).hexdigest() == (m.tokenizer.sha256)
    assert sum(x.tokens for x in manifests if isinstance(x, Manifest)) == m.stats.tokens
    assert sum(len(x.shards) for x in manifests) > 3  # parts cut into several shards


def test_two_runs_are_byte_identical_and_the_cli_reports(
    result: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert result["code"] == 0
    one, two = result["root"] / "out1", result["root"] / "out2"
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted(p.name for p in two.iterdir())
    assert [n for n in names if not n.endswith((".npy", ".json"))] == []
    for name in names:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name


def test_the_trainer_reads_the_shards(result: dict[str, Any]) -> None:
    shards = TokenShards(result["root"] / "out1", seq_len=128, seed=0)
    assert shards.n_windows > 500
    batch = shards.batch(0, 4)
    assert tuple(batch.shape) == (4, 129) and int(batch.max()) < 1000


def test_bad_config_and_input_fail_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"dedup": {"near": {"bands": 10}}}))
    assert main(["--config", str(bad), "--input", str(tmp_path), "--output", "o"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "dedup.near: bands * rows must equal num_perm" in err
    good = tmp_path / "good.json"
    good.write_text(json.dumps(CONFIG))
    assert main(["--config", str(good), "--input", str(tmp_path / "nope"), "--output", "o"]) == 2
    assert "not a directory or an s3:// prefix" in capsys.readouterr().err
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.jsonl").write_text('{"text": "hi"}\n')
    cfg = {**CONFIG, "tokenizer": {"path": "tok"}}
    good.write_text(json.dumps(cfg))
    assert main(["--config", str(good), "--input", str(tmp_path / "in"), "--output", "o"]) == 2
    assert "tokenizer.path tok: no tokenizer.json" in capsys.readouterr().err
    (tmp_path / "in" / "tok").mkdir()
    (tmp_path / "in" / "tok" / "tokenizer.json").write_text("{not json")
    assert main(["--config", str(good), "--input", str(tmp_path / "in"), "--output", "o"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a tokenizer.json" in err
    bad.write_text("a: [1")
    assert main(["--config", str(bad), "--input", str(tmp_path), "--output", "o"]) == 2
    assert "not valid YAML" in capsys.readouterr().err
