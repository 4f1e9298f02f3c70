"""Training entry point: `python -m workloads.training.train --config job.{json,yaml}`.

One process per rank. Rank and world come from the usual torchrun variables
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or from
`--rank/--world-size/--init-method`; tests pass `file://` init methods because a
TCPStore server listens on every interface, and tests must bind only loopback.
With env:// and a loopback MASTER_ADDR (tests and drills on one machine, e.g.
under torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1) rank 0 binds the
workers' TCPStore to that address itself (`_loopback_store`); with any other
MASTER_ADDR, as in production, or with the agent's store, env:// is unchanged.

stdout carries JSON lines from rank 0 only (`event`: start, resume, step,
checkpoint_saved, checkpoint_published, exit; each with `time`, Unix seconds), so
log shipping can parse them and a restarted job's logs from several nodes can be
put back in order. A checkpoint's figures: `checkpoint_saved.stall_s` is the save call;
`checkpoint_published` has `stall_s`, all rank 0's loop waited for that checkpoint
(the save call, the snapshot copy's wait at the next optimizer step, the agreement that
every rank's shards are durable; a save at the exit is waited for once training is
over, which is not counted), `background_write_s`, from the save to the slowest rank's
last shard durable, and `write_s`, from the save to its publication.

Stopping: SIGTERM (spot reclaim gives two minutes; Kubernetes sends it to one pod
at a time) only sets a flag. Every step all ranks exchange their flags with the
step times, so the *whole* job agrees on the same step to checkpoint and exits 0
together; a rank that exited alone would hang the others in the next collective.

Under an elastic agent (torchrun sets TORCHELASTIC_RUN_ID) exit 0 means "the job
is done" to the agent, which then leaves the job. That is only right for a rank
that was itself told to stop (its agent is restarting it, or its pod is going).
A rank stopped only because a peer was told waits `--elastic-stop-grace-s` for its
own SIGTERM (agents notice a joining node at about the same time), and if none
comes exits EXIT_REJOIN, so its agent restarts it into the next rendezvous.

A stale `tmp-step-N` (left by an incarnation killed before publishing step N,
possibly at another world size) is removed before step N is saved again, so its
extra ranks' shards are never sealed into the new checkpoint. A rank that fails
(a peer died mid-collective) exits at once, without the interpreter's teardown:
its agent restarts the group only when all its workers are gone.

Per-rank step times (rank 0, from that same exchange): `--step-times PATH`
(or LLMP_STEP_TIMES) appends JSON lines `{"step", "rank", "node", "seconds",
"data_wait_s", "compute_s", "collective_s", "optimizer_s", "checkpoint_s"}` for
`llmp stragglers`; `--metrics-port` (or LLMP_METRICS_PORT) serves Prometheus
gauges when prometheus_client is installed; the config's `tensorboard_dir` gets
TensorBoard scalars (`workloads.training.telemetry`, shared with the 3-D trainer). All
are off unless asked for. The node is NODE_NAME (the Downward API's spec.nodeName) or
the host name.

What a step's times cover (`StepClock`). `seconds` is the rank's own time in step N:
from the end of step N-1's exchange (and rank 0's logging of it) to the start of step
N's exchange. The exchange itself is left out: a rank waits in it for the slowest one,
and a wait would make every rank look as slow as the slowest (the wait is
step_time_max_s - seconds). The phases are consecutive laps of one clock, so they add
up to `seconds` exactly (up to the rounding of the numbers written):

- data_wait: reading the micro-batches' samples from the data source (the token
  shards, or the records); tokenizing, collating and the copy to the device count
  as compute.
- compute: forward and backward, and the loop's own glue. Under ZeRO-3 this includes
  the parameter all-gathers of forward and backward and the gradient reduce-scatters
  DeepSpeed issues during backward: they are interleaved with the computation
  (overlapped on GPU), and separating them would need a synchronization after every
  collective (DeepSpeed's comms logger does that, at a cost on GPU).
- collective: DeepSpeed's gradient reduction at the end of backward
  (`engine.allreduce_gradients`): under ZeRO-2/3 the last bucket and the wait for
  every reduction still in flight, under ZeRO-0/1 the whole reduction. The
  collectives inside the optimizer step (gradient norm, overflow check, ZeRO-1/2's
  all-gather of the updated partitions) count as optimizer.
- optimizer: `engine.step()` (the update, the schedule, zeroing the gradients).
- checkpoint: what the loop waited for checkpoints in this step: the save of step
  N-1's state, taken right after its exchange, the wait for that snapshot's copy
  before this step's optimizer step (async saves; 0 when the copy finished during
  forward and backward), and the agreement that an earlier save is durable on every
  rank (async; rank 0 then publishes it on a thread of its own) or, for sync saves,
  the whole write and publication. Exactly 0 in a step without any. A step event's
  `ckpt_stall_s` is rank 0's. The save after the last step is in no step.

On CUDA the clock synchronizes the device at each lap, so a phase counts the GPU work
it launched, not only the host's time to launch it.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed
import torch.distributed as dist
from torch.distributed.constants import default_pg_timeout

from contracts.training import JobConfig, read_job_config
from workloads.diagnosis.stragglers import PHASES
from workloads.training import checkpointing as ckpt
from workloads.training import model as hf
from workloads.training import s3io
from workloads.training.data import micro_batch_start
from workloads.training.ds_config import build_ds_config, validate_ds_config
from workloads.training.objectives import Reference, objective
from workloads.training.telemetry import StepClock, Telemetry, add_arguments, tflops_per_gpu

EXIT_REJOIN = 75
"""Exit status (EX_TEMPFAIL) of a rank that stopped with its group but is not done."""

_EMIT = threading.Lock()  # rank 0's publisher thread emits too: whole lines only


def emit(event: str, **fields: Any) -> None:
    if dist.get_rank() == 0:
        line = json.dumps({"event": event, "time": round(time.time(), 3), **fields})
        with _EMIT:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


class Stop:
    """SIGTERM only raises a flag: the loop decides, collectively, where to stop."""

    requested = False

    @classmethod
    def handler(cls, signum: int, frame: FrameType | None) -> None:
        cls.requested = True


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _loopback_store(host: str, port: int, rank: int, world: int) -> dist.TCPStore:
    """The workers' store as env:// would make it, but with rank 0's server bound to the
    loopback `host` only: a TCPStore server binds every interface whatever host it is given
    (and torchrun's agents start none for us with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1)."""
    if rank != 0:
        return dist.TCPStore(host, port, world, is_master=False, timeout=default_pg_timeout)
    addr = "127.0.0.1" if host == "localhost" else host
    sock = socket.socket(
        socket.AF_INET6 if ipaddress.ip_address(addr).version == 6 else socket.AF_INET,
        socket.SOCK_STREAM,
    )
    # A restarted rank 0 may reuse the port of one that just died (its socket in TIME_WAIT).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((addr, port))
    # detach(): the store's server owns the descriptor from now on and closes it.
    return dist.TCPStore(
        host,
        port,
        world,
        is_master=True,
        timeout=default_pg_timeout,
        master_listen_fd=sock.detach(),
    )


def _init_distributed(args: argparse.Namespace) -> tuple[int, int, torch.device]:
    rank = int(args.rank if args.rank is not None else os.environ.get("RANK", 0))
    world = int(args.world_size if args.world_size is not None else os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    # DeepSpeed reads these in places of its own; keep them consistent with the flags.
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local_rank))
    # Initialise torch.distributed ourselves so that any init method (file://, tcp://, env://)
    # works; DeepSpeed then adopts the existing process group instead of doing MPI discovery.
    host, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"  # agent hosts it
    if args.init_method is None and port and _is_loopback(host) and not agent_store:
        store = _loopback_store(host, int(port), rank, world)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world)
    else:
        dist.init_process_group(
            backend, init_method=args.init_method or "env://", rank=rank, world_size=world
        )
    deepspeed.init_distributed(dist_backend=backend)
    return rank, world, device


