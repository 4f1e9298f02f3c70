"""The prices an estimate uses: the catalog's, dated; live instance prices where asked for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from spec.catalog import catalog

CAPACITY_MODES = ("ON_DEMAND", "SPOT", "CAPACITY_BLOCK")


@dataclass(frozen=True)
class PriceBook:
    """The instance prices an estimate uses: the catalog's by default, live ones from
    `llmp.cost.pricing.live_price_book`. Every other price (EBS, NAT, S3, FSx, capacity
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


def usd(value: float) -> str:
    """A unit price with as many decimals as it has, at least two: $0.045, $0.50, $5.00."""
    whole, _, fraction = f"{value:,.4f}".rstrip("0").partition(".")
    return f"${whole}.{fraction.ljust(2, '0')}"
