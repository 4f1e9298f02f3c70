"""`llmp verify storage STACK` (= `llmp verify STACK --only storage`): the pretrain plan's
buckets and file system, deployed into a moto server on 127.0.0.1, verify clean; drift,
missing buckets and bad input are reported. The cluster, node groups and add-ons are in
test_verify_cluster.py.

The account is built by `deploy_storage` below straight from the plan's inputs, the way
the AWS provider would apply them, independently of the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from typer.testing import CliRunner

from llmp import verify
from llmp.cli import app

STACK = "pretrain"
PRIMARY, DR = "us-east-1", "us-west-2"
ACCOUNT = "123456789012"
CHECKPOINTS = "acme-llm-pretrain-checkpoints"
MODELS_REPLICA = "acme-llm-pretrain-models-us-west-2"
SUBNET = "subnet-0123456789abcdef0"

# Dummy credentials for every test; `endpoint`, `plan` (of STACK) and `plan_file` are the
# shared fixtures of tests/conftest.py.
pytestmark = pytest.mark.usefixtures("aws_env")


# ---------------------------------------------------------------------------
# A moto server, and an account built from the plan
# ---------------------------------------------------------------------------


def client(service: str, endpoint: str, region: str) -> Any:
    return boto3.client(
        service,
        region_name=region,
        endpoint_url=endpoint,
        config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
    )


def provider_regions(plan: dict[str, Any]) -> dict[str, str]:
    return {
        r["urn"]: r["inputs"]["region"]
        for r in plan["resources"]
        if r["type"] == "pulumi:providers:aws"
    }


def real_arn(value: str, plan: dict[str, Any]) -> str:
    """The mock's `arn:aws:mock:...:bucket/<resource>` as the real ARN of that bucket."""
    name = value.rsplit("/", 1)[-1]
    (bucket,) = [r for r in plan["resources"] if r["type"] == verify.BUCKET and r["name"] == name]
    return f"arn:aws:s3:::{bucket['inputs']['bucket']}"


def lifecycle_rule(rule: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ID": rule["id"],
        "Status": rule["status"],
        "Filter": {"Prefix": rule["filter"]["prefix"]},
    }
    if "transitions" in rule:
        out["Transitions"] = [
            {"Days": t["days"], "StorageClass": t["storageClass"]} for t in rule["transitions"]
        ]
    if "expiration" in rule:
        out["Expiration"] = {"Days": rule["expiration"]["days"]}
    if "noncurrentVersionExpiration" in rule:
        days = rule["noncurrentVersionExpiration"]["noncurrentDays"]
        out["NoncurrentVersionExpiration"] = {"NoncurrentDays": days}
    if "abortIncompleteMultipartUpload" in rule:
        days = rule["abortIncompleteMultipartUpload"]["daysAfterInitiation"]
        out["AbortIncompleteMultipartUpload"] = {"DaysAfterInitiation": days}
    return out


def replication_rule(rule: dict[str, Any], plan: dict[str, Any], region: str) -> dict[str, Any]:
    dest = rule["destination"]
    destination: dict[str, Any] = {
        "Bucket": real_arn(dest["bucket"], plan),
        "StorageClass": dest["storageClass"],
        "EncryptionConfiguration": {"ReplicaKmsKeyID": f"arn:aws:kms:{region}:{ACCOUNT}:key/dr"},
    }
    if "replicationTime" in dest:
        destination["ReplicationTime"] = {
            "Status": dest["replicationTime"]["status"],
            "Time": {"Minutes": dest["replicationTime"]["time"]["minutes"]},
        }
    if "metrics" in dest:
        destination["Metrics"] = {
            "Status": dest["metrics"]["status"],
            "EventThreshold": {"Minutes": dest["metrics"]["eventThreshold"]["minutes"]},
        }
    return {
        "ID": rule["id"],
        "Priority": rule["priority"],
        "Status": rule["status"],
        "Filter": {"Prefix": rule["filter"]["prefix"]},
        "DeleteMarkerReplication": {"Status": rule["deleteMarkerReplication"]["status"]},
        "SourceSelectionCriteria": {"SseKmsEncryptedObjects": {"Status": "Enabled"}},
        "Destination": destination,
    }


