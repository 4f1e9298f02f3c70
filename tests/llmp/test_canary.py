"""`llmp canary`, end to end offline: the example stack's canary (examples/stacks/
Pulumi.serving-405b.yaml, llama-8b at 10%) judged by a real Prometheus (Debian's, started by
tests/monitoring/servers.py on 127.0.0.1) over request observations, then the stack file edited
(promote, rollback) or left alone (wait), and the edited file a valid stack again.

Observations (age in seconds, TTFT, inter-token latency) per namespace and Service become
vLLM's own histograms (`vllm:time_to_first_token_seconds`, `vllm:inter_token_latency_seconds`,
its bucket bounds, label `model_name`) as a scrape every 15 s over the last two hours would have
stored them, with the labels prometheus-operator gives each target (`namespace`, `service`,
`job`, `pod`), backfilled into the server's TSDB before it starts (promtool tsdb
create-blocks-from openmetrics): the judge's PromQL is evaluated by Prometheus itself, with its
extrapolation, its windows and its matching. A query for another model, another service or
another bucket finds other series, and one without a namespace sums every namespace's.

`tamper` is the one thing no real Prometheus does: a proxy in front of the real one makes the
answer to a query an impossible one (-3, NaN, two series), to show the judge refuses it; the
real server also gives a negative ratio on its own, from an exporter whose bucket exceeds its
count, and that is refused the same way.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from llmp.cli import app
from llmp.serving import canary as c
from spec.promql import string_literal
from spec.serving import ITL_BUCKETS, TTFT_BUCKETS
from spec.stackfile import load_config, load_stack_file
from tests.monitoring import servers

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/stacks/Pulumi.serving-405b.yaml"
STABLE_REV = "llama-3.1-8b-instruct/2026-10-01"
CANARY_REV = "llama-3.1-8b-instruct/2026-11-20"
SCRAPE_S = 15.0
HISTORY_S = 2 * 3600.0
"""What the server holds: the canary's window (1h) and more."""
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": (1, TTFT_BUCKETS),
    "vllm:inter_token_latency_seconds": (2, ITL_BUCKETS),
}
"""vLLM's histogram -> (its value's index in an Observation, its bucket bounds)."""

Observation = tuple[float, float, float]
"""(age in seconds, TTFT seconds, inter-token seconds)."""
Key = tuple[str, str, str]
"""(namespace, model_name, service)."""


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def history(observed: dict[Key, list[Observation]], now: float) -> str:
    """OpenMetrics of what Prometheus would have scraped from each revision's replicas every
    SCRAPE_S over HISTORY_S: cumulative buckets, count and sum of both histograms (an
    observation is counted from the first scrape at or after it)."""
    samples: dict[str, list[tuple[str, float, float]]] = {h: [] for h in HISTOGRAMS}
    ticks = [now - k * SCRAPE_S for k in range(int(HISTORY_S / SCRAPE_S), -1, -1)]
    for (namespace, model, service), seen in observed.items():
        labels = (
            f'namespace="{namespace}",service="{service}",job="{service}",'
            f'pod="{service}-0",model_name="{model}"'
        )
        for family, (index, bounds) in HISTOGRAMS.items():
            events = sorted((now - o[0], o[index]) for o in seen)
            at = [t for t, _ in events]
            for bound in (*bounds, float("inf")):
                within = [t for t, v in events if v <= bound]
                series = f'{family}_bucket{{{labels},le="{_le(bound)}"}}'
                samples[family] += [
                    (series, tick, float(bisect.bisect_right(within, tick))) for tick in ticks
                ]
            sums = [0.0]
            for _, v in events:
                sums.append(sums[-1] + v)
            for tick in ticks:
                n = bisect.bisect_right(at, tick)
                samples[family].append((f"{family}_count{{{labels}}}", tick, float(n)))
                samples[family].append((f"{family}_sum{{{labels}}}", tick, sums[n]))
    return servers.openmetrics({f: ("histogram", rows) for f, rows in samples.items()})


