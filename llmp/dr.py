"""`llmp dr plan`: re-create a stack's platform in another region after a disaster.

From the source stack's file this writes the recovery stack's file: the same
platform, with what is bound to a region rewritten (region, AZs, capacity
reservations, ACM certificate, replication) and the storage pointed at the
source's replicas, which the recovery stack adopts (imports, protects and
retains) instead of creating empty buckets. It then runs both stacks offline
(`llmp.synth`) and reports:

- the RTO: the longest chain of the recovery plan's dependency graph, weighted
  by the catalog's typical creation minutes per resource type;
- the RPO: checkpoint interval + the file system's export to S3 + S3
  replication lag, the most training progress a disaster can take;
- the plans' equivalence (`plan_differences`): both plans hold the same
  resources with the same inputs, apart from a named list of region-bound
  differences; anything else is reported as unexplained.

A Markdown runbook is written beside the stack file.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from spec.catalog import CreationTime, Recovery, catalog
from spec.keys import NAMESPACE, REGION_KEY
from spec.platform import PlatformConfig
from spec.stackfile import load_config

PROJECT = "llm-platform"
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_RESERVATION = re.compile(r"^cr-[0-9a-f]{8,17}$")
_CERT_ARN = re.compile(
    r"^arn:aws[a-z-]*:acm:(?P<region>[a-z0-9-]+):\d{12}:certificate/[0-9a-f-]{36}$"
)
_KMS_ARN = re.compile(r"^arn:aws[a-z-]*:kms:(?P<region>[a-z0-9-]+):\d{12}:key/[0-9a-zA-Z-]+$")
KEY_STAND_IN = "arn:aws:kms:{region}:000000000000:key/00000000-0000-0000-0000-000000000000"
"""Used only to synthesize the recovery plan offline while the replica key's ARN is
unknown; never written to the stack file, which then fails validation until it is set."""


class DrError(Exception):
    """Bad input for a recovery plan: one line, what and what would be right."""


def _key(section: str) -> str:
    return f"{NAMESPACE}:{section}"


# ---------------------------------------------------------------------------
# The recovery stack's config
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RecoveryOptions:
    """What the operator decides (or the defaults decide) about the recovery stack."""

    source_stack: str
    region: str
    stack: str | None = None
    """Recovery stack name; default `<source>-dr`."""
    zones: list[str] | None = None
    """AZs of the recovery region, as many as the source has; default `<region>a, b, ...`."""
    outputs: Mapping[str, Any] | None = None
    """`pulumi stack output --json` of the source stack, when it can still be read."""
    replica_key_arn: str | None = None
    reservations: Mapping[str, str] = field(default_factory=dict)
    """Pool -> capacity reservation (block) bought in the recovery region."""
    certificate_arn: str | None = None
    replicate_to: str | None = None
    bucket_prefix: str | None = None
    checkpoint_interval_seconds: int | None = None

    @property
    def stack_name(self) -> str:
        return self.stack or f"{self.source_stack}-dr"


@dataclass(frozen=True)
class Rewrite:
    """One region-bound setting changed on the way to the recovery stack."""

    key: str
    before: Any
    after: Any
    why: str


@dataclass(frozen=True)
class Note:
    """Something the operator must know (`info`), check (`check`) or do (`action`)."""

    level: str
    text: str


@dataclass
class RecoveryConfig:
    """The recovery stack's `config:` map and everything decided on the way."""

    raw: dict[str, Any]
    """What the stack file holds (the replica key left out while unknown)."""
    synth_raw: dict[str, Any]
    """What is synthesized offline (the stand-in key when the real one is unknown)."""
    source_region: str
    region: str
    stack: str
    zone_map: dict[str, str]
    adopted: dict[str, str]
    key_arn: str | None
    key_from: str
    dropped_pools: list[str]
    rewrites: list[Rewrite] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)
    """Secure config keys not copied (encrypted for the source stack only)."""


def load_outputs(path: Path) -> dict[str, Any]:
    """`pulumi stack output --json` of the source stack; DrError (one line) if it is not."""
    from llmp.verify import read_json_file

    doc = read_json_file(path, "--outputs", "is", DrError)
    if not isinstance(doc, dict):
        raise DrError(
            f"--outputs {path} is not `pulumi stack output --json` (a JSON object of outputs)"
        )
    return doc


def parse_reservations(values: Iterable[str]) -> dict[str, str]:
    """`POOL=cr-...` options as a map; DrError for anything else."""
    out: dict[str, str] = {}
    for value in values:
        pool, sep, reservation = value.partition("=")
        if not sep or not pool or not reservation:
            raise DrError(f"--reservation {value!r}: expected POOL=cr-0123456789abcdef0")
        if pool in out:
            raise DrError(f"--reservation names pool {pool} twice")
        out[pool] = reservation
    return out


def _pool_effective_zones(cfg: PlatformConfig, pool: str) -> list[str]:
    return cfg.pool_zones(cfg.node_pools[pool])


def build_recovery_config(
    source_raw: Mapping[str, Any], options: RecoveryOptions
) -> RecoveryConfig:
    """The recovery stack's config from the source stack's `config:` map (not changed).

    Raises ConfigError for an invalid source, DrError for options that cannot work.
    """
    from llmp.synth import stack_name_problem

    source = load_config(source_raw)
    region = options.region
    if stack_name_problem(options.stack_name) is not None:
        raise DrError(
            f"--stack {options.stack_name!r}: stack names take letters, digits, '-', '_', '.'"
        )
    if not _REGION.match(region):
        raise DrError(f"--region {region!r} is not an AWS region name, e.g. us-west-2")
    if region == source.region:
        raise DrError(
            f"--region {region} is the source stack's own region; recover into another one"
        )
    raw: dict[str, Any] = {}
    secrets: list[str] = []
    for key, value in source_raw.items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            secrets.append(key)  # encrypted for the source stack's secrets provider only
        else:
            raw[key] = copy.deepcopy(value)
    rc = RecoveryConfig(
        raw=raw,
        synth_raw={},
        source_region=source.region,
        region=region,
        stack=options.stack_name,
        zone_map={},
        adopted={},
        key_arn=None,
        key_from="none",
        dropped_pools=[],
        secrets=sorted(secrets),
    )
    _rewrite(rc, REGION_KEY, source.region, region, "the recovery region")
    raw[REGION_KEY] = region
    _zones(rc, source, options)
    _cluster_name(rc, source, options)
    _pools(rc, source, options)
    rc.rewrites = [
        r
        for r in rc.rewrites
        if not any(r.key.startswith(_key(f"node_pools.{p}.")) for p in rc.dropped_pools)
    ]
    _storage(rc, source, options)
    _serving(rc, source, options)
    for key in rc.secrets:
        rc.notes.append(
            Note(
                "action",
                f"secret {key} is encrypted for {options.source_stack}'s secrets provider and "
                f"was not copied: `pulumi config set --secret {key} ... -s {rc.stack}`",
            )
        )
    rc.synth_raw = copy.deepcopy(raw)
    adoption = (rc.synth_raw.get(_key("storage")) or {}).get("adoption")
    if adoption is not None and "kms_key_arn" not in adoption:
        adoption["kms_key_arn"] = KEY_STAND_IN.format(region=region)
    load_config(rc.synth_raw)  # the recovery config validates, or the caller learns why
    return rc


def _rewrite(rc: RecoveryConfig, key: str, before: Any, after: Any, why: str) -> None:
    rc.rewrites.append(Rewrite(key, before, after, why))


def _section(raw: dict[str, Any], name: str) -> dict[str, Any]:
    value = raw.get(_key(name))
    if not isinstance(value, dict):
        value = {}
        raw[_key(name)] = value
    return value


def _zones(rc: RecoveryConfig, source: PlatformConfig, options: RecoveryOptions) -> None:
    old = list(source.network.availability_zones)
    if options.zones is not None:
        new = list(options.zones)
        if len(new) != len(old):
            raise DrError(
                f"--zones names {len(new)} zone{'s' if len(new) != 1 else ''}; "
                f"{options.source_stack} uses {len(old)} "
                f"({', '.join(old)}): name as many, in the same order"
            )
        for zone in new:
            if not re.fullmatch(re.escape(rc.region) + r"[a-z]", zone):
                raise DrError(f"--zones: {zone!r} is not an AZ of {rc.region}, e.g. {rc.region}a")
        if len(set(new)) != len(new):
            raise DrError("--zones lists a zone twice; list each once")
    else:
        if len(old) > 26:
            raise DrError("the source lists more than 26 zones; pass --zones")
        new = [f"{rc.region}{chr(ord('a') + i)}" for i in range(len(old))]
        gpu_types = sorted({p.instance_type for p in source.node_pools.values()})
        rc.notes.append(
            Note(
                "check",
                f"zones {', '.join(new)} were derived from the region name, not looked up: AZ "
                f"names map to different zones in each account and not every zone offers "
                f"{', '.join(gpu_types) or 'the instance types'}. Check with `aws ec2 "
                f"describe-availability-zones --region {rc.region}` and `aws ec2 "
                f"describe-instance-type-offerings --region {rc.region} --location-type "
                f"availability-zone`, then rerun with --zones",
            )
        )
    rc.zone_map = dict(zip(old, new, strict=True))
    network = _section(rc.raw, "network")
    network["availability_zones"] = new
    _rewrite(
        rc,
        _key("network.availability_zones"),
        old,
        new,
        "AZs are regional; the recovery stack keeps their number and order",
    )
    for name, pool in (rc.raw.get(_key("node_pools")) or {}).items():
        zones = pool.get("availability_zones") if isinstance(pool, dict) else None
        if zones:
            pool["availability_zones"] = [rc.zone_map[z] for z in zones]
            _rewrite(
                rc,
                _key(f"node_pools.{name}.availability_zones"),
                zones,
                pool["availability_zones"],
                "same position in the zone list",
            )


def _cluster_name(rc: RecoveryConfig, source: PlatformConfig, options: RecoveryOptions) -> None:
    name = source.cluster.name or f"{PROJECT}-{options.source_stack}"
    cluster = _section(rc.raw, "cluster")
    if cluster.get("name") != name:
        cluster["name"] = name
        _rewrite(
            rc,
            _key("cluster.name"),
            None,
            name,
            "keeps the source's cluster name (names are regional), not <project>-<stack>",
        )


