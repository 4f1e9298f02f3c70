"""Reading what a careless or hostile user (or server) hands the platform: one discipline.

Every JSON and YAML document the CLI reads (stack files, job files, step-time lines,
evidence, gates, outputs, a load test's stream chunks, Prometheus answers) goes through
here, under the same limits:

- size: a file or answer over `max_bytes` is refused before it is parsed;
- depth: a document nested deeper than `MAX_DEPTH` is refused (the parsers and
  pydantic recurse, and a RecursionError is a traceback);
- numbers: an integer or float literal of more than `MAX_NUMBER_CHARS` characters is
  refused (Python refuses to build an int of over 4,300 digits, with a ValueError);
- YAML aliases: more than `MAX_ALIASES` aliases, or aliases that would expand the
  document past `MAX_NODES` nodes (an alias bomb: a few lines that expand to billions),
  are refused before anything is constructed;
- duplicate keys in one map are refused: JSON and YAML would keep the last one without a
  word (`tenant: chat` then `tenant: code` runs as `code`).

A refusal is a `ReadError`: one line, `SOURCE: PLACE: what is wrong; what would be
right`, with the place a line and column (YAML, JSON) or a key path, the values in it
shortened and their unprintable characters escaped (`spec.errors.show`, `one_line`).

`visible` is the same escaping for any value that reaches a terminal: control
characters, ANSI escapes and bidirectional overrides are shown as `\\x1b`, `\\u202e`,
never sent as they are.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from spec.errors import clip, one_line, show

MAX_DEPTH = 64
"""Nesting of maps and lists; the deepest document the platform writes is under 12."""

MAX_NUMBER_CHARS = 100
"""Characters of one number literal (a 64-bit integer has 20)."""

MAX_ALIASES = 100
"""YAML aliases (`*name`) in one document; the committed stack files use none."""

MAX_NODES = 1_000_000
"""Nodes of one YAML document once its aliases are expanded."""

MAX_FILE_BYTES = 16 * 1024 * 1024
"""A config file (a stack file, a job file, evidence, gates, outputs); step-time traces,
which hold millions of rows, have their own limit."""

MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""One answer of a server (Prometheus' query_range over a large job is tens of MB)."""

MAX_SHOWN = 60
"""Characters of a value quoted in a message."""


class ReadError(ValueError):
    """A document that cannot be read: `str()` is its one line, `SOURCE: PROBLEM`."""

    def __init__(self, source: str, problem: str) -> None:
        self.source = one_line(clip(str(source), 200))
        self.problem = one_line(problem)
        super().__init__(f"{self.source}: {self.problem}")


# --------------------------------------------------------------------------- text


def unprintable(text: str) -> str | None:
    """The first control, format (bidi override, zero-width) or separator character of
    `text`, escaped (`\\x1b`, `\\u202e`); None when there is none."""
    if text.isprintable():
        return None
    c = next(c for c in text if not c.isprintable())
    return c.encode("unicode_escape").decode()


def visible(value: Any, limit: int = MAX_SHOWN * 4) -> str:
    """`value` as text safe for a terminal: unprintable characters escaped, rich markup
    inert (`[bold]` stays text when printed with markup off, as `llmp.console` prints), at
    most `limit` characters."""
    text = value if isinstance(value, str) else str(value)
    return one_line(clip(text, limit))


def summary(items: Sequence[Any] | Iterable[Any], shown: int = 5) -> str:
    """`a, b, c and 12 more`: a long list in a message, summarised with a count."""
    items = list(items)
    head = ", ".join(visible(i, MAX_SHOWN) for i in items[:shown])
    more = len(items) - shown
    return f"{head} and {more} more" if more > 0 else head


