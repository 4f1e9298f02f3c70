"""`llmp verify STACK`: the pretrain plan's EKS cluster, node groups and add-ons deployed into
a moto server on 127.0.0.1 are ACTIVE and healthy, each group on its launch template's
latest version; what breaks that fails with its reason; what moto lacks is "not checked",
never faked. Then the `kubernetes` rows against the fake Kubernetes API of
tests/llmp/kube_fake.py: Kueue, the device plugins, and the devices each GPU node
advertises.

The account is built by `deploy_platform` below from the plan's inputs, independently of
the code under test. What moto cannot answer (add-ons, health issues, a node group that is
not ACTIVE) is tested with botocore's Stubber, whose responses are validated against the
service model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
import urllib3
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from rich.console import Console

from llmp import console, verify
from llmp.clients import aws, kube
from llmp.verify import readiness
from tests.llmp.kube_fake import (
    FakeClock,
    FakeCluster,
    FakeNode,
    api_error,
    cluster_queue,
    daemon_set,
    deployment,
)
from tests.llmp.test_verify import (
    PRIMARY,
    STACK,
    SUBNET,
    assert_one_line_error,
    client,
    deploy_file_system,
    findings_of,
    run_verify,
)
from tests.llmp.test_verify import no_pulumi_cli as no_pulumi_cli  # an autouse fixture

CLUSTER = "llm-platform-pretrain"
H100 = "gpu-h100-nodes"
H100_BLOCK = "gpu-h100-block-nodes"
SYSTEM = "cluster-system"
DATA = "cpu-data-nodes"
"""pretrain's CPU pool `data` (cpu_pools)."""
GROUPS = (SYSTEM, H100, H100_BLOCK, DATA)
ADDONS = (
    "aws-ebs-csi-driver",
    "coredns",
    "eks-node-monitoring-agent",
    "eks-pod-identity-agent",
    "kube-proxy",
    "vpc-cni",
)
ROLE = "arn:aws:iam::123456789012:role/cluster"

Edit = Callable[[str, str, dict[str, Any]], dict[str, Any] | None]
"""(kind, name, create kwargs) -> the kwargs to create with, or None to leave it out."""

# Dummy credentials for every test; no real `pulumi preview` (the autouse no_pulumi_cli).
pytestmark = pytest.mark.usefixtures("aws_env")


# ---------------------------------------------------------------------------
# An account built from the plan
# ---------------------------------------------------------------------------


