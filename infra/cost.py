"""Cost estimate of a stack from its config and the catalog's dated prices.

No cloud call: the same numbers come out of `llmp synth` and `pulumi up`,
and a PR that doubles `max_size` shows what it costs before it merges.
"""

from __future__ import annotations

from typing import Any

from infra.catalog import catalog
from infra.config import NodePoolConfig, PlatformConfig, PoolSizes


def pool_hourly_price(pool: NodePoolConfig) -> float:
    """$/instance-hour for the pool's capacity type (spot: assumed discount off on-demand)."""
    itype = catalog().instance(pool.instance_type)
    if pool.capacity_type == "CAPACITY_BLOCK":
        assert itype.capacity_block_usd_per_hour is not None  # config guarantees it
        return itype.capacity_block_usd_per_hour
    if pool.capacity_type == "SPOT":
        return itype.on_demand_usd_per_hour * (1 - catalog().spot_discount_assumption)
    return itype.on_demand_usd_per_hour


def estimate(cfg: PlatformConfig) -> dict[str, Any]:
    """Hourly cost at min/desired/max pool sizes (GPU pools and the system pool; the control
    plane and NAT gateways are fixed) and a monthly figure at desired size."""
    cat = catalog()
    hours = cat.hours_per_month
    prices = cat.platform_prices

    def by_size(price: float, pool: PoolSizes) -> dict[str, float]:
        return {
            "min": round(price * pool.min_size, 2),
            "desired": round(price * pool.desired_size, 2),
            "max": round(price * pool.max_size, 2),
        }

    pools: dict[str, Any] = {}
    for name, pool in cfg.node_pools.items():
        price = pool_hourly_price(pool)
        gpus = cat.instance(pool.instance_type).gpu_count
        pools[name] = {
            "instance_type": pool.instance_type,
            "capacity_type": pool.capacity_type,
            "usd_per_instance_hour": round(price, 4),
            "accelerators_at_max": gpus * pool.max_size,
            "usd_per_hour": by_size(price, pool),
        }

    system = cfg.system_pool
    system_pool = {
        "instance_type": system.instance_type,
        "capacity_type": "ON_DEMAND",
        "usd_per_instance_hour": cat.instance(system.instance_type).on_demand_usd_per_hour,
        "usd_per_hour": by_size(cat.instance(system.instance_type).on_demand_usd_per_hour, system),
    }
    control_plane = (
        prices.eks_control_plane_extended_usd_per_hour
        if cfg.cluster.support_type == "EXTENDED"
        else prices.eks_control_plane_standard_usd_per_hour
    )
    nat_count = len(cfg.network.availability_zones) if cfg.network.nat_gateways == "per_az" else 1
    overhead_hourly = {
        "eks_control_plane": control_plane,
        "nat_gateways": nat_count * prices.nat_gateway_usd_per_hour,
    }
    fixed = sum(overhead_hourly.values())

    def total(size: str) -> float:
        scaled = [system_pool, *pools.values()]
        return round(fixed + sum(p["usd_per_hour"][size] for p in scaled), 2)

    return {
        "prices_as_of": cat.prices.on_demand_as_of,
        "price_region": cat.prices.region,
        "currency": cat.prices.currency,
        "node_pools": pools,
        "system_pool": system_pool,
        "overhead_usd_per_hour": {k: round(v, 4) for k, v in overhead_hourly.items()},
        "usd_per_hour": {size: total(size) for size in ("min", "desired", "max")},
        "usd_per_month_at_desired": round(
            total("desired") * hours + prices.kms_key_usd_per_month, 2
        ),
    }
