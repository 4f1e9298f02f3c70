"""The EC2 vCPU quotas a stack's pools need at their max sizes (`llmp synth` prints them,
`llmp verify --preflight` reads them from Service Quotas).

EC2 On-Demand and Spot quotas count vCPUs per instance family (P, G and VT, Trn, Standard):
a pool needs max_size x the type's vCPUs under its family's quota for its market, so
40 x p5.48xlarge is 7,680 vCPUs of "Running On-Demand P instances". A capacity-block pool
launches into the block bought for it and is listed apart.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from spec.catalog import catalog
from spec.platform import PlatformConfig


@dataclass
class QuotaDemand:
    """vCPUs the stack's pools may run under one EC2 quota."""

    code: str
    name: str
    """The quota's name in Service Quotas (`Running On-Demand P instances`)."""
    family: str
    """P, G and VT, Trn, Standard."""
    market: str
    """On-Demand or Spot."""
    vcpus: int = 0
    nodes: Counter[str] = field(default_factory=Counter)
    """instance type -> nodes at max size."""
    pools: list[str] = field(default_factory=list)

    def line(self) -> str:
        nodes = " + ".join(f"{n} x {t}" for t, n in sorted(self.nodes.items()))
        return f"quota {self.code} {self.family} {self.market}: {self.vcpus:,} vCPUs ({nodes})"


def _family(quota_name: str) -> str:
    """`Running On-Demand G and VT instances` -> `G and VT`; Standard's list is dropped."""
    text = quota_name.removeprefix("Running On-Demand ").removesuffix(" instances")
    return text.split(" (", 1)[0]


def quota_demands(cfg: PlatformConfig) -> tuple[list[QuotaDemand], list[str]]:
    """The quotas the stack's pools need at max size, by quota code, and the capacity-block
    pools (outside the vCPU quotas)."""
    recovery = catalog().recovery
    if recovery is None:
        return [], []
    system = cfg.system_pool
    # An adopted (or shared) cluster's system pool is its owner's, not this stack's.
    pools = (
        []
        if cfg.adopts_cluster
        else [("system pool", system.instance_type, "ON_DEMAND", system.max_size)]
    )
    pools += [(n, p.instance_type, p.capacity_type, p.max_size) for n, p in cfg.node_pools.items()]
    pools += [(n, p.instance_type, p.capacity_type, p.max_size) for n, p in cfg.cpu_pools.items()]
    demands: dict[str, QuotaDemand] = {}
    blocks: list[str] = []
    for name, instance_type, capacity, max_size in pools:
        if capacity == "CAPACITY_BLOCK":
            blocks.append(name)
            continue
        _, quota = recovery.quota_for(instance_type)
        spot = capacity == "SPOT"
        code = quota.spot if spot else quota.on_demand
        demand = demands.setdefault(
            code,
            QuotaDemand(
                code,
                quota.spot_name if spot else quota.on_demand_name,
                _family(quota.on_demand_name),
                "Spot" if spot else "On-Demand",
            ),
        )
        demand.vcpus += catalog().instance(instance_type).vcpus * max_size
        demand.nodes[instance_type] += max_size
        demand.pools.append(name)
    order = {"P": 0, "G and VT": 1, "Trn": 2}
    ranked = sorted(demands.values(), key=lambda d: (order.get(d.family, 9), d.market, d.code))
    return ranked, blocks


def quota_lines(cfg: PlatformConfig) -> list[str]:
    """One line per quota, then the capacity-block pools: what `llmp synth` prints."""
    demands, blocks = quota_demands(cfg)
    lines = [d.line() for d in demands]
    if blocks:
        lines.append(
            f"no vCPU quota: {', '.join(blocks)} (capacity block: the block is the capacity)"
        )
    return lines
