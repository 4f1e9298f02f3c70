"""`llmp diff`'s report rendered: rich tables for a terminal, Markdown for a PR comment.

`render_terminal` prints a title, a red banner for precious replacements and refusals,
the summary, then a table per kind of change, the cost and the policy violations.
`render_markdown` writes one PR comment that fits GitHub's limit: the essentials first,
then each resource's block while it fits, whole, and a closing note naming what did not.
The report itself is `llmp.diff`'s.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from llmp.diff import DiffReport, money, money_delta


def effect_lines(report: DiffReport) -> list[str]:
    """What `pulumi up` does to running work, one line each, effects indented under their
    cause: rolls, replacements of node pools, changes it does not make, the unknowns."""
    lines = []
    for roll in report.rolls:
        lines.append(roll.describe())
        lines += [f"  {e}" for e in roll.effects()]
    for t in report.transitions:
        lines.append(f"while replaced: {t.describe()}")
        lines += [f"  {e}" for e in t.effects()]
    for c in report.diff.ignored:
        lines.append(
            f"no effect at `pulumi up`: {c.name} {c.path} {c.old} → {c.new}: {c.reason}"
        )
    lines += [f"not known offline: {u}" for u in report.unknown]
    return lines

GITHUB_COMMENT_LIMIT = 65536
"""Characters GitHub accepts in one issue or PR comment body."""


def _component_note(report: DiffReport) -> str:
    if not report.component_costs:
        return "Cost per component: not in these plans' cost output"
    if not report.cost["components"]:
        return "No component's monthly cost changes"
    return "Components whose monthly cost changes are listed"


# ---------------------------------------------------------------------------
# Terminal
# ---------------------------------------------------------------------------


def render_terminal(report: DiffReport, console: Console) -> None:
    """Rich output: title, a red banner for precious replacements, summary, then the tables."""
    d = report.diff
    console.print(
        Text.assemble(
            ("llmp diff ", "bold"),
            (report.stack, "bold cyan"),
            f": {report.base} → {report.head}",
        )
    )
    for note in report.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    precious = d.precious_replacements
    recreated = d.recreated
    if precious:
        lines = [
            Text.assemble((f"{r.name} ", "bold"), (f"({r.type})", "dim"), f": {r.reason}")
            for r in precious
        ]
        console.print(
            Panel(
                Group(*lines),
                title=f"PRECIOUS RESOURCES REPLACED: {len(precious)} "
                f"(of {len(recreated)} replaced)",
                border_style="bold red",
                style="red",
            )
        )
    elif recreated:
        console.print(Text(f"{len(recreated)} resources replaced, none precious", style="yellow"))
    else:
        console.print(Text("no precious resource is replaced", style="green"))
    if d.refused:
        lines = [
            Text.assemble(
                (f"{r.name} ", "bold"), (f"({r.type})", "dim"), f": {r.input}: {r.reason}"
            )
            for r in d.refused
        ]
        console.print(
            Panel(
                Group(*lines),
                title=f"REFUSED BY THE API: {len(d.refused)} (`pulumi up` fails there)",
                border_style="bold red",
                style="red",
            )
        )
    console.print(Text(report.summary()))

    if d.changed:
        table = Table(title="changed", title_justify="left")
        for column in ("resource", "input", "old", "new"):
            table.add_column(column, overflow="fold")
        for rc in d.changed:
            for i, change in enumerate(rc.changes):
                label = Text(f"{rc.name}\n{rc.type}") if i == 0 else Text("")
                table.add_row(label, Text(change.path), Text(change.old), Text(change.new))
        console.print(table)
    for title, refs in (("added", d.added), ("deleted", d.deleted)):
        if refs:
            table = Table(title=title, title_justify="left")
            table.add_column("resource", overflow="fold")
            table.add_column("type", overflow="fold")
            for ref in refs:
                table.add_row(Text(ref.name), Text(ref.type))
            console.print(table)
    others = [r for r in d.replacements if not r.precious]
    if d.renamed or others:
        table = Table(title="replaced (not precious) and renamed", title_justify="left")
        for column in ("resource", "type", "why"):
            table.add_column(column, overflow="fold")
        for r in others:
            table.add_row(Text(r.name), Text(r.type), Text(r.reason))
        console.print(table)
    if d.updated_by_cascade:
        table = Table(
            title="updated: they take outputs of replaced resources", title_justify="left"
        )
        table.add_column("resource", overflow="fold")
        table.add_column("type", overflow="fold")
        for ref in d.updated_by_cascade:
            table.add_row(Text(ref.name), Text(ref.type))
        console.print(table)

    table = Table(title="cost", title_justify="left")
    for column in ("measure", "base", "head", "delta"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    for line in [*report.cost["totals"], *report.cost["node_pools"], *report.cost["components"]]:
        table.add_row(line.measure, money(line.base), money(line.head), money_delta(line.delta))
    console.print(table)
    console.print(Text(_component_note(report), style="dim"))
    effects = effect_lines(report)
    if effects:
        console.print(Text("what `pulumi up` does to running work", style="bold"))
        for effect in effects:
            console.print(Text(effect, style="yellow" if effect.startswith(" ") else ""))

    for title, violations in (
        ("new policy violations", report.new_violations),
        ("fixed policy violations", report.fixed_violations),
    ):
        if not violations:
            continue
        table = Table(title=title, title_justify="left")
        for column in ("rule", "resource", "level", "message"):
            table.add_column(column, overflow="fold")
        for v in violations:
            style = "bold red" if v.level == "mandatory" and title.startswith("new") else ""
            table.add_row(
                Text(v.rule), Text(v.resource), Text(v.level, style=style), Text(v.message)
            )
        console.print(table)


# ---------------------------------------------------------------------------
# Markdown (a PR comment)
# ---------------------------------------------------------------------------


def _cell(text: str) -> str:
    """A table cell: a code span, pipes escaped (GFM tables split on them even inside code)."""
    text = text.replace("\n", " ").replace("|", "\\|")
    if "`" in text:
        return text.replace("<", "&lt;").replace(">", "&gt;")
    return f"`{text}`" if text else ""


def _plain(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _details(summary: str, body: list[str]) -> str:
    return "\n".join(["<details>", f"<summary>{summary}</summary>", "", *body, "", "</details>"])


_MAX_ROWS_PER_RESOURCE = 40


def render_markdown(report: DiffReport, limit: int = GITHUB_COMMENT_LIMIT) -> str:
    """A PR comment: heading, summary, replacements, cost, policy; details folded.

    Sections are whole blocks (each <details> opened and closed in one), added
    in order while they fit in `limit` characters; what does not fit is named
    in a closing note, so the comment is never cut inside a block.
    """
    d = report.diff
    head: list[str] = [
        f"### `llmp diff` {report.stack}: {report.base} → {report.head}",
        "",
        f"**{report.summary()}**",
    ]
    for note in report.notes:
        head += ["", f"> {_plain(note)}"]
    precious = d.precious_replacements
    if precious:
        head += [
            "",
            f"> [!CAUTION]\n> ⚠️ **This change replaces {len(precious)} precious resource(s).** "
            "Pulumi will delete and re-create them:",
        ]
        for r in precious:
            why = f" *{_plain(r.why)}*" if r.why else ""
            head.append(f"> - `{r.name}` ({r.type}): {_plain(r.reason)}.{why}")
    else:
        head += [
            "",
            "✅ No precious resource (cluster, node group, file system, bucket, key) is replaced.",
        ]
    if d.refused:
        head += [
            "",
            f"> [!WARNING]\n> **{len(d.refused)} change(s) the API refuses**: `pulumi up` "
            "fails there.",
        ]
        for refusal in d.refused:
            head.append(
                f"> - `{refusal.name}` ({refusal.type}): {_plain(refusal.input)}: "
                f"{_plain(refusal.reason)}."
            )

    cost_rows = ["| measure | base | head | delta |", "|---|---:|---:|---:|"]
    for line in [*report.cost["totals"], *report.cost["node_pools"], *report.cost["components"]]:
        cost_rows.append(
            f"| {line.measure} | {money(line.base)} | {money(line.head)} | "
            f"{money_delta(line.delta)} |"
        )
    cost_block = ["", "#### Cost", "", *cost_rows]
    cost_block += ["", f"_{_component_note(report)}._"]
    effects = effect_lines(report)
    if effects:
        cost_block += ["", "#### What `pulumi up` does to running work", ""]
        for effect in effects:
            bullet = "  - " if effect.startswith(" ") else "- "
            cost_block.append(bullet + _plain(effect.strip()))

    policy_block = ["", "#### Policy"]
    if report.new_violations:
        policy_block += [
            "",
            "New violations:",
            "",
            "| rule | resource | level | message |",
            "|---|---|---|---|",
        ]
        for v in report.new_violations:
            level = f"**{v.level}**" if v.level == "mandatory" else v.level
            policy_block.append(
                f"| `{v.rule}` | {_cell(v.resource)} | {level} | {_plain(v.message)} |"
            )
    else:
        policy_block += ["", "No new policy violations."]
    if report.fixed_violations:
        policy_block += [
            "",
            "Fixed: "
            + ", ".join(f"`{v.rule}` on {_cell(v.resource)}" for v in report.fixed_violations),
        ]

    essentials = "\n".join([*head, *cost_block, *policy_block])

    blocks: list[tuple[str, str]] = []  # (what it lists, the block)
    others = [r for r in d.replacements if not r.precious]
    if others:
        rows = ["| resource | type | why |", "|---|---|---|"]
        rows += [f"| {_cell(r.name)} | `{r.type}` | {_plain(r.reason)} |" for r in others]
        blocks.append(
            ("other replacements", _details(f"Replaced, not precious ({len(others)})", rows))
        )
    if d.updated_by_cascade:
        rows = ["| resource | type |", "|---|---|"]
        rows += [f"| {_cell(r.name)} | `{r.type}` |" for r in d.updated_by_cascade]
        blocks.append(
            (
                "updates by replacement",
                _details(
                    f"Updated: they take outputs of replaced resources "
                    f"({len(d.updated_by_cascade)})",
                    rows,
                ),
            )
        )
    if d.renamed:
        rows = ["| old | new | type |", "|---|---|---|"]
        rows += [
            f"| {_cell(r.old.name)} | {_cell(r.new.name)} | `{r.new.type}` |" for r in d.renamed
        ]
        blocks.append(("renames", _details(f"Renamed: delete + create ({len(d.renamed)})", rows)))
    for rc in d.changed:
        rows = ["| input | old | new |", "|---|---|---|"]
        shown = rc.changes[:_MAX_ROWS_PER_RESOURCE]
        rows += [f"| {_cell(c.path)} | {_cell(c.old)} | {_cell(c.new)} |" for c in shown]
        if len(rc.changes) > len(shown):
            rows += [
                "",
                f"_…and {len(rc.changes) - len(shown)} more inputs (see `llmp diff --json`)._",
            ]
        blocks.append(
            (
                f"change of {rc.name}",
                _details(
                    f"Changed: <code>{rc.name}</code> ({rc.type}), {len(rc.changes)} inputs", rows
                ),
            )
        )
    for title, refs in (("Added", d.added), ("Deleted", d.deleted)):
        if refs:
            rows = ["| resource | type |", "|---|---|"]
            rows += [f"| {_cell(r.name)} | `{r.type}` |" for r in refs]
            blocks.append((title.lower(), _details(f"{title} ({len(refs)})", rows)))

    reserve = 400  # room for the truncation note
    parts = [essentials]
    size = len(essentials)
    left_out: list[str] = []
    if d.changed or d.added or d.deleted or others or d.renamed or d.updated_by_cascade:
        parts.append("#### Resources")
        size += len(parts[-1]) + 2
    for what, block in blocks:
        if left_out or size + len(block) + 2 > limit - reserve:
            left_out.append(what)
            continue
        parts.append(block)
        size += len(block) + 2
    if left_out:
        parts.append(
            f"_Truncated to fit a GitHub comment ({limit} characters): {len(left_out)} more "
            "sections are not shown; run `llmp diff --json` for everything._"
        )
    text = "\n\n".join(parts) + "\n"
    if len(text) > limit:  # essentials alone too long: cut at a line, close nothing open
        cut = text[: limit - reserve].rsplit("\n", 1)[0]
        text = cut + "\n\n_Truncated to fit a GitHub comment; run `llmp diff --json`._\n"
    return text
