"""The priced lines of each top-level component, from what its resources declare."""

from __future__ import annotations

from typing import Any

from monitoring.charts import CLOUDWATCH_SCRAPE_MINUTES, FSX_CLOUDWATCH_METRICS
from program.cost.facts import Facts, NodeGroup, accelerated
from program.cost.lines import Component, Line, NotEstimated, modelled, priced
from program.cost.prices import PriceBook, mode_hourly_price, usd
from program.cost.storage import Usage, copy_requests, primaries
from spec.catalog import catalog

ALB_BASE_LCUS = 1.0
"""LCUs the model charges the serving ALB around the clock. One LCU is 25 new connections/s,
3,000 active connections, 1 GB/h processed or 1,000 rule evaluations/s: a quiet API's floor.
Traffic above it is listed as not estimated, since the config carries no request volume."""

_MODE_WORDS = {"ON_DEMAND": "on-demand", "SPOT": "spot", "CAPACITY_BLOCK": "capacity block"}

NOTHING_BILLED = {
    "priorities": "Kubernetes PriorityClasses: nothing AWS bills",
    "addons": "Helm releases, IAM roles and Pod Identity associations: free; their pods run "
    "on the system pool (priced under cluster)",
    "tenancy": "namespaces, quotas, Kueue queues, IAM roles and access entries: nothing AWS bills",
    "volumes": "CSI drivers and static volumes of the buckets and file system priced under "
    "storage and lustre",
    "node-autoscaler": "the Cluster Autoscaler's release, CRD and Pod Identity role: free; it "
    "runs on the system pool, and the nodes it adds are priced under their pools",
    "straggler-watch": "the straggler watcher's Deployment, service account, PodMonitor and "
    "network policy: free; its pod runs on the system pool",
    "inference-router": "the endpoint pickers' Deployments, InferencePools, RBAC and their "
    "CRD: free; the pickers run on the system pool",
}
"""What the components that hold nothing billable are made of."""

NOTHING_BILLED_BY_PREFIX = {
    "milestones-": "the milestone copier's CronJob, service account and Pod Identity role: "
    "free; its pods run on the system pool, its copies are priced under storage",
}
"""The same, for components named `<prefix><bucket key>` (one per bucket)."""


def nothing_billed(name: str) -> str:
    """What a component that holds nothing billable is made of ("" if it is not one)."""
    if name in NOTHING_BILLED:
        return NOTHING_BILLED[name]
    return next((v for k, v in NOTHING_BILLED_BY_PREFIX.items() if name.startswith(k)), "")


def pool_hourly_price(group: NodeGroup, prices: PriceBook) -> float:
    """$/instance-hour for the group's capacity type (spot: assumed discount off on-demand)."""
    price = mode_hourly_price(group.instance_type, group.capacity_type, prices)
    if price is None:
        raise ValueError(f"{group.instance_type} has no capacity block price in the catalog")
    return price


def alb_public_ips(f: Facts) -> int:
    """An internet-facing ALB holds a public IPv4 address in each AZ it spans (all of them)."""
    return f.public_subnets if f.alb_scheme == "internet-facing" else 0


def control_plane_usd_per_hour(f: Facts) -> float:
    platform = catalog().platform_prices
    if f.support_type == "EXTENDED":
        return platform.eks_control_plane_extended_usd_per_hour
    return platform.eks_control_plane_standard_usd_per_hour


def _logs(what: str, why: str) -> NotEstimated:
    platform = catalog().platform_prices
    return NotEstimated(
        what,
        f"{usd(platform.cloudwatch_logs_ingest_usd_per_gb)}/GB ingested and "
        f"{usd(platform.cloudwatch_logs_storage_usd_per_gb_month)}/GB-month stored; {why}",
    )


