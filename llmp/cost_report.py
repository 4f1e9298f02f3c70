"""`llmp cost`: a stack's cost estimate from wherever it lives, as tables, JSON or a comparison.

The estimate itself is `program.cost.estimate`, the stack's `cost` output: its
declared resources, priced. This module finds it and shows it. A cost source
is one of:

- a stack name: synthesized offline (`llmp.synth.synthesize_stack`, no cloud),
  its plan's `cost` output, or its plan's resources re-priced with live prices
  (`pricer`);
- a plan.json written by `llmp synth` (its `outputs.cost`);
- the JSON of `pulumi stack output --json` of a deployed stack (its `cost` key).

`load_cost_source` is the one place that tells them apart, so another form
(a stack at a git revision) is one more branch there.
"""

from __future__ import annotations

import contextlib
import enum
import io
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from llmp.errors import BadInput, Failed
from llmp.plan import Plan
from program.cost import CATALOG_PRICES, PriceBook
from program.ledger import Declared

REQUIRED_KEYS = (
    "usd_per_hour",
    "usd_per_month_with_storage",
    "usd_per_month_at_desired",
    "components",
    "gpu_share",
    "pricing_modes",
    "price_source",
    "node_pools",
)
"""What a `cost` output must hold to be rendered: a deployment older than the per-component
estimate lacks most of these."""

SIZES = ("min", "desired", "max")

Pricer = Callable[[Plan], PriceBook]
"""Prices for a stack's plan (live prices, say); none: the catalog's, as synthesized."""


class PriceMode(enum.StrEnum):
    """Where `llmp cost` takes instance prices from."""

    catalog = "catalog"
    """The default: the catalog's dated prices, what the stack's `cost` output holds;
    offline (no credential look-up, no network)."""
    live = "live"
    """The AWS Price List's on-demand prices; an error without credentials."""
    auto = "auto"
    """Opt-in: live when boto3 finds credentials (falling back to the catalog, with a
    warning, if the API fails), else the catalog's. It looks credentials up (environment,
    profiles, the instance metadata endpoint), so it is never the default."""


class CostSourceError(BadInput):
    """A cost source that cannot be read: a bad name, file or content (exit 2)."""


class CostSynthError(Failed):
    """The program failed while synthesizing a stack (exit 1)."""


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def load_cost_source(spec: str, pricer: Pricer | None = None) -> tuple[str, dict[str, Any]]:
    """(label, cost) of a stack name, `STACK@REF` (the stack at a git revision), a
    plan.json or a `pulumi stack output --json` file.

    A file or a revision keeps the prices it was estimated with (a revision's own
    catalog); `pricer` re-prices only a stack name, whose config is at hand. Raises
    CostSourceError (bad input) or CostSynthError (the program failed).
    """
    if is_file_spec(spec):
        return load_cost_file(Path(spec))
    if is_revision_spec(spec):
        return load_revision_cost(spec)
    return load_stack_cost(spec, pricer)


def is_revision_spec(spec: str) -> bool:
    """`STACK@REF`: stack names cannot hold '@', git revisions can (`HEAD@{1}`), so the
    first '@' splits them. REF may hold '/' (`pretrain@origin/main`, as CI names the
    base); STACK cannot, and a path that exists or names a .json is a file."""
    stack, at, _ = spec.partition("@")
    if not at or "/" in stack or "\\" in stack:
        return False
    return not spec.endswith(".json") and not Path(spec).is_file()


def load_revision_cost(spec: str) -> tuple[str, dict[str, Any]]:
    """(STACK@REF, cost) of the stack synthesized by the code of git revision REF (a
    temporary worktree of the repository of the running code, as `llmp diff` uses)."""
    from llmp import revision
    from llmp.synth import REPO_ROOT

    stack, _, ref = spec.partition("@")
    if not stack or not ref:
        raise CostSourceError(f"{spec}: expected STACK@REF, e.g. pretrain@main")
    # The revision's program prints its own warnings; a cost table does not repeat them.
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            # Not the working directory's: a plain stack name reads this checkout's stack
            # file, so both sides of a --compare come from one checkout.
            plan = revision.plan_at(ref, stack, revision.repo_root(REPO_ROOT))
        except revision.RevisionError as exc:
            if exc.exit_code == revision.EXIT_FAILED:
                raise CostSynthError(str(exc)) from None
            raise CostSourceError(str(exc)) from None
    if "cost" not in plan.outputs:
        raise CostSourceError(f"the plan of {stack} at {ref} has no cost output")
    return spec, checked_cost(plan.outputs["cost"], f"the plan of {stack} at {ref}")


