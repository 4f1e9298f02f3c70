"""FSx for Lustre: durable deployment, customer-managed encryption, beside its GPU pool.

**Which pool.** The file system serves the GPU pool named in the rule's
`node-pool` config (`llmp policy` fills it from the stack's
`storage.lustre.node_pool`), else in the file system's `llm-platform/pool`
tag. Without either, it must share an AZ with at least one accelerated node
group. Subnets are matched through the dependency graph and compared by the
subnets' `availabilityZone` inputs: subnet ids are unknown during a preview.
"""

from __future__ import annotations

from pulumi_policy import (
    PolicyResource,
    ResourceValidationArgs,
    StackValidationArgs,
)

from policies.props import Report, declared, deps_of_type, get, known, of_type, tags_of
from spec.labels import POOL_LABEL

LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
SUBNET = "aws:ec2/subnet:Subnet"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
ACCELERATOR_TAINTS = ("nvidia.com/gpu", "aws.amazon.com/neuron")


def lustre_persistent_2(args: ResourceValidationArgs, report: Report) -> None:
    """FSx for Lustre uses PERSISTENT_2 (replicated storage, survives a server failure)."""
    if args.resource_type != LUSTRE:
        return
    deployment = get(args.props, "deploymentType") or "SCRATCH_1"
    if deployment != "PERSISTENT_2":
        report(f"deploymentType is {deployment}: use PERSISTENT_2 (scratch data is lost)")


def lustre_kms_key(args: ResourceValidationArgs, report: Report) -> None:
    """FSx for Lustre is encrypted with a customer-managed KMS key (kmsKeyId)."""
    if args.resource_type == LUSTRE and not declared(args.props, "kmsKeyId"):
        report("no kmsKeyId: set a customer-managed KMS key")


def lustre_backups(args: ResourceValidationArgs, report: Report) -> None:
    """FSx for Lustre keeps daily backups and a final backup on delete."""
    if args.resource_type != LUSTRE:
        return
    days = get(args.props, "automaticBackupRetentionDays")
    if not days:
        report("automaticBackupRetentionDays is 0 or unset: keep at least one daily backup")
    if get(args.props, "skipFinalBackup") is not False:
        report("skipFinalBackup is not false: take a final backup when the file system is deleted")


def _zones(subnets: list[PolicyResource]) -> set[str]:
    zones = set()
    for s in subnets:
        zone = known(lambda s=s: get(s.props, "availabilityZone"), None)
        if isinstance(zone, str):
            zones.add(zone)
    return zones


def _accelerated(group: PolicyResource) -> bool:
    taints = known(lambda: list(get(group.props, "taints") or []), [])
    return any(known(lambda t=t: get(t, "key"), None) in ACCELERATOR_TAINTS for t in taints)


def _pool(group: PolicyResource) -> str | None:
    label = known(lambda: get(group.props, "labels", POOL_LABEL), None)
    return label if isinstance(label, str) else None


def lustre_in_pool_az(args: StackValidationArgs, report: Report) -> None:
    """The file system sits in the AZ of the GPU pool it serves (no cross-AZ traffic)."""
    configured = args.get_config().get("node-pool")
    groups = of_type(args.resources, NODE_GROUP)
    for fs in of_type(args.resources, LUSTRE):
        fs_zones = _zones(deps_of_type(fs, SUBNET))
        if not fs_zones:
            continue  # subnet not declared in this stack: nothing to compare
        pool = configured or tags_of(fs.props).get(POOL_LABEL)
        if pool:
            serving = [g for g in groups if _pool(g) == pool]
            if not serving:
                report(f"{fs.name}: no node group is labelled {POOL_LABEL}={pool}", fs.urn)
                continue
        else:
            serving = [g for g in groups if _accelerated(g)]
            if not serving:
                continue
        pool_zones = set().union(*(_zones(deps_of_type(g, SUBNET)) for g in serving))
        if not pool_zones:
            continue
        if pool and not fs_zones <= pool_zones:
            report(
                f"{fs.name} is in {', '.join(sorted(fs_zones))} but pool {pool} runs in "
                f"{', '.join(sorted(pool_zones))}: put the file system in the pool's subnet",
                fs.urn,
            )
        elif not pool and not fs_zones & pool_zones:
            report(
                f"{fs.name} is in {', '.join(sorted(fs_zones))}, where no accelerated node "
                "group runs",
                fs.urn,
            )
