"""`tags` and `network`: cost-allocation tags and the VPC's layout."""

from __future__ import annotations

import ipaddress
import re
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


INTERFACE_ENDPOINTS: dict[str, str] = {
    "ecr.api": "ECR's API: the nodes authenticate and resolve images",
    "ecr.dkr": "ECR's registry: image manifests (layers come from S3)",
    "sts": "STS: regional credentials for SDKs that assume a role",
    "logs": "CloudWatch Logs: the log agents' and exporters' writes",
    "eks-auth": "EKS Auth: the Pod Identity agent's credentials",
    "secretsmanager": "Secrets Manager: the CSI provider reads the gateway keys",
    "eks": "the EKS API: nodeadm and the node monitoring agent",
    "ec2": "EC2: the VPC CNI's addresses, the autoscaler's instances",
    "autoscaling": "Auto Scaling: the node autoscaler",
    "elasticloadbalancing": "ELB: the load balancer controller",
    "monitoring": "CloudWatch metrics: the FSx exporter",
    "kms": "KMS: SDKs that encrypt or decrypt on the pod's behalf",
    "sns": "SNS: Alertmanager's pages",
    "ssm": "Systems Manager: the SSM agent on the nodes",
}
"""Services the private subnets may reach through an interface endpoint (PrivateLink), and
who calls them from the VPC."""
DEFAULT_INTERFACE_ENDPOINTS = ("ecr.api", "ecr.dkr", "sts", "logs", "eks-auth")
"""Every stack's, where `network.interface_endpoints` is left out (serving adds
secretsmanager): the image pulls of every node and the credentials of every pod stay in the
VPC; the rest of the AWS APIs the platform's own pods call go through NAT."""
BUCKET_PATTERN = r"^[a-z0-9*][a-z0-9.*-]{0,62}$"

SUBNET_ID = r"^subnet-[0-9a-f]{8,17}$"
VPC_ID = r"^vpc-[0-9a-f]{8,17}$"


class AdoptedSubnet(Section):
    """A subnet the stack uses but does not own."""

    id: str = Field(pattern=SUBNET_ID, description="Subnet id, e.g. subnet-0a1b2c3d4e5f60718.")
    cidr: str = Field(description="Its IPv4 CIDR, as the network team allocated it.")

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        try:
            ipaddress.ip_network(v)
        except ValueError:
            raise ValueError("not an IPv4 CIDR; e.g. 10.50.0.0/19") from None
        return v


class ExistingNetworkConfig(Section):
    """A VPC someone else owns: the stack creates no VPC, subnet, route table or NAT."""

    vpc_id: str = Field(pattern=VPC_ID, description="The VPC's id.")
    private_subnets: dict[str, AdoptedSubnet] = Field(
        description="AZ -> the private (node and pod) subnet of each of availability_zones."
    )
    public_subnets: dict[str, AdoptedSubnet] = Field(
        default_factory=dict,
        description="AZ -> public subnet; only for an internet-facing load balancer.",
    )
    s3_gateway_endpoint_id: str | None = Field(
        None,
        pattern=r"^vpce-[0-9a-f]{8,17}$",
        description="The VPC's own S3 gateway endpoint; none: the stack creates one.",
    )
    private_route_table_ids: list[str] = Field(
        default_factory=list,
        description="Route tables of the private subnets, for the S3 endpoint the stack "
        "creates (their routes stay the owner's).",
    )
    kms_endpoint_addresses: list[str] = Field(
        default_factory=list,
        description="Private addresses of the VPC's KMS interface endpoint (one per "
        "subnet): tenant pods may reach these on HTTPS, so the promotion job can sign a "
        "revision. Empty: no KMS in reach of tenant pods, and promotion fails to sign.",
    )

    @field_validator("kms_endpoint_addresses")
    @classmethod
    def _addresses(cls, v: list[str]) -> list[str]:
        for i, address in enumerate(v):
            try:
                ip = ipaddress.ip_address(address)
            except ValueError:
                raise FieldError((i,), address, "an IPv4 address, e.g. 10.50.1.17") from None
            if ip.version != 4 or not ip.is_private:
                raise FieldError((i,), address, "a private IPv4 address inside the VPC")
        return v

    @field_validator("private_route_table_ids")
    @classmethod
    def _route_tables(cls, v: list[str]) -> list[str]:
        for i, rt in enumerate(v):
            if not rt.startswith("rtb-"):
                raise FieldError((i,), rt, "not a route table id; e.g. rtb-0a1b2c3d4e5f60718")
        return v

    def adopted_checks(self, vpc_cidr: str, zones: list[str], s3_endpoint: bool) -> None:
        """The subnets name the stack's AZs and sit inside `vpc_cidr`, without overlap."""
        if set(self.private_subnets) != set(zones):
            raise FieldError(
                ("private_subnets",),
                sorted(self.private_subnets),
                f"name one subnet per AZ of network.availability_zones ({', '.join(zones)})",
            )
        vpc = ipaddress.ip_network(vpc_cidr)
        seen: dict[ipaddress.IPv4Network | ipaddress.IPv6Network, str] = {}
        for kind, subnets in (
            ("private_subnets", self.private_subnets),
            ("public_subnets", self.public_subnets),
        ):
            for zone, subnet in subnets.items():
                here = (kind, zone, "cidr")
                if zone not in zones:
                    raise FieldError(
                        (kind, zone),
                        zone,
                        f"not one of network.availability_zones ({', '.join(zones)})",
                    )
                net = ipaddress.ip_network(subnet.cidr)
                if not net.subnet_of(vpc):  # type: ignore[arg-type]
                    raise FieldError(here, subnet.cidr, f"is not inside network.vpc_cidr {vpc}")
                for other, where in seen.items():
                    if net.overlaps(other):
                        raise FieldError(here, subnet.cidr, f"overlaps {where} ({other})")
                seen[net] = f"{kind}.{zone}"
        if s3_endpoint and self.s3_gateway_endpoint_id is None and not self.private_route_table_ids:
            raise FieldError(
                ("private_route_table_ids",),
                [],
                "the stack creates an S3 gateway endpoint (none is named in "
                "s3_gateway_endpoint_id): list the private subnets' route tables, or name "
                "the VPC's endpoint, or set network.s3_gateway_endpoint: false",
            )


