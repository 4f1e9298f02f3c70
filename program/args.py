"""The validated config, as each component's own args.

Components know nothing of the stack schema: each takes the typed args it
declares (what it needs, not a section of `PlatformConfig`), so it can be
built and tested alone. These functions are the one place that maps the
schema onto them, resolving the schema's defaults (placement groups, huge
pages, bucket names) on the way.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_aws as aws

from components.addons import AddonsArgs
from components.cluster import ClusterArgs, SystemPool
from components.gpu_node_pool import GpuNodePoolArgs
from components.lustre import LustreFileSystemArgs
from components.managed_nodes import PoolSize
from components.network import NetworkArgs
from components.storage import Bucket, LifecycleRule, Replication, StorageArgs, Transition
from components.tenancy import Tenant
from spec.catalog import catalog
from spec.platform import PlatformConfig
from spec.pools import NodePoolConfig, PoolSizes
from spec.storage import BucketConfig, LustreConfig, StorageConfig
from spec.tenancy import TenantConfig
from workloads import kueue


def pool_size(pool: PoolSizes) -> PoolSize:
    return PoolSize(
        min_size=pool.min_size,
        desired_size=pool.desired_size,
        max_size=pool.max_size,
        max_unavailable=pool.max_unavailable,
    )


def network_args(cfg: PlatformConfig, cluster_name: str) -> NetworkArgs:
    net = cfg.network
    layout = net.layout()
    return NetworkArgs(
        vpc_cidr=net.vpc_cidr,
        private_subnets=layout.private,
        public_subnets=layout.public,
        nat_gateways=net.nat_gateways,
        s3_gateway_endpoint=net.s3_gateway_endpoint,
        region=cfg.region,
        cluster_name=cluster_name,
    )


def cluster_args(
    cfg: PlatformConfig,
    cluster_name: str,
    private_subnet_ids: list[pulumi.Input[str]],
    tags: dict[str, str],
) -> ClusterArgs:
    c, system = cfg.cluster, cfg.system_pool
    return ClusterArgs(
        cluster_name=cluster_name,
        region=cfg.region,
        private_subnet_ids=private_subnet_ids,
        tags=tags,
        version=c.version,
        system_pool=SystemPool(
            instance_type=system.instance_type,
            disk_size_gib=system.disk_size_gib,
            size=pool_size(system),
        ),
        endpoint_public_access=c.endpoint_public_access,
        public_access_cidrs=c.public_access_cidrs,
        admin_role_arns=c.admin_role_arns,
        log_types=c.log_types,
        log_retention_days=c.log_retention_days,
        support_type=c.support_type,
        deletion_protection=c.deletion_protection,
        accelerated=bool(cfg.node_pools),
    )


def gpu_pool_args(
    name: str,
    pool: NodePoolConfig,
    *,
    cluster_name: pulumi.Input[str],
    cluster_version: pulumi.Input[str],
    cluster_security_group_id: pulumi.Input[str],
    node_role_arn: pulumi.Input[str],
    subnet_ids: list[pulumi.Input[str]],
    efa_security_group_id: pulumi.Input[str],
    wait_for: list[pulumi.Resource],
    tags: dict[str, str],
) -> GpuNodePoolArgs:
    return GpuNodePoolArgs(
        pool_name=name,
        instance_type=pool.instance_type,
        size=pool_size(pool),
        disk_size_gib=pool.disk_size_gib,
        capacity_type=pool.capacity_type,
        capacity_reservation_id=pool.capacity_reservation_id,
        efa=pool.efa,
        placement_group=pool.uses_placement_group,
        local_nvme_raid0=pool.local_nvme_raid0,
        hugepages_2mi_mib=pool.hugepages_2mi_reserved,
        auto_repair=pool.auto_repair,
        checkpointing=pool.checkpointing,
        labels=pool.labels,
        cluster_name=cluster_name,
        cluster_version=cluster_version,
        cluster_security_group_id=cluster_security_group_id,
        node_role_arn=node_role_arn,
        subnet_ids=subnet_ids,
        efa_security_group_id=efa_security_group_id,
        wait_for=wait_for,
        tags=tags,
    )


def pool_capacities(cfg: PlatformConfig) -> list[kueue.PoolCapacity]:
    """Each GPU pool at its max size, for Kueue's flavors and the cohort's capacity."""
    out = []
    for name, pool in cfg.node_pools.items():
        itype = catalog().instance(pool.instance_type)
        kind = catalog().accelerator_kind(pool.instance_type)
        if kind is None or itype.accelerator is None:
            continue
        count = itype.accelerator.count
        serving = sum(t.serving_gpus.get(name, 0) for t in cfg.tenants.values())
        out.append(
            kueue.PoolCapacity(
                name=name,
                gpu_resource=kind.resource,
                taint_key=kind.taint_key,
                # GPUs held by services outside Kueue are not the queues' to give.
                gpus=count * pool.max_size - serving,
                cpu_per_gpu=itype.vcpus / count,
                memory_gib_per_gpu=itype.memory_gib / count,
            )
        )
    return out


def tenant_shares(cfg: PlatformConfig) -> list[kueue.TenantShare]:
    """Each tenant's guaranteed share, for its ClusterQueue."""
    return [
        kueue.TenantShare(name=name, gpu_quota=t.gpu_quota, cpu=t.cpu, memory_gib=t.memory_gib)
        for name, t in cfg.tenants.items()
    ]


