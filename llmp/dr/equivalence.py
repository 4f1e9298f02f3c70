"""Equivalence of a source plan and its recovery plan: the same platform in another region.

Resources are matched by type and name, the source's name translated into the
recovery region first (`network-nat-us-east-1a` -> `network-nat-us-west-2a`). Every
difference, a resource in one plan only (or twice in the recovery plan), or an input
(`llmp.plan.leaves.leaves`, compared with `same`), lifecycle option, parent, provider or
dependency that differs, is explained by the named rules of ALLOWED_DIFFERENCES, or
reported with no rule (unexplained). The region, zone, bucket-name and stack-name pairs
are read off the two plans, each only where it is region-bound (`_Comparison._pairs`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from llmp.dr.config import CERT_ARN, RESERVATION
from llmp.plan import AWS_PROVIDER, Plan, Resource
from llmp.plan.leaves import MISSING, leaves, same

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
    "and settings; the `llm-platform/adopted` tag; the logs bucket and the S3 endpoint "
    "admitting the adopted names",
    REPLICATION_RULE: "replication: the DR provider, replica buckets and key, the replication "
    "role and rules (off in the recovery stack, or to another target)",
    CAPACITY_BLOCK_RULE: "capacity-block pools left out, with their Kueue flavors and quotas",
    RESERVATION_RULE: "capacity reservation ids (bought in the recovery region)",
    CERTIFICATE_RULE: "ACM certificate ARNs (re-issued in the recovery region)",
}
"""Every kind of difference a recovery plan may have from its source; anything else is
unexplained and fails the equivalence."""

_OPTIONS = ("protect", "retain_on_delete", "import_id")
_ADOPTED_TAG = "llm-platform/adopted"
_KUEUE = "kubernetes:kueue.x-k8s.io/"
_BUCKET = "aws:s3/bucket:Bucket"
_KEY = "aws:kms/key:Key"
_POOL = "llmp:nodes:GpuNodePool"


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
        return dict(sorted(Counter(rule for d in self.all() for rule in d.rules).items()))

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


class _Translation:
    """Source texts -> their recovery counterparts, applied in one pass: a replacement is
    never translated again (a new bucket prefix that names the source region stays as it
    is). A source text named twice with different recovery texts translates nothing."""

    def __init__(self, pairs: list[tuple[str, str, str]], stacks: tuple[str, str]):
        table: dict[str, tuple[str, str]] = {}
        ambiguous = set()
        for rule, old, new in pairs:
            if old in table and table[old][1] != new:
                ambiguous.add(old)
            table.setdefault(old, (rule, new))
        self.table = {k: v for k, v in table.items() if k not in ambiguous}
        self.stacks = stacks
        # Longest text first: a bucket name wins over its prefix, a zone over its region.
        texts = sorted(self.table, key=len, reverse=True)
        self.pattern = re.compile("|".join(map(re.escape, texts))) if texts else None

    def __call__(self, value: str) -> tuple[str, set[str]]:
        """`value` translated, and the rules that applied."""
        if value == self.stacks[0] != self.stacks[1]:
            return self.stacks[1], {STACK_RULE}
        rules: set[str] = set()

        def substitute(match: re.Match[str]) -> str:
            rule, new = self.table[match.group(0)]
            rules.add(rule)
            return new

        return (self.pattern.sub(substitute, value) if self.pattern else value), rules

    def text(self, value: Any) -> Any:
        return self(value)[0] if isinstance(value, str) else value


def _leaves(inputs: dict[str, Any]) -> dict[str, Any]:
    """Input leaves with JSON documents flattened and each list item a leaf of its own
    (a zone, a subnet id), so each region-bound value is one difference."""
    out: dict[str, Any] = {}
    for path, value in leaves(inputs, documents=True).items():
        if isinstance(value, list) and value:
            out.update((f"{path}[{i}]", item) for i, item in enumerate(value))
        else:
            out[path] = value
    return out


def without_flavors(inputs: Any, pools: set[str]) -> tuple[Any, list[str]]:
    """A Kueue object's inputs without the flavors of left-out pools, and those removed."""
    removed: list[str] = []
    names = {f"pool-{p}" for p in pools}

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if not isinstance(value, list):
            return value
        kept = []
        for item in value:
            if isinstance(item, dict) and item.get("name") in names:
                removed.append(str(item["name"]))
            else:
                kept.append(walk(item))
        return kept

    return walk(inputs), removed


