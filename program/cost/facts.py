"""What a stack's resources say about its bill: the one place resource types meet prices.

`facts(declared)` reads the declared resources (the program's own, through the
ledger, or a synthesized plan's) into the few figures the price model needs:
NAT gateways and their addresses, the control plane's support tier, each node
group with its launch template's volume, the buckets with their lifecycle and
replication, the file system, what the monitoring stack runs, the serving
load balancer and its WAF. Every resource type is classified in `PRICED` or
`FREE`; a type in neither is listed as not priced, so a resource added to the
composition cannot be left out of the estimate without a word.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitoring import charts as monitoring_component
from program.ledger import COMPUTED, Declared
from spec.catalog import catalog
from spec.labels import CPU_POOL_TAINT, POOL_LABEL

HELM = "kubernetes:helm.sh/v3:Release"
INGRESS = "kubernetes:networking.k8s.io/v1:Ingress"
SCHEME_ANNOTATION = "alb.ingress.kubernetes.io/scheme"

PRICED: Mapping[str, str] = {
    "aws:ec2/natGateway:NatGateway": "per gateway-hour (network)",
    "aws:ec2/eip:Eip": "per public IPv4 address-hour (network)",
    "aws:ec2/vpcEndpoint:VpcEndpoint": (
        "an interface endpoint per AZ-hour; an S3 gateway endpoint is free (network)"
    ),
    "aws:eks/cluster:Cluster": "per cluster-hour at its support tier (cluster)",
    "aws:eks/nodeGroup:NodeGroup": "its instances at desired size, by capacity type",
    "aws:ec2/launchTemplate:LaunchTemplate": "its root volume, per node of its node group",
    "aws:kms/key:Key": "per key-month",
    "aws:s3/bucket:Bucket": "the storage model of its usage and lifecycle (storage)",
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": "tiering its bucket",
    "aws:s3/bucketReplicationConfig:BucketReplicationConfig": "transfer, and RTC where on",
    "aws:fsx/lustreFileSystem:LustreFileSystem": "per GB-month at its throughput tier",
    "aws:cloudwatch/logGroup:LogGroup": "not estimated: its volume is not in the config",
    HELM: "the Prometheus volume, the FSx exporter's CloudWatch requests (monitoring)",
    INGRESS: "the Application Load Balancer it makes (serving)",
    "aws:wafv2/webAcl:WebAcl": "per ACL-month and per rule-month",
    "aws:secretsmanager/secret:Secret": "per secret-month (serving's gateway keys)",
    "aws:sns/topic:Topic": "not estimated: billed per publish and delivery (monitoring)",
    "aws:wafv2/webAclLoggingConfiguration:WebAclLoggingConfiguration": (
        "not estimated: WAF's log delivery to S3 is billed per GB (vended logs), and the "
        "request volume is not in the config (serving)"
    ),
    "aws:ec2/subnet:Subnet": "free; an internet-facing ALB holds an address in each public one",
}
"""Types whose resources the model prices, and how."""

FREE: Mapping[str, str] = {
    "aws:ec2/vpc:Vpc": "free",
    "pulumi:pulumi:StackReference": "free: a read of a shared stack's outputs",
    "aws:ec2/internetGateway:InternetGateway": "free (data transfer is not estimated)",
    "aws:ec2/routeTable:RouteTable": "free",
    "aws:ec2/routeTableAssociation:RouteTableAssociation": "free",
    "aws:ec2/securityGroup:SecurityGroup": "free",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": "free",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": "free",
    "aws:ec2/placementGroup:PlacementGroup": "free",
    "aws:autoscaling/tag:Tag": "free (a tag of a node group's Auto Scaling group)",
    "aws:eks/addon:Addon": "free; its pods run on the nodes priced",
    "aws:eks/accessEntry:AccessEntry": "free",
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation": "free",
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": "free",
    "aws:iam/role:Role": "free",
    "aws:iam/rolePolicy:RolePolicy": "free",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": "free",
    "aws:kms/alias:Alias": "free",
    "aws:secretsmanager/secretVersion:SecretVersion": "free (its secret is priced per month)",
    "aws:kms/keyPolicy:KeyPolicy": "free",
    "aws:cloudwatch/queryDefinition:QueryDefinition": (
        "free (a saved query; running it is billed per GB scanned, not estimated)"
    ),
    "aws:s3/bucketLogging:BucketLogging": "free (the logs are stored in the logs bucket)",
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": "free",
    "aws:s3/bucketPolicy:BucketPolicy": "free",
    "aws:s3/bucketObjectv2:BucketObjectv2": (
        "free (a zero-byte directory object of a tenant's prefix; one request)"
    ),
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": "free",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": (
        "free (bucket keys keep KMS requests low)"
    ),
    "aws:s3/bucketVersioning:BucketVersioning": "free (old versions are in the storage model)",
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": (
        "free (its S3 requests are not estimated)"
    ),
    # ECR bills $0.10 per GB-month of images stored (plus transfer out of the region); how
    # much the trainer images take is not in the config, so there is nothing to multiply.
    "aws:ecr/repository:Repository": "priced by stored GB, not in the config: not estimated",
    "aws:ecr/lifecyclePolicy:LifecyclePolicy": "free (it deletes images, which lowers storage)",
}
"""Types nothing bills for (or whose cost is counted under another type)."""

FREE_PREFIXES: Mapping[str, str] = {
    "kubernetes:": "a Kubernetes object: it runs on the nodes priced",
    "llmp:": "a component: its resources are priced",
    "pulumi:providers:": "a provider: nothing is billed",
}


def classified(type_: str) -> bool:
    return type_ in PRICED or type_ in FREE or any(type_.startswith(p) for p in FREE_PREFIXES)


@dataclass(frozen=True)
class NodeGroup:
    """One managed node group, with its launch template's root volume."""

    component: str
    pool: str
    instance_type: str
    capacity_type: str
    min_size: int
    desired_size: int
    max_size: int
    disk_gib: int
    cpu_pool: bool = False
    """A CPU pool of data work (`cpu_pools`: tainted `llm-platform/cpu-pool`), not a GPU pool."""


