"""Kueue's admission rule over every pod template the platform's builders render.

The journey this guards: a job is rendered by a builder (a TrainJob on the platform's
ClusterTrainingRuntimes, fabric test, DCGM diagnostic, a data pipeline's RayJob), submitted
to the tenant's LocalQueue, and Kueue admits it
against the ClusterQueues and flavors the stack declares, with the Configuration the
stack installs. Kueue refuses a workload that requests a resource its queue neither
covers nor excludes, so a job that asks for `vpc.amazonaws.com/efa` would wait forever.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from components.addons import kueue_manager_config
from manifests import kueue
from manifests.jobs import trainjob
from manifests.jobs.dcgm_diag import DcgmDiagSpec, dcgm_diag_manifests
from manifests.jobs.fabric import FabricSpec, fabric_manifests
from manifests.jobs.rayjob import RayJobSpec, ray_job
from manifests.queues import pool_capacities, tenant_shares
from spec.catalog import catalog
from spec.labels import CPU_POOL_TAINT
from spec.platform import PlatformConfig
from spec.stackfile import load_config

TENANT = "team"
POOL = "gpu"
CPU_POOL = "data"


def data_job(
    instance_type: str = "m7i.4xlarge",
    pool: str = CPU_POOL,
    workers: int = 4,
    gpus: int = 0,
    taint: str = CPU_POOL_TAINT,
) -> dict[str, Any]:
    """The RayJob of a data job (the text pipeline on CPU workers, by default)."""
    return ray_job(
        RayJobSpec(
            name="clean",
            namespace=TENANT,
            image="registry.example.com/data:1.0",
            module="workloads.data.text",
            args=[
                "--config",
                "/etc/llmp/pipeline.json",
                "--input",
                "/fsx/raw",
                "--output",
                "/fsx/o",
            ],
            queue_name=kueue.LOCAL_QUEUE,
            pool=pool,
            instance_type=instance_type,
            pool_taint=taint,
            workers=workers,
            gpus_per_worker=gpus,
            service_account="training",
            config_map="clean-config",
        )
    )


def excluded() -> tuple[str, ...]:
    """What the stack's Kueue Configuration excludes (the chart value it installs)."""
    return tuple(kueue_manager_config()["resources"]["excludeResourcePrefixes"])


def accelerated_types() -> list[str]:
    return sorted(n for n, t in catalog().instances.items() if t.accelerator is not None)


def one_pool_stack(instance_type: str, nodes: int = 2, elastic: bool = False) -> PlatformConfig:
    """A stack with one pool of `instance_type` and one tenant guaranteed all of it."""
    itype = catalog().instance(instance_type)
    efa = itype.efa_interfaces > 0
    pool: dict[str, Any] = {
        "instance_type": instance_type,
        "max_size": nodes,
        "efa": efa,
        "elastic": elastic,
    }
    if efa:
        pool["availability_zones"] = ["us-east-1a"]
    return load_config(
        {
            "aws:region": "us-east-1",
            "llm-platform:tags": {"team": "t", "cost_center": "c"},
            "llm-platform:network": {"availability_zones": ["us-east-1a", "us-east-1b"]},
            "llm-platform:node_pools": {POOL: pool},
            "llm-platform:tenants": {
                TENANT: {
                    "gpu_quota": {POOL: itype.gpu_count * nodes},
                    "cpu": 256,
                    "memory_gib": 1024,
                }
            },
        }
    )


RUNTIMES = trainjob.cluster_training_runtimes()
"""The ClusterTrainingRuntimes the program installs (components/addons.py)."""


def training_job(
    instance_type: str, nodes: int, namespace: str = TENANT, pool: str = POOL
) -> dict[str, Any]:
    """The TrainJob a user submits: `nodes` whole nodes of `pool`, queued to the tenant."""
    return trainjob.build(
        name="train",
        namespace=namespace,
        image="registry.example.com/trainer:1.0",
        command=["train.py"],
        instance_type=instance_type,
        node_pool=pool,
        nodes_min=1,
        nodes_max=nodes,
        checkpoint_dir="/fsx/checkpoints/train",
        queue_name=kueue.LOCAL_QUEUE,
    )


