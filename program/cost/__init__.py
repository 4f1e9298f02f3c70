"""The stack's `cost` output: its own declared resources, priced with dated prices.

No cloud call by default: the same numbers come out of `llmp synth` and
`pulumi up` (the catalog's dated prices), and a PR that doubles `max_size`
shows what it costs before it merges. `llmp cost --prices live` passes a
`PriceBook` of on-demand prices from the AWS Price List (`llmp.cost.pricing`); the
Pulumi program never does, so previews stay deterministic and offline.

What is priced is what the program declares (`program.ledger`, read by
`facts`): NAT gateways and addresses, the control plane, each node group and
its root volumes, the buckets with their lifecycle and replication, the file
system, the monitoring stack's volume and requests, the serving load balancer
and its WAF. Only the data the buckets hold comes from the stack file, since
no resource says it (`Usage`). The estimate is built per top-level component
(`network`, `cluster`, `gpu-<pool>`, `cpu-<pool>`, `storage`, ...), each with the priced
lines it is made of, so a reviewer can follow every dollar to a quantity and
a unit price. Monthly figures are at the pools' desired size; hourly figures
(`usd_per_hour`) are the instance-hours at min, desired and max size plus the
items billed by the hour. What the model leaves out is listed in
`not_estimated`, and a resource type the model does not know in `not_priced`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from program.cost import components as priced_components
from program.cost.components import ALB_BASE_LCUS, control_plane_usd_per_hour, nothing_billed
from program.cost.facts import Facts, NodeGroup, accelerated, facts
from program.cost.lines import Component, NotEstimated
from program.cost.prices import CAPACITY_MODES, CATALOG_PRICES, PriceBook, mode_hourly_price
from program.cost.storage import BucketUsage, Usage, storage_estimate
from program.ledger import Declared
from spec.catalog import catalog
from spec.platform import PlatformConfig

__all__ = [
    "CATALOG_PRICES",
    "BucketUsage",
    "PriceBook",
    "Usage",
    "estimate",
    "usage_of",
]


def usage_of(cfg: PlatformConfig) -> Usage:
    """What the stack file says its buckets will hold (no resource says it)."""
    storage = cfg.storage
    if storage is None:
        return Usage()
    return Usage(
        buckets={
            storage.bucket_name(key): BucketUsage(
                key=key,
                initial_gb=spec.initial_gb,
                daily_write_gb=spec.daily_write_gb,
                average_object_mb=spec.average_object_mb,
                # Retention: every checkpoint under runs, a copy of 1 in N under milestones.
                prefix_shares={
                    spec.retention.runs_prefix: 1.0,
                    spec.retention.milestone_prefix: spec.milestone_share,
                }
                if spec.retention is not None and spec.milestone_share is not None
                else {},
                copied_share=spec.milestone_share or 0.0,
            )
            for key, spec in storage.buckets.items()
        },
        checkpoints_bucket=storage.lustre.checkpoints_bucket if storage.lustre else "checkpoints",
    )


_NOT_ESTIMATED_ANYWHERE = [
    NotEstimated(
        "data transfer between AZs, regions and to the internet",
        "it follows traffic, which the config does not give",
    ),
    NotEstimated(
        "Savings Plans, Reserved Instances, private pricing, support plans and taxes",
        "they depend on the account, not the stack",
    ),
]


def _components(
    f: Facts, prices: PriceBook, storage: dict[str, Any] | None, usage: Usage
) -> list[Component]:
    """One entry per top-level component the stack declares, in declaration order."""
    hours = catalog().hours_per_month
    pools = {g.component: g for g in f.gpu_pools}
    cpu_pools = {g.component: g for g in f.cpu_pools}
    out = []
    for name in f.components:
        if name == "network":
            out.append(priced_components.network(f, hours))
        elif name == "cluster":
            out.append(priced_components.cluster(f, prices, hours))
        elif name in pools:
            out.append(priced_components.gpu_pool(pools[name], prices, hours))
        elif name in cpu_pools:
            out.append(priced_components.cpu_pool(cpu_pools[name], prices, hours))
        elif name == "storage" and storage is not None:
            out.append(priced_components.storage(f, storage, usage))
        elif name == "lustre" and f.lustre is not None and storage is not None:
            out.append(priced_components.lustre(dict(f.lustre), storage["fsx_lustre"]))
        elif name == "monitoring":
            out.append(priced_components.monitoring(f))
        elif name == "serving":
            out.append(priced_components.serving(f, hours))
        elif name == "images":
            out.append(priced_components.image_repository(name))
        else:
            out.append(Component(name, note=nothing_billed(name)))
    return out


def _by_size(price: float, group: NodeGroup) -> dict[str, float]:
    return {
        "min": round(price * group.min_size, 2),
        "desired": round(price * group.desired_size, 2),
        "max": round(price * group.max_size, 2),
    }


def _hourly_fixed(f: Facts) -> dict[str, float]:
    """Items billed by the hour whatever the pools' sizes."""
    prices = catalog().platform_prices
    ips = f.nat_addresses + priced_components.alb_public_ips(f)
    out = {
        "eks_control_plane": control_plane_usd_per_hour(f),
        "nat_gateways": f.nat_gateways * prices.nat_gateway_usd_per_hour,
        "interface_endpoints": sum(f.interface_endpoints.values())
        * prices.interface_endpoint_usd_per_az_hour,
        "public_ipv4": ips * prices.public_ipv4_usd_per_hour,
    }
    if f.alb_scheme is not None:
        out["load_balancer"] = prices.alb_usd_per_hour + ALB_BASE_LCUS * prices.alb_lcu_usd_per_hour
    return out


