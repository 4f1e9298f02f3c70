"""The model lifecycle as the platform's jobs run it, on the CPU: a base checkpoint -> SFT
-> promotion (a Hugging Face directory, evaluated, published) -> DPO and GRPO from the
published revision -> a LoRA run whose adapters are merged and kept.

Every training run is 2 ranks under DeepSpeed (gloo, loopback only) with the trainer's
own entry point; promotion publishes into a moto S3 server on 127.0.0.1. The base model
is made in the test (tests/workloads/hf.py): nothing is downloaded. Run with `-s` to see
the loss and reward curves these tests check.
"""

from __future__ import annotations

import json
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import torch

from contracts import architectures as vllm_architectures
from tests.conftest import create_signing_key, reset_moto, use_dummy_credentials
from tests.workloads.hf import tiny_base_model
from tests.workloads.training.harness import Run, kill_all
from workloads.jobs import promotion
from workloads.training import checkpointing as ckpt

BUCKET = "models"


@pytest.fixture(scope="module")
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    spawned: list[subprocess.Popen[bytes]] = []
    yield spawned
    kill_all(spawned)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lifecycle")


@pytest.fixture(scope="module")
def base(root: Path) -> Path:
    return tiny_base_model(root / "base", "qwen2")


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def data(root: Path) -> dict[str, Path]:
    rng = random.Random(0)
    sums = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(256)]
    chat = [
        {
            "messages": [
                {"role": "system", "content": "Add."},
                {"role": "user", "content": f"{a}+{b}?"},
                {"role": "assistant", "content": str(a + b)},
            ]
        }
        for a, b in sums
    ]
    pairs = [{"prompt": f"{a}+{b}?", "chosen": str(a + b), "rejected": "no."} for a, b in sums]
    prompts = [{"prompt": f"Say {c}", "answer": c} for c in "xyz" * 40]
    return {
        "sft": _write(root / "sft.jsonl", chat),
        "dpo": _write(root / "dpo.jsonl", pairs),
        "grpo": _write(root / "grpo.jsonl", prompts),
    }


def _config(
    root: Path, name: str, task: str, data: Path, model: dict[str, Any], **over: Any
) -> dict[str, Any]:
    return {
        "task": task,
        "model": {"seq_len": 48, **model},
        "data": {"path": str(data)},
        "checkpoint": {"dir": str(root / name / "ckpt"), "interval_steps": 10, "keep_last": 2},
        "micro_batch_size": 8,
        "bf16": False,
        "optimizer": "torch",
        "lr": 3e-3,
        **over,
    }


def _train(procs: list[subprocess.Popen[bytes]], root: Path, name: str, cfg: dict[str, Any]) -> Run:
    run = Run(root / name, cfg, 2, [], procs.append)
    assert run.wait(600) == [0, 0], run.stderr_tail()
    return run


def _curve(run: Run, key: str) -> list[float]:
    return [float(e[key]) for e in run.of("step")]


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


@pytest.fixture(scope="module")
def endpoint(moto_server: str, root: Path) -> Iterator[str]:
    """The moto server, emptied, with the models bucket; dummy credentials for the module."""
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_credentials(mp, root)
        reset_moto(moto_server)
        boto3.client("s3", endpoint_url=moto_server).create_bucket(Bucket=BUCKET)
        create_signing_key(moto_server, BUCKET)
        yield moto_server


def _promote(run: Run, name: str, endpoint: str, out: Path, *extra: str) -> dict[str, Any]:
    """What the promotion job does (its CLI is tests/workloads/jobs/test_promotion.py's)."""
    args = promotion.parse_args(
        [
            "--checkpoints",
            str(run.workdir / "ckpt"),
            "--job-config",
            str(run.workdir / "job.json"),
            "--bucket",
            BUCKET,
            "--name",
            name,
            "--endpoint-url",
            endpoint,
            "--out",
            str(out),
            *extra,
        ]
    )
    return promotion.promote(args)


def _download(endpoint: str, uri: str, into: Path) -> Path:
    client = boto3.client("s3", endpoint_url=endpoint)
    prefix = uri.removeprefix(f"s3://{BUCKET}/")
    for obj in client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]:
        target = into / obj["Key"].removeprefix(prefix)
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(BUCKET, obj["Key"], str(target))
    return into


@pytest.fixture(scope="module")
def sft(procs: list[subprocess.Popen[bytes]], root: Path, base: Path, data: dict[str, Path]) -> Run:
    """Full fine-tuning, ZeRO-3, loss on the assistant turns."""
    cfg = _config(
        root, "sft", "sft", data["sft"], {"pretrained": str(base)}, max_steps=30, zero_stage=3
    )
    return _train(procs, root, "sft", cfg)


