"""IAM rules."""

from __future__ import annotations

import json

import pytest

from tests.policies.conftest import add, hits, inputs, names

IAM_RULES = ["iam-no-wildcard-s3", "iam-no-admin-policies", "iam-trust-scoped"]


@pytest.mark.parametrize("stack", ["pretrain", "finetune", "inference"])
@pytest.mark.parametrize("rule", IAM_RULES)
def test_iam_rule_is_quiet_on_the_stacks(plan, stack: str, rule: str) -> None:
    assert hits(plan(stack), rule) == []


def _statements(policy: dict) -> list[dict]:
    return json.loads(policy["policy"])["Statement"]


@pytest.mark.parametrize(
    "change",
    [
        {"Action": "s3:*"},
        {"Action": ["s3:Get*"]},
        {"Action": "*"},
        {"Resource": "*"},
        {"Resource": "arn:aws:s3:::*"},
    ],
)
def test_no_wildcard_s3_fires_on_wildcards(plan, change: dict) -> None:
    p = plan()
    policy = inputs(p, "storage-replication", "aws:iam/rolePolicy:RolePolicy")
    statements = _statements(policy)
    statements[1].update(change)
    policy["policy"] = json.dumps({"Version": "2012-10-17", "Statement": statements})
    assert names(hits(p, "iam-no-wildcard-s3")) == {"storage-replication"}


def test_no_wildcard_s3_allows_kms_on_any_key_through_s3(plan) -> None:
    p = plan("inference")
    policy = inputs(p, "volumes-s3-csi-read")
    assert any(s["Resource"] == "*" for s in _statements(policy))
    assert hits(p, "iam-no-wildcard-s3") == []


def test_no_wildcard_s3_checks_inline_role_policies(plan) -> None:
    p = plan()
    role = inputs(p, "cluster-node", "aws:iam/role:Role")
    role["inlinePolicies"] = [
        {
            "name": "x",
            "policy": json.dumps(
                {"Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
            ),
        }
    ]
    assert names(hits(p, "iam-no-wildcard-s3")) == {"cluster-node"}


@pytest.mark.parametrize("policy", ["AdministratorAccess", "PowerUserAccess", "IAMFullAccess"])
def test_no_admin_policies_fires_on_broad_managed_policies(plan, policy: str) -> None:
    p = plan()
    attachment = inputs(p, "cluster-node-ssm", "aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    attachment["policyArn"] = f"arn:aws:iam::aws:policy/{policy}"
    assert names(hits(p, "iam-no-admin-policies")) == {"cluster-node-ssm"}


def test_no_admin_policies_checks_managed_policy_arns_of_a_role(plan) -> None:
    p = plan()
    add(
        p,
        "aws:iam/role:Role",
        "workload",
        {"managedPolicyArns": ["arn:aws:iam::aws:policy/AdministratorAccess"]},
    )
    assert names(hits(p, "iam-no-admin-policies")) == {"workload"}


def test_trust_scoped_fires_on_any_principal(plan) -> None:
    p = plan()
    role = inputs(p, "cluster-node", "aws:iam/role:Role")
    role["assumeRolePolicy"] = json.dumps(
        {"Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]}
    )
    assert names(hits(p, "iam-trust-scoped")) == {"cluster-node"}
