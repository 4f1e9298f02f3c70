"""`llmp dr plan`: re-create a stack's platform in another region after a disaster.

From the source stack's file this writes the recovery stack's file (`config`): the
same platform, with what is bound to a region rewritten (region, AZs, capacity
reservations, ACM certificate, replication) and the storage pointed at the source's
replicas, which the recovery stack adopts (imports, protects and retains) instead of
creating empty buckets. It then runs both stacks offline (`llmp.plan.synth`) and reports:

- the RTO (`rto`): the longest chain of the recovery plan's dependency graph, weighted
  by the catalog's typical creation minutes per resource type;
- the RPO: checkpoint interval + the file system's export to S3 + S3 replication lag,
  the most training progress a disaster can take;
- the plans' equivalence (`equivalence`): both plans hold the same resources with the
  same inputs, apart from a named list of region-bound differences; anything else is
  reported as unexplained;
- what the recovery re-creates (`recreated`): its precious resources, by the replacement
  table `llmp diff` reads (spec/replacement.yaml), new and empty or adopted.

A Markdown runbook (`runbook.md.j2`) is written beside the stack file.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import shlex
import textwrap
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from llmp.dr.config import DrError, RecoveryConfig, RecoveryOptions, build_recovery_config
from llmp.dr.equivalence import PlanDifferences, plan_differences
from llmp.dr.rto import (
    QuotaNeed,
    RpoEstimate,
    RtoEstimate,
    critical_path,
    estimate_rpo,
    quota_needs,
)
from llmp.errors import prefixed
from llmp.plan import Plan


@dataclass(frozen=True)
class Recreated:
    """The recovery plan's resources of one precious type: created anew, or adopted."""

    type: str
    created: list[str]
    adopted: list[str]
    why: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def recreated(plan: Plan) -> list[Recreated]:
    """Per precious type of the replacement table (the one `llmp diff` flags), which of the
    recovery plan's resources `pulumi up` creates (new: empty, its `why`) and which it
    adopts (`import_id`: the replicas)."""
    from spec.replacement import replacement_table

    table = replacement_table()
    out = []
    for type_ in table.precious_types:
        found = plan.by_type(type_)
        if found:
            out.append(
                Recreated(
                    type_,
                    [r.name for r in found if r.import_id is None],
                    [r.name for r in found if r.import_id is not None],
                    table.types[type_].why,
                )
            )
    return out


@dataclass
class DrPlan:
    """Everything `llmp dr plan` decided and computed."""

    options: RecoveryOptions
    config: RecoveryConfig
    rto: RtoEstimate
    rpo: RpoEstimate
    differences: PlanDifferences
    quotas: list[QuotaNeed]
    unquoted_pools: list[str]
    created: str
    recreated: list[Recreated]

    def to_dict(self) -> dict[str, Any]:
        rc = self.config
        return {
            "source": {"stack": self.options.source_stack, "region": rc.source_region},
            "recovery": {"stack": rc.stack, "region": rc.region},
            "adopted": rc.adopted,
            "replica_key": {"arn": rc.key_arn, "from": rc.key_from},
            "zones": rc.zone_map,
            "dropped_pools": rc.dropped_pools,
            "secrets_not_copied": rc.secrets,
            "rewrites": [asdict(r) for r in rc.rewrites],
            "notes": [asdict(n) for n in rc.notes],
            "rto": self.rto.to_dict(),
            "rpo": self.rpo.to_dict(),
            "quotas": [asdict(q) for q in self.quotas],
            "equivalence": self.differences.to_dict(),
            "recreated": [r.to_dict() for r in self.recreated],
        }


def _name_dropped_work(rc: RecoveryConfig, source_plan: Plan) -> None:
    """Say, for each pool the recovery stack leaves out, what ran there in the source."""
    from llmp.diff.workloads import pool_work

    work = pool_work(source_plan)
    for name in rc.dropped_pools:
        pool = work.get(name)
        if pool is None:
            continue
        parts = []
        if pool.models:
            models = ", ".join(s.name for s in pool.models)
            parts.append(f"serving: {models} serve nothing in the recovery region")
        if pool.training:
            parts.append(
                "training: the tenants' jobs on its flavor wait in their queues, with no nodes"
            )
        if pool.data:
            parts.append("data: its Ray jobs wait, with no nodes")
        if parts:
            what = "; ".join(parts)
            rc.note("action", f"pool {name} is not recovered until it is added back: {what}")


def make_plan(source_raw: Mapping[str, Any], options: RecoveryOptions) -> DrPlan:
    """Build the recovery config, synthesize both stacks offline, and compute the figures.

    Raises ConfigError (the source or the result is invalid), DrError (bad options),
    Failed (`synth failed: ...`, the program failed).
    """
    from llmp.plan.synth import synthesize

    rc = build_recovery_config(source_raw, options)
    with prefixed("synth failed"):
        source_plan = synthesize(options.source_stack, source_raw)
        recovery_plan = synthesize(rc.stack, rc.synth_raw)
    _name_dropped_work(rc, source_plan)
    quotas, unquoted = quota_needs(rc.cfg)
    return DrPlan(
        options=options,
        config=rc,
        rto=critical_path(recovery_plan),
        rpo=estimate_rpo(rc.source, options.checkpoint_interval_seconds),
        differences=plan_differences(source_plan, recovery_plan),
        quotas=quotas,
        unquoted_pools=unquoted,
        created=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        recreated=recreated(recovery_plan),
    )