def _pools(rc: RecoveryConfig, source: PlatformConfig, options: RecoveryOptions) -> None:
    pools: dict[str, Any] = rc.raw.get(_key("node_pools")) or {}
    for name in options.reservations:
        if name not in source.node_pools or source.node_pools[name].capacity_reservation_id is None:
            on_reservation = [n for n, p in source.node_pools.items() if p.capacity_reservation_id]
            raise DrError(
                f"--reservation {name}=...: {options.source_stack} has no pool {name} on a "
                f"reservation (pools on one: {', '.join(on_reservation) or 'none'})"
            )
        if not _RESERVATION.match(options.reservations[name]):
            raise DrError(
                f"--reservation {name}={options.reservations[name]}: not a reservation id, "
                "e.g. cr-0123456789abcdef0"
            )
    for name, pool in source.node_pools.items():
        if pool.capacity_reservation_id is None:
            continue
        key = _key(f"node_pools.{name}.capacity_reservation_id")
        if name in options.reservations:
            new = options.reservations[name]
            pools[name]["capacity_reservation_id"] = new
            _rewrite(rc, key, pool.capacity_reservation_id, new, "bought in the recovery region")
            rc.notes.append(
                Note(
                    "check",
                    f"pool {name}: reservation {new} must be for {pool.instance_type} in "
                    f"{_pool_effective_zones(source, name)[0]}'s counterpart "
                    f"{rc.zone_map[_pool_effective_zones(source, name)[0]]}",
                )
            )
        elif pool.capacity_type == "CAPACITY_BLOCK":
            del pools[name]
            rc.dropped_pools.append(name)
            _rewrite(
                rc,
                _key(f"node_pools.{name}"),
                f"{pool.instance_type} capacity block {pool.capacity_reservation_id}",
                None,
                "a capacity block is bound to its region and AZ and cannot move",
            )
            rc.notes.append(
                Note(
                    "action",
                    f"pool {name} (capacity block) is not in the recovery stack: buy a block of "
                    f"{pool.instance_type} in {rc.region}, then add the pool back with its id "
                    f"(or rerun with --reservation {name}=cr-...). It was not turned into an "
                    f"On-Demand pool: {pool.max_size} more {pool.instance_type} On-Demand is "
                    "spend nobody budgeted, and blocks are bought where On-Demand capacity is "
                    "short",
                )
            )
        else:
            # An On-Demand Capacity Reservation is zonal: the pool runs on plain On-Demand.
            entry = pools[name]
            del entry["capacity_reservation_id"]
            entry["placement_group"] = pool.uses_placement_group
            _rewrite(
                rc,
                key,
                pool.capacity_reservation_id,
                None,
                "On-Demand reservations are zonal; the pool runs on plain On-Demand "
                "(placement group kept as it was)",
            )
    if not rc.dropped_pools:
        return
    dropped = set(rc.dropped_pools)
    storage = source.storage
    if storage is not None and storage.lustre is not None and storage.lustre.node_pool in dropped:
        raise DrError(
            f"storage.lustre.node_pool is {storage.lustre.node_pool}, a capacity-block pool: "
            f"pass --reservation {storage.lustre.node_pool}=cr-... for a block in {rc.region}"
        )
    if source.serving is not None:
        for model in source.serving.models:
            if model.node_pool in dropped:
                raise DrError(
                    f"serving model {model.name} runs on capacity-block pool {model.node_pool}: "
                    f"pass --reservation {model.node_pool}=cr-... for a block in {rc.region}"
                )
    for tenant, spec in (rc.raw.get(_key("tenants")) or {}).items():
        for quota_key in ("gpu_quota", "serving_gpus"):
            quota = spec.get(quota_key) if isinstance(spec, dict) else None
            if not isinstance(quota, dict):
                continue
            for pool_name in sorted(dropped & set(quota)):
                _rewrite(
                    rc,
                    _key(f"tenants.{tenant}.{quota_key}.{pool_name}"),
                    quota.pop(pool_name),
                    None,
                    "its pool is not in the recovery stack",
                )


def _storage(rc: RecoveryConfig, source: PlatformConfig, options: RecoveryOptions) -> None:
    storage_cfg = source.storage
    if storage_cfg is None:
        return
    storage = _section(rc.raw, "storage")
    prefix = options.bucket_prefix or f"{storage_cfg.bucket_name_prefix}-{rc.region}"
    if len(prefix) > 40:
        raise DrError(
            f"the recovery bucket prefix {prefix} is longer than 40 characters: pass "
            "--bucket-prefix with a shorter prefix your organisation owns"
        )
    storage["bucket_name_prefix"] = prefix
    _rewrite(
        rc,
        _key("storage.bucket_name_prefix"),
        storage_cfg.bucket_name_prefix,
        prefix,
        "bucket names are global: the source's names stay taken while its region is down",
    )
    replicated = [k for k, b in storage_cfg.buckets.items() if b.replicate]
    target = storage_cfg.replication.region
    if replicated and target != rc.region:
        raise DrError(
            f"{options.source_stack} replicates to {target} (storage.replication.region), not "
            f"{rc.region}: recover in {target}, where the replicas are"
        )
    if not replicated:
        rc.notes.append(
            Note(
                "check",
                f"{options.source_stack} replicates no bucket: every bucket of the recovery "
                "stack starts empty and no checkpoint survives the region",
            )
        )
    else:
        names, names_from = _replica_names(rc, storage_cfg, replicated, options)
        key_arn, key_from = _replica_key(rc, options)
        rc.adopted, rc.key_arn, rc.key_from = names, key_arn, key_from
        adoption: dict[str, Any] = {"buckets": names}
        if key_arn is not None:
            adoption["kms_key_arn"] = key_arn
        storage["adoption"] = adoption
        _rewrite(
            rc,
            _key("storage.adoption"),
            None,
            {"buckets": names, "kms_key_arn": key_arn or "(unset)"},
            f"the replicas are adopted (imported, protected), not re-created empty; names "
            f"{names_from}, key {key_from}",
        )
        if key_arn is None:
            rc.notes.append(
                Note(
                    "action",
                    "set storage.adoption.kms_key_arn (the replicas' KMS key) before `pulumi "
                    f"up`: `aws kms describe-key --region {rc.region} --key-id alias/"
                    f"{storage_cfg.bucket_name_prefix}-s3-replica --query KeyMetadata.Arn`, or "
                    "rerun with --outputs or --replica-key-arn. Until then the stack file fails "
                    "with a one-line config error; the RTO and the plan comparison used an "
                    "offline stand-in",
                )
            )
    not_replicated = [k for k in storage_cfg.buckets if k not in replicated and k != "logs"]
    if not_replicated:
        rc.notes.append(
            Note(
                "check",
                f"{_buckets_phrase(not_replicated)} not replicated: the recovery stack creates "
                f"{'it' if len(not_replicated) == 1 else 'them'} empty "
                f"({', '.join(f'{prefix}-{k}' for k in not_replicated)}); restore or re-create "
                "the data (e.g. datasets from their origin)",
            )
        )
    buckets = storage.get("buckets") or {}
    replication = storage.get("replication")
    if options.replicate_to is not None:
        if options.replicate_to in (rc.region,) or not _REGION.match(options.replicate_to):
            raise DrError(
                f"--replicate-to {options.replicate_to}: name another region than {rc.region}"
            )
        replication = dict(replication or {})
        replication["region"] = options.replicate_to
        storage["replication"] = replication
        _rewrite(
            rc,
            _key("storage.replication.region"),
            target,
            options.replicate_to,
            "--replicate-to",
        )
        rc.notes.append(
            Note(
                "check",
                f"replication to {options.replicate_to} copies new objects only; copy what "
                "exists with S3 Batch Replication",
            )
        )
        return
    for key in replicated:
        buckets[key]["replicate"] = False
    if isinstance(replication, dict) and "region" in replication:
        del replication["region"]
    if replicated:
        _rewrite(
            rc,
            _key("storage.replication.region"),
            target,
            None,
            f"replication is off: its target {target} is the recovery region itself, and "
            f"{source.region} is down (re-enable it in reverse later, see the runbook)",
        )


def _buckets_phrase(keys: list[str]) -> str:
    return f"bucket {keys[0]} is" if len(keys) == 1 else f"buckets {', '.join(keys)} are"


def _replica_names(
    rc: RecoveryConfig,
    storage_cfg: Any,
    replicated: list[str],
    options: RecoveryOptions,
) -> tuple[dict[str, str], str]:
    outputs = options.outputs or {}
    dr = outputs.get("dr_replicas")
    if isinstance(dr, dict):
        names = {}
        for key in replicated:
            entry = dr.get(key)
            if not isinstance(entry, dict) or not isinstance(entry.get("bucket"), str):
                raise DrError(f"--outputs: dr_replicas has no bucket for {key}")
            if entry.get("region") not in (None, rc.region):
                raise DrError(
                    f"--outputs: the replica of {key} is in {entry['region']}, not {rc.region}"
                )
            names[key] = entry["bucket"]
        return names, "from the source's outputs (dr_replicas)"
    primary = outputs.get("buckets")
    if isinstance(primary, dict) and all(isinstance(primary.get(k), str) for k in replicated):
        return (
            {k: f"{primary[k]}-{rc.region}" for k in replicated},
            "derived from the source's outputs (buckets + -region)",
        )
    names = {k: f"{storage_cfg.bucket_name_prefix}-{k}-{rc.region}" for k in replicated}
    rc.notes.append(
        Note(
            "check",
            "replica names were derived from the source's stack file, not read from a deployed "
            "stack: confirm each with `aws s3api head-bucket --bucket NAME` (or rerun with "
            f"--outputs FILE from `pulumi stack output --json -s {options.source_stack}`)",
        )
    )
    return names, "derived from the stack file (<prefix>-<bucket>-<region>)"


