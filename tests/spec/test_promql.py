"""spec/promql.py: label values become PromQL string literals that Prometheus reads back as the
same value, whatever they hold; names are checked; impossible samples are refused."""

from __future__ import annotations

import ast
import math
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from spec.promql import (
    ImpossibleValue,
    checked,
    matchers,
    sample_value,
    selector,
    string_literal,
)
from tests.monitoring.test_rules import promtool

HOSTILE = [
    "plain",
    "",
    'a"} or vector(1) or x{job="b',
    "back\\slash\\",
    'quote"',
    "new\nline\ttab\rcr",
    "bell\x07 nul\x00 del\x7f c1\x85",
    "ünïcödé ✓ 日本",
    "${job} {{ $labels.job }}",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_literal_unquotes_to_the_value(value: str) -> None:
    literal = string_literal(value)
    assert literal.startswith('"') and literal.endswith('"')
    # Go's escapes, which PromQL unquotes, are Python's for these: the literal reads back.
    assert ast.literal_eval(literal) == value
    # Nothing of the value can end the string early or start a new line of the query.
    inner = literal[1:-1]
    assert "\n" not in inner and "\r" not in inner
    assert all(inner[i - 1] == "\\" for i, ch in enumerate(inner) if ch == '"')


def test_a_value_that_is_no_unicode_is_refused() -> None:
    with pytest.raises(ValueError, match="valid Unicode"):
        string_literal("a\ud800b")
    with pytest.raises(TypeError):
        string_literal(3)  # type: ignore[arg-type]


def test_matchers_and_selector() -> None:
    labels = {"namespace": "team-a", "job": 'x"y'}
    assert matchers(labels) == 'namespace="team-a",job="x\\"y"'
    assert selector("llmp_train_step_seconds", labels) == (
        'llmp_train_step_seconds{namespace="team-a",job="x\\"y"}'
    )
    assert selector("m", {"a": "1"}, 'le="2.5"') == 'm{a="1",le="2.5"}'
    assert selector("vllm:x_count", {}) == "vllm:x_count{}"
    for bad in ("job-name", "1st", 'job="x"', ""):
        with pytest.raises(ValueError, match="label name"):
            matchers({bad: "v"})
    with pytest.raises(ValueError, match="metric name"):
        selector("m{}", {})


def test_prometheus_matches_exactly_the_value(tmp_path: Path) -> None:
    """promtool evaluates a selector of each hostile value against series of that value and
    of near misses: exactly the series of that value matches."""
    tool = promtool()
    values = [v for v in HOSTILE if v]  # promtool's series notation needs a value
    series = []
    for i, v in enumerate(values):
        series.append(
            {"series": f"m{{i={string_literal(str(i))},v={string_literal(v)}}}", "values": "1x3"}
        )
        series.append(
            {
                "series": f"m{{i={string_literal(str(i))},v={string_literal(v + 'x')}}}",
                "values": "2x3",
            }
        )
    tests = [
        {
            "expr": f"count({selector('m', {'v': v})})",
            "eval_time": "1m",
            "exp_samples": [{"labels": "{}", "value": 1}],
        }
        for v in values
    ]
    (tmp_path / "rules.yaml").write_text("groups: []\n")
    unit = tmp_path / "test.yaml"
    unit.write_text(
        yaml.safe_dump(
            {
                "rule_files": ["rules.yaml"],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}],
            },
            allow_unicode=True,
        )
    )
    result = subprocess.run(
        [tool, "test", "rules", unit.name], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_impossible_samples_are_refused() -> None:
    assert sample_value("0.25", "x") == 0.25
    assert math.isnan(sample_value("NaN", "x"))
    assert sample_value("+Inf", "x") == math.inf
    for raw in ("abc", None, [], True, {"v": 1}):
        with pytest.raises(ImpossibleValue, match="is not a number"):
            sample_value(raw, "the ratio")
    assert checked(0.5, "r", high=1) == 0.5
    for value in (-3.0, 1.5, math.nan, math.inf, -math.inf):
        with pytest.raises(ImpossibleValue) as exc:
            checked(value, "the error ratio", high=1)
        assert "\n" not in str(exc.value) and str(exc.value).endswith("not in [0, 1]")
    with pytest.raises(ImpossibleValue, match=re.escape("requests: -1.0, not >= 0")):
        checked(-1.0, "requests")