@dataclass(frozen=True)
class Bucket:
    resource: str
    name: str
    """Its physical name: what the usage assumptions are keyed by."""
    replica: bool
    tiering: Mapping[str, Any] | None
    """The lifecycle rule over the whole bucket with transitions or expiry, if any."""
    prefix_rules: bool
    """A lifecycle rule covers only a prefix (priced as if absent, unless the usage says
    what share of the data lies under it)."""
    replicated: bool = False
    time_control: bool = False
    by_prefix: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The lifecycle rules on a prefix with transitions or expiry, by prefix."""
    noncurrent_days: int | None = None
    """Days an expired (now noncurrent) version stays, by the whole-bucket rule (housekeeping
    on a versioned bucket); None: it goes at once."""


def _noncurrent_days(rule: Mapping[str, Any]) -> int | None:
    days = (rule.get("noncurrentVersionExpiration") or {}).get("noncurrentDays")
    return int(days) if isinstance(days, int | float) and not isinstance(days, bool) else None


@dataclass
class Facts:
    """What the declared resources say about the bill."""

    components: list[str] = field(default_factory=list)
    """Top-level component resources, in declaration order."""
    region: str | None = None
    dr_region: str | None = None
    nat_gateways: int = 0
    nat_addresses: int = 0
    interface_endpoints: dict[str, int] = field(default_factory=dict)
    """Interface endpoint -> the AZs it has an address in (its subnets)."""
    public_subnets: int = 0
    support_type: str = "STANDARD"
    control_plane_logs: bool = False
    cluster_keys: int = 0
    node_groups: list[NodeGroup] = field(default_factory=list)
    storage_keys: int = 0
    signing_keys: int = 0
    """Asymmetric (SIGN_VERIFY) keys: the models bucket's revision signing key."""
    monitoring_keys: int = 0
    """The alert topics' key."""
    alert_topics: int = 0
    buckets: list[Bucket] = field(default_factory=list)
    lustre: Mapping[str, Any] | None = None
    prometheus_gib: int | None = None
    container_logs: bool = False
    xray: bool = False
    fsx_exporter: bool = False
    alb_scheme: str | None = None
    waf_rules: int | None = None
    secrets: int = 0
    """Secrets Manager secrets (the serving gateways' keys)."""
    not_priced: dict[str, list[str]] = field(default_factory=dict)
    """Type -> names of its resources: declared, and in no table of this module."""

    @property
    def system_pool(self) -> NodeGroup | None:
        return next((g for g in self.node_groups if g.pool == "system"), None)

    @property
    def gpu_pools(self) -> list[NodeGroup]:
        """The `node_pools` groups (accelerated)."""
        return [g for g in self.node_groups if g.pool != "system" and not g.cpu_pool]

    @property
    def cpu_pools(self) -> list[NodeGroup]:
        return [g for g in self.node_groups if g.cpu_pool]


