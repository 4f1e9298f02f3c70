"""EKS control plane: audit logs, secrets encryption, endpoint exposure, version."""

from __future__ import annotations

import ipaddress

from pulumi_policy import ResourceValidationArgs

from policies.props import Report, declared, get, items, string_set
from spec.catalog import catalog

CLUSTER = "aws:eks/cluster:Cluster"
_OPEN = {"0.0.0.0/0", "::/0"}


def eks_audit_logs(args: ResourceValidationArgs, report: Report) -> None:
    """The control plane sends audit logs to CloudWatch."""
    if args.resource_type != CLUSTER:
        return
    if "audit" not in string_set(get(args.props, "enabledClusterLogTypes")):
        report("enabledClusterLogTypes lacks audit: who changed what must be on record")


def eks_secrets_encryption(args: ResourceValidationArgs, report: Report) -> None:
    """Kubernetes secrets are envelope-encrypted with a KMS key."""
    if args.resource_type != CLUSTER:
        return
    configs = items(get(args.props, "encryptionConfig"))
    for config in configs:
        provider = get(config, "provider")
        if "secrets" in string_set(get(config, "resources")) and declared(provider, "keyArn"):
            return
    report("no encryptionConfig for resources [secrets] with a provider keyArn")


def eks_endpoint_restricted(args: ResourceValidationArgs, report: Report) -> None:
    """A public API endpoint is open only to listed CIDRs, never to the whole internet."""
    if args.resource_type != CLUSTER:
        return
    vpc = get(args.props, "vpcConfig")
    # EKS makes the endpoint public, open to 0.0.0.0/0, unless told otherwise.
    if get(vpc, "endpointPublicAccess") is False:
        return
    cidrs = [c for c in items(get(vpc, "publicAccessCidrs")) if isinstance(c, str)]
    if not cidrs:
        report("the API endpoint is public with no publicAccessCidrs (EKS opens it to 0.0.0.0/0)")
        return
    for cidr in cidrs:
        try:
            net = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            continue
        if cidr in _OPEN or net.prefixlen == 0:
            report(f"publicAccessCidrs includes {cidr}: list your own CIDRs")


def eks_private_endpoint(args: ResourceValidationArgs, report: Report) -> None:
    """Nodes reach the API over the private endpoint."""
    if args.resource_type != CLUSTER:
        return
    if get(args.props, "vpcConfig", "endpointPrivateAccess") is not True:
        report("endpointPrivateAccess is not true: node traffic to the API leaves the VPC")


def eks_supported_version(args: ResourceValidationArgs, report: Report) -> None:
    """The Kubernetes version is one the catalog lists as supported (add-ons pinned for it)."""
    if args.resource_type != CLUSTER:
        return
    supported = catalog().eks.supported_versions
    version = get(args.props, "version")
    if version is None:
        report(f"no version: pin one of {', '.join(supported)} (EKS would pick its default)")
    elif str(version) not in supported:
        report(f"version {version} is not supported; use one of {', '.join(supported)}")
