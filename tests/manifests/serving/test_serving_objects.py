"""Serving builders without a Pulumi runtime: vLLM args, KEDA objects, Envoy's key check,
and the one-line config errors of the `serving` section."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from manifests.serving import gateway, keda, vllm
from spec.catalog import catalog
from spec.serving import ServingModelConfig, ServingScheduleConfig, engine_plan
from spec.stackfile import load_config
from tests.conftest import config_error, merge, raw_stack

LLAMA_8B = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
}


def _model(**overrides: Any) -> ServingModelConfig:
    base = {"name": "m", "revision": "m/1", "node_pool": "l40s", "architecture": LLAMA_8B}
    return ServingModelConfig.model_validate({**base, **overrides})


def _args(model: ServingModelConfig, itype: str = "g6e.12xlarge") -> list[str]:
    return vllm.vllm_args(model, engine_plan(model, itype))


def _flag(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_vllm_args_carry_tensor_parallelism_length_and_quantization() -> None:
    args = _args(_model(gpus_per_replica=4, max_model_len=32768, quantization="awq"))
    assert _flag(args, "--tensor-parallel-size") == "4"
    assert _flag(args, "--max-model-len") == "32768"
    assert _flag(args, "--quantization") == "awq"
    assert args[0] == "/models/m/1"  # `vllm serve`'s positional model
    assert "--quantization" not in _args(_model())


def test_vllm_args_carry_the_engine_settings_of_the_plan() -> None:
    engine = {
        "max_num_seqs": 16,
        "max_num_batched_tokens": 4096,
        "gpu_memory_utilization": 0.85,
        "enable_prefix_caching": False,
        "kv_cache_dtype": "fp8",
    }
    args = _args(_model(max_model_len=8192, engine=engine))
    assert _flag(args, "--max-num-seqs") == "16"
    assert _flag(args, "--max-num-batched-tokens") == "4096"
    assert _flag(args, "--gpu-memory-utilization") == "0.85"
    assert _flag(args, "--kv-cache-dtype") == "fp8"
    assert "--no-enable-prefix-caching" in args and "--enable-chunked-prefill" in args
    assert "--disable-log-requests" not in args  # deprecated in v0.11.0, off by default
    assert "--speculative-config" not in args and "--enable-lora" not in args


def test_speculative_decoding_is_vllms_json_config() -> None:
    ngram = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 5}
    args = _args(_model(max_model_len=4096, engine={"speculative": ngram}))
    assert json.loads(_flag(args, "--speculative-config")) == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 5,
        "prompt_lookup_min": 2,
    }
    eagle = {"method": "eagle3", "model": "eagle3-llama-8b/1"}
    args = _args(_model(max_model_len=4096, engine={"speculative": eagle}))
    spec = json.loads(_flag(args, "--speculative-config"))
    assert spec == {
        "method": "eagle3",
        "model": "/models/eagle3-llama-8b/1",
        "num_speculative_tokens": 4,
    }


def test_lora_adapters_are_served_from_their_paths() -> None:
    lora = {"adapters": {"sql": "llama-8b-sql/1", "chat": "llama-8b-chat/2"}, "max_lora_rank": 32}
    args = _args(_model(max_model_len=4096, engine={"lora": lora}))
    assert "--enable-lora" in args
    assert _flag(args, "--max-loras") == "2" and _flag(args, "--max-lora-rank") == "32"
    start = args.index("--lora-modules") + 1
    assert args[start : start + 2] == ["sql=/models/llama-8b-sql/1", "chat=/models/llama-8b-chat/2"]


def test_a_replica_takes_its_share_of_the_node() -> None:
    itype = catalog().instance("g6e.12xlarge")  # 48 vCPUs, 4 GPUs
    cpu, memory = vllm.replica_resources(_model(gpus_per_replica=2), itype)
    # Half the node (2 of 4 GPUs), less the node's reserve: most of the half, never more.
    assert 0.8 * itype.vcpus / 2 <= cpu <= itype.vcpus / 2
    assert 0.8 * itype.memory_gib / 2 <= memory <= itype.memory_gib / 2


def test_scaled_object_scales_to_zero_outside_hours_and_to_min_inside() -> None:
    schedule = ServingScheduleConfig(
        timezone="Europe/Paris", start="0 7 * * 1-5", end="0 20 * * 1-5"
    )
    obj = keda.scaled_object(_model(min_replicas=2, max_replicas=6), "http://p:9090", schedule, {})
    spec = obj.manifest()["spec"]
    assert spec["minReplicaCount"] == 0 and spec["maxReplicaCount"] == 6
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "m"}
    triggers = {t["type"]: t for t in spec["triggers"]}
    assert triggers["cron"]["metadata"] == {
        "timezone": "Europe/Paris",
        "start": "0 7 * * 1-5",
        "end": "0 20 * * 1-5",
        "desiredReplicas": "2",
    }
    prom = triggers["prometheus"]["metadata"]
    assert prom["serverAddress"] == "http://p:9090"
    assert "vllm:num_requests_waiting" in prom["query"] and 'model_name="m"' in prom["query"]


def test_without_hours_the_floor_is_the_models_min_and_no_cron() -> None:
    spec = keda.scaled_object(_model(min_replicas=1), "http://p:9090", None, {}).manifest()["spec"]
    assert spec["minReplicaCount"] == 1
    assert [t["type"] for t in spec["triggers"]] == ["prometheus"]


def test_keda_models_refuse_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        keda.Trigger.model_validate({"type": "cron", "name": "x", "metadata": {}, "extra": 1})


def _gateway(clients: tuple[str, ...] = ("a", "b"), **kw: Any) -> gateway.GatewayModel:
    return gateway.GatewayModel(name="m", max_requests=40, clients=clients, **kw)


def _hcm(config: dict[str, Any], listener: int = 0) -> dict[str, Any]:
    api = config["static_resources"]["listeners"][listener]
    return api["filter_chains"][0]["filters"][0]["typed_config"]


def _rbac(config: dict[str, Any]) -> dict[str, Any]:
    return _hcm(config)["http_filters"][0]["typed_config"]["rules"]


def test_envoy_allows_only_bearer_keys_and_refuses_clients_without_one() -> None:
    rules = _rbac(gateway.envoy_config(_gateway(), {"a": "key-a", "b": None}))
    assert rules["action"] == "ALLOW"
    assert list(rules["policies"]) == ["a"]
    header = rules["policies"]["a"]["principals"][0]["header"]
    assert header == {"name": "authorization", "string_match": {"exact": "Bearer key-a"}}
    assert _rbac(gateway.envoy_config(_gateway(), {"b": None}))["policies"] == {}


def test_envoy_routes_only_the_models_openai_api_and_health_on_its_own_port() -> None:
    listeners = gateway.envoy_config(_gateway(), {})["static_resources"]["listeners"]
    routes = {
        lst["name"]: lst["filter_chains"][0]["filters"][0]["typed_config"]["route_config"][
            "virtual_hosts"
        ][0]["routes"]
        for lst in listeners
    }
    assert routes["api"][0]["match"] == {"prefix": "/m/v1/"}
    assert routes["api"][0]["route"]["prefix_rewrite"] == "/v1/"
    assert routes["api"][-1]["direct_response"] == {"status": 404}
    get = [{"name": ":method", "string_match": {"exact": "GET"}}]
    assert routes["health"][0]["match"] == {"path": "/health", "headers": get}
    # The health listener has no key check but answers nothing else.
    assert routes["health"][-1]["direct_response"] == {"status": 404}
    admin = gateway.envoy_config(_gateway(), {})["admin"]["address"]["socket_address"]
    assert admin["address"] == "127.0.0.1"


def _serving(**overrides: Any) -> dict[str, Any]:
    raw = raw_stack("inference")
    raw["llm-platform:serving"] = merge(raw["llm-platform:serving"], overrides)
    return raw


def test_the_inference_stack_serves_two_models() -> None:
    cfg = load_config(raw_stack("inference"))
    assert cfg.serving is not None
    assert [m.name for m in cfg.serving.models] == ["llama-8b", "llama-70b"]


@pytest.mark.parametrize(
    ("change", "key", "words"),
    [
        ({"node_pool": "nope"}, "serving.models.0.node_pool", "not a pool in node_pools"),
        ({"gpus_per_replica": 8}, "serving.models.0.gpus_per_replica", "has 4 GPUs"),
        ({"gpus_per_replica": 3}, "serving.models.0.gpus_per_replica", "must divide"),
        ({"quantization": "int4"}, "serving.models.0.quantization", "awq"),
        ({"min_replicas": 9}, "serving.models.0.min_replicas", "max_replicas"),
        ({"revision": "../x"}, "serving.models.0.revision", "relative path"),
    ],
)
def test_model_errors_are_one_line_naming_the_key(change, key, words) -> None:
    raw = raw_stack("inference")
    models = raw["llm-platform:serving"]["models"]
    raw["llm-platform:serving"]["models"] = [{**models[0], **change}, *models[1:]]
    text = config_error(raw)
    assert f"llm-platform:{key} = " in text and words in text


def test_section_errors() -> None:
    assert "ACM certificate" in config_error(_serving(certificate_arn="arn:aws:iam::1:role/x"))
    assert "daily cron" in config_error(_serving(schedule={"start": "*/5 * * * *"}))
    assert "IANA" in config_error(_serving(schedule={"timezone": "Mars/Olympus"}))
    assert "twice" in config_error(_serving(api={"clients": ["a", "a"]}))
    raw = raw_stack("inference")
    raw["llm-platform:storage"] = merge(raw["llm-platform:storage"], {"model_weights": None})
    assert "storage.model_weights" in config_error(raw)
    raw = raw_stack("inference")
    raw["llm-platform:addons"] = {"load_balancer_controller": False}
    assert "Load Balancer Controller" in config_error(raw)
