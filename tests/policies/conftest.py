"""Policy tests start from a real stack's plan, deep-copied, with one thing changed."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from llmp.plan import Plan, Resource
from llmp.plan.policy import Violation, evaluate


@pytest.fixture
def plan(plans) -> Callable[..., Plan]:
    """plan("pretrain") -> a private deep copy of that stack's plan."""
    return lambda stack="pretrain": plans(stack).model_copy(deep=True)


def res(plan: Plan, name: str, type_: str | None = None) -> Resource:
    found = [r for r in plan.resources if r.name == name and (type_ is None or r.type == type_)]
    assert len(found) == 1, f"{len(found)} resources named {name}"
    return found[0]


def inputs(plan: Plan, name: str, type_: str | None = None) -> dict[str, Any]:
    return res(plan, name, type_).inputs


def hits(plan: Plan, rule: str, config: dict[str, Any] | None = None) -> list[Violation]:
    """The violations of one rule (no stack-file config: tests say what they configure)."""
    return evaluate(plan, config, stack_config=False, only=[rule])


def names(violations: list[Violation]) -> set[str]:
    return {v.resource for v in violations}


def add(plan: Plan, type_: str, name: str, inputs_: dict[str, Any], **extra: Any) -> Resource:
    """Append a resource as `llmp synth` would record it (on the stack's default provider)."""
    stack = plan.stack
    provider = None
    if type_.startswith("aws:"):
        provider = f"urn:pulumi:{stack}::llm-platform::pulumi:providers:aws::aws"
    elif type_.startswith("kubernetes:"):
        provider = next(r.urn for r in plan.resources if r.type.endswith(":kubernetes"))
    r = Resource.model_validate(
        {
            "urn": f"urn:pulumi:{stack}::llm-platform::{type_}::{name}",
            "type": type_,
            "name": name,
            "provider": provider,
            "inputs": inputs_,
            **extra,
        }
    )
    plan.resources.append(r)
    plan.__dict__.pop("by_urn", None)  # a cached index of the resources before this one
    return r


def set_policy(r: Resource, key: str, document: dict[str, Any]) -> None:
    r.inputs[key] = json.dumps(document)