def test_sft_learns_the_assistant_turns(sft: Run) -> None:
    start = sft.of("start")[0]
    assert start["task"] == "sft" and start["architecture"] == "Qwen2ForCausalLM"
    loss = _curve(sft, "loss")
    print(
        f"\nSFT, 2 ranks, ZeRO-3, all weights: loss {loss[0]:.4f} -> {loss[-1]:.4f}, "
        f"{len(loss)} steps"
    )
    assert len(loss) == 30
    assert _mean(loss[-5:]) < 0.6 * _mean(loss[:5])
    # The loss counts the reply tokens only: 1-2 digits and the end of turn per record,
    # a fraction of the rendered conversation.
    tokens = _curve(sft, "tokens_in_loss")
    assert all(8 * 2 <= t <= 8 * 3 for t in tokens), tokens


@pytest.fixture(scope="module")
def eval_config(root: Path) -> Path:
    """The revision's evaluation: every shipped task on 8 items, a floor on arithmetic."""
    path = root / "eval.yaml"
    path.write_text("tasks: [llmp]\nlimit: 8\nthresholds:\n  tasks:\n    llmp_arith: {acc: 0.0}\n")
    return path


@pytest.fixture(scope="module")
def promoted(sft: Run, endpoint: str, root: Path, eval_config: Path) -> dict[str, Any]:
    out = root / "sft-export"
    extra = ("--eval-config", str(eval_config), "--dtype", "float32")
    return _promote(sft, "chat", endpoint, out, *extra)


