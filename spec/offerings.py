"""Whether each pool's instance type is offered where the pool runs (the catalog's `offerings`).

EC2 offers an instance type in some zones of some regions; a node group in a zone that does
not offer its type never gets a node. The catalog records the offerings by zone id
(`use1-az4`), because a zone's name (`us-east-1a`) maps to a different zone id in every
account. So the check is, offline:

- per region, always: a pool whose type the stack's region does not offer at all (p4de in
  eu-north-1) is refused;
- per zone, where `network.zone_ids` states the account's mapping of the AZ names to zone
  ids (`aws ec2 describe-availability-zones`): a pool in a zone that does not offer its type
  is refused, naming the zones that do.

Without the mapping the zone is not checked offline: `llmp verify --preflight` reads the
account's own mapping and offerings (DescribeAvailabilityZones,
DescribeInstanceTypeOfferings) live.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from spec.catalog import catalog
from spec.errors import FieldError

if TYPE_CHECKING:
    from spec.platform import PlatformConfig

ZONE_ID = re.compile(r"^[a-z]{2,5}\d-az\d{1,2}$")


def _where(offered: Mapping[str, Sequence[str]], region: str) -> str:
    """Where a type is offered: the region's zones, else (at most five) other regions."""
    if offered.get(region):
        return f"offered in {', '.join(offered[region])}"
    regions = sorted(offered)
    if not regions:
        return "offered in no region the catalog lists"
    more = f" and {len(regions) - 5} more" if len(regions) > 5 else ""
    return f"offered in {', '.join(regions[:5])}{more}"


def check_zone_ids(region: str, names: Sequence[str], zone_ids: Mapping[str, str]) -> None:
    """`network.zone_ids`: a name of network.availability_zones -> a zone id of the region."""
    known = catalog().offerings.zone_ids.get(region)
    for name, zone_id in zone_ids.items():
        if name not in names:
            raise FieldError(
                ("network", "zone_ids", name),
                zone_id,
                f"{name} is not one of network.availability_zones ({', '.join(names)})",
            )
        if not ZONE_ID.match(zone_id) or (known is not None and zone_id not in known):
            ids = ", ".join(known) if known else "e.g. use1-az4"
            raise FieldError(
                ("network", "zone_ids", name),
                zone_id,
                f"not a zone id of {region} ({ids}); see `aws ec2 describe-availability-zones`",
            )
    if len(set(zone_ids.values())) != len(zone_ids):
        raise FieldError(
            ("network", "zone_ids"), dict(zone_ids), "maps two AZ names to one zone id"
        )


def check_pool(
    key: tuple[str | int, ...],
    instance_type: str,
    region: str,
    zones: Sequence[str],
    zone_ids: Mapping[str, str],
    *,
    listed: bool,
) -> None:
    """Refuse (FieldError at `key`) a pool whose type `region`, or a mapped zone of `zones`,
    does not offer. `listed`: the pool names its zones (else it spans the network's)."""
    offerings = catalog().offerings
    if not offerings.knows_region(region):
        return  # a region the source did not read: nothing to say offline
    offered = offerings.regions_of(instance_type)
    here = offered.get(region, [])
    if not here:
        raise FieldError(
            (*key, "instance_type"),
            instance_type,
            f"not offered in {region}; {_where(offered, region)} "
            f"(catalog offerings, {offerings.checked})",
        )
    for i, name in enumerate(zones):
        zone_id = zone_ids.get(name)
        if zone_id is None or zone_id in here:
            continue
        where = (*key, "availability_zones", i) if listed else (*key, "instance_type")
        value = name if listed else instance_type
        spans = "" if listed else " (the pool spans every AZ: list its own)"
        raise FieldError(
            where,
            value,
            f"{instance_type} is not offered in {name} ({zone_id}){spans}; "
            f"{_where(offered, region)} (catalog offerings, {offerings.checked})",
        )


def check_offerings(cfg: PlatformConfig) -> None:
    """Every pool of the stack against the catalog's offerings (see the module's docstring)."""
    network = cfg.network
    zone_ids = network.zone_ids or {}
    check_zone_ids(cfg.region, network.availability_zones, zone_ids)
    pools: list[tuple[tuple[str | int, ...], str, list[str] | None]] = []
    if not cfg.adopts_cluster:  # an adopted cluster's system pool is its owner's
        pools.append((("system_pool",), cfg.system_pool.instance_type, None))
    pools += [
        (("node_pools", name), pool.instance_type, pool.availability_zones)
        for name, pool in cfg.node_pools.items()
    ]
    pools += [
        (("cpu_pools", name), pool.instance_type, pool.availability_zones)
        for name, pool in cfg.cpu_pools.items()
    ]
    for key, instance_type, zones in pools:
        check_pool(
            key,
            instance_type,
            cfg.region,
            zones or network.availability_zones,
            zone_ids,
            listed=zones is not None,
        )
