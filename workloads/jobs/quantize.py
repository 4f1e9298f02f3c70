"""Post-training quantization for serving: llm-compressor's `oneshot` -> a compressed-tensors model.

`python -m workloads.jobs.quantize --model DIR --out DIR --scheme SCHEME
[--calibration FILE.jsonl --samples N --max-seq-len N]`

Reads a Hugging Face model directory (config.json, safetensors weights, tokenizer;
`local_files_only`, and the Hub, datasets and transformers are put offline first, so
nothing is downloaded), runs llm-compressor's `oneshot` with the scheme's recipe, and
writes to `--out` the compressed checkpoint (`save_pretrained(save_compressed=True)`:
the source's config.json plus a `quantization_config`, and safetensors), the
source's tokenizer, chat template and generation config copied byte for byte,
llm-compressor's `recipe.yaml` and `quantization.json` (scheme, source, weight
bytes before and after, calibration, library versions). The directory is
built beside `--out` and renamed into place last, so a failed run leaves no
half-written model there. stdout: the summary as one JSON line; errors: one line on
stderr. Exit codes: 0 written; 2 bad input (nothing was loaded or written); 1 the
quantization or the save failed.

Where it runs: a Job on a GPU pool in the trainer image (llmcompressor 0.14,
compressed-tensors 0.19, transformers 5, torch). The model is loaded into host
memory at its stored dtype and llm-compressor moves one layer at a time to the
first GPU (`get_main_device`; the CPU when there is none, which is how the tests
run the data-free scheme), so host memory must hold the whole model (bf16: 2 bytes a
parameter; a p5's 2 TiB does for any dense model the platform trains) and one GPU
one decoder layer plus its calibration activations. Calibration text comes only
from `--calibration`, a local JSONL file: one object a line with `text` (a string)
or `messages` (a chat, rendered with the tokenizer's chat template); the first
`--samples` usable lines are used, each cut to `--max-seq-len` tokens.

Schemes (all of them llm-compressor presets that vLLM v0.11.0's compressed-tensors
integration serves; every Linear layer but `lm_head` and MoE routers is quantized):

| --scheme    | llm-compressor recipe                              | calibration | vLLM (cc)      |
|-------------|----------------------------------------------------|-------------|----------------|
| fp8-dynamic | QuantizationModifier FP8_DYNAMIC                   | none        | W8A8Fp8 (8.9)  |
| w8a8-fp8    | QuantizationModifier FP8                           | required    | W8A8Fp8 (8.9)  |
| w4a16-gptq  | GPTQModifier W4A16                                 | required    | WNA16 (8.0)    |
| w4a16-awq   | AWQModifier, then QuantizationModifier W4A16_ASYM  | required    | WNA16 (8.0)    |

(vLLM: the `CompressedTensors<name>` scheme class vLLM v0.11.0 picks, WNA16 on its
Marlin kernels; cc: the least CUDA compute capability it accepts, `get_min_capability()`.)

- fp8-dynamic: FP8 E4M3 weights with one scale per output channel, activations
  quantized per token at run time; data-free, the default choice for H100/H200.
- w8a8-fp8: FP8 weights and activations with static per-tensor scales measured on
  the calibration text.
- w4a16-gptq: 4-bit integer weights, symmetric, groups of 128 input columns, GPTQ
  with static activation ordering; activations stay 16-bit.
- w4a16-awq: 4-bit weights, asymmetric (a zero point per group of 128), AWQ
  smoothing first. llm-compressor 0.14.0.1's AWQ pins host memory for its cache,
  which a CPU-only torch cannot do: this scheme needs the GPU pool.
Group quantization needs every quantized layer's input width divisible by 128; the
job checks that once the model is loaded and refuses (exit 2) before calibrating.

Serving FP8 at full speed needs compute capability 8.9 or newer: Hopper (p5 H100,
p5en H200), Blackwell (p6-b200) and Ada (g6e L40S). On Ampere (p4d/p4de A100, g5
A10G) vLLM v0.11.0 falls back to CompressedTensorsW8A16Fp8, a weight-only FP8 Marlin
kernel: it loads, saving memory but not compute. The W4A16 schemes run on Ampere and
newer.

What the serving config says (`serving.models[].quantization` in spec/serving.py,
`none | awq | gptq | fp8`, passed as vLLM's `--quantization` unless `none`): for
every checkpoint this job writes, `none`. vLLM detects the method from config.json
(`quantization_config.quant_method: compressed-tensors`) and picks the kernel from its
`config_groups`; v0.11.0's `ModelConfig._verify_quantization` refuses to start when
`--quantization` names another method ("Quantization method specified in the model
config (compressed-tensors) does not match the quantization method specified in the
`quantization` argument (fp8)"), and `compressed-tensors`, the one value that would
match, is not a value the schema offers. The spec's other values are for other
checkpoints: `fp8` for an unquantized bf16 model that vLLM quantizes itself at each
start (online dynamic FP8, per-tensor weight scales), `awq`/`gptq` for AutoAWQ/AutoGPTQ
checkpoints (`quant_method: awq|gptq`), which vLLM also detects when left `none`, and
then runs on the faster Marlin kernels (`awq_marlin`/`gptq_marlin`); naming `awq` or
`gptq` forces the older kernels.

vLLM v0.11.0 pins compressed-tensors 0.11.0, whose `QuantizationArgs` forbids fields
it does not know, and compressed-tensors 0.19 writes two more, `scale_dtype` and
`zp_dtype`. They are removed from config.json when they state the default (null, or
the zero-point dtype that 0.11.0 infers the same way): that is the case for all four
schemes here. A value that is not the default stops the job (exit 1), since vLLM
v0.11.0 could not load the result. The rest of config.json is the source's own file
(llm-compressor re-saves the original and adds `quantization_config`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from contracts import architectures as vllm_architectures
from contracts.quantization import SCHEMES, Scheme
from workloads import hub

FORMAT: Final = "llmp-quantization/1"
SUMMARY: Final = "quantization.json"
DEFAULT_SAMPLES: Final = 512
DEFAULT_MAX_SEQ_LEN: Final = 2048
IGNORE: Final = ("lm_head", "re:.*mlp.gate$")
"""Left in full precision: the output head, and MoE routers (`mlp.gate`; dense models
have none, and `gate_proj` does not match), which vLLM expects unquantized."""
OFFLINE_ENV: Final = hub.OFFLINE_ENV
WEIGHT_PATTERNS: Final = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER_FILES: Final = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")
NOT_COPIED_SUFFIXES: Final = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".gguf",
    ".h5",
    ".msgpack",
    ".onnx",
    ".npz",
)
"""Weights in any format: the source's are replaced by the quantized ones, never copied."""

