"""Cluster: the EKS control plane, its CPU system pool and the core managed add-ons.

Owns:
- a KMS key for envelope encryption of Kubernetes secrets;
- the control-plane role, and the CloudWatch log group (created first, so its
  retention is ours rather than "never expire");
- the EKS cluster: private endpoint, an optional public one restricted to
  configured CIDRs, audit logs, access entries (API authentication mode);
- the node role shared by every pool;
- managed add-ons: vpc-cni (with its own Pod Identity role), kube-proxy and
  the Pod Identity agent before any node, CoreDNS after the system pool, and
  where the stack has accelerated pools the EKS node monitoring agent: it sets
  the `AcceleratedHardwareReady` node condition (DCGM health, XIDs, NVLink)
  that node auto-repair acts on; without it repair sees only NotReady. Its
  DCGM host engine DaemonSet tolerates no taint by default, so it is given the
  accelerator taints (it runs beside the GPU operator's exporter, whose engine
  is embedded and takes no host port);
- the CPU system pool that runs add-ons and controllers;
- a Kubernetes provider built from the cluster's outputs.

Node groups take `cluster.node_ready_after` as an ordering edge: nodes that
join before vpc-cni is active stay NotReady.

`AdoptedCluster` is a cluster someone else owns, with only what the stack adds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.iam import addon_role, service_trust
from components.managed_nodes import PoolSize, launch_template, managed_node_group
from spec.catalog import Addon, catalog
from spec.labels import POOL_LABEL

_MANAGED = "arn:aws:iam::aws:policy"
NODE_MONITORING_AGENT = "eks-node-monitoring-agent"
_CLUSTER_ADMIN = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"


@dataclass(frozen=True, kw_only=True)
class SystemPool:
    """The CPU node group of add-ons and controllers (no taint)."""

    instance_type: str = "m7i.4xlarge"
    disk_size_gib: int = 100
    release_version: str | None = None
    """The EKS AMI release the nodes run (None: the latest at creation)."""
    size: PoolSize = field(default_factory=lambda: PoolSize(min_size=2, desired_size=2, max_size=4))


@dataclass(frozen=True, kw_only=True)
class ClusterArgs:
    cluster_name: str
    """EKS cluster name (fixed, so the log group name is known before the cluster exists)."""
    region: str
    """Region, for the kubeconfig's token command."""
    private_subnet_ids: list[pulumi.Input[str]]
    """Subnets of the control-plane ENIs and the system pool."""
    tags: dict[str, str]
    """Tags for instances and volumes the system pool launches."""
    version: str
    """Kubernetes minor version; the catalog pins its managed add-ons."""
    system_pool: SystemPool = field(default_factory=SystemPool)
    endpoint_public_access: bool = False
    public_access_cidrs: Sequence[str] = ()
    """CIDRs that may reach a public endpoint (required with one)."""
    admin_role_arns: Sequence[str] = ()
    """IAM roles given cluster-admin through access entries."""
    log_types: Sequence[str] = ("api", "audit", "authenticator")
    log_retention_days: int = 90
    support_type: Literal["STANDARD", "EXTENDED"] = "STANDARD"
    deletion_protection: bool = False
    accelerated: bool = False
    """The stack has accelerated pools: install the EKS node monitoring agent."""


