"""`cpu_pools`: CPU types only, names that are DNS labels and no other pool's, sizes an
autoscaler can move, SPOT only for work that resumes, zones of the network."""

from __future__ import annotations

from typing import Any

import pytest

from spec.stackfile import load_config
from tests.conftest import config_error, raw_stack

KEY = "llm-platform:cpu_pools"


def with_cpu_pool(name: str = "data", **fields: Any) -> dict[str, Any]:
    raw = raw_stack("pretrain")
    raw[KEY] = {name: {"instance_type": "c7i.4xlarge", "max_size": 8, **fields}}
    return raw


def test_the_pretrain_stack_s_data_pool_loads_with_safe_defaults() -> None:
    pool = load_config(raw_stack("pretrain")).cpu_pools["data"]
    assert (pool.min_size, pool.desired_size, pool.max_size) == (0, 0, 8)
    assert pool.capacity_type == "ON_DEMAND" and pool.availability_zones is None
    defaults = load_config(with_cpu_pool()).cpu_pools["data"]
    assert (defaults.min_size, defaults.desired_size, defaults.disk_size_gib) == (0, 0, 200)


def test_an_accelerated_type_is_refused_pointing_to_node_pools() -> None:
    message = config_error(with_cpu_pool(instance_type="p5.48xlarge"))
    assert message.startswith("config error: llm-platform:cpu_pools.data.instance_type = ")
    assert message.endswith("is an accelerated type; accelerated pools belong in node_pools")


def test_an_unknown_type_names_the_catalog() -> None:
    message = config_error(with_cpu_pool(instance_type="c7i.5xlarge"))
    assert "cpu_pools.data.instance_type" in message and "c7i.4xlarge" in message


def test_a_name_of_a_gpu_pool_is_refused() -> None:
    message = config_error(with_cpu_pool("h100"))
    assert message.startswith("config error: llm-platform:cpu_pools.h100 = ")
    assert "also a node_pools name" in message


@pytest.mark.parametrize("name", ["Data", "data-", "1data", "da_ta", "d" * 32])
def test_a_name_that_is_no_dns_label_is_refused(name: str) -> None:
    message = config_error(with_cpu_pool(name))
    assert f"cpu_pools.{name}" in message and "DNS labels" in message


def test_the_system_pool_s_label_is_refused() -> None:
    message = config_error(with_cpu_pool("system"))
    assert "cpu_pools.system" in message and "system pool's label" in message


def test_max_size_is_required() -> None:
    raw = raw_stack("pretrain")
    raw[KEY] = {"data": {"instance_type": "c7i.4xlarge"}}
    assert "cpu_pools.data.max_size" in config_error(raw)


def test_a_pool_the_autoscaler_cannot_move_is_refused() -> None:
    message = config_error(with_cpu_pool(min_size=8, desired_size=8))
    assert "cpu_pools.data.max_size = 8" in message and "nothing to scale" in message


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"min_size": 9}, "cpu_pools.data.min_size = 9"),
        ({"desired_size": 9}, "cpu_pools.data.desired_size = 9"),
        ({"max_size": 0}, "cpu_pools.data.max_size = 0"),
        ({"disk_size_gib": 10}, "cpu_pools.data.disk_size_gib = 10"),
    ],
)
def test_sizes_out_of_range_are_one_line(fields: dict[str, Any], key: str) -> None:
    assert key in config_error(with_cpu_pool(**fields))


def test_spot_needs_work_that_resumes() -> None:
    message = config_error(with_cpu_pool(capacity_type="SPOT"))
    assert "cpu_pools.data.checkpointing = False" in message and "SPOT" in message
    pool = load_config(with_cpu_pool(capacity_type="SPOT", checkpointing=True)).cpu_pools["data"]
    assert pool.capacity_type == "SPOT"
    assert "capacity_type" in config_error(with_cpu_pool(capacity_type="CAPACITY_BLOCK"))


def test_zones_are_a_subset_of_the_network_s() -> None:
    message = config_error(with_cpu_pool(availability_zones=["us-east-1a", "us-east-1f"]))
    assert "cpu_pools.data.availability_zones.1 = 'us-east-1f'" in message
    assert "cpu_pools.data.availability_zones = []" in config_error(
        with_cpu_pool(availability_zones=[])
    )
    cfg = load_config(with_cpu_pool(availability_zones=["us-east-1b"]))
    assert cfg.pool_zones(cfg.cpu_pools["data"]) == ["us-east-1b"]
    everywhere = load_config(with_cpu_pool())
    assert everywhere.pool_zones(everywhere.cpu_pools["data"]) == [
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
    ]