def tampering(tamper: dict[str, Any]) -> Callable[[str, dict[str, Any]], dict[str, Any]]:
    """An answer rewrite for servers.Proxy: `raw` (a list: that many series) instead of the
    real value for a query containing a text of `tamper`."""

    def answer(query: str, body: dict[str, Any]) -> dict[str, Any]:
        for text, raw in tamper.items():
            if text in query:
                raws = raw if isinstance(raw, list) else [raw]
                body["data"]["result"] = [{"metric": {}, "value": [0, r]} for r in raws]
        return body

    return answer


def asked(proxy: servers.Proxy) -> list[str]:
    """Every query the judge sent through the proxy."""
    return [q.get("query", [""])[0] for q in proxy.queries]


@contextlib.contextmanager
def real_prometheus(
    observations: dict[Any, list[Observation]],
    tamper: dict[str, Any] | None = None,
    tmp: Path | None = None,
    edit: Callable[[str], str] | None = None,
) -> Iterator[servers.Proxy]:
    """A real Prometheus holding `observations` by (model, service) of the stack's `serving`
    namespace, or by (namespace, model, service), behind a recording (and, given `tamper`,
    tampering) proxy: the proxy's `url` is what the judge is given. `edit` rewrites the
    history's OpenMetrics before it is backfilled (a broken exporter)."""
    binary, _, promtool = servers.binaries()
    held = {(k if len(k) == 3 else ("serving", *k)): v for k, v in observations.items()}
    with contextlib.ExitStack() as stack:
        workdir = tmp or Path(stack.enter_context(_tmpdir()))
        prometheus = servers.Prometheus(
            binary,
            workdir / "prom",
            history=(edit or str)(history(held, time.time())),
            promtool=promtool,
        )
        stack.callback(prometheus.stop)
        proxy = servers.Proxy(prometheus.url, answer=tampering(tamper or {}))
        stack.callback(proxy.stop)
        yield proxy


@contextlib.contextmanager
def _tmpdir() -> Iterator[str]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="canary-prom-") as d:
        yield d


def requests(n: int, *, slow: int = 0, ttft: float = 5.0, every: float = 10.0) -> list[Observation]:
    """`n` requests, one per `every` seconds back from now; the newest `slow` of them with
    a first token after `ttft` (good ones: 0.4 s, tokens 40 ms apart)."""
    return [(i * every, ttft if i < slow else 0.4, 0.04) for i in range(n)]


def run(url: str, stack_file: Path, *more: str) -> Any:
    head = ["canary", "serving-405b", "llama-8b", "--prometheus-url", url]
    return CliRunner().invoke(app, [*head, "--config", str(stack_file), *more])


@pytest.fixture
def stack_file(tmp_path: Path) -> Path:
    copy = tmp_path / "Pulumi.serving-405b.yaml"
    shutil.copy(EXAMPLE, copy)
    return copy


def changed_lines(before: Path, after: Path) -> list[tuple[str, str]]:
    old, new = before.read_text().splitlines(), after.read_text().splitlines()
    return [(a, b) for a, b in zip(old, new, strict=True) if a != b]


def model(path: Path) -> Any:
    cfg = load_config(load_stack_file(str(path)))
    assert cfg.serving is not None
    return next(m for m in cfg.serving.models if m.name == "llama-8b")


def test_a_healthy_canary_is_promoted(stack_file: Path) -> None:
    seen = {
        ("llama-8b", "llama-8b"): requests(3000),
        # One slow request, the newest: 1 in 300 over the hour (0.33x), 1 in 29 over the
        # last 5 minutes (3.45x: of the 30 requests, the window's first scrape is after the
        # oldest, so rate() sees 29): a rollback needs both windows over 2x.
        ("llama-8b", "llama-8b-canary"): requests(300, slow=1),
    }
    with real_prometheus(seen) as proxy:
        result = run(proxy.url, stack_file)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"promote: llama-8b canary {CANARY_REV} (10%): within 2x"
    assert lines[1] == "  ttft  canary 0.333x over 1h, 3.45x over 5m; stable 0x"
    assert lines[2] == "  itl   canary 0x over 1h, 0x over 5m; stable 0x"
    assert changed_lines(EXAMPLE, stack_file) == [
        (f"        revision: {STABLE_REV}", f"        revision: {CANARY_REV}"),
        ("          weight: 10", "          weight: 0"),
    ]
    m = model(stack_file)
    assert m.revision == CANARY_REV and m.live_canary is None


