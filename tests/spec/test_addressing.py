"""Subnet layout: disjoint, inside the VPC, stable, and refused when it cannot fit."""

from __future__ import annotations

import ipaddress
import itertools

import pytest

from spec.addressing import plan_subnets

ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]


def test_layout_is_disjoint_and_inside_the_vpc() -> None:
    layout = plan_subnets("10.10.0.0/16", ZONES, 18, 24)
    vpc = ipaddress.ip_network("10.10.0.0/16")
    nets = [ipaddress.ip_network(c) for c in [*layout.private.values(), *layout.public.values()]]
    assert all(n.subnet_of(vpc) for n in nets)
    assert not any(a.overlaps(b) for a, b in itertools.combinations(nets, 2))
    assert layout.private == {
        "us-east-1a": "10.10.0.0/18",
        "us-east-1b": "10.10.64.0/18",
        "us-east-1c": "10.10.128.0/18",
    }
    assert layout.public["us-east-1a"] == "10.10.192.0/24"


def test_layout_does_not_depend_on_anything_but_its_inputs() -> None:
    assert plan_subnets("10.0.0.0/16", ZONES, 19, 24) == plan_subnets("10.0.0.0/16", ZONES, 19, 24)


def test_public_subnets_larger_than_private_still_pack() -> None:
    layout = plan_subnets("10.0.0.0/16", ZONES, 20, 18)
    assert sorted(layout.public.values()) == ["10.0.128.0/18", "10.0.192.0/18", "10.0.64.0/18"]


def test_too_small_a_vpc_is_refused() -> None:
    with pytest.raises(ValueError, match="need 49920 addresses"):
        plan_subnets("10.0.0.0/17", ZONES, 18, 24)
