"""Node pools: EFA placement and subnets, GPU taints, node repair, IMDSv2, encrypted disks.

A managed node group finds its launch template through the dependency graph
(`launchTemplate.id` is unknown during a preview).
"""

from __future__ import annotations

from pulumi_policy import (
    PolicyResource,
    ResourceValidationArgs,
    StackValidationArgs,
)

from policies.props import Report, declared, deps_of_type, get, items, known, of_type
from spec.catalog import catalog

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
EFA_TYPES = ("efa", "efa-only")
NO_SCHEDULE = ("NO_SCHEDULE", "NoSchedule")


def accelerator_kind(props: object) -> str | None:
    """`nvidia` or `neuron` for a node group of accelerated instances (catalog or AMI type)."""
    for itype in items(get(props, "instanceTypes")):
        spec = catalog().instances.get(itype) if isinstance(itype, str) else None
        if spec is not None and spec.accelerator is not None:
            return spec.accelerator.kind
    ami = str(get(props, "amiType") or "")
    if "NVIDIA" in ami or ami.endswith("_GPU"):
        return "nvidia"
    if "NEURON" in ami:
        return "neuron"
    return None


def instance_types(group: PolicyResource) -> list[str]:
    """A node group's instance types: its own, or its launch template's (a Capacity Block
    group names its type only in the template)."""
    own = [t for t in items(get(group.props, "instanceTypes")) if isinstance(t, str)]
    if own:
        return own
    template = _template(group)
    itype = get(template.props, "instanceType") if template is not None else None
    return [itype] if isinstance(itype, str) else []


def _has_efa(template_props: object) -> bool:
    return any(
        get(nic, "interfaceType") in EFA_TYPES
        for nic in items(get(template_props, "networkInterfaces"))
    )


def _template(resource: PolicyResource) -> PolicyResource | None:
    templates = deps_of_type(resource, LAUNCH_TEMPLATE)
    return templates[0] if len(templates) == 1 else None


def efa_single_subnet(args: StackValidationArgs, report: Report) -> None:
    """A node group on an EFA launch template sits in exactly one subnet (one AZ)."""
    for group in of_type(args.resources, NODE_GROUP):
        template = _template(group)
        if template is None or not known(lambda t=template: _has_efa(t.props), False):
            continue
        count = known(lambda g=group: len(items(get(g.props, "subnetIds"))), None)
        if count is not None and count != 1:
            report(
                f"node group {group.name} uses EFA template {template.name} but spans "
                f"{count} subnets: EFA traffic does not cross AZs; give it one subnet",
                group.urn,
            )


def efa_placement_group(args: ResourceValidationArgs, report: Report) -> None:
    """An EFA launch template uses a cluster placement group, unless it targets a capacity
    reservation or a capacity block (already placed; a group would starve them)."""
    if args.resource_type != LAUNCH_TEMPLATE or not _has_efa(args.props):
        return
    reservation = get(args.props, "capacityReservationSpecification")
    if declared(reservation, "capacityReservationTarget"):
        return
    if get(args.props, "instanceMarketOptions", "marketType") == "capacity-block":
        return
    if not declared(get(args.props, "placement"), "groupName"):
        report(
            "EFA template without a placement group: set placement.groupName (a cluster "
            "placement group), or target a capacity reservation or block"
        )


def gpu_node_taint(args: ResourceValidationArgs, report: Report) -> None:
    """Accelerated node groups carry the NoSchedule taint of their accelerator, so only pods
    that ask for GPUs (or Neuron cores) land there."""
    if args.resource_type != NODE_GROUP:
        return
    kind = accelerator_kind(args.props)
    if kind is None:
        return
    key = catalog().accelerator_kinds[kind].taint_key
    for taint in items(get(args.props, "taints")):
        if get(taint, "key") == key and get(taint, "effect") in NO_SCHEDULE:
            return
    report(f"accelerated node group without the taint {key}:NoSchedule")


def node_repair_enabled(args: ResourceValidationArgs, report: Report) -> None:
    """Accelerated node groups enable EKS node auto-repair (failed GPUs are replaced)."""
    if args.resource_type != NODE_GROUP or accelerator_kind(args.props) is None:
        return
    if get(args.props, "nodeRepairConfig", "enabled") is not True:
        report("nodeRepairConfig.enabled is not true: broken GPU nodes stay in the pool")


def accelerated_ami_type(args: ResourceValidationArgs, report: Report) -> None:
    """Accelerated node groups use the catalog's AMI type (driver and toolkit included)."""
    if args.resource_type != NODE_GROUP:
        return
    kind = accelerator_kind(args.props)
    if kind is None:
        return
    expected = catalog().accelerator_kinds[kind].ami_type
    ami = get(args.props, "amiType")
    if ami != expected:
        report(f"amiType is {ami}: {kind} nodes use {expected}")


def imdsv2_required(args: ResourceValidationArgs, report: Report) -> None:
    """Launch templates require IMDSv2 (session tokens)."""
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    if get(args.props, "metadataOptions", "httpTokens") != "required":
        report("metadataOptions.httpTokens is not required: IMDSv1 leaks the node role to SSRF")


def imds_hop_limit(args: ResourceValidationArgs, report: Report) -> None:
    """Launch templates keep the IMDS hop limit at 1, so pods cannot borrow the node role."""
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    limit = get(args.props, "metadataOptions", "httpPutResponseHopLimit")
    if limit is None or int(limit) > 1:
        report(f"httpPutResponseHopLimit is {limit}: set 1 (pods then cannot reach IMDS)")


def ebs_encrypted(args: ResourceValidationArgs, report: Report) -> None:
    """Every EBS volume a launch template declares is encrypted."""
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    for mapping in items(get(args.props, "blockDeviceMappings")):
        ebs = get(mapping, "ebs")
        if ebs is None:
            continue
        if str(get(ebs, "encrypted")).lower() != "true":
            report(f"volume {get(mapping, 'deviceName')} is not encrypted: set ebs.encrypted")
