"""Comparing two plans: the one comparison `llmp diff` and `llmp dr plan` share.

Resources are matched by URN, the identity Pulumi uses (dr translates the
source's URNs into the recovery region's first). For each resource in both,
its inputs are flattened into leaves (`input_changes`) and compared as
inputs, not as Python values (30 and 30.0 are the same input, `true` and 1
are not). `compare_plans` adds what a PR preview must say:
renames, replacements and refusals. Each changed input is judged by its type's rules in
the replacement table (spec/replacement.yaml): updated in place, forcing a new resource,
or conditional (replaced or refused by the API for some changes only). A replacement
spreads (`_spread`) to what takes its outputs, which a real preview sees unknown until the
new resource exists, and to what runs on a replaced provider; a move to a provider
configured differently, a delete and a rename replace too.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmp.plan import SECRET, Plan, Resource
from spec.replacement import Conditional, TypeRule, replacement_table, skips_minor

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
# Replacement rules (spec/replacement.yaml)
# ---------------------------------------------------------------------------


def replacement_rules() -> dict[str, TypeRule]:
    """Every type's rules from the replacement table (spec/replacement.yaml), bases merged."""
    return replacement_table().rules


@dataclass(frozen=True)
class _Verdict:
    """What one resource's input changes do, by the rules of its type."""

    forced: list[str] = field(default_factory=list)
    """The inputs (with the condition that held) that replace the resource."""
    refused: list[tuple[str, str]] = field(default_factory=list)
    """(input, reason): changes the API rejects, so `pulumi up` fails there."""
    unclassified: list[str] = field(default_factory=list)
    """Changed input paths no rule classifies."""


def _holds(
    condition: str, cond: Conditional, before: Any, after: Any, origins: frozenset[str] | None
) -> bool:
    """Whether `condition` of `cond` holds for a change from `before` to `after`;
    `origins`: for a value from a replaced resource, the types its replacement came
    through (None: the value is known)."""
    if origins is not None:  # the new value is unknown until a replaced resource exists
        if condition == "cascaded":
            return not cond.via or bool(origins & set(cond.via))
        return condition == "changed"
    if condition == "changed":
        return True
    if condition == "removed":
        return _empty(after) and not _empty(before)
    if condition == "added":
        return _empty(before) and not _empty(after)
    if condition == "skips_minor":
        return skips_minor(before, after)
    if condition == "to":
        return after in cond.values and before not in cond.values
    b, a = cond.rank(before), cond.rank(after)
    if b is None or a is None:
        return False
    return a < b if condition == "decreased" else a > b if condition == "increased" else False


def _judge(
    rule: TypeRule,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    paths: Iterable[str],
    origins: frozenset[str] | None = None,
) -> _Verdict:
    """The verdict of `rule` on the changed leaf `paths` between inputs `old` and `new`.

    A conditional input is judged once, on its whole value; a force-new input that is
    a Terraform set (`unordered`) holding the same items in another order is no change.
    With `origins`, the new values are unknown: they come from a replaced resource, whose
    replacement came through resources of these types.
    """
    verdict = _Verdict()
    judged: set[str] = set()
    for path in paths:
        conditions = rule.conditions(path)
        if conditions:
            for cond in conditions:
                if cond.input in judged:
                    continue
                judged.add(cond.input)
                before, after = at_path(old, cond.input), at_path(new, cond.input)
                if origins is None and (same(before, after) or before == after == SECRET):
                    continue
                held = next((c for c in cond.when if _holds(c, cond, before, after, origins)), None)
                if held is None:
                    continue
                label = cond.input if held in ("changed", "cascaded") else f"{cond.input} ({held})"
                if cond.then == "refuse":
                    verdict.refused.append((label, cond.reason))
                else:
                    verdict.forced.append(label)
            continue
        entry = rule.replacing(path)
        if entry is not None:
            if entry.input in judged:
                continue
            judged.add(entry.input)
            before, after = at_path(old, entry.input), at_path(new, entry.input)
            if entry.unordered and origins is None and _same_items(before, after):
                continue
            verdict.forced.append(entry.input)
        elif rule.verdict(path) is None:
            verdict.unclassified.append(path)
    return verdict


