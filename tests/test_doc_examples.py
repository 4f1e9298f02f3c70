"""Every `llmp diff` output the README and docs/ show is produced here, from the current
tree: a stack file mutated as the example says, compared with the unchanged one.

Each example sits between `<!-- example:NAME -->` and `<!-- /example:NAME -->`; the test
regenerates it and compares. `LLMP_UPDATE_DOCS=1 pytest tests/test_doc_examples.py`
rewrites them (read the diff before committing it). A diff output outside the markers
fails too, so a page can never again show a change `pulumi up` would not make.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import merge, raw_stack

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
MARKER = re.compile(r"<!-- example:([\w-]+) -->\n(.*?)<!-- /example:\1 -->\n", re.S)
WIDTH = 100


def _pool(section: str, name: str, **values: Any) -> dict[str, Any]:
    return {f"llm-platform:{section}": {name: values}}


# name -> (stack, the change, base label, how it is shown)
EXAMPLES: dict[str, tuple[str, dict[str, Any], str, str]] = {
    "diff-fixed-pool-terminal": (
        "pretrain", _pool("node_pools", "h100", desired_size=18, max_size=18), "main", "terminal"
    ),
    "diff-fixed-pool-markdown": (
        "pretrain", _pool("node_pools", "h100", desired_size=18, max_size=18), "main", "markdown"
    ),
    "diff-fixed-pool-summary": (
        "pretrain", _pool("node_pools", "h100", desired_size=18, max_size=18), "main", "summary"
    ),
    "diff-fixed-pool-ci-head": (
        "pretrain",
        _pool("node_pools", "h100", desired_size=18, max_size=18),
        "origin/main",
        "markdown-head",
    ),
    "diff-elastic-desired-summary": (
        "finetune", _pool("node_pools", "h100", desired_size=2), "main", "summary"
    ),
    "diff-root-disk-summary": (
        "pretrain", _pool("node_pools", "h100", disk_size_gib=600), "main", "summary"
    ),
    "diff-vpc-cidr-banners": (
        "pretrain", {"llm-platform:network": {"vpc_cidr": "10.11.0.0/16"}}, "main", "banners"
    ),
    "diff-serving-pool-summary": (
        "inference", _pool("node_pools", "l40s", instance_type="g6e.48xlarge"), "main", "summary"
    ),
}  # fmt: skip


@cache
def _report(stack: str, change: str, base_label: str) -> Any:
    from llmp.diff import _violations, report_of_plans, violation_delta
    from llmp.plan.synth import synthesize

    overrides = yaml.safe_load(change)
    base_raw = raw_stack(stack)
    head_raw = merge(base_raw, overrides)
    base, head = synthesize(stack, base_raw), synthesize(stack, head_raw)
    texts = yaml.safe_dump({"config": base_raw}), yaml.safe_dump({"config": head_raw})
    before, _ = _violations(base, stack, texts[0], None)
    after, _ = _violations(head, stack, texts[1], None)
    return report_of_plans(
        stack,
        base,
        head,
        base_label=base_label,
        head_label="the working tree",
        violations=violation_delta(before, after),
    )


def render(name: str) -> str:
    """The example as the page shows it, fences included."""
    from rich.console import Console

    from llmp.diff.render import effect_lines, render_markdown, render_terminal

    stack, change, base_label, how = EXAMPLES[name]
    report = _report(stack, yaml.safe_dump(change), base_label)
    if how == "markdown":
        return "````markdown\n" + render_markdown(report) + "````\n"
    if how == "markdown-head":
        head = render_markdown(report).split("\n\n")[:2]
        return "```\n" + "\n\n".join(head) + "\n```\n"
    if how == "banners":  # the terminal's head at 80 columns, then the effects
        buffer = io.StringIO()
        console = Console(file=buffer, width=80, color_system=None, force_terminal=False)
        render_terminal(report, console)
        import textwrap

        head = []
        for line in buffer.getvalue().splitlines():
            if line.strip() == "changed":
                break
            head.append(line.rstrip())
        effects = [
            wrapped
            for line in effect_lines(report)
            for wrapped in textwrap.wrap(line, 80, subsequent_indent="  ")
        ]
        return "```\n" + "\n".join(head + effects) + "\n```\n"
    if how == "terminal":
        buffer = io.StringIO()
        console = Console(file=buffer, width=WIDTH, color_system=None, force_terminal=False)
        render_terminal(report, console)
        command = f"$ llmp diff --base {base_label} {stack} --markdown out/diff-{stack}.md"
        body = "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())
        return f"```\n{command}\n{body}\n```\n"
    lines = [f"llmp diff {stack}: {base_label} → the working tree", report.summary()]
    lines += [f"note: {n}" for n in report.notes]
    lines += effect_lines(report)
    import textwrap

    wrapped = []
    for line in lines:
        indent = line[: len(line) - len(line.lstrip())]
        wrapped += textwrap.wrap(
            line, WIDTH - 20, subsequent_indent=indent + "  ", break_on_hyphens=False
        ) or [""]
    return "```\n" + "\n".join(wrapped) + "\n```\n"


def _found() -> list[tuple[Path, str, str]]:
    return [
        (page, m.group(1), m.group(2))
        for page in PAGES
        for m in MARKER.finditer(page.read_text())
    ]


def test_every_example_is_shown_somewhere() -> None:
    shown = {name for _, name, _ in _found()}
    assert shown == set(EXAMPLES), f"not on a page: {sorted(set(EXAMPLES) - shown)}"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_example_is_the_current_trees_output(name: str) -> None:
    pages = [(page, text) for page, n, text in _found() if n == name]
    assert pages, f"example {name} is on no page"
    fresh = render(name)
    stale = [page for page, text in pages if text != fresh]
    if stale and os.environ.get("LLMP_UPDATE_DOCS"):
        for page in stale:
            doc = page.read_text()
            doc = MARKER.sub(
                lambda m: m.group(0)
                if m.group(1) != name
                else f"<!-- example:{name} -->\n{fresh}<!-- /example:{name} -->\n",
                doc,
            )
            page.write_text(doc)
        return
    assert not stale, (
        f"{name} differs on {', '.join(str(p.relative_to(REPO)) for p in stale)}: "
        "LLMP_UPDATE_DOCS=1 pytest tests/test_doc_examples.py"
    )


DIFF_OUTPUT: list[Callable[[str], bool]] = [
    lambda line: bool(re.match(r"^(\$ )?llmp diff \S+: ", line)),
    lambda line: line.startswith("### `llmp diff`"),
    lambda line: "to change in place;" in line,
]


def test_no_diff_output_is_shown_outside_an_example() -> None:
    """A diff's header or summary line on a page is inside an example block."""
    outside = []
    for page in PAGES:
        text = MARKER.sub("", page.read_text())
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip("*` ")
            if any(test(line) for test in DIFF_OUTPUT):
                outside.append(f"{page.relative_to(REPO)}:{number}: {line[:60]}")
    assert not outside, "diff output not produced by a test:\n" + "\n".join(outside)