class Checkpointer:
    """Saves through DeepSpeed, then seals and publishes once every rank is durable."""

    def __init__(self, engine: Any, job: JobConfig, world: int) -> None:
        self.engine = engine
        self.job = job
        self.world = world
        self.root = Path(job.checkpoint.dir)
        self.async_engine: ckpt.AsyncCheckpointEngine | None = None
        if job.checkpoint.async_save:
            self.async_engine = ckpt.AsyncCheckpointEngine()
            engine.checkpoint_engine = self.async_engine
        else:
            engine.checkpoint_engine = ckpt.SyncCheckpointEngine()
        self.in_flight: tuple[int, float] | None = None  # (step, save start)
        self.last_saved = -1
        self.stall_s = 0.0  # the in-flight save's stall so far: save(), snapshot wait, publish
        self._publisher: ThreadPoolExecutor | None = None  # rank 0, async saves
        self._publishing: Future[None] | None = None
        # rank 0, after each publish: (that save's stall, its write seconds)
        self.on_published: Callable[[float, float, int], None] | None = None

    def local_done(self) -> bool:
        return self.async_engine is None or not self.async_engine.pending()

    def before_optimizer_step(self) -> float:
        """Block, if need be, until the in-flight save's snapshot is copied: the optimizer
        step is the first thing that changes what it copies. Returns the seconds waited."""
        if self.async_engine is None or self.in_flight is None:
            return 0.0
        waited = self.async_engine.wait_snapshot()
        self.stall_s += waited
        return waited

    def save(self, step: int, client_state: dict[str, Any]) -> float:
        """Start a checkpoint of `step`; returns the training stall of this call in seconds
        (an async save's snapshot wait and publication come later, in `stall_s`)."""
        if self.in_flight is not None:
            self.finish()  # one save in flight at a time: bounded host memory, ordered publication
        if dist.get_rank() == 0:
            self.join_publication()  # it prunes, and `latest` must name the newest
            # Nothing of ours is in tmp-step-N now (finish() renamed any earlier save of it);
            # whatever is there was left by a job that died before publishing it.
            shutil.rmtree(self.root / ckpt.tmp_tag(step), ignore_errors=True)
        dist.barrier()
        t0 = time.perf_counter()
        self.engine.save_checkpoint(
            str(self.root),
            tag=ckpt.tmp_tag(step),
            client_state=client_state,
            save_latest=False,
            # LoRA: the adapters only; the frozen base is the job's `pretrained` directory.
            exclude_frozen_parameters=self.job.model.lora is not None,
        )
        self.in_flight = (step, t0)
        self.last_saved = step
        self.stall_s = time.perf_counter() - t0
        if self.async_engine is None:
            self.finish()
        stall = time.perf_counter() - t0
        emit(
            "checkpoint_saved",
            step=step,
            stall_s=round(stall, 4),
            mode="async" if self.async_engine else "sync",
        )
        return stall

    def finish(self, *, stalled: bool = True) -> None:
        """Wait for this rank's writes, agree that all ranks are done, publish (rank 0).

        Async saves: rank 0 seals and publishes on a thread of its own (the fsyncs of the
        manifest, the marker, the rename and `latest`: tens of milliseconds on Lustre), so
        the loop only waits for the agreement; the next save, and the exit, join it first.
        `stalled=False` at the exit, where training is over: that wait is not a stall."""
        if self.in_flight is None:
            return
        started = time.perf_counter()
        step, t0 = self.in_flight
        if self.async_engine is not None:
            self.async_engine.wait()
            write_s = self.async_engine.last_write_s
        else:
            write_s = started - t0  # the synchronous save wrote the shards
        # A max over the ranks, which is also the barrier: every rank's shards are durable.
        slowest = torch.tensor([write_s], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        self.in_flight = None
        if stalled:
            self.stall_s += time.perf_counter() - started
        if dist.get_rank() == 0:
            self.join_publication()
            seal = (step, t0, float(slowest), self.stall_s)
            if self.async_engine is not None and stalled:
                if self._publisher is None:
                    self._publisher = ThreadPoolExecutor(1, thread_name_prefix="ckpt-publish")
                self._publishing = self._publisher.submit(self._publish, *seal)
            else:
                self._publish(*seal)
        if self.async_engine is None:
            dist.barrier()  # synchronous: every rank returns once the checkpoint is published
            self.stall_s += time.perf_counter() - started

    def _publish(self, step: int, t0: float, write_s: float, stall_s: float) -> None:
        meta = {
            "world_size": self.world,
            "zero_stage": self.job.zero_stage,
            "tag": ckpt.tag(step),
            # The run's last checkpoint: retention keeps it beside the milestones.
            "final": step >= self.job.max_steps,
        }
        published = ckpt.publish(self.root, step, meta)
        ckpt.prune(self.root, self.job.checkpoint.keep_last)
        if self.async_engine is None:  # the loop is still waiting, since the save began
            stall_s = time.perf_counter() - t0
        emit(
            "checkpoint_published",
            step=step,
            bytes=published.meta["bytes"],
            write_s=round(time.perf_counter() - t0, 4),
            background_write_s=round(write_s, 4),
            stall_s=round(stall_s, 4),
        )
        if self.on_published is not None:
            self.on_published(stall_s, write_s, step)

    def join_publication(self) -> None:
        """Rank 0: wait for the publication in flight, if any; re-raise its error."""
        if self._publishing is not None:
            publishing, self._publishing = self._publishing, None
            publishing.result()

    def close(self) -> None:
        """At the exit: finish the save in flight and publish it, stop the threads."""
        self.finish(stalled=False)
        self.join_publication()
        if self._publisher is not None:
            self._publisher.shutdown(wait=True)
        if self.async_engine is not None:
            self.async_engine.cleanup()


class _TimedSource:
    """A data source (anything with `batch(first, size)`) whose reads are data_wait laps."""

    def __init__(self, source: Any, clock: StepClock) -> None:
        self._source, self._clock = source, clock

    def batch(self, first: int, size: int) -> Any:
        self._clock.lap("compute")
        try:
            return self._source.batch(first, size)
        finally:
            self._clock.lap("data_wait")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)


