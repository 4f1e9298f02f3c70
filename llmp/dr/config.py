"""The recovery stack's config: the source's `PlatformConfig`, copied section by section
(`model_copy(update=...)`) with what is bound to a region rewritten, each change a `Rewrite`
with its reason. The result is validated and written from its dump: the stack file holds
what the source file set and the rewrites, not every default."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from llmp.errors import BadInput
from llmp.plan import StackOutputs
from spec.keys import NAMESPACE, REGION_KEY
from spec.platform import PlatformConfig
from spec.sharing import SharedStackConfig
from spec.stackfile import load_config
from spec.storage import AdoptionConfig, StorageConfig

REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
RESERVATION = re.compile(r"^cr-[0-9a-f]{8,17}$")
ARN = r"^arn:aws[a-z-]*:{service}:(?P<region>[a-z0-9-]+):\d{{12}}:"
CERT_ARN = re.compile(ARN.format(service="acm") + r"certificate/[0-9a-f-]{36}$")
KMS_ARN = re.compile(ARN.format(service="kms") + r"key/[0-9a-zA-Z-]+$")
KEY_STAND_IN = "arn:aws:kms:{region}:000000000000:key/00000000-0000-0000-0000-000000000000"
"""Used only to synthesize the recovery plan offline while the replica key's ARN is
unknown; never written to the stack file, which then fails validation until it is set."""

M = TypeVar("M", bound=BaseModel)


class DrError(BadInput):
    """Bad input for a recovery plan: one line, what and what would be right."""


@dataclass(frozen=True)
class RecoveryOptions:
    """What the operator decides (or the defaults decide) about the recovery stack."""

    source_stack: str
    region: str
    stack: str | None = None  # default <source>-dr
    zones: list[str] | None = None  # as many as the source has; default <region>a, b, ...
    outputs: StackOutputs | None = None  # the source's, when they can still be read
    replica_key_arn: str | None = None
    reservations: Mapping[str, str] = field(default_factory=dict)  # pool -> cr-... bought
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
    """Something the operator must check (`check`) or do (`action`)."""

    level: str
    text: str


@dataclass
class RecoveryConfig:
    """The recovery stack's config and everything decided on the way."""

    source: PlatformConfig
    cfg: PlatformConfig  # once built: validated, with the stand-in key if the real one is unknown
    stack: str
    zone_map: dict[str, str] = field(default_factory=dict)
    adopted: dict[str, str] = field(default_factory=dict)
    key_arn: str | None = None
    key_from: str = "none"
    dropped_pools: list[str] = field(default_factory=list)
    rewrites: list[Rewrite] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)  # secure keys, not copied
    raw: dict[str, Any] = field(default_factory=dict)  # the stack file's (no stand-in key)
    synth_raw: dict[str, Any] = field(default_factory=dict)  # what is synthesized offline

    @property
    def source_region(self) -> str:
        return self.source.region

    @property
    def region(self) -> str:
        return self.cfg.region

    def rewrite(self, key: str, before: Any, after: Any, why: str) -> None:
        self.rewrites.append(Rewrite(f"{NAMESPACE}:{key}", before, after, why))

    def note(self, level: str, text: str) -> None:
        self.notes.append(Note(level, text))

    def update(self, **sections: Any) -> None:
        """Replace sections of the recovery config; an unchanged one stays as the file has it."""
        changed = {k: v for k, v in sections.items() if v != getattr(self.cfg, k)}
        self.cfg = self.cfg.model_copy(update=changed)


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


def _unset(model: M, *names: str) -> M:
    """`model` with `names` back at their defaults and out of what the stack file sets."""
    return model.model_construct(
        **{k: getattr(model, k) for k in model.model_fields_set - set(names)}
    )


