"""Adding an EKS version, step by step as CONTRIBUTING.md ("Adding an EKS version") says, on
a copy of the catalog: after each step the catalog names, one line each, exactly the entries
still missing (not a dump of the catalog, not a ValueError), and after the last a stack on the
new version synthesizes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import spec.catalog as catalog_module
from llmp.cli import app
from spec.catalog import CATALOG_PATH, CatalogError, load_catalog

NEW = "1.99"


def _write(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _problems(tmp_path: Path, raw: dict[str, Any]) -> list[str]:
    try:
        load_catalog(_write(tmp_path, raw))
    except CatalogError as exc:
        lines = str(exc).splitlines()
        assert all(line.startswith("catalog error: catalog.yaml: ") for line in lines), lines
        assert all(len(line) < 400 for line in lines), lines  # no dump of the catalog
        return [line.removeprefix("catalog error: catalog.yaml: ") for line in lines]
    return []


def _copy_of(raw: dict[str, Any], *path: str) -> Any:
    node = raw
    for key in path:
        node = node[key]
    return copy.deepcopy(node)


def test_adding_a_version_section_by_section_names_what_is_missing_at_each_step(
    tmp_path: Path,
) -> None:
    raw = yaml.safe_load(CATALOG_PATH.read_text())
    current = raw["eks"]["default_version"]

    # 1. eks.versions."X": the four core add-ons, then the standard-support end date.
    version = _copy_of(raw, "eks", "versions", current)
    del version["standard_support_ends"]
    version["addons"]["kube-proxy"]["version"] = "v1.99.0-eksbuild.1"
    raw["eks"]["versions"][NEW] = version
    assert _problems(tmp_path, raw) == [f"eks.versions.{NEW}.standard_support_ends: is missing"]
    version["standard_support_ends"] = "2099-01-01"
    missing = {
        "storage_addons": "aws-mountpoint-s3-csi-driver",
        "gpu_node_addons": "eks-node-monitoring-agent",
        "monitoring.ebs_csi_driver": "aws-ebs-csi-driver",
    }

    def expected() -> list[str]:
        return [
            f'{section}."{NEW}".{addon} is missing: every version of eks.versions needs one '
            f"(pinned for: {current})"
            for section, addon in missing.items()
        ]

    assert _problems(tmp_path, raw) == expected()

    # 2. storage_addons."X"
    raw["storage_addons"][NEW] = _copy_of(raw, "storage_addons", current)
    del missing["storage_addons"]
    assert _problems(tmp_path, raw) == expected()

    # 3. gpu_node_addons."X"
    raw["gpu_node_addons"][NEW] = _copy_of(raw, "gpu_node_addons", current)
    del missing["gpu_node_addons"]
    assert _problems(tmp_path, raw) == expected()

    # 4. monitoring.ebs_csi_driver."X": the catalog loads.
    ebs = _copy_of(raw, "monitoring", "ebs_csi_driver", current)
    raw["monitoring"]["ebs_csi_driver"][NEW] = ebs
    assert _problems(tmp_path, raw) == []

    # 5. Moving the default: the Cluster Autoscaler follows the cluster's minor.
    raw["eks"]["default_version"] = NEW
    old_tag = raw["node_autoscaler"]["image"].rsplit(":", 1)[1]
    assert _problems(tmp_path, raw) == [
        f'node_autoscaler.image {old_tag} is not on eks.default_version "{NEW}": the '
        f"Cluster Autoscaler runs on its cluster's minor; pin its {NEW} release (and "
        "addon_charts.cluster-autoscaler)"
    ]
    image = raw["node_autoscaler"]["image"].rsplit(":", 1)[0]
    raw["node_autoscaler"]["image"] = f"{image}:v{NEW}.0"
    assert _problems(tmp_path, raw) == []


def test_a_stack_on_a_version_missing_a_section_is_refused_in_lines_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI reads the catalog the program reads: each missing entry is a line on stderr,
    exit 2 (the old check raised a ValueError that every config error then quoted whole)."""
    raw = yaml.safe_load(CATALOG_PATH.read_text())
    current = raw["eks"]["default_version"]
    raw["eks"]["versions"][NEW] = _copy_of(raw, "eks", "versions", current)
    monkeypatch.setattr(catalog_module, "CATALOG_PATH", _write(tmp_path, raw))
    catalog_module.catalog.cache_clear()
    try:
        result = CliRunner().invoke(app, ["synth", "pretrain", "--out", str(tmp_path / "out")])
    finally:
        monkeypatch.undo()
        catalog_module.catalog.cache_clear()
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert [line.split(" is missing")[0] for line in lines] == [
        f'catalog error: catalog.yaml: storage_addons."{NEW}".aws-mountpoint-s3-csi-driver',
        f'catalog error: catalog.yaml: gpu_node_addons."{NEW}".eks-node-monitoring-agent',
        f'catalog error: catalog.yaml: monitoring.ebs_csi_driver."{NEW}".aws-ebs-csi-driver',
    ]
    assert "Traceback" not in result.output


def test_a_stack_on_the_new_version_synthesizes_once_every_section_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llmp.plan.synth import synthesize
    from spec.stackfile import load_stack_file

    raw = yaml.safe_load(CATALOG_PATH.read_text())
    current = raw["eks"]["default_version"]
    raw["eks"]["versions"][NEW] = _copy_of(raw, "eks", "versions", current)
    raw["eks"]["versions"][NEW]["addons"]["kube-proxy"]["version"] = "v1.99.0-eksbuild.1"
    for section in (("storage_addons",), ("gpu_node_addons",), ("monitoring", "ebs_csi_driver")):
        parent = raw
        for key in section:
            parent = parent[key]
        parent[NEW] = copy.deepcopy(parent[current])
    monkeypatch.setattr(catalog_module, "CATALOG_PATH", _write(tmp_path, raw))
    catalog_module.catalog.cache_clear()
    try:
        stack = load_stack_file("stacks/Pulumi.pretrain.yaml")
        stack["llm-platform:cluster"] = {**stack.get("llm-platform:cluster", {}), "version": NEW}
        plan = synthesize("pretrain", stack)
    finally:
        monkeypatch.undo()
        catalog_module.catalog.cache_clear()
    cluster = plan.by_type("aws:eks/cluster:Cluster")[0]
    assert cluster.inputs["version"] == NEW
