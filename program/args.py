"""The validated config, as each component's own args.

Components know nothing of the stack schema: each takes the typed args it
declares (what it needs, not a section of `PlatformConfig`), so it can be
built and tested alone. This module is the one place that maps the schema
onto them. A setting the schema and the args name alike is carried over by
`shared` (by name, so a field added to both needs no line here); the rest is
what the schema resolves (placement groups, huge pages, bucket names) and
what the components hand each other (ids, providers), passed explicitly.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Sequence
from typing import Any, TypeVar

import pulumi
import pulumi_aws as aws
from pydantic import BaseModel

from components.addons import AddonsArgs, MigLayout, mig_config_name
from components.checkpoint_milestones import CheckpointMilestonesArgs
from components.cluster import ClusterArgs, SystemPool
from components.cpu_node_pool import CpuNodePoolArgs
from components.gpu_node_pool import GpuNodePoolArgs
from components.image_repository import ImageRepositoryArgs
from components.lustre import LustreFileSystemArgs
from components.managed_nodes import PoolSize
from components.monitoring import AlertReceivers, LogQueries
from components.network import NetworkArgs
from components.node_autoscaler import NodeAutoscalerArgs
from components.storage import (
    Bucket,
    LifecycleRule,
    Replication,
    RequestLogs,
    StorageArgs,
    Transition,
    waf_log_bucket_name,
)
from components.straggler_watch import StragglerWatchArgs
from components.tenancy import Tenant
from manifests.queues import mig_resource, pool_capacities, tenant_shares
from manifests.serving.gateway import ClientRate
from monitoring.alertmanager import PLATFORM, Audience
from spec.catalog import catalog
from spec.errors import MISSING, ConfigError
from spec.images import RELEASE_TAG_PREFIX, ImagesConfig, TrainerImageRef, is_repository_name
from spec.labels import TEAM_LABEL
from spec.monitoring import MonitoringConfig, StragglerWatchConfig
from spec.platform import PlatformConfig
from spec.pools import CpuPoolConfig, NodePoolConfig, PoolSizes
from spec.serving import EnginePlan, ServingConfig, engine_plan
from spec.storage import BucketConfig, LustreConfig, StorageConfig
from spec.tenancy import TenantConfig, tenant_uid

A = TypeVar("A")


def shared(section: BaseModel, args: type[A], **explicit: Any) -> A:
    """`args` (a component's args dataclass) built from what `section` names alike, and
    `explicit` for the rest, which wins where both name a field (what the schema resolves,
    or where a name means something else there: a bucket's key, not its name). A required
    field neither gives is a TypeError at once."""
    fields = {f.name for f in dataclasses.fields(args)}  # type: ignore[arg-type]
    same = {name: getattr(section, name) for name in type(section).model_fields if name in fields}
    return args(**{**same, **explicit})


def pool_size(pool: PoolSizes) -> PoolSize:
    return shared(pool, PoolSize)


def s3_endpoint_buckets(cfg: PlatformConfig) -> list[str]:
    """What the stack's S3 gateway endpoint admits (beside ECR's layers): its own buckets
    (`<bucket_name_prefix>-*`, and an adopted bucket by its name) and
    `network.s3_endpoint_buckets`."""
    own: list[str] = []
    storage = cfg.storage
    if storage is not None:
        pattern = f"{storage.bucket_name_prefix}-*"
        own.append(pattern)
        # An adopted bucket outside the pattern by its name (a recovery stack's replicas,
        # `<prefix>-<key>-<region>`, are inside it).
        own += [
            name
            for key in storage.buckets
            if storage.adopted(key)
            and not fnmatch.fnmatchcase(name := storage.bucket_name(key), pattern)
        ]
    return list(dict.fromkeys([*own, *cfg.network.s3_endpoint_buckets]))


def public_load_balancers(cfg: PlatformConfig) -> bool:
    """The platform serves through an internet-facing load balancer of its own."""
    return cfg.serving is not None and cfg.serving.scheme == "internet-facing"


def network_args(cfg: PlatformConfig, cluster_name: str) -> NetworkArgs:
    layout = cfg.network.layout()
    return shared(
        cfg.network,
        NetworkArgs,
        private_subnets=layout.private,
        public_subnets=layout.public,
        region=cfg.region,
        cluster_name=cluster_name,
        s3_endpoint_buckets=s3_endpoint_buckets(cfg),
        interface_endpoints=cfg.interface_endpoints(),
        public_load_balancers=public_load_balancers(cfg),
    )


def cluster_args(
    cfg: PlatformConfig,
    cluster_name: str,
    private_subnet_ids: list[pulumi.Input[str]],
    tags: dict[str, str],
) -> ClusterArgs:
    system = cfg.system_pool
    return shared(
        cfg.cluster,
        ClusterArgs,
        cluster_name=cluster_name,
        region=cfg.region,
        private_subnet_ids=private_subnet_ids,
        tags=tags,
        system_pool=shared(system, SystemPool, size=pool_size(system)),
        # A shared cluster hosts the team stacks' GPU pools.
        accelerated=bool(cfg.node_pools) or cfg.share_outputs,
    )


def gpu_pool_args(
    name: str, pool: NodePoolConfig, mig_strategy: str = "mixed", **from_components: Any
) -> GpuNodePoolArgs:
    """`from_components`: the cluster's and the network's outputs the pool is built on;
    `mig_strategy`: the stack's `addons.mig_strategy` (how a MIG pool's partitions are
    advertised)."""
    gpus = catalog().instance(pool.instance_type).gpu_count
    partitions: dict[str, int] = {}
    for profile, count in (pool.mig or {}).items():
        resource = mig_resource(mig_strategy, profile)
        partitions[resource] = partitions.get(resource, 0) + count * gpus
    return shared(
        pool,
        GpuNodePoolArgs,
        pool_name=name,
        size=pool_size(pool),
        placement_group=pool.uses_placement_group,
        hugepages_2mi_mib=pool.hugepages_2mi_reserved,
        mig_config=mig_config_name(name) if pool.mig else None,
        mig_partitions=partitions,
        **from_components,
    )


def pool_topology(cfg: PlatformConfig) -> dict[str, int]:
    """The topology-aware pools and the EC2 network layers of their type."""
    return {
        name: layers
        for name, pool in cfg.node_pools.items()
        if pool.topology_aware
        and (layers := catalog().instance(pool.instance_type).network_topology_layers)
    }


def serving_partitions(cfg: PlatformConfig, serving: ServingConfig) -> dict[str, tuple[str, int]]:
    """Model -> the MIG partition a replica asks for (its resource, and how many one GPU of
    its pool holds), for the models on a partition."""
    out = {}
    for model in serving.models:
        layout = cfg.node_pools[model.node_pool].mig or {}
        if model.mig_profile is not None and model.mig_profile in layout:
            resource = mig_resource(cfg.addons.mig_strategy, model.mig_profile)
            out[model.name] = (resource, layout[model.mig_profile])
    return out


def mig_layouts(cfg: PlatformConfig) -> list[MigLayout]:
    """The MIG pools' configs for the GPU operator's MIG manager."""
    layouts = []
    for name, pool in cfg.node_pools.items():
        model = catalog().mig_model(pool.instance_type)
        if pool.mig is None or model is None:
            continue
        layouts.append(
            MigLayout(
                config=mig_config_name(name),
                device_filter=model.pci_device_id,
                per_gpu=dict(pool.mig),
            )
        )
    return layouts


def cpu_pool_args(
    name: str, pool: CpuPoolConfig, team: str = "", **from_components: Any
) -> CpuNodePoolArgs:
    """`team`: a team stack's name on a shared cluster: its nodes carry the team label (as
    its GPU pools' do) and its EKS node group is named after the team, since EKS names are
    unique per cluster. `from_components`: the cluster's and the network's outputs."""
    return shared(
        pool,
        CpuNodePoolArgs,
        pool_name=name,
        size=pool_size(pool),
        labels={TEAM_LABEL: team} if team else {},
        node_group_name=f"{team}-cpu-{name}-nodes" if team else None,
        **from_components,
    )


def _nvidia(instance_type: str) -> bool:
    acc = catalog().instance(instance_type).accelerator
    return acc is not None and acc.kind == "nvidia"


def addons_args(
    cfg: PlatformConfig,
    *,
    cluster_name: pulumi.Input[str],
    vpc_id: pulumi.Input[str],
    system_nodes: Sequence[pulumi.Resource],
    kueue_after: Sequence[pulumi.Resource] = (),
    team: str = "",
    scheduling: pulumi.Input[dict[str, Any]] | None = None,
) -> AddonsArgs:
    """`kueue_after`: the ProvisioningRequest API where a pool is elastic. `team` and
    `scheduling`: a team stack on a shared cluster, which declares only its queues.

    A shared stack (`share_outputs`) installs what team stacks' pools need whatever its own
    pools are: the EFA device plugin, NVSentinel, and a provisioning check for every
    accelerator resource."""
    sharing = cfg.share_outputs
    return shared(
        cfg.addons,
        AddonsArgs,
        efa_device_plugin=cfg.addons.efa_device_plugin
        and (sharing or any(p.efa for p in cfg.node_pools.values())),
        # NVSentinel watches NVIDIA GPUs through the GPU operator's DCGM, and its MongoDB
        # volumes take the gp3 class that monitoring brings (with the EBS CSI driver).
        nvsentinel=cfg.addons.nvsentinel
        and cfg.addons.gpu_operator
        and cfg.monitoring.enabled
        and (sharing or any(_nvidia(p.instance_type) for p in cfg.node_pools.values())),
        mig_layouts=mig_layouts(cfg),
        cluster_name=cluster_name,
        region=cfg.region,
        vpc_id=vpc_id,
        pools=pool_capacities(cfg, team),
        tenants=tenant_shares(cfg, f"{team}-" if team else ""),
        system_nodes=list(system_nodes),
        kueue_after=list(kueue_after),
        provisioning_resources=sorted({k.resource for k in catalog().accelerator_kinds.values()})
        if sharing
        else [],
        cluster_wide=not team,
        team=team,
        scheduling=scheduling,
    )


def node_autoscaler_args(
    cfg: PlatformConfig,
    *,
    cluster_name: pulumi.Input[str],
    system_nodes: Sequence[pulumi.Resource],
) -> NodeAutoscalerArgs | None:
    """The Cluster Autoscaler's args where some pool is elastic (every CPU pool is); None
    where every pool is fixed (nothing to scale, so nothing installed). A shared stack
    installs it for the elastic pools of its team stacks, which it discovers by their tags."""
    elastic = cfg.cpu_pools or any(p.elastic for p in cfg.node_pools.values())
    if not cfg.share_outputs and not elastic:
        return None
    return NodeAutoscalerArgs(
        cluster_name=cluster_name, region=cfg.region, system_nodes=list(system_nodes)
    )


def bucket(storage: StorageConfig, key: str, spec: BucketConfig) -> Bucket:
    lifecycle = [
        shared(
            rule,
            LifecycleRule,
            transitions=[Transition(t.days, t.storage_class) for t in rule.transitions],
        )
        for rule in spec.lifecycle
    ]
    if spec.retention is not None:
        # Every checkpoint expires after the recent window; milestones live under their own
        # prefix (the schema forbids a rule overlapping this one).
        lifecycle.append(
            LifecycleRule(
                prefix=spec.retention.runs_prefix,
                expire_days=spec.retention.keep_days,
                noncurrent_days=spec.retention.noncurrent_days,
                role="recent",
            )
        )
    return shared(
        spec,
        Bucket,
        name=storage.bucket_name(key),
        versioned=spec.versioned,
        adopted=storage.adopted(key),
        lifecycle=lifecycle,
    )


def storage_args(
    storage: StorageConfig,
    region: str,
    dr_provider: aws.Provider | None,
    request_logs: RequestLogs | None = None,
) -> StorageArgs:
    rep = storage.replication
    return shared(
        storage,
        StorageArgs,
        buckets={key: bucket(storage, key, spec) for key, spec in storage.buckets.items()},
        region=region,
        replication=shared(rep, Replication) if rep.region is not None else None,
        dr_provider=dr_provider,
        adopted_kms_key_id=storage.adoption.kms_key_id if storage.adoption else None,
        request_logs=request_logs,
    )


def request_logs(cfg: PlatformConfig) -> RequestLogs | None:
    """The serving ALB's and WAF's logs, where the stack serves models and keeps them."""
    logs = cfg.monitoring.request_logs
    if cfg.serving is None or not logs.enabled:
        return None
    if cfg.storage is None or "logs" not in cfg.storage.buckets:
        raise ConfigError(
            ("monitoring", "request_logs", "enabled"),
            True,
            "needs storage.buckets.logs (the ALB's access logs go there under alb/); add "
            "that bucket or set enabled: false",
        )
    waf_bucket = waf_log_bucket_name(cfg.storage.bucket_name_prefix)
    if len(waf_bucket) > 63:
        raise ConfigError(
            ("storage", "bucket_name_prefix"),
            cfg.storage.bucket_name_prefix,
            f"at most {63 - len(waf_bucket) + len(cfg.storage.bucket_name_prefix)} characters "
            f"with request logs: the WAF's log bucket {waf_bucket} must fit S3's 63",
        )
    delivery = catalog().elb_log_delivery
    return RequestLogs(
        expire_days=logs.expire_days,
        elb_account_id=delivery.account(cfg.region) if delivery is not None else None,
    )


def milestones_args(
    cfg: PlatformConfig,
    key: str,
    spec: BucketConfig,
    trainer_repository_url: pulumi.Output[str] | None,
    **from_components: Any,
) -> CheckpointMilestonesArgs:
    """The copier of a bucket with `retention`, on the trainer image (`trainer_image`).
    `from_components`: the bucket's name and ARN, the storage key, the tenant namespace's
    output and the cluster's name."""
    retention = spec.retention
    assert retention is not None
    if retention.namespace not in cfg.tenants:
        raise ConfigError(
            ("storage", "buckets", key, "retention", "namespace"),
            retention.namespace,
            f"not a tenant in tenants ({', '.join(cfg.tenants) or 'none'}): the copier runs "
            "in a tenant namespace, whose network policies let it reach S3",
        )
    return shared(
        retention,
        CheckpointMilestonesArgs,
        region=cfg.region,
        image=trainer_image(
            retention, trainer_repository_url, ("storage", "buckets", key, "retention")
        ),
        namespace_name=retention.namespace,
        **from_components,
    )


