"""workloads.evaluation on a tiny Llama (char-level tokenizer, random weights), offline.

The numbers of a random model mean nothing; what is pinned is that every shipped task
loads from the repository and yields every metric, that nothing can reach the Hub
during the call, that the gate, the table and the CLI say what they should, and that
held-out perplexity matches a computation by hand. The harness test prints its table.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.workloads.hf import CHARS, tiny_base_model, tiny_config
from workloads.evaluation import (
    TASKS_DIR,
    HarnessInputError,
    Thresholds,
    ThresholdsError,
    expand_tasks,
    gate,
    heldout_perplexity,
    load_thresholds,
    results_table,
    run_harness,
    shipped_tasks,
    taskdata,
)
from workloads.evaluation.cli import main
from workloads.training.data import TokenShards, write_synthetic_shards

REPO = Path(__file__).resolve().parents[3]
EXPECTED = {
    "llmp_arith": {"acc", "acc_norm"},
    "llmp_copy": {"exact_match"},
    "llmp_heldout_text": {"bits_per_byte", "byte_perplexity", "word_perplexity"},
}
OFFLINE_VARS = (
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_DATASETS_CACHE",
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_base_model(tmp_path_factory.mktemp("tiny") / "llama", "llama")


@pytest.fixture(scope="module")
def vocab() -> int:
    return int(tiny_config("llama").vocab_size)


@pytest.fixture(scope="module")
def heldout(tmp_path_factory: pytest.TempPathFactory, vocab: int) -> Path:
    path = tmp_path_factory.mktemp("heldout")
    write_synthetic_shards(path, n_shards=1, tokens_per_shard=41, vocab=vocab)
    return path


# ---------------------------------------------------------------------------
# The harness
# ---------------------------------------------------------------------------


def _spy_on_hub_lookup(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Wrap HFLM.get_model_info, lm-eval's Hub lookup on this path, to record what a
    network attempt made during the call meets; it also writes to stdout both ways."""
    import datasets.config
    import huggingface_hub
    import huggingface_hub.constants
    from lm_eval.models.huggingface import HFLM

    seen: list[dict[str, Any]] = []
    original = HFLM.get_model_info

    def spy(self: Any) -> dict[str, Any]:
        try:
            huggingface_hub.HfApi().model_info("gpt2")
            hub = "reached"
        except Exception as e:
            hub = type(e).__name__
        info = original(self)
        print("chatter on sys.stdout")
        os.write(1, b"chatter on fd 1\n")
        seen.append(
            {
                "env": {k: os.environ.get(k) for k in OFFLINE_VARS},
                "hub_constant": huggingface_hub.constants.HF_HUB_OFFLINE,
                "datasets_constant": datasets.config.HF_HUB_OFFLINE,
                "hub": hub,
                "model_sha": info.get("model_sha"),
            }
        )
        return info

    monkeypatch.setattr(HFLM, "get_model_info", spy)
    return seen


