"""The catalog's offerings (which zones offer each instance type) and the stack config's
check against them (spec/offerings.py): per region always, per zone where
`network.zone_ids` gives the account's mapping."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from spec.catalog import catalog
from spec.errors import ConfigError
from spec.stackfile import load_config, load_stack_file


def _pretrain() -> dict[str, Any]:
    return copy.deepcopy(load_stack_file("stacks/Pulumi.pretrain.yaml"))


def _moved(raw: dict[str, Any], region: str, zones: list[str], pool_zone: str) -> dict[str, Any]:
    raw["aws:region"] = region
    raw["llm-platform:network"]["availability_zones"] = zones
    for pool in raw["llm-platform:node_pools"].values():
        if "availability_zones" in pool:
            pool["availability_zones"] = [pool_zone]
    return raw


def _refusal(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    lines = str(info.value).splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_every_instance_type_of_the_catalog_has_offerings_in_zones_of_its_regions() -> None:
    offerings = catalog().offerings
    assert set(offerings.types) == set(catalog().instances)
    for instance_type, regions in offerings.types.items():
        assert regions, instance_type
        for region, zones in regions.items():
            assert set(zones) <= set(offerings.zone_ids[region]), (instance_type, region)


def test_the_offerings_record_what_the_issue_names() -> None:
    types = catalog().offerings.types
    assert "eu-north-1" not in types["p4de.24xlarge"]
    assert types["p5en.48xlarge"]["us-east-1"] == ["use1-az2", "use1-az6"]
    assert "apne1-az2" not in types["p5.48xlarge"]["ap-northeast-1"]


def test_every_stack_passes_the_offerings_check() -> None:
    for stack in ("pretrain", "finetune", "inference"):
        load_config(load_stack_file(f"stacks/Pulumi.{stack}.yaml"))


def test_a_type_its_region_does_not_offer_is_refused_naming_where_it_is() -> None:
    raw = _pretrain()
    raw = _moved(raw, "eu-north-1", ["eu-north-1a", "eu-north-1b"], "eu-north-1a")
    raw["llm-platform:node_pools"]["h100"]["instance_type"] = "p4de.24xlarge"
    assert _refusal(raw) == (
        "config error: llm-platform:node_pools.h100.instance_type = 'p4de.24xlarge': not "
        "offered in eu-north-1; offered in ap-northeast-1, ap-southeast-1, eu-central-1, "
        "il-central-1, us-east-1 and 1 more (catalog offerings, 2026-12-03)"
    )


def test_with_zone_ids_a_zone_that_lacks_the_type_is_refused_naming_the_zones_that_have_it():
    raw = _moved(
        _pretrain(), "ap-northeast-1", ["ap-northeast-1a", "ap-northeast-1d"], "ap-northeast-1d"
    )
    raw["llm-platform:network"]["zone_ids"] = {
        "ap-northeast-1a": "apne1-az4",
        "ap-northeast-1d": "apne1-az2",
    }
    assert _refusal(raw) == (
        "config error: llm-platform:node_pools.h100.availability_zones.0 = 'ap-northeast-1d': "
        "p5.48xlarge is not offered in ap-northeast-1d (apne1-az2); offered in apne1-az1, "
        "apne1-az4 (catalog offerings, 2026-12-03)"
    )


def test_without_zone_ids_the_zone_is_not_checked_offline() -> None:
    raw = _moved(
        _pretrain(), "ap-northeast-1", ["ap-northeast-1a", "ap-northeast-1d"], "ap-northeast-1d"
    )
    load_config(raw)


def test_a_pool_spanning_every_az_is_refused_where_one_of_them_lacks_its_type() -> None:
    raw = _pretrain()
    raw["llm-platform:network"]["zone_ids"] = {"us-east-1b": "use1-az3"}
    line = _refusal(raw)
    assert line.startswith(
        "config error: llm-platform:system_pool.instance_type = 'm7i.4xlarge': m7i.4xlarge is "
        "not offered in us-east-1b (use1-az3) (the pool spans every AZ: list its own)"
    )


@pytest.mark.parametrize(
    ("zone_ids", "expected"),
    [
        (
            {"us-east-1x": "use1-az1"},
            "config error: llm-platform:network.zone_ids.us-east-1x = 'use1-az1': us-east-1x is "
            "not one of network.availability_zones (us-east-1a, us-east-1b, us-east-1c)",
        ),
        (
            {"us-east-1a": "usw2-az1"},
            "config error: llm-platform:network.zone_ids.us-east-1a = 'usw2-az1': not a zone id "
            "of us-east-1 (use1-az1, use1-az2, use1-az3, use1-az4, use1-az5, use1-az6); see "
            "`aws ec2 describe-availability-zones`",
        ),
        (
            {"us-east-1a": "use1-az4", "us-east-1b": "use1-az4"},
            "config error: llm-platform:network.zone_ids = {'us-east-1a': 'use1-az4', "
            "'us-east-1b': 'use1-az4'}: maps two AZ names to one zone id",
        ),
    ],
)
def test_a_wrong_zone_id_mapping_is_refused_in_one_line(
    zone_ids: dict[str, str], expected: str
) -> None:
    raw = _pretrain()
    raw["llm-platform:network"]["zone_ids"] = zone_ids
    assert _refusal(raw) == expected