def _pricing_modes(group: NodeGroup, prices: PriceBook) -> dict[str, Any]:
    """The pool at desired and max size under each capacity type, and the one it uses."""
    cat = catalog()
    out: dict[str, Any] = {
        "instance_type": group.instance_type,
        "configured": group.capacity_type,
        "nodes": {"desired": group.desired_size, "max": group.max_size},
    }
    for mode in CAPACITY_MODES:
        price = mode_hourly_price(group.instance_type, mode, prices)
        key = mode.lower()
        if price is None:
            out[key] = None
            out[f"{key}_unavailable"] = (
                f"the catalog has no Capacity Block price for {group.instance_type} "
                "(blocks are sold for the P and Trn families)"
            )
            continue
        entry: dict[str, Any] = {
            "usd_per_instance_hour": round(price, 6),
            "usd_per_hour_at_desired": round(price * group.desired_size, 2),
            "usd_per_hour_at_max": round(price * group.max_size, 2),
        }
        if mode == "SPOT":
            entry["assumed_discount"] = cat.spot_discount_assumption
            entry["assumption"] = (
                f"assumed {cat.spot_discount_assumption:.0%} off on-demand (catalog "
                "spot_discount_assumption); real spot prices float"
            )
        if mode == "CAPACITY_BLOCK":
            entry["as_of"] = cat.prices.capacity_block_as_of
            entry["region"] = cat.prices.region
        out[key] = entry
    return out


def price_source(region: str | None, prices: PriceBook = CATALOG_PRICES) -> dict[str, Any]:
    """Where the prices come from, with their dates: a reviewer can tell a stale figure."""
    cat = catalog()
    as_of = {
        "instances_on_demand": cat.prices.on_demand_as_of,
        "capacity_blocks": cat.prices.capacity_block_as_of,
        "platform": cat.platform_prices.prices_as_of,
        "storage": cat.storage.prices_as_of,
    }
    if prices.source == "live":
        out: dict[str, Any] = {
            "kind": "live",
            "api": "AWS Price List (pricing:GetProducts), Linux on-demand, shared tenancy",
            "fetched_at": prices.fetched_at,
            "region": prices.region or region,
            "live_instance_types": sorted(prices.on_demand_usd_per_hour),
            "catalog_as_of": as_of,
            "note": "on-demand instance prices are live; all other prices are the catalog's",
        }
        if prices.fallbacks:
            out["catalog_fallbacks"] = dict(sorted(prices.fallbacks.items()))
        return out
    out = {"kind": "catalog", "region": cat.prices.region, "as_of": as_of}
    if region is not None and region != cat.prices.region:
        out["note"] = (
            f"the catalog's prices are {cat.prices.region}'s; {region} may differ "
            "(llmp cost --prices live reads the region's on-demand prices)"
        )
    return out


