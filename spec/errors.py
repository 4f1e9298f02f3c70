"""Config errors: one line per problem, naming the key, the value and what would be right.

    config error: llm-platform:node_pools.pretrain.efa = True: g6e.12xlarge has no
    EFA interfaces; set efa: false or use one of g5.12xlarge, g5.48xlarge, ...

`ConfigError` is what every layer raises for bad stack config, and what the
operator CLI turns into exit code 2; the helpers here keep any value, however
large or odd, to one bounded, printable line.
"""

from __future__ import annotations

import contextlib
import difflib
import reprlib
from collections.abc import Iterable
from typing import Any

from spec.keys import NAMESPACE, REGION_KEY


class ConfigError(Exception):
    """Stack-config problems, one line each: where, what, what would be right.

    The error is the first problem found; `others` holds the further ones found in
    the same pass. str() gives every problem on a line of its own, the first first.
    """

    def __init__(
        self,
        path: tuple[str | int, ...],
        value: Any,
        expected: str,
        *,
        config_key: str | None = None,
    ):
        self.path = path
        self.value = value
        self.expected = expected
        self.config_key = config_key
        """The whole config key, for a key outside the `llm-platform` schema."""
        self.others: list[ConfigError] = []
        super().__init__(self.line())

    @property
    def key(self) -> str:
        if self.config_key is not None:
            return clip(self.config_key, _MAX_KEY_PART * 2)
        if self.path and self.path[0] == "region":
            return REGION_KEY
        return f"{NAMESPACE}:" + ".".join(clip(str(p), _MAX_KEY_PART) for p in self.path)

    @property
    def errors(self) -> list[ConfigError]:
        """This problem and the others, in the order they are printed."""
        return [self, *self.others]

    def line(self) -> str:
        """This one problem: `config error: KEY = VALUE: EXPECTED`."""
        value = "<missing>" if self.value is MISSING else show(self.value)
        expected = clip(self.expected, _MAX_EXPECTED)
        return one_line(f"config error: {self.key} = {value}: {expected}")

    def __str__(self) -> str:
        lines = list(dict.fromkeys(e.line() for e in self.errors))
        if len(lines) > _MAX_ERRORS:
            hidden = len(lines) - _MAX_ERRORS
            lines = [*lines[:_MAX_ERRORS], f"config error: {hidden} more errors not shown"]
        return "\n".join(lines)


class StackFileError(ConfigError):
    """A stack file that cannot be read as one: `config error: FILE: what is wrong`."""

    def __init__(self, file: str, problem: str):
        self.file = file
        super().__init__((), MISSING, problem)

    def line(self) -> str:
        return one_line(f"config error: {clip(self.file, 300)}: {self.expected}")


# Bounds that keep an error one readable line, whatever the config holds.
_MAX_VALUE = 60  # the value part: the key and the reason around it are what the reader needs
_MAX_KEY_PART = 64
_MAX_EXPECTED = 1000
_MAX_ERRORS = 50  # lines of one report: a file of 600 broken pools need not print 600
_FEW = 3  # the items of a long list or map shown before `and N more`


class _Repr(reprlib.Repr):
    """reprlib's bounds, but a long list or map shows its first items and `and N more`
    (`['a', 'b', 'c', and 9 more]`), and maps keep the order they were written in."""

    def _items(self, shown: list[str], total: int, left: str, right: str) -> str:
        if total > len(shown):
            shown = [*shown, f"and {total - len(shown)} more"]
        return left + ", ".join(shown) + right

    def _sequence(self, x: Any, level: int, left: str, right: str) -> str:
        if not x:
            return left + right
        if level <= 0:
            return left + "..." + right
        items = list(x)
        if isinstance(x, (set, frozenset)):  # sorted where they sort, as reprlib shows them
            with contextlib.suppress(TypeError):
                items.sort()
        shown = [self.repr1(item, level - 1) for item in items[: self.maxlist]]
        return self._items(shown, len(items), left, right)

    def repr_list(self, x: list[Any], level: int) -> str:
        return self._sequence(x, level, "[", "]")

    def repr_tuple(self, x: tuple[Any, ...], level: int) -> str:
        if len(x) == 1:
            return "(" + self.repr1(x[0], level - 1) + ",)"
        return self._sequence(x, level, "(", ")")

    def repr_set(self, x: set[Any], level: int) -> str:
        return self._sequence(x, level, "{", "}") if x else "set()"

    def repr_frozenset(self, x: frozenset[Any], level: int) -> str:
        return self._sequence(x, level, "frozenset({", "})") if x else "frozenset()"

    def repr_dict(self, x: dict[Any, Any], level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        shown = [
            f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}"
            for k, v in list(x.items())[: self.maxlist]
        ]
        return self._items(shown, len(x), "{", "}")


def _bounded(items: int, string: int) -> _Repr:
    shown = _Repr()
    shown.maxlevel = 3
    shown.maxlist = items
    shown.maxstring = string
    shown.maxother = string
    shown.maxlong = 60
    return shown


_SHAPES = [
    _bounded(n, chars) for n, chars in [(_FEW, _MAX_VALUE), (_FEW, 24), (2, 20), (1, 24), (1, 12)]
]
"""The reprs `show` tries in turn, from the most shown, until the value fits its bound."""
_ONE = _bounded(_FEW, _MAX_VALUE - 2)  # a value that is not a collection


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def show(value: Any) -> str:
    """A bounded repr, at most `_MAX_VALUE` characters: a long list or map as its first
    items and `and N more`, a long string shortened in its middle; huge, deep or odd values
    (10**5000, [[[...]]]) stay short and safe."""
    if value is SECRET_VALUE:
        return "[secret]"
    try:
        if isinstance(value, (list, tuple, set, frozenset, dict)):
            text = ""
            for shape in _SHAPES:
                text = shape.repr(value)
                if len(text) <= _MAX_VALUE:
                    break
        else:
            text = _ONE.repr(value)
    except Exception:  # a repr that raises (ValueError for ints over 4300 digits, ...)
        if isinstance(value, int):
            text = f"<integer of about {int(value.bit_length() * 0.30103)} digits>"
        else:
            text = f"<{type(value).__name__}>"
    return clip(text, _MAX_VALUE)


def one_line(text: str) -> str:
    """Escape line breaks and other unprintable characters (keys and values may hold them)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def validation_line(error: Any) -> str:
    """A pydantic ValidationError as one line, `where: what; where: what`, for the files the
    workloads read (job configs, gates, thresholds); the stack config has its own report."""
    parts = []
    for e in error.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {msg}")
    return one_line("; ".join(parts))


class FieldError(ValueError):
    """Raised inside validators to point at a key below the validated model."""

    def __init__(self, path: tuple[str | int, ...], value: Any, expected: str):
        self.path = path
        self.value = value
        self.expected = expected
        super().__init__(expected)


MISSING = object()


SECRET_VALUE: Any = object()
"""Stands in for the value of a secret key in an error message."""


def sorted_names(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))


def not_in(what: str, where: str, names: Iterable[str]) -> str:
    """The message of a reference to nothing: `not a pool in node_pools (h100, a100)`."""
    return f"not a {what} in {where} ({', '.join(names) or 'none'})"


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to `word`, ignoring case; None when none is close."""
    if len(word) > 200:
        return None
    lower = {c.lower(): c for c in choices}
    if word.lower() in lower:
        return lower[word.lower()]
    match = difflib.get_close_matches(word.lower(), list(lower), n=1, cutoff=0.75)
    return lower[match[0]] if match else None


def kind_of(value: Any) -> str:
    names = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
    return names.get(type(value), f"a {type(value).__name__}")
