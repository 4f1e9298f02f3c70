"""The trainer's learning rate: a default per task and method (a published recipe's), a value
the job sets kept as set, and a value outside any recipe's range refused in one line."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from contracts.parallel import ParallelJobConfig
from contracts.training import LR_DEFAULTS, LR_RANGE, TASKS, JobConfig
from spec.errors import validation_line

BASE: dict[str, Any] = {"data": {"path": "/fsx/d"}, "checkpoint": {"dir": "/fsx/c"}}


def _job(task: str, lora: bool, **over: Any) -> JobConfig:
    model: dict[str, Any] = {} if task == "pretrain" else {"pretrained": "/fsx/base"}
    if lora:
        model["lora"] = {}
    extra = {"grpo": {"reward": {"rule": "format"}}} if task == "grpo" else {}
    return JobConfig.model_validate({**BASE, **extra, "task": task, "model": model, **over})


@pytest.mark.parametrize("lora", [False, True], ids=["all-weights", "lora"])
@pytest.mark.parametrize("task", TASKS)
def test_a_job_without_lr_gets_its_tasks_and_methods_default(task: str, lora: bool) -> None:
    assert _job(task, lora).lr == LR_DEFAULTS[(task, lora)]


def test_the_defaults_are_the_published_recipes_and_lora_takes_more_than_all_weights() -> None:
    assert LR_DEFAULTS[("sft", False)] == 2e-5
    assert LR_DEFAULTS[("sft", True)] == 2e-4
    assert LR_DEFAULTS[("dpo", False)] == 5e-7
    assert LR_DEFAULTS[("grpo", False)] == 1e-6
    assert LR_DEFAULTS[("pretrain", False)] == 3e-4
    for task in TASKS:
        assert LR_DEFAULTS[(task, True)] > LR_DEFAULTS[(task, False)] or task == "pretrain"
        low, high = LR_RANGE
        assert low <= LR_DEFAULTS[(task, False)] <= high


def test_a_set_lr_is_kept_and_survives_the_config_maps_round_trip() -> None:
    job = _job("sft", False, lr=1e-5)
    assert job.lr == 1e-5
    again = JobConfig.model_validate(job.model_dump(mode="json"))
    assert again.lr == 1e-5


def test_the_3d_trainer_defaults_to_the_pretraining_rate() -> None:
    assert ParallelJobConfig.model_validate(BASE).lr == 3e-4


@pytest.mark.parametrize("lr", [5, 0.05, 1e-10])
def test_a_learning_rate_out_of_range_is_one_line(lr: float) -> None:
    with pytest.raises(ValidationError) as info:
        _job("sft", False, lr=lr)
    assert validation_line(info.value) == (
        f"lr: {lr:g} is not a learning rate of these tasks (1e-09..0.01); e.g. full SFT 2e-5, "
        "LoRA 2e-4, DPO 5e-7; unset: the task's"
    )