def _group(group: NodeGroup, price: float, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "instance_type": group.instance_type,
        "capacity_type": group.capacity_type,
        "nodes": {"min": group.min_size, "desired": group.desired_size, "max": group.max_size},
        "usd_per_instance_hour": round(price, 6),
        **extra,
        "usd_per_hour": _by_size(price, group),
    }


def estimate(
    declared: Iterable[Declared], usage: Usage | None = None, prices: PriceBook = CATALOG_PRICES
) -> dict[str, Any]:
    """The stack's `cost` output: per component, GPU against overhead (CPU pools are
    overhead), hourly at min/desired/max pool sizes, each GPU pool under every pricing mode,
    and where the prices come from.
    `usage`: what the buckets hold (`usage_of(cfg)`); none: empty buckets."""
    usage = usage or Usage()
    cat = catalog()
    hours = cat.hours_per_month
    f = facts(declared)

    pools: dict[str, Any] = {}
    for g in f.gpu_pools:
        price = priced_components.pool_hourly_price(g, prices)
        gpus = {"accelerators_at_max": cat.instance(g.instance_type).gpu_count * g.max_size}
        pools[g.pool] = _group(g, price, gpus)
    cpu_pools = {
        g.pool: _group(g, priced_components.pool_hourly_price(g, prices), {}) for g in f.cpu_pools
    }
    system = f.system_pool
    system_pool = (
        _group(system, prices.on_demand(system.instance_type), {}) if system is not None else {}
    )
    fixed = _hourly_fixed(f)

    def hourly(size: str) -> float:
        scaled = [*([system_pool] if system_pool else []), *pools.values(), *cpu_pools.values()]
        return round(sum(fixed.values()) + sum(p["usd_per_hour"][size] for p in scaled), 2)

    storage = storage_estimate(f, usage) if "storage" in f.components else None
    parts = _components(f, prices, storage, usage)
    total = round(sum(c.usd_per_month for c in parts), 2)
    gpu = round(sum(c.usd_per_month for c in parts if c.accelerated), 2)
    gpu_share = round(gpu / total, 4) if total else 0.0
    not_estimated = [
        {"component": c.name, "what": n.what, "why": n.why} for c in parts for n in c.not_estimated
    ]
    not_estimated += [
        {"component": "stack", "what": n.what, "why": n.why} for n in _NOT_ESTIMATED_ANYWHERE
    ]
    out: dict[str, Any] = {
        "prices_as_of": prices.fetched_at
        if prices.source == "live"
        else cat.prices.on_demand_as_of,
        "price_region": prices.region or cat.prices.region,
        "price_source": price_source(f.region, prices),
        "currency": cat.prices.currency,
        "hours_per_month": hours,
        "node_pools": pools,
        "system_pool": system_pool,
        "overhead_usd_per_hour": {k: round(v, 4) for k, v in fixed.items()},
        "usd_per_hour": {size: hourly(size) for size in ("min", "desired", "max")},
        "components": {c.name: c.to_dict() for c in parts},
        "gpu_share": {
            "gpu_usd_per_month": gpu,
            "overhead_usd_per_month": round(total - gpu, 2),
            "gpu_share": gpu_share,
            "overhead_share": round(1 - gpu_share, 4),
            "basis": "monthly at desired size; GPU = the accelerated node pools (instances "
            "and root volumes), overhead = every other component",
        },
        "pricing_modes": {
            g.pool: _pricing_modes(g, prices) for g in f.gpu_pools if accelerated(g.instance_type)
        },
        "storage": storage,
        # Everything but S3 and FSx, so that at_desired + storage = with_storage = the total.
        "usd_per_month_at_desired": round(total - (storage["usd_per_month"] if storage else 0), 2),
        "usd_per_month_with_storage": total,
        "not_estimated": not_estimated,
    }
    if cpu_pools:
        # Only where the stack has some, so stacks without them keep their output as it was.
        out["cpu_pools"] = cpu_pools
    if f.not_priced:
        out["not_priced"] = [
            {
                "type": type_,
                "resources": names,
                "why": "no price rule for this type (program/cost/facts.py PRICED or FREE)",
            }
            for type_, names in sorted(f.not_priced.items())
        ]
    return out
