"""`llmp promote`: gate and publish a model revision, then serve it from the stack."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from llmp import console
from llmp.commands import options
from llmp.errors import BadInput


def promote(
    stack: options.Stack,
    model: Annotated[str, typer.Argument(help="The served model (serving.models[].name).")],
    checkpoints: Annotated[
        str | None,
        typer.Option(
            "--checkpoints",
            metavar="DIR",
            help="Promote the newest complete checkpoint here (needs --job-config).",
        ),
    ] = None,
    job_config: Annotated[
        str | None,
        typer.Option(
            "--job-config", metavar="FILE", help="The training job's config (the trainer's)."
        ),
    ] = None,
    revision: Annotated[
        str | None,
        typer.Option(
            "--revision",
            metavar="REV",
            help="Serve a revision already published (e.g. by the promotion job): "
            "MODEL/YYYYMMDDTHHMMSSZ-step-N, checked in the bucket.",
        ),
    ] = None,
    heldout: Annotated[
        str | None,
        typer.Option("--heldout", metavar="DIR", help="Held-out token shards (perplexity)."),
    ] = None,
    eval_config: Annotated[
        str | None,
        typer.Option(
            "--eval-config",
            metavar="FILE",
            help="Evaluation tasks, limit and thresholds (YAML; promotion's EvalConfig).",
        ),
    ] = None,
    dtype: Annotated[
        str, typer.Option("--dtype", help="Weights as served: bfloat16 or float32.")
    ] = "bfloat16",
    write: Annotated[
        bool,
        typer.Option("--write/--no-write", help="Change the stack file (default), or only print."),
    ] = True,
    endpoint_url: options.EndpointUrl = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Promote a model: export, check, evaluate and publish a revision (or take one already
    published), then set serving.models[MODEL].revision in the stack file."""
    from llmp.serving import promote as p

    if (checkpoints is None) == (revision is None):
        raise BadInput("give either --checkpoints DIR (with --job-config) or --revision REV")
    if checkpoints is not None and job_config is None:
        raise BadInput("--checkpoints needs --job-config, the training job's config")
    if dtype not in ("bfloat16", "float32"):
        raise BadInput(f"--dtype {dtype!r}: bfloat16 or float32")
    target = p.target(stack, model)
    if checkpoints is not None:
        assert job_config is not None
        result = p.promote_checkpoints(
            target,
            checkpoints=checkpoints,
            job_config=job_config,
            heldout=heldout,
            eval_config=eval_config,
            dtype=dtype,
            endpoint_url=endpoint_url,
        )
    else:
        assert revision is not None
        result = p.published(target, revision, endpoint_url)
    change = p.change_revision(target, result["serving_revision"], write=write)
    if as_json:
        console.write(json.dumps(_json(result, change), sort_keys=True) + "\n")
        return
    console.write(_text(target, result, change))


def _json(result: dict[str, Any], change: Any) -> dict[str, Any]:
    return {
        "promoted": result,
        "stack_file": str(change.path),
        "model": change.model,
        "old_revision": change.old,
        "new_revision": change.new,
        "written": change.written,
        "diff": change.diff,
    }


def _text(target: Any, result: dict[str, Any], change: Any) -> str:
    from contracts.gates import results_table

    check = result["export_check"]
    evaluation = result["evaluation"]
    lines = [
        f"promoted {target.model}: step {result['step']} of {result['source_checkpoint']}",
        f"  {result['uri']}",
        f"  architecture  {result['architecture']} (vLLM {check['vllm_version']} serves it)",
        f"  export check  max |logit diff| {check['max_abs_logit_diff']:.3g} "
        f"<= {check['tolerance']} ({result['dtype']})",
    ]
    ppl = evaluation.get("heldout_perplexity")
    if ppl is not None:
        lines.append(f"  held-out      perplexity {ppl:.4g}")
    if evaluation.get("tasks"):
        lines += ["", results_table(evaluation["tasks"])]
    lines.append("")
    if change.diff:
        verb = "changed" if change.written else "would change (--no-write)"
        lines += [_rel(change.path), f"  serving.models[{change.model}].revision {verb}:"]
        lines += [f"  - {change.old}", f"  + {change.new}", ""]
        lines.append(f"next: llmp diff --base HEAD {target.stack}; then pulumi up")
    else:
        lines += [
            _rel(change.path),
            f"  serving.models[{change.model}] is not in block style: set its revision",
            f"  to {change.new} by hand",
        ]
    return "\n".join(lines) + "\n"


def _rel(path: Any) -> str:
    from llmp.serving.promote import shown_path

    return shown_path(path)


def register(app: typer.Typer) -> None:
    app.command("promote")(promote)
