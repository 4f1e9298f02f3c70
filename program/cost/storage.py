"""Storage cost: S3 buckets through their lifecycle over a quarter, replicas, FSx for Lustre.

The buckets, their tiering rules and their replication come from the declared
resources (`facts`); how much data they hold does not, since no resource says
it: that is the stack's usage assumptions (`storage.buckets.<key>.initial_gb`,
`daily_write_gb`, `average_object_mb`), passed as `Usage`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from program.cost.facts import Bucket, Facts
from spec.catalog import catalog

MODEL_DAYS = 90
"""Horizon of the storage model: a quarter of operation from an empty account."""


@dataclass(frozen=True)
class BucketUsage:
    """What a bucket is expected to hold: no resource says it, the stack file does."""

    key: str
    """The bucket's key in `storage.buckets` (how the estimate names it)."""
    initial_gb: float = 0
    daily_write_gb: float = 0
    average_object_mb: float = 64


@dataclass(frozen=True)
class Usage:
    buckets: Mapping[str, BucketUsage] = field(default_factory=dict)
    """By the bucket's physical name, in the stack file's order."""
    checkpoints_bucket: str = "checkpoints"
    """The key of the bucket the 90-day tiering comparison is made for."""


def _class_at(rule: Mapping[str, Any] | None, age: int) -> tuple[str, int] | None:
    """(storage class, day it was entered) of an object of `age` days, None once expired."""
    if rule is None:
        return ("STANDARD", 0)
    expire = (rule.get("expiration") or {}).get("days")
    if expire is not None and age >= expire:
        return None
    current = ("STANDARD", 0)
    for step in rule.get("transitions") or []:
        if age >= step["days"]:
            current = (step["storageClass"], step["days"])
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


def bucket_model(
    usage: BucketUsage,
    rule: Mapping[str, Any] | None,
    days: int = MODEL_DAYS,
    tiered: bool = True,
) -> dict[str, Any]:
    """Cohort model of one bucket over `days`: each day's writes age through `rule` (the
    bucket's whole-bucket lifecycle rule, as the resource declares it).

    Returns the cost of the whole period, the cost of its last 30 days (the monthly
    figure) split by storage class, the GB held per class at the end and on average over
    those 30 days (the quantity the monthly figure is for), and the transition and
    Intelligent-Tiering monitoring charges. `tiered=False` keeps everything in Standard.
    """
    prices = catalog().storage
    rule = rule if tiered else None
    objects_per_gb = 1024 / usage.average_object_mb
    cohorts = [(0, usage.initial_gb + usage.daily_write_gb)]
    cohorts += [(d, usage.daily_write_gb) for d in range(1, days)]
    total = 0.0
    last_month: dict[str, float] = {}
    held: dict[str, float] = {}
    gb_days_last_month = 0.0
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
                gb_days_last_month += gb
            if day == days - 1:
                held[storage_class] = held.get(storage_class, 0.0) + gb
    return {
        "usd_for_period": round(total, 2),
        "usd_per_month": round(sum(last_month.values()), 2),
        "usd_per_month_by_class": {k: round(v, 2) for k, v in sorted(last_month.items())},
        "gb_by_class_at_end": {k: round(v, 1) for k, v in sorted(held.items())},
        "average_gb_last_30_days": round(gb_days_last_month / min(30, days), 1),
        "transition_usd": round(requests, 2),
    }


def lustre_monthly(fs: Mapping[str, Any]) -> dict[str, Any]:
    """A PERSISTENT_2 file system (its resource's inputs) by the month."""
    throughput = int(fs["perUnitStorageThroughput"])
    capacity = int(fs["storageCapacity"])
    price = catalog().storage.fsx_lustre_persistent2_usd_per_gb_month[throughput]
    return {
        "deployment_type": "PERSISTENT_2",
        "throughput_per_tib": throughput,
        "capacity_gib": capacity,
        "throughput_mb_s": round(capacity / 1024 * throughput),
        "usd_per_gb_month": price,
        "usd_per_month": round(capacity * price, 2),
    }


def primaries(f: Facts, usage: Usage) -> list[tuple[BucketUsage, Bucket]]:
    """The primary buckets with their usage, in the stack file's order (then any other)."""
    buckets = [b for b in f.buckets if not b.replica]
    order = list(usage.buckets)
    buckets.sort(key=lambda b: order.index(b.name) if b.name in order else len(order))
    return [(usage.buckets.get(b.name) or BucketUsage(key=b.resource), b) for b in buckets]


def storage_estimate(f: Facts, usage: Usage) -> dict[str, Any]:
    """Monthly storage cost (S3 by bucket and class, replicas, FSx) and the 90-day
    checkpoint tiering against keeping the same data in Standard."""
    prices = catalog().storage
    pairs = primaries(f, usage)
    buckets = {u.key: bucket_model(u, b.tiering) for u, b in pairs}
    replicas = {}
    for u, b in pairs:
        if not b.replicated:
            continue
        stored = buckets[u.key]["usd_per_month"]
        written = u.daily_write_gb * 30
        transfer = round(written * prices.replication_transfer_usd_per_gb, 2)
        rtc = (
            round(written * prices.replication_time_control_usd_per_gb, 2) if b.time_control else 0
        )
        replicas[u.key] = {
            "usd_per_month": round(stored + transfer + rtc, 2),
            "storage_usd_per_month": stored,
            "transfer_usd_per_month": transfer,
            "time_control_usd_per_month": rtc,
        }
    lustre = lustre_monthly(f.lustre) if f.lustre is not None else None
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
    checkpoints = next(((u, b) for u, b in pairs if u.key == usage.checkpoints_bucket), None)
    if checkpoints is not None:
        u, b = checkpoints
        tiered = buckets[u.key]["usd_for_period"]
        standard = bucket_model(u, b.tiering, tiered=False)["usd_for_period"]
        out["checkpoints_90_days"] = {
            "bucket": u.key,
            "tiered_usd": tiered,
            "standard_usd": standard,
            "ratio": round(tiered / standard, 3) if standard else None,
        }
    return out