class NetworkConfig(Section):
    """The VPC: one private and one public subnet per AZ, NAT, S3 gateway endpoint."""

    vpc_cidr: str = Field("10.0.0.0/16", description="IPv4 CIDR of the VPC.")
    availability_zones: list[str] = Field(
        min_length=2,
        description="AZs to use (EKS needs two or more); subnets are laid out in this order.",
    )
    zone_ids: dict[str, str] | None = Field(
        None,
        description="This account's zone id of each AZ name (`us-east-1a: use1-az4`, from "
        "`aws ec2 describe-availability-zones`; names map to different zones in each "
        "account). With it a pool in a zone that does not offer its instance type is "
        "refused offline; without it the catalog's offerings are checked per region only "
        "(`llmp verify --preflight` checks the zones live).",
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
    s3_endpoint_buckets: list[str] = Field(
        default_factory=list,
        description="Buckets (names; `*` matches any run of characters) the S3 gateway "
        "endpoint the stack creates admits beside the stack's own "
        "(`storage.bucket_name_prefix`-*) and ECR's image layers; every other bucket is "
        "refused through it. A shared stack lists its team stacks' prefixes "
        "(`acme-llm-team-*`); a pipeline that reads a public dataset names its bucket.",
    )
    interface_endpoints: list[str] | None = Field(
        None,
        description="AWS services the private subnets reach through interface endpoints "
        "(PrivateLink, private DNS) instead of NAT, each one "
        f"of {', '.join(INTERFACE_ENDPOINTS)}. Left out: "
        f"{', '.join(DEFAULT_INTERFACE_ENDPOINTS)}, secretsmanager where serving is on, and "
        "kms where there is a `models` bucket (tenant pods reach that one: the promotion "
        "job signs revisions); `[]`: none. Priced per endpoint per AZ-hour. A stack in a "
        "VPC it adopts creates none (the VPC's owner keeps its endpoints; see "
        "`existing.kms_endpoint_addresses`).",
    )
    existing: ExistingNetworkConfig | None = Field(
        None,
        description="Adopt this VPC instead of creating one (the subnet prefixes and NAT "
        "settings then do not apply).",
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

    @field_validator("s3_endpoint_buckets")
    @classmethod
    def _buckets(cls, v: list[str]) -> list[str]:
        for i, name in enumerate(v):
            if not re.match(BUCKET_PATTERN, name):
                raise FieldError(
                    (i,), name, "a bucket name or pattern: a-z, 0-9, '.', '-' and '*'"
                )
            if len(name.replace("*", "")) < 3:
                raise FieldError(
                    (i,), name, "admits nearly every bucket: name the buckets or their prefix"
                )
        return v

    @field_validator("interface_endpoints")
    @classmethod
    def _endpoints(cls, v: list[str] | None) -> list[str] | None:
        for i, service in enumerate(v or []):
            if service not in INTERFACE_ENDPOINTS:
                raise FieldError((i,), service, f"one of {', '.join(INTERFACE_ENDPOINTS)}")
        if v is not None and len(set(v)) != len(v):
            raise ValueError("lists a service twice; list each once")
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
        if self.existing is not None and self.interface_endpoints:
            raise FieldError(
                ("interface_endpoints",),
                self.interface_endpoints,
                "an adopted VPC's endpoints are its owner's: leave this out",
            )
        if self.existing is not None:
            try:
                self.existing.adopted_checks(
                    self.vpc_cidr, self.availability_zones, self.s3_gateway_endpoint
                )
            except FieldError as exc:
                raise FieldError(("existing", *exc.path), exc.value, exc.expected) from None
            return self
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
