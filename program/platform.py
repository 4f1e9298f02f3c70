"""Composition: validated config -> components -> stack outputs.

Network -> Cluster (control plane, system pool, core add-ons) -> GPU and CPU pools;
Kubernetes objects go through the provider built from the cluster's outputs.
Every edge is a real data dependency or a named ordering constraint
(see `Cluster.node_ready_after`): the longest chain is the time to rebuild
the platform after a disaster.

`build` reads as the steps it takes, in the order it declares them: the site (providers,
network, cluster), the node pools, the image registry, the cluster's services, the
buckets, the tenants, the milestone copiers, the volumes, monitoring, serving, and the
stack's outputs with its cost last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from components.addons import Addons
from components.checkpoint_milestones import CheckpointMilestones
from components.cluster import AdoptedCluster, Cluster
from components.cpu_node_pool import CpuNodePool
from components.gpu_node_pool import GpuNodePool
from components.image_repository import ImageRepository
from components.inference_router import InferenceRouter, InferenceRouterArgs
from components.lustre import LustreFileSystem, TenantDirectory, tenant_path
from components.lustre import log_group_name as lustre_log_group_name
from components.monitoring import NAMESPACE as MONITORING_NAMESPACE
from components.monitoring import FileSystemMetrics, Monitoring, MonitoringArgs
from components.network import AdoptedNetwork, Network
from components.node_autoscaler import NodeAutoscaler
from components.priority_classes import PriorityClasses
from components.serving import Serving, ServingArgs
from components.storage import Storage
from components.storage_csi import (
    LustreVolume,
    ModelWeightsVolume,
    StorageVolumes,
    StorageVolumesArgs,
)
from components.straggler_watch import StragglerWatch
from components.tenancy import Tenancy, TenancyArgs, TenantBuckets
from manifests import kueue
from manifests.queues import pool_partitions
from manifests.scheduling import PRIORITIES
from manifests.serving.gateway import AccessLogs
from monitoring import rules, serving_slo
from program import adoption, args, cost, ledger
from spec.catalog import catalog
from spec.labels import TEAM_LABEL
from spec.platform import PlatformConfig
from spec.tenancy import MODELS_BUCKET, TENANT_BUCKETS, tenant_uid


def standard_tags(cfg: PlatformConfig, project: str, stack: str) -> dict[str, str]:
    return {
        **cfg.tags.extra,
        "team": cfg.tags.team,
        "cost-center": cfg.tags.cost_center,
        "stack": stack,
        "project": project,
        "managed-by": "pulumi",
    }



@dataclass(frozen=True)
class Site:
    """What every step builds on: the config, the providers, the network and the cluster."""

    cfg: PlatformConfig
    stack: str
    tags: dict[str, str]
    cluster_name: str
    aws_provider: aws.Provider
    on_aws: pulumi.ResourceOptions
    on_cluster: pulumi.ResourceOptions
    shared: adoption.SharedStack | None
    team: str
    """A team stack's name on a shared cluster, else empty."""
    team_prefix: str
    network: Network | AdoptedNetwork
    private_subnets: dict[str, pulumi.Output[str]]
    cluster: Cluster | AdoptedCluster
    endpoint_source: str | None
    system_nodes: list[pulumi.Resource]


def build(cfg: PlatformConfig, project: str, stack: str) -> None:
    # First: every resource from here on is written down, and priced at the end.
    declared = ledger.start()
    site = _site(cfg, project, stack)
    pools, cpu_pools = _node_pools(site)
    trainer_images = _trainer_images(site)
    addons = _cluster_services(site)
    buckets = _buckets(site)
    tenancy = _tenancy(site, buckets, addons)
    _milestones(site, buckets, tenancy, trainer_images)
    fsx_metrics = _volumes(site, buckets, tenancy)
    _monitoring(site, fsx_metrics, trainer_images)
    _serving(site, buckets, tenancy)
    adopted = _outputs(site, pools, cpu_pools, tenancy, trainer_images)
    # Last: every resource is declared, and priced.
    estimate = cost.estimate(declared.close("the cost output"), cost.usage_of(cfg))
    if adopted is not None:
        estimate["not_billed"] = adopted["not_billed"]
    pulumi.export("cost", estimate)


