"""Serving in the mocks: per model a vLLM Deployment, Service, PDB and KEDA ScaledObject,
KEDA pinned from the catalog, an HTTPS-only Ingress with the WAF, API keys only in secret."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spec.catalog import catalog
from tests.conftest import STACKS, raw_stack

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SERVICE = "kubernetes:core/v1:Service"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
SCALED = "kubernetes:keda.sh/v1alpha1:ScaledObject"
INGRESS = "kubernetes:networking.k8s.io/v1:Ingress"
SECRET_TYPE = "kubernetes:core/v1:Secret"
SECRET_VERSION = "aws:secretsmanager/secretVersion:SecretVersion"
RELEASE = "kubernetes:helm.sh/v3:Release"
WAF = "aws:wafv2/webAcl:WebAcl"
MODELS = ("llama-8b", "llama-70b")
CATALOG = Path(__file__).parents[2] / "spec" / "catalog.yaml"


def _containers(plan, model: str) -> dict[str, dict[str, Any]]:
    spec = plan.one(DEPLOYMENT, f"serving-{model}").inputs["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec["containers"]}


def _pod(plan, model: str) -> dict[str, Any]:
    return plan.one(DEPLOYMENT, f"serving-{model}").inputs["spec"]["template"]["spec"]


def test_only_a_stack_with_serving_gets_it(plans) -> None:
    for stack in STACKS:
        # The straggler watcher's Deployment (pretrain, finetune) is monitoring's, not serving's.
        count = len([d for d in plans(stack).by_type(DEPLOYMENT) if d.name.startswith("serving")])
        assert count == (2 if stack == "inference" else 0), stack


def test_vllm_runs_the_pinned_image_on_the_read_only_weights(plans) -> None:
    plan = plans("inference")
    pins = catalog().serving
    assert pins is not None
    for model in MODELS:
        c = _containers(plan, model)
        assert c["vllm"]["image"] == pins.vllm_image
        # By digest, or by tag with the way to resolve its digest written down beside it.
        for image in (pins.vllm_image, pins.gateway_image):
            assert "@sha256:" in image or f"crane digest {image}`" in CATALOG.read_text()
        assert c["gateway"]["image"] == pins.gateway_image
        mount = next(m for m in c["vllm"]["volumeMounts"] if m["name"] == "weights")
        assert mount == {"name": "weights", "mountPath": "/models", "readOnly": True}
        claim = next(v for v in _pod(plan, model)["volumes"] if v["name"] == "weights")
        assert claim["persistentVolumeClaim"] == {"claimName": "model-weights", "readOnly": True}


def test_gpu_limits_equal_the_tensor_parallel_size(plans) -> None:
    plan = plans("inference")
    for model, tp in (("llama-8b", 1), ("llama-70b", 4)):
        vllm = _containers(plan, model)["vllm"]
        assert vllm["resources"]["limits"]["nvidia.com/gpu"] == str(tp)
        assert vllm["args"][vllm["args"].index("--tensor-parallel-size") + 1] == str(tp)
    assert "--quantization" in _containers(plan, "llama-70b")["vllm"]["args"]


def test_probes_drain_and_rollout(plans) -> None:
    plan = plans("inference")
    for model in MODELS:
        vllm = _containers(plan, model)["vllm"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            # vLLM is on loopback: its probes run inside its container.
            command = vllm[probe]["exec"]["command"]
            assert command[:2] == ["python3", "-c"] and "127.0.0.1:8000/health" in command[2]
        startup = vllm["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800
        assert vllm["lifecycle"]["preStop"]["sleep"]["seconds"] == 30
        pod = _pod(plan, model)
        assert pod["terminationGracePeriodSeconds"] > 30
        assert pod["priorityClassName"] == "llmp-serving"
        spec = plan.one(DEPLOYMENT, f"serving-{model}").inputs["spec"]
        assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
        assert "replicas" not in spec  # KEDA owns it


def test_placement_on_the_pool_spread_over_zones_and_nodes(plans) -> None:
    plan = plans("inference")
    pod = _pod(plan, "llama-70b")
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "llm-platform/pool", "operator": "In", "values": ["h200"]}
    ]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    keys = {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
    assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}


def test_service_pdb_and_metrics_port_labelled_for_scraping(plans) -> None:
    plan = plans("inference")
    for model in MODELS:
        svc = plan.one(SERVICE, f"serving-{model}").inputs
        assert svc["metadata"]["labels"]["llm-platform/scrape"] == "true"
        assert svc["metadata"]["annotations"]["prometheus.io/port"] == "8090"
        ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
        # `metrics` is the gateway's GET-/metrics-only listener; vLLM's 8000 is on loopback.
        assert ports == {"http": 8080, "health": 8081, "metrics": 8090}
        pdb = plan.one(PDB, f"serving-{model}").inputs["spec"]
        assert pdb["maxUnavailable"] == 1
        assert pdb["selector"]["matchLabels"] == svc["spec"]["selector"]


def test_keda_is_pinned_and_scaled_objects_wait_for_it(plans) -> None:
    plan = plans("inference")
    pins = catalog().serving
    assert pins is not None
    release = plan.one(RELEASE, "serving-keda")
    assert release.inputs["version"] == pins.keda.version
    assert release.inputs["repositoryOpts"]["repo"] == pins.keda.repository
    for model in MODELS:
        scaled = plan.one(SCALED, f"serving-{model}")
        assert release.urn in scaled.dependencies
        spec = scaled.inputs["spec"]
        assert spec["minReplicaCount"] == 0  # serving hours in the stack file
        assert {t["type"] for t in spec["triggers"]} == {"prometheus", "cron"}
        prom = next(t for t in spec["triggers"] if t["type"] == "prometheus")
        assert prom["metadata"]["serverAddress"] == (
            "http://kube-prometheus-stack-prometheus.monitoring:9090"
        )


def test_ingress_is_https_only_with_certificate_and_waf(plans) -> None:
    plan = plans("inference")
    ingress = plan.one(INGRESS, "serving-api")
    notes = ingress.inputs["metadata"]["annotations"]
    assert json.loads(notes["alb.ingress.kubernetes.io/listen-ports"]) == [{"HTTPS": 443}]
    assert notes["alb.ingress.kubernetes.io/ssl-redirect"] == "443"
    assert notes["alb.ingress.kubernetes.io/certificate-arn"].startswith("arn:aws:acm:")
    assert notes["alb.ingress.kubernetes.io/scheme"] == "internal"
    waf = plan.one(WAF, "serving-waf")
    assert notes["alb.ingress.kubernetes.io/wafv2-acl-arn"].endswith("/serving-waf")
    assert waf.urn in ingress.dependencies
    paths = ingress.inputs["spec"]["rules"][0]["http"]["paths"]
    assert [(p["path"], p["backend"]["service"]["port"]["name"]) for p in paths] == [
        ("/llama-8b/", "http"),
        ("/llama-70b/", "http"),
    ]


def test_waf_rate_limits_per_key_and_per_ip(plans) -> None:
    rules = {r["name"]: r for r in plans("inference").one(WAF, "serving-waf").inputs["rules"]}
    per_key = rules["rate-per-key"]["statement"]["rateBasedStatement"]
    assert per_key["aggregateKeyType"] == "CUSTOM_KEYS"
    assert per_key["customKeys"][0]["header"]["name"] == "authorization"
    assert rules["rate-per-ip"]["statement"]["rateBasedStatement"]["aggregateKeyType"] == "IP"
    assert "block" in rules["rate-per-key"]["action"]


def test_scheme_comes_from_config(synth) -> None:
    raw = raw_stack("inference")
    raw["llm-platform:serving"] = {**raw["llm-platform:serving"], "scheme": "internet-facing"}
    plan = synth(raw)
    notes = plan.one(INGRESS, "serving-api").inputs["metadata"]["annotations"]
    assert notes["alb.ingress.kubernetes.io/scheme"] == "internet-facing"


def test_api_keys_stay_secret_in_the_plan_and_out_of_kubernetes(synth, tmp_path) -> None:
    from llmp.plan.synth import SECRET, write_plan

    raw = raw_stack("inference")
    raw["llm-platform-serving:chat-app"] = {"secure": "v1:c2VydmluZy1rZXktMQ=="}
    plan = synth(raw)
    # No Kubernetes Secret holds a key: each model's keyed listeners are a Secrets Manager
    # secret, whose value stays secret in the plan.
    assert not [r for r in plan.by_type(SECRET_TYPE) if r.name.startswith("serving")]
    for model in MODELS:
        version = plan.one(SECRET_VERSION, f"serving-{model}-keys").inputs
        assert version["secretString"] == SECRET
    target = write_plan(plan, tmp_path)
    text = (target / "plan.json").read_text()
    assert "c2VydmluZy1rZXktMQ" not in text and "serving-key-1" not in text
    files = list((target / "manifests").glob("*.yaml"))
    manifests = "".join(f.read_text() for f in files)
    assert "Bearer" not in manifests and "c2VydmluZy1rZXktMQ" not in manifests


def test_alb_reaches_only_the_gateway_ports(plans) -> None:
    policy = (
        plans("inference")
        .one("kubernetes:networking.k8s.io/v1:NetworkPolicy", "serving-allow-alb")
        .inputs["spec"]
    )
    rule = policy["ingress"][0]
    assert rule["from"] == [{"ipBlock": {"cidr": "10.30.0.0/16"}}]
    assert sorted(p["port"] for p in rule["ports"]) == [8080, 8081]
