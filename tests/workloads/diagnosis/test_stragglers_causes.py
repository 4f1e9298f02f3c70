"""Root causes: the per-phase split of a node's lost time, its what-ifs, and the evidence
beside them; and the three file formats giving one report.

The generator builds each rank's step from the five phases (`seconds` their sum) with
lognormal noise, and plants one cause per chosen node the way it shows in synchronous
training: a node slow in compute (and, being the one the others wait for, waiting *less*
in the collective), one slow in the collective (its links), one waiting for data, one
stalling longer at each checkpoint.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from llmp.cli import app
from workloads.diagnosis import stragglers as st

PER_NODE, NODES, STEPS = 4, 6, 100
CHECKPOINT_EVERY = 10
BASE = {"data_wait": 0.05, "compute": 0.60, "collective": 0.20, "optimizer": 0.10}
CHECKPOINT_S = 0.3


def plant(cause: str, phases: dict[str, float], checkpoint_step: bool) -> None:
    """One cause on one rank's step, in place."""
    if cause == "compute":
        phases["compute"] *= 1.4
        phases["collective"] *= 0.5  # it arrives last: the others wait for it
    elif cause == "communication":
        phases["collective"] *= 2.0
    elif cause == "io":
        phases["data_wait"] *= 6.0
    elif cause == "checkpoint":
        if checkpoint_step:
            phases["checkpoint"] *= 8.0
    else:
        raise ValueError(cause)


def generate(seed: int, planted: dict[int, str], sigma: float = 0.02) -> list[dict[str, Any]]:
    """Rows with phases; planted: node index -> cause."""
    rng = random.Random(seed)
    rows = []
    for step in range(1, STEPS + 1):
        checkpoint_step = step % CHECKPOINT_EVERY == 0
        for rank in range(NODES * PER_NODE):
            node = rank // PER_NODE
            phases = {p: v * rng.lognormvariate(0, sigma) for p, v in BASE.items()}
            phases["checkpoint"] = CHECKPOINT_S if checkpoint_step else 0.0
            if node in planted:
                plant(planted[node], phases, checkpoint_step)
            row: dict[str, Any] = {"step": step, "rank": rank, "node": f"node-{node}"}
            row["seconds"] = sum(phases.values())
            row |= {f"{p}_s": v for p, v in phases.items()}
            rows.append(row)
    return rows


