"""Enum-valued inputs of every AWS resource, checked against botocore's service models.

A typo in a value the AWS API takes from a fixed set (`GLACIER_IR`,
`capacity-block`, `BucketOwnerEnforced`) passes every Pulumi type check and
fails only at `pulumi up`. ENUMS maps (resource type, input path) to the
botocore (service, shape) whose enum lists the valid values; a path is dotted,
and `[]` walks every element of a list. Every value found must be in the
enum, and every row must match at least one value in some stack, so the
table cannot rot when an input moves.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

import botocore.session
import pytest

from tests.conftest import STACKS

LT = "aws:ec2/launchTemplate:LaunchTemplate"
NG = "aws:eks/nodeGroup:NodeGroup"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
REPLICATION = "aws:s3/bucketReplicationConfig:BucketReplicationConfig"
SSE = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"

ENUMS: dict[tuple[str, str], tuple[str, str]] = {
    # S3
    (LIFECYCLE, "rules[].status"): ("s3", "ExpirationStatus"),
    (LIFECYCLE, "rules[].transitions[].storageClass"): ("s3", "TransitionStorageClass"),
    (SSE, "rules[].applyServerSideEncryptionByDefault.sseAlgorithm"): (
        "s3",
        "ServerSideEncryption",
    ),
    ("aws:s3/bucketOwnershipControls:BucketOwnershipControls", "rule.objectOwnership"): (
        "s3",
        "ObjectOwnership",
    ),
    ("aws:s3/bucketVersioning:BucketVersioning", "versioningConfiguration.status"): (
        "s3",
        "BucketVersioningStatus",
    ),
    (REPLICATION, "rules[].status"): ("s3", "ReplicationRuleStatus"),
    (REPLICATION, "rules[].destination.storageClass"): ("s3", "StorageClass"),
    (REPLICATION, "rules[].deleteMarkerReplication.status"): (
        "s3",
        "DeleteMarkerReplicationStatus",
    ),
    (REPLICATION, "rules[].destination.metrics.status"): ("s3", "MetricsStatus"),
    (REPLICATION, "rules[].destination.replicationTime.status"): ("s3", "ReplicationTimeStatus"),
    (REPLICATION, "rules[].sourceSelectionCriteria.sseKmsEncryptedObjects.status"): (
        "s3",
        "SseKmsEncryptedObjectsStatus",
    ),
    # FSx for Lustre
    (FSX, "deploymentType"): ("fsx", "LustreDeploymentType"),
    (FSX, "dataCompressionType"): ("fsx", "DataCompressionType"),
    (FSX, "storageType"): ("fsx", "StorageType"),
    (FSX, "metadataConfiguration.mode"): ("fsx", "MetadataConfigurationMode"),
    (FSX, "logConfiguration.level"): ("fsx", "LustreAccessAuditLogLevel"),
    (DRA, "s3.autoImportPolicy.events[]"): ("fsx", "EventType"),
    (DRA, "s3.autoExportPolicy.events[]"): ("fsx", "EventType"),
    # EC2
    (LT, "networkInterfaces[].interfaceType"): ("ec2", "NetworkInterfaceType"),
    (LT, "instanceMarketOptions.marketType"): ("ec2", "MarketType"),
    (LT, "blockDeviceMappings[].ebs.volumeType"): ("ec2", "VolumeType"),
    (LT, "metadataOptions.httpTokens"): ("ec2", "LaunchTemplateHttpTokensState"),
    (LT, "metadataOptions.httpEndpoint"): ("ec2", "LaunchTemplateInstanceMetadataEndpointState"),
    (LT, "tagSpecifications[].resourceType"): ("ec2", "ResourceType"),
    ("aws:ec2/placementGroup:PlacementGroup", "strategy"): ("ec2", "PlacementStrategy"),
    ("aws:ec2/eip:Eip", "domain"): ("ec2", "DomainType"),
    # EKS
    (NG, "capacityType"): ("eks", "CapacityTypes"),
    (NG, "amiType"): ("eks", "AMITypes"),
    (NG, "taints[].effect"): ("eks", "TaintEffect"),
    ("aws:eks/cluster:Cluster", "enabledClusterLogTypes[]"): ("eks", "LogType"),
    ("aws:eks/cluster:Cluster", "accessConfig.authenticationMode"): ("eks", "AuthenticationMode"),
    ("aws:eks/cluster:Cluster", "upgradePolicy.supportType"): ("eks", "SupportType"),
    ("aws:eks/addon:Addon", "resolveConflictsOnCreate"): ("eks", "ResolveConflicts"),
    ("aws:eks/addon:Addon", "resolveConflictsOnUpdate"): ("eks", "ResolveConflicts"),
}


@cache
def enum(service: str, shape: str) -> frozenset[str]:
    model = botocore.session.get_session().get_service_model(service)
    values = model.shape_for(shape).enum
    assert values, f"{service} {shape} is not an enum in botocore"
    return frozenset(values)


def values_at(value: Any, path: str) -> Iterator[Any]:
    """Every value under a dotted `path`; `key[]` walks the list at `key`."""
    if not path:
        yield value
        return
    head, _, rest = path.partition(".")
    key, is_list = head.removesuffix("[]"), head.endswith("[]")
    if not isinstance(value, dict) or key not in value:
        return
    found = value[key]
    for item in found if is_list and isinstance(found, list) else [found]:
        yield from values_at(item, rest)


def _found(plans, stack: str) -> Iterator[tuple[tuple[str, str], str, Any]]:
    for r in plans(stack).resources:
        for (type_, path), _ in ENUMS.items():
            if r.type == type_:
                for v in values_at(r.inputs, path):
                    yield (type_, path), r.name, v


def test_every_row_names_a_botocore_enum() -> None:
    for service, shape in set(ENUMS.values()):
        assert enum(service, shape)


@pytest.mark.parametrize("stack", STACKS)
def test_enum_inputs_take_values_the_aws_api_knows(plans, stack: str) -> None:
    wrong = [
        f"{name} {path} = {value!r} (not in {ENUMS[(type_, path)]})"
        for (type_, path), name, value in _found(plans, stack)
        if value not in enum(*ENUMS[(type_, path)])
    ]
    assert wrong == []


def test_every_row_matches_a_value_in_some_stack(plans) -> None:
    matched = {row for stack in STACKS for row, _, _ in _found(plans, stack)}
    assert set(ENUMS) - matched == set()


def test_a_wrong_value_is_caught() -> None:
    inputs = {"rules": [{"transitions": [{"storageClass": "GLACIER_INSTANT"}]}]}
    (value,) = values_at(inputs, "rules[].transitions[].storageClass")
    assert value not in enum("s3", "TransitionStorageClass")
