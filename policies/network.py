"""Network: nothing is open to the internet but HTTPS on a load balancer.

A load balancer's security group is one tagged `llm-platform/role:
load-balancer`, or one the AWS Load Balancer Controller owns (tag
`elbv2.k8s.aws/cluster`), or one whose description names a load balancer.
Standalone rules (`aws:vpc` ingress rules, `aws:ec2` SecurityGroupRule) find
their security group through the dependency graph.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import (
    PolicyResource,
    ResourceValidationArgs,
    StackValidationArgs,
)

from policies.props import Report, deps_of_type, get, items, known, of_type, plain, tags_of

SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
VPC_INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EC2_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
SUBNET = "aws:ec2/subnet:Subnet"
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
    ports = "all ports" if str(protocol) == "-1" else f"{protocol} {from_port}-{to_port}"
    report(
        f"{where.name} opens {ports} to {', '.join(open_to)}: only a load balancer's "
        "port 443 may face the internet",
        where.urn,
    )


def no_open_ingress(args: StackValidationArgs, report: Report) -> None:
    """No ingress from 0.0.0.0/0 or ::/0, except TCP 443 on a load balancer."""
    for sg in of_type(args.resources, SECURITY_GROUP):
        for rule in known(lambda sg=sg: plain(items(get(sg.props, "ingress"))), []):
            cidrs = {*items(rule.get("cidrBlocks")), *items(rule.get("ipv6CidrBlocks"))}
            _check(
                report,
                sg,
                sg,
                cidrs,
                rule.get("protocol"),
                rule.get("fromPort"),
                rule.get("toPort"),
            )
    for rule in of_type(args.resources, VPC_INGRESS, EC2_RULE):
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
        _check(
            report,
            rule,
            groups[0] if len(groups) == 1 else None,
            set(cidrs),
            protocol,
            props.get("fromPort"),
            props.get("toPort"),
        )


def subnet_no_public_ip(args: ResourceValidationArgs, report: Report) -> None:
    """Subnets do not give instances public IPs on launch (nodes sit behind NAT)."""
    if args.resource_type == SUBNET and get(args.props, "mapPublicIpOnLaunch") is True:
        report("mapPublicIpOnLaunch is true: instances launched here get a public IP")
