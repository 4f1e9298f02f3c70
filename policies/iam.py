"""IAM: no wildcard S3 data access, no administrator policies, no open trust policies."""

from __future__ import annotations

from typing import Any

from pulumi_policy import ResourceValidationArgs

from policies.props import Report, get, items, statements, string_set

ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
POLICY = "aws:iam/policy:Policy"
USER_POLICY = "aws:iam/userPolicy:UserPolicy"
GROUP_POLICY = "aws:iam/groupPolicy:GroupPolicy"
ROLE_POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
POLICY_ATTACHMENT = "aws:iam/policyAttachment:PolicyAttachment"
ROLE_POLICY_ATTACHMENTS_EXCLUSIVE = (
    "aws:iam/rolePolicyAttachmentsExclusive:RolePolicyAttachmentsExclusive"
)
BROAD_POLICIES = ("AdministratorAccess", "PowerUserAccess", "IAMFullAccess")
_ALL_BUCKETS = {"*", "arn:aws:s3:::*", "arn:aws:s3:::*/*"}


def _policy_documents(args: ResourceValidationArgs) -> list[Any]:
    if args.resource_type in (ROLE_POLICY, POLICY, USER_POLICY, GROUP_POLICY):
        return [get(args.props, "policy")]
    if args.resource_type == ROLE:
        return [get(p, "policy") for p in items(get(args.props, "inlinePolicies"))]
    return []


def _s3_wildcards(statement: Any) -> list[str]:
    if statement.get("Effect", "Allow") != "Allow":
        return []
    problems = []
    if "NotAction" in statement:
        problems.append("Allow with NotAction")
    if "NotResource" in statement:
        problems.append("Allow with NotResource")
    actions = string_set(statement.get("Action"))
    wild = sorted(a for a in actions if a == "*" or (a.lower().startswith("s3:") and "*" in a))
    if wild:
        problems.append(f"actions {', '.join(wild)}")
    touches_s3 = any(a == "*" or a.lower().startswith("s3:") for a in actions)
    resources = string_set(statement.get("Resource"))
    if touches_s3 and resources & _ALL_BUCKETS:
        problems.append(f"resource {', '.join(sorted(resources & _ALL_BUCKETS))}")
    return problems


def iam_no_wildcard_s3(args: ResourceValidationArgs, report: Report) -> None:
    """Policies name S3 actions and buckets explicitly: no `s3:*`, `*`, or every bucket."""
    for document in _policy_documents(args):
        if document is None:
            continue
        for i, statement in enumerate(statements(document)):
            problems = _s3_wildcards(statement)
            if problems:
                sid = statement.get("Sid") or f"statement {i}"
                report(f"{sid} allows {'; '.join(problems)}: name the actions and buckets")


def _attached_arns(args: ResourceValidationArgs) -> list[str]:
    if args.resource_type in (ROLE_POLICY_ATTACHMENT, POLICY_ATTACHMENT):
        return [a for a in items(get(args.props, "policyArn")) if isinstance(a, str)]
    if args.resource_type == ROLE:
        return [a for a in items(get(args.props, "managedPolicyArns")) if isinstance(a, str)]
    if args.resource_type == ROLE_POLICY_ATTACHMENTS_EXCLUSIVE:
        return [a for a in items(get(args.props, "policyArns")) if isinstance(a, str)]
    return []


def iam_no_admin_policies(args: ResourceValidationArgs, report: Report) -> None:
    """Roles never get AdministratorAccess, PowerUserAccess or IAMFullAccess."""
    for arn in _attached_arns(args):
        if arn.rsplit("/", 1)[-1] in BROAD_POLICIES and ":iam::aws:policy/" in arn:
            report(f"attaches {arn}: grant the actions the workload needs instead")


def iam_trust_scoped(args: ResourceValidationArgs, report: Report) -> None:
    """A role's trust policy never lets any principal assume it without a condition."""
    if args.resource_type != ROLE:
        return
    for statement in statements(get(args.props, "assumeRolePolicy")):
        if statement.get("Effect", "Allow") != "Allow" or statement.get("Condition"):
            continue
        principal = statement.get("Principal")
        if principal == "*" or (
            isinstance(principal, dict) and "*" in string_set(principal.get("AWS"))
        ):
            report("the trust policy lets any AWS principal assume the role")
