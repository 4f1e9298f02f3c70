"""`llmp stragglers` on synthetic traces whose ground truth the generator knows.

A trace is 16 ranks on 2 nodes x 8, 200 steps: a per-step base time (lognormal,
the step's own work) times per-rank lognormal noise. Injecting a slow rank or
node multiplies its times; the injected loss is sum_s (max of the injected step
- max of the same step without the injection), which the what-if must recover.

`--prometheus` reads a real Prometheus (tests/monitoring/servers.py) holding the same traces
as rank 0's gauges would have been scraped every 15 s (backfilled with promtool), so the
report from Prometheus equals the report from the file through Prometheus' own query_range;
a proxy in front of it stands for what no real server does (series of a namespace it was not
asked for, a value that is no number).
"""

from __future__ import annotations

import contextlib
import csv
import json
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from llmp.cli import app
from tests.monitoring import servers
from workloads.diagnosis import stragglers as st
from workloads.diagnosis.evidence import QUERIES as EVIDENCE_QUERIES

RANKS, PER_NODE, STEPS = 16, 8, 200
SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "stragglers" / "step-times.jsonl"


def node_of(rank: int) -> str:
    return f"node-{rank // PER_NODE}"


def generate(
    seed: int, slow: dict[int, float] | None = None, sigma: float = 0.03
) -> tuple[list[dict[str, Any]], float]:
    """(JSON-line rows, injected loss in seconds). slow: rank -> multiplier."""
    rng = random.Random(seed)
    slow = slow or {}
    rows: list[dict[str, Any]] = []
    injected = 0.0
    for step in range(1, STEPS + 1):
        base = 1.0 * rng.lognormvariate(0, 0.05)
        clean = [base * rng.lognormvariate(0, sigma) for _ in range(RANKS)]
        times = [t * slow.get(r, 1.0) for r, t in enumerate(clean)]
        injected += max(times) - max(clean)
        rows += [
            {"step": step, "rank": r, "node": node_of(r), "seconds": t} for r, t in enumerate(times)
        ]
    return rows, injected


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["step", "rank", "node", "seconds"])
        w.writeheader()
        w.writerows(rows)
    return path


