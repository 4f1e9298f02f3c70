"""The plan's dependency graph is honest: every data dependency is recorded, and every
recorded dependency either carries data or is a named ordering constraint.

Mock outputs are unique per resource (`<name>-id`, ARNs ending in the name, the
cluster endpoint and security group), so an input that holds one of them came from
that resource.
"""

from __future__ import annotations

import functools
import json
import re
from collections import defaultdict
from typing import Any

import pytest

from llmp.plan import Plan
from llmp.plan.synth import _ACCOUNT as MOCK_ACCOUNT
from llmp.plan.synth import autoname
from tests.conftest import STACKS

# (dependent type, dependency type, dependency name suffix) -> why the edge exists
# although no data flows along it.
ORDERING_EDGES = {
    (
        "aws:eks/nodeGroup:NodeGroup",
        "aws:eks/addon:Addon",
        "-vpc-cni",
    ): "nodes that join before vpc-cni is active stay NotReady",
    (
        "aws:eks/nodeGroup:NodeGroup",
        "aws:eks/addon:Addon",
        "-kube-proxy",
    ): "service routing on the node before workloads land",
    (
        "aws:eks/nodeGroup:NodeGroup",
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        "",
    ): "a node whose role lacks the worker policies cannot join",
    (
        "aws:eks/addon:Addon",
        "aws:eks/addon:Addon",
        "-eks-pod-identity-agent",
    ): "aws-node takes its credentials from the Pod Identity agent",
    (
        "aws:eks/addon:Addon",
        "aws:eks/nodeGroup:NodeGroup",
        "-system",
    ): "CoreDNS is a Deployment: ACTIVE only once nodes run it",
    (
        "aws:eks/cluster:Cluster",
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        "",
    ): "EKS must be able to use its role while it creates the cluster",
    (
        "aws:eks/cluster:Cluster",
        "aws:cloudwatch/logGroup:LogGroup",
        "",
    ): "the control plane writes into the log group we sized",
    (
        "aws:ec2/natGateway:NatGateway",
        "aws:ec2/internetGateway:InternetGateway",
        "",
    ): "a NAT gateway needs the internet route of its subnet",
    (
        "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation",
        "aws:kms/keyPolicy:KeyPolicy",
        "",
    ): "an association imports through the FSx role the key policy must admit first",
    (
        "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation",
        "aws:s3/bucketObjectv2:BucketObjectv2",
        "-dir",
    ): "FSx takes a tenant directory's owner and mode from the S3 directory object only "
    "if it exists when the association imports the prefix",
    (
        "kubernetes:helm.sh/v3:Release",
        "kubernetes:helm.sh/v3:Release",
        "-secrets-store-csi-driver",
    ): "the AWS provider registers with the Secrets Store CSI driver, whose chart brings "
    "the SecretProviderClass CRD",
    (
        "kubernetes:secrets-store.csi.x-k8s.io/v1:SecretProviderClass",
        "kubernetes:helm.sh/v3:Release",
        "-secrets-store-csi-driver",
    ): "the SecretProviderClass CRD comes with the driver's chart",
    (
        "kubernetes:networking.k8s.io/v1:NetworkPolicy",
        "aws:ec2/vpcEndpoint:VpcEndpoint",
        "-kms",
    ): "a tenant's egress admits the KMS endpoint's addresses, read from its network "
    "interfaces (a look-up: the endpoint's own outputs hold only their ids)",
    (
        "kubernetes:apps/v1:Deployment",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "-model-server",
    ): "Pod Identity credentials reach only pods created after their association: a model "
    "server reads its gateway keys from Secrets Manager when it starts",
    (
        "kubernetes:apps/v1:Deployment",
        "kubernetes:helm.sh/v3:Release",
        "-secrets-store-csi-driver",
    ): "a model pod's keys volume is mounted by the Secrets Store CSI driver",
    (
        "kubernetes:apps/v1:Deployment",
        "kubernetes:helm.sh/v3:Release",
        "-secrets-store-csi-driver-provider-aws",
    ): "the driver fetches a model pod's keys through the AWS provider",
    (
        "kubernetes:apps/v1:Deployment",
        "kubernetes:core/v1:ServiceAccount",
        "-model-server",
    ): "a model pod runs as the model-server account, the one its Pod Identity names",
    (
        "kubernetes:apps/v1:Deployment",
        "kubernetes:secrets-store.csi.x-k8s.io/v1:SecretProviderClass",
        "-keys",
    ): "a model pod's keys volume names its provider class; every model server waits for "
    "the classes of all models (one set of options for the namespace's model servers)",
    (
        "kubernetes:helm.sh/v3:Release",
        "aws:eks/nodeGroup:NodeGroup",
        "-system",
    ): "helm waits for the chart's controller Deployment, which needs the system pool",
    (
        "kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime",
        "kubernetes:helm.sh/v3:Release",
        "-kubeflow-trainer",
    ): "the ClusterTrainingRuntime CRD comes with the Trainer's chart",
    (
        "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor",
        "kubernetes:helm.sh/v3:Release",
        "-kueue",
    ): "Kueue's CRDs come with its chart",
    (
        "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue",
        "kubernetes:helm.sh/v3:Release",
        "-kueue",
    ): "Kueue's CRDs come with its chart",
    (
        "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue",
        "kubernetes:helm.sh/v3:Release",
        "-kueue",
    ): "Kueue's CRDs come with its chart",
    (
        "kubernetes:kueue.x-k8s.io/v1beta2:AdmissionCheck",
        "kubernetes:helm.sh/v3:Release",
        "-kueue",
    ): "Kueue's CRDs come with its chart",
    (
        "kubernetes:kueue.x-k8s.io/v1beta2:ProvisioningRequestConfig",
        "kubernetes:helm.sh/v3:Release",
        "-kueue",
    ): "Kueue's CRDs come with its chart",
    (
        "kubernetes:helm.sh/v3:Release",
        "kubernetes:yaml/v2:ConfigFile",
        "-provisioning-request-crd",
    ): "Kueue looks for the ProvisioningRequest API only when it starts, and the autoscaler "
    "watches it from its first loop",
    (
        "kubernetes:helm.sh/v3:Release",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "-autoscaler-iam",
    ): "Pod Identity credentials reach only pods created after their association "
    "(the service account name flows from it, but the mock echoes a plain name)",
    (
        "kubernetes:helm.sh/v3:Release",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "-lbc",
    ): "Pod Identity credentials reach only pods created after their association "
    "(the service account name flows from it, but the mock echoes a plain name)",
    (
        "kubernetes:helm.sh/v3:Release",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "-alertmanager",
    ): "Pod Identity credentials reach only pods created after their association: "
    "Alertmanager signs its SNS publishes with them from its first alert",
    (
        "kubernetes:batch/v1:CronJob",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "-copier",
    ): "Pod Identity credentials reach only pods created after their association: the "
    "milestone copier's first run must not start without them",
    (
        "kubernetes:batch/v1:CronJob",
        "kubernetes:core/v1:ServiceAccount",
        "-sa",
    ): "the API server refuses a pod whose service account does not exist yet (the name is "
    "a constant of the component, not an output of the account)",
    (
        "kubernetes:helm.sh/v3:Release",
        "kubernetes:helm.sh/v3:Release",
        "-cert-manager",
    ): "NVSentinel's MongoDB certificates are cert-manager objects: its CRDs and webhook "
    "come first",
    (
        "kubernetes:helm.sh/v3:Release",
        "kubernetes:helm.sh/v3:Release",
        "-gpu-operator",
    ): "NVSentinel's GPU health monitor connects to the operator's standalone DCGM service",
    (
        "aws:s3/bucketReplicationConfig:BucketReplicationConfig",
        "aws:s3/bucketVersioning:BucketVersioning",
        "-versioning",
    ): "S3 refuses a replication rule until both buckets are versioned",
    (
        "kubernetes:keda.sh/v1alpha1:ScaledObject",
        "kubernetes:helm.sh/v3:Release",
        "-keda",
    ): "KEDA's CRDs come with its chart",
    (
        "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet",
        "kubernetes:helm.sh/v3:Release",
        "-lws",
    ): "the LeaderWorkerSet CRD and its webhook come with the LWS chart",
    (
        "kubernetes:inference.networking.k8s.io/v1:InferencePool",
        "kubernetes:yaml/v2:ConfigFile",
        "-inference-pool-crd",
    ): "an InferencePool is refused until its CRD is served",
    (
        "aws:s3/bucketPolicy:BucketPolicy",
        "aws:kms/key:Key",
        "-s3",
    ): "the log delivery statements name the account, read from the storage key's ARN (the "
    "mock ARNs' account is no token of the key)",
    (
        "kubernetes:networking.k8s.io/v1:Ingress",
        "aws:s3/bucketPolicy:BucketPolicy",
        "-logs-policy",
    ): "ELB checks that it may write when the Ingress turns access logs on",
    (
        "kubernetes:networking.k8s.io/v1:Ingress",
        "aws:s3/bucket:Bucket",
        "-logs",
    ): "the bucket's name is inside the load-balancer-attributes list (access_logs.s3.bucket=)",
    (
        "aws:wafv2/webAclLoggingConfiguration:WebAclLoggingConfiguration",
        "aws:s3/bucketPolicy:BucketPolicy",
        "-waf-logs-policy",
    ): "WAF checks the log bucket's policy when logging is turned on",
    (
        "kubernetes:helm.sh/v3:Release",
        "kubernetes:yaml/v2:ConfigFile",
        "-crds",
    ): "kube-prometheus-stack installs with crds.enabled false: the operator's CRDs come first",
    (
        "kubernetes:helm.sh/v3:Release",
        "kubernetes:core/v1:Namespace",
        "-namespace",
    ): "the monitoring charts install into the namespace with its Pod Security labels",
    (
        "kubernetes:helm.sh/v3:Release",
        "kubernetes:storage.k8s.io/v1:StorageClass",
        "-gp3",
    ): "Prometheus' volume claim names the gp3 class",
    (
        "kubernetes:helm.sh/v3:Release",
        "aws:eks/addon:Addon",
        "-aws-ebs-csi-driver",
    ): "Prometheus' gp3 volume is provisioned by the EBS CSI driver",
    (
        "kubernetes:helm.sh/v3:Release",
        "aws:cloudwatch/logGroup:LogGroup",
        "-logs",
    ): "Fluent Bit may not create log groups: it writes into the one Pulumi made (by name)",
    (
        "kubernetes:helm.sh/v3:Release",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "-fluent-bit",
    ): "Pod Identity credentials reach only pods created after their association",
    (
        "kubernetes:helm.sh/v3:Release",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "-otel",
    ): "Pod Identity credentials reach only pods created after their association",
    (
        "kubernetes:helm.sh/v3:Release",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "-cloudwatch-exporter",
    ): "Pod Identity credentials reach only pods created after their association",
    (
        "kubernetes:monitoring.coreos.com/v1:PrometheusRule",
        "kubernetes:helm.sh/v3:Release",
        "-prometheus-cloudwatch-exporter",
    ): "the FSx alerts (FsxMetricsMissing) would fire before their exporter exists",
    (
        "kubernetes:helm.sh/v3:Release",
        "kubernetes:core/v1:Secret",
        "-grafana-admin",
    ): "Grafana reads its admin password from the Secret the chart names",
    (
        "kubernetes:monitoring.coreos.com/v1:ServiceMonitor",
        "kubernetes:yaml/v2:ConfigFile",
        "-crds",
    ): "the Prometheus operator's CRDs are applied before any monitor",
    (
        "kubernetes:monitoring.coreos.com/v1:PodMonitor",
        "kubernetes:yaml/v2:ConfigFile",
        "-crds",
    ): "the Prometheus operator's CRDs are applied before any monitor",
    (
        "kubernetes:monitoring.coreos.com/v1:PrometheusRule",
        "kubernetes:yaml/v2:ConfigFile",
        "-crds",
    ): "the Prometheus operator's CRDs are applied before any rule",
}


