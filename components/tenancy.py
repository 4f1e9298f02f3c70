"""Tenancy: one namespace per team, with its quota, its network fence, its people and its role.

Owns, per entry of the `tenants` config (the tenant's name is its namespace):

- the **Namespace**, with Pod Security labels (baseline enforced, restricted
  warned and audited) and `llm-platform/tenant`;
- a **ResourceQuota** (accelerators per resource, CPU, memory, claims) and a
  **LimitRange** that gives every container requests and limits;
- **NetworkPolicies**: deny everything, then allow DNS to kube-system, traffic
  within the namespace (NCCL/gloo between workers, the rendezvous store),
  metrics scraping from `monitoring`, the EKS Pod Identity agent, HTTPS to S3's
  address ranges (its prefix list, through the gateway endpoint whose policy names the
  platform's buckets) and no other address outside the VPC, and the KubeRay
  operator (namespace `kuberay-system`) to a Ray head's dashboard port, where it reads
  and stops a RayJob's Ray job. Within a RayJob (GCS 6379, dashboard 8265 from the
  submitter pod, client 10001, the object manager's and workers' ports) is traffic within
  the namespace; Prometheus scrapes Ray's metrics port 8080 from `monitoring`. They are
  enforced only where the VPC CNI's network policy agent is on;
- **RBAC**: a Role to edit the tenant's workloads, bound to the Kubernetes
  group `llmp:tenant:<name>`, which the tenant's IAM role (`admin_role_arn`)
  gets through an EKS access entry;
- a Kueue **LocalQueue** `default` pointing at the tenant's ClusterQueue
  (when Kueue is on; it waits for Kueue's CRDs);
- the **workload role** of the service account `training`, through EKS Pod
  Identity: list, read and write only under the tenant's `s3_prefixes` of the
  datasets and checkpoints buckets, and use the storage KMS key through S3.

The component expects the AWS and Kubernetes providers through `opts.providers`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    NamespaceInitArgs,
    ResourceQuotaInitArgs,
    ResourceQuotaSpecArgs,
    ScopedResourceSelectorRequirementArgs,
    ScopeSelectorArgs,
    ServiceAccountInitArgs,
)
from pulumi_kubernetes.meta.v1 import (
    LabelSelectorArgs,
    LabelSelectorRequirementArgs,
    ObjectMetaArgs,
)
from pulumi_kubernetes.networking.v1 import (
    IPBlockArgs,
    NetworkPolicyEgressRuleArgs,
    NetworkPolicyIngressRuleArgs,
    NetworkPolicyInitArgs,
    NetworkPolicyPeerArgs,
    NetworkPolicyPortArgs,
    NetworkPolicySpecArgs,
)
from pulumi_kubernetes.rbac.v1 import (
    PolicyRuleArgs,
    RoleBindingInitArgs,
    RoleInitArgs,
    RoleRefArgs,
    SubjectArgs,
)

from components.iam import pod_identity_role
from manifests import admission, kueue, volumes
from manifests.jobs.pod import WORKLOAD_SERVICE_ACCOUNT
from manifests.jobs.pytorchjob import METRICS_PORT as TRAINER_METRICS_PORT
from manifests.jobs.rayjob import DASHBOARD_PORT
from manifests.jobs.rayjob import METRICS_PORT as RAY_METRICS_PORT
from manifests.scheduling import PRIORITIES
from spec.catalog import catalog

TENANT_LABEL = "llm-platform/tenant"
MONITORING_NAMESPACE = "monitoring"
POD_IDENTITY_AGENT = "169.254.170.23/32"
METADATA = "kubernetes.io/metadata.name"
KUBERAY_NAMESPACE = "kuberay-system"
"""The KubeRay operator's namespace (components/addons.py installs it there)."""
RAY_HEAD_SELECTOR = {"ray.io/node-type": "head"}
"""The label KubeRay puts on a RayCluster's head pod."""
METRICS_PORTS = (TRAINER_METRICS_PORT, RAY_METRICS_PORT)
"""What Prometheus (namespace `monitoring`) may reach in a training namespace: the
trainers' `/metrics` and Ray's metrics export port; nothing else of a tenant's pods."""
RAY_DASHBOARD_PORT = DASHBOARD_PORT
"""The head's dashboard (and job API), the port the RayJob builder gives it: the operator
submits no job, but reads the job's status there and stops it on deletion (ray-operator's
dashboard client)."""