def _time_phases(engine: Any, step_loss: Any, clock: StepClock) -> None:
    """Lap the clock around what the loop does not call itself: the objective's reads of its
    samples (pretrain's `shards`, the record tasks' `data`) and DeepSpeed's gradient
    reduction at the end of backward (an instance attribute shadows the method, which
    `engine.backward` calls as `self.allreduce_gradients()`)."""
    for name in ("shards", "data"):
        source = getattr(step_loss, name, None)
        if callable(getattr(source, "batch", None)):
            setattr(step_loss, name, _TimedSource(source, clock))
    reduce = engine.allreduce_gradients

    def timed_reduce(*args: Any, **kwargs: Any) -> Any:
        clock.lap("compute")
        try:
            return reduce(*args, **kwargs)
        finally:
            clock.lap("collective")

    engine.allreduce_gradients = timed_reduce


INJECT_DELAY_ENV = "LLMP_INJECT_STEP_DELAY_FILE"
"""Drills and tests: the path of a file this rank reads after every step. While it holds a
number of seconds (0 to 60), the rank sleeps that long in the step, after its last in-step
collective and before the exchange, counted as compute: a straggler injected into one rank
of a running job (tests/workloads/diagnosis/slow_rank.py). Unset (production): nothing."""


def injected_delay(path: str) -> float:
    """The seconds the file at `path` asks for; 0 without the file or a number in [0, 60]."""
    try:
        seconds = float(Path(path).read_text().strip() or 0)
    except (OSError, ValueError):
        return 0.0
    return seconds if 0 < seconds <= 60 else 0.0