def _site(cfg: PlatformConfig, project: str, stack: str) -> Site:
    """The providers, the network and the cluster: adopted, shared or this stack's own."""
    tags = standard_tags(cfg, project, stack)
    cluster_name = cfg.cluster.name or f"{project}-{stack}"

    aws_provider = aws.Provider(
        "aws",
        region=cfg.region,
        default_tags=aws.ProviderDefaultTagsArgs(tags=tags),
    )
    on_aws = pulumi.ResourceOptions(providers=[aws_provider])

    # A team stack reads the shared stack's network and cluster; an adopting stack, config.
    shared = adoption.reference(cfg)
    # On a shared cluster the shared stack owns everything cluster-wide; this stack declares
    # only what is its own, and every cluster-scoped name of it starts with its team's.
    team = cfg.team_name(stack)
    team_prefix = f"{team}-" if team else ""
    network = adoption.network(cfg, cluster_name, shared, on_aws)
    private_subnets = network.private_subnet_ids
    cluster, endpoint_source = adoption.cluster(
        cfg, cluster_name, list(private_subnets.values()), tags, shared, aws_provider
    )
    system_nodes: list[pulumi.Resource] = (
        [cluster.system_nodes] if cluster.system_nodes is not None else []
    )
    return Site(
        cfg=cfg,
        stack=stack,
        tags=tags,
        cluster_name=cluster_name,
        aws_provider=aws_provider,
        on_aws=on_aws,
        on_cluster=pulumi.ResourceOptions(providers=[aws_provider, cluster.provider]),
        shared=shared,
        team=team,
        team_prefix=team_prefix,
        network=network,
        private_subnets=private_subnets,
        cluster=cluster,
        endpoint_source=endpoint_source,
        system_nodes=system_nodes,
    )


def _node_pools(site: Site) -> tuple[dict[str, GpuNodePool], dict[str, CpuNodePool]]:
    """The GPU pools, and data work's CPU pools beside them."""
    cfg, team, cluster, network = site.cfg, site.team, site.cluster, site.network
    private_subnets, tags, on_aws = site.private_subnets, site.tags, site.on_aws
    pools = {}
    for pool_name, pool in cfg.node_pools.items():
        if team:
            pool = pool.model_copy(update={"labels": {**pool.labels, TEAM_LABEL: team}})
        pools[pool_name] = GpuNodePool(
            f"gpu-{pool_name}",
            args.gpu_pool_args(
                pool_name,
                pool,
                cfg.addons.mig_strategy,
                cluster_name=cluster.name,
                cluster_version=cluster.version,
                cluster_security_group_id=cluster.security_group_id,
                node_role_arn=cluster.node_role_arn,
                subnet_ids=[private_subnets[z] for z in cfg.pool_zones(pool)],
                efa_security_group_id=network.efa_security_group_id,
                wait_for=cluster.node_ready_after,
                tags=tags,
            ),
            on_aws,
        )

    # Data work's CPU pools: beside the GPU pools, on the same role and ordering edges.
    cpu_pools = {
        pool_name: CpuNodePool(
            f"cpu-{pool_name}",
            args.cpu_pool_args(
                pool_name,
                pool,
                team,
                cluster_name=cluster.name,
                cluster_version=cluster.version,
                node_role_arn=cluster.node_role_arn,
                subnet_ids=[private_subnets[z] for z in cfg.pool_zones(pool)],
                wait_for=cluster.node_ready_after,
                tags=tags,
            ),
            on_aws,
        )
        for pool_name, pool in cfg.cpu_pools.items()
    }
    return pools, cpu_pools


def _trainer_images(site: Site) -> ImageRepository | None:
    # The trainer image's registry needs nothing of the cluster, and the nodes pull from it
    # through the node role's AmazonEC2ContainerRegistryReadOnly (components/cluster.py).
    if not site.cfg.images.enabled:
        return None
    return ImageRepository(
        "images", args.image_repository_args(site.cfg.images, site.cluster_name), site.on_aws
    )