def group(tenant: str) -> str:
    """The Kubernetes group of a tenant's people."""
    return f"llmp:tenant:{tenant}"


def namespace_args(tenant: str) -> NamespaceInitArgs:
    labels = {**volumes.PART_OF, **volumes.POD_SECURITY, TENANT_LABEL: tenant}
    return NamespaceInitArgs(metadata=ObjectMetaArgs(name=tenant, labels=labels))


@dataclass(frozen=True, kw_only=True)
class Tenant:
    """One team's share: its namespace's quota, its Kueue share, its IAM role and S3 prefixes."""

    cpu: int
    """vCPUs the namespace may request in total."""
    memory_gib: int
    pvcs: int = 8
    gpu_quota: Mapping[str, int] = field(default_factory=dict)
    """GPUs per pool guaranteed through Kueue (its ClusterQueue's nominal quota)."""
    serving_gpus: Mapping[str, int] = field(default_factory=dict)
    """GPUs per pool for model servers: in the namespace quota (Kueue's queue holds them
    too, unlent: manifests/queues.py)."""
    admin_role_arn: str | None = None
    """IAM role mapped to the tenant's Kubernetes group (an EKS access entry)."""
    s3_prefixes: Sequence[str] = ()
    """Prefixes its `training` service account reads and writes in the tenant buckets."""
    models_prefixes: Sequence[str] = ()
    """Prefixes it reads and writes in the models bucket (where promotion publishes)."""
    uid: int = 1000
    """The uid and gid its pods must run as (admission), owner of its Lustre directory."""
    storage_gib: int = 2048
    """Total storage its claims may request (`requests.storage`)."""
    priority_classes: Sequence[str] = ()
    """PriorityClasses its pods may use; the quota refuses the platform's others."""


def quota_args(
    namespace: pulumi.Input[str], tenant: Tenant, gpus: dict[str, int]
) -> ResourceQuotaInitArgs:
    """Hard caps: each accelerator resource (0 for kinds the tenant has no quota of)."""
    hard = {f"requests.{resource}": str(n) for resource, n in sorted(gpus.items())}
    hard |= {
        "requests.cpu": str(tenant.cpu),
        "requests.memory": f"{tenant.memory_gib}Gi",
        "persistentvolumeclaims": str(tenant.pvcs),
        "requests.storage": f"{tenant.storage_gib}Gi",
        # Nothing a tenant makes is published past the platform's ALB and WAF.
        "services.loadbalancers": "0",
        "services.nodeports": "0",
    }
    return ResourceQuotaInitArgs(
        metadata=ObjectMetaArgs(
            name=volumes.NAMESPACE_QUOTA, namespace=namespace, labels=volumes.PART_OF
        ),
        spec=ResourceQuotaSpecArgs(hard=hard),
    )


PRIORITY_QUOTA = "llmp-priorities"


def priority_quota_args(
    namespace: pulumi.Input[str], tenant: Tenant
) -> ResourceQuotaInitArgs | None:
    """No pod of a PriorityClass the tenant may not use (a quota of 0 pods scoped to those
    classes: Kubernetes refuses them at creation, whoever creates them); None: it may use
    all."""
    refused = [p.name for p in PRIORITIES if p.name not in tenant.priority_classes]
    if not refused:
        return None
    return ResourceQuotaInitArgs(
        metadata=ObjectMetaArgs(name=PRIORITY_QUOTA, namespace=namespace, labels=volumes.PART_OF),
        spec=ResourceQuotaSpecArgs(
            hard={"pods": "0"},
            scope_selector=ScopeSelectorArgs(
                match_expressions=[
                    ScopedResourceSelectorRequirementArgs(
                        scope_name="PriorityClass", operator="In", values=refused
                    )
                ]
            ),
        ),
    )


def _policy(namespace: pulumi.Input[str], name: str, spec: NetworkPolicySpecArgs) -> Any:
    return NetworkPolicyInitArgs(
        metadata=ObjectMetaArgs(name=name, namespace=namespace, labels=volumes.PART_OF),
        spec=spec,
    )