class RestoreFailed(RuntimeError):
    """`checkpoint.restore_from` could not be pulled (one line, the same on every rank)."""


def _pull_restore_point(job: JobConfig) -> None:
    """Rank 0: the newest complete checkpoint under `checkpoint.restore_from`, published in
    `checkpoint.dir` unless one as new is there already (`s3io.pull_restore_point`)."""
    uri = job.checkpoint.restore_from
    assert uri is not None
    t0 = time.perf_counter()
    pulled = s3io.pull_restore_point(s3io.client(), uri, job.checkpoint.dir)
    emit(
        "restore_pull",
        action=pulled.action,
        step=pulled.step,
        files=pulled.files,
        bytes=pulled.bytes,
        source=pulled.source,
        seconds=round(time.perf_counter() - t0, 3),
    )


def _resume_target(
    job: JobConfig, world: int
) -> tuple[ckpt.Checkpoint | None, str | None, bool, float]:
    """Rank 0 chooses (so all ranks load the same one) and converts if the world size changed;
    also returns the conversion's seconds. With `checkpoint.restore_from`, rank 0 first pulls
    the restore point from S3; a failure is raised on every rank (RestoreFailed)."""
    choice: list[Any] = [None, None, False, 0.0, None]
    if dist.get_rank() == 0:
        try:
            if job.checkpoint.restore_from is not None:
                _pull_restore_point(job)
        except s3io.S3Error as e:
            choice[4] = f"checkpoint.restore_from: {e}"
        else:
            found = ckpt.select_resume(job.checkpoint.dir, recover_aside=True)
            if found is not None:
                universal = found.world_size != world
                t0 = time.perf_counter()
                load_tag = ckpt.to_universal(found) if universal else found.tag
                choice = [found, load_tag, universal, time.perf_counter() - t0, None]
    dist.broadcast_object_list(choice, src=0)
    if choice[4] is not None:
        raise RestoreFailed(choice[4])
    return choice[0], choice[1], bool(choice[2]), float(choice[3])


