"""parliament on every IAM policy document the program renders: nothing above LOW, or explained.

Linted: identity policies (`policy` of aws:iam/rolePolicy:RolePolicy) and
resource policies (`policy` of aws:s3/bucketPolicy:BucketPolicy and
aws:kms/keyPolicy:KeyPolicy; parliament reads a Principal element and lints
the rest of a resource policy like an identity policy), with parliament's
community auditors on.

Not linted: role trust policies (`assumeRolePolicy` of aws:iam/role:Role).
parliament has no notion of a trust policy: it reports every one as MALFORMED
for lacking a Resource element (test_parliament_cannot_lint_trust_policies
keeps that claim honest).

Mock ARNs: the synthesizer gives every AWS resource an ARN like
`arn:aws:mock:<region>:<account>:<type>/<name>`, which parliament rightly
refuses (RESOURCE_MISMATCH: `s3:GetObject` needs `arn:*:s3:::*/*`). Before
linting, `realistic_arns` rewrites each into the ARN format of its type,
keeping region, account and any `/suffix`: a bucket becomes
`arn:aws:s3:::<its bucket name in the plan>`, a key
`arn:aws:kms:<region>:<account>:key/<name>`, a role
`arn:aws:iam::<account>:role/<name>`. An unmapped type fails the test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import parliament
import pytest

from llmp.plan.synth import Plan
from tests.conftest import STACKS

POLICY_INPUTS = {
    "aws:iam/rolePolicy:RolePolicy": "policy",
    "aws:s3/bucketPolicy:BucketPolicy": "policy",
    "aws:kms/keyPolicy:KeyPolicy": "policy",
}
TRUST_POLICY = ("aws:iam/role:Role", "assumeRolePolicy")
SEVERITIES = ["LOW", "MEDIUM", "HIGH", "CRITICAL"]

# (resource type, resource name, parliament issue) -> why it stays.
ALLOWED: dict[tuple[str, str, str], str] = {
    (
        "aws:kms/keyPolicy:KeyPolicy",
        "monitoring-alerts-key-policy",
        "PERMISSIONS_MANAGEMENT_ACTIONS",
    ): (
        "Statement EnableIamPolicies of the alert topics' key: the same default key policy "
        "statement as the file system's key (`kms:*` for the account root, delegating the key "
        "to IAM policies)."
    ),
    (
        "aws:kms/keyPolicy:KeyPolicy",
        "lustre-key-policy",
        "PERMISSIONS_MANAGEMENT_ACTIONS",
    ): (
        "Statement EnableIamPolicies: `kms:*` for the account root is the default key policy "
        "statement AWS writes; it delegates the key to IAM policies, and without it the key "
        "becomes unmanageable."
    ),
    (
        "aws:iam/rolePolicy:RolePolicy",
        "addons-lbc",
        "UNKNOWN_CONDITION_FOR_ACTION",
    ): (
        "The AWS Load Balancer Controller's documented policy (upstream iam_policy.json at the "
        "pinned v3.5.0) lets it tag only what it creates, with the condition key "
        "`elasticloadbalancing:CreateAction` on elasticloadbalancing:AddTags; AWS added that "
        "key after parliament's bundled IAM definitions were generated."
    ),
}

_MOCK_ARN = re.compile(
    r"arn:aws:mock:(?P<region>[a-z0-9-]*):(?P<account>\d{12}):(?P<type>[a-z0-9]+)/"
)
_ARN_NAME = re.compile(r"(?P<name>[^\"/*,\]\s]+)")


def realistic_arns(document: str, plan: Plan) -> str:
    """`document` with every mock ARN rewritten in the real ARN format of its resource type."""
    bucket_names = {
        r.name: r.inputs.get("bucket", r.name)
        for r in plan.resources
        if r.type in ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
    }
    formats: dict[str, Callable[[str, str, str], str]] = {
        "bucket": lambda region, account, name: f"arn:aws:s3:::{bucket_names.get(name, name)}",
        "bucketv2": lambda region, account, name: f"arn:aws:s3:::{bucket_names.get(name, name)}",
        "key": lambda region, account, name: f"arn:aws:kms:{region}:{account}:key/{name}",
        "role": lambda region, account, name: f"arn:aws:iam::{account}:role/{name}",
        "loggroup": lambda region, account, name: (
            f"arn:aws:logs:{region}:{account}:log-group:{name}"
        ),
        "topic": lambda region, account, name: f"arn:aws:sns:{region}:{account}:{name}",
        # Secrets Manager appends six random characters to a secret's name.
        "secret": lambda region, account, name: (
            f"arn:aws:secretsmanager:{region}:{account}:secret:{name}-AbCdEf"
        ),
    }
    out, pos = [], 0
    for match in _MOCK_ARN.finditer(document):
        kind = match["type"]
        assert kind in formats, f"no realistic ARN format for mock type {kind!r}: add one"
        name = _ARN_NAME.match(document, match.end())
        assert name, document[match.start() : match.start() + 120]
        out += [
            document[pos : match.start()],
            formats[kind](match["region"], match["account"], name["name"]),
        ]
        pos = name.end()
    result = "".join([*out, document[pos:]])
    assert "arn:aws:mock:" not in result
    return result


def _findings(document: str) -> list[Any]:
    policy = parliament.analyze_policy_string(document, include_community_auditors=True)
    return [parliament.enhance_finding(f) for f in policy.findings]


@pytest.fixture(scope="module", autouse=True)
def community_auditors() -> None:
    # As `parliament --include-community-auditors` does: their issues join the config.
    from pathlib import Path

    override = Path(parliament.__file__).parent / "community_auditors" / "config_override.yaml"
    parliament.override_config(str(override))


def lint(plan: Plan) -> list[tuple[str, str, str, str, str]]:
    """(type, name, issue, severity, detail) of every finding on the plan's policy documents."""
    out = []
    for r in plan.resources:
        key = POLICY_INPUTS.get(r.type)
        if key is None:
            continue
        for f in _findings(realistic_arns(r.inputs[key], plan)):
            out.append((r.type, r.name, f.issue, f.severity, str(f.detail)))
    return out