def network_policies(
    namespace: pulumi.Input[str],
    tenant: str,
    s3_ranges: pulumi.Input[Sequence[str]],
    metrics_ports: Sequence[int] = METRICS_PORTS,
    kms_addresses: pulumi.Input[Sequence[str]] = (),
) -> dict[str, NetworkPolicyInitArgs]:
    """Default deny, then the few flows a training namespace needs. Outside the VPC, its
    pods reach S3's address ranges in the region (`s3_ranges`, its prefix list) on HTTPS
    and nothing else: the S3 gateway endpoint's policy then names the buckets. Inside it,
    the KMS interface endpoint's addresses (`kms_addresses`), where the promotion job
    signs a revision."""
    every_pod = LabelSelectorArgs()
    own = NetworkPolicyPeerArgs(
        namespace_selector=LabelSelectorArgs(match_labels={METADATA: tenant})
    )
    return {
        "default-deny": _policy(
            namespace,
            "default-deny",
            NetworkPolicySpecArgs(pod_selector=every_pod, policy_types=["Ingress", "Egress"]),
        ),
        "allow-dns": _policy(
            namespace,
            "allow-dns",
            NetworkPolicySpecArgs(
                pod_selector=every_pod,
                policy_types=["Egress"],
                egress=[
                    NetworkPolicyEgressRuleArgs(
                        to=[
                            NetworkPolicyPeerArgs(
                                namespace_selector=LabelSelectorArgs(
                                    match_labels={METADATA: "kube-system"}
                                ),
                                pod_selector=LabelSelectorArgs(
                                    match_labels={"k8s-app": "kube-dns"}
                                ),
                            )
                        ],
                        ports=[
                            NetworkPolicyPortArgs(protocol="UDP", port=53),
                            NetworkPolicyPortArgs(protocol="TCP", port=53),
                        ],
                    )
                ],
            ),
        ),
        "allow-same-namespace": _policy(
            namespace,
            "allow-same-namespace",
            NetworkPolicySpecArgs(
                pod_selector=every_pod,
                policy_types=["Ingress", "Egress"],
                ingress=[NetworkPolicyIngressRuleArgs(from_=[own])],
                egress=[NetworkPolicyEgressRuleArgs(to=[own])],
            ),
        ),
        "allow-monitoring": _policy(
            namespace,
            "allow-monitoring",
            NetworkPolicySpecArgs(
                pod_selector=every_pod,
                policy_types=["Ingress"],
                ingress=[
                    NetworkPolicyIngressRuleArgs(
                        from_=[
                            NetworkPolicyPeerArgs(
                                namespace_selector=LabelSelectorArgs(
                                    match_labels={METADATA: MONITORING_NAMESPACE}
                                )
                            )
                        ],
                        ports=[
                            NetworkPolicyPortArgs(protocol="TCP", port=p)
                            for p in sorted(set(metrics_ports))
                        ],
                    )
                ],
            ),
        ),
        "allow-kuberay": _policy(
            namespace,
            "allow-kuberay",
            NetworkPolicySpecArgs(
                pod_selector=LabelSelectorArgs(match_labels=dict(RAY_HEAD_SELECTOR)),
                policy_types=["Ingress"],
                ingress=[
                    NetworkPolicyIngressRuleArgs(
                        from_=[
                            NetworkPolicyPeerArgs(
                                namespace_selector=LabelSelectorArgs(
                                    match_labels={METADATA: KUBERAY_NAMESPACE}
                                )
                            )
                        ],
                        ports=[NetworkPolicyPortArgs(protocol="TCP", port=RAY_DASHBOARD_PORT)],
                    )
                ],
            ),
        ),
        "allow-aws-apis": _policy(
            namespace,
            "allow-aws-apis",
            NetworkPolicySpecArgs(
                pod_selector=every_pod,
                policy_types=["Egress"],
                egress=[
                    # Credentials from the Pod Identity agent on the node.
                    NetworkPolicyEgressRuleArgs(
                        to=[NetworkPolicyPeerArgs(ip_block=IPBlockArgs(cidr=POD_IDENTITY_AGENT))],
                        ports=[NetworkPolicyPortArgs(protocol="TCP", port=80)],
                    ),
                    # HTTPS to S3, through the gateway endpoint (no other address outside
                    # the VPC), and to the KMS endpoint's addresses (no other inside it).
                    NetworkPolicyEgressRuleArgs(
                        to=pulumi.Output.all(s3_ranges, kms_addresses).apply(
                            lambda v: _https_peers(v[0], v[1])
                        ),
                        ports=[NetworkPolicyPortArgs(protocol="TCP", port=443)],
                    ),
                ],
            ),
        ),
    }


def _ip_blocks(cidrs: Sequence[str]) -> list[NetworkPolicyPeerArgs]:
    return [NetworkPolicyPeerArgs(ip_block=IPBlockArgs(cidr=c)) for c in cidrs]


