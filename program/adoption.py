"""Deploying into what exists: an adopted VPC or cluster, or a shared stack's.

`network` and `cluster` pick the component for the stack's mode (created, adopted
from config, or read from a shared stack's outputs through a StackReference); the
`adopted` output says, for the preview, `llmp verify`, `llmp dr plan` and the cost,
what the stack adopted and what it created beside it.
"""

from __future__ import annotations

import functools
from typing import Any

import pulumi
import pulumi_aws as aws

from components.cluster import AdoptedCluster, AdoptedClusterArgs, Cluster
from components.network import AdoptedNetwork, AdoptedNetworkArgs, Network
from program import args
from spec import sharing
from spec.catalog import catalog
from spec.platform import PlatformConfig
from spec.pools import CpuPoolConfig, NodePoolConfig

ENDPOINT_FROM_CONFIG = "config"
ENDPOINT_AT_DEPLOY = "read from EKS at deploy time"
ENDPOINT_FROM_STACK = "the shared stack's outputs"
OWNER = "not billed to this stack: its owner pays"


class SharedStack:
    """A team stack's shared stack: its outputs through a StackReference, each released
    only once the shared network's facts (`spec.sharing.SHARED_NETWORK_FACTS`: region, VPC
    CIDR, subnets by AZ) are the ones this stack's config states. Where they are not, the
    deployment fails with the config error's one line before any resource takes a value
    of it: the cluster's provider and every subnet and VPC id wait on the check, so no
    network policy is made with a VPC range that is not the VPC's."""

    def __init__(self, cfg: PlatformConfig):
        assert cfg.shared_stack is not None
        self.name = cfg.shared_stack.name
        self.ref = pulumi.StackReference("shared", stack_name=self.name)
        reads = (
            "region",
            "vpc_cidr",
            "private_subnet_ids",
            "private_subnet_cidrs",
            "s3_endpoint_buckets",
        )
        values = pulumi.Output.all(*(self.ref.get_output(name) for name in reads))
        self.facts: pulumi.Output[dict[str, Any]] = values.apply(
            lambda v: checked_facts(cfg, dict(zip(reads, v, strict=True)))
        )
        """The shared stack's network facts, once checked against this stack's config."""

    def require_output(self, name: str) -> pulumi.Output[Any]:
        return self._after_check(self.ref.require_output(name))

    def get_output(self, name: str) -> pulumi.Output[Any]:
        return self._after_check(self.ref.get_output(name))

    def fact(self, name: str) -> pulumi.Output[Any]:
        return self.facts.apply(lambda f: f[name])

    def _after_check(self, value: pulumi.Output[Any]) -> pulumi.Output[Any]:
        return pulumi.Output.all(value, self.facts).apply(lambda v: v[0])


def checked_facts(cfg: PlatformConfig, outputs: dict[str, Any]) -> dict[str, Any]:
    """`outputs` (the shared stack's network facts) where this stack's config agrees with
    them; else the deployment stops on the one line that says which key and what value."""
    assert cfg.shared_stack is not None
    lacking = sharing.missing_facts(outputs)
    if lacking:
        raise pulumi.RunError(sharing.lacking_facts_line(cfg.shared_stack.name, lacking))
    network = cfg.network
    wrong = sharing.network_mismatch(
        cfg.shared_stack.name, cfg.region, network.vpc_cidr, network.availability_zones, outputs
    )
    if wrong is not None:
        # RunError: Pulumi prints the one line, without a Python traceback.
        raise pulumi.RunError(wrong.line())
    storage = cfg.storage
    if storage is not None:
        names = {key: storage.bucket_name(key) for key in storage.buckets}
        refused = sharing.bucket_unadmitted(
            cfg.shared_stack.name, names, storage.bucket_name_prefix, outputs
        )
        if refused is not None:
            raise pulumi.RunError(refused.line())
    return outputs


