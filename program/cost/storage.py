"""Storage cost: S3 buckets through their lifecycle over a quarter, replicas, FSx for Lustre.

The buckets, their tiering rules and their replication come from the declared
resources (`facts`); how much data they hold does not, since no resource says
it: that is the stack's usage assumptions (`storage.buckets.<key>.initial_gb`,
`daily_write_gb`, `average_object_mb`, and with checkpoint retention
`checkpoint_interval_steps`), passed as `Usage`.

With retention, the checkpoints bucket's data lies under two prefixes, each aged
through its own lifecycle rule: every checkpoint under the runs prefix (expired
after the recent window, then kept as a noncurrent version for the rule's
noncurrent days), and a copy of every milestone (interval / every steps of the
writes) under the milestone prefix, with the copy's requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
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
    prefix_shares: Mapping[str, float] = field(default_factory=dict)
    """Share of the data written under each prefix, each aged through that prefix's rule; a
    copy counts again (runs 1, milestones 1/N). Empty: all of it by the whole-bucket rule."""
    copied_share: float = 0
    """Share of the writes copied server-side within the bucket every day (milestones)."""

    @property
    def written_share(self) -> float:
        """New objects per byte written (copies are new objects, replicated too)."""
        return sum(self.prefix_shares.values()) if self.prefix_shares else 1.0


@dataclass(frozen=True)
class Usage:
    buckets: Mapping[str, BucketUsage] = field(default_factory=dict)
    """By the bucket's physical name, in the stack file's order."""
    checkpoints_bucket: str = "checkpoints"
    """The key of the bucket the 90-day tiering comparison is made for."""


def _class_at(
    rule: Mapping[str, Any] | None, age: int, noncurrent_days: int | None = None
) -> tuple[str, int] | None:
    """(storage class, day it was entered) of an object of `age` days, None once gone.

    On a versioned bucket (`noncurrent_days`) an expired object is not gone: its version
    turns noncurrent and stays, in the class it was in, that many days more."""
    if rule is None:
        return ("STANDARD", 0)
    expire = (rule.get("expiration") or {}).get("days")
    if expire is not None and age >= expire + (noncurrent_days or 0):
        return None
    current = ("STANDARD", 0)
    for step in rule.get("transitions") or []:
        if min(age, expire if expire is not None else age) >= step["days"]:
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
    noncurrent_days: int | None = None,
) -> dict[str, Any]:
    """Cohort model of one bucket over `days`: each day's writes age through `rule` (the
    bucket's whole-bucket lifecycle rule, as the resource declares it).

    Returns the cost of the whole period, the cost of its last 30 days (the monthly
    figure) split by storage class, the GB held per class at the end and on average over
    those 30 days (the quantity the monthly figure is for), and the transition and
    Intelligent-Tiering monitoring charges. `tiered=False` keeps everything in Standard.
    `noncurrent_days`: how long an expired object's version stays (a versioned bucket).
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
            where = _class_at(rule, age, noncurrent_days if tiered else None)
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


def _merge(models: list[dict[str, Any]]) -> dict[str, Any]:
    """One bucket's model from the models of the data under each of its prefixes."""

    def add(key: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for m in models:
            for k, v in m[key].items():
                out[k] = out.get(k, 0.0) + v
        return {k: round(v, 2 if key.startswith("usd") else 1) for k, v in sorted(out.items())}

    return {
        "usd_for_period": round(sum(m["usd_for_period"] for m in models), 2),
        "usd_per_month": round(sum(m["usd_per_month"] for m in models), 2),
        "usd_per_month_by_class": add("usd_per_month_by_class"),
        "gb_by_class_at_end": add("gb_by_class_at_end"),
        "average_gb_last_30_days": round(sum(m["average_gb_last_30_days"] for m in models), 1),
        "transition_usd": round(sum(m["transition_usd"] for m in models), 2),
    }


def _rule_noncurrent(rule: Mapping[str, Any] | None, bucket: Bucket) -> int | None:
    """The noncurrent days that apply under a rule: its own or the bucket's, the shorter."""
    own = (rule or {}).get("noncurrentVersionExpiration") or {}
    days = [d for d in (own.get("noncurrentDays"), bucket.noncurrent_days) if d is not None]
    return int(min(days)) if days else None


def bucket_estimate(usage: BucketUsage, bucket: Bucket, days: int = MODEL_DAYS) -> dict[str, Any]:
    """`bucket_model` of a bucket as its resources declare it: by the whole-bucket rule, or
    with `usage.prefix_shares` per prefix by that prefix's rule (the whole-bucket rule where
    the prefix has none), plus the requests of the copies made within the bucket."""
    if not usage.prefix_shares:
        return bucket_model(usage, bucket.tiering, days, noncurrent_days=bucket.noncurrent_days)
    models = []
    by_prefix = {}
    for prefix, share in usage.prefix_shares.items():
        rule = bucket.by_prefix.get(prefix, bucket.tiering)
        part = replace(
            usage,
            initial_gb=usage.initial_gb * share,
            daily_write_gb=usage.daily_write_gb * share,
            prefix_shares={},
        )
        model = bucket_model(part, rule, days, noncurrent_days=_rule_noncurrent(rule, bucket))
        models.append(model)
        by_prefix[prefix] = {
            "share_of_writes": round(share, 4),
            "usd_for_period": model["usd_for_period"],
            "usd_per_month": model["usd_per_month"],
            "gb_by_class_at_end": model["gb_by_class_at_end"],
        }
    out = _merge(models)
    copy = copy_requests(usage)
    out["usd_for_period"] = round(out["usd_for_period"] + copy["usd_per_day"] * days, 2)
    out["usd_per_month"] = round(out["usd_per_month"] + copy["usd_per_day"] * 30, 2)
    out["copy_requests_usd_per_month"] = round(copy["usd_per_day"] * 30, 2)
    out["by_prefix"] = by_prefix
    return out


def copy_requests(usage: BucketUsage) -> dict[str, float]:
    """Server-side copies within the bucket: one CopyObject per object up to 5 GB, else a
    multipart copy (create, one UploadPartCopy per GiB part, complete)."""
    mb = usage.average_object_mb
    per_object = 1.0 if mb <= 5 * 1024 else 2 + -(-mb // 1024)
    objects = usage.daily_write_gb * usage.copied_share * 1024 / mb
    price = catalog().storage.put_copy_list_usd_per_1000_requests
    return {
        "requests_per_day": objects * per_object,
        "usd_per_day": objects * per_object / 1000 * price,
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
    buckets = {u.key: bucket_estimate(u, b) for u, b in pairs}
    replicas = {}
    for u, b in pairs:
        if not b.replicated:
            continue
        # Replicas hold the same objects (milestone copies too), not the copies' requests.
        model = buckets[u.key]
        stored = round(model["usd_per_month"] - model.get("copy_requests_usd_per_month", 0), 2)
        written = u.daily_write_gb * u.written_share * 30
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
        # The baseline: every checkpoint written, kept in Standard, nothing copied.
        plain = replace(u, prefix_shares={}, copied_share=0)
        standard = bucket_model(plain, b.tiering, tiered=False)["usd_for_period"]
        out["checkpoints_90_days"] = {
            "bucket": u.key,
            "tiered_usd": tiered,
            "standard_usd": standard,
            "ratio": round(tiered / standard, 3) if standard else None,
            "retention": bool(u.prefix_shares),
        }
    return out