def _replica_key(rc: RecoveryConfig, options: RecoveryOptions) -> tuple[str | None, str]:
    candidates: dict[str, str] = {}
    dr = (options.outputs or {}).get("dr_replicas")
    if isinstance(dr, dict):
        arns = {e.get("kms_key_arn") for e in dr.values() if isinstance(e, dict)} - {None}
        if len(arns) > 1:
            raise DrError("--outputs: dr_replicas names more than one replica key")
        if arns:
            candidates["from the source's outputs (dr_replicas)"] = str(arns.pop())
    if options.replica_key_arn is not None:
        candidates["from --replica-key-arn"] = options.replica_key_arn
    if len(set(candidates.values())) > 1:
        raise DrError("--replica-key-arn differs from the key in --outputs: give one of them")
    if not candidates:
        return None, "unknown"
    source, arn = next(iter(candidates.items()))
    match = _KMS_ARN.match(arn)
    if not match:
        raise DrError(f"replica key {arn!r} ({source}) is not a KMS key ARN")
    if match["region"] != rc.region:
        raise DrError(f"replica key {arn} ({source}) is in {match['region']}, not {rc.region}")
    return arn, source


def _serving(rc: RecoveryConfig, source: PlatformConfig, options: RecoveryOptions) -> None:
    if source.serving is None:
        return
    arn = options.certificate_arn
    if arn is None:
        raise DrError(
            f"serving.certificate_arn: ACM certificates are regional; request one for "
            f"{source.serving.hostname} in {rc.region} and pass --certificate-arn ARN"
        )
    match = _CERT_ARN.match(arn)
    if not match or match["region"] != rc.region:
        raise DrError(
            f"--certificate-arn {arn}: not an ACM certificate ARN in {rc.region}, e.g. "
            f"arn:aws:acm:{rc.region}:123456789012:certificate/<uuid>"
        )
    _section(rc.raw, "serving")["certificate_arn"] = arn
    _rewrite(
        rc, _key("serving.certificate_arn"), source.serving.certificate_arn, arn, "ACM is regional"
    )
    rc.notes.append(
        Note(
            "action",
            f"point {source.serving.hostname} at the recovery ALB once it serves (DNS), and "
            "re-set the API client keys (secrets are not copied)",
        )
    )


# ---------------------------------------------------------------------------
# Equivalence of the two plans
# ---------------------------------------------------------------------------

REGION_RULE = "region"
ZONE_RULE = "availability-zone"
STACK_RULE = "stack-name"
BUCKET_RULE = "bucket-name"
ADOPTION_RULE = "adoption"
REPLICATION_RULE = "replication"
CAPACITY_BLOCK_RULE = "capacity-block-pool"
RESERVATION_RULE = "capacity-reservation"
CERTIFICATE_RULE = "certificate"

ALLOWED_DIFFERENCES: dict[str, str] = {
    REGION_RULE: "the region, in provider config, service names, endpoints and ARNs",
    ZONE_RULE: "availability zones, and the names of the per-zone network resources",
    STACK_RULE: "the stack name (the `stack` tag, names derived from it, URNs)",
    BUCKET_RULE: "bucket names: adopted replicas keep theirs, new buckets take a new prefix",
    ADOPTION_RULE: "import ids, protect and retain_on_delete of the adopted buckets, their key "
    "and settings; the `llm-platform/adopted` tag; the logs bucket admitting the adopted names",
    REPLICATION_RULE: "replication: the DR provider, replica buckets and key, the replication "
    "role and rules (off in the recovery stack, or to another target)",
    CAPACITY_BLOCK_RULE: "capacity-block pools left out, with their Kueue flavors and quotas",
    RESERVATION_RULE: "capacity reservation ids (bought in the recovery region)",
    CERTIFICATE_RULE: "ACM certificate ARNs (re-issued in the recovery region)",
}
"""Every kind of difference a recovery plan may have from its source; anything else is
unexplained and fails the equivalence."""

_OPTION_FIELDS = ("protect", "retain_on_delete", "import_id")
_ADOPTED_TAG = "llm-platform/adopted"
_KUEUE = "kubernetes:kueue.x-k8s.io/"
_QUOTA = "kubernetes:core/v1:ResourceQuota"
_BUCKET = "aws:s3/bucket:Bucket"
_KEY = "aws:kms/key:Key"


@dataclass(frozen=True)
class Difference:
    """One resource in one plan only, or one input or lifecycle option that differs."""

    type: str
    name: str
    path: str
    """`inputs.<path>`, `options.<name>`, `name`, `parent`, `provider`, `dependencies`;
    empty for a whole resource."""
    source: Any
    recovery: Any
    rules: tuple[str, ...]
    """The named differences that explain it; empty when nothing does."""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rules": list(self.rules)}


@dataclass
class PlanDifferences:
    """How a recovery plan differs from its source plan, difference by difference."""

    only_in_source: list[Difference] = field(default_factory=list)
    only_in_recovery: list[Difference] = field(default_factory=list)
    changed: list[Difference] = field(default_factory=list)
    in_both: int = 0

    def all(self) -> list[Difference]:
        return [*self.only_in_source, *self.only_in_recovery, *self.changed]

    @property
    def unexplained(self) -> list[Difference]:
        return [d for d in self.all() if not d.rules]

    @property
    def equivalent(self) -> bool:
        return not self.unexplained

    def by_rule(self) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for d in self.all():
            counts.update(d.rules)
        return dict(sorted(counts.items()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "equivalent": self.equivalent,
            "resources_in_both": self.in_both,
            "only_in_source": len(self.only_in_source),
            "only_in_recovery": len(self.only_in_recovery),
            "by_rule": self.by_rule(),
            "allowed": ALLOWED_DIFFERENCES,
            "differences": [d.to_dict() for d in self.all()],
            "unexplained": [d.to_dict() for d in self.unexplained],
        }


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


_ABSENT: Any = _Absent()


@dataclass
class _Context:
    """What the two plans say about each other: the pairs that translate a source value
    into its recovery counterpart, the pools left out, the adopted bucket names."""

    pairs: list[tuple[str, str, str]]
    """(rule, source text, recovery text); a source text named twice with different
    recovery texts is ambiguous and translates nothing."""
    stacks: tuple[str, str]
    dropped_pools: set[str]
    """Capacity-block pools of the source that the recovery plan leaves out."""
    adopted_buckets: set[str]
    source_queues: dict[str, Mapping[str, Any]]
    """Source ClusterQueue inputs by queue (= tenant) name."""
    onward: _Context | None = None
    """For resources of the replication in both plans (`--replicate-to`): these pairs
    plus the replica region's and replica buckets' own."""
    _table: dict[str, tuple[str, str]] = field(init=False, default_factory=dict)
    _pattern: re.Pattern[str] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        ambiguous: set[str] = set()
        for rule, old, new in self.pairs:
            if old in self._table and self._table[old][1] != new:
                ambiguous.add(old)
            self._table.setdefault(old, (rule, new))
        for old in ambiguous:
            del self._table[old]
        if self._table:
            # Longest text first, so a bucket name wins over the prefix it starts with and
            # a zone over the region it names.
            texts = sorted(self._table, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(t) for t in texts))

    def translate(self, value: str) -> tuple[str, set[str]]:
        """`value` with every source text replaced by its recovery text, in one pass: a
        replacement is never translated again (a new bucket prefix that names the source
        region stays as it is), and the rules that applied."""
        if value == self.stacks[0] and self.stacks[0] != self.stacks[1]:
            return self.stacks[1], {STACK_RULE}
        rules: set[str] = set()
        if self._pattern is None:
            return value, rules

        def substitute(match: re.Match[str]) -> str:
            rule, new = self._table[match.group(0)]
            rules.add(rule)
            return new

        return self._pattern.sub(substitute, value), rules


def _as_dict(plan: Any) -> dict[str, Any]:
    return plan.to_dict() if hasattr(plan, "to_dict") else dict(plan)


def _region_of(plan: Mapping[str, Any]) -> str | None:
    region = (plan.get("outputs") or {}).get("region")
    if isinstance(region, str):
        return region
    for r in plan["resources"]:
        if r["type"] == "pulumi:providers:aws" and r["name"] == "aws":
            value = r["inputs"].get("region")
            return value if isinstance(value, str) else None
    return None


def _subnet_zones(plan: Mapping[str, Any]) -> list[str]:
    """The plan's AZs in the order its subnets were declared (the config's order)."""
    zones = [
        r["inputs"].get("availabilityZone")
        for r in plan["resources"]
        if r["type"] == "aws:ec2/subnet:Subnet"
    ]
    return list(dict.fromkeys(z for z in zones if isinstance(z, str)))


def _node_pools(plan: Mapping[str, Any]) -> set[str]:
    """The GPU pools a plan holds (its GpuNodePool components)."""
    return {
        r["name"].removeprefix("gpu-")
        for r in plan["resources"]
        if r["type"] == "llmp:nodes:GpuNodePool"
    }


def _capacity_block_pools(plan: Mapping[str, Any]) -> set[str]:
    """The GPU pools whose node group runs on a capacity block."""
    pools = {
        r["urn"]: r["name"].removeprefix("gpu-")
        for r in plan["resources"]
        if r["type"] == "llmp:nodes:GpuNodePool"
    }
    return {
        pools[r["parent"]]
        for r in plan["resources"]
        if r["type"] == "aws:eks/nodeGroup:NodeGroup"
        and r.get("parent") in pools
        and r["inputs"].get("capacityType") == "CAPACITY_BLOCK"
    }


def _adopted(r: Mapping[str, Any]) -> bool:
    """A resource the recovery stack takes over: a bucket imported by its own name, or a
    KMS key, imported and tagged as adopted."""
    tags = r["inputs"].get("tags") or {}
    if not r.get("import_id") or tags.get(_ADOPTED_TAG) != "true":
        return False
    if r["type"] == _BUCKET:
        return bool(r["import_id"] == r["inputs"].get("bucket"))
    return bool(r["type"] == _KEY)