def test_every_shipped_task_runs_offline_and_yields_its_metrics(
    model_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    import huggingface_hub.constants

    seen = _spy_on_hub_lookup(monkeypatch)
    monkeypatch.chdir(tmp_path)  # the tasks' data files must not resolve against the cwd
    env_before = {k: os.environ.get(k) for k in OFFLINE_VARS}
    hub_before = huggingface_hub.constants.HF_HUB_OFFLINE

    results = run_harness(model_dir, ["llmp"], limit=6, batch_size=4)

    out, err = capfd.readouterr()
    assert out == ""  # stdout stays the caller's
    assert "chatter on sys.stdout" in err and "chatter on fd 1" in err
    with capfd.disabled():
        print("\n" + results_table(results))

    assert {t: set(m) for t, m in results.items()} == EXPECTED
    assert all(math.isfinite(v) for m in results.values() for v in m.values()), results
    for task, metric in [
        ("llmp_arith", "acc"),
        ("llmp_arith", "acc_norm"),
        ("llmp_copy", "exact_match"),
    ]:
        assert 0.0 <= results[task][metric] <= 1.0
    text = results["llmp_heldout_text"]
    assert text["word_perplexity"] > 1 and text["byte_perplexity"] > 1 and text["bits_per_byte"] > 0
    # bits_per_byte is log2 of byte_perplexity: both from the same rolling log-likelihoods
    assert text["bits_per_byte"] == pytest.approx(math.log2(text["byte_perplexity"]), rel=1e-9)

    (during,) = seen
    assert during["hub"] == "OfflineModeIsEnabled"  # refused before any socket is opened
    assert during["model_sha"] == ""  # lm-eval's own lookup found nothing
    assert during["hub_constant"] is True and during["datasets_constant"] is True
    assert {k: during["env"][k] for k in OFFLINE_VARS[:3]} == dict.fromkeys(OFFLINE_VARS[:3], "1")
    cache = Path(during["env"]["HF_DATASETS_CACHE"])
    assert cache.name == "datasets" and cache.parent.name.startswith("llmp-eval-")
    assert not cache.parent.exists()  # the throwaway cache is gone

    assert {k: os.environ.get(k) for k in OFFLINE_VARS} == env_before  # restored
    assert hub_before == huggingface_hub.constants.HF_HUB_OFFLINE


def test_the_tag_names_every_shipped_task_and_only_those_exist() -> None:
    assert shipped_tasks() == sorted(EXPECTED)
    assert expand_tasks(["llmp", "llmp_arith"]) == sorted(EXPECTED)
    assert all(p.stem in EXPECTED for p in TASKS_DIR.glob("*.yaml"))


def test_bad_inputs_are_refused_before_anything_loads(model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(HarnessInputError, match=r"unknown task 'hellaswag'.*llmp_arith"):
        run_harness(model_dir, ["hellaswag"])  # lm-eval's own tasks are not visible
    with pytest.raises(HarnessInputError, match="no tasks given"):
        run_harness(model_dir, [])
    with pytest.raises(HarnessInputError, match=r"no config\.json"):
        run_harness(tmp_path, ["llmp_arith"])
    with pytest.raises(HarnessInputError, match="limit 0"):
        run_harness(model_dir, ["llmp_arith"], limit=0)


# ---------------------------------------------------------------------------
# The shipped data
# ---------------------------------------------------------------------------


def test_shipped_data_is_what_the_generator_makes() -> None:
    assert taskdata.stale_files() == []
    assert taskdata.main(["--check"]) == 0


def test_arithmetic_items_are_right_and_fair() -> None:
    items = taskdata.arithmetic_items()
    assert 40 <= len(items) <= 100
    for item in items:
        a, op, b = item["question"].split()
        want = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
        assert item["choices"][item["answer"]] == str(want)
        assert len(set(item["choices"])) == 4
    positions = {i["answer"] for i in items}
    assert positions == {0, 1, 2, 3}  # the answer is not always in one place


def test_shipped_text_is_inside_the_tiny_tokenizer_alphabet() -> None:
    rows = [row for make in taskdata.GENERATORS.values() for row in make()]
    text = "".join(str(v) for row in rows for v in row.values() if isinstance(v, str))
    assert set(text) <= set(CHARS)


# ---------------------------------------------------------------------------
# Held-out perplexity
# ---------------------------------------------------------------------------


def _by_hand(model: Any, windows: torch.Tensor) -> float:
    with torch.no_grad():
        logits = model(input_ids=windows).logits[:, :-1]
    logp = torch.log_softmax(logits.double(), dim=-1)
    nll = -logp.gather(-1, windows[:, 1:, None]).squeeze(-1)
    return math.exp(float(nll.mean()))


@pytest.mark.parametrize(("max_windows", "batch_size"), [(5, 2), (3, 2), (100, 16)])
def test_heldout_perplexity_matches_a_hand_computation(
    heldout: Path, max_windows: int, batch_size: int
) -> None:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config("llama")).eval()
    shards = TokenShards(heldout, seq_len=8)
    assert shards.n_windows == 5  # (41 - 1) // 8; batches of 2, 2, 1 when all are read

    want = _by_hand(model, shards.batch(0, min(max_windows, shards.n_windows)))
    got = heldout_perplexity(model, shards, max_windows, batch_size=batch_size)
    assert got == pytest.approx(want, rel=1e-5)
    assert got > 1


class _Broken(torch.nn.Module):
    """A model whose loss is NaN: what a diverged checkpoint looks like."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, 2)

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.embed

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> SimpleNamespace:
        return SimpleNamespace(loss=torch.tensor(float("nan")))


def test_heldout_perplexity_is_nan_for_a_nan_loss_and_refuses_foreign_tokens(
    heldout: Path, vocab: int
) -> None:
    shards = TokenShards(heldout, seq_len=8)
    model = _Broken(vocab).train()
    assert math.isnan(heldout_perplexity(model, shards, 4, batch_size=3))
    assert model.training  # the caller's mode is given back
    with pytest.raises(ValueError, match="outside the model's vocabulary of 4"):
        heldout_perplexity(_Broken(4), shards, 4)
    with pytest.raises(ValueError, match="max_windows 0"):
        heldout_perplexity(model, shards, 0)


# ---------------------------------------------------------------------------
# Thresholds and the gate
# ---------------------------------------------------------------------------

GOOD = {
    "llmp_arith": {"acc": 0.75, "acc_norm": 0.5},
    "llmp_heldout_text": {"word_perplexity": 120.0, "bits_per_byte": 1.1},
}


def _thresholds(**kw: Any) -> Thresholds:
    return Thresholds.model_validate(kw)


def test_results_that_meet_every_limit_pass_and_limits_are_inclusive() -> None:
    t = _thresholds(
        max_perplexity=30,
        tasks={"llmp_arith": {"acc": 0.75}},
        tasks_max={"llmp_heldout_text": {"word_perplexity": 120}},
    )
    assert gate(GOOD, 29.5, t) == []
    assert gate(GOOD, 30.0, t) == []
    assert gate(GOOD, None, Thresholds()) == []


def test_each_way_of_failing_is_a_reason() -> None:
    t = _thresholds(
        max_perplexity=20,
        tasks={"llmp_arith": {"acc": 0.8, "f1": 0.1}, "llmp_copy": {"exact_match": 0.1}},
        tasks_max={"llmp_heldout_text": {"bits_per_byte": 1.0}},
    )
    assert gate(GOOD, 25.0, t) == [
        "held-out perplexity 25 exceeds the maximum 20",
        "llmp_arith acc 0.75 is below the minimum 0.8",
        "llmp_arith f1: metric is missing",
        "llmp_copy exact_match: task was not evaluated",
        "llmp_heldout_text bits_per_byte 1.1 exceeds the maximum 1",
    ]


def test_nan_never_passes() -> None:
    nan = float("nan")
    broken = {"llmp_arith": {"acc": nan, "acc_norm": 0.5}}
    t = _thresholds(tasks={"llmp_arith": {"acc": 0.1}})
    assert gate(broken, None, t) == ["llmp_arith acc is nan"]
    assert gate(broken, None, Thresholds()) == ["llmp_arith acc is nan"]  # unlimited too
    assert gate({}, nan, Thresholds()) == ["held-out perplexity is nan"]
    assert gate({}, None, _thresholds(max_perplexity=10)) == [
        "held-out perplexity was not measured; max_perplexity 10 needs it"
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_perplexity: 40\nmin_acc: 0.5\n", "min_acc: Extra inputs are not permitted"),
        ("tasks:\n  llmp_arith: {acc: .nan}\n", "llmp_arith.acc is nan"),
        (
            "tasks:\n  llmp_arith: {acc: '0.5'}\n",
            "tasks.llmp_arith.acc: Input should be a valid number",
        ),
        ("tasks:\n  llmp_arith: {}\n", "task 'llmp_arith' names no metric"),
        ("max_perplexity: 0.5\n", "a perplexity is a finite number >= 1"),
        ("- 1\n- 2\n", "expected a mapping"),
        ("tasks: [\n", "not valid YAML (line 2"),
    ],
)
def test_thresholds_files_fail_in_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "thresholds.yaml"
    path.write_text(text)
    with pytest.raises(ThresholdsError) as e:
        load_thresholds(path)
    assert message in str(e.value) and str(path) in str(e.value)
    assert "\n" not in str(e.value)


def test_the_example_thresholds_name_only_shipped_tasks_and_metrics() -> None:
    t = load_thresholds(REPO / "workloads" / "evaluation" / "thresholds.example.yaml")
    assert t.max_perplexity is not None
    for limits in (t.tasks, t.tasks_max):
        for task, metrics in limits.items():
            assert set(metrics) <= EXPECTED[task], (task, metrics)
    assert gate({}, None, t)  # and it is not vacuous


# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------


def test_table_fits_80_columns_in_a_stable_order() -> None:
    results = {
        "zz_" + "x" * 60: {"m" * 40: 1e12, "acc": float("nan")},
        "llmp_arith": {"acc_norm": 0.5, "acc": 0.25},
    }
    table = results_table(results)
    lines = table.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0].split() == ["task", "metric", "value"]
    rows = [line.split()[:2] for line in lines[2:]]
    assert rows == [["llmp_arith", "acc"], ["llmp_arith", "acc_norm"], [rows[2][0], "acc"], rows[3]]
    assert rows[2][0].endswith("...") and rows[3][1].endswith("...")
    assert (
        lines[2].endswith("0.2500") and lines[4].endswith("nan") and lines[5].endswith("1.0000e+12")
    )
    assert results_table(dict(reversed(results.items()))) == table
    assert results_table({}).splitlines()[-1] == "(no results)"


# ---------------------------------------------------------------------------
# The CLI
# ---------------------------------------------------------------------------


def _cli(capfd: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capfd.readouterr()
    return rc, out, err


def test_cli_passes_with_met_thresholds(
    model_dir: Path, heldout: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    thresholds = tmp_path / "t.yaml"
    thresholds.write_text("max_perplexity: 1.0e+6\ntasks:\n  llmp_arith: {acc: 0.0}\n")
    rc, out, err = _cli(
        capfd, "--model", str(model_dir), "--tasks", "llmp_arith", "--limit", "4",
        "--heldout", str(heldout), "--seq-len", "8", "--thresholds", str(thresholds),
    )  # fmt: skip
    assert rc == 0, err
    (line,) = out.splitlines()
    report = json.loads(line)
    assert report["passed"] is True and report["failures"] == []
    assert set(report["results"]) == {"llmp_arith"} and report["limit"] == 4
    assert report["perplexity"] > 1
    assert "llmp_arith" in err and "held-out perplexity" in err  # the table, on stderr


def test_cli_fails_the_gate_with_reasons(
    model_dir: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    thresholds = tmp_path / "t.yaml"
    thresholds.write_text("tasks:\n  llmp_arith: {acc: 1.01}\n")  # acc is at most 1
    rc, out, err = _cli(
        capfd, "--model", str(model_dir), "--tasks", "llmp_arith", "--limit", "2",
        "--thresholds", str(thresholds),
    )  # fmt: skip
    assert rc == 1
    report = json.loads(out)
    assert report["passed"] is False
    assert report["failures"] == [f"llmp_arith acc {report['results']['llmp_arith']['acc']:.4g} "
                                  "is below the minimum 1.01"]  # fmt: skip
    assert "evaluation: FAIL llmp_arith acc" in err


def _bad_inputs(model_dir: Path, tmp_path: Path) -> list[tuple[list[str], str]]:
    bare = tmp_path / "bare"
    bare.mkdir()
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("tasks:\n  llmp_copy: {exact_match: 0.5}\n")
    ppl = tmp_path / "ppl.yaml"
    ppl.write_text("max_perplexity: 10\n")
    m = ["--model", str(model_dir)]
    return [
        (["--model", str(tmp_path / "nowhere")], "no such directory"),
        (["--model", str(bare)], "no config.json"),
        ([*m, "--tasks", "llmp_arith,hellaswag"], "unknown task 'hellaswag'"),
        ([*m, "--tasks", "llmp_arith,"], "an empty name"),
        ([*m, "--heldout", str(tmp_path)], "--heldout and --seq-len go together"),
        ([*m, "--heldout", str(bare), "--seq-len", "8"], "no ('.npy', '.bin') token shards"),
        ([*m, "--limit", "0"], "--limit 0: expected a positive integer"),
        ([*m, "--thresholds", str(tmp_path / "none.yaml")], "none.yaml: no such file"),
        ([*m, "--tasks", "llmp_arith", "--thresholds", str(unknown)], "limits llmp_copy"),
        ([*m, "--thresholds", str(ppl)], "max_perplexity needs --heldout"),
        ([*m, "--dtype", "int3"], "invalid choice: 'int3'"),
        ([], "the following arguments are required: --model"),
    ]


def test_cli_bad_input_is_exit_2_and_one_line(
    model_dir: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    for argv, message in _bad_inputs(model_dir, tmp_path):
        rc, out, err = _cli(capfd, *argv)
        assert (rc, out) == (2, ""), (argv, err)
        assert err.count("\n") == 1 and err.startswith("evaluation: "), (argv, err)
        assert message in err, (argv, err)


def test_cli_module_entry_point_exits_2_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "workloads.evaluation", "--model", str(tmp_path / "model")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"evaluation: --model {tmp_path / 'model'}: no config.json; expected a Hugging Face "
        "model directory (config.json, weights, tokenizer files)"
    ]
