"""The catalog against botocore's service models and against itself."""

from __future__ import annotations

import datetime

import botocore.session

from spec.catalog import catalog

_session = botocore.session.get_session()
EC2 = _session.get_service_model("ec2")
EKS = _session.get_service_model("eks")


def enum(model, shape: str) -> set[str]:
    return set(model.shape_for(shape).enum)


def test_every_instance_type_exists_in_the_ec2_model() -> None:
    missing = set(catalog().instances) - enum(EC2, "InstanceType")
    assert not missing


def test_every_ami_type_exists_in_the_eks_model() -> None:
    ami_types = {kind.ami_type for kind in catalog().accelerator_kinds.values()}
    ami_types.add(catalog().cpu_ami_type)
    assert ami_types <= enum(EKS, "AMITypes")


def test_values_the_components_send_exist_in_the_models() -> None:
    assert {"ON_DEMAND", "SPOT", "CAPACITY_BLOCK"} <= enum(EKS, "CapacityTypes")
    assert {"interface", "efa-only"} <= enum(EC2, "NetworkInterfaceType")
    assert "capacity-block" in enum(EC2, "MarketType")
    assert {"api", "audit", "authenticator", "controllerManager", "scheduler"} <= enum(
        EKS, "LogType"
    )
    assert {"STANDARD", "EXTENDED"} <= enum(EKS, "SupportType")
    assert "cluster" in enum(EC2, "PlacementStrategy")


def test_efa_fits_the_network_cards() -> None:
    for name, itype in catalog().instances.items():
        # One efa-only interface per network card, card 0 included.
        assert itype.efa_interfaces <= itype.network_cards, name


def test_prices_are_positive_and_dated() -> None:
    cat = catalog()
    for name, itype in cat.instances.items():
        assert itype.on_demand_usd_per_hour > 0, name
        if itype.capacity_block_usd_per_hour is not None:
            assert 0 < itype.capacity_block_usd_per_hour < itype.on_demand_usd_per_hour, name
    for date in (cat.prices.on_demand_as_of, cat.prices.capacity_block_as_of):
        assert datetime.date.fromisoformat(date) <= datetime.date(2026, 11, 30)


def test_default_eks_version_is_pinned_with_every_core_addon() -> None:
    eks = catalog().eks
    assert eks.default_version in eks.versions
    for version, pins in eks.versions.items():
        assert set(pins.addons) == {"vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent"}
        for addon in pins.addons.values():
            assert addon.version.startswith("v") and "-eksbuild." in addon.version
        assert pins.addons["kube-proxy"].version.startswith(f"v{version}.")


def _semver(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.lstrip("v").split("-")[0].split("."))


def test_vpc_cni_supports_efa_only_interfaces() -> None:
    eks = catalog().eks
    floor = _semver(eks.vpc_cni_min_version_for_efa_only)
    for pins in eks.versions.values():
        assert _semver(pins.addons["vpc-cni"].version) >= floor


FSX = _session.get_service_model("fsx")
S3 = _session.get_service_model("s3")


def test_storage_values_exist_in_the_s3_and_fsx_models() -> None:
    from typing import get_args

    from spec.storage import LustreConfig, TransitionClass

    transition_classes = set(get_args(TransitionClass))
    assert transition_classes <= enum(S3, "TransitionStorageClass")
    priced = set(catalog().storage.s3_usd_per_gb_month)
    assert priced - {"STANDARD"} == transition_classes
    assert priced <= enum(S3, "StorageClass")
    assert "BucketOwnerEnforced" in enum(S3, "ObjectOwnership")
    assert "PERSISTENT_2" in enum(FSX, "LustreDeploymentType")
    assert "SSD" in enum(FSX, "StorageType")
    assert set(get_args(LustreConfig.model_fields["compression"].annotation)) <= enum(
        FSX, "DataCompressionType"
    )
    assert set(get_args(LustreConfig.model_fields["metadata_mode"].annotation)) <= enum(
        FSX, "MetadataConfigurationMode"
    )
    assert {"NEW", "CHANGED", "DELETED"} <= enum(FSX, "EventType")


def test_fsx_prices_cover_every_throughput_tier() -> None:
    from typing import get_args

    from spec.storage import LustreConfig

    tiers = set(get_args(LustreConfig.model_fields["throughput_per_tib"].annotation))
    assert set(catalog().storage.fsx_lustre_persistent2_usd_per_gb_month) == tiers


PIN_FIELDS = {"version", "ref", "url", "image", "vllm_image", "gateway_image"}
"""Fields that name something an upstream publishes (the Verified rule's subject)."""


