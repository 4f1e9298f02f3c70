"""The network's egress settings: the buckets the S3 endpoint admits and the interface
endpoints, each refused in one line where it is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from spec.network import DEFAULT_INTERFACE_ENDPOINTS
from spec.stackfile import load_config
from tests.conftest import config_error, raw_stack, with_section


def network(overrides: dict[str, Any], stack: str = "pretrain") -> dict[str, Any]:
    return with_section(stack, "network", overrides)


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("*", "admits nearly every bucket: name the buckets or their prefix"),
        ("a*-*", "admits nearly every bucket: name the buckets or their prefix"),
        ("Acme-Data", "a bucket name or pattern: a-z, 0-9, '.', '-' and '*'"),
        ("arn:aws:s3:::x", "a bucket name or pattern: a-z, 0-9, '.', '-' and '*'"),
    ],
)
def test_a_bucket_pattern_that_admits_too_much_or_is_no_name(pattern: str, why: str) -> None:
    assert config_error(network({"s3_endpoint_buckets": ["commoncrawl", pattern]})) == (
        f"config error: llm-platform:network.s3_endpoint_buckets.1 = '{pattern}': {why}"
    )


def test_an_unknown_interface_endpoint_names_the_known_ones() -> None:
    message = config_error(network({"interface_endpoints": ["ecr.api", "s3"]}))
    assert message.startswith(
        "config error: llm-platform:network.interface_endpoints.1 = 's3': one of ecr.api, "
    )


def test_an_interface_endpoint_listed_twice() -> None:
    message = config_error(network({"interface_endpoints": ["sts", "sts"]}))
    assert "lists a service twice; list each once" in message


def test_the_defaults_secrets_manager_where_the_stack_serves_kms_where_it_promotes() -> None:
    # Every stack file has a models bucket: the promotion job signs revisions with KMS.
    assert load_config(raw_stack("pretrain")).interface_endpoints() == [
        *DEFAULT_INTERFACE_ENDPOINTS,
        "kms",
    ]
    assert load_config(raw_stack("inference")).interface_endpoints() == [
        *DEFAULT_INTERFACE_ENDPOINTS,
        "secretsmanager",
        "kms",
    ]
    raw = raw_stack("pretrain")
    storage = raw["llm-platform:storage"]
    storage["buckets"] = {k: v for k, v in storage["buckets"].items() if k != "models"}
    storage.pop("model_weights", None)
    assert load_config(raw).interface_endpoints() == list(DEFAULT_INTERFACE_ENDPOINTS)
    assert load_config(network({"interface_endpoints": []})).interface_endpoints() == []


def test_an_adopted_vpcs_endpoints_are_its_owners() -> None:
    from llmp.stacks import REPO_ROOT
    from spec.stackfile import load_stack_file

    raw = load_stack_file(str(REPO_ROOT / "examples" / "stacks" / "Pulumi.existing-vpc.yaml"))
    assert load_config(raw).interface_endpoints() == []
    raw["llm-platform:network"] = {**raw["llm-platform:network"], "interface_endpoints": ["sts"]}
    assert config_error(raw) == (
        "config error: llm-platform:network.interface_endpoints = ['sts']: an adopted VPC's "
        "endpoints are its owner's: leave this out"
    )