def stack_file_text(plan: DrPlan) -> str:
    """The recovery stack file: a header saying where it came from and what is left to do."""
    rc = plan.config
    lines = [
        RECOVERY_HEADER.format(source=plan.options.source_stack)
        + f"({rc.source_region}) in {rc.region},",
        f"# written by `llmp dr plan` on {plan.created}. Runbook: {runbook_name(rc.stack)}.",
        "# Region-bound settings were rewritten; the replicated buckets are adopted",
        "# (storage.adoption): imported, protected and retained, never re-created empty.",
    ]
    actions = [n.text for n in rc.notes if n.level == "action"]
    if actions:
        lines.append("# Before `pulumi up`:")
    for text in actions:
        wrapped = textwrap.wrap(text, 92, break_long_words=False, break_on_hyphens=False)
        lines.append("#  - " + "\n#    ".join(wrapped))
    body = yaml.safe_dump({"config": rc.raw}, sort_keys=False, allow_unicode=True, width=96)
    return "\n".join(lines) + "\n" + body


def runbook_name(stack: str) -> str:
    return f"{stack}.runbook.md"


def plan_file_paths(stack: str, out_dir: Path) -> tuple[Path, Path]:
    """Where the recovery stack's file and its runbook go."""
    return out_dir / f"Pulumi.{stack}.yaml", out_dir / runbook_name(stack)


def check_out_dir(out_dir: Path) -> None:
    """DrError (one line) when the stack file and runbook could not be written to
    `out_dir`: checked before the two stacks are synthesized, not after."""
    existing = out_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise DrError(f"--out {out_dir}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise DrError(f"--out {out_dir}: {existing} is not writable; name another directory")


RECOVERY_HEADER = "# Recovery stack of `{source}` "
"""How a stack file `llmp dr plan` wrote for the source stack begins (`stack_file_text`)."""


def refuse_overwrite(
    stack: str,
    out_dir: Path,
    *,
    force: bool = False,
    source_stack: str | None = None,
    source_file: Path | None = None,
) -> None:
    """DrError (one line) when the stack file or the runbook may not be written to
    `out_dir`: the first of them that exists, without `force`; and, even with `force`, a
    stack file that is the source's (`source_file`) or any other stack's, or one of the
    recovery stack's name that `llmp dr plan` did not write for `source_stack`."""
    from llmp.files import FileRefused, refuse

    stack_path, runbook_path = plan_file_paths(stack, out_dir)
    if source_file is not None and _same_file(stack_path, source_file):
        raise DrError(
            f"--out {out_dir}: {stack_path.name} is {source_stack or 'the source'}'s stack "
            "file, kept even with --force; name another --stack"
        )
    try:
        refuse(stack_path, force=force, what="--out", own_stack=stack)
        refuse(runbook_path, force=force, what="--out")
    except FileRefused as exc:
        raise DrError(str(exc)) from None
    if source_stack is not None and stack_path.is_file():
        try:
            head = stack_path.read_text(errors="replace")[:400]
        except OSError:
            head = ""
        if not head.startswith(RECOVERY_HEADER.format(source=source_stack)):
            raise DrError(
                f"--out {out_dir}: {stack_path.name} is another stack's file, kept even with "
                "--force; name another --stack"
            )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except OSError:
        return False


def write_plan_files(
    plan: DrPlan, out_dir: Path, *, force: bool, source_file: Path | None = None
) -> tuple[Path, Path]:
    """Write the stack file and the runbook, each atomically; an existing file is kept
    unless `force`, and a stack file of another stack is never written (`refuse_overwrite`)."""
    from llmp.files import write_file
    from llmp.stacks import STACKS_DIR

    stack_path, runbook_path = plan_file_paths(plan.config.stack, out_dir)
    refuse_overwrite(
        plan.config.stack,
        out_dir,
        force=force,
        source_stack=plan.options.source_stack,
        source_file=source_file,
    )
    in_stacks = out_dir.resolve() == STACKS_DIR.resolve()
    runbook = render_runbook(
        plan, stack_path.name, in_stacks_dir=in_stacks, copy_from=from_repo_root(stack_path)
    )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DrError(f"cannot write {out_dir}: {exc.strerror or exc}") from None
    write_file(
        stack_path, stack_file_text(plan), force=True, what="--out", own_stack=plan.config.stack
    )
    write_file(runbook_path, runbook, force=True, what="--out")
    return stack_path, runbook_path


def from_repo_root(path: Path) -> str:
    """`path` as the runbook's commands name it: they run in the repository root (where
    Pulumi.yaml is), so relative to it when inside it, else absolute."""
    from llmp.stacks import REPO_ROOT

    resolved, root = path.resolve(), REPO_ROOT.resolve()
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(resolved)


def fmt(minutes: float) -> str:
    """Minutes as the runbook and the report show them: one decimal below 10."""
    return f"{minutes:.1f}" if minutes < 10 else f"{minutes:.0f}"


def show(value: Any) -> str:
    if value is None:
        return "(none)"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


@functools.cache
def _template() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("llmp.dr", "."),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    env.filters.update(
        fmt=fmt,
        show=show,
        md=lambda text: str(text).replace("|", "\\|").replace("\n", " "),
        quote=shlex.quote,
    )
    return env.get_template("runbook.md.j2")


def render_runbook(
    plan: DrPlan,
    stack_file_name: str,
    *,
    in_stacks_dir: bool = True,
    copy_from: str | None = None,
) -> str:
    """The operator's runbook for this recovery, in Markdown (`in_stacks_dir`: the stack
    file was written to stacks/, where Pulumi reads it; else it must be copied there from
    `copy_from`, its path from the repository root, default `stack_file_name`)."""
    return str(
        _template().render(
            plan=plan,
            stack_file_name=stack_file_name,
            in_stacks_dir=in_stacks_dir,
            copy_from=copy_from or stack_file_name,
        )
    )
