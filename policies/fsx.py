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

from policies.nodes import instance_types
from policies.props import Report, declared, deps_of_type, get, known, of_type, tags_of
from spec.catalog import catalog
from spec.labels import POOL_LABEL
from spec.storage_bandwidth import BandwidthPlan, LustreThroughput, TrainingDemand, job_nodes

LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
ASSOCIATION = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
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


def _linked(resources: list[PolicyResource]) -> set[str]:
    """URNs of the file systems a data repository association links to S3."""
    return {
        fs.urn
        for dra in of_type(resources, ASSOCIATION)
        for fs in deps_of_type(dra, LUSTRE)
    }


def lustre_linked_no_backups(args: StackValidationArgs, report: Report) -> None:
    """A file system linked to S3 enables no FSx backups: AWS refuses them on S3-linked
    file systems, daily and final alike; S3 holds the durable copy."""
    linked = _linked(args.resources)
    for fs in of_type(args.resources, LUSTRE):
        if fs.urn not in linked:
            continue
        if get(fs.props, "automaticBackupRetentionDays"):
            report(
                f"{fs.name} is linked to S3 but sets automaticBackupRetentionDays: "
                "AWS does not back up S3-linked file systems; set 0",
                fs.urn,
            )
        if get(fs.props, "skipFinalBackup") is False:
            report(
                f"{fs.name} is linked to S3 but asks for a final backup on delete "
                "(skipFinalBackup false), which AWS cannot take; set it true",
                fs.urn,
            )


def lustre_backups(args: StackValidationArgs, report: Report) -> None:
    """A file system not linked to S3 keeps daily backups and a final backup on delete:
    it holds the only copy of its data."""
    linked = _linked(args.resources)
    for fs in of_type(args.resources, LUSTRE):
        if fs.urn in linked:
            continue
        if not get(fs.props, "automaticBackupRetentionDays"):
            report(
                f"{fs.name}: automaticBackupRetentionDays is 0 or unset and no S3 "
                "association holds its data: keep at least one daily backup",
                fs.urn,
            )
        if get(fs.props, "skipFinalBackup") is not False:
            report(
                f"{fs.name}: skipFinalBackup is not false and no S3 association holds "
                "its data: take a final backup when it is deleted",
                fs.urn,
            )


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


DEMAND_KEYS = (
    "tokens_per_second_per_gpu",
    "bytes_per_token",
    "prefetch_factor",
    "checkpoint_gb",
    "write_minutes",
    "nodes",
)
"""The `demand` object of the fsx-feeds-gpus rule (`llmp policy` fills it from the stack's
`storage.lustre.demand`)."""


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def lustre_feeds_gpus(args: StackValidationArgs, report: Report) -> None:
    """The file system feeds the GPUs of the pool it serves and writes their checkpoints in
    time: each node's read bandwidth (tokens/s per GPU x bytes per token x prefetch) and a
    checkpoint's write within its time, against what the file system's capacity, tier and
    client path deliver per node (AWS's published figures, spec/storage_bandwidth.py);
    checked when the rule's config has a `demand` and a `node-pool`."""
    config = args.get_config()
    demand, pool = config.get("demand"), config.get("node-pool")
    if not isinstance(demand, dict) or not pool:
        return
    figures = {k: _number(demand.get(k)) for k in DEMAND_KEYS if k in demand}
    unknown = sorted(set(demand) - set(DEMAND_KEYS))
    bad = sorted(k for k, v in figures.items() if v is None or v < 0)
    if unknown:
        report(
            f"demand config: unknown keys {', '.join(unknown)}; it takes {', '.join(DEMAND_KEYS)}"
        )
    if bad:
        report(f"demand config: {', '.join(bad)} must be numbers, 0 or more")
    if unknown or bad:
        return
    groups = [g for g in of_type(args.resources, NODE_GROUP) if _pool(g) == pool]
    for fs in of_type(args.resources, LUSTRE):
        props = fs.props
        capacity = known(lambda p=props: _number(get(p, "storageCapacity")), None)
        tier = known(lambda p=props: _number(get(p, "perUnitStorageThroughput")), None)
        efa = known(lambda p=props: get(p, "efaEnabled"), None) is True
        types = [t for g in groups for t in known(lambda g=g: instance_types(g), [])]
        if capacity is None or tier is None or not types or types[0] not in catalog().instances:
            report(
                f"{fs.name}: cannot model its bandwidth (capacity {capacity}, throughput "
                f"{tier}, pool {pool} types {types})",
                fs.urn,
            )
            continue
        sizes = [
            (
                known(lambda g=g: _number(get(g.props, "scalingConfig", "desiredSize")), None),
                known(lambda g=g: _number(get(g.props, "scalingConfig", "maxSize")), None),
            )
            for g in groups
        ]
        desired = int(max((d or 0) for d, _ in sizes))
        most = int(max((m or 0) for _, m in sizes))
        asked = figures.get("nodes")
        nodes = job_nodes(desired, most, int(asked) if asked else None)
        plan = BandwidthPlan(
            pool=str(pool),
            instance_type=types[0],
            nodes=nodes,
            lustre=LustreThroughput(
                capacity_gib=int(capacity),
                throughput_per_tib=int(tier),
                efa=efa,
                gpudirect_storage=efa and config.get("gpudirect-storage") is True,
            ),
            demand=TrainingDemand(
                nodes=nodes,
                gpus_per_node=catalog().instance(types[0]).gpu_count,
                tokens_per_second_per_gpu=figures.get("tokens_per_second_per_gpu") or 0,
                bytes_per_token=figures.get("bytes_per_token") or 2,
                prefetch_factor=figures.get("prefetch_factor") or 2,
                checkpoint_gb=figures.get("checkpoint_gb") or 0,
                write_seconds=(figures.get("write_minutes") or 60) * 60,
            ),
        )
        for problem in plan.problems():
            report(f"{fs.name}: {problem}", fs.urn)
