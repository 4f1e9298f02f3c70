"""Volume builders: static, pre-bound, retained; Lustre read-write, model weights read-only."""

from __future__ import annotations

import pytest

from components.storage_csi import fsx_driver_values, s3_read_policy
from manifests.volumes import (
    LUSTRE_CLAIM,
    MODEL_WEIGHTS_CLAIM,
    NamespaceQuota,
    limit_range,
    lustre_claim,
    lustre_persistent_volume,
    mount_prefix,
    namespace,
    resource_quota,
    s3_claim,
    s3_mount_options,
    s3_persistent_volume,
)


def test_namespace_carries_pod_security_labels() -> None:
    args = namespace("training")
    assert args.metadata.name == "training"
    assert args.metadata.labels == {
        "app.kubernetes.io/part-of": "llm-platform",
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/audit": "restricted",
    }


def test_lustre_pv_and_claim_are_a_static_pair() -> None:
    pv = lustre_persistent_volume(
        namespace="training",
        file_system_id="fs-1",
        dns_name="fs-1.fsx.us-east-1.amazonaws.com",
        mount_name="mnt",
        capacity_gib=1200,
    )
    spec = pv.spec
    assert pv.metadata.name == "fsx-lustre-training"
    assert spec.csi.driver == "fsx.csi.aws.com"
    assert spec.csi.volume_handle == "fs-1"
    assert spec.csi.volume_attributes == {
        "dnsname": "fs-1.fsx.us-east-1.amazonaws.com",
        "mountname": "mnt",
    }
    assert spec.mount_options == ["flock"]
    assert spec.access_modes == ["ReadWriteMany"]
    assert spec.capacity == {"storage": "1200Gi"}
    assert spec.persistent_volume_reclaim_policy == "Retain"
    assert spec.storage_class_name == ""
    assert (spec.claim_ref.namespace, spec.claim_ref.name) == ("training", LUSTRE_CLAIM)

    claim = lustre_claim(namespace="training", volume_name=pv.metadata.name, capacity_gib=1200)
    assert (claim.metadata.namespace, claim.metadata.name) == ("training", LUSTRE_CLAIM)
    assert claim.spec.volume_name == "fsx-lustre-training"
    assert claim.spec.storage_class_name == ""
    assert claim.spec.access_modes == spec.access_modes
    assert claim.spec.resources.requests == spec.capacity


@pytest.mark.parametrize(
    ("given", "mounted"),
    [("", ""), ("/", ""), ("llama", "llama/"), ("llama/", "llama/"), ("/a/b/", "a/b/")],
)
def test_mount_prefix_ends_in_a_slash(given: str, mounted: str) -> None:
    assert mount_prefix(given) == mounted


def test_s3_mount_options() -> None:
    assert s3_mount_options(prefix="models", region="eu-west-1") == [
        "read-only",
        "allow-other",
        "region eu-west-1",
        "prefix models/",
    ]
    assert s3_mount_options(prefix="", region="eu-west-1") == [
        "read-only",
        "allow-other",
        "region eu-west-1",
    ]


def test_s3_pv_and_claim_are_a_read_only_static_pair() -> None:
    pv = s3_persistent_volume(
        namespace="serving", bucket_name="models", prefix="v1/", region="us-east-1"
    )
    spec = pv.spec
    assert pv.metadata.name == "s3-models-serving"
    assert spec.csi.driver == "s3.csi.aws.com"
    assert spec.csi.volume_handle == "s3-models-serving"
    assert spec.csi.volume_attributes == {"bucketName": "models"}
    assert spec.access_modes == ["ReadOnlyMany"]
    assert "read-only" in spec.mount_options
    assert spec.capacity == {"storage": "1Ti"}
    assert spec.persistent_volume_reclaim_policy == "Retain"
    assert spec.storage_class_name == ""
    assert (spec.claim_ref.namespace, spec.claim_ref.name) == ("serving", MODEL_WEIGHTS_CLAIM)

    claim = s3_claim(namespace="serving", volume_name=pv.metadata.name)
    assert (claim.metadata.namespace, claim.metadata.name) == ("serving", MODEL_WEIGHTS_CLAIM)
    assert claim.spec.volume_name == "s3-models-serving"
    assert claim.spec.access_modes == ["ReadOnlyMany"]
    assert claim.spec.resources.requests == spec.capacity


def test_s3_read_policy_grants_no_write() -> None:
    policy = s3_read_policy("arn:aws:s3:::models", "v1", "us-east-1")
    actions = {s["Action"] for s in policy["Statement"]}
    assert actions == {"s3:ListBucket", "s3:GetObject", "kms:Decrypt"}
    resources = {s["Resource"] for s in policy["Statement"]}
    assert resources == {"arn:aws:s3:::models", "arn:aws:s3:::models/v1/*", "*"}


def test_fsx_node_plugin_tolerates_only_accelerator_taints_and_not_ready_grace() -> None:
    tolerations = fsx_driver_values()["node"]["tolerations"]
    keys = {t.get("key") for t in tolerations}
    assert keys == {"nvidia.com/gpu", "aws.amazon.com/neuron", None}
    (grace,) = [t for t in tolerations if "key" not in t]
    assert grace == {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}


def test_resource_quota_caps_accelerators_cpu_memory_and_claims() -> None:
    quota = NamespaceQuota(accelerators=8, cpu="96", memory="1Ti", persistent_volume_claims=3)
    args = resource_quota(
        namespace="training",
        quota=quota,
        accelerator_resources=["nvidia.com/gpu", "aws.amazon.com/neuron", "nvidia.com/gpu"],
    )
    assert (args.metadata.namespace, args.metadata.name) == ("training", "llmp-quota")
    assert args.spec.hard == {
        "requests.aws.amazon.com/neuron": "8",
        "requests.nvidia.com/gpu": "8",
        "requests.cpu": "96",
        "requests.memory": "1Ti",
        "persistentvolumeclaims": "3",
    }
    # Kubernetes quantities are strings; extended resources only take `requests.` quotas.
    assert all(isinstance(v, str) for v in args.spec.hard.values())


def test_limit_range_gives_containers_default_requests_and_limits() -> None:
    args = limit_range(namespace="serving", quota=NamespaceQuota())
    assert (args.metadata.namespace, args.metadata.name) == ("serving", "llmp-limits")
    (item,) = args.spec.limits
    assert item.type == "Container"
    assert item.default_request == {"cpu": "250m", "memory": "512Mi"}
    assert item.default == {"cpu": "2", "memory": "4Gi"}


def test_namespace_quota_defaults_are_replaceable_one_field_at_a_time() -> None:
    quota = NamespaceQuota(accelerators=64)
    assert quota.accelerators == 64
    assert quota.cpu == NamespaceQuota().cpu
