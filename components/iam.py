"""Trust policies shared by the components' IAM roles, and the Pod Identity role they build."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_aws as aws

POD_IDENTITY = "pods.eks.amazonaws.com"
"""EKS Pod Identity assumes roles as this service, and tags the session."""


def policy_document(*statements: dict[str, Any]) -> str:
    """An IAM policy document (JSON) holding `statements`."""
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def allow(sid: str, actions: list[str], resource: str | list[str]) -> dict[str, Any]:
    """One Allow statement of an identity policy."""
    return {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resource}


def service_trust(service: str, *, tag_session: bool = False) -> str:
    """A trust policy that lets one AWS service assume the role (and tag its session)."""
    actions = ["sts:AssumeRole", "sts:TagSession"] if tag_session else "sts:AssumeRole"
    return policy_document(
        {"Effect": "Allow", "Principal": {"Service": service}, "Action": actions}
    )


def pod_identity_trust() -> str:
    """The trust policy of a role handed to pods through EKS Pod Identity."""
    return service_trust(POD_IDENTITY, tag_session=True)


def pod_identity_role(
    name: str,
    *,
    parent: pulumi.Resource,
    description: str,
    policy: pulumi.Input[str],
    cluster_name: pulumi.Input[str],
    namespace: str,
    service_account: str,
    policy_name: str | None = None,
) -> tuple[aws.iam.Role, aws.eks.PodIdentityAssociation]:
    """A role with one inline policy that pods of `namespace/service_account` assume
    through EKS Pod Identity: the role, its policy (`policy_name`, default `name`) and
    the association, all children of `parent`.

    Pod Identity injects credentials only into pods created after their association
    exists, so whatever runs those pods should wait on the association returned.
    """
    child = pulumi.ResourceOptions(parent=parent)
    role = aws.iam.Role(
        name, assume_role_policy=pod_identity_trust(), description=description, opts=child
    )
    aws.iam.RolePolicy(policy_name or name, role=role.name, policy=policy, opts=child)
    association = aws.eks.PodIdentityAssociation(
        name,
        cluster_name=cluster_name,
        # Plain names: an association needs neither object to exist.
        namespace=namespace,
        service_account=service_account,
        role_arn=role.arn,
        opts=child,
    )
    return role, association


def addon_role(
    name: str,
    *,
    parent: pulumi.Resource,
    description: str,
    managed_policy_arn: str | None = None,
    policy: pulumi.Input[str] | None = None,
    policy_name: str | None = None,
) -> aws.iam.Role:
    """The role an EKS add-on's service account takes through Pod Identity (the add-on
    holds the association), with one policy: a managed one attached (`name`), or an inline
    one (`policy_name`, default `name`)."""
    child = pulumi.ResourceOptions(parent=parent)
    role = aws.iam.Role(
        name, assume_role_policy=pod_identity_trust(), description=description, opts=child
    )
    if managed_policy_arn is not None:
        aws.iam.RolePolicyAttachment(
            name, role=role.name, policy_arn=managed_policy_arn, opts=child
        )
    if policy is not None:
        aws.iam.RolePolicy(policy_name or name, role=role.name, policy=policy, opts=child)
    return role