def _context(source: Mapping[str, Any], recovery: Mapping[str, Any]) -> _Context:
    """Read the region-bound pairs off the two plans themselves.

    A bucket pair is taken only when the recovery name is region-bound: an adopted
    replica's own name, or the source name with the new prefix (read off the storage
    key's alias) in place of the old one; and no two source buckets may become one.
    """
    pairs: list[tuple[str, str, str]] = []
    for a, b in zip(_subnet_zones(source), _subnet_zones(recovery), strict=False):
        if a != b:
            pairs.append((ZONE_RULE, a, b))
    src = {(r["type"], r["name"]): r for r in source["resources"]}
    rec = {(r["type"], r["name"]): r for r in recovery["resources"]}
    dr_src, dr_rec = _dr_providers(source), _dr_providers(recovery)
    buckets: list[tuple[str, str, bool]] = []
    replicas: list[tuple[str, str]] = []
    prefixes: tuple[str, str] | None = None
    for key, r in src.items():
        other = rec.get(key)
        if other is None:
            continue
        if key[0] == _BUCKET:
            a, b = r["inputs"].get("bucket"), other["inputs"].get("bucket")
            if isinstance(a, str) and isinstance(b, str) and a != b:
                replica = _is_replication(r, dr_src), _is_replication(other, dr_rec)
                if all(replica):
                    replicas.append((a, b))
                elif not any(replica):
                    buckets.append((a, b, _adopted(other)))
        if key[0] == "aws:kms/alias:Alias":
            a, b = r["inputs"].get("name"), other["inputs"].get("name")
            if isinstance(a, str) and isinstance(b, str) and a != b:
                pairs.append((BUCKET_RULE, a, b))
                if a.endswith("-s3") and b.endswith("-s3"):  # alias/<bucket prefix>-s3
                    old, new = a.removeprefix("alias/")[:-3], b.removeprefix("alias/")[:-3]
                    pairs.append((BUCKET_RULE, f"{old}-*", f"{new}-*"))
                    prefixes = (old, new)
    targets = Counter(b for _, b, _ in buckets)
    for a, b, adopted in buckets:
        renamed = prefixes is not None and (
            a.startswith(f"{prefixes[0]}-") and b == prefixes[1] + a[len(prefixes[0]) :]
        )
        if (adopted or renamed) and targets[b] == 1:
            pairs.append((BUCKET_RULE, a, b))
    source_region, recovery_region = _region_of(source), _region_of(recovery)
    if source_region and recovery_region and source_region != recovery_region:
        pairs.append((REGION_RULE, source_region, recovery_region))
    stacks = (str(source.get("stack")), str(recovery.get("stack")))
    if stacks[0] != stacks[1]:
        pairs.append((STACK_RULE, f"urn:pulumi:{stacks[0]}::", f"urn:pulumi:{stacks[1]}::"))
        pairs.append((STACK_RULE, f"/{stacks[0]}/", f"/{stacks[1]}/"))
    context = _Context(
        pairs=pairs,
        stacks=stacks,
        dropped_pools=(_node_pools(source) - _node_pools(recovery)) & _capacity_block_pools(source),
        adopted_buckets={
            r["inputs"]["bucket"] for r in rec.values() if r["type"] == _BUCKET and _adopted(r)
        },
        source_queues={
            str(r["inputs"].get("metadata", {}).get("name")): r["inputs"]
            for r in src.values()
            if r["type"].startswith(_KUEUE) and r["type"].endswith(":ClusterQueue")
        },
    )
    onward = _onward_pairs(source, recovery, replicas, prefixes)
    if onward:
        context.onward = replace(context, pairs=[*onward, *pairs])
    return context


def _onward_pairs(
    source: Mapping[str, Any],
    recovery: Mapping[str, Any],
    replicas: list[tuple[str, str]],
    prefixes: tuple[str, str] | None,
) -> list[tuple[str, str, str]]:
    """When both plans replicate (the recovery with `--replicate-to`): the replica region,
    and each replica bucket `<prefix>-<bucket>-<region>` under the new prefix and region."""
    regions = [
        tuple(
            r["inputs"].get("region")
            for r in plan["resources"]
            if r["type"] == "pulumi:providers:aws" and r["name"] == "aws-dr"
        )
        for plan in (source, recovery)
    ]
    if not (len(regions[0]) == len(regions[1]) == 1):
        return []
    old_region, new_region = regions[0][0], regions[1][0]
    if not (isinstance(old_region, str) and isinstance(new_region, str)):
        return []
    pairs = [(REPLICATION_RULE, old_region, new_region)] if old_region != new_region else []
    for a, b in replicas:
        if prefixes is None:
            continue
        old, new = prefixes
        middle = a[len(old) : len(a) - len(old_region)]
        if (
            a.startswith(f"{old}-")
            and a.endswith(f"-{old_region}")
            and b == f"{new}{middle}{new_region}"
        ):
            pairs.append((REPLICATION_RULE, a, b))
    return pairs


