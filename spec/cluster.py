"""`cluster`: the EKS control plane."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, field_validator, model_validator

from spec.base import ROLE_ARN, Section, cloudwatch_retention
from spec.catalog import catalog
from spec.errors import FieldError

LogType = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]


def _default_log_types() -> list[LogType]:
    return ["api", "audit", "authenticator"]


CLUSTER_NAME = r"^[a-zA-Z][\w-]{0,99}$"

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

PUBLIC_IPV4_PREFIX = 16
PUBLIC_IPV4_MAX = 2 ** (32 - PUBLIC_IPV4_PREFIX)
"""The most IPv4 addresses a public endpoint admits, all its CIDRs together: one /16, a
large organisation's egress, not a slice of the internet ([0.0.0.0/1, 128.0.0.0/1] is
the internet in two entries)."""
PUBLIC_IPV6_PREFIX = 48
PUBLIC_IPV6_MAX = 2 ** (128 - PUBLIC_IPV6_PREFIX)
"""The same for IPv6: one /48, a site's allocation."""
_PUBLIC_RULE = (
    f"a public endpoint admits at most {PUBLIC_IPV4_MAX:,} IPv4 addresses (one "
    f"/{PUBLIC_IPV4_PREFIX}) and one /{PUBLIC_IPV6_PREFIX} of IPv6 in all: list your egress "
    "CIDRs, or reach the API through the private endpoint"
)


def _public_max(version: int) -> int:
    return PUBLIC_IPV4_MAX if version == 4 else PUBLIC_IPV6_MAX


def _union(nets: list[IPNetwork], version: int) -> list[IPNetwork]:
    """The networks of one IP version, overlaps and neighbours merged (each address once)."""
    if version == 4:
        v4 = [n for n in nets if isinstance(n, ipaddress.IPv4Network)]
        return list(ipaddress.collapse_addresses(v4))
    v6 = [n for n in nets if isinstance(n, ipaddress.IPv6Network)]
    return list(ipaddress.collapse_addresses(v6))


def _not_public(cidrs: list[str], nets: list[IPNetwork], *, inside: bool) -> None:
    """Refuse the first network inside (`inside`), else overlapping, a special range."""
    for i, net in enumerate(nets):
        for special, why in _NOT_PUBLIC.items():
            if special.version != net.version or not special.overlaps(net):
                continue
            if inside and not net.subnet_of(special):  # type: ignore[arg-type]
                continue
            raise FieldError(
                (i,),
                cidrs[i],
                f"overlaps {special} ({why}), which never reaches a public endpoint (inside "
                "the VPC, the API is reached through the private endpoint); list public "
                "egress CIDRs only",
            )


