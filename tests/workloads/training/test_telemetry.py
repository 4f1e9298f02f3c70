"""Trainer telemetry end to end, and the compute options of the job file, on the CPU.

1. The 3-D trainer, 2 real ranks (gloo, a file store), serves `/metrics` on 127.0.0.1; a
   real Prometheus scrapes it as the platform's `training` PodMonitor would (the target's
   namespace and job, the trainer's own `job` label dropped) with the platform's rules
   loaded: every series the inventory lists for training is there, with the figures of the
   trainer's own step events (loss, gradient norm, step, tokens/s, TFLOPS per GPU, MFU), every
   rank's phases, and TrainingMfuLow fires for this job (a CPU is far under the 0.35 target).
   The same numbers are in the TensorBoard event files, read back by TensorBoard's reader.
2. `compile`, `model.gradient_checkpointing` and `bf16` in the 3-D trainer, one process:
   checkpointing recomputes (the MLP runs twice a micro-batch) and gives the eager losses
   exactly, compile (inductor, its C++ CPU backend) compiles every decoder layer and gives
   them to float rounding, bf16 (autocast) gives them to bf16 rounding and not exactly.
3. The same options in the ZeRO trainer (DeepSpeed's engine.compile, bf16 mode).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.workloads.training.harness import REPO, Run, job_config, kill_all
from workloads.diagnosis.stragglers import PHASE_METRIC, PHASES
from workloads.training.data import write_synthetic_shards

NAMESPACE, JOB = "foundation", "pretrain-3d"
TINY = {
    "seq_len": 16,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
}


def parallel_config(tmp: Path, data: Path, **over: Any) -> dict[str, Any]:
    return {
        "model": dict(TINY),
        "data": {"path": str(data)},
        "checkpoint": {"dir": str(tmp / "ckpt"), "interval_steps": 10},
        "max_steps": 40,
        "micro_batch_size": 2,
        "global_batch_size": 8,
        "bf16": False,
        "lr": 0.01,
        "peak_tflops_per_device": 1.0,
        "parallel": {"tp": 1, "pp": 1},
        **over,
    }


def _prometheus() -> str:
    found = shutil.which("prometheus")
    if found is None:
        if os.environ.get("LLMP_REQUIRE_PROMETHEUS") == "1":
            pytest.fail("prometheus required (LLMP_REQUIRE_PROMETHEUS=1), not on PATH")
        pytest.skip("prometheus not installed (apt-get install prometheus)")
    return found


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def test_the_3d_trainer_is_scraped_by_prometheus_and_logs_the_same_numbers_to_tensorboard(
    tmp_path: Path,
) -> None:
    from monitoring.inventory import INVENTORY
    from tests.monitoring import servers

    binary = _prometheus()
    data = tmp_path / "tokens"
    write_synthetic_shards(data, n_shards=2, tokens_per_shard=20_000, vocab=256)
    board = tmp_path / "tensorboard"
    cfg = parallel_config(tmp_path, data, tensorboard_dir=str(board))
    port = servers.free_port()
    extra = ["--metrics-port", str(port), "--metrics-addr", "127.0.0.1", "--job-name", "ignored"]
    procs: list[subprocess.Popen[bytes]] = []
    prometheus = None
    try:
        run = Run(
            tmp_path / "run",
            cfg,
            2,
            extra,
            procs.append,
            module="workloads.training.parallel",
        )
        job = servers.monitor_job(
            "training", JOB, f"127.0.0.1:{port}", {"namespace": NAMESPACE, "pod": f"{JOB}-0"}
        )
        prometheus = servers.Prometheus(
            binary,
            tmp_path / "prom",
            jobs=[job],
            # The platform's rules, `for` scaled from minutes to about a second.
            rule_files=servers.platform_rule_files(0.001),
        )
        run.wait_for(lambda ev: any(e["event"] == "step" for e in ev), 300)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            scraped = _samples(r.read().decode())
        prom = prometheus
        selector = f'{{namespace="{NAMESPACE}",job="{JOB}"}}'

        def mfu_alerts() -> list[dict[str, str]]:
            return [
                a["labels"] for a in prom.alerts() if a["labels"]["alertname"] == "TrainingMfuLow"
            ]

        servers.wait_until(
            lambda: (prom.value(f"llmp_train_step{selector}") or 0) >= 5,
            120,
            "Prometheus to scrape 5 steps",
        )
        firing = servers.wait_until(mfu_alerts, 60, "TrainingMfuLow")
        assert run.wait(180) == [0, 0], run.stderr_tail()
        assert prom.rule_errors() == []

        def last(metric: str) -> list[dict[str, Any]]:
            # last_over_time: the newest sample, past the staleness marker of the exit.
            return prom.query(f"last_over_time({metric}{selector}[10m])")

        series = {m: last(m) for m in sorted(INVENTORY["training"])}
    finally:
        kill_all(procs)
        if prometheus is not None:
            prometheus.stop()

    # What the trainer serves over HTTP: every rank's phases, the per-job figures.
    assert {
        (labels["rank"], labels["phase"]) for name, labels, _ in scraped if name == PHASE_METRIC
    } == {(str(r), p) for r in (0, 1) for p in PHASES}
    # Every series the inventory promises, under the target's namespace and job only.
    assert all(series.values()), {m: bool(v) for m, v in series.items()}
    for metric, results in series.items():
        for result in results:
            assert result["metric"]["namespace"] == NAMESPACE, (metric, result)
            assert result["metric"]["job"] == JOB, (metric, result)
    steps = {e["step"]: e for e in run.of("step")}
    final = steps[max(steps)]
    assert final["step"] == cfg["max_steps"]

    def value(metric: str) -> float:
        (result,) = series[metric]
        return float(result["value"][1])

    # The last scrape before the exit: the figures of its step's event (or of the next
    # step's, when the scrape fell between the trainer's setting them and the step number).
    scraped_step = int(value("llmp_train_step"))
    assert 5 <= scraped_step <= cfg["max_steps"]
    candidates = [steps[s] for s in (scraped_step, scraped_step + 1) if s in steps]
    figures = {
        "llmp_train_loss": ("loss", 6),
        "llmp_train_grad_norm": ("grad_norm", 6),
        "llmp_train_tokens_per_second": ("tokens_per_s", 1),
        "llmp_train_tflops_per_gpu": ("tflops_per_device", 6),
    }
    assert any(
        all(round(value(m), digits) == e[key] for m, (key, digits) in figures.items())
        for e in candidates
    ), ({m: value(m) for m in figures}, candidates)
    # MFU: TFLOPS per GPU over the peak (1 TFLOPS here).
    assert value("llmp_train_mfu") == pytest.approx(value("llmp_train_tflops_per_gpu"))
    assert {(r["metric"]["rank"], r["metric"]["phase"]) for r in series[PHASE_METRIC]} == {
        (str(r), p) for r in (0, 1) for p in PHASES
    }
    # Saves after steps 10, 20, 30 and 40; a published one's stall is the gauge's.
    published = run.of("checkpoint_published")
    assert [e["step"] for e in published] == [10, 20, 30, 40]
    stall = round(value("llmp_checkpoint_stall_seconds"), 4)
    assert stall in {e["stall_s"] for e in published}
    # The alert for MFU under the stack's target is raised for this job (and only it).
    assert all((a["namespace"], a["job"]) == (NAMESPACE, JOB) for a in firing), firing

    # TensorBoard: the same numbers, one point per step, read by TensorBoard's own reader.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(board))
    acc.Reload()
    losses = {e.step: e.value for e in acc.Scalars("train/loss")}
    assert sorted(losses) == sorted(steps)
    for s, event in steps.items():
        assert losses[s] == pytest.approx(event["loss"], abs=1e-5)
    mfu = {e.step: e.value for e in acc.Scalars("train/mfu")}
    assert mfu[max(steps)] == pytest.approx(final["mfu"], abs=5e-7)  # the event rounds to 6
    tags = set(acc.Tags()["scalars"])
    assert {f"train/{n}" for n in ("tokens_per_second", "tflops_per_gpu", "grad_norm")} <= tags
    assert {f"phase/{p}_seconds_max" for p in PHASES} <= tags


def test_compile_checkpointing_and_bf16_in_the_3d_trainer(tmp_path: Path) -> None:
    data = tmp_path / "tokens"
    write_synthetic_shards(data, n_shards=1, tokens_per_shard=20_000, vocab=256)
    base = parallel_config(tmp_path, data, max_steps=3, global_batch_size=4)
    base.pop("peak_tflops_per_device")
    configs = {
        "eager": base,
        "checkpointing": {**base, "model": {**TINY, "gradient_checkpointing": True}},
        "compile": {**base, "compile": True},
        "bf16": {**base, "bf16": True},
    }
    (tmp_path / "configs.json").write_text(json.dumps(configs))
    out = tmp_path / "out.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "2"}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.workloads.training.options_run",
            str(tmp_path / "configs.json"),
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(out.read_text())
    eager = got["eager"]["loss"]
    # 3 steps x 2 micro-batches: the MLP runs 6 times, 12 with its activations recomputed.
    assert got["eager"]["mlp_forwards"] == 6
    assert got["checkpointing"]["mlp_forwards"] == 12
    assert got["checkpointing"]["checkpointing"] == [True, True]
    assert got["checkpointing"]["loss"] == eager  # recomputation repeats the same arithmetic
    assert got["compile"]["compiled"] == [True, True]
    assert got["compile"]["loss"] == pytest.approx(eager, rel=1e-5)
    assert got["bf16"]["loss"] == pytest.approx(eager, rel=2e-2)
    assert got["bf16"]["loss"] != eager  # bf16 arithmetic took effect
    assert eager[-1] < eager[0]


def _zero_run(tmp: Path, data: Path, name: str, **over: Any) -> tuple[dict[str, Any], list[float]]:
    """One rank of the ZeRO trainer (ZeRO-3, fp32 unless `bf16`): its start event and the
    losses of its 3 steps."""
    cfg = job_config(tmp / name, data, max_steps=3, **over)
    procs: list[subprocess.Popen[bytes]] = []
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor")}
    try:
        run = Run(tmp / name, cfg, 1, [], procs.append, env=env)
        assert run.wait(900) == [0], run.stderr_tail()
    finally:
        kill_all(procs)
    (start,) = run.of("start")
    return start, [e["loss"] for e in run.of("step")]


def test_compile_checkpointing_and_bf16_in_the_zero_trainer(tmp_path: Path) -> None:
    data = tmp_path / "tokens"
    write_synthetic_shards(data, n_shards=1, tokens_per_shard=20_000, vocab=256)
    plain, eager = _zero_run(tmp_path, data, "eager")
    options, both = _zero_run(
        tmp_path,
        data,
        "compiled",
        compile=True,
        model={"gradient_checkpointing": True},
    )
    _, bf16 = _zero_run(tmp_path, data, "bf16", bf16=True)
    assert (plain["compiled"], plain["gradient_checkpointing"]) == (False, False)
    assert (options["compiled"], options["gradient_checkpointing"]) == (True, True)
    assert len(eager) == 3 and eager[-1] < eager[0]
    # Compiled (DeepSpeed's engine.compile, inductor) with activations recomputed: the same
    # losses to float rounding.
    assert both == pytest.approx(eager, rel=1e-4)
    assert bf16 == pytest.approx(eager, rel=2e-2) and bf16 != eager


def test_the_inventorys_training_metrics_are_what_the_trainers_serve() -> None:
    from monitoring.inventory import INVENTORY
    from workloads.training.telemetry import JOB_GAUGES

    served = {name for name, _ in JOB_GAUGES} | {"llmp_train_step_seconds", PHASE_METRIC}
    assert INVENTORY["training"] == served
