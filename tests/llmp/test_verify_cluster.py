"""`llmp verify STACK`: the pretrain plan's EKS cluster, node groups (with their EFA launch
templates) and add-ons, deployed into a moto server on 127.0.0.1 beside its storage, verify
clean; one drift per area fails with its reason; what moto lacks is "not checked", never faked.

The account is built by `deploy_platform` below straight from the plan's inputs, the way the
AWS provider would apply them, independently of the code under test: it finds each launch
template and KMS key through the mock runtime's ids (`<name>-id`, `<name>-key-id`), where the
code under test follows the plan's dependency edges and the templates' `Name` tags.

What moto cannot answer (add-ons, placement groups, accessConfig and other fields it does not
report) is tested with botocore's Stubber, whose responses are validated against the service
model, so the comparison logic is covered without faking the account.
"""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from rich.console import Console
from typer.testing import CliRunner

from llmp import cli, verify
from llmp.cli import app
from tests.llmp.test_verify import (
    ACCOUNT,
    PRIMARY,
    STACK,
    SUBNET,
    assert_one_line_error,
    client,
    deploy_storage,
    findings_of,
    provider_regions,
)

CLUSTER = "llm-platform-pretrain"
H100 = "gpu-h100-nodes"
H100_BLOCK = "gpu-h100-block-nodes"
SYSTEM = "cluster-system"
KEY_ALIAS = "alias/llm-platform-pretrain-eks-secrets"

Edit = Callable[[str, str, dict[str, Any]], dict[str, Any] | None]
"""(kind, name, create kwargs) -> the kwargs to create with, or None to leave it out."""

# Dummy credentials for every test; `endpoint`, `plan` (of STACK) and `plan_file` are the
# shared fixtures of tests/conftest.py.
pytestmark = pytest.mark.usefixtures("aws_env")


# ---------------------------------------------------------------------------
# An account built from the plan
# ---------------------------------------------------------------------------


@dataclass
class Deployed:
    launch_templates: dict[str, str]
    """Node group name -> the id of its launch template."""
    addons: bool
    """Whether the endpoint could create the add-ons (moto cannot)."""


