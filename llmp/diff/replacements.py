"""What a change of a resource's inputs does, by the replacement table (spec/replacement.yaml).

`judge` gives one resource's verdict on its changed inputs by the rules of its type:
updated in place, forcing a new resource, or conditional (replaced or refused by the API
for some changes only). `spread` follows replacements to what takes their outputs, which a
real preview sees unknown until the new resource exists (`computed_markers`: how a plan
shows them), and to what runs on a replaced provider. `llmp.diff.compare` builds the plan
comparison on them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmp.plan import SECRET, Resource
from llmp.plan.leaves import at_path, empty, leaves, same, same_items, strings_in
from spec.replacement import Conditional, TypeRule, replacement_table, skips_minor


def replacement_rules() -> dict[str, TypeRule]:
    """Every type's rules from the replacement table (spec/replacement.yaml), bases merged."""
    return replacement_table().rules


@dataclass(frozen=True)
class Verdict:
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
        return empty(after) and not empty(before)
    if condition == "added":
        return empty(before) and not empty(after)
    if condition == "skips_minor":
        return skips_minor(before, after)
    if condition == "to":
        return after in cond.values and before not in cond.values
    b, a = cond.rank(before), cond.rank(after)
    if b is None or a is None:
        return False
    return a < b if condition == "decreased" else a > b if condition == "increased" else False


def judge(
    rule: TypeRule,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    paths: Iterable[str],
    origins: frozenset[str] | None = None,
) -> Verdict:
    """The verdict of `rule` on the changed leaf `paths` between inputs `old` and `new`.

    A conditional input is judged once, on its whole value; a force-new input that is
    a Terraform set (`unordered`) holding the same items in another order is no change.
    With `origins`, the new values are unknown: they come from a replaced resource, whose
    replacement came through resources of these types.
    """
    verdict = Verdict()
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
            if entry.unordered and origins is None and same_items(before, after):
                continue
            verdict.forced.append(entry.input)
        elif rule.verdict(path) is None:
            verdict.unclassified.append(path)
    return verdict


def computed_markers(resource: Resource) -> set[str]:
    """Values by which other inputs refer to this resource's computed outputs in a plan.

    They follow `llmp.plan.synth._PlanMocks`: the id is `<name>-id`, an unnamed resource's
    physical name `synth.autoname(name)`, and a few types' own outputs (a cluster's
    endpoint and security group, a key's id, a file system's mount name, a node group's
    Auto Scaling group); its ARN, `arn:aws:mock:<region>:<account>:<type>/<name>`, is
    matched by `_MOCK_ARN` (the region differs per provider). A real preview knows none
    of these before the resource exists, which is what makes a replacement spread.
    """
    from llmp.plan.synth import autoname

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
    for text in strings_in(value):
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


def spread(
    old: Mapping[str, Resource],
    new: Mapping[str, Resource],
    rules: Mapping[str, TypeRule],
    replaced: Mapping[str, object],
    replace: Callable[..., None],
    refuse: Callable[..., None],
    unclassified: set[tuple[str, str]],
) -> dict[str, Resource]:
    """Follow replacements, until nothing more changes, to what takes their outputs.

    A kept resource whose provider is replaced is replaced (the engine). One whose input
    takes an output of a replaced resource sees that value unknown in a real preview: an
    input that forces a new one replaces it (an input the table does not classify errs
    loud and counts as one). Once nothing more is replaced, the rest is judged with the
    types each replacement came through: a conditional input as `cascaded` (a refusal
    where the API rejects it), an input updated in place as an update.

    `replaced` holds what is replaced so far, by URN, and grows as `replace` (resource, cause,
    reason, after) records more; `refuse` (resource, [(input, reason)]) records refusals.
    Returns the kept resources that take an output of a replaced one, by URN.
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
                    verdict = judge(rule, old[urn].inputs, after.inputs, [path], via)
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
        if resource.provider and resource.provider in replaced:
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
            verdict = judge(rule, old[urn].inputs, after.inputs, [path], origins[source])
            for label, why in verdict.refused:
                refusals[(urn, f"{label} takes an output of {old[source].name}")] = why
            updated[urn] = after
    for (urn, label), why in sorted(refusals.items()):
        refuse(new[urn], [(label, why)])
    return updated
