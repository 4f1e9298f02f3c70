"""Read-only drift checks of a deployed account against a plan (`llmp verify storage`).

The plan is the one `llmp synth` writes (`out/STACK/plan.json`, or the same
dict synthesized in-process). From it come the *expected* storage resources:

- every `aws:s3/bucket:Bucket`, with the region of its provider (the DR
  provider's region for replicas), and what its sibling resources declare for
  it (matched by their `bucket` input, the physical name): default encryption,
  versioning, the public access block, lifecycle rules and replication rules;
- the FSx for Lustre file system, found in the account by its `Name` tag;
- its data repository associations, matched by file-system path.

The check functions take boto3 clients and only ever call `head_*`, `get_*`
and `describe_*`: nothing is written. Each returns `Finding`s whose status is

- `ok`: the account matches the plan;
- `drift`: the resource exists but differs (the detail says how);
- `missing`: the resource does not exist;
- `error`: the read was refused or failed (AccessDenied, throttling, a 500
  from AWS): nothing is known, so the run fails;
- `not checked`: the endpoint does not implement the API (an emulator), or its
  response lacks the field; said, never counted as a pass, and not a failure.

Values the mock runtime invents (KMS key and role ARNs) are not compared;
a replication destination is compared as the real ARN of the replica bucket
the plan names.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Status = Literal["ok", "drift", "missing", "error", "not checked"]
OK: Status = "ok"
DRIFT: Status = "drift"
MISSING: Status = "missing"
ERROR: Status = "error"
"""The account refused or failed the read (AccessDenied, throttling): nothing is known, and
a verification that could not look must not pass."""
NOT_CHECKED: Status = "not checked"
"""The endpoint does not implement the API (an emulator): said, not faked, and not failed."""
FAILING: frozenset[str] = frozenset({DRIFT, MISSING, ERROR})

BUCKET = "aws:s3/bucket:Bucket"
VERSIONING = "aws:s3/bucketVersioning:BucketVersioning"
ENCRYPTION = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
)
LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
REPLICATION = "aws:s3/bucketReplicationConfig:BucketReplicationConfig"
PUBLIC_ACCESS = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
AWS_PROVIDER = "pulumi:providers:aws"

DRA_NOT_IMPLEMENTED = "the endpoint does not implement data repository associations"
FSX_NOT_IMPLEMENTED = "the endpoint does not implement FSx file systems"

# Error codes of an API the endpoint does not have. Emulators also answer with a
# failure that from AWS would be transient: LocalStack InternalFailure "not yet
# implemented", moto's server a bare HTTP 500.
_UNSUPPORTED_CODES = frozenset(
    {
        "NotImplemented",
        "NotImplementedException",
        "UnknownOperationException",
        "InvalidAction",
        "501",
    }
)
_EMULATOR_UNSUPPORTED_CODES = frozenset({"InternalFailure", "500"})
_NO_BUCKET_CODES = frozenset({"404", "NoSuchBucket", "NotFound"})
_PUBLIC_ACCESS_FLAGS = (
    ("blockPublicAcls", "BlockPublicAcls"),
    ("blockPublicPolicy", "BlockPublicPolicy"),
    ("ignorePublicAcls", "IgnorePublicAcls"),
    ("restrictPublicBuckets", "RestrictPublicBuckets"),
)


class PlanError(Exception):
    """The plan cannot be read or is not a plan that `llmp synth` writes."""


@dataclass(frozen=True)
class Finding:
    """One row of the report: a check of one resource."""

    resource: str
    check: str
    status: Status
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


# ---------------------------------------------------------------------------
# What the plan declares
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LifecycleRule:
    """A lifecycle rule as declared; None/() where the rule declares nothing."""

    id: str
    status: str = "Enabled"
    prefix: str = ""
    transitions: tuple[tuple[int, str], ...] = ()
    expiration_days: int | None = None
    noncurrent_expiration_days: int | None = None
    abort_multipart_days: int | None = None


@dataclass(frozen=True)
class ReplicationRule:
    """A replication rule as declared; `destination_arn` is the replica bucket's real ARN."""

    id: str
    status: str
    destination_arn: str
    storage_class: str | None
    delete_marker_status: str
    rtc_status: str