def _cluster_services(site: Site) -> Addons:
    """The priority classes, the node autoscaler and the add-ons (Kueue among them)."""
    cfg, team, cluster, network = site.cfg, site.team, site.cluster, site.network
    shared = site.shared
    system_nodes, on_cluster = site.system_nodes, site.on_cluster
    if not team:
        PriorityClasses("priorities", pulumi.ResourceOptions(providers=[cluster.provider]))

    # Only where some pool is elastic. It reads the pools' tags when it runs, so it waits for
    # none of them; Kueue waits for the ProvisioningRequest API it brings.
    provisioning_api: list[pulumi.Resource] = []
    autoscaler_args = args.node_autoscaler_args(
        cfg, cluster_name=cluster.name, system_nodes=system_nodes
    )
    if autoscaler_args is not None and not team:
        autoscaler = NodeAutoscaler("node-autoscaler", autoscaler_args, on_cluster)
        provisioning_api = autoscaler.provisioning_api

    addons = Addons(
        "addons",
        args.addons_args(
            cfg,
            cluster_name=cluster.name,
            vpc_id=network.vpc_id,
            system_nodes=system_nodes,
            kueue_after=provisioning_api,
            team=team,
            scheduling=shared.require_output("scheduling") if shared is not None and team else None,
        ),
        on_cluster,
    )
    return addons


def _buckets(site: Site) -> Storage | None:
    """The S3 buckets (and their replicas in the DR region), beside the cluster."""
    cfg, tags, on_aws = site.cfg, site.tags, site.on_aws
    storage = cfg.storage
    buckets = None
    if storage is not None:
        dr_provider = None
        if any(b.replicate for b in storage.buckets.values()):
            dr_provider = aws.Provider(
                "aws-dr",
                region=storage.replication.region,
                default_tags=aws.ProviderDefaultTagsArgs(
                    tags={**tags, "llm-platform/dr": "replica"}
                ),
            )
        # Beside the cluster, not after it: buckets and the cluster are built in parallel.
        buckets = Storage(
            "storage",
            args.storage_args(storage, cfg.region, dr_provider, args.request_logs(cfg)),
            on_aws,
        )
    return buckets


def _tenancy(site: Site, buckets: Storage | None, addons: Addons) -> Tenancy:
    """Each tenant's namespace, quotas, queues, roles and bucket grants."""
    cfg, cluster = site.cfg, site.cluster
    team_prefix, on_cluster = site.team_prefix, site.on_cluster
    return Tenancy(
        "tenancy",
        TenancyArgs(
            tenants={name: args.tenant(name, t) for name, t in cfg.tenants.items()},
            gpu_resources={
                name: kind.resource
                for name, pool in cfg.node_pools.items()
                if (kind := catalog().accelerator_kind(pool.instance_type))
            },
            pool_partitions={
                name: pool_partitions(cfg, pool)
                for name, pool in cfg.node_pools.items()
                if pool.mig is not None
            },
            cluster_name=cluster.name,
            region=cfg.region,
            s3_ranges=adoption.s3_ranges(cfg.region, site.aws_provider),
            kms_addresses=site.network.endpoint_addresses.get("kms", []),
            buckets=TenantBuckets(
                arns=[buckets.buckets[b].arn for b in TENANT_BUCKETS]
                if all(b in buckets.buckets for b in TENANT_BUCKETS)
                else [],
                kms_key_arn=buckets.kms_key_arn,
                models_arn=buckets.buckets[MODELS_BUCKET].arn
                if MODELS_BUCKET in buckets.buckets
                else None,
                signing_key_arn=buckets.signing_key_arn,
            )
            if buckets is not None
            else None,
            kueue_ready=addons.kueue_ready,
            namespace_prefix=team_prefix,
        ),
        on_cluster,
    )


