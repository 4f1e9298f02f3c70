"""Read-only go-live checks of a deployed account against a plan (`llmp verify STACK`).

The plan is the one `llmp synth` writes (`out/STACK/plan.json`, or the same
dict synthesized in-process). From it come the *expected* resources, in four
areas:

- `cluster`: the EKS cluster (found by the name the plan gives it): ACTIVE,
  its Kubernetes version, control-plane log types, envelope encryption of
  secrets with the key behind the plan's KMS alias, endpoint access,
  authentication mode, support type, deletion protection, and the stack's
  default tags;
- `nodegroups`: every managed node group (by name, else by its
  `llm-platform/pool` label): ACTIVE, version, capacity type, instance types,
  AMI type, scaling, labels, taints, auto-repair, and the launch template
  version it runs: the one the plan declares (its `Name` tag), the EFA
  interface count and card/device layout, the placement group and the
  capacity reservation;
- `addons`: every EKS managed add-on: ACTIVE at the declared version, with the
  declared configuration;
- `storage`: every `aws:s3/bucket:Bucket` in the region of its provider (the
  DR provider's region for replicas) with what its sibling resources declare
  for it (encryption, versioning, public access block, lifecycle and
  replication rules); the FSx for Lustre file system, found by its `Name` tag,
  and its data repository associations, matched by file-system path.

The check functions take boto3 clients and only ever call `head_*`, `get_*`,
`list_*` and `describe_*`: nothing is written. Each returns `Finding`s whose
status is one of

- `pass`: the account matches the plan;
- `fail`: the resource is missing, differs (the reason says how), or the
  account refused or failed the read (AccessDenied, throttling, a 500 from
  AWS): a verification that could not look must not pass;
- `not checked`: the endpoint does not implement the API (an emulator), its
  response lacks the field, or the value is only known to the cloud; said,
  never counted as a pass, and not a failure.

Physical names: the plan holds the real names of the cluster, the node groups
and the buckets (they are set from config, not auto-named). The stack's
outputs (`pulumi stack output --json`) are a cross-check: where they name
another cluster or node group, that one is verified and the difference is a
failure. Values the mock runtime invents (KMS key, role and security-group
ARNs and ids, auto-named launch templates and placement groups) are never
compared as such: a launch template is matched by its `Name` tag, the secrets
key through the plan's KMS alias, a replication destination as the real ARN
of the replica bucket the plan names.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

Status = Literal["pass", "fail", "not checked"]
PASS: Status = "pass"
FAIL: Status = "fail"
"""Missing, different, or unreadable: a refused read (AccessDenied, throttling) fails too,
because a verification that could not look must not pass."""
NOT_CHECKED: Status = "not checked"
"""The endpoint does not implement the API (an emulator) or does not report the field:
said, not faked, and not failed."""
STATUSES: tuple[Status, ...] = (PASS, FAIL, NOT_CHECKED)

Area = Literal["cluster", "nodegroups", "addons", "storage"]
AREAS: tuple[Area, ...] = ("cluster", "nodegroups", "addons", "storage")

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
# The credentials themselves are refused: nothing can be checked with them.
_REJECTED_CREDENTIAL_CODES = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidAccessKeyId",
        "AuthFailure",
    }
)
_PUBLIC_ACCESS_FLAGS = (
    ("blockPublicAcls", "BlockPublicAcls"),
    ("blockPublicPolicy", "BlockPublicPolicy"),
    ("ignorePublicAcls", "IgnorePublicAcls"),
    ("restrictPublicBuckets", "RestrictPublicBuckets"),
)


class PlanError(Exception):
    """The plan cannot be read or is not a plan that `llmp synth` writes."""


class OutputsError(Exception):
    """The stack outputs cannot be read or are not what `pulumi stack output --json` prints."""


class CredentialsRejected(Exception):
    """AWS refused the credentials themselves (expired token, unknown key): no check can run,
    so this is bad input for the whole run rather than a failed row per resource."""


@dataclass(frozen=True)
class Finding:
    """One row of the report: a check of one resource.

    The check functions leave `area` empty; `verify_stack` sets it, so `--only` and the
    table's sections need no knowledge of which function produced a row.
    """

    resource: str
    check: str
    status: Status
    reason: str = ""
    area: str = ""

    def to_dict(self) -> dict[str, str]:
        return {
            "area": self.area,
            "resource": self.resource,
            "check": self.check,
            "status": self.status,
            "reason": self.reason,
        }


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


def read_json_file(path: Path, what: str, are: str, error: type[Exception]) -> Any:
    """The JSON document in `path`; `error` (one line) when it cannot be read or parsed.
    `what` names the document ("plan", "outputs") and `are` agrees with it ("is", "are")."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} {are} not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise error(f"{what} {path} {are} not JSON: {exc}") from None
    except RecursionError:
        raise error(f"{what} {path} {are} JSON nested too deeply to read") from None


def load_plan_file(path: Path) -> dict[str, Any]:
    """Read and validate a plan.json; PlanError (one line) when it is not one."""
    plan = read_json_file(path, "plan", "is", PlanError)
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
# What the plan declares: the cluster, its node groups and add-ons
# ---------------------------------------------------------------------------

CLUSTER = "aws:eks/cluster:Cluster"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
ADDON = "aws:eks/addon:Addon"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
KMS_KEY = "aws:kms/key:Key"
KMS_ALIAS = "aws:kms/alias:Alias"
POOL_LABEL = "llm-platform/pool"
"""The label every node group of the platform carries: how a renamed group is still found."""
STACK_TAGS = ("stack", "project")
"""The provider default tags that say which stack owns a resource."""
EFA_INTERFACE_TYPES = frozenset({"efa", "efa-only"})


@dataclass(frozen=True)
class ExpectedCluster:
    """The EKS cluster of the plan. None means the plan declares nothing for that field."""

    resource: str
    name: str | None
    """The `name` input: the physical name (the program sets it from config)."""
    region: str
    version: str | None
    log_types: tuple[str, ...] | None
    encrypted_resources: tuple[str, ...] | None
    key_alias: str | None
    """The KMS alias the plan puts on the secrets key: its ARN is only known after deploy."""
    endpoint_private: bool | None
    endpoint_public: bool | None
    public_access_cidrs: tuple[str, ...] | None
    authentication_mode: str | None
    support_type: str | None
    deletion_protection: bool | None
    stack_tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExpectedPlacementGroup:
    resource: str
    name_tag: str | None
    strategy: str | None


@dataclass(frozen=True)
class ExpectedLaunchTemplate:
    """A node group's launch template: found in the account through the node group, and
    recognised by its `Name` tag (its physical name is auto-named)."""

    resource: str
    name_tag: str | None
    interfaces: tuple[tuple[int, int, str], ...]
    """(network card index, device index, interface type), sorted; () for none."""
    placement: ExpectedPlacementGroup | None
    market_type: str | None
    capacity_reservation_id: str | None
    instance_type: str | None = None
    """Declared in the template only for Capacity Block groups (their group names none)."""

    @property
    def efa_count(self) -> int:
        return sum(1 for _, _, kind in self.interfaces if kind in EFA_INTERFACE_TYPES)


