"""The stack-config schema: every key under the `llm-platform:` namespace, validated once.

A stack file is read into `PlatformConfig` before any resource is declared.
Bad config stops the program with one line per problem, each naming the key
path, the value, and what would be right, e.g.

    config error: llm-platform:node_pools.pretrain.efa = True: g6e.12xlarge has no
    EFA interfaces; set efa: false or use one of g5.12xlarge, g5.48xlarge, ...

A key in a namespace the program does not read (CONFIG_NAMESPACES) is refused
too: a typo there would drop a whole section without a word.

Defaults are the safe and cheap choice: private endpoint only, one NAT
gateway, no GPU nodes running until a pool asks for them.
"""

from __future__ import annotations

import difflib
import functools
import ipaddress
import json
import re
import reprlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from infra.addressing import SubnetLayout, plan_subnets
from infra.catalog import catalog

NAMESPACE = "llm-platform"
REGION_KEY = "aws:region"
SERVING_KEYS_NAMESPACE = "llm-platform-serving"
"""Secret API keys of the serving gateway: `llm-platform-serving:<client>`, one per client."""
MONITORING_SECRETS_NAMESPACE = "llm-platform-monitoring"
"""Secrets of the monitoring stack: `llm-platform-monitoring:grafanaAdminPassword`."""
GRAFANA_PASSWORD_KEY = "grafanaAdminPassword"

CONFIG_NAMESPACES: dict[str, str] = {
    NAMESPACE: "the platform's settings: PlatformConfig, the schema below",
    "aws": (
        "`aws:region` only: the program's AWS providers are explicit and read no other "
        "`aws:*` setting (credentials and profiles come from the environment)"
    ),
    SERVING_KEYS_NAMESPACE: "secret API keys, `llm-platform-serving:<client>` per serving client",
    MONITORING_SECRETS_NAMESPACE: f"the secret `{GRAFANA_PASSWORD_KEY}` of Grafana's admin",
    "pulumi": "Pulumi's own settings (`pulumi:tags`, `pulumi:disable-default-providers`, ...)",
}
"""The namespaces a stack file's `config:` may use, and what each holds: the one list.

A key in any other namespace is refused (a typo there would drop its whole section).
"""

AWS_PROVIDER_KEYS = frozenset(
    {
        "accessKey",
        "allowedAccountIds",
        "assumeRoleWithWebIdentity",
        "assumeRoles",
        "customCaBundle",
        "defaultTags",
        "ec2MetadataServiceEndpoint",
        "ec2MetadataServiceEndpointMode",
        "endpoints",
        "forbiddenAccountIds",
        "httpProxy",
        "httpsProxy",
        "ignoreTags",
        "insecure",
        "maxRetries",
        "noProxy",
        "profile",
        "region",
        "retryMode",
        "s3UsEast1RegionalEndpoint",
        "s3UsePathStyle",
        "secretKey",
        "sharedConfigFiles",
        "sharedCredentialsFiles",
        "skipCredentialsValidation",
        "skipMetadataApiCheck",
        "skipRegionValidation",
        "skipRequestingAccountId",
        "stsRegion",
        "tagPolicyCompliance",
        "token",
        "tokenBucketRateLimiterCapacity",
        "useDualstackEndpoint",
        "useFipsEndpoint",
        "userAgents",
    }
)
"""The `aws:*` settings of Pulumi's AWS provider (pulumi-aws 7, `pulumi_aws.config`).

Only `aws:region` is read by this program. Its AWS providers are explicit
(infra/platform.py: region and default tags), and an explicit provider reads none of
the `aws:*` config (pulumi/pulumi-aws#1307): an `aws:profile` or `aws:assumeRoles` in
a stack file would be ignored while `pulumi up` deploys with whatever credentials the
environment holds, perhaps into another account. So each of them is refused with a
line that says where to set it instead; a key outside this list gets a suggestion. A
test keeps the list equal to the installed pulumi-aws's.
"""

_POOL_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
_RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8,17}$")
_AZ = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$")


class ConfigError(Exception):
    """Stack-config problems, one line each: where, what, what would be right.

    The error is the first problem found; `others` holds the further ones found in
    the same pass. str() gives every problem on a line of its own, the first first.
    """

    def __init__(
        self,
        path: tuple[str | int, ...],
        value: Any,
        expected: str,
        *,
        config_key: str | None = None,
    ):
        self.path = path
        self.value = value
        self.expected = expected
        self.config_key = config_key
        """The whole config key, for a key outside the `llm-platform` schema."""
        self.others: list[ConfigError] = []
        super().__init__(self.line())

    @property
    def key(self) -> str:
        if self.config_key is not None:
            return _clip(self.config_key, _MAX_KEY_PART * 2)
        if self.path and self.path[0] == "region":
            return REGION_KEY
        return f"{NAMESPACE}:" + ".".join(_clip(str(p), _MAX_KEY_PART) for p in self.path)

    @property
    def errors(self) -> list[ConfigError]:
        """This problem and the others, in the order they are printed."""
        return [self, *self.others]

    def line(self) -> str:
        """This one problem: `config error: KEY = VALUE: EXPECTED`."""
        value = "<missing>" if self.value is _MISSING else _show(self.value)
        expected = _clip(self.expected, _MAX_EXPECTED)
        return _one_line_text(f"config error: {self.key} = {value}: {expected}")

    def __str__(self) -> str:
        lines = list(dict.fromkeys(e.line() for e in self.errors))
        if len(lines) > _MAX_ERRORS:
            hidden = len(lines) - _MAX_ERRORS
            lines = [*lines[:_MAX_ERRORS], f"config error: {hidden} more errors not shown"]
        return "\n".join(lines)


class StackFileError(ConfigError):
    """A stack file that cannot be read as one: `config error: FILE: what is wrong`."""

    def __init__(self, file: str, problem: str):
        self.file = file
        super().__init__((), _MISSING, problem)

    def line(self) -> str:
        return _one_line_text(f"config error: {_clip(self.file, 300)}: {self.expected}")


# Bounds that keep an error one readable line, whatever the config holds.
_MAX_VALUE = 200
_MAX_KEY_PART = 64
_MAX_EXPECTED = 1000
_MAX_ERRORS = 50  # lines of one report: a file of 600 broken pools need not print 600


class _Repr(reprlib.Repr):
    """reprlib's bounds, but maps keep the order they were written in."""

    def repr_dict(self, x: dict[Any, Any], level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        items = [
            f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}"
            for k, v in list(x.items())[: self.maxdict]
        ]
        if len(x) > self.maxdict:
            items.append("...")
        return "{" + ", ".join(items) + "}"


_REPR = _Repr()
_REPR.maxlevel = 3
_REPR.maxstring = _MAX_VALUE
_REPR.maxother = _MAX_VALUE
_REPR.maxlong = 60


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _show(value: Any) -> str:
    """A bounded repr: huge, deep or odd values (10**5000, [[[...]]]) stay short and safe."""
    if value is SECRET_VALUE:
        return "[secret]"
    try:
        text = _REPR.repr(value)
    except Exception:  # a repr that raises (ValueError for ints over 4300 digits, ...)
        if isinstance(value, int):
            text = f"<integer of about {int(value.bit_length() * 0.30103)} digits>"
        else:
            text = f"<{type(value).__name__}>"
    return _clip(text, _MAX_VALUE)


def _one_line_text(text: str) -> str:
    """Escape line breaks and other unprintable characters (keys and values may hold them)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


class FieldError(ValueError):
    """Raised inside validators to point at a key below the validated model."""

    def __init__(self, path: tuple[str | int, ...], value: Any, expected: str):
        self.path = path
        self.value = value
        self.expected = expected
        super().__init__(expected)


_MISSING = object()
TENANT_BUCKETS = ("datasets", "checkpoints")
"""The buckets in which a tenant's `s3_prefixes` are granted."""
SECRET_VALUE: Any = object()
"""Stands in for the value of a secret key in an error message."""


class _Section(BaseModel):
    # NaN and infinity are no sizes or prices: they would poison every sum of the cost model.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _sorted_names(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))


def _not_in(what: str, where: str, names: Iterable[str]) -> str:
    """The message of a reference to nothing: `not a pool in node_pools (h100, a100)`."""
    return f"not a {what} in {where} ({', '.join(names) or 'none'})"


@functools.cache
def _partitions() -> dict[str, tuple[re.Pattern[str], tuple[str, ...]]]:
    """Partition -> (its region-name pattern, its regions), from botocore's partition data.

    `botocore/data/partitions.json` ships inside botocore (offline, 7 KB; the 1.2 MB
    endpoints.json lists the same regions and took 0.2 s a synthesis to load). Every
    partition counts (aws, aws-cn, aws-us-gov, ...), opt-in regions included; its
    `aws-global`-style pseudo-regions are no deployment target.
    """
    import botocore

    data = json.loads((Path(botocore.__file__).parent / "data" / "partitions.json").read_text())
    return {
        p["id"]: (
            re.compile(p.get("regionRegex") or "^$"),
            tuple(sorted(r for r in p["regions"] if not r.endswith("-global"))),
        )
        for p in data["partitions"]
    }


def aws_regions() -> list[str]:
    """Every AWS region botocore knows, in every partition."""
    return sorted(r for _, regions in _partitions().values() for r in regions)


def _known_region(v: str) -> str:
    if v in aws_regions():
        return v
    import botocore

    # The regions of the partition the name looks like it belongs to, else all of them.
    known = next(
        (list(regions) for pattern, regions in _partitions().values() if pattern.match(v)),
        aws_regions(),
    )
    guess = None
    if len(v) <= 64:
        stem = v.rsplit("-", 1)[0] + "-"
        siblings = [r for r in known if r.startswith(stem)]
        close = difflib.get_close_matches(v, aws_regions(), n=1, cutoff=0.6)
        guess = siblings[0] if siblings else (close[0] if close else None)
    hint = f"; did you mean {guess}?" if guess else ""
    raise ValueError(
        f"not an AWS region{hint} (known to botocore {botocore.__version__}: {', '.join(known)})"
    )


_LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827)
"""The retentions CloudWatch Logs accepts (PutRetentionPolicy)."""


def _cloudwatch_retention(v: int) -> int:
    if v not in _LOG_RETENTION_DAYS:
        raise FieldError((), v, f"a CloudWatch retention: {_LOG_RETENTION_DAYS}")
    return v


# ---------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------


class TagsConfig(_Section):
    """Cost-allocation tags put on every taggable AWS resource."""

    team: str = Field(min_length=1, description="Owning team (tag `team`).")
    cost_center: str = Field(min_length=1, description="Cost center (tag `cost-center`).")
    extra: dict[str, str] = Field(
        default_factory=dict, description="Further tags for every resource."
    )


class NetworkConfig(_Section):
    """The VPC: one private and one public subnet per AZ, NAT, S3 gateway endpoint."""

    vpc_cidr: str = Field("10.0.0.0/16", description="IPv4 CIDR of the VPC.")
    availability_zones: list[str] = Field(
        min_length=2,
        description="AZs to use (EKS needs two or more); subnets are laid out in this order.",
    )
    private_subnet_prefix: int = Field(
        18, ge=16, le=28, description="Prefix length of each private (node and pod) subnet."
    )
    public_subnet_prefix: int = Field(
        24, ge=16, le=28, description="Prefix length of each public subnet."
    )
    nat_gateways: Literal["single", "per_az"] = Field(
        "single",
        description="`single` is cheapest; `per_az` survives the loss of an AZ.",
    )
    s3_gateway_endpoint: bool = Field(
        True, description="Route S3 traffic through a free gateway endpoint instead of NAT."
    )

    @field_validator("vpc_cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        try:
            net = ipaddress.ip_network(v)
        except ValueError as exc:
            raise ValueError(f"not an IPv4 CIDR ({exc}); e.g. 10.0.0.0/16") from None
        if net.version != 4 or not (16 <= net.prefixlen <= 24):
            raise ValueError("must be an IPv4 CIDR between /16 and /24 (VPC limits)")
        if not net.is_private:
            raise ValueError("must be a private (RFC 1918) range, e.g. 10.0.0.0/16")
        return v

    @field_validator("availability_zones")
    @classmethod
    def _zones(cls, v: list[str]) -> list[str]:
        for i, zone in enumerate(v):
            if not _AZ.match(zone):
                raise FieldError((i,), zone, "not an AZ name; e.g. us-east-1a")
        if len(set(v)) != len(v):
            raise ValueError("lists an AZ twice; list each once")
        return v

    @model_validator(mode="after")
    def _fits(self) -> NetworkConfig:
        try:
            self.layout()
        except ValueError as exc:
            raise FieldError(("vpc_cidr",), self.vpc_cidr, str(exc)) from None
        return self

    def layout(self) -> SubnetLayout:
        return plan_subnets(
            self.vpc_cidr,
            self.availability_zones,
            self.private_subnet_prefix,
            self.public_subnet_prefix,
        )


LogType = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]


def _default_log_types() -> list[LogType]:
    return ["api", "audit", "authenticator"]


class ClusterConfig(_Section):
    """The EKS control plane."""

    name: str | None = Field(
        None,
        description="Cluster name; default `<project>-<stack>`.",
        pattern=r"^[a-zA-Z][\w-]{0,99}$",
    )
    version: str = Field(
        default_factory=lambda: catalog().eks.default_version,
        description="Kubernetes minor version; one the catalog lists as supported.",
    )
    endpoint_public_access: bool = Field(
        False, description="Expose the API endpoint publicly (restricted to the CIDRs below)."
    )
    public_access_cidrs: list[str] = Field(
        default_factory=list, description="CIDRs allowed to reach a public endpoint."
    )
    admin_role_arns: list[str] = Field(
        default_factory=list, description="IAM roles given cluster-admin through access entries."
    )
    log_types: list[LogType] = Field(
        default_factory=_default_log_types,
        description="Control-plane log types sent to CloudWatch; must include audit.",
    )
    log_retention_days: int = Field(90, ge=1, description="Retention of control-plane logs.")
    _log_retention = field_validator("log_retention_days")(_cloudwatch_retention)
    support_type: Literal["STANDARD", "EXTENDED"] = Field(
        "STANDARD", description="EXTENDED costs 6x the standard control-plane rate."
    )
    deletion_protection: bool = Field(
        False, description="Refuse to delete the cluster until this is turned off."
    )

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        supported = catalog().eks.supported_versions
        if v not in supported:
            raise ValueError(f"not a supported EKS version; use one of {', '.join(supported)}")
        return v

    @field_validator("public_access_cidrs")
    @classmethod
    def _public_cidrs(cls, v: list[str]) -> list[str]:
        for i, cidr in enumerate(v):
            try:
                net = ipaddress.ip_network(cidr)
            except ValueError:
                raise FieldError((i,), cidr, "not a CIDR; e.g. 203.0.113.0/24") from None
            if net.prefixlen == 0:
                raise FieldError((i,), cidr, "opens the API to the internet; list your CIDRs")
        return v

    @field_validator("admin_role_arns")
    @classmethod
    def _roles(cls, v: list[str]) -> list[str]:
        for i, arn in enumerate(v):
            if not _ROLE_ARN.match(arn):
                raise FieldError(
                    (i,), arn, "not an IAM role ARN; e.g. arn:aws:iam::123456789012:role/admin"
                )
        return v

    @field_validator("log_types")
    @classmethod
    def _audit(cls, v: list[str]) -> list[str]:
        if "audit" not in v:
            raise ValueError("must include audit: who changed what is not optional")
        return v

    @model_validator(mode="after")
    def _public(self) -> ClusterConfig:
        if self.endpoint_public_access and not self.public_access_cidrs:
            raise FieldError(
                ("public_access_cidrs",),
                [],
                "a public endpoint needs the CIDRs allowed to reach it",
            )
        if self.public_access_cidrs and not self.endpoint_public_access:
            raise FieldError(
                ("public_access_cidrs",),
                self.public_access_cidrs,
                "only applies with endpoint_public_access: true",
            )
        return self


class PoolSizes(_Section):
    """Sizes and update settings shared by the system pool and the GPU pools."""

    min_size: int = Field(0, ge=0, description="Fewest nodes.")
    desired_size: int = Field(0, ge=0, description="Nodes at creation; autoscalers move it later.")
    max_size: int = Field(1, ge=1, description="Most nodes (budget and quota cap).")
    disk_size_gib: int = Field(200, ge=50, le=16384, description="Encrypted gp3 root volume size.")
    max_unavailable: int = Field(1, ge=1, description="Nodes replaced at once during updates.")

    @model_validator(mode="after")
    def _sizes(self) -> PoolSizes:
        if self.min_size > self.max_size:
            raise FieldError(
                ("min_size",), self.min_size, f"must not exceed max_size ({self.max_size})"
            )
        if not self.min_size <= self.desired_size <= self.max_size:
            raise FieldError(
                ("desired_size",),
                self.desired_size,
                f"must lie in min_size..max_size ({self.min_size}..{self.max_size})",
            )
        return self


def _known_instance(v: str) -> str:
    if v not in catalog().instances:
        raise ValueError(
            f"not an instance type in the catalog; use one of {_sorted_names(catalog().instances)}"
        )
    return v


class SystemPoolConfig(PoolSizes):
    """The CPU node group for add-ons and controllers (no taint)."""

    instance_type: str = Field("m7i.4xlarge", description="A CPU instance type from the catalog.")
    min_size: int = Field(2, ge=1, description="Fewest nodes; two keep CoreDNS available.")
    desired_size: int = Field(2, ge=1, description="Nodes at creation.")
    max_size: int = Field(4, ge=1, description="Most nodes.")
    disk_size_gib: int = Field(100, ge=20, le=16384, description="Encrypted gp3 root volume size.")

    _instance = field_validator("instance_type")(_known_instance)

    @field_validator("instance_type")
    @classmethod
    def _cpu_only(cls, v: str) -> str:
        if catalog().instance(v).accelerator:
            raise ValueError("is an accelerated type; the system pool runs CPU add-ons only")
        return v


CapacityType = Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"]


