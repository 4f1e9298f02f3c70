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

Every namespace also gets a `ResourceQuota` (accelerators, CPU, memory,
claims) and a `LimitRange` whose container defaults give every container
requests and limits: with a CPU or memory quota, Kubernetes refuses a pod
that declares none, so the defaults keep unconfigured sidecars admissible.

Pure functions: they return the `*Args` that the component hands to
`pulumi_kubernetes`, and the tests read them without a Pulumi runtime.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pulumi
from pulumi_kubernetes.core.v1 import (
    CSIPersistentVolumeSourceArgs,
    LimitRangeInitArgs,
    LimitRangeItemArgs,
    LimitRangeSpecArgs,
    NamespaceInitArgs,
    ObjectReferenceArgs,
    PersistentVolumeClaimInitArgs,
    PersistentVolumeClaimSpecArgs,
    PersistentVolumeInitArgs,
    PersistentVolumeSpecArgs,
    ResourceQuotaInitArgs,
    ResourceQuotaSpecArgs,
    VolumeResourceRequirementsArgs,
)
from pulumi_kubernetes.meta.v1 import ObjectMetaArgs

from spec.labels import PART_OF

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


NAMESPACE_QUOTA = "llmp-quota"
"""Name of the ResourceQuota in every workload namespace."""
NAMESPACE_LIMITS = "llmp-limits"
"""Name of the LimitRange in every workload namespace."""


@dataclass(frozen=True, kw_only=True)
class NamespaceQuota:
    """What one workload namespace may request, and the defaults of a container that says nothing.

    The defaults fit the largest stack (pretrain: 32 x p5.48xlarge, i.e. 256
    GPUs, 6,144 vCPUs, 64 TiB), so they cap nothing the node pools could
    run; per-tenant quotas replace them.
    """

    accelerators: int = 256
    """Hard cap of `requests.<resource>` for every accelerator resource (nvidia.com/gpu, ...)."""
    cpu: str = "8192"
    """Hard cap of `requests.cpu`."""
    memory: str = "64Ti"
    """Hard cap of `requests.memory`."""
    persistent_volume_claims: int = 32
    default_request_cpu: str = "250m"
    default_request_memory: str = "512Mi"
    default_limit_cpu: str = "2"
    default_limit_memory: str = "4Gi"


def resource_quota(
    *, namespace: pulumi.Input[str], quota: NamespaceQuota, accelerator_resources: Iterable[str]
) -> ResourceQuotaInitArgs:
    """The namespace's hard caps: accelerators, CPU and memory requests, claims."""
    hard = {f"requests.{r}": str(quota.accelerators) for r in sorted(set(accelerator_resources))}
    hard |= {
        "requests.cpu": quota.cpu,
        "requests.memory": quota.memory,
        "persistentvolumeclaims": str(quota.persistent_volume_claims),
    }
    return ResourceQuotaInitArgs(
        metadata=ObjectMetaArgs(name=NAMESPACE_QUOTA, namespace=namespace, labels=PART_OF),
        spec=ResourceQuotaSpecArgs(hard=hard),
    )


def limit_range(*, namespace: pulumi.Input[str], quota: NamespaceQuota) -> LimitRangeInitArgs:
    """Default requests and limits of a container that declares none."""
    return LimitRangeInitArgs(
        metadata=ObjectMetaArgs(name=NAMESPACE_LIMITS, namespace=namespace, labels=PART_OF),
        spec=LimitRangeSpecArgs(
            limits=[
                LimitRangeItemArgs(
                    type="Container",
                    default_request={
                        "cpu": quota.default_request_cpu,
                        "memory": quota.default_request_memory,
                    },
                    default={"cpu": quota.default_limit_cpu, "memory": quota.default_limit_memory},
                )
            ]
        ),
    )


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
    subdirectory: str = "",
) -> PersistentVolumeInitArgs:
    """The static PV of the Lustre file system reserved for `namespace`'s claim: the whole
    file system, or only `subdirectory` (e.g. /tenants/chat). The FSx CSI driver mounts
    `<dnsname>@tcp:/<mountname>`, so a mount name followed by the directory is a Lustre
    subdirectory mount (FSx for Lustre User Guide, "Mounting specific filesets"): the pod
    cannot reach above it."""
    if subdirectory and (not subdirectory.startswith("/") or ".." in subdirectory.split("/")):
        raise ValueError(f"subdirectory {subdirectory!r}: an absolute path without '..'")
    mount = (
        pulumi.Output.concat(mount_name, subdirectory.rstrip("/")) if subdirectory else mount_name
    )
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
                volume_attributes={"dnsname": dns_name, "mountname": mount},
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