def _reference(job: JobConfig, ds_cfg: dict[str, Any]) -> Reference:
    """The frozen base model DPO and GRPO measure the policy against."""
    if job.model.lora is not None:
        return Reference(None)  # the policy with its adapters disabled
    ref = hf.build(job.model, lora=False).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    if job.zero_stage == 3:
        # Partitioned like the policy (a 70B reference does not fit on one GPU either);
        # an engine without an optimizer, as TRL prepares its reference under ZeRO-3.
        cfg = {
            "train_micro_batch_size_per_gpu": ds_cfg["train_micro_batch_size_per_gpu"],
            "gradient_accumulation_steps": ds_cfg["gradient_accumulation_steps"],
            "zero_optimization": {"stage": 3},
            "bf16": ds_cfg["bf16"],
            "steps_per_print": 10**9,
        }
        engine, _, _, _ = deepspeed.initialize(model=ref, config=cfg)
        return Reference(engine.module)
    dtype = torch.bfloat16 if job.bf16 else torch.float32
    return Reference(ref.to(device=_device(), dtype=dtype))


def _grad_norm(engine: Any) -> float | None:
    """The global gradient norm DeepSpeed computed for the last optimizer step (before
    clipping; the same on every rank), or None where it computed none."""
    norm = engine.get_global_grad_norm()
    if norm is None:
        return None
    value = float(norm)
    return value if value == value and value != float("inf") else None


