"""Comparing two plans: the one comparison `llmp diff` and `llmp dr plan` share.

Resources are matched by URN, the identity Pulumi uses (dr translates the
source's URNs into the recovery region's first). For each resource in both,
its inputs are flattened into leaves (`input_changes`) and compared as
inputs, not as Python values (30 and 30.0 are the same input, `true` and 1
are not). `compare_plans` adds what a PR preview must say: renames, and
replacements: a change of an input the provider cannot update in place (the
catalog's `replacement` table: Terraform ForceNew as pulumi-aws bridges it; a
Terraform set reordered is no change), a move to a provider configured
differently, a delete or a rename; and, transitively, a resource whose
force-new input takes an id or ARN of a replaced one (in a real preview that
value is unknown until the new resource exists, which the provider treats as
a replacement).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmp.plan import SECRET, Plan, Resource

ABSENT = "(absent)"
_VALUE_WIDTH = 80

MISSING: Any = object()
"""Where a path has no value on one side."""


def _is_scalar_list(value: Any) -> bool:
    return isinstance(value, list) and all(not isinstance(v, dict | list) for v in value)


def leaves(value: Any, prefix: str = "", *, documents: bool = False) -> dict[str, Any]:
    """Input leaves by dotted path; lists of scalars are one leaf, lists of objects are indexed.

    `documents`: a string holding a JSON object or list (an IAM policy) is flattened too,
    under `<json>`, so that one statement's change is one leaf, not the whole document.
    """
    if documents and isinstance(value, str) and value[:1] in "{[":
        try:
            decoded = json.loads(value)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict | list):
            return leaves(decoded, prefix + "<json>", documents=True)
    if isinstance(value, dict):
        if not value and prefix:
            return {prefix: value}
        out: dict[str, Any] = {}
        for key in value:
            out.update(
                leaves(value[key], f"{prefix}.{key}" if prefix else str(key), documents=documents)
            )
        return out
    if isinstance(value, list) and not _is_scalar_list(value):
        out = {}
        for i, item in enumerate(value):
            out.update(leaves(item, f"{prefix}[{i}]", documents=documents))
        return out
    return {prefix: value}


def show_value(value: Any, width: int = _VALUE_WIDTH) -> str:
    """A value as the report shows it: JSON, secrets as [secret], long ones cut with an ellipsis."""
    if value is MISSING:
        return ABSENT
    if value == SECRET:
        return SECRET
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def at_path(inputs: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path through objects; MISSING where any step is absent."""
    node: Any = inputs
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def _empty(value: Any) -> bool:
    return value is MISSING or value is None or value == [] or value == {}


def same(a: Any, b: Any) -> bool:
    """Equal as inputs: 30 and 30.0 are (the mocks return every number as a float), but
    `true` and 1 are not, as Python's `==` would have it."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
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
        before, after = at_path(old, entry.input), at_path(new, entry.input)
        if same(before, after) or (before == SECRET and after == SECRET):
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


def computed_markers(resource: Resource) -> set[str]:
    """Values by which other inputs refer to this resource's computed outputs in a plan.

    They follow `llmp.synth._PlanMocks`: the id is `<name>-id` and an unnamed
    resource's physical name `synth.autoname(name)`; its ARN,
    `arn:aws:mock:<region>:<account>:<type>/<name>`, is matched by `_MOCK_ARN`
    (the region differs per provider). A real preview knows none of these
    before the resource exists, which is what makes a replacement spread.
    """
    from llmp.synth import autoname

    return {f"{resource.name}-id", autoname(resource.name)}


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


def _ref(r: Resource) -> ResourceRef:
    return ResourceRef(r.urn, r.type, r.name)


def _leaf_likeness(a: Any, b: Any) -> float:
    if a == b:
        return 1.0
    if isinstance(a, str) and isinstance(b, str):
        # A renamed resource's inputs carry its new name (bucket names, policy documents).
        return difflib.SequenceMatcher(None, a[:2000], b[:2000], autojunk=False).ratio()
    return 0.0


def _similarity(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """How alike two resources' inputs are, 0 to 1: the mean likeness of their leaves."""
    la, lb = leaves(a), leaves(b)
    paths = set(la) | set(lb)
    if not paths:
        return 1.0
    return sum(_leaf_likeness(la.get(p, MISSING), lb.get(p, MISSING)) for p in paths) / len(paths)


