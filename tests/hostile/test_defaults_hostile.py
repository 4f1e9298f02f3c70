"""Defaults that are safe and values that cannot mean what they say, from the CLI: a job
without `lr` gets its task's published rate (not one rate for every task), an absurd `lr` is
refused, a straggler threshold given as a percent is refused, and a pool its zone does not
offer is refused by `llmp synth`. Each refusal: exit 2, one line on stderr, no traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from llmp.cli import app
from llmp.stacks import REPO_ROOT
from tests.llmp.job_files import job_file

SFT = REPO_ROOT / "examples" / "finetune-sft.yaml"
runner = CliRunner()


def _refused(result: Any) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def _trainer_config(result: Any) -> dict[str, Any]:
    assert result.exit_code == 0, result.output
    for doc in yaml.safe_load_all(result.stdout):
        if doc and doc.get("kind") == "ConfigMap" and doc["metadata"]["name"].endswith("-config"):
            return dict(json.loads(next(iter(doc["data"].values()))))
    raise AssertionError("no trainer ConfigMap in the dry run")


@pytest.mark.parametrize(
    ("lora", "expected"),
    [(None, 2e-5), ({"r": 16, "alpha": 32}, 2e-4)],
    ids=["full-sft", "lora-sft"],
)
def test_an_sft_job_without_lr_gets_its_methods_published_rate(
    tmp_path: Path, lora: Any, expected: float
) -> None:
    """A full 8B SFT without `lr` used to get 3e-3, 150x Llama 2-Chat's 2e-5."""
    path = job_file(tmp_path, SFT, trainer__lr=None, trainer__model__lora=lora)
    result = runner.invoke(app, ["job", "submit", path, "--dry-run"])
    assert _trainer_config(result)["lr"] == expected


@pytest.mark.parametrize("lr", [5, 0.5, 1e-12])
def test_an_absurd_learning_rate_is_refused_in_one_line(tmp_path: Path, lr: float) -> None:
    path = job_file(tmp_path, SFT, trainer__lr=lr)
    line = _refused(runner.invoke(app, ["job", "submit", path, "--dry-run"]))
    where, _, what = line.partition(": trainer.lr = ")
    assert where == f"job file {path}", line
    assert what == (
        f"{lr:g}: {lr:g} is not a learning rate of these tasks (1e-09..0.01); e.g. full SFT "
        "2e-5, LoRA 2e-4, DPO 5e-7; unset: the task's"
    )


def test_a_straggler_threshold_given_as_a_percent_is_refused() -> None:
    trace = str(REPO_ROOT / "examples" / "stragglers" / "step-times.jsonl")
    line = _refused(runner.invoke(app, ["stragglers", trace, "--threshold", "5"]))
    assert line == (
        "stragglers: --threshold 5 is a fraction of the median, not a percent: 5% is 0.05; "
        "use 0 to 1"
    )


def test_a_straggler_threshold_of_a_fraction_is_accepted() -> None:
    trace = str(REPO_ROOT / "examples" / "stragglers" / "step-times.jsonl")
    result = runner.invoke(app, ["stragglers", trace, "--threshold", "0.05", "--json"])
    assert result.exit_code == 0, result.output


def test_synth_refuses_a_pool_in_a_zone_that_does_not_offer_its_type(tmp_path: Path) -> None:
    doc = yaml.safe_load((REPO_ROOT / "stacks" / "Pulumi.pretrain.yaml").read_text())
    config = doc["config"]
    config["aws:region"] = "ap-northeast-1"
    config["llm-platform:network"]["availability_zones"] = ["ap-northeast-1a", "ap-northeast-1d"]
    config["llm-platform:network"]["zone_ids"] = {
        "ap-northeast-1a": "apne1-az4",
        "ap-northeast-1d": "apne1-az2",
    }
    for pool in config["llm-platform:node_pools"].values():
        if "availability_zones" in pool:
            pool["availability_zones"] = ["ap-northeast-1d"]
    path = tmp_path / "Pulumi.pretrain.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    result = runner.invoke(app, ["synth", "pretrain", "--config", str(path), "--out", str(out)])
    line = _refused(result)
    assert line.startswith(
        "config error: llm-platform:node_pools.h100.availability_zones.0 = 'ap-northeast-1d': "
        "p5.48xlarge is not offered in ap-northeast-1d (apne1-az2); offered in apne1-az1, "
        "apne1-az4"
    ), line
    assert not out.exists() or not any(out.rglob("*"))
