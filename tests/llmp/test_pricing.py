"""Live prices from the AWS Price List, against botocore's Stubber (moto has no pricing API):
a realistic GetProducts answer, a paginated one, an empty one and an AccessDenied."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from llmp.cost import declared
from llmp.cost.pricing import (
    PriceNotFound,
    PricingError,
    live_price_book,
    on_demand_usd_per_hour,
    pricing_endpoint_region,
    product_filters,
    region_long_name,
)
from program.cost import estimate, usage_of
from spec.catalog import catalog
from spec.stackfile import load_config
from tests.conftest import raw_stack

VIRGINIA = "US East (N. Virginia)"


def price_item(
    instance_type: str,
    usd: str,
    *,
    location: str = VIRGINIA,
    market: str = "OnDemand",
    usage: str | None = None,
    on_demand: bool = True,
) -> str:
    """One PriceList entry as GetProducts returns it: a JSON document in a string, with an
    OnDemand term and a Reserved one (which must be ignored)."""
    sku = "".join(c for c in f"{instance_type}{market}{usd}" if c.isalnum()).upper()[:16]
    terms: dict[str, Any] = {
        "Reserved": {
            f"{sku}.4NA7Y494T4": {
                "priceDimensions": {
                    f"{sku}.4NA7Y494T4.6YS6EN2CT7": {
                        "unit": "Hrs",
                        "pricePerUnit": {"USD": "30.1200000000"},
                        "description": "Linux/UNIX reserved, 1 year, no upfront",
                    }
                },
                "termAttributes": {"LeaseContractLength": "1yr", "PurchaseOption": "No Upfront"},
            }
        }
    }
    if on_demand:
        terms["OnDemand"] = {
            f"{sku}.JRTCKXETXF": {
                "priceDimensions": {
                    f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                        "unit": "Hrs",
                        "endRange": "Inf",
                        "description": f"${usd} per On Demand Linux {instance_type} Instance Hour",
                        "appliesTo": [],
                        "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                        "beginRange": "0",
                        "pricePerUnit": {"USD": usd},
                    }
                },
                "sku": sku,
                "effectiveDate": "2025-06-01T00:00:00Z",
                "offerTermCode": "JRTCKXETXF",
                "termAttributes": {},
            }
        }
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": instance_type,
                    "location": location,
                    "regionCode": "us-east-1",
                    "operatingSystem": "Linux",
                    "tenancy": "Shared",
                    "preInstalledSw": "NA",
                    "capacitystatus": "Used",
                    "licenseModel": "No License required",
                    "marketoption": market,
                    "operation": "RunInstances",
                    "usagetype": usage or f"BoxUsage:{instance_type}",
                    "servicecode": "AmazonEC2",
                },
                "sku": sku,
            },
            "serviceCode": "AmazonEC2",
            "terms": terms,
            "version": "20261124190000",
            "publicationDate": "2026-11-24T19:00:00Z",
        }
    )


def expected(instance_type: str, location: str = VIRGINIA, token: str | None = None) -> dict:
    params: dict[str, Any] = {
        "ServiceCode": "AmazonEC2",
        "Filters": product_filters(instance_type, location),
        "FormatVersion": "aws_v1",
        "MaxResults": 100,
    }
    if token:
        params["NextToken"] = token
    return params


def page(*items: str, token: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": list(items)}
    if token:
        out["NextToken"] = token
    return out


@pytest.fixture
def stubbed() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client(
        "pricing",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def test_filters_ask_for_linux_shared_on_demand_of_one_type_at_one_location() -> None:
    filters = {f["Field"]: f["Value"] for f in product_filters("p5.48xlarge", VIRGINIA)}
    assert filters == {
        "instanceType": "p5.48xlarge",
        "location": VIRGINIA,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }


def test_a_realistic_answer_gives_the_on_demand_hourly_price(stubbed) -> None:
    client, stubber = stubbed
    stubber.add_response(
        "get_products", page(price_item("p5.48xlarge", "55.0400000000")), expected("p5.48xlarge")
    )
    assert on_demand_usd_per_hour(client, "p5.48xlarge", VIRGINIA) == 55.04


def test_every_page_is_read(stubbed) -> None:
    client, stubber = stubbed
    reserved_only = price_item("p5en.48xlarge", "0", on_demand=False)
    stubber.add_response(
        "get_products", page(reserved_only, token="page-2"), expected("p5en.48xlarge")
    )
    stubber.add_response(
        "get_products",
        page(price_item("p5en.48xlarge", "63.2960000000")),
        expected("p5en.48xlarge", token="page-2"),
    )
    assert on_demand_usd_per_hour(client, "p5en.48xlarge", VIRGINIA) == 63.296


def test_capacity_block_products_do_not_make_the_price_ambiguous(stubbed) -> None:
    client, stubber = stubbed
    block = price_item(
        "p5.48xlarge", "31.4640000000", market="CapacityBlock", usage="CapacityBlock:p5.48xlarge"
    )
    stubber.add_response(
        "get_products",
        page(block, price_item("p5.48xlarge", "55.0400000000")),
        expected("p5.48xlarge"),
    )
    assert on_demand_usd_per_hour(client, "p5.48xlarge", VIRGINIA) == 55.04


def test_two_plain_prices_are_ambiguous(stubbed) -> None:
    client, stubber = stubbed
    stubber.add_response(
        "get_products",
        page(price_item("g5.12xlarge", "5.672"), price_item("g5.12xlarge", "5.9")),
        expected("g5.12xlarge"),
    )
    with pytest.raises(PriceNotFound, match="2 Linux on-demand prices"):
        on_demand_usd_per_hour(client, "g5.12xlarge", VIRGINIA)


def test_an_empty_answer_keeps_the_catalog_price_with_a_warning(stubbed, plans) -> None:
    client, stubber = stubbed
    stubber.add_response("get_products", page(), expected("m7i.4xlarge", "US West (Oregon)"))
    stubber.add_response(
        "get_products",
        page(price_item("p4de.24xlarge", "27.4470500000", location="US West (Oregon)")),
        expected("p4de.24xlarge", "US West (Oregon)"),
    )
    stubber.add_response(
        "get_products",
        page(price_item("p5.48xlarge", "55.0400000000", location="US West (Oregon)")),
        expected("p5.48xlarge", "US West (Oregon)"),
    )
    now = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC)
    types = ["p5.48xlarge", "m7i.4xlarge", "p4de.24xlarge", "p5.48xlarge"]
    book, warnings = live_price_book(client, types, "us-west-2", now=now)
    assert book.source == "live" and book.region == "us-west-2"
    assert book.fetched_at == "2026-12-01T09:00:00+00:00"
    assert dict(book.on_demand_usd_per_hour) == {"p4de.24xlarge": 27.44705, "p5.48xlarge": 55.04}
    assert set(book.fallbacks) == {"m7i.4xlarge"}
    (warning,) = warnings
    assert "\n" not in warning
    assert "m7i.4xlarge" in warning and "US West (Oregon)" in warning
    assert f"${catalog().instance('m7i.4xlarge').on_demand_usd_per_hour:g}/h" in warning
    # The book prices the stack: live where known, catalog where not.
    cost = estimate(declared(plans("finetune")), usage_of(load_config(raw_stack("finetune"))), book)
    assert cost["price_source"]["catalog_fallbacks"] == dict(book.fallbacks)
    assert cost["system_pool"]["usd_per_instance_hour"] == pytest.approx(
        catalog().instance("m7i.4xlarge").on_demand_usd_per_hour
    )


def test_access_denied_is_one_line_naming_the_permission(stubbed) -> None:
    client, stubber = stubbed
    stubber.add_client_error(
        "get_products",
        service_error_code="AccessDeniedException",
        service_message="User is not authorized to perform: pricing:GetProducts",
        http_status_code=400,
        expected_params=expected("p5.48xlarge"),
    )
    with pytest.raises(PricingError) as caught:
        live_price_book(client, ["p5.48xlarge"], "us-east-1")
    message = str(caught.value)
    assert "pricing:GetProducts" in message and "--prices catalog" in message
    assert "\n" not in message


def test_other_service_errors_are_pricing_errors(stubbed) -> None:
    client, stubber = stubbed
    stubber.add_client_error(
        "get_products",
        service_error_code="ThrottlingException",
        service_message="Rate exceeded",
        http_status_code=400,
    )
    with pytest.raises(PricingError, match="ThrottlingException: Rate exceeded"):
        on_demand_usd_per_hour(client, "p5.48xlarge", VIRGINIA)


@pytest.mark.parametrize(
    ("region", "name"),
    [
        ("us-east-1", "US East (N. Virginia)"),
        ("us-west-2", "US West (Oregon)"),
        ("eu-central-1", "EU (Frankfurt)"),  # the Price List keeps "EU", the endpoints "Europe"
        ("ap-northeast-1", "Asia Pacific (Tokyo)"),
    ],
)
def test_region_long_names_are_the_price_lists(region: str, name: str) -> None:
    assert region_long_name(region) == name


def test_an_unknown_region_is_a_pricing_error() -> None:
    with pytest.raises(PricingError, match="no AWS region 'mars-north-1'"):
        region_long_name("mars-north-1")


@pytest.mark.parametrize(
    ("region", "endpoint"),
    [
        ("us-east-1", "us-east-1"),
        ("us-west-2", "us-east-1"),
        ("eu-west-1", "eu-central-1"),
        ("ap-northeast-1", "ap-south-1"),
        ("sa-east-1", "us-east-1"),
    ],
)
def test_the_nearest_pricing_endpoint_is_used(region: str, endpoint: str) -> None:
    assert pricing_endpoint_region(region) == endpoint