def resources(plan: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    return [r for r in plan["resources"] if r["type"] == type_]


def stack_tags(plan: dict[str, Any], resource: dict[str, Any]) -> dict[str, str]:
    (provider,) = [
        r for r in resources(plan, "pulumi:providers:aws") if r["urn"] == resource["provider"]
    ]
    return json.loads(provider["inputs"]["defaultTags"])["tags"]


def keep(kind: str, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    return kwargs


def launch_template_data(inputs: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {
        "MetadataOptions": {
            "HttpEndpoint": inputs["metadataOptions"]["httpEndpoint"],
            "HttpTokens": inputs["metadataOptions"]["httpTokens"],
            "HttpPutResponseHopLimit": inputs["metadataOptions"]["httpPutResponseHopLimit"],
        },
        "BlockDeviceMappings": [
            {
                "DeviceName": b["deviceName"],
                "Ebs": {
                    "VolumeSize": b["ebs"]["volumeSize"],
                    "VolumeType": b["ebs"]["volumeType"],
                    "Encrypted": b["ebs"]["encrypted"] == "true",
                },
            }
            for b in inputs["blockDeviceMappings"]
        ],
    }
    if "networkInterfaces" in inputs:
        data["NetworkInterfaces"] = [
            {
                "NetworkCardIndex": nic["networkCardIndex"],
                "DeviceIndex": nic["deviceIndex"],
                "InterfaceType": nic["interfaceType"],
                "Groups": ["sg-0cluster0000000000", "sg-0efa0000000000000"],
                "DeleteOnTermination": nic["deleteOnTermination"] == "true",
            }
            for nic in inputs["networkInterfaces"]
        ]
    if "placement" in inputs:
        # The real placement group is auto-named too: another suffix than the mock's.
        data["Placement"] = {"GroupName": f"gpu-placement-{secrets.token_hex(4)}"}
    if "instanceType" in inputs:
        data["InstanceType"] = inputs["instanceType"]
    if "instanceMarketOptions" in inputs:
        data["InstanceMarketOptions"] = {
            "MarketType": inputs["instanceMarketOptions"]["marketType"]
        }
    if "capacityReservationSpecification" in inputs:
        target = inputs["capacityReservationSpecification"]["capacityReservationTarget"]
        data["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": target["capacityReservationId"]}
        }
    return data


def deploy_platform(plan: dict[str, Any], endpoint: str, edit: Edit = keep) -> Deployed:
    """Create the plan's KMS keys, EKS cluster, launch templates, node groups and add-ons."""
    region = provider_regions(plan)[resources(plan, "aws:eks/cluster:Cluster")[0]["provider"]]
    eks, ec2, kms = (client(s, endpoint, region) for s in ("eks", "ec2", "kms"))

    key_arns: dict[str, str] = {}
    for key in resources(plan, "aws:kms/key:Key"):
        if provider_regions(plan)[key["provider"]] != region:
            continue
        meta = kms.create_key(Description=key["inputs"]["description"])["KeyMetadata"]
        key_arns[key["name"]] = meta["Arn"]
        for alias in resources(plan, "aws:kms/alias:Alias"):
            if alias["inputs"]["targetKeyId"] == f"{key['name']}-key-id":
                kms.create_alias(AliasName=alias["inputs"]["name"], TargetKeyId=meta["KeyId"])

    (cluster,) = resources(plan, "aws:eks/cluster:Cluster")
    inputs = cluster["inputs"]
    mock_key = inputs["encryptionConfig"]["provider"]["keyArn"]
    kwargs = edit(
        "cluster",
        inputs["name"],
        {
            "name": inputs["name"],
            "version": inputs["version"],
            "roleArn": f"arn:aws:iam::{ACCOUNT}:role/cluster-control-plane",
            "resourcesVpcConfig": {
                "subnetIds": [SUBNET],
                "endpointPrivateAccess": inputs["vpcConfig"]["endpointPrivateAccess"],
                "endpointPublicAccess": inputs["vpcConfig"]["endpointPublicAccess"],
            },
            "logging": {
                "clusterLogging": [{"types": inputs["enabledClusterLogTypes"], "enabled": True}]
            },
            "encryptionConfig": [
                {
                    "resources": inputs["encryptionConfig"]["resources"],
                    "provider": {"keyArn": key_arns[mock_key.rsplit("/", 1)[-1]]},
                }
            ],
            "accessConfig": inputs["accessConfig"],
            "bootstrapSelfManagedAddons": inputs["bootstrapSelfManagedAddons"],
            "upgradePolicy": inputs["upgradePolicy"],
            "deletionProtection": inputs["deletionProtection"],
            "tags": stack_tags(plan, cluster),
        },
    )
    if kwargs is not None:
        eks.create_cluster(**kwargs)

    templates = {
        f"{r['name']}-id": r for r in resources(plan, "aws:ec2/launchTemplate:LaunchTemplate")
    }
    launch_templates = {}
    for group in resources(plan, "aws:eks/nodeGroup:NodeGroup"):
        g = group["inputs"]
        template = templates[g["launchTemplate"]["id"]]
        tags = {**stack_tags(plan, template), **template["inputs"]["tags"]}
        lt_kwargs = edit(
            "launch_template",
            g["nodeGroupName"],
            {
                # Auto-named in a real deployment: nothing may depend on this name.
                "LaunchTemplateName": f"{template['name']}-{secrets.token_hex(4)}",
                "LaunchTemplateData": launch_template_data(template["inputs"]),
                "TagSpecifications": [
                    {
                        "ResourceType": "launch-template",
                        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                    }
                ],
            },
        )
        if lt_kwargs is None:
            continue
        created = ec2.create_launch_template(**lt_kwargs)["LaunchTemplate"]
        launch_templates[g["nodeGroupName"]] = created["LaunchTemplateId"]
        ng_kwargs = edit(
            "nodegroup",
            g["nodeGroupName"],
            {
                "clusterName": g["clusterName"],
                "nodegroupName": g["nodeGroupName"],
                "version": g["version"],
                "subnets": [SUBNET],
                "nodeRole": f"arn:aws:iam::{ACCOUNT}:role/cluster-node",
                "launchTemplate": {
                    "id": created["LaunchTemplateId"],
                    "version": str(created["LatestVersionNumber"]),
                },
                # A Capacity Block group names its type in the template only.
                **({"instanceTypes": g["instanceTypes"]} if "instanceTypes" in g else {}),
                "amiType": g["amiType"],
                "capacityType": g["capacityType"],
                "scalingConfig": g["scalingConfig"],
                "labels": g["labels"],
                "taints": g["taints"],
                "updateConfig": g["updateConfig"],
                "nodeRepairConfig": g["nodeRepairConfig"],
                "tags": stack_tags(plan, group),
            },
        )
        if ng_kwargs is not None:
            eks.create_nodegroup(**ng_kwargs)

    addons = True
    for addon in resources(plan, "aws:eks/addon:Addon"):
        a = addon["inputs"]
        try:
            eks.create_addon(
                clusterName=a["clusterName"],
                addonName=a["addonName"],
                addonVersion=a["addonVersion"],
                **(
                    {"configurationValues": a["configurationValues"]}
                    if "configurationValues" in a
                    else {}
                ),
            )
        except ClientError:
            addons = False
    return Deployed(launch_templates=launch_templates, addons=addons)


def run_verify(*args: str) -> Any:
    return CliRunner().invoke(app, ["verify", *args])


def by_key(rows: list[dict[str, str]]) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["resource"], r["check"]): r for r in rows}


