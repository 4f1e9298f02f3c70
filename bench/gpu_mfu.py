"""MFU of the project's 3-D trainer on one GPU: a ~1B Llama-shaped model in bf16 (prints;
asserts nothing).

    python bench/gpu_mfu.py                      # ~1.1B, bf16, compiled, within --budget-s
    python bench/gpu_mfu.py --tiny --steps 3     # a tiny model on the CPU: the test's mode

The model is TinyLlama-1.1B's shape (22 layers, hidden 2048, MLP 5632, 32 heads, 4 key/value
heads, vocabulary 32000), built from that config with random weights, trained at sequence
2048 on synthetic token shards by `workloads.training.parallel.trainer.Trainer` at tp 1 x pp 1
x dp 1 (world 1: a `file://` store, nothing listens), with the job file's compute options
(`bf16`, `compile`, `model.gradient_checkpointing`) as flags. The first `--warmup` steps
(compilation, the allocator's growth) are left out of the figures; then it trains until
`--steps` or until `--budget-s` seconds have passed since the start, whichever is first.

Printed, from the timed steps: tokens/s, TFLOPS per GPU (the trainer's FLOPs per token,
`model.flops_per_token`: 6N + 12·L·d·T, PaLM's appendix B) and MFU against the catalog's
dense BF16 peak of the GPU (found by the device's name among the catalog's accelerators, or
`--peak-tflops`), the step time, the phases of the step clock and the peak memory. On the CPU
there is no catalog peak: MFU is printed as n/a.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ONE_B = {
    "vocab_size": 32000,
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "rope_theta": 10000.0,
    "seq_len": 2048,
}
"""TinyLlama-1.1B's shape: a Llama of about 1.1 billion parameters."""
TINY = {
    "vocab_size": 256,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "seq_len": 32,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="a tiny model (the CPU test)")
    p.add_argument("--steps", type=int, default=200, help="most timed steps")
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the figures")
    p.add_argument(
        "--budget-s", type=float, default=270.0, help="stop timing steps after this many seconds"
    )
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--global-batch", type=int, default=16, help="samples per optimizer step")
    p.add_argument("--no-compile", action="store_true", help="eager, not torch.compile")
    p.add_argument("--no-bf16", action="store_true", help="fp32, not bf16 autocast")
    p.add_argument("--checkpointing", action="store_true", help="recompute activations")
    p.add_argument("--peak-tflops", type=float, default=None, help="dense BF16 peak of the GPU")
    return p.parse_args(argv)


def catalog_peak(device_name: str) -> tuple[str, float] | None:
    """(instance type, peak dense BF16 TFLOPS) of the catalog's accelerator named in
    `device_name` (e.g. "NVIDIA H200" holds "H200"), or None."""
    from spec.catalog import catalog

    for name, instance in sorted(catalog().instances.items()):
        acc = instance.accelerator
        if acc is None or acc.peak_bf16_tflops is None:
            continue
        if acc.model.split("-")[0] in device_name:
            return name, acc.peak_bf16_tflops
    return None