class Cluster(pulumi.ComponentResource):
    name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    version: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    """The EKS-managed cluster security group; every node interface carries it."""
    node_role_arn: pulumi.Output[str]
    node_ready_after: list[pulumi.Resource]
    """Resources a node group must wait for: vpc-cni, kube-proxy, the node role's policies."""
    kubeconfig: pulumi.Output[str]
    certificate_authority: pulumi.Output[str]
    provider: k8s.Provider
    system_nodes: aws.eks.NodeGroup
    """The CPU node group; controllers that must be running to count as installed wait on it."""

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmp:cluster:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        versions = catalog().eks.versions[args.version]
        self.addon_versions: dict[str, str] = {}
        """Managed add-on -> the version installed (what a shared stack tells team stacks)."""

        key = aws.kms.Key(
            f"{name}-secrets",
            description=f"EKS secrets envelope encryption for {args.cluster_name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            opts=child,
        )
        aws.kms.Alias(
            f"{name}-secrets",
            name=f"alias/{args.cluster_name}-eks-secrets",
            target_key_id=key.key_id,
            opts=child,
        )

        role = aws.iam.Role(
            f"{name}-control-plane",
            assume_role_policy=service_trust("eks.amazonaws.com", tag_session=True),
            description="EKS control plane",
            opts=child,
        )
        role_policy = aws.iam.RolePolicyAttachment(
            f"{name}-control-plane",
            role=role.name,
            policy_arn=f"{_MANAGED}/AmazonEKSClusterPolicy",
            opts=child,
        )
        log_group = aws.cloudwatch.LogGroup(
            f"{name}-logs",
            name=f"/aws/eks/{args.cluster_name}/cluster",
            retention_in_days=args.log_retention_days,
            opts=child,
        )

        cluster = aws.eks.Cluster(
            f"{name}-eks",
            name=args.cluster_name,
            version=args.version,
            role_arn=role.arn,
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=args.private_subnet_ids,
                endpoint_private_access=True,
                endpoint_public_access=args.endpoint_public_access,
                public_access_cidrs=list(args.public_access_cidrs) or None,
            ),
            encryption_config=aws.eks.ClusterEncryptionConfigArgs(
                provider=aws.eks.ClusterEncryptionConfigProviderArgs(key_arn=key.arn),
                resources=["secrets"],
            ),
            enabled_cluster_log_types=list(args.log_types),
            access_config=aws.eks.ClusterAccessConfigArgs(
                authentication_mode="API",
                # The identity running `pulumi up` must reach the API to create
                # the Kubernetes objects of this same program.
                bootstrap_cluster_creator_admin_permissions=True,
            ),
            # Core add-ons are managed below at pinned versions instead.
            bootstrap_self_managed_addons=False,
            upgrade_policy=aws.eks.ClusterUpgradePolicyArgs(support_type=args.support_type),
            deletion_protection=args.deletion_protection,
            opts=pulumi.ResourceOptions(
                parent=self,
                # EKS must be able to use the role when it creates the cluster,
                # and it writes into the log group we sized.
                depends_on=[role_policy, log_group],
            ),
        )

        for i, admin in enumerate(args.admin_role_arns):
            entry = aws.eks.AccessEntry(
                f"{name}-admin-{i}",
                cluster_name=cluster.name,
                principal_arn=admin,
                type="STANDARD",
                opts=child,
            )
            aws.eks.AccessPolicyAssociation(
                f"{name}-admin-{i}",
                cluster_name=cluster.name,
                principal_arn=entry.principal_arn,
                policy_arn=_CLUSTER_ADMIN,
                access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                opts=child,
            )

        node_role, node_policies = node_role_of(name, "EKS worker nodes", child)

        # vpc-cni gets its own role through Pod Identity, so the node role
        # carries no ENI-management rights that every pod could borrow.
        cni_role = addon_role(
            f"{name}-vpc-cni",
            parent=self,
            description="vpc-cni (aws-node) through EKS Pod Identity",
            managed_policy_arn=f"{_MANAGED}/AmazonEKS_CNI_Policy",
        )

        def addon(
            addon_name: str,
            wait_for: list[pulumi.Resource] | None = None,
            role: tuple[pulumi.Input[str], str] | None = None,
            configuration: dict[str, object] | None = None,
            pin: Addon | None = None,
        ) -> aws.eks.Addon:
            version = (pin or versions.addons[addon_name]).version
            self.addon_versions[addon_name] = version
            return managed_addon(
                f"{name}-{addon_name}",
                addon_name,
                version,
                parent=self,
                cluster_name=cluster.name,
                role=role,
                configuration=configuration,
                depends_on=wait_for or [],
            )

        pod_identity_agent = addon("eks-pod-identity-agent")
        vpc_cni = addon(
            "vpc-cni",
            role=(cni_role.arn, "aws-node"),
            # aws-node fetches its credentials from the Pod Identity agent.
            wait_for=[pod_identity_agent],
            # The tenants' NetworkPolicies are only enforced by the VPC CNI's
            # network policy agent; without it they are silently ignored. The agent's
            # image stays the add-on build's own: each driver needs its agent (1.23 talks
            # to agent 1.4.1 over a Unix socket), so nothing here pins nodeAgent.
            configuration={"enableNetworkPolicy": "true"},
        )
        kube_proxy = addon("kube-proxy")
        # A node that joins before vpc-cni is active stays NotReady; one whose
        # role lacks the worker policy cannot join at all.
        self.node_ready_after = [vpc_cni, kube_proxy, *node_policies]

        system = args.system_pool
        system_template = launch_template(
            f"{name}-system",
            parent=self,
            disk_size_gib=system.disk_size_gib,
            tags=args.tags,
        )
        system_group = managed_node_group(
            f"{name}-system",
            parent=self,
            cluster_name=cluster.name,
            cluster_version=cluster.version,
            node_role_arn=node_role.arn,
            subnet_ids=args.private_subnet_ids,
            template=system_template,
            instance_type=system.instance_type,
            ami_type=catalog().ami_type(system.instance_type),
            capacity_type="ON_DEMAND",
            size=system.size,
            release_version=system.release_version,
            labels={POOL_LABEL: "system"},
            wait_for=self.node_ready_after,
        )
        # CoreDNS is a Deployment: it only becomes ACTIVE once nodes can run it.
        addon("coredns", wait_for=[system_group])
        if args.accelerated:
            # Its node agent runs on every node, the system pool's included: ACTIVE once
            # they run. GPU pools need not wait for it; nodes that join later get it.
            addon(
                NODE_MONITORING_AGENT,
                wait_for=[system_group],
                configuration={"dcgmAgent": {"tolerations": catalog().accelerator_tolerations()}},
                pin=catalog().gpu_node_addons[args.version][NODE_MONITORING_AGENT],
            )
        self.system_nodes = system_group

        self.name = cluster.name
        self.endpoint = cluster.endpoint
        self.version = cluster.version
        self.security_group_id = cluster.vpc_config.cluster_security_group_id
        self.node_role_arn = node_role.arn
        self.certificate_authority = cluster.certificate_authority.data
        self.kubeconfig, self.provider = kubernetes_provider(
            name,
            cluster.name,
            cluster.endpoint,
            cluster.certificate_authority.data,
            args.region,
            child,
        )
        self.register_outputs(
            {
                "name": self.name,
                "endpoint": self.endpoint,
                "version": self.version,
                "security_group_id": self.security_group_id,
                "node_role_arn": self.node_role_arn,
                "kubeconfig": self.kubeconfig,
            }
        )


