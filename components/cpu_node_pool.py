"""CpuNodePool: one tainted CPU managed node group for data work, autoscaled from zero.

Owns the pool's launch template, its node group and the tags of its Auto Scaling group.
What it decides:

- **Nodes.** The catalog's CPU AMI type (AL2023 standard, not an accelerated AMI), the
  floor every pool gets from `components.managed_nodes` (encrypted gp3 root volume, IMDSv2
  with hop limit 1, tags that reach instances and volumes), the node role shared by every
  pool, and node auto-repair.
- **Kept apart.** The label `llm-platform/pool=<name>` and the taint
  `llm-platform/cpu-pool=<name>:NoSchedule` (`spec.labels`): a data job's Ray workers
  select the pool and tolerate the taint; the add-ons, which tolerate nothing, stay on the
  untainted system pool, and data work cannot crowd them.
- **Elastic, always.** The Cluster Autoscaler sizes the group between min and max
  (default 0): its Auto Scaling group carries the `llm-platform/elastic` tag that discovery
  and the autoscaler's IAM condition require, and the node-template tags it reads while the
  group has no node (every node label, the taint, the root volume as ephemeral storage).
  CPU and memory it takes from the instance type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_aws as aws

from components.managed_nodes import (
    NodeTemplate,
    PoolSize,
    autoscaling_group_tags,
    launch_template,
    managed_node_group,
)
from spec.catalog import catalog
from spec.labels import CAPACITY_TYPE_LABEL, CHECKPOINTING_LABEL, CPU_POOL_TAINT, POOL_LABEL


@dataclass(frozen=True, kw_only=True)
class CpuNodePoolArgs:
    pool_name: str
    """The pool's name: the `llm-platform/pool` label and tag, the taint's value."""
    instance_type: str
    """A CPU type of the catalog."""
    size: PoolSize = field(default_factory=lambda: PoolSize(min_size=0, max_size=2))
    """min_size below max_size: the autoscaler has room to move."""
    disk_size_gib: int = 200
    release_version: str | None = None
    """The EKS AMI release the nodes run (None: the latest at creation)."""
    """The root volume, where Ray spills objects that do not fit in memory."""
    capacity_type: Literal["ON_DEMAND", "SPOT"] = "ON_DEMAND"
    checkpointing: bool = False
    """Jobs here resume after losing a node: the `llm-platform/checkpointing` label."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Extra node labels (a team stack's `llm-platform/team`)."""
    node_group_name: str | None = None
    """The EKS node group's name where it must differ from the resource's (a team stack on
    a shared cluster prefixes its team, since EKS names are unique per cluster)."""
    cluster_name: pulumi.Input[str]
    cluster_version: pulumi.Input[str]
    node_role_arn: pulumi.Input[str]
    subnet_ids: list[pulumi.Input[str]]
    """The private subnets of the pool's AZs."""
    wait_for: list[pulumi.Resource]
    """Ordering edges without data (the cluster's `node_ready_after`)."""
    tags: dict[str, str]
    """Tags for the instances and volumes the group launches."""


def taint(pool_name: str) -> tuple[str, str, str]:
    """(key, value, effect) of the pool's taint, in Kubernetes' effect name."""
    return (CPU_POOL_TAINT, pool_name, "NoSchedule")


def node_template(args: CpuNodePoolArgs, labels: Mapping[str, str]) -> NodeTemplate:
    """What the Cluster Autoscaler must assume of a node of this pool before one exists:
    the labels pods select, the taint they tolerate, and the root volume as the
    ephemeral-storage floor (CPU and memory come from the instance type)."""
    return NodeTemplate(
        labels=labels,
        taints=[taint(args.pool_name)],
        resources={"ephemeral-storage": f"{args.disk_size_gib}Gi"},
    )


class CpuNodePool(pulumi.ComponentResource):
    node_group_name: pulumi.Output[str]
    autoscaling_tags: list[aws.autoscaling.Tag]

    def __init__(
        self, name: str, args: CpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("llmp:nodes:CpuNodePool", name, None, opts)
        if catalog().instance(args.instance_type).accelerator is not None:
            raise ValueError(f"{args.instance_type} is accelerated: a GPU pool's, not a CPU one's")
        if args.size.min_size == args.size.max_size:
            raise ValueError(
                f"a CPU pool is autoscaled: min_size must be below max_size "
                f"(both {args.size.max_size})"
            )

        template = launch_template(
            f"{name}-nodes",
            parent=self,
            disk_size_gib=args.disk_size_gib,
            tags={**args.tags, POOL_LABEL: args.pool_name},
        )
        labels = {
            POOL_LABEL: args.pool_name,
            CAPACITY_TYPE_LABEL: args.capacity_type.lower(),
            CHECKPOINTING_LABEL: str(args.checkpointing).lower(),
            **args.labels,
        }
        key, value, _ = taint(args.pool_name)
        group = managed_node_group(
            f"{name}-nodes",
            parent=self,
            cluster_name=args.cluster_name,
            cluster_version=args.cluster_version,
            node_role_arn=args.node_role_arn,
            subnet_ids=args.subnet_ids,
            template=template,
            instance_type=args.instance_type,
            ami_type=catalog().ami_type(args.instance_type),
            capacity_type=args.capacity_type,
            size=args.size,
            release_version=args.release_version,
            autoscaled=True,
            labels=labels,
            taints=[aws.eks.NodeGroupTaintArgs(key=key, value=value, effect="NO_SCHEDULE")],
            wait_for=args.wait_for,
            node_group_name=args.node_group_name,
        )
        self.autoscaling_tags = autoscaling_group_tags(
            f"{name}-asg",
            parent=self,
            group=group,
            tags=node_template(args, labels).tags(),
        )

        self.node_group_name = group.node_group_name
        self.register_outputs({"node_group_name": self.node_group_name})
