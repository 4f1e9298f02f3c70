"""`python -m tests.workloads.training.options_run CONFIGS.json OUT.json`: one process, world 1
(gloo, a `file://` store beside OUT: nothing listens), the 3-D trainer's `Trainer` built from
each config of CONFIGS (a JSON object, name -> ParallelJobConfig) in turn, `max_steps` steps
each; OUT gets name -> the steps' losses and gradient norms.

One interpreter for every config: importing torch and transformers once, not per config, is
most of the time on two cores."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _counted(forward: Any, calls: list[int]) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return forward(*args, **kwargs)

    return counted


def main(configs_path: str, out_path: str) -> None:
    import torch
    import torch.distributed as dist

    from contracts.parallel import Layout, ParallelJobConfig
    from workloads.training.parallel.trainer import Trainer

    configs = json.loads(Path(configs_path).read_text())
    store = Path(out_path).with_suffix(".store")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    out = {}
    for name, raw in configs.items():
        job = ParallelJobConfig.model_validate(raw)
        torch.manual_seed(0)
        trainer = Trainer(job, Layout(tp=1, pp=1, dp=1), torch.device("cpu"))
        # Calls of the first layer's MLP: once a micro-batch, twice with its activations
        # recomputed in backward (its forward wrapped: module hooks do not run in the
        # recomputation; not counted under compile, which traces the wrapper away).
        forwards = [0]
        if not job.compile:
            mlp = next(iter(trainer.module.model.layers.values())).mlp
            mlp.forward = _counted(mlp.forward, forwards)
        results = [trainer.step(n) for n in range(1, job.max_steps + 1)]
        out[name] = {
            "mlp_forwards": forwards[0],
            "loss": [r.loss for r in results],
            "grad_norm": [r.grad_norm for r in results],
            "compiled": [
                hasattr(layer, "_compiled_call_impl") and layer._compiled_call_impl is not None
                for layer in trainer.module.model.layers.values()
            ],
            "checkpointing": [
                bool(getattr(layer, "gradient_checkpointing", False))
                for layer in trainer.module.model.layers.values()
            ],
        }
    dist.destroy_process_group()
    Path(out_path).write_text(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
