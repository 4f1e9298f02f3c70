"""ValidatingAdmissionPolicies of the tenant namespaces: what RBAC cannot say.

RBAC says which kinds a tenant may create (`components.tenancy`'s `tenant-edit`); these
say what may be in them, in CEL, evaluated by the API server itself (admissionregistration
v1, GA since Kubernetes 1.30): no webhook to run, nothing to fail open.

- **Services** in a tenant namespace are ClusterIP (headless included), whoever makes
  them: no LoadBalancer, NodePort or ExternalName, so nothing a tenant runs is published
  past the platform's internal ALB and WAF (the ResourceQuota also holds
  `services.loadbalancers` and `services.nodeports` at 0).
- **Ingresses** a tenant's people make are internal (`alb.ingress.kubernetes.io/scheme`
  absent, which the AWS Load Balancer Controller reads as internal, or `internal`).
- **Pods, and the pod templates of Jobs, CronJobs, PyTorchJobs and RayJobs, and the pod
  specs of a TrainJob's runtime patches** a tenant's people make run as the tenant's uid and
  gid (the owner of its directory on the shared
  file system), under its own service accounts only (`default`, `training`: a tenant
  cannot borrow a platform service account's IAM role in a namespace it shares with
  platform pods, such as `serving`), with no inline CSI or hostPath volume (a CSI volume
  names its file system itself, past the tenant's PersistentVolume). Pods that
  controllers create from those templates were checked as templates; the policy binds
  to the tenant's group (`llmp:tenant:<name>`), so the platform's own pods in a shared
  namespace are not held to a tenant's uid.

Each check is a (CEL expression, message) pair, so the tests evaluate the very
expressions the cluster will (`cel-python`), and the builders below only wrap them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pulumi_kubernetes.admissionregistration.v1 import (
    MatchConditionArgs,
    MatchResourcesArgs,
    NamedRuleWithOperationsArgs,
    ValidatingAdmissionPolicyBindingInitArgs,
    ValidatingAdmissionPolicyBindingSpecArgs,
    ValidatingAdmissionPolicyInitArgs,
    ValidatingAdmissionPolicySpecArgs,
    ValidationArgs,
    VariableArgs,
)
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, ObjectMetaArgs

from spec.labels import PART_OF

TENANT_SERVICE_ACCOUNTS = ("default", "training")
"""The service accounts a tenant's pods may run as (`training` holds its S3 role)."""


@dataclass(frozen=True)
class Check:
    expression: str
    message: str


@dataclass(frozen=True)
class Rule:
    group: str
    version: str
    resource: str


