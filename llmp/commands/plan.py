"""`llmp plan train`: a training run planned offline (spec.training_plan does the arithmetic).

Imports neither Pulumi nor the components: it reads the catalog and, with `--stack`, the
stack file, like `llmp job submit`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import typer

from llmp import console
from llmp.errors import BadInput

app = typer.Typer(help="Plan before buying: a training run's time, cost and memory.")

ZERO_STAGES = (0, 1, 2, 3)


def _positive(value: float | None, option: str) -> None:
    if value is not None and not value > 0:
        raise BadInput(f"{option} {value:g}: must be above 0")


def _exp(value: float) -> str:
    """3.15e23, not 3.15e+23."""
    mantissa, _, exponent = f"{value:.3g}".partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent else mantissa


def _money(usd: float) -> str:
    if usd >= 1e6:
        return f"${usd / 1e6:,.2f}M"
    return f"${usd:,.0f}"


@app.command("train")
def train(
    params: Annotated[
        float | None,
        typer.Option("--params", help="Parameters (175e9); default: counted from the shape."),
    ] = None,
    layers: Annotated[int, typer.Option("--layers", help="Decoder layers.")] = 0,
    hidden: Annotated[int, typer.Option("--hidden", help="Hidden size.")] = 0,
    seq_len: Annotated[int, typer.Option("--seq-len", help="Sequence length (tokens).")] = 2048,
    heads: Annotated[int, typer.Option("--heads", help="Attention heads (full shape).")] = 0,
    kv_heads: Annotated[int, typer.Option("--kv-heads", help="KV heads (full shape).")] = 0,
    ffn: Annotated[int, typer.Option("--ffn", help="Gated MLP width (full shape).")] = 0,
    vocab: Annotated[int, typer.Option("--vocab", help="Vocabulary size.")] = 0,
    tokens: Annotated[float, typer.Option("--tokens", help="Training tokens (300e9).")] = 0,
    gpu_type: Annotated[
        str | None,
        typer.Option("--gpu-type", help="Instance type of the catalog (p5.48xlarge)."),
    ] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", help="GPUs of the run.")] = None,
    hours: Annotated[
        float | None,
        typer.Option("--hours", help="Instead of --gpus: the whole nodes that finish in this."),
    ] = None,
    mfu: Annotated[
        float, typer.Option("--mfu", help="Model FLOPs utilisation assumed (0.4).")
    ] = 0.4,  # spec.training_plan.DEFAULT_MFU, imported only once the command runs
    tflops: Annotated[
        float | None,
        typer.Option("--tflops", help="Instead of --mfu: achieved TFLOPS per GPU."),
    ] = None,
    tp: Annotated[int, typer.Option("--tp", help="Tensor parallel (within a node).")] = 1,
    pp: Annotated[int, typer.Option("--pp", help="Pipeline parallel stages.")] = 1,
    micro_batch: Annotated[
        int, typer.Option("--micro-batch", help="Sequences per GPU per micro-batch.")
    ] = 1,
    activation_checkpointing: Annotated[
        bool,
        typer.Option(
            "--activation-checkpointing", help="Keep only each layer's input (recompute)."
        ),
    ] = False,
    capacity: Annotated[
        str,
        typer.Option("--capacity-type", help="ON_DEMAND, CAPACITY_BLOCK or SPOT (the price)."),
    ] = "ON_DEMAND",
    stack: Annotated[
        str | None,
        typer.Option("--stack", help="Take the pool's type and the file system's bandwidth."),
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", metavar="FILE", help="The stack file to read.")
    ] = None,
    pool: Annotated[
        str | None,
        typer.Option("--pool", help="With --stack: the pool (default: the file system's)."),
    ] = None,
    write_gbs: Annotated[
        float | None,
        typer.Option("--write-gbs", help="Checkpoint write bandwidth in GB/s (not --stack)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Time to train, GPU-hours, cost from the catalog, memory per GPU by ZeRO stage over
    TP x PP, and the checkpoint's size and write time; offline.

    Compute is 6 x parameters x tokens; memory counts DeepSpeed's model states (bf16
    weights and gradients, 16 optimizer bytes per parameter) and FlashAttention's
    activations. Give the whole shape (--heads --kv-heads --ffn --vocab) to count the
    parameters and the heaviest pipeline stage as the serving memory check does.

    Exit 0: planned; 2: bad input (an option out of range, an unknown type or stack).
    """
    from spec.serving_memory import ModelShape
    from spec.training_plan import (
        Layout,
        Model,
        PlanError,
        TrainingPlan,
        check_layout,
        gpus_for_hours,
    )

    if capacity not in ("ON_DEMAND", "CAPACITY_BLOCK", "SPOT"):
        raise BadInput(f"--capacity-type {capacity}: use ON_DEMAND, CAPACITY_BLOCK or SPOT")
    for value, option in ((params, "--params"), (tokens, "--tokens"), (hours, "--hours")):
        _positive(value, option)
    _positive(tflops, "--tflops")
    if not 0 < mfu <= 1:
        raise BadInput(f"--mfu {mfu:g}: a fraction of the peak, above 0 and at most 1")
    if layers <= 0 or hidden <= 0 or seq_len <= 0:
        raise BadInput("--layers, --hidden and --seq-len are needed, each above 0")
    if (gpus is None) == (hours is None):
        raise BadInput("give --gpus (the run's GPUs) or --hours (the time to finish in), one")
    if gpus is not None and gpus <= 0:
        raise BadInput(f"--gpus {gpus}: must be above 0")
    if tp < 1 or pp < 1 or micro_batch < 1:
        raise BadInput("--tp, --pp and --micro-batch are at least 1")

    shape = None
    if heads or kv_heads or ffn:
        if not (heads and kv_heads and ffn and vocab):
            raise BadInput("a full shape takes --heads, --kv-heads, --ffn and --vocab together")
        shape = ModelShape(
            hidden_size=hidden,
            layers=layers,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=hidden // heads,
            intermediate_size=ffn,
            vocab_size=vocab,
        )
    parameters = params or (shape.dense_parameters() if shape else None)
    if parameters is None:
        raise BadInput("give --params, or the full shape (--heads --kv-heads --ffn --vocab)")
    model = Model(
        parameters=float(parameters),
        layers=layers,
        hidden_size=hidden,
        sequence_length=seq_len,
        vocab_size=vocab,
        shape=shape,
    )

    lustre, pool_nodes = None, None
    if stack is not None:
        lustre, gpu_type, pool_nodes = _from_stack(stack, config, pool, gpu_type)
    if gpu_type is None:
        raise BadInput("give --gpu-type (an instance type of the catalog) or --stack")
    from spec.catalog import catalog

    try:
        spec = catalog().instance(gpu_type)
    except ValueError as exc:
        raise BadInput(f"--gpu-type: {exc}") from None
    if spec.accelerator is None or spec.accelerator.kind != "nvidia":
        raise BadInput(f"--gpu-type {gpu_type}: not an NVIDIA GPU type of the catalog")
    per_node = spec.gpu_count
    try:
        peak = spec.accelerator.peak_bf16_tflops
        if tflops is None and peak is None:
            raise PlanError(
                f"--gpu-type {gpu_type}: the catalog has no dense BF16 peak for it; give "
                "--tflops instead of --mfu"
            )
        achieved = tflops if tflops is not None else mfu * cast(float, peak)
        if hours is not None:
            gpus = gpus_for_hours(model, tokens, hours, achieved, per_node, tp * pp)
        assert gpus is not None
        layout = Layout(
            gpus=gpus,
            tensor_parallel=tp,
            pipeline_parallel=pp,
            micro_batch=micro_batch,
            activation_checkpointing=activation_checkpointing,
        )
        check_layout(layout, model, per_node)
    except PlanError as exc:
        raise BadInput(str(exc)) from None
    plan = TrainingPlan(
        model=model,
        tokens=tokens,
        instance_type=gpu_type,
        layout=layout,
        achieved_tflops=achieved,
        capacity_type=cast(Literal["ON_DEMAND", "CAPACITY_BLOCK", "SPOT"], capacity),
    )
    write = _write_bandwidth(plan, lustre, write_gbs)
    report = _report(plan, peak, write)
    if as_json:
        console.write(json.dumps(report, indent=2) + "\n")
        return
    for text in _lines(plan, report):
        if text.startswith("  "):  # a row of the memory table: short, kept indented
            console.line(text)
        else:
            console.notice(text, to=console.out)
    if pool_nodes is not None and plan.nodes > pool_nodes[1]:
        name, most = pool_nodes
        console.notice(
            f"pool {name} of stack {stack} has at most {most} nodes; this plan needs "
            f"{plan.nodes:,} (the write time counts the file system's total)",
            to=console.out,
        )