def _milestones(
    site: Site, buckets: Storage | None, tenancy: Tenancy, trainer_images: ImageRepository | None
) -> None:
    """Retention's copiers: milestones leave the runs prefix before it expires them."""
    cfg, cluster, on_cluster, storage = site.cfg, site.cluster, site.on_cluster, site.cfg.storage
    if storage is not None and buckets is not None:
        for key, spec in storage.buckets.items():
            if spec.retention is None:
                continue
            CheckpointMilestones(
                f"milestones-{key}",
                args.milestones_args(
                    cfg,
                    key,
                    spec,
                    trainer_images.repository_url if trainer_images is not None else None,
                    bucket_name=buckets.buckets[key].name,
                    bucket_arn=buckets.buckets[key].arn,
                    kms_key_arn=buckets.kms_key_arn,
                    namespace=tenancy.namespaces.get(spec.retention.namespace),
                    cluster_name=cluster.name,
                ),
                on_cluster,
            )


def _volumes(
    site: Site, buckets: Storage | None, tenancy: Tenancy
) -> FileSystemMetrics | None:
    """FSx for Lustre, the model-weights bucket mount and their CSI volumes; the buckets'
    outputs. Returns the file system's metrics for monitoring, where there is one."""
    cfg, cluster, network, storage = site.cfg, site.cluster, site.network, site.cfg.storage
    private_subnets, system_nodes = site.private_subnets, site.system_nodes
    cluster_name, team_prefix = site.cluster_name, site.team_prefix
    on_aws, on_cluster = site.on_aws, site.on_cluster
    fsx_metrics = None
    if storage is not None and buckets is not None:
        lustre_volume = None
        if storage.lustre is not None:
            lustre = storage.lustre
            (zone,) = cfg.pool_zones(cfg.node_pools[lustre.node_pool])
            file_system = LustreFileSystem(
                "lustre",
                args.lustre_args(
                    lustre,
                    vpc_id=network.vpc_id,
                    subnet_id=private_subnets[zone],
                    client_security_group_id=cluster.security_group_id,
                    kms_key_arn=buckets.kms_key_arn,
                    kms_key_id=buckets.kms_key_id,
                    datasets_bucket=buckets.buckets[lustre.datasets_bucket].name,
                    checkpoints_bucket=buckets.buckets[lustre.checkpoints_bucket].name,
                    log_group_name=lustre_log_group_name(cluster_name),
                    tenants=[
                        TenantDirectory(
                            name=name,
                            uid=tenant_uid(name, cfg.tenants[name]),
                            prefix=cfg.tenants[name].s3_prefixes[0],
                        )
                        for name in cfg.lustre_tenants()
                    ],
                ),
                on_aws,
            )
            fsx_metrics = FileSystemMetrics(file_system_id=file_system.file_system_id)
            lustre_volume = LustreVolume(
                file_system_id=file_system.file_system_id,
                dns_name=file_system.dns_name,
                mount_name=file_system.mount_name,
                capacity_gib=lustre.storage_capacity_gib,
                namespaces=lustre.mount_namespaces,
                subdirectories={name: tenant_path(name) for name in cfg.lustre_tenants()},
            )
        weights_volume = None
        if storage.model_weights is not None:
            weights = storage.model_weights
            weights_volume = ModelWeightsVolume(
                bucket_name=buckets.buckets[weights.bucket].name,
                bucket_arn=buckets.buckets[weights.bucket].arn,
                prefix=weights.prefix,
                region=cfg.region,
                namespaces=weights.namespaces,
            )
        if lustre_volume or weights_volume or cfg.share_outputs:
            StorageVolumes(
                "volumes",
                StorageVolumesArgs(
                    cluster_name=cluster.name,
                    kubernetes_version=cfg.cluster.version,
                    lustre=lustre_volume,
                    model_weights=weights_volume,
                    # The drivers' controllers run on the system pool; their node
                    # DaemonSets follow GPU nodes whenever those join.
                    wait_for=system_nodes,
                    tenant_namespaces=dict(tenancy.namespaces),
                    # A shared stack's FSx driver serves its team stacks' file systems.
                    fsx_driver=True if cfg.share_outputs else None,
                    name_prefix=team_prefix,
                ),
                on_cluster,
            )
        pulumi.export("buckets", {k: b.name for k, b in buckets.buckets.items()})
        if buckets.replicas:
            # What a recovery stack adopts (`llmp dr plan --outputs`): names and key in DR.
            pulumi.export(
                "dr_replicas",
                {
                    k: {
                        "bucket": b.name,
                        "region": storage.replication.region,
                        "kms_key_arn": buckets.replica_kms_key_arn,
                    }
                    for k, b in buckets.replicas.items()
                },
            )
    elif cfg.share_outputs:
        # No storage of its own, but its team stacks' FSx file systems need the driver.
        StorageVolumes(
            "volumes",
            StorageVolumesArgs(
                cluster_name=cluster.name,
                kubernetes_version=cfg.cluster.version,
                lustre=None,
                model_weights=None,
                wait_for=system_nodes,
                fsx_driver=True,
            ),
            on_cluster,
        )
    return fsx_metrics


