"""Network rules: nothing open to the internet but a load balancer's 443, no ingress from a
range wider than an IPv4 /8 or an IPv6 /32."""

from __future__ import annotations

import pytest

from tests.policies.conftest import add, hits, inputs, names, res

INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SG = "aws:ec2/securityGroup:SecurityGroup"
WIDE = "no-wide-ingress"


@pytest.mark.parametrize("stack", ["pretrain", "finetune", "inference"])
@pytest.mark.parametrize("rule", ["no-open-ingress", "no-wide-ingress", "subnet-no-public-ip"])
def test_network_rule_is_quiet_on_the_stacks(plan, stack: str, rule: str) -> None:
    assert hits(plan(stack), rule) == []


def test_open_ingress_fires_on_a_world_open_rule(plan) -> None:
    p = plan()
    rule = inputs(p, "network-efa-in", INGRESS)
    del rule["referencedSecurityGroupId"]
    rule["cidrIpv4"] = "0.0.0.0/0"
    assert names(hits(p, "no-open-ingress")) == {"network-efa-in"}


def test_open_ingress_fires_on_inline_security_group_ingress(plan) -> None:
    p = plan()
    inputs(p, "network-efa", SG)["ingress"] = [
        {"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}
    ]
    assert names(hits(p, "no-open-ingress")) == {"network-efa"}


def _lb(p: dict, description: str) -> dict:
    sg = add(p, SG, "ingress-lb", {"description": description, "vpcId": "network-vpc-id"})
    rule = add(
        p,
        INGRESS,
        "ingress-lb-https",
        {"ipProtocol": "tcp", "fromPort": 443, "toPort": 443, "cidrIpv4": "0.0.0.0/0"},
    )
    rule.dependencies = [sg.urn]
    return rule


def test_open_ingress_allows_443_on_a_load_balancer(plan) -> None:
    p = plan("inference")
    _lb(p, "Public load balancer of the serving API")
    assert hits(p, "no-open-ingress") == []


def test_open_ingress_fires_on_443_outside_a_load_balancer(plan) -> None:
    p = plan("inference")
    _lb(p, "model servers")
    assert names(hits(p, "no-open-ingress")) == {"ingress-lb-https"}


def test_open_ingress_fires_on_other_ports_of_a_load_balancer(plan) -> None:
    p = plan("inference")
    rule = _lb(p, "load balancer")
    rule.inputs.update({"fromPort": 80, "toPort": 80})
    assert names(hits(p, "no-open-ingress")) == {"ingress-lb-https"}


def test_subnet_no_public_ip_fires(plan) -> None:
    p = plan()
    res(p, "network-public-us-east-1a", "aws:ec2/subnet:Subnet").inputs[
        "mapPublicIpOnLaunch"
    ] = True
    assert names(hits(p, "subnet-no-public-ip")) == {"network-public-us-east-1a"}


@pytest.mark.parametrize(
    ("cidr", "prefix"),
    [("0.0.0.0/1", 1), ("10.0.0.0/7", 7), ("128.0.0.0/2", 2), ("2600::/31", 31), ("::/1", 1)],
)
def test_wide_ingress_fires_on_a_short_prefix(plan, cidr: str, prefix: int) -> None:
    p = plan()
    rule = inputs(p, "network-endpoints-in", INGRESS)
    del rule["cidrIpv4"]
    rule["cidrIpv6" if ":" in cidr else "cidrIpv4"] = cidr
    assert [v.message for v in hits(p, WIDE)] == [
        f"network-endpoints-in opens tcp 443-443 to {cidr} (a /{prefix}): name the networks "
        "that need it, IPv4 /8 or longer, IPv6 /32 or longer"
    ]


@pytest.mark.parametrize("cidr", ["10.0.0.0/8", "100.64.0.0/10", "2600:1f00::/32"])
def test_wide_ingress_passes_a_prefix_of_8_or_32_or_longer(plan, cidr: str) -> None:
    p = plan()
    inputs(p, "network-endpoints-in", INGRESS)["cidrIpv4"] = cidr
    assert hits(p, WIDE) == []


def test_wide_ingress_fires_on_inline_security_group_ingress(plan) -> None:
    p = plan()
    inputs(p, "network-efa", SG)["ingress"] = [
        {"protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["10.10.0.0/16", "0.0.0.0/4"]}
    ]
    assert [v.message for v in hits(p, WIDE)] == [
        "network-efa opens all ports to 0.0.0.0/4 (a /4): name the networks that need it, "
        "IPv4 /8 or longer, IPv6 /32 or longer"
    ]


def test_wide_ingress_leaves_the_whole_internet_to_no_open_ingress(plan) -> None:
    """0.0.0.0/0 on a load balancer's 443 is allowed there; elsewhere that rule says it."""
    p = plan("inference")
    _lb(p, "Public load balancer of the serving API")
    assert hits(p, WIDE) == []
    assert hits(p, "no-open-ingress") == []


def test_wide_ingress_spares_the_vpcs_own_cidr(plan) -> None:
    p = plan()
    inputs(p, "network-vpc", "aws:ec2/vpc:Vpc")["cidrBlock"] = "10.0.0.0/7"
    inputs(p, "network-endpoints-in", INGRESS)["cidrIpv4"] = "10.0.0.0/7"
    assert hits(p, WIDE) == []
