"""What both trainers publish about their steps: the step clock, Prometheus gauges, step-time
lines and TensorBoard scalars, all from the same numbers.

`workloads.training.train` (DeepSpeed ZeRO) and `workloads.training.parallel` (TP x PP x FSDP)
measure a step the same way (`StepClock`: consecutive laps of one clock, one per phase of
PHASES, adding up to the step) and hand rank 0 every rank's figures once per step; rank 0's
`Telemetry` then

- serves Prometheus gauges (`--metrics-port`; the pods' container port `metrics`, scraped by
  the platform's `training` PodMonitor): per rank the step time and each phase's seconds, per
  job tokens per second, TFLOPS per GPU, MFU, loss, gradient norm, the step number and the
  last checkpoint's time, stall and write;
- appends step-time lines for `llmp stragglers` (`--step-times`);
- writes TensorBoard event files (`tensorboard_dir` in the job config): the same scalars under
  `train/...`, one point per optimizer step.

Why TensorBoard, of the field's trackers: it is files, not a service. Event files go to the
shared file system beside the checkpoints (and to S3 with them), a pod needs no tracking
server, account or egress (MLflow needs a server the pods reach, W&B a SaaS account and the
internet), and `tensorboard --logdir` reads them anywhere later. They are written with
tensorboardX (numpy, protobuf and packaging only, already in the trainer image), whose files
are TensorBoard's own format; the tests read them back with TensorBoard's reader.

MFU is the model's training FLOPs per token (`model.flops_per_token`, PaLM's 6N + 12·L·d·T)
times tokens per second per GPU over the GPU's dense BF16 peak (the catalog's
`peak_bf16_tflops` of the job's instance type, or the job's `peak_tflops_per_device`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import torch

from workloads.diagnosis.stragglers import PHASE_METRIC, PHASES

RANK_LABELS = ["job", "rank", "node"]
"""The labels of the per-rank gauges."""

JOB_GAUGES: tuple[tuple[str, str], ...] = (
    ("llmp_train_tokens_per_second", "Tokens per second of the last step (its slowest rank)"),
    ("llmp_train_loss", "Mean loss over the ranks of the last step"),
    (
        "llmp_train_tflops_per_gpu",
        "Achieved model TFLOPS per GPU of the last step (its slowest rank)",
    ),
    (
        "llmp_train_mfu",
        "Model FLOPs utilisation of the last step: TFLOPS per GPU over the GPU's dense BF16 "
        "peak (pretraining only)",
    ),
    ("llmp_train_grad_norm", "Global gradient norm of the last step, before clipping"),
    ("llmp_train_step", "The last optimizer step taken (1-based)"),
    (
        "llmp_checkpoint_last_success_timestamp_seconds",
        "Unix time of the last published checkpoint",
    ),
    (
        "llmp_checkpoint_stall_seconds",
        "Seconds rank 0's training loop waited for the last published checkpoint (save call, "
        "snapshot copy wait, durability agreement)",
    ),
    (
        "llmp_checkpoint_write_seconds",
        "Seconds from the last published checkpoint's save to its slowest rank's shards being "
        "durable",
    ),
)
"""The per-job gauges (label `job`), name and help text."""

STEP_SCALARS = ("tokens_per_second", "loss", "tflops_per_gpu", "mfu", "grad_norm")
"""The per-job figures of a step, as `Telemetry.step` takes them (gauge `llmp_train_<name>`,
TensorBoard tag `train/<name>`)."""


class StepClock:
    """One rank's time in a step, split into PHASES: each `lap(phase)` gives the time since
    the previous lap to `phase`, so the phases add up to `total()`. On CUDA each lap
    synchronizes the device, so a phase counts the GPU work it launched."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.start()

    def start(self) -> None:
        self.begun = self.last = time.perf_counter()
        self.spent = dict.fromkeys(PHASES, 0.0)

    def lap(self, phase: str) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        now = time.perf_counter()
        self.spent[phase] += now - self.last
        self.last = now

    def total(self) -> float:
        return self.last - self.begun

    def seconds(self) -> list[float]:
        return [self.spent[p] for p in PHASES]



def add_arguments(p: argparse.ArgumentParser) -> None:
    """The telemetry flags both trainers take, each defaulting to the variable the job's
    pods set (`LLMP_STEP_TIMES`, `LLMP_METRICS_PORT`, `LLMP_METRICS_ADDR`, `LLMP_JOB_NAME`)."""
    p.add_argument(
        "--step-times",
        default=os.environ.get("LLMP_STEP_TIMES"),
        help="rank 0 appends every rank's step time here (JSON lines, for llmp stragglers)",
    )
    port = os.environ.get("LLMP_METRICS_PORT")
    p.add_argument(
        "--metrics-port",
        type=int,
        default=int(port) if port else None,
        help="rank 0 serves Prometheus metrics on this port (needs prometheus_client)",
    )
    p.add_argument("--metrics-addr", default=os.environ.get("LLMP_METRICS_ADDR", "0.0.0.0"))
    p.add_argument(
        "--job-name",
        default=os.environ.get("LLMP_JOB_NAME"),
        help="the metrics' job label; default the config file's stem",
    )

def tflops_per_gpu(flops_per_token: float, tokens: int, seconds: float, gpus: int) -> float:
    """Achieved model TFLOPS per GPU of a step of `tokens` that took `seconds` on `gpus`."""
    return flops_per_token * tokens / seconds / gpus / 1e12


