"""Typed Kubernetes objects for the platform's shared volumes.

Two kinds of volume, both statically provisioned:

- FSx for Lustre: the training file system, read-write from every pod of a
  namespace (`ReadWriteMany`), mounted with `flock` so checkpoint writers can
  lock files. The file system is created by the storage component with its
  data repository associations; the CSI driver only mounts it.
- Model weights in S3 through the Mountpoint for Amazon S3 CSI driver:
  read-only (`ReadOnlyMany`), one prefix of the models bucket.

A PersistentVolume binds to exactly one PersistentVolumeClaim, so every
namespace gets its own PV (named after the namespace) pre-bound to that
namespace's claim through `claimRef`, and the claim names its PV in
`volumeName`. `storageClassName: ""` keeps the default StorageClass's
provisioner away from both. The reclaim policy is `Retain`: deleting a claim
never touches the data.

Pure functions: they return the `*Args` that the component hands to
`pulumi_kubernetes`, and the tests read them without a Pulumi runtime.
"""

from __future__ import annotations

import pulumi
from pulumi_kubernetes.core.v1 import (
    CSIPersistentVolumeSourceArgs,
    NamespaceInitArgs,
    ObjectReferenceArgs,
    PersistentVolumeClaimInitArgs,
    PersistentVolumeClaimSpecArgs,
    PersistentVolumeInitArgs,
    PersistentVolumeSpecArgs,
    VolumeResourceRequirementsArgs,
)
from pulumi_kubernetes.meta.v1 import ObjectMetaArgs

PART_OF = {"app.kubernetes.io/part-of": "llm-platform"}

LUSTRE_DRIVER = "fsx.csi.aws.com"
LUSTRE_CLAIM = "fsx-lustre"
"""The claim in every Lustre namespace (`persistentVolumeClaim.claimName: fsx-lustre`)."""

S3_DRIVER = "s3.csi.aws.com"
MODEL_WEIGHTS_CLAIM = "model-weights"
"""The read-only claim of the model weights in every serving namespace."""
S3_NOMINAL_CAPACITY = "1Ti"
"""Ignored by the Mountpoint driver (S3 has no size), required by the PV/PVC API."""

POD_SECURITY = {
    # Baseline is enforced: GPU workloads need no privileges, but some images
    # still run as root, which `restricted` would refuse. Restricted is warned
    # and audited so the gap stays visible.
    "pod-security.kubernetes.io/enforce": "baseline",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
}


def namespace(name: str) -> NamespaceInitArgs:
    """A workload namespace with Pod Security admission labels."""
    return NamespaceInitArgs(metadata=ObjectMetaArgs(name=name, labels={**PART_OF, **POD_SECURITY}))


def lustre_volume_name(namespace: str) -> str:
    return f"fsx-lustre-{namespace}"


def s3_volume_name(namespace: str) -> str:
    return f"s3-models-{namespace}"


def mount_prefix(prefix: str) -> str:
    """The prefix as Mountpoint takes it: no leading "/", ending in "/" ("" for all)."""
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


def lustre_persistent_volume(
    *,
    namespace: str,
    file_system_id: pulumi.Input[str],
    dns_name: pulumi.Input[str],
    mount_name: pulumi.Input[str],
    capacity_gib: int,
) -> PersistentVolumeInitArgs:
    """The static PV of the Lustre file system reserved for `namespace`'s claim."""
    return PersistentVolumeInitArgs(
        metadata=ObjectMetaArgs(name=lustre_volume_name(namespace), labels=PART_OF),
        spec=PersistentVolumeSpecArgs(
            capacity={"storage": f"{capacity_gib}Gi"},
            volume_mode="Filesystem",
            access_modes=["ReadWriteMany"],
            mount_options=["flock"],
            persistent_volume_reclaim_policy="Retain",
            storage_class_name="",
            claim_ref=ObjectReferenceArgs(namespace=namespace, name=LUSTRE_CLAIM),
            csi=CSIPersistentVolumeSourceArgs(
                driver=LUSTRE_DRIVER,
                # One file system, several PVs: the FSx driver keys its
                # operations on (volume handle, target path), so sharing the
                # handle across namespaces is safe.
                volume_handle=file_system_id,
                volume_attributes={"dnsname": dns_name, "mountname": mount_name},
            ),
        ),
    )


def lustre_claim(
    *, namespace: pulumi.Input[str], volume_name: pulumi.Input[str], capacity_gib: int
) -> PersistentVolumeClaimInitArgs:
    """The `fsx-lustre` claim in `namespace`, bound to its PV by name."""
    return PersistentVolumeClaimInitArgs(
        metadata=ObjectMetaArgs(name=LUSTRE_CLAIM, namespace=namespace, labels=PART_OF),
        spec=PersistentVolumeClaimSpecArgs(
            access_modes=["ReadWriteMany"],
            storage_class_name="",
            volume_name=volume_name,
            resources=VolumeResourceRequirementsArgs(requests={"storage": f"{capacity_gib}Gi"}),
        ),
    )


def s3_mount_options(*, prefix: str, region: str) -> list[str]:
    """Mountpoint flags: read-only, readable by non-root containers, one region and prefix."""
    options = ["read-only", "allow-other", f"region {region}"]
    if mount_prefix(prefix):
        options.append(f"prefix {mount_prefix(prefix)}")
    return options


def s3_persistent_volume(
    *, namespace: str, bucket_name: pulumi.Input[str], prefix: str, region: str
) -> PersistentVolumeInitArgs:
    """The static, read-only Mountpoint PV of the model weights for `namespace`'s claim."""
    name = s3_volume_name(namespace)
    return PersistentVolumeInitArgs(
        metadata=ObjectMetaArgs(name=name, labels=PART_OF),
        spec=PersistentVolumeSpecArgs(
            capacity={"storage": S3_NOMINAL_CAPACITY},
            volume_mode="Filesystem",
            access_modes=["ReadOnlyMany"],
            mount_options=s3_mount_options(prefix=prefix, region=region),
            persistent_volume_reclaim_policy="Retain",
            storage_class_name="",
            claim_ref=ObjectReferenceArgs(namespace=namespace, name=MODEL_WEIGHTS_CLAIM),
            csi=CSIPersistentVolumeSourceArgs(
                driver=S3_DRIVER,
                # Kubernetes processes a volume once per handle: a pod that
                # mounted two PVs with one handle would hang, so it is unique.
                volume_handle=name,
                volume_attributes={"bucketName": bucket_name},
            ),
        ),
    )


def s3_claim(
    *, namespace: pulumi.Input[str], volume_name: pulumi.Input[str]
) -> PersistentVolumeClaimInitArgs:
    """The read-only `model-weights` claim in `namespace`, bound to its PV by name."""
    return PersistentVolumeClaimInitArgs(
        metadata=ObjectMetaArgs(name=MODEL_WEIGHTS_CLAIM, namespace=namespace, labels=PART_OF),
        spec=PersistentVolumeClaimSpecArgs(
            access_modes=["ReadOnlyMany"],
            storage_class_name="",
            volume_name=volume_name,
            resources=VolumeResourceRequirementsArgs(requests={"storage": S3_NOMINAL_CAPACITY}),
        ),
    )