COLUMNS = ["step", "rank", "node", "seconds", *(f"{p}_s" for p in st.PHASES)]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def run_json(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["stragglers", *args, "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in report["by_node"]}


@pytest.mark.parametrize("cause", ["compute", "communication", "io", "checkpoint"])
def test_one_planted_cause_is_named_and_its_what_if_recovers_the_loss(
    tmp_path: Path, cause: str
) -> None:
    rows = generate(1, {2: cause})
    report = run_json(str(write_jsonl(tmp_path / "t.jsonl", rows)))
    top = report["by_node"][0]
    assert top["name"] == "node-2" and top["cause"] == cause
    causes = {c["name"]: c for c in top["causes"]}
    assert set(causes) == {"compute", "communication", "io", "checkpoint", "other"}
    assert causes[cause]["share"] > 0.9
    # fixing the planted cause alone saves (nearly) all the node loses; the others nothing
    assert causes[cause]["saved_s"] == pytest.approx(top["lost_s"], rel=0.15)
    for other, c in causes.items():
        if other != cause:
            assert c["saved_s"] < 0.1 * top["lost_s"], other
    assert sum(c["lost_s"] for c in causes.values()) == pytest.approx(top["lost_s"])


def test_a_slow_gpu_node_waits_less_in_the_collective_and_that_is_no_cause(
    tmp_path: Path,
) -> None:
    rows = generate(2, {0: "compute"})
    top = st.analyse(st.read_file(write_jsonl(tmp_path / "t.jsonl", rows))).by_node[0]
    causes = {c.name: c for c in top.causes}
    assert causes["communication"].excess_s < 0  # the symptom: it is the one waited for
    assert causes["communication"].share == 0 and causes["communication"].saved_s == 0
    assert top.cause is not None and top.cause.name == "compute"


def test_four_planted_causes_each_named_on_its_node(tmp_path: Path) -> None:
    planted = {0: "compute", 2: "communication", 3: "io", 5: "checkpoint"}
    report = st.analyse(st.read_file(write_jsonl(tmp_path / "t.jsonl", generate(3, planted))))
    named = {s.name: s.cause.name for s in report.by_node if s.cause and s.flagged}
    assert named == {f"node-{n}": cause for n, cause in planted.items() if cause != "checkpoint"}
    # slow at one step in ten: no flag, but explained among the top nodes
    ckpt = next(s for s in report.by_node if s.name == "node-5")
    assert not ckpt.flagged and ckpt.cause is not None and ckpt.cause.name == "checkpoint"


def hand_rows() -> list[dict[str, Any]]:
    """2 nodes x 2 ranks x 2 steps in quarters of a second (exact in binary).

    node a: data 0.25, compute 1.0, collective 0.5, optimizer 0.25 -> 2.0 s, both steps.
    node b, step 1: compute 1.5 and collective 0.25 (waits less) -> 2.25 s;
            step 2: as a, plus a 0.5 s checkpoint stall -> 2.5 s.
    """
    a = {"data_wait_s": 0.25, "compute_s": 1.0, "collective_s": 0.5, "optimizer_s": 0.25}
    b1 = a | {"compute_s": 1.5, "collective_s": 0.25}
    b2 = a | {"checkpoint_s": 0.5}
    rows = []
    for step, b in ((1, b1), (2, b2)):
        for rank in range(4):
            phases = ({"checkpoint_s": 0.0} | a) if rank < 2 else ({"checkpoint_s": 0.0} | b)
            node = "a" if rank < 2 else "b"
            rows.append(
                {"step": step, "rank": rank, "node": node, "seconds": sum(phases.values())} | phases
            )
    return rows


def test_the_split_and_what_ifs_by_hand(tmp_path: Path) -> None:
    """b loses 0.25 s at step 1 (2.25 vs a's 2.0) and 0.5 s at step 2: 0.75 s. Its excess:
    compute + optimizer 0.5 s (step 1), checkpoint 0.5 s (step 2), collective -0.25 s (no
    cause). The split: 0.375 s each. The what-ifs: without its compute excess step 1 is
    max(2.0, 1.75) = 2.0, 0.25 s saved; without its checkpoint excess step 2 is 2.0,
    0.5 s saved."""
    report = st.analyse(st.read_file(write_jsonl(tmp_path / "t.jsonl", hand_rows())))
    b = report.by_node[0]
    assert (b.name, b.lost_s) == ("b", 0.75)
    got = {c.name: (c.excess_s, c.share, c.lost_s, c.saved_s) for c in b.causes}
    assert got == {
        "compute": (0.5, 0.5, 0.375, 0.25),
        "checkpoint": (0.5, 0.5, 0.375, 0.5),
        "communication": (-0.25, 0.0, 0.0, 0.0),
        "io": (0.0, 0.0, 0.0, 0.0),
        "other": (0.0, 0.0, 0.0, 0.0),
    }
    assert b.causes[0].name == "checkpoint"  # equal shares: the larger saving first
    a = report.by_node[1]
    assert a.name == "a" and a.lost_s == 0 and a.cause is None


def test_parquet_csv_and_json_lines_give_the_same_report(tmp_path: Path) -> None:
    rows = generate(4, {1: "compute", 4: "io"})
    reports = [
        run_json(str(write(tmp_path / f"t.{ext}", rows)))
        for ext, write in (("jsonl", write_jsonl), ("csv", write_csv), ("parquet", write_parquet))
    ]
    for r in reports:
        r.pop("source")
    assert reports[0] == reports[1] == reports[2]
    assert reports[0]["phases"] == list(st.PHASES)
    assert by_name(reports[0])["node-1"]["cause"] == "compute"


def test_a_trace_without_phases_has_no_causes(tmp_path: Path) -> None:
    rows = [{k: r[k] for k in ("step", "rank", "node", "seconds")} for r in generate(5, {1: "io"})]
    report = run_json(str(write_jsonl(tmp_path / "t.jsonl", rows)))
    assert "phases" not in report and all("causes" not in n for n in report["by_node"])


def test_the_causes_table_reads_at_80_columns(tmp_path: Path) -> None:
    planted = {0: "compute", 2: "communication", 3: "io"}
    path = write_jsonl(tmp_path / "t.jsonl", generate(6, planted))
    evidence = tmp_path / "evidence.json"
    evidence.write_text(json.dumps({"node-0": {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0x48}}))
    result = CliRunner().invoke(
        app, ["stragglers", str(path), "--evidence", str(evidence)], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in result.stdout
    assert "causes of the nodes' lost time" in result.stdout
    text = " ".join(result.stdout.replace("│", " ").split())
    assert "hw_slowdown, hw_thermal_slowdown" in text.replace("hw_slowdow n", "hw_slowdown")
    table = result.stdout[result.stdout.index("causes of the nodes") :]
    for n, cause in planted.items():
        row = next(line for line in table.splitlines() if f"node-{n} " in line)
        assert cause in row, row


# --------------------------------------------------------------------------- evidence


def test_evidence_is_listed_beside_the_cause(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", generate(7, {0: "compute", 2: "communication"}))
    evidence = tmp_path / "evidence.json"
    given = {
        "node-0": {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0x48, "fsx_read_latency_ms": 2.0},
        "node-2": {"node_infiniband_port_errors_received_total": 12},
        "node-9": {"DCGM_FI_DEV_XID_ERRORS": 79},  # not in the trace: ignored
    }
    evidence.write_text(json.dumps(given))
    nodes = by_name(run_json(str(path), "--evidence", str(evidence)))
    first = nodes["node-0"]["evidence"][0]
    assert first["cause"] == "compute" and first["alarming"]
    assert first["meaning"] == "throttle: hw_slowdown, hw_thermal_slowdown"
    assert nodes["node-0"]["evidence"][1]["cause"] == "io"
    (efa,) = nodes["node-2"]["evidence"]
    assert efa["cause"] == "communication" and efa["meaning"] == "12 x EFA receive errors"


def test_throttle_reasons_name_their_bits() -> None:
    from workloads.diagnosis.evidence import describe, throttle_names

    assert throttle_names(0x1 | 0x4 | 0x100) == [
        "gpu_idle",
        "sw_power_cap",
        "display_clock_setting",
    ]
    assert not describe("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 0x1).alarming  # idle is no fault
    assert describe("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 0x40).alarming


def test_prometheus_evidence_is_joined_to_the_trace_nodes(tmp_path: Path) -> None:
    from tests.workloads.diagnosis.test_stragglers import real_prometheus

    rows = generate(8, {1: "compute"})
    evidence: dict[str, list[tuple[dict[str, str], float]]] = {
        # per GPU: OR-ed per node; the exporter's short host name
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": [
            ({"Hostname": "node-1", "gpu": "0"}, 0x8),
            ({"Hostname": "node-1", "gpu": "1"}, 0x20),
        ],
        "node_ethtool_pps_allowance_exceeded": [({"instance": "node-1:9100"}, 3)],
    }
    queries: list[dict[str, list[str]]] = []
    with real_prometheus(rows, queries=queries, evidence=evidence) as url:
        report = run_json(
            "--prometheus", url, "--namespace", "team-a", "--job", "train-a", "--range", "2h"
        )
    found = {e["metric"]: e for e in by_name(report)["node-1"]["evidence"]}
    assert found["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]["meaning"] == (
        "throttle: hw_slowdown, sw_thermal_slowdown"
    )
    # increase() over the window, extrapolated by the real server: 3 reads a little over 3.
    assert found["node_ethtool_pps_allowance_exceeded"]["value"] == pytest.approx(3, rel=0.02)
    increase = [q["query"][0] for q in queries if "pps_allowance" in q["query"][0]]
    assert increase == ["sum by (instance) (increase(node_ethtool_pps_allowance_exceeded[2h]))"]
    assert by_name(report)["node-1"]["cause"] == "compute"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1]", "expected"),
        ('{"node-0": 3}', "expected {metric: number}"),
        ('{"node-0": {"x": "hot"}}', "node-0.x: not a number"),
        ('{"node-0": ', ": not JSON: line 1, column 12"),
    ],
)
def test_bad_evidence_exits_2_with_one_line(tmp_path: Path, content: str, message: str) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", generate(9, {}))
    evidence = tmp_path / "e.json"
    evidence.write_text(content)
    result = CliRunner().invoke(app, ["stragglers", str(path), "--evidence", str(evidence)])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


# --------------------------------------------------------------------------- bad lines


GOOD = '{"step": 1, "rank": 0, "node": "a", "seconds": 1.0, "compute_s": 0.5}\n'


@pytest.mark.parametrize(
    ("text", "name", "message"),
    [
        (GOOD + "\n" + GOOD + '{"step": 2, "rank": "x", "seconds": 1}\n', "t.jsonl", ":4: 'rank'"),
        (GOOD * 3 + '{"step": 2, "rank": 1, "seconds": 1, "compute_s": -1}\n', "t.jsonl", ":4:"),
        (GOOD * 2 + '{"step": 2, "rank": 1, "seconds": 1e999}\n', "t.jsonl", ":3: 'seconds'"),
        (GOOD * 2 + "not json\n", "t.jsonl", ":3: not a JSON line"),
        (GOOD + '{"step": 2, "rank": 1}\n', "t.jsonl", ":2: missing 'seconds'"),
        (GOOD + '{"step": 2.5, "rank": 1, "seconds": 1}\n', "t.jsonl", ":2: 'step' is not an int"),
        ("step,rank,seconds\n1,0,1.0\n1,1,\n", "t.csv", "t.csv:3: missing 'seconds'"),
        ("step,rank,seconds,compute_s\n1,0,1.0,x\n", "t.csv", "t.csv:2: 'compute_s' is not"),
    ],
)
def test_a_bad_line_is_named_by_number(tmp_path: Path, text: str, name: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    result = CliRunner().invoke(app, ["stragglers", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_what_pyarrow_is_stricter_about_is_still_read(tmp_path: Path) -> None:
    """A rank written "3" or 3.0, a numeric node: the rules allow them, pyarrow's typed
    columns do not; the line-by-line reader takes over and reads them."""
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"step": 1, "rank": "0", "node": 7, "seconds": 1}\n'
        '{"step": 1.0, "rank": 1, "node": 7, "seconds": "1.5"}\n'
    )
    trace = st.read_file(path)
    assert trace.ranks.tolist() == [0, 1] and trace.node_names == ("7",)
    assert trace.matrix().tolist() == [[1.0, 1.5]]


def test_a_repeated_row_counts_once_the_last_one(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {"step": 1, "rank": 0, "node": "a", "seconds": 5.0},
            {"step": 1, "rank": 1, "seconds": 1.0},
            {"step": 1, "rank": 0, "node": "b", "seconds": 2.0},
        ],
    )
    trace = st.read_file(path)
    assert trace.matrix().tolist() == [[2.0, 1.0]]
    assert [trace.node_of(r) for r in (0, 1)] == ["b", "rank-1"]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"step": 1, "rank": 0}], "lack seconds"),
        (
            [{"step": 1, "rank": 0, "seconds": 1.0}, {"step": 1, "rank": 1, "seconds": None}],
            "row 2",
        ),
        ([{"step": 1, "rank": "a", "seconds": 1.0}], "column 'rank' is string"),
        ([{"step": 1, "rank": 0, "seconds": -2.0}], "t.parquet: row 1: seconds must be"),
    ],
)
def test_bad_parquet_exits_2_with_one_line(
    tmp_path: Path, rows: list[dict[str, Any]], message: str
) -> None:
    path = write_parquet(tmp_path / "t.parquet", rows)
    result = CliRunner().invoke(app, ["stragglers", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_a_file_that_is_not_parquet_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1 but nothing else")
    result = CliRunner().invoke(app, ["stragglers", str(path)])
    assert result.exit_code == 2 and "not a readable Parquet file" in result.stderr
    assert result.stderr.count("\n") == 1


def test_prometheus_phases_give_the_same_causes_as_the_file(tmp_path: Path) -> None:
    from tests.workloads.diagnosis.test_stragglers import real_prometheus

    rows = generate(10, {1: "communication"})
    from_file = run_json(str(write_jsonl(tmp_path / "t.jsonl", rows)))
    with real_prometheus(rows, repeat=2) as url:
        from_prom = run_json(
            "--prometheus", url, "--namespace", "team-a", "--job", "train-a", "--range", "3h"
        )
    from_file.pop("source"), from_prom.pop("source")
    assert from_prom == from_file
    assert by_name(from_prom)["node-1"]["cause"] == "communication"
