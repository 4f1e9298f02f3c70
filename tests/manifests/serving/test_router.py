"""The endpoint picker as deployed: its InferencePool against the upstream CRD's schema,
the pool against the pods it must find, the picker's scoring against what the load test
measured, and the pins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from llmp.loadtest import routing
from manifests.serving import gateway, router, vllm
from spec.catalog import catalog
from spec.stackfile import load_config
from tests.conftest import raw_stack

CRD = Path(__file__).parent / "data" / "inference.networking.k8s.io_inferencepools.yaml"
"""config/crd/bases of kubernetes-sigs/gateway-api-inference-extension at tag v1.6.0."""


def _schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def _unknown_fields(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Fields the schema does not declare (the API server prunes them silently)."""
    out: list[str] = []
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            if key not in schema["properties"]:
                out.append(f"{path}.{key}")
            else:
                out += _unknown_fields(item, schema["properties"][key], f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += _unknown_fields(item, schema["items"], f"{path}[{i}]")
    return out


def _pool() -> dict[str, Any]:
    return router.inference_pool(
        "llama-8b", vllm.selector("llama-8b"), gateway.PEER_PORT
    ).manifest()


def test_the_pool_validates_against_the_v1_6_0_crd_and_a_broken_one_does_not() -> None:
    crd = yaml.safe_load(CRD.read_text())
    assert crd["metadata"]["annotations"]["inference.networking.k8s.io/bundle-version"] == (
        "v1.6.0"
    )
    pool = _pool()
    assert (pool["apiVersion"], pool["kind"]) == (
        f"{crd['spec']['group']}/v1",
        crd["spec"]["names"]["kind"],
    )
    jsonschema.validate({**pool, "metadata": {}}, _schema())
    assert _unknown_fields(pool["spec"], _schema()["properties"]["spec"]) == []
    broken = {**pool, "spec": {**pool["spec"], "targetPorts": []}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, _schema())
    typo = {**pool["spec"], "endpointPicker": pool["spec"]["endpointPickerRef"]}
    assert _unknown_fields(typo, _schema()["properties"]["spec"]) == [".endpointPicker"]


def test_the_pool_finds_the_models_pods_on_their_gateways_peer_port() -> None:
    from program.args import client_rates, serving_engines

    cfg = load_config(raw_stack("inference"))
    assert cfg.serving is not None
    [model] = [m for m in cfg.serving.models if m.name == "llama-8b"]
    engine = serving_engines(cfg, cfg.serving)[model.name]
    itype = cfg.node_pools[model.node_pool].instance_type
    kind = catalog().accelerator_kind(itype)
    assert kind is not None
    route = gateway.gateway_model(
        model, engine, cfg.serving.model_clients(model), client_rates(cfg.serving)
    )
    deployment = vllm.deployment_args(
        "serving", model, engine, itype, kind.resource, kind.taint_key, gateway_model=route
    )
    pod_labels = deployment.spec.template.metadata.labels
    pool = _pool()
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    containers = {c.name: c for c in deployment.spec.template.spec.containers}
    # vLLM is on loopback: the pool's port is the gateway's keyed peer listener.
    vllm_args = containers["vllm"].args
    assert vllm_args[vllm_args.index("--host") + 1] == "127.0.0.1"
    ports = {p.name: p.container_port for p in containers["gateway"].ports}
    assert [p["number"] for p in pool["spec"]["targetPorts"]] == [ports["peer"]]


def test_the_picker_scrapes_the_gateways_metrics_listener_not_the_pools_port() -> None:
    import yaml

    config = yaml.safe_load(router.PLUGINS)
    [source] = [p for p in config["plugins"] if p["type"] == "metrics-data-source"]
    assert source["parameters"] == {"scheme": "http", "path": "/metrics", "port": 8090}
    assert source["parameters"]["port"] == gateway.METRICS_PORT != gateway.PEER_PORT


def test_the_pool_and_the_gateway_name_the_pickers_service_and_port() -> None:
    pool = _pool()
    ref = pool["spec"]["endpointPickerRef"]
    service = router.service_args("serving", "llama-8b")
    ports = {p.name: p.port for p in service.spec.ports}
    assert ref["name"] == service.metadata.name
    assert ref["port"]["number"] == ports["grpc"] == router.EXT_PROC_PORT
    assert ref["failureMode"] == "FailClose"
    assert router.picker_host("llama-8b").startswith(f"{service.metadata.name}.serving.svc")
    deployment = router.deployment_args("serving", "llama-8b", "image")
    assert service.spec.selector == deployment.spec.selector.match_labels
    [container] = deployment.spec.template.spec.containers
    assert {p.name: p.container_port for p in container.ports} == {
        "grpc": router.EXT_PROC_PORT,
        "grpc-health": router.HEALTH_PORT,
        "metrics": router.METRICS_PORT,
    }
    args = container.args
    assert args[args.index("--pool-name") + 1] == pool["metadata"]["name"]
    assert args[args.index("--pool-group") + 1] == router.API_GROUP


def test_the_picker_scores_with_the_weights_the_load_test_measured() -> None:
    args = router.picker_args("llama-8b")
    config = yaml.safe_load(args[args.index("--config-text") + 1])
    [profile] = config["schedulingProfiles"]
    weights = {p["pluginRef"]: p["weight"] for p in profile["plugins"]}
    assert weights == {
        "queue-scorer": routing.QUEUE_WEIGHT,
        "kv-cache-utilization-scorer": routing.KV_WEIGHT,
        "prefix-cache-scorer": routing.PREFIX_WEIGHT,
    }
    declared = {p["type"] for p in config["plugins"]}
    assert set(weights) <= declared


def test_the_picker_reads_pods_and_pools_and_writes_only_its_lease() -> None:
    rules = router.role_args("serving", "m").rules
    writes = {"create", "update", "patch", "delete"}
    by_resource = {
        (g, r): set(rule.verbs) for rule in rules for g in rule.api_groups for r in rule.resources
    }
    assert by_resource[("", "pods")] == {"get", "list", "watch"}
    assert by_resource[(router.API_GROUP, "inferencepools")] == {"get", "list", "watch"}
    written = {key for key, verbs in by_resource.items() if verbs & writes}
    assert written == {("coordination.k8s.io", "leases"), ("", "events")}
    binding = router.role_binding_args("serving", "m")
    assert binding.role_ref.name == router.role_args("serving", "m").metadata.name
    [subject] = binding.subjects
    assert subject.name == router.service_account_args("serving", "m").metadata.name


def test_the_picker_gets_a_projected_token_where_client_go_looks_not_the_automatic_one() -> None:
    pod = router.deployment_args("serving", "m", "image").spec.template.spec
    assert pod.automount_service_account_token is False
    [volume] = pod.volumes
    [mount] = pod.containers[0].volume_mounts
    assert (mount.name, mount.mount_path) == (volume.name, router.TOKEN_PATH)
    paths = set()
    for source in volume.projected.sources:
        if source.service_account_token is not None:
            paths.add(source.service_account_token.path)
        if source.config_map is not None:
            paths |= {i.path for i in source.config_map.items}
        if source.downward_api is not None:
            paths |= {i.path for i in source.downward_api.items}
    assert paths == {"token", "ca.crt", "namespace"}


def test_the_router_and_the_crd_are_pinned_to_release_tags() -> None:
    pins = catalog().serving
    assert pins is not None
    image, digest = pins.router_image.split("@")
    assert image == "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0"
    assert digest.startswith("sha256:") and len(digest) == 71
    url = pins.inference_pool_crd.url
    assert "/gateway-api-inference-extension/v1.6.0/" in url
    assert url.endswith("/" + CRD.name)


def test_routing_defaults_to_round_robin_and_is_refused_beside_a_live_canary() -> None:
    from spec.errors import ConfigError

    raw = raw_stack("inference")
    models = raw["llm-platform:serving"]["models"]
    assert load_config(raw).serving.models[1].routing == "round-robin"
    models[0]["canary"] = {"revision": "llama-3.1-8b-instruct/2026-11-01", "weight": 10}
    with pytest.raises(ConfigError, match="routing"):
        load_config(raw)
    models[0]["canary"]["weight"] = 0
    assert load_config(raw).serving.models[0].routing == "endpoint-picker"
    models[0]["routing"] = "fastest"
    with pytest.raises(ConfigError, match="routing"):
        load_config(raw)
    models[0]["routing"] = "endpoint-picker"
    models[0]["nodes_per_replica"] = 2
    with pytest.raises(ConfigError, match="single-pod replicas"):
        load_config(raw)


def test_the_gateway_of_a_picked_model_forwards_to_the_pools_target_port() -> None:
    # The picker answers with a pod's ip and a target port of the pool: every replica's
    # gateway serves its peer listener there, so a replica is the same wherever the ALB lands.
    assert [p["number"] for p in _pool()["spec"]["targetPorts"]] == [gateway.PEER_PORT]
