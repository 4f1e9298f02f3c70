"""Addons: pinned charts with values built in Python, Kueue objects after their CRDs, the
training-operator from pinned manifests, the LBC's Pod Identity role; each behind a flag."""

from __future__ import annotations

import json

import pytest
import yaml

from components.addons import (
    DCGM_METRICS_CONFIG,
    KUEUE_FRAMEWORKS,
    LBC_POLICY_FILE,
    efa_plugin_values,
    gpu_operator_values,
    kueue_manager_config,
)
from monitoring.inventory import INVENTORY
from spec.catalog import catalog
from tests.conftest import STACKS, raw_stack

RELEASE = "kubernetes:helm.sh/v3:Release"
KUSTOMIZE = "kubernetes:kustomize/v2:Directory"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
KUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:"


def _releases(plan) -> dict[str, dict]:
    return {
        r.name.removeprefix("addons-"): r
        for r in plan.by_type(RELEASE)
        if r.name.startswith("addons-")
    }


def _system(plan) -> str:
    return plan.one(NODE_GROUP, "cluster-system").urn


@pytest.mark.parametrize("stack", STACKS)
def test_every_release_is_pinned_from_the_catalog(plans, stack: str) -> None:
    releases = _releases(plans(stack))
    for key, chart in catalog().addon_charts.items():
        if key == "aws-efa-k8s-device-plugin" and stack == "inference":
            assert key not in releases  # no EFA pool
            continue
        inputs = releases[key].inputs
        assert inputs["version"] == chart.version
        if chart.repository.startswith("oci://"):
            assert inputs["chart"] == f"{chart.repository}/{key}"
        else:
            assert inputs["repositoryOpts"]["repo"] == chart.repository


def test_gpu_operator_uses_the_ami_driver_and_toolkit(plans) -> None:
    values = _releases(plans("pretrain"))["gpu-operator"].inputs["values"]
    assert values["driver"]["enabled"] is False
    assert values["toolkit"]["enabled"] is False
    assert values["dcgmExporter"]["enabled"] is True
    gpu_taint = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert gpu_taint in values["daemonsets"]["tolerations"]
    assert values == json.loads(json.dumps(gpu_operator_values()))


