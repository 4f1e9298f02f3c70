r"""PromQL selectors built from values, never pasted: one helper for every query the platform's
code sends to Prometheus (`llmp canary`, `llmp stragglers`, the straggler watcher) and the
rules that must agree with them.

A label value is data: a job, a namespace or a Service named by a tenant. Put in a query as
text, `job="a"} or vector(1) or x{job="b"` would rewrite the query. `string_literal` quotes a
value as a PromQL double-quoted string (PromQL unquotes Go's escapes: `\\`, `\"`, `\n`,
`\xNN`, `\uNNNN`), so the string Prometheus matches is exactly the value given; `matchers` and
`selector` build equality matchers from a mapping, checking each label name.

Here (in spec) because both halves use it: the platform side (monitoring, llmp) and the code in
pods (the watcher runs from the trainer image, which carries spec/).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from spec.errors import show

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_NAMED = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def string_literal(value: str) -> str:
    """`value` as a PromQL double-quoted string literal that unquotes to `value` exactly.

    Backslash, quote and the usual control characters get their escapes, every other control
    character `\\xNN` (C0, DEL) or `\\uNNNN` (C1); the rest is UTF-8 as is. A string that is no
    valid Unicode (a lone surrogate) cannot be sent: ValueError."""
    if not isinstance(value, str):
        raise TypeError(f"a label value is a string, not {type(value).__name__}: {value!r}")
    out = []
    for ch in value:
        code = ord(ch)
        if ch in _NAMED:
            out.append(_NAMED[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif 0x80 <= code < 0xA0:
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code < 0xE000:
            raise ValueError(f"a label value must be valid Unicode: {value!r}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def matchers(labels: Mapping[str, str]) -> str:
    """`name="value",...` equality matchers, in the mapping's order (no braces)."""
    parts = []
    for name, value in labels.items():
        if not LABEL_NAME.match(name):
            raise ValueError(f"not a Prometheus label name: {name!r}")
        parts.append(f"{name}={string_literal(value)}")
    return ",".join(parts)


def selector(metric: str, labels: Mapping[str, str], *extra: str) -> str:
    """`metric{name="value",...}`; `extra` are matchers built elsewhere (a `le` bound, a
    regex), appended as given."""
    if not METRIC_NAME.match(metric):
        raise ValueError(f"not a Prometheus metric name: {metric!r}")
    inner = ",".join(part for part in (matchers(labels), *extra) if part)
    return f"{metric}{{{inner}}}"


class ImpossibleValue(ValueError):
    """A value Prometheus returned that the query cannot produce: one line."""


def sample_value(raw: object, what: str) -> float:
    """The float of a sample's value as the HTTP API sends it (a string: `"0.25"`, `"NaN"`,
    `"+Inf"`); ImpossibleValue for anything that is not a number (NaN and infinities are
    numbers here: the caller decides what it can take)."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise ImpossibleValue(f"{what}: {show(raw)} is not a number")
    try:
        return float(raw)
    except (ValueError, OverflowError):
        raise ImpossibleValue(f"{what}: {show(raw)} is not a number") from None


def checked(value: float, what: str, *, low: float = 0.0, high: float = math.inf) -> float:
    """`value` if it is finite and within [low, high]; ImpossibleValue otherwise."""
    if not math.isfinite(value) or not low <= value <= high:
        bounds = f"in [{low:g}, {high:g}]" if math.isfinite(high) else f">= {low:g}"
        raise ImpossibleValue(f"{what}: {value!r}, not {bounds}")
    return value