def _device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def export_fp32(engine: Any, out: Path, scratch: Path) -> None:
    """Consolidated fp32 master weights (one state dict) of the running engine, via a
    scratch checkpoint and DeepSpeed's zero_to_fp32: the same path serving exports use."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    previous, engine.checkpoint_engine = engine.checkpoint_engine, ckpt.SyncCheckpointEngine()
    engine.save_checkpoint(str(scratch), tag="export", save_latest=False)
    engine.checkpoint_engine = previous
    if dist.get_rank() == 0:
        sd = get_fp32_state_dict_from_zero_checkpoint(str(scratch), tag="export")
        torch.save({k: v.float().clone() for k, v in sd.items()}, out)
    dist.barrier()


def run(job: JobConfig, args: argparse.Namespace) -> int:
    rank, world, device = _init_distributed(args)
    signal.signal(signal.SIGTERM, Stop.handler)
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    torch.manual_seed(job.data.seed)

    try:
        resume, load_tag, universal, convert_s = _resume_target(job, world)
    except RestoreFailed as e:  # S3 refused or failed: the job's restart policy retries
        print(f"train: {e}", file=sys.stderr, flush=True)
        return 1
    ds_cfg = build_ds_config(job, load_universal=universal)
    validate_ds_config(ds_cfg)

    config = hf.hf_config(job.model)
    fpt = hf.flops_per_token(config, job.model.seq_len)  # on the meta device, before zero.Init
    zero3_init = None
    if job.zero_stage == 3:
        from transformers.integrations import HfDeepSpeedConfig

        # While this object lives, from_pretrained and from_config build under
        # deepspeed.zero.Init: each rank holds only its partition from the start, where it
        # would otherwise load the whole model (70B in fp32: 280 GB per rank, 8 per node).
        zero3_init = HfDeepSpeedConfig(ds_cfg)
    model = hf.build(job.model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = None
    if job.optimizer == "torch":
        optimizer = torch.optim.AdamW(
            trainable, lr=job.lr, weight_decay=job.weight_decay, betas=(0.9, 0.95)
        )
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, model_parameters=trainable, config=ds_cfg
    )
    if job.compile:
        # The module in place (nn.Module.compile), inductor by default: DeepSpeed's hooks stay.
        engine.compile()
    reference = _reference(job, ds_cfg) if job.task in ("dpo", "grpo") else None
    step_loss = objective(
        job, device, reference=reference, synced=job.zero_stage == 3 and world > 1
    )
    checkpointer = Checkpointer(engine, job, world)
    nodes: list[Any] = [None] * world
    dist.all_gather_object(nodes, os.environ.get("NODE_NAME") or socket.gethostname())
    telemetry = Telemetry(
        args.job_name or Path(args.config).stem,
        [str(n) for n in nodes],
        rank=rank,
        step_times=args.step_times,
        metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
        tensorboard_dir=job.tensorboard_dir,
    )
    checkpointer.on_published = telemetry.checkpoint_published

    step, consumed = 0, 0
    emit(
        "start",
        task=job.task,
        architecture=type(hf.base_model(model)).__name__,
        lora=job.model.lora is not None,
        world_size=world,
        zero_stage=job.zero_stage,
        device=str(device),
        flops_per_token=fpt,
        # What the engine and the model are, read back: the job's compute options took.
        compiled=bool(getattr(engine, "is_compiled", False)),
        gradient_checkpointing=bool(hf.base_model(model).is_gradient_checkpointing),
        bf16=job.bf16,
    )
    if resume is not None:
        t0 = time.perf_counter()
        _, client = engine.load_checkpoint(
            job.checkpoint.dir,
            tag=load_tag,
            load_optimizer_states=True,
            load_lr_scheduler_states=True,
            load_module_strict=job.model.lora is None,
        )
        if client is None:
            raise RuntimeError(
                f"DeepSpeed could not load checkpoint {load_tag} in {job.checkpoint.dir}"
            )
        # Universal checkpoints carry the client state of the step they were converted from.
        step, consumed = (
            int(client.get("step", resume.step)),
            int(client.get("samples_consumed", 0)),
        )
        checkpointer.last_saved = step
        emit(
            "resume",
            step=step,
            tag=load_tag,
            universal=universal,
            from_world_size=resume.world_size,
            world_size=world,
            convert_s=round(convert_s, 4),
            load_s=round(time.perf_counter() - t0, 4),
        )

    if args.export_fp32:
        export_fp32(engine, Path(args.export_fp32), Path(args.export_fp32).with_suffix(".scratch"))

    # MFU counts full windows: what pretraining runs; chat records are shorter.
    peak = job.peak_tflops() if job.task == "pretrain" else None
    micro, accum = job.micro_batch_size, job.gradient_accumulation_steps
    tokens_per_step = micro * accum * world * job.model.seq_len
    stop_reason = "max_steps"
    clock = StepClock(device)
    _time_phases(engine, step_loss, clock)
    injected = os.environ.get(INJECT_DELAY_ENV)
    first_metric = 4 + len(PHASES)  # after time, loss, stop, done and the phases
    checkpoint_phase = 4 + PHASES.index("checkpoint")
    clock.start()
    while step < job.max_steps:
        losses = []
        extras = torch.zeros(len(step_loss.metrics))
        for k in range(accum):
            loss, values = step_loss(
                engine, micro_batch_start(consumed, k, rank, world, micro), micro
            )
            engine.backward(loss)
            clock.lap("compute")
            boundary = engine.is_gradient_accumulation_boundary()
            if boundary and checkpointer.before_optimizer_step() > 0:
                clock.lap("checkpoint")
            engine.step()
            clock.lap("optimizer")
            losses.append(float(loss.detach()))
            extras += torch.tensor(values) / accum
        consumed += micro * accum * world
        step += 1
        if job.step_sleep_s:
            time.sleep(job.step_sleep_s)
        if injected and (delay := injected_delay(injected)):
            time.sleep(delay)
        clock.lap("compute")
        # One small collective per step carries everything the ranks must agree on.
        local = torch.cat(
            [
                torch.tensor(
                    [
                        clock.total(),
                        sum(losses) / accum,
                        float(Stop.requested),
                        float(checkpointer.local_done()),
                        *clock.seconds(),
                    ],
                    dtype=torch.float64,
                ),
                extras.double(),
            ]
        )
        gathered = [torch.zeros_like(local) for _ in range(world)]
        dist.all_gather(gathered, local)
        g = torch.stack(gathered)
        metrics = {
            name: round(float(g[:, first_metric + i].mean()), 5)
            for i, name in enumerate(step_loss.metrics)
        }
        times = g[:, 0]
        slowest = float(times.max())
        tflops = tflops_per_gpu(fpt, tokens_per_step, slowest, world)
        grad_norm = _grad_norm(engine)
        mean_loss = float(g[:, 1].mean())
        emit(
            "step",
            step=step,
            loss=round(mean_loss, 5),
            tokens_per_s=round(tokens_per_step / slowest, 1),
            tflops_per_device=round(tflops, 6),
            mfu=None if peak is None else round(tflops / peak, 6),
            grad_norm=None if grad_norm is None else round(grad_norm, 6),
            step_time_max_s=round(slowest, 4),
            step_time_min_s=round(float(times.min()), 4),
            slowest_rank=int(times.argmax()),
            ckpt_stall_s=round(float(g[0, checkpoint_phase]), 4),
            **metrics,
        )
        telemetry.step(
            step,
            [float(t) for t in times],
            g[:, 4:first_metric].tolist(),
            tokens_per_second=tokens_per_step / slowest,
            loss=mean_loss,
            tflops_per_gpu=tflops,
            mfu=None if peak is None else tflops / peak,
            grad_norm=grad_norm,
        )
        clock.start()  # step N+1 begins: its checkpoint phase holds what follows
        checkpointed = False
        if checkpointer.in_flight is not None and bool(g[:, 3].all()):
            checkpointer.finish()
            checkpointed = True
        client_state = {"step": step, "samples_consumed": consumed}
        if bool(g[:, 2].any()):
            stop_reason = "sigterm"
            if job.checkpoint.save_on_sigterm and checkpointer.last_saved != step:
                checkpointer.save(step, client_state)
            break
        if step % job.checkpoint.interval_steps == 0:
            checkpointer.save(step, client_state)
            checkpointed = True
        if checkpointed:  # otherwise these microseconds go to the next lap, and checkpoint is 0
            clock.lap("checkpoint")

    if stop_reason == "max_steps" and checkpointer.last_saved != step and step > 0:
        checkpointer.save(step, {"step": step, "samples_consumed": consumed})
    checkpointer.close()
    emit("exit", reason=stop_reason, step=step)
    del zero3_init
    telemetry.close()
    dist.barrier()
    dist.destroy_process_group()
    if stop_reason == "sigterm" and "TORCHELASTIC_RUN_ID" in os.environ:
        return _await_own_stop(args.elastic_stop_grace_s)
    return 0


def _await_own_stop(grace_s: float) -> int:
    """0 once this rank's own SIGTERM has come (within `grace_s`), else EXIT_REJOIN."""
    deadline = time.monotonic() + grace_s
    while not Stop.requested and time.monotonic() < deadline:
        time.sleep(0.05)
    return 0 if Stop.requested else EXIT_REJOIN


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--config",
        required=True,
        help="job config, JSON or YAML (see contracts.training.JobConfig)",
    )
    p.add_argument("--rank", type=int, default=None)
    p.add_argument("--world-size", type=int, default=None)
    p.add_argument(
        "--init-method", default=None, help="torch.distributed init method; default env://"
    )
    p.add_argument("--max-steps", type=int, default=None, help="override the config's max_steps")
    p.add_argument(
        "--export-fp32", default=None, help="after resume, write consolidated fp32 weights here"
    )
    add_arguments(p)
    grace = os.environ.get("LLMP_ELASTIC_STOP_GRACE_S")
    p.add_argument(
        "--elastic-stop-grace-s",
        type=float,
        default=float(grace) if grace else 10.0,
        help="under torchrun, how long a rank stopped by a peer's SIGTERM waits for its own "
        f"before exiting {EXIT_REJOIN} to be restarted",
    )
    return p.parse_args(argv)


