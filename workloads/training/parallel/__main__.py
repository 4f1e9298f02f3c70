"""`python -m workloads.training.parallel --config job.json`: one rank of a 3-D parallel run.

Rank and world come from torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or from `--rank/--world-size/--init-method`
(tests: a `file://` store, nothing listening). The layout is the config's `parallel`
block at this world (dp = world / (tp x pp)); the job resumes from the newest complete
checkpoint under `checkpoint.dir`, whatever layout wrote it.

stdout: JSON lines from rank 0 (`event`: start, resume, step, checkpoint_published, exit;
each with `time`). Every step the ranks exchange one small tensor: their SIGTERM flags (so the
whole job checkpoints at the same step and exits 0) and their step times by phase (so rank 0
knows the slowest). Bad input is one line on stderr, exit 2.

Telemetry (`workloads.training.telemetry`, as the ZeRO trainer's): a step event carries the
loss, the gradient norm, tokens/s, TFLOPS per GPU and MFU (the step's slowest rank; MFU
against the catalog's peak of `instance_type`, or `peak_tflops_per_device`); `--metrics-port`
(or LLMP_METRICS_PORT, which the pods get) serves them as `llmp_*` gauges with every rank's
step time and phases, `--step-times` appends the lines `llmp stragglers` reads, and the
config's `tensorboard_dir` gets TensorBoard scalars. A checkpoint's save is the checkpoint
phase of the step after it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

EXIT_BAD_INPUT = 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="job config, JSON or YAML (ParallelJobConfig)")
    p.add_argument("--rank", type=int, default=None)
    p.add_argument("--world-size", type=int, default=None)
    p.add_argument(
        "--init-method", default=None, help="torch.distributed init method; default env://"
    )
    p.add_argument("--max-steps", type=int, default=None, help="override the config's max_steps")
    from workloads.training.telemetry import add_arguments

    add_arguments(p)
    return p.parse_args(argv)


class _Stop:
    requested = False

    @classmethod
    def handler(cls, signum: int, frame: FrameType | None) -> None:
        cls.requested = True


def _emit(rank: int, event: str, **fields: Any) -> None:
    if rank == 0:
        print(json.dumps({"event": event, "time": time.time(), **fields}), flush=True)


def run(args: argparse.Namespace, job: Any) -> int:
    from contracts.parallel import layout_for

    rank = int(args.rank if args.rank is not None else os.environ.get("RANK", 0))
    world = int(args.world_size if args.world_size is not None else os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    try:
        layout = layout_for(job.parallel, world)
    except ValueError as exc:
        print(f"parallel: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 0))
    if local_world and local_world % layout.tp:
        print(
            f"parallel: tp {layout.tp} does not divide the {local_world} processes of a node: "
            "a tensor-parallel group would span nodes",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_BAD_INPUT
    import torch
    import torch.distributed as dist

    from workloads.diagnosis.stragglers import PHASES
    from workloads.training import model as hf
    from workloads.training.parallel.trainer import Trainer
    from workloads.training.telemetry import Telemetry, tflops_per_gpu

    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(
        backend, init_method=args.init_method or "env://", rank=rank, world_size=world
    )
    signal.signal(signal.SIGTERM, _Stop.handler)
    try:
        trainer = Trainer(job, layout, device)
    except ValueError as exc:  # a model that does not split so (a pretrained config.json)
        print(f"parallel: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    fpt = hf.flops_per_token(hf.hf_config(job.model), job.model.seq_len)
    peak = job.peak_tflops()
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
    _emit(
        rank,
        "start",
        world_size=world,
        layout=str(layout),
        microbatches=trainer.micro,
        flops_per_token=fpt,
        compile=job.compile,
        bf16=job.bf16,
        gradient_checkpointing=job.model.gradient_checkpointing,
    )
    step = 0
    resumed = trainer.resume()
    if resumed is not None:
        step, meta = resumed
        _emit(rank, "resume", step=step, saved_by=meta.get("layout"), layout=str(layout))
    interval = job.checkpoint.interval_steps
    tokens = job.global_batch_size * job.model.seq_len
    checkpoint_phase = PHASES.index("checkpoint")
    saved_s = 0.0  # the last save's seconds: the checkpoint phase of the step after it
    while step < job.max_steps:
        result = trainer.step(step + 1)
        step = result.step
        phases = list(result.phases)
        phases[checkpoint_phase] += saved_s
        # One exchange per step: every rank's time and phases, and its SIGTERM flag.
        local = torch.tensor(
            [result.seconds + saved_s, *phases, 1.0 if _Stop.requested else 0.0],
            dtype=torch.float64,
            device=device,
        )
        gathered = [torch.zeros_like(local) for _ in range(world)]
        dist.all_gather(gathered, local)
        g = torch.stack(gathered).cpu()
        times = g[:, 0]
        slowest = float(times.max())
        tflops = tflops_per_gpu(fpt, tokens, slowest, world)
        mfu = None if peak is None else tflops / peak
        _emit(
            rank,
            "step",
            step=step,
            loss=round(result.loss, 6),
            grad_norm=round(result.grad_norm, 6),
            lr=result.lr,
            seconds=round(result.seconds, 4),
            step_time_max_s=round(slowest, 4),
            slowest_rank=int(times.argmax()),
            tokens_per_s=round(tokens / slowest, 1),
            tflops_per_device=round(tflops, 6),
            mfu=None if mfu is None else round(mfu, 6),
        )
        telemetry.step(
            step,
            [float(t) for t in times],
            g[:, 1 : 1 + len(PHASES)].tolist(),
            tokens_per_second=tokens / slowest,
            loss=result.loss,
            tflops_per_gpu=tflops,
            mfu=mfu,
            grad_norm=result.grad_norm,
        )
        stop = bool(g[:, -1].any())
        saved_s = 0.0
        if (
            step % interval == 0
            or step == job.max_steps
            or (stop and job.checkpoint.save_on_sigterm)
        ):
            t0 = time.perf_counter()
            path = trainer.save(step)
            saved_s = time.perf_counter() - t0
            _emit(
                rank,
                "checkpoint_published",
                step=step,
                path=str(path),
                stall_s=round(saved_s, 4),
            )
            # Synchronous: the loop waited for the whole write.
            telemetry.checkpoint_published(saved_s, saved_s, step)
        if stop:
            break
    _emit(rank, "exit", step=step)
    telemetry.close()
    dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    from contracts.parallel import ParallelJobConfig
    from contracts.training import read_job_config

    args = parse_args(argv)
    job, problem = read_job_config(args.config, ParallelJobConfig)
    if job is not None and not Path(job.data.path).exists():
        problem = f"data.path {job.data.path}: missing"
    if problem is not None or job is None:
        print(f"parallel: {problem}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    if args.max_steps is not None:
        job = job.model_copy(update={"max_steps": args.max_steps})
    return run(args, job)


if __name__ == "__main__":
    sys.exit(main())
