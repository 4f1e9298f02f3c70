"""Cost-allocation tags: team, cost-center and stack on every taggable AWS resource.

A resource's effective tags are its own `tags` merged over its provider's
`defaultTags` (the engine hands a provider's inputs as JSON strings). Provider
default tags do not reach what an Auto Scaling group launches, so a launch
template must also carry the tags in its `tagSpecifications` for instances
and volumes.
"""

from __future__ import annotations

from pulumi_policy import ResourceValidationArgs

from policies.props import Report, get, items, known, provider_default_tags, tags_of

DEFAULT_REQUIRED = ["team", "cost-center", "stack"]
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"

TAGGABLE = frozenset(
    {
        "aws:cloudwatch/logGroup:LogGroup",
        "aws:ebs/volume:Volume",
        "aws:ec2/eip:Eip",
        "aws:ec2/instance:Instance",
        "aws:ec2/internetGateway:InternetGateway",
        "aws:ec2/launchTemplate:LaunchTemplate",
        "aws:ec2/natGateway:NatGateway",
        "aws:ec2/placementGroup:PlacementGroup",
        "aws:ec2/routeTable:RouteTable",
        "aws:ec2/securityGroup:SecurityGroup",
        "aws:ec2/subnet:Subnet",
        "aws:ec2/vpc:Vpc",
        "aws:ec2/vpcEndpoint:VpcEndpoint",
        "aws:ecr/repository:Repository",
        "aws:eks/accessEntry:AccessEntry",
        "aws:eks/addon:Addon",
        "aws:eks/cluster:Cluster",
        "aws:eks/nodeGroup:NodeGroup",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation",
        "aws:fsx/lustreFileSystem:LustreFileSystem",
        "aws:iam/policy:Policy",
        "aws:iam/role:Role",
        "aws:kms/key:Key",
        "aws:lb/loadBalancer:LoadBalancer",
        "aws:s3/bucket:Bucket",
        "aws:s3/bucketV2:BucketV2",
        "aws:sqs/queue:Queue",
        "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule",
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
    }
)
"""AWS resource types whose pulumi-aws resource takes `tags` (tests check each one)."""


def _required(args: ResourceValidationArgs) -> list[str]:
    return list(args.get_config().get("tags") or DEFAULT_REQUIRED)


def required_tags(args: ResourceValidationArgs, report: Report) -> None:
    """Taggable AWS resources carry the cost-allocation tags (own tags or provider defaults)."""
    rtype = args.resource_type
    if not rtype.startswith("aws:"):
        return
    own_tags_declared = "tags" in list(args.props)
    if rtype not in TAGGABLE and not own_tags_declared:
        return
    provider_props = args.provider.props if args.provider is not None else None
    effective = {**provider_default_tags(provider_props), **tags_of(args.props)}
    if known(lambda: get(args.props, "tags"), None) is None and own_tags_declared:
        return  # tags are computed: only the cloud knows them
    missing = [t for t in _required(args) if not effective.get(t)]
    if missing:
        report(
            f"missing tags {', '.join(missing)} (neither in tags nor in the provider's defaultTags)"
        )


def launch_template_tag_specifications(args: ResourceValidationArgs, report: Report) -> None:
    """Launch templates tag the instances and volumes they launch (default tags do not)."""
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    by_kind: dict[str, dict[str, str]] = {}
    for spec in items(get(args.props, "tagSpecifications")):
        kind = get(spec, "resourceType")
        if isinstance(kind, str):
            by_kind.setdefault(kind, {}).update(tags_of(spec))
    for kind in ("instance", "volume"):
        missing = [t for t in _required(args) if not by_kind.get(kind, {}).get(t)]
        if missing:
            report(f"tagSpecifications for {kind} lack {', '.join(missing)}")
