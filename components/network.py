"""Network: the VPC every other component lives in.

Owns the VPC, one private and one public subnet per AZ (the CIDRs it is given:
the program computes them with `spec.addressing`), the internet gateway, NAT
(one, or one per AZ),
route tables, the S3 gateway endpoint that keeps checkpoint traffic off NAT (its
policy admits the platform's buckets and ECR's image layers, no other bucket),
the interface endpoints that keep image pulls and credentials in the VPC, and
the EFA security group that lets EFA traffic flow between its members.
`AdoptedNetwork` is the same seen from a VPC someone else owns: only the EFA
security group, and the S3 endpoint where the VPC lacks one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_aws as aws


@dataclass(frozen=True, kw_only=True)
class NetworkArgs:
    vpc_cidr: str
    private_subnets: Mapping[str, str]
    """AZ -> CIDR of its private (node and pod) subnet, in the order the AZs are used."""
    public_subnets: Mapping[str, str]
    """AZ -> CIDR of its public subnet (NAT gateways, internet-facing load balancers)."""
    nat_gateways: Literal["single", "per_az"] = "single"
    """One NAT gateway in the first AZ, or one per AZ (survives the loss of an AZ)."""
    s3_gateway_endpoint: bool = True
    """Route the private subnets' S3 traffic through a (free) gateway endpoint."""
    region: str
    """Region of the VPC (for the S3 endpoint's service name)."""
    cluster_name: str
    """EKS cluster name, for the subnet discovery tags load balancers use."""
    s3_endpoint_buckets: Sequence[str] = ()
    """Bucket names (`*` wildcards) the S3 gateway endpoint admits beside ECR's image
    layers (none: those layers only)."""
    interface_endpoints: Sequence[str] = ()
    """Services (`ecr.api`, `sts`...) reached through an interface endpoint in every
    private subnet, private DNS on."""
    public_load_balancers: bool = False
    """The public subnets carry the ELB role tag (`kubernetes.io/role/elb`): only where the
    platform itself serves through an internet-facing load balancer, so that no Service of
    type LoadBalancer lands in them by default."""


def ecr_layer_bucket(region: str) -> str:
    """The bucket ECR serves image layers from (ECR user guide, "Amazon ECR interface VPC
    endpoints (AWS PrivateLink)", minimum Amazon S3 bucket permissions)."""
    return f"prod-{region}-starport-layer-bucket"


def s3_endpoint_policy(buckets: Sequence[str], region: str) -> str:
    """The S3 gateway endpoint's policy: anything on `buckets` (names or `*` patterns) and
    their objects, reads of ECR's layers; nothing else, so a pod or node whose role may
    write elsewhere still cannot copy data out through the endpoint to a bucket not named
    (AWS PrivateLink guide, "Control access to VPC endpoints using endpoint policies")."""
    resources = [arn for b in buckets for arn in (f"arn:aws:s3:::{b}", f"arn:aws:s3:::{b}/*")]
    platform = [
        {
            "Sid": "PlatformBuckets",
            "Effect": "Allow",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": resources,
        }
    ]
    layers = {
        "Sid": "EcrImageLayers",
        "Effect": "Allow",
        "Principal": "*",
        "Action": "s3:GetObject",
        "Resource": f"arn:aws:s3:::{ecr_layer_bucket(region)}/*",
    }
    statements = [*(platform if buckets else []), layers]
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def s3_gateway_endpoint(
    name: str,
    vpc_id: pulumi.Input[str],
    route_table_ids: Sequence[pulumi.Input[str]],
    buckets: Sequence[str],
    region: str,
    *,
    parent: pulumi.Resource,
) -> aws.ec2.VpcEndpoint:
    """The S3 gateway endpoint on `route_table_ids`, with the policy that admits `buckets`
    and ECR's layers only (`s3_endpoint_policy`)."""
    return aws.ec2.VpcEndpoint(
        f"{name}-s3",
        vpc_id=vpc_id,
        service_name=f"com.amazonaws.{region}.s3",
        vpc_endpoint_type="Gateway",
        route_table_ids=list(route_table_ids),
        policy=s3_endpoint_policy(buckets, region),
        tags={"Name": f"{name}-s3"},
        opts=pulumi.ResourceOptions(parent=parent),
    )


