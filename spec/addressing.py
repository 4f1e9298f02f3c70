"""Deterministic subnet layout carved from the VPC CIDR.

Subnets are computed, not typed into config: a user picks the VPC CIDR and
prefix lengths, and the layout is the same on every run and in every region
(disaster recovery re-creates the same addresses). Private subnets come first
and are large, because the VPC CNI gives every pod a VPC address.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True)
class SubnetLayout:
    private: dict[str, str]
    """AZ -> private subnet CIDR (nodes and pods)."""
    public: dict[str, str]
    """AZ -> public subnet CIDR (NAT gateways and internet-facing load balancers)."""


def plan_subnets(
    vpc_cidr: str, zones: list[str], private_prefix: int, public_prefix: int
) -> SubnetLayout:
    """Lay out one private and one public subnet per AZ, largest blocks first.

    Raises ValueError with a message that says what would fit.
    """
    vpc = ipaddress.ip_network(vpc_cidr)
    for prefix, role in ((private_prefix, "private"), (public_prefix, "public")):
        if prefix < vpc.prefixlen:
            raise ValueError(f"a /{prefix} {role} subnet is larger than the /{vpc.prefixlen} VPC")
    need = len(zones) * (2 ** (32 - private_prefix) + 2 ** (32 - public_prefix))
    if need > vpc.num_addresses:
        raise ValueError(
            f"{len(zones)} AZs x (/{private_prefix} private + /{public_prefix} public) "
            f"need {need} addresses but the /{vpc.prefixlen} VPC has {vpc.num_addresses}; "
            f"use a larger VPC or longer subnet prefixes"
        )
    # Private blocks are packed from the start; what is left is a whole number
    # of public-sized blocks (all sizes are powers of two), so the count check
    # above is also the alignment check.
    private_blocks = vpc.subnets(new_prefix=private_prefix)
    private = {zone: str(next(private_blocks)) for zone in zones}
    used = [ipaddress.ip_network(c) for c in private.values()]
    public: dict[str, str] = {}
    for candidate in vpc.subnets(new_prefix=public_prefix):
        if len(public) == len(zones):
            break
        if not any(candidate.overlaps(u) for u in used):
            public[zones[len(public)]] = str(candidate)
    return SubnetLayout(private=private, public=public)
