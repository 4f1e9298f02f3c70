"""Every rule of the pack: name, description, enforcement level, kind, validate function.

Levels: **mandatory** rules guard security, data durability and the budget;
**advisory** rules flag hygiene and operational risks a stack may knowingly
accept. Either can be changed per stack with CrossGuard policy config
(`{"rule-name": {"enforcementLevel": "advisory"}}`), which `policies.config`
reads for `llmp policy` exactly as the engine does for `pulumi preview`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from policies import cost, eks, fsx, iam, kubernetes, network, nodes, s3, tags

Level = Literal["mandatory", "advisory"]
Kind = Literal["resource", "stack"]


@dataclass(frozen=True)
class Rule:
    name: str
    """Kebab-case id, unique in the pack (the key of its policy config)."""
    description: str
    level: Level
    kind: Kind
    validate: Callable[..., Any]
    domain: str
    config: dict[str, dict[str, Any]] = field(default_factory=dict)
    """JSON-schema properties of the rule's config; each `default` is applied when unset."""


def _r(
    name: str,
    level: Level,
    kind: Kind,
    validate: Callable[..., Any],
    config: dict[str, dict[str, Any]] | None = None,
) -> Rule:
    doc = (validate.__doc__ or "").strip()
    description = " ".join(doc.split())
    domain = validate.__module__.rsplit(".", 1)[-1]
    return Rule(name, description, level, kind, validate, domain, config or {})


def _tag_keys(description: str) -> dict[str, Any]:
    """The `tags` property of a tag rule: a list of tag keys, by default the platform's."""
    return {
        "type": "array",
        "items": {"type": "string"},
        "description": description,
        "default": tags.DEFAULT_REQUIRED,
    }


def _daemonsets(description: str) -> dict[str, Any]:
    """The `allowed-daemonsets` property of a host-access rule: NAMESPACE/NAME, by default the
    platform's system DaemonSets."""
    return {
        "allowed-daemonsets": {
            "type": "array",
            "items": {"type": "string"},
            "description": description,
            "default": kubernetes.DEFAULT_ALLOWED_DAEMONSETS,
        }
    }


M: Level = "mandatory"
A: Level = "advisory"
RES: Kind = "resource"
STACK: Kind = "stack"

