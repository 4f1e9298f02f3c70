"""The gateway's SLO protection as rendered: shed point, 429 with Retry-After, per-client
buckets, authorization, bounded retries; and every model's Envoy configuration checked
against Envoy's own API schema.

No Envoy binary installs here (neither Debian nor PyPI ships one), so the configuration's
semantics are unit-tested, and its structure is checked by a peer: `xds-protos`, grpc's
Python build of Envoy's data-plane API protos, parses it strictly (every field name,
type, enum and `@type` of a typed_config must exist), and protoc-gen-validate checks the
API's own `validate.rules` (ranges, required fields, the list of response flags) on every
message, including those packed in `typed_config`.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import any_pb2, json_format, message, symbol_database

from manifests.serving import gateway
from manifests.serving.gateway import ClientRate, GatewayModel
from spec.stackfile import load_config
from tests.conftest import raw_stack

pytest.importorskip("envoy.config.bootstrap.v3.bootstrap_pb2")
# The typed_config messages the gateway names: importing registers them for `@type`.
import envoy.config.trace.v3.opentelemetry_pb2
import envoy.extensions.filters.http.ext_proc.v3.ext_proc_pb2
import envoy.extensions.filters.http.header_mutation.v3.header_mutation_pb2
import envoy.extensions.filters.http.local_ratelimit.v3.local_rate_limit_pb2
import envoy.extensions.filters.http.rbac.v3.rbac_pb2
import envoy.extensions.filters.http.router.v3.router_pb2
import envoy.extensions.filters.network.http_connection_manager.v3.http_connection_manager_pb2
import envoy.extensions.upstreams.http.v3.http_protocol_options_pb2  # noqa: F401
from envoy.config.bootstrap.v3 import bootstrap_pb2
from protoc_gen_validate.validator import ValidationFailed, validate

KEYS = {"chat-app": "key-chat", "batch-eval": "key-batch", "other": "key-other"}
MODEL = GatewayModel(
    name="m",
    max_requests=40,
    retry_after_seconds=3,
    retries=2,
    clients=("chat-app", "batch-eval"),
    rates={"batch-eval": ClientRate(requests_per_second=5, burst=10)},
)


def _unpacked(msg: message.Message) -> list[message.Message]:
    """Every message below `msg`, with each `Any` unpacked into its registered type."""
    out = [msg]
    for field, value in msg.ListFields():
        if field.message_type is None:
            continue
        values = value if field.label == field.LABEL_REPEATED else [value]
        if field.message_type.GetOptions().map_entry:
            values = list(value.values())
            if not values or not isinstance(values[0], message.Message):
                continue
        for v in values:
            if isinstance(v, any_pb2.Any):
                name = v.type_url.split("/")[-1]
                inner = symbol_database.Default().GetSymbol(name)()
                assert v.Unpack(inner), name
                out.extend(_unpacked(inner))
            else:
                out.extend(_unpacked(v))
    return out


def envoy_schema_check(config: dict[str, Any]) -> int:
    """Parse `config` as an Envoy Bootstrap and run the API's validation rules on every
    message; returns how many messages were checked."""
    bootstrap = json_format.ParseDict(config, bootstrap_pb2.Bootstrap())
    messages = _unpacked(bootstrap)
    for m in messages:
        validate(m)
    return len(messages)


def deprecated_fields(config: dict[str, Any]) -> list[str]:
    """The fields, enum values and messages of `config` that Envoy's API marks deprecated
    (`deprecated = true`: Envoy warns on them, and removes them after a deprecation cycle)."""
    bootstrap = json_format.ParseDict(config, bootstrap_pb2.Bootstrap())
    found: list[str] = []
    for m in _unpacked(bootstrap):
        if m.DESCRIPTOR.GetOptions().deprecated:
            found.append(m.DESCRIPTOR.full_name)
        for field, value in m.ListFields():
            if field.GetOptions().deprecated:
                found.append(f"{m.DESCRIPTOR.full_name}.{field.name}")
            if field.enum_type is not None:
                numbers = value if field.label == field.LABEL_REPEATED else [value]
                for number in numbers:
                    enum_value = field.enum_type.values_by_number.get(number)
                    if enum_value is not None and enum_value.GetOptions().deprecated:
                        found.append(f"{field.enum_type.full_name}.{enum_value.name}")
    return sorted(set(found))


def _hcm(config: dict[str, Any]) -> dict[str, Any]:
    return config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0][
        "typed_config"
    ]


def _api_route(config: dict[str, Any]) -> dict[str, Any]:
    return _hcm(config)["route_config"]["virtual_hosts"][0]["routes"][0]


def test_the_circuit_breaker_admits_batch_plus_queue_and_never_queues_on_connections() -> None:
    cluster = gateway.envoy_config(MODEL, KEYS)["static_resources"]["clusters"][0]
    [limits] = cluster["circuit_breakers"]["thresholds"]
    assert limits["max_requests"] == 40
    # More connections than requests: the request limit is the one that binds.
    assert limits["max_connections"] > limits["max_requests"]
    assert limits["max_retries"] >= MODEL.retries


def test_a_shed_request_is_429_with_retry_after() -> None:
    reply = _hcm(gateway.envoy_config(MODEL, KEYS))["local_reply_config"]
    [mapper] = reply["mappers"]
    assert mapper["filter"] == {"response_flag_filter": {"flags": ["UO"]}}
    assert mapper["status_code"] == 429
    assert mapper["headers_to_add"][0]["header"] == {"key": "retry-after", "value": "3"}


def test_each_client_key_has_its_own_bucket_named_after_the_client() -> None:
    config = gateway.envoy_config(MODEL, KEYS)
    route = _api_route(config)
    actions = [a["actions"][0]["header_value_match"] for a in route["route"]["rate_limits"]]
    assert [(a["descriptor_key"], a["descriptor_value"]) for a in actions] == [
        ("client", "batch-eval"),
        ("client", "chat-app"),
    ]
    assert actions[1]["headers"] == [
        {"name": "authorization", "string_match": {"exact": "Bearer key-chat"}}
    ]
    limit = route["typed_per_filter_config"]["envoy.filters.http.local_ratelimit"]
    buckets = {d["entries"][0]["value"]: d["token_bucket"] for d in limit["descriptors"]}
    assert buckets["batch-eval"] == {"max_tokens": 10, "tokens_per_fill": 5, "fill_interval": "1s"}
    assert buckets["chat-app"]["tokens_per_fill"] == gateway.DEFAULT_RATE.requests_per_second
    assert limit["filter_enforced"]["default_value"]["numerator"] == 100
    assert limit["always_consume_default_token_bucket"] is False
    assert limit["response_headers_to_add"][0]["header"] == {"key": "retry-after", "value": "1"}
    # Descriptors name clients; a key appears only in header matchers (inside the Secret).
    assert all("key-" not in d["entries"][0]["value"] for d in limit["descriptors"])


def test_only_the_models_clients_are_authorized_and_the_rate_limit_follows_rbac() -> None:
    filters = _hcm(gateway.envoy_config(MODEL, KEYS))["http_filters"]
    assert [f["name"] for f in filters] == [
        "envoy.filters.http.rbac",
        "envoy.filters.http.local_ratelimit",
        "envoy.filters.http.router",
    ]
    assert sorted(filters[0]["typed_config"]["rules"]["policies"]) == ["batch-eval", "chat-app"]


def test_retries_only_before_vllm_got_the_request_and_within_the_whole_timeout() -> None:
    route = _api_route(gateway.envoy_config(MODEL, KEYS))["route"]
    policy = route["retry_policy"]
    assert set(policy["retry_on"].split(",")) == {
        "connect-failure",
        "refused-stream",
        "reset-before-request",
    }
    # No 5xx, reset or timeout condition: those can follow a response that began streaming.
    assert not {"5xx", "reset", "gateway-error"} & set(policy["retry_on"].split(","))
    assert policy["num_retries"] == 2
    assert policy["per_try_timeout"] == route["timeout"] == f"{gateway.REQUEST_TIMEOUT_S}s"


def test_every_models_gateway_config_passes_envoys_api_schema() -> None:
    cfg = load_config(raw_stack("inference"))
    assert cfg.serving is not None
    from program.args import client_rates, serving_engines

    engines = serving_engines(cfg, cfg.serving)
    for m in cfg.serving.models:
        model = gateway.gateway_model(
            m,
            engines[m.name],
            cfg.serving.model_clients(m),
            client_rates(cfg.serving),
            cfg.monitoring.traces_endpoint,
        )
        assert envoy_schema_check(gateway.envoy_config(model, KEYS)) > 50


def test_no_models_gateway_config_uses_what_envoys_api_deprecates() -> None:
    """The deprecations between the pinned Envoy's API and the protos installed here (the
    release notes' `deprecated` sections, mechanically): none may be in use."""
    cfg = load_config(raw_stack("inference"))
    assert cfg.serving is not None
    from program.args import client_rates, serving_engines

    engines = serving_engines(cfg, cfg.serving)
    routings = set()
    for m in cfg.serving.models:
        model = gateway.gateway_model(
            m,
            engines[m.name],
            cfg.serving.model_clients(m),
            client_rates(cfg.serving),
            cfg.monitoring.traces_endpoint,
        )
        routings.add(model.routing)
        assert deprecated_fields(gateway.envoy_config(model, KEYS)) == [], m.name
    assert routings == {"round-robin", "endpoint-picker"}