class Telemetry:
    """Rank 0 records every rank's step time and phases and the job's figures: Prometheus
    gauges, step-time JSON lines and TensorBoard scalars, each only when asked for (on the
    other ranks it does nothing).

    Series per job: 6 per rank (the step time, and one per phase: the `phase` label takes
    exactly the 5 values of PHASES), so 6 x ranks (6,144 for 1,024 GPUs), and 9 per job."""

    def __init__(
        self,
        job: str,
        nodes: list[str],
        *,
        rank: int,
        step_times: str | None = None,
        metrics_port: int | None = None,
        metrics_addr: str = "0.0.0.0",
        tensorboard_dir: str | None = None,
    ) -> None:
        self.job = job
        self.nodes = nodes
        self.file: Any = None
        self.gauges: dict[str, Any] | None = None
        self.writer: Any = None
        self.server: Any = None
        if rank != 0:
            return
        if step_times:
            path = Path(step_times)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.file = path.open("a")
        if tensorboard_dir:
            self.writer = _tensorboard_writer(tensorboard_dir)
        if metrics_port is not None:
            self._serve(metrics_port, metrics_addr)

    def _serve(self, port: int, addr: str) -> None:
        try:
            import prometheus_client as prom
        except ImportError:
            logging.getLogger(__name__).warning("prometheus_client missing: no metrics")
            return
        registry = prom.CollectorRegistry()
        gauges = {
            "llmp_train_step_seconds": prom.Gauge(
                "llmp_train_step_seconds",
                "Each rank's time for the last step",
                RANK_LABELS,
                registry=registry,
            ),
            PHASE_METRIC: prom.Gauge(
                PHASE_METRIC,
                "Each rank's seconds in each phase of the last step",
                [*RANK_LABELS, "phase"],
                registry=registry,
            ),
        }
        for name, text in JOB_GAUGES:
            gauges[name] = prom.Gauge(name, text, ["job"], registry=registry)
        try:
            self.server = prom.start_http_server(port, addr=addr, registry=registry)
        except OSError as e:  # a busy port must not stop training (the others would hang)
            logging.getLogger(__name__).warning("no metrics on port %s: %s", port, e)
            return
        self.gauges = gauges

    def step(
        self,
        step: int,
        times: list[float],
        phases: list[list[float]],
        *,
        tokens_per_second: float,
        loss: float | None = None,
        tflops_per_gpu: float | None = None,
        mfu: float | None = None,
        grad_norm: float | None = None,
    ) -> None:
        """`times[r]`: rank r's step seconds; `phases[r]`: its seconds in each of PHASES, in
        that order. A figure that is None (MFU without a known peak, a gradient norm DeepSpeed
        did not compute) is not published."""
        figures = {
            "tokens_per_second": tokens_per_second,
            "loss": loss,
            "tflops_per_gpu": tflops_per_gpu,
            "mfu": mfu,
            "grad_norm": grad_norm,
        }
        if self.file is not None:
            lines = []
            for r, t in enumerate(times):
                row: dict[str, Any] = {"step": step, "rank": r, "node": self.nodes[r]}
                row["seconds"] = t
                row.update({f"{p}_s": round(v, 6) for p, v in zip(PHASES, phases[r], strict=True)})
                lines.append(json.dumps(row) + "\n")
            self.file.write("".join(lines))
            self.file.flush()
        if self.gauges is not None:
            for r, t in enumerate(times):
                labels = (self.job, str(r), self.nodes[r])
                self.gauges["llmp_train_step_seconds"].labels(*labels).set(t)
                for p, v in zip(PHASES, phases[r], strict=True):
                    self.gauges[PHASE_METRIC].labels(*labels, p).set(v)
            for name, value in figures.items():
                if value is not None:
                    self.gauges[f"llmp_train_{name}"].labels(self.job).set(value)
            self.gauges["llmp_train_step"].labels(self.job).set(step)
        if self.writer is not None:
            for name, value in figures.items():
                if value is not None:
                    self.writer.add_scalar(f"train/{name}", value, step)
            self.writer.add_scalar("train/step_seconds_max", max(times), step)
            for i, p in enumerate(PHASES):
                self.writer.add_scalar(f"phase/{p}_seconds_max", max(r[i] for r in phases), step)

    def checkpoint_published(self, stall_s: float, write_s: float, step: int | None = None) -> None:
        if self.gauges is not None:
            g = self.gauges
            g["llmp_checkpoint_last_success_timestamp_seconds"].labels(self.job).set(time.time())
            g["llmp_checkpoint_stall_seconds"].labels(self.job).set(stall_s)
            g["llmp_checkpoint_write_seconds"].labels(self.job).set(write_s)
        if self.writer is not None and step is not None:
            self.writer.add_scalar("checkpoint/stall_seconds", stall_s, step)
            self.writer.add_scalar("checkpoint/write_seconds", write_s, step)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.server is not None:
            server, _thread = self.server
            server.shutdown()
            server.server_close()
            self.server = None


def _tensorboard_writer(directory: str) -> Any:
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        logging.getLogger(__name__).warning("tensorboardX missing: no TensorBoard events")
        return None
    Path(directory).mkdir(parents=True, exist_ok=True)
    # flush_secs: a restarted job's last minute of points is what an operator looks at.
    return SummaryWriter(logdir=directory, flush_secs=10)