def interface_endpoints(
    name: str,
    services: Sequence[str],
    *,
    vpc_id: pulumi.Input[str],
    vpc_cidr: str,
    subnet_ids: Sequence[pulumi.Input[str]],
    region: str,
    parent: pulumi.Resource,
) -> dict[str, aws.ec2.VpcEndpoint]:
    """An interface endpoint per service in every private subnet, with private DNS (the
    SDKs' usual hostnames resolve to it) and a security group that admits HTTPS from the
    VPC only."""
    if not services:
        return {}
    child = pulumi.ResourceOptions(parent=parent)
    group = aws.ec2.SecurityGroup(
        f"{name}-endpoints",
        vpc_id=vpc_id,
        description="Interface endpoints: HTTPS from the VPC",
        tags={"Name": f"{name}-endpoints"},
        opts=child,
    )
    aws.vpc.SecurityGroupIngressRule(
        f"{name}-endpoints-in",
        security_group_id=group.id,
        cidr_ipv4=vpc_cidr,
        ip_protocol="tcp",
        from_port=443,
        to_port=443,
        description="HTTPS from the VPC",
        opts=child,
    )
    return {
        service: aws.ec2.VpcEndpoint(
            f"{name}-{service.replace('.', '-')}",
            vpc_id=vpc_id,
            service_name=f"com.amazonaws.{region}.{service}",
            vpc_endpoint_type="Interface",
            subnet_ids=list(subnet_ids),
            security_group_ids=[group.id],
            private_dns_enabled=True,
            tags={"Name": f"{name}-{service}"},
            opts=child,
        )
        for service in services
    }


def endpoint_addresses(
    endpoint: aws.ec2.VpcEndpoint, parent: pulumi.Resource
) -> pulumi.Output[list[str]]:
    """The private addresses of an interface endpoint's network interfaces (one per
    subnet), read once it exists: a NetworkPolicy can admit exactly these, and no other
    address of the VPC."""
    opts = pulumi.InvokeOutputOptions(parent=parent)

    def read(ids: Sequence[str]) -> pulumi.Output[list[str]]:
        found = [
            aws.ec2.get_network_interface_output(id=i, opts=opts).private_ip for i in ids
        ]
        return pulumi.Output.all(*found).apply(lambda ips: sorted(str(ip) for ip in ips))

    return endpoint.network_interface_ids.apply(read)


