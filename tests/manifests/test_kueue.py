"""Kueue models: typos refused, manifests in the v1beta2 shape, quotas that add up."""

from __future__ import annotations

import pydantic
import pytest

from manifests import kueue

POOLS = [
    kueue.PoolCapacity(
        name="h100",
        gpu_resource="nvidia.com/gpu",
        taint_key="nvidia.com/gpu",
        gpus=32,
        cpu_per_gpu=24,
        memory_gib_per_gpu=256,
    ),
    kueue.PoolCapacity(
        name="trn",
        gpu_resource="aws.amazon.com/neuron",
        taint_key="aws.amazon.com/neuron",
        gpus=16,
        cpu_per_gpu=8,
        memory_gib_per_gpu=32,
    ),
]
TENANTS = [
    kueue.TenantShare(name="a", gpu_quota={"h100": 16}, cpu=64, memory_gib=256),
    kueue.TenantShare(name="b", gpu_quota={"h100": 8, "trn": 16}, cpu=32, memory_gib=128),
]


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(pydantic.ValidationError):
        kueue.LocalQueueSpec(clusterQueue="a", clusterQeue="b")  # type: ignore[call-arg]
    with pytest.raises(pydantic.ValidationError):
        kueue.Preemption(withinClusterQueue="Sometimes")  # type: ignore[arg-type]
    with pytest.raises(pydantic.ValidationError):
        kueue.Metadata(name="Not_A_Name")


def test_flavors_select_their_pool_and_tolerate_its_taint() -> None:
    flavors = {f.metadata.name: f.manifest() for f in kueue.resource_flavors(POOLS)}
    assert list(flavors) == ["cpu", "pool-h100", "pool-trn"]
    assert flavors["cpu"]["spec"] == {"nodeLabels": {}, "tolerations": []}
    trn = flavors["pool-trn"]
    assert trn["apiVersion"] == "kueue.x-k8s.io/v1beta2" and trn["kind"] == "ResourceFlavor"
    assert trn["spec"]["nodeLabels"] == {"llm-platform/pool": "trn"}
    assert trn["spec"]["tolerations"] == [
        {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}
    ]


def _quota(queue: dict, flavor: str, resource: str) -> str:
    (group,) = queue["spec"]["resourceGroups"]
    (f,) = [f for f in group["flavors"] if f["name"] == flavor]
    (r,) = [r for r in f["resources"] if r["name"] == resource]
    return r["nominalQuota"]


def test_tenant_queue_has_its_share_per_flavor_and_preempts() -> None:
    queue = kueue.tenant_cluster_queue(TENANTS[1], POOLS).manifest()
    spec = queue["spec"]
    assert spec["cohortName"] == "llm-platform"
    assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "b"}}
    assert spec["preemption"] == {
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "LowerPriority"},
        "withinClusterQueue": "LowerPriority",
    }
    (group,) = spec["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "aws.amazon.com/neuron", "nvidia.com/gpu"]
    # The cpu flavor comes first and has no accelerators: GPU work moves on to a pool.
    assert [f["name"] for f in group["flavors"]] == ["cpu", "pool-h100", "pool-trn"]
    assert _quota(queue, "cpu", "nvidia.com/gpu") == "0"
    assert _quota(queue, "cpu", "cpu") == "32"
    assert _quota(queue, "pool-h100", "nvidia.com/gpu") == "8"
    assert _quota(queue, "pool-h100", "cpu") == "192"
    assert _quota(queue, "pool-h100", "memory") == "2048Gi"
    assert _quota(queue, "pool-trn", "aws.amazon.com/neuron") == "16"
    # Every flavor lists every covered resource (Kueue refuses a queue otherwise).
    for flavor in group["flavors"]:
        assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]


def test_spare_queue_holds_what_no_tenant_was_promised() -> None:
    spare = kueue.spare_cluster_queue(TENANTS, POOLS).manifest()
    assert _quota(spare, "pool-h100", "nvidia.com/gpu") == "8"
    assert _quota(spare, "pool-trn", "aws.amazon.com/neuron") == "0"
    assert "preemption" not in spare["spec"]
    total = sum(
        int(_quota(q.manifest(), "pool-h100", "nvidia.com/gpu"))
        for q in [*(kueue.tenant_cluster_queue(t, POOLS) for t in TENANTS)]
    ) + int(_quota(spare, "pool-h100", "nvidia.com/gpu"))
    assert total == 32  # the cohort owns exactly the pool


def test_local_queue_points_at_the_tenant_queue() -> None:
    queue = kueue.local_queue("a").manifest()
    assert queue["metadata"]["namespace"] == "a" and queue["metadata"]["name"] == "default"
    assert queue["spec"] == {"clusterQueue": "a"}


