"""`llmp canary`, end to end offline: the example stack's canary (examples/stacks/
Pulumi.serving-405b.yaml, llama-8b at 10%) judged against a fake Prometheus on 127.0.0.1
that evaluates the judge's queries over request observations, then the stack file edited
(promote, rollback) or left alone (wait), and the edited file a valid stack again.

The fake holds, per namespace and Service (the `namespace` and `service` labels
prometheus-operator gives each target), observations (age in seconds, TTFT, inter-token
latency) and evaluates the three forms the judge sends: `sum(rate(<histogram>_bucket{...,le}
[w]))`, `sum(rate(<histogram>_count{...}[w]))`, `sum(increase(..._count{...}[w]))`, and
`1 - (A / (B > 0))` of two of them. A query for another model, another service or another
bucket than the one the SLO names finds other observations, and one without a namespace sums
every namespace's, as Prometheus would, so a wrong selector gives a wrong verdict. `tamper`
makes the answer to a query an impossible one (-3, NaN, two series): the judge refuses it.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from typer.testing import CliRunner

from llmp.cli import app
from llmp.serving import canary as c
from spec.promql import string_literal
from spec.stackfile import load_config, load_stack_file

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/stacks/Pulumi.serving-405b.yaml"
STABLE_REV = "llama-3.1-8b-instruct/2026-10-01"
CANARY_REV = "llama-3.1-8b-instruct/2026-11-20"
WINDOWS = {"5m": 300, "10m": 600, "30m": 1800, "1h": 3600, "2h": 7200, "6h": 21600}
METRICS = {"vllm:time_to_first_token_seconds": 1, "vllm:inter_token_latency_seconds": 2}
_SELECTOR = re.compile(
    r"sum\((?P<fn>rate|increase)\((?P<metric>[a-z_:]+?)_(?P<kind>bucket|count)"
    r"\{(?P<labels>[^}]*)\}\[(?P<window>\d+[mh])\]\)\)"
)

Observation = tuple[float, float, float]
"""(age in seconds, TTFT seconds, inter-token seconds)."""


class FakePrometheus(BaseHTTPRequestHandler):
    observations: dict[tuple[str, str, str], list[Observation]] = {}
    """(namespace, model_name, service) -> what its replicas observed."""
    queries: list[str] = []
    tamper: dict[str, Any] = {}
    """A text in the query -> the raw value answered instead (a list: that many series)."""

    def _term(self, m: re.Match[str]) -> float:
        labels = dict(re.findall(r'([a-z_]+)="([^"]*)"', m.group("labels")))
        window = WINDOWS[m.group("window")]
        seen = [
            o
            for (ns, model, service), observed in self.observations.items()
            if ns == labels.get("namespace", ns)
            and (model, service) == (labels.get("model_name"), labels.get("service"))
            for o in observed
        ]
        index = METRICS[m.group("metric")]
        values = [o[index] for o in seen if o[0] < window]
        if m.group("kind") == "bucket":
            values = [v for v in values if v <= float(labels["le"])]
        return len(values) / (window if m.group("fn") == "rate" else 1)

    def evaluate(self, query: str) -> float | None:
        terms = [self._term(m) for m in _SELECTOR.finditer(query)]
        if query.startswith("1 - (") and len(terms) == 2:
            good, total = terms
            return None if total == 0 else 1 - good / total
        if len(terms) == 1 and query == _SELECTOR.search(query).group(0):  # type: ignore[union-attr]
            return terms[0]
        raise ValueError(query)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path != "/api/v1/query":
            self.send_error(404)
            return
        query = parse_qs(url.query)["query"][0]
        type(self).queries.append(query)
        try:
            value = self.evaluate(query)
        except ValueError:
            self._send(400, {"status": "error", "error": f"cannot evaluate {query}"})
            return
        result = [] if value is None else [{"metric": {}, "value": [0, repr(value)]}]
        for text, raw in self.tamper.items():
            if text in query:
                raws = raw if isinstance(raw, list) else [raw]
                result = [{"metric": {}, "value": [0, r]} for r in raws]
        self._send(200, {"status": "success", "data": {"resultType": "vector", "result": result}})

    def _send(self, code: int, body: dict[str, Any]) -> None:
        payload = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def fake_prometheus(
    observations: dict[Any, list[Observation]], tamper: dict[str, Any] | None = None
) -> Iterator[str]:
    """`observations` by (model, service) of the stack's `serving` namespace, or by
    (namespace, model, service)."""
    held = {(k if len(k) == 3 else ("serving", *k)): v for k, v in observations.items()}
    attrs = {"observations": held, "queries": [], "tamper": tamper or {}}
    handler = type("Handler", (FakePrometheus,), attrs)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


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
        # One slow request, the newest: 1 in 300 over the hour (0.33x), 1 in 30 over the
        # last 5 minutes (3.3x): a rollback needs both windows over 2x.
        ("llama-8b", "llama-8b-canary"): requests(300, slow=1),
    }
    with fake_prometheus(seen) as url:
        result = run(url, stack_file)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"promote: llama-8b canary {CANARY_REV} (10%): within 2x"
    assert lines[1] == "  ttft  canary 0.333x over 1h, 3.33x over 5m; stable 0x"
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
    with fake_prometheus(seen) as url:
        result = run(url, stack_file)
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"rollback: llama-8b canary {CANARY_REV} (10%): ttft 10x > 2x"
    assert lines[1] == "  ttft  canary 10x over 1h, 100x over 5m; stable 0x"
    assert changed_lines(EXAMPLE, stack_file) == [("          weight: 10", "          weight: 0")]
    m = model(stack_file)
    assert m.revision == STABLE_REV and m.live_canary is None


def test_too_few_requests_waits_and_writes_nothing(stack_file: Path) -> None:
    seen = {("llama-8b", "llama-8b-canary"): requests(50, slow=50)}
    with fake_prometheus(seen) as url:
        result = run(url, stack_file)
    assert result.exit_code == 3, result.output
    assert "wait: " in result.output and "50 requests, fewer than 200" in result.output
    assert stack_file.read_text() == EXAMPLE.read_text()


def test_a_burn_the_stable_shares_is_not_the_revisions(stack_file: Path) -> None:
    seen = {
        ("llama-8b", "llama-8b"): requests(3000, slow=300),
        ("llama-8b", "llama-8b-canary"): requests(300, slow=30),
    }
    with fake_prometheus(seen) as url:
        result = run(url, stack_file)
    assert result.exit_code == 3, result.output
    assert "the stable burns as much" in result.output
    assert stack_file.read_text() == EXAMPLE.read_text()


def test_a_burn_that_stopped_is_neither_promoted_nor_rolled_back(stack_file: Path) -> None:
    # 30 slow requests, 30 to 40 minutes ago: 10x over the hour, none in the last 5 minutes.
    slow_then = [(1800 + i * 20.0, 5.0, 0.04) for i in range(30)]
    seen = {("llama-8b", "llama-8b-canary"): requests(270, every=6.0) + slow_then}
    with fake_prometheus(seen) as url:
        result = run(url, stack_file, "--json")
    assert result.exit_code == 3, result.output
    out = json.loads(result.output)
    assert out["verdict"] == "wait" and out["changes"] == {} and not out["written"]
    ttft = next(s for s in out["slis"] if s["sli"] == "ttft")
    assert ttft["canary_burn"] == pytest.approx(10.0) and ttft["canary_short_burn"] == 0


def test_no_write_prints_the_change_and_leaves_the_file(stack_file: Path) -> None:
    seen = {("llama-8b", "llama-8b-canary"): requests(300)}
    with fake_prometheus(seen) as url:
        result = run(url, stack_file, "--no-write")
    assert result.exit_code == 0, result.output
    assert "would change (--no-write)" in result.output
    assert f"+        revision: {CANARY_REV}" in result.output
    assert stack_file.read_text() == EXAMPLE.read_text()


def test_the_judge_asks_for_the_canarys_own_series() -> None:
    seen = {("llama-8b", "llama-8b-canary"): requests(300)}
    with fake_prometheus(seen) as url:
        judgement = c.judge("serving-405b", url, "llama-8b", EXAMPLE)
        handler = FakePrometheus.__subclasses__()[-1]
    assert judgement.verdict == "promote"
    assert judgement.requests == 300
    queries = handler.queries
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
    with fake_prometheus(seen) as url:
        result = run(url, stack_file)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[0].startswith("rollback: ")
    assert "  300 canary requests in 1h" in result.output


def test_series_of_another_namespace_alone_are_no_canary_traffic(stack_file: Path) -> None:
    seen = {("tenant-b", "llama-8b", "llama-8b-canary"): requests(3000)}
    with fake_prometheus(seen) as url:
        result = run(url, stack_file)
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
    with fake_prometheus(seen, tamper={query: raw}) as url:
        result = run(url, stack_file)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # no traceback: the CLI's own exit
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("could not judge: "), lines
    assert message in lines[0] and len(lines[0]) <= 80, lines
    assert "promote" not in result.output
    assert stack_file.read_text() == EXAMPLE.read_text()


def test_rounding_just_outside_the_bounds_is_the_bound(stack_file: Path) -> None:
    seen = {
        ("llama-8b", "llama-8b"): requests(3000),
        ("llama-8b", "llama-8b-canary"): requests(300),
    }
    with fake_prometheus(seen, tamper={CANARY_TTFT_1H: "-1e-12"}) as url:
        result = run(url, stack_file, "--json")
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
