"""A canary as the program declares it (examples/stacks/Pulumi.serving-405b.yaml, llama-8b
at 10%): its own Deployment, Service and PDB that the stable's selectors never take, the
same engine and gateway, and the ALB's weighted forward action on the model's path."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from llmp.plan import Plan
from llmp.plan.synth import synthesize_stack
from manifests.serving import canary, vllm
from spec.stackfile import load_config, load_stack_file
from tests.conftest import config_error, merge

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples/stacks/Pulumi.serving-405b.yaml"
ACTION = "alb.ingress.kubernetes.io/actions.llama-8b-weighted"


@functools.cache
def _plan() -> Plan:
    return synthesize_stack("serving-405b", EXAMPLE, quiet=True)


def _objects() -> dict[tuple[str, str], dict[str, Any]]:
    return {(m["kind"], m["metadata"]["name"]): m for m in _plan().manifests()}


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_the_ingress_splits_the_models_path_by_weight() -> None:
    ingress = _objects()[("Ingress", "serving-api")]
    action = json.loads(ingress["metadata"]["annotations"][ACTION])
    assert action == {
        "type": "forward",
        "forwardConfig": {
            "targetGroups": [
                {"serviceName": "llama-8b", "servicePort": "http", "weight": 90},
                {"serviceName": "llama-8b-canary", "servicePort": "http", "weight": 10},
            ],
            "targetGroupStickinessConfig": {"enabled": False},
        },
    }
    paths = {
        p["path"]: p["backend"]["service"] for p in ingress["spec"]["rules"][0]["http"]["paths"]
    }
    assert paths["/llama-8b/"] == {"name": "llama-8b-weighted", "port": {"name": "use-annotation"}}
    # A model without a canary keeps its Service as the backend, and no action.
    assert paths["/llama-405b/"]["name"] == "llama-405b"
    assert not any(k.endswith("llama-405b-weighted") for k in ingress["metadata"]["annotations"])


def test_the_canary_serves_its_revision_under_the_same_name_and_engine() -> None:
    objects = _objects()
    stable, canary_ = (
        objects[("Deployment", "llama-8b")],
        objects[("Deployment", "llama-8b-canary")],
    )
    stable_args = stable["spec"]["template"]["spec"]["containers"][0]["args"]
    canary_args = canary_["spec"]["template"]["spec"]["containers"][0]["args"]
    assert canary_args[0] == "/models/llama-3.1-8b-instruct/2026-11-20"  # the positional model
    assert canary_args[canary_args.index("--served-model-name") + 1] == "llama-8b"
    # Everything but the weights' path is the stable's: engine, gateway, pod shape.
    assert [a for a in canary_args if "/models/" not in a] == [
        a for a in stable_args if "/models/" not in a
    ]
    volumes = {v["name"]: v for v in canary_["spec"]["template"]["spec"]["volumes"]}
    # The model's keys and gateway: the canary's pods mount the stable's provider class.
    keys = volumes["gateway-keys"]["csi"]["volumeAttributes"]
    assert keys == {"secretProviderClass": "llama-8b-gateway-keys"}
    gateways = [
        next(c for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "gateway")
        for d in (stable, canary_)
    ]
    assert gateways[0]["args"] == gateways[1]["args"]
    assert canary_["spec"]["replicas"] == 1 and "replicas" not in stable["spec"]
    assert ("ScaledObject", "llama-8b-canary") not in objects


def test_no_stable_selector_takes_a_canary_pod_and_the_reverse() -> None:
    objects = _objects()
    canary_pod = objects[("Deployment", "llama-8b-canary")]["spec"]["template"]["metadata"]
    stable_pod = objects[("Deployment", "llama-8b")]["spec"]["template"]["metadata"]
    assert canary_pod["labels"][vllm.TRACK_LABEL] == "canary"
    for kind in ("Deployment", "PodDisruptionBudget"):
        assert not _matches(
            objects[(kind, "llama-8b")]["spec"]["selector"]["matchLabels"], canary_pod["labels"]
        )
        assert not _matches(
            objects[(kind, "llama-8b-canary")]["spec"]["selector"]["matchLabels"],
            stable_pod["labels"],
        )
    assert not _matches(objects[("Service", "llama-8b")]["spec"]["selector"], canary_pod["labels"])
    assert _matches(
        objects[("Service", "llama-8b-canary")]["spec"]["selector"], canary_pod["labels"]
    )
    # The canary's Service is scraped like the stable's: its name is its series' `service`.
    assert (
        objects[("Service", "llama-8b-canary")]["metadata"]["labels"]["llm-platform/scrape"]
        == "true"
    )
    # The ALB may reach the canary's pods (the allow-alb policy selects every vLLM pod).
    policy = objects[("NetworkPolicy", "allow-alb")]["spec"]["podSelector"]["matchLabels"]
    assert _matches(policy, canary_pod["labels"])


def test_every_core_object_of_the_example_validates_strictly() -> None:
    version = load_config(load_stack_file(str(EXAMPLE))).cluster.version
    checked = 0
    for manifest in _plan().manifests():
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.utils.SchemaNotFoundError:
            continue
        checked += 1
    assert checked > 30


def test_a_canary_must_serve_another_revision_unless_it_is_off() -> None:
    raw = load_stack_file(str(EXAMPLE))
    models = raw["llm-platform:serving"]["models"]
    same = [
        dict(models[0], canary=dict(models[0]["canary"], revision=models[0]["revision"])),
        models[1],
    ]
    bad = merge(raw, {"llm-platform:serving": {"models": same}})
    assert "canary.revision" in config_error(bad) and "is the stable revision" in config_error(bad)
    off = [dict(same[0], canary=dict(same[0]["canary"], weight=0)), models[1]]
    cfg = load_config(merge(raw, {"llm-platform:serving": {"models": off}}))
    assert cfg.serving is not None and cfg.serving.models[0].live_canary is None


def test_weights_need_a_path_to_the_model() -> None:
    from pulumi_kubernetes.meta.v1 import ObjectMetaArgs
    from pulumi_kubernetes.networking.v1 import IngressInitArgs, IngressSpecArgs

    base = IngressInitArgs(metadata=ObjectMetaArgs(name="x"), spec=IngressSpecArgs(rules=[]))
    with pytest.raises(ValueError, match="the Ingress routes no path to gpt"):
        canary.weighted_ingress(base, {"gpt": 5})
    assert canary.weighted_ingress(base, {}) is base
