"""The docs stay true: the generated references match their sources, the README leads with
the commands that exist, every page is in the site's nav, and the site builds strictly."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spec.reference import config_reference

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs"
README = (REPO_ROOT / "README.md").read_text()
README_MAX_LINES = 250


def _between_markers(text: str, name: str, where: str) -> str:
    match = re.search(rf"<!-- {name}:start -->\n(.*?)<!-- {name}:end -->", text, re.S)
    assert match, f"{where} lacks the {name} markers"
    return match.group(1)


def test_config_reference_matches_the_schema() -> None:
    page = (DOCS / "reference/config.md").read_text()
    table = _between_markers(page, "config-reference", "docs/reference/config.md")
    assert table == config_reference(), "run `llmp config-reference` and paste it"


def test_policy_rule_table_matches_the_registry() -> None:
    from policies.registry import rules_reference

    page = (DOCS / "reference/policies.md").read_text()
    assert _between_markers(page, "policy-rules", "docs/reference/policies.md") == rules_reference()


def test_readme_quick_start_leads_with_the_commands() -> None:
    assert "\n## Quick start\n" in README
    quick_start = README.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    for command in ("make preview STACK=pretrain", "make check", "make test"):
        assert command in quick_start, command
    makefile = (REPO_ROOT / "Makefile").read_text()
    for target in ("preview", "check", "test"):
        assert re.search(rf"^{target}:", makefile, re.M), f"the Makefile has no `{target}:` target"


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO_ROOT / ".ci/run").read_text()
    assert "make test" in ci


def test_the_readme_is_a_front_door() -> None:
    lines = len(README.splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


def _nav_pages(entries: object) -> list[str]:
    pages: list[str] = []
    if isinstance(entries, str):
        pages.append(entries)
    elif isinstance(entries, list):
        for entry in entries:
            pages += _nav_pages(entry)
    elif isinstance(entries, dict):
        for value in entries.values():
            pages += _nav_pages(value)
    return pages


def test_every_docs_page_is_in_the_nav() -> None:
    config = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text())
    assert config["docs_dir"] == "docs"
    nav = [page for page in _nav_pages(config["nav"]) if not page.startswith(("http:", "https:"))]
    assert len(nav) == len(set(nav)), "a page is in the nav twice"
    on_disk = sorted(str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md"))
    assert sorted(nav) == on_disk


def test_every_docs_page_starts_with_one_title() -> None:
    for path in sorted(DOCS.rglob("*.md")):
        text = path.read_text()
        assert text.startswith("# "), f"{path.relative_to(REPO_ROOT)} does not start with `# `"
        outside_code = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
        titles = re.findall(r"^# ", outside_code, re.M)
        assert len(titles) == 1, f"{path.relative_to(REPO_ROOT)} has {len(titles)} `# ` titles"


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="mkdocs and mkdocs-material are not installed (pip install mkdocs mkdocs-material)",
)
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