def deploy_storage(plan: dict[str, Any], endpoint: str, skip: frozenset[str] = frozenset()) -> bool:
    """Create the plan's buckets (but `skip`) and file system as it declares them.

    Returns whether the endpoint could create the file system.
    """
    regions = provider_regions(plan)
    region_of: dict[str, str] = {}
    buckets = [r for r in plan["resources"] if r["type"] == verify.BUCKET]
    for r in buckets:
        name, region = r["inputs"]["bucket"], regions[r["provider"]]
        region_of[name] = region
        if name in skip:
            continue
        kwargs: dict[str, Any] = {"Bucket": name}
        if region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
        client("s3", endpoint, region).create_bucket(**kwargs)
    # Versioning before replication: S3 refuses a replication rule on unversioned buckets.
    order = [
        verify.PUBLIC_ACCESS,
        verify.ENCRYPTION,
        verify.VERSIONING,
        verify.LIFECYCLE,
        verify.REPLICATION,
    ]
    for type_ in order:
        for r in (r for r in plan["resources"] if r["type"] == type_):
            inputs = r["inputs"]
            name = inputs["bucket"]
            if name in skip:
                continue
            region = region_of[name]
            s3 = client("s3", endpoint, region)
            if type_ == verify.PUBLIC_ACCESS:
                s3.put_public_access_block(
                    Bucket=name,
                    PublicAccessBlockConfiguration={
                        "BlockPublicAcls": inputs["blockPublicAcls"],
                        "BlockPublicPolicy": inputs["blockPublicPolicy"],
                        "IgnorePublicAcls": inputs["ignorePublicAcls"],
                        "RestrictPublicBuckets": inputs["restrictPublicBuckets"],
                    },
                )
            elif type_ == verify.ENCRYPTION:
                (rule,) = inputs["rules"]
                by_default = rule["applyServerSideEncryptionByDefault"]
                s3.put_bucket_encryption(
                    Bucket=name,
                    ServerSideEncryptionConfiguration={
                        "Rules": [
                            {
                                "ApplyServerSideEncryptionByDefault": {
                                    "SSEAlgorithm": by_default["sseAlgorithm"],
                                    "KMSMasterKeyID": f"arn:aws:kms:{region}:{ACCOUNT}:key/s3",
                                },
                                "BucketKeyEnabled": rule["bucketKeyEnabled"],
                            }
                        ]
                    },
                )
            elif type_ == verify.VERSIONING:
                status = inputs["versioningConfiguration"]["status"]
                s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": status})
            elif type_ == verify.LIFECYCLE:
                s3.put_bucket_lifecycle_configuration(
                    Bucket=name,
                    LifecycleConfiguration={"Rules": [lifecycle_rule(x) for x in inputs["rules"]]},
                )
            else:
                s3.put_bucket_replication(
                    Bucket=name,
                    ReplicationConfiguration={
                        "Role": f"arn:aws:iam::{ACCOUNT}:role/storage-replication",
                        "Rules": [replication_rule(x, plan, DR) for x in inputs["rules"]],
                    },
                )
    created = True
    for r in (r for r in plan["resources"] if r["type"] == verify.LUSTRE):
        inputs = r["inputs"]
        try:
            client("fsx", endpoint, regions[r["provider"]]).create_file_system(
                FileSystemType="LUSTRE",
                StorageCapacity=inputs["storageCapacity"],
                StorageType=inputs["storageType"],
                SubnetIds=[SUBNET],
                LustreConfiguration={
                    "DeploymentType": inputs["deploymentType"],
                    "PerUnitStorageThroughput": inputs["perUnitStorageThroughput"],
                    "DataCompressionType": inputs["dataCompressionType"],
                },
                Tags=[{"Key": k, "Value": v} for k, v in inputs["tags"].items()],
            )
        except (ClientError, NotImplementedError):
            created = False
    return created


def run_verify(*args: str) -> Any:
    return CliRunner().invoke(app, ["verify", "storage", STACK, *args])


def findings_of(result: Any) -> list[dict[str, str]]:
    assert result.stdout.lstrip().startswith("["), result.output
    return json.loads(result.stdout)


# ---------------------------------------------------------------------------
# Against moto
# ---------------------------------------------------------------------------