def _monitoring(
    site: Site, fsx_metrics: FileSystemMetrics | None, trainer_images: ImageRepository | None
) -> None:
    """Prometheus, Grafana, the alert rules and receivers, logs, and the straggler watch."""
    cfg, team, cluster, stack = site.cfg, site.team, site.cluster, site.stack
    system_nodes, on_cluster, storage = site.system_nodes, site.on_cluster, site.cfg.storage
    if cfg.monitoring.enabled and not team:
        mon = cfg.monitoring
        lustre_cfg = storage.lustre if storage is not None else None
        monitoring = Monitoring(
            "monitoring",
            args.shared(
                mon,
                MonitoringArgs,
                rules=rules.prometheus_rules(
                    mon.alerts,
                    MONITORING_NAMESPACE,
                    fsx_capacity_gib=lustre_cfg.storage_capacity_gib
                    if lustre_cfg is not None and fsx_metrics is not None
                    else None,
                    stragglers=mon.stragglers if mon.stragglers.enabled else None,
                )
                # The served models' latency SLOs, burn-rate alerted (monitoring.serving_slo).
                + (
                    [serving_slo.prometheus_rule(cfg.serving, MONITORING_NAMESPACE)]
                    if cfg.serving is not None
                    else []
                ),
                otlp_endpoint=mon.otlp_endpoint if mon.traces_exporter == "otlp" else None,
                stack=stack,
                cluster_name=cluster.name,
                kubernetes_version=cfg.cluster.version,
                region=cfg.region,
                system_nodes=system_nodes,
                file_system=fsx_metrics,
                alerting=args.alert_receivers(mon),
                log_queries=args.log_queries(mon),
            ),
            on_cluster,
        )
        if mon.stragglers.enabled:
            # Slow nodes, found from Prometheus' step times every minute (its rules are above).
            StragglerWatch(
                "straggler-watch",
                args.straggler_watch_args(
                    mon.stragglers,
                    trainer_images.repository_url if trainer_images is not None else None,
                    namespace=monitoring.namespace,
                    # Its PodMonitor needs the CRDs; Prometheus it only reads, and waits out.
                    wait_for=monitoring.crds,
                ),
                on_cluster,
            )
        pulumi.export(
            "monitoring",
            {
                "namespace": monitoring.namespace,
                "log_group": monitoring.log_group_name,
                "alert_topics": monitoring.alert_topics,
            },
        )


