"""`llmp dr`: re-create a stack in another region; find the newest checkpoint to restore."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from llmp import console
from llmp.commands import options
from llmp.errors import EXIT_FAILED, NO_CREDENTIALS, BadInput, prefixed

if TYPE_CHECKING:
    from contracts.restore import RestorePoint

DR_OUT_DIR = Path("out") / "dr"
"""Where `llmp dr plan` writes by default, relative to the working directory like `llmp
synth`'s out/: not stacks/, whose every file the tests and CI synthesize."""


dr_app = typer.Typer(
    no_args_is_help=True,
    help="Disaster recovery: re-create a stack in another region; find the restore point.",
)


@dr_app.command("plan")
def dr_plan_command(
    source: Annotated[str, typer.Option("--from", help="The stack to recover, e.g. pretrain.")],
    region: Annotated[
        str, typer.Option("--region", help="Recovery region (where the replicas are).")
    ],
    stack: Annotated[
        str | None, typer.Option("--stack", help="Recovery stack name (default FROM-dr).")
    ] = None,
    zones: Annotated[
        str | None,
        typer.Option(
            "--zones",
            help="AZs of REGION, comma-separated, as many as the source has, in its order "
            "(default REGIONa,b,c...: check them).",
        ),
    ] = None,
    outputs_file: Annotated[
        Path | None,
        typer.Option(
            "--outputs",
            help="`pulumi stack output --json` of the source stack: real replica names and key.",
        ),
    ] = None,
    replica_key_arn: Annotated[
        str | None,
        typer.Option("--replica-key-arn", help="KMS key ARN of the replicas (if no --outputs)."),
    ] = None,
    reservation: Annotated[
        list[str] | None,
        typer.Option(
            "--reservation",
            metavar="POOL=cr-...",
            help="A capacity block bought in REGION for a pool (else block pools are left out).",
        ),
    ] = None,
    certificate_arn: Annotated[
        str | None,
        typer.Option("--certificate-arn", help="ACM certificate in REGION (stacks that serve)."),
    ] = None,
    replicate_to: Annotated[
        str | None,
        typer.Option("--replicate-to", help="Replicate the recovery stack's buckets here."),
    ] = None,
    bucket_prefix: Annotated[
        str | None,
        typer.Option("--bucket-prefix", help="Prefix of new buckets (default PREFIX-REGION)."),
    ] = None,
    checkpoint_interval: Annotated[
        int | None,
        typer.Option(
            "--checkpoint-interval",
            min=1,
            metavar="SECONDS",
            help="For the RPO (default monitoring.alerts.checkpoint_interval_seconds).",
        ),
    ] = None,
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Where the stack file and runbook go; the runbook says how to copy the "
            "stack file to stacks/ (--out stacks writes it there directly).",
        ),
    ] = DR_OUT_DIR,
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    config: options.ConfigFile = None,
) -> None:
    """Write the recovery stack's config and runbook; report RTO, RPO and plan equivalence.

    The files go to out/dr/ by default, not stacks/: a stack file there is a stack every
    test and CI job synthesizes, so it is copied there (the runbook's first step) when the
    recovery is real.

    Exit 0: written, the recovery plan is equivalent to the source's; 1: synthesis failed
    or a difference no named reason explains; 2: bad input.
    """
    from llmp import dr
    from llmp.dr import report
    from llmp.dr.config import RecoveryOptions, parse_reservations
    from llmp.plan import load_outputs
    from llmp.stacks import StackNotFound, stack_file, stack_name_problem
    from spec.stackfile import load_stack_file

    if problem := stack_name_problem(source):
        raise StackNotFound(f"--from: {problem}")
    path = config or stack_file(source)
    if not path.exists():
        where = config if config else f"stacks/{stack_file(source).name}"
        raise StackNotFound(f"no stack file {where} for --from")
    source_raw = load_stack_file(str(path))
    with prefixed("--outputs"):
        outputs = load_outputs(outputs_file) if outputs_file is not None else None
    if outputs is not None:
        from llmp.dr.config import outputs_mismatch
        from spec.stackfile import load_config

        wrong = outputs_mismatch(outputs, load_config(source_raw), source)
        if wrong is not None:
            raise BadInput(f"--outputs {outputs_file} {wrong}")
    options = RecoveryOptions(
        source_stack=source,
        region=region,
        stack=stack,
        zones=[z.strip() for z in zones.split(",")] if zones is not None else None,
        outputs=outputs,
        replica_key_arn=replica_key_arn,
        reservations=parse_reservations(reservation or []),
        certificate_arn=certificate_arn,
        replicate_to=replicate_to,
        bucket_prefix=bucket_prefix,
        checkpoint_interval_seconds=checkpoint_interval,
    )
    dr.check_out_dir(out_dir)
    dr.refuse_overwrite(
        options.stack_name, out_dir, force=force, source_stack=source, source_file=path
    )
    plan = dr.make_plan(source_raw, options)
    written = dr.write_plan_files(plan, out_dir, force=force, source_file=path)
    if as_json:
        doc = {**plan.to_dict(), "written": [str(p) for p in written]}
        console.write(json.dumps(doc, indent=2, default=str) + "\n")
    else:
        for part in report.renderables(plan, written):
            console.out.print(part, highlight=False)
    if not plan.differences.equivalent:
        raise typer.Exit(EXIT_FAILED)