def _leaves(value: Any, path: str = "") -> dict[str, Any]:
    """Flatten inputs to path -> leaf; JSON documents (policies) are flattened too."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            decoded = json.loads(value)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict | list):
            return _leaves(decoded, path + "<json>")
    if isinstance(value, Mapping):
        if not value:
            return {path: {}}
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_leaves(v, f"{path}.{k}" if path else str(k)))
        return out
    if isinstance(value, list):
        if not value:
            return {path: []}
        out = {}
        for i, v in enumerate(value):
            out.update(_leaves(v, f"{path}[{i}]"))
        return out
    return {path: value}


def _is_replication(r: Mapping[str, Any], dr_providers: set[str]) -> bool:
    """The DR provider, what it creates, the replication rules and their role."""
    if r["urn"] in dr_providers or r.get("provider") in dr_providers:
        return True
    if r["type"] == "aws:s3/bucketReplicationConfig:BucketReplicationConfig":
        return True
    return r["type"].startswith("aws:iam/") and r["name"].endswith("-replication")


def _dr_providers(plan: Mapping[str, Any]) -> set[str]:
    return {
        r["urn"]
        for r in plan["resources"]
        if r["type"] == "pulumi:providers:aws" and r["name"] == "aws-dr"
    }


def _dropped_pool_of(name: str, pools: Iterable[str]) -> str | None:
    """The left-out pool a resource belongs to (`gpu-<pool>-...`, `...-pool-<pool>`)."""
    for pool in sorted(pools, key=len, reverse=True):
        if name == f"gpu-{pool}" or name.startswith(f"gpu-{pool}-"):
            return pool
        if name.endswith(f"-pool-{pool}"):
            return pool
    return None


def _without_dropped_flavors(inputs: Any, pools: set[str]) -> tuple[Any, list[str]]:
    """A Kueue object's inputs without the flavors of left-out pools, and those removed."""
    removed: list[str] = []
    names = {f"pool-{p}" for p in pools}

    def walk(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            kept = []
            for item in value:
                if isinstance(item, Mapping) and item.get("name") in names:
                    removed.append(str(item["name"]))
                    continue
                kept.append(walk(item))
            return kept
        return value

    return walk(inputs), removed


def plan_differences(source: Any, recovery: Any) -> PlanDifferences:
    """Compare a source plan with its recovery plan (Plan objects or plan dicts).

    Resources are matched by (type, name), a source name translated into the
    recovery region first (`network-nat-us-east-1a` -> `network-nat-us-west-2a`).
    Every difference, a resource in one plan only (or twice in the recovery plan), or
    an input, lifecycle option, parent, provider or dependency that differs, is
    explained by the named rules of ALLOWED_DIFFERENCES, or reported with no rule
    (unexplained). The region, zone, bucket-name and stack-name pairs are read off
    the two plans, each only where it is region-bound (`_context`).
    """
    src_plan, rec_plan = _as_dict(source), _as_dict(recovery)
    ctx = _context(src_plan, rec_plan)
    rec: dict[tuple[str, str], Any] = {}
    twins: list[Any] = []  # same type and name as another (under another parent)
    for r in rec_plan["resources"]:
        if (r["type"], r["name"]) in rec:
            twins.append(r)
        else:
            rec[(r["type"], r["name"])] = r
    dr_src, dr_rec = _dr_providers(src_plan), _dr_providers(rec_plan)
    graphs = _Graphs(
        {r["urn"]: r for r in src_plan["resources"]},
        {r["urn"]: r for r in rec_plan["resources"]},
        dr_src,
        dr_rec,
    )
    out = PlanDifferences()
    matched: set[tuple[str, str]] = set()
    for a in src_plan["resources"]:
        name, name_rules = ctx.translate(a["name"])
        key = (a["type"], name)
        b = rec.get(key) if key not in matched else None
        if b is None:
            rules: tuple[str, ...] = ()
            if _is_replication(a, dr_src):
                rules = (REPLICATION_RULE,)
            elif _dropped_pool_of(a["name"], ctx.dropped_pools) is not None:
                rules = (CAPACITY_BLOCK_RULE,)
            out.only_in_source.append(Difference(a["type"], a["name"], "", "present", None, rules))
            continue
        matched.add(key)
        out.in_both += 1
        if name != a["name"]:
            out.changed.append(
                Difference(a["type"], a["name"], "name", a["name"], name, tuple(sorted(name_rules)))
            )
        replication = _is_replication(a, dr_src) or _is_replication(b, dr_rec)
        pair_ctx = ctx.onward if replication and ctx.onward is not None else ctx
        out.changed.extend(_input_differences(a, b, pair_ctx, replication=replication))
        out.changed.extend(_graph_differences(a, b, pair_ctx, graphs))
        adoption = _adoption_options(b, rec)
        for option in _OPTION_FIELDS:
            if a.get(option) != b.get(option):
                explained = option in adoption and adoption[option](b.get(option))
                out.changed.append(
                    Difference(
                        a["type"],
                        a["name"],
                        f"options.{option}",
                        a.get(option),
                        b.get(option),
                        (ADOPTION_RULE,) if explained else (),
                    )
                )
    for b in [*(r for key, r in rec.items() if key not in matched), *twins]:
        rules = (REPLICATION_RULE,) if _is_replication(b, dr_rec) else ()
        out.only_in_recovery.append(Difference(b["type"], b["name"], "", None, "present", rules))
    return out


def _adoption_options(r: Mapping[str, Any], rec: Mapping[tuple[str, str], Any]) -> dict[str, Any]:
    """Option -> test of the value adoption gives it, for an adopted resource (imported by
    its id, protected, retained) or a settings resource of an adopted bucket (retained);
    empty for anything else, whose options must be the source's."""
    if _adopted(r):
        return {
            "import_id": lambda v: isinstance(v, str) and bool(v),
            "protect": lambda v: v is True,
            "retain_on_delete": lambda v: v is True,
        }
    if _adopted_settings(r, rec):
        return {"retain_on_delete": lambda v: v is True}
    return {}


@dataclass(frozen=True)
class _Graphs:
    """Both plans' resources by URN, and their DR providers."""

    source: Mapping[str, Any]
    recovery: Mapping[str, Any]
    dr_source: set[str]
    dr_recovery: set[str]


def _graph_differences(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    ctx: _Context,
    graphs: _Graphs,
) -> list[Difference]:
    """Parent, provider and dependencies, compared after the source URNs are translated:
    a resource that waits for less (or more) is not the same platform, and the RTO walks
    exactly these edges."""
    found: list[Difference] = []
    for field_name in ("parent", "provider"):
        x, y = a.get(field_name), b.get(field_name)
        if (ctx.translate(x)[0] if isinstance(x, str) else x) != y:
            found.append(Difference(a["type"], a["name"], field_name, x, y, ()))
    wanted = {ctx.translate(d)[0]: d for d in a.get("dependencies", [])}
    present = set(b.get("dependencies", []))
    for translated, dep in sorted(wanted.items()):
        if translated in present:
            continue
        target = graphs.source.get(dep)
        rules: tuple[str, ...] = ()
        if target is not None and _is_replication(target, graphs.dr_source):
            rules = (REPLICATION_RULE,)
        elif target is not None and _dropped_pool_of(target["name"], ctx.dropped_pools):
            rules = (CAPACITY_BLOCK_RULE,)
        found.append(Difference(a["type"], a["name"], "dependencies", dep, None, rules))
    for dep in sorted(present - set(wanted)):
        target = graphs.recovery.get(dep)
        rules = ()
        if target is not None and _is_replication(target, graphs.dr_recovery):
            rules = (REPLICATION_RULE,)
        found.append(Difference(a["type"], a["name"], "dependencies", None, dep, rules))
    return found


def _adopted_settings(r: Mapping[str, Any], rec: Mapping[tuple[str, str], Any]) -> bool:
    """A settings resource (encryption, versioning, ...) of an adopted bucket."""
    if not r["type"].startswith("aws:s3/"):
        return False
    for dep in r.get("dependencies", []):
        bucket = rec.get((_BUCKET, dep.rsplit("::", 1)[-1]))
        if bucket is not None and _adopted(bucket):
            return True
    return False


def _input_differences(
    a: Mapping[str, Any], b: Mapping[str, Any], ctx: _Context, *, replication: bool
) -> list[Difference]:
    found: list[Difference] = []
    source_inputs = a["inputs"]
    if a["type"].startswith(_KUEUE) and ctx.dropped_pools:
        source_inputs, removed = _without_dropped_flavors(source_inputs, ctx.dropped_pools)
        for flavor in removed:
            found.append(
                Difference(
                    a["type"],
                    a["name"],
                    f"inputs.<flavor {flavor}>",
                    flavor,
                    None,
                    (CAPACITY_BLOCK_RULE,),
                )
            )
    left, right = _leaves(source_inputs), _leaves(b["inputs"])
    for path in sorted(set(left) | set(right)):
        x, y = left.get(path, _ABSENT), right.get(path, _ABSENT)
        if x == y:
            continue
        rules: set[str] = set()
        if isinstance(x, str) and isinstance(y, str):
            translated, applied = ctx.translate(x)
            if translated == y:
                rules = applied
            elif _CERT_ARN.match(x) and _CERT_ARN.match(y):
                rules = {CERTIFICATE_RULE}
            elif _RESERVATION.match(x) and _RESERVATION.match(y):
                rules = {RESERVATION_RULE}
        if rules and replication:
            rules.add(REPLICATION_RULE)
        if not rules and x is _ABSENT and path == f"tags.{_ADOPTED_TAG}" and _adopted(b):
            rules = {ADOPTION_RULE}
        if not rules and a["type"] == _QUOTA and _quota_of_dropped_pools(a, path, x, y, ctx):
            rules = {CAPACITY_BLOCK_RULE}
        if not rules and _logs_admit_adopted(a, path, x, y, left, right, ctx):
            rules = {ADOPTION_RULE}
        found.append(
            Difference(
                a["type"],
                a["name"],
                f"inputs.{path}",
                None if x is _ABSENT else x,
                None if y is _ABSENT else y,
                tuple(sorted(rules)),
            )
        )
    return found


def _quota_of_dropped_pools(
    quota: Mapping[str, Any], path: str, x: Any, y: Any, ctx: _Context
) -> bool:
    """A tenant's namespace quota lowered by exactly what its queue held in left-out pools."""
    prefix = "spec.hard.requests."
    if not path.startswith(prefix) or not (isinstance(x, str) and isinstance(y, str)):
        return False
    if not (x.isdigit() and y.isdigit()):
        return False
    resource = path.removeprefix(prefix)
    tenant = str(quota.get("inputs", {}).get("metadata", {}).get("namespace"))
    queue = ctx.source_queues.get(tenant)
    if queue is None:
        return False
    held = 0
    for group in queue.get("spec", {}).get("resourceGroups", []):
        for flavor in group.get("flavors", []):
            if flavor.get("name") not in {f"pool-{p}" for p in ctx.dropped_pools}:
                continue
            for item in flavor.get("resources", []):
                if item.get("name") == resource and str(item.get("nominalQuota", "")).isdigit():
                    held += int(item["nominalQuota"])
    return held > 0 and int(x) - int(y) == held


def _logs_admit_adopted(
    a: Mapping[str, Any],
    path: str,
    x: Any,
    y: Any,
    left: Mapping[str, Any],
    right: Mapping[str, Any],
    ctx: _Context,
) -> bool:
    """The logs bucket's policy admitting, beside its own prefix, the adopted buckets."""
    if a["type"] != "aws:s3/bucketPolicy:BucketPolicy" or "aws:SourceArn" not in path:
        return False
    adopted = {f"arn:aws:s3:::{name}" for name in ctx.adopted_buckets}
    if isinstance(x, str) and y is _ABSENT:
        # The prefix pattern became the first of a list of patterns.
        return ctx.translate(x)[0] == right.get(f"{path}[0]")
    if x is _ABSENT and isinstance(y, str):
        base = re.sub(r"\[\d+\]$", "", path)
        original = left.get(base)
        return y in adopted or (isinstance(original, str) and ctx.translate(original)[0] == y)
    return False


# ---------------------------------------------------------------------------
# RTO: the longest chain of the recovery plan
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PathStep:
    """One resource on the critical path: when it can start and how long it takes."""

    name: str
    type: str
    minutes: float
    start: float
    finish: float
    source: str


@dataclass
class RtoEstimate:
    """The recovery plan's critical path under typical creation times, and its range."""

    minutes: float
    low: float
    high: float
    path: list[PathStep]
    unknown_types: list[str]
    resources: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "minutes": round(self.minutes, 1),
            "low": round(self.low, 1),
            "high": round(self.high, 1),
            "critical_path": [
                {
                    **asdict(s),
                    "minutes": round(s.minutes, 2),
                    "start": round(s.start, 2),
                    "finish": round(s.finish, 2),
                }
                for s in self.path
            ],
            "unknown_types": self.unknown_types,
            "resources": self.resources,
        }


def _creation_time(resource: Mapping[str, Any], recovery: Recovery) -> CreationTime | None:
    """None for what takes no time of its own: providers and ComponentResources."""
    type_ = resource["type"]
    if type_ in recovery.creation_minutes:
        return recovery.creation_minutes[type_]
    if type_.startswith("pulumi:providers:"):
        return None
    if not resource.get("custom") and not type_.startswith(("aws:", "kubernetes:")):
        return None  # our ComponentResources: containment only
    return recovery.default_creation_minutes


def waits_for(plan: Mapping[str, Any]) -> dict[str, set[str]]:
    """urn -> the urns it cannot start before: its dependencies, its provider, and for a
    dependency on a ComponentResource, every descendant of that component."""
    resources = plan["resources"]
    children: dict[str, list[str]] = {}
    for r in resources:
        if r.get("parent"):
            children.setdefault(r["parent"], []).append(r["urn"])

    def descendants(urn: str) -> set[str]:
        found: set[str] = set()
        stack = list(children.get(urn, []))
        while stack:
            child = stack.pop()
            if child not in found:
                found.add(child)
                stack.extend(children.get(child, []))
        return found

    known = {r["urn"] for r in resources}
    edges: dict[str, set[str]] = {}
    for r in resources:
        deps = set(r.get("dependencies", []))
        if r.get("provider"):
            deps.add(r["provider"])
        expanded = set()
        for dep in deps:
            expanded.add(dep)
            expanded |= descendants(dep)
        edges[r["urn"]] = {d for d in expanded if d in known and d != r["urn"]}
    return edges


def critical_path(plan: Any, recovery: Recovery | None = None) -> RtoEstimate:
    """The longest chain of `plan`'s dependency graph, weighted by creation minutes.

    A resource starts when everything it waits for is done (`waits_for`) and
    takes its type's typical minutes; the RTO is the latest finish. The range
    repeats the walk with every resource at its type's low and high figures.
    """
    recovery = recovery or _recovery_catalog()
    plan = _as_dict(plan)
    edges = waits_for(plan)
    by_urn = {r["urn"]: r for r in plan["resources"]}
    unknown = sorted(
        {
            r["type"]
            for r in plan["resources"]
            if _creation_time(r, recovery) is recovery.default_creation_minutes
        }
    )
    order = _topological(edges)

    def walk(weight: str) -> tuple[dict[str, float], dict[str, str | None]]:
        finish: dict[str, float] = {}
        via: dict[str, str | None] = {}
        for urn in order:
            start, before = 0.0, None
            for dep in sorted(edges[urn]):  # ties broken the same way every run
                if finish[dep] > start:
                    start, before = finish[dep], dep
            time = _creation_time(by_urn[urn], recovery)
            finish[urn] = start + (getattr(time, weight) if time else 0.0)
            via[urn] = before
        return finish, via

    finish, via = walk("minutes")
    low = max(walk("low")[0].values(), default=0.0)
    high = max(walk("high")[0].values(), default=0.0)
    end = max(finish, key=lambda u: finish[u], default=None)
    path: list[PathStep] = []
    cursor = end
    while cursor is not None:
        r = by_urn[cursor]
        time = _creation_time(r, recovery)
        minutes = time.minutes if time else 0.0
        if time is not None:  # components and providers only connect the chain
            path.append(
                PathStep(
                    r["name"],
                    r["type"],
                    minutes,
                    finish[cursor] - minutes,
                    finish[cursor],
                    time.source,
                )
            )
        cursor = via[cursor]
    path.reverse()
    return RtoEstimate(
        minutes=finish[end] if end else 0.0,
        low=low,
        high=high,
        path=path,
        unknown_types=unknown,
        resources=len(plan["resources"]),
    )