def _serving(site: Site, buckets: Storage | None, tenancy: Tenancy) -> None:
    """The model servers, their gateway and router: only where the config asks for them."""
    cfg, system_nodes, on_cluster = site.cfg, site.system_nodes, site.on_cluster
    if cfg.serving is not None:
        serve = cfg.serving
        serving = Serving(
            "serving",
            args.shared(
                serve,
                ServingArgs,
                engines=args.serving_engines(cfg, serve),
                model_clients={m.name: serve.model_clients(m) for m in serve.models},
                client_rates=args.client_rates(serve),
                clients=serve.api.clients,
                rate_limit_per_key=serve.api.rate_limit_per_key,
                rate_limit_per_ip=serve.api.rate_limit_per_ip,
                namespace=tenancy.namespaces["serving"],
                cluster_name=site.cluster.name,
                region=cfg.region,
                # The gateway keys' secrets, under the stack's key where it has one.
                kms_key_arn=buckets.kms_key_arn if buckets is not None else None,
                vpc_cidr=cfg.network.vpc_cidr,
                pools={name: pool.instance_type for name, pool in cfg.node_pools.items()},
                pool_topology=args.pool_topology(cfg),
                partitions=args.serving_partitions(cfg, serve),
                system_nodes=system_nodes,
                traces_endpoint=cfg.monitoring.traces_endpoint,
                # The ALB's and WAF's logs, into buckets whose policies already admit them.
                access_logs=AccessLogs(
                    bucket=buckets.alb_logs.bucket, prefix=buckets.alb_logs.prefix
                )
                if buckets is not None and buckets.alb_logs is not None
                else None,
                waf_log_bucket_arn=buckets.waf_logs_arn if buckets is not None else None,
            ),
            on_cluster,
        )
        picked = [m.name for m in serve.models if m.routing == "endpoint-picker"]
        if picked:
            # KV-cache and prefix aware routing for the models that ask for it.
            InferenceRouter(
                "inference-router",
                InferenceRouterArgs(
                    models=picked,
                    namespace=tenancy.namespaces["serving"],
                    vpc_cidr=cfg.network.vpc_cidr,
                ),
                on_cluster,
            )
        pulumi.export("serving", {"models": serving.models, "hostname": cfg.serving.hostname})


def _outputs(
    site: Site,
    pools: dict[str, GpuNodePool],
    cpu_pools: dict[str, CpuNodePool],
    tenancy: Tenancy,
    trainer_images: ImageRepository | None,
) -> dict[str, Any] | None:
    """The stack's outputs: what operators, the CLI and team stacks read. Returns the
    adopted infrastructure's summary, where the stack adopts some."""
    cfg, cluster, network = site.cfg, site.cluster, site.network
    private_subnets = site.private_subnets
    pulumi.export("region", cfg.region)
    pulumi.export("cluster_name", cluster.name)
    pulumi.export("cluster_endpoint", cluster.endpoint)
    pulumi.export("kubeconfig", pulumi.Output.secret(cluster.kubeconfig))
    pulumi.export("vpc_id", network.vpc_id)
    pulumi.export("private_subnet_ids", private_subnets)
    pulumi.export(
        "node_pools",
        {name: pool.node_group_name for name, pool in pools.items()},
    )
    if cpu_pools:
        pulumi.export("cpu_pools", {name: pool.node_group_name for name, pool in cpu_pools.items()})
    pulumi.export("tenants", dict(tenancy.namespaces))
    if trainer_images is not None:
        # Where .github/workflows/trainer-image.yml pushes, and what job files name:
        # <this>:<git tag>.
        pulumi.export("trainer_image_repository", trainer_images.repository_url)
    adopted = adoption.summary(cfg, network, cluster, site.endpoint_source, site.shared)
    if adopted is not None:
        pulumi.export("adopted", adopted)
    if cfg.share_outputs and isinstance(cluster, Cluster):
        _share(cfg, network, cluster)
    return adopted


def _share(cfg: PlatformConfig, network: Network | AdoptedNetwork, cluster: Cluster) -> None:
    """What team stacks read of this one (`spec.sharing`), and the network facts they check
    their config against (the VPC's CIDR, the subnets' CIDRs)."""
    for name, value in adoption.shared_network(cfg).items():
        pulumi.export(name, value)
    pulumi.export("public_subnet_ids", network.public_subnet_ids)
    # The KMS endpoint's addresses: a team stack's tenant pods reach them to sign revisions.
    pulumi.export("kms_endpoint_addresses", network.endpoint_addresses.get("kms", []))
    pulumi.export("cluster_certificate_authority", cluster.certificate_authority)
    pulumi.export("cluster_security_group_id", cluster.security_group_id)
    pulumi.export("node_role_arn", cluster.node_role_arn)
    pulumi.export("cluster_version", cluster.version)
    pulumi.export("cluster_addons", cluster.addon_versions)
    # The cluster-wide names a team stack's queues and jobs attach to.
    pulumi.export(
        "scheduling",
        {
            "cohort": kueue.COHORT,
            "cpu_flavor": kueue.CPU_FLAVOR,
            "provisioning_check": kueue.PROVISIONING_CHECK,
            "priority_classes": [p.name for p in PRIORITIES],
        },
    )
