"""NodeAutoscaler: the Cluster Autoscaler pinned from the catalog, scoped to this cluster's
elastic pools (discovery and IAM), through Pod Identity, on the system pool; the
ProvisioningRequest CRD before it and before Kueue; nothing where every pool is fixed."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from components.managed_nodes import CA_ENABLED_TAG, ELASTIC_TAG, ca_cluster_tag
from components.node_autoscaler import (
    AUTOSCALER_FLAGS,
    NodeAutoscaler,
    NodeAutoscalerArgs,
    autoscaler_policy,
)
from llmp.plan.synth import run
from spec.catalog import catalog
from spec.labels import POOL_LABEL
from tests.conftest import raw_stack

RELEASE = "kubernetes:helm.sh/v3:Release"
CONFIG_FILE = "kubernetes:yaml/v2:ConfigFile"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
NAME = "node-autoscaler"
RESIZE = {"autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"}


def _release(plan) -> Any:
    return plan.one(RELEASE, f"{NAME}-cluster-autoscaler")


def _policy(plan) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(plan.one(ROLE_POLICY, f"{NAME}-iam").inputs["policy"])
    return document


def _allowed(policy: dict[str, Any], action: str, asg_tags: dict[str, str]) -> bool:
    """IAM's answer for `action` on an Auto Scaling group with `asg_tags`, for the only
    shapes this policy uses (Allow statements, Resource `*`, StringEquals on
    aws:ResourceTag/...)."""
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow" and statement["Resource"] == "*"
        if action not in statement["Action"]:
            continue
        conditions = statement.get("Condition", {})
        assert set(conditions) <= {"StringEquals"}
        wanted = conditions.get("StringEquals", {})
        if all(
            asg_tags.get(key.removeprefix("aws:ResourceTag/")) == v for key, v in wanted.items()
        ):
            return True
    return False


@pytest.mark.parametrize("stack", ["finetune", "inference"])
def test_the_chart_and_the_image_are_the_catalogs(plans, stack: str) -> None:
    release = _release(plans(stack)).inputs
    chart = catalog().addon_charts["cluster-autoscaler"]
    pins = catalog().node_autoscaler
    assert release["chart"] == "cluster-autoscaler"
    assert release["version"] == chart.version
    assert release["repositoryOpts"]["repo"] == chart.repository
    assert release["namespace"] == "kube-system"
    image = release["values"]["image"]
    assert f"{image['repository']}:{image['tag']}" == pins.image
    # The image's minor is the cluster's Kubernetes minor.
    minor = catalog().eks.default_version
    assert image["tag"].removeprefix("v").startswith(f"{minor}.")


def test_discovery_is_scoped_to_this_clusters_elastic_groups(plans) -> None:
    plan = plans("finetune")
    cluster = plan.outputs["cluster_name"]
    values = _release(plan).inputs["values"]
    assert values["cloudProvider"] == "aws"
    assert values["awsRegion"] == "us-west-2"  # IMDS hop limit 1: the pod cannot look it up
    assert values["autoDiscovery"]["clusterName"] == cluster
    # EKS's two tags are on every managed node group's ASG; the third only on elastic pools.
    assert values["autoDiscovery"]["tags"] == [
        CA_ENABLED_TAG,
        f"k8s.io/cluster-autoscaler/{cluster}",
        f"{ELASTIC_TAG}=true",
    ]
    # The elastic tag is on the Auto Scaling group of every elastic pool, and of nothing else.
    tagged = {
        r.parent.rsplit("::", 1)[1]
        for r in plan.by_type("aws:autoscaling/tag:Tag")
        if r.inputs["tag"]["key"] == ELASTIC_TAG and r.inputs["tag"]["value"] == "true"
    }
    assert tagged == {"gpu-a100-spot", "gpu-h100"}
    assert not values.get("autoscalingGroups")  # no --nodes beside discovery (upstream README)


def test_flags_keep_training_pods_and_scale_gangs_atomically(plans) -> None:
    args = _release(plans("finetune")).inputs["values"]["extraArgs"]
    assert args["expander"] == "least-waste"
    assert args["balance-similar-node-groups"] is False
    assert args["skip-nodes-with-local-storage"] is True
    assert args["skip-nodes-with-custom-controller-pods"] is True
    assert args["enable-provisioning-requests"] is True
    assert args["kube-api-content-type"] == "application/json"
    assert args["scale-down-unneeded-time"] == "20m"
    assert args["max-node-provision-time"] == "25m"
    # The chart's own defaults (log flags) are merged by helm, not replaced.
    assert {k: args[k] for k in AUTOSCALER_FLAGS} == AUTOSCALER_FLAGS


def test_the_policy_resizes_only_this_clusters_elastic_groups(plans) -> None:
    plan = plans("finetune")
    cluster = plan.outputs["cluster_name"]
    policy = _policy(plan)
    eks_tags = {CA_ENABLED_TAG: "true", ca_cluster_tag(cluster): "owned"}
    elastic = {**eks_tags, ELASTIC_TAG: "true"}
    for action in RESIZE:
        assert _allowed(policy, action, elastic), action
        # The system pool and a fixed fabric carry EKS's tags only.
        assert not _allowed(policy, action, eks_tags), action
        # Another cluster's elastic group.
        other = {CA_ENABLED_TAG: "true", ca_cluster_tag("other"): "owned", ELASTIC_TAG: "true"}
        assert not _allowed(policy, action, other), action
    writes = {
        action
        for statement in policy["Statement"]
        for action in statement["Action"]
        if not action.split(":", 1)[1].startswith(("Describe", "Get"))
    }
    assert writes == RESIZE
    assert _allowed(policy, "eks:DescribeNodegroup", {})  # scale-from-zero of managed groups
    assert policy == autoscaler_policy(cluster)


def test_it_gets_its_role_through_pod_identity(plans) -> None:
    plan = plans("finetune")
    values = _release(plan).inputs["values"]
    association = plan.one(ASSOCIATION, f"{NAME}-iam")
    assert association.inputs["namespace"] == "kube-system"
    assert association.inputs["clusterName"] == plan.outputs["cluster_name"]
    assert association.inputs["serviceAccount"] == values["rbac"]["serviceAccount"]["name"]
    assert values["rbac"]["serviceAccount"]["create"] is True
    role = plan.one("aws:iam/role:Role", f"{NAME}-iam")
    assert association.inputs["roleArn"].endswith(f"role/{role.name}")
    trust = json.loads(role.inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    # Pod Identity injects credentials only into pods created after their association.
    assert association.urn in _release(plan).dependencies


def test_it_runs_on_the_system_pool(plans) -> None:
    plan = plans("inference")
    values = _release(plan).inputs["values"]
    system = plan.one(NODE_GROUP, "cluster-system")
    assert values["nodeSelector"] == {POOL_LABEL: "system"}
    assert system.inputs["labels"][POOL_LABEL] == "system"
    assert system.urn in _release(plan).dependencies
    assert values["replicaCount"] == 1


def test_the_provisioning_request_crd_comes_first_for_the_autoscaler_and_kueue(plans) -> None:
    plan = plans("finetune")
    crd = plan.one(CONFIG_FILE, f"{NAME}-provisioning-request-crd")
    assert crd.inputs["file"] == catalog().node_autoscaler.provisioning_request_crd.url
    assert "cluster-autoscaler-1.35.2/" in crd.inputs["file"]  # the release tag, not a branch
    assert crd.urn in _release(plan).dependencies
    # Kueue looks for the ProvisioningRequest API only when it starts.
    assert crd.urn in plan.one(RELEASE, "addons-kueue").dependencies


def test_a_stack_of_fixed_pools_gets_no_autoscaler(synth) -> None:
    # pretrain without its CPU pool (CPU pools are always elastic): two fixed GPU pools.
    plan = synth({**raw_stack("pretrain"), "llm-platform:cpu_pools": {}})
    assert not [r for r in plan.resources if r.name.startswith(NAME)]
    assert not plan.by_type("aws:autoscaling/tag:Tag")
    kinds = {m["kind"] for m in plan.manifests()}
    assert not kinds & {"AdmissionCheck", "ProvisioningRequestConfig"}


def test_one_elastic_pool_is_enough_to_install_it(synth) -> None:
    raw = {**raw_stack("pretrain"), "llm-platform:cpu_pools": {}}
    pools = raw["llm-platform:node_pools"]
    pools["h100-block"] = {**pools["h100-block"], "elastic": True}
    plan = synth(raw)
    assert _release(plan).inputs["values"]["autoDiscovery"]["clusterName"]
    tags = plan.by_type("aws:autoscaling/tag:Tag")
    assert {r.parent.rsplit("::", 1)[1] for r in tags} == {"gpu-h100-block"}


def test_built_alone_from_its_args() -> None:
    def program() -> None:
        NodeAutoscaler("ca", NodeAutoscalerArgs(cluster_name="c1", region="eu-west-1"))

    plan = run("alone", "eu-west-1", program)
    release = plan.one(RELEASE, "ca-cluster-autoscaler")
    assert release.inputs["values"]["autoDiscovery"]["tags"][1] == "k8s.io/cluster-autoscaler/c1"
    policy = json.loads(plan.one(ROLE_POLICY, "ca-iam").inputs["policy"])
    assert policy == autoscaler_policy("c1")
    for r in plan.resources:
        if r.type != "llmp:addons:NodeAutoscaler":
            assert r.parent is not None and r.parent.endswith("::ca"), r.name
            assert r.name.startswith("ca-"), r.name


def _minutes(duration: str) -> float:
    """A Go duration of hours, minutes and seconds ("1h30m", "25m", "90s") in minutes."""
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert parts and duration, duration
    hours, minutes, seconds = (int(p or 0) for p in parts.groups())
    return hours * 60 + minutes + seconds / 60


def test_kueue_waits_for_pods_longer_than_the_autoscaler_waits_for_nodes(plans) -> None:
    """On an elastic pool Kueue admits a job once its nodes were asked for, and
    waitForPodsReady counts from then: were it shorter than the time the autoscaler gives a
    node to register, every scale-up from zero would be evicted before its nodes joined."""
    plan = plans("finetune")
    kueue_values = plan.one(RELEASE, "addons-kueue").inputs["values"]
    config = yaml.safe_load(kueue_values["managerConfig"]["controllerManagerConfigYaml"])
    provision = _release(plan).inputs["values"]["extraArgs"]["max-node-provision-time"]
    wait = config["waitForPodsReady"]
    assert _minutes(wait["timeout"]) > _minutes(provision) + 4  # and the image pull
    # Recovering a running job's lost pod is not a scale-up from zero: it keeps 10 minutes.
    assert _minutes(wait["recoveryTimeout"]) == 10