def test_a_deployed_plan_verifies_without_drift(plan, plan_file, endpoint) -> None:
    fs_created = deploy_storage(plan, endpoint)
    result = run_verify("--plan", str(plan_file), "--endpoint-url", endpoint, "--json")
    rows = findings_of(result)
    assert result.exit_code == 0, result.output
    assert not [r for r in rows if r["status"] == "fail"]

    names = {r["inputs"]["bucket"] for r in plan["resources"] if r["type"] == verify.BUCKET}
    assert {r["resource"] for r in rows} >= names
    by = {(r["resource"], r["check"]): r for r in rows}
    for name in names:
        for check in ("exists", "encryption", "public access block", "lifecycle rule housekeeping"):
            assert by[(name, check)]["status"] == "pass", (name, check)
    # The replicas were looked for in the DR region, and replication points at them.
    assert by[(MODELS_REPLICA, "exists")]["reason"] == f"in {DR}"
    assert by[(CHECKPOINTS, "exists")]["reason"] == f"in {PRIMARY}"
    assert by[(CHECKPOINTS, "versioning")]["status"] == "pass"
    assert by[(CHECKPOINTS, "replication rule dr-checkpoints")]["status"] == "pass"
    assert (
        f"arn:aws:s3:::{CHECKPOINTS}-{DR}"
        in by[(CHECKPOINTS, "replication rule dr-checkpoints")]["reason"]
    )

    fs_rows = {r["check"]: r for r in rows if r["resource"] == "lustre-fs"}
    if fs_created:
        for check in (
            "exists",
            "deployment type",
            "storage capacity GiB",
            "throughput MB/s/TiB",
            "data compression",
        ):
            assert fs_rows[check]["status"] == "pass", check
        # moto reports no Lifecycle for a file system: that is not a pass.
        assert fs_rows["lifecycle"]["status"] in ("pass", "not checked")
    else:
        assert fs_rows["exists"]["status"] == "not checked"


def test_data_repository_associations_are_not_checked_against_moto(
    plan, plan_file, endpoint
) -> None:
    deploy_storage(plan, endpoint)
    result = run_verify("--plan", str(plan_file), "--endpoint-url", endpoint, "--json")
    assert result.exit_code == 0, result.output
    dras = [r for r in findings_of(result) if r["check"] == "data repository association"]
    assert {r["resource"] for r in dras} == {
        "lustre-datasets /datasets",
        "lustre-checkpoints /checkpoints",
    }
    for row in dras:
        assert row["status"] == "not checked"
        assert row["reason"] in (
            "the endpoint does not implement data repository associations",
            "the file system was not checked",
        )


def test_a_deleted_lifecycle_rule_is_drift(plan, plan_file, endpoint) -> None:
    deploy_storage(plan, endpoint)
    (lifecycle,) = [
        r
        for r in plan["resources"]
        if r["type"] == verify.LIFECYCLE and r["inputs"]["bucket"] == CHECKPOINTS
    ]
    rules = lifecycle["inputs"]["rules"]
    dropped = next(r["id"] for r in rules if r["id"] != "housekeeping")
    s3 = client("s3", endpoint, PRIMARY)
    s3.put_bucket_lifecycle_configuration(
        Bucket=CHECKPOINTS,
        LifecycleConfiguration={"Rules": [lifecycle_rule(r) for r in rules if r["id"] != dropped]},
    )

    result = run_verify("--plan", str(plan_file), "--endpoint-url", endpoint, "--json")
    assert result.exit_code == 1, result.output
    drift = [r for r in findings_of(result) if r["status"] == "fail"]
    assert drift == [
        {
            "area": "storage",
            "resource": CHECKPOINTS,
            "check": f"lifecycle rule {dropped}",
            "status": "fail",
            "reason": f"rule {dropped} is not in the bucket's lifecycle",
        }
    ]

    table = run_verify("--plan", str(plan_file), "--endpoint-url", endpoint)
    assert table.exit_code == 1
    assert "pass, 1 fail, " in table.stdout


