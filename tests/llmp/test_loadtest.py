"""`llmp loadtest` against the fake vLLM (`tests.llmp.fake_vllm`) on 127.0.0.1, whose delays,
errors, concurrency guard and prefix cache the test sets: the measured TTFT, inter-token
latency, shed and error counts and prefix hits match them, and the SLO decides the exit
code."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from llmp import loadtest as lt
from llmp.cli import app
from llmp.loadtest import routing
from tests.llmp.fake_vllm import FakeInThread, FakeModel

API_KEY = "sk-test"
DEFAULTS: dict[str, Any] = {
    "ttft_s": 0.15, "itl_s": 0.02, "output_tokens": 8, "error_every": 0, "api_key": API_KEY,
    "max_num_seqs": 256, "shed_above": None, "prefill_s_per_token": 0.0,
}  # fmt: skip


class Fake:
    """One replica of the fake, reconfigured per test."""

    def __init__(self, threaded: FakeInThread) -> None:
        self.threaded = threaded

    def configure(self, **kw: Any) -> None:
        self.threaded.configure(**(DEFAULTS | kw))

    @property
    def url(self) -> str:
        return self.threaded.urls[0]

    @property
    def replica(self) -> Any:
        return self.threaded.replicas[0]

    @property
    def count(self) -> int:
        return int(self.replica.count)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return list(self.replica.bodies)

    @property
    def paths(self) -> list[str]:
        return list(self.replica.paths)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeInThread]:
    threaded = FakeInThread([FakeModel(), FakeModel(), FakeModel()])
    try:
        yield threaded
    finally:
        threaded.close()


@pytest.fixture
def fake(server: FakeInThread) -> Fake:
    f = Fake(server)
    f.configure()
    return f


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["loadtest", *args])


def report_of(result: Any) -> dict[str, Any]:
    return json.loads(result.stdout)


def test_measures_the_servers_delays_and_errors(fake: Fake) -> None:
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
    words = body["prompt"].split()
    assert len(words) == 5 and set(words) <= set(lt.VOCABULARY)
    assert set(fake.paths) == {"/v1/completions"}


def test_chat_endpoint_and_table(fake: Fake) -> None:
    fake.configure(ttft_s=0.05, itl_s=0.01, output_tokens=4)
    result = invoke(
        f"{fake.url}/v1", "--chat", "--api-key", API_KEY, "--requests", "3", "--concurrency", "2"
    )
    assert result.exit_code == 0, result.output
    assert set(fake.paths) == {"/v1/chat/completions"}
    assert fake.bodies[0]["messages"][0]["role"] == "user"
    for row in ("TTFT (ms)", "inter-token latency (ms)", "output tokens/s", "errors"):
        assert row in result.stdout


def test_slo_met_and_missed(fake: Fake) -> None:
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


def test_every_request_failing_is_a_failure(fake: Fake) -> None:
    result = invoke(fake.url, "--api-key", "wrong", "--requests", "3", "--json")
    assert result.exit_code == 1
    assert report_of(result)["error_kinds"] == {"HTTP 401": 3}


def test_duration_bounds_the_run(fake: Fake) -> None:
    """--duration, not the default of 100 requests, ends the run: about 17 requests of
    70 ms fit in 0.6 s at concurrency 2."""
    fake.configure(ttft_s=0.05, itl_s=0.01, output_tokens=3)
    result = invoke(
        fake.url, "--api-key", API_KEY, "--duration", "0.6", "--concurrency", "2", "--json"
    )
    assert result.exit_code == 0, result.output
    r = report_of(result)
    assert 2 <= fake.count == r["requests"] < 100
    assert r["wall_s"] >= 0.6  # the tool kept sending until the duration was up


def test_a_trickling_server_is_cut_off_by_the_timeout(fake: Fake) -> None:
    fake.configure(ttft_s=0.05, itl_s=0.3, output_tokens=20)  # 6 s per request
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


def _run(fake: Fake, *args: str) -> dict[str, Any]:
    result = invoke(fake.url, "--api-key", API_KEY, "--json", *args)
    assert result.exit_code in (0, 1), result.output
    return report_of(result)


def test_poisson_arrivals_at_a_rate_are_open_loop_and_reproducible(fake: Fake) -> None:
    """At 50/s with 0.2 s requests about 10 are in flight at once: a closed loop at the
    default concurrency 1 would take 6 s for 30 requests, the open loop about 0.8 s."""
    fake.configure(ttft_s=0.1, itl_s=0.01, output_tokens=10)
    r = _run(fake, "--rate", "50", "--requests", "30", "--max-tokens", "10")
    assert r["requests"] == 30 and r["errors"] == 0 and r["rate"] == 50
    assert r["arrival"] == "poisson" and r["concurrency"] is None
    arrivals = [rec.arrival for rec in fake.replica.records]
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert 0.01 < sum(gaps) / len(gaps) < 0.04  # 1/50 s on average
    assert max(gaps) > 2 * min(gaps)  # exponential gaps, not a metronome
    assert r["wall_s"] < 3

    first = [b["prompt"] for b in fake.bodies]
    fake.configure(ttft_s=0.01, itl_s=0.001, output_tokens=2)
    _run(fake, "--rate", "50", "--requests", "30", "--max-tokens", "2")
    assert sorted(b["prompt"] for b in fake.bodies) == sorted(first)  # same seed


def test_shedding_keeps_the_accepted_p99_down(fake: Fake) -> None:
    """12 clients on a replica that runs 2 at a time: without a guard they queue and the
    P99 TTFT is several service times; with shedding above 4 in flight, the excess is
    refused with 429 and the accepted requests wait at most one round."""
    fake.configure(ttft_s=0.05, itl_s=0.005, output_tokens=4, max_num_seqs=2)
    common = ["--concurrency", "12", "--requests", "48", "--max-tokens", "4"]
    queued = _run(fake, *common)
    assert queued["shed"] == 0 and queued["errors"] == 0 and queued["accepted"] == 48
    fake.configure(ttft_s=0.05, itl_s=0.005, output_tokens=4, max_num_seqs=2, shed_above=4)
    shed = _run(fake, *common)
    assert shed["shed"] > 0 and shed["error_kinds"] == {"HTTP 429": shed["shed"]}
    assert shed["accepted"] == 48 - shed["shed"]
    assert shed["ttft_ms"]["p99"] < queued["ttft_ms"]["p99"] / 1.5, (shed, queued)


def test_ttft_grows_with_the_queue_and_the_prompt(fake: Fake) -> None:
    fake.configure(ttft_s=0.02, itl_s=0.001, output_tokens=2, max_num_seqs=1)
    alone = _run(fake, "--concurrency", "1", "--requests", "4", "--max-tokens", "2")
    queued = _run(fake, "--concurrency", "4", "--requests", "8", "--max-tokens", "2")
    assert queued["ttft_ms"]["p99"] > 2.5 * alone["ttft_ms"]["p50"]
    fake.configure(ttft_s=0.02, itl_s=0.001, output_tokens=2, prefill_s_per_token=0.0002)
    long = _run(fake, "--requests", "3", "--prompt-tokens", "1000", "--max-tokens", "2")
    assert long["ttft_ms"]["p50"] >= 20 + 200  # 1000 tokens x 0.2 ms of prefill


def test_a_shared_prefix_hits_the_prefix_cache(fake: Fake) -> None:
    fake.configure(ttft_s=0.01, itl_s=0.001, output_tokens=2)
    plain = _run(fake, "--requests", "10", "--prompt-tokens", "80", "--max-tokens", "2")
    assert plain["prefix_hit_rate"] < 0.05
    fake.configure(ttft_s=0.01, itl_s=0.001, output_tokens=2)
    shared = _run(
        fake, "--requests", "10", "--prompt-tokens", "16", "--prefix-tokens", "64",
        "--max-tokens", "2",
    )  # fmt: skip
    # Each prompt is 64 shared + 16 own words; the 9 after the first find 64 cached.
    assert shared["prefix_hit_rate"] == pytest.approx(9 * 64 / (10 * 80))
    prompts = [b["prompt"].split() for b in fake.bodies]
    assert len({tuple(p[:64]) for p in prompts}) == 1 and len({tuple(p) for p in prompts}) == 10


def test_endpoint_picker_routes_a_prefix_back_to_its_replica(server: FakeInThread) -> None:
    server.configure(**(DEFAULTS | {"ttft_s": 0.01, "itl_s": 0.001, "output_tokens": 2}))
    common = [
        *server.urls, "--api-key", API_KEY, "--json", "--requests", "30", "--concurrency", "3",
        "--prompt-tokens", "16", "--prefix-tokens", "128", "--prefix-groups", "3",
        "--max-tokens", "2",
    ]  # fmt: skip
    rr = report_of(invoke(*common, "--routing", "round-robin"))
    assert rr["per_replica"] == [10, 10, 10] and rr["routing"] == "round-robin"
    server.configure(**(DEFAULTS | {"ttft_s": 0.01, "itl_s": 0.001, "output_tokens": 2}))
    epp = report_of(invoke(*common, "--routing", "endpoint-picker"))
    assert sum(epp["per_replica"]) == 30 and epp["routing"] == "endpoint-picker"
    # Round-robin spreads each prefix over all 3 caches (3 misses per prefix at best);
    # the picker sends a prefix where it went before (1 miss per prefix).
    assert epp["prefix_hit_rate"] > rr["prefix_hit_rate"]
    groups: dict[tuple[str, ...], set[int]] = {}
    for i, replica in enumerate(server.replicas):
        for body in replica.bodies:
            groups.setdefault(tuple(body["prompt"].split()[:128]), set()).add(i)
    assert len(groups) == 3 and all(len(r) == 1 for r in groups.values()), groups


def test_endpoint_picker_scores_as_its_scorers_say() -> None:
    picker = routing.EndpointPicker(3, seed=1, block_tokens=4)
    prompt = [f"w{i}" for i in range(8)]
    picker.waiting = [4.0, 0.0, 2.0]
    picker.kv_usage = [0.0, 0.5, 0.25]
    # queue: 0, 1, 0.5 (x2); kv: 1, 0.5, 0.75 (x2); no prefix yet.
    assert picker.scores(prompt) == pytest.approx([2.0, 3.0, 2.5])
    assert picker.pick(prompt) == 1
    # Now replica 1 holds both blocks: prefix 1.0 x3 there, and half of it for a prompt
    # that shares the first block only.
    assert picker.scores(prompt) == pytest.approx([2.0, 6.0, 2.5])
    other = prompt[:4] + ["x"] * 4
    assert picker.scores(other)[1] == pytest.approx(3.0 + 1.5)
    picker.observe(0, 'vllm:num_requests_waiting{model_name="m"} 7\nvllm:kv_cache_usage_perc 0.9\n')
    assert picker.waiting[0] == 7 and picker.kv_usage[0] == 0.9


def test_goodput_counts_requests_inside_every_slo(fake: Fake) -> None:
    fake.configure(ttft_s=0.1, itl_s=0.01, output_tokens=4, error_every=5)
    common = ["--requests", "10", "--concurrency", "2", "--max-tokens", "4"]
    r = _run(fake, *common, "--goodput", "ttft:400,itl:100,e2el:2000")
    assert r["goodput"] == 0.8  # the 2 failed requests are not good
    assert r["goodput_slo_ms"] == {"ttft": 400, "itl": 100, "e2el": 2000}
    assert _run(fake, *common, "--goodput", "ttft:50")["goodput"] == 0.0


def test_rate_sweep_and_json_output(fake: Fake, tmp_path: Path) -> None:
    fake.configure(ttft_s=0.01, itl_s=0.002, output_tokens=2)
    out = tmp_path / "sweep.json"
    result = invoke(
        fake.url, "--api-key", API_KEY, "--rate", "20,40", "--requests", "6",
        "--arrival", "constant", "--max-tokens", "2", "--output", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "rate/s" in result.stdout and "shed" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    doc = json.loads(out.read_text())
    assert [r["rate"] for r in doc["sweep"]] == [20, 40]
    assert all(r["requests"] == 6 and r["arrival"] == "constant" for r in doc["sweep"])
    # The schedule the client kept: 1/40 s apart, whenever each request actually went (a
    # late wake-up is caught up, not shifted; how late is the report's send lag).
    second = doc["sweep"][1]
    assert second["send_lag_ms"]["p50"] is not None and second["send_lag_ms"]["p50"] >= 0


def test_open_loop_sends_on_its_schedule_and_reports_its_lag(fake: Fake) -> None:
    fake.configure(ttft_s=0.01, itl_s=0.002, output_tokens=2)
    seen: list[lt.Sample] = []
    real = lt.summarize

    def keep(opts: lt.Options, url: str, samples: list[lt.Sample], wall: float) -> lt.Report:
        seen.extend(samples)
        return real(opts, url, samples, wall)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lt, "summarize", keep)
        report = asyncio.run(lt.run(lt.Options(
            fake.url, api_key=API_KEY, rate=40, arrival="constant", requests=6,
            max_tokens=2)))  # fmt: skip
    assert sorted(s.due_s for s in seen if s.due_s is not None) == pytest.approx(
        [k / 40 for k in range(6)]
    )
    lags = sorted(s.lag_s for s in seen if s.lag_s is not None)
    assert len(lags) == 6 and lags[0] >= 0
    p99 = report.send_lag_ms["p99"]
    assert p99 is not None and lags[0] * 1000 - 0.01 <= p99 <= lags[-1] * 1000 + 0.01


def test_prompt_lengths_follow_the_distribution() -> None:
    opts = lt.Options("http://h", prompt_tokens=200, prompt_tokens_stdev=40, seed=3)
    prompts = lt.Prompts(opts)
    lengths = [len(prompts.next()) for _ in range(2000)]
    mean = sum(lengths) / len(lengths)
    sd = (sum((n - mean) ** 2 for n in lengths) / len(lengths)) ** 0.5
    assert 195 < mean < 205 and 36 < sd < 44


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate", "fast"], "loadtest: --rate: 'fast' is not a number"),
        (["--rate", "0"], "loadtest: --rate: 0 must be in"),
        (["--goodput", "tbt:5"], "loadtest: --goodput: 'tbt:5' is not METRIC:MS"),
        (["--routing", "random"], "loadtest: --routing must be one of"),
        (["--arrival", "bursty"], "loadtest: --arrival must be one of"),
        (["--prefix-groups", "0"], "loadtest: --prefix-tokens must be 0 or more"),
    ],
)
def test_bad_load_options_exit_2(args: list[str], message: str) -> None:
    result = invoke("http://127.0.0.1:1", *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1