def _known(value: Any) -> Any:
    return None if value == COMPUTED else value


def _int(value: Any, default: int = 0) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def _helm_release(r: Declared) -> str | None:
    name = r.inputs.get("name")
    return name if isinstance(name, str) else None


def _node_group(r: Declared, templates: Mapping[tuple[str, str], Declared]) -> NodeGroup:
    inputs = r.inputs
    template = templates.get((r.component, r.name))
    template_inputs = template.inputs if template is not None else {}
    types = inputs.get("instanceTypes") or [template_inputs.get("instanceType")]
    scaling = inputs.get("scalingConfig") or {}
    mappings = template_inputs.get("blockDeviceMappings") or [{}]
    labels = inputs.get("labels") or {}
    taints = inputs.get("taints") or []
    return NodeGroup(
        component=r.component,
        pool=str(labels.get(POOL_LABEL) or r.component),
        instance_type=str(types[0]),
        capacity_type=str(inputs.get("capacityType") or "ON_DEMAND"),
        min_size=_int(scaling.get("minSize")),
        desired_size=_int(scaling.get("desiredSize")),
        max_size=_int(scaling.get("maxSize")),
        disk_gib=_int((mappings[0].get("ebs") or {}).get("volumeSize")),
        cpu_pool=any(isinstance(t, Mapping) and t.get("key") == CPU_POOL_TAINT for t in taints),
    )


def _tiering(rules: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any] | None, bool]:
    whole = None
    prefix_rules = False
    for rule in rules:
        prefix = (rule.get("filter") or {}).get("prefix", "")
        if prefix:
            prefix_rules = True
        elif whole is None and (rule.get("transitions") or rule.get("expiration")):
            whole = rule
    return whole, prefix_rules


