"""Trust policies shared by the components' IAM roles."""

from __future__ import annotations

import json

POD_IDENTITY = "pods.eks.amazonaws.com"
"""EKS Pod Identity assumes roles as this service, and tags the session."""


def service_trust(service: str, *, tag_session: bool = False) -> str:
    """A trust policy that lets one AWS service assume the role (and tag its session)."""
    actions = ["sts:AssumeRole", "sts:TagSession"] if tag_session else "sts:AssumeRole"
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": service}, "Action": actions}
            ],
        }
    )


def pod_identity_trust() -> str:
    """The trust policy of a role handed to pods through EKS Pod Identity."""
    return service_trust(POD_IDENTITY, tag_session=True)