def test_a_changed_lifecycle_rule_and_replication_are_drift(plan, plan_file, endpoint) -> None:
    deploy_storage(plan, endpoint)
    s3 = client("s3", endpoint, PRIMARY)
    rules = s3.get_bucket_lifecycle_configuration(Bucket=CHECKPOINTS)["Rules"]
    for rule in rules:
        if rule["ID"] == "housekeeping":
            rule["AbortIncompleteMultipartUpload"] = {"DaysAfterInitiation": 30}
    s3.put_bucket_lifecycle_configuration(
        Bucket=CHECKPOINTS, LifecycleConfiguration={"Rules": rules}
    )
    # moto's get_bucket_replication reports delete-marker replication as Disabled whatever
    # was put (see test_delete_marker_replication_is_compared), so change the destination.
    replication = s3.get_bucket_replication(Bucket=CHECKPOINTS)["ReplicationConfiguration"]
    destination = replication["Rules"][0]["Destination"]
    destination["StorageClass"] = "STANDARD_IA"
    del destination["ReplicationTime"]
    s3.put_bucket_replication(Bucket=CHECKPOINTS, ReplicationConfiguration=replication)

    result = run_verify("--plan", str(plan_file), "--endpoint-url", endpoint, "--json")
    assert result.exit_code == 1
    drift = {r["check"]: r["reason"] for r in findings_of(result) if r["status"] == "fail"}
    assert drift == {
        "lifecycle rule housekeeping": "abort multipart days 30 (plan 7)",
        "replication rule dr-checkpoints": (
            "storage class STANDARD_IA (plan STANDARD); RTC Disabled (plan Enabled)"
        ),
    }


def test_a_missing_bucket_is_reported_missing(plan, plan_file, endpoint) -> None:
    deploy_storage(plan, endpoint, skip=frozenset({MODELS_REPLICA}))
    result = run_verify("--plan", str(plan_file), "--endpoint-url", endpoint, "--json")
    assert result.exit_code == 1
    failing = [r for r in findings_of(result) if r["status"] == "fail"]
    assert failing == [
        {
            "area": "storage",
            "resource": MODELS_REPLICA,
            "check": "exists",
            "status": "fail",
            "reason": f"no bucket {MODELS_REPLICA} ({DR})",
        }
    ]


def test_nothing_deployed_is_all_missing(plan_file, endpoint) -> None:
    result = run_verify("--plan", str(plan_file), "--endpoint-url", endpoint, "--json")
    assert result.exit_code == 1
    rows = findings_of(result)
    exists = [r for r in rows if r["check"] == "exists"]
    assert exists and all(r["status"] in ("fail", "not checked") for r in exists)
    assert any(r["resource"] == "lustre-fs" and r["status"] == "fail" for r in exists)
    dras = [r for r in rows if r["check"] == "data repository association"]
    assert dras and all(r["status"] == "fail" for r in dras)


def test_region_flag_moves_the_primary_buckets_only(plan, plan_file, endpoint) -> None:
    deploy_storage(plan, endpoint)
    result = run_verify(
        "--plan", str(plan_file), "--endpoint-url", endpoint, "--json", "--region", "eu-west-1"
    )
    assert result.exit_code == 1
    by = {(r["resource"], r["check"]): r for r in findings_of(result)}
    assert by[(CHECKPOINTS, "exists")]["status"] == "fail"
    assert by[(CHECKPOINTS, "exists")]["reason"] == f"in {PRIMARY}, the plan says eu-west-1"
    assert by[(MODELS_REPLICA, "exists")]["status"] == "pass"


# ---------------------------------------------------------------------------
# Bad input: exit 2, one line on stderr
# ---------------------------------------------------------------------------


