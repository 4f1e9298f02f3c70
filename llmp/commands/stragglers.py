"""`llmp stragglers`: which ranks and nodes slow a synchronous job down, and by how much."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from llmp import console
from llmp.errors import BadInput, Failed

if TYPE_CHECKING:
    from workloads.diagnosis.stragglers import Report


def stragglers(
    source: Annotated[
        Path | None,
        typer.Argument(
            metavar="FILE",
            help="Step times, one row per rank per step: JSON lines (what train.py "
            "--step-times writes) or CSV with a header; columns step, rank, seconds and, "
            "optional, node.",
            show_default=False,
        ),
    ] = None,
    prometheus: Annotated[
        str | None, typer.Option("--prometheus", help="Read llmp_train_step_seconds from here.")
    ] = None,
    job: Annotated[str | None, typer.Option("--job", help="The job label (--prometheus).")] = None,
    range_: Annotated[str, typer.Option("--range", help="How far back (--prometheus).")] = "1h",
    resolution: Annotated[
        str, typer.Option("--resolution", help="query_range step (--prometheus).")
    ] = "15s",
    threshold: Annotated[
        float, typer.Option("--threshold", help="Slow means above median x (1 + this).")
    ] = 0.05,
    persist: Annotated[
        float, typer.Option("--persist", help="Flag when slow in at least this share of steps.")
    ] = 0.5,
    top: Annotated[int, typer.Option("--top", help="Rows per table.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Which ranks and nodes slow a synchronous job down, and by how much.

    FILE holds one row per rank per step. JSON lines, one object a line, e.g.
    {"step": 12, "rank": 3, "node": "ip-10-0-1-17", "seconds": 1.042}; or CSV (a .csv
    file, or a first line that is not JSON) whose header names the same columns, in any
    order. Columns: step (integer, required), rank (integer, required), seconds (the
    step's time on that rank, a number >= 0, required), node (optional: a rank without
    it is reported as its own node, rank-N). Other columns are ignored.

    Sample: examples/stragglers/step-times.jsonl (2 nodes x 8 ranks x 20 steps, one slow
    node). --prometheus reads the same from llmp_train_step_seconds{job,rank,node}.

    Exit 0: reported; 1: Prometheus unreachable or failing; 2: bad input.
    """
    from workloads.diagnosis import stragglers as st

    try:
        st.check_options(threshold, persist, top)
        trace = st.load(source, prometheus, job, range_, resolution)
        report = st.analyse(trace, threshold, persist)
    except st.BadInput as exc:
        raise BadInput(f"stragglers: {exc}") from None
    except st.SourceUnavailable as exc:
        raise Failed(f"stragglers: {exc}") from None
    if as_json:
        console.write(json.dumps(report.as_dict(), indent=2) + "\n")
        return
    for part in render(report, top):
        console.out.print(part)


def render(report: Report, top: int = 10) -> Iterable[Any]:
    """Rich renderables: a summary line, then the node and rank tables (80 columns: short
    headers, explained in each table's caption; a long node name wraps, never cut)."""
    from rich.table import Table
    from rich.text import Text

    yield Text(
        f"{report.source}: {report.steps} steps, {report.ranks} ranks on {report.nodes} nodes"
        + (f" ({report.incomplete_steps} steps missing ranks)" if report.incomplete_steps else "")
        + f"\nstep time {report.actual_s:.2f} s actual, {report.at_median_s:.2f} s if every rank"
        f" ran at the step's median: slowdown {report.slowdown_s:.2f} s "
        f"({report.slowdown_fraction:.1%} of the time)"
    )
    caption = (
        "lost s: seconds the job would save if it ran at the others' median; share: of the "
        "slowdown; x median: its time over the others' median (the median over steps); slow: "
        "share of its steps "
        f"above the others' median x {1 + report.threshold:g}, SLOW when at least "
        f"{report.persist:.0%}"
    )
    for title, scores in (("nodes", report.by_node), ("ranks", report.by_rank)):
        table = Table(
            title=f"{title} by time lost (top {min(top, len(scores))})",
            title_justify="left",
            caption=caption if title == "ranks" else None,
            caption_justify="left",
        )
        table.add_column("node" if title == "nodes" else "rank", overflow="fold")
        if title == "ranks":
            table.add_column("node", overflow="fold")
        for column in ("lost s", "share", "x median", "slow"):
            table.add_column(column, justify="right", overflow="fold")
        for s in scores[:top]:
            row = [s.name] + ([s.node] if title == "ranks" else [])
            row += [
                f"{s.lost_s:.2f}",
                f"{s.share:.1%}",
                f"{s.median_ratio:.3f}",
                f"{s.slow_fraction:.0%}" + (" SLOW" if s.flagged else ""),
            ]
            table.add_row(*row)
        yield table


def register(app: typer.Typer) -> None:
    app.command("stragglers")(stragglers)