@dataclass(frozen=True)
class ExpectedBucket:
    """A bucket of the plan and what its sibling resources declare for it."""

    name: str
    """Physical bucket name (the Bucket's `bucket` input)."""
    resource: str
    """Pulumi resource name, e.g. `storage-checkpoints-replica`."""
    region: str
    sse_algorithm: str | None = None
    bucket_key_enabled: bool | None = None
    versioning: str | None = None
    """Declared versioning status, None when the plan has no BucketVersioning."""
    public_access_block: dict[str, bool] | None = None
    lifecycle: tuple[LifecycleRule, ...] | None = None
    replication: tuple[ReplicationRule, ...] | None = None


@dataclass(frozen=True)
class ExpectedAssociation:
    """A data repository association of the plan."""

    resource: str
    file_system_path: str
    data_repository_path: str
    auto_import_events: tuple[str, ...] | None = None
    auto_export_events: tuple[str, ...] | None = None
    imported_file_chunk_size: int | None = None


@dataclass(frozen=True)
class ExpectedFileSystem:
    """The FSx for Lustre file system of the plan, found in the account by its Name tag."""

    name_tag: str
    resource: str
    region: str
    deployment_type: str | None
    storage_capacity: int | None
    per_unit_storage_throughput: int | None
    data_compression_type: str | None
    associations: tuple[ExpectedAssociation, ...] = field(default_factory=tuple)


def load_plan_file(path: Path) -> dict[str, Any]:
    """Read and validate a plan.json; PlanError (one line) when it is not one."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"cannot read plan {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise PlanError(f"plan {path} is not UTF-8 text (byte {exc.start})") from None
    try:
        plan = json.loads(text)
    except ValueError as exc:
        raise PlanError(f"plan {path} is not JSON: {exc}") from None
    except RecursionError:
        raise PlanError(f"plan {path} is nested too deeply to be a plan") from None
    validate_plan(plan, str(path))
    return plan


def validate_plan(plan: Any, source: str = "plan") -> None:
    """Raise PlanError unless `plan` has the shape `llmp synth` writes."""
    if not isinstance(plan, dict) or not isinstance(plan.get("resources"), list):
        raise PlanError(f"{source} is not a plan written by `llmp synth` (no `resources` list)")
    for i, r in enumerate(plan["resources"]):
        if (
            not isinstance(r, dict)
            or not isinstance(r.get("type"), str)
            or not isinstance(r.get("name"), str)
            or not isinstance(r.get("inputs"), dict)
        ):
            raise PlanError(f"{source}: resource {i} lacks a type, a name or inputs")


def _providers(plan: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """AWS provider URN -> provider resource."""
    return {
        r.get("urn", ""): r for r in plan["resources"] if r["type"] == AWS_PROVIDER and r.get("urn")
    }


def primary_region(plan: Mapping[str, Any]) -> str | None:
    """The region of the plan's primary AWS provider: the one most AWS resources use."""
    providers = _providers(plan)
    counts: dict[str, int] = dict.fromkeys(providers, 0)
    for r in plan["resources"]:
        if r["type"].startswith("aws:") and r.get("provider") in counts:
            counts[r["provider"]] += 1
    if not counts:
        return None
    urn = max(sorted(counts), key=lambda u: counts[u])
    region = providers[urn]["inputs"].get("region")
    return region if isinstance(region, str) else None


def _region_of(
    resource: Mapping[str, Any], plan: Mapping[str, Any], primary: str, region: str
) -> str:
    """The resource's provider region; `region` (the chosen primary) for the primary provider."""
    provider = _providers(plan).get(resource.get("provider") or "")
    declared = provider["inputs"].get("region") if provider else None
    if not isinstance(declared, str) or declared == primary:
        return region
    return declared