def _pins(node: object, path: str = "") -> list[tuple[str, object]]:
    """(path, model) of every catalog entry that pins something published: a chart or
    manifest version, an add-on build, an image tag."""
    from pydantic import BaseModel

    found: list[tuple[str, object]] = []
    if isinstance(node, BaseModel):
        fields = type(node).model_fields
        if PIN_FIELDS & set(fields):
            found.append((path, node))
        for name in fields:
            found += _pins(getattr(node, name), f"{path}.{name}" if path else name)
    elif isinstance(node, dict):
        for key, value in node.items():
            found += _pins(value, f"{path}.{key}")
    return found


def test_every_pin_records_where_it_was_published_and_when() -> None:
    pins = _pins(catalog())
    # charts, manifests, add-on builds and images: 22 entries today
    assert len(pins) >= 20
    for path, pin in pins:
        verified = [
            getattr(pin, name)
            for name in type(pin).model_fields  # type: ignore[attr-defined]
            if name.endswith("verified")
        ]
        assert verified, f"{path} pins a version with no `verified` record"
        for record in verified:
            assert record.against in {"chart index", "release tag", "EKS add-on versions"}
            assert datetime.date(2026, 1, 1) <= record.checked <= datetime.date.today()


def test_a_pull_request_or_a_commit_is_no_verification() -> None:
    import pytest
    from pydantic import ValidationError

    from spec.catalog import Verified

    good = {"against": "chart index", "where": "aws/eks-charts gh-pages index.yaml"}
    assert Verified.model_validate({**good, "checked": "2026-12-01"}).where == good["where"]
    for where in (
        "aws/eks-charts refs/pull/1305/head, Chart.yaml version 0.2.1",
        "an unmerged pull request of open-telemetry/opentelemetry-helm-charts",
        "Chart.yaml at 0028bf0",
    ):
        with pytest.raises(ValidationError):
            Verified.model_validate({**good, "where": where, "checked": "2026-12-01"})


def test_nccl_tests_image_is_tagged_as_its_build_spec_pushes_it() -> None:
    # awsome-distributed-ai micro-benchmarks/nccl-tests/buildspec.yaml:
    # cuda<CUDA>-efa<EFA>-ofi<OFI>-nccl<NCCL>-tests<TESTS>
    import re

    image = catalog().fabric_acceptance.image
    tag = image.rsplit(":", 1)[1]
    scheme = r"cuda(\d+\.\d+\.\d+)-efa([\d.]+)-ofi(v[\d.]+)-nccl(v[\d.]+-\d+)-tests(v[\d.]+)"
    match = re.fullmatch(scheme, tag)
    assert match, f"{tag} does not follow the build spec's tag scheme"
    for version in match.groups():
        assert version.lstrip("v") in catalog().fabric_acceptance.image_source


def test_nvsentinel_and_its_cert_manager_are_pinned_to_published_releases() -> None:
    import re

    charts = catalog().addon_charts
    nvsentinel = charts["nvsentinel"]
    # The release workflow pushes oci://ghcr.io/nvidia/nvsentinel at the tag's own name.
    assert nvsentinel.repository == "oci://ghcr.io/nvidia"
    assert re.fullmatch(r"v\d+\.\d+\.\d+", nvsentinel.version)
    assert nvsentinel.verified.against == "release tag"
    assert f"NVIDIA/NVSentinel release {nvsentinel.version}" in nvsentinel.verified.where
    assert nvsentinel.verified.checked == datetime.date(2026, 12, 1)
    cert_manager = charts["cert-manager"]
    assert cert_manager.repository == "https://charts.jetstack.io"
    assert re.fullmatch(r"v\d+\.\d+\.\d+", cert_manager.version)
    assert f"cert-manager/cert-manager tag {cert_manager.version}" in cert_manager.verified.where
    # The values the component sets are the ones the source says were read at the tag.
    for key in ("circuitBreaker", "ruleSets", "evictionTimeoutInSeconds", "global.dcgm.mode"):
        assert key.rsplit(".", 1)[-1] in nvsentinel.source, key


def test_quarantine_is_for_the_xid_classes_that_need_a_reset_or_a_new_node() -> None:
    xids = catalog().gpu_xids
    assert xids is not None
    quarantined = {name for name, cls in xids.classes.items() if cls.quarantine}
    assert quarantined == {"node_replacement", "gpu_reset"}
    # Only critical classes take a node out of service.
    assert all(xids.classes[name].severity == "critical" for name in quarantined)