def resources(plan: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    return [r for r in plan["resources"] if r["type"] == type_]


def keep(kind: str, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    return kwargs


def deploy_platform(plan: dict[str, Any], endpoint: str, edit: Edit = keep) -> dict[str, str]:
    """Create the plan's cluster, launch templates, node groups and add-ons; returns node
    group name -> the id of its launch template."""
    eks, ec2 = client("eks", endpoint), client("ec2", endpoint)
    (cluster,) = resources(plan, verify.CLUSTER)
    inputs = cluster["inputs"]
    kwargs = edit(
        "cluster",
        inputs["name"],
        {
            "name": inputs["name"],
            "version": inputs["version"],
            "roleArn": ROLE,
            "resourcesVpcConfig": {"subnetIds": [SUBNET]},
        },
    )
    if kwargs is not None:
        eks.create_cluster(**kwargs)
    templates = {f"{r['name']}-id": r for r in resources(plan, readiness.LAUNCH_TEMPLATE)}
    launch_templates = {}
    for group in resources(plan, verify.NODE_GROUP):
        g = group["inputs"]
        template = templates[g["launchTemplate"]["id"]]
        created = ec2.create_launch_template(
            # Auto-named in a real deployment: nothing may depend on this name.
            LaunchTemplateName=f"{template['name']}-0a1b2c3",
            LaunchTemplateData={
                "InstanceType": template["inputs"].get("instanceType", "m7i.large")
            },
        )["LaunchTemplate"]
        launch_templates[g["nodeGroupName"]] = created["LaunchTemplateId"]
        ng_kwargs = edit(
            "nodegroup",
            g["nodeGroupName"],
            {
                "clusterName": g["clusterName"],
                "nodegroupName": g["nodeGroupName"],
                "subnets": [SUBNET],
                "nodeRole": ROLE,
                "launchTemplate": {
                    "id": created["LaunchTemplateId"],
                    "version": str(created["LatestVersionNumber"]),
                },
                "scalingConfig": g["scalingConfig"],
                "labels": g["labels"],
            },
        )
        if ng_kwargs is not None:
            eks.create_nodegroup(**ng_kwargs)
    for addon in resources(plan, verify.ADDON):
        with pytest.raises(ClientError):  # moto has no add-ons: their rows cannot pass
            eks.create_addon(clusterName=CLUSTER, addonName=addon["inputs"]["addonName"])
    return launch_templates


def verify_json(plan_file: Path, endpoint: str, *extra: str) -> tuple[int, list[dict[str, str]]]:
    result = run_verify(
        STACK, "--plan", str(plan_file), "--endpoint-url", endpoint, "--json", *extra
    )
    return result.exit_code, findings_of(result)


def by_key(rows: list[dict[str, str]]) -> dict[tuple[str, str], tuple[str, str]]:
    return {(r["resource"], r["check"]): (r["status"], r["reason"]) for r in rows}


def failures(rows: list[dict[str, str]]) -> dict[tuple[str, str], str]:
    return {(r["resource"], r["check"]): r["reason"] for r in rows if r["status"] == "fail"}


AWS_ONLY = ("--only", "cluster", "--only", "nodegroups", "--only", "addons")


# ---------------------------------------------------------------------------
# Against moto
# ---------------------------------------------------------------------------


def test_a_deployed_platform_is_active_and_on_its_latest_templates(
    plan, plan_file, endpoint
) -> None:
    templates = deploy_platform(plan, endpoint)
    deploy_file_system(plan, endpoint)
    code, rows = verify_json(plan_file, endpoint)
    assert code == 0, failures(rows)
    assert [r["area"] for r in rows] == sorted((r["area"] for r in rows), key=verify.AREAS.index), (
        "rows come in the order of the areas"
    )
    # `adopted` rows only where the stack adopts a VPC or cluster (tests/llmp/test_adopted.py).
    assert {r["area"] for r in rows} == set(verify.AREAS) - {"adopted"}
    by = by_key(rows)
    assert by[(CLUSTER, "status")] == ("pass", "ACTIVE")
    # moto reports no cluster health: not checked, not a pass.
    assert by[(CLUSTER, "health")] == ("not checked", "the endpoint does not report health")
    for group in GROUPS:
        assert by[(group, "status")] == ("pass", "ACTIVE")
        assert by[(group, "health")] == ("pass", "no health issues")
        assert by[(group, "launch template")] == (
            "pass",
            f"{templates[group]} version 1, the latest",
        )
    assert {by[(a, "status")] for a in ADDONS} == {("not checked", verify.ADDONS_NOT_IMPLEMENTED)}
    # Without a kubeconfig and a Pulumi CLI, the rest says how to check it.
    kubernetes = [r for r in rows if r["area"] == "kubernetes"]
    assert kubernetes and {(r["status"], r["reason"]) for r in kubernetes} == {
        ("not checked", readiness.ENABLE)
    }
    (drift_row,) = [r for r in rows if r["area"] == "drift"]
    assert drift_row["status"] == "not checked"


def test_a_group_left_on_an_older_template_version_fails(plan, plan_file, endpoint) -> None:
    templates = deploy_platform(plan, endpoint)
    client("ec2", endpoint).create_launch_template_version(
        LaunchTemplateId=templates[H100],
        SourceVersion="1",
        LaunchTemplateData={"MetadataOptions": {"HttpTokens": "required"}},
    )
    code, rows = verify_json(plan_file, endpoint, "--only", "nodegroups")
    assert code == 1
    assert failures(rows) == {
        (H100, "launch template"): (f"runs {templates[H100]} version 1; the template's latest is 2")
    }


def test_a_missing_node_group_fails(plan, plan_file, endpoint) -> None:
    def without_block(kind: str, name: str, kwargs: dict[str, Any]) -> dict[str, Any] | None:
        return None if kind == "nodegroup" and name == H100_BLOCK else kwargs

    deploy_platform(plan, endpoint, without_block)
    code, rows = verify_json(plan_file, endpoint, "--only", "nodegroups")
    assert code == 1
    assert failures(rows) == {
        (H100_BLOCK, "status"): f"no node group {H100_BLOCK} in cluster {CLUSTER}"
    }


def test_nothing_deployed_fails_the_cluster_and_everything_in_it(plan_file, endpoint) -> None:
    code, rows = verify_json(plan_file, endpoint, *AWS_ONLY)
    assert code == 1
    missing = f"no EKS cluster {CLUSTER} in {PRIMARY}"
    assert failures(rows)[(CLUSTER, "status")] == missing
    inside = [r for r in rows if r["area"] in ("nodegroups", "addons")]
    assert len(inside) == len(GROUPS) + len(ADDONS)
    assert {(r["status"], r["reason"]) for r in inside} == {
        ("fail", f"its cluster {CLUSTER}: {missing}")
    }


def write_outputs(tmp_path: Path, outputs: dict[str, Any]) -> Path:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    return path


def test_the_outputs_name_the_cluster_and_node_groups(
    plan, plan_file, endpoint, tmp_path: Path
) -> None:
    def renamed(kind: str, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        if kind == "nodegroup" and name == H100:
            return {**kwargs, "nodegroupName": f"{H100}-v2"}
        return kwargs

    deploy_platform(plan, endpoint, renamed)
    outputs = {"region": PRIMARY, "cluster_name": CLUSTER, "node_pools": {"h100": f"{H100}-v2"}}
    path = write_outputs(tmp_path, outputs)
    code, rows = verify_json(plan_file, endpoint, "--outputs", str(path), "--only", "nodegroups")
    assert code == 0, failures(rows)
    assert by_key(rows)[(f"{H100}-v2", "status")] == ("pass", "ACTIVE")
    path = write_outputs(tmp_path, {**outputs, "cluster_name": "llm-platform-other"})
    code, rows = verify_json(plan_file, endpoint, "--outputs", str(path), "--only", "cluster")
    assert code == 1
    assert failures(rows) == {
        ("llm-platform-other", "status"): f"no EKS cluster llm-platform-other in {PRIMARY}"
    }


def table_rows(text: str) -> list[dict[str, str]]:
    """The body rows of a rich table rendered without wrapping."""
    rows = []
    for line in text.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            rows.append(dict(zip(("resource", "check", "status", "reason"), cells, strict=True)))
    return rows


def test_the_table_and_the_json_carry_the_same_rows(
    plan, plan_file, endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy_platform(plan, endpoint, lambda kind, name, kw: None if name == SYSTEM else kw)
    deploy_file_system(plan, endpoint)
    monkeypatch.setattr(console, "out", Console(width=400, no_color=True))
    table = run_verify(STACK, "--plan", str(plan_file), "--endpoint-url", endpoint)
    assert table.exit_code == 1
    code, rows = verify_json(plan_file, endpoint)
    assert code == 1
    assert table_rows(table.stdout) == [
        {k: r[k] for k in ("resource", "check", "status", "reason")} for r in rows
    ]
    counts = {s: sum(r["status"] == s for r in rows) for s in ("pass", "fail", "not checked")}
    assert counts["fail"] == 1
    assert f"{counts['pass']} pass, 1 fail, {counts['not checked']} not checked" in table.stdout
    assert "pretrain: what Pulumi cannot see, us-east-1" in table.stdout


# ---------------------------------------------------------------------------
# As AWS answers: the Stubber
# ---------------------------------------------------------------------------


def stubbed(service: str) -> tuple[Any, Stubber]:
    c = boto3.client(service, region_name=PRIMARY)
    return c, Stubber(c)


def found_cluster() -> verify.ClusterState:
    row = verify.Finding(CLUSTER, "status", "pass", "ACTIVE")
    return verify.ClusterState(CLUSTER, row, {"name": CLUSTER})


def test_a_cluster_with_health_issues_fails(plan) -> None:
    eks, stub = stubbed("eks")
    issue = {
        "code": "Ec2SubnetNotFound",
        "message": "One or more of the subnets\nassociated with the cluster no longer exist.",
        "resourceIds": ["subnet-0a1b2c3d"],
    }
    stub.add_response(
        "describe_cluster",
        {"cluster": {"name": CLUSTER, "status": "UPDATING", "health": {"issues": [issue]}}},
        {"name": CLUSTER},
    )
    with stub:
        rows, state = verify.check_cluster(eks, CLUSTER, PRIMARY)
    assert state.description is not None
    assert [(r.check, r.status, r.reason) for r in rows] == [
        ("status", "fail", "UPDATING, not ACTIVE"),
        (
            "health",
            "fail",
            "Ec2SubnetNotFound: One or more of the subnets associated with the cluster no "
            "longer exist. (subnet-0a1b2c3d)",
        ),
    ]


def test_a_degraded_node_group_fails_with_its_issues() -> None:
    eks, stub = stubbed("eks")
    issues = [
        {"code": "AsgInstanceLaunchFailures", "message": "InsufficientInstanceCapacity"},
        *[{"code": "NodeCreationFailure", "message": f"node {i}"} for i in range(4)],
    ]
    stub.add_response(
        "describe_nodegroup",
        {"nodegroup": {"nodegroupName": H100, "status": "DEGRADED", "health": {"issues": issues}}},
        {"clusterName": CLUSTER, "nodegroupName": H100},
    )
    with stub:
        rows = verify.check_node_group(eks, None, H100, found_cluster(), template=False)
    assert [(r.check, r.status, r.reason) for r in rows] == [
        ("status", "fail", "DEGRADED, not ACTIVE"),
        (
            "health",
            "fail",
            "AsgInstanceLaunchFailures: InsufficientInstanceCapacity; NodeCreationFailure: "
            "node 0; NodeCreationFailure: node 1; 2 more",
        ),
    ]


def test_the_launch_template_version_as_aws_reports_it() -> None:
    ec2, stub = stubbed("ec2")
    template = {"LaunchTemplateId": "lt-0a1b2c3d4e5f60718", "LatestVersionNumber": 3}
    for default in (3, 2):
        stub.add_response(
            "describe_launch_templates",
            {"LaunchTemplates": [{**template, "DefaultVersionNumber": default}]},
            {"LaunchTemplateIds": ["lt-0a1b2c3d4e5f60718"]},
        )
    stub.add_client_error(
        "describe_launch_templates",
        service_error_code="InvalidLaunchTemplateId.NotFound",
        http_status_code=400,
    )
    ref = {"id": "lt-0a1b2c3d4e5f60718", "version": "$Default"}
    with stub:
        latest = verify.check_launch_template(ec2, H100, {**ref, "version": "$Latest"})
        older = verify.check_launch_template(ec2, H100, ref)
        gone = verify.check_launch_template(ec2, H100, ref)
    assert (latest.status, latest.reason) == ("pass", "lt-0a1b2c3d4e5f60718 version 3, the latest")
    assert (older.status, older.reason) == (
        "fail",
        "runs lt-0a1b2c3d4e5f60718 version 2; the template's latest is 3",
    )
    assert (gone.status, gone.reason) == (
        "fail",
        "its launch template lt-0a1b2c3d4e5f60718 does not exist",
    )
    none = verify.check_launch_template(ec2, H100, None)
    assert (none.status, none.reason) == ("fail", "the node group runs no launch template")


def test_add_ons_as_aws_reports_them() -> None:
    eks, stub = stubbed("eks")
    stub.add_response(
        "describe_addon",
        {"addon": {"addonName": "vpc-cni", "status": "ACTIVE", "health": {"issues": []}}},
        {"clusterName": CLUSTER, "addonName": "vpc-cni"},
    )
    issue = {"code": "InsufficientNumberOfReplicas", "message": "The add-on is unhealthy."}
    stub.add_response(
        "describe_addon",
        {"addon": {"addonName": "coredns", "status": "DEGRADED", "health": {"issues": [issue]}}},
        {"clusterName": CLUSTER, "addonName": "coredns"},
    )
    stub.add_client_error(
        "describe_addon",
        service_error_code="ResourceNotFoundException",
        http_status_code=404,
        expected_params={"clusterName": CLUSTER, "addonName": "kube-proxy"},
    )
    with stub:
        rows = [
            row
            for addon in ("vpc-cni", "coredns", "kube-proxy")
            for row in verify.check_addon(eks, addon, found_cluster())
        ]
    assert {(r.resource, r.check): (r.status, r.reason) for r in rows} == {
        ("vpc-cni", "status"): ("pass", "ACTIVE"),
        ("vpc-cni", "health"): ("pass", "no health issues"),
        ("coredns", "status"): ("fail", "DEGRADED, not ACTIVE"),
        ("coredns", "health"): (
            "fail",
            "InsufficientNumberOfReplicas: The add-on is unhealthy.",
        ),
        ("kube-proxy", "status"): ("fail", f"not installed on {CLUSTER}"),
    }


def test_refused_credentials_stop_the_run() -> None:
    eks, stub = stubbed("eks")
    stub.add_client_error(
        "describe_cluster",
        service_error_code="UnrecognizedClientException",
        service_message="The security token included in the request is invalid.",
        http_status_code=403,
    )
    with stub, pytest.raises(aws.CredentialsRejected, match="security token"):
        verify.check_cluster(eks, CLUSTER, PRIMARY)


def test_an_emulator_lacking_an_api_is_told_apart_from_aws_failing() -> None:
    route_missing = ClientError(
        {
            "Error": {"Code": "404", "Message": "<!doctype html>"},
            "ResponseMetadata": {"HTTPStatusCode": 404, "HTTPHeaders": {}},
        },
        "DescribeAddon",
    )
    typed_not_found = ClientError(
        {
            "Error": {"Code": "ResourceNotFoundException", "Message": "No addon"},
            "ResponseMetadata": {
                "HTTPStatusCode": 404,
                "HTTPHeaders": {"x-amzn-errortype": "ResourceNotFoundException"},
            },
        },
        "DescribeAddon",
    )
    assert aws.unsupported(route_missing, emulated=True)
    assert not aws.unsupported(route_missing, emulated=False)
    assert not aws.unsupported(typed_not_found, emulated=True)


# ---------------------------------------------------------------------------
# The kubernetes rows, against the fake Kubernetes API
# ---------------------------------------------------------------------------

H100_NODES = [FakeNode(f"ip-10-10-0-{10 + i}.ec2.internal", "h100") for i in range(16)]
GPU_PLUGIN = "nvidia-device-plugin-daemonset"
EFA_PLUGIN = "aws-efa-k8s-device-plugin"


def healthy_cluster(nodes: list[FakeNode] | None = None) -> FakeCluster:
    """The pretrain stack's cluster as it should run: Kueue up, queues Active, plugins
    ready on the 16 h100 nodes (the h100-block pool has none)."""
    nodes = [FakeNode(n.name, n.pool) for n in H100_NODES] if nodes is None else nodes
    return FakeCluster(FakeClock(), nodes).add(
        deployment("kueue-system", "kueue-controller-manager"),
        cluster_queue("foundation"),
        cluster_queue("spare"),
        daemon_set("gpu-operator", GPU_PLUGIN, desired=16, ready=16),
        daemon_set("kube-system", EFA_PLUGIN, desired=16, ready=16, release=EFA_PLUGIN),
        daemon_set("kube-system", f"{EFA_PLUGIN}-privileged", 0, 0, release=EFA_PLUGIN),
        daemon_set("kube-system", "aws-node", desired=19, ready=19),
    )


def kube_rows(plans, fake: FakeCluster | None) -> dict[tuple[str, str], tuple[str, str]]:
    rows = readiness.check(plans(STACK), fake.apis() if fake else None)
    assert {r.area for r in rows} == {"kubernetes"}
    return {(r.resource, r.check): (r.status, r.reason) for r in rows}


def test_a_cluster_that_runs_what_the_plan_installs_passes(plans) -> None:
    fake = healthy_cluster()
    assert kube_rows(plans, fake) == {
        ("kueue-system/kueue-controller-manager", "Kueue controller"): (
            "pass",
            "1 of 1 replicas available",
        ),
        ("foundation", "ClusterQueue"): ("pass", "Active"),
        ("spare", "ClusterQueue"): ("pass", "Active"),
        (f"gpu-operator/{GPU_PLUGIN}", "device plugin"): ("pass", f"{GPU_PLUGIN} 16 of 16 ready"),
        (f"kube-system/{EFA_PLUGIN}", "device plugin"): (
            "pass",
            f"{EFA_PLUGIN} 16 of 16 ready; "
            f"{EFA_PLUGIN}-privileged 0 of 0 ready (no node to run on)",
        ),
        ("h100", "devices advertised"): (
            "pass",
            "16 Ready nodes advertise 8 nvidia.com/gpu and 32 vpc.amazonaws.com/efa",
        ),
        ("h100-block", "devices advertised"): (
            "not checked",
            "no Ready node in the pool (0 nodes)",
        ),
    }
    # Only reads: get and list.
    assert set(fake.calls) == {
        "read_namespaced_deployment",
        "get_cluster_custom_object",
        "read_namespaced_daemon_set",
        "list_namespaced_daemon_set",
        "list_node",
    }


def test_what_does_not_run_fails_with_its_reason(plans) -> None:
    nodes = [FakeNode(n.name, n.pool) for n in H100_NODES]
    nodes[0].gpus = 0  # the device plugin advertises nothing on it
    nodes[1].efa = 16
    nodes[2].ready = False  # not judged: a NotReady node advertises what it last did
    fake = healthy_cluster(nodes)
    fake.add(
        deployment("kueue-system", "kueue-controller-manager", replicas=2, available=0),
        cluster_queue(
            "spare",
            active=False,
            reason="FlavorNotFound",
            message="Can't admit new workloads: references missing ResourceFlavor(s): pool-h100.",
        ),
        daemon_set("gpu-operator", GPU_PLUGIN, desired=16, ready=14),
    )
    del fake.daemon_sets[("kube-system", EFA_PLUGIN)]
    del fake.daemon_sets[("kube-system", f"{EFA_PLUGIN}-privileged")]
    got = kube_rows(plans, fake)
    assert {k: v for k, v in got.items() if v[0] == "fail"} == {
        ("kueue-system/kueue-controller-manager", "Kueue controller"): (
            "fail",
            "0 of 2 replicas available: MinimumReplicasUnavailable",
        ),
        ("spare", "ClusterQueue"): (
            "fail",
            "not Active: FlavorNotFound: Can't admit new workloads: references missing "
            "ResourceFlavor(s): pool-h100.",
        ),
        (f"gpu-operator/{GPU_PLUGIN}", "device plugin"): ("fail", f"{GPU_PLUGIN} 14 of 16 ready"),
        (f"kube-system/{EFA_PLUGIN}", "device plugin"): (
            "fail",
            f"no DaemonSet of Helm release {EFA_PLUGIN} in kube-system",
        ),
        ("h100", "devices advertised"): (
            "fail",
            f"2 of 15 Ready nodes: {nodes[0].name} advertises 0 of 8 nvidia.com/gpu; "
            f"{nodes[1].name} advertises 16 of 32 vpc.amazonaws.com/efa; 1 not Ready",
        ),
    }


def test_a_missing_object_and_a_refused_read_fail_their_rows(plans) -> None:
    fake = healthy_cluster()
    del fake.deployments[("kueue-system", "kueue-controller-manager")]
    del fake.cluster_objects[("clusterqueues", "spare")]
    fake.fail["list_node"] = api_error(
        403, "Forbidden", 'nodes is forbidden: User "dev" cannot list resource "nodes"'
    )
    got = kube_rows(plans, fake)
    assert got[("kueue-system/kueue-controller-manager", "Kueue controller")] == (
        "fail",
        "no Deployment kueue-system/kueue-controller-manager",
    )
    assert got[("spare", "ClusterQueue")] == ("fail", "no ClusterQueue spare")
    assert got[("h100", "devices advertised")] == (
        "fail",
        'cannot read nodes of pool h100: 403 nodes is forbidden: User "dev" cannot list '
        'resource "nodes"',
    )


def test_an_unusable_cluster_is_bad_input(plans) -> None:
    fake = healthy_cluster()
    fake.fail["read_namespaced_deployment"] = api_error(401, "Unauthorized", "Unauthorized")
    with pytest.raises(kube.KubeError, match=r"refused to read Deployment .*: 401 Unauthorized"):
        readiness.check(plans(STACK), fake.apis())
    fake = healthy_cluster()
    fake.fail["read_namespaced_deployment"] = urllib3.exceptions.MaxRetryError(
        None,  # type: ignore[arg-type]
        "/apis/apps/v1",
        urllib3.exceptions.NewConnectionError(None, "timed out"),  # type: ignore[arg-type]
    )
    with pytest.raises(kube.KubeError, match=f"cannot reach the cluster API at {fake.host}"):
        readiness.check(plans(STACK), fake.apis())


@pytest.mark.parametrize("stack", ["pretrain", "finetune", "inference"])
def test_every_stack_implies_its_checks(plans, stack: str) -> None:
    checks = {(c.resource, c.check) for c in readiness.checks(plans(stack))}
    assert ("kueue-system/kueue-controller-manager", "Kueue controller") in checks
    assert (f"gpu-operator/{GPU_PLUGIN}", "device plugin") in checks
    assert ("spare", "ClusterQueue") in checks
    pools = {c.resource for c in readiness.checks(plans(stack)) if c.check == "devices advertised"}
    expected = {"pretrain": {"h100", "h100-block"}, "finetune": {"h100", "a100-spot"}}
    assert pools == expected.get(stack, {"h200", "l40s"})
    efa = (f"kube-system/{EFA_PLUGIN}", "device plugin") in checks
    assert efa is (stack != "inference")  # the inference stack has no EFA pool


def test_cli_with_a_kubeconfig_checks_the_cluster(
    plan_file, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = healthy_cluster()
    seen = []

    def load(kubeconfig: str | None, context: str | None) -> kube.KubeApis:
        seen.append((kubeconfig, context))
        return fake.apis()

    monkeypatch.setattr(kube, "load_apis", load)
    args = ("--only", "kubernetes", "--plan", str(plan_file), "--json")
    result = run_verify(STACK, *args, "--kubeconfig", "kubeconfig")
    assert result.exit_code == 0, result.output
    rows = findings_of(result)
    assert {r["status"] for r in rows} == {"pass", "not checked"} and len(rows) == 7
    assert seen == [("kubeconfig", None)]
    fake.nodes[0].gpus = 0
    result = run_verify(STACK, *args, "--context", "pretrain")
    assert result.exit_code == 1 and seen[-1] == (None, "pretrain")


def test_cli_with_an_unusable_kubeconfig_is_bad_input(plan_file, tmp_path: Path) -> None:
    missing = tmp_path / "kubeconfig"
    result = run_verify(STACK, "--plan", str(plan_file), "--kubeconfig", str(missing))
    assert_one_line_error(result, f"cannot use kubeconfig {missing}")