def verify_json(plan_file: Path, endpoint: str, *extra: str) -> tuple[int, list[dict[str, str]]]:
    result = run_verify(
        STACK, "--plan", str(plan_file), "--endpoint-url", endpoint, "--json", *extra
    )
    return result.exit_code, findings_of(result)


def failures(rows: list[dict[str, str]]) -> dict[tuple[str, str], str]:
    return {(r["resource"], r["check"]): r["reason"] for r in rows if r["status"] == "fail"}


# ---------------------------------------------------------------------------
# A deployment as planned
# ---------------------------------------------------------------------------


def test_a_deployed_platform_passes_every_area(plan, plan_file, endpoint) -> None:
    deploy_platform(plan, endpoint)
    deploy_storage(plan, endpoint)
    code, rows = verify_json(plan_file, endpoint)
    assert code == 0, failures(rows)
    assert not failures(rows)
    assert [r["area"] for r in rows] == sorted((r["area"] for r in rows), key=verify.AREAS.index), (
        "rows are grouped by area in the order cluster, nodegroups, addons, storage"
    )
    assert {r["area"] for r in rows} == set(verify.AREAS)

    by = by_key(rows)
    for check in (
        "exists",
        "stack tags",
        "status",
        "Kubernetes version",
        "control-plane logging",
        "envelope encryption",
        "encryption key",
        "endpoint access",
    ):
        assert by[(CLUSTER, check)]["status"] == "pass", check
    assert by[(CLUSTER, "Kubernetes version")]["reason"] == "1.35"
    assert by[(CLUSTER, "control-plane logging")]["reason"] == (
        "api, audit, authenticator, controllerManager, scheduler"
    )
    assert by[(CLUSTER, "endpoint access")]["reason"] == "private on, public off"
    assert by[(CLUSTER, "encryption key")]["reason"].startswith(f"{KEY_ALIAS} (arn:aws:kms:")

    for group in (SYSTEM, H100, H100_BLOCK):
        for check in (
            "exists",
            "status",
            "Kubernetes version",
            "capacity type",
            "instance types",
            "AMI type",
            "scaling config",
            "labels",
            "taints",
            "launch template",
            "placement group",
        ):
            if (group, check) == (H100_BLOCK, "instance types"):
                check = "template instance type"  # the group names none
            assert by[(group, check)]["status"] == "pass", (group, check)
    assert (H100_BLOCK, "instance types") not in by
    for group in (H100, H100_BLOCK):
        assert by[(group, "EFA interfaces")] == {
            "area": "nodegroups",
            "resource": group,
            "check": "EFA interfaces",
            "status": "pass",
            "reason": "32 (32 efa-only)",
        }
        assert by[(group, "interface layout")]["reason"] == (
            "33 interfaces on 32 cards, card 0 device 0 interface"
        )
    assert by[(SYSTEM, "network interfaces")]["reason"] == "none declared, none in the template"
    assert by[(H100, "placement group")]["reason"].startswith("the template names gpu-placement-")
    assert by[(H100_BLOCK, "placement group")]["reason"] == "none, as declared"
    assert by[(H100_BLOCK, "capacity reservation")]["reason"] == (
        "market capacity-block, reservation cr-0a1b2c3d4e5f60718"
    )
    # A Capacity Block group's type lives in its template; other templates name none.
    assert by[(H100_BLOCK, "template instance type")] == {
        "area": "nodegroups",
        "resource": H100_BLOCK,
        "check": "template instance type",
        "status": "pass",
        "reason": "p5.48xlarge",
    }
    assert (H100, "template instance type") not in by
    assert by[(H100, "launch template")]["reason"].endswith(f"(Name={H100}) version 1, the latest")


