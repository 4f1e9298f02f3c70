"""EKS control-plane rules."""

from __future__ import annotations

import pytest

from tests.policies.conftest import hits, inputs, names

EKS_RULES = [
    "eks-audit-logs",
    "eks-secrets-encryption",
    "eks-endpoint-restricted",
    "eks-supported-version",
    "eks-private-endpoint",
    "eks-standard-support",
]


@pytest.mark.parametrize("stack", ["pretrain", "finetune", "inference"])
@pytest.mark.parametrize("rule", EKS_RULES)
def test_eks_rule_is_quiet_on_the_stacks(plan, stack: str, rule: str) -> None:
    assert hits(plan(stack), rule) == []


def _cluster(p: dict) -> dict:
    return inputs(p, "cluster-eks")


def test_audit_logs_fire_without_audit(plan) -> None:
    p = plan()
    _cluster(p)["enabledClusterLogTypes"] = ["api"]
    assert names(hits(p, "eks-audit-logs")) == {"cluster-eks"}


def test_secrets_encryption_fires_without_config(plan) -> None:
    p = plan()
    del _cluster(p)["encryptionConfig"]
    assert names(hits(p, "eks-secrets-encryption")) == {"cluster-eks"}


@pytest.mark.parametrize(
    ("vpc", "fires"),
    [
        ({"endpointPublicAccess": True, "publicAccessCidrs": ["203.0.113.0/24"]}, False),
        ({"endpointPublicAccess": True, "publicAccessCidrs": ["0.0.0.0/0"]}, True),
        ({"endpointPublicAccess": True}, True),
        ({}, True),  # EKS defaults to a public endpoint open to 0.0.0.0/0
    ],
)
def test_endpoint_restricted(plan, vpc: dict, fires: bool) -> None:
    p = plan()
    config = _cluster(p)["vpcConfig"]
    config.pop("endpointPublicAccess")
    config.update(vpc)
    assert bool(hits(p, "eks-endpoint-restricted")) is fires


def test_supported_version_fires_on_an_old_version(plan) -> None:
    p = plan()
    _cluster(p)["version"] = "1.21"
    found = hits(p, "eks-supported-version")
    assert names(found) == {"cluster-eks"} and "1.21" in found[0].message


def test_private_endpoint_fires_when_off(plan) -> None:
    p = plan()
    _cluster(p)["vpcConfig"]["endpointPrivateAccess"] = False
    assert [v.level for v in hits(p, "eks-private-endpoint")] == ["advisory"]


def test_standard_support_fires_on_extended(plan) -> None:
    p = plan()
    _cluster(p)["upgradePolicy"]["supportType"] = "EXTENDED"
    assert names(hits(p, "eks-standard-support")) == {"cluster-eks"}
