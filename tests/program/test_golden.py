"""Every stack's plan, byte for byte, against the one checked in beside this test.

A change that should not change what a stack deploys (a refactor, a moved
module) must leave these files alone; a change that should, updates them in
the same commit, where a reviewer reads the plan's diff next to the code's:

    LLMP_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/program/test_golden.py

The comparison is on the canonical text `llmp synth` writes (resources in URN
order, keys sorted): registration order varies from run to run, nothing else.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from llmp.plan import Plan
from tests.conftest import STACKS

GOLDEN = Path(__file__).parent / "golden"
_SHOWN = 60  # diff lines in a failure: enough to see what moved


@pytest.mark.parametrize("stack", STACKS)
def test_plan_is_byte_identical_to_the_golden_plan(
    stack: str, plans: Callable[[str], Plan]
) -> None:
    path = GOLDEN / f"{stack}.plan.json"
    text = plans(stack).text()
    if os.environ.get("LLMP_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    golden = path.read_text()
    if text != golden:
        diff = difflib.unified_diff(
            golden.splitlines(),
            text.splitlines(),
            f"golden/{path.name}",
            "synthesized",
            lineterm="",
        )
        shown = "\n".join(list(diff)[:_SHOWN])
        pytest.fail(
            f"the plan of {stack} differs from {path.name} (LLMP_UPDATE_GOLDEN=1 rewrites it "
            f"when the change is meant):\n{shown}"
        )


def test_plan_text_does_not_depend_on_registration_order(plans: Callable[[str], Plan]) -> None:
    plan = plans("finetune")
    shuffled = Plan(
        project=plan.project,
        stack=plan.stack,
        resources=list(reversed(plan.resources)),
        outputs=plan.outputs,
    )
    assert shuffled.text() == plan.text()
