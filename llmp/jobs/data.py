"""A data job file (`kind: data-text`, `data-web`, `data-multimodal`) checked against its
stack: a RayJob.

`check_data`: the pool is a CPU pool of `cpu_pools` (data-text, data-web; a GPU pool is
refused) or
either kind of pool (data-multimodal: GPUs per worker on a GPU pool, where the tenant needs
a `gpu_quota`), the workers fit the pool (one per node, `workers` <= `max_size`), the
namespace has the FSx claim, `input` may be read and `output` written by the tenant's
workload role (`s3_grants`), the `pipeline` block validates against the pipeline's own
config model, and Kueue admits the RayJob's pod sets (head, workers, submitter) against the
tenant's `cpu` quota or the GPU pool's flavor. It gives a `DataPrepared`, which `llmp job`
handles as it does `llmp.jobs.Prepared`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from pydantic import ValidationError

from llmp.jobs.api import wrapped
from llmp.jobs.checks import (
    bad_key,
    check_fsx_claim,
    check_fsx_paths,
    check_gpu_quota,
    check_priority,
    check_queue,
    names_or_none,
    s3_denied,
    unknown_name,
    validation_error,
)
from manifests import kueue
from manifests.jobs import rayjob
from manifests.jobs.jobfile import JobFile, data_config_map
from manifests.jobs.pod import WORKLOAD_SERVICE_ACCOUNT
from spec.catalog import catalog
from spec.labels import CPU_POOL_TAINT
from spec.platform import PlatformConfig
from spec.tenancy import tenant_uid

CPU_DATA_KINDS = ("data-text", "data-web")
"""Data kinds whose pipeline uses no GPU: a GPU pool is refused."""


@dataclass(frozen=True)
class DataPrepared:
    """A data job file, checked against its stack: the ConfigMap and RayJob to apply."""

    path: str
    job: JobFile
    config: PlatformConfig
    instance_type: str
    pool_kind: str
    """`CPU` (cpu_pools) or `GPU` (node_pools)."""
    gpus_per_worker: int
    gpu_resource: str
    manifests: list[dict[str, Any]]
    admission: kueue.Admission
    worker_host: str
    """CPU and memory (and GPUs) each worker requests."""
    total: str
    """What Kueue reserves for the whole RayJob."""
    pool_max: int
    notes: list[str] = field(default_factory=list)
    from_job: None = None
    max_steps: None = None

    def summary(self) -> list[str]:
        """What was checked, in a few lines of at most 80 columns."""
        job = self.job
        workers = job.workers or 0
        flavors = sorted({f for by in self.admission.flavors.values() for f in by.values()})
        lines = [
            f"job {job.namespace}/{job.name} on stack {job.stack}: checked ({job.kind}, RayJob)",
            f"  head on the system pool: {rayjob.HEAD_CPU} vCPUs, {rayjob.HEAD_MEMORY_GIB}Gi "
            "(driver, GCS, dashboard; no tasks)",
            wrapped(
                "  ",
                f"{workers} workers on {self.pool_kind} pool {job.pool} ({self.instance_type}), "
                f"one per node: {self.worker_host} each",
                4,
            ),
            wrapped("  ", f"{job.input} -> {job.output}", 4),
            f"  queue {job.namespace}/{job.queue} -> ClusterQueue {self.admission.queue}, "
            f"flavor {', '.join(flavors)}",
            wrapped(
                "  ",
                f"Kueue admits head, {workers} workers and the submitter at once: {self.total}",
                4,
            ),
        ]
        if self.admission.provisioning:
            lines.append(
                wrapped(
                    "  then ",
                    f"waits for its nodes: the {', '.join(self.admission.waiting_for)} check "
                    f"asks the autoscaler for all {workers} at once, or none",
                    4,
                )
            )
        elif self.pool_kind == "CPU":
            lines.append(
                wrapped(
                    "  then ",
                    f"the Cluster Autoscaler adds pool {job.pool}'s nodes as the workers pend "
                    f"(max {self.pool_max}); they go when the cluster is deleted",
                    4,
                )
            )
        return [*lines, *(wrapped("  note: ", n, 8) for n in self.notes)]


def _quantity(value: Fraction) -> str:
    return str(int(value)) if value.denominator == 1 else f"{float(value):g}"


def check_data(path: str, job: JobFile, cfg: PlatformConfig) -> DataPrepared:
    """A data job (`data-text`, `data-web`, `data-multimodal`) against the stack:
    JobFileError on the first problem, else the ConfigMap and RayJob and Kueue's verdict."""
    from manifests.queues import pool_capacities, tenant_shares

    stack = job.stack
    if not cfg.addons.kuberay:
        raise bad_key(
            path,
            "kind",
            job.kind,
            f"stack {stack} has no KubeRay operator to run a RayJob (addons.kuberay: false)",
        )
    pools = [*cfg.cpu_pools, *cfg.node_pools]
    if job.pool not in pools:
        raise unknown_name(path, "pool", job.pool, f"a CPU or GPU pool of stack {stack}", pools)
    if job.tenant not in cfg.tenants:
        raise unknown_name(path, "tenant", job.tenant, f"a tenant of stack {stack}", [*cfg.tenants])
    tenant = cfg.tenants[job.tenant]
    gpu = job.pool in cfg.node_pools
    if gpu and job.kind in CPU_DATA_KINDS:
        raise bad_key(
            path,
            "pool",
            job.pool,
            f"a GPU pool (node_pools): {job.kind} runs on CPU workers; give a CPU pool of "
            f"cpu_pools ({names_or_none(cfg.cpu_pools)})",
        )
    if gpu:
        check_gpu_quota(path, job, cfg)
    if not gpu and job.gpus_per_node is not None:
        raise bad_key(
            path, "gpus_per_node", job.gpus_per_node, f"pool {job.pool} is a CPU pool: no GPUs"
        )
    check_queue(path, job)
    pool = cfg.node_pools[job.pool] if gpu else cfg.cpu_pools[job.pool]
    workers = job.workers or 0
    section = "node_pools" if gpu else "cpu_pools"
    if workers > pool.max_size:
        raise bad_key(
            path,
            "workers",
            workers,
            f"one worker per node, and pool {job.pool} has at most {pool.max_size} nodes "
            f"({section}.{job.pool}.max_size)",
        )
    check_fsx_claim(path, job, cfg)
    check_fsx_paths(path, job, cfg)
    check_priority(path, job, cfg)
    for key, uri, verb in (("input", job.input, "read"), ("output", job.output, "write")):
        if uri is not None and uri.startswith("s3://"):
            why = s3_denied(cfg, job.tenant, uri, verb)
            if why is not None:
                raise bad_key(path, key, uri, why)
    try:
        pipeline = job.pipeline_config()
    except ValidationError as exc:
        # A rule across the block's keys has no location of its own: the block is the key.
        prefix = "pipeline." if exc.errors()[0]["loc"] else "pipeline"
        raise validation_error(path, exc, prefix) from None
    instance_type = pool.instance_type
    kind = catalog().accelerator_kind(instance_type)
    acc = catalog().instance(instance_type).accelerator
    gpus = 0
    if gpu:
        assert kind is not None and acc is not None  # node pools are accelerated
        gpus = acc.count if job.gpus_per_node is None else job.gpus_per_node
        if gpus > acc.count:
            raise bad_key(
                path,
                "gpus_per_node",
                gpus,
                f"{instance_type} has {acc.count} {acc.model} accelerators",
            )
    try:
        spec = job.ray_job_spec(
            instance_type=instance_type,
            pool_taint=kind.taint_key if gpu and kind is not None else CPU_POOL_TAINT,
            gpus_per_worker=gpus,
            service_account=WORKLOAD_SERVICE_ACCOUNT,
            team=cfg.team_name(job.stack),
            run_as_user=tenant_uid(job.tenant, cfg.tenants[job.tenant]),
            # Ray workers share no collectives: anywhere on a topology-aware pool.
            worker_topology=kueue.TopologyRequest("unconstrained")
            if gpu and cfg.node_pools[job.pool].topology_aware
            else None,
        )
    except ValidationError as exc:
        raise validation_error(path, exc) from None
    manifest = rayjob.ray_job(spec)
    rendered = [data_config_map(job, pipeline), manifest]

    capacities = pool_capacities(cfg)
    flavors, queues = kueue.platform_queues(capacities, tenant_shares(cfg))
    provisioning = kueue.provisioning_check(capacities)
    checks = [provisioning[0]] if provisioning else []
    queue = next(q for q in queues if q.metadata.name == job.tenant)
    sets = kueue.pod_sets(manifest)
    admission = kueue.admit(sets, queue, flavors, cohort=queues, checks=checks)
    if not admission.admitted:
        raise bad_key(
            path, "workers", workers, f"Kueue would never admit it: {'; '.join(admission.problems)}"
        )
    total: dict[str, Fraction] = {}
    for ps in sets:
        for resource, amount in ps.requests(kueue.EXCLUDED_RESOURCE_PREFIXES).items():
            total[resource] = total.get(resource, Fraction(0)) + amount * ps.count
    gib = Fraction(2**30)
    reserved = f"{_quantity(total.get('cpu', Fraction(0)))} vCPUs, "
    reserved += f"{_quantity(total.get('memory', Fraction(0)) / gib)}Gi"
    resource = kind.resource if kind is not None else ""
    if gpu:
        reserved += f", {_quantity(total.get(resource, Fraction(0)))} {resource}"
    else:
        reserved += f" of the cpu quota ({tenant.cpu} vCPUs, {tenant.memory_gib}Gi)"
    requests = manifest["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"][
        "containers"
    ][0]["resources"]["requests"]
    host = f"{requests['cpu']} vCPUs, {requests['memory']}"
    if gpus:
        host += f", {gpus} GPUs"
    return DataPrepared(
        path=path,
        job=job,
        config=cfg,
        instance_type=instance_type,
        pool_kind="GPU" if gpu else "CPU",
        gpus_per_worker=gpus,
        gpu_resource=resource,
        manifests=rendered,
        admission=admission,
        worker_host=host,
        total=reserved,
        pool_max=pool.max_size,
    )