def test_what_moto_lacks_is_not_checked_and_not_faked(plan, plan_file, endpoint) -> None:
    deployed = deploy_platform(plan, endpoint)
    # The add-ons could not be created: the rows below are not a pass in disguise.
    assert not deployed.addons
    code, rows = verify_json(
        plan_file, endpoint, "--only", "cluster", "--only", "nodegroups", "--only", "addons"
    )
    assert code == 0, failures(rows)
    not_checked = {
        (r["resource"], r["check"]): r["reason"] for r in rows if r["status"] == "not checked"
    }
    assert (
        not_checked[(CLUSTER, "authentication mode")] == "the endpoint does not report accessConfig"
    )
    assert not_checked[(CLUSTER, "support type")] == "the endpoint does not report upgradePolicy"
    assert not_checked[(CLUSTER, "deletion protection")] == (
        "the endpoint does not report deletionProtection"
    )
    assert (
        not_checked[(H100, "node auto-repair")] == "the endpoint does not report nodeRepairConfig"
    )
    assert not_checked[(H100, "max unavailable")] == "the endpoint does not report updateConfig"
    assert not_checked[(H100, "placement group strategy")] == verify.PLACEMENT_NOT_IMPLEMENTED
    addons = {r["resource"]: r for r in rows if r["area"] == "addons"}
    assert set(addons) == {
        "vpc-cni",
        "kube-proxy",
        "coredns",
        "eks-pod-identity-agent",
        "aws-ebs-csi-driver",
        "eks-node-monitoring-agent",
    }
    assert {(r["check"], r["status"], r["reason"]) for r in addons.values()} == {
        ("status", "not checked", verify.ADDONS_NOT_IMPLEMENTED)
    }


# ---------------------------------------------------------------------------
# One drift per area
# ---------------------------------------------------------------------------


def test_a_wrong_kubernetes_version_fails(plan, plan_file, endpoint) -> None:
    def older(kind: str, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**kwargs, "version": "1.34"} if kind == "cluster" else kwargs

    deploy_platform(plan, endpoint, older)
    code, rows = verify_json(plan_file, endpoint, "--only", "cluster")
    assert code == 1
    assert failures(rows) == {(CLUSTER, "Kubernetes version"): "1.34; the plan says 1.35"}


def test_a_control_plane_log_type_turned_off_fails(plan, plan_file, endpoint) -> None:
    deploy_platform(plan, endpoint)
    (cluster,) = resources(plan, "aws:eks/cluster:Cluster")
    declared = cluster["inputs"]["enabledClusterLogTypes"]
    client("eks", endpoint, PRIMARY).update_cluster_config(
        name=CLUSTER,
        logging={
            "clusterLogging": [
                {"types": [t for t in declared if t != "scheduler"], "enabled": True},
                {"types": ["scheduler"], "enabled": False},
            ]
        },
    )
    code, rows = verify_json(plan_file, endpoint, "--only", "cluster")
    assert code == 1
    assert failures(rows) == {(CLUSTER, "control-plane logging"): "scheduler off"}