def run_json(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["stragglers", *args, "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_slow_rank_is_first_and_its_loss_matches_the_injection(tmp_path: Path) -> None:
    rows, injected = generate(1, {5: 1.30})
    report = run_json(str(write_jsonl(tmp_path / "t.jsonl", rows)))
    top = report["by_rank"][0]
    assert top["name"] == "5" and top["node"] == "node-0"
    assert top["lost_s"] == pytest.approx(injected, rel=0.05)
    assert [r["name"] for r in report["by_rank"] if r["flagged"]] == ["5"]
    assert report["by_node"][0]["name"] == "node-0"
    # one rank explains (nearly) all of the job's slowdown; the runner-up very little
    assert top["share"] > 0.8
    assert report["by_rank"][1]["share"] < 0.1


SLOW_NODE = {r: 1.20 for r in range(PER_NODE, 2 * PER_NODE)}


def test_slow_node_is_first_and_its_loss_matches_the_injection(tmp_path: Path) -> None:
    # sigma 0.02: the median what-if also drops the node's own jitter from the max, an
    # overstatement of about sum_s base * sigma * (E max of 16 - E max of 8 normals)
    # = 200 * 0.34 * sigma s: 3 % here, 5 % at sigma 0.03 (see the next test).
    rows, injected = generate(2, SLOW_NODE, sigma=0.02)
    report = run_json(str(write_jsonl(tmp_path / "t.jsonl", rows)))
    top = report["by_node"][0]
    assert top["name"] == "node-1" and top["ranks"] == list(range(8, 16))
    assert top["lost_s"] == pytest.approx(injected, rel=0.05)
    assert [n["name"] for n in report["by_node"] if n["flagged"]] == ["node-1"]
    assert report["by_node"][1]["lost_s"] < 0.05 * injected
    # no single rank of the node explains it: its seven peers are as slow
    assert report["by_rank"][0]["lost_s"] < 0.2 * injected


@pytest.mark.parametrize("sigma", [0.03, 0.05])
def test_slow_node_loss_is_overstated_by_the_nodes_own_jitter(tmp_path: Path, sigma: float) -> None:
    rows, injected = generate(2, SLOW_NODE, sigma=sigma)
    top = st.analyse(st.read_file(write_jsonl(tmp_path / "t.jsonl", rows))).by_node[0]
    assert top.name == "node-1"
    bias = STEPS * sigma * (1.766 - 1.424)  # expected max of 16 and of 8 standard normals
    assert top.lost_s - injected == pytest.approx(bias, rel=0.3)


def test_no_straggler_flags_nothing(tmp_path: Path) -> None:
    rows, injected = generate(3)
    assert injected == 0
    report = run_json(str(write_jsonl(tmp_path / "t.jsonl", rows)))
    assert not [s for s in report["by_rank"] + report["by_node"] if s["flagged"]]
    # the max of 16 noisy ranks: some slowdown, spread over ranks, none dominant
    assert report["slowdown_fraction"] < 0.1
    assert report["by_rank"][0]["share"] < 0.3
    assert report["by_node"][0]["share"] < 0.8


def test_csv_gives_the_same_report_as_json_lines(tmp_path: Path) -> None:
    rows, _ = generate(4, {5: 1.3})
    a = run_json(str(write_jsonl(tmp_path / "t.jsonl", rows)))
    b = run_json(str(write_csv(tmp_path / "t.csv", rows)))
    a.pop("source"), b.pop("source")
    assert a == b


def test_what_if_by_hand() -> None:
    times = [1.0, 1.0, 1.0, 2.0]
    trace = st.Trace.from_columns([1] * 4, range(4), times, ["a", "a", "b", "b"])
    report = st.analyse(trace)
    assert report.actual_s == 2.0 and report.at_median_s == 1.0
    top = report.by_rank[0]
    assert (top.name, top.lost_s, top.share) == ("3", 1.0, 1.0)
    assert report.by_node[0].name == "b" and report.by_node[0].lost_s == 1.0


def by_definition(
    steps: dict[int, dict[int, float]], group: set[int], threshold: float, persist: float
) -> tuple[float, float, float, bool]:
    """The module docstring's what-if for one group, step by step in plain Python (the
    analysis before it was vectorized): (lost seconds, slow fraction, median ratio, flagged)."""
    lost = 0.0
    slow = seen = 0
    ratios: list[float] = []
    for times in steps.values():
        inside = [t for r, t in times.items() if r in group]
        if not inside:
            continue
        outside = [t for r, t in times.items() if r not in group]
        ref = statistics.median(outside) if outside else statistics.median(times.values())
        lost += max(times.values()) - max([ref, *outside])
        mine = statistics.median(inside) if len(group) > 1 else inside[0]
        seen += 1
        ratios.append(mine / ref if ref > 0 else 1.0)
        if mine > ref * (1 + threshold):
            slow += 1
    fraction = slow / seen if seen else 0.0
    ratio = statistics.median(ratios) if ratios else 1.0
    return lost, fraction, ratio, seen > 0 and fraction >= persist


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_the_vectorized_what_if_equals_the_definition(seed: int) -> None:
    """Every rank and every node against by_definition: on ties, a step holding a single
    rank, steps where ranks are missing, nodes of different sizes and a node that is a
    whole step's only ranks."""
    rng = random.Random(seed)
    node = {r: f"n{min(r // 3, 3)}" for r in range(11)}  # sizes 3, 3, 3, 2
    rows: list[tuple[int, int, float]] = []
    for step in range(60):
        present = [r for r in range(11) if rng.random() > 0.2] or [0]
        rows += [(step, r, round(rng.uniform(0.9, 1.3), 1)) for r in present]
    rows.append((60, 3, 2.0))  # a step with one rank
    rows += [(61, 9, 1.5), (61, 10, 1.1)]  # a step with one node's ranks only
    steps: dict[int, dict[int, float]] = {}
    for step, r, t in rows:
        steps.setdefault(step, {})[r] = t
    step_col, rank_col, seconds = zip(*rows, strict=True)
    trace = st.Trace.from_columns(step_col, rank_col, seconds, [node[r] for r in rank_col])
    report = st.analyse(trace, 0.05, 0.5)
    groups = [(s, {int(s.name)}) for s in report.by_rank]
    groups += [(s, {r for r, n in node.items() if n == s.name}) for s in report.by_node]
    assert len(groups) == 11 + 4
    for score, members in groups:
        got = (score.lost_s, score.slow_fraction, score.median_ratio, score.flagged)
        assert got == pytest.approx(by_definition(steps, members, 0.05, 0.5)), score.name
    assert report.actual_s == pytest.approx(sum(max(t.values()) for t in steps.values()))
    assert report.at_median_s == pytest.approx(
        sum(statistics.median(t.values()) for t in steps.values())
    )
    assert report.incomplete_steps == sum(len(t) < 11 for t in steps.values())


def test_human_report_renders(tmp_path: Path) -> None:
    rows, _ = generate(5, {5: 1.3})
    result = CliRunner().invoke(app, ["stragglers", str(write_jsonl(tmp_path / "t.jsonl", rows))])
    assert result.exit_code == 0, result.output
    assert "ranks by time lost" in result.stdout and "SLOW" in result.stdout


def test_the_shipped_sample_finds_its_slow_node() -> None:
    """examples/stragglers/step-times.jsonl: 2 nodes x 8 ranks x 20 steps, every rank of
    ip-10-0-1-203 about 15% slower."""
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    assert len(rows) == 2 * 8 * 20
    assert {r["node"] for r in rows} == {"ip-10-0-1-17.ec2.internal", "ip-10-0-1-203.ec2.internal"}
    report = run_json(str(SAMPLE))
    assert (report["steps"], report["ranks"], report["nodes"]) == (20, 16, 2)
    slow, fast = report["by_node"]
    assert slow["name"] == "ip-10-0-1-203.ec2.internal" and slow["flagged"]
    assert slow["median_ratio"] == pytest.approx(1.15, abs=0.02)
    assert not fast["flagged"]
    flagged = {r["name"] for r in report["by_rank"] if r["flagged"]}
    assert flagged == {str(rank) for rank in range(8, 16)}
    human = CliRunner().invoke(app, ["stragglers", str(SAMPLE)])
    assert human.exit_code == 0, human.output
    assert "ip-10-0-1-203.ec2.internal" in human.stdout and "SLOW" in human.stdout


def test_help_names_the_columns_it_reads_and_the_sample() -> None:
    result = CliRunner().invoke(app, ["stragglers", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.replace("│", " ").split())
    for column in (
        "step (integer, required)",
        "rank (integer, required)",
        "seconds (the step's time on that rank, a number >= 0, required)",
        "node (optional:",
    ):
        assert column in text, column
    assert "JSON lines" in text and "CSV" in text
    assert "examples/stragglers/step-times.jsonl" in text


# --------------------------------------------------------------------------- Prometheus


RESOLUTION_S = 15.0
"""The CLI's --resolution: one scrape of the trainer's gauges per evaluation of query_range."""
RANGE = "3h"
"""Wide enough for every trace here (200 steps x 3 scrapes x 15 s)."""


def _labels(namespace: str, row: dict[str, Any], phase: str = "") -> str:
    text = f'namespace="{namespace}",job="train-a",rank="{row["rank"]}",node="{row["node"]}"'
    return text + (f',phase="{phase}"' if phase else "")


def history(
    rows: list[dict[str, Any]],
    repeat: int,
    now: float,
    evidence: dict[str, list[tuple[dict[str, str], float]]],
    foreign: list[dict[str, Any]],
    poison: dict[int, float],
) -> str:
    """OpenMetrics of what Prometheus would have scraped from rank 0's gauges every
    RESOLUTION_S: step s is the gauges' value for `repeat` scrapes (a step longer than the
    resolution), the last step ending a scrape before `now`; `foreign` rows are team-b's job
    of the same name; `poison` the value every sample of a rank's step time holds (NaN, -3,
    +Inf: what an exporter can send); evidence series are gauges, and counters where their
    query takes increase() (0 until half-way, then the value)."""
    last = max(r["step"] for r in rows)
    first_tick = now - (last * repeat) * RESOLUTION_S

    def ticks(step: int) -> list[float]:
        return [first_tick + ((step - 1) * repeat + k) * RESOLUTION_S for k in range(repeat)]

    steps: list[tuple[str, float, float]] = []
    phases: list[tuple[str, float, float]] = []
    for namespace, source in (("team-a", rows), ("team-b", foreign)):
        for row in source:
            seconds = poison.get(row["rank"], row["seconds"]) if namespace == "team-a" else None
            value = row["seconds"] if seconds is None else seconds
            for t in ticks(row["step"]):
                steps.append((f"{st.METRIC}{{{_labels(namespace, row)}}}", t, float(value)))
                for phase in st.PHASES:
                    if row.get(f"{phase}_s") is not None:
                        series = f"{st.PHASE_METRIC}{{{_labels(namespace, row, phase)}}}"
                        phases.append((series, t, float(row[f"{phase}_s"])))
    families: dict[str, tuple[str, list[tuple[str, float, float]]]] = {st.METRIC: ("gauge", steps)}
    if phases:
        families[st.PHASE_METRIC] = ("gauge", phases)
    span = [first_tick + k * RESOLUTION_S for k in range(last * repeat)]
    for metric, found in evidence.items():
        counter = any(m == metric and "increase(" in q for m, q, *_ in EVIDENCE_QUERIES)
        samples = []
        for labels, value in found:
            text = ",".join(f'{k}="{v}"' for k, v in labels.items())
            for i, t in enumerate(span):
                at = value if not counter or i >= len(span) // 2 else 0.0
                samples.append((f"{metric}{{{text}}}", t, float(at)))
        # Typed gauge: OpenMetrics would name a counter's samples `_total`, and these
        # exporters' names do not end so (Prometheus 2 stores no type anyway).
        families[metric] = ("gauge", samples)
    return servers.openmetrics(families)


@contextlib.contextmanager
def real_prometheus(
    rows: list[dict[str, Any]],
    repeat: int = 1,
    queries: list[dict[str, list[str]]] | None = None,
    evidence: dict[str, list[tuple[dict[str, str], float]]] | None = None,
    foreign: list[dict[str, Any]] | None = None,
    poison: dict[int, Any] | None = None,
    leak: bool = False,
) -> Iterator[str]:
    """A real Prometheus (tests/monitoring/servers.py) holding team-a/train-a's step times
    (and phases, and evidence), behind a proxy that records every query (`queries`). `leak`:
    the proxy drops the namespace matcher, as a Prometheus (or a proxy) ignoring it would;
    a `poison` that is no number is put into the answers by the proxy (no exporter can send
    one), a number is stored as a sample."""
    binary, _, promtool = servers.binaries()
    poison = poison or {}
    stored = {r: v for r, v in poison.items() if isinstance(v, str) and _is_number(v)}
    forged = {r: v for r, v in poison.items() if r not in stored}

    def answer(asked: str, body: dict[str, Any]) -> dict[str, Any]:
        if asked.startswith(st.METRIC):
            for s in body["data"]["result"]:
                if int(s["metric"]["rank"]) in forged:
                    s["values"] = [[t, forged[int(s["metric"]["rank"])]] for t, _ in s["values"]]
        return body

    def drop_namespace(asked: str) -> str:
        return asked.replace('namespace="team-a",', "") if leak else asked

    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stragglers-")))
        text = history(
            rows,
            repeat,
            time.time(),
            evidence or {},
            foreign or [],
            {r: float(v) for r, v in stored.items()},
        )
        prometheus = servers.Prometheus(binary, workdir, history=text, promtool=promtool)
        stack.callback(prometheus.stop)
        proxy = servers.Proxy(prometheus.url, query=drop_namespace, answer=answer)
        stack.callback(proxy.stop)
        yield proxy.url
        if queries is not None:
            queries.extend(proxy.queries)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("repeat", [1, 3])
def test_prometheus_gives_the_same_answer_as_the_file(tmp_path: Path, repeat: int) -> None:
    rows, _ = generate(6, {r: 1.2 for r in range(8, 16)})
    from_file = run_json(str(write_jsonl(tmp_path / "t.jsonl", rows)))
    with real_prometheus(rows, repeat) as url:
        from_prom = run_json(
            "--prometheus", url, "--namespace", "team-a", "--job", "train-a", "--range", RANGE
        )
    from_file.pop("source"), from_prom.pop("source")
    assert from_prom == from_file


def test_prometheus_query_and_window() -> None:
    rows, _ = generate(7)
    queries: list[dict[str, list[str]]] = []
    end = float(int(time.time()))
    with real_prometheus(rows, queries=queries) as url:
        trace = st.query_prometheus(url, "train-a", "2h", "30s", end=end, namespace="team-a")
    steps, phases = queries
    assert steps["query"] == ['llmp_train_step_seconds{namespace="team-a",job="train-a"}']
    assert phases["query"] == ['llmp_train_phase_seconds{namespace="team-a",job="train-a"}']
    for q in queries:
        assert q["start"] == [f"{end - 7200:.3f}"] and q["end"] == [f"{end:.3f}"]
        assert q["step"] == ["30"]
    # Every 30 s the server answers the last of two 15 s scrapes: about half the steps are seen.
    assert 80 <= len(trace.steps) <= 120, len(trace.steps)


def test_prometheus_without_the_job_is_bad_input() -> None:
    rows, _ = generate(8)
    with real_prometheus(rows) as url:
        result = CliRunner().invoke(
            app,
            [
                *("stragglers", "--prometheus", url, "--namespace", "team-a"),
                *("--job", "nope", "--json", "--range", RANGE),
            ],
        )
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0 and "no llmp_train_step_seconds" in result.stderr


def test_a_job_of_the_same_name_in_another_namespace_is_not_counted(tmp_path: Path) -> None:
    # team-b's train-a has a slow node; an answer carrying its series (a Prometheus ignoring
    # the matchers) gives the same report as team-a's alone.
    rows, _ = generate(6)
    slow, _ = generate(7, {r: 2.0 for r in range(8)})
    alone = run_json(str(write_jsonl(tmp_path / "t.jsonl", rows)))
    with real_prometheus(rows, foreign=slow, leak=True) as url:
        mixed = run_json(
            "--prometheus", url, "--namespace", "team-a", "--job", "train-a", "--range", RANGE
        )
    alone.pop("source")
    assert mixed.pop("source").endswith(f"namespace=team-a job=train-a range={RANGE}")
    assert mixed == alone


@pytest.mark.parametrize(
    ("poison", "message"),
    [
        ("NaN", "seconds must be a finite number >= 0: nan"),
        ("-3", "seconds must be a finite number >= 0: -3.0"),
        ("+Inf", "seconds must be a finite number >= 0: inf"),
        ("quick", "'quick' is not a number"),
        (None, "None is not a number"),
    ],
)
def test_impossible_step_times_from_prometheus_are_bad_input(poison: Any, message: str) -> None:
    rows, _ = generate(6)
    with real_prometheus(rows, poison={3: poison}) as url:
        result = CliRunner().invoke(
            app,
            [
                *("stragglers", "--prometheus", url, "--namespace", "team-a"),
                *("--job", "train-a", "--range", RANGE),
            ],
        )
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_prometheus_needs_the_jobs_namespace() -> None:
    result = CliRunner().invoke(app, ["stragglers", "--prometheus", "http://p", "--job", "a"])
    assert result.exit_code == 2
    assert "--prometheus needs --namespace NS and --job NAME" in result.stderr


def test_prometheus_unreachable_fails() -> None:
    port = servers.free_port()  # nothing listens there
    result = CliRunner().invoke(
        app,
        [
            "stragglers",
            "--prometheus",
            f"http://127.0.0.1:{port}",
            "--namespace",
            "n",
            "--job",
            "a",
        ],
    )
    assert result.exit_code == 1 and "Prometheus" in result.stderr


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        (None, "missing.jsonl", "no such file"),
        ('{"step": 1, "rank": 0, "node": "a", "seconds": 1.0}\n{"step": 1, "ra', "t.jsonl", ":2:"),
        ('{"step": 1, "rank": 0, "node": "a"}\n', "t.jsonl", "missing 'seconds'"),
        ('{"step": 1, "rank": "x", "seconds": 1}\n', "t.jsonl", "'rank' is not a int"),
        ('{"step": 1, "rank": 0, "seconds": -1}\n', "t.jsonl", "finite number"),
        ("[1, 2]\n", "t.jsonl", "not a JSON object"),
        ("", "t.jsonl", "no step times"),
        ("step,rank,node\n1,0,a\n", "t.csv", "lacks seconds"),
        ("step,rank,seconds\n1,0,fast\n", "t.csv", "'seconds' is not a float"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, content: str | None, name: str, message: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    result = CliRunner().invoke(app, ["stragglers", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["x.jsonl", "--prometheus", "http://127.0.0.1:9"],
        ["--prometheus", "http://127.0.0.1:9"],
        ["--prometheus", "http://127.0.0.1:9", "--namespace", "n", "--job", "a", "--range", "1y"],
        ["--prometheus", "http://127.0.0.1:9", "--job", "a"],
        ["x.jsonl", "--persist", "0"],
    ],
)
def test_bad_arguments_exit_2(args: list[str]) -> None:
    result = CliRunner().invoke(app, ["stragglers", *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1


# --------------------------------------------------------------------------- from training


def test_training_writes_what_stragglers_reads(tmp_path: Path) -> None:
    """2 real CPU ranks: rank 0 appends every rank's step time and serves the gauges."""
    import socket
    import urllib.request

    pytest.importorskip("torch")
    pytest.importorskip("deepspeed")
    prom = pytest.importorskip("prometheus_client")
    del prom
    from tests.workloads.training.harness import Run, job_config, kill_all
    from workloads.training.data import write_synthetic_shards

    data = tmp_path / "tokens"
    write_synthetic_shards(data, n_shards=2, tokens_per_shard=20_000, vocab=256)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = job_config(
        tmp_path, data, max_steps=8, step_sleep_s=0.3, checkpoint={"interval_steps": 2}
    )
    times = tmp_path / "times" / "steps.jsonl"
    extra = ["--step-times", str(times), "--metrics-port", str(port)]
    extra += ["--metrics-addr", "127.0.0.1", "--job-name", "t1"]
    procs: list[Any] = []
    try:
        run = Run(tmp_path / "run", cfg, 2, extra, procs.append)
        run.wait_for(lambda ev: sum(e["event"] == "checkpoint_published" for e in ev) >= 1, 180)
        run.wait_for(lambda ev: sum(e["event"] == "step" for e in ev) >= 4, 60)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        assert run.wait(120) == [0, 0], run.stderr_tail()
    finally:
        kill_all(procs)
    host = socket.gethostname()
    for rank in (0, 1):
        assert f'llmp_train_step_seconds{{job="t1",node="{host}",rank="{rank}"}}' in metrics
    assert 'llmp_train_tokens_per_second{job="t1"}' in metrics
    assert 'llmp_checkpoint_last_success_timestamp_seconds{job="t1"}' in metrics
    rows = [json.loads(line) for line in times.read_text().splitlines()]
    assert [(r["step"], r["rank"]) for r in rows] == [(s, r) for s in range(1, 9) for r in (0, 1)]
    steps = {e["step"]: e for e in run.of("step")}
    for step in range(1, 9):
        slowest = max(r["seconds"] for r in rows if r["step"] == step)
        assert slowest == pytest.approx(steps[step]["step_time_max_s"], abs=1e-4)
    report = run_json(str(times))
    assert (report["steps"], report["ranks"], report["nodes"]) == (8, 2, 1)
