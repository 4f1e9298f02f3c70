"""Live on-demand instance prices from the AWS Price List API (pricing:GetProducts).

Used by `llmp cost --prices live|auto` only, never inside the Pulumi program:
a preview must stay deterministic and work offline, so the program always
prices from the dated catalog. Two quirks shape this module:

- the API answers only from a few regions (botocore's endpoint data lists
  them: us-east-1, eu-central-1, ap-south-1), whatever region is priced;
- it knows a region by its long name ("US East (N. Virginia)"), not its
  code. botocore's endpoint data has those names, except that the Price List
  still says "EU (Frankfurt)" where the endpoint data now says "Europe".

An instance type the API does not price (a new type, a type not sold in the
region, an ambiguous answer) keeps its catalog price, and the caller gets a
warning line saying so: a partial live answer is still better than none, but
never silently.
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Iterable
from typing import Any

from llmp.errors import Failed
from program.cost import PriceBook
from spec.catalog import catalog

SERVICE_CODE = "AmazonEC2"
PAGE_SIZE = 100
"""GetProducts' largest MaxResults."""

_FIXED_FILTERS = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    # "Used" is the price of a running instance; the other statuses price unused
    # capacity reservations and dedicated hosts.
    "capacitystatus": "Used",
}


class PricingError(Failed):
    """The Price List API cannot be used at all (access denied, unreachable, unknown region)."""


class PriceNotFound(Exception):
    """The API has no single Linux on-demand price for one instance type (the caller falls
    back to the catalog for that type)."""


@functools.cache
def _aws_partition() -> dict[str, Any]:
    import botocore.loaders

    endpoints = botocore.loaders.create_loader().load_data("endpoints")
    for partition in endpoints["partitions"]:
        if partition["partition"] == "aws":
            return dict(partition)
    raise PricingError("botocore's endpoint data has no aws partition")  # pragma: no cover


def pricing_endpoint_regions() -> list[str]:
    """The regions the Price List API answers from, per botocore's endpoint data."""
    services = _aws_partition()["services"]
    service = services.get("api.pricing") or services.get("pricing") or {}
    return sorted(service.get("endpoints", {})) or ["us-east-1"]


def pricing_endpoint_region(region: str) -> str:
    """The Price List endpoint nearest to `region` (any of them prices every region)."""
    available = pricing_endpoint_regions()
    if region in available:
        return region
    continent = region.split("-", 1)[0]
    preferred = {"eu": "eu-central-1", "ap": "ap-south-1", "me": "ap-south-1", "il": "ap-south-1"}
    choice = preferred.get(continent, "us-east-1")
    return choice if choice in available else available[0]


def region_long_name(region: str) -> str:
    """The Price List's `location` of a region code: "us-east-1" -> "US East (N. Virginia)"."""
    described = _aws_partition()["regions"].get(region, {}).get("description")
    if not described:
        known = ", ".join(sorted(_aws_partition()["regions"]))
        raise PricingError(f"no AWS region {region!r} in botocore's endpoint data; known: {known}")
    if described.startswith("Europe ("):
        return "EU " + described.removeprefix("Europe ")
    return str(described)


def product_filters(instance_type: str, location: str) -> list[dict[str, str]]:
    """GetProducts filters for the Linux, shared-tenancy, on-demand price of one type."""
    wanted = {"instanceType": instance_type, "location": location, **_FIXED_FILTERS}
    return [{"Type": "TERM_MATCH", "Field": key, "Value": value} for key, value in wanted.items()]


def parse_on_demand_usd(item: str | dict[str, Any]) -> tuple[float, dict[str, Any]] | None:
    """(USD per hour, product attributes) of one PriceList entry; None when the entry has no
    hourly on-demand USD price (a reservation-only product, a zero placeholder)."""
    doc = json.loads(item) if isinstance(item, str) else item
    attributes = doc.get("product", {}).get("attributes", {})
    for term in doc.get("terms", {}).get("OnDemand", {}).values():
        for dimension in term.get("priceDimensions", {}).values():
            usd = dimension.get("pricePerUnit", {}).get("USD")
            if dimension.get("unit") != "Hrs" or usd is None:
                continue
            price = float(usd)
            if price > 0:
                return price, attributes
    return None