SERVICE_RULES = (Rule("", "v1", "services"),)
INGRESS_RULES = (Rule("networking.k8s.io", "v1", "ingresses"),)
WORKLOAD_RULES = (
    Rule("", "v1", "pods"),
    Rule("batch", "v1", "jobs"),
    Rule("batch", "v1", "cronjobs"),
    Rule("kubeflow.org", "v1", "pytorchjobs"),
    Rule("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
    Rule("ray.io", "v1", "rayjobs"),
)

SERVICE_CHECKS = (
    Check(
        "!has(object.spec.type) || object.spec.type == 'ClusterIP'",
        "tenant namespaces take ClusterIP Services only: a LoadBalancer, NodePort or "
        "ExternalName Service would publish past the platform's ALB and WAF",
    ),
)

SCHEME = "alb.ingress.kubernetes.io/scheme"
INGRESS_CHECKS = (
    Check(
        f"!has(object.metadata.annotations) || !('{SCHEME}' in object.metadata.annotations)"
        f" || object.metadata.annotations['{SCHEME}'] == 'internal'",
        f"a tenant's Ingress is internal: {SCHEME} internal (or absent)",
    ),
)

_PATCHED = "p.trainingRuntimeSpec.template.spec.replicatedJobs"
_PATCHED_POD = f"{_PATCHED}[0].template.spec.template"
_TRAINJOB_SPECS = (
    "(has(object.spec.runtimePatches) ? object.spec.runtimePatches.filter(p, "
    "has(p.trainingRuntimeSpec) && has(p.trainingRuntimeSpec.template) && "
    f"has(p.trainingRuntimeSpec.template.spec) && has({_PATCHED}) && size({_PATCHED}) > 0 && "
    f"has({_PATCHED}[0].template) && has({_PATCHED}[0].template.spec) && "
    f"has({_PATCHED_POD}) && has({_PATCHED_POD}.spec))"
    f".map(p, {_PATCHED_POD}.spec) : [])"
)
"""A TrainJob's pod specs: the pod part of each runtime patch (the Trainer lays it over the
runtime's pod; the platform's runtimes have one replicated job, so a patch names one)."""

POD_SPECS = (
    "object.kind == 'Pod' ? [object.spec] : "
    "object.kind == 'Job' ? [object.spec.template.spec] : "
    "object.kind == 'CronJob' ? [object.spec.jobTemplate.spec.template.spec] : "
    "object.kind == 'PyTorchJob' ? object.spec.pytorchReplicaSpecs.map(r, "
    "object.spec.pytorchReplicaSpecs[r].template.spec) : "
    f"object.kind == 'TrainJob' ? {_TRAINJOB_SPECS} : "
    "object.kind == 'RayJob' && has(object.spec.rayClusterSpec) ? "
    "[object.spec.rayClusterSpec.headGroupSpec.template.spec] + "
    "(has(object.spec.rayClusterSpec.workerGroupSpecs) ? "
    "object.spec.rayClusterSpec.workerGroupSpecs.map(g, g.template.spec) : []) : []"
)
"""Every pod spec the object carries: a Pod's own, or its workload's templates."""


def _container_ids(uid: int, containers: str) -> str:
    return (
        f"(!has(s.{containers}) || s.{containers}.all(c, !has(c.securityContext) || "
        f"((!has(c.securityContext.runAsUser) || c.securityContext.runAsUser == {uid}) && "
        f"(!has(c.securityContext.runAsGroup) || c.securityContext.runAsGroup == {uid}))))"
    )


def workload_checks(uid: int) -> tuple[Check, ...]:
    accounts = ", ".join(f"'{a}'" for a in TENANT_SERVICE_ACCOUNTS)
    return (
        Check(
            "variables.specs.all(s, (!has(s.serviceAccountName) || s.serviceAccountName in "
            f"[{accounts}]) && (!has(s.serviceAccount) || s.serviceAccount in [{accounts}]))",
            f"a tenant's pods run as service account {' or '.join(TENANT_SERVICE_ACCOUNTS)} "
            "only (others belong to the platform)",
        ),
        Check(
            "variables.specs.all(s, has(s.securityContext) && "
            "has(s.securityContext.runAsUser) && has(s.securityContext.runAsGroup) && "
            f"s.securityContext.runAsUser == {uid} && s.securityContext.runAsGroup == {uid})",
            f"the tenant's pods run as uid and gid {uid} (securityContext.runAsUser and "
            "runAsGroup): the owner of its directory on the shared file system",
        ),
        Check(
            "variables.specs.all(s, "
            f"{_container_ids(uid, 'containers')} && {_container_ids(uid, 'initContainers')})",
            f"a container may not run as another uid or gid than {uid}",
        ),
        Check(
            "variables.specs.all(s, !has(s.volumes) || "
            "s.volumes.all(v, !has(v.csi) && !has(v.hostPath)))",
            "no inline CSI or hostPath volume: a tenant's storage is its PersistentVolumeClaims",
        ),
        # A TrainJob's pod is the runtime's with its patches laid over: the checks above see
        # the patches, so one of them must give the pod its uid, and none may reach a second
        # replicated job the checks would not see.
        Check(
            "object.kind != 'TrainJob' || size(variables.specs) > 0",
            "a TrainJob gives its pods the tenant's uid in a runtime patch "
            "(spec.runtimePatches[].trainingRuntimeSpec...template.spec.securityContext)",
        ),
        Check(
            "object.kind != 'TrainJob' || !has(object.spec.runtimePatches) || "
            "object.spec.runtimePatches.all(p, !has(p.trainingRuntimeSpec) || "
            "!has(p.trainingRuntimeSpec.template) || !has(p.trainingRuntimeSpec.template.spec) "
            f"|| !has({_PATCHED}) || size({_PATCHED}) <= 1)",
            "a TrainJob's runtime patch names one replicated job (the runtime's `node`)",
        ),
    )


def _rules(rules: tuple[Rule, ...]) -> list[NamedRuleWithOperationsArgs]:
    return [
        NamedRuleWithOperationsArgs(
            api_groups=[r.group],
            api_versions=[r.version],
            resources=[r.resource],
            operations=["CREATE", "UPDATE"],
        )
        for r in rules
    ]


def policy(
    name: str,
    rules: tuple[Rule, ...],
    checks: tuple[Check, ...],
    *,
    group: str | None = None,
    group_prefix: str | None = None,
    variables: dict[str, str] | None = None,
) -> ValidatingAdmissionPolicyInitArgs:
    """`group`: only requests of that Kubernetes group's members are checked; `group_prefix`:
    of members of any group whose name starts so (every tenant's people)."""
    condition = None
    if group:
        condition = f"'{group}' in request.userInfo.groups"
    elif group_prefix:
        condition = f"request.userInfo.groups.exists(g, g.startsWith('{group_prefix}'))"
    return ValidatingAdmissionPolicyInitArgs(
        metadata=ObjectMetaArgs(name=name, labels=PART_OF),
        spec=ValidatingAdmissionPolicySpecArgs(
            failure_policy="Fail",
            match_constraints=MatchResourcesArgs(resource_rules=_rules(rules)),
            match_conditions=[MatchConditionArgs(name="tenant-member", expression=condition)]
            if condition
            else None,
            variables=[VariableArgs(name=k, expression=v) for k, v in (variables or {}).items()]
            or None,
            validations=[
                ValidationArgs(expression=c.expression, message=c.message) for c in checks
            ],
        ),
    )


def binding(
    name: str, policy_name: str, namespaces: LabelSelectorArgs
) -> ValidatingAdmissionPolicyBindingInitArgs:
    """Deny what the policy refuses, in the namespaces `namespaces` selects."""
    return ValidatingAdmissionPolicyBindingInitArgs(
        metadata=ObjectMetaArgs(name=name, labels=PART_OF),
        spec=ValidatingAdmissionPolicyBindingSpecArgs(
            policy_name=policy_name,
            validation_actions=["Deny"],
            match_resources=MatchResourcesArgs(namespace_selector=namespaces),
        ),
    )
