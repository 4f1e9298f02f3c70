"""`llmp job`: a job file checked against its stack, rendered, and Kueue's verdict on it.

`prepare(path)` reads a job file (`workloads.jobs.jobfile.JobFile`), loads the stack it
names, and refuses, with one line naming the key, what the cluster would only refuse
later or never admit:

- the pool is a node pool of the stack; the tenant is one of its tenants and has a
  `gpu_quota` entry for the pool (0: it may only borrow);
- the nodes fit the pool (`nodes.max` <= the pool's `max_size`) and the GPUs per node
  fit its instance type;
- the tenant's namespace has the `fsx-lustre` claim (`storage.lustre.mount_namespaces`)
  the job mounts for its data and checkpoints;
- the queue is the namespace's LocalQueue;
- Kueue admits the rendered PyTorchJob against the ClusterQueues and flavors the stack
  declares (`workloads.kueue.admit`, the same rule the stack's admission tests use):
  the tenant's nominal quota plus what the cohort can lend holds `nodes.max` x GPUs;
- a promote job's `promote.bucket` is a bucket of the stack. Whether the tenant's
  workload role may write its revisions there is said in a note (`write_denied`):
  the job would do its work and then fail to publish.

A data job (`kind: data-text`, `data-multimodal`) is a RayJob instead (`check_data`): the
pool is a CPU pool of `cpu_pools` (data-text; a GPU pool is refused) or either kind of pool
(data-multimodal: GPUs per worker on a GPU pool, where the tenant needs a `gpu_quota`), the
workers fit the pool (one per node, `workers` <= `max_size`), the namespace has the FSx claim,
`input` may be read and `output` written by the tenant's workload role (`s3_grants`), the
`pipeline` block validates against the pipeline's own config model, and Kueue admits the
RayJob's pod sets (head, workers, submitter) against the tenant's `cpu` quota or the GPU
pool's flavor. It gives a `DataPrepared`.

The result, a `Prepared`, carries the manifests (`--dry-run` prints them) and what Kueue
would do. The cluster side (`submit`, `status`, `list`, `logs`, `cancel`) is `llmp.job_api`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from components.tenancy import WORKLOAD_SERVICE_ACCOUNT
from llmp.errors import BadInput
from llmp.job_api import wrapped
from spec.catalog import catalog
from spec.errors import MISSING, ConfigError, clip, closest, one_line, show, sorted_names
from spec.labels import CPU_POOL_TAINT
from spec.platform import PlatformConfig
from spec.tenancy import MODELS_BUCKET, s3_grants
from workloads import kueue
from workloads.jobs import rayjob
from workloads.jobs.jobfile import REQUIRED_HERE, JobFile, config_map, data_config_map
from workloads.jobs.pytorchjob import pytorch_job
from workloads.training.ds_config import JobConfig
from workloads.volumes import LUSTRE_CLAIM


class JobFileError(BadInput):
    """A job file that cannot run on its stack: `job file FILE: KEY = VALUE: what is right`."""


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
        return self.admission.flavors.get("worker", {}).get(self.gpu_resource, "")

    def _step_lines(self) -> list[str]:
        job = self.job
        of = catalog().instance(self.instance_type).accelerator
        lines = [
            f"  pool {job.pool}: {self.instance_type}, {self.gpus_per_node} of its "
            f"{of.count if of else '?'} GPUs with {self.host}",
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


def _fail(path: str, key: str, value: Any, expected: str) -> JobFileError:
    shown = "<missing>" if value is MISSING else show(value)
    return JobFileError(one_line(f"job file {clip(path, 200)}: {key} = {shown}: {expected}"))


def _validation_error(path: str, exc: ValidationError, prefix: str = "") -> JobFileError:
    err = exc.errors()[0]
    key = prefix + ".".join(str(p) for p in err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "missing":
        return _fail(path, key, MISSING, "required")
    if err["type"] == REQUIRED_HERE:
        return _fail(path, key, MISSING, msg)
    if err["type"] == "extra_forbidden":
        return _fail(path, key, err.get("input", MISSING), "unknown key")
    return _fail(path, key or "(file)", err.get("input", MISSING), msg)


def load_job_file(path: str) -> JobFile:
    """The job file at `path`, validated on its own: JobFileError on anything wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise JobFileError(f"cannot read job file {path}: {one_line(str(exc))}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise JobFileError(f"job file {path}: not YAML{where}: {problem}") from None
    if not isinstance(raw, dict):
        raise JobFileError(
            f"job file {path}: a mapping of keys (name, stack, tenant, pool, ...) expected, "
            f"got {type(raw).__name__}"
        )
    try:
        return JobFile.model_validate(raw)
    except ValidationError as exc:
        raise _validation_error(path, exc) from None


def _names(names: Any) -> str:
    return sorted_names(list(names)) or "none"


def _unknown(path: str, key: str, value: str, what: str, names: list[str]) -> JobFileError:
    hint = closest(value, names)
    did = f" (did you mean {hint}?)" if hint else ""
    return _fail(path, key, value, f"not {what}{did}; known: {_names(names)}")


def write_denied(
    cfg: PlatformConfig, tenant: str, bucket: str, key_prefix: str, verb: str = "write"
) -> str | None:
    """Why the tenant's workload role (service account `training`, Pod Identity) may not
    write (or read: it is granted both on the same prefixes) under `key_prefix` of the
    stack's bucket `bucket` (a key of storage.buckets), or None: by
    `spec.tenancy.s3_grants`, the rule the program builds the role by."""
    buckets = cfg.storage.buckets if cfg.storage is not None else {}
    grants = s3_grants(cfg.tenants[tenant], buckets)
    if any(key_prefix.startswith(p) for p in grants.get(bucket, [])):
        return None
    if not grants:
        return (
            f"tenant {tenant} has no workload role with S3 access "
            f"(tenants.{tenant}.s3_prefixes, models_prefixes)"
        )
    where = "; ".join(f"{', '.join(p)} in {b}" for b, p in grants.items())
    setting = "models_prefixes" if bucket == MODELS_BUCKET else "s3_prefixes"
    return (
        f"tenant {tenant}'s workload role (service account training) may {verb} only {where} "
        f"(tenants.{tenant}.{setting})"
    )


def _s3_locations(job: JobFile) -> list[tuple[str, str]]:
    """(key, s3:// URI) of what the trainer reads from S3: its data, its restore point."""
    found = [("data", job.data)] if job.data and job.data.startswith("s3://") else []
    restore = (job.trainer.get("checkpoint") or {}) if isinstance(job.trainer, dict) else {}
    if isinstance(restore, dict) and isinstance(restore.get("restore_from"), str):
        found.append(("trainer.checkpoint.restore_from", restore["restore_from"]))
    return found


def _read_denied(cfg: PlatformConfig, tenant: str, uri: str, verb: str = "read") -> str | None:
    """Why the tenant's pods cannot read (or write) `uri`: not a bucket of the stack, or a
    prefix its workload role is not granted."""
    from workloads.training.s3io import S3Error, split_uri

    try:
        name, prefix = split_uri(uri)
    except S3Error as e:
        return str(e)
    buckets = cfg.storage.buckets if cfg.storage is not None else {}
    keys = {cfg.storage.bucket_name(k): k for k in buckets} if cfg.storage is not None else {}
    if name not in keys:
        known = ", ".join(sorted(keys)) or "none"
        return f"bucket {name} is not one of the stack's (storage.buckets: {known})"
    return write_denied(cfg, tenant, keys[name], prefix, verb=verb)


def check(path: str, job: JobFile, cfg: PlatformConfig) -> Prepared:
    """`job` against the stack's validated config: JobFileError on the first problem."""
    from program.args import pool_capacities, tenant_shares

    if job.is_data:
        raise ValueError("a data job is checked by check_data")
    stack = job.stack
    if job.pool not in cfg.node_pools:
        raise _unknown(path, "pool", job.pool, f"a node pool of stack {stack}", [*cfg.node_pools])
    pool = cfg.node_pools[job.pool]
    if job.tenant not in cfg.tenants:
        raise _unknown(path, "tenant", job.tenant, f"a tenant of stack {stack}", [*cfg.tenants])
    tenant = cfg.tenants[job.tenant]
    if job.pool not in tenant.gpu_quota:
        raise _fail(
            path,
            "pool",
            job.pool,
            f"tenant {job.tenant} has no quota on this pool (tenants.{job.tenant}.gpu_quota "
            f"covers {_names(tenant.gpu_quota)})",
        )
    if job.queue != kueue.LOCAL_QUEUE:
        raise _fail(
            path,
            "queue",
            job.queue,
            f"namespace {job.namespace} has one LocalQueue, {kueue.LOCAL_QUEUE}",
        )
    if job.nodes.max > pool.max_size:
        raise _fail(
            path,
            "nodes.max",
            job.nodes.max,
            f"pool {job.pool} has at most {pool.max_size} nodes (node_pools.{job.pool}.max_size)",
        )
    _fsx_claim(path, job, cfg)
    for key, uri in _s3_locations(job):
        why = _read_denied(cfg, job.tenant, uri)
        if why is not None:
            raise _fail(path, key, uri, why)
    instance_type = pool.instance_type
    bucket = None
    if job.promote is not None:
        names = list(cfg.storage.buckets) if cfg.storage is not None else []
        if job.promote.bucket not in names:
            raise _unknown(
                path, "promote.bucket", job.promote.bucket, f"a bucket of stack {stack}", names
            )
        assert cfg.storage is not None
        bucket = cfg.storage.bucket_name(job.promote.bucket)
    trainer = None
    if not job.is_step:
        try:
            trainer = job.trainer_config(instance_type)
        except ValidationError as exc:
            raise _validation_error(path, exc, "trainer.") from None
    try:
        spec = job.job_spec(instance_type, pool.efa, bucket)
    except ValidationError as exc:
        raise _validation_error(path, exc) from None
    rendered = (
        [pytorch_job(spec)] if trainer is None else [config_map(job, trainer), pytorch_job(spec)]
    )
    kind = catalog().accelerator_kind(instance_type)
    assert kind is not None  # node pools are accelerated (spec.pools)

    pools = pool_capacities(cfg)
    flavors, queues = kueue.platform_queues(pools, tenant_shares(cfg))
    provisioning = kueue.provisioning_check(pools)
    checks = [provisioning[0]] if provisioning else []
    queue = next(q for q in queues if q.metadata.name == job.tenant)
    job_manifest = rendered[-1]
    admission = kueue.admit(
        kueue.pod_sets(job_manifest), queue, flavors, cohort=queues, checks=checks
    )
    if not admission.admitted:
        key, value = ("gpus_per_node", spec.gpus) if job.is_step else ("nodes.max", job.nodes.max)
        raise _fail(
            path, key, value, f"Kueue would never admit it: {'; '.join(admission.problems)}"
        )
    requests = job_manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"
    ][0]["resources"]["requests"]
    nominal = tenant.gpu_quota[job.pool]
    prepared = Prepared(
        path=path,
        job=job,
        config=cfg,
        instance_type=instance_type,
        gpus_per_node=spec.gpus,
        gpu_resource=kind.resource,
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
    if job.nodes.min < job.nodes.max and not pool.elastic:
        prepared.notes.append(
            f"pool {job.pool} is fixed at {pool.max_size} nodes: after losing one the job "
            "grows back when it is repaired or replaced"
        )
    return prepared


def _quantity(value: Fraction) -> str:
    return str(int(value)) if value.denominator == 1 else f"{float(value):g}"


def _fsx_claim(path: str, job: JobFile, cfg: PlatformConfig) -> None:
    lustre = cfg.storage.lustre if cfg.storage is not None else None
    if lustre is None or job.namespace not in lustre.mount_namespaces:
        where = (
            f"storage.lustre.mount_namespaces: {_names(lustre.mount_namespaces)}"
            if lustre is not None
            else f"stack {job.stack} has no storage.lustre"
        )
        raise _fail(
            path,
            "tenant",
            job.tenant,
            f"namespace {job.namespace} has no {LUSTRE_CLAIM} claim for /fsx ({where})",
        )


def check_data(path: str, job: JobFile, cfg: PlatformConfig) -> DataPrepared:
    """A data job (`data-text`, `data-multimodal`) against the stack: JobFileError on the
    first problem, else the ConfigMap and RayJob and Kueue's verdict."""
    from program.adoption import team_name
    from program.args import pool_capacities, tenant_shares

    stack = job.stack
    if not cfg.addons.kuberay:
        raise _fail(
            path,
            "kind",
            job.kind,
            f"stack {stack} has no KubeRay operator to run a RayJob (addons.kuberay: false)",
        )
    pools = [*cfg.cpu_pools, *cfg.node_pools]
    if job.pool not in pools:
        raise _unknown(path, "pool", job.pool, f"a CPU or GPU pool of stack {stack}", pools)
    if job.tenant not in cfg.tenants:
        raise _unknown(path, "tenant", job.tenant, f"a tenant of stack {stack}", [*cfg.tenants])
    tenant = cfg.tenants[job.tenant]
    gpu = job.pool in cfg.node_pools
    if gpu and job.kind == "data-text":
        raise _fail(
            path,
            "pool",
            job.pool,
            f"a GPU pool (node_pools): {job.kind} runs on CPU workers; give a CPU pool of "
            f"cpu_pools ({_names(cfg.cpu_pools)})",
        )
    if gpu and job.pool not in tenant.gpu_quota:
        raise _fail(
            path,
            "pool",
            job.pool,
            f"tenant {job.tenant} has no quota on this pool (tenants.{job.tenant}.gpu_quota "
            f"covers {_names(tenant.gpu_quota)})",
        )
    if not gpu and job.gpus_per_node is not None:
        raise _fail(
            path, "gpus_per_node", job.gpus_per_node, f"pool {job.pool} is a CPU pool: no GPUs"
        )
    if job.queue != kueue.LOCAL_QUEUE:
        raise _fail(
            path,
            "queue",
            job.queue,
            f"namespace {job.namespace} has one LocalQueue, {kueue.LOCAL_QUEUE}",
        )
    pool = cfg.node_pools[job.pool] if gpu else cfg.cpu_pools[job.pool]
    workers = job.workers or 0
    section = "node_pools" if gpu else "cpu_pools"
    if workers > pool.max_size:
        raise _fail(
            path,
            "workers",
            workers,
            f"one worker per node, and pool {job.pool} has at most {pool.max_size} nodes "
            f"({section}.{job.pool}.max_size)",
        )
    _fsx_claim(path, job, cfg)
    for key, uri, verb in (("input", job.input, "read"), ("output", job.output, "write")):
        if uri is not None and uri.startswith("s3://"):
            why = _read_denied(cfg, job.tenant, uri, verb)
            if why is not None:
                raise _fail(path, key, uri, why)
    try:
        pipeline = job.pipeline_config()
    except ValidationError as exc:
        # A rule across the block's keys has no location of its own: the block is the key.
        prefix = "pipeline." if exc.errors()[0]["loc"] else "pipeline"
        raise _validation_error(path, exc, prefix) from None
    instance_type = pool.instance_type
    kind = catalog().accelerator_kind(instance_type)
    acc = catalog().instance(instance_type).accelerator
    gpus = 0
    if gpu:
        assert kind is not None and acc is not None  # node pools are accelerated
        gpus = acc.count if job.gpus_per_node is None else job.gpus_per_node
        if gpus > acc.count:
            raise _fail(
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
            team=team_name(cfg, job.stack),
        )
    except ValidationError as exc:
        raise _validation_error(path, exc) from None
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
        raise _fail(
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


def prepare(path: str, stack: str | None = None) -> Prepared | DataPrepared:
    """Read the job file, load its stack (`stack` overrides the file's), and check it."""
    from llmp.synth import StackNotFound, load_stack

    job = load_job_file(path)
    if stack is not None and stack != job.stack:
        job = job.model_copy(update={"stack": stack})
    try:
        cfg = load_stack(job.stack)
    except (StackNotFound, ConfigError) as exc:
        raise _fail(path, "stack", job.stack, str(exc)) from None
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
