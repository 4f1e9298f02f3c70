"""Cost estimate of a stack from its config and the catalog's dated prices.

No cloud call: the same numbers come out of `llmp synth` and `pulumi up`,
and a PR that doubles `max_size` shows what it costs before it merges.
"""

from __future__ import annotations

from typing import Any

from infra.catalog import catalog
from infra.config import (
    BucketConfig,
    LifecycleRuleConfig,
    LustreConfig,
    NodePoolConfig,
    PlatformConfig,
    PoolSizes,
    StorageConfig,
)


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

    storage = storage_estimate(cfg.storage) if cfg.storage else None
    compute_month = total("desired") * hours + prices.kms_key_usd_per_month
    return {
        "prices_as_of": cat.prices.on_demand_as_of,
        "price_region": cat.prices.region,
        "currency": cat.prices.currency,
        "node_pools": pools,
        "system_pool": system_pool,
        "overhead_usd_per_hour": {k: round(v, 4) for k, v in overhead_hourly.items()},
        "usd_per_hour": {size: total(size) for size in ("min", "desired", "max")},
        "usd_per_month_at_desired": round(compute_month, 2),
        "storage": storage,
        "usd_per_month_with_storage": round(
            compute_month + (storage["usd_per_month"] if storage else 0.0), 2
        ),
    }


# ---------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------

MODEL_DAYS = 90
"""Horizon of the storage model: a quarter of operation from an empty account."""


def _whole_bucket_rule(spec: BucketConfig) -> LifecycleRuleConfig | None:
    """The rule the model applies: the one covering the whole bucket (prefix rules cover an
    unknown share of the data and are priced as if they were not there)."""
    return next((r for r in spec.lifecycle if r.prefix == ""), None)


def _class_at(rule: LifecycleRuleConfig | None, age: int) -> tuple[str, int] | None:
    """(storage class, day it was entered) of an object of `age` days, None once expired."""
    if rule is None:
        return ("STANDARD", 0)
    if rule.expire_days is not None and age >= rule.expire_days:
        return None
    current = ("STANDARD", 0)
    for step in rule.transitions:
        if age >= step.days:
            current = (step.storage_class, step.days)
    return current


def _gb_month_price(storage_class: str, days_in_class: int) -> float:
    prices = catalog().storage
    if storage_class == "INTELLIGENT_TIERING":
        it = prices.intelligent_tiering
        # Checkpoints are written once and rarely read again: the model assumes no access.
        if days_in_class >= it.archive_instant_after_days:
            return it.archive_instant_usd_per_gb_month
        if days_in_class >= it.infrequent_after_days:
            return it.infrequent_usd_per_gb_month
    return prices.s3_usd_per_gb_month[storage_class]  # type: ignore[index]


def bucket_model(spec: BucketConfig, days: int = MODEL_DAYS, tiered: bool = True) -> dict[str, Any]:
    """Cohort model of one bucket over `days`: each day's writes age through the lifecycle.

    Returns the cost of the whole period, the cost of its last 30 days (the monthly
    figure) split by storage class, the GB held per class at the end, and the transition
    and Intelligent-Tiering monitoring charges. `tiered=False` keeps everything in Standard.
    """
    prices = catalog().storage
    rule = _whole_bucket_rule(spec) if tiered else None
    objects_per_gb = 1024 / spec.average_object_mb
    cohorts = [(0, spec.initial_gb + spec.daily_write_gb)]
    cohorts += [(d, spec.daily_write_gb) for d in range(1, days)]
    total = 0.0
    last_month: dict[str, float] = {}
    held: dict[str, float] = {}
    requests = 0.0
    for day in range(days):
        for born, gb in cohorts:
            if born > day or gb == 0:
                continue
            age = day - born
            where = _class_at(rule, age)
            if where is None:
                continue
            storage_class, entered = where
            daily = gb * _gb_month_price(storage_class, age - entered) / 30
            if storage_class == "INTELLIGENT_TIERING":
                daily += (
                    gb
                    * objects_per_gb
                    / 1000
                    * prices.intelligent_tiering.monitoring_usd_per_1000_objects_month
                    / 30
                )
            if age == entered and storage_class != "STANDARD":
                fee = gb * objects_per_gb / 1000
                fee *= prices.transition_usd_per_1000_requests[storage_class]  # type: ignore[index]
                requests += fee
                daily += fee
            total += daily
            if day >= days - 30:
                last_month[storage_class] = last_month.get(storage_class, 0.0) + daily
            if day == days - 1:
                held[storage_class] = held.get(storage_class, 0.0) + gb
    return {
        "usd_for_period": round(total, 2),
        "usd_per_month": round(sum(last_month.values()), 2),
        "usd_per_month_by_class": {k: round(v, 2) for k, v in sorted(last_month.items())},
        "gb_by_class_at_end": {k: round(v, 1) for k, v in sorted(held.items())},
        "transition_usd": round(requests, 2),
    }


def lustre_monthly(lustre: LustreConfig) -> dict[str, Any]:
    price = catalog().storage.fsx_lustre_persistent2_usd_per_gb_month[lustre.throughput_per_tib]
    return {
        "deployment_type": "PERSISTENT_2",
        "throughput_per_tib": lustre.throughput_per_tib,
        "capacity_gib": lustre.storage_capacity_gib,
        "throughput_mb_s": round(lustre.storage_capacity_gib / 1024 * lustre.throughput_per_tib),
        "usd_per_gb_month": price,
        "usd_per_month": round(lustre.storage_capacity_gib * price, 2),
    }


def storage_estimate(storage: StorageConfig) -> dict[str, Any]:
    """Monthly storage cost (S3 by bucket and class, replicas, FSx) and the 90-day
    checkpoint tiering against keeping the same data in Standard."""
    prices = catalog().storage
    buckets = {key: bucket_model(spec) for key, spec in storage.buckets.items()}
    replicas = {}
    for key, spec in storage.buckets.items():
        if spec.replicate:
            model = bucket_model(spec)
            transfer = spec.daily_write_gb * 30 * prices.replication_transfer_usd_per_gb
            replicas[key] = {
                "usd_per_month": round(model["usd_per_month"] + transfer, 2),
                "transfer_usd_per_month": round(transfer, 2),
            }
    lustre = lustre_monthly(storage.lustre) if storage.lustre else None
    total = sum(b["usd_per_month"] for b in buckets.values())
    total += sum(r["usd_per_month"] for r in replicas.values())
    total += lustre["usd_per_month"] if lustre else 0.0
    out: dict[str, Any] = {
        "prices_as_of": prices.prices_as_of,
        "model": f"{MODEL_DAYS} days from empty; monthly = the last 30 days",
        "s3": buckets,
        "replicas": replicas,
        "fsx_lustre": lustre,
        "usd_per_month": round(total, 2),
    }
    checkpoints = storage.lustre.checkpoints_bucket if storage.lustre else "checkpoints"
    if checkpoints in storage.buckets:
        spec = storage.buckets[checkpoints]
        tiered = bucket_model(spec)["usd_for_period"]
        standard = bucket_model(spec, tiered=False)["usd_for_period"]
        out["checkpoints_90_days"] = {
            "bucket": checkpoints,
            "tiered_usd": tiered,
            "standard_usd": standard,
            "ratio": round(tiered / standard, 3) if standard else None,
        }
    return out