def _is_secure(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def build_recovery_config(
    source_raw: Mapping[str, Any], options: RecoveryOptions
) -> RecoveryConfig:
    """The recovery stack's config from the source stack's `config:` map (not changed).

    Raises ConfigError for an invalid source, DrError for options that cannot work.
    """
    from llmp.stacks import stack_name_problem

    source, region, stack = load_config(source_raw), options.region, options.stack_name
    if stack_name_problem(stack) is not None:
        raise DrError(f"--stack {stack!r}: stack names take letters, digits, '-', '_', '.'")
    if not REGION.match(region):
        raise DrError(f"--region {region!r} is not an AWS region name, e.g. us-west-2")
    if region == source.region:
        raise DrError(
            f"--region {region} is the source stack's own region; recover into another one"
        )
    secrets = sorted(k for k, v in source_raw.items() if _is_secure(v))
    rc = RecoveryConfig(
        source, source.model_copy(update={"region": region}), stack, secrets=secrets
    )
    rc.rewrites.append(Rewrite(REGION_KEY, source.region, region, "the recovery region"))
    if source.shared_stack is not None:
        raise DrError(team_stack_steps(options.source_stack, source.shared_stack, region))
    _zones(rc, options)
    _adopted(rc)
    _cluster_name(rc, options)
    _pools(rc, options)
    dropped = tuple(f"{NAMESPACE}:node_pools.{p}." for p in rc.dropped_pools)
    rc.rewrites = [r for r in rc.rewrites if not r.key.startswith(dropped)]
    _storage(rc, options)
    _serving(rc, options)
    for key in secrets:
        rc.note(
            "action",
            f"secret {key} is encrypted for {options.source_stack}'s secrets provider and "
            f"was not copied: `pulumi config set --secret {key} ... -s {stack}`",
        )
    rc.raw = _stack_map(source_raw, rc.cfg)
    storage = rc.cfg.storage
    if storage is not None and storage.adoption is not None and rc.key_arn is None:
        stand_in = {"kms_key_arn": KEY_STAND_IN.format(region=region)}
        adoption = storage.adoption.model_copy(update=stand_in)
        rc.update(storage=storage.model_copy(update={"adoption": adoption}))
    rc.synth_raw = _stack_map(source_raw, rc.cfg)
    rc.cfg = load_config(rc.synth_raw)  # the recovery config validates, or the caller learns why
    return rc


def _stack_map(source_raw: Mapping[str, Any], cfg: PlatformConfig) -> dict[str, Any]:
    """The `config:` map of `cfg`: the sections it sets, in the source's order, and the
    source's keys of other namespaces (secrets left out)."""
    sections = _whole_numbers(cfg.model_dump(mode="json", exclude_unset=True, exclude={"region"}))
    out: dict[str, Any] = {}
    for key, value in source_raw.items():
        section = key.removeprefix(f"{NAMESPACE}:")
        if key == REGION_KEY:
            out[key] = cfg.region
        elif section != key and section in sections:
            out[key] = sections.pop(section)
        elif section == key and not _is_secure(value):
            out[key] = copy.deepcopy(value)
    return out | {f"{NAMESPACE}:{k}": v for k, v in sections.items()}


def _whole_numbers(value: Any) -> Any:
    """Whole floats as the source file wrote them (`initial_gb: 500`, not 500.0)."""
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _zones(rc: RecoveryConfig, options: RecoveryOptions) -> None:
    source, region = rc.source, rc.region
    old = list(source.network.availability_zones)
    if options.zones is not None:
        new = list(options.zones)
        if len(new) != len(old):
            raise DrError(
                f"--zones names {len(new)} zone{'s' if len(new) != 1 else ''}; "
                f"{options.source_stack} uses {len(old)} ({', '.join(old)}): name as many, "
                "in the same order"
            )
        for zone in new:
            if not re.fullmatch(re.escape(region) + r"[a-z]", zone):
                raise DrError(f"--zones: {zone!r} is not an AZ of {region}, e.g. {region}a")
        if len(set(new)) != len(new):
            raise DrError("--zones lists a zone twice; list each once")
    else:
        if len(old) > 26:
            raise DrError("the source lists more than 26 zones; pass --zones")
        new = [f"{region}{chr(ord('a') + i)}" for i in range(len(old))]
        gpu_types = sorted({p.instance_type for p in source.node_pools.values()})
        rc.note(
            "check",
            f"zones {', '.join(new)} were derived from the region name, not looked up: AZ "
            f"names map to different zones in each account and not every zone offers "
            f"{', '.join(gpu_types) or 'the instance types'}. Check with `aws ec2 "
            f"describe-availability-zones --region {region}` and `aws ec2 "
            f"describe-instance-type-offerings --region {region} --location-type "
            f"availability-zone`, then rerun with --zones",
        )
    rc.zone_map = dict(zip(old, new, strict=True))
    rc.update(network=source.network.model_copy(update={"availability_zones": new}))
    why = "AZs are regional; the recovery stack keeps their number and order"
    rc.rewrite("network.availability_zones", old, new, why)
    pools = dict(rc.cfg.node_pools)
    for name, pool in pools.items():
        if pool.availability_zones:
            zones = [rc.zone_map[z] for z in pool.availability_zones]
            pools[name] = pool.model_copy(update={"availability_zones": zones})
            why = "same position in the zone list"
            rc.rewrite(f"node_pools.{name}.availability_zones", pool.availability_zones, zones, why)
    rc.update(node_pools=pools)
    cpu_pools = dict(rc.cfg.cpu_pools)
    for name, cpu_pool in cpu_pools.items():
        if cpu_pool.availability_zones:
            zones = [rc.zone_map[z] for z in cpu_pool.availability_zones]
            cpu_pools[name] = cpu_pool.model_copy(update={"availability_zones": zones})
            why = "same position in the zone list"
            key = f"cpu_pools.{name}.availability_zones"
            rc.rewrite(key, cpu_pool.availability_zones, zones, why)
    rc.update(cpu_pools=cpu_pools)


def _adopted(rc: RecoveryConfig) -> None:
    """What the stack adopts must exist in the recovery region before `pulumi up`: said
    first among the actions; the subnets keep their place in the zone list."""
    network, region = rc.cfg.network, rc.region
    existing = network.existing
    if existing is not None:
        moved = existing.model_copy(
            update={
                "private_subnets": {rc.zone_map[z]: s for z, s in existing.private_subnets.items()},
                "public_subnets": {rc.zone_map[z]: s for z, s in existing.public_subnets.items()},
            }
        )
        rc.update(network=network.model_copy(update={"existing": moved}))
        rc.rewrite(
            "network.existing.private_subnets",
            sorted(existing.private_subnets),
            sorted(moved.private_subnets),
            "same position in the zone list; the ids are the source's until replaced",
        )
        endpoint = (
            "its S3 gateway endpoint"
            if existing.s3_gateway_endpoint_id
            else "the private route tables for the stack's S3 endpoint"
        )
        rc.note(
            "action",
            f"adopted first: the VPC (network.existing) must exist in {region} before "
            f"`pulumi up`, with a private subnet in each of {', '.join(moved.private_subnets)} "
            f"inside {network.vpc_cidr}, NAT or Transit Gateway routes, and {endpoint}; "
            "replace vpc_id, the subnet ids and route tables with those of that VPC",
        )
    cluster = rc.cfg.cluster.existing
    if cluster is not None:
        rc.note(
            "action",
            f"adopted first: EKS cluster {cluster.name} (cluster.existing) must be running "
            f"Kubernetes {rc.cfg.cluster.version} in {region} before `pulumi up`; replace its "
            "security_group_id (and node_role_arn, endpoint and CA where set) with the "
            "recovery cluster's",
        )


def _cluster_name(rc: RecoveryConfig, options: RecoveryOptions) -> None:
    cluster = rc.source.cluster
    if cluster.name is None:
        name = f"llm-platform-{options.source_stack}"
        rc.update(cluster=cluster.model_copy(update={"name": name}))
        why = "keeps the source's cluster name (names are regional), not <project>-<stack>"
        rc.rewrite("cluster.name", None, name, why)


def _pools(rc: RecoveryConfig, options: RecoveryOptions) -> None:
    source, region, reservations = rc.source, rc.region, options.reservations
    on_reservation = [n for n, p in source.node_pools.items() if p.capacity_reservation_id]
    for name, reservation in reservations.items():
        if name not in on_reservation:
            raise DrError(
                f"--reservation {name}=...: {options.source_stack} has no pool {name} on a "
                f"reservation (pools on one: {', '.join(on_reservation) or 'none'})"
            )
        if not RESERVATION.match(reservation):
            raise DrError(
                f"--reservation {name}={reservation}: not a reservation id, "
                "e.g. cr-0123456789abcdef0"
            )
    pools = dict(rc.cfg.node_pools)
    for name in on_reservation:
        pool = source.node_pools[name]
        old, key = pool.capacity_reservation_id, f"node_pools.{name}.capacity_reservation_id"
        if name in reservations:
            pools[name] = pools[name].model_copy(
                update={"capacity_reservation_id": reservations[name]}
            )
            rc.rewrite(key, old, reservations[name], "bought in the recovery region")
            zone = source.pool_zones(pool)[0]
            rc.note(
                "check",
                f"pool {name}: reservation {reservations[name]} must be for "
                f"{pool.instance_type} in {zone}'s counterpart {rc.zone_map[zone]}",
            )
        elif pool.capacity_type == "CAPACITY_BLOCK":
            del pools[name]
            rc.dropped_pools.append(name)
            why = "a capacity block is bound to its region and AZ and cannot move"
            rc.rewrite(
                f"node_pools.{name}", f"{pool.instance_type} capacity block {old}", None, why
            )
            rc.note(
                "action",
                f"pool {name} (capacity block) is not in the recovery stack: buy a block of "
                f"{pool.instance_type} in {region}, then add the pool back with its id "
                f"(or rerun with --reservation {name}=cr-...). It was not turned into an "
                f"On-Demand pool: {pool.max_size} more {pool.instance_type} On-Demand is "
                "spend nobody budgeted, and blocks are bought where On-Demand capacity is short",
            )
        else:  # an On-Demand Capacity Reservation is zonal: the pool runs on plain On-Demand
            plain = _unset(pools[name], "capacity_reservation_id")
            pools[name] = plain.model_copy(update={"placement_group": pool.uses_placement_group})
            why = (
                "On-Demand reservations are zonal; the pool runs on plain On-Demand "
                "(placement group kept as it was)"
            )
            rc.rewrite(key, old, None, why)
    rc.update(node_pools=pools)
    if rc.dropped_pools:
        _without_dropped_pools(rc)


def _without_dropped_pools(rc: RecoveryConfig) -> None:
    dropped, source, region = set(rc.dropped_pools), rc.source, rc.region
    lustre = source.storage.lustre if source.storage else None
    if lustre is not None and lustre.node_pool in dropped:
        raise DrError(
            f"storage.lustre.node_pool is {lustre.node_pool}, a capacity-block pool: "
            f"pass --reservation {lustre.node_pool}=cr-... for a block in {region}"
        )
    for model in source.serving.models if source.serving else []:
        if model.node_pool in dropped:
            raise DrError(
                f"serving model {model.name} runs on capacity-block pool {model.node_pool}: "
                f"pass --reservation {model.node_pool}=cr-... for a block in {region}"
            )
    tenants = dict(rc.cfg.tenants)
    for name, tenant in tenants.items():
        quotas: dict[str, Any] = {}
        for quota_key in ("gpu_quota", "serving_gpus"):
            quota: dict[str, int] = getattr(tenant, quota_key)
            for pool in sorted(dropped & set(quota)):
                why = "its pool is not in the recovery stack"
                rc.rewrite(f"tenants.{name}.{quota_key}.{pool}", quota[pool], None, why)
                quotas[quota_key] = {p: n for p, n in quota.items() if p not in dropped}
        tenants[name] = tenant.model_copy(update=quotas) if quotas else tenant
    rc.update(tenants=tenants)


def _storage(rc: RecoveryConfig, options: RecoveryOptions) -> None:
    storage, region, source_stack = rc.source.storage, rc.region, options.source_stack
    if storage is None:
        return
    prefix = options.bucket_prefix or f"{storage.bucket_name_prefix}-{region}"
    if len(prefix) > 40:
        raise DrError(
            f"the recovery bucket prefix {prefix} is longer than 40 characters: pass "
            "--bucket-prefix with a shorter prefix your organisation owns"
        )
    update: dict[str, Any] = {"bucket_name_prefix": prefix}
    why = "bucket names are global: the source's names stay taken while its region is down"
    rc.rewrite("storage.bucket_name_prefix", storage.bucket_name_prefix, prefix, why)
    replicated = [k for k, b in storage.buckets.items() if b.replicate]
    target = storage.replication.region
    if replicated and target != region:
        raise DrError(
            f"{source_stack} replicates to {target} (storage.replication.region), not "
            f"{region}: recover in {target}, where the replicas are"
        )
    if not replicated:
        rc.note(
            "check",
            f"{source_stack} replicates no bucket: every bucket of the recovery stack starts "
            "empty and no checkpoint survives the region",
        )
    else:
        rc.adopted, names_from = _replica_names(rc, storage, replicated, options)
        rc.key_arn, rc.key_from = _replica_key(rc, options)
        given: dict[str, Any] = {"kms_key_arn": rc.key_arn} if rc.key_arn else {}
        update["adoption"] = AdoptionConfig.model_construct(buckets=rc.adopted, **given)
        after = {"buckets": rc.adopted, "kms_key_arn": rc.key_arn or "(unset)"}
        why = (
            f"the replicas are adopted (imported, protected), not re-created empty; names "
            f"{names_from}, key {rc.key_from}"
        )
        rc.rewrite("storage.adoption", None, after, why)
        if rc.key_arn is None:
            rc.note(
                "action",
                "set storage.adoption.kms_key_arn (the replicas' KMS key) before `pulumi "
                f"up`: `aws kms describe-key --region {region} --key-id alias/"
                f"{storage.bucket_name_prefix}-s3-replica --query KeyMetadata.Arn`, or "
                "rerun with --outputs or --replica-key-arn. Until then the stack file fails "
                "with a one-line config error; the RTO and the plan comparison used an "
                "offline stand-in",
            )
    empty = [k for k in storage.buckets if k not in replicated and k != "logs"]
    if empty:
        are = f"bucket {empty[0]} is" if len(empty) == 1 else f"buckets {', '.join(empty)} are"
        rc.note(
            "check",
            f"{are} not replicated: the recovery stack creates "
            f"{'it' if len(empty) == 1 else 'them'} empty "
            f"({', '.join(f'{prefix}-{k}' for k in empty)}); restore or re-create "
            "the data (e.g. datasets from their origin)",
        )
    onward, replication = options.replicate_to, storage.replication
    if onward is not None:
        if onward == region or not REGION.match(onward):
            raise DrError(f"--replicate-to {onward}: name another region than {region}")
        update["replication"] = replication.model_copy(update={"region": onward})
        rc.rewrite("storage.replication.region", target, onward, "--replicate-to")
        rc.note(
            "check",
            f"replication to {onward} copies new objects only; copy what exists with S3 "
            "Batch Replication",
        )
    else:
        if replicated:
            update["buckets"] = {
                k: b.model_copy(update={"replicate": False}) if k in replicated else b
                for k, b in storage.buckets.items()
            }
            why = (
                f"replication is off: its target {target} is the recovery region itself, and "
                f"{rc.source_region} is down (re-enable it in reverse later, see the runbook)"
            )
            rc.rewrite("storage.replication.region", target, None, why)
        if "region" in replication.model_fields_set:
            update["replication"] = _unset(replication, "region")
    rc.update(storage=storage.model_copy(update=update))


def _replica_names(
    rc: RecoveryConfig, storage: StorageConfig, replicated: list[str], options: RecoveryOptions
) -> tuple[dict[str, str], str]:
    outputs = options.outputs or StackOutputs()
    if "dr_replicas" in outputs.model_fields_set:
        names = {}
        for key in replicated:
            replica = outputs.dr_replicas.get(key)
            if replica is None:
                raise DrError(f"--outputs: dr_replicas has no bucket for {key}")
            if replica.region != rc.region:
                raise DrError(
                    f"--outputs: the replica of {key} is in {replica.region}, not {rc.region}"
                )
            names[key] = replica.bucket
        return names, "from the source's outputs (dr_replicas)"
    if all(k in outputs.buckets for k in replicated):
        names = {k: f"{outputs.buckets[k]}-{rc.region}" for k in replicated}
        return names, "derived from the source's outputs (buckets + -region)"
    rc.note(
        "check",
        "replica names were derived from the source's stack file, not read from a deployed "
        "stack: confirm each with `aws s3api head-bucket --bucket NAME` (or rerun with "
        f"--outputs FILE from `pulumi stack output --json -s {options.source_stack}`)",
    )
    names = {k: f"{storage.bucket_name_prefix}-{k}-{rc.region}" for k in replicated}
    return names, "derived from the stack file (<prefix>-<bucket>-<region>)"


def _replica_key(rc: RecoveryConfig, options: RecoveryOptions) -> tuple[str | None, str]:
    candidates: dict[str, str] = {}
    replicas = options.outputs.dr_replicas if options.outputs else {}
    arns = {r.kms_key_arn for r in replicas.values()} - {None}
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
    match = KMS_ARN.match(arn)
    if not match:
        raise DrError(f"replica key {arn!r} ({source}) is not a KMS key ARN")
    if match["region"] != rc.region:
        raise DrError(f"replica key {arn} ({source}) is in {match['region']}, not {rc.region}")
    return arn, source


def _serving(rc: RecoveryConfig, options: RecoveryOptions) -> None:
    serving, region, arn = rc.source.serving, rc.region, options.certificate_arn
    if serving is None:
        return
    if arn is None:
        raise DrError(
            f"serving.certificate_arn: ACM certificates are regional; request one for "
            f"{serving.hostname} in {region} and pass --certificate-arn ARN"
        )
    match = CERT_ARN.match(arn)
    if not match or match["region"] != region:
        raise DrError(
            f"--certificate-arn {arn}: not an ACM certificate ARN in {region}, e.g. "
            f"arn:aws:acm:{region}:123456789012:certificate/<uuid>"
        )
    rc.update(serving=serving.model_copy(update={"certificate_arn": arn}))
    rc.rewrite("serving.certificate_arn", serving.certificate_arn, arn, "ACM is regional")
    rc.note(
        "action",
        f"point {serving.hostname} at the recovery ALB once it serves (DNS), and re-set the "
        "API client keys (secrets are not copied)",
    )


def team_stack_steps(team: str, shared: SharedStackConfig, region: str) -> str:
    """Why a team stack is not recovered alone, and the steps that recover it: its network
    and cluster are the shared stack's, so its recovery waits for the shared stack's and
    names it (a stack only the operator's `pulumi up` of the shared recovery makes)."""
    recovered = f"{shared.stack}-dr"
    org = shared.name.rsplit("/", 1)[0] + "/" if "/" in shared.name else ""
    return (
        f"{team} deploys into shared stack {shared.name}, which is recovered first: "
        f"1. `llmp dr plan --from {shared.stack} --region {region}`, then `pulumi up` its "
        f"recovery stack {recovered}; 2. copy this stack's file to Pulumi.{team}-dr.yaml "
        f"with aws:region {region}, the recovered stack's network.availability_zones and "
        f"shared_stack.name {org}{recovered}; 3. `llmp synth {team}-dr`, then `pulumi up` it"
    )


def outputs_mismatch(
    outputs: StackOutputs, source: PlatformConfig, source_stack: str
) -> str | None:
    """Why `outputs` (`llmp dr plan --outputs`) are not the source stack's, or None.

    `pulumi stack output --json` holds the stack's region and cluster name (whose default
    is `<project>-<stack>`), and, where a program exports them, `stack` and `project`:
    each one present must be the source's, or the recovery would adopt another stack's
    replicas and key without a word.
    """
    from llmp.stacks import PROJECT

    extra = outputs.model_extra or {}
    if source.cluster.existing is not None:
        cluster = source.cluster.existing.name
    else:
        cluster = source.cluster.name or f"{PROJECT}-{source_stack}"
    expected = {
        "stack": source_stack,
        "project": PROJECT,
        "region": source.region,
        "cluster_name": cluster,
    }
    found = {
        "stack": extra.get("stack"),
        "project": extra.get("project"),
        "region": outputs.region,
        "cluster_name": outputs.cluster_name,
    }
    for key, want in expected.items():
        got = found[key]
        if got is not None and got != want:
            return f"is not {source_stack}'s: {key} {got}, {source_stack}'s is {want}"
    if all(found[k] is None for k in ("stack", "region", "cluster_name")):
        return f"has no region or cluster_name: cannot tell it is {source_stack}'s"
    return None