def on_demand_usd_per_hour(client: Any, instance_type: str, location: str) -> float:
    """The on-demand Linux $/hour of `instance_type` at `location`, over every page.

    Raises PriceNotFound when the API prices it nowhere or ambiguously, and
    PricingError when the API refuses or fails.
    """
    found: list[tuple[float, dict[str, Any]]] = []
    params: dict[str, Any] = {
        "ServiceCode": SERVICE_CODE,
        "Filters": product_filters(instance_type, location),
        "FormatVersion": "aws_v1",
        "MaxResults": PAGE_SIZE,
    }
    while True:
        page = _get_products(client, params)
        found += [p for item in page.get("PriceList", []) if (p := parse_on_demand_usd(item))]
        token = page.get("NextToken")
        if not token:
            break
        params = {**params, "NextToken": token}
    prices = {price for price, _ in found}
    if len(prices) > 1:
        # Capacity-block or reservation-flavoured products can share the filters: keep the
        # plain on-demand box usage when the attributes say which that is.
        plain = {
            price
            for price, attrs in found
            if attrs.get("marketoption", "OnDemand") == "OnDemand"
            and "BoxUsage" in attrs.get("usagetype", "BoxUsage")
        }
        prices = plain or prices
    if not prices:
        raise PriceNotFound(
            f"the AWS Price List has no Linux on-demand price for {instance_type} in {location}"
        )
    if len(prices) > 1:
        listed = ", ".join(f"${p:g}" for p in sorted(prices))
        raise PriceNotFound(
            f"the AWS Price List has {len(prices)} Linux on-demand prices for {instance_type} "
            f"in {location} ({listed})"
        )
    return prices.pop()


def _get_products(client: Any, params: dict[str, Any]) -> dict[str, Any]:
    import botocore.exceptions as boto_errors

    try:
        page: dict[str, Any] = client.get_products(**params)
    except boto_errors.ClientError as exc:
        error = exc.response.get("Error", {})
        code = error.get("Code", "error")
        if "AccessDenied" in code:
            raise PricingError(
                f"the AWS Price List refused pricing:GetProducts ({code}): grant it to these "
                "credentials, or use --prices catalog"
            ) from None
        raise PricingError(
            f"the AWS Price List failed: {code}: {error.get('Message', '')}".rstrip(": ")
        ) from None
    except boto_errors.NoCredentialsError:
        raise PricingError(
            "no AWS credentials for the Price List: set AWS_PROFILE, or AWS_ACCESS_KEY_ID "
            "and AWS_SECRET_ACCESS_KEY, or use --prices catalog"
        ) from None
    except boto_errors.BotoCoreError as exc:
        raise PricingError(f"cannot reach the AWS Price List: {exc}") from None
    return page


def has_credentials(session: Any) -> bool:
    """Whether boto3 finds credentials (environment, profile, SSO, instance role...)."""
    return session.get_credentials() is not None


def pricing_client(session: Any, region: str) -> Any:
    return session.client("pricing", region_name=pricing_endpoint_region(region))


def live_price_book(
    client: Any,
    instance_types: Iterable[str],
    region: str,
    now: datetime.datetime | None = None,
) -> tuple[PriceBook, list[str]]:
    """A PriceBook of live on-demand prices for `instance_types` in `region`, and one
    warning line per type that keeps its catalog price (and why).

    Raises PricingError when the API cannot be used at all.
    """
    location = region_long_name(region)
    cat = catalog()
    live: dict[str, float] = {}
    fallbacks: dict[str, str] = {}
    warnings = []
    for instance_type in sorted(set(instance_types)):
        try:
            live[instance_type] = on_demand_usd_per_hour(client, instance_type, location)
        except PriceNotFound as exc:
            fallbacks[instance_type] = str(exc)
            price = cat.instance(instance_type).on_demand_usd_per_hour
            warnings.append(
                f"prices: {exc}; using the catalog's ${price:g}/h "
                f"({cat.prices.region}, {cat.prices.on_demand_as_of})"
            )
    fetched = (now or datetime.datetime.now(datetime.UTC)).isoformat(timespec="seconds")
    book = PriceBook(
        source="live",
        region=region,
        fetched_at=fetched,
        on_demand_usd_per_hour=live,
        fallbacks=fallbacks,
    )
    return book, warnings
