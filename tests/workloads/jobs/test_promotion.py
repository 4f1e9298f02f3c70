"""Model promotion end to end on the CPU: pretrain a Llama-architecture model from its config
on 2 ranks (ZeRO-3) with the training harness, promote the newest complete checkpoint into
a moto S3 server on 127.0.0.1, download the revision and check that transformers loads it
with the DeepSpeed checkpoint's logits. SFT, DPO, GRPO and LoRA exports are
tests/workloads/test_lifecycle.py's."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import torch

from contracts import revisions
from tests.conftest import create_signing_key, reset_moto
from tests.workloads.hf import tiny_tokenizer
from tests.workloads.training.harness import Run, job_config, kill_all
from workloads.evaluation import heldout_perplexity
from workloads.jobs import promotion
from workloads.training import checkpointing as ckpt
from workloads.training.data import TokenShards, write_synthetic_shards

BUCKET = "models"
REPO = Path(__file__).resolve().parents[3]
VOCAB = 85  # tests/workloads/hf.py's tokenizer
# Dummy credentials in every test (tests/conftest.py): no profile or instance metadata.
pytestmark = pytest.mark.usefixtures("aws_env")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """2 ranks, ZeRO-3, 4 steps, a checkpoint every 2: step-2 and step-4 complete."""
    tmp = tmp_path_factory.mktemp("trained")
    data = tmp / "tokens"
    write_synthetic_shards(data, n_shards=1, tokens_per_shard=20_000, vocab=VOCAB)
    tiny_tokenizer(tmp / "tokenizer")  # served with the model; its vocabulary is VOCAB ids
    procs: list[subprocess.Popen[bytes]] = []
    cfg = job_config(
        tmp,
        data,
        max_steps=4,
        checkpoint={"interval_steps": 2, "keep_last": 2},
        model={"vocab_size": VOCAB, "tokenizer": str(tmp / "tokenizer")},
    )
    try:
        run = Run(tmp, cfg, 2, [], procs.append)
        assert run.wait(180) == [0, 0], run.stderr_tail()
        yield run
    finally:
        kill_all(procs)


@pytest.fixture(scope="module")
def heldout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("heldout")
    write_synthetic_shards(path, n_shards=1, tokens_per_shard=4_000, vocab=VOCAB, seed=99)
    return path


@pytest.fixture
def endpoint(moto_server: str) -> str:
    """The moto server emptied, with the models bucket."""
    reset_moto(moto_server)
    boto3.client("s3", endpoint_url=moto_server).create_bucket(Bucket=BUCKET)
    create_signing_key(moto_server, BUCKET)
    return moto_server


class Recording:
    """A boto3 S3 client that records the keys it writes, in order; optionally fails one."""

    def __init__(self, client: Any, fail_on: str | None = None) -> None:
        self.client, self.fail_on = client, fail_on
        self.writes: list[str] = []

    def _write(self, key: str) -> None:
        if self.fail_on is not None and key.endswith(self.fail_on):
            raise RuntimeError(f"injected failure writing {key}")
        self.writes.append(key)

    def upload_file(self, path: str, bucket: str, key: str) -> None:
        self._write(key)
        self.client.upload_file(path, bucket, key)

    def put_object(self, **kw: Any) -> Any:
        self._write(kw["Key"])
        return self.client.put_object(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def keys(endpoint: str) -> list[str]:
    listing = boto3.client("s3", endpoint_url=endpoint).list_objects_v2(Bucket=BUCKET)
    return sorted(o["Key"] for o in listing.get("Contents", []))


def checkpoints(trained: Run, tmp_path: Path) -> Path:
    """A copy of the trained run's checkpoints plus a newer unsealed and a newer partial one."""
    root = tmp_path / "ckpt"
    shutil.copytree(trained.workdir / "ckpt", root)
    unsealed = root / "step-6"
    shutil.copytree(root / "step-2", unsealed)
    (unsealed / ckpt.COMPLETE).unlink()
    shutil.copytree(root / "step-2", root / "tmp-step-8")
    (root / "latest").write_text("step-6")  # the pointer is not trusted
    return root


def argv(trained: Run, root: Path, heldout: Path, endpoint: str, *extra: str) -> list[str]:
    return [
        "--checkpoints",
        str(root),
        "--heldout",
        str(heldout),
        "--bucket",
        BUCKET,
        "--name",
        "base",
        "--prefix",
        "revisions/",
        "--endpoint-url",
        endpoint,
        "--job-config",
        str(trained.workdir / "job.json"),
        *extra,
    ]


