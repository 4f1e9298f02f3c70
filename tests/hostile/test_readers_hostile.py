"""Every file and answer the CLI reads, under a careless or hostile user: one reader
discipline (spec/readers.py), one class of hostile input per test, each answered with
one line and an exit code (2: bad input; 1: a server that fails), never a traceback.

Inputs are small: a hostile input must be refused quickly, and a test that needs a large
one to show it would be slow."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmp.loadtest import Options, endpoint_url, summarize
from llmp.loadtest.request import MAX_LINE_BYTES, one_request
from spec import readers
from spec.readers import ReadError
from tests.hostile.test_cli_hostile import assert_bad_input, invoke

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

DEEP_JSON = "[" * 5000 + "]" * 5000
DEEP_JSON_OBJECT = '{"a": ' * 100 + "1" + "}" * 100  # past MAX_DEPTH, within the parser
DEEP_YAML = "a: " + "[" * 200 + "]" * 200 + "\n"
HUGE_INT = "9" * 5000
ALIAS_BOMB = "".join(
    [
        "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
        *(
            f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n"
            for p, n in zip("abcdefgh", "bcdefghi", strict=False)
        ),
    ]
)


def one_line(result: Any, code: int = 2) -> str:
    if code == 2:
        return assert_bad_input(result)
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


# ---------------------------------------------------------------------------
# The discipline itself, fuzzed: a value or a ReadError, nothing else
# ---------------------------------------------------------------------------

JSONISH = st.text(alphabet='[]{}",:0123456789.-eE \n\\atrufnl\x00\x1b\u202e', max_size=200)


@FUZZ
@given(JSONISH)
def test_parse_json_of_anything_is_a_value_or_one_line(text: str) -> None:
    try:
        readers.parse_json(text, "x.json")
    except ReadError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("x.json: ")


YAMLISH = st.text(alphabet="[]{}&*!|>-:?#'\"%@`, \n\t0123456789abc<\x00\x1b", max_size=200)


@FUZZ
@given(YAMLISH)
def test_parse_yaml_of_anything_is_a_value_or_one_line(text: str) -> None:
    try:
        readers.parse_yaml(text, "x.yaml")
    except ReadError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("x.yaml: ")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (DEEP_JSON, "JSON nested too deeply (more than 64 levels)"),
        (DEEP_JSON_OBJECT, "JSON nested too deeply (more than 64 levels)"),
        (f'{{"a": {HUGE_INT}}}', "not accepted JSON: a number of 5000 characters"),
        (f'{{"a": 1.{HUGE_INT}}}', "not accepted JSON: a number of 5002 characters"),
        ('{"tenant": "chat", "tenant": "code"}', "not accepted JSON: duplicate key 'tenant'"),
        ("{not json", "not JSON: line 1, column 2: "),
    ],
    ids=["deep-list", "deep-object", "huge-int", "huge-float", "duplicate-key", "not-json"],
)
def test_json_refusals_are_one_line(text: str, problem: str) -> None:
    with pytest.raises(ReadError) as exc:
        readers.parse_json(text, "f.json")
    assert str(exc.value).startswith(f"f.json: {problem}"), str(exc.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (DEEP_YAML, "not accepted YAML (line 1, column "),
        (f"a: {HUGE_INT}\n", "not accepted YAML (line 1, column 4: a number of 5000"),
        ("tenant: chat\ntenant: code\n", "duplicate key 'tenant' at line 2 (first at line 1)"),
        (ALIAS_BOMB, "not accepted YAML (line "),
        ("a: &a [1]\n" + "".join(f"b{i}: *a\n" for i in range(101)), "more than 100 aliases"),
    ],
    ids=["deep", "huge-int", "duplicate-key", "alias-bomb", "many-aliases"],
)
def test_yaml_refusals_are_one_line(text: str, problem: str) -> None:
    with pytest.raises(ReadError) as exc:
        readers.parse_yaml(text, "f.yaml")
    assert problem in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_a_few_aliases_and_merge_keys_are_still_read() -> None:
    doc = readers.parse_yaml("a: &a {x: 1}\nb: {<<: *a, x: 2}\nc: [*a, *a]\n", "f.yaml")
    assert doc == {"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 1}]}


def test_a_file_past_its_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"a: 1\n" * 100)
    with pytest.raises(ReadError, match="larger than 100 bytes; give a smaller file"):
        readers.read_bytes(path, max_bytes=100)


def test_visible_escapes_control_and_bidi_characters() -> None:
    assert readers.visible("ip-1\x1b[2J\u202egnp.exe") == "ip-1\\x1b[2J\\u202egnp.exe"
    assert readers.summary([f"n{i}" for i in range(12)], 3) == "n0, n1, n2 and 9 more"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:hunter2@host:8000/v1", "http://***@host:8000/v1"),
        ("https://h/x?api_key=hunter2&a=1", "https://h/x?api_key=***&a=1"),
        ("http://a@b@host/p@q", "http://***@host/p@q"),
        ("http://host:8000", "http://host:8000"),
    ],
)
def test_credentials_in_a_url_are_redacted(url: str, shown: str) -> None:
    assert readers.redact_url(url) == shown


# ---------------------------------------------------------------------------
# Job files (`llmp job submit`)
# ---------------------------------------------------------------------------

JOB_FILES = {
    "deep": (DEEP_YAML, "not accepted YAML (line 1, column"),
    "huge-int": (f"name: x\nsteps: {HUGE_INT}\n", "a number of 5000 characters"),
    "duplicate-key": (
        "name: x\ntenant: chat\ntenant: code\n",
        "duplicate key 'tenant' at line 3 (first at line 2)",
    ),
    "alias-bomb": (ALIAS_BOMB, "not accepted YAML (line"),
    "not-utf8": (b"name: \xff\n", "not UTF-8 text (line 1, column 7: byte 0xff)"),
}


@pytest.mark.parametrize("case", sorted(JOB_FILES))
def test_a_hostile_job_file_is_one_line_naming_it(tmp_path: Path, case: str) -> None:
    text, problem = JOB_FILES[case]
    path = tmp_path / "job.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    line = one_line(invoke("job", "submit", str(path), "--dry-run"))
    assert line.startswith(f"job file {path}: ") and problem in line, line


@FUZZ
@given(YAMLISH)
def test_a_job_file_of_anything_is_a_job_or_one_line(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    from llmp.jobs.checks import JobFileError, load_job_file

    path = tmp_path_factory.mktemp("job") / "job.yaml"
    path.write_text(text)
    try:
        load_job_file(str(path))
    except JobFileError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(f"job file {path}")


def test_a_json_job_file_with_a_key_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text('{"name": "x", "tenant": "chat", "tenant": "code"}')
    line = one_line(invoke("job", "submit", str(path), "--dry-run"))
    assert "duplicate key 'tenant'" in line, line


# ---------------------------------------------------------------------------
# Step times and evidence (`llmp stragglers`)
# ---------------------------------------------------------------------------


def _trace(tmp_path: Path, lines: list[str], name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


GOOD_ROWS = [
    json.dumps({"step": s, "rank": r, "node": f"n{r // 2}", "seconds": 1.0 + (r == 3) * 0.5})
    for s in range(3)
    for r in range(4)
]

STEP_TIMES = {
    # A rank written "0" sends the file to the line-by-line reader (pyarrow's typed columns
    # refuse it), which parses every field, the deep one too.
    "deep": (
        json.dumps({"step": 1, "rank": "0", "seconds": 1}).replace("}", f', "x": {DEEP_JSON}}}'),
        ":2: JSON nested too deeply",
    ),
    "huge-int": (
        f'{{"step": {HUGE_INT}, "rank": 0, "seconds": 1}}',
        ":2: not accepted JSON: a number of 5000",
    ),
    "duplicate-key": (
        '{"step": 1, "rank": 0, "seconds": 1, "seconds": 9}',
        ":2: not accepted JSON: duplicate key 'seconds'",
    ),
    "long-value": (
        '{"step": 1, "rank": 0, "seconds": "' + "x" * 5000 + '"}',
        "'seconds' is not a float: 'xxxxxxxx",
    ),
    "ansi-node": (
        '{"step": 1, "rank": 0, "node": "ip-1\\u001b[2J", "seconds": 1}',
        "node ip-1\\x1b[2J holds the character \\x1b: a node name is printable text",
    ),
    "bidi-node": (
        '{"step": 1, "rank": 0, "node": "ip-1\\u202egnp", "seconds": 1}',
        "holds the character \\u202e",
    ),
}


@pytest.mark.parametrize("case", sorted(STEP_TIMES))
def test_hostile_step_times_are_one_line_naming_the_line(tmp_path: Path, case: str) -> None:
    bad, problem = STEP_TIMES[case]
    path = _trace(tmp_path, [GOOD_ROWS[0], bad, *GOOD_ROWS[1:]])
    line = one_line(invoke("stragglers", str(path)))
    assert line.startswith(f"stragglers: {path}") and problem in line, line
    assert len(line) < 400, line


@FUZZ
@given(st.lists(JSONISH, min_size=1, max_size=4))
def test_step_time_lines_of_anything_are_a_report_or_one_line(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str]
) -> None:
    from workloads.diagnosis import stragglers as sa

    path = _trace(tmp_path_factory.mktemp("fuzz"), [GOOD_ROWS[0], *lines])
    try:
        sa.analyse(sa.read_file(path))
    except sa.BadInput as exc:
        assert "\n" not in str(exc)


def test_markup_in_a_node_name_is_printed_as_text(tmp_path: Path) -> None:
    rows = [row.replace('"n1"', '"[bold red]n1[/]"') for row in GOOD_ROWS]
    result = invoke("stragglers", str(_trace(tmp_path, rows)))
    assert result.exit_code == 0, result.output
    assert "[bold red]n1[/]" in result.stdout


def test_a_sparse_trace_takes_memory_of_its_rows_not_of_its_grid(tmp_path: Path) -> None:
    """3,000 rows, each its own step and rank far apart: a dense grid would be 3,000 x 3,000
    cells (72 MB of float64 per matrix, several matrices); the analysis needs a few MB."""
    from workloads.diagnosis import stragglers as sa

    rows = [
        json.dumps(
            {
                "step": i * 7919,
                "rank": (i * 104729) % 10**9,
                "node": f"n{i % 40}",
                "seconds": 1.0 + (i % 5) / 10,
                "compute_s": 0.5,
            }
        )
        for i in range(3000)
    ]
    path = _trace(tmp_path, rows)
    tracemalloc.start()
    try:
        report = sa.analyse(sa.read_file(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (report.steps, report.ranks) == (3000, 3000)
    assert peak < 40 * 2**20, peak


def test_the_sparse_analysis_is_the_dense_one_block_by_block(tmp_path: Path) -> None:
    """Blocks of steps give the same report as one block (the dense path)."""
    from workloads.diagnosis import stragglers as sa

    rows = [
        {
            "step": s,
            "rank": r,
            "node": f"n{r // 3}",
            "seconds": 1 + ((s * 7 + r * 3) % 11) / 20,
            "compute_s": 0.5 + (r == 4) * 0.3,
            "collective_s": 0.2,
        }
        for s in range(12)
        for r in range(9)
        if (s + r) % 4
    ]
    trace = sa.Trace.from_columns(
        [x["step"] for x in rows],
        [x["rank"] for x in rows],
        [x["seconds"] for x in rows],
        [x["node"] for x in rows],
        {p: [x.get(f"{p}_s") for x in rows] for p in ("compute", "collective")},
    )
    whole = sa.analyse(trace, explain=5).as_dict()
    for k in (1, 5):

        def blocks(t: Any, k: int = k) -> Iterator[tuple[int, int]]:
            return ((a, min(a + k, t.n_steps)) for a in range(0, t.n_steps, k))

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(sa, "_blocks", blocks)
            assert _close(sa.analyse(trace, explain=5).as_dict(), whole)


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return abs(a - b) <= 1e-6 * max(1.0, abs(a))
    return bool(a == b)


EVIDENCE = {
    "deep": (DEEP_JSON, "JSON nested too deeply"),
    "huge-int": (f'{{"n0": {{"m": {HUGE_INT}}}}}', "a number of 5000 characters"),
    "duplicate-key": ('{"n0": {"m": 1}, "n0": {"m": 2}}', "duplicate key 'n0'"),
    "ansi-metric": ('{"n0": {"m\\u001b[31m": 1}}', "n0.m\\x1b[31m: a metric name holds"),
    "long-value": ('{"n0": {"m": "' + "x" * 5000 + '"}}', "n0.m: not a number: 'xxx"),
}


@FUZZ
@given(JSONISH)
def test_evidence_of_anything_is_metrics_or_one_line(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    from workloads.diagnosis.evidence import read_evidence
    from workloads.diagnosis.trace import BadInput

    path = tmp_path_factory.mktemp("evidence") / "evidence.json"
    path.write_text(text)
    try:
        read_evidence(path)
    except BadInput as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))


def test_a_csv_column_named_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("step,rank,seconds,seconds\n1,0,1.0,9.0\n")
    line = one_line(invoke("stragglers", str(path)))
    assert line == f"stragglers: {path}:1: column 'seconds' is named twice in the header; keep one"


@pytest.mark.parametrize("case", sorted(EVIDENCE))
def test_hostile_evidence_is_one_line(tmp_path: Path, case: str) -> None:
    text, problem = EVIDENCE[case]
    evidence = tmp_path / "evidence.json"
    evidence.write_text(text)
    trace = _trace(tmp_path, GOOD_ROWS)
    line = one_line(invoke("stragglers", str(trace), "--evidence", str(evidence)))
    assert line.startswith(f"stragglers: {evidence}") and problem in line, line
    assert len(line) < 400, line


# ---------------------------------------------------------------------------
# Prometheus (`llmp stragglers --prometheus`, `llmp canary`)
# ---------------------------------------------------------------------------


class _Answer(http.server.BaseHTTPRequestHandler):
    body: bytes = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(type(self).body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[type[_Answer]]:
    handler = type("Handler", (_Answer,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


def _matrix(values: Any) -> bytes:
    series = {"metric": {"namespace": "a", "job": "b", "rank": "0"}, "values": values}
    return json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": [series]}}
    ).encode()


PROMETHEUS = {
    "deep": (
        b'{"status": "success", "data": ' + DEEP_JSON.encode() + b"}",
        1,
        "the answer is JSON nested too deeply",
    ),
    "huge-int": (
        b'{"status": "success", "data": {"x": ' + HUGE_INT.encode() + b"}}",
        1,
        "a number of 5000",
    ),
    "duplicate-key": (b'{"status": "success", "status": "error"}', 1, "duplicate key 'status'"),
    "not-json": (b"<html>", 1, "the answer is not JSON: line 1, column 1"),
    "bad-value": (
        _matrix([[1, {"x": 1}]]),
        2,
        "llmp_train_step_seconds of rank 0: {'x': 1} is not a number",
    ),
    "bad-sample": (_matrix([[1, 2, 3]]), 2, "a sample that is no [time, value] pair: [1, 2, 3]"),
    "values-not-a-list": (_matrix(7), 2, "values that are no list of [time, value] pairs: 7"),
    "result-not-a-list": (
        b'{"status": "success", "data": {"resultType": "matrix", "result": 5}}',
        1,
        "a result that is no list of series",
    ),
}


@pytest.mark.parametrize("case", sorted(PROMETHEUS))
def test_a_hostile_prometheus_answer_is_one_line(prometheus: type[_Answer], case: str) -> None:
    body, code, problem = PROMETHEUS[case]
    prometheus.body = body
    url = prometheus.url  # type: ignore[attr-defined]
    result = invoke("stragglers", "--prometheus", url, "--namespace", "a", "--job", "b")
    line = one_line(result, code)
    assert line.startswith("stragglers: ") and problem in line, line


def test_a_prometheus_answer_past_its_cap_is_refused(prometheus: type[_Answer]) -> None:
    from workloads.diagnosis import prometheus as p

    prometheus.body = b'{"status": "success", "data": {"x": "' + b"y" * 10_000 + b'"}}'
    with pytest.raises(p.SourceUnavailable, match="the answer is larger than"):
        p.query(prometheus.url, "query", {"query": "up"}, max_bytes=1000)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "url", ["http://[::1", "http://user:pw@[::1:9090", "http://" + "a" * 300 + ":9090"]
)
def test_a_malformed_prometheus_url_is_one_line(url: str) -> None:
    line = one_line(invoke("stragglers", "--prometheus", url, "--namespace", "a", "--job", "b"))
    assert "pw" not in line, line


CANARY_SAMPLES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@FUZZ
@given(CANARY_SAMPLES)
def test_the_canarys_reading_of_any_answer_is_a_value_or_one_line(data: Any) -> None:
    from llmp.serving.canary import _scalar
    from spec.promql import ImpossibleValue

    for answer in (data, {"resultType": "vector", "result": [{"value": data}]}):
        try:
            _scalar(answer if isinstance(answer, dict) else {"result": answer}, "q")
        except ImpossibleValue as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 400


# ---------------------------------------------------------------------------
# The load test's URLs and streams (`llmp loadtest`)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://[::1", "not a URL: http://[::1 (Invalid IPv6 URL)"),
        ("http://" + "a" * 300 + ":8000", "300 characters; a host name has at most 253"),
        ("http://" + "a" * 70 + ".com", "a label (between dots) of over 63 characters"),
        ("http://u:hunter2@h:99999", "bad port in URL: http://***@h:99999"),
    ],
    ids=["ipv6", "long-host", "long-label", "port-with-password"],
)
def test_a_malformed_loadtest_url_is_one_line(url: str, problem: str) -> None:
    line = one_line(invoke("loadtest", url, "--requests", "1"))
    assert problem in line and "hunter2" not in line, line


def test_a_password_in_the_url_is_not_in_the_report() -> None:
    report = summarize(Options(url="x"), "http://u:hunter2@h:8000/v1/completions", [], 1.0)
    assert report.url == "http://***@h:8000/v1/completions"
    assert "hunter2" not in json.dumps(report.to_dict())
    assert endpoint_url("http://u:hunter2@h:8000", False).startswith("http://u:hunter2@")


def _stream(body: bytes) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body)

    async def go() -> Any:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await one_request(client, "http://h/v1/completions", {}, chat=True)

    return asyncio.run(go())


@pytest.mark.parametrize(
    "chunk",
    [
        DEEP_JSON,
        f'{{"usage": {{"completion_tokens": {HUGE_INT}}}}}',
        '{"choices": ["text"]}',
        '{"choices": 5}',
        '{"choices": [{"delta": "x"}]}',
        '{"choices": [{"delta": {"content": ["x"]}}]}',
        '{"choices": [], "choices": []}',
        "[1, 2]",
    ],
    ids=[
        "deep",
        "huge-int",
        "choice-string",
        "choices-int",
        "delta-string",
        "content-list",
        "duplicate-key",
        "not-an-object",
    ],
)
def test_a_malformed_stream_chunk_is_an_error_sample(chunk: str) -> None:
    sample = _stream(f"data: {chunk}\n\ndata: [DONE]\n\n".encode())
    assert not sample.ok and sample.error == "bad SSE payload"


def test_a_stream_line_past_its_cap_is_an_error_not_memory() -> None:
    sample = _stream(b"data: " + b"x" * (MAX_LINE_BYTES + 10))
    assert not sample.ok and sample.error == "SSE line too long"


@FUZZ
@given(st.lists(JSONISH, max_size=4))
def test_any_stream_is_a_sample(chunks: list[str]) -> None:
    body = "".join(f"data: {c}\n\n" for c in chunks) + "data: [DONE]\n\n"
    sample = _stream(body.encode())
    assert sample.ok or sample.error


# ---------------------------------------------------------------------------
# Stack files, plans, outputs, gates: the same discipline
# ---------------------------------------------------------------------------


def test_an_alias_bomb_under_pulumi_in_a_stack_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    body = "".join("    " + line for line in ALIAS_BOMB.splitlines(keepends=True))
    path.write_text("config:\n  pulumi:x:\n" + body)
    line = one_line(invoke("synth", "x", "--config", str(path), "--out", str(tmp_path / "o")))
    assert line.startswith(f"config error: {path}: not accepted YAML (line "), line
    assert "alias" in line


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"resources": [], "resources": []}', "duplicate key 'resources'"),
        (f'{{"resources": [], "x": {HUGE_INT}}}', "a number of 5000 characters"),
        (DEEP_JSON_OBJECT, "JSON nested too deeply"),
    ],
    ids=["duplicate-key", "huge-int", "deep"],
)
def test_a_hostile_plan_is_one_line(tmp_path: Path, text: str, problem: str) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(text)
    line = one_line(invoke("cost", "--plan", str(plan)))
    assert str(plan) in line and problem in line, line


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("tasks:\n  a: {acc: 0.5}\ntasks:\n  b: {acc: 0.5}\n", "duplicate key 'tasks'"),
        (ALIAS_BOMB, "not accepted YAML"),
        (DEEP_YAML, "not accepted YAML"),
    ],
    ids=["duplicate-key", "alias-bomb", "deep"],
)
def test_hostile_gates_are_one_line(tmp_path: Path, text: str, problem: str) -> None:
    from contracts.gates import ThresholdsError, load_thresholds

    path = tmp_path / "gates.yaml"
    path.write_text(text)
    with pytest.raises(ThresholdsError) as exc:
        load_thresholds(path)
    assert problem in str(exc.value) and "\n" not in str(exc.value)
