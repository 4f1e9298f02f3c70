"""`llmp verify`'s `adopted` rows: what the stack adopts but does not own, read-only.

The stack's `adopted` output (program/adoption.py) states the VPC, its subnets with
their CIDRs, the addresses the GPU pools take in each AZ at max size, and the adopted
cluster's name, version, add-ons and node role. Each is read back from the account
(`describe_*`, `list_*` and `get_*` calls only); each mismatch is one row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmp.clients.aws import ClientFactory, code, read
from llmp.verify.findings import FAIL, NOT_CHECKED, PASS, Finding, unread

EC2_NOT_IMPLEMENTED = "the endpoint does not implement EC2 VPCs"
EKS_NOT_IMPLEMENTED = "the endpoint does not implement EKS"
ACCESS_NOT_IMPLEMENTED = "the endpoint does not report the authentication mode"
_NO_VPC = frozenset({"InvalidVpcID.NotFound"})
_NO_SUBNET = frozenset({"InvalidSubnetID.NotFound"})
_NOT_FOUND = frozenset({"ResourceNotFoundException", "NoSuchEntity"})
_DEFAULT = "0.0.0.0/0"


def check_adopted(
    clients: ClientFactory, adopted: Mapping[str, Any], region: str, emulated: bool = False
) -> list[Finding]:
    rows: list[Finding] = []
    if adopted.get("network"):
        rows += check_network(clients("ec2", region), adopted["network"], region, emulated)
    if adopted.get("cluster"):
        rows += check_cluster(
            clients("eks", region), clients("iam", region), adopted["cluster"], region, emulated
        )
    return rows


# ---------------------------------------------------------------------------
# The VPC and its subnets
# ---------------------------------------------------------------------------


def check_network(
    ec2: Any, net: Mapping[str, Any], region: str, emulated: bool = False
) -> list[Finding]:
    vpc_id, cidr = str(net["vpc_id"]), str(net["vpc_cidr"])
    resp, exc = read(ec2.describe_vpcs, VpcIds=[vpc_id])
    if exc is not None:
        if code(exc) in _NO_VPC:
            return [Finding(vpc_id, "vpc", FAIL, f"no VPC {vpc_id} in {region}")]
        return [unread(vpc_id, "vpc", exc, emulated, EC2_NOT_IMPLEMENTED)]
    vpc = (resp.get("Vpcs") or [{}])[0]
    cidrs = [a.get("CidrBlock") for a in vpc.get("CidrBlockAssociationSet") or []] or [
        vpc.get("CidrBlock")
    ]
    rows = [
        Finding(vpc_id, "vpc", PASS, f"{cidr}")
        if cidr in cidrs
        else Finding(
            vpc_id,
            "vpc",
            FAIL,
            f"its CIDRs are {', '.join(str(c) for c in cidrs)}; network.vpc_cidr says {cidr}",
        )
    ]
    subnets = net.get("private_subnets") or {}
    needed = net.get("addresses_needed") or {}
    for zone, want in subnets.items():
        rows += _subnet(ec2, vpc_id, zone, want, needed.get(zone), net, emulated)
    return rows


def _subnet(
    ec2: Any,
    vpc_id: str,
    zone: str,
    want: Mapping[str, Any],
    needed: Mapping[str, Any] | None,
    net: Mapping[str, Any],
    emulated: bool,
) -> list[Finding]:
    subnet_id = str(want["id"])
    label = f"{subnet_id} ({zone})"
    resp, exc = read(ec2.describe_subnets, SubnetIds=[subnet_id])
    if exc is not None:
        if code(exc) in _NO_SUBNET:
            return [Finding(label, "subnet", FAIL, f"no subnet {subnet_id}")]
        return [unread(label, "subnet", exc, emulated, EC2_NOT_IMPLEMENTED)]
    subnet = (resp.get("Subnets") or [{}])[0]
    wrong = []
    if subnet.get("VpcId") != vpc_id:
        wrong.append(f"in {subnet.get('VpcId')}, not {vpc_id}")
    if subnet.get("AvailabilityZone") != zone:
        wrong.append(f"in {subnet.get('AvailabilityZone')}, not {zone}")
    if subnet.get("CidrBlock") != want.get("cidr"):
        wrong.append(f"is {subnet.get('CidrBlock')}, config says {want.get('cidr')}")
    rows = [
        Finding(label, "subnet", FAIL, "; ".join(wrong))
        if wrong
        else Finding(label, "subnet", PASS, f"{want.get('cidr')} in {vpc_id}")
    ]
    rows.append(_free_addresses(label, subnet, needed))
    rows += _routes(ec2, label, vpc_id, subnet_id, net, emulated)
    return rows


def _free_addresses(
    label: str, subnet: Mapping[str, Any], needed: Mapping[str, Any] | None
) -> Finding:
    """The subnet's free addresses against what the pools there take at max size (EFA
    nodes take one per interface)."""
    free = subnet.get("AvailableIpAddressCount")
    check = "free addresses"
    if free is None:
        return Finding(label, check, NOT_CHECKED, "the endpoint does not report free addresses")
    want = int((needed or {}).get("addresses", 0))
    pools = ", ".join((needed or {}).get("pools", [])) or "no pool"
    if free < want:
        return Finding(
            label,
            check,
            FAIL,
            f"{free} free; the pools need {want} at max size ({pools} addresses)",
        )
    return Finding(label, check, PASS, f"{free} free; the pools need {want} ({pools})")


def _routes(
    ec2: Any, label: str, vpc_id: str, subnet_id: str, net: Mapping[str, Any], emulated: bool
) -> list[Finding]:
    """The subnet's route table (its own association, else the VPC's main one) sends the
    internet through NAT or a Transit Gateway, and S3 through an endpoint or that route."""
    resp, exc = read(
        ec2.describe_route_tables,
        Filters=[{"Name": "association.subnet-id", "Values": [subnet_id]}],
    )
    if exc is None and not resp.get("RouteTables"):
        resp, exc = read(
            ec2.describe_route_tables,
            Filters=[
                {"Name": "vpc-id", "Values": [vpc_id]},
                {"Name": "association.main", "Values": ["true"]},
            ],
        )
    if exc is not None:
        return [unread(label, "routes", exc, emulated, EC2_NOT_IMPLEMENTED)]
    tables = resp.get("RouteTables") or []
    if not tables:
        return [Finding(label, "routes", FAIL, "no route table")]
    table = tables[0]
    rt_id = str(table.get("RouteTableId"))
    routes = table.get("Routes") or []
    default = next((r for r in routes if r.get("DestinationCidrBlock") == _DEFAULT), None)
    via = None
    if default is not None:
        via = default.get("NatGatewayId") or default.get("TransitGatewayId")
    rows = [
        Finding(label, "internet route", PASS, f"{rt_id}: {_DEFAULT} through {via}")
        if via
        else Finding(
            label,
            "internet route",
            FAIL,
            f"{rt_id} has no {_DEFAULT} route through NAT or a Transit Gateway: nodes "
            "cannot pull images or join",
        )
    ]
    endpoint = net.get("s3_gateway_endpoint_id")
    prefix_lists = [
        r.get("DestinationPrefixListId")
        for r in routes
        if r.get("GatewayId", "").startswith("vpce-")
    ]
    if endpoint and any(r.get("GatewayId") == endpoint for r in routes):
        rows.append(Finding(label, "s3 route", PASS, f"{rt_id}: through {endpoint}"))
    elif endpoint:
        rows.append(
            Finding(
                label,
                "s3 route",
                FAIL if not via else PASS,
                f"{rt_id} has no route through {endpoint}"
                + (f"; S3 goes through {via} (billed per GB)" if via else ""),
            )
        )
    elif prefix_lists or via:
        how = "a gateway endpoint" if prefix_lists else f"{via} (billed per GB)"
        rows.append(Finding(label, "s3 route", PASS, f"{rt_id}: through {how}"))
    else:
        rows.append(Finding(label, "s3 route", FAIL, f"{rt_id}: S3 is not reachable"))
    return rows


# ---------------------------------------------------------------------------
# The cluster
# ---------------------------------------------------------------------------


def check_cluster(
    eks: Any, iam: Any, clu: Mapping[str, Any], region: str, emulated: bool = False
) -> list[Finding]:
    name, version = str(clu["name"]), str(clu["version"])
    resp, exc = read(eks.describe_cluster, name=name)
    if exc is not None:
        if code(exc) in _NOT_FOUND:
            return [Finding(name, "adopted cluster", FAIL, f"no EKS cluster {name} in {region}")]
        return [unread(name, "adopted cluster", exc, emulated, EKS_NOT_IMPLEMENTED)]
    cluster = resp.get("cluster") or {}
    running = cluster.get("version")
    rows = [
        Finding(name, "version", PASS, str(running))
        if running == version
        else Finding(name, "version", FAIL, f"runs {running}; cluster.version says {version}")
    ]
    mode = (cluster.get("accessConfig") or {}).get("authenticationMode")
    if mode is None:
        rows.append(Finding(name, "access entries", NOT_CHECKED, ACCESS_NOT_IMPLEMENTED))
    elif "API" in str(mode).split("_AND_") or mode == "API":
        rows.append(Finding(name, "access entries", PASS, f"authentication mode {mode}"))
    else:
        rows.append(
            Finding(
                name,
                "access entries",
                FAIL,
                f"authentication mode {mode}: the stack's access entries need API or "
                "API_AND_CONFIG_MAP",
            )
        )
    created = [str(c).split()[1] for c in clu.get("created") or [] if str(c).startswith("add-on ")]
    rows += _addons(eks, name, clu.get("addons_present") or {}, created, emulated)
    role = clu.get("node_role_arn")
    if clu.get("node_role") == "the cluster's" and role and str(role).startswith("arn:"):
        role_name = str(role).rsplit("/", 1)[-1]
        _, exc = read(iam.get_role, RoleName=role_name)
        if exc is None:
            rows.append(Finding(name, "node role", PASS, str(role)))
        elif code(exc) in _NOT_FOUND:
            rows.append(Finding(name, "node role", FAIL, f"no IAM role {role_name}"))
        else:
            rows.append(unread(name, "node role", exc, emulated, "the endpoint has no IAM"))
    return rows


def _addons(
    eks: Any, name: str, present: Mapping[str, str], created: list[str], emulated: bool
) -> list[Finding]:
    resp, exc = read(eks.list_addons, clusterName=name)
    if exc is not None:
        return [unread(name, "add-ons", exc, emulated, "the endpoint does not list add-ons")]
    installed = set(resp.get("addons") or [])
    rows = [
        Finding(
            addon,
            "adopted add-on",
            FAIL,
            f"installed on {name} but not in cluster.existing.addons: the stack would take "
            "it over; list it with its version",
        )
        for addon in created
        if addon in installed
    ]
    for addon, version in sorted(present.items()):
        if addon not in installed:
            rows.append(
                Finding(
                    addon, "adopted add-on", FAIL, f"not installed on {name}; config says {version}"
                )
            )
            continue
        found, exc = read(eks.describe_addon, clusterName=name, addonName=addon)
        if exc is not None:
            rows.append(unread(addon, "adopted add-on", exc, emulated, "no add-on details"))
            continue
        running = (found.get("addon") or {}).get("addonVersion")
        rows.append(
            Finding(addon, "adopted add-on", PASS, str(running))
            if running == version
            else Finding(
                addon,
                "adopted add-on",
                FAIL,
                f"runs {running}; cluster.existing.addons says {version}",
            )
        )
    return rows
