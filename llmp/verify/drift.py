"""The `drift` row of `llmp verify`: `pulumi preview --refresh --expect-no-changes`.

The refresh reads every resource of the stack with its provider's own calls (EKS, EC2,
S3, FSx, IAM, KMS, the Helm releases and Kubernetes objects), and the preview compares
the program with what was read: any step but "same" is drift. That is every property
of every resource (versions, scaling, labels, taints, lifecycle and replication rules,
encryption, endpoint access...), which `llmp verify` does not rebuild with boto3. A
preview changes neither the resources nor the stack's state.

It runs through the Automation API (`pulumi.automation`) in the repository root
(Pulumi.yaml, stacks/) when the Pulumi CLI is on PATH, and needs what `pulumi preview`
needs: the stack's backend (`pulumi login`), its secrets provider (a passphrase, a KMS
key) and the cloud credentials. Without the CLI the row is "not checked" and names the
command to run instead.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from llmp.verify.findings import FAIL, NOT_CHECKED, PASS, Finding, Status

AREA = "drift"
CHECK = "refresh preview"
UNCHANGED = frozenset({"same", "read", "refresh"})
"""Step operations that change nothing (the refresh's own reads among them)."""
_SHOWN = 5


def command(stack: str) -> str:
    return f"pulumi preview --refresh --expect-no-changes -s {stack}"


def pulumi_cli() -> str | None:
    """The Pulumi CLI on PATH, which the Automation API drives."""
    return shutil.which("pulumi")


def check(
    stack: str,
    work_dir: Path,
    enabled: bool = True,
    notify: Callable[[str], None] | None = None,
) -> list[Finding]:
    """One row: pass (no changes), fail (the changes, or why the preview failed), or not
    checked (--no-drift, or no CLI). `notify` hears the one line said before it runs."""

    def row(status: Status, reason: str) -> list[Finding]:
        return [Finding(f"stack {stack}", CHECK, status, reason, AREA)]

    if not enabled:
        return row(NOT_CHECKED, f"--no-drift; run `{command(stack)}`")
    if pulumi_cli() is None:
        return row(NOT_CHECKED, f"no Pulumi CLI on PATH: install it, or run `{command(stack)}`")
    from pulumi import automation

    steps: list[tuple[str, str, list[str]]] = []
    """(operation, URN, changed keys) of every step that changes something."""
    summaries: list[dict[str, int]] = []

    def on_event(event: Any) -> None:
        pre = event.resource_pre_event
        if pre is not None and _op(pre.metadata.op) not in UNCHANGED:
            steps.append((_op(pre.metadata.op), pre.metadata.urn, pre.metadata.diffs or []))
        if event.summary_event is not None:
            summaries.append(_counts(event.summary_event.resource_changes))

    if notify is not None:
        notify(f"drift: running `{command(stack)}` (it reads every resource: minutes)")
    try:
        selected = automation.select_stack(stack_name=stack, work_dir=str(work_dir))
        result = selected.preview(
            refresh=True,
            expect_no_changes=True,
            color="never",
            suppress_progress=True,
            on_event=on_event,
        )
        summaries.append(_counts(result.change_summary))
    except automation.StackNotFoundError:
        return row(
            FAIL, f"no stack {stack} in the backend the CLI is logged in to (pulumi stack ls)"
        )
    except (automation.CommandError, automation.InvalidVersionError, RuntimeError) as exc:
        if not steps and not _changes(summaries):
            return row(FAIL, f"`{command(stack)}` failed: {_why(exc)}")
    counts = _changes(summaries)
    if not steps and not counts:
        same = sum((summaries[-1] if summaries else {}).values())
        return row(PASS, f"no changes after the refresh ({same} resources the same)")
    shown = [
        f"{op} {urn.rsplit('::', 1)[-1]}" + (f" ({', '.join(d)})" if d else "")
        for op, urn, d in steps
    ]
    if len(shown) > _SHOWN:
        shown = [*shown[:_SHOWN], f"{len(shown) - _SHOWN} more"]
    total = ", ".join(f"{n} to {op}" for op, n in sorted(counts.items())) or f"{len(steps)} steps"
    return row(FAIL, f"{total}: {'; '.join(shown)}" if shown else total)


def _op(op: Any) -> str:
    """An OpType (a str enum) or its JSON string, as the string."""
    return str(getattr(op, "value", op))


def _counts(summary: Mapping[Any, int]) -> dict[str, int]:
    return {_op(op): n for op, n in summary.items()}


def _changes(summaries: list[dict[str, int]]) -> dict[str, int]:
    """The last summary's counts of steps that change something."""
    last = summaries[-1] if summaries else {}
    return {op: n for op, n in last.items() if op not in UNCHANGED and n}


def _why(exc: Exception) -> str:
    """The CLI's last `error:` line (a CommandError carries its stdout and stderr as text)."""
    text = str(exc).split(" stderr: ", 1)[-1]
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    found = (errors or lines or [type(exc).__name__])[-1]
    return found if len(found) <= 300 else found[:297] + "..."
