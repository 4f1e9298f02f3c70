"""StorageVolumes: the Kubernetes side of storage, CSI drivers and the volumes workloads claim.

Owns:
- the workload namespaces that get a volume and belong to no tenant, with Pod
  Security labels, each with a `ResourceQuota` and a `LimitRange` (container
  defaults) sized by `StorageVolumesArgs.namespace_quota`; a tenant's namespace
  is the tenancy component's (`tenant_namespaces`), and only the volumes go in it;
- FSx for Lustre: the `aws-fsx-csi-driver` Helm chart (pinned in the
  catalog) and, per namespace, a static PersistentVolume of the file system
  pre-bound to a `fsx-lustre` claim;
- model weights: the `aws-mountpoint-s3-csi-driver` EKS add-on (pinned per
  Kubernetes version) with a read-only IAM role through EKS Pod Identity and,
  per namespace, a static read-only PersistentVolume of the models prefix
  pre-bound to a `model-weights` claim.

Static provisioning only. The FSx driver never calls the FSx API for a
static volume (it only mounts), so it runs without an IAM role: dynamic
provisioning could not create the file system's data repository
associations anyway, so the file system itself is made by the storage
component. Mountpoint's credentials come from the add-on's Pod Identity
association: the driver role may list the bucket under the prefix and read
its objects, nothing else. For a bucket encrypted with SSE-KMS, reading needs
kms:Decrypt as well; it is granted only through S3 in the bucket's region
(`kms:ViaService`), and the key policy must still allow the role. Objects
under SSE-S3 need no KMS rights at all.

Both drivers' node DaemonSets must run on the GPU nodes, whose taints keep
everything else off: the FSx chart gets tolerations for the accelerator
taints of the catalog; the Mountpoint add-on's node DaemonSet and the
Mountpoint pods it starts tolerate every taint by default.

The component expects both providers through `opts.providers`; its children
inherit them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.cluster import managed_addon
from components.helm import pinned_release
from components.iam import addon_role
from manifests import volumes
from manifests.volumes import NamespaceQuota
from spec.catalog import catalog

FSX_CHART = "aws-fsx-csi-driver"
S3_ADDON = "aws-mountpoint-s3-csi-driver"
S3_DRIVER_SERVICE_ACCOUNT = "s3-csi-driver-sa"
"""The add-on's node service account; its Pod Identity association carries the S3 role."""


@dataclass(frozen=True, kw_only=True)
class LustreVolume:
    file_system_id: pulumi.Input[str]
    """`fs-...`: the volume handle of every Lustre PV."""
    dns_name: pulumi.Input[str]
    mount_name: pulumi.Input[str]
    capacity_gib: int
    namespaces: list[str]
    """Namespaces that get a `fsx-lustre` claim."""
    subdirectories: dict[str, str] = field(default_factory=dict)
    """Namespace -> the directory its volume mounts (`/tenants/<name>`: a tenant sees only its
    own); a namespace not named mounts the whole file system."""


@dataclass(frozen=True, kw_only=True)
class ModelWeightsVolume:
    bucket_name: pulumi.Input[str]
    bucket_arn: pulumi.Input[str]
    prefix: str
    """Key prefix mounted ("" for the whole bucket)."""
    region: str
    """The bucket's region."""
    namespaces: list[str]
    """Namespaces that get a read-only `model-weights` claim."""


@dataclass(frozen=True, kw_only=True)
class StorageVolumesArgs:
    cluster_name: pulumi.Input[str]
    kubernetes_version: str
    """Picks the add-on pins, e.g. "1.35"."""
    lustre: LustreVolume | None
    """None: no FSx volumes and no FSx CSI driver."""
    model_weights: ModelWeightsVolume | None
    """None: no Mountpoint driver and no model-weights volumes."""
    wait_for: list[pulumi.Resource]
    """What the driver pods need first (the node groups they run on)."""
    namespace_quota: NamespaceQuota = field(default_factory=NamespaceQuota)
    """Quota and container defaults of the namespaces this component creates."""
    tenant_namespaces: dict[str, pulumi.Input[str]] = field(default_factory=dict)
    """Namespaces owned by the tenancy component (name -> its name output): volumes go into
    them, but their namespace, quota and limits are the tenancy's. One owner per namespace."""
    fsx_driver: bool | None = None
    """Install the FSx CSI driver (None: where there is a Lustre volume). A shared stack
    installs it for its team stacks; a team stack (`name_prefix` set) never does."""
    name_prefix: str = ""
    """On a shared cluster, the team stack's `TEAM-`: the namespaces it creates and its
    PersistentVolumes (cluster-scoped) are named after it."""