def job_config(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    shape = dict(TINY if args.tiny else ONE_B)
    seq_len = shape.pop("seq_len")
    return {
        "model": {**shape, "seq_len": seq_len, "gradient_checkpointing": args.checkpointing},
        "data": {"path": str(tmp / "tokens")},
        "checkpoint": {"dir": str(tmp / "ckpt"), "interval_steps": 10**9},
        "max_steps": args.warmup + args.steps,
        "micro_batch_size": args.micro_batch,
        "global_batch_size": args.global_batch,
        "bf16": not args.no_bf16,
        "compile": not args.no_compile,
        "lr": 3e-4,
        "parallel": {"tp": 1, "pp": 1},
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    import torch
    import torch.distributed as dist

    from contracts.parallel import Layout, ParallelJobConfig
    from spec.training_plan import DEFAULT_MFU
    from workloads.diagnosis.stragglers import PHASES
    from workloads.training import model as hf
    from workloads.training.data import write_synthetic_shards
    from workloads.training.parallel.trainer import Trainer
    from workloads.training.telemetry import tflops_per_gpu

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    with tempfile.TemporaryDirectory(prefix="gpu-mfu-") as tmp_dir:
        tmp = Path(tmp_dir)
        raw = job_config(args, tmp)
        job = ParallelJobConfig.model_validate(raw)
        vocab = job.model.dimensions()["vocab_size"]
        tokens_per_step = job.global_batch_size * job.model.seq_len
        # Enough windows that an epoch outlasts the run; the order is the trainer's own.
        write_synthetic_shards(
            tmp / "tokens",
            n_shards=2,
            tokens_per_shard=max(200_000, 4 * tokens_per_step),
            vocab=vocab,
        )
        store = tmp / "store"
        dist.init_process_group(
            "nccl" if cuda else "gloo", init_method=f"file://{store}", rank=0, world_size=1
        )
        config = hf.hf_config(job.model)
        fpt = hf.flops_per_token(config, job.model.seq_len)
        params = hf.param_count(config)
        peak: tuple[str, float] | None = (
            ("--peak-tflops", args.peak_tflops)
            if args.peak_tflops is not None
            else (catalog_peak(name) if cuda else None)
        )
        trainer = Trainer(job, Layout(tp=1, pp=1, dp=1), device)
        built_s = time.monotonic() - started
        print(f"device           {name}")
        print(
            f"model            Llama, {params:,} matmul parameters, "
            f"{config.num_hidden_layers} layers,\n"
            f"                 hidden {config.hidden_size}, seq {job.model.seq_len}"
        )
        print(
            f"options          bf16 {job.bf16}, compile {job.compile}, "
            f"checkpointing {job.model.gradient_checkpointing}"
        )
        print(
            f"batch            {job.global_batch_size} x {job.model.seq_len} = "
            f"{tokens_per_step} tokens a step, micro-batch {job.micro_batch_size}"
        )
        print(f"flops per token  {fpt:.4g} (6N + 12 L d T)")
        print(f"built in         {built_s:.1f} s")
        timed: list[Any] = []
        losses: list[float] = []
        step = 0
        while step < job.max_steps:
            step += 1
            result = trainer.step(step)
            losses.append(result.loss)
            if step == args.warmup:
                print(f"warm-up          {args.warmup} steps, {time.monotonic() - started:.1f} s")
            if step > args.warmup:
                timed.append(result)
                if time.monotonic() - started > args.budget_s:
                    break
        dist.destroy_process_group()
    if not timed:
        print("no timed steps: raise --steps or --budget-s", file=sys.stderr)
        return 1
    seconds = statistics.median(r.seconds for r in timed)
    tflops = tflops_per_gpu(fpt, tokens_per_step, seconds, 1)
    print(f"timed steps      {len(timed)} (median step {seconds:.4f} s)")
    print(f"tokens/s         {tokens_per_step / seconds:,.0f}")
    print(f"TFLOPS per GPU   {tflops:.4g}")
    if peak is None:
        print("MFU              n/a (no catalog peak for this device; --peak-tflops)")
    else:
        source, value = peak
        print(f"MFU              {tflops / value:.1%} of {value:g} TFLOPS ({source})")
        # The planner's prediction for the same GPU: its default MFU over its 6N FLOPs a
        # token (llmp plan train), beside what the trainer measured.
        predicted = DEFAULT_MFU * value * 1e12 / (6 * params)
        print(
            f"planner          {predicted:,.0f} tokens/s at MFU {DEFAULT_MFU:.0%} "
            f"(llmp plan train's default, 6N a token)"
        )
    phases = {p: statistics.median(r.phases[i] for r in timed) for i, p in enumerate(PHASES)}
    for p, v in phases.items():
        print(f"phase {p:<11}{v:.4f} s (median)")
    print(f"loss             {losses[0]:.4f} -> {losses[-1]:.4f}")
    if cuda:
        print(f"peak memory      {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    print(f"wall             {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
