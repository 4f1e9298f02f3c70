"""`shared_stack` and `share_outputs`: stacks that share one network or cluster.

A shared stack (`share_outputs: true`) exports what team stacks need of its
network and cluster; a team stack names it in `shared_stack` and reads those
outputs through a Pulumi StackReference instead of creating its own.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field, model_validator

from spec.base import Section
from spec.errors import ConfigError, FieldError
from spec.keys import REGION_KEY

STACK_REFERENCE = r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+){0,2}$"

SHARED_NETWORK_OUTPUTS = ("vpc_id", "private_subnet_ids", "public_subnet_ids")
"""What a team stack reads of a shared network."""
SHARED_NETWORK_FACTS = ("region", "vpc_cidr", "private_subnet_cidrs")
"""What a team stack checks its own config against before it uses the shared network:
the region, the VPC's CIDR (its tenants' network policies exempt that range as the VPC's)
and the private subnets' CIDRs by AZ (its `adopted` output reports them). A shared stack
deployed before it exported them is to be deployed again (`pulumi up`) first."""
SHARED_CLUSTER_OUTPUTS = (
    "cluster_name",
    "cluster_endpoint",
    "cluster_certificate_authority",
    "cluster_security_group_id",
    "node_role_arn",
    "cluster_version",
    "cluster_addons",
    "scheduling",
)
"""What a team stack reads of a shared cluster (Pod Identity needs only its name and the
agent add-on the shared stack installs; `scheduling`: the cluster-wide Kueue and priority
names its queues attach to)."""
SCHEDULING_KEYS = ("cohort", "cpu_flavor", "provisioning_check", "priority_classes")
"""The shared stack's `scheduling` output: Kueue's cohort, the `cpu` ResourceFlavor, the
ProvisioningRequest AdmissionCheck (elastic pools), and the PriorityClass names."""
TEAM_NAME = r"^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$"


class SharedStackConfig(Section):
    """The stack whose network (and cluster) this stack uses, through a StackReference."""

    name: str = Field(
        pattern=STACK_REFERENCE,
        description="Its fully qualified name, `org/project/stack` (or `stack` in the same "
        "project).",
    )
    network: bool = Field(True, description="Use its VPC and subnets.")
    cluster: bool = Field(False, description="Use its EKS cluster too.")
    team: str | None = Field(
        None,
        pattern=TEAM_NAME,
        description="On its cluster: this team's name, the prefix of every cluster-scoped "
        "object the stack creates (namespaces `TEAM-TENANT`, Kueue flavors and queues, "
        "volumes) and its pools' `llm-platform/team` label (default the stack's name).",
    )

    @model_validator(mode="after")
    def _cluster_in_network(self) -> SharedStackConfig:
        if self.cluster and not self.network:
            raise FieldError(
                ("network",), False, "a shared cluster lives in the shared stack's VPC: set true"
            )
        if not self.network:
            raise FieldError(("network",), False, "share at least the network; set true")
        return self

    @property
    def stack(self) -> str:
        """The referenced stack's own name (the last part of `name`)."""
        return self.name.rsplit("/", 1)[-1]


def missing_facts(outputs: Mapping[str, Any]) -> list[str]:
    """The network facts (`SHARED_NETWORK_FACTS`) the shared stack's outputs lack."""
    return [name for name in SHARED_NETWORK_FACTS if outputs.get(name) in (None, "", {})]


def lacking_facts_line(shared: str, missing: Sequence[str]) -> str:
    return (
        f"the outputs of shared_stack {shared} lack {', '.join(missing)}, which this stack "
        "checks its network section against: that stack was deployed before it exported "
        "them; run `pulumi up` on it first"
    )