@pytest.fixture(scope="module")
def findings(plans) -> dict[str, list[tuple[str, str, str, str, str]]]:
    return {stack: lint(plans(stack)) for stack in STACKS}


@pytest.mark.parametrize("stack", STACKS)
def test_no_finding_above_low_that_is_not_explained(findings, stack: str) -> None:
    unexplained = [
        f
        for f in findings[stack]
        if SEVERITIES.index(f[3]) > 0 and (f[0], f[1], f[2]) not in ALLOWED
    ]
    assert unexplained == []


def test_every_allowed_finding_still_occurs(findings) -> None:
    seen = {(f[0], f[1], f[2]) for stack in STACKS for f in findings[stack]}
    assert set(ALLOWED) <= seen, "drop the allow-list entries that no longer match"


@pytest.mark.parametrize("stack", STACKS)
def test_every_policy_document_is_linted(plans, stack: str) -> None:
    plan = plans(stack)
    documents = [r for r in plan.resources if r.type in POLICY_INPUTS]
    assert any(r.type == "aws:s3/bucketPolicy:BucketPolicy" for r in documents)
    for r in documents:
        assert isinstance(r.inputs[POLICY_INPUTS[r.type]], str), r.urn


def test_mock_arns_become_real_arn_formats(plans) -> None:
    plan = plans("pretrain")
    doc = (
        '{"Resource": ["arn:aws:mock:us-west-2:000000000000:bucket/storage-models-replica/*", '
        '"arn:aws:mock:us-east-1:000000000000:key/storage-kms"]}'
    )
    assert realistic_arns(doc, plan) == (
        '{"Resource": ["arn:aws:s3:::acme-llm-pretrain-models-us-west-2/*", '
        '"arn:aws:kms:us-east-1:000000000000:key/storage-kms"]}'
    )


def test_parliament_cannot_lint_trust_policies(plans) -> None:
    type_, key = TRUST_POLICY
    for stack in STACKS:
        for r in plans(stack).by_type(type_):
            issues = {f.issue for f in _findings(r.inputs[key])}
            assert issues == {"MALFORMED"}, (r.urn, issues)


def test_a_mismatched_resource_is_caught() -> None:
    statement = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bucket"}
    doc = json.dumps({"Version": "2012-10-17", "Statement": [statement]})
    assert "RESOURCE_MISMATCH" in {f.issue for f in _findings(doc)}