def test_promotes_newest_complete_checkpoint_as_a_directory_transformers_loads(
    trained: Run, heldout: Path, endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from deepspeed.utils.zero_to_fp32 import load_state_dict_from_zero_checkpoint
    from transformers import AutoModelForCausalLM

    from contracts.training import ModelConfig
    from workloads.training.model import hf_config

    root = checkpoints(trained, tmp_path)
    s3 = Recording(boto3.client("s3", endpoint_url=endpoint))
    extra = ("--max-perplexity", "1e6", "--dtype", "float32")
    code = promotion.main(argv(trained, root, heldout, endpoint, *extra), s3)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out.strip().splitlines()[-1])
    assert result["step"] == 4  # not the unsealed step-6, not tmp-step-8, not `latest`
    assert re.fullmatch(r"\d{8}T\d{6}Z-step-4", result["revision"])
    assert result["serving_revision"] == f"base/{result['revision']}"
    prefix = f"revisions/base/{result['revision']}/"
    assert result["uri"] == f"s3://{BUCKET}/{prefix}"
    names = [
        "COMPLETE",
        "chat_template.jinja",
        "config.json",
        "generation_config.json",
        "manifest.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert keys(endpoint) == [prefix + n for n in names]
    # Weights and config first, the manifest after them, COMPLETE last.
    assert [k.removeprefix(prefix) for k in s3.writes][-2:] == ["manifest.json", "COMPLETE"]

    client = boto3.client("s3", endpoint_url=endpoint)
    down = tmp_path / "download"
    down.mkdir()
    for name in names:
        client.download_file(BUCKET, prefix + name, str(down / name))
    manifest = json.loads((down / "manifest.json").read_text())
    for name in set(names) - {"COMPLETE", "manifest.json"}:
        assert manifest["files"][name]["sha256"] == promotion.sha256_of(down / name)
        assert manifest["files"][name]["bytes"] == (down / name).stat().st_size
    # COMPLETE is the manifest's digest signed by the stack's key, which KMS verifies.
    kms = boto3.client("kms", endpoint_url=endpoint)
    complete = (down / "COMPLETE").read_bytes()
    body = (down / "manifest.json").read_bytes()
    alias = revisions.signing_key_alias(BUCKET)
    assert revisions.check_seal(kms, alias, body, complete) is None
    assert revisions.check_seal(kms, alias, body + b" ", complete) is not None
    assert manifest["step"] == 4 and manifest["source_checkpoint"] == "step-4"
    assert manifest["architecture"] == "LlamaForCausalLM" and manifest["dtype"] == "float32"
    config = json.loads((down / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["vocab_size"] == VOCAB

    served = AutoModelForCausalLM.from_pretrained(str(down), local_files_only=True).eval()
    job = json.loads((trained.workdir / "job.json").read_text())
    reference = AutoModelForCausalLM.from_config(
        hf_config(ModelConfig.model_validate(job["model"]))
    )
    reference = load_state_dict_from_zero_checkpoint(reference, str(root), tag="step-4").eval()
    shards = TokenShards(heldout, 32)
    batch = shards.batch(0, 8)
    with torch.no_grad():
        got, want = served(input_ids=batch).logits, reference(input_ids=batch).logits
    assert got.shape == (8, 33, VOCAB)
    assert torch.allclose(got, want, rtol=0, atol=1e-6), float((got - want).abs().max())
    assert manifest["export_check"]["max_abs_logit_diff"] <= 1e-6
    # The promoted weights are trained, not the initialisation, and the reported
    # perplexity is what the downloaded model gives.
    ppl = heldout_perplexity(served, shards, 1024)
    assert math.isclose(ppl, manifest["evaluation"]["heldout_perplexity"], rel_tol=1e-6)
    assert ppl < VOCAB  # better than uniform over the vocabulary


def test_bfloat16_export_is_within_its_tolerance(
    trained: Run, heldout: Path, endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = checkpoints(trained, tmp_path)
    assert promotion.main(argv(trained, root, heldout, endpoint, "--out", str(tmp_path / "o"))) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    check = result["export_check"]
    assert result["dtype"] == "bfloat16" and 0 < check["max_abs_logit_diff"] <= check["tolerance"]
    config = json.loads((tmp_path / "o" / "config.json").read_text())
    assert config["dtype"] == config["torch_dtype"] == "bfloat16"


def test_the_directory_is_readable_by_transformers_4_too(tmp_path: Path) -> None:
    """What vLLM's image reads with transformers 4.x: rope_theta, torch_dtype, a tokenizer
    class it has and its list of extra special tokens (checked by hand against 4.57.1)."""
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "dtype": "bfloat16",
                "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0},
            }
        )
    )
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "TokenizersBackend",
                "backend": "tokenizers",
                "extra_special_tokens": ["<|im_start|>"],
                "is_local": True,
                "local_files_only": True,
                "eos_token": "<|im_end|>",
            }
        )
    )
    promotion.for_older_readers(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["rope_theta"] == 500000.0 and config["torch_dtype"] == "bfloat16"
    assert config["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0}
    assert config["rope_parameters"]["rope_theta"] == 500000.0  # what version 5 reads
    tok = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert tok == {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "additional_special_tokens": ["<|im_start|>"],
        "eos_token": "<|im_end|>",
    }


def test_failing_gate_publishes_nothing(
    trained: Run, heldout: Path, endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = checkpoints(trained, tmp_path)
    code = promotion.main(argv(trained, root, heldout, endpoint, "--max-perplexity", "1.5"))
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1
    assert captured.err.startswith("promotion: not promoted: held-out perplexity")
    assert "exceeds" in captured.err or "above" in captured.err
    assert keys(endpoint) == []


def test_a_task_below_its_minimum_publishes_nothing(
    trained: Run, heldout: Path, endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = checkpoints(trained, tmp_path)
    gate = tmp_path / "gate.yaml"
    gate.write_text(
        "tasks: [llmp_arith]\nlimit: 4\nthresholds:\n  tasks:\n    llmp_arith: {acc: 0.99}\n"
    )
    code = promotion.main(argv(trained, root, heldout, endpoint, "--eval-config", str(gate)))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith("promotion: not promoted: llmp_arith")
    assert "0.99" in err[-1] and "(step 4)" in err[-1]
    assert keys(endpoint) == []


def test_failed_upload_leaves_no_revision(
    trained: Run, heldout: Path, endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = checkpoints(trained, tmp_path)
    s3 = Recording(boto3.client("s3", endpoint_url=endpoint), fail_on="manifest.json")
    with pytest.raises(RuntimeError, match="injected"):
        promotion.main(argv(trained, root, heldout, endpoint), s3)
    assert keys(endpoint) == []  # the uploaded weights and config were removed again


def test_bad_input_exits_2_with_one_line(
    trained: Run, heldout: Path, endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "none"
    empty.mkdir()
    assert promotion.main(argv(trained, empty, heldout, endpoint)) == 2
    err = capsys.readouterr().err
    assert err.startswith("promotion: no complete checkpoint") and err.count("\n") == 1

    root = checkpoints(trained, tmp_path)
    args = argv(trained, root, heldout, endpoint)
    args[args.index(BUCKET)] = "no-such-bucket"
    assert promotion.main(args) == 2
    assert capsys.readouterr().err == "promotion: no bucket no-such-bucket\n"
    assert keys(endpoint) == []


def test_an_architecture_vllm_does_not_serve_is_refused(
    trained: Run,
    heldout: Path,
    endpoint: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from contracts import architectures as vllm_architectures

    monkeypatch.setattr(vllm_architectures, "TEXT_GENERATION", frozenset({"Qwen3ForCausalLM"}))
    root = checkpoints(trained, tmp_path)
    assert promotion.main(argv(trained, root, heldout, endpoint)) == 2
    err = capsys.readouterr().err
    assert "'LlamaForCausalLM' is not a text-generation model of vLLM v0.34.0" in err
    assert keys(endpoint) == []


@pytest.mark.parametrize(
    ("ppl", "limit", "fails"),
    [
        (float("nan"), None, True),
        (float("inf"), 1e9, True),
        (10.0, 9.99, True),
        (10.0, 10.0, False),
        (10.0, None, False),
    ],
)
def test_gate(ppl: float, limit: float | None, fails: bool) -> None:
    """The held-out part of the gate promotion applies (workloads.evaluation's)."""
    from workloads.evaluation import Thresholds, gate

    assert bool(gate({}, ppl, Thresholds(max_perplexity=limit))) is fails


def test_the_example_gate_parses_and_names_shipped_tasks() -> None:
    from workloads.evaluation import expand_tasks

    config = promotion.load_eval_config(str(REPO / "examples" / "gates" / "chat-sft.yaml"), None)
    assert config.tasks == ["llmp"] and config.thresholds.max_perplexity == 40
    tasks = expand_tasks(config.tasks)
    assert set(config.thresholds.tasks) | set(config.thresholds.tasks_max) <= set(tasks)
