"""Fuzzing the stack config: whatever a stack file holds, `load_config` returns a
PlatformConfig or raises ConfigError with one printable line per problem, never
anything else."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spec.errors import ConfigError
from spec.platform import PlatformConfig
from spec.stackfile import load_config
from tests.hostile.strategies import (
    BASES,
    SPECIAL_VALUES,
    garbage,
    huge_maps,
    mutated_stack,
    random_configs,
)

FUZZ = settings(
    max_examples=500,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


MAX_LINES = 51  # 50 problems, then "config error: N more errors not shown"


def check(raw: Any) -> PlatformConfig | None:
    """The property: a config, or lines that each start `config error: `, one per problem."""
    try:
        return load_config(raw)
    except ConfigError as exc:
        message = str(exc)
        lines = message.split("\n")
        assert lines == message.splitlines(), message  # no other line break in a line
        assert 1 <= len(lines) <= MAX_LINES, message
        assert len(set(lines)) == len(lines), message
        for line in lines:
            assert line.startswith("config error: "), line
            assert line.isprintable(), line
            assert len(line) <= 1600, line
        assert lines[0] == exc.line()
        return None


def error_for(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    message = str(info.value)
    assert check(raw) is None
    return message


@FUZZ
@given(mutated_stack())
def test_one_mutated_path_gives_a_config_or_one_line(raw: dict[str, Any]) -> None:
    check(raw)


@FUZZ
@given(random_configs)
def test_random_configs_give_a_config_or_one_line(raw: dict[str, Any]) -> None:
    check(raw)


@settings(FUZZ, max_examples=30)
@given(huge_maps())
def test_hundreds_of_pools_or_buckets(raw: dict[str, Any]) -> None:
    check(raw)


@settings(FUZZ, max_examples=150)
@given(mutated_stack())
def test_engine_json_strings_behave_like_objects(raw: dict[str, Any]) -> None:
    """The engine hands the program JSON strings: same verdict as the YAML objects."""
    try:
        as_engine = {
            k: v if isinstance(v, str) else json.dumps(v, allow_nan=True) for k, v in raw.items()
        }
    except (TypeError, ValueError, RecursionError):
        return  # not JSON-representable: the engine never hands such a value
    check(as_engine)


@pytest.mark.parametrize("value", SPECIAL_VALUES, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize(
    "where",
    [
        ("aws:region",),
        ("llm-platform:tags",),
        ("llm-platform:tags", "team"),
        ("llm-platform:tags", "extra"),
        ("llm-platform:network", "availability_zones"),
        ("llm-platform:node_pools", "h100", "max_size"),
        ("llm-platform:node_pools", "h100", "labels"),
        ("llm-platform:storage", "buckets", "logs", "initial_gb"),
        ("llm-platform:guardrails", "gpu_budget_usd_per_hour"),
    ],
)
def test_special_values_everywhere(where: tuple[str, ...], value: Any) -> None:
    raw = copy.deepcopy(BASES["pretrain"])
    doc = raw
    for part in where[:-1]:
        doc = doc[part]
    doc[where[-1]] = value
    check(raw)


def test_huge_values_are_cut_short_in_the_message() -> None:
    raw = copy.deepcopy(BASES["pretrain"])
    raw["llm-platform:tags"]["team"] = ["x" * 10_000] * 1000
    message = error_for(raw)
    value = message.split(" = ", 1)[1].split(": ", 1)[0]
    assert len(value) <= 60, value
    assert value.startswith("['xx") and "...x" in value and value.endswith(" more]")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinity_are_no_sizes_or_prices(bad: float) -> None:
    raw = copy.deepcopy(BASES["pretrain"])
    raw["llm-platform:storage"]["buckets"]["logs"]["daily_write_gb"] = bad
    message = error_for(raw)
    assert message.startswith(
        "config error: llm-platform:storage.buckets.logs.daily_write_gb = "
    ), message


def test_line_breaks_in_keys_are_escaped() -> None:
    raw = copy.deepcopy(BASES["pretrain"])
    raw["llm-platform:node_pools"]["evil\nconfig error: fake"] = {"instance_type": "p5.48xlarge"}
    message = error_for(raw)
    assert "\n" not in message
    assert "evil\\nconfig error: fake" in message


def test_an_unknown_key_in_a_list_entry_names_the_known_keys() -> None:
    raw = copy.deepcopy(BASES["pretrain"])
    raw["llm-platform:storage"]["buckets"]["logs"]["lifecycle"][0]["nope"] = 1
    message = error_for(raw)
    assert "unknown key; known keys here: prefix, transitions, expire_days" in message


@settings(FUZZ, max_examples=50)
@given(st.lists(garbage, max_size=3) | garbage)
def test_a_config_that_is_not_a_map(raw: Any) -> None:
    if isinstance(raw, dict):
        raw = [raw]
    check(raw)