def network(f: Facts, hours: int) -> Component:
    prices = catalog().platform_prices
    nats, addresses = f.nat_gateways, f.nat_addresses
    mode = "per_az" if nats > 1 else "single"
    endpoint_hours = sum(f.interface_endpoints.values())
    count = len(f.interface_endpoints)
    endpoint_lines = (
        [
            priced(
                f"interface endpoints ({count}, {endpoint_hours} AZ attachments)",
                endpoint_hours * hours,
                "endpoint-AZ-hour",
                prices.interface_endpoint_usd_per_az_hour,
            )
        ]
        if count
        else []
    )
    endpoint_data = (
        [
            NotEstimated(
                "interface endpoint data processing",
                f"{usd(prices.interface_endpoint_usd_per_gb)}/GB; image pulls and API calls "
                "it carries are off NAT's per-GB charge",
            )
        ]
        if count
        else []
    )
    return Component(
        "network",
        [
            priced(
                f"NAT gateways ({nats}, {mode})",
                nats * hours,
                "gateway-hour",
                prices.nat_gateway_usd_per_hour,
            ),
            priced(
                f"public IPv4 addresses of the NAT gateways ({addresses} Elastic IP"
                + ("s)" if addresses > 1 else ")"),
                addresses * hours,
                "address-hour",
                prices.public_ipv4_usd_per_hour,
            ),
            *endpoint_lines,
        ],
        note="VPC, subnets, routes, security groups and the S3 gateway endpoint are free",
        not_estimated=[
            NotEstimated(
                "NAT gateway data processing",
                f"{usd(prices.nat_gateway_usd_per_gb)}/GB; the config gives no egress volume",
            ),
            *endpoint_data,
        ],
    )


def _root_volumes(what: str, group: NodeGroup) -> Line:
    return priced(
        f"{what}: {group.desired_size} x {group.disk_gib} GiB gp3",
        group.desired_size * group.disk_gib,
        "GB-month",
        catalog().platform_prices.ebs_gp3_usd_per_gb_month,
    )


def cluster(f: Facts, prices: PriceBook, hours: int) -> Component:
    platform = catalog().platform_prices
    support = "extended" if f.support_type == "EXTENDED" else "standard"
    lines = [
        priced(
            f"EKS control plane ({support} support)",
            hours,
            "cluster-hour",
            control_plane_usd_per_hour(f),
        ),
        priced(
            "KMS key (Kubernetes secrets)",
            f.cluster_keys,
            "key-month",
            platform.kms_key_usd_per_month,
        ),
    ]
    system = f.system_pool
    if system is not None:
        lines += [
            priced(
                f"system pool: {system.desired_size} x {system.instance_type} on-demand",
                system.desired_size * hours,
                "instance-hour",
                prices.on_demand(system.instance_type),
            ),
            _root_volumes("system pool root volumes", system),
        ]
    missing = []
    if f.control_plane_logs:
        missing.append(
            _logs(
                "control-plane logs in CloudWatch",
                "their volume follows API traffic, which the config does not give",
            )
        )
    return Component(
        "cluster",
        lines,
        note="add-ons, Kueue, monitoring and KEDA run on the system pool",
        not_estimated=missing,
    )


def gpu_pool(group: NodeGroup, prices: PriceBook, hours: int) -> Component:
    price = pool_hourly_price(group, prices)
    mode = _MODE_WORDS[group.capacity_type]
    notes = []
    if group.desired_size == 0:
        notes.append(
            f"no nodes at desired size; at max ({group.max_size}) the instances cost "
            f"${group.max_size * price:,.2f}/h"
        )
    if group.capacity_type == "SPOT":
        notes.append(
            f"spot priced at the catalog's assumed {catalog().spot_discount_assumption:.0%} "
            "discount off on-demand; spot prices float"
        )
    if group.capacity_type == "CAPACITY_BLOCK":
        notes.append(
            "a Capacity Block is paid upfront for its whole term when bought, whatever the "
            "pool runs; this prices the instance-hours at desired size"
        )
    return Component(
        group.component,
        [
            priced(
                f"{group.desired_size} x {group.instance_type} {mode}",
                group.desired_size * hours,
                "instance-hour",
                price,
            ),
            _root_volumes("root volumes", group),
        ],
        note="; ".join(notes),
        accelerated=accelerated(group.instance_type),
    )


