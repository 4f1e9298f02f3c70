"""Hostile inputs for the stack config: garbage values, odd keys, one-path mutations."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from tests.conftest import STACKS, raw_stack

# Values a config file or a careless edit can hold, beside the ones a schema expects.
ODD_STRINGS = [
    "",
    " ",
    "\n",
    "a\nb",
    "\r\n",
    "\u2028",
    "\x00",
    "\x1b[31mred",
    "true",
    "false",
    "yes",
    "no",
    "null",
    "~",
    "NaN",
    "-Infinity",
    "1e999",
    "-1",
    "0x10",
    "{}",
    "[]",
    '{"a": ',
    "[" * 5000 + "]" * 5000,
    '{"a":' * 3000 + "1" + "}" * 3000,
    "9" * 5000,
    "ü" * 300,
    "🚀",
    "名前",
    "x" * 10_000,
    "us-east-1a",
    "p5.48xlarge",
    "m7i.4xlarge",
    "ON_DEMAND",
    "CAPACITY_BLOCK",
    "10.0.0.0/16",
    "0.0.0.0/0",
]


def _deep(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def _deep_map(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth):
        value = {"a": value}
    return value


SPECIAL_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    -(2**63),
    2**64,
    10**5000,
    -(10**5000),
    float("nan"),
    float("inf"),
    float("-inf"),
    1e308,
    -0.0,
    0.5,
    b"bytes",
    _deep(3000),
    _deep_map(3000),
    [None] * 1000,
    {str(i): i for i in range(1000)},
]


def special_value(i: int) -> Any:
    return SPECIAL_VALUES[i]


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(ODD_STRINGS),
    st.dates(),
    # By index: hypothesis reprs the elements of sampled_from, and 10**5000 has no repr.
    st.integers(min_value=0, max_value=len(SPECIAL_VALUES) - 1).map(special_value),
)
keys = st.one_of(
    st.text(max_size=12),
    st.sampled_from(ODD_STRINGS),
    st.integers(),
    st.booleans(),
    st.none(),
)
garbage = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(keys, inner, max_size=4),
    ),
    max_leaves=12,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a nested config (map keys and list indexes)."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


BASES = {stack: raw_stack(stack) for stack in STACKS}
PATHS = sorted(
    ((stack, p) for stack, base in BASES.items() for p in paths(base)),
    key=repr,
)


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


@st.composite
def mutated_stack(draw: st.DrawFn) -> dict[str, Any]:
    """A real stack file with one path replaced, deleted, or given an unknown sibling."""
    stack, path = draw(st.sampled_from(PATHS))
    doc = copy.deepcopy(BASES[stack])
    parent = _parent(doc, path)
    action = draw(st.sampled_from(["replace", "delete", "unknown_key", "wrap"]))
    if action == "replace":
        parent[path[-1]] = draw(garbage)
    elif action == "delete":
        del parent[path[-1]]
    elif action == "wrap":  # the right value, one level too deep or too shallow
        value = parent[path[-1]]
        parent[path[-1]] = draw(st.sampled_from([[value], {"value": value}, str(value)]))
    else:
        target = parent[path[-1]]
        if isinstance(target, dict):
            target[draw(keys)] = draw(garbage)
        else:
            parent[path[-1]] = {draw(keys): draw(garbage)}
    return doc


@st.composite
def huge_maps(draw: st.DrawFn) -> dict[str, Any]:
    """Hundreds of node pools or buckets: valid-looking, with one bad entry somewhere."""
    doc = copy.deepcopy(BASES["pretrain"])
    n = draw(st.integers(min_value=100, max_value=600))
    bad = draw(st.integers(min_value=0, max_value=n))
    if draw(st.booleans()):
        pools = doc["llm-platform:node_pools"]
        template = pools["h100-block"]
        for i in range(n):
            pools[f"pool-{i}"] = dict(template) if i != bad else draw(garbage)
    else:
        buckets = doc["llm-platform:storage"]["buckets"]
        for i in range(n):
            buckets[f"b{i}"] = {"initial_gb": i} if i != bad else draw(garbage)
    return doc


random_configs = st.dictionaries(
    st.one_of(
        st.sampled_from(
            [
                "aws:region",
                "llm-platform:region",
                "llm-platform:tags",
                "llm-platform:network",
                "llm-platform:cluster",
                "llm-platform:system_pool",
                "llm-platform:node_pools",
                "llm-platform:storage",
                "llm-platform:guardrails",
                "llm-platform:",
                "llm-platform:nope",
                # Keys outside the schema: accepted, refused, or secret-only namespaces.
                "llm_platform:tags",
                "aws:profile",
                "aws:nope",
                "pulumi:tags",
                "llm-platform-serving:chat-app",
                "llm-platform-monitoring:grafanaAdminPassword",
                ":",
                "",
            ]
        ),
        keys,
    ),
    garbage,
    max_size=8,
)