def _topological(edges: Mapping[str, set[str]]) -> list[str]:
    """Dependencies first; a cycle (which Pulumi would refuse too) is an error."""
    order: list[str] = []
    state: dict[str, int] = {}
    for root in edges:
        if root in state:
            continue
        stack: list[tuple[str, Iterable[str]]] = [(root, iter(sorted(edges[root])))]
        state[root] = 1
        while stack:
            urn, pending = stack[-1]
            nxt = next(iter(pending), None)
            if nxt is None:
                stack.pop()
                state[urn] = 2
                order.append(urn)
            elif state.get(nxt) == 1:
                raise DrError(f"the plan's dependency graph has a cycle through {nxt}")
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(edges[nxt]))))
    return order


def _recovery_catalog() -> Recovery:
    recovery = catalog().recovery
    if recovery is None:
        raise DrError("the catalog has no `recovery` section (infra/catalog.yaml)")
    return recovery


# ---------------------------------------------------------------------------
# RPO: how much training progress a disaster can take
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RpoPart:
    what: str
    minutes: float
    kind: str
    """`configured` (the stack's own value), `SLA` (a service's bound) or `assumption`."""
    source: str


@dataclass
class RpoEstimate:
    """Worst-case training progress lost: the parts add up."""

    parts: list[RpoPart]
    replicated: bool
    """Whether the checkpoints bucket is replicated at all (else every checkpoint is lost)."""

    @property
    def minutes(self) -> float:
        return sum(p.minutes for p in self.parts)

    @property
    def bound(self) -> bool:
        """True when no part is an assumption."""
        return self.replicated and all(p.kind != "assumption" for p in self.parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "minutes": round(self.minutes, 1) if self.replicated else None,
            "replicated": self.replicated,
            "bound": self.bound,
            "parts": [asdict(p) for p in self.parts],
        }


def estimate_rpo(source: PlatformConfig, interval_seconds: int | None = None) -> RpoEstimate:
    """A checkpoint taken just after the last one that reached the replica is what is lost:
    at most one checkpoint interval, plus the time to export it from the file system to S3,
    plus the time S3 takes to replicate it to the recovery region."""
    recovery = _recovery_catalog()
    storage = source.storage
    if interval_seconds is None:
        interval = RpoPart(
            "checkpoint interval",
            source.monitoring.alerts.checkpoint_interval_seconds / 60,
            "configured",
            "monitoring.alerts.checkpoint_interval_seconds of the source stack. The job's own "
            "interval is in steps (checkpoint.interval_steps), so its seconds depend on the "
            "step time; the stale-checkpoint alert fires at twice this age, so a stalled "
            "checkpointer can lose up to twice as much before anyone is paged",
        )
    else:
        interval = RpoPart(
            "checkpoint interval", interval_seconds / 60, "configured", "--checkpoint-interval"
        )
    parts = [interval]
    lustre = storage.lustre if storage else None
    bucket = lustre.checkpoints_bucket if lustre else "checkpoints"
    spec = storage.buckets.get(bucket) if storage else None
    replicated = spec is not None and spec.replicate
    if lustre is not None:
        export = recovery.fsx_auto_export
        parts.append(RpoPart("FSx auto-export to S3", export.minutes, _kind(export), export.source))
    if storage is not None and replicated:
        rtc = storage.replication.time_control
        lag = recovery.s3_replication_rtc if rtc else recovery.s3_replication_without_rtc
        what = "S3 replication (RTC)" if rtc else "S3 replication (no RTC)"
        parts.append(RpoPart(what, lag.minutes, _kind(lag), lag.source))
    return RpoEstimate(parts, replicated=replicated)


def _kind(lag: Any) -> str:
    return "SLA" if lag.bound else "assumption"


# ---------------------------------------------------------------------------
# The whole plan: config, figures, runbook
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class QuotaNeed:
    """vCPUs a recovery stack may run under one EC2 quota at its pools' max sizes."""

    code: str
    name: str
    vcpus: int
    pools: list[str]


@dataclass
class DrPlan:
    """Everything `llmp dr plan` decided and computed."""

    options: RecoveryOptions
    config: RecoveryConfig
    recovery_cfg: PlatformConfig
    source_cfg: PlatformConfig
    rto: RtoEstimate
    rpo: RpoEstimate
    differences: PlanDifferences
    quotas: list[QuotaNeed]
    unquoted_pools: list[str]
    created: str

    def to_dict(self) -> dict[str, Any]:
        rc = self.config
        return {
            "source": {"stack": self.options.source_stack, "region": rc.source_region},
            "recovery": {"stack": rc.stack, "region": rc.region},
            "adopted": rc.adopted,
            "replica_key": {"arn": rc.key_arn, "from": rc.key_from},
            "zones": rc.zone_map,
            "dropped_pools": rc.dropped_pools,
            "secrets_not_copied": rc.secrets,
            "rewrites": [asdict(r) for r in rc.rewrites],
            "notes": [asdict(n) for n in rc.notes],
            "rto": self.rto.to_dict(),
            "rpo": self.rpo.to_dict(),
            "quotas": [asdict(q) for q in self.quotas],
            "equivalence": self.differences.to_dict(),
        }


def make_plan(source_raw: Mapping[str, Any], options: RecoveryOptions) -> DrPlan:
    """Build the recovery config, synthesize both stacks offline, and compute the figures.

    Raises ConfigError (the source or the result is invalid), DrError (bad options),
    SynthError (the program failed).
    """
    from llmp.synth import synthesize

    rc = build_recovery_config(source_raw, options)
    source_cfg = load_config(source_raw)
    recovery_cfg = load_config(rc.synth_raw)
    source_plan = synthesize(options.source_stack, source_raw)
    recovery_plan = synthesize(rc.stack, rc.synth_raw)
    quotas, unquoted = _quota_needs(recovery_cfg)
    return DrPlan(
        options=options,
        config=rc,
        recovery_cfg=recovery_cfg,
        source_cfg=source_cfg,
        rto=critical_path(recovery_plan),
        rpo=estimate_rpo(source_cfg, options.checkpoint_interval_seconds),
        differences=plan_differences(source_plan, recovery_plan),
        quotas=quotas,
        unquoted_pools=unquoted,
        created=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )


def _quota_needs(cfg: PlatformConfig) -> tuple[list[QuotaNeed], list[str]]:
    recovery = _recovery_catalog()
    needs: dict[str, QuotaNeed] = {}
    unquoted: list[str] = []
    pools: list[tuple[str, str, str, int]] = [
        ("system pool", cfg.system_pool.instance_type, "ON_DEMAND", cfg.system_pool.max_size)
    ]
    pools += [(n, p.instance_type, p.capacity_type, p.max_size) for n, p in cfg.node_pools.items()]
    for name, instance_type, capacity, max_size in pools:
        if capacity == "CAPACITY_BLOCK":
            unquoted.append(name)
            continue
        _, quota = recovery.quota_for(instance_type)
        code, label = (
            (quota.spot, quota.spot_name)
            if capacity == "SPOT"
            else (quota.on_demand, quota.on_demand_name)
        )
        vcpus = catalog().instance(instance_type).vcpus * max_size
        need = needs.setdefault(code, QuotaNeed(code, label, 0, []))
        needs[code] = QuotaNeed(code, label, need.vcpus + vcpus, [*need.pools, name])
    return list(needs.values()), unquoted


def stack_file_text(plan: DrPlan) -> str:
    """The recovery stack file: a header saying where it came from and what is left to do."""
    rc = plan.config
    lines = [
        f"# Recovery stack of `{plan.options.source_stack}` ({rc.source_region}) in {rc.region},",
        f"# written by `llmp dr plan` on {plan.created}. Runbook: {runbook_name(rc.stack)}.",
        "# Region-bound settings were rewritten; the replicated buckets are adopted",
        "# (storage.adoption): imported, protected and retained, never re-created empty.",
    ]
    actions = [n for n in rc.notes if n.level == "action"]
    if actions:
        lines.append("# Before `pulumi up`:")
        lines += [f"#  - {_wrap_comment(n.text)}" for n in actions]
    body = yaml.safe_dump({"config": rc.raw}, sort_keys=False, allow_unicode=True, width=96)
    return "\n".join(lines) + "\n" + body


def _wrap_comment(text: str, width: int = 92) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return "\n#    ".join(lines)


def runbook_name(stack: str) -> str:
    return f"{stack}.runbook.md"


def plan_file_paths(stack: str, out_dir: Path) -> tuple[Path, Path]:
    """Where the recovery stack's file and its runbook go."""
    return out_dir / f"Pulumi.{stack}.yaml", out_dir / runbook_name(stack)


