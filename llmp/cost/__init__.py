"""`llmp cost`: a stack's cost estimate from wherever it lives, as tables, JSON or a comparison.

The estimate itself is `program.cost.estimate`, the stack's `cost` output: its
declared resources, priced. This module finds it and shows it. A cost source
is one of:

- a stack name: synthesized offline (`llmp.plan.synth.synthesize_stack`, no cloud),
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
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from llmp.errors import BadInput, Failed
from llmp.plan import Plan
from program.cost import CATALOG_PRICES, PriceBook
from program.ledger import Declared
from spec import readers

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


def load_cost_source(
    spec: str, pricer: Pricer | None = None, config_file: Path | None = None
) -> tuple[str, dict[str, Any]]:
    """(label, cost) of a stack name, `STACK@REF` (the stack at a git revision), a
    plan.json or a `pulumi stack output --json` file.

    A file or a revision keeps the prices it was estimated with (a revision's own
    catalog); `pricer` re-prices only a stack name, whose config is at hand. Raises
    CostSourceError (bad input) or CostSynthError (the program failed). `config_file`:
    the stack file of a stack name, instead of stacks/Pulumi.STACK.yaml.
    """
    if config_file is not None:
        return load_stack_cost(spec, pricer, config_file)
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
    from llmp.plan import revision
    from llmp.stacks import REPO_ROOT

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
        data = readers.read_bytes(path, max_bytes=readers.MAX_FILE_BYTES * 16)
        doc = readers.parse_json(data, str(path), max_bytes=readers.MAX_FILE_BYTES * 16)
    except readers.ReadError as exc:
        if exc.problem == "no such file":
            raise CostSourceError(f"no file {path}") from None
        hint = (
            "; give a plan.json of `llmp synth` or the output of `pulumi stack output --json`"
            if exc.problem.startswith("not JSON")
            else ""
        )
        raise CostSourceError(f"{exc}{hint}") from None
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


def load_stack_cost(
    stack: str, pricer: Pricer | None = None, config_file: Path | None = None
) -> tuple[str, dict[str, Any]]:
    """(stack, cost) of a stack synthesized offline (from `config_file` when given),
    re-priced by `pricer` when given."""
    from llmp.plan import synth
    from program.cost import estimate, usage_of
    from spec.stackfile import load_config, load_stack_file

    plan = synth.synthesize_stack(stack, config_file, hint=config_file is None, quiet=True)
    if pricer is None:
        return stack, checked_cost(plan.outputs.get("cost"), f"the plan of {stack}")
    path = config_file or synth.stack_file(stack)
    usage = usage_of(load_config(load_stack_file(str(path))))
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
        from llmp.cost.pricing import PricingError, live_price_book, pricing_client
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


def pair(a: float | None, b: float | None, digits: int = 2) -> dict[str, float | None]:
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
        "usd_per_month_with_storage": pair(
            a["usd_per_month_with_storage"], b["usd_per_month_with_storage"]
        ),
        "usd_per_month_at_desired": pair(
            a["usd_per_month_at_desired"], b["usd_per_month_at_desired"]
        ),
        "usd_per_hour": {s: pair(a["usd_per_hour"][s], b["usd_per_hour"][s]) for s in SIZES},
        "components": {
            name: pair(
                comps_a[name]["usd_per_month"] if name in comps_a else None,
                comps_b[name]["usd_per_month"] if name in comps_b else None,
            )
            for name in _union(comps_a, comps_b)
        },
        "gpu_share": {
            key: pair(a["gpu_share"][key], b["gpu_share"][key], 4 if key == "gpu_share" else 2)
            for key in ("gpu_usd_per_month", "overhead_usd_per_month", "gpu_share")
        },
        "node_pools_usd_per_hour_at_desired": {
            name: pair(
                pools_a[name]["usd_per_hour"]["desired"] if name in pools_a else None,
                pools_b[name]["usd_per_hour"]["desired"] if name in pools_b else None,
            )
            for name in _union(pools_a, pools_b)
        },
    }


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