def key_path(path: Iterable[str | int]) -> str:
    """`a.b[3].c`: where in a document a value is."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = visible(part, 40)
            out += f".{text}" if out else text
    return out or "(top level)"


_USERINFO = re.compile(r"(?<=//)[^/?#]*@")
_SECRET_PARAM = re.compile(r"(?i)([?&](?:[^=&#]*(?:key|token|secret|passw|auth)[^=&#]*)=)[^&#]*")


def redact_url(url: str) -> str:
    """`url` without its credentials: the userinfo (`user:password@`) and the values of
    query parameters named like a secret (`api_key=`, `token=`) shown as `***`. For any URL
    a report prints or writes."""
    text = _USERINFO.sub("***@", url)
    return _SECRET_PARAM.sub(r"\1***", text)


def host_problem(host: str) -> str | None:
    """Why `host` (a URL's) cannot be connected to, or None: DNS allows 253 characters,
    63 a label, and IDNA encoding must take it (an IPv6 literal is checked by urlsplit)."""
    if ":" in host:
        return None
    if len(host) > 253:
        return f"{len(host)} characters; a host name has at most 253"
    if any(len(label) > 63 for label in host.split(".")):
        return "a label (between dots) of over 63 characters"
    try:
        host.encode("idna")
    except UnicodeError as exc:
        return f"not encodable as a DNS name ({exc})"
    return None


# --------------------------------------------------------------------------- files


def read_bytes(
    path: Path | str, source: str | None = None, max_bytes: int = MAX_FILE_BYTES
) -> bytes:
    """The bytes of `path`; ReadError naming it when it is missing, unreadable, a
    directory, not a file name, or larger than `max_bytes`."""
    shown = source or str(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise ReadError(shown, "no such file") from None
    except OSError as exc:
        raise ReadError(shown, f"cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:  # a path with a NUL byte
        raise ReadError(repr(str(path)), f"not a file name: {exc}") from None
    if len(data) > max_bytes:
        raise ReadError(shown, f"larger than {_size(max_bytes)}; give a smaller file")
    return data


def decode(data: bytes, source: str) -> str:
    """UTF-8 text (a BOM allowed); ReadError with the line and column of the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ReadError(
            source, f"not UTF-8 text (line {line}, column {column}: byte 0x{data[exc.start]:02x})"
        ) from None


def read_text(path: Path | str, source: str | None = None, max_bytes: int = MAX_FILE_BYTES) -> str:
    return decode(read_bytes(path, source, max_bytes), source or str(path))


def load_file(path: Path | str, source: str | None = None, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """The JSON (`.json` files) or YAML document in `path`, under every limit above."""
    shown = source or str(path)
    text = read_text(path, shown, max_bytes)
    if str(path).lower().endswith(".json"):
        return parse_json(text, shown)
    return parse_yaml(text, shown)


def load_json_file(
    path: Path | str, source: str | None = None, max_bytes: int = MAX_FILE_BYTES
) -> Any:
    shown = source or str(path)
    return parse_json(read_text(path, shown, max_bytes), shown)


# --------------------------------------------------------------------------- JSON


class _Refused(Exception):
    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(
                f"duplicate key {show(clip(key, MAX_SHOWN))}; JSON would keep only the last "
                "one: remove one"
            )
        out[key] = value
    return out


def _number(kind: type) -> Any:
    def parse(text: str) -> Any:
        if len(text) > MAX_NUMBER_CHARS:
            raise _Refused(
                f"a number of {len(text)} characters ({clip(text, 20)}); at most {MAX_NUMBER_CHARS}"
            )
        return kind(text)

    return parse


_PARSE_INT, _PARSE_FLOAT = _number(int), _number(float)


def parse_json(
    text: str | bytes,
    source: str,
    max_bytes: int = MAX_ANSWER_BYTES,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """The JSON document in `text`, refused (ReadError) when it is not JSON, too large, too
    deep, holds a number too long or a key twice in one object."""
    if len(text) > max_bytes:
        raise ReadError(source, f"larger than {_size(max_bytes)}")
    if isinstance(text, bytes):
        text = decode(text, source)
    try:
        doc = json.loads(
            text, object_pairs_hook=_pairs, parse_int=_PARSE_INT, parse_float=_PARSE_FLOAT
        )
    except json.JSONDecodeError as exc:
        raise ReadError(
            source, f"not JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except _Refused as exc:
        raise ReadError(source, f"not accepted JSON: {exc.problem}") from None
    except RecursionError:
        raise ReadError(source, _too_deeply(max_depth)) from None
    except ValueError as exc:  # a number Python cannot hold
        raise ReadError(source, f"not accepted JSON: {clip(str(exc), 120)}") from None
    if _too_deep(doc, max_depth):
        raise ReadError(source, _too_deeply(max_depth))
    return doc


def _too_deeply(limit: int) -> str:
    return f"JSON nested too deeply (more than {limit} levels)"


def _too_deep(doc: Any, limit: int) -> bool:
    """Whether `doc` (built by a parser: no cycles) nests maps and lists past `limit`."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Iterable[Any] = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


# --------------------------------------------------------------------------- YAML


class DuplicateKey(Exception):
    def __init__(self, key: Any, line: int, first_line: int) -> None:
        super().__init__(key)
        self.key = key
        self.line = line
        self.first_line = first_line


class YamlRefused(Exception):
    """A YAML document refused before construction: `problem` at `line`, `column` (1-based)."""

    def __init__(self, problem: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(problem)
        self.problem, self.line, self.column = problem, line, column

    def where(self) -> str:
        return f"line {self.line}, column {self.column}: " if self.line is not None else ""


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def check_nodes(root: Any, max_depth: int = MAX_DEPTH, max_aliases: int = MAX_ALIASES) -> None:
    """Refuse a composed YAML node graph (YamlRefused) that reuses nodes more than
    `max_aliases` times, would expand past MAX_NODES nodes or `max_depth` levels, or holds
    a number literal longer than MAX_NUMBER_CHARS. Walks each node once (aliases make the
    graph a DAG; its expanded size is counted, not built)."""
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    aliases = 0
    # Iterative post-order: (node, children done?)
    stack: list[tuple[Any, bool]] = [(root, False)]
    on_path: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if isinstance(node, ScalarNode):
            if key not in size:
                if node.tag in _NUMBER_TAGS and len(node.value) > MAX_NUMBER_CHARS:
                    mark = node.start_mark
                    raise YamlRefused(
                        f"a number of {len(node.value)} characters "
                        f"({clip(node.value, 20)}); at most {MAX_NUMBER_CHARS}",
                        mark.line + 1,
                        mark.column + 1,
                    )
                size[key], depth[key] = 1, 0
            continue
        if isinstance(node, MappingNode):
            children = [c for pair in node.value for c in pair]
        elif isinstance(node, SequenceNode):
            children = list(node.value)
        else:
            continue
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size.get(id(c), 1) for c in children)
            depth[key] = 1 + max((depth.get(id(c), 0) for c in children), default=0)
            if depth[key] > max_depth:
                mark = node.start_mark
                raise YamlRefused(
                    f"nested deeper than {max_depth} levels", mark.line + 1, mark.column + 1
                )
            if size[key] > MAX_NODES:
                mark = node.start_mark
                raise YamlRefused(
                    f"aliases expand it past {MAX_NODES:,} nodes (an alias bomb?); "
                    "write the values out",
                    mark.line + 1,
                    mark.column + 1,
                )
            continue
        if key in size or key in on_path:  # a node reached again: an alias
            aliases += 1
            if aliases > max_aliases:
                mark = node.start_mark
                raise YamlRefused(
                    f"more than {max_aliases} aliases; write the values out",
                    mark.line + 1,
                    mark.column + 1,
                )
            if key in on_path:
                mark = node.start_mark
                raise YamlRefused("an alias inside itself", mark.line + 1, mark.column + 1)
            continue
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(children))
    # Scalars reached twice are aliases too (`*name` of a scalar anchor) but cost nothing.


@functools.cache
def yaml_loader() -> type:
    """The catalog's safe loader (libyaml's when present) that refuses a key twice in one
    map (DuplicateKey) and, before constructing anything, what `check_nodes` refuses.

    PyYAML keeps the last of two equal keys without a word: a second
    `llm-platform:node_pools:` would silently drop the first.
    """
    from yaml.nodes import MappingNode

    from spec.catalog import YAML_LOADER

    class Loader(YAML_LOADER):  # type: ignore[misc, valid-type]
        def construct_document(self, node: Any) -> Any:
            check_nodes(node)
            return super().construct_document(node)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, MappingNode):
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue  # `<<: *base` keys may be overridden: that is what they are for
                    key = self.construct_object(key_node, deep=True)
                    line = key_node.start_mark.line + 1
                    try:
                        if key in seen:
                            raise DuplicateKey(key, line, seen[key])
                        seen[key] = line
                    except TypeError:
                        continue  # an unhashable key: the base constructor refuses it
            return super().construct_mapping(node, deep=deep)

    return Loader


def yaml_problem(exc: BaseException) -> str | None:
    """The one-line problem of an exception raised while loading YAML with `yaml_loader`;
    None for one that is no reading problem (a bug)."""
    import yaml

    if isinstance(exc, DuplicateKey):
        return (
            f"duplicate key {show(exc.key)} at line {exc.line} (first at line "
            f"{exc.first_line}); YAML would keep only the last one: merge them or remove one"
        )
    if isinstance(exc, YamlRefused):
        return f"not accepted YAML ({exc.where()}{exc.problem})"
    if isinstance(exc, yaml.MarkedYAMLError):
        where = ""
        if exc.problem_mark is not None:
            mark = exc.problem_mark
            where = f"line {mark.line + 1}, column {mark.column + 1}: "
        return f"not valid YAML ({where}{exc.problem or exc})"
    if isinstance(exc, yaml.YAMLError):
        return f"not valid YAML ({exc})"
    if isinstance(exc, ValueError | TypeError | OverflowError | RecursionError):
        # Constructors that give up: a timestamp out of range, nesting past the stack.
        return f"not valid YAML ({type(exc).__name__}: {clip(str(exc), 120)})"
    return None


def parse_yaml(text: str, source: str) -> Any:
    """The YAML document in `text` under the limits above; ReadError (one line) otherwise."""
    import yaml

    try:
        return yaml.load(text, Loader=yaml_loader())
    except Exception as exc:
        problem = yaml_problem(exc)
        if problem is None:
            raise
        raise ReadError(source, problem) from None


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n >= 1024 * 1024 else f"{n:,} bytes"