def test_a_canary_that_burns_its_budget_is_rolled_back(stack_file: Path) -> None:
    # 30 of the newest 300 requests (the last 5 minutes) over 2.5 s: 10% errors, a 10x burn
    # of a 99% objective over the hour and 33x over the short window; the stable is clean.
    seen = {
        ("llama-8b", "llama-8b"): requests(3000),
        ("llama-8b", "llama-8b-canary"): requests(300, slow=30),
    }
    with real_prometheus(seen) as proxy:
        result = run(proxy.url, stack_file)
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"rollback: llama-8b canary {CANARY_REV} (10%): ttft 10x > 2x"
    assert lines[1] == "  ttft  canary 10x over 1h, 100x over 5m; stable 0x"
    assert changed_lines(EXAMPLE, stack_file) == [("          weight: 10", "          weight: 0")]
    m = model(stack_file)
    assert m.revision == STABLE_REV and m.live_canary is None


def test_too_few_requests_waits_and_writes_nothing(stack_file: Path) -> None:
    seen = {("llama-8b", "llama-8b-canary"): requests(50, slow=50)}
    with real_prometheus(seen) as proxy:
        result = run(proxy.url, stack_file)
    assert result.exit_code == 3, result.output
    assert "wait: " in result.output and "50 requests, fewer than 200" in result.output
    assert stack_file.read_text() == EXAMPLE.read_text()


def test_a_burn_the_stable_shares_is_not_the_revisions(stack_file: Path) -> None:
    seen = {
        ("llama-8b", "llama-8b"): requests(3000, slow=300),
        ("llama-8b", "llama-8b-canary"): requests(300, slow=30),
    }
    with real_prometheus(seen) as proxy:
        result = run(proxy.url, stack_file)
    assert result.exit_code == 3, result.output
    assert "the stable burns as much" in result.output
    assert stack_file.read_text() == EXAMPLE.read_text()


def test_a_burn_that_stopped_is_neither_promoted_nor_rolled_back(stack_file: Path) -> None:
    # 30 slow requests, 30 to 40 minutes ago: 10x over the hour, none in the last 5 minutes.
    slow_then = [(1800 + i * 20.0, 5.0, 0.04) for i in range(30)]
    seen = {("llama-8b", "llama-8b-canary"): requests(270, every=6.0) + slow_then}
    with real_prometheus(seen) as proxy:
        result = run(proxy.url, stack_file, "--json")
    assert result.exit_code == 3, result.output
    out = json.loads(result.output)
    assert out["verdict"] == "wait" and out["changes"] == {} and not out["written"]
    ttft = next(s for s in out["slis"] if s["sli"] == "ttft")
    assert ttft["canary_burn"] == pytest.approx(10.0) and ttft["canary_short_burn"] == 0


def test_no_write_prints_the_change_and_leaves_the_file(stack_file: Path) -> None:
    seen = {("llama-8b", "llama-8b-canary"): requests(300)}
    with real_prometheus(seen) as proxy:
        result = run(proxy.url, stack_file, "--no-write")
    assert result.exit_code == 0, result.output
    assert "would change (--no-write)" in result.output
    assert f"+        revision: {CANARY_REV}" in result.output
    assert stack_file.read_text() == EXAMPLE.read_text()


