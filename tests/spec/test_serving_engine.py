"""vLLM's engine settings from the model spec: the memory arithmetic, derived defaults, and
the one-line errors of a model that does not fit its pool's GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from spec.serving import ServingModelConfig, engine_plan
from spec.serving_memory import GIB, ModelShape, memory_need
from tests.conftest import config_error, raw_stack

LLAMA_70B = {
    "hidden_size": 8192,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "intermediate_size": 28672,
    "vocab_size": 128256,
}


def _shape(**kw: Any) -> ModelShape:
    base = dict(
        hidden_size=8192,
        layers=80,
        heads=64,
        kv_heads=8,
        head_dim=128,
        intermediate_size=28672,
        vocab_size=128256,
    )
    return ModelShape(**{**base, **kw})


def test_parameter_counts_match_the_published_llama_sizes() -> None:
    # Llama 3.1 70B: 70.55 B; 8B: 8.03 B (their model cards round to 70 and 8).
    assert round(_shape().total_parameters() / 1e9, 2) == 70.55
    small = _shape(hidden_size=4096, layers=32, heads=32, intermediate_size=14336)
    assert round(small.total_parameters() / 1e9, 2) == 8.03


def test_kv_cache_per_token_is_2_layers_kv_heads_head_dim_bytes_over_tp() -> None:
    # 2 x 80 x 8 x 128 x 2 bytes = 320 KiB a token on one GPU; TP 4 holds 2 heads each.
    assert memory_need(_shape(), tensor_parallel=1).kv_per_token == 327680
    assert memory_need(_shape(), tensor_parallel=4).kv_per_token == 327680 / 4
    # Fewer KV heads than GPUs: vLLM replicates them, one per GPU at least.
    assert memory_need(_shape(), tensor_parallel=16).kv_per_token == 2 * 80 * 1 * 128 * 2
    assert memory_need(_shape(), tensor_parallel=1, kv_bytes=1).kv_per_token == 163840


def test_four_bit_weights_take_about_a_quarter_with_16_bit_embeddings() -> None:
    full = _shape().weight_bytes()
    awq = _shape(weight_bits=4).weight_bytes()
    assert 0.27 < awq / full < 0.29


def _model(**kw: Any) -> ServingModelConfig:
    base = {"name": "llama-70b", "revision": "l/1", "node_pool": "p", "architecture": LLAMA_70B}
    return ServingModelConfig.model_validate({**base, **kw})


def test_a_model_that_does_not_fit_says_the_arithmetic_in_one_line() -> None:
    model = _model(max_model_len=8192, engine={"max_num_seqs": 64})
    with pytest.raises(ValueError) as e:
        engine_plan(model, "p5.48xlarge")
    assert e.value.path == ("engine", "max_num_seqs")  # type: ignore[attr-defined]
    assert str(e.value) == (
        "llama-70b needs 291.4 GiB per GPU (weights 131.4 + KV cache 160.0 at 8192 tokens x "
        "64 seqs) > 0.90 x 80 GiB of a H100 on p5.48xlarge; lower max_num_seqs or "
        "max_model_len, or raise gpus_per_replica (tensor parallel size)"
    )


def test_the_default_batch_is_what_fits_at_full_length_capped_at_vllms_default() -> None:
    plan = engine_plan(_model(gpus_per_replica=8, max_model_len=8192), "p5.48xlarge")
    # 0.9 x 80 GiB, less 16.4 GiB of weights, over 8192 x 40 KiB (2.5 GiB... per 8 GPUs).
    per_seq = 8192 * 327680 / 8
    weights = _shape().weight_bytes() / 8
    assert plan.max_num_seqs == int((0.9 * 80 * GIB - weights) // per_seq)
    assert plan.need_gib <= plan.budget_gib
    short = engine_plan(_model(gpus_per_replica=8, max_model_len=1024), "p5.48xlarge")
    assert short.max_num_seqs == 256
    # H100 (80 GiB): vLLM's server default of 8192 tokens a step; L40S: 2048.
    assert plan.max_num_batched_tokens == 8192
    assert (
        engine_plan(
            _model(gpus_per_replica=4, max_model_len=1024, quantization="awq"), "g6e.12xlarge"
        ).max_num_batched_tokens
        == 2048
    )


def test_lora_and_a_draft_head_count_in_the_memory() -> None:
    plain = engine_plan(_model(gpus_per_replica=8, max_model_len=8192), "p5.48xlarge")
    lora = {"adapters": {n: f"{n}/1" for n in ("a", "b", "c", "d")}, "max_lora_rank": 64}
    with_lora = engine_plan(
        _model(gpus_per_replica=8, max_model_len=8192, engine={"lora": lora}), "p5.48xlarge"
    )
    assert with_lora.max_num_seqs < plain.max_num_seqs
    eagle = {"method": "eagle", "model": "eagle/1"}
    with_eagle = engine_plan(
        _model(gpus_per_replica=8, max_model_len=8192, engine={"speculative": eagle}),
        "p5.48xlarge",
    )
    assert with_eagle.max_num_seqs < plain.max_num_seqs


@pytest.mark.parametrize(
    ("change", "key", "words"),
    [
        (
            {"node_pool": "l40s", "max_model_len": 1048576, "engine": {}},
            "serving.models.1.max_model_len = 1048576",
            "llama-70b needs 89.3 GiB per GPU (weights 9.3 + KV cache 80.0 at 1048576 tokens x 1 "
            "seqs) > 0.90 x 48 GiB of a L40S on g6e.12xlarge",
        ),
        (
            {"engine": {"max_num_seqs": 200}},
            "serving.models.1.engine.max_num_seqs = 200",
            "> 0.90 x 141 GiB of a H200 on p5en.48xlarge",
        ),
        ({"architecture": None}, "serving.models.1.architecture = <missing>", "config.json"),
        (
            {
                "gpus_per_replica": 8,
                "architecture": {
                    **LLAMA_70B,
                    "num_attention_heads": 60,
                    "num_key_value_heads": 4,
                    "head_dim": 128,
                },
            },
            "serving.models.1.gpus_per_replica = 8",
            "divide",
        ),
        (
            {"engine": {"speculative": {"method": "draft_model"}}},
            "serving.models.1.engine.speculative.method",
            "refuses a separate draft model",
        ),
        (
            {"engine": {"speculative": {"method": "eagle"}}},
            "serving.models.1.engine.speculative.model = <missing>",
            "draft head",
        ),
        (
            {"engine": {"lora": {"adapters": {"a": "a/1"}, "max_lora_rank": 24}}},
            "serving.models.1.engine.lora.max_lora_rank = 24",
            "8, 16, 32",
        ),
        (
            {"engine": {"enable_chunked_prefill": False, "max_num_batched_tokens": 4096}},
            "serving.models.1.engine.max_num_batched_tokens = 4096",
            "whole prompt",
        ),
        (
            {"admission": {"max_queued_requests": 2}},
            "serving.models.1.admission.max_queued_requests = 2",
            "sheds before it ever scales",
        ),
        (
            {"slo": {"time_to_first_token": {"target_seconds": 3}}},
            "serving.models.1.slo.time_to_first_token.target_seconds = 3",
            "nearest is 2.5",
        ),
        (
            {"clients": ["chat-app", "nobody"]},
            "serving.models.1.clients.1 = 'nobody'",
            "not a client in serving.api.clients",
        ),
    ],
)
def test_serving_engine_errors_are_one_line_naming_the_key(change, key, words) -> None:
    raw = raw_stack("inference")
    models = raw["llm-platform:serving"]["models"]
    raw["llm-platform:serving"]["models"] = [models[0], {**models[1], **change}]
    text = config_error(raw)
    assert f"llm-platform:{key}" in text and words in text, text
    assert "\n" not in text.strip()


def test_client_rates_name_known_clients() -> None:
    raw = raw_stack("inference")
    raw["llm-platform:serving"]["api"]["client_rates"] = {"nobody": {"requests_per_second": 1}}
    assert "llm-platform:serving.api.client_rates.nobody" in config_error(raw)
