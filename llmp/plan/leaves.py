"""Resource inputs as plan comparisons see them: leaves by dotted path, equal as inputs.

`leaves` flattens a resource's inputs into leaves (a list of scalars is one leaf, a list of
objects is indexed); `same` compares them as inputs, not as Python values (30 and 30.0 are
the same input, `true` and 1 are not); `show_value` prints one as a report shows it.
`llmp diff` (`llmp.diff.compare`, `llmp.diff.replacements`) and `llmp dr plan`
(`llmp.dr.equivalence`) compare plans with them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from llmp.plan import SECRET

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


def set_path(inputs: dict[str, Any], path: str, value: Any) -> None:
    """Set the leaf at dotted `path` (objects only, as `at_path` reads) to `value`;
    MISSING removes it."""
    *parents, last = path.split(".")
    node: Any = inputs
    for part in parents:
        if not isinstance(node.get(part), dict):
            if value is MISSING:
                return
            node[part] = {}
        node = node[part]
    if value is MISSING:
        node.pop(last, None)
    else:
        node[last] = value


def number(value: Any) -> float | None:
    """A finite JSON number as a float; None for anything else (booleans included)."""
    import math

    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def empty(value: Any) -> bool:
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


def same_items(a: Any, b: Any) -> bool:
    """Two lists of scalars holding the same items, in any order (a Terraform set)."""
    if not (_is_scalar_list(a) and _is_scalar_list(b)) or len(a) != len(b):
        return False

    def key(value: Any) -> str:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return json.dumps(float(value) if number else value)

    return sorted(map(key, a)) == sorted(map(key, b))


def strings_in(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_in(v)