TENANT_ENDPOINTS = ("kms",)
"""The interface endpoints tenant pods may reach (HTTPS to their addresses only): KMS, for
the promotion job's signature of a revision. Every other endpoint serves the nodes and
the platform's own pods."""


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    private_subnet_ids: dict[str, pulumi.Output[str]]
    """AZ -> private subnet id."""
    public_subnet_ids: dict[str, pulumi.Output[str]]
    efa_security_group_id: pulumi.Output[str]
    endpoint_addresses: dict[str, pulumi.Output[list[str]]]
    """Service -> the addresses of its interface endpoint, for the TENANT_ENDPOINTS the
    network has."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmp:network:Network", name, None, opts)
        zones = list(args.private_subnets)
        if list(args.public_subnets) != zones:
            raise ValueError("private_subnets and public_subnets must name the same AZs")
        child = pulumi.ResourceOptions(parent=self)

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={"Name": f"{name}-vpc"},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=vpc.id, tags={"Name": f"{name}-igw"}, opts=child
        )

        cluster_tag = f"kubernetes.io/cluster/{args.cluster_name}"
        public: dict[str, aws.ec2.Subnet] = {}
        private: dict[str, aws.ec2.Subnet] = {}
        for zone in zones:
            public[zone] = aws.ec2.Subnet(
                f"{name}-public-{zone}",
                vpc_id=vpc.id,
                availability_zone=zone,
                cidr_block=args.public_subnets[zone],
                map_public_ip_on_launch=False,
                tags={
                    "Name": f"{name}-public-{zone}",
                    **({"kubernetes.io/role/elb": "1"} if args.public_load_balancers else {}),
                    cluster_tag: "shared",
                },
                opts=child,
            )
            private[zone] = aws.ec2.Subnet(
                f"{name}-private-{zone}",
                vpc_id=vpc.id,
                availability_zone=zone,
                cidr_block=args.private_subnets[zone],
                tags={
                    "Name": f"{name}-private-{zone}",
                    "kubernetes.io/role/internal-elb": "1",
                    cluster_tag: "shared",
                },
                opts=child,
            )

        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt",
            vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            tags={"Name": f"{name}-public"},
            opts=child,
        )
        for zone, subnet in public.items():
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{zone}",
                subnet_id=subnet.id,
                route_table_id=public_rt.id,
                opts=child,
            )

        nat_zones = zones if args.nat_gateways == "per_az" else zones[:1]
        nats: dict[str, aws.ec2.NatGateway] = {}
        for zone in nat_zones:
            eip = aws.ec2.Eip(
                f"{name}-nat-{zone}", domain="vpc", tags={"Name": f"{name}-nat-{zone}"}, opts=child
            )
            nats[zone] = aws.ec2.NatGateway(
                f"{name}-nat-{zone}",
                allocation_id=eip.allocation_id,
                subnet_id=public[zone].id,
                tags={"Name": f"{name}-nat-{zone}"},
                # A NAT gateway in a subnet without an internet route cannot reach out.
                opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
            )

        private_rts: list[aws.ec2.RouteTable] = []
        for zone, subnet in private.items():
            nat = nats.get(zone) or nats[nat_zones[0]]
            rt = aws.ec2.RouteTable(
                f"{name}-private-{zone}",
                vpc_id=vpc.id,
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)],
                tags={"Name": f"{name}-private-{zone}"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{zone}", subnet_id=subnet.id, route_table_id=rt.id, opts=child
            )
            private_rts.append(rt)

        if args.s3_gateway_endpoint:
            s3_gateway_endpoint(
                name,
                vpc.id,
                [rt.id for rt in private_rts],
                args.s3_endpoint_buckets,
                args.region,
                parent=self,
            )
        endpoints = interface_endpoints(
            name,
            args.interface_endpoints,
            vpc_id=vpc.id,
            vpc_cidr=args.vpc_cidr,
            subnet_ids=[s.id for s in private.values()],
            region=args.region,
            parent=self,
        )
        # What tenant pods may call inside the VPC: KMS, where the promotion job signs.
        self.endpoint_addresses = {
            service: endpoint_addresses(endpoints[service], self)
            for service in TENANT_ENDPOINTS
            if service in endpoints
        }

        efa_security_group_id = efa_security_group(name, vpc.id, parent=self)

        self.vpc_id = vpc.id
        self.private_subnet_ids = {z: s.id for z, s in private.items()}
        self.public_subnet_ids = {z: s.id for z, s in public.items()}
        self.efa_security_group_id = efa_security_group_id
        self.register_outputs(
            {
                "vpc_id": self.vpc_id,
                "private_subnet_ids": self.private_subnet_ids,
                "public_subnet_ids": self.public_subnet_ids,
                "efa_security_group_id": self.efa_security_group_id,
            }
        )


@dataclass(frozen=True, kw_only=True)
class AdoptedNetworkArgs:
    vpc_id: pulumi.Input[str]
    """The VPC the stack adopts (its owner keeps routes, NAT and endpoints)."""
    private_subnet_ids: Mapping[str, pulumi.Input[str]]
    """AZ -> id of its private subnet, in the order the AZs are used."""
    public_subnet_ids: Mapping[str, pulumi.Input[str]]
    """AZ -> id of its public subnet, where one is adopted."""
    s3_endpoint_route_table_ids: Sequence[str] = ()
    """Route tables an S3 gateway endpoint of the stack's own attaches to; none: no endpoint
    (the VPC has one)."""
    s3_endpoint_buckets: Sequence[str] = ()
    """What the stack's own S3 endpoint admits (`NetworkArgs.s3_endpoint_buckets`)."""
    endpoint_addresses: Mapping[str, pulumi.Input[Sequence[str]]] = field(default_factory=dict)
    """Service -> the addresses of the VPC's interface endpoint for it (the owner's, from
    config or a shared stack's outputs), for the TENANT_ENDPOINTS tenant pods call."""
    region: str