class NodePoolConfig(PoolSizes):
    """One accelerated managed node group (`node_pools.<name>`)."""

    instance_type: str = Field(description="An accelerated instance type from the catalog.")
    capacity_type: CapacityType = Field(
        "ON_DEMAND", description="ON_DEMAND, SPOT, or CAPACITY_BLOCK (needs a reservation id)."
    )
    capacity_reservation_id: str | None = Field(
        None,
        description="Capacity block or On-Demand reservation (cr-...) the pool launches into.",
    )
    efa: bool = Field(False, description="Attach every EFA interface the type has.")
    placement_group: bool | None = Field(
        None,
        description=(
            "Cluster placement group; default on for EFA pools without a reservation, "
            "off otherwise (a placement group can starve blocks and reservations)."
        ),
    )
    availability_zones: list[str] | None = Field(
        None,
        description="AZs of the pool's subnets; EFA and reserved pools name exactly one.",
    )
    local_nvme_raid0: bool = Field(
        True,
        description="Assemble the instance-store NVMe disks as RAID0 for containerd and kubelet.",
    )
    auto_repair: bool = Field(True, description="EKS node auto-repair of unhealthy GPU nodes.")
    hugepages_2mi_mib: int | None = Field(
        None,
        ge=0,
        le=65536,
        description=(
            "At least this many MiB of 2 MiB huge pages reserved at boot, never fewer than "
            "the AMI's EFA installer reserves (the fabric test requests 5120; training pods "
            "set FI_EFA_USE_HUGE_PAGE=0 and use none); default 5120 on EFA pools, 0 elsewhere."
        ),
    )
    checkpointing: bool = Field(
        False,
        description=(
            "Jobs on this pool checkpoint and resume (label `llm-platform/checkpointing`); "
            "the policy pack requires it of SPOT pools."
        ),
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="Extra Kubernetes node labels."
    )

    _instance = field_validator("instance_type")(_known_instance)

    @field_validator("instance_type")
    @classmethod
    def _accelerated(cls, v: str) -> str:
        if not catalog().instance(v).accelerator:
            raise ValueError("has no accelerator; CPU nodes belong in system_pool")
        return v

    @field_validator("capacity_reservation_id")
    @classmethod
    def _reservation(cls, v: str | None) -> str | None:
        if v is not None and not _RESERVATION_ID.match(v):
            raise ValueError("not a capacity reservation id; e.g. cr-0123456789abcdef0")
        return v

    @model_validator(mode="after")
    def _coherent(self) -> NodePoolConfig:
        itype = catalog().instance(self.instance_type)
        if self.efa and itype.efa_interfaces == 0:
            with_efa = [
                n for n, t in catalog().instances.items() if t.efa_interfaces and t.accelerator
            ]
            raise FieldError(
                ("efa",),
                True,
                f"{self.instance_type} has no EFA interfaces; set efa: false or use one of "
                f"{_sorted_names(with_efa)}",
            )
        if self.capacity_type == "CAPACITY_BLOCK":
            if itype.capacity_block_usd_per_hour is None:
                raise FieldError(
                    ("capacity_type",),
                    self.capacity_type,
                    f"{self.instance_type} is not sold as a capacity block; use ON_DEMAND or SPOT",
                )
            if self.capacity_reservation_id is None:
                raise FieldError(
                    ("capacity_reservation_id",),
                    _MISSING,
                    "required with capacity_type CAPACITY_BLOCK: the block's id, cr-...",
                )
        if self.capacity_type == "SPOT" and self.capacity_reservation_id is not None:
            raise FieldError(
                ("capacity_reservation_id",),
                self.capacity_reservation_id,
                "spot capacity cannot use a reservation; remove it or use ON_DEMAND",
            )
        zones = self.availability_zones
        if self.efa or self.capacity_reservation_id:
            why = "an EFA pool" if self.efa else "a pool on a reservation"
            if zones is None:
                raise FieldError(
                    ("availability_zones",),
                    _MISSING,
                    f"{why} sits in one subnet: name exactly one AZ",
                )
            if len(zones) != 1:
                raise FieldError(
                    ("availability_zones",),
                    zones,
                    f"{why} must sit in one subnet (one AZ); list exactly one",
                )
        return self

    @property
    def hugepages_2mi_reserved(self) -> int:
        if self.hugepages_2mi_mib is not None:
            return self.hugepages_2mi_mib
        return 5120 if self.efa else 0

    @property
    def uses_placement_group(self) -> bool:
        if self.placement_group is not None:
            return self.placement_group
        return self.efa and self.capacity_reservation_id is None


# ---------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------