@dr_app.command("restore-point")
def dr_restore_point_command(
    bucket: Annotated[str, typer.Option("--bucket", help="The (replica) checkpoints bucket.")],
    prefix: Annotated[
        str, typer.Option("--prefix", help="The job's checkpoint prefix, e.g. runs/llama/.")
    ] = "",
    region: Annotated[str | None, typer.Option("--region", help="The bucket's region.")] = None,
    endpoint_url: options.EndpointUrl = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Also list the older checkpoints.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """The newest complete checkpoint under PREFIX, by the trainer's own rule (COMPLETE
    marker, manifest, every file at its recorded size), and why each newer one is skipped.

    Reads only (list and get). Exit 0: found; 1: no complete checkpoint; 2: bad input
    (no such bucket, no access, no credentials, unreachable endpoint).
    """
    from contracts import restore as rp

    try:
        import boto3
        import botocore.exceptions as boto_errors
    except ImportError:
        raise BadInput("llmp dr restore-point needs boto3: pip install boto3") from None
    session = boto3.Session(region_name=region)
    if session.get_credentials() is None:
        raise BadInput(NO_CREDENTIALS)
    where = f"s3://{bucket}/{rp.normalize_prefix(prefix)}"
    try:
        s3 = session.client("s3", endpoint_url=endpoint_url)
        result = rp.find_restore_point(s3, bucket, prefix)
    except boto_errors.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        raise BadInput(f"cannot read {where}: {code or exc}") from None
    except (boto_errors.EndpointConnectionError, boto_errors.ConnectTimeoutError) as exc:
        raise BadInput(f"cannot reach the endpoint: {exc}") from None
    except boto_errors.NoCredentialsError:
        raise BadInput(NO_CREDENTIALS) from None
    except (boto_errors.BotoCoreError, ValueError) as exc:
        raise BadInput(f"cannot read {where}: {exc}") from None
    if as_json:
        console.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        for part in _render(result, verbose=verbose):
            console.out.print(part, highlight=False)
    if result.chosen is None:
        raise typer.Exit(EXIT_FAILED)


def _render(result: RestorePoint, *, verbose: bool = False) -> list[Any]:
    """What `llmp dr restore-point` prints: the choice, then why each newer one was skipped."""
    from rich.table import Table
    from rich.text import Text

    from contracts.checkpoints import LATEST

    where = f"s3://{result.bucket}/{result.prefix}"
    parts: list[Any] = []
    if result.chosen is not None:
        c = result.chosen
        parts.append(
            Text(f"restore point: {c.uri} (step {c.step}, {c.files} files, {_size(c.bytes)})")
        )
    elif result.candidates:
        parts.append(Text(f"no complete checkpoint under {where}", style="bold red"))
    else:
        hint = ""
        if result.deeper_roots:
            hint = "; checkpoints sit under " + ", ".join(result.deeper_roots) + " (--prefix)"
        parts.append(Text(f"no checkpoint directories under {where}{hint}", style="bold red"))
    shown = [c for c in result.candidates if verbose or c.status != "older"]
    if shown:
        table = Table(title=f"checkpoints under {where}, newest first")
        for column in ("checkpoint", "status", "files", "size", "why"):
            table.add_column(column, overflow="fold")
        for c in shown:
            style = {"restore point": "green", "skipped": "yellow"}.get(c.status, "dim")
            table.add_row(
                Text(c.tag),
                Text(c.status, style=style),
                str(c.files),
                _size(c.bytes),
                Text(c.reason),
            )
        parts.append(table)
    older = len([c for c in result.candidates if c.status == "older"])
    if older and not verbose:
        noun = "checkpoint" if older == 1 else "checkpoints"
        parts.append(Text(f"{older} older {noun} not examined (--verbose lists them)"))
    if result.latest is not None:
        agrees = result.chosen is not None and result.latest == result.chosen.tag
        parts.append(
            Text(
                f"`{LATEST}` says {result.latest}"
                + ("" if agrees else " (not trusted: its objects may not all have arrived)")
            )
        )
    return parts


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"


def register(app: typer.Typer) -> None:
    app.add_typer(dr_app, name="dr")