def workloads_for(instance_type: str, nodes: int = 2) -> dict[str, dict[str, Any]]:
    """Every workload a builder renders for this shape, queued to the tenant's LocalQueue."""
    itype = catalog().instance(instance_type)
    acc = itype.accelerator
    assert acc is not None
    out: dict[str, dict[str, Any]] = {
        "trainjob": training_job(instance_type, nodes),
        "rayjob-cpu": data_job(),
    }
    if acc.kind == "nvidia":
        (out["dcgm-diag"],) = dcgm_diag_manifests(
            DcgmDiagSpec(
                instance_type=instance_type,
                node_pool=POOL,
                namespace=TENANT,
                nodes=nodes,
                queue_name=kueue.LOCAL_QUEUE,
            )
        )
        if instance_type in catalog().fabric_acceptance.thresholds:
            _, out["fabric"] = fabric_manifests(
                FabricSpec(
                    instance_type=instance_type,
                    node_pool=POOL,
                    namespace=TENANT,
                    nodes=nodes,
                    queue_name=kueue.LOCAL_QUEUE,
                )
            )
    return out


def admission(
    cfg: PlatformConfig, manifest: dict[str, Any], exclude: tuple[str, ...]
) -> kueue.Admission:
    pools = pool_capacities(cfg)
    flavors, queues = kueue.platform_queues(pools, tenant_shares(cfg))
    provisioning = kueue.provisioning_check(pools)
    checks = [provisioning[0]] if provisioning else []
    # The LocalQueue `default` of a tenant's namespace points at the tenant's ClusterQueue.
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == kueue.LOCAL_QUEUE
    queue = next(q for q in queues if q.metadata.name == manifest["metadata"]["namespace"])
    return kueue.admit(
        kueue.pod_sets(manifest, RUNTIMES),
        queue,
        flavors,
        cohort=queues,
        excluded=exclude,
        checks=checks,
    )


CASES = [(itype, kind) for itype in accelerated_types() for kind in workloads_for(itype)]


@pytest.mark.parametrize(("instance_type", "kind"), CASES)
def test_every_rendered_pod_is_admitted_by_the_queues_the_stack_declares(
    instance_type: str, kind: str
) -> None:
    cfg = one_pool_stack(instance_type)
    manifest = workloads_for(instance_type)[kind]
    result = admission(cfg, manifest, excluded())
    assert result.admitted, result.problems
    flavor = "cpu" if kind == "rayjob-cpu" else kueue.flavor_name(POOL)
    main = {"Job": "main", "RayJob": "workers", "TrainJob": "node"}[manifest["kind"]]
    assert set(result.flavors[main].values()) == {flavor}


def test_each_requested_resource_is_covered_or_excluded_for_every_shape() -> None:
    """The rule the issue states, counted: every (pod shape, resource) pair any builder
    requests is either covered by a ClusterQueue resource group or excluded."""
    exclude = excluded()
    checked = 0
    seen: set[str] = set()
    for instance_type in accelerated_types():
        cfg = one_pool_stack(instance_type)
        _, queues = kueue.platform_queues(pool_capacities(cfg), tenant_shares(cfg))
        covered = {r for q in queues for g in q.spec.resource_groups for r in g.covered_resources}
        for manifest in workloads_for(instance_type).values():
            for ps in kueue.pod_sets(manifest, RUNTIMES):
                for resource in kueue.pod_requests(ps.template["spec"]):
                    checked += 1
                    seen.add(resource)
                    assert resource in covered or resource.startswith(exclude), (
                        instance_type,
                        manifest["kind"],
                        resource,
                    )
    # GPUs, Neuron devices, EFA, huge pages, cpu and memory all occur.
    assert {"nvidia.com/gpu", "aws.amazon.com/neuron", "vpc.amazonaws.com/efa"} <= seen
    assert {"hugepages-2Mi", "cpu", "memory"} <= seen
    print(f"\nkueue admission: {len(CASES)} pod shapes, {checked} (shape, resource) pairs")