def shared_network(cfg: PlatformConfig) -> dict[str, Any]:
    """What a shared stack exports of its network for team stacks to check theirs against,
    beside the ids (`spec.sharing.SHARED_NETWORK_FACTS`, the region being every stack's)."""
    existing = cfg.network.existing
    own_endpoint = cfg.network.s3_gateway_endpoint and (
        existing is None or existing.s3_gateway_endpoint_id is None
    )
    return {
        "vpc_cidr": cfg.network.vpc_cidr,
        "private_subnet_cidrs": {z: _subnet_cidr(cfg, z) for z in cfg.network.availability_zones},
        # What its S3 endpoint admits beside ECR's layers; null where it has none of its own.
        "s3_endpoint_buckets": args.s3_endpoint_buckets(cfg) if own_endpoint else None,
    }


def reference(cfg: PlatformConfig) -> SharedStack | None:
    """The shared stack's outputs, where this is a team stack."""
    if cfg.shared_stack is None:
        return None
    return SharedStack(cfg)


def network(
    cfg: PlatformConfig,
    cluster_name: str,
    ref: SharedStack | None,
    opts: pulumi.ResourceOptions,
) -> Network | AdoptedNetwork:
    existing = cfg.network.existing
    if ref is not None:
        zones = cfg.network.availability_zones
        private = ref.require_output("private_subnet_ids")
        public = ref.get_output("public_subnet_ids")

        def subnet(ids: pulumi.Output[Any], zone: str) -> pulumi.Output[str]:
            return ids.apply(lambda s: str((s or {}).get(zone) or ""))

        kms = ref.get_output("kms_endpoint_addresses").apply(lambda a: list(a or []))
        return AdoptedNetwork(
            "network",
            AdoptedNetworkArgs(
                vpc_id=ref.require_output("vpc_id"),
                private_subnet_ids={z: subnet(private, z) for z in zones},
                public_subnet_ids={z: subnet(public, z) for z in zones},
                endpoint_addresses={"kms": kms},
                region=cfg.region,
            ),
            opts,
        )
    if existing is None:
        return Network("network", args.network_args(cfg, cluster_name), opts)
    creates_endpoint = cfg.network.s3_gateway_endpoint and existing.s3_gateway_endpoint_id is None
    return AdoptedNetwork(
        "network",
        AdoptedNetworkArgs(
            vpc_id=existing.vpc_id,
            private_subnet_ids={
                z: existing.private_subnets[z].id for z in cfg.network.availability_zones
            },
            public_subnet_ids={z: s.id for z, s in existing.public_subnets.items()},
            s3_endpoint_route_table_ids=existing.private_route_table_ids
            if creates_endpoint
            else (),
            s3_endpoint_buckets=args.s3_endpoint_buckets(cfg),
            endpoint_addresses={"kms": existing.kms_endpoint_addresses}
            if existing.kms_endpoint_addresses
            else {},
            region=cfg.region,
        ),
        opts,
    )


