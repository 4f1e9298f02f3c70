"""Addons: pinned charts with values built in Python, Kueue objects after their CRDs, Kubeflow
Trainer v2 and JobSet with the platform's runtimes, the LBC's Pod Identity role; each behind a
flag."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from components import addons
from components.addons import (
    DCGM_DIAG_WATCHES,
    DCGM_METRICS_CONFIG,
    FABRIC_WATCHES,
    KUEUE_FRAMEWORKS,
    LBC_POLICY_FILE,
    TRAINER_GRACE_S,
    efa_plugin_values,
    gpu_operator_values,
    kueue_manager_config,
    nvsentinel_values,
    quarantine_rule_sets,
)
from monitoring.charts import STORAGE_CLASS
from monitoring.inventory import INVENTORY
from spec.catalog import catalog
from spec.labels import POOL_LABEL, QUARANTINE_TAINT
from tests.conftest import STACKS, raw_stack, with_section

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


ADDON_RELEASES = {
    "gpu-operator",
    "aws-efa-k8s-device-plugin",
    "kueue",
    "aws-load-balancer-controller",
    "metrics-server",
    "kuberay-operator",
    "nvsentinel",
    "cert-manager",
    "jobset",
    "kubeflow-trainer",
}
"""The charts the Addons component installs (other catalog charts belong to other components)."""


@pytest.mark.parametrize("stack", STACKS)
def test_every_release_is_pinned_from_the_catalog(plans, stack: str) -> None:
    releases = _releases(plans(stack))
    expected = ADDON_RELEASES - ({"aws-efa-k8s-device-plugin"} if stack == "inference" else set())
    assert set(releases) == expected  # inference has no EFA pool
    for key, release in releases.items():
        chart = catalog().addon_charts[key]
        inputs = release.inputs
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
    for key in (
        "gpu-operator",
        "kueue",
        "metrics-server",
        "aws-load-balancer-controller",
        "jobset",
        "kubeflow-trainer",
    ):
        assert system in releases[key].dependencies, key
    assert system not in releases["aws-efa-k8s-device-plugin"].dependencies


def test_kueue_objects_wait_for_the_kueue_release(plans) -> None:
    plan = plans("finetune")
    kueue = _releases(plan)["kueue"].urn
    objects = [r for r in plan.resources if r.type.startswith(KUEUE)]
    assert {r.type.rsplit(":", 1)[1] for r in objects} == {
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        # finetune's pools are elastic: the provisioning check and its config
        "AdmissionCheck",
        "ProvisioningRequestConfig",
    }
    for r in objects:
        assert kueue in r.dependencies, r.name


def test_kueue_config_admits_trainjobs_and_no_longer_pytorchjobs(plans) -> None:
    values = _releases(plans("pretrain"))["kueue"].inputs["values"]
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert config == kueue_manager_config()
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    frameworks = config["integrations"]["frameworks"]
    # Kueue 0.19.2's framework name (pkg/controller/jobs/trainjob: FrameworkName).
    assert "trainer.kubeflow.org/trainjob" in frameworks
    assert "kubeflow.org/pytorchjob" not in frameworks and "kubeflow.org/mpijob" not in frameworks
    assert frameworks == KUEUE_FRAMEWORKS


def test_flavors_and_queues_follow_the_pools_and_tenants(plans) -> None:
    plan = plans("finetune")
    flavors = {r.inputs["metadata"]["name"]: r for r in plan.by_type(KUEUE + "ResourceFlavor")}
    assert set(flavors) == {"cpu", "pool-a100-spot", "pool-h100"}
    assert flavors["pool-h100"].inputs["spec"]["nodeLabels"] == {"llm-platform/pool": "h100"}
    queues = {r.inputs["metadata"]["name"]: r for r in plan.by_type(KUEUE + "ClusterQueue")}
    assert set(queues) == {"chat", "code", "eval", "spare"}
    assert {q.inputs["spec"]["cohortName"] for q in queues.values()} == {"llm-platform"}


def test_trainer_v2_and_jobset_come_from_their_pinned_charts_in_order(plans) -> None:
    plan = plans("pretrain")
    releases = _releases(plan)
    for key in ("kubeflow-trainer", "jobset"):
        assert releases[key].inputs["version"] == catalog().addon_charts[key].version, key
    trainer, jobset, kueue = releases["kubeflow-trainer"], releases["jobset"], releases["kueue"]
    assert trainer.inputs["namespace"] == "kubeflow-system"
    assert jobset.inputs["namespace"] == "jobset-system"
    # The Trainer 2.2 line: what Kueue 0.19 is built against (2.3 needs Kueue 0.20).
    assert catalog().addon_charts["kubeflow-trainer"].version.startswith("2.2.")
    assert catalog().addon_charts["kueue"].version.startswith("0.19.")
    values = trainer.inputs["values"]
    assert values["jobset"] == {"install": False}  # the jobset release is the one
    assert values["runtimes"] == {"defaultEnabled": False}  # the platform's runtimes
    assert values["dataCache"] == {"enabled": False}  # no second LWS
    assert values["manager"]["nodeSelector"] == {POOL_LABEL: "system"}
    assert jobset.inputs["values"]["controller"]["nodeSelector"] == {POOL_LABEL: "system"}
    # Side by side: the Trainer's manager needs JobSet's CRD (Helm creates it first), not its
    # controller. Kueue does not wait either: 0.19.2 sets the TrainJob controller up once the
    # API is served (jobframework.WaitForAPI).
    assert jobset.urn not in trainer.dependencies
    assert trainer.urn not in kueue.dependencies


def test_the_platforms_runtimes_wait_for_the_trainer_and_cover_every_priority(plans) -> None:
    from manifests.jobs import trainjob
    from spec.tenancy import TRAINING_PRIORITIES

    plan = plans("pretrain")
    trainer = _releases(plan)["kubeflow-trainer"].urn
    runtimes = plan.by_type("kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime")
    names = {r.inputs["metadata"]["name"] for r in runtimes}
    assert names == {
        trainjob.runtime_name_for(kind, p)
        for kind in trainjob.RUNTIME_KINDS
        for p in TRAINING_PRIORITIES
    }
    assert "llmp-deepspeed-training" in names and "llmp-step-preemptible" in names
    for r in runtimes:
        assert trainer in r.dependencies, r.name
        assert r.inputs["spec"] == next(
            x["spec"]
            for x in trainjob.cluster_training_runtimes()
            if x["metadata"]["name"] == r.inputs["metadata"]["name"]
        )


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
        # NVSentinel reads the GPU operator's DCGM: without the operator it is off too.
        ("gpu_operator", {"gpu-operator", "nvsentinel", "cert-manager"}),
        ("efa_device_plugin", {"aws-efa-k8s-device-plugin"}),
        ("metrics_server", {"metrics-server"}),
        ("load_balancer_controller", {"aws-load-balancer-controller"}),
        ("kueue", {"kueue"}),
        ("nvsentinel", {"nvsentinel", "cert-manager"}),
    ],
)
def test_each_addon_can_be_turned_off(plans, synth, flag: str, gone: set[str]) -> None:
    raw = raw_stack("pretrain")
    raw["llm-platform:addons"] = {flag: False}
    plan = synth(raw)
    assert set(_releases(plan)) == set(_releases(plans("pretrain"))) - gone
    if flag == "kueue":
        assert not [r for r in plan.resources if r.type.startswith(KUEUE)]
    if flag == "load_balancer_controller":
        assert not [r for r in plan.resources if r.name == "addons-lbc"]


def test_training_operator_can_be_turned_off(synth) -> None:
    raw = raw_stack("pretrain")
    raw["llm-platform:addons"] = {"training_operator": False}
    plan = synth(raw)
    assert not {"kubeflow-trainer", "jobset"} & set(_releases(plan))
    assert not [r for r in plan.resources if r.type.startswith("kubernetes:trainer.kubeflow.org")]
    assert plan.by_type(KUSTOMIZE) == []


# --- NVSentinel -------------------------------------------------------------------------


def _nvsentinel(plan) -> dict:
    values: dict = _releases(plan)["nvsentinel"].inputs["values"]
    return values


def _rules(values: dict) -> dict[str, dict]:
    return {r["name"]: r for r in values["fault-quarantine"]["ruleSets"]}


def _health_expression(rule: dict) -> str:
    [event] = [m["expression"] for m in rule["match"]["all"] if m["kind"] == "HealthEvent"]
    return str(event)


def _codes_in(expression: str) -> set[int]:
    return {int(c) for c in re.findall(r"'(\d+)'", expression)}


def test_nvsentinel_is_the_catalogs_oci_chart_in_its_own_namespace(plans) -> None:
    pin = catalog().addon_charts["nvsentinel"]
    inputs = _releases(plans("pretrain"))["nvsentinel"].inputs
    assert inputs["chart"] == "oci://ghcr.io/nvidia/nvsentinel"
    assert inputs["version"] == pin.version
    assert inputs["namespace"] == "nvsentinel"
    assert inputs["createNamespace"] is True
    assert _nvsentinel(plans("pretrain")) == json.loads(json.dumps(nvsentinel_values(10, 60)))


def test_nvsentinel_reads_the_gpu_operators_standalone_dcgm_host_engine(plans) -> None:
    releases = _releases(plans("pretrain"))
    operator = releases["gpu-operator"].inputs
    assert operator["values"]["dcgm"]["enabled"] is True
    dcgm = _nvsentinel(plans("pretrain"))["global"]["dcgm"]
    assert dcgm["mode"] == "operator-service"
    # The operator's Service nvidia-dcgm:5555 in the namespace the operator is released into.
    assert dcgm["service"] == {
        "endpoint": f"nvidia-dcgm.{operator['namespace']}.svc",
        "port": 5555,
    }
    assert releases["gpu-operator"].urn in releases["nvsentinel"].dependencies


def test_quarantine_rules_cover_every_xid_class_of_the_catalog(plans) -> None:
    rules = _rules(_nvsentinel(plans("pretrain")))
    xids = catalog().gpu_xids
    assert xids is not None
    unclassified = _health_expression(rules["XID unclassified"])
    assert "event.isFatal == true" in unclassified
    # NVSentinel's fatality decides only for codes no class lists: all of them are excluded.
    assert _codes_in(unclassified) == set(xids.classified)
    quarantined: set[int] = set()
    for name, cls in xids.classes.items():
        if cls.quarantine:
            expression = _health_expression(rules[f"XID {name}"])
            assert "SysLogsXIDError" in expression
            assert _codes_in(expression) == set(cls.codes), name
            quarantined |= set(cls.codes)
        else:
            assert f"XID {name}" not in rules
    assert quarantined == set(xids.codes("node_replacement")) | set(xids.codes("gpu_reset"))
    assert not quarantined & set(xids.codes("application"))
    assert not quarantined & set(xids.codes("informational"))


def test_xid_rules_follow_the_catalog_not_a_list_of_their_own(monkeypatch) -> None:
    real = catalog()
    assert real.gpu_xids is not None
    reset = real.gpu_xids.classes["gpu_reset"]
    extra = reset.model_copy(update={"codes": {**reset.codes, 999: reset.codes[48].model_copy()}})
    changed = real.model_copy(
        update={
            "gpu_xids": real.gpu_xids.model_copy(
                update={"classes": {**real.gpu_xids.classes, "gpu_reset": extra}}
            )
        }
    )
    monkeypatch.setattr(addons, "catalog", lambda: changed)
    rules = {r["name"]: r for r in quarantine_rule_sets()}
    assert 999 in _codes_in(_health_expression(rules["XID gpu_reset"]))
    assert 999 in _codes_in(_health_expression(rules["XID unclassified"]))  # excluded there


def test_dcgm_watches_cover_every_diagnostic_test_the_platform_runs(plans) -> None:
    diagnostic = catalog().dcgm_diagnostic
    assert diagnostic is not None
    tests = {t for level in diagnostic.levels.values() for t in level.tests}
    assert tests == set(DCGM_DIAG_WATCHES)
    expression = _health_expression(_rules(_nvsentinel(plans("pretrain")))["DCGM health watches"])
    assert expression.startswith("event.agent == 'gpu-health-monitor' && event.isFatal == true")
    listed = set(re.findall(r"'(Gpu\w+Watch)'", expression))
    assert listed == {w for ws in DCGM_DIAG_WATCHES.values() for w in ws} | set(FABRIC_WATCHES)
    # A host engine that restarts is no GPU fault.
    assert "GpuDcgmConnectivityFailure" not in expression


def test_every_rule_cordons_and_taints_with_our_key_and_honours_the_opt_out(plans) -> None:
    rules = _rules(_nvsentinel(plans("pretrain")))
    assert {"GPU fallen off the bus", "NVSwitch SXID", "DCGM health watches"} <= set(rules)
    for name, rule in rules.items():
        assert rule["cordon"] == {"shouldCordon": True}, name
        assert rule["taint"] == {
            "key": QUARANTINE_TAINT,
            "value": "gpu-fault",
            "effect": "NoSchedule",
        }, name
        [node] = [m["expression"] for m in rule["match"]["all"] if m["kind"] == "Node"]
        assert "ManagedByNVSentinel" in node


def test_circuit_breaker_caps_quarantine_from_config(plans, synth) -> None:
    default = _nvsentinel(plans("pretrain"))["fault-quarantine"]["circuitBreaker"]
    assert default == {"enabled": True, "percentage": 10, "duration": "60m"}
    raw = with_section(
        "pretrain",
        "addons",
        {"nvsentinel_max_quarantined_percent": 25, "nvsentinel_quarantine_window_minutes": 30},
    )
    breaker = _nvsentinel(synth(raw))["fault-quarantine"]["circuitBreaker"]
    assert breaker == {"enabled": True, "percentage": 25, "duration": "30m"}


def test_node_drainer_evicts_training_pods_with_the_grace_the_trainer_asks_for(plans) -> None:
    from manifests.jobs.pytorchjob import JobSpec, pytorch_job

    job = pytorch_job(
        JobSpec(
            name="run",
            namespace="foundation",
            image="example.com/trainer:1",
            command=["train.py"],
            instance_type="p5.48xlarge",
            node_pool="h100",
            nodes_min=1,
            nodes_max=2,
            checkpoint_dir="/fsx/runs/run",
            queue_name="foundation",
        )
    )
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["terminationGracePeriodSeconds"] == TRAINER_GRACE_S
    # A TrainJob's pods take their grace from the runtime: the same.
    from manifests.jobs.trainjob import cluster_training_runtimes

    for runtime in cluster_training_runtimes():
        (node,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        pod = node["template"]["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] == TRAINER_GRACE_S
    drainer = _nvsentinel(plans("pretrain"))["node-drainer"]
    # Immediate mode: an Eviction (PDBs hold) whose grace period is this timeout.
    assert drainer["evictionTimeoutInSeconds"] == str(TRAINER_GRACE_S)
    assert drainer["userNamespaces"] == [{"name": "*", "mode": "Immediate"}]
    system = re.compile(drainer["systemNamespaces"])
    for namespace in (
        "kube-system",
        "gpu-operator",
        "nvsentinel",
        "cert-manager",
        "kueue-system",
        "kubeflow-system",
        "jobset-system",
    ):
        assert system.match(namespace), namespace
    assert not system.match("foundation")
    assert not system.match("kube-system-x")


def test_nvsentinel_watches_gpu_nodes_and_runs_its_controllers_on_the_system_pool(plans) -> None:
    plan = plans("pretrain")
    values = _nvsentinel(plan)
    # The monitors tolerate the GPU taint and our quarantine taint: they see a node recover.
    assert values["global"]["tolerations"] == [{"operator": "Exists"}]
    system = {POOL_LABEL: "system"}
    assert values["global"]["systemNodeSelector"] == system
    mongodb = values["mongodb-store"]["mongodb"]
    assert mongodb["nodeSelector"] == system
    assert values["mongodb-store"]["job"]["nodeSelector"] == system
    assert mongodb["persistence"] == {"storageClass": STORAGE_CLASS, "size": "8Gi"}
    [storage_class] = plan.by_type("kubernetes:storage.k8s.io/v1:StorageClass")
    assert storage_class.inputs["metadata"]["name"] == STORAGE_CLASS
    releases = _releases(plan)
    assert _system(plan) in releases["nvsentinel"].dependencies
    assert releases["cert-manager"].urn in releases["nvsentinel"].dependencies
    cert_manager = releases["cert-manager"].inputs["values"]
    assert cert_manager == {
        "crds": {"enabled": True, "keep": True},
        "global": {"nodeSelector": system},
    }


def test_gpu_operator_daemonsets_stay_on_a_quarantined_node(plans) -> None:
    values = _releases(plans("pretrain"))["gpu-operator"].inputs["values"]
    taint = {"key": QUARANTINE_TAINT, "operator": "Exists", "effect": "NoSchedule"}
    assert taint in values["daemonsets"]["tolerations"]


def test_nvsentinel_leaves_remediation_to_eks_node_auto_repair(plans) -> None:
    plan = plans("pretrain")
    values = _nvsentinel(plan)["global"]
    assert values["faultRemediation"] == {"enabled": False}
    assert values["janitor"] == {"enabled": False}
    for module in ("gpuHealthMonitor", "syslogHealthMonitor", "faultQuarantine", "nodeDrainer"):
        assert values[module] == {"enabled": True}, module
    repair = [
        g.inputs["nodeRepairConfig"] for g in plan.by_type(NODE_GROUP) if g.name.startswith("gpu-")
    ]
    assert repair and all(r == {"enabled": True} for r in repair)


@pytest.mark.parametrize(
    ("section", "overrides"),
    [
        ("monitoring", {"enabled": False}),  # no EBS CSI driver nor gp3 class for its MongoDB
        (
            "node_pools",
            {  # Trainium only: no NVIDIA GPU to watch
                "a100-spot": {"instance_type": "trn1.32xlarge"},
                "h100": {"instance_type": "trn1.32xlarge"},
            },
        ),
    ],
)
def test_nvsentinel_is_off_without_what_it_needs(synth, section: str, overrides: dict) -> None:
    releases = _releases(synth(with_section("finetune", section, overrides)))
    assert "nvsentinel" not in releases
    assert "cert-manager" not in releases


def test_nvsentinel_alone_refuses_to_run_without_the_gpu_operator() -> None:
    from components.addons import Addons, AddonsArgs
    from llmp.plan.synth import run

    def program() -> None:
        Addons(
            "addons",
            AddonsArgs(
                gpu_operator=False,
                nvsentinel=True,
                cluster_name="c",
                region="us-east-1",
                vpc_id="vpc-1",
                pools=[],
            ),
        )

    with pytest.raises(ValueError, match="needs gpu_operator"):
        run("alone", "us-east-1", program)