def computed_markers(resource: Resource) -> set[str]:
    """Values by which other inputs refer to this resource's computed outputs in a plan.

    They follow `llmp.synth._PlanMocks`: the id is `<name>-id`, an unnamed resource's
    physical name `synth.autoname(name)`, and a few types' own outputs (a cluster's
    endpoint and security group, a key's id, a file system's mount name, a node group's
    Auto Scaling group); its ARN, `arn:aws:mock:<region>:<account>:<type>/<name>`, is
    matched by `_MOCK_ARN` (the region differs per provider). A real preview knows none
    of these before the resource exists, which is what makes a replacement spread.
    """
    from llmp.synth import autoname

    name = resource.name
    markers = {f"{name}-id", autoname(name)}
    extra = {
        "aws:eks/cluster:Cluster": (f"https://{name}.mock.", f"sg-{name}-cluster"),
        "aws:kms/key:Key": (f"{name}-key-id",),
        "aws:fsx/lustreFileSystem:LustreFileSystem": (f"{name}-mount", f"{name}-id.fsx."),
        "aws:eks/nodeGroup:NodeGroup": (f"eks-{name}-asg",),
        "aws:ec2/eip:Eip": (f"eipalloc-{name}",),
    }
    return markers | set(extra.get(resource.type, ()))


_MOCK_ARN = re.compile(r"arn:aws:mock:[^:]*:\d+:([^/]+)/([\w.-]+)")