def test_without_the_exclusions_kueue_never_admits_an_efa_job() -> None:
    # What the queues did before excludeResourcePrefixes: the job waits forever.
    cfg = one_pool_stack("p5.48xlarge")
    result = admission(cfg, workloads_for("p5.48xlarge")["trainjob"], exclude=())
    assert not result.admitted
    assert result.problems == [
        "node: resource vpc.amazonaws.com/efa unavailable in ClusterQueue team"
    ]
    fabric = admission(cfg, workloads_for("p5.48xlarge")["fabric"], exclude=())
    assert {p.split(" unavailable")[0] for p in fabric.problems} == {
        "main: resource hugepages-2Mi",
        "main: resource vpc.amazonaws.com/efa",
    }


def test_a_job_larger_than_the_cohort_waits_and_says_why() -> None:
    cfg = one_pool_stack("p5.48xlarge", nodes=2)
    bigger = training_job("p5.48xlarge", nodes=3)
    result = admission(cfg, bigger, excluded())
    assert not result.admitted
    (problem,) = result.problems
    assert "pool-gpu: " in problem and "nvidia.com/gpu 24 > 16" in problem


def test_a_tenant_borrows_idle_capacity_from_the_cohort() -> None:
    # Two tenants of 8 GPUs each on 2 p5 nodes: a 2-node job of one tenant borrows the
    # other's idle GPUs (the spare queue lends nothing here: the pool is fully promised).
    cfg = one_pool_stack("p5.48xlarge")
    raw_tenants = {
        TENANT: {"gpu_quota": {POOL: 8}, "cpu": 64, "memory_gib": 256},
        "other": {"gpu_quota": {POOL: 8}, "cpu": 64, "memory_gib": 256},
    }
    cfg = cfg.model_copy(
        update={
            "tenants": {
                name: type(next(iter(cfg.tenants.values()))).model_validate(t)
                for name, t in raw_tenants.items()
            }
        }
    )
    result = admission(cfg, workloads_for("p5.48xlarge")["trainjob"], excluded())
    assert result.admitted, result.problems


def test_quantities_are_read_as_kubernetes_does() -> None:
    q = kueue.quantity
    assert q("5120Mi") == 5120 * 2**20
    assert q("500m") * 2 == 1
    assert q("1e3") == 1000 and q("2k") == 2000
    with pytest.raises(kueue.AdmissionError):
        q("five")