def exact_tokens(resource: dict[str, Any]) -> set[str]:
    """Outputs that equal an input (the cluster's, an ECR repository's and a log group's
    name): they match whole values only, since the same string also appears in names built
    from config (log group, subnet tags)."""
    if resource.type in (
        "aws:eks/cluster:Cluster",
        "aws:ecr/repository:Repository",
        "aws:cloudwatch/logGroup:LogGroup",
    ):
        return {resource.inputs["name"]}
    return set()


def path_tokens(resource: dict[str, Any]) -> set[str]:
    """A bucket's name output: matched as a whole value or a path segment (s3://name/...)."""
    if resource.type == "aws:s3/bucket:Bucket":
        return {resource.inputs["bucket"]}
    return set()


POLICY_DOCUMENTS = {"aws:iam/rolePolicy:RolePolicy", "aws:secretsmanager/secret:Secret"}
"""Where the cluster's name is also matched as a path segment: a tag key of an IAM condition
(`aws:ResourceTag/k8s.io/cluster-autoscaler/<cluster>`), a secret's name under the cluster's
(`<cluster>/serving/<model>/gateway`). Elsewhere the same segment appears in names built from
config (the log group), so it is no evidence there."""


@functools.cache
def _pattern(token: str, segment: bool) -> re.Pattern[str]:
    before = r"(?:^|[/:])" if segment else ""
    return re.compile(before + re.escape(token) + r"(?![\w-])")