def _https_peers(s3: Sequence[str], kms: Sequence[str]) -> list[NetworkPolicyPeerArgs]:
    """S3's ranges, then each KMS endpoint address as a /32. Never empty: a rule whose `to`
    is empty admits every destination, so an empty prefix list stops the deployment."""
    if not s3:
        raise ValueError("S3's prefix list came back empty: refusing an egress rule to anywhere")
    return _ip_blocks([*s3, *(f"{a}/32" for a in kms)])


def role_args(namespace: pulumi.Input[str]) -> RoleInitArgs:
    """Edit the tenant's workloads and queue them; read quotas, volumes and queues."""
    edit = ["get", "list", "watch", "create", "update", "patch", "delete"]
    read = ["get", "list", "watch"]
    return RoleInitArgs(
        metadata=ObjectMetaArgs(name="tenant-edit", namespace=namespace, labels=volumes.PART_OF),
        rules=[
            PolicyRuleArgs(
                api_groups=[""],
                resources=["pods", "services", "configmaps", "secrets", "persistentvolumeclaims"],
                verbs=edit,
            ),
            PolicyRuleArgs(
                api_groups=[""],
                resources=["pods/log", "events", "resourcequotas", "limitranges"],
                verbs=read,
            ),
            PolicyRuleArgs(api_groups=["batch"], resources=["jobs", "cronjobs"], verbs=edit),
            # Training jobs (Kubeflow Trainer v2), and the JobSet the Trainer makes of each.
            PolicyRuleArgs(
                api_groups=["trainer.kubeflow.org"], resources=["trainjobs"], verbs=edit
            ),
            PolicyRuleArgs(api_groups=["jobset.x-k8s.io"], resources=["jobsets"], verbs=read),
            # The data jobs (`llmp job submit` of a data kind): the RayJob, and the RayCluster
            # KubeRay makes of it to read.
            PolicyRuleArgs(api_groups=["ray.io"], resources=["rayjobs"], verbs=edit),
            PolicyRuleArgs(api_groups=["ray.io"], resources=["rayclusters"], verbs=read),
            PolicyRuleArgs(
                api_groups=["kueue.x-k8s.io"], resources=["localqueues", "workloads"], verbs=read
            ),
        ],
    )


def role_binding_args(namespace: pulumi.Input[str], tenant: str) -> RoleBindingInitArgs:
    return RoleBindingInitArgs(
        metadata=ObjectMetaArgs(name="tenant-edit", namespace=namespace, labels=volumes.PART_OF),
        role_ref=RoleRefArgs(
            api_group="rbac.authorization.k8s.io", kind="Role", name="tenant-edit"
        ),
        subjects=[
            SubjectArgs(kind="Group", name=group(tenant), api_group="rbac.authorization.k8s.io")
        ],
    )


_READ_WRITE = [
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
]


def _prefix_statements(name: str, buckets: list[str], prefixes: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "Sid": f"List{name}",
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": buckets,
            "Condition": {"StringLike": {"s3:prefix": [f"{p}*" for p in prefixes]}},
        },
        {
            "Sid": f"ReadWrite{name}",
            "Effect": "Allow",
            "Action": list(_READ_WRITE),
            "Resource": [f"{b}/{p}*" for b in buckets for p in prefixes],
        },
    ]


