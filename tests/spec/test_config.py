"""Stack-config validation: the stack files load, and bad config gets one precise line."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from spec.errors import ConfigError
from spec.platform import PlatformConfig
from spec.stackfile import load_config
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


def test_a_fixed_pool_cannot_be_elastic() -> None:
    raw = with_section("pretrain", "node_pools", {"h100": {"elastic": True}})
    assert config_error(raw) == (
        "config error: llm-platform:node_pools.h100.elastic = True: min_size = max_size = 16 "
        "is a fixed pool, which no autoscaler may resize; set min_size below max_size, or "
        "elastic: false"
    )


def test_elastic_is_opt_in_and_needs_room_between_min_and_max() -> None:
    cfg = load_config(raw_stack("pretrain"))
    assert not any(pool.elastic for pool in cfg.node_pools.values())  # the default
    raw = with_section(
        "pretrain", "node_pools", {"h100": {"min_size": 8, "desired_size": 8, "elastic": True}}
    )
    pool = load_config(raw).node_pools["h100"]
    assert pool.elastic and pool.min_size < pool.max_size


def test_the_stacks_make_elastic_what_their_sizes_allow() -> None:
    elastic = {
        stack: {n for n, p in load_config(raw_stack(stack)).node_pools.items() if p.elastic}
        for stack in STACKS
    }
    assert elastic == {
        # The fabric is fixed; the Capacity Block is paid for and sized by the operator.
        "pretrain": set(),
        "finetune": {"a100-spot", "h100"},
        "inference": {"l40s", "h200"},
    }


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
    assert config_error(raw).endswith(
        "has no accelerator; CPU nodes belong in cpu_pools (system_pool: add-ons)"
    )
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


def synth_cli(tmp_path, raw: dict[str, object]) -> subprocess.CompletedProcess[str]:
    """`llmp synth` of `raw` written as a stack file, in a real process."""
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(yaml.safe_dump({"config": raw}))
    command = [sys.executable, "-m", "llmp.cli", "synth", "bad", "--config", str(bad)]
    command += ["--out", str(tmp_path / "out")]
    return subprocess.run(command, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    ("section", "key"),
    [("cluster", "log_retention_days"), ("monitoring", "log_retention_days")],
)
def test_log_retention_is_one_cloudwatch_accepts(section: str, key: str) -> None:
    message = config_error(with_section("pretrain", section, {key: 45}))
    assert message.startswith(f"config error: llm-platform:{section}.{key} = 45: ")
    assert "a CloudWatch retention: (1, 3, 5, 7, 14, 30, 60, 90" in message


def test_cli_reports_a_config_error_in_one_line_and_exits_2(tmp_path) -> None:
    raw = with_section("pretrain", "node_pools", {"h100": {"desired_size": 20}})
    result = synth_cli(tmp_path, raw)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "config error: llm-platform:node_pools.h100.desired_size = 20: "
        "must lie in min_size..max_size (16..16)"
    ]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------
# Regions: botocore's, in every partition
# ---------------------------------------------------------------------------


def test_an_unknown_region_is_refused_with_the_one_it_likely_means() -> None:
    raw = raw_stack("pretrain")
    raw["aws:region"] = "us-east-9"
    [line] = config_error_lines(raw)
    assert line.startswith(
        "config error: aws:region = 'us-east-9': not an AWS region; did you mean us-east-1? "
        "(known to botocore "
    ), line
    assert "us-west-2, " not in line and line.endswith("us-west-1, us-west-2)")


def test_an_unknown_region_is_blamed_before_its_zones() -> None:
    """Every zone of us-east-9 is wrong too: the region is what to fix."""
    raw = raw_stack("pretrain")
    raw["aws:region"] = "us-east-9"
    raw["llm-platform:network"]["availability_zones"] = ["us-east-9a", "us-east-9b"]
    lines = config_error_lines(raw)
    assert lines[0].startswith("config error: aws:region = 'us-east-9': not an AWS region")
    assert len(lines) == 1, lines


def test_a_zone_of_another_region_is_blamed_on_the_zone() -> None:
    raw = with_section("pretrain", "network", {"availability_zones": ["us-east-1a", "eu-west-1b"]})
    assert config_error_lines(raw) == [
        "config error: llm-platform:network.availability_zones.1 = 'eu-west-1b': "
        "is not in aws:region us-east-1"
    ]


@pytest.mark.parametrize(
    "region",
    ["af-south-1", "ap-southeast-5", "mx-central-1", "us-gov-west-1", "cn-northwest-1"],
    ids=["opt-in", "opt-in-new", "opt-in-mx", "aws-us-gov", "aws-cn"],
)
def test_every_region_botocore_knows_is_accepted(region: str) -> None:
    raw = with_section(
        "pretrain",
        "network",
        {"availability_zones": [f"{region}a", f"{region}b", f"{region}c"]},
    )
    raw["aws:region"] = region
    raw["llm-platform:node_pools"]["h100"]["availability_zones"] = [f"{region}a"]
    raw["llm-platform:node_pools"]["h100-block"]["availability_zones"] = [f"{region}a"]
    del raw["llm-platform:storage"]["replication"]
    for bucket in raw["llm-platform:storage"]["buckets"].values():
        bucket.pop("replicate", None)
    try:
        assert load_config(raw).region == region
    except ConfigError as exc:
        # The region is accepted; what the catalog's offerings say it lacks (p5 in most
        # opt-in regions) is refused per pool, naming the pool's type, not the region.
        for line in str(exc).splitlines():
            assert f": not offered in {region}; offered in " in line, line
            assert ".instance_type = " in line, line


def test_an_unknown_replication_region_is_refused() -> None:
    raw = with_section("pretrain", "storage", {"replication": {"region": "us-wset-2"}})
    [line] = config_error_lines(raw)
    assert line.startswith(
        "config error: llm-platform:storage.replication.region = 'us-wset-2': not an AWS "
        "region; did you mean us-west-2? "
    ), line


def test_the_region_check_reads_botocore_data_offline_without_boto3() -> None:
    """The spec layer: botocore's bundled endpoint data, no boto3, no socket opened."""
    code = (
        "import socket, sys\n"
        "def refuse(*a, **k): raise AssertionError('network')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "from spec.stackfile import load_config\n"
        "from tests.conftest import raw_stack\n"
        "load_config(raw_stack('inference'))\n"
        "assert 'boto3' not in sys.modules, 'the spec layer imported boto3'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]


# ---------------------------------------------------------------------------
# Serving capacity: the pool, the serving tenant's quota, the certificate's region
# ---------------------------------------------------------------------------


def serving_models(**changes: dict[str, object]) -> dict[str, object]:
    """The inference stack with its serving models changed by name."""
    raw = raw_stack("inference")
    for model in raw["llm-platform:serving"]["models"]:
        model.update(changes.get(model["name"].replace("-", "_"), {}))
    return raw


def test_serving_models_beyond_the_pools_gpus_are_refused() -> None:
    raw = serving_models(llama_8b={"max_replicas": 24, "gpus_per_replica": 2})
    assert config_error_lines(raw) == [
        "config error: llm-platform:serving.models.0.max_replicas = 24: the models on pool "
        "l40s need up to 48 GPUs at max_replicas (replicas x GPUs: llama-8b 24 x 2), but l40s "
        "has 32 at max_size; lower max_replicas or raise node_pools.l40s.max_size"
    ]


def test_models_sharing_a_pool_are_summed() -> None:
    # Four sequences at 32k tokens fit the L40S's memory; the GPU count does not.
    raw = serving_models(
        llama_70b={"node_pool": "l40s", "max_replicas": 7, "engine": {"max_num_seqs": 4}}
    )
    assert config_error_lines(raw) == [
        "config error: llm-platform:serving.models.1.max_replicas = 7: the models on pool "
        "l40s need up to 36 GPUs at max_replicas (replicas x GPUs: llama-8b 8 x 1, "
        "llama-70b 7 x 4), but l40s has 32 at max_size; lower max_replicas or raise "
        "node_pools.l40s.max_size"
    ]


def test_serving_models_beyond_the_serving_tenants_gpus_are_refused() -> None:
    raw = raw_stack("inference")
    raw["llm-platform:tenants"]["serving"]["serving_gpus"]["h200"] = 12
    assert config_error_lines(raw) == [
        "config error: llm-platform:tenants.serving.serving_gpus.h200 = 12: the models on pool "
        "h200 need up to 16 GPUs at max_replicas (replicas x GPUs: llama-70b 4 x 4), but the "
        "serving namespace's quota holds 12 of h200 and would refuse the pods beyond; set it "
        "to 16 or lower max_replicas"
    ]


def test_serving_on_a_pool_the_serving_tenant_has_no_gpus_of() -> None:
    raw = raw_stack("inference")
    del raw["llm-platform:tenants"]["serving"]["serving_gpus"]["l40s"]
    [line] = config_error_lines(raw)
    assert line.startswith(
        "config error: llm-platform:tenants.serving.serving_gpus.l40s = <missing>: the models "
        "on pool l40s need up to 8 GPUs at max_replicas (replicas x GPUs: llama-8b 8 x 1), "
        "but the serving namespace's quota holds 0 of l40s"
    ), line


def test_a_certificate_of_another_region_is_refused() -> None:
    raw = raw_stack("inference")
    arn = raw["llm-platform:serving"]["certificate_arn"].replace("us-east-1", "us-west-2")
    raw["llm-platform:serving"]["certificate_arn"] = arn
    shown = "'arn:aws:acm:us-west-2:1234...0123-4567-89ab-0123456789ab'"  # its ends: 60 columns
    assert config_error_lines(raw) == [
        f"config error: llm-platform:serving.certificate_arn = {shown}: is a certificate of "
        "us-west-2; an ALB in us-east-1 takes an ACM certificate of its own region: request "
        "or import one in us-east-1"
    ]


# ---------------------------------------------------------------------------
# Several problems: one line each
# ---------------------------------------------------------------------------


def config_error_lines(raw: dict[str, object]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    return str(info.value).splitlines()


def test_several_problems_are_one_line_each_the_first_as_before() -> None:
    raw = with_section("pretrain", "node_pools", {"h100": {"desired_size": 20}})
    alone = config_error_lines(raw)
    raw["llm-platform:network"]["nat_gateways"] = "many"
    raw["llm-platform:tags"]["team"] = ""
    assert config_error_lines(raw) == [
        "config error: llm-platform:tags.team = '': String should have at least 1 character",
        "config error: llm-platform:network.nat_gateways = 'many': Input should be 'single' "
        "or 'per_az'",
        *alone,
    ]
    assert alone == [
        "config error: llm-platform:node_pools.h100.desired_size = 20: "
        "must lie in min_size..max_size (16..16)"
    ]


def test_a_flood_of_problems_is_cut_at_fifty_lines() -> None:
    raw = raw_stack("pretrain")
    pools = raw["llm-platform:node_pools"]
    for i in range(80):
        pools[f"pool-{i}"] = {"instance_type": "p5.48xlarge", "max_size": 0}
    lines = config_error_lines(raw)
    assert len(lines) == 51
    assert lines[-1] == "config error: 30 more errors not shown"
    assert all(
        line.startswith("config error: llm-platform:node_pools.pool-") for line in lines[:50]
    )


def test_the_cli_prints_each_problem_on_its_own_line(tmp_path) -> None:
    raw = with_section("pretrain", "node_pools", {"h100": {"desired_size": 20}})
    raw["llm_platform:guardrails"] = raw.pop("llm-platform:guardrails")
    result = synth_cli(tmp_path, raw)
    assert result.returncode == 2
    assert result.stderr.splitlines() == config_error_lines(raw)
    assert len(result.stderr.splitlines()) == 2
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_the_regions_are_botocores_endpoint_regions() -> None:
    # The schema reads the small partitions.json, which boto3's endpoint rules resolve
    # from. The older endpoints.json must list no region the schema refuses; it may lag
    # behind (botocore 1.44.8 lists me-west-1 and sa-west-1 in partitions.json only).
    import botocore.loaders

    from spec.base import aws_regions

    endpoints = botocore.loaders.create_loader().load_data("endpoints")
    listed = {r for p in endpoints["partitions"] for r in p["regions"]}
    assert listed <= set(aws_regions()), sorted(listed - set(aws_regions()))
    assert len(listed) >= len(aws_regions()) - 5  # a lag of a few regions, not another file
    assert {"us-east-1", "eu-west-1", "cn-north-1", "us-gov-west-1"} <= set(aws_regions())