def kubernetes_provider(
    name: str,
    cluster_name: pulumi.Input[str],
    endpoint: pulumi.Input[str],
    ca_data: pulumi.Input[str],
    region: str,
    opts: pulumi.ResourceOptions,
) -> tuple[pulumi.Output[str], k8s.Provider]:
    """The kubeconfig of a cluster, created or adopted, and the provider `<name>-k8s` on it."""
    kubeconfig = pulumi.Output.all(cluster_name, endpoint, ca_data).apply(
        lambda v: _kubeconfig(v[0], v[1], v[2], region)
    )
    provider = k8s.Provider(
        f"{name}-k8s",
        kubeconfig=kubeconfig,
        # Large CRDs (kube-prometheus-stack) exceed the client-side apply
        # annotation limit; server-side apply has no such limit.
        enable_server_side_apply=True,
        opts=opts,
    )
    return kubeconfig, provider


def node_role_of(
    name: str, description: str, opts: pulumi.ResourceOptions
) -> tuple[aws.iam.Role, list[aws.iam.RolePolicyAttachment]]:
    """The nodes' role `<name>-node` and its three managed policies (worker, ECR read, SSM)."""
    role = aws.iam.Role(
        f"{name}-node",
        assume_role_policy=service_trust("ec2.amazonaws.com"),
        description=description,
        opts=opts,
    )
    policies = [
        aws.iam.RolePolicyAttachment(
            f"{name}-node-{short}",
            role=role.name,
            policy_arn=f"{_MANAGED}/{policy}",
            opts=opts,
        )
        for short, policy in (
            ("worker", "AmazonEKSWorkerNodePolicy"),
            ("ecr", "AmazonEC2ContainerRegistryReadOnly"),
            ("ssm", "AmazonSSMManagedInstanceCore"),
        )
    ]
    return role, policies