def assert_one_line_error(result: Any, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_a_malformed_plan_is_bad_input(tmp_path: Path, endpoint) -> None:
    broken = tmp_path / "plan.json"
    broken.write_text('{"resources": [')
    result = run_verify("--plan", str(broken), "--endpoint-url", endpoint)
    assert_one_line_error(result, "is not JSON")


@pytest.mark.parametrize(
    "content",
    [
        "[]",
        '{"resources": 3}',
        '{"resources": [{"type": "aws:s3/bucket:Bucket"}]}',
    ],
)
def test_a_plan_of_the_wrong_shape_is_bad_input(tmp_path: Path, content: str) -> None:
    path = tmp_path / "plan.json"
    path.write_text(content)
    assert_one_line_error(run_verify("--plan", str(path)), str(path))


def test_an_unreadable_plan_is_bad_input(tmp_path: Path) -> None:
    assert_one_line_error(run_verify("--plan", str(tmp_path / "absent.json")), "cannot read plan")


def test_another_stacks_plan_is_bad_input(plan, tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({**plan, "stack": "finetune"}))
    assert_one_line_error(run_verify("--plan", str(path)), "finetune", STACK)


def test_an_unknown_stack_is_bad_input() -> None:
    result = CliRunner().invoke(app, ["verify", "storage", "no-such-stack"])
    assert_one_line_error(result, "no stack file")


def test_no_credentials_is_bad_input(plan_file, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    result = run_verify("--plan", str(plan_file), "--endpoint-url", "http://127.0.0.1:9")
    assert_one_line_error(result, "no AWS credentials")


# ---------------------------------------------------------------------------
# The pure parts
# ---------------------------------------------------------------------------


def test_expected_buckets_follow_the_providers_and_resolve_replica_arns(plan) -> None:
    buckets = {b.name: b for b in verify.expected_buckets(plan)}
    assert verify.primary_region(plan) == PRIMARY
    assert buckets[CHECKPOINTS].region == PRIMARY
    assert buckets[f"{CHECKPOINTS}-{DR}"].region == DR
    assert buckets[CHECKPOINTS].versioning == "Enabled"
    assert buckets[CHECKPOINTS].sse_algorithm == "aws:kms"
    assert buckets[CHECKPOINTS].bucket_key_enabled is True
    (rule,) = buckets[CHECKPOINTS].replication or ()
    assert rule.id == "dr-checkpoints"
    assert rule.destination_arn == f"arn:aws:s3:::{CHECKPOINTS}-{DR}"
    assert buckets["acme-llm-pretrain-logs"].replication is None
    moved = {b.name: b.region for b in verify.expected_buckets(plan, "eu-west-1")}
    assert moved[CHECKPOINTS] == "eu-west-1"
    assert moved[f"{CHECKPOINTS}-{DR}"] == DR


class FakeFsx:
    """An FSx client that has the file system, and either associations or no such API."""

    def __init__(self, associations: list[dict[str, Any]] | None, lifecycle: str = "AVAILABLE"):
        self.associations = associations
        self.lifecycle = lifecycle

    def describe_file_systems(self, **_: Any) -> dict[str, Any]:
        return {
            "FileSystems": [
                {
                    "FileSystemId": "fs-1",
                    "FileSystemType": "LUSTRE",
                    "Lifecycle": self.lifecycle,
                    "StorageCapacity": 48000,
                    "Tags": [{"Key": "Name", "Value": "lustre-fs"}],
                    "LustreConfiguration": {
                        "DeploymentType": "PERSISTENT_2",
                        "PerUnitStorageThroughput": 500,
                        "DataCompressionType": "LZ4",
                    },
                }
            ]
        }

    def describe_data_repository_associations(self, **kwargs: Any) -> dict[str, Any]:
        assert kwargs["Filters"] == [{"Name": "file-system-id", "Values": ["fs-1"]}]
        if self.associations is None:
            raise ClientError(
                {
                    "Error": {"Code": "500", "Message": "Internal Server Error"},
                    "ResponseMetadata": {"HTTPStatusCode": 500},
                },
                "DescribeDataRepositoryAssociations",
            )
        return {"Associations": self.associations}


def _check_fs(plan: dict[str, Any], fsx: FakeFsx, emulated: bool) -> list[verify.Finding]:
    (fs,) = verify.expected_file_systems(plan)
    findings, fs_id = verify.check_file_system(fsx, fs, emulated)
    exists = findings[0].status
    return findings + verify.check_associations(fsx, fs, fs_id, exists, emulated)


def test_associations_as_aws_reports_them(plan) -> None:
    associations = [
        {
            "FileSystemId": "fs-1",
            "Lifecycle": "AVAILABLE",
            "FileSystemPath": "/datasets",
            "DataRepositoryPath": "s3://acme-llm-pretrain-datasets/",
            "ImportedFileChunkSize": 1024,
            "S3": {"AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}},
        },
        {
            "FileSystemId": "fs-1",
            "Lifecycle": "AVAILABLE",
            "FileSystemPath": "/checkpoints",
            "DataRepositoryPath": "s3://acme-llm-pretrain-checkpoints/runs/",
            "ImportedFileChunkSize": 1024,
            "S3": {"AutoExportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}},
        },
    ]
    findings = _check_fs(plan, FakeFsx(associations, lifecycle="UPDATING"), emulated=False)
    statuses = {(f.resource, f.check): (f.status, f.reason) for f in findings}
    assert statuses[("lustre-fs", "lifecycle")] == ("fail", "UPDATING, not AVAILABLE")
    assert statuses[("lustre-fs", "deployment type")] == ("pass", "PERSISTENT_2")
    assert statuses[("lustre-datasets /datasets", "data repository association")][0] == "pass"
    assert statuses[("lustre-checkpoints /checkpoints", "data repository association")] == (
        "fail",
        "auto-export CHANGED, DELETED, NEW (plan CHANGED, NEW)",
    )


def test_an_api_the_endpoint_lacks_is_never_a_pass(plan) -> None:
    findings = _check_fs(plan, FakeFsx(None), emulated=True)
    dras = [f for f in findings if f.check == "data repository association"]
    assert len(dras) == 2
    assert {(f.status, f.reason) for f in dras} == {("not checked", verify.DRA_NOT_IMPLEMENTED)}
    assert not verify.failed(dras)
    # From AWS itself a 500 is a failure, not a missing API: a read that fails the run.
    real = [f for f in _check_fs(plan, FakeFsx(None), emulated=False) if f.check == dras[0].check]
    assert {(f.status, f.reason) for f in real} == {
        ("fail", "cannot read: 500: Internal Server Error")
    }
    assert verify.failed(real)


class FakeS3:
    """An S3 client whose only bucket has one replication rule."""

    def __init__(self, rule: dict[str, Any]):
        self.rule = rule

    def get_bucket_replication(self, Bucket: str) -> dict[str, Any]:
        assert Bucket == CHECKPOINTS
        return {"ReplicationConfiguration": {"Role": "r", "Rules": [self.rule]}}


def test_delete_marker_replication_is_compared(plan) -> None:
    buckets = {b.name: b for b in verify.expected_buckets(plan)}
    rule = {
        "ID": "dr-checkpoints",
        "Status": "Enabled",
        "DeleteMarkerReplication": {"Status": "Enabled"},
        "Destination": {
            "Bucket": f"arn:aws:s3:::{CHECKPOINTS}-{DR}",
            "StorageClass": "STANDARD",
            "ReplicationTime": {"Status": "Enabled", "Time": {"Minutes": 15}},
        },
    }
    (finding,) = verify.check_replication(FakeS3(rule), buckets[CHECKPOINTS])
    assert (finding.status, finding.reason) == ("fail", "delete markers Enabled (plan Disabled)")
    rule["DeleteMarkerReplication"] = {"Status": "Disabled"}
    (finding,) = verify.check_replication(FakeS3(rule), buckets[CHECKPOINTS])
    assert finding.status == "pass"


class DeniedS3:
    """An S3 client that finds the bucket but may not read its settings."""

    def head_bucket(self, Bucket: str) -> dict[str, Any]:
        return {"BucketRegion": "us-east-1"}

    def __getattr__(self, name: str) -> Any:
        from botocore.exceptions import ClientError

        def denied(**_: Any) -> dict[str, Any]:
            error = {"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}
            raise ClientError(error, name)  # type: ignore[arg-type]

        return denied


def test_a_read_the_account_refuses_fails_the_run() -> None:
    expected = verify.ExpectedBucket(
        name="acme-llm-pretrain-models",
        resource="storage-models",
        region="us-east-1",
        sse_algorithm="aws:kms",
        bucket_key_enabled=True,
        versioning="Enabled",
    )
    findings = verify.check_bucket(DeniedS3(), expected)
    by_check = {f.check: (f.status, f.reason) for f in findings}
    assert by_check["exists"][0] == "pass"
    assert by_check["encryption"] == ("fail", "cannot read: AccessDenied: Access Denied")
    assert by_check["versioning"] == ("fail", "cannot read: AccessDenied: Access Denied")
    assert verify.failed(findings)