def test_promotion_writes_a_directory_transformers_loads_with_the_checkpoints_logits(
    promoted: dict[str, Any], sft: Run, endpoint: str, root: Path, tmp_path: Path
) -> None:
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    from transformers import AutoModelForCausalLM

    assert promoted["serving_revision"] == f"chat/{promoted['revision']}"
    assert promoted["architecture"] == "Qwen2ForCausalLM"
    assert vllm_architectures.supports(promoted["architecture"])
    check = promoted["export_check"]
    print(
        f"\nexport check: {check['architecture']}, max abs logit diff "
        f"{check['max_abs_logit_diff']:.3g} (float32), vLLM {check['vllm_version']}"
    )
    assert check["max_abs_logit_diff"] <= 1e-4
    names = set(promoted["files"])
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= names

    down = _download(endpoint, promoted["uri"], tmp_path / "rev")
    manifest = json.loads((down / "manifest.json").read_text())
    assert (down / "COMPLETE").exists()
    assert json.loads((down / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    tasks = manifest["evaluation"]["tasks"]
    assert {"llmp_arith", "llmp_heldout_text", "llmp_copy"} <= set(tasks)
    assert manifest["evaluation"]["thresholds"]["tasks"] == {"llmp_arith": {"acc": 0.0}}

    # Independently of the exporter: the newest checkpoint's weights in the base's class.
    chosen = ckpt.select_resume(sft.workdir / "ckpt")
    assert chosen is not None and chosen.step == 30
    sd = get_fp32_state_dict_from_zero_checkpoint(str(chosen.path.parent), tag=chosen.tag)
    reference = AutoModelForCausalLM.from_pretrained(str(root / "base"), local_files_only=True)
    reference.load_state_dict(sd)
    served = AutoModelForCausalLM.from_pretrained(str(down), local_files_only=True)
    tokens = torch.randint(
        0, reference.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(3)
    )
    with torch.no_grad():
        want, got = (
            reference.eval()(input_ids=tokens).logits,
            served.eval()(input_ids=tokens).logits,
        )
    assert float((want - got).abs().max()) <= 1e-5
    # Trained: the exported model answers sums better than the base did.
    assert not torch.equal(
        served.lm_head.weight,
        AutoModelForCausalLM.from_pretrained(
            str(root / "base"), local_files_only=True
        ).lm_head.weight,
    )


def test_the_published_revision_records_every_shipped_task(promoted: dict[str, Any]) -> None:
    """The gate here only asks for the metrics to exist (a model this small scores near
    nothing); a gate that fails is test_promotion.py's."""
    from workloads.evaluation import results_table, shipped_tasks

    tasks = promoted["evaluation"]["tasks"]
    table = results_table(tasks)
    print("\nlm-evaluation-harness on the SFT revision (limit 8):\n" + table)
    assert all(len(line) <= 80 for line in table.splitlines())
    assert set(tasks) == set(shipped_tasks())
    assert (
        0.0 <= tasks["llmp_arith"]["acc"] <= 1.0 and tasks["llmp_heldout_text"]["bits_per_byte"] > 0
    )
    assert promoted["evaluation"]["limit"] == 8


@pytest.fixture(scope="module")
def sft_revision(promoted: dict[str, Any], endpoint: str, root: Path) -> Path:
    """The SFT revision as a later job reads it: downloaded from the models bucket."""
    return _download(endpoint, promoted["uri"], root / "sft-revision")


def test_dpo_from_the_published_revision(
    procs: list[subprocess.Popen[bytes]], root: Path, sft_revision: Path, data: dict[str, Path]
) -> None:
    model = {"pretrained": str(sft_revision)}
    cfg = _config(
        root, "dpo", "dpo", data["dpo"], model, max_steps=20, zero_stage=3, micro_batch_size=4
    )
    run = _train(procs, root, "dpo", cfg)
    loss, accuracy = _curve(run, "loss"), _curve(run, "reward_accuracy")
    print(
        f"\nDPO, 2 ranks, ZeRO-3, reference partitioned: loss {loss[0]:.4f} -> "
        f"{loss[-1]:.4f}, {len(loss)} steps\n  reward accuracy {accuracy[0]:.2f} -> "
        f"{_mean(accuracy[-5:]):.2f} (mean of the last 5 steps)"
    )
    # Step 1: the policy is the reference, so every implicit reward is 0 and the loss ln 2.
    assert abs(loss[0] - 0.693147) < 1e-3
    assert _mean(loss[-5:]) < 0.5 * loss[0]
    assert _mean(accuracy[-5:]) >= 0.9


def test_grpo_raises_the_reward(
    procs: list[subprocess.Popen[bytes]], root: Path, base: Path, data: dict[str, Path]
) -> None:
    # From the base, all weights: the SFT revision answers every prompt with digits and so
    # never samples a rewarded completion, and LoRA on a model this small learns too slowly
    # for a test. LoRA's reference (the adapters disabled) is test_objectives.py's.
    grpo = {"group_size": 8, "max_new_tokens": 8, "beta": 0.04, "reward": {"rule": "answer_match"}}
    cfg = _config(
        root,
        "grpo",
        "grpo",
        data["grpo"],
        {"pretrained": str(base)},
        grpo=grpo,
        max_steps=24,
        zero_stage=3,
        micro_batch_size=2,
        lr=1e-2,
    )
    run = _train(procs, root, "grpo", cfg)
    reward, kl = _curve(run, "reward"), _curve(run, "kl")
    before, after = _mean(reward[:6]), _mean(reward[-6:])
    print(
        f"\nGRPO, 2 ranks, ZeRO-3, answer_match: mean reward {before:.3f} (first 6 "
        f"steps)\n  -> {after:.3f} (last 6 steps); KL to the base at the end {kl[-1]:.4f}"
    )
    assert abs(kl[0]) < 1e-6  # step 1 samples from the reference itself
    assert after > before + 0.15


def test_lora_adapters_are_merged_for_serving_and_kept_for_peft(
    procs: list[subprocess.Popen[bytes]],
    root: Path,
    base: Path,
    data: dict[str, Path],
    endpoint: str,
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = {"pretrained": str(base), "lora": {"r": 8, "alpha": 16}}
    cfg = _config(root, "lora", "sft", data["sft"], model, max_steps=12, zero_stage=2, lr=1e-2)
    run = _train(procs, root, "lora", cfg)
    # The checkpoints hold the adapters, not the frozen base.
    chosen = ckpt.select_resume(run.workdir / "ckpt")
    assert chosen is not None and chosen.meta["bytes"] < 200_000
    out = root / "lora-export"
    result = _promote(run, "chat-lora", endpoint, out, "--dtype", "float32")
    assert {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"} <= set(
        result["files"]
    )
    merged = AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True).eval()
    adapted = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(str(base), local_files_only=True), str(out / "adapter")
    ).eval()
    tokens = torch.randint(
        0, merged.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(5)
    )
    with torch.no_grad():
        diff = (merged(input_ids=tokens).logits - adapted(input_ids=tokens).logits).abs().max()
    assert float(diff) < 1e-4
    base_model = AutoModelForCausalLM.from_pretrained(str(base), local_files_only=True).eval()
    with torch.no_grad():
        moved = (merged(input_ids=tokens).logits - base_model(input_ids=tokens).logits).abs().max()
    assert float(moved) > 1e-3  # the adapters trained


def test_lora_checkpoints_reshard_to_another_world_size(
    procs: list[subprocess.Popen[bytes]], root: Path, base: Path, data: dict[str, Path]
) -> None:
    """Adapters-only checkpoints (the frozen base excluded) of 2 ranks, ZeRO-3, resumed at 1
    rank through the universal format: the same adapters, the base read from `pretrained`."""
    import shutil

    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    from safetensors.torch import load_file

    model = {"pretrained": str(base), "lora": {"r": 4, "alpha": 8}}
    cfg = _config(root, "lora3", "sft", data["sft"], model, max_steps=10, zero_stage=3, lr=1e-2)
    two = _train(procs, root, "lora3", cfg)
    copy = root / "lora3-world1"
    shutil.copytree(two.workdir / "ckpt", copy / "ckpt")
    one_cfg = {**cfg, "checkpoint": {**cfg["checkpoint"], "dir": str(copy / "ckpt")}}
    exported = copy / "fp32.pt"
    one = Run(copy, one_cfg, 1, ["--export-fp32", str(exported)], procs.append)
    assert one.wait(300) == [0], one.stderr_tail()
    resume = one.of("resume")[0]
    assert resume == {**resume, "step": 10, "universal": True, "from_world_size": 2}

    adapters = get_fp32_state_dict_from_zero_checkpoint(
        str(two.workdir / "ckpt"), tag="step-10", exclude_frozen_parameters=True
    )
    after = torch.load(exported)
    assert adapters and all("lora_" in k for k in adapters)
    for name, tensor in adapters.items():
        assert torch.equal(tensor.float(), after[name]), name
    weights = load_file(str(base / "model.safetensors"))
    frozen = [k for k in after if "lora_" not in k]
    assert len(frozen) == len(weights)
    for name in frozen:  # base_model.model.<name>, with .base_layer. inside adapted layers
        key = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
        assert torch.equal(after[name], weights[key].float()), name


def test_llmp_promote_publishes_and_points_the_server_at_the_revision(
    sft: Run, endpoint: str, eval_config: Path
) -> None:
    """`llmp promote` from the SFT checkpoints into the inference stack's models bucket;
    the stack file's change is what vLLM then loads: /models/<revision> over the mount
    of the bucket's prefix."""
    import yaml
    from typer.testing import CliRunner

    from llmp.cli import app
    from llmp.stacks import REPO_ROOT
    from manifests.serving.vllm import WEIGHTS_PATH, vllm_args
    from manifests.volumes import mount_prefix
    from spec.serving import ServingModelConfig, engine_plan

    bucket = "acme-llm-inference-models"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    create_signing_key(endpoint, bucket)
    stack_file = REPO_ROOT / "stacks" / "Pulumi.inference.yaml"
    before = stack_file.read_text()
    args = [
        "promote",
        "inference",
        "llama-8b",
        "--checkpoints",
        str(sft.workdir / "ckpt"),
        "--job-config",
        str(sft.workdir / "job.json"),
        "--eval-config",
        str(eval_config),
        "--no-write",
        "--endpoint-url",
        endpoint,
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    print("\n$ llmp " + " ".join(args[:4]) + " ...\n" + result.stdout)
    assert stack_file.read_text() == before  # --no-write
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    new = next(line[4:] for line in result.stdout.splitlines() if line.startswith("  + "))
    assert new.startswith("llama-8b/") and new.endswith("-step-30")
    # What the promotion job in the cluster leaves for `llmp promote --revision`: the same.
    again = [*args[:3], "--revision", new, "--no-write", "--json", "--endpoint-url", endpoint]
    listed = CliRunner().invoke(app, again)
    assert listed.exit_code == 0, listed.output
    out = json.loads(listed.stdout)
    assert out["new_revision"] == new and out["diff"] and not out["written"]
    assert out["promoted"]["evaluation"]["tasks"]["llmp_arith"]["acc"] >= 0.0

    cfg = yaml.safe_load(before)["config"]
    weights = cfg["llm-platform:storage"]["model_weights"]
    served = ServingModelConfig.model_validate(
        {**cfg["llm-platform:serving"]["models"][0], "revision": new}
    )
    model_path = vllm_args(served, engine_plan(served, "g6e.12xlarge"))[0]  # positional
    assert model_path == f"{WEIGHTS_PATH}/{new}"
    key = mount_prefix(weights["prefix"]) + model_path.removeprefix(WEIGHTS_PATH + "/")
    head = boto3.client("s3", endpoint_url=endpoint).head_object(
        Bucket=bucket, Key=f"{key}/config.json"
    )
    assert head["ContentLength"] > 0