class AdoptedNetwork(pulumi.ComponentResource):
    """Network in a VPC someone else owns.

    Owns only what the platform needs beside the owner's network: the EFA security
    group, and an S3 gateway endpoint where the VPC has none (attached to the route
    tables it is given; the routes themselves stay the owner's). It declares no VPC,
    subnet, route table, NAT gateway or internet gateway.
    """

    vpc_id: pulumi.Output[str]
    private_subnet_ids: dict[str, pulumi.Output[str]]
    public_subnet_ids: dict[str, pulumi.Output[str]]
    efa_security_group_id: pulumi.Output[str]
    endpoint_addresses: dict[str, pulumi.Output[list[str]]]
    created: list[str]
    """What the component created, one phrase each (the preview's `adopted` output)."""

    def __init__(
        self, name: str, args: AdoptedNetworkArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("llmp:network:AdoptedNetwork", name, None, opts)
        self.created = []
        if args.s3_endpoint_route_table_ids:
            s3_gateway_endpoint(
                name,
                args.vpc_id,
                list(args.s3_endpoint_route_table_ids),
                args.s3_endpoint_buckets,
                args.region,
                parent=self,
            )
            self.created.append(f"S3 gateway endpoint {name}-s3")
        self.efa_security_group_id = efa_security_group(name, args.vpc_id, parent=self)
        self.created.append(f"EFA security group {name}-efa")

        self.endpoint_addresses = {
            service: pulumi.Output.from_input(addresses).apply(list)
            for service, addresses in args.endpoint_addresses.items()
        }
        self.vpc_id = pulumi.Output.from_input(args.vpc_id)
        self.private_subnet_ids = {
            z: pulumi.Output.from_input(s) for z, s in args.private_subnet_ids.items()
        }
        self.public_subnet_ids = {
            z: pulumi.Output.from_input(s) for z, s in args.public_subnet_ids.items()
        }
        self.register_outputs(
            {
                "vpc_id": self.vpc_id,
                "private_subnet_ids": self.private_subnet_ids,
                "public_subnet_ids": self.public_subnet_ids,
                "efa_security_group_id": self.efa_security_group_id,
            }
        )


def efa_security_group(
    name: str, vpc_id: pulumi.Input[str], *, parent: pulumi.Resource
) -> pulumi.Output[str]:
    """The EFA security group and its two self-referencing rules; its id."""
    child = pulumi.ResourceOptions(parent=parent)
    # EFA traffic (SRD) only flows between interfaces whose security group
    # allows all traffic from and to itself; nothing else is let in.
    efa_sg = aws.ec2.SecurityGroup(
        f"{name}-efa",
        vpc_id=vpc_id,
        description="EFA: all traffic between members of this group",
        tags={"Name": f"{name}-efa"},
        opts=child,
    )
    aws.vpc.SecurityGroupIngressRule(
        f"{name}-efa-in",
        security_group_id=efa_sg.id,
        referenced_security_group_id=efa_sg.id,
        ip_protocol="-1",
        description="EFA from members",
        opts=child,
    )
    aws.vpc.SecurityGroupEgressRule(
        f"{name}-efa-out",
        security_group_id=efa_sg.id,
        referenced_security_group_id=efa_sg.id,
        ip_protocol="-1",
        description="EFA to members",
        opts=child,
    )
    return efa_sg.id