def test_secrets_encrypted_with_another_key_fail(plan, plan_file, endpoint) -> None:
    other = client("kms", endpoint, PRIMARY).create_key(Description="not the plan's")
    other_arn = other["KeyMetadata"]["Arn"]

    def another_key(kind: str, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        if kind == "cluster":
            kwargs = copy.deepcopy(kwargs)
            kwargs["encryptionConfig"][0]["provider"]["keyArn"] = other_arn
        return kwargs

    deploy_platform(plan, endpoint, another_key)
    code, rows = verify_json(plan_file, endpoint, "--only", "cluster")
    assert code == 1
    ((key, reason),) = failures(rows).items()
    assert key == (CLUSTER, "encryption key")
    assert reason.startswith(f"{other_arn}; the plan's {KEY_ALIAS} is arn:aws:kms:{PRIMARY}:")


def test_a_launch_template_with_fewer_efa_interfaces_fails(plan, plan_file, endpoint) -> None:
    def half(kind: str, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        if kind == "launch_template" and name == H100:
            kwargs = copy.deepcopy(kwargs)
            nics = kwargs["LaunchTemplateData"]["NetworkInterfaces"]
            kwargs["LaunchTemplateData"]["NetworkInterfaces"] = nics[:17]  # ENA + 16 EFA
        return kwargs

    deploy_platform(plan, endpoint, half)
    code, rows = verify_json(plan_file, endpoint, "--only", "nodegroups")
    assert code == 1
    assert failures(rows) == {
        (H100, "EFA interfaces"): "16 (16 efa-only); the plan declares 32 (32 efa-only)",
        (H100, "interface layout"): (
            "card 16 device 0 missing (plan efa-only); card 17 device 0 missing (plan efa-only); "
            "card 18 device 0 missing (plan efa-only); card 19 device 0 missing (plan efa-only); "
            "12 more"
        ),
    }


def test_an_efa_primary_interface_is_a_layout_difference(plan, plan_file, endpoint) -> None:
    def efa_primary(kind: str, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        if kind == "launch_template" and name == H100:
            kwargs = copy.deepcopy(kwargs)
            kwargs["LaunchTemplateData"]["NetworkInterfaces"][0]["InterfaceType"] = "efa"
        return kwargs

    deploy_platform(plan, endpoint, efa_primary)
    code, rows = verify_json(plan_file, endpoint, "--only", "nodegroups")
    assert code == 1
    assert failures(rows) == {
        (H100, "EFA interfaces"): "33 (1 efa, 32 efa-only); the plan declares 32 (32 efa-only)",
        (H100, "interface layout"): "card 0 device 0 efa (plan interface)",
    }


def test_a_missing_node_group_fails(plan, plan_file, endpoint) -> None:
    def without_block(kind: str, name: str, kwargs: dict[str, Any]) -> dict[str, Any] | None:
        return None if kind == "nodegroup" and name == H100_BLOCK else kwargs

    deploy_platform(plan, endpoint, without_block)
    code, rows = verify_json(plan_file, endpoint, "--only", "nodegroups")
    assert code == 1
    assert failures(rows) == {
        (H100_BLOCK, "exists"): f"no node group {H100_BLOCK} in cluster {CLUSTER}"
    }


def test_a_scaling_change_fails_but_the_desired_size_is_the_autoscalers(
    plan, plan_file, endpoint
) -> None:
    deploy_platform(plan, endpoint)
    eks = client("eks", endpoint, PRIMARY)
    eks.update_nodegroup_config(
        clusterName=CLUSTER,
        nodegroupName=H100,
        scalingConfig={"minSize": 8, "maxSize": 16, "desiredSize": 8},
    )
    eks.update_nodegroup_config(
        clusterName=CLUSTER,
        nodegroupName=H100_BLOCK,
        scalingConfig={"minSize": 0, "maxSize": 16, "desiredSize": 4},
    )
    code, rows = verify_json(plan_file, endpoint, "--only", "nodegroups")
    assert code == 1
    assert failures(rows) == {(H100, "scaling config"): "min 8 (plan 16)"}
    assert by_key(rows)[(H100_BLOCK, "scaling config")] == {
        "area": "nodegroups",
        "resource": H100_BLOCK,
        "check": "scaling config",
        "status": "pass",
        "reason": "min 0, max 16, desired 4 (plan 0; autoscalers own the desired size)",
    }


def test_a_newer_launch_template_version_than_the_node_group_runs_fails(
    plan, plan_file, endpoint
) -> None:
    deployed = deploy_platform(plan, endpoint)
    client("ec2", endpoint, PRIMARY).create_launch_template_version(
        LaunchTemplateId=deployed.launch_templates[H100],
        SourceVersion="1",
        LaunchTemplateData={"MetadataOptions": {"HttpTokens": "optional"}},
    )
    code, rows = verify_json(plan_file, endpoint, "--only", "nodegroups")
    assert code == 1
    assert failures(rows) == {
        (H100, "launch template"): "the node group runs version 1; the template's latest is 2"
    }


def test_a_renamed_node_group_is_found_by_its_pool_label(plan, plan_file, endpoint) -> None:
    def renamed(kind: str, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        if kind == "nodegroup" and name == H100:
            return {**kwargs, "nodegroupName": f"{H100}-v2"}
        return kwargs

    deploy_platform(plan, endpoint, renamed)
    code, rows = verify_json(plan_file, endpoint, "--only", "nodegroups")
    assert code == 1
    assert failures(rows) == {
        (H100, "exists"): (
            f"no node group {H100}; {H100}-v2 carries llm-platform/pool=h100 (checked below)"
        )
    }
    by = by_key(rows)
    assert by[(f"{H100}-v2", "EFA interfaces")]["status"] == "pass"


def test_nothing_deployed_fails_the_cluster_and_everything_in_it(plan_file, endpoint) -> None:
    code, rows = verify_json(
        plan_file, endpoint, "--only", "cluster", "--only", "nodegroups", "--only", "addons"
    )
    assert code == 1
    assert failures(rows)[(CLUSTER, "exists")] == f"no EKS cluster {CLUSTER} in {PRIMARY}"
    inside = [r for r in rows if r["area"] in ("nodegroups", "addons")]
    assert len(inside) == 3 + 6  # node groups, add-ons
    assert {(r["status"], r["reason"]) for r in inside} == {
        ("fail", f"its cluster {CLUSTER}: no EKS cluster {CLUSTER} in {PRIMARY}")
    }


# ---------------------------------------------------------------------------
# Names: stack outputs and tags
# ---------------------------------------------------------------------------


def write_outputs(tmp_path: Path, outputs: dict[str, Any]) -> Path:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    return path


def test_stack_outputs_are_cross_checked_and_name_what_is_verified(
    plan, plan_file, endpoint, tmp_path: Path
) -> None:
    deploy_platform(plan, endpoint)
    outputs = {
        "region": PRIMARY,
        "cluster_name": CLUSTER,
        "node_pools": {"h100": H100, "h100-block": H100_BLOCK},
        "buckets": {"checkpoints": "acme-llm-pretrain-checkpoints"},
        "kubeconfig": "[secret]",
    }
    path = write_outputs(tmp_path, outputs)
    code, rows = verify_json(
        plan_file, endpoint, "--outputs", str(path), "--only", "cluster", "--only", "nodegroups"
    )
    assert code == 0, failures(rows)
    by = by_key(rows)
    assert by[(CLUSTER, "stack output cluster_name")]["reason"] == f"{CLUSTER}, as planned"
    assert by[(H100, "stack output node_pools.h100")]["status"] == "pass"

    # A deployed stack that exports another cluster: that one is looked for, and the
    # difference from the plan is a failure of its own.
    path = write_outputs(tmp_path, {**outputs, "cluster_name": "llm-platform-other"})
    code, rows = verify_json(plan_file, endpoint, "--outputs", str(path), "--only", "cluster")
    assert code == 1
    assert failures(rows) == {
        ("llm-platform-other", "stack output cluster_name"): (
            f"the deployed stack exports llm-platform-other; the plan says {CLUSTER}"
        ),
        ("llm-platform-other", "exists"): f"no EKS cluster llm-platform-other in {PRIMARY}",
    }


def test_a_bucket_output_that_is_not_in_the_plan_fails(
    plan, plan_file, endpoint, tmp_path: Path
) -> None:
    deploy_storage(plan, endpoint)
    path = write_outputs(tmp_path, {"buckets": {"models": "acme-llm-old-models"}})
    code, rows = verify_json(plan_file, endpoint, "--outputs", str(path), "--only", "storage")
    assert code == 1
    assert failures(rows) == {
        ("acme-llm-old-models", "stack output buckets.models"): (
            "acme-llm-old-models is not a bucket of the plan"
        )
    }


def test_a_cluster_the_plan_does_not_name_is_found_by_its_stack_tags(
    plan, endpoint, tmp_path: Path
) -> None:
    deploy_platform(plan, endpoint)
    unnamed = copy.deepcopy(plan)
    for r in resources(unnamed, "aws:eks/cluster:Cluster"):
        del r["inputs"]["name"]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(unnamed))
    code, rows = verify_json(path, endpoint, "--only", "cluster")
    assert code == 0, failures(rows)
    assert by_key(rows)[(CLUSTER, "exists")]["reason"] == (
        "found by its tags stack=pretrain, project=llm-platform"
    )


# ---------------------------------------------------------------------------
# The command line: one table, its JSON twin, both spellings, bad input
# ---------------------------------------------------------------------------


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
    deploy_platform(
        plan,
        endpoint,
        lambda kind, name, kw: {**kw, "version": "1.34"} if kind == "cluster" else kw,
    )
    deploy_storage(plan, endpoint)
    monkeypatch.setattr(cli, "out", Console(width=400, no_color=True))
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


def test_verify_storage_is_verify_only_storage(plan, plan_file, endpoint) -> None:
    deploy_storage(plan, endpoint)
    old = CliRunner().invoke(
        app,
        [
            "verify",
            "storage",
            STACK,
            "--plan",
            str(plan_file),
            "--endpoint-url",
            endpoint,
            "--json",
        ],
    )
    code, new = verify_json(plan_file, endpoint, "--only", "storage")
    assert (old.exit_code, findings_of(old)) == (code, new)
    assert new and {r["area"] for r in new} == {"storage"}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["a", "b"], "llmp verify takes STACK, or `storage STACK`"),
        (["storage", STACK, "--only", "cluster"], "llmp verify takes STACK"),
        ([STACK, "--only", "network"], "--only network: not an area"),
        ([STACK, "--endpoint-url", "127.0.0.1:5000"], "not an http(s) URL"),
    ],
)
def test_a_bad_command_line_is_one_line(args: list[str], fragment: str) -> None:
    assert_one_line_error(run_verify(*args), fragment)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{", "are not JSON"),
        ("[]", "is not an object of stack outputs"),
        ('{"node_pools": ["gpu-h100-nodes"]}', "`node_pools` is not a map"),
        ('{"cluster_name": 3}', "`cluster_name` is not a string"),
    ],
)
def test_unreadable_outputs_are_bad_input(
    plan_file, tmp_path: Path, content: str, fragment: str
) -> None:
    path = tmp_path / "outputs.json"
    path.write_text(content)
    result = run_verify(STACK, "--plan", str(plan_file), "--outputs", str(path))
    assert_one_line_error(result, fragment, str(path))


