"""What checking a job file reports, and the checks every kind of job shares.

`load_job_file` reads a job file and validates it on its own
(`manifests.jobs.jobfile.JobFile`); each problem, there or against the stack, is one
`JobFileError` line naming the key: `job file FILE: KEY = VALUE: what is right`
(`bad_key`, `unknown_name`, `validation_error`). Shared by the checks of a training or
step job (`llmp.jobs`) and of a data job (`llmp.jobs.data`): the tenant's namespace has
the FSx claim (`check_fsx_claim`), and the tenant's workload role may read or write an
S3 location (`s3_denied`, `write_denied`, by `spec.tenancy.s3_grants`), a GPU pool is
one the tenant has a quota on (`check_gpu_quota`) and the queue is the namespace's
(`check_queue`).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from llmp.errors import BadInput
from manifests import kueue
from manifests.jobs.jobfile import REQUIRED_HERE, JobFile
from manifests.jobs.pod import FSX_MOUNT
from manifests.volumes import LUSTRE_CLAIM
from spec import readers
from spec.errors import MISSING, clip, closest, one_line, show, sorted_names
from spec.platform import PlatformConfig
from spec.tenancy import MODELS_BUCKET, s3_grants


class JobFileError(BadInput):
    """A job file that cannot run on its stack: `job file FILE: KEY = VALUE: what is right`."""


def bad_key(path: str, key: str, value: Any, expected: str) -> JobFileError:
    """`job file PATH: KEY = VALUE: EXPECTED`, on one line (`<missing>` for no value)."""
    shown = "<missing>" if value is MISSING else show(value)
    return JobFileError(one_line(f"job file {clip(path, 200)}: {key} = {shown}: {expected}"))


def validation_error(path: str, exc: ValidationError, prefix: str = "") -> JobFileError:
    """The first error pydantic found, as `bad_key` (its location under `prefix`)."""
    err = exc.errors()[0]
    key = prefix + ".".join(str(p) for p in err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "missing":
        return bad_key(path, key, MISSING, "required")
    if err["type"] == REQUIRED_HERE:
        return bad_key(path, key, MISSING, msg)
    if err["type"] == "extra_forbidden":
        return bad_key(path, key, err.get("input", MISSING), "unknown key")
    return bad_key(path, key or "(file)", err.get("input", MISSING), msg)


def load_job_file(path: str) -> JobFile:
    """The job file at `path`, validated on its own: JobFileError on anything wrong."""
    try:
        raw = readers.load_file(path, f"job file {path}")
    except readers.ReadError as exc:
        raise JobFileError(str(exc)) from None
    if not isinstance(raw, dict):
        raise JobFileError(
            f"job file {path}: a mapping of keys (name, stack, tenant, pool, ...) expected, "
            f"got {type(raw).__name__}"
        )
    try:
        return JobFile.model_validate(raw)
    except ValidationError as exc:
        raise validation_error(path, exc) from None
    except RecursionError:  # past readers' depth only for a model nested deeper than it
        raise JobFileError(f"job file {path}: nested too deeply to be a job file") from None


def names_or_none(names: Any) -> str:
    """The names, sorted and joined, or `none`."""
    return sorted_names(list(names)) or "none"


def unknown_name(path: str, key: str, value: str, what: str, names: list[str]) -> JobFileError:
    """`value` is not one of `names` (`what` they are), with the closest as a hint."""
    hint = closest(value, names)
    did = f" (did you mean {hint}?)" if hint else ""
    return bad_key(path, key, value, f"not {what}{did}; known: {names_or_none(names)}")


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


def s3_denied(cfg: PlatformConfig, tenant: str, uri: str, verb: str = "read") -> str | None:
    """Why the tenant's pods cannot read (or write) `uri`: not a bucket of the stack, or a
    prefix its workload role is not granted."""
    from contracts.uri import S3Error, split_uri

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


def check_fsx_claim(path: str, job: JobFile, cfg: PlatformConfig) -> None:
    """The job's namespace has the FSx claim it mounts at /fsx: JobFileError if not."""
    lustre = cfg.storage.lustre if cfg.storage is not None else None
    if lustre is None or job.namespace not in lustre.mount_namespaces:
        where = (
            f"storage.lustre.mount_namespaces: {names_or_none(lustre.mount_namespaces)}"
            if lustre is not None
            else f"stack {job.stack} has no storage.lustre"
        )
        raise bad_key(
            path,
            "tenant",
            job.tenant,
            f"namespace {job.namespace} has no {LUSTRE_CLAIM} claim for /fsx ({where})",
        )


TENANT_FSX_DIRS = ("datasets", "checkpoints")
"""What a tenant's volume holds on a shared file system (`/tenants/<name>/` mounted at
/fsx): its two linked directories, the only ones it may write."""


def _fsx_paths(value: Any, key: str = "") -> list[tuple[str, str]]:
    """(key, path) of every string under /fsx in a job file's values, nested ones too."""
    if isinstance(value, str):
        return [(key, value)] if value == FSX_MOUNT or value.startswith(FSX_MOUNT + "/") else []
    if isinstance(value, dict):
        return [
            found
            for k, v in value.items()
            for found in _fsx_paths(v, f"{key}.{k}" if key else str(k))
        ]
    if isinstance(value, list):
        return [found for i, v in enumerate(value) for found in _fsx_paths(v, f"{key}[{i}]")]
    return []


def check_fsx_paths(path: str, job: JobFile, cfg: PlatformConfig) -> None:
    """Where tenants share the file system, every /fsx path of the job is in the tenant's own
    linked directories (/fsx/datasets/..., /fsx/checkpoints/...): JobFileError if not."""
    if job.tenant not in cfg.lustre_tenants():
        return
    roots = [f"{FSX_MOUNT}/{d}" for d in TENANT_FSX_DIRS]
    for key, value in _fsx_paths(job.model_dump(mode="json", exclude_none=True)):
        parts = value.split("/")
        inside = any(value == r or value.startswith(r + "/") for r in roots)
        if ".." in parts or not inside:
            raise bad_key(
                path,
                key,
                value,
                f"tenant {job.tenant}'s volume holds only {' and '.join(roots)} (its "
                f"directories on the shared file system); put it under one of them",
            )


def check_priority(path: str, job: JobFile, cfg: PlatformConfig) -> None:
    """The job's PriorityClass is one its tenant may use: JobFileError if not."""
    allowed = cfg.tenants[job.tenant].allowed_priorities()
    if job.priority not in allowed:
        raise bad_key(
            path,
            "priority",
            job.priority,
            f"tenant {job.tenant} may use {', '.join(allowed)} "
            f"(tenants.{job.tenant}.priority_classes); its quota refuses other pods",
        )


def check_gpu_quota(path: str, job: JobFile, cfg: PlatformConfig) -> None:
    """The job's tenant has a GPU quota on its pool: JobFileError if not."""
    tenant = cfg.tenants[job.tenant]
    if job.pool not in tenant.gpu_quota:
        raise bad_key(
            path,
            "pool",
            job.pool,
            f"tenant {job.tenant} has no quota on this pool (tenants.{job.tenant}.gpu_quota "
            f"covers {names_or_none(tenant.gpu_quota)})",
        )


def check_queue(path: str, job: JobFile) -> None:
    """The job names its namespace's one LocalQueue: JobFileError if not."""
    if job.queue != kueue.LOCAL_QUEUE:
        raise bad_key(
            path,
            "queue",
            job.queue,
            f"namespace {job.namespace} has one LocalQueue, {kueue.LOCAL_QUEUE}",
        )