RULES: list[Rule] = [
    # S3
    _r("s3-sse-kms", M, STACK, s3.bucket_sse_kms),
    _r("s3-public-access-block", M, STACK, s3.bucket_public_access_block),
    _r("s3-tls-only", M, STACK, s3.bucket_tls_only),
    _r("s3-versioning-precious", M, STACK, s3.bucket_versioning_precious),
    _r("s3-no-force-destroy-precious", M, STACK, s3.bucket_no_force_destroy_precious),
    _r("s3-lifecycle-rules", M, STACK, s3.bucket_lifecycle_rules),
    _r("s3-abort-incomplete-uploads", A, STACK, s3.bucket_abort_incomplete_uploads),
    _r("s3-noncurrent-version-expiry", A, STACK, s3.bucket_noncurrent_expiry),
    _r("s3-access-logging", A, STACK, s3.bucket_access_logging),
    _r("s3-owner-enforced", A, STACK, s3.bucket_owner_enforced),
    _r("s3-adopted-bucket-protected", M, RES, s3.adopted_bucket_protected),
    _r("s3-precious-replicated", A, STACK, s3.precious_replicated),
    # FSx for Lustre
    _r("fsx-persistent-2", M, RES, fsx.lustre_persistent_2),
    _r("fsx-kms-key", M, RES, fsx.lustre_kms_key),
    _r(
        "fsx-in-gpu-pool-az",
        M,
        STACK,
        fsx.lustre_in_pool_az,
        {"node-pool": {"type": "string", "description": "GPU pool the file system serves."}},
    ),
    _r(
        "fsx-feeds-gpus",
        M,
        STACK,
        fsx.lustre_feeds_gpus,
        {
            "node-pool": {"type": "string", "description": "GPU pool the file system serves."},
            "demand": {
                "type": "object",
                "description": "What a training job asks of storage: "
                + ", ".join(fsx.DEMAND_KEYS)
                + " (the stack's storage.lustre.demand).",
            },
            "gpudirect-storage": {
                "type": "boolean",
                "description": "The pool's nodes read through GPUDirect Storage.",
            },
        },
    ),
    _r("fsx-linked-no-backups", M, STACK, fsx.lustre_linked_no_backups),
    _r("fsx-backups", A, STACK, fsx.lustre_backups),
    # EKS
    _r("eks-audit-logs", M, RES, eks.eks_audit_logs),
    _r("eks-secrets-encryption", M, RES, eks.eks_secrets_encryption),
    _r("eks-endpoint-restricted", M, RES, eks.eks_endpoint_restricted),
    _r("eks-supported-version", M, RES, eks.eks_supported_version),
    _r("eks-private-endpoint", A, RES, eks.eks_private_endpoint),
    # Node pools
    _r("efa-single-subnet", M, STACK, nodes.efa_single_subnet),
    _r("efa-placement-group", A, RES, nodes.efa_placement_group),
    _r("gpu-node-taint", M, RES, nodes.gpu_node_taint),
    _r("node-repair-enabled", A, RES, nodes.node_repair_enabled),
    _r("accelerated-ami-type", A, RES, nodes.accelerated_ami_type),
    _r("imdsv2-required", M, RES, nodes.imdsv2_required),
    _r("imds-hop-limit", A, RES, nodes.imds_hop_limit),
    _r("ebs-encrypted", M, RES, nodes.ebs_encrypted),
    # IAM
    _r("iam-no-wildcard-s3", M, RES, iam.iam_no_wildcard_s3),
    _r("iam-no-admin-policies", M, RES, iam.iam_no_admin_policies),
    _r("iam-trust-scoped", M, RES, iam.iam_trust_scoped),
    # Network
    _r("no-open-ingress", M, STACK, network.no_open_ingress),
    _r("no-wide-ingress", M, STACK, network.no_wide_ingress),
    _r("subnet-no-public-ip", A, RES, network.subnet_no_public_ip),
    # Kubernetes
    _r("k8s-gpu-limits", M, RES, kubernetes.k8s_gpu_limits),
    _r("k8s-image-pinned", M, RES, kubernetes.k8s_image_pinned),
    _r("k8s-serving-probes", M, RES, kubernetes.k8s_serving_probes),
    _r("k8s-serving-pdb", M, STACK, kubernetes.k8s_serving_pdb),
    _r(
        "k8s-no-privileged",
        M,
        RES,
        kubernetes.k8s_no_privileged,
        _daemonsets("NAMESPACE/NAME of DaemonSets allowed host access."),
    ),
    _r(
        "k8s-no-host-path",
        M,
        RES,
        kubernetes.k8s_no_host_path,
        _daemonsets("NAMESPACE/NAME of DaemonSets allowed hostPath volumes."),
    ),
    _r("k8s-namespace-quota", M, STACK, kubernetes.k8s_namespace_quota),
    _r("helm-chart-pinned", M, RES, kubernetes.helm_chart_pinned),
    _r("k8s-alb-ingress-https", M, RES, kubernetes.k8s_alb_ingress_https),
    _r("kueue-local-queue-per-namespace", M, STACK, kubernetes.kueue_local_queue_per_namespace),
    _r(
        "k8s-monitor-honor-labels",
        M,
        RES,
        kubernetes.k8s_monitor_honor_labels,
        {
            "platform-namespaces": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Namespaces only the platform makes pods in: monitors of their "
                "pods may set honorLabels.",
                "default": kubernetes.DEFAULT_PLATFORM_NAMESPACES,
            }
        },
    ),
    _r("k8s-tenant-egress", M, STACK, kubernetes.k8s_tenant_egress),
    _r("k8s-serving-ingress-ports", M, RES, kubernetes.k8s_serving_ingress_ports),
    _r("k8s-tenant-service-types", M, STACK, kubernetes.k8s_tenant_service_types),
    _r("k8s-tenant-volumes", M, STACK, kubernetes.k8s_tenant_volumes),
    # Tags
    _r(
        "required-tags",
        M,
        RES,
        tags.required_tags,
        {"tags": _tag_keys("Tag keys every taggable AWS resource carries.")},
    ),
    _r(
        "launch-template-tag-specifications",
        M,
        RES,
        tags.launch_template_tag_specifications,
        {"tags": _tag_keys("Tag keys instances and volumes carry.")},
    ),
    # Cost
    _r("spot-requires-checkpointing", M, RES, cost.spot_requires_checkpointing),
    _r(
        "gpu-budget",
        M,
        STACK,
        cost.gpu_budget,
        {
            cost.BUDGET_KEY: {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "Most the accelerated pools may cost per hour at max size.",
            }
        },
    ),
    _r("eks-standard-support", A, RES, cost.eks_standard_support),
]

BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}
assert len(BY_NAME) == len(RULES), "rule names must be unique"


def rules_reference() -> str:
    """A Markdown table of every rule (in docs/reference/policies.md; a test keeps it in sync)."""
    rows = ["| rule | domain | level | checks |", "|---|---|---|---|"]
    for rule in RULES:
        checks = rule.description.replace("|", "\\|")
        rows.append(f"| `{rule.name}` | {rule.domain} | {rule.level} | {checks} |")
    return "\n".join(rows) + "\n"