def _from_stack(
    stack: str, config: Path | None, pool: str | None, gpu_type: str | None
) -> tuple[Any, str, tuple[str, int]]:
    """The stack's file system beside the pool (none without one), the pool's instance type,
    and its name and max size."""
    from llmp.stacks import load_stack
    from spec.storage_bandwidth import LustreThroughput

    cfg = load_stack(stack, config)
    lustre_cfg = cfg.storage.lustre if cfg.storage is not None else None
    name = pool or (lustre_cfg.node_pool if lustre_cfg is not None else None)
    known = ", ".join(sorted(cfg.node_pools)) or "none"
    if name is None:
        raise BadInput(
            f"--stack {stack} has no file system to take the pool from: name one "
            f"with --pool ({known})"
        )
    if name not in cfg.node_pools:
        raise BadInput(f"--pool {name}: not a GPU pool of stack {stack} ({known})")
    itype = cfg.node_pools[name].instance_type
    if gpu_type is not None and gpu_type != itype:
        raise BadInput(f"--gpu-type {gpu_type}: pool {name} of stack {stack} runs {itype}")
    lustre = None
    if lustre_cfg is not None and lustre_cfg.node_pool == name:
        lustre = LustreThroughput(
            capacity_gib=lustre_cfg.storage_capacity_gib,
            throughput_per_tib=lustre_cfg.throughput_per_tib,
            efa=lustre_cfg.efa,
            gpudirect_storage=lustre_cfg.gpudirect_storage,
        )
    return lustre, itype, (name, cfg.node_pools[name].max_size)