EXIT_BAD_INPUT = 2


def input_problem(job: JobConfig) -> str | None:
    """What the job reads but is not there, checked before any process group forms."""
    m = job.model
    if m.pretrained is not None and not (Path(m.pretrained) / "config.json").is_file():
        return f"model.pretrained {m.pretrained}: no config.json (a local Hugging Face directory)"
    if m.tokenizer is not None and not Path(m.tokenizer).is_dir():
        return f"model.tokenizer {m.tokenizer}: not a directory"
    if not s3io.is_s3(job.data.path) and not Path(job.data.path).exists():
        return f"data.path {job.data.path}: does not exist"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    job, problem = read_job_config(args.config, JobConfig)
    if job is not None:
        problem = input_problem(job)
    if problem is not None or job is None:
        print(f"train: {problem}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    if args.max_steps is not None:
        job = job.model_copy(update={"max_steps": args.max_steps})
    return run(job, args)


if __name__ == "__main__":
    try:
        code = main()
    except Exception:
        # Typically a collective that failed because a peer died. Exit at once: the
        # teardown of a broken process group takes seconds, and the elastic agent
        # restarts the group (a smaller world) only once every worker has exited.
        sys.excepthook(*sys.exc_info())
        code = 1
    # On success everything is written, fsynced and published by now; after a failure
    # nothing unpublished is ever read. Skip the interpreter's teardown: destroying
    # torch/gloo's native threads there can std::terminate a rank that has already
    # finished (seen as "terminate called without an active exception"), turning a
    # clean exit into a crash the operator would restart.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