def network_mismatch(
    shared: str,
    region: str,
    vpc_cidr: str,
    zones: Sequence[str],
    outputs: Mapping[str, Any],
) -> ConfigError | None:
    """The first network fact this team stack's config states otherwise than its shared
    stack's outputs, as the config error that names the key and the shared stack's value;
    None where they agree (the AZs: each of this stack's is one of the shared stack's)."""
    theirs = outputs.get("region")
    if theirs != region:
        return ConfigError(
            ("region",),
            region,
            f"shared_stack {shared} is in {theirs} (its region output): a team stack "
            f"deploys into that stack's VPC and cluster; set {REGION_KEY}: {theirs}",
        )
    cidr = outputs.get("vpc_cidr")
    if _network(cidr) != _network(vpc_cidr):
        return ConfigError(
            ("network", "vpc_cidr"),
            vpc_cidr,
            f"is not the CIDR of shared_stack {shared}'s VPC, {cidr} (its vpc_cidr output): "
            "the stack takes network.vpc_cidr for the VPC's range (its network policies, "
            "its adopted output); set "
            f"network.vpc_cidr: {cidr}",
        )
    ids, cidrs = outputs.get("private_subnet_ids"), outputs.get("private_subnet_cidrs")
    subnets = [
        z
        for z in (ids if isinstance(ids, Mapping) else {})
        if isinstance(cidrs, Mapping) and z in cidrs
    ]
    for i, zone in enumerate(zones):
        if zone not in subnets:
            return ConfigError(
                ("network", "availability_zones", i),
                zone,
                f"shared_stack {shared} has no private subnet in {zone} (its subnets are in "
                f"{', '.join(subnets) or 'no AZ'}): list only AZs of its network",
            )
    return None


def _network(cidr: Any) -> Any:
    """A CIDR as a network (10.70.0.0/16 and 10.70.0.0/16 alike however written); anything
    else as it is, so that it equals no CIDR."""
    try:
        return ipaddress.ip_network(str(cidr), strict=False)
    except ValueError:
        return cidr


def bucket_clash(
    shared: str, buckets: Mapping[str, str], adopted: Sequence[str], outputs: Mapping[str, Any]
) -> ConfigError | None:
    """A bucket of this stack (key -> its physical name; `adopted`: the keys adopted by
    name) that is one of the shared stack's (its `buckets` output), as the config error.
    Tenants' prefixes are checked among one stack's tenants because each stack's tenants
    are granted only in its own buckets: two stacks on one bucket would share keys."""
    theirs = outputs.get("buckets")
    if not isinstance(theirs, Mapping):
        return None
    owner = {str(name): str(key) for key, name in theirs.items()}
    for key, name in buckets.items():
        if name not in owner:
            continue
        where: tuple[str | int, ...] = ("storage", "buckets", key)
        fix = "set another storage.bucket_name_prefix"
        if key in adopted:
            where, fix = (
                ("storage", "adoption", "buckets", key),
                "adopt a bucket of this stack's own",
            )
        return ConfigError(
            where,
            name,
            f"is bucket {owner[name]} of shared_stack {shared} (its buckets output): each "
            "stack's tenants are granted prefixes in its own buckets, and two stacks on one "
            f"bucket would share their tenants' keys; {fix}",
        )
    return None


def bucket_unadmitted(
    shared: str, buckets: Mapping[str, str], prefix: str, outputs: Mapping[str, Any]
) -> ConfigError | None:
    """A bucket of this stack (key -> its physical name; `prefix`: the stack's
    `bucket_name_prefix`, what to admit) that the shared stack's S3 gateway
    endpoint refuses (its `s3_endpoint_buckets` output: the names and `*` patterns its
    policy admits), as the config error; None where each is admitted, or where the shared
    stack sets no policy of its own (the output is null: the VPC's owner keeps the
    endpoint, or S3 goes through NAT)."""
    admitted = outputs.get("s3_endpoint_buckets")
    if not isinstance(admitted, Sequence) or isinstance(admitted, str):
        return None
    patterns = [str(p) for p in admitted]
    for key, name in buckets.items():
        if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            return ConfigError(
                ("storage", "buckets", key),
                name,
                f"is refused by shared_stack {shared}'s S3 endpoint (it admits "
                f"{', '.join(patterns[:3])}{' ...' if len(patterns) > 3 else ''}): add "
                f"{prefix}-* to its network.s3_endpoint_buckets",
            )
    return None
