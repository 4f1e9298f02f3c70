"""Tenants' key prefixes: no tenant's is, contains or lies under another tenant's (a grant
on `teams/` is a grant on `teams/chat/`), one line naming both tenants and both prefixes;
disjoint prefixes pass."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from spec.stackfile import load_config
from tests.conftest import config_error, raw_stack

# ---------------------------------------------------------------------------
# Tenants' key prefixes
# ---------------------------------------------------------------------------


def tenant(s3: list[str], models: list[str] | None = None) -> dict[str, Any]:
    return {"cpu": 8, "memory_gib": 32, "s3_prefixes": s3, "models_prefixes": models or []}


def with_tenants(tenants: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The pretrain stack (datasets, checkpoints and models buckets) with these tenants."""
    raw = raw_stack("pretrain")
    raw["llm-platform:tenants"] = copy.deepcopy(tenants)
    return raw


def test_a_tenant_whose_prefix_contains_another_s_names_both() -> None:
    raw = with_tenants({"chat": tenant(["teams/chat/"]), "research": tenant(["teams/"])})
    assert config_error(raw) == (
        "config error: llm-platform:tenants.research.s3_prefixes.0 = 'teams/': contains "
        "tenant chat's prefix teams/chat/ (tenants.chat.s3_prefixes): research would read "
        "and write chat's keys in the datasets and checkpoints buckets; narrow it to one of "
        "research's own, e.g. teams/research/ (no tenant's prefix may start with another "
        "tenant's)"
    )


def test_the_broader_prefix_is_the_one_refused_whichever_tenant_comes_first() -> None:
    raw = with_tenants({"research": tenant(["teams/"]), "chat": tenant(["teams/chat/"])})
    assert config_error(raw).startswith(
        "config error: llm-platform:tenants.research.s3_prefixes.0 = 'teams/': contains "
        "tenant chat's prefix teams/chat/"
    )


def test_two_tenants_with_one_prefix() -> None:
    raw = with_tenants(
        {"chat": tenant(["raw/", "teams/chat/"]), "code": tenant(["teams/code/", "teams/chat/"])}
    )
    assert config_error(raw) == (
        "config error: llm-platform:tenants.code.s3_prefixes.1 = 'teams/chat/': is tenant "
        "chat's prefix too (tenants.chat.s3_prefixes): code and chat would read and write "
        "each other's keys in the datasets and checkpoints buckets; give each its own, e.g. "
        "teams/code/ and teams/chat/ (no tenant's prefix may start with another tenant's)"
    )


def test_overlapping_models_prefixes_name_the_models_bucket() -> None:
    raw = with_tenants(
        {
            "chat": tenant(["teams/chat/"], ["revisions/chat/"]),
            "code": tenant(["teams/code/"], ["revisions/"]),
        }
    )
    assert config_error(raw) == (
        "config error: llm-platform:tenants.code.models_prefixes.0 = 'revisions/': contains "
        "tenant chat's prefix revisions/chat/ (tenants.chat.models_prefixes): code would "
        "read and write chat's keys in the models bucket; narrow it to one of code's own, "
        "e.g. revisions/code/ (no tenant's prefix may start with another tenant's)"
    )


@pytest.mark.parametrize(
    "tenants",
    [
        # Disjoint, and siblings whose names share a start: prefixes end in `/`.
        {"chat": tenant(["teams/chat/"]), "code": tenant(["teams/code/"])},
        {"chat": tenant(["teams/chat/"]), "chatbot": tenant(["teams/chatbot/"])},
        # One tenant's own prefixes may nest: it is granted both anyway.
        {"chat": tenant(["teams/chat/", "teams/chat/eval/"]), "code": tenant(["teams/code/"])},
        # s3_prefixes and models_prefixes are grants in different buckets.
        {"chat": tenant(["revisions/"]), "code": tenant(["teams/code/"], ["revisions/"])},
        # Keys are case-sensitive.
        {"chat": tenant(["Teams/"]), "code": tenant(["teams/code/"])},
    ],
)
def test_prefixes_of_their_own_pass(tenants: dict[str, dict[str, Any]]) -> None:
    cfg = load_config(with_tenants(tenants))
    assert set(cfg.tenants) == set(tenants)


def test_the_stack_files_and_examples_have_no_overlapping_prefixes() -> None:
    for stack in ("pretrain", "finetune", "inference"):
        load_config(raw_stack(stack))
