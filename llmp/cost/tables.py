"""`llmp cost` as tables: one estimate (components, pools, pricing modes, the hourly
total and what it leaves out), or two side by side with their deltas; 80 columns."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from llmp.cost import SIZES, compare_costs, pair


def _money(value: float | None, decimals: int = 2) -> str:
    return "-" if value is None else f"${value:,.{decimals}f}"


def _unit_price(value: float) -> str:
    """A unit price with the decimals it has (at most five), at least two: $0.0225, $55.04."""
    whole, _, fraction = f"{value:,.5f}".rstrip("0").partition(".")
    return f"${whole}.{fraction.ljust(2, '0')}"


def _quantity(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or float(value).is_integer() else f"{value:,.2f}"


def _delta(value: float) -> Any:
    from rich.text import Text

    if abs(value) < 0.005:
        return Text("0", style="dim")
    return Text(f"{value:+,.2f}", style="red" if value > 0 else "green")


_DATE_NAMES = {
    "instances_on_demand": "instances",
    "capacity_blocks": "capacity blocks",
    "platform": "platform",
    "storage": "storage",
}


def _dates(as_of: dict[str, str]) -> str:
    known = [k for k in _DATE_NAMES if k in as_of] + sorted(set(as_of) - set(_DATE_NAMES))
    return "(" + ", ".join(f"{_DATE_NAMES.get(k, k)} {as_of[k]}" for k in known) + ")"


def _as_of(source: dict[str, Any]) -> str:
    if source.get("kind") == "live":
        text = (
            f"live AWS Price List on-demand prices for {source.get('region')}, fetched "
            f"{source.get('fetched_at')}; everything else from the catalog "
            + _dates(source.get("catalog_as_of", {}))
        )
        fallbacks = source.get("catalog_fallbacks") or {}
        if fallbacks:
            text += f"; catalog prices kept for {', '.join(sorted(fallbacks))}"
        return text
    text = f"catalog, {source.get('region')} " + _dates(source.get("as_of", {}))
    if source.get("note"):
        text += f"; {source['note']}"
    return text


_FIXED_NAMES = {
    "eks_control_plane": "EKS control plane",
    "nat_gateways": "NAT gateways",
    "interface_endpoints": "interface endpoints",
    "public_ipv4": "public IPv4",
    "load_balancer": "ALB",
}


def _by_cost(components: dict[str, Any]) -> list[str]:
    """Component names, dearest first (a stack output does not keep the program's order)."""
    return sorted(components, key=lambda n: (-components[n]["usd_per_month"], n))


def _gpu_nodes(cost: dict[str, Any], size: str) -> tuple[int, int]:
    """(GPU nodes, accelerators) of the accelerated pools at a size."""
    nodes = accelerators = 0
    for name, pool in cost["node_pools"].items():
        if name not in cost["pricing_modes"]:
            continue
        count = int(pool.get("nodes", {}).get(size, 0))
        nodes += count
        per_node = pool["accelerators_at_max"] / max(1, pool.get("nodes", {}).get("max", 1))
        accelerators += round(count * per_node)
    return nodes, accelerators


def render(label: str, cost: dict[str, Any]) -> Iterator[Any]:
    """Rich renderables: a summary, the components with their priced lines, the node pools
    and their per-node prices under each pricing mode, GPU against overhead, hourly by pool
    size, what is left out, and where the prices come from.

    Every table fits 80 columns without cutting a value: a priced line's description sits
    on its own row with its arithmetic under it, and the pools take two narrow tables.
    """
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    hourly = cost["usd_per_hour"]
    yield Text(
        f"{label}: {_money(cost['usd_per_month_with_storage'])}/month at desired size "
        f"({_money(hourly['desired'])}/h; {_money(hourly['min'])}/h at min, "
        f"{_money(hourly['max'])}/h at max)",
        style="bold",
    )

    table = Table(
        title=f"components of {label} ($/month at desired size)",
        title_justify="left",
        caption_justify="left",
    )
    table.add_column("component, its lines: quantity x unit price", overflow="fold", ratio=1)
    table.add_column("$/month", justify="right", overflow="fold")
    components = cost["components"]
    blended = False
    for name in _by_cost(components):
        comp = components[name]
        head: list[Any] = [Text(name, style="bold")]
        if comp.get("note"):
            head.append(Padding(Text(comp["note"], style="italic"), (0, 0, 0, 2)))
        table.add_row(Group(*head), Text(f"{comp['usd_per_month']:,.2f}", style="bold"))
        for line in comp.get("lines", []):
            arithmetic = (
                f"{_quantity(line['quantity'])} {line['unit']} x "
                f"{_unit_price(line['usd_per_unit'])}/{line['unit']}"
            )
            if line.get("basis"):
                arithmetic += " *"
                blended = True
            table.add_row(
                Group(
                    Padding(Text(f"- {line['what']}"), (0, 0, 0, 2)),
                    Padding(Text(arithmetic, style="dim"), (0, 0, 0, 4)),
                ),
                f"{line['usd_per_month']:,.2f}",
            )
    total = cost["usd_per_month_with_storage"]
    table.add_row(Text("total", style="bold"), Text(f"{total:,.2f}", style="bold"))
    if blended:
        table.caption = "* blended: a lifecycle model's monthly total over the GB held"
    yield table

    yield from _pools_tables(cost)

    share = cost["gpu_share"]
    split = Table(
        title="GPU node pools against platform overhead ($/month at desired size)",
        title_justify="left",
        min_width=72,
    )
    split.add_column("", overflow="fold")
    split.add_column("$/month", justify="right", overflow="fold")
    split.add_column("share", justify="right", overflow="fold")
    split.add_row(
        "GPU node pools", f"{share['gpu_usd_per_month']:,.2f}", f"{share['gpu_share']:.2%}"
    )
    split.add_row(
        "platform overhead",
        f"{share['overhead_usd_per_month']:,.2f}",
        f"{share['overhead_share']:.2%}",
    )
    yield split

    sizes = Table(
        title="hourly by node-pool size", title_justify="left", caption_justify="left", min_width=72
    )
    sizes.add_column("size", overflow="fold")
    sizes.add_column("GPU nodes", justify="right", overflow="fold")
    sizes.add_column("accelerators", justify="right", overflow="fold")
    sizes.add_column("$/hour", justify="right", overflow="fold")
    for size in SIZES:
        nodes, accelerators = _gpu_nodes(cost, size)
        sizes.add_row(size, str(nodes), str(accelerators), f"{hourly[size]:,.2f}")
    fixed_items = cost.get("overhead_usd_per_hour", {})
    names = ", ".join(_FIXED_NAMES.get(k, k) for k in sorted(fixed_items))
    sizes.caption = (
        f"$/hour: the pools' instances plus ${sum(fixed_items.values()):,.2f}/h billed by the "
        "hour at any size "
        f"({names}); EBS, KMS, WAF, S3 and FSx are in the monthly figures only"
    )
    yield sizes

    missing = cost.get("not_estimated", [])
    if missing:
        yield Text("not estimated:", style="bold")
        left_out = Table.grid(padding=(0, 1), pad_edge=True)
        left_out.add_column(overflow="fold")
        left_out.add_column(overflow="fold", ratio=1)
        for item in missing:
            what = Text(item["what"])
            what.append(f" ({item['why']})", style="dim")
            left_out.add_row(f"{item['component']}:", what)
        yield left_out
        yield Text("")
    yield from _not_billed(cost)
    yield Text(f"prices: {_as_of(cost['price_source'])}")


def _not_billed(cost: dict[str, Any]) -> Iterator[Any]:
    """What the stack adopts and someone else pays for (`cost.not_billed`), one dim line
    each, wrapped at the console's width."""
    from rich.text import Text

    adopted = cost.get("not_billed") or []
    if not adopted:
        return
    yield Text("not billed to this stack (adopted; its owner pays):", style="bold")
    for item in adopted:
        # "network: the VPC ... (not billed to this stack: its owner pays)": the heading says
        # the last part once.
        what = str(item).split(" (not billed", 1)[0]
        yield Text(f"  - {what}", style="dim")
    yield Text("")


_CAPACITY_NAMES = {"capacity-block": "cap. block"}


def _pools_tables(cost: dict[str, Any]) -> Iterator[Any]:
    """Two tables that each fit 80 columns: the pools' sizes and $/hour, then each pool's
    per-node price under every pricing mode."""
    from rich.table import Table

    modes = cost["pricing_modes"]
    # An adopted cluster's system nodes are its owner's: no row (they are not billed here).
    rows = [("system", cost["system_pool"], None)] if cost.get("system_pool") else []
    rows += [(n, cost["node_pools"][n], modes.get(n)) for n in sorted(cost["node_pools"])]
    cpu_pools = cost.get("cpu_pools") or {}
    rows += [(f"{n} (cpu)", cpu_pools[n], None) for n in sorted(cpu_pools)]

    sizes = Table(
        title="node pools (nodes at min/desired/max size; $/hour of the pool)",
        title_justify="left",
        caption_justify="left",
        min_width=72,
    )
    sizes.add_column("pool", overflow="fold")
    sizes.add_column("instance", overflow="fold")
    sizes.add_column("capacity", overflow="fold")
    sizes.add_column("nodes", justify="right", overflow="fold")
    sizes.add_column("$/h desired", justify="right", overflow="fold")
    sizes.add_column("$/h max", justify="right", overflow="fold")
    abbreviated = False
    for name, pool, _ in rows:
        nodes = pool.get("nodes", {})
        capacity = pool["capacity_type"].lower().replace("_", "-")
        abbreviated = abbreviated or capacity in _CAPACITY_NAMES
        sizes.add_row(
            name,
            pool["instance_type"],
            _CAPACITY_NAMES.get(capacity, capacity),
            "/".join(str(nodes.get(s, "?")) for s in SIZES),
            f"{pool['usd_per_hour']['desired']:,.2f}",
            f"{pool['usd_per_hour']['max']:,.2f}",
        )
    sizes.caption = "nodes: min/desired/max" + (
        "; cap. block: capacity block" if abbreviated else ""
    )
    yield sizes

    prices = Table(
        title="per-node prices ($/hour of one instance, by pricing mode)",
        title_justify="left",
        caption_justify="left",
        min_width=72,
    )
    prices.add_column("pool", overflow="fold")
    prices.add_column("instance", overflow="fold")
    prices.add_column("on-demand", justify="right", overflow="fold")
    prices.add_column("spot", justify="right", overflow="fold")
    prices.add_column("cap. block", justify="right", overflow="fold")
    for name, pool, pool_modes in rows:

        def per_node(mode: str, pool_modes: dict[str, Any] | None = pool_modes) -> str:
            entry = (pool_modes or {}).get(mode)
            return _unit_price(entry["usd_per_instance_hour"]) if entry else "-"

        # The system and CPU pools are priced at their own capacity type only.
        own = pool["capacity_type"] if not pool_modes else None
        price = _unit_price(pool["usd_per_instance_hour"])
        prices.add_row(
            name,
            pool["instance_type"],
            price if own == "ON_DEMAND" else per_node("on_demand"),
            price if own == "SPOT" else per_node("spot"),
            per_node("capacity_block"),
        )
    notes = []
    spot = next((m["spot"] for m in modes.values() if m.get("spot")), None)
    if spot:
        notes.append(f"spot: {spot['assumption']}")
    block = next((m["capacity_block"] for m in modes.values() if m.get("capacity_block")), None)
    if block:
        notes.append(
            f"cap. block: capacity block, catalog price, {block['region']}, {block['as_of']}"
        )
    unpriced = "-: the system and CPU pools are priced at their own capacity type only"
    if any(m.get("capacity_block_unavailable") for m in modes.values()):
        unpriced += "; no Capacity Block price in the catalog for that type"
    notes.append(unpriced)
    prices.caption = "; ".join(notes)
    yield prices


def render_comparison(
    a: tuple[str, dict[str, Any]], b: tuple[str, dict[str, Any]]
) -> Iterator[Any]:
    """Rich renderables of two estimates side by side with the deltas (b - a)."""
    from rich.table import Table
    from rich.text import Text

    (label_a, cost_a), (label_b, cost_b) = a, b
    deltas = compare_costs(cost_a, cost_b)
    total = deltas["usd_per_month_with_storage"]
    yield Text(
        f"{label_b} against {label_a}: {_money(total['b'])}/month against "
        f"{_money(total['a'])}/month ({total['delta']:+,.2f})",
        style="bold",
    )

    def table(title: str) -> Any:
        t = Table(title=title, title_justify="left", min_width=72)
        t.add_column("", overflow="fold")
        t.add_column(label_a, justify="right", overflow="fold")
        t.add_column(label_b, justify="right", overflow="fold")
        t.add_column(f"delta ({label_b} - {label_a})", justify="right", overflow="fold")
        return t

    def row(t: Any, name: str, cells: dict[str, float | None]) -> None:
        t.add_row(name, _money(cells["a"]), _money(cells["b"]), _delta(cells["delta"] or 0))

    comps = table("components ($/month at desired size)")
    pairs = deltas["components"]
    for name in sorted(pairs, key=lambda n: (-max(pairs[n]["a"] or 0, pairs[n]["b"] or 0), n)):
        row(comps, name, pairs[name])
    row(comps, "total", total)
    storage = [(c.get("storage") or {}).get("usd_per_month", 0.0) for c in (cost_a, cost_b)]
    row(comps, "  of which S3 and FSx", pair(*storage))
    yield comps

    pools = table("node pools ($/hour at desired size)")
    for name, delta in sorted(deltas["node_pools_usd_per_hour_at_desired"].items()):
        row(pools, name, delta)
    yield pools

    share = table("GPU node pools against platform overhead ($/month at desired size)")
    row(share, "GPU node pools", deltas["gpu_share"]["gpu_usd_per_month"])
    row(share, "platform overhead", deltas["gpu_share"]["overhead_usd_per_month"])
    gpu = deltas["gpu_share"]["gpu_share"]
    share.add_row(
        "GPU share",
        f"{gpu['a'] or 0:.2%}",
        f"{gpu['b'] or 0:.2%}",
        f"{(gpu['delta'] or 0) * 100:+.2f} pt",
    )
    share.caption = "pt: percentage points"
    yield share

    hourly = table("hourly by node-pool size ($/hour)")
    for size in SIZES:
        row(hourly, size, deltas["usd_per_hour"][size])
    yield hourly
    yield Text(f"prices of {label_a}: {_as_of(cost_a['price_source'])}")
    yield Text(f"prices of {label_b}: {_as_of(cost_b['price_source'])}")
