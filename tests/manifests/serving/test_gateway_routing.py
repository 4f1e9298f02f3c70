"""The gateway with the endpoint picker and with traces: what Envoy is told, checked by
Envoy's own API schema (xds-protos and its validate rules, as in test_gateway_limits)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from protoc_gen_validate.validator import ValidationFailed

from manifests.serving import gateway, router
from manifests.serving.gateway import GatewayModel, TraceCollector
from spec.monitoring import OTEL_COLLECTOR_HOST, OTLP_GRPC_PORT, collector_otlp_endpoint
from spec.stackfile import load_config
from tests.conftest import raw_stack

pytest.importorskip("envoy.config.bootstrap.v3.bootstrap_pb2")
from tests.manifests.serving.test_gateway_limits import KEYS, envoy_schema_check

TRACES = TraceCollector.from_endpoint(collector_otlp_endpoint())
PICKED = GatewayModel(
    name="m",
    max_requests=40,
    clients=("chat-app",),
    routing="endpoint-picker",
    picker_host=router.picker_host("m"),
    traces=TRACES,
)
LOCAL = GatewayModel(name="m", max_requests=40, clients=("chat-app",))


def _hcm(config: dict[str, Any], listener: int = 0) -> dict[str, Any]:
    return config["static_resources"]["listeners"][listener]["filter_chains"][0]["filters"][0][
        "typed_config"
    ]


def _clusters(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in config["static_resources"]["clusters"]}


def _route(config: dict[str, Any], listener: int = 0) -> dict[str, Any]:
    return _hcm(config, listener)["route_config"]["virtual_hosts"][0]["routes"][0]["route"]


def test_the_picked_gateway_passes_envoys_api_schema_and_a_typo_in_ext_proc_fails() -> None:
    config = gateway.envoy_config(PICKED, KEYS)
    assert envoy_schema_check(config) > 50
    broken = copy.deepcopy(config)
    ext_proc = _hcm(broken)["http_filters"][3]["typed_config"]
    ext_proc["processing_mode"]["request_body_mode"] = "STREAMING"
    with pytest.raises(Exception, match="STREAMING"):
        envoy_schema_check(broken)
    broken = copy.deepcopy(config)
    _clusters(broken)[gateway.PICKER_CLUSTER]["connect_timeout"] = "-1s"
    with pytest.raises(ValidationFailed):
        envoy_schema_check(broken)


def test_only_an_authorized_rate_limited_request_reaches_the_picker_which_sets_the_target() -> None:
    filters = [f["name"] for f in _hcm(gateway.envoy_config(PICKED, KEYS))["http_filters"]]
    assert filters == [
        "envoy.filters.http.rbac",
        gateway.RATE_LIMIT_FILTER,
        "envoy.filters.http.header_mutation",
        gateway.EXT_PROC_FILTER,
        "envoy.filters.http.router",
    ]
    http = _hcm(gateway.envoy_config(PICKED, KEYS))["http_filters"]
    # A client cannot choose the replica: its own destination header is dropped first.
    assert http[2]["typed_config"]["mutations"] == {
        "request_mutations": [{"remove": router.DESTINATION_HEADER}]
    }
    ext_proc = http[3]["typed_config"]
    assert ext_proc["failure_mode_allow"] is False
    assert ext_proc["grpc_service"]["envoy_grpc"]["cluster_name"] == gateway.PICKER_CLUSTER


def test_the_api_goes_to_the_picked_replica_and_the_health_check_stays_local() -> None:
    config = gateway.envoy_config(PICKED, KEYS)
    clusters = _clusters(config)
    assert _route(config)["cluster"] == gateway.PICKED_CLUSTER
    assert _route(config, listener=1)["cluster"] == gateway.LOCAL_CLUSTER
    picked = clusters[gateway.PICKED_CLUSTER]
    assert (picked["type"], picked["lb_policy"]) == ("ORIGINAL_DST", "CLUSTER_PROVIDED")
    assert picked["original_dst_lb_config"] == {
        "use_http_header": True,
        "http_header_name": "x-gateway-destination-endpoint",
    }
    # The shed point is at the vLLM it protects: every request to it, from whichever
    # gateway, passes its own gateway's local cluster (through the peer listener).
    assert clusters[gateway.LOCAL_CLUSTER]["circuit_breakers"] == gateway.circuit_breakers(PICKED)
    assert "circuit_breakers" not in picked
    [peer] = [lst for lst in config["static_resources"]["listeners"] if lst["name"] == "peer"]
    hcm = peer["filter_chains"][0]["filters"][0]["typed_config"]
    [route] = [r for r in hcm["route_config"]["virtual_hosts"][0]["routes"] if "route" in r]
    assert route["route"]["cluster"] == gateway.LOCAL_CLUSTER


def test_the_picker_cluster_reaches_the_pickers_service_over_http2() -> None:
    picker = _clusters(gateway.envoy_config(PICKED, KEYS))[gateway.PICKER_CLUSTER]
    [endpoint] = picker["load_assignment"]["endpoints"][0]["lb_endpoints"]
    address = endpoint["endpoint"]["address"]["socket_address"]
    assert address == {
        "address": f"{router.picker_name('m')}.serving.svc.cluster.local",
        "port_value": router.EXT_PROC_PORT,
    }
    options = picker["typed_extension_protocol_options"][gateway.HTTP_OPTIONS]
    assert "http2_protocol_options" in options["explicit_http_config"]


def test_round_robin_is_the_gateway_it_was_one_local_cluster_no_picker() -> None:
    config = gateway.envoy_config(LOCAL, KEYS)
    assert list(_clusters(config)) == [gateway.LOCAL_CLUSTER]
    names = [f["name"] for f in _hcm(config)["http_filters"]]
    assert gateway.EXT_PROC_FILTER not in names
    assert _route(config)["cluster"] == gateway.LOCAL_CLUSTER
    assert "tracing" not in _hcm(config)
    assert _clusters(config)[gateway.LOCAL_CLUSTER]["circuit_breakers"] == (
        gateway.circuit_breakers(LOCAL)
    )


def test_picker_routing_without_a_picker_host_is_refused() -> None:
    with pytest.raises(ValueError, match="picker"):
        GatewayModel(name="m", max_requests=1, clients=(), routing="endpoint-picker")


def test_traces_go_to_the_collectors_otlp_grpc_port() -> None:
    config = gateway.envoy_config(PICKED, KEYS)
    provider = _hcm(config)["tracing"]["provider"]
    assert provider["name"] == "envoy.tracers.opentelemetry"
    assert provider["typed_config"]["service_name"] == "gateway-m"
    cluster_name = provider["typed_config"]["grpc_service"]["envoy_grpc"]["cluster_name"]
    collector = _clusters(config)[cluster_name]
    [endpoint] = collector["load_assignment"]["endpoints"][0]["lb_endpoints"]
    assert endpoint["endpoint"]["address"]["socket_address"] == {
        "address": OTEL_COLLECTOR_HOST,
        "port_value": OTLP_GRPC_PORT,
    }
    # Only the API listener traces; the ALB's health checks would be noise.
    assert "tracing" not in _hcm(config, listener=1)


def test_the_collector_receives_otlp_grpc_where_the_gateway_sends_it() -> None:
    from monitoring.charts import otel_collector_config

    receiver = otel_collector_config(None, "us-east-1")["receivers"]["otlp"]["protocols"]
    assert receiver["grpc"]["endpoint"].endswith(f":{TRACES.port}")


def test_an_otlp_endpoint_without_host_or_port_is_refused() -> None:
    assert TraceCollector.from_endpoint("http://c.monitoring:4317") == TraceCollector(
        "c.monitoring", 4317
    )
    for bad in ("c.monitoring:4317", "http://c.monitoring"):
        with pytest.raises(ValueError, match="host:port"):
            TraceCollector.from_endpoint(bad)


def test_the_inference_stack_picks_for_llama_8b_traces_both_and_keeps_70b_local() -> None:
    from program.args import client_rates, serving_engines

    cfg = load_config(raw_stack("inference"))
    assert cfg.serving is not None
    engines = serving_engines(cfg, cfg.serving)
    models = {
        m.name: gateway.gateway_model(
            m,
            engines[m.name],
            cfg.serving.model_clients(m),
            client_rates(cfg.serving),
            cfg.monitoring.traces_endpoint,
        )
        for m in cfg.serving.models
    }
    assert models["llama-8b"].routing == "endpoint-picker"
    assert models["llama-70b"].routing == "round-robin"
    assert all(m.traces == TRACES for m in models.values())