def cluster(
    cfg: PlatformConfig,
    cluster_name: str,
    private_subnet_ids: list[pulumi.Input[str]],
    tags: dict[str, str],
    ref: SharedStack | None,
    aws_provider: aws.Provider,
) -> tuple[Cluster | AdoptedCluster, str | None]:
    """The cluster component, and where an adopted cluster's endpoint comes from."""
    opts = pulumi.ResourceOptions(providers=[aws_provider])
    existing = cfg.cluster.existing
    shared = ref is not None and cfg.shared_stack is not None and cfg.shared_stack.cluster
    if not shared and existing is None:
        built = Cluster(
            "cluster", args.cluster_args(cfg, cluster_name, private_subnet_ids, tags), opts
        )
        return built, None
    common: dict[str, Any] = {
        "region": cfg.region,
        "version": cfg.cluster.version,
        "admin_role_arns": cfg.cluster.admin_role_arns,
        "accelerated": bool(cfg.node_pools),
    }
    if shared:
        assert ref is not None
        # The shared stack installs every managed add-on (the node monitoring agent too).
        pins = catalog().eks.versions[cfg.cluster.version].addons
        present = {a: p.version for a, p in pins.items()}
        present.update(
            {a: p.version for a, p in catalog().gpu_node_addons[cfg.cluster.version].items()}
        )
        adopted = AdoptedCluster(
            "cluster",
            AdoptedClusterArgs(
                cluster_name=ref.require_output("cluster_name"),
                security_group_id=ref.require_output("cluster_security_group_id"),
                endpoint=ref.require_output("cluster_endpoint"),
                certificate_authority_data=ref.require_output("cluster_certificate_authority"),
                node_role_arn=ref.require_output("node_role_arn"),
                present_addons=present,
                **common,
            ),
            opts,
        )
        return adopted, ENDPOINT_FROM_STACK
    assert existing is not None
    source = ENDPOINT_FROM_CONFIG
    endpoint: pulumi.Input[str]
    ca: pulumi.Input[str]
    if existing.endpoint is not None and existing.certificate_authority_data is not None:
        endpoint, ca = existing.endpoint, existing.certificate_authority_data
    else:
        # A look-up (one of two, with s3_ranges): an adopted cluster's endpoint and CA are
        # the cluster's, and config that does not state them cannot know them.
        source = ENDPOINT_AT_DEPLOY
        found = aws.eks.get_cluster_output(
            name=existing.name, opts=pulumi.InvokeOutputOptions(provider=aws_provider)
        )
        endpoint = found.endpoint
        ca = found.certificate_authorities.apply(lambda c: c[0].data)
    adopted = AdoptedCluster(
        "cluster",
        AdoptedClusterArgs(
            cluster_name=existing.name,
            security_group_id=existing.security_group_id,
            endpoint=endpoint,
            certificate_authority_data=ca,
            node_role_arn=existing.node_role_arn,
            present_addons=existing.addons,
            **common,
        ),
        opts,
    )
    return adopted, source


def _addresses_per_node(instance_type: str, efa: bool) -> int:
    """Private addresses one node takes from its subnet: its primary interface, one per EFA
    interface, and the VPC CNI's warm pool of pod addresses (one interface's worth)."""
    itype = catalog().instance(instance_type)
    efa_interfaces = itype.efa_interfaces if efa else 0
    return 1 + efa_interfaces + POD_ADDRESSES_PER_NODE


POD_ADDRESSES_PER_NODE = 30
"""Pod addresses the VPC CNI holds per node (its warm pool): a GPU node runs few pods."""


def addresses_needed(cfg: PlatformConfig) -> dict[str, dict[str, Any]]:
    """AZ -> the addresses the stack's GPU and CPU pools take there at max size, and how."""
    out: dict[str, dict[str, Any]] = {}
    pools: list[tuple[str, NodePoolConfig | CpuPoolConfig, bool]] = [
        (name, pool, pool.efa) for name, pool in cfg.node_pools.items()
    ]
    pools += [(name, pool, False) for name, pool in cfg.cpu_pools.items()]
    for name, pool, efa in pools:
        zones = cfg.pool_zones(pool)
        per_node = _addresses_per_node(pool.instance_type, efa)
        # A pool over several AZs may land all its nodes in one of them.
        for zone in zones:
            entry = out.setdefault(zone, {"addresses": 0, "pools": []})
            entry["addresses"] += per_node * pool.max_size
            entry["pools"].append(f"{name}: {pool.max_size} nodes x {per_node}")
    return out


