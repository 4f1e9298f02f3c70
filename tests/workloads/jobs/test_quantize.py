"""The quantization job on a tiny Llama, on the CPU: fp8-dynamic end to end, GPTQ's
calibration path, and the one-line refusals of bad input.

fp8-dynamic and w4a16-gptq (and w8a8-fp8) run on the CPU; w4a16-awq does not
(llm-compressor 0.14.0.1's AWQ pins host memory, which a CPU-only torch cannot), so
it is checked here only as far as its recipe.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llmcompressor")

from tests.workloads.hf import tiny_base_model
from workloads.jobs import quantize as q

pytestmark = pytest.mark.filterwarnings(
    # llm-compressor onloads through compressed-tensors' offloading wrappers; harmless here.
    "ignore:Attempting to save a model with offloaded modules:UserWarning"
)

# FP8 per-channel needs no particular width; the W4A16 schemes group input columns by
# 128, so every Linear's input (hidden 128, intermediate 256) must divide by it.
DIMS = {"hidden_size": 128, "intermediate_size": 256}
TEXT = "The quick brown fox jumps over the lazy dog; 0123456789. "


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = q.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_base_model(tmp_path_factory.mktemp("src") / "model", "llama", **DIMS)


@pytest.fixture(scope="module")
def fp8(source: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("fp8") / "out"
    code = q.main(["--model", str(source), "--out", str(out), "--scheme", "fp8-dynamic"])
    assert code == 0
    return out, json.loads((out / q.SUMMARY).read_text())


def _dtypes(path: Path) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), "pt") as f:
        return {k: f.get_slice(k).get_dtype() for k in f.keys()}  # noqa: SIM118


def test_fp8_config_declares_compressed_tensors(fp8: tuple[Path, dict[str, Any]], source: Path):
    out, _ = fp8
    config = json.loads((out / "config.json").read_text())
    qc = config["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors"
    assert qc["format"] == "float-quantized" and qc["quantization_status"] == "compressed"
    assert "lm_head" in qc["ignore"]
    (group,) = qc["config_groups"].values()
    assert group["targets"] == ["Linear"]
    w, a = group["weights"], group["input_activations"]
    assert (w["type"], w["num_bits"], w["strategy"], w["dynamic"]) == ("float", 8, "channel", False)
    assert (a["type"], a["num_bits"], a["strategy"], a["dynamic"]) == ("float", 8, "token", True)
    # vLLM v0.11.0's compressed-tensors (0.11.0) forbids fields it does not know.
    assert set(w) <= q.VLLM_CT_ARGS_FIELDS and set(a) <= q.VLLM_CT_ARGS_FIELDS
    # Everything else is the source's config.json, untouched.
    src_config = json.loads((source / "config.json").read_text())
    assert {k: v for k, v in config.items() if k != "quantization_config"} == src_config
    assert config["architectures"] == ["LlamaForCausalLM"]


def test_fp8_linear_weights_are_float8_and_lm_head_is_not(fp8: tuple[Path, dict[str, Any]]):
    out, _ = fp8
    dtypes = _dtypes(out)
    linears = [k for k in dtypes if k.endswith("_proj.weight")]
    assert len(linears) == 2 * 7  # q k v o gate up down, two layers
    for name in linears:
        assert dtypes[name] == "F8_E4M3", name
        assert dtypes[name.replace(".weight", ".weight_scale")] == "F32", name
    assert dtypes["lm_head.weight"] == "F32" and "lm_head.weight_scale" not in dtypes
    assert dtypes["model.embed_tokens.weight"] == "F32"
    assert not any(k.endswith("input_scale") for k in dtypes)  # dynamic: no static scales


def test_fp8_summary_sizes_and_serving_hint(fp8: tuple[Path, dict[str, Any]], source: Path):
    out, summary = fp8
    assert summary["scheme"] == "fp8-dynamic" and summary["calibration"] is None
    before = (source / "model.safetensors").stat().st_size
    after = (out / "model.safetensors").stat().st_size
    assert summary["weights_bytes_before"] == before
    assert summary["weights_bytes_after"] == after
    # fp32 source: the 14 Linear weights go from 4 bytes to 1; embeddings and lm_head stay.
    assert 0.25 < after / before < 0.4, (before, after)
    assert summary["vllm"]["serving_quantization"] == "none"
    assert summary["vllm"]["min_compute_capability"] == 8.9
    # Tokenizer and generation config: the source's files, not transformers 5's re-save.
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (out / name).read_bytes() == (source / name).read_bytes(), name
        assert name in summary["copied_from_source"]
    assert not list(out.parent.glob(".out.tmp-*"))  # the staging directory is gone


def test_fp8_loads_back_and_logits_stay_close(fp8: tuple[Path, dict[str, Any]], source: Path):
    import torch
    from transformers import AutoModelForCausalLM

    out, _ = fp8
    ref_model = AutoModelForCausalLM.from_pretrained(str(source), local_files_only=True)
    quant = AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True)
    assert quant.model.layers[0].self_attn.q_proj.weight.dtype == torch.float8_e4m3fn
    ids = torch.randint(4, 85, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = ref_model(input_ids=ids).logits
        got = quant(input_ids=ids).logits
    diff = (got - ref).abs().max().item()
    rel = ((got - ref).norm() / ref.norm()).item()
    # Measured: max |diff| 0.045 on logits of max |ref| 0.75 (relative L2 0.058); FP8
    # E4M3 keeps 3 mantissa bits, so a few percent is the expected error.
    assert 0 < diff < 0.15, diff
    assert rel < 0.15, rel


def test_gptq_uses_the_calibration_file(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calib = tmp_path / "calib.jsonl"
    lines: list[dict[str, Any]] = [{"messages": [{"role": "user", "content": TEXT}]}]
    lines += [{"text": f"{TEXT}{i} " * 3} for i in range(3)]
    calib.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "gptq"
    code, stdout, err = run(
        capsys, "--model", str(source), "--out", str(out), "--scheme", "w4a16-gptq",
        "--calibration", str(calib), "--samples", "2", "--max-seq-len", "32",
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["calibration"]["samples"] == 2 and summary["calibration"]["max_seq_len"] == 32
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    (group,) = qc["config_groups"].values()
    w = group["weights"]
    assert qc["format"] == "pack-quantized" and group["input_activations"] is None
    assert (w["type"], w["num_bits"], w["strategy"], w["group_size"]) == ("int", 4, "group", 128)
    assert w["symmetric"] and set(w) <= q.VLLM_CT_ARGS_FIELDS
    dtypes = _dtypes(out)
    assert dtypes["model.layers.0.mlp.down_proj.weight_packed"] == "I32"
    assert dtypes["lm_head.weight"] == "F32"
    assert summary["weights_bytes_after"] < summary["weights_bytes_before"] / 2


def test_awq_recipe_smooths_then_quantizes_asymmetric() -> None:
    mods = q.recipe(q.SCHEMES["w4a16-awq"])
    assert [type(m).__name__ for m in mods] == ["AWQModifier", "QuantizationModifier"]
    assert mods[1].scheme == "W4A16_ASYM" and "lm_head" in mods[1].ignore


def test_vllm_0_11_compat_drops_only_default_fields() -> None:
    qc = {
        "config_groups": {
            "g": {
                "weights": {"num_bits": 4, "type": "int", "scale_dtype": None,
                            "zp_dtype": "torch.int8"},
                "input_activations": None,
            }
        }
    }  # fmt: skip
    assert q.for_vllm_0_11(qc) == ["g.weights.scale_dtype", "g.weights.zp_dtype"]
    assert qc["config_groups"]["g"]["weights"] == {"num_bits": 4, "type": "int"}
    qc["config_groups"]["g"]["weights"]["scale_dtype"] = "torch.float8_e4m3fn"
    with pytest.raises(q.QuantizeError, match=r"vLLM v0\.11\.0 could not load"):
        q.for_vllm_0_11(qc)


# -- bad input: exit 2, one line, nothing written -------------------------------------------


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("quantize: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_missing_model_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "--model", str(tmp_path / "nope"), "--out", str(tmp_path / "o"),
        "--scheme", "fp8-dynamic",
    )  # fmt: skip
    assert code == 2 and out == ""
    line = _one_line(err)
    assert "no such directory" in line and str(tmp_path / "nope") in line
    assert not (tmp_path / "o").exists()


def test_calibration_needed_but_not_given(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for scheme in ("w8a8-fp8", "w4a16-gptq", "w4a16-awq"):
        code, _, err = run(
            capsys, "--model", str(source), "--out", str(tmp_path / "o"), "--scheme", scheme
        )
        assert code == 2
        line = _one_line(err)
        assert (
            "needs calibration text" in line and "--calibration" in line and "fp8-dynamic" in line
        )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (None, "no such file"),
        ("not json\n", "calib.jsonl:1: not JSON"),
        ('{"text": "ok"}\n{"body": "x"}\n', "calib.jsonl:2: no non-empty `text`"),
        ("\n\n", "no records"),
    ],
)
def test_bad_calibration_file(
    source: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
    expect: str,
) -> None:
    calib = tmp_path / "calib.jsonl"
    if content is not None:
        calib.write_text(content)
    code, _, err = run(
        capsys, "--model", str(source), "--out", str(tmp_path / "o"), "--scheme", "w8a8-fp8",
        "--calibration", str(calib),
    )  # fmt: skip
    assert code == 2 and expect in _one_line(err)


def test_refusals_before_anything_is_loaded(
    source: Path,
    fp8: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    calib = tmp_path / "c.jsonl"
    calib.write_text('{"text": "x"}\n')
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "f").write_text("x")
    odd = tmp_path / "odd"
    odd.mkdir()
    for f in source.iterdir():
        (odd / f.name).write_bytes(f.read_bytes())
    config = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps({**config, "architectures": ["MadeUpForLM"]}))
    cases = [
        (["--model", str(source), "--scheme", "fp8-dynamic", "--calibration", str(calib)],
         "is data-free"),
        (["--model", str(fp8[0]), "--scheme", "fp8-dynamic"], "already quantized"),
        (["--model", str(odd), "--scheme", "fp8-dynamic"], "'MadeUpForLM' is not a text-gen"),
        (["--model", str(source), "--scheme", "int3"], "invalid choice"),
        (["--model", str(source), "--scheme", "w8a8-fp8", "--samples", "0"], "not positive"),
    ]  # fmt: skip
    for argv, expect in cases:
        code, out, err = run(capsys, "--out", str(tmp_path / "o"), *argv)
        assert code == 2 and out == "", argv
        assert expect in _one_line(err), (argv, err)
    code, _, err = run(
        capsys, "--model", str(source), "--out", str(busy), "--scheme", "fp8-dynamic"
    )
    assert code == 2 and "not an empty directory" in _one_line(err)
    assert not (tmp_path / "o").exists()


def test_group_schemes_refuse_widths_128_does_not_divide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    narrow = tiny_base_model(tmp_path / "narrow", "llama")  # hidden 32, intermediate 64
    calib = tmp_path / "c.jsonl"
    calib.write_text(json.dumps({"text": TEXT}) + "\n")
    code, out, err = run(
        capsys, "--model", str(narrow), "--out", str(tmp_path / "o"), "--scheme", "w4a16-gptq",
        "--calibration", str(calib),
    )  # fmt: skip
    assert code == 2 and out == ""
    line = _one_line(err)
    assert "groups of 128" in line and "q_proj (32)" in line and "fp8-dynamic" in line
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o.tmp-*"))
