"""The GPU operator's MIG manager as the platform configures it, against the pinned chart.

Test data (tests/components/data/, compact JSON with sorted keys, gzipped), read at
NVIDIA/gpu-operator tag v26.7.0, the catalog's `addon_charts.gpu-operator` pin:

- deployments/gpu-operator/values.yaml (sha256
  21ebfaa82dbfb6ad92b3c0ff33d7c891c7e66c9a0b008ce1c60a1897bae34418): the chart's values, whose
  keys the platform's values must use;
- the `config.yaml` of assets/state-mig-manager/0400_configmap.yaml (sha256
  e0d1f060dbdd4237ad5cc519536f0e32148b9f7adb3f3d37b0f1dc8ff9d37a2f): the MIG manager's default
  mig-parted configs, the source of the catalog's MIG profiles.
"""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

import yaml

from components.addons import (
    MIG_CONFIG,
    MigLayout,
    gpu_operator_values,
    mig_config_name,
    mig_parted_config,
)
from components.gpu_node_pool import GpuNodePoolArgs, node_template
from spec.catalog import catalog

DATA = Path(__file__).with_name("data")
LAYOUT = MigLayout(
    config=mig_config_name("eval"), device_filter="0x233010DE", per_gpu={"3g.40gb": 2}
)
FREE_FORM = {("migManager", "config", "data"), ("dcgmExporter", "config", "data")}
"""Maps whose content is ours (a ConfigMap's data), not the chart's."""


@functools.cache
def _data(name: str) -> Any:
    return json.loads(gzip.decompress((DATA / name).read_bytes()))


def chart_values() -> dict[str, Any]:
    values: dict[str, Any] = _data("gpu-operator-v26.7.0.values.json.gz")
    return values


def operator_mig_configs() -> dict[str, list[dict[str, Any]]]:
    configs: dict[str, list[dict[str, Any]]] = _data(
        "gpu-operator-v26.7.0.mig-parted-config.json.gz"
    )["mig-configs"]
    return configs


def _keys_missing(ours: Any, theirs: Any, path: tuple[str, ...] = ()) -> list[str]:
    """Key paths of `ours` the chart's values do not have (a typo the chart would ignore)."""
    if path in FREE_FORM or not isinstance(ours, dict):
        return []
    if not isinstance(theirs, dict):
        return [".".join(path)]
    out = []
    for key, value in ours.items():
        if key not in theirs:
            out.append(".".join((*path, key)))
        else:
            out += _keys_missing(value, theirs[key], (*path, key))
    return out


def test_the_mig_values_are_keys_of_the_pinned_chart() -> None:
    assert catalog().addon_charts["gpu-operator"].version == "v26.7.0"
    values = gpu_operator_values("mixed", [LAYOUT])
    assert _keys_missing(values["mig"], chart_values()["mig"], ("mig",)) == []
    assert _keys_missing(values["migManager"], chart_values()["migManager"], ("migManager",)) == []
    assert values["mig"] == {"strategy": "mixed"}
    config = values["migManager"]["config"]
    # The chart's own default for a node that names no config (ClusterPolicy's enum:
    # all-disabled or ""); the ConfigMap the chart creates from `data` (create: true).
    assert config["default"] == chart_values()["migManager"]["config"]["default"] == "all-disabled"
    assert config["create"] is True and config["name"] == MIG_CONFIG
    assert set(config["data"]) == {"config.yaml"}  # the key the MIG manager reads


def test_without_a_mig_pool_the_chart_keeps_its_own_mig_settings() -> None:
    values = gpu_operator_values()
    assert "mig" not in values and "migManager" not in values
    assert gpu_operator_values("mixed", []) == values


def test_the_mig_parted_config_has_the_operators_shape_and_each_pools_layout() -> None:
    text = gpu_operator_values("mixed", [LAYOUT])["migManager"]["config"]["data"]["config.yaml"]
    assert text == mig_parted_config([LAYOUT])
    parsed = yaml.safe_load(text)
    assert parsed["version"] == "v1"
    configs = parsed["mig-configs"]
    assert configs["all-disabled"] == operator_mig_configs()["all-disabled"]
    (entry,) = configs["llmp-eval"]
    assert entry == {
        "device-filter": ["0x233010DE"],
        "devices": "all",
        "mig-enabled": True,
        "mig-devices": {"3g.40gb": 2},
    }
    known = {k for entries in operator_mig_configs().values() for e in entries for k in e}
    assert set(entry) <= known


def _filters(entry: dict[str, Any]) -> list[str]:
    """An entry's `device-filter` (a PCI id or a list of them); empty: every GPU."""
    found = entry.get("device-filter", [])
    return found if isinstance(found, list) else [found]


def test_the_catalogs_profiles_are_the_mig_managers_at_the_pinned_operator() -> None:
    """Each profile and its most instances per GPU, for the model's PCI id, as the operator's
    `all-<profile>` config has them."""
    configs = operator_mig_configs()
    checked = 0
    for model_name, model in catalog().mig.models.items():
        for profile, most in model.profiles.items():
            entries = configs[f"all-{profile}"]
            matching = [e for e in entries if not _filters(e) or model.pci_device_id in _filters(e)]
            assert matching, (model_name, profile)
            assert matching[0]["mig-devices"] == {profile: most}, (model_name, profile)
            checked += 1
    # The PCI ids are in the operator's device filters (its all-balanced config lists them).
    filters = {f for e in configs["all-balanced"] for f in _filters(e)}
    assert {m.pci_device_id for m in catalog().mig.models.values()} <= filters
    assert checked == 30


def _pool_args(**kw: Any) -> GpuNodePoolArgs:
    return GpuNodePoolArgs(
        pool_name="eval",
        instance_type="p5.48xlarge",
        cluster_name="c",
        cluster_version="1.35",
        cluster_security_group_id="sg-1",
        node_role_arn="arn:aws:iam::123456789012:role/n",
        subnet_ids=["subnet-1"],
        efa_security_group_id="sg-2",
        wait_for=[],
        tags={},
        **kw,
    )


def test_an_elastic_mig_pool_tells_the_autoscaler_its_partitions_not_gpus() -> None:
    args = _pool_args(
        elastic=True, mig_config="llmp-eval", mig_partitions={"nvidia.com/mig-3g.40gb": 16}
    )
    tags = node_template(args, {"llm-platform/pool": "eval"}, "nvidia.com/gpu", "nvidia.com/gpu")
    resources = tags.resources
    assert resources["nvidia.com/mig-3g.40gb"] == "16" and "nvidia.com/gpu" not in resources
