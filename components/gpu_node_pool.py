"""GpuNodePool: one accelerated EKS managed node group with EFA, placement and capacity options.

Owns the pool's launch template, its cluster placement group (when on) and
the node group. What it decides:

- **EFA layout.** AWS's current EC2 guidance ("Maximize network bandwidth on
  instances with multiple network cards"): the primary interface (card 0,
  device 0) is a plain ENA interface; card 0 device 1 and device 0 of every
  further card are `efa-only`. A p5.48xlarge so gets 32 EFA devices and one
  IP-consuming ENA, instead of 32 `efa` interfaces that each take a VPC
  address. `efa-only` needs vpc-cni 1.18.4 or newer (checked in the catalog).
- **One subnet.** EFA and reserved pools sit in one AZ (the config enforces
  it), so the group is given exactly one subnet.
- **Capacity.** ON_DEMAND, SPOT, or CAPACITY_BLOCK; a block sets the launch
  template's market type `capacity-block`, targets the reservation and carries
  the instance type, which the node group then leaves out (EKS user guide,
  "Capacity Blocks for ML"; terraform-aws-eks does the same). An On-Demand
  reservation is targeted without the market type.
- **Placement group** (cluster strategy): on by default for EFA pools without
  a reservation; off for blocks and reservations, which are already placed
  and would be starved by it.
- **Nodes.** The AL2023 accelerated AMI type (driver and toolkit included),
  instance-store NVMe as RAID0, the taint `nvidia.com/gpu=true:NoSchedule`
  (or Neuron's) with matching labels, and node auto-repair.
- **Elastic pools** (`elastic`): the Cluster Autoscaler resizes the group
  between its min and max. Its Auto Scaling group gets the `llm-platform/elastic`
  tag (what the autoscaler discovers and may resize) and the node-template tags
  it needs to scale up from zero nodes: every node label, the accelerator
  taint, and the resources the device plugins advertise only once a node runs
  (GPUs or Neuron devices, EFA interfaces, reserved huge pages) plus the
  ephemeral storage. A fixed pool gets none of them, so no autoscaler touches it.
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
    node_user_data,
)
from spec.catalog import catalog
from spec.labels import (
    ACCELERATOR_LABEL,
    CAPACITY_TYPE_LABEL,
    CHECKPOINTING_LABEL,
    EFA_LABEL,
    MIG_CONFIG_LABEL,
    POOL_LABEL,
)


def efa_network_interfaces(
    efa_count: int, security_group_ids: list[pulumi.Input[str]]
) -> list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]:
    """ENA on card 0 device 0, then `efa_count` efa-only interfaces (card 0 device 1, cards 1..)."""
    if efa_count < 1:
        raise ValueError("an EFA layout needs at least one EFA interface")

    def nic(card: int, device: int, kind: str) -> aws.ec2.LaunchTemplateNetworkInterfaceArgs:
        return aws.ec2.LaunchTemplateNetworkInterfaceArgs(
            network_card_index=card,
            device_index=device,
            interface_type=kind,
            security_groups=security_group_ids,
            delete_on_termination="true",
        )

    layout = [nic(0, 0, "interface"), nic(0, 1, "efa-only")]
    layout += [nic(card, 0, "efa-only") for card in range(1, efa_count)]
    return layout


@dataclass(frozen=True, kw_only=True)
class GpuNodePoolArgs:
    pool_name: str
    """The pool's name: the `llm-platform/pool` label and tag."""
    instance_type: str
    """An accelerated type of the catalog."""
    size: PoolSize = field(default_factory=PoolSize)
    disk_size_gib: int = 200
    release_version: str | None = None
    """The EKS AMI release the nodes run (None: the latest at creation)."""
    capacity_type: Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"] = "ON_DEMAND"
    capacity_reservation_id: str | None = None
    """The Capacity Block (required with CAPACITY_BLOCK) or On-Demand reservation."""
    efa: bool = False
    """Attach every EFA interface the type has (the pool then sits in one subnet)."""
    placement_group: bool = False
    """A cluster placement group (off for blocks and reservations: it would starve them)."""
    local_nvme_raid0: bool = True
    """Instance-store NVMe as RAID0 for containerd and the kubelet, where the type has any."""
    hugepages_2mi_mib: int = 0
    """At least this many MiB of 2 MiB huge pages reserved at boot (the AMI's kept if larger)."""
    auto_repair: bool = True
    checkpointing: bool = False
    """Jobs here checkpoint and resume: the `llm-platform/checkpointing` label."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Extra node labels."""
    elastic: bool = False
    """The Cluster Autoscaler may resize the group (min_size < max_size): its Auto Scaling
    group is tagged for discovery and for scale-up from zero."""
    mig_config: str | None = None
    """MIG: the mig-parted config the GPU operator's MIG manager applies to the nodes (their
    `nvidia.com/mig.config` label); None: whole GPUs."""
    mig_partitions: Mapping[str, int] = field(default_factory=dict)
    """MIG: resource -> partitions per node the device plugin advertises (what the
    autoscaler must assume of a node instead of whole GPUs)."""
    cluster_name: pulumi.Input[str]
    cluster_version: pulumi.Input[str]
    cluster_security_group_id: pulumi.Input[str]
    """Put on every interface: EKS adds it only when a template names no interfaces."""
    node_role_arn: pulumi.Input[str]
    subnet_ids: list[pulumi.Input[str]]
    """The private subnets of the pool's AZs (exactly one for EFA and reserved pools)."""
    efa_security_group_id: pulumi.Input[str]
    wait_for: list[pulumi.Resource]
    """Ordering edges without data (the cluster's `node_ready_after`)."""
    tags: dict[str, str]
    """Tags for the instances, volumes and interfaces the group launches."""


