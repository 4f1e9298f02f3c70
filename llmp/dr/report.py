"""What `llmp dr plan` prints: decisions, notes, RTO path, RPO parts, equivalence.

Readable at 80 columns: a rewritten setting is a block (its key, then source, recovery
and why under it), a critical-path step shows its type under its name, an RPO part its
source under it; nothing is cut.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from llmp.dr import DrPlan, fmt, show


def _grid() -> Table:
    """Two borderless columns, a label and its value; the value wraps under itself."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold", ratio=1)
    return grid


def _indented(renderable: Any) -> Padding:
    return Padding(renderable, (0, 0, 0, 2))


def renderables(plan: DrPlan, written: Iterable[Path]) -> list[Any]:
    rc, diff, rto, rpo = plan.config, plan.differences, plan.rto, plan.rpo
    source = plan.options.source_stack
    parts: list[Any] = [
        Text(f"recovery stack {rc.stack} of {source}: {rc.source_region} -> {rc.region}")
    ]
    parts += [Text(f"  wrote {path}") for path in written]
    if rc.adopted:
        adopted = _grid()
        for k, v in rc.adopted.items():
            adopted.add_row(f"{k} <-", v)
        adopted.add_row(
            "key", f"{rc.key_arn} ({rc.key_from})" if rc.key_arn else "not set yet (see ACTION)"
        )
        parts += [Text("adopted (imported, protected, retained):"), _indented(adopted)]

    changes = Table(title="region-bound settings rewritten", title_justify="left", show_lines=True)
    changes.add_column("setting: source -> recovery, and why", overflow="fold", ratio=1)
    for r in rc.rewrites:
        values = _grid()
        values.add_row("source", Text(show(r.before)))
        values.add_row("recovery", Text(show(r.after)))
        values.add_row("why", Text(r.why, style="italic"))
        changes.add_row(Group(Text(r.key, style="bold"), _indented(values)))
    parts.append(changes)

    notes = _grid()
    for note in rc.notes:
        style = {"action": "bold red", "check": "yellow"}.get(note.level, "")
        notes.add_row(Text(f"{note.level.upper()}:", style=style), Text(note.text))
    if rc.notes:
        parts.append(notes)

    path = Table(
        title=f"RTO ~ {rto.minutes:.1f} min until its workloads can run (range {fmt(rto.low)}-"
        f"{fmt(rto.high)}); `pulumi up` ends at ~ {fmt(rto.complete)} min. Critical path "
        f"of {rto.resources} resources:",
        title_justify="left",
        caption_justify="left",
        caption="start, min: minutes from the start of `pulumi up`, and to create it",
    )
    for column in ("start", "min"):
        path.add_column(column, justify="right", overflow="fold")
    path.add_column("resource, its type", overflow="fold", ratio=1)
    for s in rto.path:
        step = Group(Text(s.name), _indented(Text(s.type, style="dim")))
        path.add_row(f"{s.start:.1f}", f"{s.minutes:.1f}", step)
    parts.append(path)
    if rto.not_awaited:
        later = Table(
            title="created after the restart can begin (it does not wait for them):",
            title_justify="left",
        )
        later.add_column("done", justify="right", overflow="fold")
        later.add_column("resource, and why the restart does not wait", overflow="fold", ratio=1)
        for n in rto.not_awaited:
            later.add_row(
                f"{n.finish:.1f}", Group(Text(n.name), _indented(Text(n.why, style="dim")))
            )
        parts.append(later)
    if rto.unknown_types:
        parts.append(Text(f"types without a figure: {', '.join(rto.unknown_types)}"))

    loss = Table(
        title=f"RPO <= {fmt(rpo.minutes)} min of training progress"
        if rpo.replicated
        else "RPO unbounded: the checkpoints bucket is not replicated (every checkpoint is lost)",
        title_justify="left",
    )
    loss.add_column("min", justify="right", overflow="fold")
    loss.add_column("part (kind), its source", overflow="fold", ratio=1)
    for p in rpo.parts:
        what = Group(Text(f"{p.what} ({p.kind})", style="bold"), _indented(Text(p.source)))
        loss.add_row(fmt(p.minutes), what)
    parts.append(loss)

    if plan.recreated:
        lost = Table(
            title="precious resources: created new (empty) or adopted",
            title_justify="left",
        )
        lost.add_column("type", overflow="fold")
        lost.add_column("new", justify="right")
        lost.add_column("adopted", justify="right")
        lost.add_column("a new one means", overflow="fold", ratio=1)
        for kind in plan.recreated:
            lost.add_row(
                kind.type.rsplit(":", 1)[-1],
                str(len(kind.created)),
                str(len(kind.adopted)),
                kind.why or "",
            )
        parts.append(lost)

    counts = ", ".join(f"{rule} {n}" for rule, n in diff.by_rule().items())
    summary = (
        f"plan equivalence: {diff.in_both} resources in both, {len(diff.only_in_source)} only "
        f"in {source}, {len(diff.only_in_recovery)} only in {rc.stack}; "
        f"differences by named reason: {counts or 'none'}; unexplained: {len(diff.unexplained)}"
    )
    parts.append(Text(summary, style="" if diff.equivalent else "bold red"))
    parts += [
        Text(
            f"  unexplained: {d.type} {d.name} {d.path}: {show(d.source)} -> {show(d.recovery)}",
            style="red",
        )
        for d in diff.unexplained[:20]
    ]
    return parts