VLLM_CT_ARGS_FIELDS: Final = frozenset(
    {
        "num_bits",
        "type",
        "symmetric",
        "group_size",
        "strategy",
        "block_structure",
        "dynamic",
        "actorder",
        "observer",
        "observer_kwargs",
    }
)
"""The fields of `QuantizationArgs` in compressed-tensors 0.11.0 (`extra="forbid"`), the
version vLLM v0.11.0 requires (its wheel's METADATA: compressed-tensors==0.11.0)."""


class InputError(ValueError):
    """A bad argument or input file: nothing was loaded or written (exit 2)."""


class QuantizeError(RuntimeError):
    """The quantization or the save failed (exit 1)."""


@dataclass(frozen=True)
class Calibration:
    path: Path
    texts: list[str | list[dict[str, Any]]]
    """Each a `text` string or a `messages` chat, in file order."""
    lines: int
    max_seq_len: int


# -- checks before anything heavy is imported ------------------------------------------------


def weight_bytes(directory: Path) -> int:
    """Bytes of the weight files (safetensors or PyTorch bins) directly in `directory`."""
    files = {p for pattern in WEIGHT_PATTERNS for p in directory.glob(pattern) if p.is_file()}
    return sum(p.stat().st_size for p in files)


def check_model_dir(model: Path) -> dict[str, Any]:
    """config.json of `model` if it is an unquantized model vLLM can serve; else InputError."""
    if not model.is_dir():
        raise InputError(
            f"--model {model}: no such directory; give a Hugging Face model directory "
            "(config.json, *.safetensors, tokenizer files)"
        )
    config_path = model / "config.json"
    try:
        config = json.loads(config_path.read_text())
    except FileNotFoundError:
        raise InputError(
            f"--model {model}: no config.json; a Hugging Face model directory has one"
        ) from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{config_path}: not readable JSON ({exc})") from None
    if not isinstance(config, dict):
        raise InputError(f"{config_path}: not a JSON object")
    if not weight_bytes(model):
        raise InputError(f"--model {model}: no weights (*.safetensors or pytorch_model*.bin) in it")
    if not any((model / name).is_file() for name in TOKENIZER_FILES):
        raise InputError(
            f"--model {model}: no tokenizer ({', '.join(TOKENIZER_FILES)}); vLLM serves "
            "the tokenizer from the model directory, so the source must carry it"
        )
    quant = config.get("quantization_config")
    if quant:
        method = quant.get("quant_method", "?") if isinstance(quant, dict) else "?"
        raise InputError(
            f"{config_path}: already quantized (quant_method {method}); give the "
            "unquantized (bf16/fp16/fp32) model"
        )
    reason = vllm_architectures.check(config.get("architectures"))
    if reason is not None:
        raise InputError(f"{config_path}: {reason}")
    return config


