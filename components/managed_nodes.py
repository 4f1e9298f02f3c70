"""Launch templates and managed node groups shared by the system pool, GPU and CPU pools.

Every kind of pool gets the same floor: an encrypted gp3 root volume, IMDSv2
only (hop limit 1, so pods cannot borrow the node role), tags that reach the
instances and volumes the Auto Scaling group launches (provider default tags
do not), and a node group whose `desiredSize` the program owns, except where the
Cluster Autoscaler does (`autoscaled`): there `pulumi up` leaves it alone after
creation. Elastic pools (GPU pools with `elastic`, every CPU pool) also tag
their Auto Scaling group for the Cluster Autoscaler (`NodeTemplate`,
`autoscaling_group_tags`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws


@dataclass(frozen=True, kw_only=True)
class PoolSize:
    """How many nodes a managed node group holds, and how many an update replaces at once."""

    min_size: int = 0
    desired_size: int = 0
    """Nodes at creation; on an autoscaled group the autoscaler owns it afterwards (the
    group ignores later changes), elsewhere the config does."""
    max_size: int = 1
    max_unavailable: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                f"sizes must satisfy 0 <= min ({self.min_size}) <= desired "
                f"({self.desired_size}) <= max ({self.max_size})"
            )


# AL2023 nodes are configured by nodeadm. Managed node groups merge our parts
# with their own (cluster endpoint, CA) because the template sets no AMI id;
# the user data must therefore be MIME multipart.
_BOUNDARY = "LLMP"

_NODEADM_RAID0 = """Content-Type: application/node.eks.aws

---
apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  instance:
    localStorage:
      strategy: RAID0