def node_template(
    args: GpuNodePoolArgs, labels: Mapping[str, str], taint_key: str, device_resource: str
) -> NodeTemplate:
    """What the Cluster Autoscaler must assume of a node of this pool before one exists.

    It derives CPU, memory and NVIDIA GPUs from the instance type, but nothing a device
    plugin or the kubelet adds later: without these a pod that requests EFA interfaces or
    huge pages never fits the simulated node, and the group never leaves zero.

    - the accelerator's resource (`nvidia.com/gpu` or `aws.amazon.com/neuron`), per node, or
      on a MIG pool its partitions (`nvidia.com/mig-1g.10gb`);
    - `vpc.amazonaws.com/efa`: every interface of the type, on EFA pools;
    - `hugepages-2Mi`: the pool's own reservation, a floor (a larger one the AMI makes is
      kept on the node), where it reserves any;
    - `ephemeral-storage`: the root volume, also a floor (with RAID0 the kubelet's
      storage is the instance-store array, larger still).
    """
    itype = catalog().instance(args.instance_type)
    assert itype.accelerator is not None  # checked by the constructor
    devices = dict(args.mig_partitions) or {device_resource: itype.accelerator.count}
    resources = {
        **{r: str(n) for r, n in devices.items()},
        "ephemeral-storage": f"{args.disk_size_gib}Gi",
    }
    if args.efa:
        resources["vpc.amazonaws.com/efa"] = str(itype.efa_interfaces)
    if args.hugepages_2mi_mib:
        resources["hugepages-2Mi"] = f"{args.hugepages_2mi_mib}Mi"
    return NodeTemplate(
        labels=labels, taints=[(taint_key, "true", "NoSchedule")], resources=resources
    )


class GpuNodePool(pulumi.ComponentResource):
    node_group_name: pulumi.Output[str]
    placement_group_name: pulumi.Output[str] | None

    def __init__(
        self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("llmp:nodes:GpuNodePool", name, None, opts)
        itype = catalog().instance(args.instance_type)
        kind = catalog().accelerator_kind(args.instance_type)
        if itype.accelerator is None or kind is None:
            raise ValueError(f"{args.instance_type} has no accelerator: not a GPU pool")
        if args.capacity_type == "CAPACITY_BLOCK" and args.capacity_reservation_id is None:
            raise ValueError("a CAPACITY_BLOCK pool needs capacity_reservation_id (cr-...)")
        if args.elastic and args.size.min_size == args.size.max_size:
            raise ValueError(
                f"an elastic pool needs min_size below max_size (both {args.size.max_size})"
            )

        placement: aws.ec2.PlacementGroup | None = None
        if args.placement_group:
            placement = aws.ec2.PlacementGroup(
                f"{name}-placement",
                strategy="cluster",
                tags={"Name": f"{name}-placement"},
                opts=pulumi.ResourceOptions(parent=self),
            )

        interfaces = None
        if args.efa:
            interfaces = efa_network_interfaces(
                itype.efa_interfaces,
                [args.cluster_security_group_id, args.efa_security_group_id],
            )

        block = args.capacity_type == "CAPACITY_BLOCK"
        template = launch_template(
            f"{name}-nodes",
            parent=self,
            disk_size_gib=args.disk_size_gib,
            tags={**args.tags, POOL_LABEL: args.pool_name},
            network_interfaces=interfaces,
            placement_group=placement.name if placement else None,
            capacity_block=block,
            capacity_reservation_id=args.capacity_reservation_id,
            instance_type=args.instance_type if block else None,
            user_data=node_user_data(
                raid0=args.local_nvme_raid0 and itype.nvme_disks > 0,
                hugepages_2mi_mib=args.hugepages_2mi_mib,
            ),
        )

        labels = {
            kind.taint_key: "true",
            POOL_LABEL: args.pool_name,
            ACCELERATOR_LABEL: itype.accelerator.model,
            EFA_LABEL: str(args.efa).lower(),
            CAPACITY_TYPE_LABEL: args.capacity_type.lower(),
            CHECKPOINTING_LABEL: str(args.checkpointing).lower(),
            **({MIG_CONFIG_LABEL: args.mig_config} if args.mig_config else {}),
            **args.labels,
        }
        group = managed_node_group(
            f"{name}-nodes",
            parent=self,
            cluster_name=args.cluster_name,
            cluster_version=args.cluster_version,
            node_role_arn=args.node_role_arn,
            subnet_ids=args.subnet_ids,
            template=template,
            instance_type=None if block else args.instance_type,
            ami_type=kind.ami_type,
            capacity_type=args.capacity_type,
            size=args.size,
            release_version=args.release_version,
            autoscaled=args.elastic,
            labels=labels,
            taints=[
                aws.eks.NodeGroupTaintArgs(key=kind.taint_key, value="true", effect="NO_SCHEDULE")
            ],
            auto_repair=args.auto_repair,
            wait_for=args.wait_for,
        )

        self.autoscaling_tags: list[aws.autoscaling.Tag] = []
        if args.elastic:
            self.autoscaling_tags = autoscaling_group_tags(
                f"{name}-asg",
                parent=self,
                group=group,
                tags=node_template(args, labels, kind.taint_key, kind.resource).tags(),
            )

        self.node_group_name = group.node_group_name
        self.placement_group_name = placement.name if placement else None
        self.register_outputs(
            {
                "node_group_name": self.node_group_name,
                "placement_group_name": self.placement_group_name,
            }
        )
