"""Stack-config validation: the stack files load, and bad config gets one precise line."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from infra.config import PlatformConfig, load_config
from tests.conftest import STACKS, config_error, merge, raw_stack, with_section


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_file_validates(stack: str) -> None:
    cfg = load_config(raw_stack(stack))
    assert isinstance(cfg, PlatformConfig)
    assert cfg.node_pools


def test_engine_json_strings_validate_like_yaml_objects() -> None:
    import json

    raw = raw_stack("pretrain")
    as_engine = {k: v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
    assert load_config(as_engine) == load_config(raw)


def test_defaults_are_safe_and_cheap() -> None:
    cfg = load_config(
        {
            "aws:region": "us-east-1",
            "llm-platform:tags": {"team": "t", "cost_center": "c"},
            "llm-platform:network": {"availability_zones": ["us-east-1a", "us-east-1b"]},
        }
    )
    assert cfg.cluster.endpoint_public_access is False
    assert "audit" in cfg.cluster.log_types
    assert cfg.network.nat_gateways == "single"
    assert cfg.network.s3_gateway_endpoint is True
    assert cfg.node_pools == {}
    assert cfg.cluster.support_type == "STANDARD"


def test_unknown_instance_type_names_the_key_and_the_choices() -> None:
    raw = with_section("pretrain", "node_pools", {"h100": {"instance_type": "p5.49xlarge"}})
    message = config_error(raw)
    assert message.startswith(
        "config error: llm-platform:node_pools.h100.instance_type = 'p5.49xlarge': "
        "not an instance type in the catalog; use one of "
    )
    assert "p5.48xlarge" in message


def test_efa_on_a_type_without_efa() -> None:
    raw = with_section(
        "inference", "node_pools", {"l40s": {"efa": True, "availability_zones": ["us-east-1a"]}}
    )
    assert config_error(raw).startswith(
        "config error: llm-platform:node_pools.l40s.efa = True: g6e.12xlarge has no EFA "
        "interfaces; set efa: false or use one of "
    )


def test_efa_pool_spread_over_two_subnets() -> None:
    raw = with_section(
        "pretrain", "node_pools", {"h100": {"availability_zones": ["us-east-1a", "us-east-1b"]}}
    )
    assert config_error(raw) == (
        "config error: llm-platform:node_pools.h100.availability_zones = "
        "['us-east-1a', 'us-east-1b']: an EFA pool must sit in one subnet (one AZ); "
        "list exactly one"
    )


def test_efa_pool_without_an_az() -> None:
    raw = with_section("pretrain", "node_pools", {"h100": {"availability_zones": None}})
    assert config_error(raw) == (
        "config error: llm-platform:node_pools.h100.availability_zones = <missing>: "
        "an EFA pool sits in one subnet: name exactly one AZ"
    )


def test_desired_size_outside_min_max() -> None:
    raw = with_section("pretrain", "node_pools", {"h100": {"desired_size": 20}})
    assert config_error(raw) == (
        "config error: llm-platform:node_pools.h100.desired_size = 20: "
        "must lie in min_size..max_size (16..16)"
    )


def test_min_above_max() -> None:
    raw = with_section("finetune", "node_pools", {"h100": {"min_size": 3}})
    assert config_error(raw) == (
        "config error: llm-platform:node_pools.h100.min_size = 3: must not exceed max_size (2)"
    )


def test_capacity_block_without_reservation_id() -> None:
    raw = with_section("pretrain", "node_pools", {"h100-block": {"capacity_reservation_id": None}})
    assert config_error(raw) == (
        "config error: llm-platform:node_pools.h100-block.capacity_reservation_id = <missing>: "
        "required with capacity_type CAPACITY_BLOCK: the block's id, cr-..."
    )


def test_capacity_block_on_a_type_not_sold_as_blocks() -> None:
    raw = with_section(
        "inference",
        "node_pools",
        {
            "l40s": {
                "capacity_type": "CAPACITY_BLOCK",
                "capacity_reservation_id": "cr-0123456789abcdef0",
                "availability_zones": ["us-east-1a"],
            }
        },
    )
    assert config_error(raw) == (
        "config error: llm-platform:node_pools.l40s.capacity_type = 'CAPACITY_BLOCK': "
        "g6e.12xlarge is not sold as a capacity block; use ON_DEMAND or SPOT"
    )


def test_malformed_reservation_id() -> None:
    raw = with_section(
        "pretrain", "node_pools", {"h100-block": {"capacity_reservation_id": "block-1"}}
    )
    assert config_error(raw) == (
        "config error: llm-platform:node_pools.h100-block.capacity_reservation_id = 'block-1': "
        "not a capacity reservation id; e.g. cr-0123456789abcdef0"
    )


def test_spot_with_a_reservation() -> None:
    raw = with_section(
        "finetune", "node_pools", {"a100-spot": {"capacity_reservation_id": "cr-0123456789abcdef0"}}
    )
    assert "spot capacity cannot use a reservation" in config_error(raw)


def test_cidr_that_does_not_fit() -> None:
    raw = with_section("pretrain", "network", {"vpc_cidr": "10.10.0.0/20"})
    assert config_error(raw) == (
        "config error: llm-platform:network.vpc_cidr = '10.10.0.0/20': "
        "a /18 private subnet is larger than the /20 VPC"
    )
    raw = with_section("pretrain", "network", {"vpc_cidr": "10.10.0.0/17"})
    assert config_error(raw) == (
        "config error: llm-platform:network.vpc_cidr = '10.10.0.0/17': "
        "3 AZs x (/18 private + /24 public) need 49920 addresses but the /17 VPC has 32768; "
        "use a larger VPC or longer subnet prefixes"
    )


def test_cidr_that_is_not_a_cidr() -> None:
    raw = with_section("pretrain", "network", {"vpc_cidr": "10.10.0.0/33"})
    assert config_error(raw).startswith(
        "config error: llm-platform:network.vpc_cidr = '10.10.0.0/33': not an IPv4 CIDR"
    )


def test_public_vpc_cidr_is_refused() -> None:
    raw = with_section("pretrain", "network", {"vpc_cidr": "8.8.0.0/16"})
    assert "must be a private (RFC 1918) range" in config_error(raw)


def test_az_outside_the_region() -> None:
    raw = with_section(
        "pretrain", "network", {"availability_zones": ["us-east-1a", "us-west-2b", "us-east-1c"]}
    )
    assert config_error(raw) == (
        "config error: llm-platform:network.availability_zones.1 = 'us-west-2b': "
        "is not in aws:region us-east-1"
    )


def test_pool_az_outside_the_network() -> None:
    raw = with_section("finetune", "node_pools", {"h100": {"availability_zones": ["us-west-2c"]}})
    assert config_error(raw) == (
        "config error: llm-platform:node_pools.h100.availability_zones.0 = 'us-west-2c': "
        "not one of network.availability_zones (us-west-2a, us-west-2b)"
    )


def test_typo_in_a_key_lists_the_known_keys() -> None:
    raw = with_section("pretrain", "network", {"nat_gateway": "single"})
    message = config_error(raw)
    assert message.startswith(
        "config error: llm-platform:network.nat_gateway = 'single': unknown key; known keys here: "
    )
    assert "nat_gateways" in message


def test_typo_in_a_section_name() -> None:
    raw = merge(raw_stack("pretrain"), {"llm-platform:node_pool": {}})
    message = config_error(raw)
    assert message.startswith("config error: llm-platform:node_pool = {}: unknown key")
    assert "node_pools" in message


def test_bad_literal_says_what_is_allowed() -> None:
    raw = with_section("finetune", "node_pools", {"a100-spot": {"capacity_type": "spot"}})
    assert config_error(raw) == (
        "config error: llm-platform:node_pools.a100-spot.capacity_type = 'spot': "
        "Input should be 'ON_DEMAND', 'SPOT' or 'CAPACITY_BLOCK'"
    )


def test_missing_required_section() -> None:
    raw = raw_stack("pretrain")
    del raw["llm-platform:tags"]
    assert config_error(raw) == "config error: llm-platform:tags = <missing>: required"


def test_missing_region() -> None:
    raw = raw_stack("pretrain")
    del raw["aws:region"]
    assert config_error(raw) == "config error: aws:region = <missing>: required"


def test_public_endpoint_needs_cidrs_and_refuses_the_internet() -> None:
    raw = with_section("pretrain", "cluster", {"endpoint_public_access": True})
    assert config_error(raw) == (
        "config error: llm-platform:cluster.public_access_cidrs = []: "
        "a public endpoint needs the CIDRs allowed to reach it"
    )
    raw = with_section(
        "pretrain",
        "cluster",
        {"endpoint_public_access": True, "public_access_cidrs": ["0.0.0.0/0"]},
    )
    assert config_error(raw) == (
        "config error: llm-platform:cluster.public_access_cidrs.0 = '0.0.0.0/0': "
        "opens the API to the internet; list your CIDRs"
    )


def test_audit_logs_cannot_be_turned_off() -> None:
    raw = with_section("pretrain", "cluster", {"log_types": ["api"]})
    assert config_error(raw) == (
        "config error: llm-platform:cluster.log_types = ['api']: "
        "must include audit: who changed what is not optional"
    )


def test_unsupported_kubernetes_version() -> None:
    raw = with_section("pretrain", "cluster", {"version": "1.27"})
    assert config_error(raw).startswith(
        "config error: llm-platform:cluster.version = '1.27': not a supported EKS version"
    )


def test_cpu_type_in_a_gpu_pool_and_gpu_type_in_the_system_pool() -> None:
    raw = with_section("finetune", "node_pools", {"h100": {"instance_type": "m7i.4xlarge"}})
    assert config_error(raw).endswith("has no accelerator; CPU nodes belong in system_pool")
    raw = with_section("finetune", "system_pool", {"instance_type": "p4d.24xlarge"})
    assert config_error(raw).endswith(
        "is an accelerated type; the system pool runs CPU add-ons only"
    )


def test_bad_pool_name() -> None:
    raw = with_section("finetune", "node_pools", {"H100_big": {"instance_type": "p5.48xlarge"}})
    assert config_error(raw).startswith(
        "config error: llm-platform:node_pools.H100_big = 'H100_big'"
    )


def test_placement_group_defaults_follow_capacity() -> None:
    cfg = load_config(raw_stack("pretrain"))
    assert cfg.node_pools["h100"].uses_placement_group
    assert not cfg.node_pools["h100-block"].uses_placement_group
    cfg = load_config(with_section("pretrain", "node_pools", {"h100": {"placement_group": None}}))
    assert cfg.node_pools["h100"].uses_placement_group  # EFA, no reservation: on by default
    inference = load_config(raw_stack("inference"))
    assert not inference.node_pools["l40s"].uses_placement_group


def test_cli_reports_a_config_error_in_one_line_and_exits_2(tmp_path) -> None:
    raw = with_section("pretrain", "node_pools", {"h100": {"desired_size": 20}})
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(yaml.safe_dump({"config": raw}))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmp.cli",
            "synth",
            "bad",
            "--config",
            str(bad),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "config error: llm-platform:node_pools.h100.desired_size = 20: "
        "must lie in min_size..max_size (16..16)"
    ]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()
