"""Unit tests: DeepSpeed config validation, checkpoint selection/retention, the data stream."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from contracts.training import CheckpointConfig, DataConfig, JobConfig
from workloads.training import checkpointing as ckpt
from workloads.training.data import TokenShards, micro_batch_start, write_synthetic_shards
from workloads.training.ds_config import build_ds_config, validate_ds_config
from workloads.training.model import ModelConfig, hf_config, param_count


def job(**over: object) -> JobConfig:
    return JobConfig.model_validate(
        {"data": {"path": "/fsx/d"}, "checkpoint": {"dir": "/fsx/c"}, **over}
    )


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("offload", [False, True])
def test_every_stage_and_offload_validates_in_deepspeed(stage: int, offload: bool) -> None:
    cfg = build_ds_config(
        job(zero_stage=stage, offload_optimizer=offload, gradient_accumulation_steps=4)
    )
    ds = validate_ds_config(cfg)
    assert ds.zero_optimization_stage == stage
    assert ds.gradient_accumulation_steps == 4 and ds.bfloat16_config.enabled
    if offload:
        assert cfg["zero_optimization"]["offload_optimizer"] == {
            "device": "cpu",
            "pin_memory": True,
        }
        assert ds.zero_config.offload_optimizer.pin_memory


def test_typo_inside_a_section_fails_fast() -> None:
    with pytest.raises(ValueError, match="offload_optimiser"):
        validate_ds_config(
            build_ds_config(job(extra_ds={"zero_optimization": {"offload_optimiser": {}}}))
        )


def test_typo_at_top_level_fails_fast() -> None:
    with pytest.raises(ValueError, match="gradient_acumulation_steps"):
        validate_ds_config(build_ds_config(job(extra_ds={"gradient_acumulation_steps": 2})))


def test_bad_value_fails_fast() -> None:
    with pytest.raises(ValueError):
        validate_ds_config(
            build_ds_config(
                job(extra_ds={"zero_optimization": {"offload_optimizer": {"device": "gpu"}}})
            )
        )


def test_job_config_rejects_unknown_fields_and_bad_shapes() -> None:
    with pytest.raises(ValueError):
        job(zero_stagee=2)
    with pytest.raises(ValueError, match="not divisible by num_attention_heads"):
        ModelConfig(hidden_size=30, num_attention_heads=4)
    with pytest.raises(ValueError, match="kv heads"):
        ModelConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=3)
    with pytest.raises(ValueError, match=r"config\.json decides its shape"):
        ModelConfig(pretrained="/fsx/models/base", hidden_size=64)


def test_tasks_need_what_they_train_against() -> None:
    with pytest.raises(ValueError, match=r"needs model\.pretrained or model\.tokenizer"):
        job(task="sft")
    with pytest.raises(ValueError, match="frozen reference"):
        job(task="dpo", model={"tokenizer": "/fsx/tok"})
    with pytest.raises(ValueError, match="needs a grpo section"):
        job(task="grpo", model={"pretrained": "/fsx/base"})
    with pytest.raises(ValueError, match="exactly one of rule and model"):
        job(task="grpo", model={"pretrained": "/fsx/base"}, grpo={"reward": {}})
    assert job(task="sft", model={"tokenizer": "/fsx/tok"}).model.tokenizer_path == "/fsx/tok"


def test_peak_tflops_from_catalog() -> None:
    assert job(instance_type="p5.48xlarge").peak_tflops() == 989
    assert job(instance_type="p5.48xlarge", peak_tflops_per_device=100).peak_tflops() == 100


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("architecture", ["llama", "qwen2", "qwen3"])
def test_param_count_matches_the_built_module(architecture: str, tied: bool) -> None:
    from transformers import AutoModelForCausalLM

    cfg = ModelConfig(architecture=architecture, tie_word_embeddings=tied)  # type: ignore[arg-type]
    model = AutoModelForCausalLM.from_config(hf_config(cfg))
    embedding = model.get_input_embeddings().weight.numel()
    total = sum(p.numel() for p in model.parameters())  # a tied head is one parameter
    assert param_count(hf_config(cfg)) == total - embedding + (embedding if tied else 0)
    assert type(model).__name__ == hf_config(cfg).architectures[0]


def _fake(root: Path, step: int, world: int = 2) -> ckpt.Checkpoint:
    tmp = root / ckpt.tmp_tag(step)
    tmp.mkdir(parents=True)
    for r in range(world):
        (tmp / f"zero_pp_rank_{r}_optim_states.pt").write_bytes(os.urandom(100 + step))
    return ckpt.publish(root, step, {"world_size": world})


def test_select_newest_complete_and_skip_damaged(tmp_path: Path) -> None:
    for s in (10, 20, 30):
        _fake(tmp_path, s)
    assert (tmp_path / "latest").read_text() == "step-30"
    os.truncate(tmp_path / "step-30" / "zero_pp_rank_1_optim_states.pt", 5)
    (tmp_path / "step-20" / "zero_pp_rank_0_optim_states.pt").write_bytes(
        b"x" * 1000
    )  # grew: also damaged
    (tmp_path / "tmp-step-40").mkdir()
    (tmp_path / "step-50").mkdir()  # final name but no marker
    chosen = ckpt.select_resume(tmp_path)
    assert chosen is not None and chosen.step == 10 and chosen.world_size == 2


def test_missing_shard_and_corrupt_manifest_are_rejected(tmp_path: Path) -> None:
    a, b = _fake(tmp_path, 1), _fake(tmp_path, 2)
    (b.path / "zero_pp_rank_0_optim_states.pt").unlink()
    assert ckpt.select_resume(tmp_path) == ckpt.read_complete(a.path)
    (a.path / ckpt.MANIFEST).write_text("{not json")
    assert ckpt.select_resume(tmp_path) is None


def test_prune_keeps_last_k_and_removes_stale_partials(tmp_path: Path) -> None:
    for s in (1, 2, 3, 4):
        _fake(tmp_path, s)
    (tmp_path / "tmp-step-2").mkdir()
    (tmp_path / "universal-step-1").mkdir()
    ckpt.prune(tmp_path, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-3", "step-4"]


def test_snapshot_is_a_deep_copy_preserving_types() -> None:
    t = torch.ones(3)
    state = {"a": t, "shape": torch.Size([3]), "nested": [t, (t,)]}
    snap = ckpt.snapshot(state)
    t.add_(1)
    assert torch.equal(snap["a"], torch.ones(3)) and type(snap["shape"]) is torch.Size
    assert snap["nested"][0] is snap["a"]  # one copy per tensor


def test_stream_is_independent_of_world_size(tmp_path: Path) -> None:
    write_synthetic_shards(tmp_path, n_shards=3, tokens_per_shard=2000, vocab=100)
    data = TokenShards(tmp_path, seq_len=16)
    assert data.batch(0, 4).shape == (4, 17)
    # 2 ranks x micro 2 x accum 1 covers the same global samples as 1 rank x micro 2 x accum 2.
    two = [micro_batch_start(8, 0, r, 2, 2) for r in range(2)]
    one = [micro_batch_start(8, k, 0, 1, 2) for k in range(2)]
    assert two == one == [8, 10]
    # An epoch visits every window once (the affine order is a bijection).
    seen = {tuple(data.sample(g)) for g in range(data.n_windows)}
    assert len(seen) == len(
        {tuple(data.sample(g)) for g in range(data.n_windows, 2 * data.n_windows)}
    )
    assert torch.equal(
        data.batch(5, 3), TokenShards(tmp_path, seq_len=16).batch(5, 3)
    )  # deterministic


def test_unused_config_types_are_exported() -> None:
    assert DataConfig(path="p").bin_dtype == "uint16" and CheckpointConfig(dir="d").keep_last == 3


class _Killed(Exception):
    """Stands for SIGKILL at one instant of a re-save."""


def _resave(root: Path, step: int, world: int = 2) -> None:
    """Write a new `tmp-step-N` of a step already published (bytes unlike the old ones)."""
    tmp = root / ckpt.tmp_tag(step)
    tmp.mkdir(parents=True)
    for r in range(world):
        (tmp / f"zero_pp_rank_{r}_optim_states.pt").write_bytes(os.urandom(300 + step))


@pytest.mark.parametrize(
    "kill_at",
    [
        "set the old step-N aside",  # the first rename
        "rename the new one in",  # old aside, new not in yet: the gap that lost it
        "delete the old one",  # new in, old still aside
        "write latest",  # all renames done
    ],
)
def test_a_resave_killed_at_any_point_leaves_a_complete_newest_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill_at: str
) -> None:
    _fake(tmp_path, 10)
    old = _fake(tmp_path, 20)
    old_sizes = old.meta["files"]
    _resave(tmp_path, 20)
    renames = {"set the old step-N aside": 1, "rename the new one in": 2}
    calls = {"rename": 0}
    real_rename, real_rmtree, real_durable = os.rename, ckpt.shutil.rmtree, ckpt._write_durable

    def rename(src: Any, dst: Any) -> None:
        calls["rename"] += 1
        if renames.get(kill_at) == calls["rename"]:
            raise _Killed
        real_rename(src, dst)

    def rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        if kill_at == "delete the old one" and Path(path).name == ckpt.aside_tag(20):
            raise _Killed
        real_rmtree(path, *args, **kwargs)

    def durable(path: Path, data: bytes) -> None:
        if kill_at == "write latest" and path.name == ckpt.LATEST:
            raise _Killed
        real_durable(path, data)

    monkeypatch.setattr(ckpt.os, "rename", rename)
    monkeypatch.setattr(ckpt.shutil, "rmtree", rmtree)
    monkeypatch.setattr(ckpt, "_write_durable", durable)
    with pytest.raises(_Killed):
        ckpt.publish(tmp_path, 20, {"world_size": 2})
    monkeypatch.undo()

    # Before any restart, a reader (the promotion job) already finds a complete step 20.
    seen = ckpt.select_resume(tmp_path)
    assert seen is not None and seen.step == 20
    # The restart: rank 0 recovers, then picks the newest complete checkpoint.
    chosen = ckpt.select_resume(tmp_path, recover_aside=True)
    assert chosen is not None and chosen.step == 20 and chosen.path == tmp_path / "step-20"
    assert ckpt.read_complete(chosen.path) is not None
    new_in = kill_at in ("delete the old one", "write latest")
    assert (chosen.meta["files"] == old_sizes) is not new_in  # old copy, or the new one
    assert not (tmp_path / ckpt.aside_tag(20)).exists()
    # And the next save of the step goes through.
    if (tmp_path / ckpt.tmp_tag(20)).exists():
        real_rmtree(tmp_path / ckpt.tmp_tag(20))
    _resave(tmp_path, 20)
    assert ckpt.publish(tmp_path, 20, {"world_size": 2}).path == tmp_path / "step-20"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-10", "step-20"]


def test_an_aside_copy_is_deleted_once_its_step_is_whole_and_kept_otherwise(
    tmp_path: Path,
) -> None:
    whole, damaged = _fake(tmp_path, 5), _fake(tmp_path, 6)
    os.rename(whole.path, tmp_path / ckpt.aside_tag(5))  # killed between the renames
    os.rename(damaged.path, tmp_path / ckpt.aside_tag(6))
    (tmp_path / "step-6").mkdir()  # a step-6 without its marker: the aside copy wins
    assert [c.path.name for c in ckpt.complete_checkpoints(tmp_path)] == [
        ckpt.aside_tag(5),
        ckpt.aside_tag(6),
    ]  # reading changes nothing on disk
    assert ckpt.recover(tmp_path) == [tmp_path / "step-5", tmp_path / "step-6"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-5", "step-6"]
    _fake(tmp_path, 7)
    ckpt.shutil.copytree(tmp_path / "step-7", tmp_path / ckpt.aside_tag(7))  # left by a kill
    ckpt.prune(tmp_path, keep_last=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-5", "step-6", "step-7"]
