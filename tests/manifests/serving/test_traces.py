"""Traces of a request: the gateway's span and vLLM's, into the in-cluster collector, and
the network path between them out of the tenant's default deny."""

from __future__ import annotations

import dataclasses

import pytest

import program.args
from manifests.serving import gateway, vllm
from program.args import serving_engines
from spec.monitoring import OTLP_GRPC_PORT, collector_otlp_endpoint
from spec.stackfile import load_config
from tests.conftest import merge, raw_stack


def _inference(**overrides: object):
    return load_config(merge(raw_stack("inference"), overrides))


def _with_image(monkeypatch: pytest.MonkeyPatch, opentelemetry: bool) -> None:
    real = program.args.catalog()
    assert real.serving is not None
    pins = real.serving.model_copy(update={"vllm_opentelemetry": opentelemetry})
    patched = real.model_copy(update={"serving": pins})
    monkeypatch.setattr(program.args, "catalog", lambda: patched)


def test_the_pinned_vllm_image_has_opentelemetry() -> None:
    """v0.34.0 requires the OpenTelemetry SDK and OTLP exporter (core requirements of its
    package: the catalog's note), so the stock image traces."""
    pins = program.args.catalog().serving
    assert pins is not None and pins.vllm_opentelemetry
    assert ":v0.34.0" in pins.vllm_image


def test_an_image_without_opentelemetry_gets_no_trace_flag_it_would_refuse_to_start_with(
    monkeypatch,
) -> None:
    _with_image(monkeypatch, opentelemetry=False)
    cfg = _inference()
    assert cfg.monitoring.traces_endpoint == collector_otlp_endpoint()
    for engine in serving_engines(cfg, cfg.serving).values():
        assert engine.otlp_traces_endpoint is None


def test_an_image_with_opentelemetry_traces_to_the_collector(monkeypatch) -> None:
    _with_image(monkeypatch, opentelemetry=True)
    cfg = _inference()
    [model, *_] = cfg.serving.models
    engine = serving_engines(cfg, cfg.serving)[model.name]
    args = vllm.vllm_args(model, engine)
    assert args[args.index("--otlp-traces-endpoint") + 1] == collector_otlp_endpoint()
    off = _inference(**{"llm-platform:monitoring": {"traces": False}})
    assert all(e.otlp_traces_endpoint is None for e in serving_engines(off, off.serving).values())


def test_without_an_endpoint_vllm_has_no_trace_flag() -> None:
    cfg = _inference()
    [model, *_] = cfg.serving.models
    engine = dataclasses.replace(
        serving_engines(cfg, cfg.serving)[model.name], otlp_traces_endpoint=None
    )
    assert "--otlp-traces-endpoint" not in vllm.vllm_args(model, engine)


def test_the_model_pods_may_reach_the_collectors_grpc_port_and_nothing_else() -> None:
    collector = gateway.TraceCollector.from_endpoint(collector_otlp_endpoint())
    policy = gateway.traces_network_policy_args(
        "serving", collector, {"app.kubernetes.io/name": "vllm"}
    )
    assert policy.spec.policy_types == ["Egress"]
    assert policy.spec.pod_selector.match_labels.items() <= vllm.labels("m").items()
    [rule] = policy.spec.egress
    [port] = rule.ports
    assert (port.protocol, port.port) == ("TCP", OTLP_GRPC_PORT)
    [peer] = rule.to
    assert peer.namespace_selector.match_labels == {"kubernetes.io/metadata.name": "monitoring"}
    assert peer.ip_block is None


def test_the_inference_plan_opens_the_trace_path_only_where_traces_are_on(plans) -> None:
    names = {
        r.name for r in plans("inference").by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    }
    assert "serving-allow-traces" in names
