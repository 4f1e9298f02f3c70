"""What the platform asks of vLLM, checked against vLLM's own definitions at the pinned release.

The peer is vLLM's source: `tests/peers/data/vllm-0.34.0.json` is what
`python -m tests.peers.vllm_sdist vllm-0.34.0.tar.gz` reads from the PyPI sdist (sha256 in the
file) with `ast`, without importing vLLM: the flags its argparse accepts (`--no-X` where it
makes a BooleanOptionalAction), the values of the flags whose value the platform picks, the
fields and methods of `--speculative-config`, its Prometheus metric families and their kind,
the default buckets of the latency histograms, and the image's entrypoint. A flag renamed or
removed upstream, a metric the dashboards read that it no longer exports, or a moved bucket
fails here, not in a pod.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

from manifests.serving import keda, multinode, vllm
from monitoring.inventory import INVENTORY
from program.args import serving_engines
from spec.catalog import catalog
from spec.serving import ITL_BUCKETS, TTFT_BUCKETS, ServingModelConfig, engine_plan
from spec.stackfile import load_config
from tests.conftest import STACKS, raw_stack
from tests.peers import vllm_sdist

DATA = Path(__file__).parent / "data"
FAKE_VLLM = Path(__file__).parents[1] / "llmp" / "fake_vllm.py"
LLAMA_8B = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
}
LLAMA_405B = {
    "hidden_size": 16384,
    "num_hidden_layers": 126,
    "num_attention_heads": 128,
    "num_key_value_heads": 8,
    "intermediate_size": 53248,
    "vocab_size": 128256,
}


def _pinned_version() -> str:
    pins = catalog().serving
    assert pins is not None
    match = re.fullmatch(
        r"docker\.io/vllm/vllm-openai:v([0-9][^@]*)(@sha256:[0-9a-f]{64})?", pins.vllm_image
    )
    assert match, f"unexpected serving.vllm_image {pins.vllm_image!r}"
    return match.group(1)


@functools.cache
def _extract() -> dict[str, Any]:
    path = DATA / f"vllm-{_pinned_version()}.json"
    assert path.exists(), (
        f"serving.vllm_image pins v{_pinned_version()}: write {path.name} with "
        "`python -m tests.peers.vllm_sdist vllm-X.Y.Z.tar.gz` from that release's PyPI sdist"
    )
    return json.loads(path.read_text())


def _model(**overrides: Any) -> ServingModelConfig:
    base = {"name": "m", "revision": "m/1", "node_pool": "l40s", "architecture": LLAMA_8B}
    return ServingModelConfig.model_validate({**base, "max_model_len": 4096, **overrides})


def _variants() -> list[list[str]]:
    """The args of every served model of every stack, and of models that take each branch
    of `vllm_args` the stacks leave out."""
    out: list[list[str]] = []
    for stack in STACKS:
        cfg = load_config(raw_stack(stack))
        if cfg.serving is None:
            continue
        engines = serving_engines(cfg, cfg.serving)
        out += [vllm.vllm_args(m, engines[m.name]) for m in cfg.serving.models]
    lora = {"adapters": {"sql": "llama-8b-sql/1"}, "max_lora_rank": 32}
    for model in (
        _model(quantization="awq"),
        _model(quantization="gptq"),
        _model(quantization="fp8"),
        _model(engine={"kv_cache_dtype": "fp8", "enable_prefix_caching": False}),
        _model(engine={"enable_chunked_prefill": False}),
        _model(engine={"speculative": {"method": "ngram"}}),
        _model(engine={"speculative": {"method": "eagle3", "model": "eagle3-llama-8b/1"}}),
        _model(engine={"lora": lora}),
    ):
        engine = dataclasses.replace(
            engine_plan(model, "g6e.12xlarge"), otlp_traces_endpoint="http://collector:4317"
        )
        out.append(vllm.vllm_args(model, engine))
    big = ServingModelConfig.model_validate(
        {
            "name": "llama-405b",
            "revision": "llama-3.1-405b-instruct/1",
            "node_pool": "h200x",
            "gpus_per_replica": 8,
            "nodes_per_replica": 2,
            "max_model_len": 131072,
            "architecture": LLAMA_405B,
            "engine": {"max_num_seqs": 16},
        }
    )
    out.append(vllm.vllm_args(big, engine_plan(big, "p5en.48xlarge")))
    return out


def test_the_extract_is_the_catalogs_vllm_and_says_where_it_was_read() -> None:
    data = _extract()
    assert data["version"] == _pinned_version()
    assert data["sdist"]["name"] == f"vllm-{_pinned_version()}.tar.gz"
    assert re.fullmatch(r"[0-9a-f]{64}", data["sdist"]["sha256"])
    assert set(data["files"]) >= {
        vllm_sdist.ENGINE_ARGS,
        vllm_sdist.SERVER_ARGS,
        vllm_sdist.METRICS,
    }
    pins = catalog().serving
    assert pins is not None
    assert data["sdist"]["sha256"] in pins.vllm_source


def test_the_image_runs_vllm_serve_and_the_pods_give_it_the_model_first() -> None:
    assert _extract()["entrypoint"] == list(vllm.SERVE)
    for args in _variants():
        assert args[0].startswith(f"{vllm.WEIGHTS_PATH}/") and "--model" not in args
    model = _model(name="llama-405b")
    script = multinode.leader_script(model, engine_plan(model, "g6e.12xlarge"), None)
    assert "\nexec vllm serve /models/m/1 --served-model-name llama-405b " in script


def test_every_flag_the_platform_passes_is_one_vllm_defines() -> None:
    accepted = set(_extract()["flags"])
    passed = {a for args in _variants() for a in args if a.startswith("--")}
    assert sorted(passed - accepted) == []
    # The variants reach every branch of vllm_args, both spellings of each boolean included.
    assert passed >= {
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--enable-chunked-prefill",
        "--no-enable-chunked-prefill",
        "--kv-cache-dtype",
        "--quantization",
        "--speculative-config",
        "--enable-lora",
        "--lora-modules",
        "--pipeline-parallel-size",
        "--distributed-executor-backend",
        "--otlp-traces-endpoint",
    }


def test_a_flag_vllm_does_not_define_is_caught() -> None:
    accepted = set(_extract()["flags"])
    assert "--enable-prefix-caching" in accepted and "--enable-prefix-cache" not in accepted
    # A list-valued option gets no --no- spelling; a boolean does.
    assert "--api-key" in accepted and "--no-api-key" not in accepted
    assert "--no-enable-lora" in accepted


def test_the_values_the_platform_picks_are_among_vllms() -> None:
    values = _extract()["values"]
    for args in _variants():
        for flag in ("--distributed-executor-backend", "--kv-cache-dtype", "--quantization"):
            if flag in args:
                assert args[args.index(flag) + 1] in values[flag], flag
    schema = ServingModelConfig.model_json_schema()
    quantization = set(schema["properties"]["quantization"]["enum"]) - {"none"}
    assert quantization <= set(values["--quantization"])


def test_speculative_config_uses_vllms_fields_and_methods() -> None:
    spec = _extract()["speculative_config"]
    for args in _variants():
        if "--speculative-config" in args:
            config = json.loads(args[args.index("--speculative-config") + 1])
            assert set(config) <= set(spec["fields"]) and config["method"] in spec["methods"]


def _series(families: dict[str, str]) -> set[str]:
    """The series names prometheus_client exposes for each family."""
    suffixes = {"gauge": [""], "counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}
    out = set()
    for name, kind in families.items():
        base = name.removesuffix("_total") if kind == "counter" else name
        out |= {base + s for s in suffixes[kind]}
    return out


def test_every_vllm_metric_the_platform_reads_is_one_vllm_exports() -> None:
    exported = _series(_extract()["metrics"])
    read = {m for m in INVENTORY["vllm"] if m.startswith("vllm:")}
    read |= {keda.WAITING_METRIC}
    # The fake vLLM of the load-test and canary tests must speak the real one's names.
    read |= set(re.findall(r"(vllm:[a-z0-9_]+)\{", FAKE_VLLM.read_text()))
    assert sorted(read - exported) == []
    assert "vllm:gpu_cache_usage_perc" not in exported  # gone: the dashboard reads kv_cache


def test_the_slo_targets_are_bounds_of_vllms_default_buckets() -> None:
    buckets = _extract()["buckets"]
    assert tuple(buckets["time_to_first_token"]) == TTFT_BUCKETS
    assert tuple(buckets["inter_token_latency"]) == ITL_BUCKETS


def _sdist(tmp_path: Path, files: dict[str, str]) -> Path:
    path = tmp_path / "vllm-9.9.9.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-9.9.9/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


MADE_UP = {
    "PKG-INFO": "Metadata-Version: 2.4\nName: vllm\nVersion: 9.9.9\n",
    "vllm/config/cache.py": (
        'CacheDType = Literal["auto", "fp8"]\n'
        "class CacheConfig:\n    enable_prefix_caching: bool = True\n"
        "    cache_dtype: CacheDType | str = 'auto'\n"
    ),
    "vllm/config/parallel.py": 'DistributedExecutorBackend = Literal["ray", "mp"]\n',
    "vllm/config/speculative.py": (
        'Eagle = Literal["eagle"]\nSpeculativeMethod = Literal["ngram", Eagle]\n'
        "class SpeculativeConfig:\n    method: SpeculativeMethod | None = None\n"
    ),
    "vllm/model_executor/layers/quantization/__init__.py": 'QuantizationMethods = Literal["awq"]\n',
    "vllm/engine/arg_utils.py": (
        "def add_cli_args(parser):\n"
        "    cache_kwargs = get_kwargs(CacheConfig)\n"
        '    parser.add_argument("--model", type=str)\n'
        '    parser.add_argument("--enable-prefix-caching",\n'
        '        **{**cache_kwargs["enable_prefix_caching"], "default": None})\n'
        '    parser.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])\n'
        '    parser.add_argument("--eager", action=argparse.BooleanOptionalAction)\n'
    ),
    "vllm/entrypoints/common/cli_args.py": (
        "class BaseFrontendArgs:\n    lora_modules: list[str] | None = None\n"
        "class FrontendArgs(BaseFrontendArgs):\n    host: str | None = None\n"
        "    disable_fastapi_docs: bool = False\n"
    ),
    "vllm/v1/metrics/loggers.py": (
        "class L:\n    def __init__(self):\n"
        '        self._gauge_cls(name="vllm:num_requests_waiting", labelnames=[])\n'
        '        self._counter_cls(name="vllm:request_success")\n'
    ),
    "vllm/v1/metrics/buckets.py": (
        "TIME_TO_FIRST_TOKEN_BUCKETS: tuple[float, ...] = (0.1, 1)\n"
        "INTER_TOKEN_LATENCY_BUCKETS = (0.01,)\n"
    ),
    "docker/Dockerfile": (
        'FROM base AS vllm-openai\nENTRYPOINT ["vllm", "serve"]\n'
        'FROM vllm-openai AS other\nENTRYPOINT ["x"]\n'
    ),
}


def test_the_reader_derives_flags_values_metrics_and_buckets_as_argparse_would(tmp_path) -> None:
    data = vllm_sdist.extract(str(_sdist(tmp_path, MADE_UP)))
    assert data["version"] == "9.9.9" and data["entrypoint"] == ["vllm", "serve"]
    assert data["flags"] == [
        "--disable-fastapi-docs",
        "--eager",
        "--enable-prefix-caching",
        "--host",
        "--kv-cache-dtype",
        "--lora-modules",
        "--model",
        "--no-disable-fastapi-docs",
        "--no-eager",
        "--no-enable-prefix-caching",
    ]
    assert data["values"]["--kv-cache-dtype"] == ["auto", "fp8"]
    assert data["speculative_config"] == {"fields": ["method"], "methods": ["eagle", "ngram"]}
    assert data["metrics"] == {
        "vllm:num_requests_waiting": "gauge",
        "vllm:request_success": "counter",
    }
    assert _series(data["metrics"]) == {"vllm:num_requests_waiting", "vllm:request_success_total"}
    assert data["buckets"] == {"time_to_first_token": [0.1, 1.0], "inter_token_latency": [0.01]}


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        ("vllm/entrypoints/common/cli_args.py", "no vllm/entrypoints/common/cli_args.py"),
        ("vllm/v1/metrics/buckets.py", "no vllm/v1/metrics/buckets.py"),
    ],
)
def test_another_layout_is_one_line_and_exit_2(tmp_path, capsys, drop: str, message: str) -> None:
    path = _sdist(tmp_path, {k: v for k, v in MADE_UP.items() if k != drop})
    assert vllm_sdist.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_a_file_that_is_no_sdist_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    bad = tmp_path / "vllm.tar.gz"
    bad.write_text("not gzip")
    assert vllm_sdist.main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vllm_sdist: ") and err.count("\n") == 1
    assert vllm_sdist.main([]) == 2