def managed_addon(
    resource_name: str,
    addon_name: str,
    version: str,
    *,
    parent: pulumi.Resource,
    cluster_name: pulumi.Input[str],
    role: tuple[pulumi.Input[str], str] | None = None,
    configuration: dict[str, object] | None = None,
    depends_on: Sequence[pulumi.Resource] = (),
) -> aws.eks.Addon:
    """An EKS managed add-on at a pinned version; `role` (its ARN, the service account) is
    handed to the add-on's pods through a Pod Identity association the add-on holds."""
    return aws.eks.Addon(
        resource_name,
        cluster_name=cluster_name,
        addon_name=addon_name,
        addon_version=version,
        resolve_conflicts_on_create="OVERWRITE",
        resolve_conflicts_on_update="OVERWRITE",
        pod_identity_associations=[
            aws.eks.AddonPodIdentityAssociationArgs(role_arn=role[0], service_account=role[1])
        ]
        if role is not None
        else None,
        configuration_values=json.dumps(configuration) if configuration else None,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )


def _kubeconfig(cluster_name: str, endpoint: str, ca_data: str, region: str) -> str:
    """A kubeconfig that gets short-lived tokens from the AWS CLI (no static credentials)."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": cluster_name,
                    "cluster": {"server": endpoint, "certificate-authority-data": ca_data},
                }
            ],
            "contexts": [
                {"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}
            ],
            "current-context": cluster_name,
            "users": [
                {
                    "name": cluster_name,
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "aws",
                            "args": [
                                "eks",
                                "get-token",
                                "--cluster-name",
                                cluster_name,
                                "--region",
                                region,
                                "--output",
                                "json",
                            ],
                        }
                    },
                }
            ],
        }
    )


@dataclass(frozen=True, kw_only=True)
class AdoptedClusterArgs:
    cluster_name: pulumi.Input[str]
    """The adopted cluster's name."""
    region: str
    version: str
    """Its Kubernetes minor version (as the stack's config states it; `llmp verify` reads it)."""
    security_group_id: pulumi.Input[str]
    """Its EKS-managed cluster security group."""
    endpoint: pulumi.Input[str]
    """Its API endpoint and CA (base64): config, a shared stack's outputs, or read from EKS."""
    certificate_authority_data: pulumi.Input[str]
    node_role_arn: pulumi.Input[str] | None = None
    """The cluster's node role for the stack's pools; none: the stack creates its own."""
    present_addons: Mapping[str, str] = field(default_factory=dict)
    """EKS add-ons already installed (name -> version): never declared here."""
    admin_role_arns: Sequence[str] = ()
    accelerated: bool = False


