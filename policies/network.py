"""Network: nothing is open to the internet but HTTPS on a load balancer, and no ingress
comes from a range wider than one organisation's (an IPv4 /8, an IPv6 /32).

A load balancer's security group is one tagged `llm-platform/role:
load-balancer`, or one the AWS Load Balancer Controller owns (tag
`elbv2.k8s.aws/cluster`), or one whose description names a load balancer.
Standalone rules (`aws:vpc` ingress rules, `aws:ec2` SecurityGroupRule) find
their security group through the dependency graph.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pulumi_policy import (
    PolicyResource,
    ResourceValidationArgs,
    StackValidationArgs,
)

from policies.props import (
    Report,
    deps_of_type,
    get,
    items,
    known,
    of_type,
    plain,
    tags_of,
    wide_prefix,
)

SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
VPC_INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EC2_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
SUBNET = "aws:ec2/subnet:Subnet"
VPC = "aws:ec2/vpc:Vpc"
VPC_CIDR = "aws:ec2/vpcIpv4CidrBlockAssociation:VpcIpv4CidrBlockAssociation"
_OPEN = {"0.0.0.0/0", "::/0"}


def is_load_balancer(sg: PolicyResource | None) -> bool:
    if sg is None:
        return False
    tags = tags_of(sg.props)
    if tags.get("llm-platform/role") == "load-balancer" or "elbv2.k8s.aws/cluster" in tags:
        return True
    description = known(lambda: get(sg.props, "description"), None)
    return isinstance(description, str) and "load balancer" in description.lower()


def _https_only(protocol: Any, from_port: Any, to_port: Any) -> bool:
    return str(protocol).lower() in ("tcp", "6") and from_port == 443 and to_port == 443


def _ports(protocol: Any, from_port: Any, to_port: Any) -> str:
    return "all ports" if str(protocol) == "-1" else f"{protocol} {from_port}-{to_port}"


def _check(
    report: Report,
    where: PolicyResource,
    sg: PolicyResource | None,
    cidrs: set[str],
    protocol: Any,
    from_port: Any,
    to_port: Any,
) -> None:
    open_to = sorted(cidrs & _OPEN)
    if not open_to:
        return
    if _https_only(protocol, from_port, to_port) and is_load_balancer(sg):
        return
    report(
        f"{where.name} opens {_ports(protocol, from_port, to_port)} to {', '.join(open_to)}: "
        "only a load balancer's port 443 may face the internet",
        where.urn,
    )


Ingress = tuple[PolicyResource, PolicyResource | None, set[str], Any, Any, Any]
"""(where, its security group or None, CIDRs, protocol, from port, to port) of one rule."""


def _ingress(resources: list[PolicyResource]) -> Iterator[Ingress]:
    """Every ingress rule of the stack: security groups' inline `ingress`, `aws:vpc` ingress
    rules and `aws:ec2` SecurityGroupRules of type ingress."""
    for sg in of_type(resources, SECURITY_GROUP):
        for rule in known(lambda sg=sg: plain(items(get(sg.props, "ingress"))), []):
            cidrs = {*items(rule.get("cidrBlocks")), *items(rule.get("ipv6CidrBlocks"))}
            yield sg, sg, cidrs, rule.get("protocol"), rule.get("fromPort"), rule.get("toPort")
    for rule in of_type(resources, VPC_INGRESS, EC2_RULE):
        props = known(lambda r=rule: plain(r.props), None)
        if props is None:
            continue
        if rule.resource_type == EC2_RULE:
            if props.get("type") != "ingress":
                continue
            cidrs = {*items(props.get("cidrBlocks")), *items(props.get("ipv6CidrBlocks"))}
            protocol = props.get("protocol")
        else:
            cidrs = {c for c in (props.get("cidrIpv4"), props.get("cidrIpv6")) if c}
            protocol = props.get("ipProtocol")
        groups = deps_of_type(rule, SECURITY_GROUP)
        group = groups[0] if len(groups) == 1 else None
        yield rule, group, set(cidrs), protocol, props.get("fromPort"), props.get("toPort")


def no_open_ingress(args: StackValidationArgs, report: Report) -> None:
    """No ingress from 0.0.0.0/0 or ::/0, except TCP 443 on a load balancer."""
    for where, sg, cidrs, protocol, from_port, to_port in _ingress(args.resources):
        _check(report, where, sg, cidrs, protocol, from_port, to_port)


def _vpc_cidrs(resources: list[PolicyResource]) -> set[str]:
    """The CIDRs of the VPCs the stack makes (primary and associated)."""
    out = set()
    for r in of_type(resources, VPC, VPC_CIDR):
        for key in ("cidrBlock", "ipv6CidrBlock"):
            cidr = known(lambda r=r, key=key: get(r.props, key), None)
            if isinstance(cidr, str):
                out.add(cidr)
    return out


def no_wide_ingress(args: StackValidationArgs, report: Report) -> None:
    """No ingress from a CIDR wider than an IPv4 /8 or an IPv6 /32 but the VPC's own (the
    whole internet, 0.0.0.0/0 and ::/0, is `no-open-ingress`'s): a short prefix spans other
    networks."""
    vpc = _vpc_cidrs(args.resources)
    for where, _, cidrs, protocol, from_port, to_port in _ingress(args.resources):
        for cidr in sorted(cidrs - _OPEN - vpc):
            prefix = wide_prefix(cidr)
            if prefix is not None:
                report(
                    f"{where.name} opens {_ports(protocol, from_port, to_port)} to {cidr} (a "
                    f"/{prefix}): name the networks that need it, IPv4 /8 or longer, IPv6 /32 "
                    "or longer",
                    where.urn,
                )


def subnet_no_public_ip(args: ResourceValidationArgs, report: Report) -> None:
    """Subnets do not give instances public IPs on launch (nodes sit behind NAT)."""
    if args.resource_type == SUBNET and get(args.props, "mapPublicIpOnLaunch") is True:
        report("mapPublicIpOnLaunch is true: instances launched here get a public IP")