def test_limits_stand_in_for_missing_requests_and_init_containers_count() -> None:
    spec = {
        "containers": [
            {"resources": {"limits": {"memory": "1Gi", "nvidia.com/gpu": "1"}}},
            {"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}},
        ],
        "initContainers": [{"resources": {"requests": {"cpu": "4"}}}],
        "overhead": {"memory": "128Mi"},
    }
    got = kueue.pod_requests(spec)
    assert got == {
        "memory": kueue.quantity("1Gi") + kueue.quantity("128Mi"),
        "nvidia.com/gpu": 1,
        "cpu": 4,
    }


def test_a_job_on_an_elastic_pool_waits_for_provisioning_then_is_admitted() -> None:
    cfg = one_pool_stack("p5.48xlarge", nodes=2, elastic=True)
    result = admission(cfg, training_job("p5.48xlarge", nodes=2), excluded())
    # Quota is reserved on the pool's flavor; Kueue has asked the autoscaler for 2 nodes.
    assert result.admitted and not result.problems
    assert result.flavors["node"]["nvidia.com/gpu"] == kueue.flavor_name(POOL)
    assert result.waiting_for == [kueue.PROVISIONING_CHECK]
    assert result.state == "Pending: waiting for provisioning"


def test_a_job_on_a_fixed_pool_is_admitted_on_quota_alone() -> None:
    cfg = one_pool_stack("p5.48xlarge", nodes=2, elastic=False)
    result = admission(cfg, training_job("p5.48xlarge", nodes=2), excluded())
    assert result.waiting_for == [] and result.state == kueue.ADMITTED


def test_cpu_work_in_a_stack_with_elastic_pools_does_not_wait() -> None:
    cfg = one_pool_stack("p5.48xlarge", nodes=2, elastic=True)
    result = admission(cfg, workloads_for("p5.48xlarge")["rayjob-cpu"], excluded())
    assert set(result.flavors["workers"].values()) == {kueue.CPU_FLAVOR}
    assert result.state == kueue.ADMITTED


def test_a_job_too_big_for_an_elastic_pool_never_reaches_the_check() -> None:
    cfg = one_pool_stack("p5.48xlarge", nodes=2, elastic=True)
    result = admission(cfg, training_job("p5.48xlarge", nodes=3), excluded())
    assert result.state == kueue.NOT_ADMITTED and result.waiting_for == []


def test_a_queue_naming_a_check_that_does_not_exist_admits_nothing() -> None:
    cfg = one_pool_stack("p5.48xlarge", nodes=2, elastic=True)
    pools = pool_capacities(cfg)
    flavors, queues = kueue.platform_queues(pools, tenant_shares(cfg))
    queue = next(q for q in queues if q.metadata.name == TENANT)
    sets = kueue.pod_sets(workloads_for("p5.48xlarge")["rayjob-cpu"])
    missing = kueue.admit(sets, queue, flavors, cohort=queues, checks=[])
    assert missing.problems == [
        f"ClusterQueue {TENANT} is inactive: its AdmissionCheck gpu-provisioning does not exist"
    ]
    # Without the declared checks the rule cannot tell what kind of check it waits for.
    unknown = kueue.admit(
        kueue.pod_sets(training_job("p5.48xlarge", 2), RUNTIMES), queue, flavors, cohort=queues
    )
    assert unknown.state == kueue.WAITING_FOR_CHECKS


@pytest.mark.parametrize("stack", ["pretrain", "finetune"])
def test_the_stacks_training_job_is_admitted_by_what_the_plan_declares(plans, stack) -> None:
    """End to end on a stack file: Kueue's objects and configuration as the plan records
    them (not as the builders would make them), and a job on each of the stack's pools
    for each tenant with a quota there."""
    plan = plans(stack)
    manifests = plan.manifests()
    flavors = [
        kueue.ResourceFlavor.model_validate(m) for m in manifests if m["kind"] == "ResourceFlavor"
    ]
    queues = [
        kueue.ClusterQueue.model_validate(m) for m in manifests if m["kind"] == "ClusterQueue"
    ]
    local = {
        m["metadata"]["namespace"]: m["spec"]["clusterQueue"]
        for m in manifests
        if m["kind"] == "LocalQueue"
    }
    (release,) = [
        r.inputs
        for r in plan.by_type("kubernetes:helm.sh/v3:Release")
        if r.inputs["name"] == "kueue"
    ]
    config = yaml.safe_load(release["values"]["managerConfig"]["controllerManagerConfigYaml"])
    exclude = tuple(config["resources"]["excludeResourcePrefixes"])
    from tests.conftest import raw_stack

    checks = [
        kueue.AdmissionCheck.model_validate(m) for m in manifests if m["kind"] == "AdmissionCheck"
    ]
    configs = {
        m["metadata"]["name"]: kueue.ProvisioningRequestConfig.model_validate(m)
        for m in manifests
        if m["kind"] == "ProvisioningRequestConfig"
    }
    # Every check's parameters name a config the plan declares (else the check is inactive).
    for check in checks:
        assert check.spec.parameters is not None and check.spec.parameters.name in configs
    runtimes = [m for m in manifests if m["kind"] == "ClusterTrainingRuntime"]
    assert {r["metadata"]["name"] for r in runtimes} == {r["metadata"]["name"] for r in RUNTIMES}
    assert "trainer.kubeflow.org/trainjob" in config["integrations"]["frameworks"]
    cfg = load_config(raw_stack(stack))
    submitted = 0
    for tenant, share in cfg.tenants.items():
        for pool, gpus in share.gpu_quota.items():
            itype_name = cfg.node_pools[pool].instance_type
            nodes = max(1, gpus // catalog().instance(itype_name).gpu_count)
            job = training_job(itype_name, nodes, namespace=tenant, pool=pool)
            queue = next(q for q in queues if q.metadata.name == local[tenant])
            sets = kueue.pod_sets(job, runtimes)
            assert [(ps.name, ps.count) for ps in sets] == [("node", nodes)]  # one gang
            result = kueue.admit(
                sets, queue, flavors, cohort=queues, excluded=exclude, checks=checks
            )
            assert result.admitted, (tenant, pool, result.problems)
            assert set(result.flavors["node"].values()) == {kueue.flavor_name(pool)}
            # An elastic pool's job waits for its nodes; a fixed fabric's is admitted on quota.
            expected = (
                kueue.WAITING_FOR_PROVISIONING if cfg.node_pools[pool].elastic else kueue.ADMITTED
            )
            assert result.state == expected, (tenant, pool)
            submitted += 1
    assert submitted >= 2


# --- data jobs: KubeRay RayJobs --------------------------------------------------------------


def test_a_rayjob_is_one_gang_of_head_workers_and_submitter_as_kueue_builds_it() -> None:
    """Kueue 0.19.2 (raycluster.BuildPodSets, rayjob.addSubmitterPodSet): head 1, the worker
    group by its name at `replicas`, and in K8sJobMode the submitter, counted from the
    template the RayJob gives (its requests, not KubeRay's default 500m/200Mi)."""
    sets = kueue.pod_sets(data_job(workers=4))
    assert [(ps.name, ps.count) for ps in sets] == [("head", 1), ("workers", 4), ("submitter", 1)]
    head, workers, submitter = (ps.requests() for ps in sets)
    assert head == {"cpu": 2, "memory": kueue.quantity("8Gi")}
    # m7i.4xlarge: 16 vCPUs, 64 GiB; 85% of them per worker.
    assert workers == {"cpu": 13, "memory": kueue.quantity("54Gi")}
    assert submitter == {"cpu": kueue.quantity("500m"), "memory": kueue.quantity("512Mi")}


def test_kueues_default_submitter_and_autoscaler_sidecar_are_counted() -> None:
    job = data_job()
    spec = job["spec"]
    del spec["submitterPodTemplate"]
    spec["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    head, _, submitter = kueue.pod_sets(job)
    assert head.requests()["cpu"] == 2 + kueue.quantity("500m")
    assert submitter.requests() == {"cpu": kueue.quantity("500m"), "memory": 200 * 2**20}
    spec["submissionMode"] = "SidecarMode"
    assert [ps.name for ps in kueue.pod_sets(job)] == ["head", "workers"]


def _pretrain() -> PlatformConfig:
    from tests.conftest import raw_stack

    cfg = load_config(raw_stack("pretrain"))
    assert CPU_POOL in cfg.cpu_pools, "the pretrain stack's data CPU pool"
    return cfg


def _admit_on(cfg: PlatformConfig, manifest: dict[str, Any], tenant: str) -> kueue.Admission:
    pools = pool_capacities(cfg)
    flavors, queues = kueue.platform_queues(pools, tenant_shares(cfg))
    provisioning = kueue.provisioning_check(pools)
    checks = [provisioning[0]] if provisioning else []
    queue = next(q for q in queues if q.metadata.name == tenant)
    return kueue.admit(
        kueue.pod_sets(manifest), queue, flavors, cohort=queues, excluded=excluded(), checks=checks
    )


def test_a_text_data_job_on_the_pretrain_cpu_pool_is_admitted_in_the_cpu_flavor() -> None:
    cfg = _pretrain()
    (tenant,) = cfg.tenants
    pool = cfg.cpu_pools[CPU_POOL]
    job = data_job(pool.instance_type, workers=pool.max_size)
    job["metadata"]["namespace"] = tenant
    result = _admit_on(cfg, job, tenant)
    assert result.admitted, result.problems
    assert {f for by in result.flavors.values() for f in by.values()} == {kueue.CPU_FLAVOR}
    # No provisioning check on the cpu flavor: the autoscaler scales the pool as pods pend.
    assert result.state == kueue.ADMITTED


def test_a_multimodal_job_on_a_gpu_pool_is_admitted_in_the_pools_flavor() -> None:
    cfg = one_pool_stack("g6e.12xlarge", nodes=2, elastic=True)
    kind = catalog().accelerator_kind("g6e.12xlarge")
    assert kind is not None
    job = data_job("g6e.12xlarge", pool=POOL, workers=2, gpus=4, taint=kind.taint_key)
    result = admission(cfg, job, excluded())
    assert result.admitted, result.problems
    assert result.flavors["workers"] == {
        "cpu": kueue.flavor_name(POOL),
        "memory": kueue.flavor_name(POOL),
        "nvidia.com/gpu": kueue.flavor_name(POOL),
    }
    # The head and the submitter hold no GPU: they stay on the cpu flavor (the system pool).
    assert (
        set(result.flavors["head"].values())
        == set(result.flavors["submitter"].values())
        == {kueue.CPU_FLAVOR}
    )
    assert result.state == kueue.WAITING_FOR_PROVISIONING


def test_a_data_job_above_the_tenants_cpu_quota_is_refused_with_the_reason() -> None:
    cfg = one_pool_stack("p5.48xlarge")  # tenant cpu 256 vCPUs, 1024 GiB
    result = admission(cfg, data_job(workers=20), excluded())
    assert not result.admitted
    (problem,) = result.problems
    assert problem.startswith("workers: no flavor of ClusterQueue team fits")
    # 20 workers x 13 vCPUs against 256 less the head's 2 (placed first).
    assert "cpu: cpu 260 > 254" in problem


def test_every_model_server_replica_is_admitted_by_the_serving_queue_up_to_its_gpus(
    plans,
) -> None:
    """Kueue's pod webhook gives every pod of a tenant namespace the LocalQueue `default`
    (components/addons.py: manageJobsWithoutQueueName), a model server's too: its GPUs are
    the serving queue's nominal quota, which it lends to no one."""
    from tests.conftest import raw_stack

    plan = plans("inference")
    cfg = load_config(raw_stack("inference"))
    flavors, queues = kueue.platform_queues(pool_capacities(cfg), tenant_shares(cfg))
    serving = next(q for q in queues if q.metadata.name == "serving")
    models = {m.name: m for m in cfg.serving.models} if cfg.serving else {}
    checked = []
    for r in plan.by_type("kubernetes:apps/v1:Deployment"):
        name = r.inputs["metadata"]["name"]
        if r.inputs["metadata"]["namespace"] != "serving" or name not in models:
            continue
        (pod,) = kueue.pod_sets(r.inputs)
        gpus = int(pod.requests(kueue.EXCLUDED_RESOURCE_PREFIXES)["nvidia.com/gpu"])
        pool = models[name].node_pool
        fit = cfg.tenants["serving"].serving_gpus[pool] // gpus
        replicas = kueue.PodSet(name="main", count=fit, template=pod.template)
        admitted = kueue.admit([replicas], serving, flavors, cohort=queues)
        assert admitted.admitted, (name, admitted.problems)
        one_more = kueue.PodSet(name="main", count=fit + 1, template=pod.template)
        assert not kueue.admit([one_more], serving, flavors, cohort=queues).admitted
        checked.append(name)
    assert sorted(checked) == ["llama-70b", "llama-8b"]
    # What the serving queue holds for its model servers is lent to no other queue.
    for group in serving.spec.resource_groups:
        for fq in group.flavors:
            for rq in fq.resources:
                if rq.name == "nvidia.com/gpu" and rq.nominal_quota != "0":
                    assert rq.lending_limit == "0", fq.name
