"""Network rules: nothing open to the internet but a load balancer's 443."""

from __future__ import annotations

import pytest

from tests.policies.conftest import add, hits, inputs, names, res

INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SG = "aws:ec2/securityGroup:SecurityGroup"


@pytest.mark.parametrize("stack", ["pretrain", "finetune", "inference"])
@pytest.mark.parametrize("rule", ["no-open-ingress", "subnet-no-public-ip"])
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
