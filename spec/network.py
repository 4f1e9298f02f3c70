"""`tags` and `network`: cost-allocation tags and the VPC's layout."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, field_validator, model_validator

from spec.addressing import SubnetLayout, plan_subnets
from spec.base import AZ, Section
from spec.errors import FieldError


class TagsConfig(Section):
    """Cost-allocation tags put on every taggable AWS resource."""

    team: str = Field(min_length=1, description="Owning team (tag `team`).")
    cost_center: str = Field(min_length=1, description="Cost center (tag `cost-center`).")
    extra: dict[str, str] = Field(
        default_factory=dict, description="Further tags for every resource."
    )


class NetworkConfig(Section):
    """The VPC: one private and one public subnet per AZ, NAT, S3 gateway endpoint."""

    vpc_cidr: str = Field("10.0.0.0/16", description="IPv4 CIDR of the VPC.")
    availability_zones: list[str] = Field(
        min_length=2,
        description="AZs to use (EKS needs two or more); subnets are laid out in this order.",
    )
    private_subnet_prefix: int = Field(
        18, ge=16, le=28, description="Prefix length of each private (node and pod) subnet."
    )
    public_subnet_prefix: int = Field(
        24, ge=16, le=28, description="Prefix length of each public subnet."
    )
    nat_gateways: Literal["single", "per_az"] = Field(
        "single",
        description="`single` is cheapest; `per_az` survives the loss of an AZ.",
    )
    s3_gateway_endpoint: bool = Field(
        True, description="Route S3 traffic through a free gateway endpoint instead of NAT."
    )

    @field_validator("vpc_cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        try:
            net = ipaddress.ip_network(v)
        except ValueError as exc:
            raise ValueError(f"not an IPv4 CIDR ({exc}); e.g. 10.0.0.0/16") from None
        if net.version != 4 or not (16 <= net.prefixlen <= 24):
            raise ValueError("must be an IPv4 CIDR between /16 and /24 (VPC limits)")
        if not net.is_private:
            raise ValueError("must be a private (RFC 1918) range, e.g. 10.0.0.0/16")
        return v

    @field_validator("availability_zones")
    @classmethod
    def _zones(cls, v: list[str]) -> list[str]:
        for i, zone in enumerate(v):
            if not AZ.match(zone):
                raise FieldError((i,), zone, "not an AZ name; e.g. us-east-1a")
        if len(set(v)) != len(v):
            raise ValueError("lists an AZ twice; list each once")
        return v

    @model_validator(mode="after")
    def _fits(self) -> NetworkConfig:
        try:
            self.layout()
        except ValueError as exc:
            raise FieldError(("vpc_cidr",), self.vpc_cidr, str(exc)) from None
        return self

    def layout(self) -> SubnetLayout:
        return plan_subnets(
            self.vpc_cidr,
            self.availability_zones,
            self.private_subnet_prefix,
            self.public_subnet_prefix,
        )
