"""Network: subnets per AZ, NAT modes, S3 gateway endpoint, EFA security group."""

from __future__ import annotations

from tests.conftest import with_section

SUBNET = "aws:ec2/subnet:Subnet"
NAT = "aws:ec2/natGateway:NatGateway"
RT = "aws:ec2/routeTable:RouteTable"


def test_one_private_and_one_public_subnet_per_az(plans) -> None:
    plan = plans("pretrain")
    subnets = plan.by_type(SUBNET)
    zones = {"us-east-1a", "us-east-1b", "us-east-1c"}
    private = [s for s in subnets if "kubernetes.io/role/internal-elb" in s.inputs["tags"]]
    public = [s for s in subnets if "kubernetes.io/role/elb" in s.inputs["tags"]]
    assert {s.inputs["availabilityZone"] for s in private} == zones
    assert {s.inputs["availabilityZone"] for s in public} == zones
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


def test_s3_gateway_endpoint_serves_every_private_route_table(plans) -> None:
    plan = plans("pretrain")
    (endpoint,) = plan.by_type("aws:ec2/vpcEndpoint:VpcEndpoint")
    assert endpoint.inputs["vpcEndpointType"] == "Gateway"
    assert endpoint.inputs["serviceName"] == "com.amazonaws.us-east-1.s3"
    private_rts = {r.name + "-id" for r in plan.by_type(RT) if "private" in r.name}
    assert set(endpoint.inputs["routeTableIds"]) == private_rts


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
