"""`llmp verify --preflight STACK`: before a deploy, whether the account can run the pools.

Two reads per stack, both live (the catalog's offerings and quota codes are what `llmp synth`
checks offline):

- offerings: the account's own AZ names -> zone ids (EC2 DescribeAvailabilityZones), then,
  per pool, the zone ids that offer its instance type (DescribeInstanceTypeOfferings with
  LocationType availability-zone-id); a pool with a zone that does not offer it fails, naming
  the zones that do;
- quotas: per EC2 vCPU quota the pools need (`llmp.plan.quotas`), its applied value (Service
  Quotas GetServiceQuota, service `ec2`) against the vCPUs the pools need at max size.

A read the endpoint does not implement is `not checked` (moto has no EC2 quotas); a read the
account refuses fails, as everywhere in `llmp verify`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmp.clients.aws import ClientFactory, code, read
from llmp.plan.quotas import quota_demands
from llmp.verify.findings import FAIL, NOT_CHECKED, PASS, Finding, unread
from spec.platform import PlatformConfig

QUOTAS_NOT_IMPLEMENTED = "the endpoint does not implement Service Quotas for EC2"
ZONES_NOT_IMPLEMENTED = "the endpoint does not implement EC2 zones or offerings"
_UNKNOWN_QUOTA = frozenset({"NoSuchResourceException"})


def _pools(cfg: PlatformConfig) -> list[tuple[str, str, Sequence[str]]]:
    zones = cfg.network.availability_zones
    pools: list[tuple[str, str, Sequence[str]]] = []
    if not cfg.adopts_cluster:  # an adopted cluster's system pool is its owner's
        pools.append(("system pool", cfg.system_pool.instance_type, zones))
    pools += [
        (f"node pool {n}", p.instance_type, p.availability_zones or zones)
        for n, p in cfg.node_pools.items()
    ]
    pools += [
        (f"cpu pool {n}", p.instance_type, p.availability_zones or zones)
        for n, p in cfg.cpu_pools.items()
    ]
    return pools


def check_offerings(ec2: Any, cfg: PlatformConfig, emulated: bool) -> list[Finding]:
    """One row per pool: every zone it runs in offers its instance type."""
    described, exc = read(ec2.describe_availability_zones)
    if exc is not None:
        return [unread("zones", "AZ names -> zone ids", exc, emulated, ZONES_NOT_IMPLEMENTED)]
    ids = {z["ZoneName"]: z["ZoneId"] for z in described.get("AvailabilityZones") or []}
    rows = []
    for pool, instance_type, zones in _pools(cfg):
        check = f"{instance_type} offered"
        missing_names = [z for z in zones if z not in ids]
        if missing_names:
            rows.append(
                Finding(pool, check, FAIL, f"the account has no AZ {', '.join(missing_names)}")
            )
            continue
        offered, err = _offered(ec2, instance_type)
        if err is not None:
            rows.append(unread(pool, check, err, emulated, ZONES_NOT_IMPLEMENTED))
            continue
        lacking = [f"{z} ({ids[z]})" for z in zones if ids[z] not in offered]
        if lacking:
            where = ", ".join(sorted(offered)) or "no zone of the region"
            rows.append(
                Finding(pool, check, FAIL, f"not in {', '.join(lacking)}; offered in {where}")
            )
        else:
            shown = ", ".join(f"{z} ({ids[z]})" for z in zones)
            rows.append(Finding(pool, check, PASS, f"in {shown}"))
    return rows


def _offered(ec2: Any, instance_type: str) -> tuple[set[str], Exception | None]:
    """The zone ids that offer `instance_type`, every page read."""
    offered: set[str] = set()
    token = None
    while True:
        page, err = read(
            ec2.describe_instance_type_offerings,
            LocationType="availability-zone-id",
            Filters=[{"Name": "instance-type", "Values": [instance_type]}],
            **({"NextToken": token} if token else {}),
        )
        if err is not None:
            return offered, err
        offered |= {o["Location"] for o in page.get("InstanceTypeOfferings") or []}
        token = page.get("NextToken")
        if not token:
            return offered, None


def check_quotas(quotas: Any, cfg: PlatformConfig, emulated: bool) -> list[Finding]:
    """One row per EC2 vCPU quota the pools need: its applied value covers them."""
    demands, _ = quota_demands(cfg)
    rows = []
    for d in demands:
        resource = f"quota {d.code}"
        check = f"{d.family} {d.market} vCPUs"
        got, exc = read(quotas.get_service_quota, ServiceCode="ec2", QuotaCode=d.code)
        if exc is not None:
            if code(exc) in _UNKNOWN_QUOTA and not emulated:
                reason = f"no quota {d.code} in ec2 ({d.name}): check the catalog's code"
                rows.append(Finding(resource, check, FAIL, reason))
            elif code(exc) in _UNKNOWN_QUOTA:
                rows.append(Finding(resource, check, NOT_CHECKED, QUOTAS_NOT_IMPLEMENTED))
            else:
                rows.append(unread(resource, check, exc, emulated, QUOTAS_NOT_IMPLEMENTED))
            continue
        value = (got.get("Quota") or {}).get("Value")
        if value is None:
            rows.append(Finding(resource, check, NOT_CHECKED, "the quota reports no value"))
        elif value >= d.vcpus:
            rows.append(Finding(resource, check, PASS, f"{value:,.0f} >= {d.vcpus:,} needed"))
        else:
            rows.append(
                Finding(
                    resource,
                    check,
                    FAIL,
                    f"{value:,.0f} < {d.vcpus:,} needed at max size; request an increase "
                    f"(aws service-quotas request-service-quota-increase --service-code ec2 "
                    f"--quota-code {d.code} --desired-value {d.vcpus})",
                )
            )
    return rows


def check(cfg: PlatformConfig, clients: ClientFactory, region: str) -> list[Finding]:
    """The preflight rows of the stack `cfg` in `region`: offerings, then quotas."""
    emulated = clients.emulated
    rows = check_offerings(clients("ec2", region), cfg, emulated)
    rows += check_quotas(clients("service-quotas", region), cfg, emulated)
    return [Finding(r.resource, r.check, r.status, r.reason, "preflight") for r in rows]