class AdoptedCluster(pulumi.ComponentResource):
    """Cluster seen from an EKS cluster someone else owns.

    Owns only what the stack adds to it: the managed add-ons it lacks (at the
    catalog's pins; one present at another version is left to its owner and
    named in `left_alone`), access entries for `admin_role_arns`, a node role
    where the cluster's is not given, and the Kubernetes provider built from the
    endpoint and CA it is given. No control plane, KMS key, log group or system
    pool: those are the owner's.
    """

    name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    version: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    node_role_arn: pulumi.Output[str]
    node_ready_after: list[pulumi.Resource]
    kubeconfig: pulumi.Output[str]
    provider: k8s.Provider
    system_nodes: None = None
    """The owner's nodes run the controllers: nothing here to wait for."""
    created: list[str]
    left_alone: list[str]
    """Add-ons present at another version than the catalog's: named, not fought over."""

    def __init__(
        self, name: str, args: AdoptedClusterArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("llmp:cluster:AdoptedCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        versions = catalog().eks.versions[args.version]
        self.created, self.left_alone = [], []
        cluster_name = pulumi.Output.from_input(args.cluster_name)

        for i, admin in enumerate(args.admin_role_arns):
            entry = aws.eks.AccessEntry(
                f"{name}-admin-{i}",
                cluster_name=cluster_name,
                principal_arn=admin,
                type="STANDARD",
                opts=child,
            )
            aws.eks.AccessPolicyAssociation(
                f"{name}-admin-{i}",
                cluster_name=cluster_name,
                principal_arn=entry.principal_arn,
                policy_arn=_CLUSTER_ADMIN,
                access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                opts=child,
            )
            self.created.append(f"access entry {name}-admin-{i}")

        node_policies: list[pulumi.Resource] = []
        if args.node_role_arn is not None:
            self.node_role_arn = pulumi.Output.from_input(args.node_role_arn)
        else:
            node_role, policies = node_role_of(
                name, "EKS worker nodes of this stack's pools", child
            )
            node_policies = list(policies)
            self.node_role_arn = node_role.arn
            self.created.append(f"node role {name}-node")

        pins = {a: pin.version for a, pin in versions.addons.items()}
        if args.accelerated:
            pins[NODE_MONITORING_AGENT] = (
                catalog().gpu_node_addons[args.version][NODE_MONITORING_AGENT].version
            )
        added: dict[str, aws.eks.Addon] = {}

        def addon(
            addon_name: str,
            wait_for: Sequence[pulumi.Resource] = (),
            role: tuple[pulumi.Input[str], str] | None = None,
            configuration: dict[str, object] | None = None,
        ) -> None:
            present = args.present_addons.get(addon_name)
            if present is not None:
                if present != pins[addon_name]:
                    self.left_alone.append(
                        f"{addon_name} {present} (the catalog pins {pins[addon_name]}): "
                        "installed by the cluster's owner, left as it is"
                    )
                return
            added[addon_name] = managed_addon(
                f"{name}-{addon_name}",
                addon_name,
                pins[addon_name],
                parent=self,
                cluster_name=cluster_name,
                role=role,
                configuration=configuration,
                depends_on=wait_for,
            )
            self.created.append(f"add-on {addon_name} {pins[addon_name]}")

        addon("eks-pod-identity-agent")
        if "vpc-cni" not in args.present_addons:
            cni_role = addon_role(
                f"{name}-vpc-cni",
                parent=self,
                description="vpc-cni (aws-node) through EKS Pod Identity",
                managed_policy_arn=f"{_MANAGED}/AmazonEKS_CNI_Policy",
            )
            agent = added.get("eks-pod-identity-agent")
            addon(
                "vpc-cni",
                role=(cni_role.arn, "aws-node"),
                wait_for=[agent] if agent is not None else [],
                configuration={"enableNetworkPolicy": "true"},
            )
        else:
            addon("vpc-cni")
        addon("kube-proxy")
        addon("coredns")
        if args.accelerated:
            addon(
                NODE_MONITORING_AGENT,
                configuration={"dcgmAgent": {"tolerations": catalog().accelerator_tolerations()}},
            )
        # Nodes of the stack's pools join once the networking add-ons it installs are active.
        self.node_ready_after = [
            *(added[a] for a in ("vpc-cni", "kube-proxy") if a in added),
            *node_policies,
        ]

        self.name = cluster_name
        self.endpoint = pulumi.Output.from_input(args.endpoint)
        self.version = pulumi.Output.from_input(args.version)
        self.security_group_id = pulumi.Output.from_input(args.security_group_id)
        self.kubeconfig, self.provider = kubernetes_provider(
            name, cluster_name, args.endpoint, args.certificate_authority_data, args.region, child
        )
        self.register_outputs(
            {
                "name": self.name,
                "endpoint": self.endpoint,
                "version": self.version,
                "security_group_id": self.security_group_id,
                "node_role_arn": self.node_role_arn,
                "kubeconfig": self.kubeconfig,
            }
        )
