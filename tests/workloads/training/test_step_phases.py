"""Per-phase step times from 2 real CPU ranks (gloo, ZeRO-3, async saves): every step-times
line carries the five phases and they add up to `seconds`; rank 0 serves them, the
checkpoint stall and write seconds, loss, TFLOPS per GPU and MFU, as Prometheus gauges on
127.0.0.1."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.workloads.training.harness import Run, job_config, kill_all
from workloads.diagnosis.stragglers import PHASE_METRIC, PHASES
from workloads.training.data import write_synthetic_shards


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def test_phases_sum_to_the_step_and_are_served_with_the_checkpoint_figures(
    tmp_path: Path,
) -> None:
    pytest.importorskip("prometheus_client")
    data = tmp_path / "tokens"
    write_synthetic_shards(data, n_shards=2, tokens_per_shard=20_000, vocab=256)
    port = _free_port()
    cfg = job_config(
        tmp_path,
        data,
        max_steps=8,
        step_sleep_s=0.3,  # long enough a run to scrape while it trains
        checkpoint={"interval_steps": 2, "async_save": True},
    )
    times = tmp_path / "steps.jsonl"
    extra = ["--step-times", str(times), "--metrics-port", str(port)]
    extra += ["--metrics-addr", "127.0.0.1", "--job-name", "p1"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        run = Run(tmp_path / "run", cfg, 2, extra, procs.append)
        run.wait_for(lambda ev: any(e["event"] == "checkpoint_published" for e in ev), 180)
        run.wait_for(lambda ev: sum(e["event"] == "step" for e in ev) >= 4, 60)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = _samples(r.read().decode())
        assert run.wait(120) == [0, 0], run.stderr_tail()
    finally:
        kill_all(procs)

    rows = [json.loads(line) for line in times.read_text().splitlines()]
    assert [(r["step"], r["rank"]) for r in rows] == [(s, r) for s in range(1, 9) for r in (0, 1)]
    for row in rows:
        phases = {p: row[f"{p}_s"] for p in PHASES}
        assert all(v >= 0 for v in phases.values()), row
        # Laps of one clock: the sum is `seconds` up to the 6-decimal rounding of each.
        assert sum(phases.values()) == pytest.approx(row["seconds"], abs=1e-5), row
        # Each step reads its batch, computes, reduces gradients (ZeRO-3) and steps.
        for p in ("data_wait", "compute", "collective", "optimizer"):
            assert phases[p] > 0, (p, row)
    by_step = {s: [r for r in rows if r["step"] == s] for s in range(1, 9)}
    # Saves after steps 2, 4, 6: each one's save call is in the next step's checkpoint phase;
    # steps 1 and 2 come before any save and have none.
    for s in (1, 2):
        assert all(r["checkpoint_s"] == 0 for r in by_step[s]), by_step[s]
    for s in (3, 5, 7):
        assert all(r["checkpoint_s"] > 0 for r in by_step[s]), by_step[s]
    events = {e["step"]: e for e in run.of("step")}
    for s, pair in by_step.items():
        assert events[s]["ckpt_stall_s"] == pytest.approx(pair[0]["checkpoint_s"], abs=1e-4)
        assert max(r["seconds"] for r in pair) == pytest.approx(
            events[s]["step_time_max_s"], abs=1e-4
        )

    host = socket.gethostname()
    phase_series = {
        (labels["rank"], labels["phase"]): value
        for name, labels, value in metrics
        if name == PHASE_METRIC and labels["job"] == "p1" and labels["node"] == host
    }
    assert set(phase_series) == {(str(r), p) for r in (0, 1) for p in PHASES}
    assert phase_series[("0", "compute")] > 0
    per_job: dict[str, Any] = {
        name: value for name, labels, value in metrics if labels == {"job": "p1"}
    }
    for name in ("llmp_checkpoint_stall_seconds", "llmp_checkpoint_write_seconds"):
        assert per_job.get(name, 0) > 0, (name, per_job)
    # Loss, TFLOPS per GPU and MFU are the figures of one of the step events.
    steps = list(events.values())
    assert round(per_job["llmp_train_loss"], 5) in {e["loss"] for e in steps}, per_job
    tflops = per_job["llmp_train_tflops_per_gpu"]
    assert tflops > 0 and round(tflops, 6) in {e["tflops_per_device"] for e in steps}
    if steps[0]["mfu"] is None:
        assert "llmp_train_mfu" not in per_job
    else:
        assert round(per_job["llmp_train_mfu"], 6) in {e["mfu"] for e in steps}
    published = run.of("checkpoint_published")
    assert {round(per_job["llmp_checkpoint_stall_seconds"], 4)} <= {e["stall_s"] for e in published}
    assert {round(per_job["llmp_checkpoint_write_seconds"], 4)} <= {
        e["background_write_s"] for e in published
    }