_NOT_PUBLIC: dict[IPNetwork, str] = {
    ipaddress.ip_network(cidr): why
    for cidr, why in (
        ("0.0.0.0/8", "this network"),
        ("10.0.0.0/8", "private, RFC 1918"),
        ("100.64.0.0/10", "shared address space, carrier-grade NAT"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private, RFC 1918"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.168.0.0/16", "private, RFC 1918"),
        ("198.18.0.0/15", "benchmarking"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
        ("::/127", "unspecified and loopback"),
        ("::ffff:0:0/96", "IPv4-mapped"),
        ("100::/64", "discard-only"),
        ("fc00::/7", "unique local"),
        ("fe80::/10", "link-local"),
        ("ff00::/8", "multicast"),
    )
}
"""Ranges no request to a public endpoint comes from (IANA special-purpose registries).
The documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32)
are not here: they reach nothing either, and examples use them."""


class ExistingClusterConfig(Section):
    """An EKS cluster someone else owns: the stack adds pools, missing add-ons and workloads."""

    name: str = Field(pattern=CLUSTER_NAME, description="The cluster's name.")
    security_group_id: str = Field(
        pattern=r"^sg-[0-9a-f]{8,17}$",
        description="Its EKS-managed cluster security group (every node carries it).",
    )
    node_role_arn: str | None = Field(
        None, description="The cluster's node role for the GPU pools; none: the stack's own."
    )
    addons: dict[str, str] = Field(
        default_factory=dict,
        description="EKS add-ons already installed, name -> version: the stack installs only "
        "the others, and leaves these as they are.",
    )
    endpoint: str | None = Field(
        None,
        pattern=r"^https://",
        description="API endpoint; none: read from EKS at deploy time (offline: a stand-in).",
    )
    certificate_authority_data: str | None = Field(
        None, description="Its CA (base64), with endpoint; none: read at deploy time."
    )

    @field_validator("node_role_arn")
    @classmethod
    def _role(cls, v: str | None) -> str | None:
        if v is not None and not ROLE_ARN.match(v):
            raise ValueError("not an IAM role ARN; e.g. arn:aws:iam::123456789012:role/eks-node")
        return v

    @model_validator(mode="after")
    def _both(self) -> ExistingClusterConfig:
        if (self.endpoint is None) != (self.certificate_authority_data is None):
            given = "endpoint" if self.endpoint else "certificate_authority_data"
            raise FieldError(
                (given,),
                getattr(self, given),
                "set both endpoint and certificate_authority_data, or neither",
            )
        return self


class ClusterConfig(Section):
    """The EKS control plane."""

    name: str | None = Field(
        None,
        description="Cluster name; default `<project>-<stack>`.",
        pattern=r"^[a-zA-Z][\w-]{0,99}$",
    )
    version: str = Field(
        default_factory=lambda: catalog().eks.default_version,
        description="Kubernetes minor version; one the catalog lists as supported.",
    )
    endpoint_public_access: bool = Field(
        False, description="Expose the API endpoint publicly (restricted to the CIDRs below)."
    )
    public_access_cidrs: list[str] = Field(
        default_factory=list,
        description="CIDRs allowed to reach a public endpoint: public ranges only (a "
        "private, shared, loopback, link-local, multicast or reserved range is refused: from "
        "inside the VPC the API is reached through the private endpoint; the documentation "
        "ranges such as 203.0.113.0/24 are accepted), and together, overlaps counted once, "
        f"at most {PUBLIC_IPV4_MAX:,} IPv4 addresses (one /{PUBLIC_IPV4_PREFIX}) and one "
        f"/{PUBLIC_IPV6_PREFIX} of IPv6: your egress CIDRs, not a slice of the internet.",
    )
    admin_role_arns: list[str] = Field(
        default_factory=list, description="IAM roles given cluster-admin through access entries."
    )
    log_types: list[LogType] = Field(
        default_factory=_default_log_types,
        description="Control-plane log types sent to CloudWatch; must include audit.",
    )
    log_retention_days: int = Field(90, ge=1, description="Retention of control-plane logs.")
    _log_retention = field_validator("log_retention_days")(cloudwatch_retention)
    support_type: Literal["STANDARD", "EXTENDED"] = Field(
        "STANDARD", description="EXTENDED costs 6x the standard control-plane rate."
    )
    deletion_protection: bool = Field(
        False, description="Refuse to delete the cluster until this is turned off."
    )
    existing: ExistingClusterConfig | None = Field(
        None,
        description="Adopt this cluster instead of creating one; `version` is then the "
        "adopted cluster's.",
    )

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        supported = catalog().eks.supported_versions
        if v not in supported:
            raise ValueError(f"not a supported EKS version; use one of {', '.join(supported)}")
        return v

    @field_validator("public_access_cidrs")
    @classmethod
    def _public_cidrs(cls, v: list[str]) -> list[str]:
        nets: list[IPNetwork] = []
        for i, cidr in enumerate(v):
            try:
                net = ipaddress.ip_network(cidr)
            except ValueError:
                raise FieldError((i,), cidr, "not a CIDR; e.g. 203.0.113.0/24") from None
            if net.prefixlen == 0:
                raise FieldError((i,), cidr, "opens the API to the internet; list your CIDRs")
            nets.append(net)
        unions = {version: _union(nets, version) for version in (4, 6)}
        for union in unions.values():
            if len(union) == 1 and union[0].prefixlen == 0:
                raise FieldError(
                    (),
                    v,
                    f"together open the API to the internet (they merge into {union[0]}); "
                    f"{_PUBLIC_RULE}",
                )
        # A range inside a special one first (its size is not the problem), then sizes,
        # then a range that spans into one.
        _not_public(v, nets, inside=True)
        for i, net in enumerate(nets):
            if net.num_addresses > _public_max(net.version):
                raise FieldError(
                    (i,), v[i], f"covers {net.num_addresses:,} addresses; {_PUBLIC_RULE}"
                )
        for version, union in unions.items():
            covered = sum(n.num_addresses for n in union)
            if covered > _public_max(version):
                shown = ", ".join(map(str, union[:4])) + (", ..." if len(union) > 4 else "")
                raise FieldError(
                    (),
                    v,
                    f"together cover {covered:,} IPv{version} addresses ({shown} once "
                    f"overlaps are merged); {_PUBLIC_RULE}",
                )
        _not_public(v, nets, inside=False)
        return v

    @field_validator("admin_role_arns")
    @classmethod
    def _roles(cls, v: list[str]) -> list[str]:
        for i, arn in enumerate(v):
            if not ROLE_ARN.match(arn):
                raise FieldError(
                    (i,), arn, "not an IAM role ARN; e.g. arn:aws:iam::123456789012:role/admin"
                )
        return v

    @field_validator("log_types")
    @classmethod
    def _audit(cls, v: list[str]) -> list[str]:
        if "audit" not in v:
            raise ValueError("must include audit: who changed what is not optional")
        return v

    @model_validator(mode="after")
    def _public(self) -> ClusterConfig:
        if self.endpoint_public_access and not self.public_access_cidrs:
            raise FieldError(
                ("public_access_cidrs",),
                [],
                "a public endpoint needs the CIDRs allowed to reach it",
            )
        if self.public_access_cidrs and not self.endpoint_public_access:
            raise FieldError(
                ("public_access_cidrs",),
                self.public_access_cidrs,
                "only applies with endpoint_public_access: true",
            )
        return self
