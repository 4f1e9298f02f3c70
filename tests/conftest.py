"""Shared harness: synthesize stacks once per session, and variants of them on demand.

Every test sees the platform the way `llmp synth` and `pulumi up` do: the
real program in infra/, run under Pulumi's mock runtime.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from infra.config import load_stack_file
from llmp.synth import Plan, stack_file, synthesize

STACKS = ("pretrain", "finetune", "inference")


def raw_stack(stack: str) -> dict[str, Any]:
    return load_stack_file(str(stack_file(stack)))


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge `overrides` into a copy of `base`; a None value deletes the key."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def with_section(stack: str, section: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """A stack's raw config with `llm-platform:<section>` deep-merged with `overrides`."""
    raw = raw_stack(stack)
    key = f"llm-platform:{section}"
    raw[key] = merge(raw.get(key, {}), overrides)
    return raw


_plans: dict[str, Plan] = {}


@pytest.fixture(scope="session")
def plans() -> Callable[[str], Plan]:
    """plans("pretrain") -> the synthesized Plan of that stack file (cached)."""

    def get(stack: str) -> Plan:
        if stack not in _plans:
            _plans[stack] = synthesize(stack, raw_stack(stack))
        return _plans[stack]

    return get


@pytest.fixture
def synth() -> Callable[..., Plan]:
    """synth(raw_config, stack="test") -> a fresh Plan of any config."""

    def run(raw: dict[str, Any], stack: str = "test") -> Plan:
        return synthesize(stack, raw)

    return run


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    """A moto server on 127.0.0.1 (an ephemeral port), stopped when the module ends."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        assert host == "127.0.0.1"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def inputs_of(plan: Plan, type_: str, name: str) -> dict[str, Any]:
    return plan.one(type_, name)["inputs"]