@dataclass(frozen=True)
class ExpectedNodeGroup:
    resource: str
    name: str | None
    pool: str | None
    """The `llm-platform/pool` label: the pool key in config, and in the `node_pools` output."""
    region: str
    version: str | None
    ami_type: str | None
    capacity_type: str | None
    instance_types: tuple[str, ...] | None
    min_size: int | None
    max_size: int | None
    desired_size: int | None
    labels: dict[str, str] | None
    taints: tuple[tuple[str, str, str], ...] | None
    """(key, value, effect), sorted."""
    auto_repair: bool | None
    max_unavailable: int | None
    launch_template: ExpectedLaunchTemplate | None


@dataclass(frozen=True)
class ExpectedAddon:
    resource: str
    name: str
    region: str
    version: str | None
    configuration: Any
    """The parsed `configurationValues` JSON; None when the plan sets none."""


@dataclass(frozen=True)
class StackOutputs:
    """What `pulumi stack output --json` of the deployed stack says (infra/platform.py)."""

    cluster_name: str | None = None
    node_pools: dict[str, str] = field(default_factory=dict)
    """Pool key -> node group name (the GPU pools)."""
    buckets: dict[str, str] = field(default_factory=dict)
    """Bucket key -> bucket name (the primary buckets)."""
    region: str | None = None


def load_outputs_file(path: Path) -> StackOutputs:
    """Read `pulumi stack output --json`; OutputsError (one line) when it is not that."""
    return parse_outputs(read_json_file(path, "outputs", "are", OutputsError), str(path))


def parse_outputs(data: Any, source: str = "outputs") -> StackOutputs:
    """The fields `llmp verify` uses, type-checked; the other outputs are ignored."""
    if not isinstance(data, dict):
        raise OutputsError(
            f"{source} is not an object of stack outputs (`pulumi stack output --json`)"
        )
    for key in ("cluster_name", "region"):
        if key in data and not isinstance(data[key], str):
            raise OutputsError(f"{source}: `{key}` is not a string")
    maps: dict[str, dict[str, str]] = {}
    for key in ("node_pools", "buckets"):
        value = data.get(key, {})
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise OutputsError(f"{source}: `{key}` is not a map of names to physical names")
        maps[key] = value
    return StackOutputs(
        cluster_name=data.get("cluster_name"),
        node_pools=maps["node_pools"],
        buckets=maps["buckets"],
        region=data.get("region"),
    )


def _by_urn(plan: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["urn"]: r for r in plan["resources"] if isinstance(r.get("urn"), str)}