"""

HUGEPAGES_CONF = "/etc/sysctl.d/90-llm-platform-hugepages.conf"
NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"


def hugepages_script(pages: int, *, conf: str = HUGEPAGES_CONF, proc: str = NR_HUGEPAGES) -> str:
    """Raise the 2 MiB huge page reservation to at least `pages`, never lower it.

    The accelerated AMIs' EFA installer (efa-config) already reserves huge pages at
    boot, about 2 x vCPUs x 110 MiB (p5: ~42 GiB, allocatable 42242Mi): writing a smaller
    `vm.nr_hugepages` would take them away from libfabric. The file is written only when
    it raises the count, so it also wins on later boots. cloud-init runs user-data scripts
    before nodeadm starts the kubelet, which then advertises the pages as `hugepages-2Mi`.
    """
    return "\n".join(
        [
            "#!/bin/bash",
            "set -euo pipefail",
            f"want={int(pages)}",
            f'have="$(cat {proc})"',
            'if [ "$have" -lt "$want" ]; then',
            f'  echo "vm.nr_hugepages = $want" > {conf}',
            f"  sysctl --load {conf}",
            "fi",
            "",
        ]
    )


_SHELL_PART = 'Content-Type: text/x-shellscript; charset="us-ascii"\n\n'


def node_user_data(*, raid0: bool, hugepages_2mi_mib: int) -> str | None:
    """Base64 MIME user data for a managed node group, or None when there is nothing to add.

    - `raid0`: nodeadm assembles every instance-store NVMe disk as one RAID0 array for
      containerd and the kubelet, so multi-gigabyte image pulls do not hit the root volume.
    - `hugepages_2mi_mib`: at least this many MiB of 2 MiB huge pages reserved at boot
      (libfabric's EFA provider uses them; a pod cannot get huge pages the node did not
      reserve); a larger reservation already on the node is kept.
    """
    parts = []
    if raid0:
        parts.append(_NODEADM_RAID0)
    if hugepages_2mi_mib:
        parts.append(_SHELL_PART + hugepages_script(hugepages_2mi_mib // 2))
    if not parts:
        return None
    body = f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="{_BOUNDARY}"\n\n'
    body += "".join(f"--{_BOUNDARY}\n{part}\n" for part in parts)
    body += f"--{_BOUNDARY}--\n"
    return base64.b64encode(body.encode()).decode()


def launch_template(
    name: str,
    *,
    parent: pulumi.Resource,
    disk_size_gib: int,
    tags: dict[str, str],
    network_interfaces: Sequence[aws.ec2.LaunchTemplateNetworkInterfaceArgs] | None = None,
    placement_group: pulumi.Input[str] | None = None,
    capacity_block: bool = False,
    capacity_reservation_id: str | None = None,
    instance_type: str | None = None,
    user_data: str | None = None,
) -> aws.ec2.LaunchTemplate:
    """A launch template for an EKS managed node group (no AMI id: EKS picks the AMI type's).

    `instance_type` goes into the template only where EKS wants it there: a Capacity
    Block node group takes its instance type from the template and none from the group.
    """
    reservation = None
    if capacity_reservation_id:
        reservation = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
            capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                capacity_reservation_id=capacity_reservation_id
            )
        )
    instance_tags = {**tags, "Name": name}
    return aws.ec2.LaunchTemplate(
        name,
        description=f"EKS managed node group template for {name}",
        update_default_version=True,
        block_device_mappings=[
            aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name="/dev/xvda",
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_size=disk_size_gib,
                    volume_type="gp3",
                    encrypted="true",
                    delete_on_termination="true",
                ),
            )
        ],
        metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
            http_endpoint="enabled",
            http_tokens="required",
            http_put_response_hop_limit=1,
        ),
        instance_type=instance_type,
        network_interfaces=list(network_interfaces) if network_interfaces else None,
        placement=aws.ec2.LaunchTemplatePlacementArgs(group_name=placement_group)
        if placement_group is not None
        else None,
        instance_market_options=aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(
            market_type="capacity-block"
        )
        if capacity_block
        else None,
        capacity_reservation_specification=reservation,
        user_data=user_data,
        tag_specifications=[
            aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=instance_tags)
            for kind in ("instance", "volume", "network-interface")
        ],
        tags={"Name": name},
        opts=pulumi.ResourceOptions(parent=parent),
    )


def managed_node_group(
    name: str,
    *,
    parent: pulumi.Resource,
    cluster_name: pulumi.Input[str],
    cluster_version: pulumi.Input[str],
    node_role_arn: pulumi.Input[str],
    subnet_ids: Sequence[pulumi.Input[str]],
    template: aws.ec2.LaunchTemplate,
    instance_type: str | None,
    ami_type: str,
    capacity_type: str,
    size: PoolSize,
    labels: dict[str, str],
    taints: Sequence[aws.eks.NodeGroupTaintArgs] = (),
    auto_repair: bool = True,
    wait_for: Sequence[pulumi.Resource] = (),
    node_group_name: str | None = None,
    autoscaled: bool = False,
    release_version: str | None = None,
) -> aws.eks.NodeGroup:
    """An EKS managed node group on `template`, named `node_group_name` in EKS (default
    `name`).

    `instance_type` None: the template names it (Capacity Blocks: EKS refuses a
    capacity-block group with `instanceTypes`). `wait_for` holds ordering edges that
    carry no data, such as the vpc-cni add-on: nodes that join before it is ready stay
    NotReady.

    `release_version`: the EKS-optimized AMI release (None: the latest at creation);
    changing it rolls every node (UpdateNodegroupVersion).

    `autoscaled`: the Cluster Autoscaler owns the desired size once the group exists, so
    `pulumi up` ignores later changes of it. A group nothing scales keeps it in the
    config: EKS's UpdateNodegroupConfig requires min <= desired <= max in the group's
    new state, so raising a fixed pool's min and max without its desired size would be
    refused.
    """
    return aws.eks.NodeGroup(
        name,
        node_group_name=node_group_name or name,
        cluster_name=cluster_name,
        version=cluster_version,
        release_version=release_version,
        node_role_arn=node_role_arn,
        subnet_ids=list(subnet_ids),
        ami_type=ami_type,
        capacity_type=capacity_type,
        instance_types=[instance_type] if instance_type else None,
        launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
            id=template.id,
            version=template.latest_version.apply(str),
        ),
        scaling_config=aws.eks.NodeGroupScalingConfigArgs(
            min_size=size.min_size, desired_size=size.desired_size, max_size=size.max_size
        ),
        update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=size.max_unavailable),
        node_repair_config=aws.eks.NodeGroupNodeRepairConfigArgs(enabled=auto_repair),
        labels=labels,
        taints=list(taints),
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=list(wait_for),
            # The autoscaler owns the desired size of an autoscaled group once it exists.
            ignore_changes=["scalingConfig.desiredSize"] if autoscaled else None,
        ),
    )


# ---------------------------------------------------------------------------
# Cluster Autoscaler tags (cluster-autoscaler/cloudprovider/aws/README.md at the pinned tag)
# ---------------------------------------------------------------------------

CA_ENABLED_TAG = "k8s.io/cluster-autoscaler/enabled"
"""Auto-discovery tag. EKS puts it (value `true`) on the Auto Scaling group of *every* managed
node group, fixed or not, with `k8s.io/cluster-autoscaler/<cluster>: owned`."""
ELASTIC_TAG = "llm-platform/elastic"
"""Our tag (value `true`) on the Auto Scaling groups of elastic pools only: the third key the
autoscaler's discovery and its IAM condition require, since EKS's two are on every group."""
NODE_TEMPLATE = "k8s.io/cluster-autoscaler/node-template"


def ca_cluster_tag(cluster_name: str) -> str:
    """The per-cluster discovery tag EKS sets (value `owned`)."""
    return f"k8s.io/cluster-autoscaler/{cluster_name}"


@dataclass(frozen=True, kw_only=True)
class NodeTemplate:
    """What a node of a group at zero nodes would be, told to the Cluster Autoscaler as tags
    of the group's Auto Scaling group: with no node to copy, it simulates one from the
    instance type (CPU, memory, NVIDIA GPUs) plus these, and scales up only for pods that fit.
    """

    labels: Mapping[str, str]
    """Every node label a pod may select on (the pool label above all)."""
    taints: Sequence[tuple[str, str, str]] = ()
    """(key, value, effect) with Kubernetes' effect names (`NoSchedule`)."""
    resources: Mapping[str, str] = field(default_factory=dict)
    """Extended resources and their quantities: what the device plugins advertise later."""

    def tags(self) -> dict[str, str]:
        """`node-template/label/<key>: value`, `node-template/taint/<key>: value:effect`,
        `node-template/resources/<name>: quantity`, and the elastic tag."""
        tags = {ELASTIC_TAG: "true"}
        tags |= {f"{NODE_TEMPLATE}/label/{k}": v for k, v in sorted(self.labels.items())}
        tags |= {f"{NODE_TEMPLATE}/taint/{k}": f"{v}:{effect}" for k, v, effect in self.taints}
        tags |= {f"{NODE_TEMPLATE}/resources/{r}": q for r, q in sorted(self.resources.items())}
        return tags


def _tag_role(key: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", key.removeprefix(f"{NODE_TEMPLATE}/").lower()).strip("-")


def _first_autoscaling_group(resources: Sequence[aws.eks.outputs.NodeGroupResource]) -> str:
    """A managed node group has exactly one Auto Scaling group, listed once it exists."""
    groups = resources[0].autoscaling_groups if resources else None
    if not groups or groups[0].name is None:
        raise ValueError("the node group reports no Auto Scaling group")
    return groups[0].name


def autoscaling_group_tags(
    name: str, *, parent: pulumi.Resource, group: aws.eks.NodeGroup, tags: Mapping[str, str]
) -> list[aws.autoscaling.Tag]:
    """`tags` on the node group's Auto Scaling group, one `aws.autoscaling.Tag` each.

    A managed node group's own tags never reach its Auto Scaling group, so the group is
    named from the node group's output (`resources[0].autoscalingGroups[0].name`). The tags
    do not propagate to instances: they describe the group to the autoscaler, and the
    launch template already tags what it launches.
    """
    roles = {key: _tag_role(key) for key in tags}
    if len(set(roles.values())) != len(roles):
        raise ValueError(f"{name}: tag keys that differ only in punctuation: {sorted(tags)}")
    group_name = group.resources.apply(_first_autoscaling_group)
    return [
        aws.autoscaling.Tag(
            f"{name}-{roles[key]}",
            autoscaling_group_name=group_name,
            tag=aws.autoscaling.TagTagArgs(key=key, value=value, propagate_at_launch=False),
            opts=pulumi.ResourceOptions(parent=parent),
        )
        for key, value in tags.items()
    ]