def fsx_driver_values() -> dict[str, Any]:
    """Helm values of the FSx CSI chart: node plugin on accelerated nodes, two controllers."""
    accelerator_taints = sorted({k.taint_key for k in catalog().accelerator_kinds.values()})
    return {
        "controller": {"replicaCount": 2},
        "node": {
            # The chart's default tolerates every taint; tolerate exactly the
            # accelerator taints instead (plus, like the chart, a 5-minute
            # grace on NoExecute ones such as not-ready/unreachable).
            "tolerateAllTaints": False,
            "tolerations": [
                *(
                    {"key": key, "operator": "Exists", "effect": "NoSchedule"}
                    for key in accelerator_taints
                ),
                {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
        },
    }


def s3_read_policy(bucket_arn: str, prefix: str, region: str) -> dict[str, Any]:
    """Read-only access to `prefix` of one bucket: list under it, get its objects."""
    prefix = volumes.mount_prefix(prefix)
    listing: dict[str, Any] = {
        "Sid": "ListModels",
        "Effect": "Allow",
        "Action": "s3:ListBucket",
        "Resource": bucket_arn,
    }
    if prefix:
        listing["Condition"] = {"StringLike": {"s3:prefix": [f"{prefix}*"]}}
    return {
        "Version": "2012-10-17",
        "Statement": [
            listing,
            {
                "Sid": "ReadModels",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": f"{bucket_arn}/{prefix}*",
            },
            {
                # SSE-KMS objects only; usable only through S3 in this region.
                "Sid": "DecryptThroughS3",
                "Effect": "Allow",
                "Action": "kms:Decrypt",
                "Resource": "*",
                "Condition": {"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}},
            },
        ],
    }


def _s3_addon_version(kubernetes_version: str) -> str:
    pins = catalog().storage_addons.get(kubernetes_version, {})
    if S3_ADDON not in pins:
        pinned = ", ".join(sorted(catalog().storage_addons)) or "none"
        raise ValueError(
            f"catalog.yaml pins no {S3_ADDON} for Kubernetes {kubernetes_version} under "
            f"storage_addons (pinned for: {pinned})"
        )
    return pins[S3_ADDON].version


class StorageVolumes(pulumi.ComponentResource):
    namespaces: list[str]
    lustre_claim: str | None
    """Claim name of the Lustre volume in each of its namespaces, or None."""
    model_weights_claim: str | None
    """Claim name of the model weights in each of their namespaces, or None."""
    s3_driver_role_arn: pulumi.Output[str] | None

    def __init__(
        self, name: str, args: StorageVolumesArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("llmp:storage:StorageVolumes", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        lustre, weights = args.lustre, args.model_weights
        # Check the pins before anything is registered.
        s3_pin = _s3_addon_version(args.kubernetes_version) if weights else ""

        wanted = [*(lustre.namespaces if lustre else []), *(weights.namespaces if weights else [])]
        prefix = args.name_prefix
        owned = {
            ns: k8s.core.v1.Namespace(
                f"{name}-ns-{ns}", volumes.namespace(f"{prefix}{ns}"), opts=child
            )
            for ns in dict.fromkeys(wanted)
            if ns not in args.tenant_namespaces
        }
        # Every namespace by its name output: objects in it are created after it, deleted before.
        namespaces: dict[str, pulumi.Input[str]] = {
            ns: args.tenant_namespaces[ns]
            if ns in args.tenant_namespaces
            else owned[ns].metadata.name
            for ns in dict.fromkeys(wanted)
        }
        accelerators = sorted({k.resource for k in catalog().accelerator_kinds.values()})
        for ns, namespace in owned.items():
            k8s.core.v1.ResourceQuota(
                f"{name}-quota-{ns}",
                volumes.resource_quota(
                    namespace=namespace.metadata.name,
                    quota=args.namespace_quota,
                    accelerator_resources=accelerators,
                ),
                opts=child,
            )
            k8s.core.v1.LimitRange(
                f"{name}-limits-{ns}",
                volumes.limit_range(namespace=namespace.metadata.name, quota=args.namespace_quota),
                opts=child,
            )

        fsx_driver = lustre is not None if args.fsx_driver is None else args.fsx_driver
        if fsx_driver and not prefix:
            pinned_release(
                f"{name}-fsx-csi",
                FSX_CHART,
                catalog().charts[FSX_CHART],
                namespace="kube-system",
                values=fsx_driver_values(),
                opts=pulumi.ResourceOptions(parent=self, depends_on=args.wait_for),
            )
        if lustre is not None:
            for ns in dict.fromkeys(lustre.namespaces):
                pv = k8s.core.v1.PersistentVolume(
                    f"{name}-fsx-pv-{ns}",
                    volumes.lustre_persistent_volume(
                        namespace=f"{prefix}{ns}",
                        file_system_id=lustre.file_system_id,
                        dns_name=lustre.dns_name,
                        mount_name=lustre.mount_name,
                        capacity_gib=lustre.capacity_gib,
                        subdirectory=lustre.subdirectories.get(ns, ""),
                    ),
                    opts=child,
                )
                k8s.core.v1.PersistentVolumeClaim(
                    f"{name}-fsx-pvc-{ns}",
                    volumes.lustre_claim(
                        namespace=namespaces[ns],
                        volume_name=pv.metadata.name,
                        capacity_gib=lustre.capacity_gib,
                    ),
                    opts=child,
                )

        self.s3_driver_role_arn = None
        if weights is not None:
            prefix, region = weights.prefix, weights.region
            role = addon_role(
                f"{name}-s3-csi",
                parent=self,
                description="Mountpoint for S3 CSI driver (read-only model weights), Pod Identity",
                policy=pulumi.Output.from_input(weights.bucket_arn).apply(
                    lambda arn: json.dumps(s3_read_policy(arn, prefix, region))
                ),
                policy_name=f"{name}-s3-csi-read",
            )
            managed_addon(
                f"{name}-{S3_ADDON}",
                S3_ADDON,
                s3_pin,
                parent=self,
                cluster_name=args.cluster_name,
                role=(role.arn, S3_DRIVER_SERVICE_ACCOUNT),
                depends_on=args.wait_for,
            )
            for ns in dict.fromkeys(weights.namespaces):
                pv = k8s.core.v1.PersistentVolume(
                    f"{name}-s3-pv-{ns}",
                    volumes.s3_persistent_volume(
                        namespace=ns,
                        bucket_name=weights.bucket_name,
                        prefix=prefix,
                        region=region,
                    ),
                    opts=child,
                )
                k8s.core.v1.PersistentVolumeClaim(
                    f"{name}-s3-pvc-{ns}",
                    volumes.s3_claim(namespace=namespaces[ns], volume_name=pv.metadata.name),
                    opts=child,
                )
            self.s3_driver_role_arn = role.arn

        self.namespaces = list(owned)
        self.lustre_claim = volumes.LUSTRE_CLAIM if lustre else None
        self.model_weights_claim = volumes.MODEL_WEIGHTS_CLAIM if weights else None
        self.register_outputs(
            {
                "namespaces": self.namespaces,
                "lustre_claim": self.lustre_claim,
                "model_weights_claim": self.model_weights_claim,
                "s3_driver_role_arn": self.s3_driver_role_arn,
            }
        )