def _by_prefix(rules: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for rule in rules:
        prefix = (rule.get("filter") or {}).get("prefix", "")
        if prefix and (rule.get("transitions") or rule.get("expiration")):
            out.setdefault(prefix, rule)
    return out


def _bucket_noncurrent_days(rules: Sequence[Mapping[str, Any]]) -> int | None:
    days = [
        d
        for rule in rules
        if not (rule.get("filter") or {}).get("prefix", "")
        and (d := _noncurrent_days(rule)) is not None
    ]
    return min(days) if days else None


def facts(declared: Iterable[Declared]) -> Facts:
    """The declared resources, read for pricing (a ledger's, or a plan's)."""
    resources = list(declared)
    out = Facts()
    templates = {
        (r.component, r.name): r
        for r in resources
        if r.type == "aws:ec2/launchTemplate:LaunchTemplate"
    }
    lifecycles = {
        r.name: r.inputs
        for r in resources
        if r.type == "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
    }
    replications = {
        r.name: r.inputs
        for r in resources
        if r.type == "aws:s3/bucketReplicationConfig:BucketReplicationConfig"
    }
    aws_regions = [
        _known(r.inputs.get("region")) for r in resources if r.type == "pulumi:providers:aws"
    ]
    out.region = aws_regions[0] if aws_regions else None
    out.dr_region = next((r for r in aws_regions[1:] if r and r != out.region), None)
    for r in resources:
        t, inputs = r.type, r.inputs
        if not classified(t):
            out.not_priced.setdefault(t, []).append(r.name)
        if r.component == r.name and not r.custom:
            out.components.append(r.name)
        if t == "aws:ec2/natGateway:NatGateway":
            out.nat_gateways += 1
        elif t == "aws:ec2/vpcEndpoint:VpcEndpoint":
            if inputs.get("vpcEndpointType") == "Interface":
                out.interface_endpoints[r.name] = len(inputs.get("subnetIds") or [])
        elif t == "aws:ec2/eip:Eip":
            out.nat_addresses += 1
        elif t == "aws:ec2/subnet:Subnet":
            out.public_subnets += (inputs.get("tags") or {}).get("kubernetes.io/role/elb") == "1"
        elif t == "aws:eks/cluster:Cluster":
            out.support_type = str((inputs.get("upgradePolicy") or {}).get("supportType"))
            out.control_plane_logs = bool(inputs.get("enabledClusterLogTypes"))
        elif t == "aws:eks/nodeGroup:NodeGroup":
            out.node_groups.append(_node_group(r, templates))
        elif t == "aws:kms/key:Key":
            if inputs.get("keyUsage") == "SIGN_VERIFY":
                out.signing_keys += 1
            elif r.component == "storage":
                out.storage_keys += 1
            elif r.component == "monitoring":
                out.monitoring_keys += 1
            else:
                out.cluster_keys += 1
        elif t == "aws:s3/bucket:Bucket":
            rules = (lifecycles.get(f"{r.name}-lifecycle") or {}).get("rules") or []
            whole, prefix_rules = _tiering(rules)
            replication = replications.get(f"{r.name}-replication")
            rtc = any(
                (rule.get("destination") or {}).get("replicationTime", {}).get("status")
                == "Enabled"
                for rule in (replication or {}).get("rules") or []
            )
            out.buckets.append(
                Bucket(
                    resource=r.name,
                    name=str(inputs.get("bucket")),
                    replica=(inputs.get("tags") or {}).get("llm-platform/bucket-role") == "replica",
                    tiering=whole,
                    prefix_rules=prefix_rules,
                    replicated=replication is not None,
                    time_control=rtc,
                    by_prefix=_by_prefix(rules),
                    noncurrent_days=_bucket_noncurrent_days(rules),
                )
            )
        elif t == "aws:sns/topic:Topic":
            out.alert_topics += 1
        elif t == "aws:fsx/lustreFileSystem:LustreFileSystem":
            out.lustre = inputs
        elif t == HELM:
            _monitoring_release(out, _helm_release(r), inputs)
        elif t == INGRESS:
            annotations = (inputs.get("metadata") or {}).get("annotations") or {}
            out.alb_scheme = _known(annotations.get(SCHEME_ANNOTATION)) or "internal"
        elif t == "aws:wafv2/webAcl:WebAcl":
            out.waf_rules = len(inputs.get("rules") or [])
        elif t == "aws:secretsmanager/secret:Secret":
            out.secrets += 1
    return out


def _monitoring_release(out: Facts, release: str | None, inputs: Mapping[str, Any]) -> None:
    m = monitoring_component
    raw = inputs.get("values")
    values: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    if release == m.KPS:
        claim = (
            values.get("prometheus", {})
            .get("prometheusSpec", {})
            .get("storageSpec", {})
            .get("volumeClaimTemplate", {})
        )
        size = claim.get("spec", {}).get("resources", {}).get("requests", {}).get("storage")
        out.prometheus_gib = int(str(size).removesuffix("Gi")) if size else None
    elif release == m.FLUENT_BIT:
        out.container_logs = True
    elif release == m.OTEL:
        exporters = (values.get("config") or {}).get("exporters") or {}
        out.xray = "awsxray" in exporters
    elif release == m.CLOUDWATCH_EXPORTER:
        out.fsx_exporter = True


def accelerated(instance_type: str) -> bool:
    return catalog().instance(instance_type).accelerator is not None
