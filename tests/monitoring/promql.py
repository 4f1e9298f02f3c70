"""A small PromQL scan: the metric names an expression reads (not functions, keywords, labels)."""

from __future__ import annotations

import re

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACES = re.compile(r"\{[^}]*\}")
_BRACKETS = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
KEYWORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "quantile",
    "topk",
    "bottomk",
    "stddev",
    "stdvar",
    "count_values",
    "inf",
    "nan",
}


def metric_names(expr: str) -> set[str]:
    text = _STRINGS.sub("", expr)
    text = _BRACES.sub(" ", text)
    text = _BRACKETS.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        word = match.group()
        rest = text[match.end() :].lstrip()
        if word.lower() in KEYWORDS or rest.startswith("("):
            continue  # a keyword, an aggregation or a function call
        if re.fullmatch(r"[0-9.e+-]+", word) or (
            match.start() and text[match.start() - 1].isdigit()
        ):
            continue
        names.add(word)
    return names
