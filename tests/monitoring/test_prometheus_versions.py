"""The rules mean the same on the Prometheus the tests run (Debian's 2.42) and the v3 the stack
deploys: what changed between them that could touch a rule, held off for every expression the
platform renders (docs/monitoring.md lists the differences).

- v3 normalizes classic histograms' `le` (and summaries' `quantile`) to a float's text at
  ingestion (`1` becomes `1.0`); 2.42 keeps what the exporter wrote (vLLM's Python client:
  `repr(float)`, `1.0`). A matcher in float text matches on both.
- v3's range selectors are left-open (a sample exactly `range` old is out; 2.42 counts it):
  every window holds at least 4 of the stack's 30 s scrapes, so one sample more or less at the
  edge moves no rule over a threshold by itself.
- v3's regex `.` also matches a newline: no PromQL regex of ours has a `.` (alternations of
  literals only), so both match the same values.
- v3 allows any UTF-8 name in quotes (`{"a.b"}`), 2.42 refuses the syntax: every name is a
  legacy one and no selector is quoted.
- v3 renamed `holt_winters` (to the experimental `double_exponential_smoothing`): not used.
"""

from __future__ import annotations

import re

import pytest

from monitoring import rules, serving_slo
from spec.monitoring import AlertThresholds, duration_seconds

SCRAPE_S = 30
"""The stack's scrape interval (kube-prometheus-stack's default, the monitors' `interval`)."""
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')


def expressions() -> list[str]:
    groups = [g for gs in rules.rule_files(AlertThresholds()).values() for g in gs]
    groups += serving_slo.rule_groups(serving_slo.committed_stack())
    return [r.expr for g in groups for r in g.rules]


EXPRS = expressions()


def v3_float_text(value: float) -> str:
    """A float as v3 writes a normalized `le`: Go's shortest 'g' form, `.0` on an integer."""
    if value == float("inf"):
        return "+Inf"
    text = repr(value)
    return text if any(c in text for c in ".e") or "inf" in text else text + ".0"


def test_every_le_matcher_is_a_floats_text_on_both_versions() -> None:
    found = [le for e in EXPRS for le in re.findall(r'\ble="([^"]*)"', e)]
    assert found, "the SLO rules match buckets"
    for le in found:
        assert le == v3_float_text(float(le)) == repr(float(le)), le


@pytest.mark.parametrize("target", [0.1, 0.25, 1, 2.5, 5, 10, 20])
def test_the_bucket_label_of_a_whole_target_is_written_as_a_float(target: float) -> None:
    assert serving_slo.bucket_label(target) == v3_float_text(float(target))


def test_every_range_holds_at_least_four_scrapes() -> None:
    ranges = [r for e in EXPRS for r in re.findall(r"\[(\d+[smhdw])\]", _STRINGS.sub('""', e))]
    assert ranges
    assert min(duration_seconds(r) for r in ranges if not r.endswith("d")) >= 4 * SCRAPE_S


def test_no_promql_regex_has_a_dot_and_no_name_is_quoted() -> None:
    for e in EXPRS:
        for pattern in re.findall(r'=~"((?:[^"\\]|\\.)*)"|!~"((?:[^"\\]|\\.)*)"', e):
            text = "".join(pattern)
            assert "." not in text, (text, e)
            assert re.fullmatch(r"[A-Za-z0-9_|-]*", text), (text, e)
        assert not re.search(r'\{\s*"', e), e  # v3's quoted-name syntax


def test_no_function_v3_renamed() -> None:
    assert not [e for e in EXPRS if "holt_winters" in e]