def addons_args(
    cfg: PlatformConfig,
    *,
    cluster_name: pulumi.Input[str],
    vpc_id: pulumi.Input[str],
    system_nodes: Sequence[pulumi.Resource],
) -> AddonsArgs:
    a = cfg.addons
    return AddonsArgs(
        gpu_operator=a.gpu_operator,
        efa_device_plugin=a.efa_device_plugin and any(p.efa for p in cfg.node_pools.values()),
        kueue=a.kueue,
        training_operator=a.training_operator,
        load_balancer_controller=a.load_balancer_controller,
        metrics_server=a.metrics_server,
        cluster_name=cluster_name,
        region=cfg.region,
        vpc_id=vpc_id,
        pools=pool_capacities(cfg),
        tenants=tenant_shares(cfg),
        system_nodes=list(system_nodes),
    )


def bucket(storage: StorageConfig, key: str, spec: BucketConfig) -> Bucket:
    return Bucket(
        name=storage.bucket_name(key),
        precious=spec.precious,
        versioned=spec.versioned,
        replicate=spec.replicate,
        adopted=storage.adopted(key),
        lifecycle=[
            LifecycleRule(
                prefix=rule.prefix,
                transitions=[Transition(t.days, t.storage_class) for t in rule.transitions],
                expire_days=rule.expire_days,
            )
            for rule in spec.lifecycle
        ],
        noncurrent_version_expire_days=spec.noncurrent_version_expire_days,
        abort_incomplete_multipart_days=spec.abort_incomplete_multipart_days,
    )


def storage_args(
    storage: StorageConfig, region: str, dr_provider: aws.Provider | None
) -> StorageArgs:
    rep = storage.replication
    return StorageArgs(
        bucket_name_prefix=storage.bucket_name_prefix,
        buckets={key: bucket(storage, key, spec) for key, spec in storage.buckets.items()},
        region=region,
        replication=Replication(
            region=rep.region,
            replicate_delete_markers=rep.replicate_delete_markers,
            time_control=rep.time_control,
        )
        if rep.region is not None
        else None,
        dr_provider=dr_provider,
        adopted_kms_key_id=storage.adoption.kms_key_id if storage.adoption else None,
    )


def lustre_args(
    lustre: LustreConfig,
    *,
    vpc_id: pulumi.Input[str],
    subnet_id: pulumi.Input[str],
    client_security_group_id: pulumi.Input[str],
    kms_key_arn: pulumi.Input[str],
    kms_key_id: pulumi.Input[str],
    datasets_bucket: pulumi.Input[str],
    checkpoints_bucket: pulumi.Input[str],
    log_group_name: str,
) -> LustreFileSystemArgs:
    return LustreFileSystemArgs(
        storage_capacity_gib=lustre.storage_capacity_gib,
        throughput_per_tib=lustre.throughput_per_tib,
        compression=lustre.compression,
        metadata_mode=lustre.metadata_mode,
        metadata_iops=lustre.metadata_iops,
        lustre_version=lustre.lustre_version,
        datasets_prefix=lustre.datasets_prefix,
        checkpoints_prefix=lustre.checkpoints_prefix,
        automatic_backup_retention_days=lustre.automatic_backup_retention_days,
        log_retention_days=lustre.log_retention_days,
        vpc_id=vpc_id,
        subnet_id=subnet_id,
        client_security_group_id=client_security_group_id,
        kms_key_arn=kms_key_arn,
        kms_key_id=kms_key_id,
        datasets_bucket=datasets_bucket,
        checkpoints_bucket=checkpoints_bucket,
        log_group_name=log_group_name,
    )


def tenant(spec: TenantConfig) -> Tenant:
    return Tenant(
        cpu=spec.cpu,
        memory_gib=spec.memory_gib,
        pvcs=spec.pvcs,
        gpu_quota=spec.gpu_quota,
        serving_gpus=spec.serving_gpus,
        admin_role_arn=spec.admin_role_arn,
        s3_prefixes=spec.s3_prefixes,
    )