def test_dcgm_exporter_publishes_the_inventory_from_a_chart_made_config_map(plans) -> None:
    values = _releases(plans("pretrain"))["gpu-operator"].inputs["values"]
    config = values["dcgmExporter"]["config"]
    assert config["name"] == DCGM_METRICS_CONFIG
    assert config["create"] is True
    rows = [
        [cell.strip() for cell in line.split(",", 2)]
        for line in config["data"].splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert all(len(row) == 3 and row[1] in ("gauge", "counter") for row in rows), rows
    fields = [row[0] for row in rows]
    assert len(fields) == len(set(fields))
    # every DCGM metric that rules and dashboards may read, and nothing they do not know
    assert set(fields) == INVENTORY["dcgm"]
    for needed in (
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    ):
        assert needed in fields


def test_efa_plugin_runs_on_efa_nodes_through_the_gpu_taints(plans) -> None:
    values = _releases(plans("pretrain"))["aws-efa-k8s-device-plugin"].inputs["values"]
    assert values["nodeSelector"] == {"llm-platform/efa": "true"}
    keys = {t["key"] for t in values["tolerations"]}
    assert {"nvidia.com/gpu", "aws.amazon.com/neuron"} <= keys
    assert values == efa_plugin_values()


def test_controllers_wait_for_the_system_pool_and_daemonsets_do_not(plans) -> None:
    plan = plans("pretrain")
    system = _system(plan)
    releases = _releases(plan)
    for key in ("gpu-operator", "kueue", "metrics-server", "aws-load-balancer-controller"):
        assert system in releases[key].dependencies, key
    assert system not in releases["aws-efa-k8s-device-plugin"].dependencies
    operator = plan.one(KUSTOMIZE, "addons-training-operator")
    assert system in operator.dependencies


def test_kueue_objects_wait_for_the_kueue_release(plans) -> None:
    plan = plans("finetune")
    kueue = _releases(plan)["kueue"].urn
    objects = [r for r in plan.resources if r.type.startswith(KUEUE)]
    assert {r.type.rsplit(":", 1)[1] for r in objects} == {
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
    }
    for r in objects:
        assert kueue in r.dependencies, r.name


def test_kueue_config_adds_pytorchjob_and_no_mpi_v2(plans) -> None:
    values = _releases(plans("pretrain"))["kueue"].inputs["values"]
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert config == kueue_manager_config()
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    frameworks = config["integrations"]["frameworks"]
    assert "kubeflow.org/pytorchjob" in frameworks and "kubeflow.org/mpijob" not in frameworks
    assert frameworks == KUEUE_FRAMEWORKS


def test_flavors_and_queues_follow_the_pools_and_tenants(plans) -> None:
    plan = plans("finetune")
    flavors = {r.inputs["metadata"]["name"]: r for r in plan.by_type(KUEUE + "ResourceFlavor")}
    assert set(flavors) == {"cpu", "pool-a100-spot", "pool-h100"}
    assert flavors["pool-h100"].inputs["spec"]["nodeLabels"] == {"llm-platform/pool": "h100"}
    queues = {r.inputs["metadata"]["name"]: r for r in plan.by_type(KUEUE + "ClusterQueue")}
    assert set(queues) == {"chat", "code", "eval", "spare"}
    assert {q.inputs["spec"]["cohortName"] for q in queues.values()} == {"llm-platform"}


def test_training_operator_comes_from_pinned_manifests(plans) -> None:
    pin = catalog().addon_manifests["training-operator"]
    directory = plans("pretrain").one(KUSTOMIZE, "addons-training-operator")
    assert directory.inputs["directory"] == f"{pin.url}?ref={pin.ref}"
    assert pin.ref.startswith("v1.9.")


def test_lbc_gets_cluster_region_and_vpc_and_a_pod_identity_role(plans) -> None:
    plan = plans("inference")
    values = _releases(plan)["aws-load-balancer-controller"].inputs["values"]
    assert values["clusterName"] == plan.outputs["cluster_name"]
    assert values["region"] == "us-east-1"
    assert values["vpcId"] == plan.outputs["vpc_id"]
    association = plan.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "addons-lbc")
    assert association.inputs["namespace"] == "kube-system"
    assert association.inputs["serviceAccount"] == values["serviceAccount"]["name"]
    role = plan.one("aws:iam/role:Role", "addons-lbc")
    trust = json.loads(role.inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    policy = plan.one("aws:iam/rolePolicy:RolePolicy", "addons-lbc")
    assert json.loads(policy.inputs["policy"]) == json.loads(LBC_POLICY_FILE.read_text())


@pytest.mark.parametrize(
    ("flag", "gone"),
    [
        ("gpu_operator", {"gpu-operator"}),
        ("efa_device_plugin", {"aws-efa-k8s-device-plugin"}),
        ("metrics_server", {"metrics-server"}),
        ("load_balancer_controller", {"aws-load-balancer-controller"}),
        ("kueue", {"kueue"}),
    ],
)
def test_each_addon_can_be_turned_off(synth, flag: str, gone: set[str]) -> None:
    raw = raw_stack("pretrain")
    raw["llm-platform:addons"] = {flag: False}
    plan = synth(raw)
    assert gone.isdisjoint(_releases(plan))
    assert len(_releases(plan)) == len(catalog().addon_charts) - len(gone)
    if flag == "kueue":
        assert not [r for r in plan.resources if r.type.startswith(KUEUE)]
    if flag == "load_balancer_controller":
        assert not [r for r in plan.resources if r.name == "addons-lbc"]


def test_training_operator_can_be_turned_off(synth) -> None:
    raw = raw_stack("pretrain")
    raw["llm-platform:addons"] = {"training_operator": False}
    assert synth(raw).by_type(KUSTOMIZE) == []
