"""Reading resource properties the way CrossGuard hands them to a rule.

CrossGuard gives a rule the resource's inputs (camelCase) wrapped in a proxy
that raises `UnknownValueError` when a rule touches a value the preview cannot
know yet (an ARN, an id). The proxy is a `Mapping`/`Sequence`, not a dict or a
list, so these helpers test for the abstract types. A resource rule lets the
error propagate (CrossGuard then reports "can't run during preview"); a stack
rule uses `known()` so that one unknown value does not silence the whole rule.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from pulumi_policy import PolicyResource
from pulumi_policy.proxy import UnknownValueError

T = TypeVar("T")


class Report(Protocol):
    """CrossGuard's `report_violation(message, urn=None)` (a resource rule's urn is ignored)."""

    def __call__(self, message: str, urn: str | None = None) -> None: ...


UNKNOWN: Any = object()
"""What `known()` returns for a value only the cloud knows."""


def is_map(value: Any) -> bool:
    return isinstance(value, Mapping)


def is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def get(props: Any, *path: str | int) -> Any:
    """The value at `path`, or None when any step is missing (unknown values raise)."""
    here = props
    for step in path:
        if isinstance(step, int):
            if not is_list(here) or not -len(here) <= step < len(here):
                return None
            here = here[step]
        else:
            if not is_map(here) or step not in list(here):
                return None
            here = here[step]
    return here


def declared(props: Any, key: str) -> bool:
    """Whether `key` is set (to a known non-null value or to one the preview cannot know yet)."""
    if not is_map(props) or key not in list(props):
        return False
    try:
        return props[key] is not None
    except UnknownValueError:
        return True


def known(read: Callable[..., Any], default: Any = UNKNOWN) -> Any:
    """`read()`, or `default` when it touches a value that only the cloud knows."""
    try:
        return read()
    except UnknownValueError:
        return default


def items(value: Any) -> list[Any]:
    """A list property as a plain list (a lone value becomes a one-item list; None, none)."""
    if value is None:
        return []
    if is_list(value):
        return list(value)
    return [value]


def plain(value: Any) -> Any:
    """A deep copy as plain dicts and lists (raises on unknown values)."""
    if is_map(value):
        return {k: plain(value[k]) for k in value}
    if is_list(value):
        return [plain(v) for v in value]
    return value


def json_doc(value: Any) -> Any:
    """A JSON document property (a string, or an object already decoded) as plain data."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return plain(value)


def statements(policy: Any) -> list[Mapping[str, Any]]:
    """The statements of an IAM policy document (string or object)."""
    doc = json_doc(policy)
    if not isinstance(doc, Mapping):
        return []
    return [s for s in items(doc.get("Statement")) if isinstance(s, Mapping)]


def string_set(value: Any) -> set[str]:
    return {v for v in items(value) if isinstance(v, str)}


SHORTEST_PREFIX = {4: 8, 6: 32}
"""The widest range by IP version a rule lets through: an IPv4 /8, an IPv6 /32 (the most
one organisation holds); a shorter prefix spans other networks, the internet's included."""


def wide_prefix(cidr: Any) -> int | None:
    """The prefix length of `cidr` when it is shorter than `SHORTEST_PREFIX` allows; None
    when it is not (or `cidr` is no CIDR)."""
    if not isinstance(cidr, str):
        return None
    try:
        net = ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError:
        return None
    return net.prefixlen if net.prefixlen < SHORTEST_PREFIX[net.version] else None


# ---------------------------------------------------------------------------
# Stack views
# ---------------------------------------------------------------------------


def of_type(resources: Iterable[PolicyResource], *types: str) -> list[PolicyResource]:
    return [r for r in resources if r.resource_type in types]


def deps_of_type(resource: PolicyResource, *types: str) -> list[PolicyResource]:
    """The resources of `types` that `resource` depends on (its data and ordering edges)."""
    return [d for d in resource.dependencies if d.resource_type in types]


def depends_on(resource: PolicyResource, target: PolicyResource) -> bool:
    """Whether `resource` has a data or ordering edge to `target`."""
    return any(d.urn == target.urn for d in resource.dependencies)


def dependents(
    resources: Iterable[PolicyResource], target: PolicyResource, *types: str
) -> list[PolicyResource]:
    """The resources of `types` that depend on `target`."""
    return [r for r in resources if r.resource_type in types and depends_on(r, target)]


def tags_of(props: Any, key: str = "tags") -> dict[str, str]:
    """A resource's own tags (unknown values are left out)."""
    raw = known(lambda: get(props, key), None)
    if not is_map(raw):
        return {}
    out: dict[str, str] = {}
    for k in raw:
        v = known(lambda k=k: raw[k], None)
        if isinstance(v, str):
            out[k] = v
    return out


def provider_default_tags(provider_props: Any) -> dict[str, str]:
    """An AWS provider's `defaultTags.tags` (the engine hands provider inputs as JSON strings)."""
    if provider_props is None:
        return {}
    raw = known(lambda: get(provider_props, "defaultTags"), None)
    doc = json_doc(raw) if raw is not None else None
    if not isinstance(doc, Mapping):
        return {}
    tags = doc.get("tags")
    if isinstance(tags, str):
        tags = json_doc(tags)
    return {k: v for k, v in (tags or {}).items() if isinstance(v, str)}