def contains(value: str, token: str, *, segment: bool = False) -> bool:
    """`token` occurs in `value` and is not the start of a longer name (x-id vs x-id-2)."""
    return token in value and _pattern(token, segment).search(value) is not None


def tokens(resource: dict[str, Any], region: str) -> set[str]:
    name, type_ = resource.name, resource.type
    out = {f"{name}-id"}
    if type_.startswith("aws:"):
        out.add(f":{type_.rsplit(':', 1)[-1].lower()}/{name}")
        out.add(autoname(name))
    if type_ == "aws:eks/cluster:Cluster":
        out |= {f"https://{name}.mock.{region}.eks.amazonaws.com", f"sg-{name}-cluster"}
    if type_ == "aws:ec2/eip:Eip":
        out.add(f"eipalloc-{name}")
    if type_ == "aws:kms/key:Key":
        out.add(f"{name}-key-id")
    if type_ == "aws:secretsmanager/secret:Secret":
        out.add(resource.inputs["name"])  # the name output, which a provider class names
    if type_ == "aws:eks/nodeGroup:NodeGroup":
        out.add(f"eks-{name}-asg")  # resources[0].autoscalingGroups[0].name
    if type_ == "aws:ecr/repository:Repository":
        # repositoryUrl (an image `<url>:<tag>` names it), as llmp.plan.synth's mocks answer it.
        out.add(f"{MOCK_ACCOUNT}.dkr.ecr.{region}.amazonaws.com/{resource.inputs['name']}")
    return out


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def k8s_provides(resource: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of a Kubernetes object: its metadata.name output echoes its input."""
    inputs = resource.inputs
    if resource.type.startswith("kubernetes:") and "kind" in inputs:
        return inputs["kind"], inputs.get("metadata", {}).get("name", "")
    return None


def k8s_uses(resource: dict[str, Any]) -> set[tuple[str, str]]:
    """The objects a Kubernetes object must wait for: its namespace and a pre-bound volume.
    (A PV's claimRef names its claim without needing it, so it is not a use.)"""
    inputs = resource.inputs
    if not resource.type.startswith("kubernetes:"):
        return set()
    uses = set()
    if namespace := inputs.get("metadata", {}).get("namespace"):
        uses.add(("Namespace", namespace))
    if volume := inputs.get("spec", {}).get("volumeName"):
        uses.add(("PersistentVolume", volume))
    return uses


def data_sources(plan: Plan, region: str) -> dict[str, set[str]]:
    """urn -> urns of the resources whose outputs appear in its inputs."""
    by_token: dict[str, set[str]] = defaultdict(set)
    by_exact: dict[str, set[str]] = defaultdict(set)
    by_segment: dict[str, set[str]] = defaultdict(set)
    for r in plan.resources:
        if r.custom:
            for token in tokens(r, region):
                by_token[token].add(r.urn)
            for token in exact_tokens(r):
                by_exact[token].add(r.urn)
            for token in path_tokens(r):
                by_segment[token].add(r.urn)
    k8s_objects = {k8s_provides(r): r.urn for r in plan.resources if k8s_provides(r)}
    sources: dict[str, set[str]] = {}
    for r in plan.resources:
        found: set[str] = {k8s_objects[use] for use in k8s_uses(r) if use in k8s_objects}
        values = strings(r.inputs)
        for token, urns in by_token.items():
            if any(contains(v, token) for v in values):
                found |= urns - {r.urn}
        for token, urns in by_segment.items():
            if any(contains(v, token, segment=True) for v in values):
                found |= urns - {r.urn}
        for value in values:
            found |= by_exact.get(value, set()) - {r.urn}
        if r.type in POLICY_DOCUMENTS:
            for token, urns in by_exact.items():
                if any(contains(v, token, segment=True) for v in values):
                    found |= urns - {r.urn}
        sources[r.urn] = found
    return sources


@pytest.mark.parametrize("stack", STACKS)
def test_no_data_dependency_is_missing(plans, stack: str) -> None:
    plan = plans(stack)
    sources = data_sources(plan, plan.outputs["region"])
    for r in plan.resources:
        needed = sources[r.urn]
        by_name: dict[str, set[str]] = defaultdict(set)
        for urn in needed:
            by_name[urn.rsplit("::", 1)[1]].add(urn)
        for name, candidates in by_name.items():
            # Same-named resources of different types share a mock id: one suffices.
            assert candidates & set(r.dependencies), f"{r.urn} uses {name} without depending on it"


@pytest.mark.parametrize("stack", STACKS)
def test_no_dependency_is_invented(plans, stack: str) -> None:
    plan = plans(stack)
    region = plan.outputs["region"]
    sources = data_sources(plan, region)
    types = {r.urn: r.type for r in plan.resources}
    for r in plan.resources:
        for dep in r.dependencies:
            if dep in sources[r.urn]:
                continue
            dep_name = dep.rsplit("::", 1)[1]
            allowed = any(
                r.type == a and types.get(dep) == b and dep_name.endswith(suffix)
                for (a, b, suffix) in ORDERING_EDGES
            )
            assert allowed, f"{r.urn} waits on {dep} but uses none of its outputs"


@pytest.mark.parametrize("stack", STACKS)
def test_components_carry_no_dependencies_that_children_would_inherit(plans, stack: str) -> None:
    for r in plans(stack).resources:
        # Provider-side components (kustomize/v2, yaml/v2) are one resource to the program:
        # no Python child inherits their dependencies, which the edges above name.
        if not r.custom and not r.type.startswith("kubernetes:"):
            assert r.dependencies == [], r.urn


def test_the_network_waits_on_nothing_of_the_cluster_and_pools_not_on_each_other(plans) -> None:
    plan = plans("pretrain")
    by_urn = {r.urn: r for r in plan.resources}

    def ancestors(urn: str) -> set[str]:
        seen: set[str] = set()
        stack = list(by_urn[urn].dependencies)
        while stack:
            dep = stack.pop()
            if dep not in seen:
                seen.add(dep)
                stack.extend(by_urn[dep].dependencies)
        return seen

    def component_of(urn: str) -> str:
        parent = by_urn[urn].parent
        return parent.rsplit("::", 1)[1] if parent else ""

    for r in plan.resources:
        if component_of(r.urn) == "network":
            assert not {component_of(a) for a in ancestors(r.urn)} - {"network", ""}
        if component_of(r.urn) == "gpu-h100":
            assert "gpu-h100-block" not in {component_of(a) for a in ancestors(r.urn)}


def test_plan_json_round_trips(plans) -> None:
    plan = plans("finetune")
    assert json.loads(json.dumps(plan.to_dict())) == plan.to_dict()


def test_a_copy_with_new_resources_answers_from_them(plans) -> None:
    """A Plan's indexes are cached; a copy made after they were read (llmp diff's plan as
    `pulumi up` would leave it, a test's mutated plan) must not answer from the old list."""
    plan = plans("finetune")
    group = next(r for r in plan.resources if r.type == "aws:eks/nodeGroup:NodeGroup")
    assert plan.by_urn[group.urn] is group and plan.aws_providers  # both cached now
    changed = group.model_copy(update={"inputs": {**group.inputs, "version": "9.99"}})
    resources = [changed if r is group else r for r in plan.resources]
    copy = plan.model_copy(update={"resources": resources})
    assert copy.by_urn[group.urn] is changed
    assert plan.by_urn[group.urn] is group  # the original keeps its own
    assert copy.aws_providers == plan.aws_providers
