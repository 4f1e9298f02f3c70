"""`shared_stack` and `share_outputs`: stacks that share one network or cluster.

A shared stack (`share_outputs: true`) exports what team stacks need of its
network and cluster; a team stack names it in `shared_stack` and reads those
outputs through a Pulumi StackReference instead of creating its own.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from spec.base import Section
from spec.errors import FieldError

STACK_REFERENCE = r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+){0,2}$"

SHARED_NETWORK_OUTPUTS = ("vpc_id", "private_subnet_ids", "public_subnet_ids")
"""What a team stack reads of a shared network."""
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