def _write_bandwidth(plan: Any, lustre: Any, write_gbs: float | None) -> dict[str, Any] | None:
    """GB/s a checkpoint is written at: given, or the stack's file system over the plan's
    nodes (each node's share, held to its client's cap)."""
    if write_gbs is not None:
        _positive(write_gbs, "--write-gbs")
        return {"gb_per_second": write_gbs, "source": "--write-gbs"}
    if lustre is None:
        return None
    total = lustre.per_node(plan.nodes) * plan.nodes
    return {
        "gb_per_second": total,
        "source": f"FSx {lustre.capacity_gib:,} GiB at {lustre.throughput_per_tib} MB/s/TiB",
    }


def _report(plan: Any, peak: float | None, write: dict[str, Any] | None) -> dict[str, Any]:
    from spec.catalog import catalog
    from spec.training_plan import gib

    layout = plan.layout
    memory = {}
    for zero in ZERO_STAGES:
        m = plan.memory(zero)
        memory[str(zero)] = {
            "weights_gib": gib(m.weights),
            "gradients_gib": gib(m.gradients),
            "optimizer_gib": gib(m.optimizer),
            "gathered_gib": gib(m.gathered),
            "activations_gib": gib(m.activations),
            "total_gib": gib(m.total),
            "fits": m.total <= plan.gpu_memory_gib() * 2**30,
        }
    costs = {c: plan.cost(c) for c in ("ON_DEMAND", "CAPACITY_BLOCK", "SPOT")}
    checkpoint: dict[str, Any] = {"gb": plan.checkpoint_bytes / 1e9}
    if write is not None:
        checkpoint["write"] = write
        checkpoint["write_seconds"] = plan.checkpoint_bytes / 1e9 / write["gb_per_second"]
    return {
        "parameters": plan.model.parameters,
        "tokens": plan.tokens,
        "flops": plan.flops,
        "instance_type": plan.instance_type,
        "gpus": layout.gpus,
        "nodes": plan.nodes,
        "gpus_per_node": plan.gpus_per_node,
        "peak_tflops": peak,
        "achieved_tflops": plan.achieved_tflops,
        "mfu": plan.achieved_tflops / peak if peak else None,
        "gpu_hours": plan.gpu_hours,
        "hours": plan.hours,
        "tokens_per_second_per_gpu": plan.tokens_per_second_per_gpu,
        "layout": {
            "tensor_parallel": layout.tensor_parallel,
            "pipeline_parallel": layout.pipeline_parallel,
            "data_parallel": layout.data_parallel,
            "micro_batch": layout.micro_batch,
            "sequence_length": plan.model.sequence_length,
            "activation_checkpointing": layout.activation_checkpointing,
        },
        "gpu_memory_gib": plan.gpu_memory_gib(),
        "memory_per_gpu": memory,
        "capacity_type": plan.capacity_type,
        "cost_usd": costs,
        "prices_as_of": catalog().prices.on_demand_as_of,
        "checkpoint": checkpoint,
    }


