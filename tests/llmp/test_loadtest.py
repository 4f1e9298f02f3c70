"""`llmp loadtest` against a small OpenAI-compatible streaming server on 127.0.0.1 whose
delays and errors the test sets: the measured TTFT, inter-token latency and error count
match them, and the SLO decides the exit code."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from typer.testing import CliRunner

from llmp import loadtest as lt
from llmp.cli import app

API_KEY = "sk-test"


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 drops SYNs of a burst of connections

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.ttft_s = 0.15
        self.itl_s = 0.02
        self.tokens = 8
        self.error_every = 0  # every k-th request (1-based) answers 500
        self.count = 0
        self.lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.errors: list[BaseException] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that stops reading mid-stream (a run's deadline) breaks the handler's
        # pipe. socketserver would print the traceback to whatever sys.stderr is then,
        # which may be a later test's captured stderr: keep it here instead.
        error = sys.exc_info()[1]
        if error is not None:
            self.errors.append(error)

    def configure(self, **kw: Any) -> None:
        for k, v in kw.items():
            setattr(self, k, v)
        self.count = 0
        self.bodies.clear()
        self.paths.clear()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: FakeServer
    disable_nagle_algorithm = True  # each chunk leaves when written

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with srv.lock:
            srv.count += 1
            n = srv.count
            srv.bodies.append(body)
            srv.paths.append(self.path)
        if self.headers.get("Authorization") != f"Bearer {API_KEY}":
            self.send_error(401)
            return
        if srv.error_every and n % srv.error_every == 0:
            self.send_error(500)
            return
        chat = self.path.endswith("/chat/completions")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        time.sleep(srv.ttft_s)
        for i in range(srv.tokens):
            if i:
                time.sleep(srv.itl_s)
            choice = {"index": 0, "delta": {"content": f"t{i}"}} if chat else {"text": f"t{i}"}
            self._event({"id": "x", "choices": [choice]})
        self._event({"id": "x", "choices": [], "usage": {"completion_tokens": srv.tokens}})
        self.wfile.write(b"data: [DONE]\n\n")

    def _event(self, obj: dict[str, Any]) -> None:
        self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    srv = FakeServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(10)


@pytest.fixture
def fake(server: FakeServer) -> FakeServer:
    server.configure(ttft_s=0.15, itl_s=0.02, tokens=8, error_every=0)
    return server


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["loadtest", *args])


def report_of(result: Any) -> dict[str, Any]:
    return json.loads(result.stdout)


def test_measures_the_servers_delays_and_errors(fake: FakeServer) -> None:
    fake.configure(error_every=4)
    result = invoke(
        fake.url,
        "--api-key",
        API_KEY,
        "--concurrency",
        "4",
        "--requests",
        "16",
        "--max-tokens",
        "8",
        "--prompt-tokens",
        "5",
        "--model",
        "tiny",
        "--json",
    )
    assert result.exit_code == 0, result.output
    r = report_of(result)
    assert r["requests"] == 16 and fake.count == 16
    assert r["errors"] == 4 and r["error_kinds"] == {"HTTP 500": 4}
    assert r["error_rate"] == 0.25
    # TTFT: the server's 150 ms plus loopback and parsing overhead.
    assert 150 <= r["ttft_ms"]["p50"] < 200, r["ttft_ms"]
    assert 150 <= r["ttft_ms"]["p99"] < 250, r["ttft_ms"]
    assert 17 <= r["itl_ms"]["p50"] < 35, r["itl_ms"]
    assert r["output_tokens"] == 12 * 8  # from usage, successful requests only
    expected_latency = 150 + 7 * 20
    assert expected_latency <= r["latency_ms"]["p50"] < expected_latency + 60
    assert r["output_tokens_per_s"] == pytest.approx(96 / r["wall_s"], rel=0.02)
    body = fake.bodies[0]
    assert body["stream"] is True and body["model"] == "tiny" and body["max_tokens"] == 8
    assert body["prompt"] == "hello hello hello hello hello"
    assert set(fake.paths) == {"/v1/completions"}


def test_chat_endpoint_and_table(fake: FakeServer) -> None:
    fake.configure(ttft_s=0.05, itl_s=0.01, tokens=4)
    result = invoke(
        f"{fake.url}/v1", "--chat", "--api-key", API_KEY, "--requests", "3", "--concurrency", "2"
    )
    assert result.exit_code == 0, result.output
    assert set(fake.paths) == {"/v1/chat/completions"}
    assert fake.bodies[0]["messages"][0]["role"] == "user"
    for row in ("TTFT (ms)", "inter-token latency (ms)", "output tokens/s", "errors"):
        assert row in result.stdout


def test_slo_met_and_missed(fake: FakeServer) -> None:
    common = [fake.url, "--api-key", API_KEY, "--requests", "6", "--concurrency", "3", "--json"]
    fake.configure(ttft_s=0.1)
    assert invoke(*common, "--slo-ttft-p99", "400").exit_code == 0
    missed = invoke(*common, "--slo-ttft-p99", "50")
    assert missed.exit_code == 1
    assert missed.stderr.startswith("loadtest: SLO missed: TTFT p99")
    assert missed.stderr.count("\n") == 1

    fake.configure(ttft_s=0.01, error_every=3)  # 2 of 6 fail
    assert invoke(*common, "--slo-error-rate", "0.5").exit_code == 0
    missed = invoke(*common, "--slo-error-rate", "0.1")
    assert missed.exit_code == 1 and "error rate 0.3333 > 0.1" in missed.stderr


def test_every_request_failing_is_a_failure(fake: FakeServer) -> None:
    result = invoke(fake.url, "--api-key", "wrong", "--requests", "3", "--json")
    assert result.exit_code == 1
    assert report_of(result)["error_kinds"] == {"HTTP 401": 3}


def test_duration_bounds_the_run(fake: FakeServer) -> None:
    """--duration, not the default of 100 requests, ends the run: about 17 requests of
    70 ms fit in 0.6 s at concurrency 2."""
    fake.configure(ttft_s=0.05, itl_s=0.01, tokens=3)
    result = invoke(
        fake.url, "--api-key", API_KEY, "--duration", "0.6", "--concurrency", "2", "--json"
    )
    assert result.exit_code == 0, result.output
    r = report_of(result)
    assert 2 <= fake.count == r["requests"] < 100
    assert r["wall_s"] >= 0.6  # the tool kept sending until the duration was up


def test_a_trickling_server_is_cut_off_by_the_timeout(fake: FakeServer) -> None:
    fake.configure(ttft_s=0.05, itl_s=0.3, tokens=20)  # 6 s per request
    result = invoke(fake.url, "--api-key", API_KEY, "--requests", "2", "--timeout", "0.5")
    assert result.exit_code == 1  # both requests cut off: without the timeout they succeed
    assert "timeout: 2" in result.stdout


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ftp://host/v1"], "loadtest: not an http(s) URL"),
        (["http://"], "loadtest: not an http(s) URL"),
        (["http://127.0.0.1:99999"], "loadtest: bad port"),
        (["http://127.0.0.1:1", "--concurrency", "0"], "loadtest: --concurrency"),
        (["http://127.0.0.1:1", "--slo-error-rate", "2"], "loadtest: --slo-error-rate"),
        (["http://127.0.0.1:1", "--duration", "-1"], "loadtest: --duration"),
    ],
)
def test_bad_input_exits_2(args: list[str], message: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1


def test_unreachable_endpoint_exits_2() -> None:
    result = invoke(f"http://127.0.0.1:{_closed_port()}", "--requests", "1")
    assert result.exit_code == 2
    assert result.stderr.startswith("loadtest: cannot reach 127.0.0.1:")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("url", "chat", "want"),
    [
        ("http://h:8000", False, "http://h:8000/v1/completions"),
        ("http://h:8000/", True, "http://h:8000/v1/chat/completions"),
        ("https://h/v1", False, "https://h/v1/completions"),
        ("http://h/openai/v1/chat/completions", False, "http://h/openai/v1/chat/completions"),
    ],
)
def test_endpoint_url(url: str, chat: bool, want: str) -> None:
    assert lt.endpoint_url(url, chat) == want


def test_percentile_matches_linear_interpolation() -> None:
    assert lt.percentile([], 50) is None
    assert lt.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert lt.percentile([1.0, 2.0], 99) == pytest.approx(1.99)