def test_the_judge_asks_for_the_canarys_own_series() -> None:
    seen = {("llama-8b", "llama-8b-canary"): requests(300)}
    with real_prometheus(seen) as proxy:
        judgement = c.judge("serving-405b", proxy.url, "llama-8b", EXAMPLE)
    assert judgement.verdict == "promote"
    # Prometheus' increase() extrapolates to the window's ends: 300 requests read 300.04.
    assert judgement.requests == pytest.approx(300, abs=0.5)
    queries = asked(proxy)
    assert any('service="llama-8b-canary",le="2.5"}[5m]' in q for q in queries)
    assert any('service="llama-8b",le="0.1"}[1h]' in q for q in queries)
    # Every selector names the stack's serving namespace, the model and the Service.
    selectors = [sel for q in queries for sel in re.findall(r"\{[^}]*\}", q)]
    assert selectors and all(
        sel.startswith('{namespace="serving",model_name="llama-8b",service="llama-8b')
        for sel in selectors
    ), selectors
    assert judgement.namespace == "serving"


def test_a_tenants_series_of_the_same_service_are_not_counted(stack_file: Path) -> None:
    # The canary burns (10% slow over the last 5 minutes); a tenant's Service of the same
    # name in its own namespace reports 30000 good requests. Summed over namespaces the burn
    # would vanish (0.1%) and the canary would be promoted; the judge reads `serving` only.
    seen = {
        ("llama-8b", "llama-8b"): requests(3000),
        ("llama-8b", "llama-8b-canary"): requests(300, slow=30),
        ("tenant-b", "llama-8b", "llama-8b-canary"): requests(30000, every=0.1),
    }
    with real_prometheus(seen) as proxy:
        result = run(proxy.url, stack_file)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[0].startswith("rollback: ")
    assert "  300 canary requests in 1h" in result.output


def test_series_of_another_namespace_alone_are_no_canary_traffic(stack_file: Path) -> None:
    seen = {("tenant-b", "llama-8b", "llama-8b-canary"): requests(3000)}
    with real_prometheus(seen) as proxy:
        result = run(proxy.url, stack_file)
    assert result.exit_code == 3, result.output
    assert "0 requests, fewer than 200" in result.output
    assert stack_file.read_text() == EXAMPLE.read_text()


CANARY_TTFT_1H = 'service="llama-8b-canary",le="2.5"}[1h]'
REQUESTS = "sum(increase("


@pytest.mark.parametrize(
    ("query", "raw", "message"),
    [
        # The red team's Prometheus: an error ratio of -3 was a canary "within 2x".
        (CANARY_TTFT_1H, "-3", "llama-8b-canary ttft error ratio (1h): -3.0, not in [0, 1]"),
        (CANARY_TTFT_1H, "1.5", "llama-8b-canary ttft error ratio (1h): 1.5, not in [0, 1]"),
        (CANARY_TTFT_1H, "NaN", "llama-8b-canary ttft error ratio (1h): NaN, not a number"),
        (CANARY_TTFT_1H, "+Inf", "(1h): inf, not in [0, 1]"),
        (CANARY_TTFT_1H, "ok", "llama-8b-canary ttft error ratio (1h): 'ok' is not a number"),
        (CANARY_TTFT_1H, ["0.01", "0.02"], "(1h): 2 series, not one"),
        (REQUESTS, "-300", "llama-8b-canary requests (1h): -300.0, not >= 0"),
        (REQUESTS, "NaN", "llama-8b-canary requests (1h): NaN, not a number"),
        (REQUESTS, "+Inf", "llama-8b-canary requests (1h): inf, not >= 0"),
    ],
)
def test_an_impossible_answer_is_one_line_exit_2_and_nothing_written(
    stack_file: Path, query: str, raw: Any, message: str
) -> None:
    seen = {
        ("llama-8b", "llama-8b"): requests(3000),
        ("llama-8b", "llama-8b-canary"): requests(300),
    }
    with real_prometheus(seen, tamper={query: raw}) as proxy:
        result = run(proxy.url, stack_file)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # no traceback: the CLI's own exit
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("could not judge: "), lines
    assert message in lines[0] and len(lines[0]) <= 80, lines
    assert "promote" not in result.output
    assert stack_file.read_text() == EXAMPLE.read_text()


