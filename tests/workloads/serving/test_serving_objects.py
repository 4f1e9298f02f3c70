"""Serving builders without a Pulumi runtime: vLLM args, KEDA objects, Envoy's key check,
and the one-line config errors of the `serving` section."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from spec.catalog import catalog
from spec.serving import ServingModelConfig, ServingScheduleConfig
from spec.stackfile import load_config
from tests.conftest import config_error, merge, raw_stack
from workloads.serving import gateway, keda, vllm


def _model(**overrides: Any) -> ServingModelConfig:
    base = {"name": "m", "revision": "m/1", "node_pool": "l40s"}
    return ServingModelConfig.model_validate({**base, **overrides})


def test_vllm_args_carry_tensor_parallelism_length_and_quantization() -> None:
    args = vllm.vllm_args(_model(gpus_per_replica=4, max_model_len=32768, quantization="awq"))
    assert args[args.index("--tensor-parallel-size") + 1] == "4"
    assert args[args.index("--max-model-len") + 1] == "32768"
    assert args[args.index("--quantization") + 1] == "awq"
    assert args[args.index("--model") + 1] == "/models/m/1"
    assert "--quantization" not in vllm.vllm_args(_model())


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


def _rbac(config: dict[str, Any]) -> dict[str, Any]:
    api = config["static_resources"]["listeners"][0]
    hcm = api["filter_chains"][0]["filters"][0]["typed_config"]
    return hcm["http_filters"][0]["typed_config"]["rules"]


def test_envoy_allows_only_bearer_keys_and_refuses_clients_without_one() -> None:
    rules = _rbac(gateway.envoy_config("m", {"a": "key-a", "b": None}))
    assert rules["action"] == "ALLOW"
    assert list(rules["policies"]) == ["a"]
    header = rules["policies"]["a"]["principals"][0]["header"]
    assert header == {"name": "authorization", "string_match": {"exact": "Bearer key-a"}}
    assert _rbac(gateway.envoy_config("m", {"b": None}))["policies"] == {}


def test_envoy_routes_only_the_models_openai_api_and_health_on_its_own_port() -> None:
    listeners = gateway.envoy_config("m", {})["static_resources"]["listeners"]
    routes = {
        lst["name"]: lst["filter_chains"][0]["filters"][0]["typed_config"]["route_config"][
            "virtual_hosts"
        ][0]["routes"]
        for lst in listeners
    }
    assert routes["api"][0]["match"] == {"prefix": "/m/v1/"}
    assert routes["api"][0]["route"]["prefix_rewrite"] == "/v1/"
    assert routes["api"][-1]["direct_response"] == {"status": 404}
    assert routes["health"][0]["match"] == {"path": "/health"}
    # The health listener has no key check but answers nothing else.
    assert routes["health"][-1]["direct_response"] == {"status": 404}
    admin = gateway.envoy_config("m", {})["admin"]["address"]["socket_address"]
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
