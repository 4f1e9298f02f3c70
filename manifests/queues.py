"""The stack's Kueue inputs: each GPU pool's capacity and each tenant's share, read from
the stack config by the program (Kueue's flavors and ClusterQueues) and by `llmp job`
(the queues a job is checked against before it is submitted).
"""

from __future__ import annotations

from manifests import kueue
from spec.catalog import catalog
from spec.platform import PlatformConfig
from spec.pools import NodePoolConfig


def mig_resource(strategy: str, profile: str, whole: str = "nvidia.com/gpu") -> str:
    """The resource a MIG partition is advertised as: `nvidia.com/mig-<profile>` with the
    mixed strategy, `nvidia.com/gpu` (`whole`) with single (the GPU operator's device plugin)."""
    return f"nvidia.com/mig-{profile}" if strategy == "mixed" else whole


def pool_partitions(cfg: PlatformConfig, pool: NodePoolConfig) -> dict[str, int]:
    """A MIG pool's resources per GPU (resource -> instances); empty for whole GPUs."""
    kind = catalog().accelerator_kind(pool.instance_type)
    whole = kind.resource if kind is not None else "nvidia.com/gpu"
    out: dict[str, int] = {}
    for profile, count in (pool.mig or {}).items():
        resource = mig_resource(cfg.addons.mig_strategy, profile, whole)
        out[resource] = out.get(resource, 0) + count
    return out


def pool_capacities(cfg: PlatformConfig, team: str = "") -> list[kueue.PoolCapacity]:
    """Each GPU pool at its max size, for Kueue's flavors and the cohort's capacity; `team`:
    a team stack's name on a shared cluster (its flavors are named after it)."""
    out = []
    for name, pool in cfg.node_pools.items():
        itype = catalog().instance(pool.instance_type)
        kind = catalog().accelerator_kind(pool.instance_type)
        if kind is None or itype.accelerator is None:
            continue
        count = itype.accelerator.count
        out.append(
            kueue.PoolCapacity(
                name=name,
                gpu_resource=kind.resource,
                taint_key=kind.taint_key,
                gpus=count * pool.max_size,
                cpu_per_gpu=itype.vcpus / count,
                memory_gib_per_gpu=itype.memory_gib / count,
                elastic=pool.elastic,
                team=team,
                topology_layers=itype.network_topology_layers if pool.topology_aware else None,
                partitions=pool_partitions(cfg, pool),
            )
        )
    return out


def tenant_shares(cfg: PlatformConfig, prefix: str = "") -> list[kueue.TenantShare]:
    """Each tenant's guaranteed share, for its ClusterQueue (named as its namespace). The
    model servers' `serving_gpus` are in it too, never lent: Kueue's pod integration admits
    every pod in a tenant namespace, a model server's among them (the namespace's LocalQueue
    `default` names its queue), so the GPUs those pods use are the queue's to hold."""
    return [
        kueue.TenantShare(
            name=f"{prefix}{name}",
            gpu_quota={
                pool: t.gpu_quota.get(pool, 0) + t.serving_gpus.get(pool, 0)
                for pool in dict.fromkeys([*t.gpu_quota, *t.serving_gpus])
            },
            cpu=t.cpu,
            memory_gib=t.memory_gib,
            unlent_gpus=dict(t.serving_gpus),
        )
        for name, t in cfg.tenants.items()
    ]
