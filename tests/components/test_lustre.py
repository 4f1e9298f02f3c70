"""LustreFileSystem: PERSISTENT_2 beside its GPU pool, Lustre ports, S3 associations, timeouts."""

from __future__ import annotations

import pytest

from tests.conftest import inputs_of

FS = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"


def test_file_system_settings_follow_config(plans) -> None:
    fs = inputs_of(plans("pretrain"), FS, "lustre-fs")
    assert fs["deploymentType"] == "PERSISTENT_2"
    assert fs["storageCapacity"] == 48000
    assert fs["perUnitStorageThroughput"] == 500
    assert fs["dataCompressionType"] == "LZ4"
    assert fs["metadataConfiguration"] == {"mode": "USER_PROVISIONED", "iops": 12000}
    assert fs["fileSystemTypeVersion"] == "2.15"
    assert fs["kmsKeyId"].endswith(":key/storage-s3")
    # Linked to S3: AWS takes no backups of it, daily or final; S3 holds the data.
    assert fs["skipFinalBackup"] is True
    assert fs["automaticBackupRetentionDays"] == 0


def test_file_system_sits_in_its_gpu_pools_subnet(plans) -> None:
    plan = plans("pretrain")
    fs = inputs_of(plan, FS, "lustre-fs")
    pool = inputs_of(plan, "aws:eks/nodeGroup:NodeGroup", "gpu-h100-nodes")
    assert [fs["subnetIds"]] == pool["subnetIds"] == ["network-private-us-east-1a-id"]
    finetune_fs = inputs_of(plans("finetune"), FS, "lustre-fs")
    assert finetune_fs["subnetIds"] == "network-private-us-west-2a-id"


@pytest.mark.parametrize("ports", [(988, 988), (1018, 1023)])
def test_lustre_ports_between_the_file_system_and_the_nodes(plans, ports) -> None:
    plan = plans("pretrain")
    low, high = ports
    fs_sg = "lustre-fs-id"
    node_sg = "sg-cluster-eks-cluster"

    def rules(type_: str) -> set[tuple[str, str]]:
        return {
            (r.inputs["securityGroupId"], r.inputs["referencedSecurityGroupId"])
            for r in plan.by_type(type_)
            if r.inputs.get("fromPort") == low
            and r.inputs.get("toPort") == high
            and r.inputs["ipProtocol"] == "tcp"
        }

    assert rules(INGRESS) == {(fs_sg, fs_sg), (fs_sg, node_sg), (node_sg, fs_sg)}
    assert rules(EGRESS) == {(fs_sg, fs_sg), (fs_sg, node_sg)}


def test_datasets_are_imported_and_checkpoints_exported(plans) -> None:
    plan = plans("pretrain")
    datasets = inputs_of(plan, DRA, "lustre-datasets")
    assert datasets["fileSystemPath"] == "/datasets"
    assert datasets["dataRepositoryPath"] == "s3://acme-llm-pretrain-datasets/"
    assert datasets["batchImportMetaDataOnCreate"] is True
    assert datasets["s3"] == {"autoImportPolicy": {"events": ["NEW", "CHANGED", "DELETED"]}}
    checkpoints = inputs_of(plan, DRA, "lustre-checkpoints")
    assert checkpoints["fileSystemPath"] == "/checkpoints"
    assert checkpoints["dataRepositoryPath"] == "s3://acme-llm-pretrain-checkpoints/runs/"
    # Rotation on Lustre must never delete a checkpoint in S3.
    assert checkpoints["s3"] == {"autoExportPolicy": {"events": ["NEW", "CHANGED"]}}
    for dra in (datasets, checkpoints):
        assert dra["fileSystemId"] == "lustre-fs-id"
        assert dra["deleteDataInFilesystem"] is False