def check_out_dir(out: Path, model: Path) -> None:
    """`out` may be written: absent or an empty directory, and not the source."""
    if out.resolve() == model.resolve() or model.resolve() in out.resolve().parents:
        raise InputError(f"--out {out}: inside --model {model}; write the result elsewhere")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(
            f"--out {out}: exists and is not an empty directory; give a new path (a "
            "quantized revision is written once)"
        )


def read_calibration(path: Path, samples: int, max_seq_len: int) -> Calibration:
    """The first `samples` records of a JSONL file: `{"text": str}` or `{"messages": [...]}`."""
    texts: list[str | list[dict[str, Any]]] = []
    lines = 0
    try:
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if len(texts) >= samples:
                    break
                if not line.strip():
                    continue
                lines += 1
                try:
                    record = json.loads(line)
                except ValueError:
                    raise InputError(
                        f"--calibration {path}:{lineno}: not JSON; each line is one object "
                        'like {"text": "..."} or {"messages": [{"role": ..., "content": ...}]}'
                    ) from None
                text = record.get("text") if isinstance(record, dict) else None
                messages = record.get("messages") if isinstance(record, dict) else None
                if isinstance(text, str) and text.strip():
                    texts.append(text)
                elif isinstance(messages, list) and messages:
                    texts.append(messages)
                else:
                    raise InputError(
                        f"--calibration {path}:{lineno}: no non-empty `text` string or "
                        '`messages` list; each line is one object like {"text": "..."}'
                    )
    except FileNotFoundError:
        raise InputError(
            f"--calibration {path}: no such file; give a local JSONL file of calibration "
            "text (nothing is downloaded)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--calibration {path}: not readable as UTF-8 text ({exc})") from None
    if not texts:
        raise InputError(f"--calibration {path}: no records; it needs at least one line")
    return Calibration(path=path, texts=texts, lines=lines, max_seq_len=max_seq_len)


# -- the run -------------------------------------------------------------------------------


offline = hub.offline
stdout_to_stderr = hub.stdout_to_stderr


def recipe(scheme: Scheme) -> list[Any]:
    """The llm-compressor modifiers of `scheme`."""
    from llmcompressor.modifiers.gptq import GPTQModifier
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.modifiers.transform.awq import AWQModifier

    common: dict[str, Any] = {"targets": ["Linear"], "ignore": list(IGNORE)}
    if scheme.algorithm == "gptq":
        return [GPTQModifier(scheme=scheme.preset, **common)]
    quantize = QuantizationModifier(scheme=scheme.preset, **common)
    if scheme.algorithm == "awq":
        return [AWQModifier(), quantize]
    return [quantize]


def ungroupable_layers(model: Any, group_size: int) -> list[str]:
    """The Linear layers `recipe` quantizes whose input width `group_size` does not divide.

    llm-compressor checks this itself only for layers at least `group_size` wide, and
    the narrower ones fail mid-calibration with a reshape error; this says it up front."""
    import re

    import torch

    ignore = [re.compile(p.removeprefix("re:")) for p in IGNORE if p.startswith("re:")]
    names = {p for p in IGNORE if not p.startswith("re:")}
    return [
        f"{name} ({module.in_features})"
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear)
        and name not in names
        and not any(r.fullmatch(name) for r in ignore)
        and module.in_features % group_size
    ]


def calibration_dataset(calibration: Calibration, tokenizer: Any) -> Any:
    """A tokenized `datasets.Dataset` (input_ids, attention_mask) that oneshot uses as is."""
    from datasets import Dataset

    ids: list[list[int]] = []
    for item in calibration.texts:
        if isinstance(item, str):
            enc = tokenizer(item, truncation=True, max_length=calibration.max_seq_len)
        else:
            if not getattr(tokenizer, "chat_template", None):
                raise InputError(
                    f"--calibration {calibration.path}: has `messages` but the tokenizer "
                    "has no chat template; give `text` lines instead"
                )
            rendered = tokenizer.apply_chat_template(item, tokenize=False)
            enc = tokenizer(
                rendered,
                truncation=True,
                max_length=calibration.max_seq_len,
                add_special_tokens=False,
            )
        if enc["input_ids"]:
            ids.append(list(enc["input_ids"]))
    if not ids:
        raise InputError(f"--calibration {calibration.path}: every record tokenizes to nothing")
    return Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(i) for i in ids]})


