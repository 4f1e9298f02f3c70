"""The stack's Kueue inputs: each GPU pool's capacity and each tenant's share, read from
the stack config by the program (Kueue's flavors and ClusterQueues) and by `llmp job`
(the queues a job is checked against before it is submitted).
"""

from __future__ import annotations

from manifests import kueue
from spec.catalog import catalog
from spec.platform import PlatformConfig


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