def _dependencies(
    resource: Mapping[str, Any], type_: str, by_urn: Mapping[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The resources of `type_` that `resource` takes an input from: the plan records the
    engine's dependency edges, which survive the mock runtime's invented ids."""
    deps = [by_urn.get(urn) for urn in resource.get("dependencies") or []]
    return [d for d in deps if d is not None and d["type"] == type_]


def _stack_tags(resource: Mapping[str, Any], plan: Mapping[str, Any]) -> dict[str, str]:
    """The `stack` and `project` default tags of the resource's provider."""
    provider = _providers(plan).get(resource.get("provider") or "")
    raw = provider["inputs"].get("defaultTags") if provider else None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    tags = raw.get("tags") if isinstance(raw, dict) else None
    if not isinstance(tags, dict):
        return {}
    return {k: str(tags[k]) for k in STACK_TAGS if k in tags}


def _bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _strings(value: Any) -> tuple[str, ...] | None:
    return tuple(str(v) for v in value) if isinstance(value, list) else None


def expected_cluster(plan: Mapping[str, Any], region: str | None = None) -> ExpectedCluster | None:
    """The plan's EKS cluster (the platform has one), or None when it declares none."""
    clusters = [r for r in plan["resources"] if r["type"] == CLUSTER]
    if not clusters:
        return None
    r = clusters[0]
    inputs = r["inputs"]
    primary = primary_region(plan) or ""
    by_urn = _by_urn(plan)
    encryption = inputs.get("encryptionConfig") or {}
    key_alias = None
    for key in _dependencies(r, KMS_KEY, by_urn):
        aliases = [
            a
            for a in plan["resources"]
            if a["type"] == KMS_ALIAS and key.get("urn") in (a.get("dependencies") or [])
        ]
        if aliases and isinstance(aliases[0]["inputs"].get("name"), str):
            key_alias = aliases[0]["inputs"]["name"]
    vpc = inputs.get("vpcConfig") or {}
    access = inputs.get("accessConfig") or {}
    logs = _strings(inputs.get("enabledClusterLogTypes"))
    name = inputs.get("name")
    return ExpectedCluster(
        resource=r["name"],
        name=name if isinstance(name, str) else None,
        region=_region_of(r, plan, primary, region or primary),
        version=inputs.get("version"),
        log_types=tuple(sorted(logs)) if logs is not None else None,
        encrypted_resources=_strings(encryption.get("resources")) if encryption else None,
        key_alias=key_alias,
        endpoint_private=_bool(vpc.get("endpointPrivateAccess")),
        endpoint_public=_bool(vpc.get("endpointPublicAccess")),
        public_access_cidrs=_strings(vpc.get("publicAccessCidrs")),
        authentication_mode=access.get("authenticationMode"),
        support_type=(inputs.get("upgradePolicy") or {}).get("supportType"),
        deletion_protection=_bool(inputs.get("deletionProtection")),
        stack_tags=_stack_tags(r, plan),
    )


def _launch_template(
    template: Mapping[str, Any], by_urn: Mapping[str, dict[str, Any]]
) -> ExpectedLaunchTemplate:
    inputs = template["inputs"]
    interfaces = tuple(
        sorted(
            (
                _int(nic.get("networkCardIndex")) or 0,
                _int(nic.get("deviceIndex")) or 0,
                str(nic.get("interfaceType") or "interface"),
            )
            for nic in inputs.get("networkInterfaces") or []
        )
    )
    placement = None
    if (inputs.get("placement") or {}).get("groupName"):
        groups = _dependencies(template, PLACEMENT_GROUP, by_urn)
        group_inputs = groups[0]["inputs"] if groups else {}
        placement = ExpectedPlacementGroup(
            resource=groups[0]["name"] if groups else "",
            name_tag=(group_inputs.get("tags") or {}).get("Name"),
            strategy=group_inputs.get("strategy"),
        )
    reservation = (inputs.get("capacityReservationSpecification") or {}).get(
        "capacityReservationTarget"
    ) or {}
    return ExpectedLaunchTemplate(
        resource=template["name"],
        name_tag=(inputs.get("tags") or {}).get("Name"),
        interfaces=interfaces,
        placement=placement,
        market_type=(inputs.get("instanceMarketOptions") or {}).get("marketType"),
        capacity_reservation_id=reservation.get("capacityReservationId"),
        instance_type=inputs.get("instanceType"),
    )


def expected_node_groups(
    plan: Mapping[str, Any], region: str | None = None
) -> list[ExpectedNodeGroup]:
    """Every managed node group of the plan, with the launch template it declares."""
    primary = primary_region(plan) or ""
    by_urn = _by_urn(plan)
    out = []
    for r in plan["resources"]:
        if r["type"] != NODE_GROUP:
            continue
        inputs = r["inputs"]
        templates = _dependencies(r, LAUNCH_TEMPLATE, by_urn)
        scaling = inputs.get("scalingConfig") or {}
        labels = inputs.get("labels")
        taints = inputs.get("taints")
        name = inputs.get("nodeGroupName")
        out.append(
            ExpectedNodeGroup(
                resource=r["name"],
                name=name if isinstance(name, str) else None,
                pool=(labels or {}).get(POOL_LABEL) if isinstance(labels, dict) else None,
                region=_region_of(r, plan, primary, region or primary),
                version=inputs.get("version"),
                ami_type=inputs.get("amiType"),
                capacity_type=inputs.get("capacityType"),
                instance_types=_strings(inputs.get("instanceTypes")),
                min_size=_int(scaling.get("minSize")),
                max_size=_int(scaling.get("maxSize")),
                desired_size=_int(scaling.get("desiredSize")),
                labels={str(k): str(v) for k, v in labels.items()}
                if isinstance(labels, dict)
                else None,
                taints=tuple(
                    sorted(
                        (str(t.get("key")), str(t.get("value", "")), str(t.get("effect")))
                        for t in taints
                    )
                )
                if isinstance(taints, list)
                else None,
                auto_repair=_bool((inputs.get("nodeRepairConfig") or {}).get("enabled")),
                max_unavailable=_int((inputs.get("updateConfig") or {}).get("maxUnavailable")),
                launch_template=_launch_template(templates[0], by_urn) if templates else None,
            )
        )
    return out


def expected_addons(plan: Mapping[str, Any], region: str | None = None) -> list[ExpectedAddon]:
    """Every EKS managed add-on of the plan."""
    primary = primary_region(plan) or ""
    out = []
    for r in plan["resources"]:
        if r["type"] != ADDON:
            continue
        inputs = r["inputs"]
        configuration = inputs.get("configurationValues")
        if isinstance(configuration, str):
            with contextlib.suppress(ValueError):  # else compared as text
                configuration = json.loads(configuration)
        out.append(
            ExpectedAddon(
                resource=r["name"],
                name=str(inputs.get("addonName")),
                region=_region_of(r, plan, primary, region or primary),
                version=inputs.get("addonVersion"),
                configuration=configuration,
            )
        )
    return out


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


def _is_unparsable_answer(exc: Exception) -> bool:
    """botocore could not parse the answer: an emulator's bare 500 page for an API it lacks."""
    from botocore.parsers import ResponseParserError

    return isinstance(exc, ResponseParserError)


def _is_unknown_route(exc: Exception) -> bool:
    """A bare HTTP 404 without an AWS error type: the server has no such REST route.

    AWS answers a missing EKS resource with a typed error (ResourceNotFoundException);
    an emulator without the API answers its web framework's 404 page.
    """
    if _http_status(exc) != 404 or _code(exc) != "404":
        return False
    headers = (getattr(exc, "response", {}).get("ResponseMetadata") or {}).get("HTTPHeaders", {})
    return "x-amzn-errortype" not in headers


def unsupported(exc: Exception, emulated: bool = False) -> bool:
    """Whether `exc` says the endpoint does not implement the API called.

    An emulator (moto, LocalStack: `emulated`) may also answer HTTP 500, InternalFailure, a
    page botocore cannot parse, or a bare 404 for a REST route it lacks; from AWS itself,
    those are failures, not a missing API.
    """
    if isinstance(exc, NotImplementedError):
        return True
    if emulated and _is_unparsable_answer(exc):
        return True
    if not _is_client_error(exc):
        return False
    code, status = _code(exc), _http_status(exc)
    if code in _UNSUPPORTED_CODES or status == 501:
        return True
    return emulated and (
        status == 500 or code in _EMULATOR_UNSUPPORTED_CODES or _is_unknown_route(exc)
    )


def raise_if_rejected(exc: Exception) -> None:
    """Raise CredentialsRejected when `exc` says the credentials themselves are refused."""
    if _is_client_error(exc) and _code(exc) in _REJECTED_CREDENTIAL_CODES:
        raise CredentialsRejected(_error_text(exc)) from None


def _error_text(exc: Exception) -> str:
    if _is_client_error(exc):
        message = (getattr(exc, "response", {}).get("Error") or {}).get("Message", "")
        return f"{_code(exc)}: {message}".strip(": ").splitlines()[0] if message else _code(exc)
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _cannot_read(exc: Exception) -> str:
    return f"cannot read: {_error_text(exc)}"


def _get(call: Any, absent: set[str], **kwargs: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(response, None); (None, None) when the error code is in `absent`; (None, why) else."""
    try:
        return call(**kwargs), None
    except Exception as exc:
        if not (_is_client_error(exc) or isinstance(exc, NotImplementedError)):
            raise
        raise_if_rejected(exc)
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
        raise_if_rejected(exc)
        if _code(exc) in _NO_BUCKET_CODES or _http_status(exc) == 404:
            return [Finding(name, "exists", FAIL, f"no bucket {name} ({expected.region})")]
        return [Finding(name, "exists", FAIL, _cannot_read(exc))]
    actual_region = head.get("BucketRegion") or (
        (head.get("ResponseMetadata") or {}).get("HTTPHeaders", {}).get("x-amz-bucket-region")
    )
    if actual_region and actual_region != expected.region:
        add(Finding(name, "exists", FAIL, f"in {actual_region}, the plan says {expected.region}"))
    else:
        add(Finding(name, "exists", PASS, f"in {actual_region or expected.region}"))

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
    return Finding(name, check, FAIL, f"cannot read: {why}")


def _check_encryption(s3: Any, expected: ExpectedBucket) -> Finding:
    name, check = expected.name, "encryption"
    resp, why = _get(
        s3.get_bucket_encryption, {"ServerSideEncryptionConfigurationNotFoundError"}, Bucket=name
    )
    if why:
        return _unreadable(name, check, why)
    rules = ((resp or {}).get("ServerSideEncryptionConfiguration") or {}).get("Rules") or []
    if not rules:
        return Finding(name, check, FAIL, "no default encryption")
    rule = rules[0]
    algorithm = (rule.get("ApplyServerSideEncryptionByDefault") or {}).get("SSEAlgorithm")
    bucket_key = bool(rule.get("BucketKeyEnabled", False))
    want = f"{expected.sse_algorithm}, bucket key {'on' if expected.bucket_key_enabled else 'off'}"
    have = f"{algorithm}, bucket key {'on' if bucket_key else 'off'}"
    if algorithm != expected.sse_algorithm or bucket_key != expected.bucket_key_enabled:
        return Finding(name, check, FAIL, f"{have}; the plan says {want}")
    return Finding(name, check, PASS, have)


def _check_versioning(s3: Any, expected: ExpectedBucket) -> Finding:
    name, check = expected.name, "versioning"
    resp, why = _get(s3.get_bucket_versioning, set(), Bucket=name)
    if why:
        return _unreadable(name, check, why)
    status = (resp or {}).get("Status") or "never enabled"
    if status != expected.versioning:
        return Finding(name, check, FAIL, f"{status}; the plan says {expected.versioning}")
    return Finding(name, check, PASS, status)


def _check_public_access(s3: Any, expected: ExpectedBucket) -> Finding:
    name, check = expected.name, "public access block"
    resp, why = _get(
        s3.get_public_access_block, {"NoSuchPublicAccessBlockConfiguration"}, Bucket=name
    )
    if why:
        return _unreadable(name, check, why)
    if resp is None:
        return Finding(name, check, FAIL, "no public access block")
    have = resp.get("PublicAccessBlockConfiguration") or {}
    want = expected.public_access_block or {}
    wrong = [
        f"{aws_key}={have.get(aws_key, False)}"
        for key, aws_key in _PUBLIC_ACCESS_FLAGS
        if bool(have.get(aws_key, False)) != want.get(key, False)
    ]
    if wrong:
        return Finding(name, check, FAIL, f"{', '.join(wrong)}; the plan says otherwise")
    return Finding(name, check, PASS, "as declared")


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
                Finding(name, check, FAIL, f"rule {want.id} is not in the bucket's lifecycle")
            )
            continue
        diffs = lifecycle_differences(want, have)
        findings.append(
            Finding(name, check, FAIL if diffs else PASS, "; ".join(diffs) or "as declared")
        )
    for extra in sorted(set(actual) - {r.id for r in declared}):
        findings.append(
            Finding(name, f"lifecycle rule {extra}", FAIL, f"rule {extra} is not in the plan")
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
                Finding(name, check, FAIL, f"rule {want.id} is not in the bucket's replication")
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
                FAIL if diffs else PASS,
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
        raise_if_rejected(exc)
        return [Finding(name, "exists", FAIL, _cannot_read(exc))], None
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
                FAIL,
                f"no Lustre file system tagged Name={name} ({expected.region})",
            )
        ], None
    if len(matches) > 1:
        ids = ", ".join(sorted(str(fs.get("FileSystemId")) for fs in matches))
        return [
            Finding(name, "exists", FAIL, f"{len(matches)} file systems tagged Name={name}: {ids}")
        ], None
    fs = matches[0]
    fs_id = str(fs.get("FileSystemId"))
    lustre = fs.get("LustreConfiguration") or {}
    findings = [Finding(name, "exists", PASS, fs_id)]
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
                PASS if lifecycle == "AVAILABLE" else FAIL,
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
            findings.append(Finding(name, check, FAIL, f"{have}; the plan says {want}"))
        else:
            findings.append(Finding(name, check, PASS, str(have)))
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

    def every(status: Status, reason: str) -> list[Finding]:
        return [Finding(_dra_label(a), check, status, reason) for a in declared]

    if file_system_status == NOT_CHECKED:
        return every(NOT_CHECKED, "the file system was not checked")
    if file_system_id is None:
        return every(FAIL, f"its file system {expected.name_tag} was not found")
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
        raise_if_rejected(exc)
        return every(FAIL, _cannot_read(exc))
    by_path = {str(a.get("FileSystemPath")): a for a in associations}
    findings = []
    for want in declared:
        have = by_path.get(want.file_system_path)
        label = _dra_label(want)
        if have is None:
            findings.append(
                Finding(label, check, FAIL, f"no association at {want.file_system_path}")
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
                label, check, FAIL if diffs else PASS, "; ".join(diffs) or want.data_repository_path
            )
        )
    return findings


def _dra_label(a: ExpectedAssociation) -> str:
    return f"{a.resource} {a.file_system_path}"


# ---------------------------------------------------------------------------
# What the account has: the cluster, its node groups and add-ons
# ---------------------------------------------------------------------------

EKS_NOT_IMPLEMENTED = "the endpoint does not implement EKS"
ADDONS_NOT_IMPLEMENTED = "the endpoint does not implement EKS add-ons"
PLACEMENT_NOT_IMPLEMENTED = "the endpoint does not implement placement groups"
KMS_NOT_IMPLEMENTED = "the endpoint does not implement KMS"
_EKS_NOT_FOUND = frozenset({"ResourceNotFoundException"})
_TEMPLATE_NOT_FOUND = frozenset(
    {"InvalidLaunchTemplateId.NotFound", "InvalidLaunchTemplateId.Malformed"}
)
_LAYOUT_DIFFERENCES_SHOWN = 4


def _read(call: Callable[..., Any], /, **kwargs: Any) -> tuple[Any, Exception | None]:
    """(response, None), or (None, the error) for an error of the API; anything else raises.

    Refused credentials raise CredentialsRejected: no row could be checked with them.
    """
    try:
        return call(**kwargs), None
    except Exception as exc:
        if not (
            _is_client_error(exc)
            or isinstance(exc, NotImplementedError)
            or _is_unparsable_answer(exc)
        ):
            raise
        raise_if_rejected(exc)
        return None, exc


def _unread(resource: str, check: str, exc: Exception, emulated: bool, lacking: str) -> Finding:
    """The row for a read that failed: not checked where the endpoint lacks the API."""
    if unsupported(exc, emulated):
        return Finding(resource, check, NOT_CHECKED, lacking)
    return Finding(resource, check, FAIL, _cannot_read(exc))


def _not_reported(resource: str, check: str, what: str) -> Finding:
    return Finding(resource, check, NOT_CHECKED, f"the endpoint does not report {what}")


def _text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "none"
    return str(value)


def _compare(resource: str, check: str, have: Any, want: Any) -> Finding:
    if have == want:
        return Finding(resource, check, PASS, _text(have))
    return Finding(resource, check, FAIL, f"{_text(have)}; the plan says {_text(want)}")


def _paginate(call: Callable[..., Any], key: str, token_key: str, **kwargs: Any) -> list[Any]:
    items: list[Any] = []
    token = None
    while True:
        resp = call(**kwargs, **({token_key: token} if token else {}))
        items.extend(resp.get(key) or [])
        token = resp.get(token_key)
        if not token:
            return items


@dataclass(frozen=True)
class ClusterState:
    """What was found of the cluster: node groups and add-ons are looked for inside it."""

    name: str | None
    status: Status
    """The status of the cluster's `exists` row."""
    reason: str
    description: dict[str, Any] | None = None

    def blocked(self, resource: str, check: str) -> Finding | None:
        """The row for a check inside a cluster that was not found or not checked."""
        if self.description is not None:
            return None
        status = NOT_CHECKED if self.status == NOT_CHECKED else FAIL
        cluster = f"its cluster {self.name}" if self.name else "its cluster"
        return Finding(resource, check, status, f"{cluster}: {self.reason}")


def find_cluster(eks: Any, expected: ExpectedCluster, emulated: bool = False) -> ClusterState:
    """Describe the cluster by its name, or find it by the stack's default tags when the
    plan gives it no name."""
    if expected.name:
        resp, exc = _read(eks.describe_cluster, name=expected.name)
        if exc is None:
            return ClusterState(
                expected.name, PASS, str(resp["cluster"].get("arn")), resp["cluster"]
            )
        if _code(exc) in _EKS_NOT_FOUND:
            return ClusterState(
                expected.name, FAIL, f"no EKS cluster {expected.name} in {expected.region}"
            )
        row = _unread(expected.name, "exists", exc, emulated, EKS_NOT_IMPLEMENTED)
        return ClusterState(expected.name, row.status, row.reason)
    if not expected.stack_tags:
        return ClusterState(
            None, NOT_CHECKED, "the plan gives the cluster neither a name nor stack tags"
        )
    wanted = ", ".join(f"{k}={v}" for k, v in expected.stack_tags.items())
    names, exc = _read(_paginate, call=eks.list_clusters, key="clusters", token_key="nextToken")
    if exc is not None:
        row = _unread(expected.resource, "exists", exc, emulated, EKS_NOT_IMPLEMENTED)
        return ClusterState(None, row.status, row.reason)
    matches = []
    for name in names:
        resp, exc = _read(eks.describe_cluster, name=name)
        tags = (resp or {}).get("cluster", {}).get("tags") or {}
        if exc is None and all(tags.get(k) == v for k, v in expected.stack_tags.items()):
            matches.append(resp["cluster"])
    if len(matches) == 1:
        found = matches[0]
        return ClusterState(str(found["name"]), PASS, f"found by its tags {wanted}", found)
    if not matches:
        return ClusterState(None, FAIL, f"no EKS cluster tagged {wanted} in {expected.region}")
    listed = ", ".join(sorted(str(c["name"]) for c in matches))
    return ClusterState(None, FAIL, f"{len(matches)} EKS clusters tagged {wanted}: {listed}")


def check_cluster(
    eks: Any, kms: Any, expected: ExpectedCluster, emulated: bool = False
) -> tuple[list[Finding], ClusterState]:
    """Compare the EKS cluster with the plan; also returns what was found of it."""
    state = find_cluster(eks, expected, emulated)
    name = state.name or expected.name or expected.resource
    findings = [Finding(name, "exists", state.status, state.reason)]
    cluster = state.description
    if cluster is None:
        return findings, state
    add = findings.append

    if expected.stack_tags:
        tags = cluster.get("tags") or {}
        wrong = [
            f"{k}={tags.get(k, 'unset')} (plan {v})"
            for k, v in expected.stack_tags.items()
            if tags.get(k) != v
        ]
        shown = ", ".join(f"{k}={v}" for k, v in expected.stack_tags.items())
        add(Finding(name, "stack tags", FAIL if wrong else PASS, "; ".join(wrong) or shown))
    status = cluster.get("status")
    add(
        Finding(
            name,
            "status",
            PASS if status == "ACTIVE" else FAIL,
            "ACTIVE" if status == "ACTIVE" else f"{status}, not ACTIVE",
        )
    )
    if expected.version is not None:
        add(_compare(name, "Kubernetes version", cluster.get("version"), expected.version))
    if expected.log_types is not None:
        add(_check_logging(name, cluster, expected.log_types))
    if expected.encrypted_resources is not None:
        findings.extend(_check_encryption_config(name, cluster, expected, kms, emulated))
    add(_check_endpoint_access(name, cluster, expected))
    if expected.endpoint_public and expected.public_access_cidrs:
        have = (cluster.get("resourcesVpcConfig") or {}).get("publicAccessCidrs")
        if have is None:
            add(_not_reported(name, "public access CIDRs", "publicAccessCidrs"))
        else:
            add(
                _compare(
                    name,
                    "public access CIDRs",
                    tuple(sorted(have)),
                    tuple(sorted(expected.public_access_cidrs)),
                )
            )
    if expected.authentication_mode is not None:
        access = cluster.get("accessConfig")
        if access is None:
            add(_not_reported(name, "authentication mode", "accessConfig"))
        else:
            add(
                _compare(
                    name,
                    "authentication mode",
                    access.get("authenticationMode"),
                    expected.authentication_mode,
                )
            )
    if expected.support_type is not None:
        policy = cluster.get("upgradePolicy")
        if policy is None:
            add(_not_reported(name, "support type", "upgradePolicy"))
        else:
            add(_compare(name, "support type", policy.get("supportType"), expected.support_type))
    if expected.deletion_protection is not None:
        if "deletionProtection" not in cluster:
            add(_not_reported(name, "deletion protection", "deletionProtection"))
        else:
            add(
                _compare(
                    name,
                    "deletion protection",
                    bool(cluster["deletionProtection"]),
                    expected.deletion_protection,
                )
            )
    return findings, state


def _check_logging(name: str, cluster: Mapping[str, Any], declared: Sequence[str]) -> Finding:
    check = "control-plane logging"
    logging = cluster.get("logging")
    if logging is None:
        return _not_reported(name, check, "logging")
    enabled = {
        str(t)
        for entry in logging.get("clusterLogging") or []
        if entry.get("enabled")
        for t in entry.get("types") or []
    }
    want = set(declared)
    problems = []
    if want - enabled:
        problems.append(f"{', '.join(sorted(want - enabled))} off")
    if enabled - want:
        problems.append(f"{', '.join(sorted(enabled - want))} on but not in the plan")
    if problems:
        return Finding(name, check, FAIL, "; ".join(problems))
    return Finding(name, check, PASS, ", ".join(sorted(enabled)) or "none, as declared")


def _check_encryption_config(
    name: str, cluster: Mapping[str, Any], expected: ExpectedCluster, kms: Any, emulated: bool
) -> list[Finding]:
    """Envelope encryption of the declared resources, and that its key is the plan's: the one
    the plan's alias names (the key's ARN itself is only known after deploy)."""
    want = set(expected.encrypted_resources or ())
    keys = {
        str(r): str((entry.get("provider") or {}).get("keyArn"))
        for entry in cluster.get("encryptionConfig") or []
        for r in entry.get("resources") or []
    }
    missing = sorted(want - set(keys))
    if missing:
        return [
            Finding(
                name,
                "envelope encryption",
                FAIL,
                f"{', '.join(missing)} not envelope-encrypted; the plan encrypts them with KMS",
            )
        ]
    if not want:
        return []
    key_arn = keys[sorted(want)[0]]
    findings = [
        Finding(name, "envelope encryption", PASS, f"{', '.join(sorted(want))} with {key_arn}")
    ]
    check = "encryption key"
    if expected.key_alias is None:
        findings.append(
            Finding(
                name,
                check,
                NOT_CHECKED,
                "the plan's key has no alias, and its ARN is only known after deploy",
            )
        )
        return findings
    alias = expected.key_alias
    resp, exc = _read(kms.describe_key, KeyId=alias)
    if exc is not None:
        if _code(exc) == "NotFoundException":
            findings.append(
                Finding(name, check, FAIL, f"{alias} does not exist; the cluster uses {key_arn}")
            )
        else:
            findings.append(_unread(name, check, exc, emulated, KMS_NOT_IMPLEMENTED))
        return findings
    meta = resp.get("KeyMetadata") or {}
    arn, key_state = meta.get("Arn"), meta.get("KeyState")
    if arn != key_arn:
        findings.append(Finding(name, check, FAIL, f"{key_arn}; the plan's {alias} is {arn}"))
    elif key_state not in (None, "Enabled"):
        findings.append(Finding(name, check, FAIL, f"{alias} ({arn}) is {key_state}"))
    else:
        findings.append(Finding(name, check, PASS, f"{alias} ({arn})"))
    return findings


def _check_endpoint_access(
    name: str, cluster: Mapping[str, Any], expected: ExpectedCluster
) -> Finding:
    check = "endpoint access"
    vpc = cluster.get("resourcesVpcConfig") or {}
    private, public = vpc.get("endpointPrivateAccess"), vpc.get("endpointPublicAccess")
    if private is None or public is None:
        return _not_reported(name, check, "endpointPrivateAccess and endpointPublicAccess")
    have = f"private {_text(bool(private))}, public {_text(bool(public))}"
    want_private = expected.endpoint_private if expected.endpoint_private is not None else True
    want_public = expected.endpoint_public if expected.endpoint_public is not None else False
    want = f"private {_text(want_private)}, public {_text(want_public)}"
    return _compare(name, check, have, want)


def find_node_group(
    eks: Any, cluster_name: str, expected: ExpectedNodeGroup, name: str | None
) -> tuple[dict[str, Any] | None, Finding | None, Exception | None]:
    """The node group by `name`, else the one carrying the plan's pool label.

    Returns (description, a failed `exists` row when found only by its label, the read error).
    """
    if name:
        resp, exc = _read(eks.describe_nodegroup, clusterName=cluster_name, nodegroupName=name)
        if exc is None:
            return resp["nodegroup"], None, None
        if _code(exc) not in _EKS_NOT_FOUND:
            return None, None, exc
    if not expected.pool:
        return None, None, None
    names, exc = _read(
        _paginate,
        call=eks.list_nodegroups,
        key="nodegroups",
        token_key="nextToken",
        clusterName=cluster_name,
    )
    if exc is not None:
        return None, None, exc
    for other in names:
        resp, exc = _read(eks.describe_nodegroup, clusterName=cluster_name, nodegroupName=other)
        group = (resp or {}).get("nodegroup") or {}
        if exc is None and (group.get("labels") or {}).get(POOL_LABEL) == expected.pool:
            row = Finding(
                name or other,
                "exists",
                FAIL,
                f"no node group {name}; {other} carries {POOL_LABEL}={expected.pool} "
                "(checked below)",
            )
            return group, row, None
    return None, None, None


def check_node_group(
    eks: Any,
    ec2: Any,
    expected: ExpectedNodeGroup,
    cluster: ClusterState,
    name: str | None = None,
    emulated: bool = False,
) -> list[Finding]:
    """Compare one managed node group, and the launch template version it runs, with the plan.

    `name` is the physical name to look for (the plan's, or the stack output's).
    """
    name = name or expected.name
    label = name or expected.resource
    blocked = cluster.blocked(label, "exists")
    if blocked is not None or cluster.name is None:
        return [blocked or Finding(label, "exists", NOT_CHECKED, "its cluster was not found")]
    group, renamed, exc = find_node_group(eks, cluster.name, expected, name)
    if exc is not None:
        return [_unread(label, "exists", exc, emulated, EKS_NOT_IMPLEMENTED)]
    if group is None:
        return [Finding(label, "exists", FAIL, f"no node group {label} in cluster {cluster.name}")]
    actual_name = str(group.get("nodegroupName"))
    findings = [renamed or Finding(actual_name, "exists", PASS, str(group.get("nodegroupArn")))]
    label = actual_name
    add = findings.append
    status = group.get("status")
    add(
        Finding(
            label,
            "status",
            PASS if status == "ACTIVE" else FAIL,
            "ACTIVE" if status == "ACTIVE" else f"{status}, not ACTIVE",
        )
    )
    for check, have, want in (
        ("Kubernetes version", group.get("version"), expected.version),
        ("capacity type", group.get("capacityType"), expected.capacity_type),
        (
            "instance types",
            tuple(group.get("instanceTypes") or ()),
            expected.instance_types,
        ),
        ("AMI type", group.get("amiType"), expected.ami_type),
    ):
        if want is not None:
            add(_compare(label, check, have, want))
    add(_check_scaling(label, group, expected))
    if expected.labels is not None:
        add(_check_labels(label, group.get("labels") or {}, expected.labels))
    if expected.taints is not None:
        have_taints = tuple(
            sorted(
                (str(t.get("key")), str(t.get("value", "")), str(t.get("effect")))
                for t in group.get("taints") or []
            )
        )
        shown = [f"{k}={v}:{e}" for k, v, e in have_taints]
        wanted = [f"{k}={v}:{e}" for k, v, e in expected.taints]
        add(_compare(label, "taints", shown, wanted))
    if expected.auto_repair is not None:
        repair = group.get("nodeRepairConfig")
        if repair is None:
            add(_not_reported(label, "node auto-repair", "nodeRepairConfig"))
        else:
            add(
                _compare(
                    label, "node auto-repair", bool(repair.get("enabled")), expected.auto_repair
                )
            )
    if expected.max_unavailable is not None:
        update = group.get("updateConfig")
        if update is None:
            add(_not_reported(label, "max unavailable", "updateConfig"))
        else:
            add(
                _compare(
                    label, "max unavailable", update.get("maxUnavailable"), expected.max_unavailable
                )
            )
    if expected.launch_template is not None:
        findings.extend(
            check_launch_template(
                ec2, label, group.get("launchTemplate"), expected.launch_template, emulated
            )
        )
    return findings


def _check_scaling(label: str, group: Mapping[str, Any], expected: ExpectedNodeGroup) -> Finding:
    """Min and max as declared; the desired size within them (autoscalers own it once the
    group exists: the program ignores its changes)."""
    check = "scaling config"
    scaling = group.get("scalingConfig")
    if scaling is None:
        return _not_reported(label, check, "scalingConfig")
    low, high, desired = (
        scaling.get("minSize"),
        scaling.get("maxSize"),
        scaling.get("desiredSize"),
    )
    problems = [
        f"{what} {have} (plan {want})"
        for what, have, want in (("min", low, expected.min_size), ("max", high, expected.max_size))
        if want is not None and have != want
    ]
    if None not in (low, high, desired) and not low <= desired <= high:
        problems.append(f"desired {desired} outside {low}..{high}")
    if problems:
        return Finding(label, check, FAIL, "; ".join(problems))
    reason = f"min {low}, max {high}, desired {desired}"
    if expected.desired_size is not None and desired != expected.desired_size:
        reason += f" (plan {expected.desired_size}; autoscalers own the desired size)"
    return Finding(label, check, PASS, reason)


def _check_labels(label: str, have: Mapping[str, str], want: Mapping[str, str]) -> Finding:
    problems = [f"{k} missing" for k in sorted(want) if k not in have]
    problems += [
        f"{k}={have[k]} (plan {want[k]})" for k in sorted(want) if k in have and have[k] != want[k]
    ]
    problems += [f"{k}={have[k]} not in the plan" for k in sorted(have) if k not in want]
    if problems:
        return Finding(label, "labels", FAIL, "; ".join(problems))
    return Finding(label, "labels", PASS, f"{len(want)} as declared")


def _interfaces(data: Mapping[str, Any]) -> tuple[tuple[int, int, str], ...]:
    return tuple(
        sorted(
            (
                _int(nic.get("NetworkCardIndex")) or 0,
                _int(nic.get("DeviceIndex")) or 0,
                str(nic.get("InterfaceType") or "interface"),
            )
            for nic in data.get("NetworkInterfaces") or []
        )
    )


def _layout_differences(
    have: Sequence[tuple[int, int, str]], want: Sequence[tuple[int, int, str]]
) -> list[str]:
    """What differs between two interface layouts, slot by slot (card, device)."""
    have_at = {(card, device): kind for card, device, kind in have}
    want_at = {(card, device): kind for card, device, kind in want}
    out = []
    for slot in sorted(set(have_at) | set(want_at)):
        where = f"card {slot[0]} device {slot[1]}"
        if slot not in have_at:
            out.append(f"{where} missing (plan {want_at[slot]})")
        elif slot not in want_at:
            out.append(f"{where} {have_at[slot]} not in the plan")
        elif have_at[slot] != want_at[slot]:
            out.append(f"{where} {have_at[slot]} (plan {want_at[slot]})")
    return out


def _efa_text(interfaces: Sequence[tuple[int, int, str]]) -> str:
    kinds = Counter(kind for _, _, kind in interfaces if kind in EFA_INTERFACE_TYPES)
    count = sum(kinds.values())
    return f"{count} ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})" if count else "0"


def check_launch_template(
    ec2: Any,
    label: str,
    reference: Mapping[str, Any] | None,
    expected: ExpectedLaunchTemplate,
    emulated: bool = False,
) -> list[Finding]:
    """The launch template version a node group runs: the plan's template (by its Name tag) at
    its latest version, with the declared interfaces, placement and capacity reservation."""
    check = "launch template"
    tag_text = f"Name={expected.name_tag}" if expected.name_tag else expected.resource
    if not reference or not reference.get("id"):
        return [
            Finding(
                label,
                check,
                FAIL,
                f"the node group has no launch template; the plan's is {tag_text}",
            )
        ]
    template_id = str(reference["id"])
    resp, exc = _read(ec2.describe_launch_templates, LaunchTemplateIds=[template_id])
    if exc is not None:
        if _code(exc) in _TEMPLATE_NOT_FOUND:
            return [Finding(label, check, FAIL, f"{template_id} does not exist")]
        return [_unread(label, check, exc, emulated, "the endpoint does not implement EC2")]
    template = (resp.get("LaunchTemplates") or [{}])[0]
    version = str(reference.get("version") or "$Default")
    if version == "$Latest":
        version = str(template.get("LatestVersionNumber"))
    elif version == "$Default":
        version = str(template.get("DefaultVersionNumber"))
    latest = str(template.get("LatestVersionNumber"))
    name_tag = _tag(template, "Name")
    problems = []
    if expected.name_tag and name_tag != expected.name_tag:
        problems.append(
            f"{template_id} is tagged Name={name_tag}; the plan's template is {tag_text}"
        )
    if version != latest:
        problems.append(f"the node group runs version {version}; the template's latest is {latest}")
    findings = [
        Finding(
            label,
            check,
            FAIL if problems else PASS,
            "; ".join(problems) or f"{template_id} ({tag_text}) version {version}, the latest",
        )
    ]
    resp, exc = _read(
        ec2.describe_launch_template_versions, LaunchTemplateId=template_id, Versions=[version]
    )
    if exc is not None:
        findings.append(
            _unread(
                label, "launch template data", exc, emulated, "the endpoint does not implement EC2"
            )
        )
        return findings
    data = ((resp.get("LaunchTemplateVersions") or [{}])[0]).get("LaunchTemplateData") or {}
    findings.extend(_check_interfaces(label, data, expected))
    findings.extend(_check_placement(ec2, label, data, expected, emulated))
    if expected.instance_type or data.get("InstanceType"):
        findings.append(
            _compare(
                label,
                "template instance type",
                data.get("InstanceType") or "none",
                expected.instance_type or "none",
            )
        )
    market = (data.get("InstanceMarketOptions") or {}).get("MarketType")
    reservation = (
        (data.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
    ).get("CapacityReservationId")
    if expected.market_type or expected.capacity_reservation_id or market or reservation:
        findings.append(
            _compare(
                label,
                "capacity reservation",
                f"market {market or 'default'}, reservation {reservation or 'none'}",
                f"market {expected.market_type or 'default'}, "
                f"reservation {expected.capacity_reservation_id or 'none'}",
            )
        )
    return findings


def _check_interfaces(
    label: str, data: Mapping[str, Any], expected: ExpectedLaunchTemplate
) -> list[Finding]:
    have = _interfaces(data)
    if not expected.interfaces:
        if have:
            return [
                Finding(
                    label,
                    "network interfaces",
                    FAIL,
                    f"{len(have)} in the template; the plan declares none",
                )
            ]
        return [Finding(label, "network interfaces", PASS, "none declared, none in the template")]
    have_efa = sum(1 for _, _, kind in have if kind in EFA_INTERFACE_TYPES)
    efa = Finding(
        label,
        "EFA interfaces",
        PASS if have_efa == expected.efa_count else FAIL,
        _efa_text(have)
        if have_efa == expected.efa_count
        else f"{_efa_text(have)}; the plan declares {_efa_text(expected.interfaces)}",
    )
    differences = _layout_differences(have, expected.interfaces)
    shown = differences[:_LAYOUT_DIFFERENCES_SHOWN]
    if len(differences) > len(shown):
        shown.append(f"{len(differences) - len(shown)} more")
    primary = [kind for card, device, kind in have if (card, device) == (0, 0)]
    layout = Finding(
        label,
        "interface layout",
        FAIL if differences else PASS,
        "; ".join(shown)
        or f"{len(have)} interfaces on {len({card for card, _, _ in have})} cards, "
        f"card 0 device 0 {primary[0] if primary else 'none'}",
    )
    return [efa, layout]


def _check_placement(
    ec2: Any, label: str, data: Mapping[str, Any], expected: ExpectedLaunchTemplate, emulated: bool
) -> list[Finding]:
    group = (data.get("Placement") or {}).get("GroupName")
    declared = expected.placement
    if declared is None:
        if group:
            return [
                Finding(
                    label,
                    "placement group",
                    FAIL,
                    f"{group}; the plan declares none (it would starve reservations and blocks)",
                )
            ]
        return [Finding(label, "placement group", PASS, "none, as declared")]
    if not group:
        return [
            Finding(
                label,
                "placement group",
                FAIL,
                f"the template names none; the plan declares one ({declared.strategy})",
            )
        ]
    findings = [Finding(label, "placement group", PASS, f"the template names {group}")]
    check = "placement group strategy"
    resp, exc = _read(ec2.describe_placement_groups, GroupNames=[group])
    if exc is not None:
        if _code(exc) == "InvalidPlacementGroup.Unknown":
            findings.append(Finding(label, check, FAIL, f"{group} does not exist"))
        else:
            findings.append(_unread(label, check, exc, emulated, PLACEMENT_NOT_IMPLEMENTED))
        return findings
    found = (resp.get("PlacementGroups") or [{}])[0]
    problems = []
    if declared.strategy and found.get("Strategy") != declared.strategy:
        problems.append(f"strategy {found.get('Strategy')} (plan {declared.strategy})")
    if declared.name_tag and _tag(found, "Name") != declared.name_tag:
        problems.append(f"tagged Name={_tag(found, 'Name')} (plan {declared.name_tag})")
    findings.append(
        Finding(
            label,
            check,
            FAIL if problems else PASS,
            "; ".join(problems) or f"{found.get('Strategy')}, Name={_tag(found, 'Name')}",
        )
    )
    return findings


def check_addon(
    eks: Any, expected: ExpectedAddon, cluster: ClusterState, emulated: bool = False
) -> list[Finding]:
    """One EKS managed add-on: ACTIVE, at the declared version, with the declared configuration."""
    label = expected.name
    blocked = cluster.blocked(label, "status")
    if blocked is not None or cluster.name is None:
        return [blocked or Finding(label, "status", NOT_CHECKED, "its cluster was not found")]
    resp, exc = _read(eks.describe_addon, clusterName=cluster.name, addonName=expected.name)
    if exc is not None:
        if _code(exc) in _EKS_NOT_FOUND:
            return [Finding(label, "status", FAIL, f"not installed on {cluster.name}")]
        return [_unread(label, "status", exc, emulated, ADDONS_NOT_IMPLEMENTED)]
    addon = resp.get("addon") or {}
    status = addon.get("status")
    findings = [
        Finding(
            label,
            "status",
            PASS if status == "ACTIVE" else FAIL,
            "ACTIVE" if status == "ACTIVE" else f"{status}, not ACTIVE",
        )
    ]
    if expected.version is not None:
        findings.append(_compare(label, "version", addon.get("addonVersion"), expected.version))
    if expected.configuration is not None:
        raw = addon.get("configurationValues")
        try:
            have = json.loads(raw) if isinstance(raw, str) and raw else raw
        except ValueError:
            have = raw
        findings.append(
            Finding(
                label,
                "configuration",
                PASS if have == expected.configuration else FAIL,
                json.dumps(have, sort_keys=True)
                if have == expected.configuration
                else f"{json.dumps(have, sort_keys=True)}; the plan says "
                f"{json.dumps(expected.configuration, sort_keys=True)}",
            )
        )
    return findings


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


def _output_row(resource: str, output: str, exported: str, planned: str | None) -> Finding:
    """A cross-check of a stack output against the plan's physical name."""
    check = f"stack output {output}"
    if planned is None or exported == planned:
        return Finding(resource, check, PASS, f"{exported}, as planned")
    return Finding(
        resource, check, FAIL, f"the deployed stack exports {exported}; the plan says {planned}"
    )


def verify_cluster(
    plan: Mapping[str, Any],
    clients: ClientFactory,
    region: str | None = None,
    outputs: StackOutputs | None = None,
) -> tuple[list[Finding], list[Finding], list[Finding]]:
    """The cluster, node-group and add-on checks of the plan: three lists of rows."""
    outputs = outputs or StackOutputs()
    expected = expected_cluster(plan, region)
    if expected is None:
        return [], [], []
    emulated = clients.emulated
    cluster_rows: list[Finding] = []
    if outputs.cluster_name:
        cluster_rows.append(
            _output_row(outputs.cluster_name, "cluster_name", outputs.cluster_name, expected.name)
        )
        expected = replace(expected, name=outputs.cluster_name)
    eks = clients("eks", expected.region)
    rows, cluster = check_cluster(eks, clients("kms", expected.region), expected, emulated)
    cluster_rows.extend(rows)

    group_rows: list[Finding] = []
    for group in expected_node_groups(plan, region):
        name = group.name
        exported = outputs.node_pools.get(group.pool or "")
        if exported:
            group_rows.append(
                _output_row(exported, f"node_pools.{group.pool}", exported, group.name)
            )
            name = exported
        group_rows.extend(
            check_node_group(
                clients("eks", group.region),
                clients("ec2", group.region),
                group,
                cluster,
                name,
                emulated,
            )
        )
    addon_rows = [
        row
        for addon in expected_addons(plan, region)
        for row in check_addon(clients("eks", addon.region), addon, cluster, emulated)
    ]
    return cluster_rows, group_rows, addon_rows


def verify_stack(
    plan: Mapping[str, Any],
    clients: ClientFactory,
    region: str | None = None,
    outputs: StackOutputs | None = None,
    areas: Iterable[str] = AREAS,
) -> list[Finding]:
    """Every check of the plan in `areas` against the account `clients` reach, in the order of
    AREAS, each row with its area. `region` (else the outputs', else the plan's) replaces the
    primary provider's region; the DR provider keeps its own."""
    outputs = outputs or StackOutputs()
    wanted = set(areas)
    region = region or outputs.region or primary_region(plan)
    by_area: dict[str, list[Finding]] = {}
    if wanted & {"cluster", "nodegroups", "addons"}:
        (
            by_area["cluster"],
            by_area["nodegroups"],
            by_area["addons"],
        ) = verify_cluster(plan, clients, region, outputs)
    if "storage" in wanted:
        rows = []
        planned = {b.name for b in expected_buckets(plan, region)}
        for key, exported in sorted(outputs.buckets.items()):
            check = f"stack output buckets.{key}"
            if exported in planned:
                rows.append(Finding(exported, check, PASS, f"{exported}, as planned"))
            else:
                rows.append(
                    Finding(exported, check, FAIL, f"{exported} is not a bucket of the plan")
                )
        by_area["storage"] = rows + verify_storage(plan, clients, region)
    return [
        replace(row, area=area) for area in AREAS if area in wanted for row in by_area.get(area, [])
    ]


def failed(findings: Iterable[Finding]) -> bool:
    """Whether any finding failed ("not checked" alone does not fail)."""
    return any(f.status == FAIL for f in findings)


def summary(findings: Sequence[Finding]) -> str:
    """`12 pass, 1 fail, 9 not checked`: the line under the table."""
    counts = Counter(f.status for f in findings)
    return ", ".join(f"{counts.get(s, 0)} {s}" for s in STATUSES)


STATUS_STYLE = {PASS: "green", FAIL: "bold red", NOT_CHECKED: "yellow"}


def render_table(findings: Sequence[Finding], title: str) -> Any:
    """The one table of the report: a section per area, a row per finding."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    for column in ("resource", "check", "status", "reason"):
        table.add_column(column, overflow="fold")
    for i, f in enumerate(findings):
        last_of_area = i + 1 == len(findings) or findings[i + 1].area != f.area
        table.add_row(
            Text(f.resource),
            Text(f.check),
            Text(f.status, style=STATUS_STYLE.get(f.status, "")),
            Text(f.reason),
            end_section=last_of_area,
        )
    return table


__all__ = [
    "ADDONS_NOT_IMPLEMENTED",
    "AREAS",
    "DRA_NOT_IMPLEMENTED",
    "FAIL",
    "NOT_CHECKED",
    "PASS",
    "PLACEMENT_NOT_IMPLEMENTED",
    "ClientFactory",
    "ClusterState",
    "CredentialsRejected",
    "ExpectedAddon",
    "ExpectedAssociation",
    "ExpectedBucket",
    "ExpectedCluster",
    "ExpectedFileSystem",
    "ExpectedLaunchTemplate",
    "ExpectedNodeGroup",
    "ExpectedPlacementGroup",
    "Finding",
    "LifecycleRule",
    "OutputsError",
    "PlanError",
    "ReplicationRule",
    "StackOutputs",
    "bucket_arn",
    "check_addon",
    "check_associations",
    "check_bucket",
    "check_cluster",
    "check_file_system",
    "check_launch_template",
    "check_lifecycle",
    "check_node_group",
    "check_replication",
    "expected_addons",
    "expected_buckets",
    "expected_cluster",
    "expected_file_systems",
    "expected_node_groups",
    "failed",
    "find_cluster",
    "find_node_group",
    "lifecycle_differences",
    "load_outputs_file",
    "load_plan_file",
    "parse_outputs",
    "primary_region",
    "raise_if_rejected",
    "render_table",
    "summary",
    "unsupported",
    "validate_plan",
    "verify_cluster",
    "verify_stack",
    "verify_storage",
]
