"""`llmp job`: a job file checked against its stack, rendered, and Kueue's verdict on it.

`prepare(path)` reads a job file (`manifests.jobs.jobfile.JobFile`), loads the stack it
names, and refuses, with one line naming the key, what the cluster would only refuse
later or never admit:

- the pool is a node pool of the stack; the tenant is one of its tenants and has a
  `gpu_quota` entry for the pool (0: it may only borrow);
- the nodes fit the pool (`nodes.max` <= the pool's `max_size`) and the GPUs per node
  fit its instance type;
- the tenant's namespace has the `fsx-lustre` claim (`storage.lustre.mount_namespaces`)
  the job mounts for its data and checkpoints;
- the queue is the namespace's LocalQueue;
- Kueue admits the rendered TrainJob (on the ClusterTrainingRuntime it names, the
  program's) against the ClusterQueues and flavors the stack declares
  (`manifests.kueue.admit`, the same rule the stack's admission tests use): the tenant's
  nominal quota plus what the cohort can lend holds `nodes.max` x GPUs;
- a promote job's `promote.bucket` is a bucket of the stack. Whether the tenant's
  workload role may write its revisions there is said in a note (`write_denied`):
  the job would do its work and then fail to publish.

A data job (`kind: data-text`, `data-multimodal`) is a RayJob instead, checked by
`llmp.jobs.data` (`check_data`, giving a `DataPrepared`). Reading the job file, the one-line
errors and the checks every kind shares (the FSx claim, the S3 grants) are `llmp.jobs.checks`.

The result, a `Prepared`, carries the manifests (`--dry-run` prints them) and what Kueue
would do. The cluster side (`submit`, `status`, `list`, `logs`, `cancel`) is `llmp.jobs.api`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from contracts.training import JobConfig
from llmp.jobs.api import wrapped
from llmp.jobs.checks import (
    bad_key,
    check_fsx_claim,
    check_fsx_paths,
    check_gpu_quota,
    check_priority,
    check_queue,
    load_job_file,
    s3_denied,
    unknown_name,
    validation_error,
    write_denied,
)
from llmp.jobs.data import DataPrepared, check_data
from manifests import kueue
from manifests.jobs.jobfile import JobFile, config_map
from manifests.jobs.trainjob import NODE, cluster_training_runtimes, train_job
from spec.catalog import catalog
from spec.errors import ConfigError
from spec.platform import PlatformConfig
from spec.tenancy import tenant_uid


@dataclass(frozen=True)
class Prepared:
    """A job file, checked against its stack, and what would be applied."""

    path: str
    job: JobFile
    config: PlatformConfig
    instance_type: str
    gpus_per_node: int
    gpu_resource: str
    trainer: JobConfig | None
    """The trainer's config, as the ConfigMap carries it; None for a step (promote, quantize)."""
    manifests: list[dict[str, Any]]
    admission: kueue.Admission
    nominal_gpus: int
    """The tenant's guaranteed GPUs on the pool; above it the job borrows."""
    notes: list[str] = field(default_factory=list)
    bucket: str | None = None
    """promote: the physical name of the bucket it publishes to."""
    host: str = ""
    """CPU and memory each pod requests, e.g. `20 vCPUs, 217Gi`."""

    @property
    def from_job(self) -> tuple[str, str] | None:
        """promote.from_job: (the training job, the checkpoint dir it must have trained into),
        which `llmp job submit` checks on the cluster before applying."""
        promote, checkpoint = self.job.promote, self.job.checkpoint
        if promote is None or promote.from_job is None or checkpoint is None:
            return None
        return promote.from_job, checkpoint

    @property
    def max_steps(self) -> int | None:
        return None if self.trainer is None else self.trainer.max_steps

    @property
    def gpus(self) -> int:
        """What Kueue admits the job at: every node of `nodes.max`."""
        return self.job.nodes.max * self.gpus_per_node

    @property
    def flavor(self) -> str:
        return self.admission.flavors.get(NODE, {}).get(self.gpu_resource, "")

    def _step_lines(self) -> list[str]:
        job = self.job
        of = catalog().instance(self.instance_type).accelerator
        share = (
            f"1 {job.partition} MIG partition"
            if job.partition is not None
            else f"{self.gpus_per_node} of its {of.count if of else '?'} GPUs"
        )
        lines = [
            f"  pool {job.pool}: {self.instance_type}, {share} with {self.host}",
            "  one process on one node: its errors fail it, a lost pod starts over",
        ]
        if job.promote is not None:
            config = (
                f"what job {job.promote.from_job} trained with (ConfigMap {job.mounted_config_map})"
                if job.promote.from_job is not None
                else f"{job.promote.job_config}"
            )
            lines += [
                f"  promote {job.checkpoint}",
                wrapped("    config: ", config, 6),
                f"    publish to s3://{self.bucket}/{job.promote.key_prefix()}",
            ]
        if job.quantize is not None:
            q = job.quantize
            lines += [f"  quantize {q.model}", f"    to {q.out}", f"    scheme {q.scheme}"]
            if q.calibration is not None:
                lines.append(f"    calibrated on {q.calibration}")
        return lines

    def summary(self) -> list[str]:
        """What was checked, in a few lines of at most 80 columns."""
        job, pool = self.job, self.job.pool
        own = min(self.gpus, self.nominal_gpus)
        borrowed = self.gpus - own
        quota = f"{own} nominal" + (f" + {borrowed} borrowed" if borrowed else "")
        nodes = "its node" if job.nodes.max == 1 else f"all {job.nodes.max} at once, or none"
        where = (
            self._step_lines()
            if job.is_step
            else [
                f"  pool {pool}: {self.instance_type}, {self.gpus_per_node} GPUs per node, "
                f"nodes {job.nodes.min}..{job.nodes.max}"
            ]
        )
        if job.parallel is not None:
            tp, pp = job.parallel.tp, job.parallel.pp
            dps = sorted(
                {n * self.gpus_per_node // (tp * pp) for n in (job.nodes.min, job.nodes.max)}
            )
            dp = " or ".join(str(d) for d in dps)
            where.append(f"  layout tp {tp} x pp {pp} x dp {dp} (tp within a node)")
        return [
            f"job {job.namespace}/{job.name} on stack {job.stack}: checked"
            + (f" ({job.kind})" if job.is_step else ""),
            *where,
            f"  queue {job.namespace}/{job.queue} -> ClusterQueue {self.admission.queue}, "
            f"flavor {self.flavor}",
            f"  Kueue admits {self.gpus} {self.gpu_resource} ({quota})",
            *(
                [
                    wrapped(
                        "  then ",
                        f"waits for its nodes: the {', '.join(self.admission.waiting_for)} "
                        f"check asks the autoscaler for {nodes}",
                        4,
                    )
                ]
                if self.admission.provisioning
                else []
            ),
            *(wrapped("  note: ", n, 8) for n in self.notes),
        ]


def _s3_locations(job: JobFile) -> list[tuple[str, str]]:
    """(key, s3:// URI) of what the trainer reads from S3: its data, its restore point."""
    found = [("data", job.data)] if job.data and job.data.startswith("s3://") else []
    restore = (job.trainer.get("checkpoint") or {}) if isinstance(job.trainer, dict) else {}
    if isinstance(restore, dict) and isinstance(restore.get("restore_from"), str):
        found.append(("trainer.checkpoint.restore_from", restore["restore_from"]))
    return found


def check(path: str, job: JobFile, cfg: PlatformConfig) -> Prepared:
    """`job` against the stack's validated config: JobFileError on the first problem."""
    from manifests.queues import pool_capacities, tenant_shares

    if job.is_data:
        raise ValueError("a data job is checked by check_data")
    stack = job.stack
    if job.pool not in cfg.node_pools:
        raise unknown_name(
            path, "pool", job.pool, f"a node pool of stack {stack}", [*cfg.node_pools]
        )
    pool = cfg.node_pools[job.pool]
    if job.tenant not in cfg.tenants:
        raise unknown_name(path, "tenant", job.tenant, f"a tenant of stack {stack}", [*cfg.tenants])
    tenant = cfg.tenants[job.tenant]
    check_gpu_quota(path, job, cfg)
    check_queue(path, job)
    if job.nodes.max > pool.max_size:
        raise bad_key(
            path,
            "nodes.max",
            job.nodes.max,
            f"pool {job.pool} has at most {pool.max_size} nodes (node_pools.{job.pool}.max_size)",
        )
    check_fsx_claim(path, job, cfg)
    check_fsx_paths(path, job, cfg)
    check_priority(path, job, cfg)
    for key, uri in _s3_locations(job):
        why = s3_denied(cfg, job.tenant, uri)
        if why is not None:
            raise bad_key(path, key, uri, why)
    instance_type = pool.instance_type
    bucket = None
    if job.promote is not None:
        names = list(cfg.storage.buckets) if cfg.storage is not None else []
        if job.promote.bucket not in names:
            raise unknown_name(
                path, "promote.bucket", job.promote.bucket, f"a bucket of stack {stack}", names
            )
        assert cfg.storage is not None
        bucket = cfg.storage.bucket_name(job.promote.bucket)
    trainer = None
    if not job.is_step:
        try:
            trainer = job.trainer_config(instance_type)
        except ValidationError as exc:
            raise validation_error(path, exc, "trainer.") from None
    topology = _topology_request(path, job, cfg)
    partition = _partition(path, job, cfg)
    try:
        spec = job.job_spec(
            instance_type,
            pool.efa,
            bucket,
            run_as_user=tenant_uid(job.tenant, tenant),
            topology=topology,
            partition=partition,
        )
    except ValidationError as exc:
        raise validation_error(path, exc) from None
    rendered = [train_job(spec)] if trainer is None else [config_map(job, trainer), train_job(spec)]
    kind = catalog().accelerator_kind(instance_type)
    assert kind is not None  # node pools are accelerated (spec.pools)

    pools = pool_capacities(cfg)
    flavors, queues = kueue.platform_queues(pools, tenant_shares(cfg))
    provisioning = kueue.provisioning_check(pools)
    checks = [provisioning[0]] if provisioning else []
    queue = next(q for q in queues if q.metadata.name == job.tenant)
    job_manifest = rendered[-1]
    admission = kueue.admit(
        kueue.pod_sets(job_manifest, cluster_training_runtimes()),
        queue,
        flavors,
        cohort=queues,
        checks=checks,
        topologies=kueue.topologies(pools),
    )
    if not admission.admitted:
        key, value = ("gpus_per_node", spec.gpus) if job.is_step else ("nodes.max", job.nodes.max)
        raise bad_key(
            path, key, value, f"Kueue would never admit it: {'; '.join(admission.problems)}"
        )
    requests = job_manifest["spec"]["trainer"]["resourcesPerNode"]["requests"]
    # On a MIG pool the tenant's GPUs are partitions in its queue.
    nominal = tenant.gpu_quota[job.pool] * (partition[1] if partition is not None else 1)
    prepared = Prepared(
        path=path,
        job=job,
        config=cfg,
        instance_type=instance_type,
        gpus_per_node=spec.gpus,
        gpu_resource=spec.accelerator_resource or kind.resource,
        trainer=trainer,
        manifests=rendered,
        admission=admission,
        nominal_gpus=nominal,
        bucket=bucket,
        host=f"{requests['cpu']} vCPUs, {requests['memory']}",
    )
    if prepared.gpus > nominal:
        prepared.notes.append(
            f"borrows {prepared.gpus - nominal} GPUs from the cohort: preemptible when "
            "their owners reclaim them"
        )
    if job.promote is not None and bucket is not None:
        why = write_denied(cfg, job.tenant, job.promote.bucket, job.promote.key_prefix())
        if why is not None:
            prepared.notes.append(
                f"it cannot publish to s3://{bucket}/{job.promote.key_prefix()}: {why}; "
                "the job would export and evaluate, then fail to publish (AccessDenied, exit 1)"
            )
    if topology is not None:
        level = topology.level.rsplit("/", 1)[-1] if topology.level else "anywhere"
        prepared.notes.append(
            f"topology: {topology.mode} {level}; Kueue places the nodes by the network labels "
            "of the pool's nodes at admission (not checked offline)"
        )
    if job.nodes.min < job.nodes.max and not pool.elastic:
        prepared.notes.append(
            f"pool {job.pool} is fixed at {pool.max_size} nodes: after losing one the job "
            "grows back when it is repaired or replaced"
        )
    return prepared


def _topology_request(path: str, job: JobFile, cfg: PlatformConfig) -> kueue.TopologyRequest | None:
    """What the job's pods ask of Kueue's Topology Aware Scheduling: the file's `topology`, or
    on a topology-aware pool by default preferred at its lowest network layer; none on a
    pool that is not (Kueue would then find no flavor for it)."""
    pool = cfg.node_pools[job.pool]
    if not pool.topology_aware:
        if job.topology is not None:
            raise bad_key(
                path,
                "topology",
                job.topology.model_dump(exclude_defaults=True),
                f"pool {job.pool} is not topology-aware (node_pools.{job.pool}.topology_aware); "
                "Kueue would find no flavor for the job: remove topology",
            )
        return None
    layers = catalog().instance(pool.instance_type).network_topology_layers
    assert layers is not None  # spec.pools refuses topology_aware without them
    if job.topology is None:
        return kueue.default_topology_request(layers)
    request = job.topology.request()
    if request.level is not None and request.level not in kueue.network_levels(layers):
        names = [
            n for n, label in kueue.LEVEL_NAMES.items() if label in kueue.network_levels(layers)
        ]
        raise bad_key(
            path,
            "topology",
            job.topology.model_dump(exclude_defaults=True),
            f"the {pool.instance_type} nodes of pool {job.pool} have {layers} network layers: "
            f"one of {', '.join(names)}",
        )
    return request


def _partition(path: str, job: JobFile, cfg: PlatformConfig) -> tuple[str, int] | None:
    """A step's MIG partition on a MIG pool: its resource and how many one GPU holds."""
    from manifests.queues import mig_resource

    pool = cfg.node_pools[job.pool]
    if pool.mig is None:
        if job.partition is not None:
            raise bad_key(
                path,
                "partition",
                job.partition,
                f"pool {job.pool} has no MIG partitions (node_pools.{job.pool}.mig): remove "
                "partition for whole GPUs",
            )
        return None
    if job.partition is None or job.partition not in pool.mig:
        key, value = ("partition", job.partition) if job.partition else ("pool", job.pool)
        raise bad_key(
            path,
            key,
            value,
            f"pool {job.pool} is partitioned by MIG ({', '.join(pool.mig)} per GPU): a step "
            "asks for one of them (`partition`); training takes whole GPUs on another pool",
        )
    if (job.gpus_per_node or 1) != 1:
        raise bad_key(path, "gpus_per_node", job.gpus_per_node, "a step takes one partition")
    return mig_resource(cfg.addons.mig_strategy, job.partition), pool.mig[job.partition]


def prepare(
    path: str, stack: str | None = None, config_file: Path | None = None
) -> Prepared | DataPrepared:
    """Read the job file, load its stack (`stack` overrides the file's; `config_file`: the
    stack file to read instead of stacks/Pulumi.STACK.yaml), and check it."""
    from llmp.stacks import StackNotFound, load_stack

    job = load_job_file(path)
    if stack is not None and stack != job.stack:
        job = job.model_copy(update={"stack": stack})
    try:
        cfg = load_stack(job.stack, config_file)
    except (StackNotFound, ConfigError) as exc:
        raise bad_key(path, "stack", job.stack, str(exc)) from None
    if job.is_data:
        return check_data(path, job, cfg)
    return check(path, job, cfg)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the trainer's JSON in the ConfigMap) as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def manifests_yaml(prepared: Prepared | DataPrepared) -> str:
    """The manifests as one YAML stream, in apply order (`kubectl apply -f -` reads it)."""
    return yaml.dump_all(prepared.manifests, Dumper=_Dumper, sort_keys=False, width=100)
