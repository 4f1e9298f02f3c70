"""Network: subnets per AZ, NAT modes, S3 gateway endpoint, EFA security group."""

from __future__ import annotations

import json

from tests.conftest import with_section

SUBNET = "aws:ec2/subnet:Subnet"
NAT = "aws:ec2/natGateway:NatGateway"
RT = "aws:ec2/routeTable:RouteTable"


def test_one_private_and_one_public_subnet_per_az(plans) -> None:
    plan = plans("pretrain")
    subnets = plan.by_type(SUBNET)
    zones = {"us-east-1a", "us-east-1b", "us-east-1c"}
    private = [s for s in subnets if "kubernetes.io/role/internal-elb" in s.inputs["tags"]]
    public = [s for s in subnets if "public" in s.name]
    assert {s.inputs["availabilityZone"] for s in private} == zones
    assert {s.inputs["availabilityZone"] for s in public} == zones
    # No internet-facing load balancer of the platform's: the public subnets carry no ELB
    # role tag, so none is placed there by tag.
    assert not any("kubernetes.io/role/elb" in s.inputs["tags"] for s in public)
    assert all(s.inputs["mapPublicIpOnLaunch"] is False for s in public)
    assert all(
        s.inputs["tags"]["kubernetes.io/cluster/llm-platform-pretrain"] == "shared"
        for s in subnets
    )


def test_nat_per_az_routes_each_private_subnet_to_its_own_az(plans) -> None:
    plan = plans("pretrain")
    nats = plan.by_type(NAT)
    assert len(nats) == 3
    private_rts = [r for r in plan.by_type(RT) if "private" in r.name]
    for rt in private_rts:
        zone = rt.name.rsplit("private-", 1)[1]
        assert rt.inputs["routes"][0]["natGatewayId"] == f"network-nat-{zone}-id"


def test_single_nat_is_the_cheap_default(synth) -> None:
    plan = synth(with_section("pretrain", "network", {"nat_gateways": None}))
    nats = plan.by_type(NAT)
    assert len(nats) == 1
    targets = {
        r.inputs["routes"][0]["natGatewayId"] for r in plan.by_type(RT) if "private" in r.name
    }
    assert targets == {nats[0].name + "-id"}


ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"


def test_s3_gateway_endpoint_serves_every_private_route_table(plans) -> None:
    plan = plans("pretrain")
    (endpoint,) = [e for e in plan.by_type(ENDPOINT) if e.inputs["vpcEndpointType"] == "Gateway"]
    assert endpoint.inputs["serviceName"] == "com.amazonaws.us-east-1.s3"
    private_rts = {r.name + "-id" for r in plan.by_type(RT) if "private" in r.name}
    assert set(endpoint.inputs["routeTableIds"]) == private_rts


def test_the_s3_endpoint_admits_the_platforms_buckets_and_ecrs_layers_only(plans) -> None:
    plan = plans("pretrain")
    (endpoint,) = [e for e in plan.by_type(ENDPOINT) if e.inputs["vpcEndpointType"] == "Gateway"]
    statements = {s["Sid"]: s for s in json.loads(endpoint.inputs["policy"])["Statement"]}
    assert set(statements) == {"PlatformBuckets", "EcrImageLayers"}
    assert statements["PlatformBuckets"]["Resource"] == [
        "arn:aws:s3:::acme-llm-pretrain-*",
        "arn:aws:s3:::acme-llm-pretrain-*/*",
    ]
    layers = statements["EcrImageLayers"]
    assert (layers["Action"], layers["Resource"]) == (
        "s3:GetObject",
        "arn:aws:s3:::prod-us-east-1-starport-layer-bucket/*",
    )
    assert all(s["Effect"] == "Allow" and s["Principal"] == "*" for s in statements.values())


def test_a_shared_stack_admits_the_team_prefixes_it_lists(synth) -> None:
    raw = with_section("pretrain", "network", {"s3_endpoint_buckets": ["acme-llm-team-*"]})
    (endpoint,) = [
        e for e in synth(raw).by_type(ENDPOINT) if e.inputs["vpcEndpointType"] == "Gateway"
    ]
    (platform, _) = json.loads(endpoint.inputs["policy"])["Statement"]
    assert "arn:aws:s3:::acme-llm-team-*/*" in platform["Resource"]


def test_interface_endpoints_in_every_private_subnet_with_private_dns(plans) -> None:
    plan = plans("inference")
    interface = [e for e in plan.by_type(ENDPOINT) if e.inputs["vpcEndpointType"] == "Interface"]
    services = sorted(e.inputs["serviceName"].rsplit(".", 1)[-1] for e in interface)
    # ecr.api and ecr.dkr end in api and dkr; inference serves, so Secrets Manager too,
    # and has a models bucket, so KMS (the promotion job signs revisions).
    assert services == ["api", "dkr", "eks-auth", "kms", "logs", "secretsmanager", "sts"]
    private = {s.name + "-id" for s in plan.by_type(SUBNET) if "private" in s.name}
    group = plan.one("aws:ec2/securityGroup:SecurityGroup", "network-endpoints")
    for e in interface:
        assert set(e.inputs["subnetIds"]) == private
        assert e.inputs["privateDnsEnabled"] is True
        assert e.inputs["securityGroupIds"] == [group.name + "-id"]
    rule = plan.one(
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "network-endpoints-in"
    )
    assert (rule.inputs["cidrIpv4"], rule.inputs["fromPort"], rule.inputs["toPort"]) == (
        plan.one("aws:ec2/vpc:Vpc", "network-vpc").inputs["cidrBlock"],
        443,
        443,
    )


def test_no_interface_endpoint_where_the_config_lists_none(synth) -> None:
    raw = with_section("pretrain", "network", {"interface_endpoints": []})
    plan = synth(raw)
    assert [e.inputs["vpcEndpointType"] for e in plan.by_type(ENDPOINT)] == ["Gateway"]


def test_efa_security_group_allows_all_traffic_from_and_to_itself(plans) -> None:
    plan = plans("pretrain")
    sg = plan.one("aws:ec2/securityGroup:SecurityGroup", "network-efa")
    for rule_type, rule_name in (
        ("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "network-efa-in"),
        ("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule", "network-efa-out"),
    ):
        rule = plan.one(rule_type, rule_name)
        assert rule.inputs["securityGroupId"] == sg.name + "-id"
        assert rule.inputs["referencedSecurityGroupId"] == sg.name + "-id"
        assert rule.inputs["ipProtocol"] == "-1"
        assert "cidrIpv4" not in rule.inputs