def copy_side_files(model_dir: Path, staging: Path) -> list[str]:
    """Copy the source's tokenizer, chat template, generation config, licence and the
    like, byte for byte: every top-level file that is not weights, an index of weights,
    config.json (llm-compressor writes the source's, plus `quantization_config`) or a
    name this job writes. Re-saving them through transformers 5 would rewrite them in
    its own format (tokenizer_class `TokenizersBackend`, which the transformers 4 of
    the vLLM v0.11.0 image does not know), so they are not re-saved."""
    written_here = {"config.json", SUMMARY, "recipe.yaml"}
    copied: list[str] = []
    for path in sorted(model_dir.iterdir()):
        name = path.name
        if (
            not path.is_file()
            or name.startswith(".")
            or name in written_here
            or name.endswith(NOT_COPIED_SUFFIXES)
            or name.endswith(".index.json")
        ):
            continue
        if (staging / name).exists() and name != "generation_config.json":
            continue
        shutil.copyfile(path, staging / name)
        copied.append(name)
    return copied


def _implied_zp_dtype(args: dict[str, Any]) -> str:
    """The zero-point dtype compressed-tensors infers (`QuantizationArgs.pytorch_dtype`)."""
    bits = int(args.get("num_bits", 8))
    if args.get("type") == "float":
        return "torch.float8_e4m3fn"
    return "torch.int8" if bits <= 8 else "torch.int16" if bits <= 16 else "torch.int32"


def for_vllm_0_11(quantization_config: dict[str, Any]) -> list[str]:
    """Drop from the config groups' QuantizationArgs the default-valued fields that
    compressed-tensors 0.11.0 (vLLM v0.11.0's) does not know; return what was dropped.
    QuantizeError if a field it does not know carries a value that matters."""
    dropped: list[str] = []
    for group_name, group in (quantization_config.get("config_groups") or {}).items():
        for role in ("weights", "input_activations", "output_activations"):
            args = group.get(role)
            if not isinstance(args, dict):
                continue
            for key in sorted(set(args) - VLLM_CT_ARGS_FIELDS):
                value = args[key]
                default = key == "zp_dtype" and value == _implied_zp_dtype(args)
                if value is None or default:
                    del args[key]
                    dropped.append(f"{group_name}.{role}.{key}")
                else:
                    raise QuantizeError(
                        f"{group_name}.{role}.{key} = {value!r} is not known to "
                        "compressed-tensors 0.11.0, so vLLM v0.11.0 could not load the result"
                    )
    return dropped


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for dist in ("llmcompressor", "compressed-tensors", "transformers", "torch"):
        with contextlib.suppress(PackageNotFoundError):
            out[dist] = version(dist)
    return out