def test_a_broken_exporters_negative_ratio_from_the_real_server_is_refused(
    stack_file: Path,
) -> None:
    # An exporter whose TTFT _count is half its +Inf bucket (a double-counting bug): the real
    # server then computes 1 - good/total = -1 for the canary, which the judge refuses.
    def half_count(text: str) -> str:
        def halve(m: re.Match[str]) -> str:
            return f"{m.group(1)} {float(m.group(2)) / 2!r} {m.group(3)}"

        return re.sub(
            r'^(vllm:time_to_first_token_seconds_count\{[^}]*service="llama-8b-canary"[^}]*\}) '
            r"(\S+) (\S+)$",
            halve,
            text,
            flags=re.M,
        )

    seen = {
        ("llama-8b", "llama-8b"): requests(3000),
        ("llama-8b", "llama-8b-canary"): requests(300),
    }
    with real_prometheus(seen, edit=half_count) as proxy:
        result = run(proxy.url, stack_file)
    assert result.exit_code == 2, result.output
    [line] = result.output.splitlines()
    assert line.startswith("could not judge: llama-8b-canary ttft error ratio (")
    assert "-1.0, not in [0, 1]" in line, line
    assert stack_file.read_text() == EXAMPLE.read_text()


def test_rounding_just_outside_the_bounds_is_the_bound(stack_file: Path) -> None:
    seen = {
        ("llama-8b", "llama-8b"): requests(3000),
        ("llama-8b", "llama-8b-canary"): requests(300),
    }
    with real_prometheus(seen, tamper={CANARY_TTFT_1H: "-1e-12"}) as proxy:
        result = run(proxy.url, stack_file, "--json")
    assert result.exit_code == 0, result.output
    ttft = next(s for s in json.loads(result.output)["slis"] if s["sli"] == "ttft")
    assert ttft["canary_burn"] == 0


def test_a_hostile_model_name_stays_one_quoted_value() -> None:
    from monitoring import serving_slo

    name = 'm"} or vector(1) or x{a="'
    expr = serving_slo.revision_error_ratio(name, "svc", "ttft", 2.5, "1h", "serving")
    assert f"model_name={string_literal(name)}" in expr
    # Outside its string literals the query is the one it would be for a plain name.
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    plain = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr.replace(string_literal(name), '"m"'))
    assert bare == plain and bare.count("{") == 2


def test_unreachable_prometheus_and_no_canary_are_one_line_exit_2(stack_file: Path) -> None:
    result = run("http://127.0.0.1:9", stack_file)
    assert result.exit_code == 2
    assert result.output.count("\n") <= 1 and "could not judge: Prometheus" in result.output
    result = CliRunner().invoke(
        app, ["canary", "serving-405b", "llama-405b", "--config", str(stack_file)]
    )
    assert result.exit_code == 2
    assert "llama-405b has no canary with traffic" in result.output


def test_key_lines_find_the_items_own_keys_only() -> None:
    lines = EXAMPLE.read_text().splitlines(keepends=True)
    revision = c.key_line(lines, "llama-8b", ("revision",))
    canary_revision = c.key_line(lines, "llama-8b", ("canary", "revision"))
    assert revision is not None and canary_revision is not None
    assert lines[revision].strip() == f"revision: {STABLE_REV}"
    assert lines[canary_revision].strip() == f"revision: {CANARY_REV}"
    assert c.key_line(lines, "llama-405b", ("canary", "weight")) is None


def test_a_canary_written_before_the_revision_is_not_taken_for_it() -> None:
    text = """config:
  llm-platform:serving:
    models:
      - name: llama-8b
        canary:
          revision: new/2   # the canary's
          weight: 5
        revision: old/1
      - name: other
        revision: x/1
"""
    lines = text.splitlines(keepends=True)
    assert lines[c.key_line(lines, "llama-8b", ("revision",)) or 0].strip() == "revision: old/1"
    index = c.key_line(lines, "llama-8b", ("canary", "revision"))
    assert index is not None and "new/2" in lines[index]
    assert c.key_line(lines, "other", ("canary", "weight")) is None
