"""`llmp diff`: what a change does to a stack, from two synthesized plans.

A PR preview without cloud credentials: the stack is synthesized at the base
revision and at the working tree (llmp/revision.py), and the two plans are
compared by URN, the identity Pulumi uses:

- resources added, deleted, and changed (the input paths, old -> new);
  a change of dependencies alone is not an input change;
- renames: a URN that vanishes while one of the same type appears. Pulumi
  deletes the old resource and creates the new one unless the new one has
  `aliases=[old URN]`, so a rename is reported as delete + create;
- replacements: a change of an input the provider cannot update in place
  (the catalog's `replacement` table: Terraform ForceNew as pulumi-aws
  bridges it; a Terraform set reordered is no change), a move to a provider
  configured differently, a delete or a rename; and, transitively, a resource whose
  force-new input takes an id or ARN of a replaced one (in a real preview
  that value is unknown until the new resource exists, which the provider
  treats as a replacement). Precious types (cluster, node groups, file
  system, buckets, KMS keys) are flagged loudly;
- the cost delta from the plans' `cost` output;
- the policy violations that are new, and the ones fixed.

The comparison is pure (`compare_plans`, `cost_delta`, `violation_delta`);
rendering is separate (`render_terminal`, `render_markdown`, `report_to_json`).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

__all__ = [
    "GITHUB_COMMENT_LIMIT",
    "CostLine",
    "DiffReport",
    "InputChange",
    "PlanDiff",
    "Replacement",
    "compare_plans",
    "cost_delta",
    "exit_code",
    "render_markdown",
    "render_terminal",
    "replacement_rules",
    "report_to_json",
    "violation_delta",
]

GITHUB_COMMENT_LIMIT = 65536
"""Characters GitHub accepts in one issue or PR comment body."""

SECRET = "[secret]"
ABSENT = "(absent)"
_VALUE_WIDTH = 80

_MISSING: Any = object()


# ---------------------------------------------------------------------------
# Inputs: flattening, values, paths
# ---------------------------------------------------------------------------


def _is_scalar_list(value: Any) -> bool:
    return isinstance(value, list) and all(not isinstance(v, dict | list) for v in value)


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """Input leaves by dotted path; lists of scalars are one leaf, lists of objects are indexed."""
    if isinstance(value, dict):
        if not value and prefix:
            return {prefix: value}
        out: dict[str, Any] = {}
        for key in value:
            out.update(_leaves(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and not _is_scalar_list(value):
        out = {}
        for i, item in enumerate(value):
            out.update(_leaves(item, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def show_value(value: Any, width: int = _VALUE_WIDTH) -> str:
    """A value as the report shows it: JSON, secrets as [secret], long ones cut with an ellipsis."""
    if value is _MISSING:
        return ABSENT
    if value == SECRET:
        return SECRET
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def _at_path(inputs: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path through objects; _MISSING where any step is absent."""
    node: Any = inputs
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _empty(value: Any) -> bool:
    return value is _MISSING or value is None or value == [] or value == {}