def quantize(
    model_dir: Path,
    out: Path,
    scheme: Scheme,
    calibration: Calibration | None,
) -> dict[str, Any]:
    """Quantize `model_dir` into `out` (checked beforehand); return the summary."""
    with offline():
        from llmcompressor import oneshot, reset_session
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer: Any = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        dataset = calibration_dataset(calibration, tokenizer) if calibration else None
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            try:
                model: Any = AutoModelForCausalLM.from_pretrained(
                    str(model_dir), local_files_only=True, dtype="auto"
                )
                source_dtype = str(model.dtype).removeprefix("torch.")
                if scheme.group_size and (bad := ungroupable_layers(model, scheme.group_size)):
                    raise InputError(
                        f"--scheme {scheme.name} quantizes weights in groups of "
                        f"{scheme.group_size} input columns, but {len(bad)} Linear layers of "
                        f"{model_dir} have an input width it does not divide, e.g. "
                        f"{', '.join(bad[:3])}; use fp8-dynamic or w8a8-fp8 for this model"
                    )
                data: dict[str, Any] = {}
                if dataset is not None and calibration is not None:
                    data = {
                        "dataset": dataset,
                        "num_calibration_samples": len(dataset),
                        "max_seq_length": calibration.max_seq_len,
                        "shuffle_calibration_samples": False,
                        "batch_size": 1,
                    }
                reset_session()
                model = oneshot(model=model, processor=tokenizer, recipe=recipe(scheme), **data)
                model.save_pretrained(str(staging), save_compressed=True)
                copied = copy_side_files(model_dir, staging)
            except InputError:
                raise
            except Exception as exc:
                raise QuantizeError(f"{type(exc).__name__}: {exc}") from exc
            finally:
                reset_session()

            config_path = staging / "config.json"
            config = json.loads(config_path.read_text())
            qconfig = config.get("quantization_config") or {}
            if qconfig.get("quant_method") != "compressed-tensors":
                raise QuantizeError(
                    f"the saved config.json has no compressed-tensors config: {qconfig}"
                )
            if qconfig.get("format") != scheme.format:
                raise QuantizeError(
                    f"the saved format is {qconfig.get('format')!r}, expected {scheme.format!r}"
                )
            dropped = for_vllm_0_11(qconfig)
            config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")

            before, after = weight_bytes(model_dir), weight_bytes(staging)
            summary: dict[str, Any] = {
                "format": FORMAT,
                "scheme": scheme.name,
                "preset": scheme.preset,
                "algorithm": scheme.algorithm,
                "source": str(model_dir.resolve()),
                "architectures": config.get("architectures"),
                "source_dtype": source_dtype,
                "weights_bytes_before": before,
                "weights_bytes_after": after,
                "ratio": round(after / before, 4) if before else None,
                "ignore": list(IGNORE),
                "copied_from_source": copied,
                "checkpoint_format": qconfig.get("format"),
                "calibration": (
                    {
                        "file": str(calibration.path.resolve()),
                        "samples": len(dataset),
                        "max_seq_len": calibration.max_seq_len,
                    }
                    if calibration and dataset is not None
                    else None
                ),
                "vllm": {
                    "version": vllm_architectures.VLLM_VERSION,
                    "serving_quantization": "none",
                    "detected_as": "compressed-tensors",
                    "scheme": scheme.vllm_scheme,
                    "min_compute_capability": scheme.min_capability / 10,
                    "config_fields_dropped": dropped,
                },
                "versions": _versions(),
            }
            (staging / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
            if out.exists():
                out.rmdir()  # checked empty beforehand
            os.replace(staging, out)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return summary


# -- command line -------------------------------------------------------------------------


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is not positive")
    return n


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2, as for every bad input
        _fail(f"{message} (usage: {self.format_usage().strip().removeprefix('usage: ')})")
        raise SystemExit(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = _Parser(prog="python -m workloads.jobs.quantize", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, type=Path, help="Hugging Face model directory")
    p.add_argument("--out", required=True, type=Path, help="new directory for the result")
    p.add_argument("--scheme", required=True, choices=sorted(SCHEMES))
    p.add_argument("--calibration", type=Path, default=None, help="local JSONL of text")
    p.add_argument("--samples", type=_positive, default=None, help=f"default {DEFAULT_SAMPLES}")
    p.add_argument(
        "--max-seq-len", type=_positive, default=None, help=f"default {DEFAULT_MAX_SEQ_LEN}"
    )
    return p.parse_args(argv)


def _fail(message: str) -> None:
    print(f"quantize: {' '.join(message.split())}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as exc:  # --help (0), or a usage error already reported (2)
        return exc.code if isinstance(exc.code, int) else 2
    scheme = SCHEMES[args.scheme]
    try:
        check_model_dir(args.model)
        check_out_dir(args.out, args.model)
        calibration = None
        if scheme.needs_calibration:
            if args.calibration is None:
                raise InputError(
                    f"--scheme {scheme.name} needs calibration text: give --calibration "
                    'FILE.jsonl (a local file, one {"text": ...} a line; a few hundred '
                    "samples of the model's own domain), or use --scheme fp8-dynamic, "
                    "which needs none"
                )
            calibration = read_calibration(
                args.calibration,
                args.samples or DEFAULT_SAMPLES,
                args.max_seq_len or DEFAULT_MAX_SEQ_LEN,
            )
        elif args.calibration or args.samples or args.max_seq_len:
            raise InputError(
                f"--scheme {scheme.name} is data-free: drop --calibration, --samples and "
                "--max-seq-len, or choose w8a8-fp8, w4a16-gptq or w4a16-awq"
            )
        with stdout_to_stderr():
            summary = quantize(args.model, args.out, scheme, calibration)
    except InputError as exc:
        _fail(str(exc))
        return 2
    except QuantizeError as exc:
        _fail(f"{scheme.name} on {args.model} failed: {exc}")
        return 1
    print(json.dumps(summary, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
