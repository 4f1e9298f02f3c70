"""Every core Kubernetes object of every stack validates against the cluster version's schema.

kubernetes-validate bundles the OpenAPI-derived JSON schemas of Kubernetes
1.25-1.37; strict mode refuses unknown fields, so a typo in a manifest (or a
field a newer Kubernetes added) fails here rather than at `pulumi up`. The
version is the stack's `cluster.version` (the catalog's EKS default when the
stack leaves it out). Custom resources have no bundled schema: they are
counted and skipped.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from kubernetes_validate import utils as kv_utils
from kubernetes_validate.utils import SchemaNotFoundError

from components.monitoring import dashboard_files
from spec.platform import PlatformConfig
from spec.stackfile import load_config
from spec.tenancy import PRIORITY_CLASSES
from tests.conftest import STACKS, raw_stack

# Objects validated and custom resources skipped, per stack. Adding an object
# changes these on purpose: update them with the manifest.
# Custom resources are Kueue's: a flavor per GPU pool plus `cpu`, a ClusterQueue per tenant
# plus `spare`, a LocalQueue per tenant, and where a pool is elastic (finetune, inference) the
# provisioning AdmissionCheck and its ProvisioningRequestConfig; in inference also a KEDA
# ScaledObject per served model.
# Inference's serving adds a Deployment, Service and PDB per model (two), the Ingress, the
# model-server ServiceAccount and the namespace's NetworkPolicies by port
# (manifests/serving/network.py: allow-alb, allow-prometheus, and for the picked llama-8b
# five: peer-in, gateway-out, picker-scrape-in, picker-in, picker-scrape-out); as custom
# resources a SecretProviderClass per model (the gateway keys); and the served models'
# latency SLO PrometheusRule
# (monitoring.serving_slo). Pretrain's checkpoint retention adds the milestone
# copier's ServiceAccount and CronJob. Inference's llama-8b routes by the endpoint picker:
# its ServiceAccount, Role, RoleBinding, Deployment, Service, PDB and API-server
# NetworkPolicy, and the InferencePool (custom); traces add the allow-traces NetworkPolicy.
# Every stack has the Kubeflow Trainer's ClusterTrainingRuntimes (custom): three kinds at
# each of the three training priority classes (manifests/jobs/trainjob.py, validated against the
# Trainer's CRD schema in tests/manifests/jobs/test_trainjob.py).
RUNTIMES = 9
EXPECTED = {
    "pretrain": {"checked": 20, "custom": 6 + RUNTIMES},
    "finetune": {"checked": 46, "custom": 12 + RUNTIMES},
    "inference": {"checked": 41, "custom": 14 + RUNTIMES},
}
# Each tenant's allow-kuberay NetworkPolicy (the KubeRay operator to a Ray head's dashboard)
# is one more checked object per tenant: pretrain 1, finetune 3, inference 1.
# Monitoring (every stack, components/monitoring.py) adds its Namespace, ResourceQuota,
# LimitRange and the gp3 StorageClass, a Grafana dashboard ConfigMap per
# monitoring/dashboards/*.json (read at synth time), and as custom resources four
# monitors (DCGM, training, ray, vllm) and the PrometheusRules of monitoring/rules.py:
# gpu, nodes, training and inference on every stack, storage (the FSx CloudWatch alerts)
# only on a stack with storage.lustre.
MONITORING = {"checked": 4, "custom": 8}
FSX_RULES = 1
# The straggler watcher (monitoring.stragglers.enabled: pretrain and finetune): its
# ServiceAccount, Deployment and NetworkPolicy; its PodMonitor and the `stragglers`
# PrometheusRule (a ClusterRole and its binding too where it quarantines: off in every stack).
STRAGGLER_WATCH = {"checked": 3, "custom": 2}
# Tenancy's admission (components/tenancy.py, manifests/admission.py): the services and
# ingresses ValidatingAdmissionPolicies and their bindings once per cluster, then per tenant
# its pods policy and binding, and the quota refusing the PriorityClasses it may not use
# (none where it may use them all).
ADMISSION = 4


def tenancy_checked(cfg: PlatformConfig) -> int:
    per_tenant = sum(
        2 + (set(t.allowed_priorities()) != set(PRIORITY_CLASSES)) for t in cfg.tenants.values()
    )
    return ADMISSION + per_tenant


def expected(stack: str) -> dict[str, int]:
    dashboards = len(dashboard_files())
    cfg = load_config(raw_stack(stack))
    storage = cfg.storage
    fsx = FSX_RULES if storage is not None and storage.lustre is not None else 0
    watch = cfg.monitoring.stragglers
    watcher = STRAGGLER_WATCH if watch.enabled else {"checked": 0, "custom": 0}
    assert not watch.quarantine, "count the ClusterRole and its binding"
    return {
        "checked": EXPECTED[stack]["checked"]
        + MONITORING["checked"]
        + dashboards
        + watcher["checked"]
        + tenancy_checked(cfg),
        "custom": EXPECTED[stack]["custom"] + MONITORING["custom"] + fsx + watcher["custom"],
    }


def _validate(manifests: list[dict[str, Any]], version: str) -> tuple[int, int, list[str]]:
    checked, custom, errors = 0, 0, []
    for manifest in manifests:
        name = f"{manifest['kind']}/{manifest.get('metadata', {}).get('name')}"
        try:
            used = kubernetes_validate.validate(manifest, version, strict=True)
        except SchemaNotFoundError:
            custom += 1
            continue
        except kubernetes_validate.ValidationError as exc:
            path = "/".join(str(p) for p in exc.path)
            errors.append(f"{name}: {path}: {exc.message}")
        else:
            assert used == version, f"{name}: validated against {used}, not {version}"
        checked += 1
    return checked, custom, errors


def test_the_bundled_schemas_cover_every_stack_version() -> None:
    bundled = {kv_utils.major_minor(v) for v in kv_utils.all_versions()}
    for stack in STACKS:
        assert load_config(raw_stack(stack)).cluster.version in bundled, stack


@pytest.mark.parametrize("stack", STACKS)
def test_core_manifests_validate_strictly(plans, stack: str) -> None:
    version = load_config(raw_stack(stack)).cluster.version
    checked, custom, errors = _validate(plans(stack).manifests(), version)
    assert errors == []
    assert {"checked": checked, "custom": custom} == expected(stack)


def test_strict_mode_refuses_unknown_fields_and_custom_resources_are_skipped() -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}
    typo = {**namespace, "spec": {"finalizer": ["kubernetes"]}}
    crd = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {}}
    checked, custom, errors = _validate([namespace, typo, crd], "1.35")
    assert (checked, custom) == (2, 1)
    assert len(errors) == 1 and "finalizer" in errors[0]


@pytest.mark.parametrize("stack", STACKS)
def test_dcgm_diagnostic_jobs_validate_strictly(stack: str) -> None:
    # `llmp accept` creates these at run time (no plan holds them): one per NVIDIA pool, at
    # every level, against the stack's cluster version.
    from manifests.jobs.dcgm_diag import DcgmDiagSpec, dcgm_diag_manifests
    from spec.catalog import catalog

    cfg = load_config(raw_stack(stack))
    levels = sorted(catalog().dcgm_diagnostic.levels)  # type: ignore[union-attr]
    manifests = [
        manifest
        for name, pool in cfg.node_pools.items()
        if catalog().instance(pool.instance_type).accelerator.kind == "nvidia"  # type: ignore[union-attr]
        for level in levels
        for manifest in dcgm_diag_manifests(
            DcgmDiagSpec(
                instance_type=pool.instance_type,
                node_pool=name,
                namespace="acceptance",
                nodes=max(pool.max_size, 1),
                level=level,
                queue_name="default",
            )
        )
    ]
    checked, custom, errors = _validate(manifests, cfg.cluster.version)
    assert errors == []
    assert (checked, custom) == (len(cfg.node_pools) * len(levels), 0)


def test_redacted_secrets_keep_their_shape_and_validate(synth, tmp_path) -> None:
    """A Secret's data is secret as a whole in Pulumi: redacting it must still leave a map
    (of placeholders) so the written manifest applies and validates, for both stringData
    and base64 data."""
    import base64

    import yaml

    from components.monitoring import GRAFANA_PASSWORD_KEY, SECRET_CONFIG_NAMESPACE
    from llmp.plan.synth import SECRET, write_plan

    raw = raw_stack("inference")
    # Grafana's admin Secret, from secret config (the gateway keys are in no Secret).
    raw[f"{SECRET_CONFIG_NAMESPACE}:{GRAFANA_PASSWORD_KEY}"] = {"secure": "v1:Z3JhZmFuYQ=="}
    plan = synth(raw)
    target = write_plan(plan, tmp_path)
    secrets = [
        yaml.safe_load(f.read_text()) for f in sorted((target / "manifests").glob("secret-*"))
    ]
    assert secrets, "the stack writes Grafana's admin Secret"
    for manifest in secrets:
        assert isinstance(manifest["stringData"], dict)
        assert set(manifest["stringData"].values()) == {SECRET}
    checked, _, errors = _validate(secrets, "1.35")
    assert (checked, errors) == (len(secrets), [])
    # `data` values are base64: the placeholder is written encoded.
    from llmp.plan import Plan, Resource

    with_data = Plan(project="p", stack="s")
    with_data.resources.append(
        Resource(
            urn="urn:x",
            type="kubernetes:core/v1:Secret",
            name="s",
            inputs={
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "s", "namespace": "n"},
                "data": {"token": SECRET},
            },
        )
    )
    (manifest,) = with_data.manifests()
    assert base64.b64decode(manifest["data"]["token"]).decode() == SECRET
    assert _validate([manifest], "1.35")[2] == []