def _pair_renames(
    deleted: list[Resource], added: list[Resource]
) -> list[tuple[Resource, Resource]]:
    """Pairs (old, new) of the same type: the only one of each, or else those of the same name
    (a parent change), then the most alike first while their inputs are at least half alike."""
    pairs = []
    types = {r.type for r in deleted} & {r.type for r in added}
    for type_ in sorted(types):
        olds = [r for r in deleted if r.type == type_]
        news = [r for r in added if r.type == type_]
        if len(olds) == 1 and len(news) == 1:
            pairs.append((olds[0], news[0]))
            continue
        # The same name is the same resource under another parent (the URN holds the
        # parent's type): paired first, however much its inputs change.
        scored = sorted(
            (
                (o.name == n.name, _similarity(o.inputs, n.inputs), i, j)
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
    before: Resource,
    after: Resource,
    old: Mapping[str, Resource],
    new: Mapping[str, Resource],
) -> str | None:
    """Why moving a resource to another provider replaces it, or None when it does not.

    The engine replaces a resource whose provider reference changes unless the new
    provider's DiffConfig, given the old provider's configuration, asks for no replacement
    (pulumi/pulumi pkg/resource/deploy/step_generator.go, providerChanged). Offline that
    is known only when both configurations are in the plans and are the same; any other
    move is reported as a replacement (a preview that errs loud).
    """
    was, now = before.provider, after.provider
    old_provider, new_provider = old.get(str(was)), new.get(str(now))
    move = f"its provider changes from {_provider_label(was)} to {_provider_label(now)}"
    if old_provider is None or new_provider is None:
        return f"{move}, whose configuration this plan does not show: Pulumi replaces it"
    if old_provider.type != new_provider.type:
        return f"{move}, another package: Pulumi replaces it"
    a, b = leaves(old_provider.inputs), leaves(new_provider.inputs)
    keys = [k for k in sorted(set(a) | set(b)) if not same(a.get(k, MISSING), b.get(k, MISSING))]
    if not keys:
        return None
    return f"{move}, configured differently ({', '.join(keys)}): Pulumi replaces it"


def input_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[InputChange]:
    """Every input leaf that differs between two resources' inputs, by path."""
    a, b = leaves(before), leaves(after)
    return [
        InputChange(path, show_value(a.get(path, MISSING)), show_value(b.get(path, MISSING)))
        for path in sorted(set(a) | set(b))
        if not same(a.get(path, MISSING), b.get(path, MISSING))
    ]


def compare_plans(
    base: Plan | None,
    head: Plan | None,
    rules: Mapping[str, TypeRule] | None = None,
) -> PlanDiff:
    """Compare two plans by URN (None: a stack that does not exist on that side);
    `rules` default to the catalog's."""
    rules = replacement_rules() if rules is None else rules
    old = dict(base.by_urn) if base is not None else {}
    new = dict(head.by_urn) if head is not None else {}
    diff = PlanDiff()

    gone = [old[u] for u in old if u not in new]
    came = [new[u] for u in new if u not in old]
    renames = _pair_renames(gone, came)
    renamed_old = {o.urn for o, _ in renames}
    renamed_new = {n.urn for _, n in renames}
    diff.renamed = [Rename(_ref(o), _ref(n)) for o, n in renames]
    diff.deleted = [_ref(r) for r in gone if r.urn not in renamed_old]
    diff.added = [_ref(r) for r in came if r.urn not in renamed_new]

    replaced: dict[str, Replacement] = {}  # by the URN of the resource that goes away

    def replace(r: Resource, cause: str, reason: str) -> None:
        rule = rules.get(r.type)
        if r.protect:
            reason += "; it is protected: `pulumi up` refuses to delete it until protect is lifted"
        elif r.retain_on_delete:
            reason += (
                "; retain_on_delete is set: the old one stays in the account, outside the stack"
            )
        replaced[r.urn] = Replacement(
            r.urn,
            r.type,
            r.name,
            bool(rule and rule.precious),
            cause,
            reason,
            rule.why if rule else None,
        )

    for o, n in renames:
        if o.custom:  # a component holds nothing; its children are listed
            moved = "its parent changes" if o.name == n.name else f"renamed to {n.name}"
            replace(
                o,
                "rename",
                f"{moved}, and its URN with it: Pulumi deletes it and creates the new one unless "
                "that has aliases=[old URN]",
            )
    for r in gone:
        if r.urn not in renamed_old and r.custom:
            replace(r, "delete", "deleted by this change")

    for urn in sorted(set(old) & set(new)):
        before, after = old[urn], new[urn]
        changes = input_changes(before.inputs, after.inputs)
        provider_moved = before.provider != after.provider
        if provider_moved:
            changes.insert(
                0,
                InputChange(
                    PROVIDER, _provider_label(before.provider), _provider_label(after.provider)
                ),
            )
        if changes:
            diff.changed.append(ResourceChange(urn, after.type, after.name, changes))
            rule = rules.get(after.type)
            forced = _forced_by(rule, before.inputs, after.inputs) if rule else []
            if forced:
                replace(before, "force-new", f"changes {', '.join(forced)}, which forces a new one")
            elif provider_moved and before.custom:
                differs = _provider_config_change(before, after, old, new)
                if differs is not None:
                    replace(before, "provider", differs)
        else:
            diff.unchanged += 1
            if sorted(before.dependencies) != sorted(after.dependencies):
                diff.dependencies_only += 1

    _spread(old, new, rules, replaced, replace)
    diff.replacements = sorted(
        replaced.values(), key=lambda r: (not r.precious, r.cause != "force-new", r.urn)
    )
    return diff


def _spread(
    old: Mapping[str, Resource],
    new: Mapping[str, Resource],
    rules: Mapping[str, TypeRule],
    replaced: dict[str, Replacement],
    replace: Any,
) -> None:
    """Replace, until nothing more changes, every kept resource whose force-new input takes an
    id or ARN of a replaced resource."""
    while True:
        markers = {m: urn for urn in replaced for m in computed_markers(old[urn])}
        arns = {(_short_type(old[u].type), old[u].name): u for u in replaced}
        grew = False
        for urn in sorted(set(old) & set(new)):
            if urn in replaced or new[urn].type not in rules:
                continue
            rule = rules[new[urn].type]
            for entry in rule.force_new:
                if entry.when != "changed":
                    continue
                source = _refers_to(at_path(new[urn].inputs, entry.input), markers, arns)
                if source and source != urn:
                    name = old[source].name
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