def is_file_spec(spec: str) -> bool:
    """A spec names a file when it looks like a path; stack names have no '/' and no '.json'."""
    if is_revision_spec(spec):
        return False
    return spec.endswith(".json") or "/" in spec or "\\" in spec or Path(spec).is_file()


def load_cost_file(path: Path, expect: str | None = None) -> tuple[str, dict[str, Any]]:
    """(label, cost) of a plan.json or a `pulumi stack output --json` file; `expect`
    ("plan" or "outputs") refuses the other kind."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise CostSourceError(f"no file {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CostSourceError(
            f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    except json.JSONDecodeError as exc:
        raise CostSourceError(
            f"{path} is not JSON (line {exc.lineno}: {exc.msg}); give a plan.json of "
            "`llmp synth` or the output of `pulumi stack output --json`"
        ) from None
    except RecursionError:
        raise CostSourceError(f"{path} is JSON nested too deeply to be a plan or outputs") from None
    if not isinstance(doc, dict):
        raise CostSourceError(f"{path} holds no JSON object; expected a plan or stack outputs")
    is_plan = "resources" in doc and "outputs" in doc
    if expect == "plan" and not is_plan:
        raise CostSourceError(f"{path} is not a plan.json of `llmp synth` (no resources)")
    if expect == "outputs" and is_plan:
        raise CostSourceError(f"{path} is a plan.json, not stack outputs: pass it with --plan")
    if is_plan:
        stack = doc.get("stack") or path.parent.name
        label = f"{stack} ({path.name})"
        outputs = doc["outputs"] if isinstance(doc["outputs"], dict) else {}
        if "cost" not in outputs:
            raise CostSourceError(f"{path} is a plan without a cost output")
        return label, checked_cost(outputs["cost"], str(path))
    if "cost" in doc:
        return path.name, checked_cost(doc["cost"], str(path))
    raise CostSourceError(
        f"{path} has no `cost`: expected a plan.json of `llmp synth` (outputs.cost) or the "
        "output of `pulumi stack output --json` (cost)"
    )


def load_stack_cost(stack: str, pricer: Pricer | None = None) -> tuple[str, dict[str, Any]]:
    """(stack, cost) of a stack synthesized offline, re-priced by `pricer` when given."""
    from llmp import synth
    from program.cost import estimate, usage_of
    from spec.stackfile import load_config, load_stack_file

    plan = synth.synthesize_stack(stack, quiet=True)
    if pricer is None:
        return stack, checked_cost(plan.outputs.get("cost"), f"the plan of {stack}")
    usage = usage_of(load_config(load_stack_file(str(synth.stack_file(stack)))))
    return stack, as_exported(estimate(declared(plan), usage, pricer(plan)))


def declared(plan: Plan) -> list[Declared]:
    """The plan's resources, as the program's ledger records them (what the cost prices)."""
    return [
        Declared(r.type, r.name, plan.component_of(r), r.inputs, r.custom) for r in plan.resources
    ]


def checked_cost(cost: Any, where: str) -> dict[str, Any]:
    if not isinstance(cost, dict):
        raise CostSourceError(f"{where}: `cost` is not an object")
    missing = [key for key in REQUIRED_KEYS if key not in cost]
    if missing:
        raise CostSourceError(
            f"{where}: the cost output lacks {', '.join(missing)} (estimated before per-"
            "component costs existed? run `pulumi up` again, or give a stack name)"
        )
    return cost


def as_exported(value: Any) -> Any:
    """`value` as a stack output reads back: None entries dropped, whole floats as ints
    (what Pulumi's export and `llmp synth` do), so every source renders alike."""
    if isinstance(value, dict):
        return {k: as_exported(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [as_exported(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class LivePricer:
    """Live on-demand prices for a stack's instance types, from the AWS Price List.

    `strict` (`--prices live`) lets a failing API raise PricingError; otherwise
    (`--prices auto`) the catalog's prices are used and a warning says why.
    """

    def __init__(self, session: Any, *, strict: bool):
        self.session = session
        self.strict = strict
        self.warnings: list[str] = []

    def __call__(self, plan: Plan) -> PriceBook:
        from llmp.pricing import PricingError, live_price_book, pricing_client
        from program.cost.facts import facts

        types = list(dict.fromkeys(g.instance_type for g in facts(declared(plan)).node_groups))
        region = plan.primary_region or ""
        try:
            book, warnings = live_price_book(pricing_client(self.session, region), types, region)
        except PricingError as exc:
            if self.strict:
                raise
            self.warnings.append(f"prices: {exc}; using the catalog's prices")
            return CATALOG_PRICES
        self.warnings += warnings
        return book


def boto3_session() -> Any:
    """A default boto3 session (a seam: tests give a stubbed one)."""
    import boto3

    return boto3.Session()


# ---------------------------------------------------------------------------
# Comparing
# ---------------------------------------------------------------------------


def _pair(a: float | None, b: float | None, digits: int = 2) -> dict[str, float | None]:
    return {"a": a, "b": b, "delta": round((b or 0) - (a or 0), digits)}


def _union(first: Iterable[str], second: Iterable[str]) -> list[str]:
    names = list(first)
    return names + [n for n in second if n not in names]


def compare_costs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Deltas of b against a (delta = b - a; something only one side has counts 0 on the other)."""
    comps_a, comps_b = a["components"], b["components"]
    pools_a, pools_b = a["node_pools"], b["node_pools"]
    return {
        "delta": "b - a",
        "usd_per_month_with_storage": _pair(
            a["usd_per_month_with_storage"], b["usd_per_month_with_storage"]
        ),
        "usd_per_month_at_desired": _pair(
            a["usd_per_month_at_desired"], b["usd_per_month_at_desired"]
        ),
        "usd_per_hour": {s: _pair(a["usd_per_hour"][s], b["usd_per_hour"][s]) for s in SIZES},
        "components": {
            name: _pair(
                comps_a[name]["usd_per_month"] if name in comps_a else None,
                comps_b[name]["usd_per_month"] if name in comps_b else None,
            )
            for name in _union(comps_a, comps_b)
        },
        "gpu_share": {
            key: _pair(a["gpu_share"][key], b["gpu_share"][key], 4 if key == "gpu_share" else 2)
            for key in ("gpu_usd_per_month", "overhead_usd_per_month", "gpu_share")
        },
        "node_pools_usd_per_hour_at_desired": {
            name: _pair(
                pools_a[name]["usd_per_hour"]["desired"] if name in pools_a else None,
                pools_b[name]["usd_per_hour"]["desired"] if name in pools_b else None,
            )
            for name in _union(pools_a, pools_b)
        },
    }


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------


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
    yield Text(f"prices: {_as_of(cost['price_source'])}")


_CAPACITY_NAMES = {"capacity-block": "cap. block"}


def _pools_tables(cost: dict[str, Any]) -> Iterator[Any]:
    """Two tables that each fit 80 columns: the pools' sizes and $/hour, then each pool's
    per-node price under every pricing mode."""
    from rich.table import Table

    modes = cost["pricing_modes"]
    rows = [("system", cost["system_pool"], None)]
    rows += [(n, cost["node_pools"][n], modes.get(n)) for n in sorted(cost["node_pools"])]

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

        prices.add_row(
            name,
            pool["instance_type"],
            per_node("on_demand") if pool_modes else _unit_price(pool["usd_per_instance_hour"]),
            per_node("spot"),
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
    unpriced = "-: the system pool is priced at its own capacity type only"
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

    def row(t: Any, name: str, pair: dict[str, float | None]) -> None:
        t.add_row(name, _money(pair["a"]), _money(pair["b"]), _delta(pair["delta"] or 0))

    comps = table("components ($/month at desired size)")
    pairs = deltas["components"]
    for name in sorted(pairs, key=lambda n: (-max(pairs[n]["a"] or 0, pairs[n]["b"] or 0), n)):
        row(comps, name, pairs[name])
    row(comps, "total", total)
    storage = [(c.get("storage") or {}).get("usd_per_month", 0.0) for c in (cost_a, cost_b)]
    row(comps, "  of which S3 and FSx", _pair(*storage))
    yield comps

    pools = table("node pools ($/hour at desired size)")
    for name, pair in sorted(deltas["node_pools_usd_per_hour_at_desired"].items()):
        row(pools, name, pair)
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


def to_json(sources: list[tuple[str, dict[str, Any]]]) -> str:
    """One source: {label, cost}; two: {a, b, deltas} (delta = b - a)."""
    if len(sources) == 1:
        label, cost = sources[0]
        return json.dumps({"label": label, "cost": cost}, indent=2, sort_keys=True)
    (label_a, cost_a), (label_b, cost_b) = sources
    return json.dumps(
        {
            "a": {"label": label_a, "cost": cost_a},
            "b": {"label": label_b, "cost": cost_b},
            "deltas": compare_costs(cost_a, cost_b),
        },
        indent=2,
        sort_keys=True,
    )