def cpu_pool(group: NodeGroup, prices: PriceBook, hours: int) -> Component:
    """A CPU pool of data work: the autoscaler runs it between min and max size, so the
    month is priced at desired size (its min at creation) and the note gives both ends."""
    price = pool_hourly_price(group, prices)
    notes = [
        f"autoscaled: {group.min_size} to {group.max_size} nodes, "
        f"${group.min_size * price:,.2f}/h at min, ${group.max_size * price:,.2f}/h at max"
    ]
    if group.capacity_type == "SPOT":
        notes.append(
            f"spot priced at the catalog's assumed {catalog().spot_discount_assumption:.0%} "
            "discount off on-demand; spot prices float"
        )
    return Component(
        group.component,
        [
            priced(
                f"{group.desired_size} x {group.instance_type} {_MODE_WORDS[group.capacity_type]}",
                group.desired_size * hours,
                "instance-hour",
                price,
            ),
            _root_volumes("root volumes", group),
        ],
        note="; ".join(notes),
    )


def storage(f: Facts, estimate: dict[str, Any], usage: Usage) -> Component:
    prices = catalog()
    by_key = {u.key: (u, b) for u, b in primaries(f, usage)}
    lines = []
    for key, model in estimate["s3"].items():
        classes = ", ".join(model["usd_per_month_by_class"]) or "STANDARD"
        copies = model.get("copy_requests_usd_per_month", 0)
        lines.append(
            modelled(
                f"S3 bucket {key} ({classes})",
                model["average_gb_last_30_days"],
                "GB-month",
                round(model["usd_per_month"] - copies, 2),
                f"lifecycle model: {estimate['model']}; transitions and tiering fees included"
                + ("; by prefix (checkpoint retention)" if "by_prefix" in model else ""),
            )
        )
        if "by_prefix" in model:
            u, _ = by_key[key]
            lines.append(
                priced(
                    f"S3 copy requests of {key} milestones",
                    copy_requests(u)["requests_per_day"] * 30 / 1000,
                    "1000 requests",
                    prices.storage.put_copy_list_usd_per_1000_requests,
                )
            )
    region = f.dr_region
    for key, replica in estimate["replicas"].items():
        lines.append(
            modelled(
                f"S3 replica of {key} in {region}",
                estimate["s3"][key]["average_gb_last_30_days"],
                "GB-month",
                replica["storage_usd_per_month"],
                "the source bucket's lifecycle model, at the catalog's prices",
            )
        )
        u, bucket = by_key[key]
        # Milestone copies are new objects: they replicate too.
        written = u.daily_write_gb * u.written_share * 30
        lines.append(
            priced(
                f"replication transfer of {key} to {region}",
                written,
                "GB",
                prices.storage.replication_transfer_usd_per_gb,
            )
        )
        if bucket.time_control:
            lines.append(
                priced(
                    f"Replication Time Control of {key}",
                    written,
                    "GB",
                    prices.storage.replication_time_control_usd_per_gb,
                )
            )
    keys = f.storage_keys
    lines.append(
        priced(
            "KMS keys (buckets" + (f", and replicas in {region})" if keys > 1 else ")"),
            keys,
            "key-month",
            prices.platform_prices.kms_key_usd_per_month,
        )
    )
    if f.signing_keys:
        lines.append(
            priced(
                "KMS key (signs the models' revisions)",
                f.signing_keys,
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
    # Retention says what share lies under each prefix; other prefix rules do not.
    by_share = {name for name, u in usage.buckets.items() if u.prefix_shares}
    if any(b.prefix_rules and b.name not in by_share for b in f.buckets if not b.replica):
        missing.append(
            NotEstimated(
                "lifecycle rules on a prefix",
                "they cover an unknown share of a bucket, which is priced as if they were absent",
            )
        )
    return Component("storage", lines, not_estimated=missing)


def lustre(fs: dict[str, Any], monthly: dict[str, Any]) -> Component:
    missing = [
        NotEstimated(
            "S3 requests of the data repository associations",
            "import and export volume is not in the config",
        ),
        _logs(
            "the file system's log group in CloudWatch",
            "only failed imports and exports are logged, a volume the config does not give",
        ),
    ]
    metadata = fs.get("metadataConfiguration") or {}
    if metadata.get("mode") == "USER_PROVISIONED":
        missing.append(
            NotEstimated(
                f"{int(metadata.get('iops') or 0):,} user-provisioned metadata IOPS",
                "the catalog has no metadata IOPS price",
            )
        )
    backups = int(fs.get("automaticBackupRetentionDays") or 0)
    if backups:
        missing.append(
            NotEstimated(
                f"automatic backups, {backups} days kept",
                "incremental: their size follows the data's churn",
            )
        )
    return Component(
        "lustre",
        [
            priced(
                f"FSx for Lustre PERSISTENT_2, {monthly['throughput_per_tib']} MB/s/TiB "
                f"({monthly['throughput_mb_s']:,} MB/s)",
                monthly["capacity_gib"],
                "GB-month",
                monthly["usd_per_gb_month"],
            )
        ],
        not_estimated=missing,
    )


def monitoring(f: Facts) -> Component:
    platform = catalog().platform_prices
    missing = []
    if f.container_logs:
        missing.append(_logs("container logs in CloudWatch", "the config gives no log volume"))
    if f.xray:
        missing.append(
            NotEstimated("X-Ray traces", "billed per trace; the config gives no trace volume")
        )
    gib = f.prometheus_gib or 0
    lines = [
        priced(
            f"Prometheus volume: {gib} GiB gp3", gib, "GB-month", platform.ebs_gp3_usd_per_gb_month
        )
    ]
    if f.monitoring_keys:
        lines.append(
            priced(
                "KMS key (SNS alert topics)",
                f.monitoring_keys,
                "key-month",
                platform.kms_key_usd_per_month,
            )
        )
    if f.alert_topics:
        missing.append(
            NotEstimated(
                f"SNS alert topics ({f.alert_topics})",
                "billed per publish and delivery; the config gives no alert volume",
            )
        )
    if f.fsx_exporter:
        # Counted from what the component configures, so the line cannot drift from it.
        metrics = len(FSX_CLOUDWATCH_METRICS)
        requests = metrics * 60 / CLOUDWATCH_SCRAPE_MINUTES * catalog().hours_per_month
        lines.append(
            priced(
                f"CloudWatch API requests of the FSx metrics exporter ({metrics} metrics every "
                f"{CLOUDWATCH_SCRAPE_MINUTES} minutes)",
                requests / 1000,
                "1000 requests",
                platform.cloudwatch_api_usd_per_1000_requests,
            )
        )
    return Component(
        "monitoring",
        lines,
        note="Prometheus, Grafana, Fluent Bit and the collector run on the system pool",
        not_estimated=missing,
    )


def serving(f: Facts, hours: int) -> Component:
    platform = catalog().platform_prices
    lines = [
        priced(
            f"Application Load Balancer ({f.alb_scheme})",
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
    public_ips = alb_public_ips(f)
    if public_ips:
        lines.append(
            priced(
                f"public IPv4 addresses of the ALB ({public_ips}, one per AZ)",
                public_ips * hours,
                "address-hour",
                platform.public_ipv4_usd_per_hour,
            )
        )
    rules = f.waf_rules or 0
    lines += [
        priced("WAF web ACL", 1, "ACL-month", platform.waf_web_acl_usd_per_month),
        priced(f"WAF rules ({rules})", rules, "rule-month", platform.waf_rule_usd_per_month),
    ]
    if f.secrets:
        lines.append(
            priced(
                f"Secrets Manager: the gateways' keys ({f.secrets}, one per model)",
                f.secrets,
                "secret-month",
                platform.secrets_manager_secret_usd_per_month,
            )
        )
    return Component(
        "serving",
        lines,
        note="the model servers run on the GPU pools, KEDA on the system pool",
        not_estimated=[
            NotEstimated(
                "WAF requests",
                f"{usd(platform.waf_usd_per_million_requests)} per million inspected; "
                "the config gives no request volume",
            ),
            NotEstimated(
                "ALB LCUs above the assumed floor, and data transfer",
                "they follow traffic, which the config does not give",
            ),
            NotEstimated(
                "Secrets Manager API calls",
                f"{usd(platform.secrets_manager_usd_per_10000_calls)} per 10,000: each model "
                "pod's CSI mount checks its secret every rotation poll (2 min), and the "
                "pod count follows the load",
            ),
        ],
    )


def image_repository(name: str) -> Component:
    """The trainer image's ECR repository: billed by what it stores, which no input gives."""
    return Component(
        name,
        note="the trainer image's ECR repository and its lifecycle policy",
        not_estimated=[
            NotEstimated(
                "images stored in ECR",
                "billed per GB-month stored; how much the images take is not in the config "
                "(the lifecycle policy bounds how many are kept)",
            )
        ],
    )
