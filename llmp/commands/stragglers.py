"""`llmp stragglers`: which ranks and nodes slow a synchronous job down, and by how much."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from llmp import console
from llmp.commands import options
from llmp.errors import BadInput, Failed, prefixed
from spec.readers import summary, visible

if TYPE_CHECKING:
    from llmp.diagnosis.quarantine import QuarantineReport, Target
    from workloads.diagnosis.stragglers import Report


def stragglers(
    source: Annotated[
        Path | None,
        typer.Argument(
            metavar="FILE",
            help="Step times, one row per rank per step: JSON lines (what train.py "
            "--step-times writes), CSV with a header, or Parquet; columns step, rank, "
            "seconds and, optional, node and per-phase seconds.",
            show_default=False,
        ),
    ] = None,
    prometheus: Annotated[
        str | None, typer.Option("--prometheus", help="Read llmp_train_step_seconds from here.")
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", help="The job's namespace (--prometheus)."),
    ] = None,
    job: Annotated[str | None, typer.Option("--job", help="The job label (--prometheus).")] = None,
    range_: Annotated[str, typer.Option("--range", help="How far back (--prometheus).")] = "1h",
    resolution: Annotated[
        str, typer.Option("--resolution", help="query_range step (--prometheus).")
    ] = "15s",
    threshold: Annotated[
        float,
        typer.Option(
            "--threshold",
            metavar="FRACTION",
            help="Slow means above median x (1 + this): a fraction, 0.05 is 5%; 0 to 1.",
        ),
    ] = 0.05,
    persist: Annotated[
        float, typer.Option("--persist", help="Flag when slow in at least this share of steps.")
    ] = 0.5,
    top: Annotated[int, typer.Option("--top", help="Rows per table.")] = 10,
    evidence: Annotated[
        Path | None,
        typer.Option(
            "--evidence",
            metavar="FILE",
            help='Per-node metrics to list beside the causes: JSON {"node": {"metric": '
            "value}} (DCGM throttle reasons, EFA/ENA counters, FSx latency, ...).",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    quarantine: Annotated[
        bool,
        typer.Option(
            "--quarantine",
            help="Take the nodes flagged SLOW out of service: cordon, taint "
            "llm-platform/quarantined=slow:NoSchedule, annotate why, evict their training "
            "pods. Acts only with --kubeconfig; without it, prints what it would do.",
        ),
    ] = False,
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            "--kubeconfig",
            metavar="FILE",
            help="The cluster to quarantine in (--quarantine), named explicitly: the stack's "
            "`pulumi stack output kubeconfig --show-secrets > kubeconfig`.",
        ),
    ] = None,
    context: options.Context = None,
    max_quarantined: Annotated[
        int,
        typer.Option(
            "--max-quarantined",
            metavar="N",
            help="At most this many nodes may carry the quarantine taint, those already "
            "carrying it (NVSentinel's too) included; nodes beyond it are refused.",
        ),
    ] = 2,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="With --quarantine: read the cluster, say what would change."
        ),
    ] = False,
) -> None:
    """Which ranks and nodes slow a synchronous job down, and by how much.

    FILE holds one row per rank per step. JSON lines, one object a line, e.g.
    {"step": 12, "rank": 3, "node": "ip-10-0-1-17", "seconds": 1.042}; or CSV (a .csv
    file, or a first line that is not JSON) whose header names the same columns, in any
    order; or Parquet (a .parquet file). Columns: step (integer, required), rank
    (integer, required), seconds (the step's time on that rank, a number >= 0,
    required), node (optional: a rank without it is reported as its own node, rank-N),
    and, optional, the step's seconds per phase: data_wait_s, compute_s, collective_s,
    optimizer_s, checkpoint_s. Other columns are ignored.

    With phases, the nodes that lose time are explained: their lost time split into
    causes (compute: compute + optimizer; communication: collective; io: data_wait;
    checkpoint; other: the rest of seconds) by their excess over the other ranks, and
    for each cause the seconds the job would save if it went away on that node alone.
    A node late for any reason waits less in the collective than the others; only
    collective time above theirs counts (slow links). --evidence lists per-node metrics
    (DCGM throttle reasons, EFA/ENA counters, FSx latency) beside the causes; with
    --prometheus the exporters' own are queried too.

    Sample: examples/stragglers/step-times.jsonl (2 nodes x 8 ranks x 20 steps, one slow
    node). --prometheus reads the same from llmp_train_step_seconds{namespace,job,rank,node}
    and llmp_train_phase_seconds{namespace,job,rank,node,phase} of the one job --namespace
    and --job name (a job's name is unique in its namespace only).

    --quarantine isolates the SLOW nodes, worst first, as NVSentinel isolates a faulty GPU
    node (see llmp/diagnosis/quarantine.py): with --kubeconfig it acts (--dry-run: reads the cluster
    and changes nothing); without, it prints what it would do. A node already carrying the
    taint is left as it is; beyond --max-quarantined a node is refused.

    Exit 0: reported (and quarantined); 1: Prometheus unreachable or failing, a node refused
    by the cap, an eviction refused by a PodDisruptionBudget, a failed write; 2: bad input,
    or no usable cluster.
    """
    from llmp.diagnosis.quarantine import check_cap
    from workloads.diagnosis import stragglers as st

    if not quarantine and (kubeconfig or context or dry_run):
        raise BadInput("stragglers: --kubeconfig, --context and --dry-run go with --quarantine")
    if threshold > 1:
        # A fraction, not a percent: 5 would mean 6x the median, which flags nothing.
        raise BadInput(
            f"stragglers: --threshold {threshold:g} is a fraction of the median, not a "
            f"percent: 5% is 0.05; use 0 to 1"
        )
    try:
        st.check_options(threshold, persist, top)
        if quarantine:
            check_cap(max_quarantined)
        trace = st.load(source, prometheus, job, range_, resolution, namespace)
        found, notes = (
            st.load_evidence(evidence, prometheus, trace, range_)
            if evidence is not None or prometheus is not None
            else ({}, [])
        )
        report = st.analyse(trace, threshold, persist, explain=top, evidence=found)
        report.notes = notes
    except st.BadInput as exc:
        raise BadInput(f"stragglers: {exc}") from None
    except st.SourceUnavailable as exc:
        raise Failed(f"stragglers: {exc}") from None
    except BadInput as exc:
        raise BadInput(f"stragglers: {exc}") from None
    if not as_json:
        # The report first: it stands even when the cluster then cannot be used.
        for part in render(report, top):
            console.out.print(part)
    isolated = None
    if quarantine:
        with prefixed("stragglers"):
            isolated = quarantine_slow_nodes(report, kubeconfig, context, max_quarantined, dry_run)
    if as_json:
        out = report.as_dict()
        if quarantine:
            out["quarantine"] = (
                isolated.as_dict()
                if isolated is not None
                else {"acted": False, "nodes": [t.node for t in slow_nodes(report)[0]]}
            )
        console.write(json.dumps(out, indent=2) + "\n")
    elif quarantine:
        for line in quarantine_lines(report, isolated):
            console.line(line)
    if isolated is not None and (problem := isolated.summary()):
        raise Failed(f"stragglers: {problem}")


def slow_nodes(report: Report) -> tuple[list[Target], list[str]]:
    """The nodes flagged SLOW, most time lost first (the cap keeps the worst), each with the
    line its annotation carries; and the flagged groups that are no node (a rank whose trace
    row named none, reported as rank-N)."""
    from llmp.diagnosis.quarantine import Target

    targets, nameless = [], []
    for s in report.by_node:
        if not s.flagged:
            continue
        if len(s.ranks) == 1 and s.name == f"rank-{s.ranks[0]}":
            nameless.append(s.name)
            continue
        targets.append(
            Target(
                s.name,
                f"llmp stragglers: {s.median_ratio:.3f}x the other nodes' median step time, "
                f"slow in {s.slow_fraction:.0%} of {report.steps} steps, {s.lost_s:.1f} s lost "
                f"({report.source})",
            )
        )
    return targets, nameless


def quarantine_slow_nodes(
    report: Report, kubeconfig: str | None, context: str | None, cap: int, dry_run: bool
) -> QuarantineReport | None:
    """The quarantine of the SLOW nodes on the cluster; None where nothing is to be done or
    no --kubeconfig names the cluster (the plan is printed instead)."""
    import datetime

    from llmp.clients import kube
    from llmp.diagnosis import quarantine as q

    targets, _ = slow_nodes(report)
    if not targets or kubeconfig is None:
        return None
    apis = kube.load_apis(kubeconfig, context)
    return q.quarantine(
        apis,
        targets,
        max_quarantined=cap,
        dry_run=dry_run,
        now=datetime.datetime.now(datetime.UTC),
    )


def quarantine_lines(report: Report, isolated: QuarantineReport | None) -> list[str]:
    from llmp.diagnosis.quarantine import SLOW
    from spec.labels import QUARANTINE_TAINT

    targets, nameless = slow_nodes(report)
    lines = [
        f"quarantine: {name} has no node name in the trace; not quarantined" for name in nameless
    ]
    if not targets:
        return [*lines, "quarantine: no node is persistently slow; nothing to do"]
    if isolated is None:
        names = summary([t.node for t in targets], 10)
        return [
            *lines,
            f"quarantine: would cordon {names}, taint {QUARANTINE_TAINT}={SLOW}:NoSchedule, "
            "annotate why and evict the training pods; pass --kubeconfig to act",
        ]
    prefix = "quarantine (dry run)" if isolated.dry_run else "quarantine"
    return [*lines, *(f"{prefix}: {o.line()}" for o in isolated.outcomes)]


def render(report: Report, top: int = 10) -> Iterable[Any]:
    """Rich renderables: a summary line, then the node and rank tables (80 columns: short
    headers, explained in each table's caption; a long node name wraps, never cut)."""
    from rich.table import Table
    from rich.text import Text

    yield Text(
        f"{visible(report.source)}: {report.steps} steps, {report.ranks} ranks on "
        f"{report.nodes} nodes"
        + (f" ({report.incomplete_steps} steps missing ranks)" if report.incomplete_steps else "")
        + (f"; phases: {', '.join(report.phases)}" if report.phases else "")
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
            row = [cell(s.name)] + ([cell(s.node)] if title == "ranks" else [])
            row += [
                f"{s.lost_s:.2f}",
                f"{s.share:.1%}",
                f"{s.median_ratio:.3f}",
                f"{s.slow_fraction:.0%}" + (" SLOW" if s.flagged else ""),
            ]
            table.add_row(*row)
        yield table
    yield from render_causes(report, top)


def cell(text: str) -> Any:
    """A table cell of text from a file or a server (a node name, evidence): never rich
    markup, its unprintable characters escaped (each line of it)."""
    from rich.text import Text

    return Text("\n".join(visible(line) for line in text.split("\n")))


EXPLAIN_SHARE = 0.1
"""Nodes explained in the causes table: flagged SLOW, or losing this share of the slowdown."""


def render_causes(report: Report, top: int = 10) -> Iterable[Any]:
    """The causes table: for each explained node, one row per cause with a share of its lost
    time (and one for evidence bearing on no such cause)."""
    from rich.table import Table
    from rich.text import Text

    for note in report.notes:
        yield Text(f"note: {visible(note, 400)}")
    if not report.phases:
        given = [s for s in report.by_node if s.evidence][:top]
        if given:
            table = Table(title="evidence on the nodes", title_justify="left")
            for column in ("node", "bears on", "evidence"):
                table.add_column(column, overflow="fold")
            for s in given:
                for k, e in enumerate(s.evidence):
                    table.add_row(cell(s.name) if k == 0 else "", e.cause, cell(e.meaning))
            yield table
        return
    nodes = [s for s in report.explained if s.flagged or s.share >= EXPLAIN_SHARE][:top]
    if not nodes:
        yield Text(
            f"causes: no node is SLOW or loses {EXPLAIN_SHARE:.0%} of the slowdown; "
            "nothing to explain"
        )
        return
    table = Table(
        title=f"causes of the nodes' lost time ({len(nodes)} node"
        + ("s)" if len(nodes) > 1 else ")"),
        title_justify="left",
        caption="excess s: the node's time in the cause over the other ranks' median, "
        "summed over steps; lost s: the node's lost seconds split by the positive excesses; "
        "if gone: job seconds saved if only that cause went away on that node; compute = "
        "compute + optimizer, communication = collective (a late node waits less there: "
        "only time above the others' counts), io = data wait, other = seconds no phase "
        "accounts for",
        caption_justify="left",
    )
    table.add_column("node", overflow="fold")
    table.add_column("cause", overflow="fold")
    for column in ("excess s", "lost s", "if gone s"):
        table.add_column(column, justify="right", overflow="fold")
    with_evidence = any(s.evidence for s in nodes)
    if with_evidence:
        table.add_column("evidence", overflow="fold")
    for s in nodes:
        shown = [c for c in s.causes if c.share > 0] or s.causes[:1]
        names = {c.name for c in shown}
        for k, c in enumerate(shown):
            notes = [e.meaning for e in s.evidence if e.cause == c.name]
            row = [cell(s.name) if k == 0 else "", c.name]
            row += [f"{c.excess_s:.2f}", f"{c.lost_s:.2f}", f"{c.saved_s:.2f}"]
            table.add_row(*row, *([cell("\n".join(notes))] if with_evidence else []))
        rest = [e.meaning for e in s.evidence if e.cause not in names]
        if rest:
            table.add_row("", "(other evidence)", "", "", "", cell("\n".join(rest)))
    yield table


def register(app: typer.Typer) -> None:
    app.command("stragglers")(stragglers)