def s3_policy(
    buckets: list[str],
    prefixes: list[str],
    kms_key_arn: str | None,
    region: str,
    models: tuple[str, list[str]] | None = None,
    signing_key_arn: str | None = None,
) -> dict[str, Any]:
    """List, read and write under the tenant's prefixes of the named buckets, and under its
    `models` prefixes of the models bucket (ARN, prefixes), nothing more; with `models`,
    sign revisions with the stack's signing key (ECDSA_SHA_256 over a digest only)."""
    statements: list[dict[str, Any]] = []
    if buckets and prefixes:
        statements += _prefix_statements("OwnPrefixes", buckets, prefixes)
    if models is not None:
        statements += _prefix_statements("OwnModelPrefixes", [models[0]], models[1])
    if models is not None and signing_key_arn:
        statements.append(
            {
                "Sid": "SignRevisions",
                "Effect": "Allow",
                "Action": "kms:Sign",
                "Resource": signing_key_arn,
                "Condition": {
                    "StringEquals": {
                        "kms:SigningAlgorithm": "ECDSA_SHA_256",
                        "kms:MessageType": "DIGEST",
                    }
                },
            }
        )
    if kms_key_arn:
        statements.append(
            {
                "Sid": "UseBucketKeyThroughS3",
                "Effect": "Allow",
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Resource": kms_key_arn,
                "Condition": {"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}},
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def _s3_policy_json(
    prefixes: list[str], models_prefixes: list[str], region: str, values: list[Any]
) -> str:
    """`values`: the KMS key ARN (or None), the models bucket's ARN (or None), the revision
    signing key's ARN (or None), then the tenant buckets' ARNs (none when the tenant has
    no `prefixes` in them)."""
    kms, models_arn, signing, buckets = values[0], values[1], values[2], list(values[3:])
    models = (models_arn, models_prefixes) if models_arn and models_prefixes else None
    chosen = buckets if prefixes else []
    return json.dumps(s3_policy(chosen, prefixes, kms, region, models, signing))


@dataclass(frozen=True, kw_only=True)
class TenantBuckets:
    arns: list[pulumi.Input[str]]
    """The datasets and checkpoints buckets' ARNs (empty: the stack lacks one of them)."""
    kms_key_arn: pulumi.Input[str] | None
    models_arn: pulumi.Input[str] | None = None
    """The models bucket's ARN, when the stack has one."""
    signing_key_arn: pulumi.Input[str] | None = None
    """The key that signs the models bucket's revisions (`Storage.signing_key_arn`)."""


@dataclass(frozen=True, kw_only=True)
class TenancyArgs:
    tenants: Mapping[str, Tenant]
    """By name: each name is also its namespace."""
    gpu_resources: dict[str, str]
    """Pool name -> its accelerator resource (nvidia.com/gpu, aws.amazon.com/neuron)."""
    pool_partitions: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """A MIG pool's name -> its partitions' resources and how many one GPU holds: a tenant's
    GPUs there are that many partitions in its namespace's quota."""
    cluster_name: pulumi.Input[str]
    region: str
    s3_ranges: pulumi.Input[Sequence[str]]
    """S3's address ranges in the region: tenant pods reach them and nothing else outside
    the VPC."""
    kms_addresses: pulumi.Input[Sequence[str]] = ()
    """The KMS interface endpoint's addresses, the one endpoint tenant pods reach (the
    promotion job signs revisions); empty: none."""
    buckets: TenantBuckets | None = None
    """None: no storage, so no workload S3 access."""
    kueue_ready: list[pulumi.Resource] = field(default_factory=list)
    """The Kueue release (CRDs); empty: Kueue is off and no LocalQueue is made."""
    namespace_prefix: str = ""
    """On a shared cluster, the team stack's `TEAM-`: each tenant's namespace (cluster-scoped),
    ClusterQueue and Kubernetes group are `TEAM-TENANT`, so two teams never declare one."""


class Tenancy(pulumi.ComponentResource):
    namespaces: dict[str, pulumi.Output[str]]
    """Tenant -> its namespace's name (an output: using it waits for the namespace)."""
    workload_role_arns: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, args: TenancyArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmp:tenancy:Tenancy", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        accelerators = sorted({k.resource for k in catalog().accelerator_kinds.values()})
        self.namespaces = {}
        self.workload_role_arns = {}
        if args.tenants:
            tenants = LabelSelectorArgs(
                match_expressions=[
                    LabelSelectorRequirementArgs(key=TENANT_LABEL, operator="Exists")
                ]
            )
            for kind, rules, checks, member in (
                ("services", admission.SERVICE_RULES, admission.SERVICE_CHECKS, None),
                # Only people's Ingresses: the platform's own (serving) follows its config.
                ("ingresses", admission.INGRESS_RULES, admission.INGRESS_CHECKS, "llmp:tenant:"),
            ):
                policy_name = f"{args.namespace_prefix}llmp-tenant-{kind}"
                k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
                    f"{name}-{kind}-policy",
                    admission.policy(policy_name, rules, checks, group_prefix=member),
                    opts=child,
                )
                k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
                    f"{name}-{kind}-binding",
                    admission.binding(policy_name, policy_name, tenants),
                    opts=child,
                )
        for tenant, cfg in args.tenants.items():
            prefix = f"{name}-{tenant}"
            # The tenant's name on the cluster: its namespace, its ClusterQueue, its group.
            ns_key = f"{args.namespace_prefix}{tenant}"
            ns = k8s.core.v1.Namespace(f"{prefix}-ns", namespace_args(ns_key), opts=child)
            ns_name = ns.metadata.name
            self.namespaces[tenant] = ns_name

            gpus = dict.fromkeys(accelerators, 0)
            for pool, n in [*cfg.gpu_quota.items(), *cfg.serving_gpus.items()]:
                for resource, each in (
                    args.pool_partitions.get(pool) or {args.gpu_resources[pool]: 1}
                ).items():
                    gpus[resource] = gpus.get(resource, 0) + n * each
            k8s.core.v1.ResourceQuota(f"{prefix}-quota", quota_args(ns_name, cfg, gpus), opts=child)
            priorities = priority_quota_args(ns_name, cfg)
            if priorities is not None:
                k8s.core.v1.ResourceQuota(f"{prefix}-priorities", priorities, opts=child)
            workloads = f"llmp-tenant-pods-{ns_key}"
            k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
                f"{prefix}-pods-policy",
                admission.policy(
                    workloads,
                    admission.WORKLOAD_RULES,
                    admission.workload_checks(cfg.uid),
                    group=group(ns_key),
                    variables={"specs": admission.POD_SPECS},
                ),
                opts=child,
            )
            k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
                f"{prefix}-pods-binding",
                admission.binding(
                    workloads, workloads, LabelSelectorArgs(match_labels={METADATA: ns_key})
                ),
                opts=child,
            )
            k8s.core.v1.LimitRange(
                f"{prefix}-limits",
                volumes.limit_range(namespace=ns_name, quota=volumes.NamespaceQuota()),
                opts=child,
            )
            for policy, policy_args in network_policies(
                ns_name, ns_key, args.s3_ranges, kms_addresses=args.kms_addresses
            ).items():
                k8s.networking.v1.NetworkPolicy(f"{prefix}-{policy}", policy_args, opts=child)
            k8s.rbac.v1.Role(f"{prefix}-role", role_args(ns_name), opts=child)
            k8s.rbac.v1.RoleBinding(
                f"{prefix}-role-binding", role_binding_args(ns_name, ns_key), opts=child
            )
            if cfg.admin_role_arn:
                aws.eks.AccessEntry(
                    f"{prefix}-access",
                    cluster_name=args.cluster_name,
                    principal_arn=cfg.admin_role_arn,
                    type="STANDARD",
                    kubernetes_groups=[group(ns_key)],
                    opts=child,
                )
            if args.kueue_ready:
                queue = kueue.local_queue(ns_key).manifest()
                k8s.apiextensions.CustomResource(
                    f"{prefix}-local-queue",
                    api_version=queue["apiVersion"],
                    kind=queue["kind"],
                    metadata={**queue["metadata"], "namespace": ns_name},
                    spec=queue["spec"],
                    opts=pulumi.ResourceOptions(parent=self, depends_on=args.kueue_ready),
                )

            k8s.core.v1.ServiceAccount(
                f"{prefix}-sa",
                ServiceAccountInitArgs(
                    metadata=ObjectMetaArgs(
                        name=WORKLOAD_SERVICE_ACCOUNT, namespace=ns_name, labels=volumes.PART_OF
                    ),
                    automount_service_account_token=False,
                ),
                opts=child,
            )
            b = args.buckets
            own = bool(b is not None and b.arns and cfg.s3_prefixes)
            models = bool(b is not None and b.models_arn is not None and cfg.models_prefixes)
            if b is not None and (own or models):
                s3_access = pulumi.Output.all(
                    b.kms_key_arn,
                    b.models_arn if models else None,
                    b.signing_key_arn if models else None,
                    *(b.arns if own else []),
                ).apply(
                    # Bound now (a closure would see the loop's last tenant).
                    functools.partial(
                        _s3_policy_json,
                        list(cfg.s3_prefixes) if own else [],
                        list(cfg.models_prefixes),
                        args.region,
                    )
                )
                role, _ = pod_identity_role(
                    f"{prefix}-workload",
                    parent=self,
                    description=f"Tenant {tenant}: service account {WORKLOAD_SERVICE_ACCOUNT}",
                    policy=s3_access,
                    policy_name=f"{prefix}-workload-s3",
                    cluster_name=args.cluster_name,
                    namespace=ns_key,
                    service_account=WORKLOAD_SERVICE_ACCOUNT,
                )
                self.workload_role_arns[tenant] = role.arn

        self.register_outputs(
            {"namespaces": self.namespaces, "workload_role_arns": self.workload_role_arns}
        )
