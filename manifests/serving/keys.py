"""The gateway's keys outside Kubernetes: AWS Secrets Manager, mounted by the Secrets Store
CSI driver.

Why: a Kubernetes Secret in the serving namespace is readable (and patchable) by every role
that may read Secrets there, the tenant's own `tenant-edit` included, and it held every
client's key. Here each model's keyed listeners (`manifests.serving.gateway.listeners_file`)
are the value of one Secrets Manager secret, encrypted with the stack's KMS key where it
has one. The Secrets Store CSI driver (kubernetes-sigs) with its AWS provider mounts that
value into the gateway container as a file on a tmpfs: the driver runs with rotation on and
writes the file itself (the provider's `driverWritesSecrets`), atomically, and no
`secretObjects` are declared, so no Kubernetes Secret is ever made from it. The provider
authenticates as the pod's service account (`MODEL_SERVER_SA`) through EKS Pod Identity
(`usePodIdentity: "true"`), whose role may read only these secrets (`reader_policy`).

On rotation (a client's key changed in stack config, then `pulumi up`): the model's secret
gets a new version; the driver's rotation poll (`ROTATION_POLL`) sees it (the provider's
DescribeSecret), rewrites the file by a symlink swap, and Envoy, which watches the
directory, replaces the keyed listeners in place: new connections see the new keys within
one poll, streams in flight finish on the old listener (Envoy drains it), and no pod
restarts. The old key stops working on each pod as that pod's file is swapped, so a client
moves to its new key within the poll interval; a client that needs an overlap gets a second
client name for the new key first.

What remains: whoever may create pods in the serving namespace may run one as
`MODEL_SERVER_SA` and mount these files. The Kubernetes API hands out no key, but the
namespace's own people (`tenant-edit`) still can; closing that is tenancy's (no pod creation
in `serving`, or an admission rule that keeps the account to the model servers).

The SecretProviderClass is a custom resource: typed here (extra fields refused, so a
`secretObjects` cannot slip in) and rendered to the dict `CustomResource` takes; the tests
check it against the v1 CRD of the pinned driver chart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final, Literal

import pulumi
import yaml
from pulumi_kubernetes.core.v1 import (
    CSIVolumeSourceArgs,
    ServiceAccountInitArgs,
    VolumeArgs,
    VolumeMountArgs,
)
from pulumi_kubernetes.meta.v1 import ObjectMetaArgs
from pydantic import BaseModel, ConfigDict, Field

from manifests.serving import NAMESPACE
from manifests.serving.gateway import KEYS_DIR, LISTENERS_FILE
from spec.labels import PART_OF

API_VERSION: Final = "secrets-store.csi.x-k8s.io/v1"
CSI_DRIVER: Final = "secrets-store.csi.k8s.io"
"""The CSIDriver the kubernetes-sigs chart registers."""
POD_IDENTITY_AUDIENCE: Final = "pods.eks.amazonaws.com"
"""The audience of the token the driver requests for the provider (EKS Pod Identity's)."""
ROTATION_POLL: Final = "2m"
"""How often the driver re-reads every mounted secret (the chart's default, said here)."""
MODEL_SERVER_SA: Final = "model-server"
"""The model pods' service account: the only one whose role reads the gateway's keys."""
VOLUME: Final = "gateway-keys"


def secret_name(cluster_name: str, model: str) -> str:
    """The model's secret in Secrets Manager (one per model: a pod mounts its model's)."""
    return f"{cluster_name}/serving/{model}/gateway"


def provider_class_name(model: str) -> str:
    return f"{model}-gateway-keys"


class _Obj(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Metadata(_Obj):
    name: str
    namespace: str
    labels: dict[str, str] = Field(default_factory=dict)


class AwsSecretObject(_Obj):
    """One entry of the AWS provider's `objects` (its README, at chart 3.1.1)."""

    object_name: str = Field(alias="objectName", min_length=1)
    """The secret's name or ARN (the SecretId of GetSecretValue)."""
    object_type: Literal["secretsmanager"] = Field("secretsmanager", alias="objectType")
    object_alias: str = Field(alias="objectAlias", pattern=r"^[A-Za-z0-9._-]+$")
    """The file name under the mount."""
    file_permission: str = Field("0444", alias="filePermission", pattern=r"^0[0-7]{3}$")


class AwsParameters(_Obj):
    """The AWS provider's parameters, each a string in the SecretProviderClass."""

    objects: list[AwsSecretObject] = Field(min_length=1)
    region: str = Field(min_length=1)
    """Set, not looked up: the provider would read the node's region label on every mount."""
    use_pod_identity: bool = True

    def rendered(self) -> dict[str, str]:
        objects = [o.model_dump(by_alias=True) for o in self.objects]
        return {
            "objects": yaml.safe_dump(objects, sort_keys=False),
            "region": self.region,
            "usePodIdentity": "true" if self.use_pod_identity else "false",
        }


class SecretProviderClassSpec(_Obj):
    provider: Literal["aws"] = "aws"
    parameters: dict[str, str]
    # No `secretObjects`: the files are never synced into a Kubernetes Secret.


class SecretProviderClass(_Obj):
    api_version: Literal["secrets-store.csi.x-k8s.io/v1"] = Field(API_VERSION, alias="apiVersion")
    kind: Literal["SecretProviderClass"] = "SecretProviderClass"
    metadata: Metadata
    spec: SecretProviderClassSpec

    def manifest(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


def secret_provider_class(
    model: str, secret: str, region: str, labels: dict[str, str], namespace: str = NAMESPACE
) -> SecretProviderClass:
    """What the gateway of `model` mounts: its secret `secret`, as LISTENERS_FILE, read-only
    to all of the pod's users (the containers run as one uid, and only the gateway mounts
    it)."""
    params = AwsParameters(
        objects=[AwsSecretObject(object_name=secret, object_alias=LISTENERS_FILE)],
        region=region,
    )
    return SecretProviderClass(
        metadata=Metadata(name=provider_class_name(model), namespace=namespace, labels=labels),
        spec=SecretProviderClassSpec(parameters=params.rendered()),
    )


def keys_volume(model: str) -> VolumeArgs:
    """The pod's inline CSI volume of its model's keys (fails the pod's start, and so stays
    closed, when the secret cannot be read)."""
    return VolumeArgs(
        name=VOLUME,
        csi=CSIVolumeSourceArgs(
            driver=CSI_DRIVER,
            read_only=True,
            volume_attributes={"secretProviderClass": provider_class_name(model)},
        ),
    )


def keys_mount() -> VolumeMountArgs:
    return VolumeMountArgs(name=VOLUME, mount_path=KEYS_DIR, read_only=True)


def service_account_args(namespace: pulumi.Input[str]) -> ServiceAccountInitArgs:
    """The model pods' account: no API token (they call no API), Pod Identity's role."""
    return ServiceAccountInitArgs(
        metadata=ObjectMetaArgs(name=MODEL_SERVER_SA, namespace=namespace, labels=dict(PART_OF)),
        automount_service_account_token=False,
    )


def reader_policy(secret_arns: Sequence[str], kms_key_arn: str | None, region: str) -> str:
    """Read these secrets (what the provider calls: DescribeSecret to see a new version,
    GetSecretValue to fetch it) and decrypt them with the stack's key, only through Secrets
    Manager."""
    statements: list[dict[str, Any]] = [
        {
            "Sid": "ReadGatewayKeys",
            "Effect": "Allow",
            "Action": ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
            "Resource": sorted(secret_arns),
        }
    ]
    if kms_key_arn:
        statements.append(
            {
                "Sid": "DecryptThroughSecretsManager",
                "Effect": "Allow",
                "Action": "kms:Decrypt",
                "Resource": kms_key_arn,
                "Condition": {
                    "StringEquals": {"kms:ViaService": f"secretsmanager.{region}.amazonaws.com"}
                },
            }
        )
    return json.dumps({"Version": "2012-10-17", "Statement": statements})
