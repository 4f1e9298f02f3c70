"""The README stays true: its config reference is the schema's, and its two commands exist."""

from __future__ import annotations

import re

from llmp.stacks import REPO_ROOT
from spec.reference import config_reference

README = (REPO_ROOT / "README.md").read_text()


def test_config_reference_matches_the_schema() -> None:
    match = re.search(
        r"<!-- config-reference:start -->\n(.*?)<!-- config-reference:end -->", README, re.S
    )
    assert match, "README lacks the config-reference markers"
    assert match.group(1) == config_reference(), "run `llmp config-reference` and paste it"


def test_readme_leads_with_the_two_commands() -> None:
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "make preview STACK=pretrain" in quick_start
    assert "make test" in quick_start
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert re.search(r"^preview:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO_ROOT / ".ci/run").read_text()
    assert "make test" in ci


def test_policy_rule_table_matches_the_registry() -> None:
    from policies.registry import rules_reference

    match = re.search(r"<!-- policy-rules:start -->\n(.*?)<!-- policy-rules:end -->", README, re.S)
    assert match, "README lacks the policy-rules markers"
    assert match.group(1) == rules_reference()