def test_an_unreachable_endpoint_is_bad_input(plan_file) -> None:
    result = run_verify(STACK, "--plan", str(plan_file), "--endpoint-url", "http://127.0.0.1:9")
    assert_one_line_error(result, "cannot reach the endpoint")


def test_an_unknown_stack_is_bad_input() -> None:
    assert_one_line_error(run_verify("no-such-stack"), "no stack file")


# ---------------------------------------------------------------------------
# What moto cannot answer, with responses validated against the service model
# ---------------------------------------------------------------------------


def stubbed(service: str) -> tuple[Any, Stubber]:
    c = boto3.client(service, region_name=PRIMARY)
    return c, Stubber(c)


def found_cluster(name: str = CLUSTER) -> verify.ClusterState:
    return verify.ClusterState(name, verify.PASS, "arn", {"name": name})


def test_add_ons_as_aws_reports_them(plan) -> None:
    addons = {a.name: a for a in verify.expected_addons(plan)}
    eks, stub = stubbed("eks")
    vpc_cni = addons["vpc-cni"]
    stub.add_response(
        "describe_addon",
        {
            "addon": {
                "addonName": "vpc-cni",
                "clusterName": CLUSTER,
                "status": "ACTIVE",
                "addonVersion": vpc_cni.version,
                "configurationValues": '{"enableNetworkPolicy":"false"}',
            }
        },
        {"clusterName": CLUSTER, "addonName": "vpc-cni"},
    )
    stub.add_response(
        "describe_addon",
        {
            "addon": {
                "addonName": "coredns",
                "clusterName": CLUSTER,
                "status": "DEGRADED",
                "addonVersion": "v1.11.1-eksbuild.1",
            }
        },
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
            *verify.check_addon(eks, vpc_cni, found_cluster()),
            *verify.check_addon(eks, addons["coredns"], found_cluster()),
            *verify.check_addon(eks, addons["kube-proxy"], found_cluster()),
        ]
    got = {(r.resource, r.check): (r.status, r.reason) for r in rows}
    assert got == {
        ("vpc-cni", "status"): ("pass", "ACTIVE"),
        ("vpc-cni", "version"): ("pass", vpc_cni.version),
        ("vpc-cni", "configuration"): (
            "fail",
            '{"enableNetworkPolicy": "false"}; the plan says {"enableNetworkPolicy": "true"}',
        ),
        ("coredns", "status"): ("fail", "DEGRADED, not ACTIVE"),
        ("coredns", "version"): (
            "fail",
            f"v1.11.1-eksbuild.1; the plan says {addons['coredns'].version}",
        ),
        ("kube-proxy", "status"): ("fail", f"not installed on {CLUSTER}"),
    }