def lustre_args(lustre: LustreConfig, **from_components: Any) -> LustreFileSystemArgs:
    """`from_components`: the network, the cluster's security group, the storage key and
    buckets the file system is built on, and its log group's name."""
    return shared(lustre, LustreFileSystemArgs, **from_components)


def tenant(name: str, spec: TenantConfig) -> Tenant:
    return shared(
        spec,
        Tenant,
        uid=tenant_uid(name, spec),
        priority_classes=spec.allowed_priorities(),
    )


def image_repository_args(images: ImagesConfig, cluster_name: str) -> ImageRepositoryArgs:
    """The trainer image's repository: `images.repository_name`, else `<cluster>/trainer`
    (one per stack, so stacks sharing an account and region do not collide)."""
    name = images.repository_name or f"{cluster_name}/trainer"
    if not is_repository_name(name):
        raise ConfigError(
            ("images", "repository_name"),
            MISSING,
            f"the default {name!r} (<cluster name>/trainer) is no ECR repository name; "
            "set one: lowercase letters and digits, separated by '.', '_', '-' or '/'",
        )
    return shared(
        images, ImageRepositoryArgs, repository_name=name, release_tag_prefix=RELEASE_TAG_PREFIX
    )


def straggler_watch_args(
    watch: StragglerWatchConfig,
    trainer_repository_url: pulumi.Output[str] | None,
    **from_components: Any,
) -> StragglerWatchArgs:
    """The watcher runs the trainer image (`trainer_image`)."""
    image = trainer_image(watch, trainer_repository_url, ("monitoring", "stragglers"))
    return shared(watch, StragglerWatchArgs, image=image, **from_components)