TransitionClass = Literal[
    "INTELLIGENT_TIERING", "STANDARD_IA", "ONEZONE_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE"
]
# S3's lifecycle waterfall: an object only moves to a class further down.
_WATERFALL: dict[str, int] = {
    "STANDARD_IA": 1,
    "INTELLIGENT_TIERING": 2,
    "ONEZONE_IA": 3,
    "GLACIER_IR": 4,
    "GLACIER": 5,
    "DEEP_ARCHIVE": 6,
}
_BUCKET_KEY = re.compile(r"^[a-z0-9][a-z0-9-]{0,20}$")
_BUCKET_PREFIX = re.compile(r"^[a-z0-9][a-z0-9-]{2,38}[a-z0-9]$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _namespace_names(v: list[str]) -> list[str]:
    for i, ns in enumerate(v):
        if not _NAMESPACE.match(ns):
            raise FieldError((i,), ns, "not a Kubernetes namespace name (RFC 1123 label)")
    return v


class TransitionStep(_Section):
    """One lifecycle step: after `days`, move objects to `storage_class`."""

    days: int = Field(ge=0, description="Object age in days at which the step applies.")
    storage_class: TransitionClass = Field(description="The S3 storage class to move to.")


class LifecycleRuleConfig(_Section):
    """Tiering and expiry of the objects under one prefix."""

    prefix: str = Field("", description="Key prefix the rule covers; empty for the whole bucket.")
    transitions: list[TransitionStep] = Field(
        default_factory=list, description="Storage-class steps by age, in increasing days."
    )
    expire_days: int | None = Field(
        None, ge=1, description="Delete current versions at this age; none keeps them."
    )

    @model_validator(mode="after")
    def _steps(self) -> LifecycleRuleConfig:
        prices = catalog().storage
        previous: TransitionStep | None = None
        for i, step in enumerate(self.transitions):
            here = ("transitions", i, "days")
            if previous is not None and step.days <= previous.days:
                raise FieldError(
                    here,
                    step.days,
                    f"transitions must be in increasing days; step {i - 1} is at "
                    f"{previous.days} days",
                )
            if step.storage_class in ("STANDARD_IA", "ONEZONE_IA") and (
                step.days < prices.min_days_before_ia
            ):
                raise FieldError(
                    here,
                    step.days,
                    f"S3 moves objects to {step.storage_class} only after "
                    f"{prices.min_days_before_ia} days; use {prices.min_days_before_ia} or more",
                )
            if previous is not None:
                self._check_move(i, previous, step)
            previous = step
        if previous is not None and self.expire_days is not None:
            self._check_held(previous, self.expire_days, ("expire_days",), "expiry")
        return self

    def _check_move(self, i: int, previous: TransitionStep, step: TransitionStep) -> None:
        here = ("transitions", i, "storage_class")
        before, after = previous.storage_class, step.storage_class
        if _WATERFALL[after] <= _WATERFALL[before] or (before, after) == (
            "ONEZONE_IA",
            "GLACIER_IR",
        ):
            raise FieldError(
                here,
                after,
                f"S3 cannot move objects from {before} to {after}; "
                "steps go Standard-IA, Intelligent-Tiering, One Zone-IA, Glacier IR, "
                "Glacier, Deep Archive",
            )
        self._check_held(previous, step.days, ("transitions", i, "days"), f"the move to {after}")

    def _check_held(
        self, previous: TransitionStep, days: int, path: tuple[str | int, ...], what: str
    ) -> None:
        minimum = catalog().storage.min_storage_days.get(previous.storage_class)
        if minimum is not None and days - previous.days < minimum:
            raise FieldError(
                path,
                days,
                f"{previous.storage_class} bills at least {minimum} days, so {what} before day "
                f"{previous.days + minimum} pays for storage it no longer has",
            )


class BucketConfig(_Section):
    """One S3 bucket (`storage.buckets.<name>`): encrypted, private, TLS-only, logged."""

    precious: bool = Field(
        False,
        description=(
            "Versioned, never force-destroyed, retained when the stack is deleted "
            "(checkpoints, models)."
        ),
    )
    versioning: bool | None = Field(None, description="Object versioning; default: `precious`.")
    replicate: bool = Field(
        False, description="Replicate to `storage.replication.region` (needs versioning)."
    )
    lifecycle: list[LifecycleRuleConfig] = Field(
        default_factory=list, description="Tiering and expiry rules by prefix."
    )
    noncurrent_version_expire_days: int = Field(
        30, ge=1, description="Delete overwritten or deleted versions after this many days."
    )
    abort_incomplete_multipart_days: int = Field(
        7, ge=1, description="Abort multipart uploads left incomplete this long."
    )
    initial_gb: float = Field(0, ge=0, description="Data present at creation (cost model).")
    daily_write_gb: float = Field(0, ge=0, description="New data per day (cost model).")
    average_object_mb: float = Field(
        64, gt=0, description="Typical object size (cost model: requests, monitoring)."
    )

    @model_validator(mode="after")
    def _versioning(self) -> BucketConfig:
        if self.precious and self.versioning is False:
            raise FieldError(
                ("versioning",), False, "a precious bucket is versioned; remove versioning: false"
            )
        if self.replicate and not self.versioned:
            raise FieldError(
                ("replicate",), True, "S3 replicates only versioned buckets; set versioning: true"
            )
        prefixes = [rule.prefix for rule in self.lifecycle]
        for i, prefix in enumerate(prefixes):
            if prefixes.index(prefix) != i:
                raise FieldError(
                    ("lifecycle", i, "prefix"), prefix, "another rule covers this prefix already"
                )
        return self

    @property
    def versioned(self) -> bool:
        return self.precious if self.versioning is None else self.versioning


class ReplicationConfig(_Section):
    """Cross-region replication of the buckets marked `replicate`."""

    region: str | None = Field(None, description="Disaster-recovery region of the replicas.")
    replicate_delete_markers: bool = Field(
        False, description="Replicate deletes too (off: a deleted checkpoint survives in DR)."
    )
    time_control: bool = Field(
        False, description="S3 Replication Time Control: 15-minute SLA, billed per GB."
    )

    @field_validator("region")
    @classmethod
    def _region(cls, v: str | None) -> str | None:
        return v if v is None else _known_region(v)


_KMS_KEY_ARN = re.compile(
    r"^arn:aws[a-z-]*:kms:(?P<region>[a-z0-9-]+):\d{12}:key/(?P<id>(mrk-)?[0-9a-f-]{32,36})$"
)
_S3_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class AdoptionConfig(_Section):
    """Existing buckets this stack takes over instead of creating them empty.

    Disaster recovery: the source stack's replicas in this region become this
    stack's buckets. They are imported (Pulumi `import`), protected and retained,
    so no `pulumi up` or `pulumi destroy` of this stack can delete them.
    """

    kms_key_arn: str | None = Field(
        None,
        description=(
            "KMS key that encrypts the adopted buckets' objects (the source stack's replica "
            "key, output `dr_replicas`); imported and used as this stack's storage key. "
            "Must be set before deploying: without it the stack fails with one config error."
        ),
    )
    buckets: dict[str, str] = Field(
        min_length=1,
        description="Bucket key (in storage.buckets) -> name of the existing bucket to adopt.",
    )

    @field_validator("kms_key_arn")
    @classmethod
    def _key_arn(cls, v: str | None) -> str | None:
        if v is not None and not _KMS_KEY_ARN.match(v):
            raise ValueError(
                "not a KMS key ARN; e.g. arn:aws:kms:us-west-2:123456789012:key/"
                "0123abcd-0123-4567-89ab-0123456789ab (the source's output dr_replicas, or "
                "aws kms describe-key --key-id alias/<prefix>-s3-replica)"
            )
        return v

    @field_validator("buckets")
    @classmethod
    def _names(cls, v: dict[str, str]) -> dict[str, str]:
        for key, name in v.items():
            if not isinstance(name, str) or not _S3_BUCKET_NAME.match(name) or ".." in name:
                raise FieldError((key,), name, "not an S3 bucket name (3-63 lowercase, digits, -)")
        return v

    @model_validator(mode="after")
    def _key_given(self) -> AdoptionConfig:
        # Optional only to say, when it is missing, where to find it.
        if self.kms_key_arn is None:
            raise FieldError(
                ("kms_key_arn",),
                _MISSING,
                "required: the KMS key of the adopted buckets' objects (the source's replica "
                "key): the source stack's output dr_replicas, or aws kms describe-key --region "
                "<this region> --key-id alias/<source prefix>-s3-replica --query KeyMetadata.Arn",
            )
        return self

    def _key_match(self) -> re.Match[str]:
        match = _KMS_KEY_ARN.match(self.kms_key_arn or "")
        assert match is not None  # validated above
        return match

    @property
    def kms_key_region(self) -> str:
        return self._key_match()["region"]

    @property
    def kms_key_id(self) -> str:
        """The key's id (the ARN's last part): what Pulumi imports a key by."""
        return self._key_match()["id"]


class LustreConfig(_Section):
    """FSx for Lustre (PERSISTENT_2) beside a GPU pool, linked to the datasets and
    checkpoints buckets."""

    node_pool: str = Field(description="GPU pool whose subnet (one AZ) holds the file system.")
    storage_capacity_gib: int = Field(1200, description="1200 GiB or a multiple of 2400 GiB.")
    throughput_per_tib: Literal[125, 250, 500, 1000] = Field(
        125, description="MB/s per TiB of storage (PERSISTENT_2 tiers)."
    )
    compression: Literal["LZ4", "NONE"] = Field("LZ4", description="Data compression.")
    metadata_mode: Literal["AUTOMATIC", "USER_PROVISIONED"] = Field(
        "AUTOMATIC", description="Metadata IOPS: sized by FSx, or `metadata_iops`."
    )
    metadata_iops: int | None = Field(
        None, description="With USER_PROVISIONED: 1500, 3000, 6000, or a multiple of 12000."
    )
    lustre_version: Literal["2.15", "2.12"] = Field("2.15", description="Lustre version.")
    datasets_bucket: str = Field("datasets", description="Bucket imported at /datasets.")
    datasets_prefix: str = Field("", description="Prefix of that bucket imported.")
    checkpoints_bucket: str = Field("checkpoints", description="Bucket exported from /checkpoints.")
    checkpoints_prefix: str = Field("", description="Prefix checkpoints are exported to.")
    mount_namespaces: list[str] = Field(
        default_factory=lambda: ["training"],
        description="Namespaces that get a PVC bound to the file system.",
    )
    automatic_backup_retention_days: int = Field(
        7, ge=0, le=90, description="Daily backups kept; a final backup is taken on delete."
    )
    log_retention_days: int = Field(
        90,
        description="Retention of the file system's log group (failed S3 imports and exports).",
    )

    @field_validator("storage_capacity_gib")
    @classmethod
    def _capacity(cls, v: int) -> int:
        if v != 1200 and (v <= 0 or v % 2400):
            raise ValueError("PERSISTENT_2 takes 1200 GiB or a multiple of 2400 GiB")
        return v

    _namespaces = field_validator("mount_namespaces")(_namespace_names)

    _log_retention = field_validator("log_retention_days")(_cloudwatch_retention)

    @model_validator(mode="after")
    def _metadata(self) -> LustreConfig:
        iops = self.metadata_iops
        if self.metadata_mode == "AUTOMATIC" and iops is not None:
            raise FieldError(
                ("metadata_iops",), iops, "only applies with metadata_mode: USER_PROVISIONED"
            )
        if self.metadata_mode == "USER_PROVISIONED":
            valid = iops in (1500, 3000, 6000) or (
                iops is not None and iops % 12000 == 0 and 12000 <= iops <= 192000
            )
            if not valid:
                raise FieldError(
                    ("metadata_iops",),
                    _MISSING if iops is None else iops,
                    "USER_PROVISIONED needs 1500, 3000, 6000, or a multiple of 12000 up to 192000",
                )
        return self


class ModelWeightsConfig(_Section):
    """Model weights served straight from S3 through the Mountpoint for S3 CSI driver."""

    bucket: str = Field("models", description="Bucket holding the model revisions.")
    prefix: str = Field("", description="Prefix mounted (read-only).")
    namespaces: list[str] = Field(
        default_factory=lambda: ["serving"],
        description="Namespaces that get a read-only PVC of the weights.",
    )

    _namespaces = field_validator("namespaces")(_namespace_names)


class StorageConfig(_Section):
    """S3 buckets, cross-region replication, FSx for Lustre and the CSI volumes."""

    bucket_name_prefix: str = Field(
        description="Globally unique prefix of bucket names: `<prefix>-<bucket>`."
    )
    buckets: dict[str, BucketConfig] = Field(
        default_factory=dict, description="Buckets by name; `logs` receives access logs."
    )
    replication: ReplicationConfig = Field(default_factory=ReplicationConfig)
    lustre: LustreConfig | None = Field(None, description="FSx for Lustre; none: no file system.")
    model_weights: ModelWeightsConfig | None = Field(
        None, description="Mount model weights from S3; none: no Mountpoint volumes."
    )
    adoption: AdoptionConfig | None = Field(
        None,
        description=(
            "Existing buckets to adopt (imported, protected) instead of creating them: "
            "a disaster-recovery stack's replicas (`llmp dr plan` writes it); none: create all."
        ),
    )

    @field_validator("bucket_name_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not _BUCKET_PREFIX.match(v) or "--" in v:
            raise ValueError(
                "bucket names take lowercase letters, digits and '-': 4 to 40 characters, "
                "e.g. acme-llm-pretrain"
            )
        return v

    @field_validator("buckets")
    @classmethod
    def _keys(cls, v: dict[str, BucketConfig]) -> dict[str, BucketConfig]:
        for key in v:
            if not _BUCKET_KEY.match(key):
                raise FieldError((key,), key, "bucket keys are lowercase letters, digits and '-'")
        if v and "logs" not in v:
            raise ValueError("declare a `logs` bucket: every bucket sends its access logs there")
        if v.get("logs") and v["logs"].replicate:
            raise FieldError(("logs", "replicate"), True, "access logs are not replicated")
        return v

    def bucket_name(self, key: str) -> str:
        """The bucket's physical name: the adopted bucket's, else `<prefix>-<key>`."""
        if self.adoption is not None and key in self.adoption.buckets:
            return self.adoption.buckets[key]
        return f"{self.bucket_name_prefix}-{key}"

    def adopted(self, key: str) -> bool:
        return self.adoption is not None and key in self.adoption.buckets


class GuardrailsConfig(_Section):
    """Limits the policy pack enforces on this stack."""

    gpu_budget_usd_per_hour: float | None = Field(
        None,
        gt=0,
        description=(
            "Most the accelerated pools may cost per hour at their max sizes "
            "(catalog prices); none: no cap."
        ),
    )


# ---------------------------------------------------------------------------
# The whole stack
# ---------------------------------------------------------------------------


_TENANT_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")
_RESERVED_NAMESPACES = frozenset(
    {
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "kueue-system",
        "kubeflow",
        "gpu-operator",
        "monitoring",
    }
)
_S3_PREFIX = re.compile(r"^[A-Za-z0-9!_.'()-]+(/[A-Za-z0-9!_.'()-]+)*/$")


class TenantConfig(_Section):
    """One team's share of the cluster (`tenants.<name>`): a namespace, quotas, a queue, a role."""

    gpu_quota: dict[str, int] = Field(
        default_factory=dict,
        description="GPUs per node pool the tenant is guaranteed (Kueue nominal quota).",
    )
    serving_gpus: dict[str, int] = Field(
        default_factory=dict,
        description=(
            "GPUs per node pool for services outside Kueue (model servers): in the namespace "
            "quota, and kept out of the queues' capacity."
        ),
    )
    cpu: int = Field(ge=1, description="vCPUs the namespace may request in total.")
    memory_gib: int = Field(ge=1, description="Memory (GiB) the namespace may request in total.")
    pvcs: int = Field(8, ge=0, description="PersistentVolumeClaims the namespace may hold.")
    admin_role_arn: str | None = Field(
        None,
        description="IAM role mapped to the tenant's Kubernetes group (EKS access entry).",
    )
    s3_prefixes: list[str] = Field(
        default_factory=list,
        description=(
            "Key prefixes (ending in /) the tenant's `training` service account reads and "
            "writes in the datasets and checkpoints buckets."
        ),
    )

    @field_validator("gpu_quota", "serving_gpus")
    @classmethod
    def _quota(cls, v: dict[str, int]) -> dict[str, int]:
        for pool, gpus in v.items():
            if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
                raise FieldError((pool,), gpus, "a GPU count: a whole number, 0 or more")
        return v

    @field_validator("admin_role_arn")
    @classmethod
    def _role(cls, v: str | None) -> str | None:
        if v is not None and not _ROLE_ARN.match(v):
            raise ValueError("not an IAM role ARN; e.g. arn:aws:iam::123456789012:role/team")
        return v

    @field_validator("s3_prefixes")
    @classmethod
    def _prefixes(cls, v: list[str]) -> list[str]:
        for i, prefix in enumerate(v):
            if not _S3_PREFIX.match(prefix):
                raise FieldError(
                    (i,), prefix, "a key prefix like teams/foundation/ (no *, ending in /)"
                )
        return v


class AddonsConfig(_Section):
    """Cluster add-ons (Helm charts and operators pinned in the catalog), each on by default."""

    gpu_operator: bool = Field(
        True, description="NVIDIA GPU operator (device plugin, DCGM exporter; no driver/toolkit)."
    )
    efa_device_plugin: bool = Field(True, description="EFA device plugin on EFA nodes.")
    kueue: bool = Field(True, description="Kueue: quotas, queues and preemption for jobs.")
    training_operator: bool = Field(
        True, description="Kubeflow training-operator (PyTorchJob with elastic torchrun)."
    )
    load_balancer_controller: bool = Field(
        True, description="AWS Load Balancer Controller (Pod Identity role)."
    )
    metrics_server: bool = Field(True, description="metrics-server (kubectl top, HPA).")


_DURATION = re.compile(r"^[0-9]+(ms|s|m|h|d|w|y)$")


class AlertThresholds(_Section):
    """Alert thresholds of the PrometheusRules (monitoring/rules.py)."""

    gpu_idle_util_percent: float = Field(
        10, gt=0, le=100, description="GPU utilisation (%) under which a training GPU is idle."
    )
    gpu_idle_seconds: int = Field(60, ge=30, description="How long a training GPU may stay idle.")
    gpu_temp_warning_c: float = Field(80, gt=0, description="GPU temperature warning (5 min).")
    gpu_temp_critical_c: float = Field(85, gt=0, description="GPU temperature critical (1 min).")
    nvlink_errors: float = Field(10, ge=0, description="NVLink replay/recovery/CRC errors per 5m.")
    fsx_used_ratio: float = Field(0.8, gt=0, lt=1, description="FSx volume fullness that alerts.")
    fsx_export_age_seconds: int = Field(
        1800,
        ge=60,
        description=(
            "Age (seconds) of the oldest file queued for auto-export to S3 that alerts: files "
            "not yet in S3 are what a disaster loses (default: 3x the catalog's export lag)."
        ),
    )
    checkpoint_interval_seconds: int = Field(
        1800, ge=60, description="Expected checkpoint interval; alert at twice this age."
    )
    throughput_drop_ratio: float = Field(
        0.2, gt=0, lt=1, description="Tokens/s this far below the job's 1h median alerts."
    )
    straggler_ratio: float = Field(
        1.2, gt=1, description="A rank's step time over this multiple of the job median."
    )
    inference_p99_seconds: float = Field(
        10, gt=0, description="Inference SLO: p99 end-to-end request latency (seconds)."
    )
    inference_availability: float = Field(
        0.999, gt=0, lt=1, description="Inference SLO: share of successful requests."
    )


class MonitoringConfig(_Section):
    """Metrics (kube-prometheus-stack), logs (Fluent Bit to CloudWatch), traces (OTel)."""

    enabled: bool = Field(True, description="Prometheus, Grafana, alert rules and monitors.")
    retention: str = Field("15d", description="Prometheus TSDB retention (a Prometheus duration).")
    storage_gib: int = Field(100, ge=10, le=16384, description="Prometheus gp3 volume size.")
    grafana: bool = Field(True, description="Grafana with the platform dashboards.")
    logs: bool = Field(True, description="Fluent Bit shipping container logs to CloudWatch.")
    log_retention_days: int = Field(30, description="Retention of the container log group.")
    traces: bool = Field(True, description="OpenTelemetry collector for traces.")
    traces_exporter: Literal["xray", "otlp"] = Field("xray", description="Where traces go.")
    otlp_endpoint: str | None = Field(None, description="OTLP endpoint when exporter is otlp.")
    alerts: AlertThresholds = Field(default_factory=AlertThresholds)

    @field_validator("retention")
    @classmethod
    def _retention(cls, v: str) -> str:
        if not _DURATION.match(v):
            raise FieldError((), v, "a Prometheus duration such as 15d or 12h")
        return v

    _log_retention = field_validator("log_retention_days")(_cloudwatch_retention)

    @model_validator(mode="after")
    def _exporter(self) -> MonitoringConfig:
        if self.traces and self.traces_exporter == "otlp" and not self.otlp_endpoint:
            raise FieldError(("otlp_endpoint",), None, "required when traces_exporter is otlp")
        if self.alerts.gpu_temp_warning_c >= self.alerts.gpu_temp_critical_c:
            raise FieldError(
                ("alerts", "gpu_temp_warning_c"),
                self.alerts.gpu_temp_warning_c,
                "must be below gpu_temp_critical_c",
            )
        return self


_MODEL_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")
_CLIENT_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")
_REVISION = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
_CERT_ARN = re.compile(r"^arn:aws[a-z-]*:acm:[a-z0-9-]+:\d{12}:certificate/[0-9a-f-]{36}$")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
_HOUR = re.compile(r"^([01]?\d|2[0-3]) \* \* [0-7*,-]+$")


class ServingModelConfig(_Section):
    """One served model (`serving.models[]`): a vLLM Deployment, Service, PDB and ScaledObject."""

    name: str = Field(description="Model name: the Deployment's name and the API path `/<name>/`.")
    revision: str = Field(
        description="Path of the revision under the mounted models prefix (read-only).",
    )
    node_pool: str = Field(description="GPU pool the replicas run on (one of node_pools).")
    gpus_per_replica: int = Field(
        1, ge=1, le=16, description="GPUs per replica = vLLM tensor parallel size."
    )
    min_replicas: int = Field(1, ge=0, description="Replicas kept inside serving hours.")
    max_replicas: int = Field(2, ge=1, description="Most replicas under load.")
    max_model_len: int = Field(8192, ge=128, le=1048576, description="vLLM --max-model-len.")
    quantization: Literal["none", "awq", "gptq", "fp8"] = Field(
        "none", description="vLLM --quantization; none serves the weights as stored."
    )
    target_waiting_requests: int = Field(
        4, ge=1, description="Queued requests per replica at which KEDA adds a replica."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _MODEL_NAME.match(v):
            raise ValueError("lowercase letters, digits and '-', up to 40, starting with a letter")
        return v

    @field_validator("revision")
    @classmethod
    def _revision(cls, v: str) -> str:
        if not _REVISION.match(v) or any(part in (".", "..") for part in v.split("/")):
            raise ValueError("a relative path like llama-3-8b/2026-10-01 (no .., no leading /)")
        return v

    @model_validator(mode="after")
    def _replicas(self) -> ServingModelConfig:
        if self.min_replicas > self.max_replicas:
            raise FieldError(
                ("min_replicas",),
                self.min_replicas,
                f"must not exceed max_replicas ({self.max_replicas})",
            )
        return self


class ServingScheduleConfig(_Section):
    """Serving hours: KEDA's cron trigger keeps min_replicas inside, zero outside."""

    timezone: str = Field("UTC", description="IANA time zone of the hours, e.g. Europe/Paris.")
    start: str = Field("0 7 * * 1-5", description="Cron (minute hour * * weekdays) of opening.")
    end: str = Field("0 20 * * 1-5", description="Cron of closing.")

    @field_validator("start", "end")
    @classmethod
    def _cron(cls, v: str) -> str:
        minute, _, rest = v.partition(" ")
        if not minute.isdigit() or int(minute) > 59 or not _HOUR.match(rest):
            raise ValueError("a daily cron 'M H * * DAYS', e.g. 0 7 * * 1-5")
        return v

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        from zoneinfo import ZoneInfo

        try:
            ZoneInfo(v)
        except Exception:
            raise ValueError("not an IANA time zone; e.g. UTC or Europe/Paris") from None
        return v


class ServingApiConfig(_Section):
    """Who may call the API: client names (keys are secret config) and rate limits."""

    clients: list[str] = Field(
        min_length=1,
        description=(
            "API clients; each key is the secret config `llm-platform-serving:<client>` "
            "(`pulumi config set --secret`); a client without one is refused."
        ),
    )
    rate_limit_per_key: int = Field(
        2000, ge=10, description="WAF: requests per 5 minutes per API key before blocking."
    )
    rate_limit_per_ip: int = Field(
        6000, ge=10, description="WAF: requests per 5 minutes per source IP before blocking."
    )

    @field_validator("clients")
    @classmethod
    def _clients(cls, v: list[str]) -> list[str]:
        for i, client in enumerate(v):
            if not _CLIENT_NAME.match(client):
                raise FieldError((i,), client, "lowercase letters, digits and '-', up to 32")
        if len(set(v)) != len(v):
            raise ValueError("lists a client twice; list each once")
        return v


class ServingConfig(_Section):
    """Online model serving (vLLM) behind an authenticating gateway, an ALB and a WAF."""

    models: list[ServingModelConfig] = Field(min_length=1, description="Served models.")
    hostname: str = Field(description="DNS name of the API (the ALB's rule host).")
    certificate_arn: str = Field(description="ACM certificate ARN of `hostname` (HTTPS only).")
    scheme: Literal["internet-facing", "internal"] = Field(
        "internal", description="ALB scheme: internal (VPC only) or internet-facing."
    )
    prometheus_url: str = Field(
        "http://kube-prometheus-stack-prometheus.monitoring:9090",
        description="Prometheus that KEDA queries for vLLM's queue metrics.",
    )
    schedule: ServingScheduleConfig | None = Field(
        None, description="Serving hours; none: always at least min_replicas."
    )
    api: ServingApiConfig

    @field_validator("hostname")
    @classmethod
    def _hostname(cls, v: str) -> str:
        if not _HOSTNAME.match(v):
            raise ValueError("a lowercase DNS name, e.g. llm.example.com")
        return v

    @field_validator("certificate_arn")
    @classmethod
    def _cert(cls, v: str) -> str:
        if not _CERT_ARN.match(v):
            raise ValueError(
                "not an ACM certificate ARN; e.g. arn:aws:acm:us-east-1:123456789012:"
                "certificate/0123abcd-0123-4567-89ab-0123456789ab"
            )
        return v

    @field_validator("prometheus_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^https?://[A-Za-z0-9.-]+(:\d+)?(/\S*)?$", v):
            raise ValueError("an http(s) URL, e.g. http://prometheus.monitoring:9090")
        return v

    @field_validator("models")
    @classmethod
    def _unique(cls, v: list[ServingModelConfig]) -> list[ServingModelConfig]:
        names = [m.name for m in v]
        for i, name in enumerate(names):
            if names.index(name) != i:
                raise FieldError((i, "name"), name, "another model has this name")
        return v


class PlatformConfig(_Section):
    """Everything under the `llm-platform:` namespace, plus `aws:region`."""

    region: str = Field(description="`aws:region`: the region the stack deploys to.")
    tags: TagsConfig
    network: NetworkConfig
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    system_pool: SystemPoolConfig = Field(default_factory=SystemPoolConfig)
    node_pools: dict[str, NodePoolConfig] = Field(
        default_factory=dict, description="Accelerated node groups by name."
    )
    storage: StorageConfig | None = Field(None, description="Buckets and file systems.")
    guardrails: GuardrailsConfig = Field(default_factory=lambda: GuardrailsConfig())
    addons: AddonsConfig = Field(default_factory=AddonsConfig)
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)
    tenants: dict[str, TenantConfig] = Field(
        default_factory=dict, description="Teams by name; each name is also its namespace."
    )
    serving: ServingConfig | None = Field(
        None, description="Model serving (inference stack); none: no model servers."
    )

    _region = field_validator("region")(_known_region)

    @field_validator("tenants")
    @classmethod
    def _tenant_names(cls, v: dict[str, TenantConfig]) -> dict[str, TenantConfig]:
        for name in v:
            if not _TENANT_NAME.match(name):
                raise FieldError(
                    (name,),
                    name,
                    "tenant names are namespace names: lowercase letters, digits and '-', "
                    "up to 32, starting with a letter",
                )
            if name in _RESERVED_NAMESPACES:
                raise FieldError(
                    (name,),
                    name,
                    f"is a system namespace; reserved: {_sorted_names(_RESERVED_NAMESPACES)}",
                )
        return v

    @field_validator("node_pools")
    @classmethod
    def _pool_names(cls, v: dict[str, NodePoolConfig]) -> dict[str, NodePoolConfig]:
        for name in v:
            if not _POOL_NAME.match(name):
                raise FieldError(
                    (name,), name, "pool names are lowercase letters, digits and '-', up to 31"
                )
        return v

    @model_validator(mode="after")
    def _placement(self) -> PlatformConfig:
        zones = self.network.availability_zones
        for i, zone in enumerate(zones):
            if not zone.startswith(self.region):
                raise FieldError(
                    ("network", "availability_zones", i),
                    zone,
                    f"is not in {REGION_KEY} {self.region}",
                )
        for name, pool in self.node_pools.items():
            for i, zone in enumerate(pool.availability_zones or []):
                if zone not in zones:
                    raise FieldError(
                        ("node_pools", name, "availability_zones", i),
                        zone,
                        f"not one of network.availability_zones ({', '.join(zones)})",
                    )
        if self.storage is not None:
            self._storage_refs(self.storage)
        self._tenant_refs()
        if self.serving is not None:
            self._serving_refs(self.serving)
        return self

    def pool_gpus(self, pool_name: str) -> int:
        """GPUs the pool supplies at its max size."""
        pool = self.node_pools[pool_name]
        return catalog().instance(pool.instance_type).gpu_count * pool.max_size

    def _serving_refs(self, serving: ServingConfig) -> None:
        for i, model in enumerate(serving.models):
            here: tuple[str | int, ...] = ("serving", "models", i)
            pool = self.node_pools.get(model.node_pool)
            if pool is None:
                raise FieldError(
                    (*here, "node_pool"),
                    model.node_pool,
                    _not_in("pool", "node_pools", self.node_pools),
                )
            gpus = catalog().instance(pool.instance_type).gpu_count
            if model.gpus_per_replica > gpus:
                raise FieldError(
                    (*here, "gpus_per_replica"),
                    model.gpus_per_replica,
                    f"a replica stays on one node; {pool.instance_type} of pool "
                    f"{model.node_pool} has {gpus} GPUs",
                )
            if gpus % model.gpus_per_replica:
                raise FieldError(
                    (*here, "gpus_per_replica"),
                    model.gpus_per_replica,
                    f"must divide the {gpus} GPUs of {pool.instance_type} (tensor parallel size)",
                )
        self._serving_capacity(serving)
        cert_region = serving.certificate_arn.split(":")[3]
        if cert_region != self.region:
            raise FieldError(
                ("serving", "certificate_arn"),
                serving.certificate_arn,
                f"is a certificate of {cert_region}; an ALB in {self.region} takes an ACM "
                f"certificate of its own region: request or import one in {self.region}",
            )
        weights = self.storage.model_weights if self.storage else None
        if weights is None or "serving" not in weights.namespaces:
            raise FieldError(
                ("serving",),
                "models",
                "serves weights from the model-weights volume: set storage.model_weights "
                "with namespaces including serving",
            )
        if "serving" not in self.tenants:
            raise FieldError(
                ("serving",), "models", "runs in the `serving` tenant: declare tenants.serving"
            )
        self._serving_quota(serving)
        if not self.addons.load_balancer_controller:
            raise FieldError(
                ("addons", "load_balancer_controller"),
                False,
                "serving's Ingress needs the AWS Load Balancer Controller; set it to true",
            )

    @staticmethod
    def _serving_demand(serving: ServingConfig) -> dict[str, tuple[list[int], int, str]]:
        """Pool -> (indexes of its models, GPUs they need at max_replicas, their list).

        The list reads `llama-8b 8 x 1, llama-70b 4 x 4`: max_replicas x gpus_per_replica.
        """
        on_pool: dict[str, list[int]] = {}
        for i, model in enumerate(serving.models):
            on_pool.setdefault(model.node_pool, []).append(i)
        demand = {}
        for pool_name, indexes in on_pool.items():
            models = [serving.models[i] for i in indexes]
            need = sum(m.max_replicas * m.gpus_per_replica for m in models)
            text = ", ".join(f"{m.name} {m.max_replicas} x {m.gpus_per_replica}" for m in models)
            demand[pool_name] = (indexes, need, text)
        return demand

    def _serving_capacity(self, serving: ServingConfig) -> None:
        """The replicas of a pool's models fit on the pool at its max size."""
        for pool_name, (indexes, need, models) in self._serving_demand(serving).items():
            have = self.pool_gpus(pool_name)
            if need > have:
                last = indexes[-1]
                raise FieldError(
                    ("serving", "models", last, "max_replicas"),
                    serving.models[last].max_replicas,
                    f"the models on pool {pool_name} need up to {need} GPUs at max_replicas "
                    f"(replicas x GPUs: {models}), but {pool_name} has {have} at max_size; "
                    f"lower max_replicas or raise node_pools.{pool_name}.max_size",
                )

    def _serving_quota(self, serving: ServingConfig) -> None:
        """The replicas of a pool's models fit in the `serving` tenant's GPUs of that pool.

        Model servers are Deployments in the `serving` namespace, outside Kueue:
        its ResourceQuota (serving_gpus) would refuse the pods beyond it at run time.
        """
        granted = self.tenants["serving"].serving_gpus
        for pool_name, (_, need, models) in self._serving_demand(serving).items():
            have = granted.get(pool_name)
            if need > (have or 0):
                raise FieldError(
                    ("tenants", "serving", "serving_gpus", pool_name),
                    _MISSING if have is None else have,
                    f"the models on pool {pool_name} need up to {need} GPUs at max_replicas "
                    f"(replicas x GPUs: {models}), but the serving namespace's quota holds "
                    f"{have or 0} of {pool_name} and would refuse the pods beyond; set it to "
                    f"{need} or lower max_replicas",
                )

    def _tenant_refs(self) -> None:
        pools = self.node_pools
        promised: dict[str, int] = {}
        for name, tenant in self.tenants.items():
            claims = [("gpu_quota", p, n) for p, n in tenant.gpu_quota.items()]
            claims += [("serving_gpus", p, n) for p, n in tenant.serving_gpus.items()]
            for key, pool, gpus in claims:
                if pool not in pools:
                    raise FieldError(
                        ("tenants", name, key, pool),
                        pool,
                        _not_in("pool", "node_pools", pools),
                    )
                promised[pool] = promised.get(pool, 0) + gpus
                if promised[pool] > self.pool_gpus(pool):
                    raise FieldError(
                        ("tenants", name, key, pool),
                        gpus,
                        f"tenants are promised {promised[pool]} GPUs of {pool}, which supplies "
                        f"{self.pool_gpus(pool)} at max_size; lower the quotas or raise max_size",
                    )
            if tenant.s3_prefixes:
                buckets = self.storage.buckets if self.storage else {}
                missing = [b for b in TENANT_BUCKETS if b not in buckets]
                if missing:
                    raise FieldError(
                        ("tenants", name, "s3_prefixes"),
                        tenant.s3_prefixes,
                        f"needs storage.buckets {' and '.join(missing)}; remove the prefixes "
                        "or add the buckets",
                    )

    def _storage_refs(self, storage: StorageConfig) -> None:
        buckets = storage.buckets
        replicated = [k for k, b in buckets.items() if b.replicate]
        target = storage.replication.region
        if replicated and target is None:
            raise FieldError(
                ("storage", "replication", "region"),
                _MISSING,
                f"buckets {', '.join(replicated)} replicate: name the disaster-recovery region",
            )
        if target is not None and target == self.region:
            raise FieldError(
                ("storage", "replication", "region"),
                target,
                f"is the stack's own region; replicate to another region than {self.region}",
            )
        if storage.adoption is not None:
            self._adoption_refs(storage, storage.adoption)
        refs: list[tuple[tuple[str | int, ...], str]] = []
        if storage.lustre is not None:
            lustre = storage.lustre
            refs += [
                (("storage", "lustre", "datasets_bucket"), lustre.datasets_bucket),
                (("storage", "lustre", "checkpoints_bucket"), lustre.checkpoints_bucket),
            ]
            pool = self.node_pools.get(lustre.node_pool)
            if pool is None:
                raise FieldError(
                    ("storage", "lustre", "node_pool"),
                    lustre.node_pool,
                    _not_in("pool", "node_pools", self.node_pools),
                )
            if len(self.pool_zones(pool)) != 1:
                raise FieldError(
                    ("storage", "lustre", "node_pool"),
                    lustre.node_pool,
                    "spans several AZs; the file system sits in one subnet beside one "
                    "single-AZ pool",
                )
        if storage.model_weights is not None:
            refs.append((("storage", "model_weights", "bucket"), storage.model_weights.bucket))
        for path, key in refs:
            if key not in buckets:
                raise FieldError(path, key, _not_in("bucket", "storage.buckets", buckets))

    def _adoption_refs(self, storage: StorageConfig, adoption: AdoptionConfig) -> None:
        here = ("storage", "adoption")
        if adoption.kms_key_region != self.region:
            raise FieldError(
                (*here, "kms_key_arn"),
                adoption.kms_key_arn,
                f"is a key in {adoption.kms_key_region}; adopted buckets in {self.region} are "
                f"encrypted with a key of {self.region} (the source's replica key)",
            )
        for key in adoption.buckets:
            if key not in storage.buckets:
                raise FieldError(
                    (*here, "buckets", key),
                    key,
                    _not_in("bucket", "storage.buckets", storage.buckets),
                )
            if key == "logs":
                raise FieldError(
                    (*here, "buckets", key),
                    key,
                    "the logs bucket is never replicated; let the stack create its own",
                )
        # Two Bucket resources on one physical bucket would import it twice and fight
        # over its lifecycle and policy.
        named: dict[str, str] = {}
        for key in storage.buckets:
            name = storage.bucket_name(key)
            if name in named:
                adopted = key if storage.adopted(key) else named[name]
                other = named[name] if adopted == key else key
                raise FieldError(
                    (*here, "buckets", adopted),
                    name,
                    f"is already the name of bucket {other}; adopt each replica into one "
                    "bucket only",
                )
            named[name] = key

    def pool_zones(self, pool: NodePoolConfig) -> list[str]:
        return pool.availability_zones or list(self.network.availability_zones)


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def load_config(raw: Mapping[str, Any], secret_keys: Iterable[str] = ()) -> PlatformConfig:
    """Validate a flat Pulumi config map (`{"llm-platform:network": {...}, "aws:region": ...}`).

    Values may be objects (a stack file read as YAML) or JSON strings (what the
    Pulumi engine hands the program). Raises ConfigError, which reports every
    problem found: keys outside CONFIG_NAMESPACES first, then the schema's. The
    values of `secret_keys` (decrypted secrets) never appear in an error message.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError((), raw, "the stack config must be a map of key: value")
    data: dict[str, Any] = {}
    secrets = set(secret_keys)
    prefix = f"{NAMESPACE}:"
    problems: list[ConfigError] = []
    for key, value in raw.items():
        if not isinstance(key, str):
            continue  # not a Pulumi config key; load_stack_file names it
        if not key.startswith(prefix):
            problem = _foreign_key_problem(key, value, key in secrets or _is_secure(value))
            if problem is not None:
                problems.append(problem)
        if _is_secure(value) and (key.startswith(prefix) or key == REGION_KEY):
            path = ("region",) if key == REGION_KEY else (key[len(prefix) :],)
            raise ConfigError(
                path,
                SECRET_VALUE,
                f"is encrypted (secure:); {NAMESPACE} keys and {REGION_KEY} hold no secrets: "
                "set the value in plain text",
            )
        if key.startswith(prefix):
            data[key[len(prefix) :]] = _decode(value)
    if "region" in data:
        raise ConfigError(("region",), data["region"], f"set the region as {REGION_KEY}")
    if REGION_KEY in raw:
        data["region"] = _decode(raw[REGION_KEY])
    try:
        cfg = PlatformConfig.model_validate(data)
    except ValidationError as exc:
        # Refused keys first: a typo in a namespace is often why a section is missing.
        raise _redact(_joined([*problems, *_config_errors(exc)]), raw, secrets) from None
    except RecursionError:  # input nested past what pydantic walks
        raise ConfigError((), _MISSING, "nested too deeply to be a stack config") from None
    problems += _serving_key_problems(raw, cfg)
    if problems:
        raise _redact(_joined(problems), raw, secrets)
    return cfg


_CREDENTIAL_LIKE = re.compile(r"(?i)secret|token|passw|credential|key")


def _foreign_key_problem(key: str, value: Any, secret: bool) -> ConfigError | None:
    """Why a config key outside the `llm-platform` schema is refused; None when accepted.

    The value is shown only where it cannot be a credential: a misspelt
    `aws:secretkey` must not print its secret.
    """
    namespace, colon, name = key.partition(":")
    shown = SECRET_VALUE if secret or _CREDENTIAL_LIKE.search(key) else _decode(value)
    if colon and namespace == "pulumi":
        return None
    if colon and namespace == "aws":
        if key == REGION_KEY:
            return None
        if name in AWS_PROVIDER_KEYS:
            return ConfigError(
                (),
                shown,
                "is not read: the program's AWS providers are explicit and take only "
                f"{REGION_KEY} from the stack file; give credentials, profiles and roles "
                "through the environment (AWS_PROFILE, AWS_ACCESS_KEY_ID, ...) and remove "
                "this key",
                config_key=key,
            )
        guess = _close(name, AWS_PROVIDER_KEYS)
        hint = f"did you mean aws:{guess}?" if guess else "see pulumi-aws's configuration keys"
        return ConfigError(
            (),
            shown,
            f"not a setting of Pulumi's AWS provider; {hint} (this program reads "
            f"{REGION_KEY} only)",
            config_key=key,
        )
    if colon and namespace in (SERVING_KEYS_NAMESPACE, MONITORING_SECRETS_NAMESPACE):
        if namespace == MONITORING_SECRETS_NAMESPACE and name != GRAFANA_PASSWORD_KEY:
            return ConfigError(
                (),
                SECRET_VALUE,
                f"unknown key; the program reads {namespace}:{GRAFANA_PASSWORD_KEY} only",
                config_key=key,
            )
        if not secret:
            return ConfigError(
                (),
                SECRET_VALUE,
                f"is a secret in plain text; set it with `pulumi config set --secret {key}`",
                config_key=key,
            )
        return None
    guess = _suggested_key(key)
    hint = f"; did you mean {guess}?" if guess else ""
    namespaces = ", ".join(sorted(CONFIG_NAMESPACES))
    what = f"unknown config namespace {namespace}" if colon else "not a namespace:name key"
    return ConfigError(
        (), shown, f"{what}{hint} (the namespaces read: {namespaces})", config_key=key
    )


def _close(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to `word`, ignoring case; None when none is close."""
    if len(word) > 200:
        return None
    lower = {c.lower(): c for c in choices}
    if word.lower() in lower:
        return lower[word.lower()]
    match = difflib.get_close_matches(word.lower(), list(lower), n=1, cutoff=0.75)
    return lower[match[0]] if match else None


def _suggested_key(key: str) -> str | None:
    """The accepted key a refused one most likely means (`llm_platform:tags` -> the real one)."""
    namespace, colon, name = key.partition(":")
    known = [
        *(f"{NAMESPACE}:{field}" for field in PlatformConfig.model_fields if field != "region"),
        REGION_KEY,
        f"{MONITORING_SECRETS_NAMESPACE}:{GRAFANA_PASSWORD_KEY}",
        *(f"aws:{name}" for name in sorted(AWS_PROVIDER_KEYS)),
    ]
    if not colon:  # `tags:` without its namespace
        by_name = {k.partition(":")[2]: k for k in reversed(known)}
        guess = _close(key, by_name)
        return by_name[guess] if guess else None
    guess = _close(key, known)
    if guess:
        return guess
    near = _close(namespace, CONFIG_NAMESPACES)
    return f"{near}:{name}" if near else None


def _serving_key_problems(raw: Mapping[str, Any], cfg: PlatformConfig) -> list[ConfigError]:
    """Keys under `llm-platform-serving:` that name no client: a key nobody ever uses."""
    clients = cfg.serving.api.clients if cfg.serving is not None else []
    problems = []
    for key in raw:
        if not isinstance(key, str) or not key.startswith(f"{SERVING_KEYS_NAMESPACE}:"):
            continue
        name = key.partition(":")[2]
        if name in clients:
            continue
        guess = _close(name, clients)
        hint = f"; did you mean {SERVING_KEYS_NAMESPACE}:{guess}?" if guess else ""
        problems.append(
            ConfigError(
                (),
                SECRET_VALUE,
                f"{_not_in('client', 'serving.api.clients', clients)}{hint}; the gateway "
                "reads the key of each listed client only",
                config_key=key,
            )
        )
    return problems


def load_stack_file(path: str) -> dict[str, Any]:
    """Read the `config:` map of a Pulumi stack file.

    Raises StackFileError (a ConfigError: one line naming the file) when the
    file cannot be read, is not UTF-8 YAML, holds a key twice in one map, or is
    not a map with a `config:` map.
    """
    import yaml

    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise StackFileError(path, f"cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:  # a path with a NUL byte
        raise StackFileError(repr(path), f"not a file name: {exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise StackFileError(
            path, f"not UTF-8 text (line {line}, column {column}: byte 0x{data[exc.start]:02x})"
        ) from None
    try:
        doc = yaml.load(text, Loader=_stack_file_loader())
    except _DuplicateKey as exc:
        raise StackFileError(
            path,
            f"duplicate key {_show(exc.key)} at line {exc.line} (first at line {exc.first_line}); "
            "YAML would keep only the last one: merge them or remove one",
        ) from None
    except yaml.MarkedYAMLError as exc:
        where = ""
        if exc.problem_mark is not None:
            mark = exc.problem_mark
            where = f"line {mark.line + 1}, column {mark.column + 1}: "
        raise StackFileError(path, f"not valid YAML ({where}{exc.problem or exc})") from None
    except yaml.YAMLError as exc:
        raise StackFileError(path, f"not valid YAML ({exc})") from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # Constructors that give up: an integer of over 4300 digits, nesting too deep.
        raise StackFileError(path, f"not valid YAML ({type(exc).__name__}: {exc})") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise StackFileError(
            path, f"must be a map with a `config:` map, not {_kind(doc)} at the top level"
        )
    for key in doc:
        if key not in STACK_FILE_KEYS:
            guess = _close(str(key), STACK_FILE_KEYS)
            hint = f"did you mean {guess}? " if guess else ""
            raise StackFileError(
                path,
                f"top-level key {_show(key)} is not one of a Pulumi stack file's "
                f"({', '.join(STACK_FILE_KEYS)}); {hint}(a misspelt `config` drops "
                "every setting)",
            )
    config = doc.get("config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise StackFileError(path, f"`config:` must be a map of key: value, not {_kind(config)}")
    for key in config:
        if not isinstance(key, str):
            raise StackFileError(
                path, f"config key {_show(key)} is not a string like llm-platform:network"
            )
    return dict(config)


STACK_FILE_KEYS = ("config", "secretsprovider", "encryptedkey", "encryptionsalt", "environment")
"""The top-level keys of a Pulumi stack file (Pulumi.<stack>.yaml): its config, the secrets
provider's settings `pulumi stack init` writes, and the ESC environments it imports."""


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int, first_line: int):
        super().__init__(key)
        self.key = key
        self.line = line
        self.first_line = first_line


@functools.cache
def _stack_file_loader() -> type:
    """The catalog's loader (libyaml's when present) that refuses a key twice in one map.

    PyYAML keeps the last of two equal keys without a word: a second
    `llm-platform:node_pools:` would silently drop the first.
    """
    from yaml.nodes import MappingNode

    from infra.catalog import YAML_LOADER

    class StackFileLoader(YAML_LOADER):  # type: ignore[misc, valid-type]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, MappingNode):
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue  # `<<: *base` keys may be overridden: that is what they are for
                    key = self.construct_object(key_node, deep=True)
                    line = key_node.start_mark.line + 1
                    try:
                        if key in seen:
                            raise _DuplicateKey(key, line, seen[key])
                        seen[key] = line
                    except TypeError:
                        continue  # an unhashable key: the base constructor refuses it
            return super().construct_mapping(node, deep=deep)

    return StackFileLoader


def from_pulumi() -> PlatformConfig:
    """The validated config of the running Pulumi program (engine or mocks)."""
    from pulumi.runtime import config as runtime_config

    raw = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    secret_keys = {k for k in raw if runtime_config.is_config_secret(k)}
    secret_keys.update(runtime_config.get_config_secret_keys_env())
    return load_config(raw, secret_keys)


def _kind(value: Any) -> str:
    names = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
    return names.get(type(value), f"a {type(value).__name__}")


def _is_secure(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def _redact(error: ConfigError, raw: Mapping[str, Any], secret_keys: set[str]) -> ConfigError:
    """Keep decrypted secrets out of the message: the value, and any text of it in `expected`."""
    present = [k for k in secret_keys if isinstance(k, str) and k in raw]
    if not present:
        return error
    prefix = f"{NAMESPACE}:"
    texts: set[str] = set()
    for key in present:
        _strings(raw[key], texts)
        _strings(_decode(raw[key]), texts)
    for each in error.errors:
        top = each.path[0] if each.path else None
        for key in present:
            name = "region" if key == REGION_KEY else key.removeprefix(prefix)
            if (key.startswith(prefix) or key == REGION_KEY) and top == name:
                each.value = SECRET_VALUE
            if each.config_key == key:
                each.value = SECRET_VALUE
        for text in sorted(texts, key=len, reverse=True):
            if len(text) >= 4:
                each.expected = each.expected.replace(text, "[secret]")
        if isinstance(each.value, str) and each.value in texts:
            each.value = SECRET_VALUE
    return error


def _strings(value: Any, out: set[str], depth: int = 0) -> None:
    if depth > 20:
        return
    if isinstance(value, str):
        out.add(value)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _strings(k, out, depth + 1)
            _strings(v, out, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out, depth + 1)
    elif value is not None and not isinstance(value, bool):
        out.add(str(value))


def _decode(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):  # not JSON, or JSON nested past the parser
            return value
    return value


def _config_errors(exc: ValidationError) -> list[ConfigError]:
    """Every problem pydantic found, as ConfigErrors, in the order it found them."""
    return [_config_error(e) for e in exc.errors()]


def _config_error(error: Any) -> ConfigError:
    path: tuple[str | int, ...] = tuple(error["loc"])
    value: Any = error.get("input", _MISSING)
    expected = error["msg"]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):
        path += cause.path
        value = cause.value
        expected = cause.expected
    elif error["type"] == "value_error":
        expected = expected.removeprefix("Value error, ")
    elif error["type"] == "missing":
        value = _MISSING
        expected = "required"
    elif error["type"] == "extra_forbidden":
        known = _known_keys(path[:-1])
        expected = f"unknown key; known keys here: {', '.join(known)}" if known else "unknown key"
    return ConfigError(path, value, expected)


def _joined(errors: list[ConfigError]) -> ConfigError:
    """One ConfigError that reports all of `errors` (not empty), the first first."""
    first, *others = errors
    first.others = [e for error in others for e in error.errors]
    return first


def _known_keys(path: tuple[str | int, ...]) -> list[str]:
    model: Any = PlatformConfig
    for part in path:
        fields: dict[str, FieldInfo] = (
            getattr(model, "model_fields", {}) if _is_model(model) else {}
        )
        if isinstance(part, str) and part in fields:
            model = _model_of(fields[part].annotation)
        elif get_origin(model) is dict and get_args(model):
            model = _model_of(get_args(model)[1])
        elif get_origin(model) is list and get_args(model) and isinstance(part, int):
            model = _model_of(get_args(model)[0])
        else:
            return []
    if not _is_model(model):
        return []
    return [k for k in model.model_fields if not (model is PlatformConfig and k == "region")]


def _model_of(annotation: Any) -> Any:
    if get_origin(annotation) in (dict, list):
        return annotation
    for arg in get_args(annotation) or (annotation,):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return annotation


# ---------------------------------------------------------------------------
# Reference documentation
# ---------------------------------------------------------------------------


def config_reference() -> str:
    """A Markdown table of every key, generated from the models (the README embeds it)."""
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    rows.append(
        f"| `{REGION_KEY}` | string | required | The region the stack deploys to: one that "
        "botocore knows, in any partition (aws, aws-cn, aws-us-gov, ...). |"
    )
    for name, info in PlatformConfig.model_fields.items():
        if name == "region":
            continue
        rows.extend(_rows(f"{NAMESPACE}:{name}", info))
    return "\n".join(rows) + "\n"


def _rows(key: str, info: FieldInfo) -> list[str]:
    annotation: Any = info.annotation
    args = [a for a in get_args(annotation) if a is not type(None)]
    optional = type(None) in get_args(annotation)
    if optional and len(args) == 1 and _is_model(args[0]):
        annotation = args[0]  # an optional section: documented like a section
    origin = get_origin(annotation)
    nested: tuple[str, Any] | None = None
    if origin is dict and _is_model(get_args(annotation)[1]):
        child = get_args(annotation)[1]
        kind, nested = f"map of name → {child.__name__}", (f"{key}.<name>", child)
    elif origin is list and _is_model(get_args(annotation)[0]):
        child = get_args(annotation)[0]
        kind, nested = f"list of {child.__name__}", (f"{key}[]", child)
    elif _is_model(annotation):
        child = annotation
        kind, nested = "section" + (" (optional)" if optional else ""), (key, child)
    if nested is None:
        return [f"| `{key}` | {_type_name(annotation)} | {_default(info)} | {_doc(info)} |"]
    prefix, child = nested
    doc = _doc(info) or (child.__doc__ or "").replace("\n", " ")
    doc = " ".join(doc.split())
    out = [f"| `{key}` | {kind} | {_default(info)} | {doc} |"]
    for sub, sub_info in child.model_fields.items():
        out.extend(_rows(f"{prefix}.{sub}", sub_info))
    return out


def _is_model(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _doc(info: FieldInfo) -> str:
    return (info.description or "").replace("|", "\\|")


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "see below"
    else:
        value = info.default
    if value is PydanticUndefined:
        return "required"
    return f"`{json.dumps(value)}`"


def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in get_args(annotation))
    if origin is Annotated:
        return _type_name(get_args(annotation)[0])
    if origin in (list, dict) or (origin is not None and get_args(annotation)):
        args = [a for a in get_args(annotation) if a is not type(None)]
        inner = ", ".join(_type_name(a) for a in args)
        if origin is list:
            return f"list of {inner}"
        if origin is dict:
            return f"map of {inner}"
        suffix = " (optional)" if type(None) in get_args(annotation) else ""
        return inner + suffix
    return {str: "string", int: "integer", bool: "boolean", float: "number"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )
