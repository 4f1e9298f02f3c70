"""`llmp pins`: every pin of the catalog and the requirements files, its verified day and
age, and exit 1 once one is older than the threshold."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from llmp.cli import app
from llmp.commands import pins as command
from llmp.pins import catalog_pins, requirement_pins
from llmp.stacks import REPO_ROOT
from spec.catalog import CATALOG_PATH, catalog

runner = CliRunner()


def test_every_verified_record_of_the_catalog_is_a_pin_with_its_value() -> None:
    """Counted on the YAML text, not through the walker: a record the walker missed (or a
    `verified` with no value beside it, which raises) shows here."""
    text = CATALOG_PATH.read_text()
    records = len(re.findall(r"^\s*(?:[a-z_]+_)?verified:", text, re.M))
    pins = catalog_pins(catalog())
    assert len(pins) == records
    assert len({p.key for p in pins}) == len(pins)
    by_key = {p.key: p for p in pins}
    assert by_key["addon_charts.kueue"].version == catalog().addon_charts["kueue"].version
    assert by_key["serving.vllm"].version == catalog().serving.vllm_image  # type: ignore[union-attr]
    assert by_key["trainer_image.base"].version.startswith("nvcr.io/nvidia/cuda:")
    assert by_key["addon_charts.kubeflow-trainer"].version.startswith("2.2.")
    assert by_key["addon_charts.jobset"].version == catalog().addon_charts["jobset"].version


def test_every_requirements_file_names_the_day_its_pins_were_checked() -> None:
    pins = requirement_pins(REPO_ROOT)
    files = {p.where for p in pins}
    assert {"requirements.txt", "requirements-dev.txt", "images/trainer/requirements.txt"} <= files
    assert all(p.checked is not None for p in pins), sorted(
        {p.where for p in pins if p.checked is None}
    )
    torch = [p for p in pins if p.key == "requirements-dev.txt:torch"]
    assert [p.version for p in torch] == ["2.13.0"]


def test_a_requirements_file_without_a_day_is_never_checked_and_two_days_are_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "requirements.txt").write_text(
        "# no day here\nPyYAML==6.0.4\nmoto[server]==5.2.5\n"
    )
    pins = requirement_pins(tmp_path)
    assert [(p.key, p.version, p.checked) for p in pins] == [
        ("requirements.txt:PyYAML", "6.0.4", None),
        ("requirements.txt:moto", "5.2.5", None),
    ]
    assert pins[0].stale(datetime.date(2026, 12, 3), 180)
    (tmp_path / "requirements-x.txt").write_text(
        "# pins checked against PyPI: 2026-01-01\n# pins checked against PyPI: 2026-02-01\n"
    )
    with pytest.raises(ValueError, match=r"requirements-x\.txt: 2 'pins checked' lines"):
        requirement_pins(tmp_path)


@pytest.mark.parametrize(
    ("pinned", "shown"),
    [
        ("0.19.2", "0.19.2"),
        (
            "https://github.com/prometheus-operator/prometheus-operator/releases/download/"
            "v0.79.2/stripped-down-crds.yaml",
            "v0.79.2",
        ),
        (
            "docker.io/envoyproxy/envoy:v1.35.3@sha256:" + "4d49" * 16,
            "envoy:v1.35.3@sha256:4d494d494d49…",
        ),
        ("nvcr.io/nvidia/cuda:12.8.1-devel-ubuntu24.04", "cuda:12.8.1-devel-ubuntu24.04"),
    ],
)
def test_a_pin_is_shown_by_its_version(pinned: str, shown: str) -> None:
    assert command.shown(pinned) == shown


def test_pins_exit_0_while_every_pin_is_young_and_list_each(monkeypatch) -> None:
    monkeypatch.setattr(command, "today", lambda: datetime.date(2026, 12, 3))
    result = runner.invoke(app, ["pins"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert any(line.startswith("addon_charts.kueue ") for line in lines)
    assert lines[-1].startswith(
        f"{len(catalog_pins(catalog())) + len(requirement_pins(REPO_ROOT))} pins; 0 "
    )


def test_a_pin_older_than_the_threshold_fails_and_is_marked(monkeypatch) -> None:
    oldest = min(p.checked for p in catalog_pins(catalog()) if p.checked)
    monkeypatch.setattr(command, "today", lambda: oldest + datetime.timedelta(days=181))
    result = runner.invoke(app, ["pins", "--stale"], env={"COLUMNS": "80"})
    assert result.exit_code == 1
    stale = [line for line in result.stdout.splitlines() if line.endswith(" !")]
    assert stale and all(" 181 !" in line for line in stale)
    assert "verified more than 180 days ago (marked !)" in result.stdout
    # A wider threshold lets the same pins pass.
    assert runner.invoke(app, ["pins", "--max-age", "400"]).exit_code == 0


def test_pins_json_carries_where_each_was_verified(monkeypatch) -> None:
    monkeypatch.setattr(command, "today", lambda: datetime.date(2026, 12, 3))
    result = runner.invoke(app, ["pins", "--json"])
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    kueue = next(p for p in out["pins"] if p["key"] == "addon_charts.kueue")
    assert kueue["against"] in ("release tag", "chart index") and kueue["where"]
    assert (
        kueue["age_days"]
        == (datetime.date(2026, 12, 3) - datetime.date.fromisoformat(kueue["checked"])).days
    )
    assert out["stale"] == []


def test_a_negative_threshold_is_one_line_and_exit_2() -> None:
    result = runner.invoke(app, ["pins", "--max-age", "-1"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "--max-age -1: a number of days, 0 or more (default 180)"
