"""`llmp stragglers`: which ranks and nodes slow a synchronous job down, and by how much."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmp import console
from llmp.errors import prefixed


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
    from llmp import stragglers as st

    with prefixed("stragglers"):
        st.check_options(threshold, persist, top)
        trace = st.load(source, prometheus, job, range_, resolution)
        report = st.analyse(trace, threshold, persist)
    if as_json:
        print(st.to_json(report))
        return
    for part in st.render(report, top):
        console.out.print(part)


def register(app: typer.Typer) -> None:
    app.command("stragglers")(stragglers)