def test_the_deprecation_check_finds_a_deprecated_field_and_enum_value() -> None:
    config = gateway.envoy_config(MODEL, KEYS)
    _api_route(config)["route"]["include_vh_rate_limits"] = True
    assert deprecated_fields(config) == ["envoy.config.route.v3.RouteAction.include_vh_rate_limits"]
    bootstrap = gateway.bootstrap(MODEL)
    assert deprecated_fields(bootstrap) == []
    bootstrap["dynamic_resources"]["lds_config"]["resource_api_version"] = "V2"
    assert deprecated_fields(bootstrap) == ["envoy.config.core.v3.ApiVersion.V2"]


def test_the_schema_check_catches_a_misspelt_field_and_a_broken_rule() -> None:
    config = gateway.envoy_config(MODEL, KEYS)
    config["static_resources"]["clusters"][0]["circuit_breakers"]["thresholds"][0][
        "max_requestz"
    ] = 1
    with pytest.raises(json_format.ParseError, match="max_requestz"):
        envoy_schema_check(config)
    config = gateway.envoy_config(MODEL, KEYS)
    _hcm(config)["local_reply_config"]["mappers"][0]["filter"]["response_flag_filter"]["flags"] = [
        "OVERLOADED"
    ]  # not a response flag: the rule sits inside a typed_config
    with pytest.raises(ValidationFailed):
        envoy_schema_check(config)


def test_the_shed_point_is_past_kedas_scale_up_point() -> None:
    """KEDA adds a replica at target_waiting_requests queued in vLLM; the gateway sheds only
    once max_queued_requests (at least that many) are queued, so load is scaled before it is
    refused."""
    cfg = load_config(raw_stack("inference"))
    assert cfg.serving is not None
    from program.args import client_rates, serving_engines

    engines = serving_engines(cfg, cfg.serving)
    for m in cfg.serving.models:
        model = gateway.gateway_model(m, engines[m.name], ["a"], client_rates(cfg.serving))
        queued = model.max_requests - engines[m.name].max_num_seqs
        assert queued >= m.target_waiting_requests, m.name