def check_out_dir(out_dir: Path) -> None:
    """DrError (one line) when the stack file and runbook could not be written to
    `out_dir`: checked before the two stacks are synthesized, not after."""
    existing = out_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise DrError(f"--out {out_dir}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise DrError(f"--out {out_dir}: {existing} is not writable; name another directory")


def refuse_overwrite(stack: str, out_dir: Path) -> None:
    """FileExistsError naming the first of the two files that already exists."""
    for path in plan_file_paths(stack, out_dir):
        if path.exists():
            raise FileExistsError(path)


def write_plan_files(plan: DrPlan, out_dir: Path, *, force: bool) -> tuple[Path, Path]:
    """Write the stack file and the runbook; an existing file is kept unless `force`."""
    stack_path, runbook_path = plan_file_paths(plan.config.stack, out_dir)
    if not force:
        refuse_overwrite(plan.config.stack, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    from llmp.synth import STACKS_DIR

    stack_path.write_text(stack_file_text(plan))
    in_stacks = out_dir.resolve() == STACKS_DIR.resolve()
    runbook_path.write_text(
        render_runbook(
            plan, stack_path.name, in_stacks_dir=in_stacks, copy_from=from_repo_root(stack_path)
        )
    )
    return stack_path, runbook_path


def from_repo_root(path: Path) -> str:
    """`path` as the runbook's commands name it: they run in the repository root (where
    Pulumi.yaml is), so relative to it when inside it, else absolute."""
    from llmp.synth import REPO_ROOT

    resolved = path.resolve()
    root = REPO_ROOT.resolve()
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(resolved)


def _fmt(minutes: float) -> str:
    return f"{minutes:.1f}" if minutes < 10 else f"{minutes:.0f}"


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_runbook(
    plan: DrPlan,
    stack_file_name: str,
    *,
    in_stacks_dir: bool = True,
    copy_from: str | None = None,
) -> str:
    """The operator's runbook for this recovery, in Markdown (`in_stacks_dir`: the stack
    file was written to stacks/, where Pulumi reads it; else it must be copied there from
    `copy_from`, its path from the repository root, default `stack_file_name`)."""
    rc, src, dst = plan.config, plan.source_cfg, plan.recovery_cfg
    source, stack, region = plan.options.source_stack, rc.stack, rc.region
    storage = dst.storage
    lustre = storage.lustre if storage else None
    checkpoints = rc.adopted.get(lustre.checkpoints_bucket) if lustre else None
    out: list[str] = [
        f"# Disaster recovery of `{source}` in {region}",
        "",
        f"Written by `llmp dr plan --from {source} --region {region}` on {plan.created}. "
        f"The recovery stack `{stack}` ({stack_file_name}, beside this runbook) is the "
        f"`{source}` platform in {region}; {rc.source_region} is assumed unusable.",
        "",
        f"- **RTO** about {_fmt(plan.rto.minutes)} min of `pulumi up` "
        f"(range {_fmt(plan.rto.low)}-{_fmt(plan.rto.high)}), once the prerequisites hold.",
        _rpo_line(plan.rpo),
    ]
    if rc.adopted:
        out.append(
            "- **Adopted** (imported, protected, retained): "
            + ", ".join(f"`{k}` = `{v}`" for k, v in rc.adopted.items())
            + f"; key {('`' + rc.key_arn + '`') if rc.key_arn else '**not set yet**'}."
        )
    actions = [n for n in rc.notes if n.level == "action"]
    checks = [n for n in rc.notes if n.level == "check"]
    out += ["", "## Before you start", ""]
    out += [
        f"1. **Declare the disaster.** Never `pulumi up` the `{source}` stack against "
        f"{rc.source_region} while it is failing: a half-applied update of a stack whose "
        "provider cannot answer can leave its state and the cloud disagreeing.",
        "2. **State backend and secrets.** The backend must not live in the failed region: "
        "an S3 backend whose bucket is replicated (see the README's *Disaster recovery*), "
        "or Pulumi Cloud. The secrets provider's key must be usable in "
        f"{region} (a multi-Region KMS key's replica there, or a new one).",
        f"3. **Quotas in {region}** (EC2 quotas count vCPUs; the pools at their max sizes):",
        "",
        "   | quota | code | vCPUs needed | pools |",
        "   |---|---|---:|---|",
    ]
    out += [
        f"   | {_md(q.name)} | `{q.code}` | {q.vcpus:,} | {', '.join(q.pools)} |"
        for q in plan.quotas
    ]
    out += [
        "",
        f"   `aws service-quotas get-service-quota --service-code ec2 --quota-code CODE "
        f"--region {region} --query Quota.Value`",
    ]
    if plan.unquoted_pools:
        out.append(
            f"   Capacity-block pools ({', '.join(plan.unquoted_pools)}): the block is bought "
            "for them; their quota is not computed here."
        )
    gpu_types = sorted({p.instance_type for p in dst.node_pools.values()})
    out += [
        "4. **Capacity and zones.** Zones: "
        + ", ".join(f"{a} -> {b}" for a, b in rc.zone_map.items())
        + f". `aws ec2 describe-instance-type-offerings --region {region} --location-type "
        f"availability-zone --filters Name=instance-type,Values={','.join(gpu_types) or 'TYPE'}` "
        "must list each GPU pool's zone. On-Demand GPU capacity is not guaranteed: if "
        f"`pulumi up` waits on a node group, buy a Capacity Block in {region} and add a pool.",
    ]
    step = 5
    if src.serving is not None:
        out.append(
            f"{step}. **Certificate.** `serving.certificate_arn` is an ACM certificate in "
            f"{region} for `{src.serving.hostname}` (issued and validated before `pulumi up`)."
        )
        step += 1
    if rc.adopted:
        buckets = " ".join(f"`aws s3api head-bucket --bucket {n}`" for n in rc.adopted.values())
        src_prefix = src.storage.bucket_name_prefix if src.storage else ""
        out.append(
            f"{step}. **The replicas exist**: {buckets}; the key: `aws kms describe-key "
            f"--region {region} --key-id alias/{src_prefix}-s3-replica --query "
            "KeyMetadata.Arn` gives `storage.adoption.kms_key_arn`."
        )
        step += 1
    for note in [*actions, *checks]:
        out.append(f"{step}. {'**Action.** ' if note.level == 'action' else ''}{note.text}.")
        step += 1
    out += ["", "## Steps", ""]
    out += [
        "```sh",
        "pulumi login s3://<state-bucket>?region=<a live region>   # or Pulumi Cloud",
    ]
    if not in_stacks_dir:
        source_path = shlex.quote(copy_from or stack_file_name)
        out.append(f"cp {source_path} stacks/   # Pulumi.yaml: stackConfigDir stacks")
    out += [
        f"pulumi stack init {stack} --secrets-provider 'awskms://alias/<key>?region={region}'",
    ]
    out += [f"pulumi config set --secret {key} '...' -s {stack}" for key in rc.secrets]
    out += [
        f"llmp synth {stack}                      # offline: config, plan, policy pack",
        f"llmp policy --write-config {stack}",
        f"pulumi preview --diff -s {stack} --policy-pack policies \\",
        f"  --policy-pack-config out/{stack}/policy-config.json",
        "```",
        "",
        "In the preview, every adopted bucket and the key must show `= import` (updates "
        "after it of tags, the description or settings only the provider keeps, such as the "
        "key's deletion window, are expected), and **nothing** may show `delete` or "
        "`replace`. Pulumi imports a resource whose inputs differ and then updates it "
        "to the program's inputs; an input that forces a replacement, such as a bucket "
        "name, would replace the only copy, which `protect` refuses. Stop and fix the "
        "config if the preview shows one.",
        "",
        "```sh",
        f"pulumi up -s {stack}",
        f"llmp verify storage {stack} --region {region}   # buckets, file system, read-only",
        f"pulumi stack output kubeconfig --show-secrets -s {stack} > kubeconfig",
    ]
    if lustre is not None:
        out.append(
            f"aws fsx describe-data-repository-associations --region {region}   "
            "# wait for AVAILABLE: existing checkpoints are imported on create"
        )
    if checkpoints and lustre is not None:
        out += [
            f"llmp dr restore-point --bucket {checkpoints} --prefix "
            f"{lustre.checkpoints_prefix}<job>/ --region {region}",
        ]
    out.append("```")
    if checkpoints and lustre is not None:
        out += [
            "",
            f"`llmp dr restore-point` names the newest complete checkpoint of a job under "
            f"`s3://{checkpoints}/{lustre.checkpoints_prefix}<job>/` (the trainer's own "
            "rule: `COMPLETE` marker, manifest, every file at its recorded size) and why each "
            "newer one is skipped. The file system shows that prefix at "
            "`/checkpoints`, so pods see it at `/fsx/checkpoints/<job>/`. Resubmit the job "
            "with `checkpoint.dir: /fsx/checkpoints/<job>`: `train.py` resumes from the "
            "newest complete checkpoint by the same rule (files are lazy-loaded from S3 on "
            "first read, so the first load is slower) and converts it once to a universal "
            "checkpoint if the world size changed (fewer GPUs in "
            f"{region}).",
        ]
    out += _rto_section(plan) + _rpo_section(plan) + _not_carried(plan) + _failback(plan)
    out += _changes_section(plan)
    return "\n".join(out) + "\n"


def _rto_section(plan: DrPlan) -> list[str]:
    rto = plan.rto
    out = [
        "",
        "## RTO: the critical path",
        "",
        f"The longest chain of the recovery plan's {rto.resources} resources, each resource "
        "starting when everything it depends on (a component: all of its resources; its "
        "provider) is done, at the catalog's typical creation minutes "
        f"(infra/catalog.yaml `recovery`). Total **{_fmt(rto.minutes)} min**, range "
        f"{_fmt(rto.low)}-{_fmt(rto.high)} with every resource at its low or high figure. Not "
        "included: the prerequisites above, waiting for GPU capacity, the associations' "
        "import of a large bucket's metadata, and the training job's own restart.",
        "",
        "| start | minutes | resource | type | source |",
        "|---:|---:|---|---|---|",
    ]
    out += [
        f"| {s.start:.1f} | {s.minutes:.1f} | `{s.name}` | `{s.type}` | {_md(s.source)} |"
        for s in rto.path
    ]
    if rto.unknown_types:
        out += ["", f"Types without a figure (catalog default): {', '.join(rto.unknown_types)}."]
    return out


def _rpo_line(rpo: RpoEstimate) -> str:
    if not rpo.replicated:
        return "- **RPO** unbounded: the checkpoints bucket is not replicated."
    caveat = "" if rpo.bound else " (an estimate: some parts are assumptions)"
    return f"- **RPO** at most {_fmt(rpo.minutes)} min of training progress{caveat}."


def _rpo_section(plan: DrPlan) -> list[str]:
    rpo = plan.rpo
    out = ["", "## RPO: what a disaster can take", ""]
    if not rpo.replicated:
        out += [
            "**Unbounded**: the checkpoints bucket is not replicated, so a disaster takes "
            "every checkpoint and training restarts from scratch. Set `replicate: true` on it "
            "and `storage.replication` in the source stack to bound it; the parts it would "
            "then add up from, S3 replication aside:",
        ]
    else:
        out.append(
            "A checkpoint is safe once it is written, exported from the file system to S3 and "
            "replicated to the recovery region; the newest one that made it can be this old "
            f"when the region fails: **{_fmt(rpo.minutes)} min**."
        )
    out += [
        "",
        "| part | minutes | kind | source |",
        "|---|---:|---|---|",
    ]
    out += [f"| {p.what} | {_fmt(p.minutes)} | {p.kind} | {_md(p.source)} |" for p in rpo.parts]
    return out


def _not_carried(plan: DrPlan) -> list[str]:
    rc, src = plan.config, plan.source_cfg
    storage = src.storage
    out = ["", "## Not carried over, and why", ""]
    if storage is not None:
        lost = [k for k, b in storage.buckets.items() if not b.replicate and k != "logs"]
        if lost:
            out.append(
                f"- {', '.join(f'`{k}`' for k in lost)}: not replicated, created empty. "
                "Re-create the data from its origin (data-prep jobs for datasets)."
            )
        out.append(
            "- Access logs (`logs` bucket) and S3 lifecycle history: a new logs bucket is "
            "created; old logs stay in the failed region."
        )
        if storage.lustre is not None:
            out.append(
                "- File-system content that was never exported: files written after the last "
                "auto-export, and anything outside the two associations. The file system is "
                "new; its daily backups are regional and stay behind."
            )
    if rc.dropped_pools:
        out.append(
            f"- Capacity-block pools {', '.join(rc.dropped_pools)}: a block is bound to its "
            "region and AZ; buy one in the recovery region and add the pool back."
        )
    out += [
        "- Replication: off in the recovery stack (its target was this region, and the "
        "source region is down). Turn it back on in reverse when the source region returns "
        "(below).",
        "- Secrets (`secure:` config): encrypted for the source stack only; re-set them.",
        "- Cluster state that Pulumi does not own: running and queued jobs, Kueue "
        "workloads, anything applied with kubectl. Resubmit jobs.",
        "- Metrics (Prometheus' EBS volume), Grafana state and CloudWatch logs: regional, "
        "not copied.",
        "- IAM roles are re-created with new ARNs: whatever trusts a tenant's or the "
        "workloads' roles elsewhere must be updated.",
    ]
    if src.serving is not None:
        out.append(
            f"- DNS: `{src.serving.hostname}` still points at the old ALB; switch it once "
            "the recovery stack serves."
        )
    return out


def _failback(plan: DrPlan) -> list[str]:
    rc = plan.config
    source, stack = plan.options.source_stack, rc.stack
    names = ", ".join(f"`{n}`" for n in rc.adopted.values()) or "(none)"
    return [
        "",
        "## Failing back",
        "",
        f"1. When {rc.source_region} is back, do not `pulumi up` `{source}` first: its "
        f"state predates the disaster. `pulumi refresh -s {source}` shows what survived. Its "
        f"replication rules resume and copy objects queued before the outage into {names}; "
        "checkpoint keys are step-named, so nothing newer is overwritten, and delete "
        "markers are not replicated.",
        f"2. Protect the new data first: in `{stack}` set `storage.replication.region: "
        f"{rc.source_region}` and `replicate: true` on the adopted buckets, `pulumi up`: new "
        f"replica buckets in {rc.source_region} receive new objects from then on (existing "
        "ones need S3 Batch Replication). To resume in the source stack's own buckets, copy "
        "what was written since the failover from the adopted buckets into them (`aws s3 "
        "sync`, or Batch Replication with a rule whose destination is the source bucket).",
        f"3. Find the restore point in the source bucket (`llmp dr restore-point --bucket "
        f"<source checkpoints bucket> --region {rc.source_region}`), `pulumi up -s {source}`, "
        "resume training there, and check it with `llmp verify storage "
        f"{source}`.",
        f"4. Retire `{stack}` without touching the adopted buckets: they are protected, so "
        "`pulumi destroy` refuses them. `pulumi state delete URN` each adopted bucket and "
        "the key (Pulumi forgets them; nothing is deleted), then `pulumi destroy -s "
        f"{stack}`. Their settings resources are `retain_on_delete` and stay as they are.",
    ]


def _changes_section(plan: DrPlan) -> list[str]:
    rc, diff = plan.config, plan.differences
    out = [
        "",
        "## What changed from the source stack",
        "",
        "| key | source | recovery | why |",
        "|---|---|---|---|",
    ]
    out += [
        f"| `{_md(r.key)}` | {_md(_show(r.before))} | {_md(_show(r.after))} | {_md(r.why)} |"
        for r in rc.rewrites
    ]
    counts = ", ".join(f"{rule} {n}" for rule, n in diff.by_rule().items())
    out += [
        "",
        f"Plan equivalence: {diff.in_both} resources in both plans, "
        f"{len(diff.only_in_source)} only in the source, {len(diff.only_in_recovery)} only "
        f"in the recovery plan. Differences by named reason: {counts or 'none'}. "
        + (
            "None is unexplained."
            if diff.equivalent
            else f"**{len(diff.unexplained)} are unexplained**: see `llmp dr plan --json`."
        ),
    ]
    return out


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


# ---------------------------------------------------------------------------
# Terminal report
# ---------------------------------------------------------------------------


def report_renderables(plan: DrPlan, written: Iterable[Path]) -> list[Any]:
    """What `llmp dr plan` prints: decisions, notes, RTO path, RPO parts, equivalence.

    Readable at 80 columns: a rewritten setting is a block (its key, then source,
    recovery and why under it), a critical-path step shows its type under its name, an
    RPO part its source under it; nothing is cut.
    """
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    rc, diff = plan.config, plan.differences
    parts: list[Any] = [
        Text(
            f"recovery stack {rc.stack} of {plan.options.source_stack}: "
            f"{rc.source_region} -> {rc.region}"
        )
    ]
    for path in written:
        parts.append(Text(f"  wrote {path}"))
    if rc.adopted:
        key = f"{rc.key_arn} ({rc.key_from})" if rc.key_arn else "not set yet (see ACTION)"
        adopted = _labelled_grid()
        for k, v in rc.adopted.items():
            adopted.add_row(f"{k} <-", v)
        adopted.add_row("key", key)
        parts += [Text("adopted (imported, protected, retained):"), Padding(adopted, (0, 0, 0, 2))]

    changes = Table(title="region-bound settings rewritten", title_justify="left", show_lines=True)
    changes.add_column("setting: source -> recovery, and why", overflow="fold", ratio=1)
    for r in rc.rewrites:
        values = _labelled_grid()
        values.add_row("source", Text(_show(r.before)))
        values.add_row("recovery", Text(_show(r.after)))
        values.add_row("why", Text(r.why, style="italic"))
        changes.add_row(Group(Text(r.key, style="bold"), Padding(values, (0, 0, 0, 2))))
    parts.append(changes)

    notes = _labelled_grid()
    for note in rc.notes:
        style = {"action": "bold red", "check": "yellow"}.get(note.level, "")
        notes.add_row(Text(f"{note.level.upper()}:", style=style), Text(note.text))
    if rc.notes:
        parts.append(notes)

    rto = Table(
        title=f"RTO ~ {_fmt(plan.rto.minutes)} min (range {_fmt(plan.rto.low)}-"
        f"{_fmt(plan.rto.high)}): critical path of {plan.rto.resources} resources",
        title_justify="left",
        caption_justify="left",
        caption="start, min: minutes from the start of `pulumi up`, and to create it",
    )
    for column in ("start", "min"):
        rto.add_column(column, justify="right", overflow="fold")
    rto.add_column("resource, its type", overflow="fold", ratio=1)
    for s in plan.rto.path:
        rto.add_row(
            f"{s.start:.1f}",
            f"{s.minutes:.1f}",
            Group(Text(s.name), Padding(Text(s.type, style="dim"), (0, 0, 0, 2))),
        )
    parts.append(rto)
    if plan.rto.unknown_types:
        parts.append(Text(f"types without a figure: {', '.join(plan.rto.unknown_types)}"))
    rpo = Table(
        title=f"RPO <= {_fmt(plan.rpo.minutes)} min of training progress"
        if plan.rpo.replicated
        else "RPO unbounded: the checkpoints bucket is not replicated (every checkpoint is lost)",
        title_justify="left",
    )
    rpo.add_column("min", justify="right", overflow="fold")
    rpo.add_column("part (kind), its source", overflow="fold", ratio=1)
    for p in plan.rpo.parts:
        rpo.add_row(
            _fmt(p.minutes),
            Group(
                Text(f"{p.what} ({p.kind})", style="bold"),
                Padding(Text(p.source), (0, 0, 0, 2)),
            ),
        )
    parts.append(rpo)
    counts = ", ".join(f"{rule} {n}" for rule, n in diff.by_rule().items())
    summary = (
        f"plan equivalence: {diff.in_both} resources in both, {len(diff.only_in_source)} only "
        f"in {plan.options.source_stack}, {len(diff.only_in_recovery)} only in {rc.stack}; "
        f"differences by named reason: {counts or 'none'}; unexplained: {len(diff.unexplained)}"
    )
    parts.append(Text(summary, style="" if diff.equivalent else "bold red"))
    for d in diff.unexplained[:20]:
        parts.append(
            Text(
                f"  unexplained: {d.type} {d.name} {d.path}: {_show(d.source)} -> "
                f"{_show(d.recovery)}",
                style="red",
            )
        )
    return parts


def _labelled_grid() -> Any:
    """Two borderless columns, a label and its value; the value wraps under itself."""
    from rich.table import Table

    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold", ratio=1)
    return grid