def _lines(plan: Any, r: dict[str, Any]) -> list[str]:
    acc = plan.instance.accelerator
    mfu = f" (MFU {r['mfu']:.1%})" if r["mfu"] is not None else ""
    out = [
        f"model: {r['parameters'] / 1e9:,.1f}B parameters, {r['tokens'] / 1e9:,.0f}B "
        f"tokens: 6 x N x D = {_exp(r['flops'])} FLOPs",
        f"at {r['achieved_tflops']:,.0f} TFLOPS per GPU{mfu} on {acc.model}: "
        f"{r['gpu_hours']:,.0f} GPU-hours; {r['tokens_per_second_per_gpu']:,.0f} tokens/s "
        "per GPU",
        f"cluster: {r['gpus']:,} GPUs = {r['nodes']:,} x {r['instance_type']}: "
        f"{r['hours']:,.1f} h ({r['hours'] / 24:,.1f} days)",
    ]
    prices = []
    for capacity, usd in r["cost_usd"].items():
        if usd is not None:
            prices.append(f"{_money(usd)} {capacity.lower().replace('_', ' ')}")
    out.append(f"cost: {', '.join(prices)} (prices of {r['prices_as_of']}, whole nodes)")
    lay = r["layout"]
    recompute = ", activation checkpointing" if lay["activation_checkpointing"] else ""
    out.append(
        f"layout: TP {lay['tensor_parallel']} x PP {lay['pipeline_parallel']} x DP "
        f"{lay['data_parallel']:,}, micro-batch {lay['micro_batch']} x "
        f"{lay['sequence_length']:,} tokens{recompute}"
    )
    out.append(
        f"memory per GPU, GiB of {r['gpu_memory_gib']:.0f} (weights + gradients + "
        "optimizer + gathered + activations):"
    )
    for zero, m in r["memory_per_gpu"].items():
        parts = " + ".join(
            f"{m[k]:,.1f}"
            for k in ("weights_gib", "gradients_gib", "optimizer_gib", "gathered_gib")
        )
        verdict = "fits" if m["fits"] else "does not fit"
        out.append(
            f"  ZeRO {zero}: {parts} + {m['activations_gib']:,.1f} = {m['total_gib']:,.1f}: "
            f"{verdict}"
        )
    ck = r["checkpoint"]
    line = f"checkpoint: {ck['gb']:,.0f} GB (14 bytes per parameter)"
    if "write" in ck:
        line += (
            f"; {ck['write_seconds']:,.0f} s to write at {ck['write']['gb_per_second']:,.1f} "
            f"GB/s ({ck['write']['source']})"
        )
    out.append(line)
    return out


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="plan")
