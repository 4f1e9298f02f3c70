"""`llmp verify`'s `adopted` rows against a moto server on 127.0.0.1 holding the VPC an
example stack adopts (examples/stacks/Pulumi.existing-vpc.yaml, with moto's ids)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from llmp.cli import app
from llmp.verify import adopted
from spec.stackfile import load_stack_file
from tests.conftest import merge

pytestmark = pytest.mark.usefixtures("aws_env")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples/stacks/Pulumi.existing-vpc.yaml"
REGION = "us-east-1"


def ec2(endpoint: str) -> Any:
    return boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)


def adopted_vpc(endpoint: str, gpu_subnet_cidr: str) -> dict[str, Any]:
    """The example's VPC in moto, its GPU subnet (us-east-1a) of `gpu_subnet_cidr`, and a
    NAT route in the main route table; the stack config that adopts it."""
    client = ec2(endpoint)
    vpc = client.create_vpc(CidrBlock="10.50.0.0/16")["Vpc"]["VpcId"]
    cidrs = {"us-east-1a": gpu_subnet_cidr, "us-east-1b": "10.50.32.0/19"}
    subnets = {
        zone: client.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"][
            "SubnetId"
        ]
        for zone, cidr in cidrs.items()
    }
    allocation = client.allocate_address(Domain="vpc")["AllocationId"]
    nat = client.create_nat_gateway(SubnetId=subnets["us-east-1b"], AllocationId=allocation)
    (main,) = client.describe_route_tables(
        Filters=[
            {"Name": "vpc-id", "Values": [vpc]},
            {"Name": "association.main", "Values": ["true"]},
        ]
    )["RouteTables"]
    client.create_route(
        RouteTableId=main["RouteTableId"],
        DestinationCidrBlock="0.0.0.0/0",
        NatGatewayId=nat["NatGateway"]["NatGatewayId"],
    )
    raw = load_stack_file(str(EXAMPLE))
    existing = {
        "vpc_id": vpc,
        "private_subnets": {z: {"id": subnets[z], "cidr": c} for z, c in cidrs.items()},
    }
    key = "llm-platform:network"
    raw[key] = merge(raw[key], {"existing": existing})
    return raw


def verify_adopted(synth, raw: dict[str, Any], endpoint: str, tmp_path: Path) -> Any:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(synth(raw, stack="existing-vpc").to_dict()))
    args = ["verify", "existing-vpc", "--plan", str(plan_file), "--only", "adopted"]
    return CliRunner().invoke(app, [*args, "--endpoint-url", endpoint, "--json"])


def test_a_gpu_subnet_with_too_few_free_addresses_is_one_failing_row(
    synth, endpoint, tmp_path
) -> None:
    raw = adopted_vpc(endpoint, "10.50.0.0/26")
    result = verify_adopted(synth, raw, endpoint, tmp_path)
    assert result.exit_code == 1, result.output
    rows = json.loads(result.stdout)
    failed = [r for r in rows if r["status"] == "fail"]
    assert len(failed) == 1, rows
    (row,) = failed
    assert row["area"] == "adopted"
    assert row["check"] == "free addresses"
    assert row["resource"].endswith("(us-east-1a)")
    # p5.48xlarge: 1 primary + 32 EFA interfaces + 30 pod addresses, at max_size 2.
    assert row["reason"] == (
        "59 free; the pools need 126 at max size (h100: 2 nodes x 63 addresses)"
    )
    others = {(r["resource"].split()[-1], r["check"]): r["status"] for r in rows if r != row}
    assert others[("(us-east-1a)", "internet route")] == "pass"
    assert others[("(us-east-1b)", "free addresses")] == "pass"


def test_a_subnet_large_enough_passes_every_row(synth, endpoint, tmp_path) -> None:
    raw = adopted_vpc(endpoint, "10.50.0.0/19")
    result = verify_adopted(synth, raw, endpoint, tmp_path)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {r["status"] for r in rows} == {"pass"}, rows
    assert {r["check"] for r in rows} == {
        "vpc",
        "subnet",
        "free addresses",
        "internet route",
        "s3 route",
    }


def test_a_vpc_that_is_not_there_fails_in_one_line(synth, endpoint, tmp_path) -> None:
    raw = load_stack_file(str(EXAMPLE))
    result = verify_adopted(synth, raw, endpoint, tmp_path)
    assert result.exit_code == 1
    rows = json.loads(result.stdout)
    assert rows == [
        {
            "area": "adopted",
            "resource": "vpc-0a1b2c3d4e5f60718",
            "check": "vpc",
            "status": "fail",
            "reason": "no VPC vpc-0a1b2c3d4e5f60718 in us-east-1",
        }
    ]


def test_an_adopted_cluster_at_another_version_is_named(endpoint) -> None:
    eks = boto3.client("eks", region_name=REGION, endpoint_url=endpoint)
    iam = boto3.client("iam", region_name=REGION, endpoint_url=endpoint)
    role = iam.create_role(RoleName="eks", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    eks.create_cluster(
        name="platform-eks",
        version="1.34",
        roleArn=role,
        resourcesVpcConfig={"subnetIds": []},
    )
    rows = adopted.check_cluster(
        eks,
        iam,
        {"name": "platform-eks", "version": "1.35", "node_role": "the stack's own"},
        REGION,
        emulated=True,
    )
    version = next(r for r in rows if r.check == "version")
    assert (version.status, version.reason) == ("fail", "runs 1.34; cluster.version says 1.35")
