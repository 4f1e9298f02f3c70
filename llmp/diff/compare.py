"""Comparing two plans: the one comparison `llmp diff` and `llmp dr plan` share.

Resources are matched by URN, the identity Pulumi uses (dr translates the
source's URNs into the recovery region's first). For each resource in both,
its inputs are flattened into leaves (`input_changes`) and compared as
inputs, not as Python values (30 and 30.0 are the same input, `true` and 1
are not: `llmp.plan.leaves`). `compare_plans` adds what a PR preview must say:
renames, replacements and refusals. Each changed input is judged by its type's rules in
the replacement table (`llmp.diff.replacements`): updated in place, forcing a new resource,
or conditional (replaced or refused by the API for some changes only). A replacement
spreads (`llmp.diff.replacements.spread`) to what takes its outputs, which a real preview sees
unknown until the new resource exists, and to what runs on a replaced provider; a move to
a provider configured differently, a delete and a rename replace too.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llmp.diff.replacements import judge, replacement_rules, spread
from llmp.plan import Plan, Resource
from llmp.plan.leaves import MISSING, at_path, empty, leaves, same, show_value
from spec.replacement import TypeRule


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
class IgnoredChange:
    """An input the file changes that `pulumi up` leaves alone: `ignore_changes` covers it."""

    urn: str
    type: str
    name: str
    path: str
    old: str
    new: str
    ignored: str
    """The `ignore_changes` entry that covers it."""
    reason: str
    """Who owns the value instead, and what applies a change of it."""

    def to_dict(self) -> dict[str, str]:
        return {
            "urn": self.urn,
            "type": self.type,
            "name": self.name,
            "path": self.path,
            "old": self.old,
            "new": self.new,
            "ignore_changes": self.ignored,
            "reason": self.reason,
        }


IGNORE_REASONS: dict[tuple[str, str], str] = {
    (
        "aws:eks/nodeGroup:NodeGroup",
        "scalingConfig.desiredSize",
    ): (
        "the Cluster Autoscaler owns an elastic pool's desired size once the group exists; "
        "min_size and max_size apply, or `aws eks update-nodegroup-config --scaling-config "
        "desiredSize=N` once"
    ),
}
"""Why an input the program ignores is someone else's, by (type, ignore_changes entry)."""


def ignore_reason(type_: str, entry: str) -> str:
    return IGNORE_REASONS.get(
        (type_, entry),
        f"ignore_changes covers {entry}: `pulumi up` keeps the deployed value; the new one "
        "applies only when the resource is created or replaced",
    )


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
    ignored: list[IgnoredChange] = field(default_factory=list)
    """Changes the file makes that `pulumi up` does not: `ignore_changes` covers them."""

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
            "ignored": [c.to_dict() for c in self.ignored],
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
    if empty(before_name) or not same(before_name, after_name):
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
        kept_changes = []
        for change in changes:
            entry = after.ignores(change.path)
            if entry is None:
                kept_changes.append(change)
                continue
            diff.ignored.append(
                IgnoredChange(
                    urn,
                    after.type,
                    after.name,
                    change.path,
                    change.old,
                    change.new,
                    entry,
                    ignore_reason(after.type, entry),
                )
            )
        changes = kept_changes
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
        verdict = judge(rule, before.inputs, after.inputs, paths)
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

    updated = spread(old, new, rules, replaced, replace, refuse, unclassified)
    changed = {c.urn for c in diff.changed}
    diff.updated_by_cascade = [_ref(r) for u, r in sorted(updated.items()) if u not in changed]
    diff.unclassified = sorted(unclassified)
    diff.replacements = sorted(
        replaced.values(), key=lambda r: (not r.precious, r.cause != "force-new", r.urn)
    )
    # A replaced resource is created anew: every input applies, the ignored ones too.
    recreated = {r.urn for r in diff.recreated}
    diff.ignored = [c for c in diff.ignored if c.urn not in recreated]
    return diff


def as_applied(base: Plan, head: Plan, diff: PlanDiff) -> Plan:
    """`head` as `pulumi up` would leave the stack: every ignored input at its base value."""
    import copy

    from llmp.plan.leaves import set_path

    if not diff.ignored:
        return head
    old = base.by_urn
    resources = []
    by_urn: dict[str, list[IgnoredChange]] = {}
    for change in diff.ignored:
        by_urn.setdefault(change.urn, []).append(change)
    for r in head.resources:
        if r.urn not in by_urn:
            resources.append(r)
            continue
        inputs = copy.deepcopy(r.inputs)
        for change in by_urn[r.urn]:
            set_path(inputs, change.path, at_path(old[r.urn].inputs, change.path))
        resources.append(r.model_copy(update={"inputs": inputs}))
    return head.model_copy(update={"resources": resources})
