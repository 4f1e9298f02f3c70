"""Cost estimate of a stack from its config and the catalog's dated prices.

No cloud call: the same numbers come out of `llmp synth` and `pulumi up`,
and a PR that doubles `max_size` shows what it costs before it merges.
"""

from __future__ import annotations

from typing import Any

from infra.catalog import catalog
from infra.config import NodePoolConfig, PlatformConfig


def pool_hourly_price(pool: NodePoolConfig, spot_discount: float | None = None) -> float:
    """$/instance-hour for the pool's capacity type (spot: assumed discount off on-demand)."""
    itype = catalog().instance(pool.instance_type)
    if pool.capacity_type == "CAPACITY_BLOCK":
        assert itype.capacity_block_usd_per_hour is not None  # config guarantees it
        return itype.capacity_block_usd_per_hour
    if pool.capacity_type == "SPOT":
        discount = catalog().spot_discount_assumption if spot_discount is None else spot_discount
        return itype.on_demand_usd_per_hour * (1 - discount)
    return itype.on_demand_usd_per_hour


def estimate(cfg: PlatformConfig) -> dict[str, Any]:
    """Hourly cost at min/desired/max pool sizes and a monthly figure at desired size."""
    cat = catalog()
    hours = cat.hours_per_month
    prices = cat.platform_prices

    pools: dict[str, Any] = {}
    for name, pool in cfg.node_pools.items():
        price = pool_hourly_price(pool)
        gpus = cat.instance(pool.instance_type).gpu_count
        pools[name] = {
            "instance_type": pool.instance_type,
            "capacity_type": pool.capacity_type,
            "usd_per_instance_hour": round(price, 4),
            "accelerators_at_max": gpus * pool.max_size,
            "usd_per_hour": {
                "min": round(price * pool.min_size, 2),
                "desired": round(price * pool.desired_size, 2),
                "max": round(price * pool.max_size, 2),
            },
        }

    system = cfg.system_pool
    system_price = cat.instance(system.instance_type).on_demand_usd_per_hour
    control_plane = (
        prices.eks_control_plane_extended_usd_per_hour
        if cfg.cluster.support_type == "EXTENDED"
        else prices.eks_control_plane_standard_usd_per_hour
    )
    nat_count = len(cfg.network.availability_zones) if cfg.network.nat_gateways == "per_az" else 1
    overhead_hourly = {
        "eks_control_plane": control_plane,
        "nat_gateways": nat_count * prices.nat_gateway_usd_per_hour,
        "system_pool": system_price * system.desired_size,
    }
    overhead = sum(overhead_hourly.values())

    def total(size: str) -> float:
        return round(overhead + sum(p["usd_per_hour"][size] for p in pools.values()), 2)

    return {
        "prices_as_of": cat.prices.on_demand_as_of,
        "price_region": cat.prices.region,
        "currency": cat.prices.currency,
        "node_pools": pools,
        "overhead_usd_per_hour": {k: round(v, 4) for k, v in overhead_hourly.items()},
        "usd_per_hour": {size: total(size) for size in ("min", "desired", "max")},
        "usd_per_month_at_desired": round(
            total("desired") * hours + prices.kms_key_usd_per_month, 2
        ),
    }
