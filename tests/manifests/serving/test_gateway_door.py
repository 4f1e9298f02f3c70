"""The one door: every way into a model pod is a gateway listener, and none reaches vLLM
without a client's key, except the two read-only paths (GET /health, GET /metrics).

The deployed configuration is two parts, both checked by Envoy's own API schema
(xds-protos, as in test_gateway_limits): the bootstrap, which carries no key and is the
container's argument, and the keyed listeners, an LDS DiscoveryResponse that Secrets
Manager holds and the CSI driver mounts where the bootstrap reads it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from manifests.serving import gateway, keys, router, vllm
from manifests.serving.gateway import GatewayModel

pytest.importorskip("envoy.config.bootstrap.v3.bootstrap_pb2")
import envoy.config.listener.v3.listener_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import json_format
from protoc_gen_validate.validator import validate

from tests.manifests.serving.test_gateway_limits import _unpacked, envoy_schema_check

KEYS = {"chat-app": "key-chat-0123", "batch-eval": "key-batch-4567"}
PICKED = GatewayModel(
    name="m",
    max_requests=40,
    clients=("chat-app", "batch-eval"),
    routing="endpoint-picker",
    picker_host=router.picker_host("m"),
)
LOCAL = GatewayModel(name="m", max_requests=40, clients=("chat-app",))
BOTH = (PICKED, LOCAL)


def _hcm(listener: dict[str, Any]) -> dict[str, Any]:
    return listener["filter_chains"][0]["filters"][0]["typed_config"]


def _listeners(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {lst["name"]: lst for lst in config["static_resources"]["listeners"]}


def _routes(listener: dict[str, Any]) -> list[dict[str, Any]]:
    return _hcm(listener)["route_config"]["virtual_hosts"][0]["routes"]


def _port(listener: dict[str, Any]) -> int:
    return listener["address"]["socket_address"]["port_value"]


@pytest.mark.parametrize("model", BOTH, ids=["picked", "local"])
def test_the_bootstrap_carries_no_key_and_the_listeners_file_every_key(model) -> None:
    boot = gateway.bootstrap_arg(model)
    assert "Bearer" not in boot and not any(k in boot for k in KEYS.values())
    listeners = gateway.listeners_file(model, KEYS)
    for client in model.clients:
        assert f"Bearer {KEYS[client]}" in listeners
    # Another model's client is not this model's: its key is not in this model's secret.
    if "batch-eval" not in model.clients:
        assert KEYS["batch-eval"] not in listeners


@pytest.mark.parametrize("model", BOTH, ids=["picked", "local"])
def test_both_parts_pass_envoys_api_schema(model) -> None:
    assert envoy_schema_check(gateway.bootstrap(model)) > 20
    assert envoy_schema_check(json.loads(gateway.bootstrap_arg(model))) > 20
    response = json_format.ParseDict(
        json.loads(gateway.listeners_file(model, KEYS)), discovery_pb2.DiscoveryResponse()
    )
    names = []
    for resource in response.resources:
        assert resource.type_url == gateway.LISTENER_TYPE
        listener = envoy.config.listener.v3.listener_pb2.Listener()
        assert resource.Unpack(listener)
        names.append(listener.name)
        for message in _unpacked(listener):
            validate(message)
    assert names == (["api", "peer"] if model is PICKED else ["api"])
    # What Envoy runs once the file is loaded is the effective config the other tests read.
    assert envoy_schema_check(gateway.envoy_config(model, KEYS)) > 50


def test_the_bootstrap_reads_the_file_the_provider_class_mounts_and_watches_its_directory() -> None:
    lds = gateway.bootstrap(PICKED)["dynamic_resources"]["lds_config"]
    source = lds["path_config_source"]
    assert source["path"] == f"{gateway.KEYS_DIR}/{gateway.LISTENERS_FILE}"
    # The driver swaps the directory's `..data` link: a move in the directory reloads.
    assert source["watched_directory"] == {"path": gateway.KEYS_DIR}
    spc = keys.secret_provider_class("m", "c/serving/m/gateway", "us-east-1", {}).manifest()
    assert f"objectAlias: {gateway.LISTENERS_FILE}" in spc["spec"]["parameters"]["objects"]
    container = vllm.gateway_container(PICKED)
    assert container.args[:2] == ["--config-yaml", gateway.bootstrap_arg(PICKED)]
    [mount] = container.volume_mounts
    assert (mount.name, mount.mount_path, mount.read_only) == (keys.VOLUME, gateway.KEYS_DIR, True)


@pytest.mark.parametrize("model", BOTH, ids=["picked", "local"])
def test_nothing_reaches_vllm_without_a_key_but_get_health_and_get_metrics(model) -> None:
    config = gateway.envoy_config(model, KEYS)
    upstream = {gateway.LOCAL_CLUSTER, gateway.PICKED_CLUSTER}
    for name, listener in _listeners(config).items():
        filters = _hcm(listener)["http_filters"]
        keyed = filters[0]["name"] == "envoy.filters.http.rbac"
        if keyed:
            rules = filters[0]["typed_config"]["rules"]
            assert rules["action"] == "ALLOW"
            principals = [p for pol in rules["policies"].values() for p in pol["principals"]]
            assert principals and all(
                p["header"]["name"] == "authorization"
                and p["header"]["string_match"]["exact"].startswith("Bearer key-")
                for p in principals
            )
        for route in _routes(listener):
            if route.get("route", {}).get("cluster") not in upstream:
                assert route["direct_response"] == {"status": 404}, name
                continue
            if keyed:
                continue
            # Unkeyed: one exact path, GET only, to this pod's vLLM.
            match = route["match"]
            assert set(match) == {"path", "headers"}, name
            assert match["path"] in {"/health", "/metrics"}, name
            assert match["headers"] == [{"name": ":method", "string_match": {"exact": "GET"}}]
            assert route["route"]["cluster"] == gateway.LOCAL_CLUSTER
    # The only upstream of vLLM is its loopback address.
    [local] = [c for c in config["static_resources"]["clusters"] if c["name"] == "vllm"]
    [endpoint] = local["load_assignment"]["endpoints"][0]["lb_endpoints"]
    assert endpoint["endpoint"]["address"]["socket_address"] == {
        "address": "127.0.0.1",
        "port_value": gateway.VLLM_PORT,
    }


def test_the_metrics_listener_serves_only_get_metrics_on_its_own_port() -> None:
    metrics = _listeners(gateway.envoy_config(LOCAL, KEYS))["metrics"]
    assert _port(metrics) == gateway.METRICS_PORT == 8090
    served, rest = _routes(metrics)
    assert served["match"]["path"] == "/metrics"
    assert served["route"] == {"cluster": gateway.LOCAL_CLUSTER, "timeout": "10s"}
    assert rest == {"match": {"prefix": "/"}, "direct_response": {"status": 404}}
    # No other listener shares the port, and nothing there carries a key.
    ports = [_port(lst) for lst in _listeners(gateway.envoy_config(PICKED, KEYS)).values()]
    assert sorted(ports) == [8080, 8081, 8082, 8090]
    assert "authorization" not in json.dumps(metrics)


def test_the_picked_forward_carries_the_clients_key_and_the_peer_checks_it_again() -> None:
    listeners = _listeners(gateway.envoy_config(PICKED, KEYS))
    api, peer = listeners["api"], listeners["peer"]
    assert _port(peer) == gateway.PEER_PORT
    # No listener adds, replaces or drops the authorization header: the key that reaches
    # a peer is the client's, checked by the same policies; no other credential exists.
    text = json.dumps(gateway.envoy_config(PICKED, KEYS))
    for field in ("request_headers_to_add", "request_headers_to_remove", "credential_injector"):
        assert field not in text
    assert _hcm(peer)["http_filters"][0] == _hcm(api)["http_filters"][0]
    names = [f["name"] for f in _hcm(peer)["http_filters"]]
    assert names == ["envoy.filters.http.rbac", "envoy.filters.http.router"]
    [to_vllm, rest] = _routes(peer)
    assert to_vllm["match"] == {"prefix": "/v1/"}
    assert to_vllm["route"]["cluster"] == gateway.LOCAL_CLUSTER
    assert "retry_policy" not in to_vllm["route"] and "rate_limits" not in to_vllm["route"]
    assert rest["direct_response"] == {"status": 404}
    # A shed request at the peer is the same 429 with Retry-After as at the first gateway.
    assert _hcm(peer)["local_reply_config"] == gateway.local_reply(PICKED)


def test_vllm_listens_on_loopback_and_declares_no_port() -> None:
    from spec.serving import ServingModelConfig, engine_plan

    model = ServingModelConfig.model_validate(
        {
            "name": "m",
            "revision": "m/1",
            "node_pool": "l40s",
            "architecture": {
                "hidden_size": 4096,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "intermediate_size": 14336,
                "vocab_size": 128256,
            },
        }
    )
    engine = engine_plan(model, "g6e.12xlarge")
    args = vllm.vllm_args(model, engine)
    assert args[args.index("--host") + 1] == "127.0.0.1"
    assert args[args.index("--port") + 1] == str(gateway.VLLM_PORT)
    assert "--api-key" not in args
    container = vllm.vllm_container(model, engine, "g6e.12xlarge", "nvidia.com/gpu")
    assert container.ports is None
    assert container.readiness_probe.exec_.command == vllm.HEALTH_CHECK
    assert keys.VOLUME not in [m.name for m in container.volume_mounts]