def _refers_to(
    value: Any, markers: Mapping[str, set[str]], arns: Mapping[tuple[str, str], str]
) -> set[str]:
    """The URNs of replaced resources that `value` (an input) may take an output of.

    A marker counts when it is the whole value, or a part of it cut at a boundary (a
    kubeconfig holds a cluster's endpoint; a volume attribute, a file system's DNS name).
    Resources of two types may share a name, and so a marker: `_hits` narrows by the
    engine's dependency edges.
    """
    found: set[str] = set()
    for text in _strings_in(value):
        found |= markers.get(text, set())
        for marker, urns in markers.items():
            if marker.endswith((".", "/")) and marker in text:
                found |= urns
        for match in _MOCK_ARN.finditer(text):
            urn = arns.get((match.group(1), match.group(2)))
            if urn:
                found.add(urn)
    return found


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
    order: str | None = None
    """For a re-created resource: `delete-first` (the old one goes before the new one
    exists: its name is fixed, or delete_before_replace is set) or `create-first` (both
    exist while the new one comes up); None for a resource only deleted."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "urn": self.urn,
            "type": self.type,
            "name": self.name,
            "precious": self.precious,
            "cause": self.cause,
            "reason": self.reason,
            "why_it_matters": self.why,
            "order": self.order,
        }


@dataclass(frozen=True)
class Refusal:
    """A change the provider's API rejects: `pulumi up` fails at this resource."""

    urn: str
    type: str
    name: str
    input: str
    reason: str
    precious: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "urn": self.urn,
            "type": self.type,
            "name": self.name,
            "input": self.input,
            "reason": self.reason,
            "precious": self.precious,
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
    refused: list[Refusal] = field(default_factory=list)
    updated_by_cascade: list[ResourceRef] = field(default_factory=list)
    """Resources with no input change of their own that take an output of a replaced
    resource in an input updated in place: a real preview updates them too."""
    unclassified: list[tuple[str, str]] = field(default_factory=list)
    """(type, input path) changed here that the replacement table does not classify."""

    @property
    def precious_replacements(self) -> list[Replacement]:
        return [r for r in self.replacements if r.precious]

    @property
    def recreated(self) -> list[Replacement]:
        """Replacements that create a new resource (not a delete or a rename)."""
        return [r for r in self.replacements if r.cause in ("force-new", "provider", "cascade")]

    @property
    def untouched(self) -> int:
        """Resources in both plans that neither change nor are replaced or updated by a
        replacement (`unchanged` less those a replacement reaches)."""
        changed = {c.urn for c in self.changed}
        reached = {r.urn for r in self.replacements if r.cause == "cascade"}
        reached |= {r.urn for r in self.updated_by_cascade}
        return self.unchanged - len(reached - changed)

    @property
    def updated_in_place(self) -> int:
        """Resources updated, not replaced: changed inputs, or a replaced one's outputs."""
        replaced = {r.urn for r in self.replacements}
        own = sum(1 for c in self.changed if c.urn not in replaced)
        return own + sum(1 for r in self.updated_by_cascade if r.urn not in replaced)

    def to_dict(self) -> dict[str, Any]:
        return {
            "added": [r.to_dict() for r in self.added],
            "deleted": [r.to_dict() for r in self.deleted],
            "changed": [r.to_dict() for r in self.changed],
            "renamed": [r.to_dict() for r in self.renamed],
            "unchanged": self.unchanged,
            "dependencies_only": self.dependencies_only,
            "replacements": [r.to_dict() for r in self.replacements],
            "refused": [r.to_dict() for r in self.refused],
            "updated_by_cascade": [r.to_dict() for r in self.updated_by_cascade],
            "unclassified": [{"type": t, "input": p} for t, p in self.unclassified],
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


def _order(r: Resource, after: Resource | None, rule: TypeRule | None) -> str:
    """Whether Pulumi deletes `r` before it creates its replacement, or after.

    The engine creates first unless delete_before_replace is set or the provider asks for
    delete-first. Both providers ask when the resource's physical name is set explicitly
    and stays (pulumi-terraform-bridge nameRequiresDeleteBeforeReplace; pulumi-kubernetes
    Diff for a named object in the same namespace): two cannot share a name.
    """
    if r.delete_before_replace:
        return "delete-first"
    if rule is None or rule.name_input is None or after is None:
        return "create-first"
    before_name = at_path(r.inputs, rule.name_input)
    after_name = at_path(after.inputs, rule.name_input)
    if _empty(before_name) or not same(before_name, after_name):
        return "create-first"
    return "delete-first"


def compare_plans(
    base: Plan | None,
    head: Plan | None,
    rules: Mapping[str, TypeRule] | None = None,
) -> PlanDiff:
    """Compare two plans by URN (None: a stack that does not exist on that side);
    `rules` default to the replacement table's."""
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

    def replace(r: Resource, cause: str, reason: str, after: Resource | None = None) -> None:
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
            _order(r, after, rule) if after is not None else None,
        )

    def refuse(r: Resource, refusals: list[tuple[str, str]]) -> None:
        rule = rules.get(r.type)
        for label, reason in refusals:
            diff.refused.append(
                Refusal(r.urn, r.type, r.name, label, reason, bool(rule and rule.precious))
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

    unclassified: set[tuple[str, str]] = set()
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
        if not changes:
            diff.unchanged += 1
            if sorted(before.dependencies) != sorted(after.dependencies):
                diff.dependencies_only += 1
            continue
        diff.changed.append(ResourceChange(urn, after.type, after.name, changes))
        if not after.custom:
            continue
        rule = rules.get(after.type)
        paths = [c.path for c in changes if c.path != PROVIDER]
        if rule is None:
            unclassified.update((after.type, p) for p in paths)
            continue
        verdict = _judge(rule, before.inputs, after.inputs, paths)
        unclassified.update((after.type, p) for p in verdict.unclassified)
        refuse(after, verdict.refused)
        if verdict.forced:
            replace(
                before,
                "force-new",
                f"changes {', '.join(verdict.forced)}, which forces a new one",
                after,
            )
        elif provider_moved and before.custom:
            differs = _provider_config_change(before, after, old, new)
            if differs is not None:
                replace(before, "provider", differs, after)

    _spread(old, new, rules, replaced, replace, refuse, diff, unclassified)
    diff.unclassified = sorted(unclassified)
    diff.replacements = sorted(
        replaced.values(), key=lambda r: (not r.precious, r.cause != "force-new", r.urn)
    )
    return diff


def _hits(
    resource: Resource, markers: Mapping[str, set[str]], arns: Mapping[tuple[str, str], str]
) -> dict[str, str]:
    """Input path -> the URN of the replaced resource whose output it takes (of those
    a marker names, the one the resource depends on, as the engine records it)."""
    out = {}
    depends = set(resource.dependencies)
    for path, value in leaves(resource.inputs).items():
        found = _refers_to(value, markers, arns) - {resource.urn}
        if len(found) > 1 and found & depends:
            found &= depends
        if found:
            out[path] = min(found)
    return out


def _spread(
    old: Mapping[str, Resource],
    new: Mapping[str, Resource],
    rules: Mapping[str, TypeRule],
    replaced: dict[str, Replacement],
    replace: Any,
    refuse: Any,
    diff: PlanDiff,
    unclassified: set[tuple[str, str]],
) -> None:
    """Follow replacements, until nothing more changes, to what takes their outputs.

    A kept resource whose provider is replaced is replaced (the engine). One whose input
    takes an output of a replaced resource sees that value unknown in a real preview: an
    input that forces a new one replaces it (an input the table does not classify errs
    loud and counts as one). Once nothing more is replaced, the rest is judged with the
    types each replacement came through: a conditional input as `cascaded` (a refusal
    where the API rejects it), an input updated in place as an update.
    """
    origins: dict[str, frozenset[str]] = {}

    def lookups() -> tuple[dict[str, set[str]], dict[tuple[str, str], str]]:
        markers: dict[str, set[str]] = {}
        for urn in replaced:
            for marker in computed_markers(old[urn]):
                markers.setdefault(marker, set()).add(urn)
        arns = {(_short_type(old[u].type), old[u].name): u for u in replaced}
        return markers, arns

    kept = sorted(set(old) & set(new))
    while True:
        markers, arns = lookups()
        grew = False
        for urn in kept:
            if urn in replaced:
                continue
            after = new[urn]
            if after.provider and after.provider in replaced:
                provider = old[after.provider].name if after.provider in old else after.provider
                replace(
                    old[urn],
                    "cascade",
                    f"its provider {provider} is replaced, and everything it manages with it",
                    after,
                )
                grew = True
                continue
            if not after.custom:
                continue
            rule = rules.get(after.type)
            forced: list[str] = []
            for path, source in sorted(_hits(after, markers, arns).items()):
                if rule is None or rule.verdict(path) is None:
                    unclassified.add((after.type, path))
                    forced.append(f"{path} (not classified: counted as a replacement)")
                elif rule.verdict(path) != "update":
                    via = origins.get(source, frozenset({old[source].type}))
                    verdict = _judge(rule, old[urn].inputs, after.inputs, [path], via)
                    forced += [f"{f} takes an output of {old[source].name}" for f in verdict.forced]
            if forced:
                replace(
                    old[urn],
                    "cascade",
                    f"{'; '.join(forced)}, which is replaced: unknown until the new one "
                    "exists, so this is replaced too",
                    after,
                )
                grew = True
        if not grew:
            break

    # The types each replacement came through: its own, and those of every replaced
    # resource it takes an output of (a subnet replaced for its own CIDR is in a new VPC too).
    markers, arns = lookups()
    sources: dict[str, set[str]] = {}
    for urn in replaced:
        resource = new.get(urn, old[urn])
        sources[urn] = set(_hits(resource, markers, arns).values())
        if resource.provider in replaced:
            sources[urn].add(resource.provider)
    origins = {urn: frozenset({old[urn].type}) for urn in replaced}
    while True:
        grown = {
            urn: origins[urn].union(*(origins[s] for s in sources[urn] if s in origins))
            for urn in replaced
        }
        if grown == origins:
            break
        origins = grown

    updated: dict[str, Resource] = {}
    refusals: dict[tuple[str, str], str] = {}  # (urn, input) -> reason
    for urn in kept:
        after = new[urn]
        if urn in replaced or not after.custom:
            continue
        rule = rules.get(after.type)
        if rule is None:
            continue
        for path, source in sorted(_hits(after, markers, arns).items()):
            if rule.verdict(path) == "update":
                updated[urn] = after
                continue
            verdict = _judge(rule, old[urn].inputs, after.inputs, [path], origins[source])
            for label, why in verdict.refused:
                refusals[(urn, f"{label} takes an output of {old[source].name}")] = why
            updated[urn] = after
    for (urn, label), why in sorted(refusals.items()):
        refuse(new[urn], [(label, why)])
    changed = {c.urn for c in diff.changed}
    diff.updated_by_cascade = [_ref(r) for u, r in sorted(updated.items()) if u not in changed]