def _on_bucket(plan: Mapping[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {
        r["inputs"]["bucket"]: r["inputs"]
        for r in plan["resources"]
        if r["type"] == type_ and isinstance(r["inputs"].get("bucket"), str)
    }


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _lifecycle_rule(rule: Mapping[str, Any]) -> LifecycleRule:
    filt = rule.get("filter") or {}
    prefix = filt.get("prefix", rule.get("prefix", "")) if isinstance(filt, dict) else ""
    transitions = tuple(
        (_int(t.get("days")) or 0, str(t.get("storageClass")))
        for t in rule.get("transitions") or []
    )
    return LifecycleRule(
        id=str(rule.get("id")),
        status=str(rule.get("status", "Enabled")),
        prefix=prefix or "",
        transitions=transitions,
        expiration_days=_int((rule.get("expiration") or {}).get("days")),
        noncurrent_expiration_days=_int(
            (rule.get("noncurrentVersionExpiration") or {}).get("noncurrentDays")
        ),
        abort_multipart_days=_int(
            (rule.get("abortIncompleteMultipartUpload") or {}).get("daysAfterInitiation")
        ),
    )


def bucket_arn(value: str, physical_by_resource: Mapping[str, str]) -> str:
    """The real ARN of a bucket reference in the plan.

    The mock runtime gives a bucket the ARN `arn:aws:mock:...:bucket/<resource name>`;
    the real one is `arn:aws:s3:::<physical name>`.
    """
    if value.startswith("arn:aws:s3:::"):
        return value
    tail = value.rsplit("/", 1)[-1] if ":bucket/" in value else None
    if tail is not None and tail in physical_by_resource:
        return f"arn:aws:s3:::{physical_by_resource[tail]}"
    return value


def expected_buckets(plan: Mapping[str, Any], region: str | None = None) -> list[ExpectedBucket]:
    """Every bucket of the plan, with what the plan declares for it.

    `region` replaces the primary provider's region (the DR provider keeps its own).
    """
    primary = primary_region(plan) or ""
    chosen = region or primary
    buckets = [r for r in plan["resources"] if r["type"] == BUCKET]
    physical_by_resource = {
        r["name"]: r["inputs"]["bucket"]
        for r in buckets
        if isinstance(r["inputs"].get("bucket"), str)
    }
    encryption = _on_bucket(plan, ENCRYPTION)
    versioning = _on_bucket(plan, VERSIONING)
    public = _on_bucket(plan, PUBLIC_ACCESS)
    lifecycle = _on_bucket(plan, LIFECYCLE)
    replication = _on_bucket(plan, REPLICATION)
    out = []
    for r in buckets:
        name = r["inputs"].get("bucket")
        if not isinstance(name, str):
            continue
        sse_algorithm = bucket_key = None
        if name in encryption:
            rules = encryption[name].get("rules") or [{}]
            by_default = rules[0].get("applyServerSideEncryptionByDefault") or {}
            sse_algorithm = by_default.get("sseAlgorithm")
            bucket_key = bool(rules[0].get("bucketKeyEnabled", False))
        status = None
        if name in versioning:
            status = (versioning[name].get("versioningConfiguration") or {}).get("status")
        pab = None
        if name in public:
            pab = {key: bool(public[name].get(key, False)) for key, _ in _PUBLIC_ACCESS_FLAGS}
        rules_lc = None
        if name in lifecycle:
            rules_lc = tuple(_lifecycle_rule(x) for x in lifecycle[name].get("rules") or [])
        rules_rep = None
        if name in replication:
            rules_rep = tuple(
                _replication_rule(x, physical_by_resource)
                for x in replication[name].get("rules") or []
            )
        out.append(
            ExpectedBucket(
                name=name,
                resource=r["name"],
                region=_region_of(r, plan, primary, chosen),
                sse_algorithm=sse_algorithm,
                bucket_key_enabled=bucket_key,
                versioning=status,
                public_access_block=pab,
                lifecycle=rules_lc,
                replication=rules_rep,
            )
        )
    return out


def _replication_rule(
    rule: Mapping[str, Any], physical_by_resource: Mapping[str, str]
) -> ReplicationRule:
    dest = rule.get("destination") or {}
    rtc = dest.get("replicationTime") or {}
    return ReplicationRule(
        id=str(rule.get("id")),
        status=str(rule.get("status", "Enabled")),
        destination_arn=bucket_arn(str(dest.get("bucket", "")), physical_by_resource),
        storage_class=dest.get("storageClass"),
        delete_marker_status=str(
            (rule.get("deleteMarkerReplication") or {}).get("status", "Disabled")
        ),
        rtc_status=str(rtc.get("status", "Disabled")),
    )


def expected_file_systems(
    plan: Mapping[str, Any], region: str | None = None
) -> list[ExpectedFileSystem]:
    """The plan's Lustre file systems, each with the associations declared on it."""
    primary = primary_region(plan) or ""
    chosen = region or primary
    out = []
    for r in plan["resources"]:
        if r["type"] != LUSTRE:
            continue
        inputs = r["inputs"]
        fs_id = f"{r['name']}-id"  # the mock runtime's id, what associations refer to
        associations = tuple(
            _association(a)
            for a in plan["resources"]
            if a["type"] == DRA and a["inputs"].get("fileSystemId") == fs_id
        )
        out.append(
            ExpectedFileSystem(
                name_tag=str((inputs.get("tags") or {}).get("Name", r["name"])),
                resource=r["name"],
                region=_region_of(r, plan, primary, chosen),
                deployment_type=inputs.get("deploymentType"),
                storage_capacity=_int(inputs.get("storageCapacity")),
                per_unit_storage_throughput=_int(inputs.get("perUnitStorageThroughput")),
                data_compression_type=inputs.get("dataCompressionType"),
                associations=associations,
            )
        )
    return out


def _association(resource: Mapping[str, Any]) -> ExpectedAssociation:
    inputs = resource["inputs"]
    s3 = inputs.get("s3") or {}
    imports = (s3.get("autoImportPolicy") or {}).get("events")
    exports = (s3.get("autoExportPolicy") or {}).get("events")
    return ExpectedAssociation(
        resource=resource["name"],
        file_system_path=str(inputs.get("fileSystemPath")),
        data_repository_path=str(inputs.get("dataRepositoryPath")),
        auto_import_events=tuple(sorted(imports)) if imports is not None else None,
        auto_export_events=tuple(sorted(exports)) if exports is not None else None,
        imported_file_chunk_size=_int(inputs.get("importedFileChunkSize")),
    )


# ---------------------------------------------------------------------------
# What the account has
# ---------------------------------------------------------------------------


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str((response.get("Error") or {}).get("Code", ""))


def _http_status(exc: Exception) -> int | None:
    response = getattr(exc, "response", None) or {}
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None


def _is_client_error(exc: Exception) -> bool:
    return hasattr(exc, "response") and isinstance(getattr(exc, "response", None), dict)


def unsupported(exc: Exception, emulated: bool = False) -> bool:
    """Whether `exc` says the endpoint does not implement the API called.

    An emulator (moto, LocalStack: `emulated`) may also answer HTTP 500 or
    InternalFailure; from AWS itself, those are failures, not a missing API.
    """
    if isinstance(exc, NotImplementedError):
        return True
    if not _is_client_error(exc):
        return False
    code, status = _code(exc), _http_status(exc)
    if code in _UNSUPPORTED_CODES or status == 501:
        return True
    return emulated and (status == 500 or code in _EMULATOR_UNSUPPORTED_CODES)


def _error_text(exc: Exception) -> str:
    if _is_client_error(exc):
        message = (getattr(exc, "response", {}).get("Error") or {}).get("Message", "")
        return f"{_code(exc)}: {message}".strip(": ").splitlines()[0] if message else _code(exc)
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _get(call: Any, absent: set[str], **kwargs: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(response, None); (None, None) when the error code is in `absent`; (None, why) else."""
    try:
        return call(**kwargs), None
    except Exception as exc:
        if not (_is_client_error(exc) or isinstance(exc, NotImplementedError)):
            raise
        if _code(exc) in absent:
            return None, None
        return None, _error_text(exc)


def check_bucket(s3: Any, expected: ExpectedBucket) -> list[Finding]:
    """Compare one bucket with the plan: existence, encryption, versioning, public access
    block, lifecycle rules and replication rules. `s3` is a client in the bucket's region."""
    name = expected.name
    findings: list[Finding] = []
    add = findings.append

    try:
        head = s3.head_bucket(Bucket=name)
    except Exception as exc:
        if not _is_client_error(exc):
            raise
        if _code(exc) in _NO_BUCKET_CODES or _http_status(exc) == 404:
            return [Finding(name, "exists", MISSING, f"no bucket {name} ({expected.region})")]
        return [Finding(name, "exists", ERROR, _error_text(exc))]
    actual_region = head.get("BucketRegion") or (
        (head.get("ResponseMetadata") or {}).get("HTTPHeaders", {}).get("x-amz-bucket-region")
    )
    if actual_region and actual_region != expected.region:
        add(Finding(name, "exists", DRIFT, f"in {actual_region}, the plan says {expected.region}"))
    else:
        add(Finding(name, "exists", OK, f"in {actual_region or expected.region}"))

    if expected.sse_algorithm is not None:
        add(_check_encryption(s3, expected))
    if expected.versioning is not None:
        add(_check_versioning(s3, expected))
    if expected.public_access_block is not None:
        add(_check_public_access(s3, expected))
    if expected.lifecycle is not None:
        findings.extend(check_lifecycle(s3, expected))
    if expected.replication is not None:
        findings.extend(check_replication(s3, expected))
    return findings


def _unreadable(name: str, check: str, why: str) -> Finding:
    return Finding(name, check, ERROR, why)


def _check_encryption(s3: Any, expected: ExpectedBucket) -> Finding:
    name, check = expected.name, "encryption"
    resp, why = _get(
        s3.get_bucket_encryption, {"ServerSideEncryptionConfigurationNotFoundError"}, Bucket=name
    )
    if why:
        return _unreadable(name, check, why)
    rules = ((resp or {}).get("ServerSideEncryptionConfiguration") or {}).get("Rules") or []
    if not rules:
        return Finding(name, check, DRIFT, "no default encryption")
    rule = rules[0]
    algorithm = (rule.get("ApplyServerSideEncryptionByDefault") or {}).get("SSEAlgorithm")
    bucket_key = bool(rule.get("BucketKeyEnabled", False))
    want = f"{expected.sse_algorithm}, bucket key {'on' if expected.bucket_key_enabled else 'off'}"
    have = f"{algorithm}, bucket key {'on' if bucket_key else 'off'}"
    if algorithm != expected.sse_algorithm or bucket_key != expected.bucket_key_enabled:
        return Finding(name, check, DRIFT, f"{have}; the plan says {want}")
    return Finding(name, check, OK, have)


def _check_versioning(s3: Any, expected: ExpectedBucket) -> Finding:
    name, check = expected.name, "versioning"
    resp, why = _get(s3.get_bucket_versioning, set(), Bucket=name)
    if why:
        return _unreadable(name, check, why)
    status = (resp or {}).get("Status") or "never enabled"
    if status != expected.versioning:
        return Finding(name, check, DRIFT, f"{status}; the plan says {expected.versioning}")
    return Finding(name, check, OK, status)


def _check_public_access(s3: Any, expected: ExpectedBucket) -> Finding:
    name, check = expected.name, "public access block"
    resp, why = _get(
        s3.get_public_access_block, {"NoSuchPublicAccessBlockConfiguration"}, Bucket=name
    )
    if why:
        return _unreadable(name, check, why)
    if resp is None:
        return Finding(name, check, DRIFT, "no public access block")
    have = resp.get("PublicAccessBlockConfiguration") or {}
    want = expected.public_access_block or {}
    wrong = [
        f"{aws_key}={have.get(aws_key, False)}"
        for key, aws_key in _PUBLIC_ACCESS_FLAGS
        if bool(have.get(aws_key, False)) != want.get(key, False)
    ]
    if wrong:
        return Finding(name, check, DRIFT, f"{', '.join(wrong)}; the plan says otherwise")
    return Finding(name, check, OK, "as declared")


def _actual_lifecycle(rule: Mapping[str, Any]) -> LifecycleRule:
    filt = rule.get("Filter") or {}
    prefix = filt.get("Prefix", (filt.get("And") or {}).get("Prefix", rule.get("Prefix", "")))
    return LifecycleRule(
        id=str(rule.get("ID")),
        status=str(rule.get("Status")),
        prefix=prefix or "",
        transitions=tuple(
            (_int(t.get("Days")) or 0, str(t.get("StorageClass")))
            for t in rule.get("Transitions") or []
        ),
        expiration_days=_int((rule.get("Expiration") or {}).get("Days")),
        noncurrent_expiration_days=_int(
            (rule.get("NoncurrentVersionExpiration") or {}).get("NoncurrentDays")
        ),
        abort_multipart_days=_int(
            (rule.get("AbortIncompleteMultipartUpload") or {}).get("DaysAfterInitiation")
        ),
    )


def lifecycle_differences(want: LifecycleRule, have: LifecycleRule) -> list[str]:
    """What differs between a declared and a deployed lifecycle rule, in words."""

    def steps(t: tuple[tuple[int, str], ...]) -> str:
        return ", ".join(f"{sc} at {d}d" for d, sc in t) or "none"

    diffs = []
    if have.status != want.status:
        diffs.append(f"status {have.status} (plan {want.status})")
    if have.prefix != want.prefix:
        diffs.append(f"prefix {have.prefix!r} (plan {want.prefix!r})")
    if sorted(have.transitions) != sorted(want.transitions):
        diffs.append(f"transitions {steps(have.transitions)} (plan {steps(want.transitions)})")
    for label, h, w in (
        ("expiration days", have.expiration_days, want.expiration_days),
        (
            "noncurrent expiration days",
            have.noncurrent_expiration_days,
            want.noncurrent_expiration_days,
        ),
        ("abort multipart days", have.abort_multipart_days, want.abort_multipart_days),
    ):
        if h != w:
            diffs.append(
                f"{label} {h if h is not None else 'none'} (plan {w if w is not None else 'none'})"
            )
    return diffs


def check_lifecycle(s3: Any, expected: ExpectedBucket) -> list[Finding]:
    """One finding per declared rule, plus one per deployed rule the plan does not declare."""
    name = expected.name
    declared = expected.lifecycle or ()
    resp, why = _get(
        s3.get_bucket_lifecycle_configuration, {"NoSuchLifecycleConfiguration"}, Bucket=name
    )
    if why:
        return [_unreadable(name, f"lifecycle rule {r.id}", why) for r in declared]
    actual = {r.id: r for r in (_actual_lifecycle(x) for x in (resp or {}).get("Rules") or [])}
    findings = []
    for want in declared:
        check = f"lifecycle rule {want.id}"
        have = actual.get(want.id)
        if have is None:
            findings.append(
                Finding(name, check, DRIFT, f"rule {want.id} is not in the bucket's lifecycle")
            )
            continue
        diffs = lifecycle_differences(want, have)
        findings.append(
            Finding(name, check, DRIFT if diffs else OK, "; ".join(diffs) or "as declared")
        )
    for extra in sorted(set(actual) - {r.id for r in declared}):
        findings.append(
            Finding(name, f"lifecycle rule {extra}", DRIFT, f"rule {extra} is not in the plan")
        )
    return findings


def check_replication(s3: Any, expected: ExpectedBucket) -> list[Finding]:
    """One finding per declared replication rule: destination, storage class, delete
    markers and Replication Time Control as declared."""
    name = expected.name
    declared = expected.replication or ()
    resp, why = _get(
        s3.get_bucket_replication, {"ReplicationConfigurationNotFoundError"}, Bucket=name
    )
    if why:
        return [_unreadable(name, f"replication rule {r.id}", why) for r in declared]
    rules = ((resp or {}).get("ReplicationConfiguration") or {}).get("Rules") or []
    actual = {str(r.get("ID")): r for r in rules}
    findings = []
    for want in declared:
        check = f"replication rule {want.id}"
        rule = actual.get(want.id)
        if rule is None:
            findings.append(
                Finding(name, check, DRIFT, f"rule {want.id} is not in the bucket's replication")
            )
            continue
        dest = rule.get("Destination") or {}
        have = {
            "status": rule.get("Status"),
            "destination": dest.get("Bucket"),
            "storage class": dest.get("StorageClass") or "STANDARD",
            "delete markers": (rule.get("DeleteMarkerReplication") or {}).get("Status", "Disabled"),
            "RTC": (dest.get("ReplicationTime") or {}).get("Status", "Disabled"),
        }
        wanted = {
            "status": want.status,
            "destination": want.destination_arn,
            "storage class": want.storage_class or "STANDARD",
            "delete markers": want.delete_marker_status,
            "RTC": want.rtc_status,
        }
        diffs = [f"{k} {have[k]} (plan {wanted[k]})" for k in wanted if have[k] != wanted[k]]
        findings.append(
            Finding(
                name,
                check,
                DRIFT if diffs else OK,
                "; ".join(diffs) or f"to {want.destination_arn}, RTC {want.rtc_status}",
            )
        )
    return findings


def _lustre_file_systems(fsx: Any) -> list[dict[str, Any]]:
    systems: list[dict[str, Any]] = []
    token = None
    while True:
        resp = fsx.describe_file_systems(**({"NextToken": token} if token else {}))
        systems.extend(resp.get("FileSystems") or [])
        token = resp.get("NextToken")
        if not token:
            return systems


def _tag(resource: Mapping[str, Any], key: str) -> str | None:
    for tag in resource.get("Tags") or []:
        if tag.get("Key") == key:
            return str(tag.get("Value"))
    return None


def check_file_system(
    fsx: Any, expected: ExpectedFileSystem, emulated: bool = False
) -> tuple[list[Finding], str | None]:
    """Find the file system by its Name tag and compare it with the plan.

    Returns the findings and the file system's id (None when it was not found).
    """
    name = expected.name_tag
    try:
        systems = _lustre_file_systems(fsx)
    except Exception as exc:
        if unsupported(exc, emulated):
            return [Finding(name, "exists", NOT_CHECKED, FSX_NOT_IMPLEMENTED)], None
        if not _is_client_error(exc):
            raise
        return [Finding(name, "exists", ERROR, _error_text(exc))], None
    matches = [
        fs
        for fs in systems
        if fs.get("FileSystemType", "LUSTRE") == "LUSTRE" and _tag(fs, "Name") == name
    ]
    if not matches:
        return [
            Finding(
                name,
                "exists",
                MISSING,
                f"no Lustre file system tagged Name={name} ({expected.region})",
            )
        ], None
    if len(matches) > 1:
        ids = ", ".join(sorted(str(fs.get("FileSystemId")) for fs in matches))
        return [
            Finding(name, "exists", DRIFT, f"{len(matches)} file systems tagged Name={name}: {ids}")
        ], None
    fs = matches[0]
    fs_id = str(fs.get("FileSystemId"))
    lustre = fs.get("LustreConfiguration") or {}
    findings = [Finding(name, "exists", OK, fs_id)]
    lifecycle = fs.get("Lifecycle")
    if lifecycle is None:
        findings.append(
            Finding(name, "lifecycle", NOT_CHECKED, "the endpoint does not report the lifecycle")
        )
    else:
        findings.append(
            Finding(
                name,
                "lifecycle",
                OK if lifecycle == "AVAILABLE" else DRIFT,
                lifecycle if lifecycle == "AVAILABLE" else f"{lifecycle}, not AVAILABLE",
            )
        )
    for check, want, have in (
        ("deployment type", expected.deployment_type, lustre.get("DeploymentType")),
        ("storage capacity GiB", expected.storage_capacity, fs.get("StorageCapacity")),
        (
            "throughput MB/s/TiB",
            expected.per_unit_storage_throughput,
            lustre.get("PerUnitStorageThroughput"),
        ),
        (
            "data compression",
            expected.data_compression_type,
            lustre.get("DataCompressionType", "NONE"),
        ),
    ):
        if want is None:
            continue
        if have is None:
            findings.append(Finding(name, check, NOT_CHECKED, "the endpoint does not report it"))
        elif have != want:
            findings.append(Finding(name, check, DRIFT, f"{have}; the plan says {want}"))
        else:
            findings.append(Finding(name, check, OK, str(have)))
    return findings, fs_id


def check_associations(
    fsx: Any,
    expected: ExpectedFileSystem,
    file_system_id: str | None,
    file_system_status: Status,
    emulated: bool = False,
) -> list[Finding]:
    """One finding per declared data repository association, matched by file-system path.

    `file_system_status` is the file system's own `exists` status: when it could not
    be checked, neither can its associations; when it is missing, so are they.
    """
    declared = expected.associations
    check = "data repository association"

    def every(status: Status, detail: str) -> list[Finding]:
        return [Finding(_dra_label(a), check, status, detail) for a in declared]

    if file_system_status == NOT_CHECKED:
        return every(NOT_CHECKED, "the file system was not checked")
    if file_system_id is None:
        return every(MISSING, f"its file system {expected.name_tag} was not found")
    try:
        associations: list[dict[str, Any]] = []
        token = None
        while True:
            kwargs: dict[str, Any] = {
                "Filters": [{"Name": "file-system-id", "Values": [file_system_id]}]
            }
            if token:
                kwargs["NextToken"] = token
            resp = fsx.describe_data_repository_associations(**kwargs)
            associations.extend(resp.get("Associations") or [])
            token = resp.get("NextToken")
            if not token:
                break
    except Exception as exc:
        if unsupported(exc, emulated):
            return every(NOT_CHECKED, DRA_NOT_IMPLEMENTED)
        if not _is_client_error(exc):
            raise
        return every(ERROR, _error_text(exc))
    by_path = {str(a.get("FileSystemPath")): a for a in associations}
    findings = []
    for want in declared:
        have = by_path.get(want.file_system_path)
        label = _dra_label(want)
        if have is None:
            findings.append(
                Finding(label, check, MISSING, f"no association at {want.file_system_path}")
            )
            continue
        s3 = have.get("S3") or {}
        imports = (s3.get("AutoImportPolicy") or {}).get("Events")
        exports = (s3.get("AutoExportPolicy") or {}).get("Events")
        diffs = []
        if have.get("Lifecycle") not in (None, "AVAILABLE"):
            diffs.append(f"lifecycle {have.get('Lifecycle')}")
        if have.get("DataRepositoryPath") != want.data_repository_path:
            diffs.append(
                f"path {have.get('DataRepositoryPath')} (plan {want.data_repository_path})"
            )
        for what, h, w in (
            ("auto-import", imports, want.auto_import_events),
            ("auto-export", exports, want.auto_export_events),
        ):
            h_sorted = tuple(sorted(h)) if h else None
            if h_sorted != (w or None):
                shown = ", ".join(h_sorted or ()) or "none"
                diffs.append(f"{what} {shown} (plan {', '.join(w or ()) or 'none'})")
        chunk = _int(have.get("ImportedFileChunkSize"))
        if want.imported_file_chunk_size is not None and chunk != want.imported_file_chunk_size:
            diffs.append(f"chunk size {chunk} (plan {want.imported_file_chunk_size})")
        findings.append(
            Finding(
                label, check, DRIFT if diffs else OK, "; ".join(diffs) or want.data_repository_path
            )
        )
    return findings


def _dra_label(a: ExpectedAssociation) -> str:
    return f"{a.resource} {a.file_system_path}"


# ---------------------------------------------------------------------------
# The whole check
# ---------------------------------------------------------------------------


class ClientFactory:
    """Makes boto3 clients per (service, region) from one session, cached.

    Against an emulator (`endpoint_url`), a failed call is not retried: an API the
    emulator lacks answers 500, and retrying it only makes the report slow.
    """

    def __init__(self, session: Any, endpoint_url: str | None = None):
        from botocore.config import Config

        self.session = session
        self.endpoint_url = endpoint_url
        attempts = 1 if endpoint_url else 3
        self.config = Config(
            retries={"mode": "standard", "total_max_attempts": attempts},
            connect_timeout=5 if endpoint_url else 20,
            read_timeout=30,
        )
        self._clients: dict[tuple[str, str], Any] = {}

    @property
    def emulated(self) -> bool:
        return self.endpoint_url is not None

    def __call__(self, service: str, region: str) -> Any:
        key = (service, region)
        if key not in self._clients:
            self._clients[key] = self.session.client(
                service, region_name=region, endpoint_url=self.endpoint_url, config=self.config
            )
        return self._clients[key]


def verify_storage(
    plan: Mapping[str, Any], clients: ClientFactory, region: str | None = None
) -> list[Finding]:
    """Every storage check of the plan against the account `clients` reach."""
    findings: list[Finding] = []
    for bucket in expected_buckets(plan, region):
        findings.extend(check_bucket(clients("s3", bucket.region), bucket))
    for fs in expected_file_systems(plan, region):
        fsx = clients("fsx", fs.region)
        fs_findings, fs_id = check_file_system(fsx, fs, clients.emulated)
        findings.extend(fs_findings)
        exists = next(f.status for f in fs_findings if f.check == "exists")
        findings.extend(check_associations(fsx, fs, fs_id, exists, clients.emulated))
    return findings


def failed(findings: Iterable[Finding]) -> bool:
    """Whether any finding is drift, missing or an error ("not checked" alone does not fail)."""
    return any(f.status in FAILING for f in findings)


__all__ = [
    "DRA_NOT_IMPLEMENTED",
    "ClientFactory",
    "ExpectedAssociation",
    "ExpectedBucket",
    "ExpectedFileSystem",
    "Finding",
    "LifecycleRule",
    "PlanError",
    "ReplicationRule",
    "bucket_arn",
    "check_associations",
    "check_bucket",
    "check_file_system",
    "check_lifecycle",
    "check_replication",
    "expected_buckets",
    "expected_file_systems",
    "failed",
    "lifecycle_differences",
    "load_plan_file",
    "primary_region",
    "unsupported",
    "validate_plan",
    "verify_storage",
]
