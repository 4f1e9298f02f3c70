"""A component's cost as priced lines: quantity x unit price, and what is left out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