def summary(
    cfg: PlatformConfig,
    net: Network | AdoptedNetwork,
    clu: Cluster | AdoptedCluster,
    endpoint_source: str | None,
    shared: SharedStack | None = None,
) -> dict[str, Any] | None:
    """The `adopted` output: None where the stack creates its network and cluster. A team
    stack reports its shared stack's VPC and subnet CIDRs (its outputs), not its own
    config's: the check makes them one, and what is reported is what is there."""
    if not isinstance(net, AdoptedNetwork) and not isinstance(clu, AdoptedCluster):
        return None
    out: dict[str, Any] = {}
    if isinstance(net, AdoptedNetwork):
        existing = cfg.network.existing
        source = cfg.shared_stack.name if cfg.shared_stack is not None else "config"
        vpc_cidr: pulumi.Input[str] = cfg.network.vpc_cidr
        cidrs: dict[str, pulumi.Input[str]] = {
            z: _subnet_cidr(cfg, z) for z in cfg.network.availability_zones
        }
        if shared is not None:
            vpc_cidr = shared.fact("vpc_cidr")
            subnets = shared.fact("private_subnet_cidrs")
            cidrs = {z: subnets.apply(functools.partial(_cidr_in, z)) for z in cidrs}
        out["network"] = {
            "source": source,
            "vpc_id": net.vpc_id,
            "vpc_cidr": vpc_cidr,
            "private_subnets": {
                z: {"id": net.private_subnet_ids[z], "cidr": cidrs[z]}
                for z in cfg.network.availability_zones
            },
            "public_subnets": {
                z: net.public_subnet_ids[z] for z in (existing.public_subnets if existing else {})
            },
            "s3_gateway_endpoint_id": existing.s3_gateway_endpoint_id if existing else None,
            "s3_via": _s3_route(cfg),
            "addresses_needed": addresses_needed(cfg),
            "created": net.created,
        }
    if isinstance(clu, AdoptedCluster):
        existing_cluster = cfg.cluster.existing
        out["cluster"] = {
            "source": cfg.shared_stack.name if cfg.shared_stack is not None else "config",
            "name": clu.name,
            "version": cfg.cluster.version,
            "endpoint": endpoint_source,
            "node_role_arn": clu.node_role_arn,
            "node_role": "the cluster's"
            if existing_cluster is None or existing_cluster.node_role_arn
            else "the stack's own",
            "addons_present": dict(existing_cluster.addons) if existing_cluster else {},
            "created": clu.created,
            "left_alone": clu.left_alone,
        }
    out["not_billed"] = _not_billed(out)
    return out


def _cidr_in(zone: str, cidrs: dict[str, Any]) -> str:
    return str(cidrs[zone])


def _subnet_cidr(cfg: PlatformConfig, zone: str) -> str:
    existing = cfg.network.existing
    if existing is not None:
        return existing.private_subnets[zone].cidr
    return cfg.network.layout().private[zone]


def _s3_route(cfg: PlatformConfig) -> str:
    existing = cfg.network.existing
    if existing is None:
        return "the shared stack's network"
    if existing.s3_gateway_endpoint_id:
        return f"the VPC's endpoint {existing.s3_gateway_endpoint_id}"
    if cfg.network.s3_gateway_endpoint:
        return "the stack's endpoint network-s3"
    return "NAT"


def _not_billed(out: dict[str, Any]) -> list[str]:
    lines = []
    if "network" in out:
        lines.append(f"network: the VPC, its subnets, route tables and NAT ({OWNER})")
    if "cluster" in out:
        lines.append(f"cluster: the EKS control plane and its system nodes ({OWNER})")
    return lines


def s3_ranges(region: str, aws_provider: aws.Provider) -> pulumi.Output[list[str]]:
    """The address ranges of S3 in `region`: its AWS-managed prefix list, the one a gateway
    endpoint routes (read at each `pulumi up`; AWS adds to it rarely, and a range added
    since is refused to tenant pods until the next). Tenant pods reach S3 there and at no
    other address outside the VPC; the endpoint's policy then names the buckets."""
    found = aws.ec2.get_prefix_list_output(
        name=f"com.amazonaws.{region}.s3", opts=pulumi.InvokeOutputOptions(provider=aws_provider)
    )
    return found.cidr_blocks.apply(lambda blocks: sorted(blocks))
