"""Cost estimate of a stack from its config and dated prices.

No cloud call by default: the same numbers come out of `llmp synth` and
`pulumi up` (the catalog's dated prices), and a PR that doubles `max_size`
shows what it costs before it merges. `llmp cost --prices live` passes a
`PriceBook` of on-demand prices read from the AWS Price List (infra.pricing);
the Pulumi program never does, so previews stay deterministic and offline.

The estimate is built per component, keyed by the name of the component
resource in the plan (`network`, `cluster`, `gpu-<pool>`, `storage`, ...),
each with the priced lines it is made of, so a reviewer can follow every
dollar to a quantity and a unit price. Monthly figures are at the pools'
desired size. Hourly figures (`usd_per_hour`) are the instance-hours at min,
desired and max size plus the items billed by the hour (control plane, NAT
gateways, public IPv4 addresses, the load balancer); items billed by the
month (EBS, KMS, WAF, S3, FSx) are in the monthly figures only. What the
model leaves out is listed in `not_estimated` rather than counted as zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from spec.catalog import catalog
from spec.platform import PlatformConfig
from spec.pools import NodePoolConfig, PoolSizes
from spec.storage import BucketConfig, LifecycleRuleConfig, LustreConfig, StorageConfig

ALB_BASE_LCUS = 1.0
"""LCUs the model charges the serving ALB around the clock. One LCU is 25 new connections/s,
3,000 active connections, 1 GB/h processed or 1,000 rule evaluations/s: a quiet API's floor.
Traffic above it is listed as not estimated, since the config carries no request volume."""

CAPACITY_MODES = ("ON_DEMAND", "SPOT", "CAPACITY_BLOCK")
_MODE_WORDS = {"ON_DEMAND": "on-demand", "SPOT": "spot", "CAPACITY_BLOCK": "capacity block"}


# ---------------------------------------------------------------------------
# Prices
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PriceBook:
    """The instance prices an estimate uses: the catalog's by default, live ones from
    `infra.pricing.live_price_book`. Every other price (EBS, NAT, S3, FSx, capacity
    blocks, the spot discount) always comes from the catalog, with its date."""

    source: Literal["catalog", "live"] = "catalog"
    region: str | None = None
    """Region the live prices are for (None: the catalog's region)."""
    fetched_at: str | None = None
    """When the live prices were read (ISO 8601, UTC)."""
    on_demand_usd_per_hour: Mapping[str, float] = field(default_factory=dict)
    """Live on-demand $/instance-hour by type; a type missing here keeps its catalog price."""
    fallbacks: Mapping[str, str] = field(default_factory=dict)
    """Instance type -> why a live book priced it from the catalog instead."""

    def on_demand(self, instance_type: str) -> float:
        live = self.on_demand_usd_per_hour.get(instance_type)
        if live is not None:
            return live
        return catalog().instance(instance_type).on_demand_usd_per_hour


CATALOG_PRICES = PriceBook()


def mode_hourly_price(
    instance_type: str, capacity_type: str, prices: PriceBook = CATALOG_PRICES
) -> float | None:
    """$/instance-hour of a type under a capacity type: spot is on-demand less the catalog's
    assumed discount; capacity block is the catalog's block price, None where it has none."""
    if capacity_type == "CAPACITY_BLOCK":
        return catalog().instance(instance_type).capacity_block_usd_per_hour
    on_demand = prices.on_demand(instance_type)
    if capacity_type == "SPOT":
        return on_demand * (1 - catalog().spot_discount_assumption)
    return on_demand


def pool_hourly_price(pool: NodePoolConfig, prices: PriceBook = CATALOG_PRICES) -> float:
    """$/instance-hour for the pool's capacity type (spot: assumed discount off on-demand)."""
    price = mode_hourly_price(pool.instance_type, pool.capacity_type, prices)
    assert price is not None  # config requires a catalog block price for CAPACITY_BLOCK pools
    return price


# ---------------------------------------------------------------------------
# Components and their priced lines
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """One priced item of a component: quantity x unit price = $/month."""

    what: str
    quantity: float
    unit: str
    usd_per_unit: float
    usd_per_month: float
    basis: str = ""
    """How a modelled figure was reached, where the unit price is a blend (S3 lifecycles)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "what": self.what,
            "quantity": round(self.quantity, 2),
            "unit": self.unit,
            "usd_per_unit": round(self.usd_per_unit, 6),
            "usd_per_month": self.usd_per_month,
        }
        if self.basis:
            out["basis"] = self.basis
        return out


def priced(what: str, quantity: float, unit: str, usd_per_unit: float) -> Line:
    return Line(what, quantity, unit, usd_per_unit, round(quantity * usd_per_unit, 2))


def modelled(what: str, quantity: float, unit: str, usd_per_month: float, basis: str) -> Line:
    """A line whose total comes from a model; its unit price is the blend total / quantity."""
    # Four decimals: the inputs are rounded, so more would be noise ($0.022999 for $0.023).
    blended = round(usd_per_month / quantity, 4) if quantity else 0.0
    return Line(what, quantity, unit, blended, round(usd_per_month, 2), basis)


@dataclass(frozen=True)
class NotEstimated:
    what: str
    why: str


@dataclass
class Component:
    """The cost of one top-level component resource of the plan, by its resource name."""

    name: str
    lines: list[Line] = field(default_factory=list)
    note: str = ""
    not_estimated: list[NotEstimated] = field(default_factory=list)
    accelerated: bool = False
    """An accelerated node pool: GPU spend, against everything else as platform overhead."""

    @property
    def usd_per_month(self) -> float:
        return round(sum(line.usd_per_month for line in self.lines), 2)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "accelerators" if self.accelerated else "platform",
            "usd_per_month": self.usd_per_month,
            "lines": [line.to_dict() for line in self.lines],
        }
        if self.note:
            out["note"] = self.note
        if self.not_estimated:
            out["not_estimated"] = [{"what": n.what, "why": n.why} for n in self.not_estimated]
        return out


def _usd(value: float) -> str:
    """A unit price with as many decimals as it has, at least two: $0.045, $0.50, $5.00."""
    whole, _, fraction = f"{value:,.4f}".rstrip("0").partition(".")
    return f"${whole}.{fraction.ljust(2, '0')}"


def _nat_count(cfg: PlatformConfig) -> int:
    return len(cfg.network.availability_zones) if cfg.network.nat_gateways == "per_az" else 1


def _alb_public_ips(cfg: PlatformConfig) -> int:
    """An internet-facing ALB holds a public IPv4 address in each AZ it spans (all of them)."""
    if cfg.serving is None or cfg.serving.scheme != "internet-facing":
        return 0
    return len(cfg.network.availability_zones)


def _network(cfg: PlatformConfig, hours: int) -> Component:
    prices = catalog().platform_prices
    nats = _nat_count(cfg)
    return Component(
        "network",
        [
            priced(
                f"NAT gateways ({nats}, {cfg.network.nat_gateways})",
                nats * hours,
                "gateway-hour",
                prices.nat_gateway_usd_per_hour,
            ),
            priced(
                f"public IPv4 addresses of the NAT gateways ({nats} Elastic IP"
                + ("s)" if nats > 1 else ")"),
                nats * hours,
                "address-hour",
                prices.public_ipv4_usd_per_hour,
            ),
        ],
        note="VPC, subnets, routes, security groups and the S3 gateway endpoint are free",
        not_estimated=[
            NotEstimated(
                "NAT gateway data processing",
                f"{_usd(prices.nat_gateway_usd_per_gb)}/GB; the config gives no egress volume",
            )
        ],
    )


def _control_plane_usd_per_hour(cfg: PlatformConfig) -> float:
    platform = catalog().platform_prices
    if cfg.cluster.support_type == "EXTENDED":
        return platform.eks_control_plane_extended_usd_per_hour
    return platform.eks_control_plane_standard_usd_per_hour


def _cluster(cfg: PlatformConfig, prices: PriceBook, hours: int) -> Component:
    platform = catalog().platform_prices
    support = "extended" if cfg.cluster.support_type == "EXTENDED" else "standard"
    system = cfg.system_pool
    lines = [
        priced(
            f"EKS control plane ({support} support)",
            hours,
            "cluster-hour",
            _control_plane_usd_per_hour(cfg),
        ),
        priced("KMS key (Kubernetes secrets)", 1, "key-month", platform.kms_key_usd_per_month),
        priced(
            f"system pool: {system.desired_size} x {system.instance_type} on-demand",
            system.desired_size * hours,
            "instance-hour",
            prices.on_demand(system.instance_type),
        ),
        priced(
            f"system pool root volumes: {system.desired_size} x {system.disk_size_gib} GiB gp3",
            system.desired_size * system.disk_size_gib,
            "GB-month",
            platform.ebs_gp3_usd_per_gb_month,
        ),
    ]
    missing = []
    if cfg.cluster.log_types:
        missing.append(
            NotEstimated(
                "control-plane logs in CloudWatch",
                f"{_usd(platform.cloudwatch_logs_ingest_usd_per_gb)}/GB ingested and "
                f"{_usd(platform.cloudwatch_logs_storage_usd_per_gb_month)}/GB-month stored; "
                "their volume follows API traffic, which the config does not give",
            )
        )
    return Component(
        "cluster",
        lines,
        note="add-ons, Kueue, monitoring and KEDA run on the system pool",
        not_estimated=missing,
    )


def _gpu_pool(name: str, pool: NodePoolConfig, prices: PriceBook, hours: int) -> Component:
    price = pool_hourly_price(pool, prices)
    mode = _MODE_WORDS[pool.capacity_type]
    notes = []
    if pool.desired_size == 0:
        notes.append(
            f"no nodes at desired size; at max ({pool.max_size}) the instances cost "
            f"${pool.max_size * price:,.2f}/h"
        )
    if pool.capacity_type == "SPOT":
        notes.append(
            f"spot priced at the catalog's assumed {catalog().spot_discount_assumption:.0%} "
            "discount off on-demand; spot prices float"
        )
    if pool.capacity_type == "CAPACITY_BLOCK":
        notes.append(
            "a Capacity Block is paid upfront for its whole term when bought, whatever the "
            "pool runs; this prices the instance-hours at desired size"
        )
    return Component(
        f"gpu-{name}",
        [
            priced(
                f"{pool.desired_size} x {pool.instance_type} {mode}",
                pool.desired_size * hours,
                "instance-hour",
                price,
            ),
            priced(
                f"root volumes: {pool.desired_size} x {pool.disk_size_gib} GiB gp3",
                pool.desired_size * pool.disk_size_gib,
                "GB-month",
                catalog().platform_prices.ebs_gp3_usd_per_gb_month,
            ),
        ],
        note="; ".join(notes),
        accelerated=catalog().instance(pool.instance_type).accelerator is not None,
    )


def _storage(storage: StorageConfig, estimate: dict[str, Any]) -> Component:
    prices = catalog()
    lines = []
    for key, model in estimate["s3"].items():
        classes = ", ".join(model["usd_per_month_by_class"]) or "STANDARD"
        lines.append(
            modelled(
                f"S3 bucket {key} ({classes})",
                model["average_gb_last_30_days"],
                "GB-month",
                model["usd_per_month"],
                f"lifecycle model: {estimate['model']}; transitions and tiering fees included",
            )
        )
    region = storage.replication.region
    for key, replica in estimate["replicas"].items():
        written = storage.buckets[key].daily_write_gb * 30
        lines.append(
            modelled(
                f"S3 replica of {key} in {region}",
                estimate["s3"][key]["average_gb_last_30_days"],
                "GB-month",
                replica["storage_usd_per_month"],
                "the source bucket's lifecycle model, at the catalog's prices",
            )
        )
        lines.append(
            priced(
                f"replication transfer of {key} to {region}",
                written,
                "GB",
                prices.storage.replication_transfer_usd_per_gb,
            )
        )
        if storage.replication.time_control:
            lines.append(
                priced(
                    f"Replication Time Control of {key}",
                    written,
                    "GB",
                    prices.storage.replication_time_control_usd_per_gb,
                )
            )
    keys = 1 + (1 if estimate["replicas"] else 0)
    lines.append(
        priced(
            "KMS keys (buckets" + (f", and replicas in {region})" if keys > 1 else ")"),
            keys,
            "key-month",
            prices.platform_prices.kms_key_usd_per_month,
        )
    )
    missing = [
        NotEstimated(
            "S3 and KMS requests, S3 data transfer out",
            "the config gives no request or egress volume; bucket keys keep KMS requests low",
        )
    ]
    if any(rule.prefix for spec in storage.buckets.values() for rule in spec.lifecycle):
        missing.append(
            NotEstimated(
                "lifecycle rules on a prefix",
                "they cover an unknown share of a bucket, which is priced as if they were absent",
            )
        )
    return Component("storage", lines, not_estimated=missing)


def _lustre(lustre: LustreConfig) -> Component:
    fsx = lustre_monthly(lustre)
    platform = catalog().platform_prices
    missing = [
        NotEstimated(
            "S3 requests of the data repository associations",
            "import and export volume is not in the config",
        ),
        NotEstimated(
            "the file system's log group in CloudWatch",
            f"{_usd(platform.cloudwatch_logs_ingest_usd_per_gb)}/GB ingested and "
            f"{_usd(platform.cloudwatch_logs_storage_usd_per_gb_month)}/GB-month stored; only "
            "failed imports and exports are logged, a volume the config does not give",
        ),
    ]
    if lustre.metadata_mode == "USER_PROVISIONED":
        missing.append(
            NotEstimated(
                f"{lustre.metadata_iops or 0:,} user-provisioned metadata IOPS",
                "the catalog has no metadata IOPS price",
            )
        )
    if lustre.automatic_backup_retention_days:
        missing.append(
            NotEstimated(
                f"automatic backups, {lustre.automatic_backup_retention_days} days kept",
                "incremental: their size follows the data's churn",
            )
        )
    return Component(
        "lustre",
        [
            priced(
                f"FSx for Lustre PERSISTENT_2, {lustre.throughput_per_tib} MB/s/TiB "
                f"({fsx['throughput_mb_s']:,} MB/s)",
                lustre.storage_capacity_gib,
                "GB-month",
                fsx["usd_per_gb_month"],
            )
        ],
        not_estimated=missing,
    )


def _monitoring(cfg: PlatformConfig) -> Component:
    platform = catalog().platform_prices
    mon = cfg.monitoring
    missing = []
    if mon.logs:
        missing.append(
            NotEstimated(
                "container logs in CloudWatch",
                f"{_usd(platform.cloudwatch_logs_ingest_usd_per_gb)}/GB ingested and "
                f"{_usd(platform.cloudwatch_logs_storage_usd_per_gb_month)}/GB-month stored; "
                "the config gives no log volume",
            )
        )
    if mon.traces and mon.traces_exporter == "xray":
        missing.append(
            NotEstimated("X-Ray traces", "billed per trace; the config gives no trace volume")
        )
    lines = [
        priced(
            f"Prometheus volume: {mon.storage_gib} GiB gp3",
            mon.storage_gib,
            "GB-month",
            platform.ebs_gp3_usd_per_gb_month,
        )
    ]
    if cfg.storage is not None and cfg.storage.lustre is not None:
        lines.append(_cloudwatch_exporter_requests())
    return Component(
        "monitoring",
        lines,
        note="Prometheus, Grafana, Fluent Bit and the collector run on the system pool",
        not_estimated=missing,
    )


def _cloudwatch_exporter_requests() -> Line:
    """The FSx metrics exporter calls CloudWatch on every scrape: one request per metric."""
    # Counted from what the component configures, so the line cannot drift from it.
    from components.monitoring import CLOUDWATCH_SCRAPE_MINUTES, FSX_CLOUDWATCH_METRICS

    metrics = len(FSX_CLOUDWATCH_METRICS)
    requests = metrics * 60 / CLOUDWATCH_SCRAPE_MINUTES * catalog().hours_per_month
    return priced(
        f"CloudWatch API requests of the FSx metrics exporter ({metrics} metrics every "
        f"{CLOUDWATCH_SCRAPE_MINUTES} minutes)",
        requests / 1000,
        "1000 requests",
        catalog().platform_prices.cloudwatch_api_usd_per_1000_requests,
    )


def _serving(cfg: PlatformConfig, hours: int) -> Component:
    # Counted from the rules the component builds, so the estimate cannot drift from the WAF.
    from components.serving import web_acl_rules

    assert cfg.serving is not None
    platform = catalog().platform_prices
    api = cfg.serving.api
    rules = len(web_acl_rules(api.rate_limit_per_key, api.rate_limit_per_ip))
    lines = [
        priced(
            f"Application Load Balancer ({cfg.serving.scheme})",
            hours,
            "ALB-hour",
            platform.alb_usd_per_hour,
        ),
        priced(
            f"ALB capacity: {ALB_BASE_LCUS:g} LCU around the clock (assumed floor)",
            ALB_BASE_LCUS * hours,
            "LCU-hour",
            platform.alb_lcu_usd_per_hour,
        ),
    ]
    public_ips = _alb_public_ips(cfg)
    if public_ips:
        lines.append(
            priced(
                f"public IPv4 addresses of the ALB ({public_ips}, one per AZ)",
                public_ips * hours,
                "address-hour",
                platform.public_ipv4_usd_per_hour,
            )
        )
    lines += [
        priced("WAF web ACL", 1, "ACL-month", platform.waf_web_acl_usd_per_month),
        priced(f"WAF rules ({rules})", rules, "rule-month", platform.waf_rule_usd_per_month),
    ]
    return Component(
        "serving",
        lines,
        note="the model servers run on the GPU pools, KEDA on the system pool",
        not_estimated=[
            NotEstimated(
                "WAF requests",
                f"{_usd(platform.waf_usd_per_million_requests)} per million inspected; "
                "the config gives no request volume",
            ),
            NotEstimated(
                "ALB LCUs above the assumed floor, and data transfer",
                "they follow traffic, which the config does not give",
            ),
        ],
    )


_NOTHING_BILLED = {
    "priorities": "Kubernetes PriorityClasses: nothing AWS bills",
    "addons": "Helm releases, IAM roles and Pod Identity associations: free; their pods run "
    "on the system pool (priced under cluster)",
    "tenancy": "namespaces, quotas, Kueue queues, IAM roles and access entries: nothing AWS bills",
    "volumes": "CSI drivers and static volumes of the buckets and file system priced under "
    "storage and lustre",
}


def components(
    cfg: PlatformConfig, prices: PriceBook, storage_cost: dict[str, Any] | None
) -> list[Component]:
    """One entry per top-level component resource `infra.platform.build` creates for `cfg`,
    under the same name and in the same order. `storage_cost` is `storage_estimate` of
    `cfg.storage` (None without storage), which `estimate` also exports."""
    hours = catalog().hours_per_month
    out = [_network(cfg, hours), _cluster(cfg, prices, hours)]
    out += [_gpu_pool(name, pool, prices, hours) for name, pool in cfg.node_pools.items()]
    storage = cfg.storage
    if storage is not None:
        assert storage_cost is not None
        out.append(_storage(storage, storage_cost))
        if storage.lustre is not None:
            out.append(_lustre(storage.lustre))
    out += [Component(name, note=_NOTHING_BILLED[name]) for name in ("priorities", "addons")]
    out.append(Component("tenancy", note=_NOTHING_BILLED["tenancy"]))
    if storage is not None and (storage.lustre is not None or storage.model_weights is not None):
        out.append(Component("volumes", note=_NOTHING_BILLED["volumes"]))
    if cfg.monitoring.enabled:
        out.append(_monitoring(cfg))
    if cfg.serving is not None:
        out.append(_serving(cfg, hours))
    return out


# ---------------------------------------------------------------------------
# The estimate
# ---------------------------------------------------------------------------


def _by_size(price: float, pool: PoolSizes) -> dict[str, float]:
    return {
        "min": round(price * pool.min_size, 2),
        "desired": round(price * pool.desired_size, 2),
        "max": round(price * pool.max_size, 2),
    }


def _hourly_fixed(cfg: PlatformConfig) -> dict[str, float]:
    """Items billed by the hour whatever the pools' sizes."""
    prices = catalog().platform_prices
    out = {
        "eks_control_plane": _control_plane_usd_per_hour(cfg),
        "nat_gateways": _nat_count(cfg) * prices.nat_gateway_usd_per_hour,
        "public_ipv4": (_nat_count(cfg) + _alb_public_ips(cfg)) * prices.public_ipv4_usd_per_hour,
    }
    if cfg.serving is not None:
        out["load_balancer"] = prices.alb_usd_per_hour + ALB_BASE_LCUS * prices.alb_lcu_usd_per_hour
    return out


def _pricing_modes(pool: NodePoolConfig, prices: PriceBook) -> dict[str, Any]:
    """The pool at desired and max size under each capacity type, and the one it uses."""
    cat = catalog()
    out: dict[str, Any] = {
        "instance_type": pool.instance_type,
        "configured": pool.capacity_type,
        "nodes": {"desired": pool.desired_size, "max": pool.max_size},
    }
    for mode in CAPACITY_MODES:
        price = mode_hourly_price(pool.instance_type, mode, prices)
        key = mode.lower()
        if price is None:
            out[key] = None
            out[f"{key}_unavailable"] = (
                f"the catalog has no Capacity Block price for {pool.instance_type} "
                "(blocks are sold for the P and Trn families)"
            )
            continue
        entry: dict[str, Any] = {
            "usd_per_instance_hour": round(price, 6),
            "usd_per_hour_at_desired": round(price * pool.desired_size, 2),
            "usd_per_hour_at_max": round(price * pool.max_size, 2),
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


def price_source(cfg: PlatformConfig, prices: PriceBook = CATALOG_PRICES) -> dict[str, Any]:
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
            "region": prices.region or cfg.region,
            "live_instance_types": sorted(prices.on_demand_usd_per_hour),
            "catalog_as_of": as_of,
            "note": "on-demand instance prices are live; all other prices are the catalog's",
        }
        if prices.fallbacks:
            out["catalog_fallbacks"] = dict(sorted(prices.fallbacks.items()))
        return out
    out = {"kind": "catalog", "region": cat.prices.region, "as_of": as_of}
    if cfg.region != cat.prices.region:
        out["note"] = (
            f"the catalog's prices are {cat.prices.region}'s; {cfg.region} may differ "
            "(llmp cost --prices live reads the region's on-demand prices)"
        )
    return out


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


def estimate(cfg: PlatformConfig, prices: PriceBook = CATALOG_PRICES) -> dict[str, Any]:
    """The stack's `cost` output: per component, GPU against overhead, hourly at min/desired/
    max pool sizes, each GPU pool under every pricing mode, and where the prices come from."""
    cat = catalog()
    hours = cat.hours_per_month

    pools: dict[str, Any] = {}
    for name, pool in cfg.node_pools.items():
        price = pool_hourly_price(pool, prices)
        pools[name] = {
            "instance_type": pool.instance_type,
            "capacity_type": pool.capacity_type,
            "nodes": {"min": pool.min_size, "desired": pool.desired_size, "max": pool.max_size},
            "usd_per_instance_hour": round(price, 6),
            "accelerators_at_max": cat.instance(pool.instance_type).gpu_count * pool.max_size,
            "usd_per_hour": _by_size(price, pool),
        }
    system = cfg.system_pool
    system_price = prices.on_demand(system.instance_type)
    system_pool = {
        "instance_type": system.instance_type,
        "capacity_type": "ON_DEMAND",
        "nodes": {"min": system.min_size, "desired": system.desired_size, "max": system.max_size},
        "usd_per_instance_hour": round(system_price, 6),
        "usd_per_hour": _by_size(system_price, system),
    }
    fixed = _hourly_fixed(cfg)

    def hourly(size: str) -> float:
        scaled = [system_pool, *pools.values()]
        return round(sum(fixed.values()) + sum(p["usd_per_hour"][size] for p in scaled), 2)

    storage = storage_estimate(cfg.storage) if cfg.storage else None
    parts = components(cfg, prices, storage)
    total = round(sum(c.usd_per_month for c in parts), 2)
    gpu = round(sum(c.usd_per_month for c in parts if c.accelerated), 2)
    gpu_share = round(gpu / total, 4) if total else 0.0
    not_estimated = [
        {"component": c.name, "what": n.what, "why": n.why} for c in parts for n in c.not_estimated
    ]
    not_estimated += [
        {"component": "stack", "what": n.what, "why": n.why} for n in _NOT_ESTIMATED_ANYWHERE
    ]
    source = price_source(cfg, prices)
    return {
        "prices_as_of": prices.fetched_at
        if prices.source == "live"
        else cat.prices.on_demand_as_of,
        "price_region": prices.region or cat.prices.region,
        "price_source": source,
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
            name: _pricing_modes(pool, prices)
            for name, pool in cfg.node_pools.items()
            if cat.instance(pool.instance_type).accelerator is not None
        },
        "storage": storage,
        # Everything but S3 and FSx, so that at_desired + storage = with_storage = the total.
        "usd_per_month_at_desired": round(total - (storage["usd_per_month"] if storage else 0), 2),
        "usd_per_month_with_storage": total,
        "not_estimated": not_estimated,
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
    figure) split by storage class, the GB held per class at the end and on average over
    those 30 days (the quantity the monthly figure is for), and the transition and
    Intelligent-Tiering monitoring charges. `tiered=False` keeps everything in Standard.
    """
    prices = catalog().storage
    rule = _whole_bucket_rule(spec) if tiered else None
    objects_per_gb = 1024 / spec.average_object_mb
    cohorts = [(0, spec.initial_gb + spec.daily_write_gb)]
    cohorts += [(d, spec.daily_write_gb) for d in range(1, days)]
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
            stored = buckets[key]["usd_per_month"]
            written = spec.daily_write_gb * 30
            transfer = round(written * prices.replication_transfer_usd_per_gb, 2)
            rtc = 0.0
            if storage.replication.time_control:
                rtc = round(written * prices.replication_time_control_usd_per_gb, 2)
            replicas[key] = {
                "usd_per_month": round(stored + transfer + rtc, 2),
                "storage_usd_per_month": stored,
                "transfer_usd_per_month": transfer,
                "time_control_usd_per_month": rtc,
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
        tiered = buckets[checkpoints]["usd_for_period"]
        standard = bucket_model(storage.buckets[checkpoints], tiered=False)["usd_for_period"]
        out["checkpoints_90_days"] = {
            "bucket": checkpoints,
            "tiered_usd": tiered,
            "standard_usd": standard,
            "ratio": round(tiered / standard, 3) if standard else None,
        }
    return out
