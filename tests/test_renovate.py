"""The dependency bot's configuration (renovate.json) finds every pin.

Two checks: the custom managers' patterns, applied here to the files they name, match
every pin of the catalog but the ones documented as manual; and Renovate itself (when
installed: .ci/run installs it from npm) extracts them, run offline against this
checkout with `--platform=local --dry-run=extract`."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from llmp.pins import catalog_pins
from spec.catalog import catalog

REPO = Path(__file__).resolve().parents[1]
CONFIG = json.loads((REPO / "renovate.json").read_text())
MANUAL = {"trainer_image.efa_installer": "published only as a tarball, no release feed"}
"""Catalog pins no datasource can follow: `llmp pins` still counts their age."""


def _python_pattern(js: str) -> re.Pattern[str]:
    return re.compile(js.replace("(?<", "(?P<").replace("(?P<=", "(?<=").replace("(?P<!", "(?<!"))


def _files(manager: dict) -> list[Path]:
    out = []
    for pattern in manager["managerFilePatterns"]:
        rx = re.compile(pattern.strip("/"))
        out += [
            p for p in REPO.rglob("*") if p.is_file() and rx.search(p.relative_to(REPO).as_posix())
        ]
    return out


def _extracted() -> list[tuple[str, str]]:
    """(file, currentValue) of every match of every custom manager."""
    found = []
    for manager in CONFIG["customManagers"]:
        for path in _files(manager):
            text = path.read_text()
            for js in manager["matchStrings"]:
                for m in _python_pattern(js).finditer(text):
                    found.append((path.relative_to(REPO).as_posix(), m.group("currentValue")))
    return found


def _catalog_value(version: str) -> str:
    """What a manager captures of a catalog pin: an image's tag, a URL's version."""
    if version.startswith("https://"):
        return re.search(r"[/-](v?\d+\.\d+\.\d+)/", version).group(1)  # type: ignore[union-attr]
    if "/" in version:  # an image: its tag, without the digest
        return version.split("@")[0].rsplit(":", 1)[1]
    return version


def test_the_config_is_json_with_the_schema_renovate_reads() -> None:
    assert CONFIG["$schema"] == "https://docs.renovatebot.com/renovate-schema.json"
    assert all(m["customType"] == "regex" for m in CONFIG["customManagers"])


def test_every_catalog_pin_is_found_by_a_manager_but_the_manual_ones() -> None:
    values = {v for f, v in _extracted() if f == "spec/catalog.yaml"}
    missed = {
        p.key: p.version
        for p in catalog_pins(catalog())
        if _catalog_value(p.version) not in values and p.key not in MANUAL
    }
    assert not missed, f"no Renovate manager finds these pins: {missed}"
    manual = [p for p in catalog_pins(catalog()) if p.key in MANUAL]
    assert len(manual) == len(MANUAL)


def test_the_dockerfile_and_the_catalog_bump_together() -> None:
    """The OFI plugin's ARG carries the catalog's datasource, in the same group."""
    dockerfile = {v for f, v in _extracted() if f == "images/trainer/Dockerfile"}
    assert catalog().trainer_image.aws_ofi_nccl.version in dockerfile
    (group,) = [r for r in CONFIG["packageRules"] if r.get("groupName") == "trainer image stack"]
    assert {"aws/aws-ofi-nccl", "torch", "nvidia-nccl-cu12", "nvcr.io/nvidia/cuda"} <= set(
        group["matchDepNames"]
    )


def _renovate() -> list[str] | None:
    command = os.environ.get("LLMP_RENOVATE") or shutil.which("renovate")
    return shlex.split(command) if command else None


@pytest.mark.skipif(
    _renovate() is None and not os.environ.get("LLMP_REQUIRE_RENOVATE"),
    reason="Renovate is not installed (set LLMP_RENOVATE, or LLMP_REQUIRE_RENOVATE=1 to fail)",
)
def test_renovate_itself_extracts_every_pin(tmp_path: Path) -> None:
    command = _renovate()
    assert command is not None, "LLMP_REQUIRE_RENOVATE is set but no renovate was found"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "LOG_LEVEL": "debug",
        "LOG_FORMAT": "json",
        "RENOVATE_BASE_DIR": str(tmp_path / "base"),
    }
    args = ["--platform=local", "--dry-run=extract", "--onboarding=false"]
    done = subprocess.run(
        [*command, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    files = None
    for line in done.stdout.splitlines():
        record = json.loads(line) if line.startswith("{") else {}
        if "packageFiles" in record:
            files = record["packageFiles"]
    assert files is not None, "Renovate logged no extracted package files"
    deps = {
        (f["packageFile"], d.get("depName"), d.get("currentValue"))
        for manager in files.values()
        for f in manager
        for d in f["deps"]
    }
    in_catalog = {(name, value) for file, name, value in deps if file == "spec/catalog.yaml"}
    values = {value for _, value in in_catalog}
    for pin in catalog_pins(catalog()):
        if pin.key not in MANUAL:
            assert _catalog_value(pin.version) in values, pin.key
    trainer = catalog().addon_charts["kubeflow-trainer"].version
    assert ("ghcr.io/kubeflow/charts/kubeflow-trainer", trainer) in in_catalog
    requirement_files = {file for file, _, _ in deps if file.startswith("requirements")}
    assert {
        "requirements.txt",
        "requirements-dev.txt",
        "requirements-check.txt",
    } <= requirement_files