def test_cluster_fields_moto_does_not_report_are_compared_as_aws_reports_them(plan) -> None:
    expected = verify.expected_cluster(plan)
    assert expected is not None and expected.key_alias == KEY_ALIAS
    eks, eks_stub = stubbed("eks")
    kms, kms_stub = stubbed("kms")
    key_arn = f"arn:aws:kms:{PRIMARY}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    eks_stub.add_response(
        "describe_cluster",
        {
            "cluster": {
                "name": CLUSTER,
                "arn": f"arn:aws:eks:{PRIMARY}:{ACCOUNT}:cluster/{CLUSTER}",
                "version": "1.35",
                "status": "ACTIVE",
                "tags": {"stack": "pretrain", "project": "llm-platform"},
                "resourcesVpcConfig": {"endpointPrivateAccess": True, "endpointPublicAccess": True},
                "logging": {
                    "clusterLogging": [{"types": list(expected.log_types or ()), "enabled": True}]
                },
                "encryptionConfig": [{"resources": ["secrets"], "provider": {"keyArn": key_arn}}],
                "accessConfig": {"authenticationMode": "API_AND_CONFIG_MAP"},
                "upgradePolicy": {"supportType": "EXTENDED"},
                "deletionProtection": False,
            }
        },
        {"name": CLUSTER},
    )
    kms_stub.add_response(
        "describe_key",
        {"KeyMetadata": {"KeyId": "1234abcd", "Arn": key_arn, "KeyState": "PendingDeletion"}},
        {"KeyId": KEY_ALIAS},
    )
    with eks_stub, kms_stub:
        rows, state = verify.check_cluster(eks, kms, expected)
    assert state.description is not None
    assert {(r.check, r.reason) for r in rows if r.status == "fail"} == {
        ("endpoint access", "private on, public on; the plan says private on, public off"),
        ("encryption key", f"{KEY_ALIAS} ({key_arn}) is PendingDeletion"),
        ("authentication mode", "API_AND_CONFIG_MAP; the plan says API"),
        ("support type", "EXTENDED; the plan says STANDARD"),
        ("deletion protection", "off; the plan says on"),
    }