def trainer_image(
    ref: TrainerImageRef,
    trainer_repository_url: pulumi.Output[str] | None,
    where: tuple[str | int, ...],
) -> pulumi.Input[str]:
    """`image` as given, else the stack's repository at `image_tag`; a stack without the
    repository must name the image (ConfigError at `where`.image)."""
    if ref.image is not None:
        return ref.image
    if trainer_repository_url is None:
        raise ConfigError(
            (*where, "image"),
            MISSING,
            "required where images.enabled is false (no repository to take image_tag from)",
        )
    tag = ref.image_tag
    return trainer_repository_url.apply(lambda url: f"{url}:{tag}")


def alert_receivers(mon: MonitoringConfig) -> AlertReceivers:
    """The receivers asked for in `monitoring.alerting` (each used once its secret is set)."""
    a = mon.alerting
    return shared(
        a,
        AlertReceivers,
        platform=Audience(
            name=PLATFORM, slack_channel=a.platform.slack_channel, pagerduty=a.platform.pagerduty
        ),
        teams=[
            Audience(
                name=team,
                slack_channel=t.slack_channel,
                pagerduty=t.pagerduty,
                namespaces=a.team_namespaces(team),
            )
            for team, t in sorted(a.teams.items())
        ],
    )


def log_queries(mon: MonitoringConfig) -> LogQueries | None:
    """The saved Logs Insights queries, where the container logs go to CloudWatch."""
    q = mon.log_queries
    return shared(q, LogQueries) if q.enabled and mon.logs else None


def serving_engines(cfg: PlatformConfig, serving: ServingConfig) -> dict[str, EnginePlan]:
    """Each served model's vLLM settings on its pool (the config check already passed them),
    with the collector as its trace endpoint where traces are on and the pinned image can
    export them (catalog `serving.vllm_opentelemetry`: vLLM refuses to start otherwise)."""
    pins = catalog().serving
    traces = cfg.monitoring.traces_endpoint if pins and pins.vllm_opentelemetry else None
    return {
        m.name: dataclasses.replace(
            engine_plan(m, cfg.node_pools[m.node_pool].instance_type),
            otlp_traces_endpoint=traces,
        )
        for m in serving.models
    }


def client_rates(serving: ServingConfig) -> dict[str, ClientRate]:
    """Each API client's token bucket in the gateways."""
    return {
        c: ClientRate(
            requests_per_second=serving.api.rate(c).requests_per_second,
            burst=serving.api.rate(c).burst,
        )
        for c in serving.api.clients
    }