def test_fractional_cpu_and_memory_are_rendered_as_quantities() -> None:
    pool = kueue.PoolCapacity(
        name="g",
        gpu_resource="nvidia.com/gpu",
        taint_key="nvidia.com/gpu",
        gpus=4,
        cpu_per_gpu=2.5,
        memory_gib_per_gpu=1.5,
    )
    tenant = kueue.TenantShare(name="t", gpu_quota={"g": 1}, cpu=1, memory_gib=1)
    queue = kueue.tenant_cluster_queue(tenant, [pool]).manifest()
    assert _quota(queue, "pool-g", "cpu") == "2500m"
    assert _quota(queue, "pool-g", "memory") == "1536Mi"


# --- the provisioning admission check (elastic pools) ---------------------------------------

ELASTIC = [
    POOLS[0],
    kueue.PoolCapacity(
        name="spot",
        gpu_resource="nvidia.com/gpu",
        taint_key="nvidia.com/gpu",
        gpus=32,
        cpu_per_gpu=12,
        memory_gib_per_gpu=144,
        elastic=True,
    ),
    kueue.PoolCapacity(
        name="trn-elastic",
        gpu_resource="aws.amazon.com/neuron",
        taint_key="aws.amazon.com/neuron",
        gpus=16,
        cpu_per_gpu=8,
        memory_gib_per_gpu=32,
        elastic=True,
    ),
]


def test_provisioning_objects_are_in_the_v1beta2_shape() -> None:
    found = kueue.provisioning_check(ELASTIC)
    assert found is not None
    check, config = (obj.manifest() for obj in found)
    # As in Kueue v0.19.2 site/static/examples/provisioning/provisioning-setup.yaml.
    assert check == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {
            "name": "gpu-provisioning",
            "labels": {"app.kubernetes.io/part-of": "llm-platform"},
        },
        "spec": {
            "controllerName": "kueue.x-k8s.io/provisioning-request",
            "parameters": {
                "apiGroup": "kueue.x-k8s.io",
                "kind": "ProvisioningRequestConfig",
                "name": "gpu-atomic-scale-up",
            },
        },
    }
    assert config["kind"] == "ProvisioningRequestConfig"
    assert config["spec"] == {
        "provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
        # the accelerators of the elastic pools: pod sets without them need no new node
        "managedResources": ["aws.amazon.com/neuron", "nvidia.com/gpu"],
        "retryStrategy": {
            "backoffLimitCount": 3,
            "backoffBaseSeconds": 60,
            "backoffMaxSeconds": 1800,
        },
        "podSetMergePolicy": "IdenticalWorkloadSchedulingRequirements",
    }


def test_no_elastic_pool_means_no_check_and_quota_alone_admits() -> None:
    assert kueue.provisioning_check(POOLS) is None
    _, queues = kueue.platform_queues(POOLS, TENANTS)
    assert all("admissionChecksStrategy" not in q.manifest()["spec"] for q in queues)


def test_tenant_queues_check_only_the_elastic_flavors() -> None:
    tenants = [kueue.TenantShare(name="a", gpu_quota={"spot": 16}, cpu=64, memory_gib=256)]
    _, queues = kueue.platform_queues(ELASTIC, tenants)
    tenant, spare = (q.manifest() for q in queues)
    assert tenant["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [
            {"name": "gpu-provisioning", "onFlavors": ["pool-spot", "pool-trn-elastic"]}
        ]
    }
    # Nobody submits to the spare queue: it only lends quota.
    assert "admissionChecksStrategy" not in spare["spec"]


def test_provisioning_models_refuse_typos_and_bad_values() -> None:
    with pytest.raises(pydantic.ValidationError):
        kueue.ProvisioningRequestConfigSpec(
            provisioningClassName="best-effort-atomic-scale-up.autoscaling.x-k8s.io",
            managedResource=["nvidia.com/gpu"],  # type: ignore[call-arg]
        )
    with pytest.raises(pydantic.ValidationError):
        kueue.ProvisioningRequestConfigSpec(provisioningClassName="Not A Class")
    with pytest.raises(pydantic.ValidationError):
        kueue.ProvisioningRequestConfigSpec(
            provisioningClassName="check-capacity.autoscaling.x-k8s.io",
            podSetMergePolicy="Identical",  # type: ignore[arg-type]
        )
    with pytest.raises(pydantic.ValidationError):
        kueue.AdmissionCheckSpec(controllerName="")
    with pytest.raises(pydantic.ValidationError):
        kueue.AdmissionCheckParametersReference(kind="Config", name="x")  # type: ignore[arg-type]
    with pytest.raises(pydantic.ValidationError):
        kueue.AdmissionChecksStrategy(admissionChecks=[])  # Kueue: at least one
    with pytest.raises(pydantic.ValidationError):
        kueue.ProvisioningRequestRetryStrategy(
            backoffLimitCount=-1, backoffBaseSeconds=60, backoffMaxSeconds=1800
        )