def _adopted(r: Resource) -> bool:
    """A resource the recovery stack takes over: a bucket imported by its own name, or a
    KMS key, imported and tagged as adopted."""
    if not r.import_id or (r.inputs.get("tags") or {}).get(_ADOPTED_TAG) != "true":
        return False
    return r.import_id == r.inputs.get("bucket") if r.type == _BUCKET else r.type == _KEY


def _is_true(value: Any) -> bool:
    return value is True


def _pools(plan: Plan) -> dict[str, str]:
    """The GPU pools a plan holds: GpuNodePool component URN -> pool name."""
    return {r.urn: r.name.removeprefix("gpu-") for r in plan.by_type(_POOL)}


def _dr_providers(plan: Plan) -> set[str]:
    return {r.urn for r in plan.by_type(AWS_PROVIDER) if r.name == "aws-dr"}


def _dropped_pool_of(name: str, pools: Iterable[str]) -> str | None:
    """The left-out pool a resource belongs to (`gpu-<pool>-...`, `...-pool-<pool>`)."""
    for pool in sorted(pools, key=len, reverse=True):
        if (
            name == f"gpu-{pool}"
            or name.startswith(f"gpu-{pool}-")
            or name.endswith(f"-pool-{pool}")
        ):
            return pool
    return None


class _Comparison:
    """The two plans, and what they say about each other."""

    def __init__(self, source: Plan, recovery: Plan):
        self.source, self.recovery = source, recovery
        self.src = sorted(source.resources, key=lambda r: r.urn)
        self.rec = sorted(recovery.resources, key=lambda r: r.urn)
        self.by_key: dict[tuple[str, str], Resource] = {}
        self.twins: list[Resource] = []  # same type and name as another (another parent)
        for r in self.rec:
            if (r.type, r.name) in self.by_key:
                self.twins.append(r)
            else:
                self.by_key[(r.type, r.name)] = r
        self.dr = (_dr_providers(source), _dr_providers(recovery))
        block_pools = {
            pool
            for r in source.by_type("aws:eks/nodeGroup:NodeGroup")
            if r.inputs.get("capacityType") == "CAPACITY_BLOCK"
            and (pool := _pools(source).get(r.parent or ""))
        }
        self.dropped = (set(_pools(source).values()) - set(_pools(recovery).values())) & block_pools
        self.adopted_buckets = {
            r.inputs["bucket"] for r in recovery.by_type(_BUCKET) if _adopted(r)
        }
        self.queues = {
            str(r.inputs.get("metadata", {}).get("name")): r.inputs
            for r in self.src
            if r.type.startswith(_KUEUE) and r.type.endswith(":ClusterQueue")
        }
        stacks = (source.stack, recovery.stack)
        pairs, onward = self._pairs(stacks)
        self.translate = _Translation(pairs, stacks)
        self.onward = _Translation([*onward, *pairs], stacks) if onward else self.translate

    def replication(self, r: Resource, side: int) -> bool:
        """The DR provider, what it creates, the replication rules and their role."""
        if r.urn in self.dr[side] or r.provider in self.dr[side]:
            return True
        if r.type == "aws:s3/bucketReplicationConfig:BucketReplicationConfig":
            return True
        return r.type.startswith("aws:iam/") and r.name.endswith("-replication")

    def left_out(self, r: Resource | None, side: int) -> tuple[str, ...]:
        """Why a resource (or a dependency on it) is in one plan only: it replicates, or it is
        of a left-out capacity-block pool (source side); () when nothing explains it."""
        if r is not None and self.replication(r, side):
            return (REPLICATION_RULE,)
        if r is not None and side == 0 and _dropped_pool_of(r.name, self.dropped) is not None:
            return (CAPACITY_BLOCK_RULE,)
        return ()

    def _pairs(self, stacks: tuple[str, str]) -> tuple[list[tuple[str, str, str]], list[Any]]:
        """The region-bound (rule, source text, recovery text) pairs, and those of an onward
        replication. A bucket pair is taken only when the recovery name is region-bound: an
        adopted replica's own name, or the source name with the new prefix (read off the
        storage key's alias) in place of the old one; no two source buckets may become one."""
        zones = [_zones(self.src), _zones(self.rec)]
        pairs = [(ZONE_RULE, a, b) for a, b in zip(*zones, strict=False) if a != b]
        buckets: list[tuple[str, str, bool]] = []
        replicas: list[tuple[str, str]] = []
        prefixes: tuple[str, str] | None = None
        for r in self.src:
            other = self.by_key.get((r.type, r.name))
            if other is None or r.type not in (_BUCKET, "aws:kms/alias:Alias"):
                continue
            name = "bucket" if r.type == _BUCKET else "name"
            a, b = r.inputs.get(name), other.inputs.get(name)
            if not (isinstance(a, str) and isinstance(b, str) and a != b):
                continue
            if r.type == "aws:kms/alias:Alias":
                pairs.append((BUCKET_RULE, a, b))
                if a.endswith("-s3") and b.endswith("-s3"):  # alias/<bucket prefix>-s3
                    prefixes = (a.removeprefix("alias/")[:-3], b.removeprefix("alias/")[:-3])
                    pairs.append((BUCKET_RULE, f"{prefixes[0]}-*", f"{prefixes[1]}-*"))
                continue
            replica = self.replication(r, 0), self.replication(other, 1)
            if all(replica):
                replicas.append((a, b))
            elif not any(replica):
                buckets.append((a, b, _adopted(other)))
        targets = Counter(b for _, b, _ in buckets)
        for a, b, adopted in buckets:
            renamed = prefixes is not None and (
                a.startswith(f"{prefixes[0]}-") and b == prefixes[1] + a[len(prefixes[0]) :]
            )
            if (adopted or renamed) and targets[b] == 1:
                pairs.append((BUCKET_RULE, a, b))
        regions = [
            p.outputs.get("region") or p.primary_region for p in (self.source, self.recovery)
        ]
        if all(isinstance(r, str) for r in regions) and regions[0] != regions[1]:
            pairs.append((REGION_RULE, regions[0], regions[1]))
        if stacks[0] != stacks[1]:
            pairs.append((STACK_RULE, f"urn:pulumi:{stacks[0]}::", f"urn:pulumi:{stacks[1]}::"))
            pairs.append((STACK_RULE, f"/{stacks[0]}/", f"/{stacks[1]}/"))
            # The SNS alert topics and their key (components/monitoring.py).
            pairs.append((STACK_RULE, f"{stacks[0]}-alerts-", f"{stacks[1]}-alerts-"))
            pairs.append((STACK_RULE, f"topics of {stacks[0]}", f"topics of {stacks[1]}"))
        return pairs, self._onward_pairs(replicas, prefixes)

    def _onward_pairs(
        self, replicas: list[tuple[str, str]], prefixes: tuple[str, str] | None
    ) -> list[tuple[str, str, str]]:
        """When both plans replicate (the recovery with `--replicate-to`): the replica region,
        and each replica bucket `<prefix>-<bucket>-<region>` under the new prefix and region."""
        regions = [
            [p.aws_providers[u].inputs.get("region") for u in sorted(_dr_providers(p))]
            for p in (self.source, self.recovery)
        ]
        if not (len(regions[0]) == len(regions[1]) == 1):
            return []
        old_region, new_region = regions[0][0], regions[1][0]
        if not (isinstance(old_region, str) and isinstance(new_region, str)):
            return []
        pairs = [(REPLICATION_RULE, old_region, new_region)] if old_region != new_region else []
        for a, b in replicas if prefixes else []:
            old, new = prefixes or ("", "")
            middle = a[len(old) : len(a) - len(old_region)]
            if (
                a.startswith(f"{old}-")
                and a.endswith(f"-{old_region}")
                and b == f"{new}{middle}{new_region}"
            ):
                pairs.append((REPLICATION_RULE, a, b))
        return pairs

    def differences(self) -> PlanDifferences:
        out = PlanDifferences()
        matched: set[tuple[str, str]] = set()
        for a in self.src:
            name, name_rules = self.translate(a.name)
            key = (a.type, name)
            b = self.by_key.get(key) if key not in matched else None
            if b is None:
                rules = self.left_out(a, 0)
                out.only_in_source.append(Difference(a.type, a.name, "", "present", None, rules))
                continue
            matched.add(key)
            out.in_both += 1
            if name != a.name:
                rules = tuple(sorted(name_rules))
                out.changed.append(Difference(a.type, a.name, "name", a.name, name, rules))
            replication = self.replication(a, 0) or self.replication(b, 1)
            translate = self.onward if replication else self.translate
            out.changed += self._inputs(a, b, translate, replication=replication)
            out.changed += self._graph(a, b, translate)
            out.changed += self._options(a, b)
        for b in [*(r for key, r in self.by_key.items() if key not in matched), *self.twins]:
            rules = self.left_out(b, 1)
            out.only_in_recovery.append(Difference(b.type, b.name, "", None, "present", rules))
        return out

    def _options(self, a: Resource, b: Resource) -> list[Difference]:
        """Import id, protect and retain_on_delete: explained only by the values adoption
        gives an adopted resource (imported by its id, protected, retained) or a settings
        resource of an adopted bucket (retained); anything else must be the source's."""
        allowed: dict[str, Callable[[Any], bool]] = {}
        if _adopted(b):
            allowed = {"import_id": lambda v: isinstance(v, str) and bool(v)}
            allowed |= {"protect": _is_true, "retain_on_delete": _is_true}
        elif b.type.startswith("aws:s3/") and any(
            (d := self.recovery.by_urn.get(dep)) is not None and d.type == _BUCKET and _adopted(d)
            for dep in b.dependencies
        ):
            allowed = {"retain_on_delete": _is_true}
        found = []
        for option in _OPTIONS:
            x, y = getattr(a, option) or None, getattr(b, option) or None  # unset as None
            if x != y:
                rules = (ADOPTION_RULE,) if option in allowed and allowed[option](y) else ()
                found.append(Difference(a.type, a.name, f"options.{option}", x, y, rules))
        return found

    def _graph(self, a: Resource, b: Resource, translate: _Translation) -> list[Difference]:
        """Parent, provider and dependencies, compared after the source URNs are translated:
        a resource that waits for less (or more) is not the same platform, and the RTO walks
        exactly these edges."""
        found: list[Difference] = []
        for name in ("parent", "provider"):
            x, y = getattr(a, name), getattr(b, name)
            if translate.text(x) != y:
                found.append(Difference(a.type, a.name, name, x, y, ()))
        wanted = {translate.text(d): d for d in a.dependencies}
        present = set(b.dependencies)
        for translated, dep in sorted(wanted.items()):
            if translated not in present:
                rules = self.left_out(self.source.by_urn.get(dep), 0)
                found.append(Difference(a.type, a.name, "dependencies", dep, None, rules))
        for dep in sorted(present - set(wanted)):
            rules = self.left_out(self.recovery.by_urn.get(dep), 1)
            found.append(Difference(a.type, a.name, "dependencies", None, dep, rules))
        return found

    def _inputs(
        self, a: Resource, b: Resource, translate: _Translation, *, replication: bool
    ) -> list[Difference]:
        found: list[Difference] = []
        inputs = a.inputs
        if a.type.startswith(_KUEUE) and self.dropped:
            inputs, removed = without_flavors(inputs, self.dropped)
            found += [
                Difference(a.type, a.name, f"inputs.<flavor {f}>", f, None, (CAPACITY_BLOCK_RULE,))
                for f in removed
            ]
        left, right = _leaves(inputs), _leaves(b.inputs)
        for path in sorted(set(left) | set(right)):
            x, y = left.get(path, MISSING), right.get(path, MISSING)
            if same(x, y):
                continue
            rules: set[str] = set()
            if isinstance(x, str) and isinstance(y, str):
                translated, applied = translate(x)
                if translated == y:
                    rules = applied
                elif CERT_ARN.match(x) and CERT_ARN.match(y):
                    rules = {CERTIFICATE_RULE}
                elif RESERVATION.match(x) and RESERVATION.match(y):
                    rules = {RESERVATION_RULE}
            if rules and replication:
                rules.add(REPLICATION_RULE)
            if not rules and (
                (x is MISSING and path == f"tags.{_ADOPTED_TAG}" and _adopted(b))
                or self._logs_admit_adopted(a, path, x, y, left, right, translate)
                or self._endpoint_admits_adopted(a, path, x, y)
            ):
                rules = {ADOPTION_RULE}
            if not rules and self._quota_of_dropped_pools(a, path, x, y):
                rules = {CAPACITY_BLOCK_RULE}
            x, y = (None if v is MISSING else v for v in (x, y))
            found.append(Difference(a.type, a.name, f"inputs.{path}", x, y, tuple(sorted(rules))))
        return found

    def _quota_of_dropped_pools(self, quota: Resource, path: str, x: Any, y: Any) -> bool:
        """A tenant's namespace quota lowered by exactly what its queue held in left-out pools."""
        prefix = "spec.hard.requests."
        if quota.type != "kubernetes:core/v1:ResourceQuota" or not path.startswith(prefix):
            return False
        if not (isinstance(x, str) and isinstance(y, str) and x.isdigit() and y.isdigit()):
            return False
        queue = self.queues.get(str(quota.inputs.get("metadata", {}).get("namespace")))
        flavors = {f"pool-{p}" for p in self.dropped}
        held = sum(
            int(item["nominalQuota"])
            for group in (queue or {}).get("spec", {}).get("resourceGroups", [])
            for flavor in group.get("flavors", [])
            if flavor.get("name") in flavors
            for item in flavor.get("resources", [])
            if item.get("name") == path.removeprefix(prefix)
            and str(item.get("nominalQuota", "")).isdigit()
        )
        return held > 0 and int(x) - int(y) == held

    def _logs_admit_adopted(
        self,
        a: Resource,
        path: str,
        x: Any,
        y: Any,
        left: dict[str, Any],
        right: dict[str, Any],
        translate: _Translation,
    ) -> bool:
        """The logs bucket's policy admitting, beside its own prefix, the adopted buckets."""
        if a.type != "aws:s3/bucketPolicy:BucketPolicy" or "aws:SourceArn" not in path:
            return False
        if isinstance(x, str) and y is MISSING:
            # The prefix pattern became the first of a list of patterns.
            return bool(translate.text(x) == right.get(f"{path}[0]"))
        if x is MISSING and isinstance(y, str):
            original = left.get(re.sub(r"\[\d+\]$", "", path))
            adopted = {f"arn:aws:s3:::{name}" for name in self.adopted_buckets}
            return y in adopted or (isinstance(original, str) and translate.text(original) == y)
        return False


    def _endpoint_admits_adopted(self, a: Resource, path: str, x: Any, y: Any) -> bool:
        """The S3 gateway endpoint's policy naming an adopted bucket (and its objects)
        beside the stack's own prefix: a recovery stack's replicas keep their names."""
        if a.type != "aws:ec2/vpcEndpoint:VpcEndpoint" or "policy<json>" not in path:
            return False
        if x is not MISSING or not isinstance(y, str):
            return False
        adopted = {f"arn:aws:s3:::{name}" for name in self.adopted_buckets}
        return y.removesuffix("/*") in adopted


def _zones(resources: list[Resource]) -> list[str]:
    """A plan's AZs in the order of its subnets."""
    zones = [
        r.inputs.get("availabilityZone") for r in resources if r.type == "aws:ec2/subnet:Subnet"
    ]
    return list(dict.fromkeys(z for z in zones if isinstance(z, str)))


def plan_differences(source: Plan, recovery: Plan) -> PlanDifferences:
    """Compare a source plan with its recovery plan (see the module's docstring)."""
    return _Comparison(source, recovery).differences()
