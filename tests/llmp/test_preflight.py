"""`llmp verify --preflight`: the account's zones offer each pool's type, and its EC2 vCPU
quotas cover the pools at max size.

Offerings are read from a moto server on 127.0.0.1 (moto implements DescribeAvailabilityZones
and DescribeInstanceTypeOfferings from its bundled offerings data). moto's Service Quotas
knows the `vpc` service only, so GetServiceQuota for `ec2` is tested with botocore's
Stubber, whose responses are validated against the service model; against moto the quota
rows are `not checked`.
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from typer.testing import CliRunner

from llmp.cli import app
from llmp.verify import preflight
from llmp.verify.findings import FAIL, NOT_CHECKED, PASS
from spec.stackfile import load_config, load_stack_file

pytestmark = pytest.mark.usefixtures("aws_env")


def _cfg(**pool: Any) -> Any:
    raw = load_stack_file("stacks/Pulumi.pretrain.yaml")
    raw["llm-platform:node_pools"]["h100"].update(pool)
    return load_config(raw)


def _ec2(endpoint: str) -> Any:
    return boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint)


def _zone_id(endpoint: str, name: str) -> str:
    zones = _ec2(endpoint).describe_availability_zones()["AvailabilityZones"]
    return next(z["ZoneId"] for z in zones if z["ZoneName"] == name)


def test_every_pool_whose_zones_offer_its_type_passes(endpoint: str) -> None:
    rows = preflight.check_offerings(_ec2(endpoint), _cfg(), emulated=True)
    assert {r.resource for r in rows} == {
        "system pool",
        "node pool h100",
        "node pool h100-block",
        "cpu pool data",
    }
    h100 = next(r for r in rows if r.resource == "node pool h100")
    assert h100.status == PASS, h100
    assert h100.reason == f"in us-east-1a ({_zone_id(endpoint, 'us-east-1a')})"


def test_a_pool_in_a_zone_that_lacks_its_type_fails_naming_where_it_is(endpoint: str) -> None:
    """p5en.48xlarge is offered in two us-east-1 zones only (use1-az2, use1-az6)."""
    offering = {"use1-az2", "use1-az6"}
    zones = _ec2(endpoint).describe_availability_zones()["AvailabilityZones"]
    lacking = next(z for z in zones if z["ZoneId"] not in offering)
    cfg = _cfg(instance_type="p5en.48xlarge", availability_zones=[lacking["ZoneName"]])
    network = cfg.network.availability_zones
    if lacking["ZoneName"] not in network:
        pytest.skip("moto's first lacking zone is not one of the stack's")
    rows = preflight.check_offerings(_ec2(endpoint), cfg, emulated=True)
    row = next(r for r in rows if r.resource == "node pool h100")
    assert row.status == FAIL
    assert row.reason == (
        f"not in {lacking['ZoneName']} ({lacking['ZoneId']}); offered in use1-az2, use1-az6"
    )


def test_moto_has_no_ec2_quotas_so_they_are_not_checked(endpoint: str) -> None:
    quotas = boto3.client("service-quotas", region_name="us-east-1", endpoint_url=endpoint)
    rows = preflight.check_quotas(quotas, _cfg(), emulated=True)
    assert [(r.resource, r.status) for r in rows] == [
        ("quota L-417A185B", NOT_CHECKED),
        ("quota L-1216C47A", NOT_CHECKED),
    ]


def _stubbed(values: dict[str, float | None], missing: tuple[str, ...] = ()) -> Any:
    client = boto3.client("service-quotas", region_name="us-east-1")
    stub = Stubber(client)
    for code, value in values.items():
        params = {"ServiceCode": "ec2", "QuotaCode": code}
        if code in missing:
            stub.add_client_error(
                "get_service_quota", "NoSuchResourceException", expected_params=params
            )
            continue
        quota: dict[str, Any] = {"ServiceCode": "ec2", "QuotaCode": code}
        if value is not None:
            quota["Value"] = value
        stub.add_response("get_service_quota", {"Quota": quota}, params)
    stub.activate()
    return client


def test_a_quota_below_the_pools_at_max_size_fails_with_the_increase_to_ask() -> None:
    client = _stubbed({"L-417A185B": 2048.0, "L-1216C47A": 640.0})
    rows = preflight.check_quotas(client, _cfg(), emulated=False)
    p, standard = rows
    assert (p.check, p.status) == ("P On-Demand vCPUs", FAIL)
    assert p.reason.startswith("2,048 < 3,072 needed at max size; request an increase")
    assert "--quota-code L-417A185B --desired-value 3072" in p.reason
    assert (standard.status, standard.reason) == (PASS, "640 >= 224 needed")


def test_a_spot_pool_is_counted_under_the_spot_quota() -> None:
    cfg = _cfg(capacity_type="SPOT", checkpointing=True)
    client = _stubbed({"L-7212CCBC": 4000.0, "L-1216C47A": 640.0})
    rows = preflight.check_quotas(client, cfg, emulated=False)
    assert [(r.resource, r.check, r.status) for r in rows] == [
        ("quota L-7212CCBC", "P Spot vCPUs", PASS),
        ("quota L-1216C47A", "Standard On-Demand vCPUs", PASS),
    ]


def test_a_quota_code_aws_does_not_know_fails_and_says_to_check_the_catalog() -> None:
    client = _stubbed({"L-417A185B": None, "L-1216C47A": 640.0}, missing=("L-417A185B",))
    row = preflight.check_quotas(client, _cfg(), emulated=False)[0]
    assert row.status == FAIL
    assert row.reason.startswith("no quota L-417A185B in ec2 (Running On-Demand P instances)")


def test_preflight_from_the_cli_reads_the_stack_file_and_exits_1_on_a_failure(
    endpoint: str,
) -> None:
    """Against moto the quotas are not checked and the offerings pass: exit 0; the JSON rows
    carry the preflight area."""
    result = CliRunner().invoke(
        app, ["verify", "pretrain", "--preflight", "--endpoint-url", endpoint, "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {r["area"] for r in rows} == {"preflight"}
    assert {r["status"] for r in rows} == {PASS, NOT_CHECKED}


def test_preflight_without_credentials_is_one_line_of_bad_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    result = CliRunner().invoke(app, ["verify", "pretrain", "--preflight"])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output
