"""`llmp plan train`: the planner's lines for the seeds' 175B in 72 hours and a stack's pool,
one-line errors, JSON, and a command that stays lean (no Pulumi, no components)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from llmp.cli import app

runner = CliRunner()
REPO = Path(__file__).parents[2]
GPT3 = ["--params", "175e9", "--layers", "96", "--hidden", "12288", "--tokens", "300e9"]
LLAMA3_8B = [
    *("--layers", "32", "--hidden", "4096", "--heads", "32", "--kv-heads", "8"),
    *("--ffn", "14336", "--vocab", "128256", "--seq-len", "8192"),
]


def plan(*args: str) -> list[str]:
    result = runner.invoke(app, ["plan", "train", *args])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_175b_in_72_hours_at_120_tflops_names_the_cluster() -> None:
    out = plan(*GPT3, "--gpu-type", "p5.48xlarge", "--hours", "72", "--tflops", "120")
    assert out[0] == "model: 175.0B parameters, 300B tokens: 6 x N x D = 3.15e23 FLOPs"
    assert "729,167 GPU-hours" in " ".join(out)
    assert "cluster: 10,128 GPUs = 1,266 x p5.48xlarge: 72.0 h (3.0 days)" in out
    assert all(len(line) <= 80 for line in out)


def test_llama_3_8b_sft_on_the_finetune_stack_takes_its_pool_and_file_system() -> None:
    out = plan(*LLAMA3_8B, "--tokens", "1e9", "--stack", "finetune", "--gpus", "16")
    text = "\n".join(out)
    assert "model: 8.0B parameters" in text
    assert "cluster: 16 GPUs = 2 x p5.48xlarge" in text
    assert "  ZeRO 0: " in text and text.count("does not fit") == 1  # ZeRO 0 only
    joined = " ".join(line.strip() for line in out)
    assert (
        "checkpoint: 112 GB (14 bytes per parameter); 96 s to write at 1.2 GB/s (FSx 4,800 GiB "
        "at 250 MB/s/TiB)"
    ) in joined


def test_a_plan_bigger_than_the_stacks_pool_says_so() -> None:
    out = " ".join(plan(*GPT3, "--stack", "pretrain", "--hours", "72", "--tflops", "120"))
    assert "pool h100 of stack pretrain has at most 16 nodes; this plan needs 1,266" in out


def test_json_carries_the_memory_by_zero_stage() -> None:
    result = runner.invoke(
        app,
        [
            "plan",
            "train",
            *GPT3,
            "--gpu-type",
            "p5.48xlarge",
            "--gpus",
            "1024",
            "--tp",
            "8",
            "--pp",
            "8",
            "--json",
        ],
    )
    assert result.exit_code == 0
    report = json.loads(result.output)
    assert report["layout"]["data_parallel"] == 16
    assert set(report["memory_per_gpu"]) == {"0", "1", "2", "3"}
    assert report["checkpoint"] == {"gb": 2450.0}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([*GPT3, "--gpu-type", "p5.48xlarge"], "give --gpus (the run's GPUs) or --hours"),
        ([*GPT3, "--gpus", "8"], "give --gpu-type (an instance type of the catalog) or --stack"),
        ([*GPT3, "--gpu-type", "m7i.4xlarge", "--gpus", "8"], "--gpu-type m7i.4xlarge: not an"),
        ([*GPT3, "--gpu-type", "p9.huge", "--gpus", "8"], "--gpu-type: p9.huge is not an"),
        ([*GPT3, "--gpu-type", "p5.48xlarge", "--gpus", "12", "--tp", "8"], "--gpus 12 is not"),
        ([*GPT3, "--gpu-type", "p5.48xlarge", "--gpus", "8", "--mfu", "1.5"], "--mfu 1.5: a"),
        ([*GPT3, "--stack", "pretrain", "--pool", "a100", "--gpus", "8"], "--pool a100: not a"),
        (
            [
                "--layers",
                "32",
                "--hidden",
                "4096",
                "--heads",
                "32",
                "--tokens",
                "1e9",
                "--gpus",
                "8",
            ],
            "a full",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["plan", "train", *args])
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_plan_train_imports_neither_pulumi_nor_the_components() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from llmp.cli import app\n"
        f"r = CliRunner().invoke(app, ['plan', 'train', *{GPT3!r}, '--stack', 'pretrain', "
        "'--gpus', '128'])\n"
        "assert r.exit_code == 0, r.output\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pulumi', 'pulumi_aws', 'components', 'program', 'boto3'))\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=300)


def test_the_default_mfu_is_the_planners_constant() -> None:
    # The command's default is a literal (its module imports no planner until it runs);
    # the GPU check (bench/gpu_mfu.py) prints its prediction at the constant.
    import inspect

    from llmp.commands import plan as command
    from spec.training_plan import DEFAULT_MFU

    defaults = [
        p.default
        for f in vars(command).values()
        if inspect.isfunction(f)
        for name, p in inspect.signature(f).parameters.items()
        if name == "mfu"
    ]
    assert defaults == [DEFAULT_MFU]