def test_a_placement_group_as_aws_reports_it(plan) -> None:
    (group,) = [g for g in verify.expected_node_groups(plan) if g.name == H100]
    template = group.launch_template
    assert template is not None and template.placement is not None
    ec2, stub = stubbed("ec2")
    data = {"Placement": {"GroupName": "gpu-h100-placement-0a1b2c3"}}
    stub.add_response(
        "describe_placement_groups",
        {
            "PlacementGroups": [
                {
                    "GroupName": "gpu-h100-placement-0a1b2c3",
                    "Strategy": "spread",
                    "Tags": [{"Key": "Name", "Value": "gpu-h100-placement"}],
                }
            ]
        },
        {"GroupNames": ["gpu-h100-placement-0a1b2c3"]},
    )
    stub.add_client_error(
        "describe_placement_groups",
        service_error_code="InvalidPlacementGroup.Unknown",
        http_status_code=400,
    )
    with stub:
        spread = verify._check_placement(ec2, H100, data, template, emulated=False)
        gone = verify._check_placement(ec2, H100, data, template, emulated=False)
    assert [(r.check, r.status, r.reason) for r in spread] == [
        ("placement group", "pass", "the template names gpu-h100-placement-0a1b2c3"),
        ("placement group strategy", "fail", "strategy spread (plan cluster)"),
    ]
    assert (gone[1].status, gone[1].reason) == (
        "fail",
        "gpu-h100-placement-0a1b2c3 does not exist",
    )


def test_refused_credentials_stop_the_run(plan) -> None:
    expected = verify.expected_cluster(plan)
    assert expected is not None
    eks, stub = stubbed("eks")
    stub.add_client_error(
        "describe_cluster",
        service_error_code="UnrecognizedClientException",
        service_message="The security token included in the request is invalid.",
        http_status_code=403,
    )
    with stub, pytest.raises(verify.CredentialsRejected, match="security token"):
        verify.check_cluster(eks, None, expected)


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
    assert verify.unsupported(route_missing, emulated=True)
    assert not verify.unsupported(route_missing, emulated=False)
    assert not verify.unsupported(typed_not_found, emulated=True)


# ---------------------------------------------------------------------------
# What the plans declare, for every stack
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["pretrain", "finetune", "inference"])
def test_every_stack_declares_what_verify_compares(plans, stack: str) -> None:
    from spec.catalog import catalog

    plan = plans(stack).to_dict()
    cluster = verify.expected_cluster(plan)
    assert cluster is not None
    assert cluster.name == f"llm-platform-{stack}"
    assert cluster.key_alias == f"alias/llm-platform-{stack}-eks-secrets"
    assert cluster.encrypted_resources == ("secrets",)
    assert cluster.stack_tags == {"stack": stack, "project": "llm-platform"}
    groups = verify.expected_node_groups(plan)
    assert groups and all(g.name and g.pool and g.launch_template for g in groups)
    for group in groups:
        template = group.launch_template
        assert template is not None and template.name_tag == group.name
        # A Capacity Block group names its type in the template only.
        (instance_type,) = group.instance_types or (template.instance_type,)
        labels = group.labels or {}
        if labels.get("llm-platform/efa") == "true":
            # Every EFA interface the instance takes, behind one ENA primary interface.
            assert template.efa_count == catalog().instance(instance_type).efa_interfaces
            assert template.interfaces[0] == (0, 0, "interface")
        else:
            assert template.interfaces == ()
    addons = verify.expected_addons(plan)
    assert {
        "vpc-cni",
        "coredns",
        "kube-proxy",
        "eks-pod-identity-agent",
        "eks-node-monitoring-agent",
    } <= {a.name for a in addons}
    assert all(a.version for a in addons)