def test_long_creation_timeouts(monkeypatch) -> None:
    # Custom timeouts are resource options, not inputs: check them at construction.
    import pulumi_aws as aws

    from llmp.plan.synth import synthesize
    from tests.conftest import raw_stack

    timeouts: dict[str, str] = {}
    for cls in (aws.fsx.LustreFileSystem, aws.fsx.DataRepositoryAssociation):
        original = cls.__init__

        def spy(self, name, *args, _original=original, **kwargs):  # type: ignore[no-untyped-def]
            timeouts[name] = kwargs["opts"].custom_timeouts.create
            _original(self, name, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", spy)
    synthesize("pretrain", raw_stack("pretrain"))
    assert timeouts == {"lustre-fs": "90m", "lustre-datasets": "45m", "lustre-checkpoints": "45m"}


def test_no_lustre_without_config(plans) -> None:
    assert not plans("inference").by_type(FS)


def test_key_policy_admits_this_file_systems_s3_role_for_the_linked_buckets(plans) -> None:
    import json

    plan = plans("pretrain")
    policy_resource = plan.one("aws:kms/keyPolicy:KeyPolicy", "lustre-key-policy")
    assert policy_resource.inputs["keyId"] == "storage-s3-key-id"
    statements = {s["Sid"]: s for s in json.loads(policy_resource.inputs["policy"])["Statement"]}
    assert statements["EnableIamPolicies"]["Principal"] == {"AWS": "arn:aws:iam::000000000000:root"}
    fsx = statements["FsxS3AccessThroughS3"]
    assert fsx["Principal"]["AWS"].endswith(
        "s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_lustre-fs-id"
    )
    assert fsx["Condition"]["StringEquals"]["kms:ViaService"] == "s3.us-east-1.amazonaws.com"
    assert fsx["Condition"]["StringLike"]["kms:EncryptionContext:aws:s3:arn"] == [
        "arn:aws:s3:::acme-llm-pretrain-datasets",
        "arn:aws:s3:::acme-llm-pretrain-checkpoints",
    ]
    for dra in plan.by_type(DRA):
        assert policy_resource.urn in dra.dependencies


LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"


def test_data_repository_failures_are_logged_to_a_pulumi_log_group(plans) -> None:
    plan = plans("pretrain")
    group = plan.one(LOG_GROUP, "lustre-logs")
    # FSx writes only to groups under /aws/fsx (its service-linked role's policy).
    assert group.inputs["name"] == "/aws/fsx/llm-platform-pretrain-lustre"
    assert group.inputs["retentionInDays"] == 90
    assert group.parent == plan.one("llmp:storage:LustreFileSystem", "lustre").urn
    fs = plan.one(FS, "lustre-fs")
    log = fs.inputs["logConfiguration"]
    assert log["level"] == "WARN_ERROR"
    # The group's ARN (the provider strips a trailing `:*`; LogGroup.arn has none).
    assert log["destination"].endswith(":loggroup/lustre-logs")
    assert group.urn in fs.dependencies
    finetune = plans("finetune").one(LOG_GROUP, "lustre-logs").inputs
    assert finetune["name"] == "/aws/fsx/llm-platform-finetune-lustre"


def test_log_retention_follows_config(synth) -> None:
    from tests.conftest import config_error, with_section

    raw = with_section("pretrain", "storage", {"lustre": {"log_retention_days": 30}})
    assert synth(raw).one(LOG_GROUP, "lustre-logs").inputs["retentionInDays"] == 30
    bad = with_section("pretrain", "storage", {"lustre": {"log_retention_days": 2}})
    message = config_error(bad)
    assert "llm-platform:storage.lustre.log_retention_days = 2" in message
    assert "a CloudWatch retention" in message


def test_a_log_group_outside_the_fsx_prefix_is_refused() -> None:
    from components.lustre import LustreFileSystem, LustreFileSystemArgs

    args = LustreFileSystemArgs(
        vpc_id="vpc",
        subnet_id="subnet",
        client_security_group_id="sg",
        kms_key_arn="arn",
        kms_key_id="key",
        datasets_bucket="d",
        checkpoints_bucket="c",
        log_group_name="/llm-platform/pretrain/lustre",
    )
    with pytest.raises(ValueError, match="must begin with /aws/fsx/"):
        LustreFileSystem("lustre", args)


def test_turning_logging_on_does_not_replace_the_file_system() -> None:
    # logConfiguration is updatable in place (UpdateFileSystem): not a force-new input.
    from spec.replacement import replacement_table

    rule = replacement_table().rules[FS]
    assert rule.precious
    assert rule.verdict("logConfiguration.level") == "update"
    assert rule.verdict("logConfiguration.destination") == "update"


def test_efa_file_system_allows_all_traffic_between_named_security_groups(plans) -> None:
    """EFA needs all traffic between the file system's and the clients' groups and within the
    file system's own, each rule naming a group (CIDR rules do not count)."""
    plan = plans("pretrain")
    fs = inputs_of(plan, FS, "lustre-fs")
    assert fs["efaEnabled"] is True
    assert fs["metadataConfiguration"]["mode"] == "USER_PROVISIONED"
    fs_sg, node_sg = "lustre-fs-id", "sg-cluster-eks-cluster"

    def all_traffic(type_: str) -> set[tuple[str, str]]:
        rules = [
            r.inputs
            for r in plan.by_type(type_)
            if r.name.startswith("lustre-") and r.inputs["ipProtocol"] == "-1"
        ]
        assert all("cidrIpv4" not in r and "fromPort" not in r for r in rules)
        return {(r["securityGroupId"], r["referencedSecurityGroupId"]) for r in rules}

    expected = {(fs_sg, fs_sg), (fs_sg, node_sg), (node_sg, fs_sg)}
    assert all_traffic(INGRESS) == expected
    assert all_traffic(EGRESS) == expected


def test_a_file_system_without_efa_opens_only_the_lustre_ports(plans) -> None:
    plan = plans("finetune")
    assert "efaEnabled" not in inputs_of(plan, FS, "lustre-fs")
    lustre = [r for r in plan.by_type(INGRESS) if r.name.startswith("lustre-")]
    assert lustre and not [r for r in lustre if r.inputs["ipProtocol"] == "-1"]
