"""A public API endpoint's CIDRs: public ranges, at most one /16 of IPv4 (one /48 of IPv6)
in all, overlaps counted once; [0.0.0.0/1, 128.0.0.0/1] is the internet. One line each;
an organisation's egress CIDRs pass."""

from __future__ import annotations

from typing import Any

import pytest

from spec.cluster import PUBLIC_IPV4_MAX
from spec.stackfile import load_config
from tests.conftest import config_error, with_section

# ---------------------------------------------------------------------------
# Public API endpoint CIDRs
# ---------------------------------------------------------------------------


def public(cidrs: list[str]) -> dict[str, Any]:
    return with_section(
        "pretrain", "cluster", {"endpoint_public_access": True, "public_access_cidrs": cidrs}
    )


RULE = (
    "a public endpoint admits at most 65,536 IPv4 addresses (one /16) and one /48 of IPv6 in "
    "all: list your egress CIDRs, or reach the API through the private endpoint"
)


def test_the_internet_in_two_halves_is_the_internet() -> None:
    assert config_error(public(["0.0.0.0/1", "128.0.0.0/1"])) == (
        "config error: llm-platform:cluster.public_access_cidrs = ['0.0.0.0/1', "
        "'128.0.0.0/1']: together open the API to the internet (they merge into 0.0.0.0/0); " + RULE
    )
    assert "they merge into ::/0" in config_error(public(["::/1", "8000::/1"]))


def test_one_cidr_too_wide_is_named() -> None:
    assert config_error(public(["203.0.113.0/24", "8.0.0.0/8"])) == (
        "config error: llm-platform:cluster.public_access_cidrs.1 = '8.0.0.0/8': covers "
        "16,777,216 addresses; " + RULE
    )
    assert "public_access_cidrs.0 = '2600::/32': covers" in config_error(public(["2600::/32"]))


def test_many_narrow_cidrs_count_together_and_overlaps_once() -> None:
    spread = [f"52.{i // 256}.{i % 256}.0/24" for i in range(257)]
    message = config_error(public(spread))
    assert message.startswith("config error: llm-platform:cluster.public_access_cidrs = [")
    assert ": together cover 65,792 IPv4 addresses (52.0.0.0/16, 52.1.0.0/24 once overlaps " in (
        message
    )
    # Overlapping and adjacent entries are counted once: two /17 halves and a /24 inside
    # them are one /16, which is allowed.
    cfg = load_config(public(["52.0.0.0/17", "52.0.128.0/17", "52.0.3.0/24"]))
    assert len(cfg.cluster.public_access_cidrs) == 3
    assert PUBLIC_IPV4_MAX == 2**16


@pytest.mark.parametrize(
    ("cidr", "why"),
    [
        ("10.1.0.0/16", "10.0.0.0/8 (private, RFC 1918)"),
        ("192.168.1.0/24", "192.168.0.0/16 (private, RFC 1918)"),
        ("100.64.0.0/16", "100.64.0.0/10 (shared address space, carrier-grade NAT)"),
        ("127.0.0.1/32", "127.0.0.0/8 (loopback)"),
        ("169.254.169.254/32", "169.254.0.0/16 (link-local)"),
        ("224.0.0.0/16", "224.0.0.0/4 (multicast)"),
        ("fd00::/48", "fc00::/7 (unique local)"),
    ],
)
def test_ranges_that_never_reach_a_public_endpoint(cidr: str, why: str) -> None:
    assert config_error(public(["198.51.100.0/24", cidr])) == (
        f"config error: llm-platform:cluster.public_access_cidrs.1 = '{cidr}': overlaps {why}, "
        "which never reaches a public endpoint (inside the VPC, the API is reached through "
        "the private endpoint); list public egress CIDRs only"
    )


@pytest.mark.parametrize(
    "cidrs",
    [
        ["203.0.113.0/24"],
        ["198.51.100.7/32", "192.0.2.0/24"],
        ["52.94.0.0/16"],
        ["3.5.140.0/22", "18.60.0.0/24", "2001:db8::/48"],
        ["2600:1f18:abcd::/48"],
    ],
)
def test_an_organisation_s_egress_passes(cidrs: list[str]) -> None:
    assert load_config(public(cidrs)).cluster.public_access_cidrs == cidrs


def test_the_existing_refusals_still_read_the_same() -> None:
    assert config_error(public(["0.0.0.0/0"])) == (
        "config error: llm-platform:cluster.public_access_cidrs.0 = '0.0.0.0/0': "
        "opens the API to the internet; list your CIDRs"
    )
    assert config_error(public(["10.0.0.1/8"])).endswith("not a CIDR; e.g. 203.0.113.0/24")