def _same(a: Any, b: Any) -> bool:
    """Equal as inputs: 30 and 30.0 are (the mocks return every number as a float), but
    `true` and 1 are not, as Python's `==` would have it."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _same_items(a: Any, b: Any) -> bool:
    """Two lists of scalars holding the same items, in any order (a Terraform set)."""
    if not (_is_scalar_list(a) and _is_scalar_list(b)) or len(a) != len(b):
        return False

    def key(value: Any) -> str:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return json.dumps(float(value) if number else value)

    return sorted(map(key, a)) == sorted(map(key, b))


def _version_key(value: Any) -> tuple[float, ...] | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return (float(value),)
    if isinstance(value, str) and re.fullmatch(r"\d+(\.\d+)*", value):
        return tuple(float(p) for p in value.split("."))
    return None


def _strings_in(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings_in(v)


# ---------------------------------------------------------------------------
# Replacement rules (catalog)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ForceNew:
    """One force-new input of a type (a plain copy of the catalog's, so tests can build them)."""

    input: str
    when: str = "changed"
    unordered: bool = False
    """A Terraform set: the same items in another order is no change."""


@dataclass(frozen=True)
class TypeRule:
    precious: bool
    force_new: tuple[ForceNew, ...]
    why: str | None = None


def replacement_rules() -> dict[str, TypeRule]:
    """The catalog's `replacement` table by Pulumi type (empty when the catalog has none)."""
    from spec.catalog import catalog

    table = catalog().replacement
    if table is None:
        return {}
    return {
        type_: TypeRule(
            rule.precious,
            tuple(ForceNew(f.input, f.when, f.unordered) for f in rule.force_new),
            rule.why,
        )
        for type_, rule in table.types.items()
    }


def _forced_by(rule: TypeRule, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The force-new inputs of `rule` whose change between `old` and `new` replaces the resource."""
    forced = []
    for entry in rule.force_new:
        before, after = _at_path(old, entry.input), _at_path(new, entry.input)
        if _same(before, after) or (before == SECRET and after == SECRET):
            continue
        if entry.unordered and _same_items(before, after):
            continue
        if entry.when == "changed":
            forced.append(entry.input)
        elif entry.when == "decreased":
            b, a = _version_key(before), _version_key(after)
            if b is not None and a is not None and a < b:
                forced.append(f"{entry.input} (decreased)")
        elif entry.when == "removed" and _empty(after) and not _empty(before):
            forced.append(f"{entry.input} (removed)")
    return forced


def computed_markers(resource: Mapping[str, Any]) -> set[str]:
    """Values by which other inputs refer to this resource's computed outputs in a plan.

    They follow `llmp.synth._PlanMocks`: the id is `<name>-id` and an unnamed
    resource's physical name `synth.autoname(name)`; its ARN,
    `arn:aws:mock:<region>:<account>:<type>/<name>`, is matched by `_MOCK_ARN`
    (the region differs per provider). A real preview knows none of these
    before the resource exists, which is what makes a replacement spread.
    """
    from llmp.synth import autoname

    name = str(resource["name"])
    return {f"{name}-id", autoname(name)}


_MOCK_ARN = re.compile(r"^arn:aws:mock:[^:]*:\d+:([^/]+)/(.+)$")


def _refers_to(value: Any, markers: Mapping[str, str], arns: Mapping[tuple[str, str], str]) -> str:
    """The URN of a replaced resource that `value` (an input) takes an output of, or ''."""
    for text in _strings_in(value):
        if text in markers:
            return markers[text]
        match = _MOCK_ARN.match(text)
        if match and (match.group(1), match.group(2)) in arns:
            return arns[(match.group(1), match.group(2))]
    return ""


def _short_type(type_: str) -> str:
    return type_.rsplit(":", 1)[-1].lower()


# ---------------------------------------------------------------------------
# Plan comparison
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class InputChange:
    path: str
    old: str
    new: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "old": self.old, "new": self.new}


@dataclass
class ResourceChange:
    urn: str
    type: str
    name: str
    changes: list[InputChange]

    def to_dict(self) -> dict[str, Any]:
        return {
            "urn": self.urn,
            "type": self.type,
            "name": self.name,
            "changes": [c.to_dict() for c in self.changes],
        }


@dataclass(frozen=True)
class ResourceRef:
    urn: str
    type: str
    name: str

    def to_dict(self) -> dict[str, str]:
        return {"urn": self.urn, "type": self.type, "name": self.name}


@dataclass(frozen=True)
class Rename:
    old: ResourceRef
    new: ResourceRef

    def to_dict(self) -> dict[str, Any]:
        return {"old": self.old.to_dict(), "new": self.new.to_dict()}


@dataclass(frozen=True)
class Replacement:
    """A resource the change deletes and re-creates (or only deletes)."""

    urn: str
    type: str
    name: str
    precious: bool
    cause: str
    """force-new, provider, delete, rename or cascade."""
    reason: str
    why: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "urn": self.urn,
            "type": self.type,
            "name": self.name,
            "precious": self.precious,
            "cause": self.cause,
            "reason": self.reason,
            "why_it_matters": self.why,
        }


@dataclass
class PlanDiff:
    added: list[ResourceRef] = field(default_factory=list)
    deleted: list[ResourceRef] = field(default_factory=list)
    changed: list[ResourceChange] = field(default_factory=list)
    renamed: list[Rename] = field(default_factory=list)
    unchanged: int = 0
    dependencies_only: int = 0
    """Unchanged resources whose dependencies alone changed (not an input change)."""
    replacements: list[Replacement] = field(default_factory=list)

    @property
    def precious_replacements(self) -> list[Replacement]:
        return [r for r in self.replacements if r.precious]

    def to_dict(self) -> dict[str, Any]:
        return {
            "added": [r.to_dict() for r in self.added],
            "deleted": [r.to_dict() for r in self.deleted],
            "changed": [r.to_dict() for r in self.changed],
            "renamed": [r.to_dict() for r in self.renamed],
            "unchanged": self.unchanged,
            "dependencies_only": self.dependencies_only,
            "replacements": [r.to_dict() for r in self.replacements],
        }


def _ref(r: Mapping[str, Any]) -> ResourceRef:
    return ResourceRef(str(r["urn"]), str(r["type"]), str(r["name"]))


def _leaf_likeness(a: Any, b: Any) -> float:
    if a == b:
        return 1.0
    if isinstance(a, str) and isinstance(b, str):
        # A renamed resource's inputs carry its new name (bucket names, policy documents).
        return difflib.SequenceMatcher(None, a[:2000], b[:2000], autojunk=False).ratio()
    return 0.0


def _similarity(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """How alike two resources' inputs are, 0 to 1: the mean likeness of their leaves."""
    la, lb = _leaves(a), _leaves(b)
    paths = set(la) | set(lb)
    if not paths:
        return 1.0
    return sum(_leaf_likeness(la.get(p, _MISSING), lb.get(p, _MISSING)) for p in paths) / len(paths)


def _pair_renames(
    deleted: list[Mapping[str, Any]], added: list[Mapping[str, Any]]
) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Pairs (old, new) of the same type: the only one of each, or else those of the same name
    (a parent change), then the most alike first while their inputs are at least half alike."""
    pairs = []
    types = {r["type"] for r in deleted} & {r["type"] for r in added}
    for type_ in sorted(types):
        olds = [r for r in deleted if r["type"] == type_]
        news = [r for r in added if r["type"] == type_]
        if len(olds) == 1 and len(news) == 1:
            pairs.append((olds[0], news[0]))
            continue
        # The same name is the same resource under another parent (the URN holds the
        # parent's type): paired first, however much its inputs change.
        scored = sorted(
            (
                (o["name"] == n["name"], _similarity(o["inputs"], n["inputs"]), i, j)
                for i, o in enumerate(olds)
                for j, n in enumerate(news)
            ),
            key=lambda t: (not t[0], -t[1], t[2], t[3]),
        )
        used_old: set[int] = set()
        used_new: set[int] = set()
        for same_name, score, i, j in scored:
            if score < 0.5 and not same_name:
                break
            if i in used_old or j in used_new:
                continue
            used_old.add(i)
            used_new.add(j)
            pairs.append((olds[i], news[j]))
    return pairs


PROVIDER = "(provider)"
"""The path under which a change of a resource's provider is listed."""


def _provider_label(ref: Any) -> str:
    """A provider reference (its URN, as plans record it) by its name; None is the default."""
    return str(ref).rsplit("::", 1)[-1] if ref else "(the default provider)"


def _provider_config_change(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    old: Mapping[str, Mapping[str, Any]],
    new: Mapping[str, Mapping[str, Any]],
) -> str | None:
    """Why moving a resource to another provider replaces it, or None when it does not.

    The engine replaces a resource whose provider reference changes unless the new
    provider's DiffConfig, given the old provider's configuration, asks for no replacement
    (pulumi/pulumi pkg/resource/deploy/step_generator.go, providerChanged). Offline that
    is known only when both configurations are in the plans and are the same; any other
    move is reported as a replacement (a preview that errs loud).
    """
    was, now = before.get("provider"), after.get("provider")
    old_provider, new_provider = old.get(str(was)), new.get(str(now))
    move = f"its provider changes from {_provider_label(was)} to {_provider_label(now)}"
    if old_provider is None or new_provider is None:
        return f"{move}, whose configuration this plan does not show: Pulumi replaces it"
    if old_provider["type"] != new_provider["type"]:
        return f"{move}, another package: Pulumi replaces it"
    a, b = _leaves(old_provider["inputs"]), _leaves(new_provider["inputs"])
    keys = [k for k in sorted(set(a) | set(b)) if not _same(a.get(k, _MISSING), b.get(k, _MISSING))]
    if not keys:
        return None
    return f"{move}, configured differently ({', '.join(keys)}): Pulumi replaces it"


def compare_plans(
    base: Mapping[str, Any],
    head: Mapping[str, Any],
    rules: Mapping[str, TypeRule] | None = None,
) -> PlanDiff:
    """Compare two plans (`llmp synth` format) by URN; `rules` default to the catalog's."""
    rules = replacement_rules() if rules is None else rules
    old = {r["urn"]: r for r in base.get("resources", [])}
    new = {r["urn"]: r for r in head.get("resources", [])}
    diff = PlanDiff()

    gone = [old[u] for u in old if u not in new]
    came = [new[u] for u in new if u not in old]
    renames = _pair_renames(gone, came)
    renamed_old = {o["urn"] for o, _ in renames}
    renamed_new = {n["urn"] for _, n in renames}
    diff.renamed = [Rename(_ref(o), _ref(n)) for o, n in renames]
    diff.deleted = [_ref(r) for r in gone if r["urn"] not in renamed_old]
    diff.added = [_ref(r) for r in came if r["urn"] not in renamed_new]

    replaced: dict[str, Replacement] = {}  # by the URN of the resource that goes away

    def replace(r: Mapping[str, Any], cause: str, reason: str) -> None:
        rule = rules.get(str(r["type"]))
        # Plans record these resource options where the program sets them (llmp/synth.py).
        if r.get("protect"):
            reason += "; it is protected: `pulumi up` refuses to delete it until protect is lifted"
        elif r.get("retain_on_delete"):
            reason += (
                "; retain_on_delete is set: the old one stays in the account, outside the stack"
            )
        replaced[str(r["urn"])] = Replacement(
            str(r["urn"]),
            str(r["type"]),
            str(r["name"]),
            bool(rule and rule.precious),
            cause,
            reason,
            rule.why if rule else None,
        )

    for o, n in renames:
        if o.get("custom", True):  # a component holds nothing; its children are listed
            moved = "its parent changes" if o["name"] == n["name"] else f"renamed to {n['name']}"
            replace(
                o,
                "rename",
                f"{moved}, and its URN with it: Pulumi deletes it and creates the new one unless "
                "that has aliases=[old URN]",
            )
    for r in gone:
        if r["urn"] not in renamed_old and r.get("custom", True):
            replace(r, "delete", "deleted by this change")

    for urn in sorted(set(old) & set(new)):
        before, after = old[urn], new[urn]
        a, b = _leaves(before["inputs"]), _leaves(after["inputs"])
        changes = [
            InputChange(path, show_value(a.get(path, _MISSING)), show_value(b.get(path, _MISSING)))
            for path in sorted(set(a) | set(b))
            if not _same(a.get(path, _MISSING), b.get(path, _MISSING))
        ]
        provider_moved = before.get("provider") != after.get("provider")
        if provider_moved:
            changes.insert(
                0,
                InputChange(
                    PROVIDER,
                    _provider_label(before.get("provider")),
                    _provider_label(after.get("provider")),
                ),
            )
        if changes:
            diff.changed.append(ResourceChange(urn, after["type"], after["name"], changes))
            rule = rules.get(after["type"])
            forced = _forced_by(rule, before["inputs"], after["inputs"]) if rule else []
            if forced:
                replace(before, "force-new", f"changes {', '.join(forced)}, which forces a new one")
            elif provider_moved and before.get("custom", True):
                differs = _provider_config_change(before, after, old, new)
                if differs is not None:
                    replace(before, "provider", differs)
        else:
            diff.unchanged += 1
            if sorted(before.get("dependencies", [])) != sorted(after.get("dependencies", [])):
                diff.dependencies_only += 1

    _spread(old, new, rules, replaced, replace)
    diff.replacements = sorted(
        replaced.values(), key=lambda r: (not r.precious, r.cause != "force-new", r.urn)
    )
    return diff


def _spread(
    old: Mapping[str, Mapping[str, Any]],
    new: Mapping[str, Mapping[str, Any]],
    rules: Mapping[str, TypeRule],
    replaced: dict[str, Replacement],
    replace: Any,
) -> None:
    """Replace, until nothing more changes, every kept resource whose force-new input takes an
    id or ARN of a replaced resource."""
    while True:
        markers = {m: urn for urn in replaced for m in computed_markers(old[urn])}
        arns = {(_short_type(old[u]["type"]), str(old[u]["name"])): u for u in replaced}
        grew = False
        for urn in sorted(set(old) & set(new)):
            if urn in replaced or new[urn]["type"] not in rules:
                continue
            rule = rules[new[urn]["type"]]
            for entry in rule.force_new:
                if entry.when != "changed":
                    continue
                source = _refers_to(_at_path(new[urn]["inputs"], entry.input), markers, arns)
                if source and source != urn:
                    name = old[source]["name"]
                    replace(
                        new[urn],
                        "cascade",
                        f"{entry.input} takes an output of {name}, which is replaced: unknown "
                        "until the new one exists, so this is replaced too",
                    )
                    grew = True
                    break
        if not grew:
            return


# ---------------------------------------------------------------------------
# Cost
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CostLine:
    measure: str
    base: float | None
    head: float | None

    @property
    def delta(self) -> float | None:
        if self.base is None and self.head is None:
            return None
        return round((self.head or 0.0) - (self.base or 0.0), 2)

    def to_dict(self) -> dict[str, Any]:
        return {"measure": self.measure, "base": self.base, "head": self.head, "delta": self.delta}


_COST_MEASURES = (
    ("usd_per_hour.min", "$/h at min size"),
    ("usd_per_hour.desired", "$/h at desired size"),
    ("usd_per_hour.max", "$/h at max size"),
    ("usd_per_month_with_storage", "$/month at desired size, with storage"),
)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _cost_of(plan: Mapping[str, Any] | None) -> Mapping[str, Any]:
    outputs = plan.get("outputs") if plan else None
    cost = outputs.get("cost") if isinstance(outputs, Mapping) else None
    return cost if isinstance(cost, Mapping) else {}


def _component_costs(cost: Mapping[str, Any]) -> dict[str, float | None]:
    components = cost.get("components")
    if not isinstance(components, Mapping):
        return {}
    out = {}
    for name, value in components.items():
        monthly = value.get("usd_per_month") if isinstance(value, Mapping) else value
        out[str(name)] = _number(monthly)
    return out


def cost_delta(
    base: Mapping[str, Any] | None, head: Mapping[str, Any] | None
) -> dict[str, list[CostLine]]:
    """Cost base vs head from the plans' `cost` output: totals, GPU pools, components.

    A measure either plan lacks is None there (an older revision without the
    output, or without `cost.components`); a stack that does not exist on one
    side costs nothing there.
    """
    a, b = _cost_of(base), _cost_of(head)
    missing_a, missing_b = base is None, head is None

    def side(cost: Mapping[str, Any], missing: bool, path: str) -> float | None:
        return 0.0 if missing else _number(_at_path(cost, path))

    totals = [
        CostLine(label, side(a, missing_a, p), side(b, missing_b, p)) for p, label in _COST_MEASURES
    ]
    pools: list[CostLine] = []
    pool_names = sorted(set(a.get("node_pools") or {}) | set(b.get("node_pools") or {}))
    for pool in pool_names:
        for size in ("desired", "max"):
            path = f"node_pools.{pool}.usd_per_hour.{size}"
            line = CostLine(
                f"pool {pool}, $/h at {size}",
                _number(_at_path(a, path)),
                _number(_at_path(b, path)),
            )
            if line.base != line.head:
                pools.append(line)
    comps_a, comps_b = _component_costs(a), _component_costs(b)
    components = [
        CostLine(f"component {name}, $/month", comps_a.get(name), comps_b.get(name))
        for name in sorted(set(comps_a) | set(comps_b))
        if comps_a.get(name) != comps_b.get(name)
    ]
    return {"totals": totals, "node_pools": pools, "components": components}


def has_component_costs(plan: Mapping[str, Any] | None) -> bool:
    """Whether a plan's cost output has the per-component breakdown (`cost.components`)."""
    return bool(_component_costs(_cost_of(plan)))


# ---------------------------------------------------------------------------
# Policy
# ---------------------------------------------------------------------------


def violation_delta(base: Sequence[Any], head: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """(new, fixed): violations in head and not in base, and the reverse.

    Two violations are the same when their rule matches and so does their
    resource, by URN or by name (a name survives a change of parent type; a
    stack-wide violation is `(stack)` on both sides whatever its message).
    """

    def keys(v: Any) -> set[tuple[str, str]]:
        return {(v.rule, f"urn:{v.urn}"), (v.rule, f"name:{v.resource}")}

    base_keys = set().union(*(keys(v) for v in base)) if base else set()
    head_keys = set().union(*(keys(v) for v in head)) if head else set()
    new = [v for v in head if not keys(v) & base_keys]
    fixed = [v for v in base if not keys(v) & head_keys]
    return new, fixed


# ---------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------


@dataclass
class DiffReport:
    stack: str
    base: str
    """The base revision as shown: `main (1a2b3c4)`."""
    head: str
    """`the working tree`, or a revision as shown."""
    diff: PlanDiff
    cost: dict[str, list[CostLine]]
    new_violations: list[Any] = field(default_factory=list)
    fixed_violations: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    component_costs: bool = False
    """Whether either plan's cost output has the per-component breakdown."""

    @property
    def new_mandatory(self) -> list[Any]:
        return [v for v in self.new_violations if v.level == "mandatory"]

    def summary(self) -> str:
        d = self.diff
        parts = [
            f"{len(d.added)} to add",
            f"{len(d.changed)} to change",
            f"{len(d.deleted)} to delete",
        ]
        if d.renamed:
            parts.append(f"{len(d.renamed)} renamed (delete + create)")
        parts.append(f"{d.unchanged} unchanged")
        precious = len(d.precious_replacements)
        other = len(d.replacements) - precious
        parts.append(f"{precious} precious and {other} other replacements")
        desired = next((c for c in self.cost["totals"] if "desired" in c.measure), None)
        if desired is not None and desired.delta is not None:
            parts.append(f"cost {_money_delta(desired.delta)}/h at desired size")
        parts.append(
            f"{len(self.new_violations)} new policy violations "
            f"({len(self.new_mandatory)} mandatory), {len(self.fixed_violations)} fixed"
        )
        return "; ".join(parts)


def exit_code(report: DiffReport, fail_on_replace: bool) -> int:
    """1 for a new mandatory violation, or a precious replacement with --fail-on-replace; else 0."""
    if report.new_mandatory:
        return 1
    if fail_on_replace and report.diff.precious_replacements:
        return 1
    return 0


def report_to_json(report: DiffReport) -> dict[str, Any]:
    return {
        "stack": report.stack,
        "base": report.base,
        "head": report.head,
        "summary": report.summary(),
        **report.diff.to_dict(),
        "cost": {k: [c.to_dict() for c in v] for k, v in report.cost.items()},
        "new_violations": [v.to_dict() for v in report.new_violations],
        "fixed_violations": [v.to_dict() for v in report.fixed_violations],
        "notes": report.notes,
    }


def _component_note(report: DiffReport) -> str:
    if not report.component_costs:
        return "Cost per component: not in these plans' cost output"
    if not report.cost["components"]:
        return "No component's monthly cost changes"
    return "Components whose monthly cost changes are listed"


def _money(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.2f}"


def _money_delta(value: float | None) -> str:
    if value is None:
        return "n/a"
    sign = "+" if value > 0 else "-" if value < 0 else "±"
    return f"{sign}${abs(value):,.2f}"


# ---------------------------------------------------------------------------
# Terminal
# ---------------------------------------------------------------------------


def render_terminal(report: DiffReport, console: Console) -> None:
    """Rich output: title, a red banner for precious replacements, summary, then the tables."""
    d = report.diff
    console.print(
        Text.assemble(
            ("llmp diff ", "bold"),
            (report.stack, "bold cyan"),
            f": {report.base} → {report.head}",
        )
    )
    for note in report.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    precious = d.precious_replacements
    if precious:
        lines = [
            Text.assemble((f"{r.name} ", "bold"), (f"({r.type})", "dim"), f": {r.reason}")
            for r in precious
        ]
        console.print(
            Panel(
                Group(*lines),
                title=f"PRECIOUS RESOURCES REPLACED: {len(precious)}",
                border_style="bold red",
                style="red",
            )
        )
    else:
        console.print(Text("no precious resource is replaced", style="green"))
    console.print(Text(report.summary()))

    if d.changed:
        table = Table(title="changed", title_justify="left")
        for column in ("resource", "input", "old", "new"):
            table.add_column(column, overflow="fold")
        for rc in d.changed:
            for i, change in enumerate(rc.changes):
                label = Text(f"{rc.name}\n{rc.type}") if i == 0 else Text("")
                table.add_row(label, Text(change.path), Text(change.old), Text(change.new))
        console.print(table)
    for title, refs in (("added", d.added), ("deleted", d.deleted)):
        if refs:
            table = Table(title=title, title_justify="left")
            table.add_column("resource", overflow="fold")
            table.add_column("type", overflow="fold")
            for ref in refs:
                table.add_row(Text(ref.name), Text(ref.type))
            console.print(table)
    others = [r for r in d.replacements if not r.precious]
    if d.renamed or others:
        table = Table(title="replaced (not precious) and renamed", title_justify="left")
        for column in ("resource", "type", "why"):
            table.add_column(column, overflow="fold")
        for r in others:
            table.add_row(Text(r.name), Text(r.type), Text(r.reason))
        console.print(table)

    table = Table(title="cost", title_justify="left")
    for column in ("measure", "base", "head", "delta"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    for line in [*report.cost["totals"], *report.cost["node_pools"], *report.cost["components"]]:
        table.add_row(line.measure, _money(line.base), _money(line.head), _money_delta(line.delta))
    console.print(table)
    console.print(Text(_component_note(report), style="dim"))

    for title, violations in (
        ("new policy violations", report.new_violations),
        ("fixed policy violations", report.fixed_violations),
    ):
        if not violations:
            continue
        table = Table(title=title, title_justify="left")
        for column in ("rule", "resource", "level", "message"):
            table.add_column(column, overflow="fold")
        for v in violations:
            style = "bold red" if v.level == "mandatory" and title.startswith("new") else ""
            table.add_row(
                Text(v.rule), Text(v.resource), Text(v.level, style=style), Text(v.message)
            )
        console.print(table)


# ---------------------------------------------------------------------------
# Markdown (a PR comment)
# ---------------------------------------------------------------------------


def _cell(text: str) -> str:
    """A table cell: a code span, pipes escaped (GFM tables split on them even inside code)."""
    text = text.replace("\n", " ").replace("|", "\\|")
    if "`" in text:
        return text.replace("<", "&lt;").replace(">", "&gt;")
    return f"`{text}`" if text else ""


def _plain(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _details(summary: str, body: list[str]) -> str:
    return "\n".join(["<details>", f"<summary>{summary}</summary>", "", *body, "", "</details>"])


_MAX_ROWS_PER_RESOURCE = 40


def render_markdown(report: DiffReport, limit: int = GITHUB_COMMENT_LIMIT) -> str:
    """A PR comment: heading, summary, replacements, cost, policy; details folded.

    Sections are whole blocks (each <details> opened and closed in one), added
    in order while they fit in `limit` characters; what does not fit is named
    in a closing note, so the comment is never cut inside a block.
    """
    d = report.diff
    head: list[str] = [
        f"### `llmp diff` {report.stack}: {report.base} → {report.head}",
        "",
        f"**{report.summary()}**",
    ]
    for note in report.notes:
        head += ["", f"> {_plain(note)}"]
    precious = d.precious_replacements
    if precious:
        head += [
            "",
            f"> [!CAUTION]\n> ⚠️ **This change replaces {len(precious)} precious resource(s).** "
            "Pulumi will delete and re-create them:",
        ]
        for r in precious:
            why = f" *{_plain(r.why)}*" if r.why else ""
            head.append(f"> - `{r.name}` ({r.type}): {_plain(r.reason)}.{why}")
    else:
        head += [
            "",
            "✅ No precious resource (cluster, node group, file system, bucket, key) is replaced.",
        ]

    cost_rows = ["| measure | base | head | delta |", "|---|---:|---:|---:|"]
    for line in [*report.cost["totals"], *report.cost["node_pools"], *report.cost["components"]]:
        cost_rows.append(
            f"| {line.measure} | {_money(line.base)} | {_money(line.head)} | "
            f"{_money_delta(line.delta)} |"
        )
    cost_block = ["", "#### Cost", "", *cost_rows]
    cost_block += ["", f"_{_component_note(report)}._"]

    policy_block = ["", "#### Policy"]
    if report.new_violations:
        policy_block += [
            "",
            "New violations:",
            "",
            "| rule | resource | level | message |",
            "|---|---|---|---|",
        ]
        for v in report.new_violations:
            level = f"**{v.level}**" if v.level == "mandatory" else v.level
            policy_block.append(
                f"| `{v.rule}` | {_cell(v.resource)} | {level} | {_plain(v.message)} |"
            )
    else:
        policy_block += ["", "No new policy violations."]
    if report.fixed_violations:
        policy_block += [
            "",
            "Fixed: "
            + ", ".join(f"`{v.rule}` on {_cell(v.resource)}" for v in report.fixed_violations),
        ]

    essentials = "\n".join([*head, *cost_block, *policy_block])

    blocks: list[tuple[str, str]] = []  # (what it lists, the block)
    others = [r for r in d.replacements if not r.precious]
    if others:
        rows = ["| resource | type | why |", "|---|---|---|"]
        rows += [f"| {_cell(r.name)} | `{r.type}` | {_plain(r.reason)} |" for r in others]
        blocks.append(
            ("other replacements", _details(f"Replaced, not precious ({len(others)})", rows))
        )
    if d.renamed:
        rows = ["| old | new | type |", "|---|---|---|"]
        rows += [
            f"| {_cell(r.old.name)} | {_cell(r.new.name)} | `{r.new.type}` |" for r in d.renamed
        ]
        blocks.append(("renames", _details(f"Renamed: delete + create ({len(d.renamed)})", rows)))
    for rc in d.changed:
        rows = ["| input | old | new |", "|---|---|---|"]
        shown = rc.changes[:_MAX_ROWS_PER_RESOURCE]
        rows += [f"| {_cell(c.path)} | {_cell(c.old)} | {_cell(c.new)} |" for c in shown]
        if len(rc.changes) > len(shown):
            rows += [
                "",
                f"_…and {len(rc.changes) - len(shown)} more inputs (see `llmp diff --json`)._",
            ]
        blocks.append(
            (
                f"change of {rc.name}",
                _details(
                    f"Changed: <code>{rc.name}</code> ({rc.type}), {len(rc.changes)} inputs", rows
                ),
            )
        )
    for title, refs in (("Added", d.added), ("Deleted", d.deleted)):
        if refs:
            rows = ["| resource | type |", "|---|---|"]
            rows += [f"| {_cell(r.name)} | `{r.type}` |" for r in refs]
            blocks.append((title.lower(), _details(f"{title} ({len(refs)})", rows)))

    reserve = 400  # room for the truncation note
    parts = [essentials]
    size = len(essentials)
    left_out: list[str] = []
    if d.changed or d.added or d.deleted or others or d.renamed:
        parts.append("#### Resources")
        size += len(parts[-1]) + 2
    for what, block in blocks:
        if left_out or size + len(block) + 2 > limit - reserve:
            left_out.append(what)
            continue
        parts.append(block)
        size += len(block) + 2
    if left_out:
        parts.append(
            f"_Truncated to fit a GitHub comment ({limit} characters): {len(left_out)} more "
            "sections are not shown; run `llmp diff --json` for everything._"
        )
    text = "\n\n".join(parts) + "\n"
    if len(text) > limit:  # essentials alone too long: cut at a line, close nothing open
        cut = text[: limit - reserve].rsplit("\n", 1)[0]
        text = cut + "\n\n_Truncated to fit a GitHub comment; run `llmp diff --json`._\n"
    return text


# ---------------------------------------------------------------------------
# Putting it together
# ---------------------------------------------------------------------------


def _violations(
    plan: Mapping[str, Any] | None, stack: str, stack_text: str | None, fallback: str | None
) -> tuple[list[Any], str | None]:
    """The policy pack's violations of `plan`, configured by the stack file it came from.

    The pack and its rules are the running code's (head's), so a violation is
    new because the infrastructure changed, not because a rule was added. The
    stack file of that revision sets the GPU budget and the FSx pool; when the
    running code cannot read it (the schema changed), `fallback`'s is used and
    a note says so.
    """
    import tempfile

    from llmp.policy import evaluate, stack_policy_config
    from spec.errors import ConfigError

    if plan is None or stack_text is None:
        return [], None
    note = None
    with tempfile.TemporaryDirectory(prefix="llmp-stack-") as tmp:
        path = Path(tmp) / f"Pulumi.{stack}.yaml"
        path.write_text(stack_text)
        try:
            config = stack_policy_config(stack, path)
        except ConfigError as exc:
            if fallback is None:
                raise
            path.write_text(fallback)
            config = stack_policy_config(stack, path)
            note = f"the base stack file does not validate with this code ({exc}); its policy "
            note += "config is taken from the head stack file"
    return evaluate(plan, config, stack_config=False), note


def build_report(stack: str, base_ref: str, repo: Path, head_ref: str | None = None) -> DiffReport:
    """Synthesize `stack` at `base_ref` and at `head_ref` (None: the working tree) and compare.

    Raises RevisionError (one line, with its exit code) when a side cannot be
    synthesized, or when the stack exists on neither side.
    """
    from llmp import revision as rev

    rev.check_stack_name(stack)
    base_revision = rev.resolve(base_ref, repo)
    head_revision = rev.resolve(head_ref, repo) if head_ref is not None else None
    head_label = head_revision.label if head_revision else rev.WORKING_TREE
    notes: list[str] = []

    base_text = rev.stack_file_at(base_revision, stack, repo)
    if head_revision is not None:
        head_text = rev.stack_file_at(head_revision, stack, repo)
    else:
        path = repo / rev.stack_relpath(stack)
        head_text = path.read_text() if path.is_file() else None
    if base_text is None and head_text is None:
        raise rev.RevisionError(
            f"stack {stack} exists neither at {base_revision.label} nor at {head_label}: "
            f"no {rev.stack_relpath(stack)}"
        )

    base_plan: dict[str, Any] | None = None
    head_plan: dict[str, Any] | None = None
    if base_text is None:
        notes.append(
            f"stack {stack} does not exist at {base_revision.label}: it is added by this change"
        )
    else:
        base_plan = rev.plan_of_revision(base_revision, stack, repo)
    if head_text is None:
        notes.append(f"stack {stack} does not exist at {head_label}: it is removed by this change")
    elif head_revision is not None:
        head_plan = rev.plan_of_revision(head_revision, stack, repo)
    else:
        head_plan = rev.plan_of_worktree(stack, repo)

    empty: dict[str, Any] = {"resources": [], "outputs": {}}
    plan_diff = compare_plans(base_plan or empty, head_plan or empty)
    base_violations, note = _violations(base_plan, stack, base_text, head_text)
    if note:
        notes.append(note)
    head_violations, _ = _violations(head_plan, stack, head_text, None)
    new, fixed = violation_delta(base_violations, head_violations)
    return DiffReport(
        stack=stack,
        base=base_revision.label,
        head=head_label,
        diff=plan_diff,
        cost=cost_delta(base_plan, head_plan),
        new_violations=new,
        fixed_violations=fixed,
        notes=notes,
        component_costs=has_component_costs(base_plan) or has_component_costs(head_plan),
    )
