"""The platform's own checkov checks for the kinds it renders.

Checkov's bundled Kubernetes checks target workloads (Pod, Deployment, ...),
RBAC and PodSecurityPolicy; none looks at Namespace, PersistentVolume(Claim),
PriorityClass, ResourceQuota or LimitRange, which is all the program renders
today. These checks cover those kinds, so a checkov run over the manifests
checks something; the bundled checks still run and apply as soon as a
workload kind appears.

Loaded by checkov from this directory (`--external-checks-dir`), not imported
by the tests.
"""

from __future__ import annotations

from typing import Any

from checkov.common.models.enums import CheckCategories, CheckResult
from checkov.kubernetes.checks.resource.base_spec_check import BaseK8Check

PART_OF = ("app.kubernetes.io/part-of", "llm-platform")
KINDS = (
    "Namespace",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "PriorityClass",
    "ResourceQuota",
    "LimitRange",
)


PRIVILEGED_NAMESPACES = {
    "monitoring": (
        "node-exporter needs hostNetwork, hostPID and a hostPath of / (node metrics, ENA "
        "ethtool counters) and Fluent Bit a hostPath of /var/log: baseline refuses both "
        "(components/monitoring.py)"
    ),
}
"""The only namespaces that may enforce `privileged`, each with why."""


def _labels(conf: dict[str, Any]) -> dict[str, Any]:
    return (conf.get("metadata") or {}).get("labels") or {}


def _result(ok: bool) -> CheckResult:
    return CheckResult.PASSED if ok else CheckResult.FAILED


class PartOfPlatform(BaseK8Check):
    def __init__(self) -> None:
        super().__init__(
            name="Objects carry app.kubernetes.io/part-of: llm-platform",
            id="CKV_LLMP_1",
            categories=(CheckCategories.KUBERNETES,),
            supported_entities=KINDS,
        )

    def scan_spec_conf(self, conf: dict[str, Any]) -> CheckResult:
        return _result(_labels(conf).get(PART_OF[0]) == PART_OF[1])


class NamespaceEnforcesPodSecurity(BaseK8Check):
    def __init__(self) -> None:
        super().__init__(
            name="Namespaces enforce Pod Security baseline or restricted",
            id="CKV_LLMP_2",
            categories=(CheckCategories.KUBERNETES,),
            supported_entities=("Namespace",),
        )

    def scan_spec_conf(self, conf: dict[str, Any]) -> CheckResult:
        labels = _labels(conf)
        enforced = labels.get("pod-security.kubernetes.io/enforce")
        name = (conf.get("metadata") or {}).get("name")
        if name in PRIVILEGED_NAMESPACES and enforced == "privileged":
            # Still warned and audited at baseline, so other pods' privileges show up.
            return _result(
                labels.get("pod-security.kubernetes.io/warn") == "baseline"
                and labels.get("pod-security.kubernetes.io/audit") == "baseline"
            )
        return _result(enforced in {"baseline", "restricted"})


class VolumesAreRetained(BaseK8Check):
    def __init__(self) -> None:
        super().__init__(
            name="PersistentVolumes are statically bound and retained",
            id="CKV_LLMP_3",
            categories=(CheckCategories.KUBERNETES,),
            supported_entities=("PersistentVolume",),
        )

    def scan_spec_conf(self, conf: dict[str, Any]) -> CheckResult:
        spec = conf.get("spec") or {}
        return _result(
            spec.get("persistentVolumeReclaimPolicy") == "Retain"
            and spec.get("storageClassName") == ""
            and bool(spec.get("claimRef"))
        )


class QuotaCapsComputeAndClaims(BaseK8Check):
    def __init__(self) -> None:
        super().__init__(
            name="ResourceQuotas cap GPUs, CPU, memory and claims",
            id="CKV_LLMP_4",
            categories=(CheckCategories.KUBERNETES,),
            supported_entities=("ResourceQuota",),
        )

    def scan_spec_conf(self, conf: dict[str, Any]) -> CheckResult:
        spec = conf.get("spec") or {}
        hard = spec.get("hard") or {}
        if spec.get("scopeSelector"):
            # A scoped quota refuses what its scope selects (the priority classes a tenant
            # may not use): zero pods, nothing else. The namespace's caps are unscoped.
            # (checkov adds __startline__ and __endline__ to every mapping it parses)
            caps = {k: v for k, v in hard.items() if not k.startswith("__")}
            return _result(caps == {"pods": "0"})
        wanted = {
            "requests.nvidia.com/gpu",
            "requests.cpu",
            "requests.memory",
            "persistentvolumeclaims",
        }
        return _result(wanted <= set(hard))


class LimitRangeDefaultsContainers(BaseK8Check):
    def __init__(self) -> None:
        super().__init__(
            name="LimitRanges give containers default CPU and memory requests and limits",
            id="CKV_LLMP_5",
            categories=(CheckCategories.KUBERNETES,),
            supported_entities=("LimitRange",),
        )

    def scan_spec_conf(self, conf: dict[str, Any]) -> CheckResult:
        for item in (conf.get("spec") or {}).get("limits") or []:
            if item.get("type") == "Container":
                defaults = item.get("default") or {}
                requests = item.get("defaultRequest") or {}
                return _result({"cpu", "memory"} <= set(defaults) & set(requests))
        return CheckResult.FAILED


part_of = PartOfPlatform()
pod_security = NamespaceEnforcesPodSecurity()
retained = VolumesAreRetained()
quota = QuotaCapsComputeAndClaims()
limits = LimitRangeDefaultsContainers()
