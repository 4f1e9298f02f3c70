"""`llmp verify`: the storage rows (the FSx for Lustre file system and its data repository
associations), the drift row (`pulumi preview --refresh --expect-no-changes` through the
Automation API, against a fake stack), and bad input. The cluster, node group, add-on and
Kubernetes rows are in test_verify_cluster.py.

The file system is created in a moto server on 127.0.0.1 from the plan's inputs. moto
reports no lifecycle for a file system and has no data repository associations: what it
cannot answer is tested with botocore's Stubber, whose responses are validated against
the service model. No test runs the Pulumi CLI: `drift.pulumi_cli` is patched to say
there is none unless a test hands it a fake stack.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber
from pulumi import automation
from pulumi.automation import events
from pulumi.automation._cmd import CommandResult
from typer.testing import CliRunner

from llmp import verify
from llmp.cli import app
from llmp.clients import aws
from llmp.stacks import REPO_ROOT
from llmp.verify import drift

STACK = "pretrain"
PRIMARY = "us-east-1"
SUBNET = "subnet-0123456789abcdef0"
FS = "lustre-fs"
DATASETS, CHECKPOINTS = "lustre-datasets /datasets", "lustre-checkpoints /checkpoints"
DRA = "data repository association"

# Dummy credentials for every test; `endpoint`, `plan` (of STACK) and `plan_file` are the
# shared fixtures of tests/conftest.py.
pytestmark = pytest.mark.usefixtures("aws_env")


@pytest.fixture(autouse=True)
def no_pulumi_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test runs a real `pulumi preview`, whatever this machine has installed."""
    monkeypatch.setattr(drift, "pulumi_cli", lambda: None)


def client(service: str, endpoint: str, region: str = PRIMARY) -> Any:
    return boto3.client(
        service,
        region_name=region,
        endpoint_url=endpoint,
        config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
    )


def deploy_file_system(plan: dict[str, Any], endpoint: str) -> str:
    """Create the plan's Lustre file system as it declares it; its id."""
    (fs,) = [r for r in plan["resources"] if r["type"] == verify.LUSTRE]
    inputs = fs["inputs"]
    created = client("fsx", endpoint).create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=inputs["storageCapacity"],
        StorageType=inputs["storageType"],
        SubnetIds=[SUBNET],
        LustreConfiguration={"DeploymentType": inputs["deploymentType"]},
        Tags=[{"Key": k, "Value": v} for k, v in inputs["tags"].items()],
    )
    return str(created["FileSystem"]["FileSystemId"])


def run_verify(*args: str) -> Any:
    return CliRunner().invoke(app, ["verify", *args])


def findings_of(result: Any) -> list[dict[str, str]]:
    assert result.stdout.lstrip().startswith("["), result.output
    return json.loads(result.stdout)


def assert_one_line_error(result: Any, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def storage_rows(plan_file: Path, endpoint: str, spelling: str = "new") -> tuple[int, list[Any]]:
    target = ["storage", STACK] if spelling == "old" else [STACK, "--only", "storage"]
    result = run_verify(*target, "--plan", str(plan_file), "--endpoint-url", endpoint, "--json")
    return result.exit_code, findings_of(result)


# ---------------------------------------------------------------------------
# Against moto
# ---------------------------------------------------------------------------


def test_the_file_system_is_found_by_its_name_tag(plan, plan_file, endpoint) -> None:
    fs_id = deploy_file_system(plan, endpoint)
    code, rows = storage_rows(plan_file, endpoint)
    assert code == 0, rows
    # moto reports no Lifecycle and has no associations: not checked, never a pass.
    assert rows == [
        {
            "area": "storage",
            "resource": FS,
            "check": "status",
            "status": "not checked",
            "reason": f"{fs_id}: the endpoint does not report its state",
        },
        *[
            {
                "area": "storage",
                "resource": label,
                "check": DRA,
                "status": "not checked",
                "reason": verify.DRA_NOT_IMPLEMENTED,
            }
            for label in (CHECKPOINTS, DATASETS)
        ],
    ]


def test_a_missing_file_system_fails_with_its_associations(plan_file, endpoint) -> None:
    code, rows = storage_rows(plan_file, endpoint)
    assert code == 1
    missing = f"no Lustre file system tagged Name={FS} in {PRIMARY}"
    assert [(r["resource"], r["status"], r["reason"]) for r in rows] == [
        (FS, "fail", missing),
        (CHECKPOINTS, "fail", f"its file system {FS}: {missing}"),
        (DATASETS, "fail", f"its file system {FS}: {missing}"),
    ]


def test_verify_storage_is_verify_only_storage(plan, plan_file, endpoint) -> None:
    deploy_file_system(plan, endpoint)
    assert storage_rows(plan_file, endpoint, "old") == storage_rows(plan_file, endpoint)


# ---------------------------------------------------------------------------
# As AWS answers: the Stubber
# ---------------------------------------------------------------------------


def expected(plans) -> verify.ExpectedFileSystem:
    (fs,) = verify.expected_file_systems(plans(STACK))
    return fs


def file_system(lifecycle: str, **extra: Any) -> dict[str, Any]:
    return {
        "FileSystemId": "fs-0123456789abcdef0",
        "FileSystemType": "LUSTRE",
        "Lifecycle": lifecycle,
        "Tags": [{"Key": "Name", "Value": FS}],
        **extra,
    }


def association(path: str, lifecycle: str, message: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"FileSystemPath": path, "Lifecycle": lifecycle}
    if message:
        out["FailureDetails"] = {"Message": message}
    return out


def stubbed_fsx(
    systems: list[dict[str, Any]], associations: list[dict[str, Any]] | None
) -> tuple[Any, Stubber]:
    fsx = boto3.client("fsx", region_name=PRIMARY)
    stub = Stubber(fsx)
    stub.add_response("describe_file_systems", {"FileSystems": systems}, {})
    if associations is not None:
        stub.add_response(
            "describe_data_repository_associations",
            {"Associations": associations},
            {"Filters": [{"Name": "file-system-id", "Values": ["fs-0123456789abcdef0"]}]},
        )
    return fsx, stub


def test_the_associations_as_aws_reports_them(plans) -> None:
    fs = expected(plans)
    assert sorted(fs.associations) == [(CHECKPOINTS, "/checkpoints"), (DATASETS, "/datasets")]
    fsx, stub = stubbed_fsx(
        [file_system("AVAILABLE")],
        [
            association("/datasets", "AVAILABLE"),
            association(
                "/checkpoints",
                "MISCONFIGURED",
                "The S3 bucket policy does not allow the file system's role to read the prefix.",
            ),
        ],
    )
    with stub:
        rows = verify.check_file_system(fsx, fs, PRIMARY)
    got = {(r.resource, r.check): (r.status, r.reason) for r in rows}
    assert got == {
        (FS, "status"): ("pass", "fs-0123456789abcdef0: AVAILABLE"),
        (DATASETS, DRA): ("pass", "AVAILABLE"),
        (CHECKPOINTS, DRA): (
            "fail",
            "MISCONFIGURED, not AVAILABLE: The S3 bucket policy does not allow the file "
            "system's role to read the prefix.",
        ),
    }


def test_a_failed_file_system_and_a_missing_association_fail(plans) -> None:
    fsx, stub = stubbed_fsx(
        [file_system("FAILED", FailureDetails={"Message": "Insufficient capacity in subnet."})],
        [association("/datasets", "CREATING")],
    )
    with stub:
        rows = verify.check_file_system(fsx, expected(plans), PRIMARY)
    got = {r.resource: (r.status, r.reason) for r in rows}
    assert got == {
        FS: (
            "fail",
            "fs-0123456789abcdef0: FAILED, not AVAILABLE: Insufficient capacity in subnet.",
        ),
        DATASETS: ("fail", "CREATING, not AVAILABLE"),
        CHECKPOINTS: ("fail", "no association at /checkpoints on fs-0123456789abcdef0"),
    }
    assert verify.failed(rows)


def test_two_file_systems_with_the_name_are_a_failure(plans) -> None:
    other = {**file_system("AVAILABLE"), "FileSystemId": "fs-0fedcba9876543210"}
    fsx, stub = stubbed_fsx([file_system("AVAILABLE"), other], None)
    with stub:
        rows = verify.check_file_system(fsx, expected(plans), PRIMARY)
    assert rows[0].reason == (
        f"2 file systems tagged Name={FS}: fs-0123456789abcdef0, fs-0fedcba9876543210"
    )
    assert {r.status for r in rows} == {"fail"}


def server_error(stub: Stubber, operation: str, code: str, status: int, message: str) -> None:
    stub.add_client_error(
        operation, service_error_code=code, service_message=message, http_status_code=status
    )


def test_an_api_the_endpoint_lacks_is_never_a_pass(plans) -> None:
    for emulated, status, reason in (
        (True, "not checked", verify.DRA_NOT_IMPLEMENTED),
        # From AWS itself a 500 is a failure, not a missing API: a read that fails the run.
        (False, "fail", "cannot read: 500: Internal Server Error"),
    ):
        fsx, stub = stubbed_fsx([file_system("AVAILABLE")], None)
        server_error(
            stub, "describe_data_repository_associations", "500", 500, "Internal Server Error"
        )
        with stub:
            rows = verify.check_file_system(fsx, expected(plans), PRIMARY, emulated)
        assert {(r.status, r.reason) for r in rows if r.check == DRA} == {(status, reason)}
        assert verify.failed(rows) is (status == "fail")


def test_a_read_the_account_refuses_fails_and_refused_credentials_stop_the_run(plans) -> None:
    fsx = boto3.client("fsx", region_name=PRIMARY)
    stub = Stubber(fsx)
    server_error(stub, "describe_file_systems", "AccessDeniedException", 400, "not authorized")
    server_error(stub, "describe_file_systems", "UnrecognizedClientException", 403, "bad token")
    with stub:
        rows = verify.check_file_system(fsx, expected(plans), PRIMARY)
        denied = "cannot read: AccessDeniedException: not authorized"
        assert [(r.resource, r.status, r.reason) for r in rows] == [
            (FS, "fail", denied),
            *[
                (label, "fail", f"its file system {FS}: {denied}")
                for label in (CHECKPOINTS, DATASETS)
            ],
        ]
        with pytest.raises(aws.CredentialsRejected, match="bad token"):
            verify.check_file_system(fsx, expected(plans), PRIMARY)


# ---------------------------------------------------------------------------
# Drift: the refresh preview, against a fake Automation API stack
# ---------------------------------------------------------------------------

NODE_GROUP_URN = (
    "urn:pulumi:pretrain::llm-platform::llmp:nodes:GpuNodePool$aws:eks/nodeGroup:NodeGroup::"
    "gpu-h100-nodes"
)


def step(op: events.OpType, urn: str, diffs: list[str] | None = None) -> events.EngineEvent:
    metadata = events.StepEventMetadata(op=op, urn=urn, type="t", provider="p", diffs=diffs)
    return events.EngineEvent(0, 0, resource_pre_event=events.ResourcePreEvent(metadata))


def summary_event(changes: dict[str, int]) -> events.EngineEvent:
    done = events.SummaryEvent(
        maybe_corrupt=False, duration_seconds=1, resource_changes=changes, policy_packs={}
    )
    return events.EngineEvent(0, 0, summary_event=done)


class FakeStack:
    """What `automation.select_stack` returns: `preview` replays engine events, then returns
    or raises as the CLI would (`--expect-no-changes` exits non-zero on changes)."""

    def __init__(self, replay: list[events.EngineEvent], error: Exception | None = None):
        self.replay, self.error = replay, error
        self.calls: list[dict[str, Any]] = []

    def preview(self, **kwargs: Any) -> automation.PreviewResult:
        self.calls.append(kwargs)
        for event in self.replay:
            kwargs["on_event"](event)
        if self.error is not None:
            raise self.error
        last = self.replay[-1].summary_event if self.replay else None
        changes = last.resource_changes if last is not None else {}
        return automation.PreviewResult(stdout="", stderr="", change_summary=changes)


def command_error(stderr: str) -> automation.CommandError:
    return automation.CommandError(CommandResult(stdout="", stderr=stderr, code=255))


@pytest.fixture
def fake_stack(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Install a FakeStack behind the Automation API and a CLI on PATH; returns a setter."""
    selected: dict[str, Any] = {}

    def install(stack: FakeStack | Exception) -> dict[str, Any]:
        def select_stack(**kwargs: Any) -> FakeStack:
            selected.update(kwargs)
            if isinstance(stack, Exception):
                raise stack
            return stack

        monkeypatch.setattr(drift, "pulumi_cli", lambda: "/usr/local/bin/pulumi")
        monkeypatch.setattr(automation, "select_stack", select_stack)
        return selected

    return install


def run_drift(plan_file: Path, *extra: str) -> tuple[Any, list[dict[str, str]]]:
    result = run_verify(STACK, "--only", "drift", "--plan", str(plan_file), "--json", *extra)
    return result, findings_of(result)


def test_no_pulumi_cli_is_not_checked_and_says_what_to_run(plan_file) -> None:
    result, rows = run_drift(plan_file)
    assert result.exit_code == 0
    assert rows == [
        {
            "area": "drift",
            "resource": f"stack {STACK}",
            "check": "refresh preview",
            "status": "not checked",
            "reason": "no Pulumi CLI on PATH: install it, or run "
            f"`pulumi preview --refresh --expect-no-changes -s {STACK}`",
        }
    ]


def test_no_changes_after_the_refresh_pass(plan_file, fake_stack) -> None:
    stack = FakeStack([step(events.OpType.REFRESH, NODE_GROUP_URN), summary_event({"same": 251})])
    selected = fake_stack(stack)
    result, rows = run_drift(plan_file)
    assert result.exit_code == 0, result.output
    assert [(r["status"], r["reason"]) for r in rows] == [
        ("pass", "no changes after the refresh (251 resources the same)")
    ]
    assert selected == {"stack_name": STACK, "work_dir": str(REPO_ROOT)}
    (call,) = stack.calls
    assert call["refresh"] is True and call["expect_no_changes"] is True
    assert "running `pulumi preview --refresh --expect-no-changes -s pretrain`" in result.stderr


def test_changes_after_the_refresh_fail_with_what_would_change(plan_file, fake_stack) -> None:
    replay = [
        step(events.OpType.SAME, NODE_GROUP_URN),
        step(events.OpType.UPDATE, NODE_GROUP_URN, ["scalingConfig", "labels"]),
        step(events.OpType.REPLACE, NODE_GROUP_URN.replace("gpu-h100-nodes", "cluster-system")),
        summary_event({"same": 249, "update": 1, "replace": 1}),
    ]
    fake_stack(FakeStack(replay, command_error("error: no changes were expected")))
    result, rows = run_drift(plan_file)
    assert result.exit_code == 1
    (row,) = rows
    assert (row["status"], row["reason"]) == (
        "fail",
        "1 to replace, 1 to update: update gpu-h100-nodes (scalingConfig, labels); "
        "replace cluster-system",
    )


def test_a_preview_that_fails_or_a_stack_not_found_fail(plan_file, fake_stack) -> None:
    stderr = "warning: A new version of Pulumi is available.\nerror: failed to decrypt config\n"
    fake_stack(FakeStack([], command_error(stderr)))
    result, rows = run_drift(plan_file)
    assert result.exit_code == 1
    assert rows[0]["reason"] == (
        f"`pulumi preview --refresh --expect-no-changes -s {STACK}` failed: "
        "error: failed to decrypt config"
    )
    fake_stack(automation.StackNotFoundError(CommandResult("", "no stack named 'pretrain'", 255)))
    result, rows = run_drift(plan_file)
    assert result.exit_code == 1
    assert rows[0]["reason"].startswith(f"no stack {STACK} in the backend")


def test_no_drift_skips_the_preview(plan_file, fake_stack) -> None:
    stack = FakeStack([summary_event({"same": 1})])
    fake_stack(stack)
    result, rows = run_drift(plan_file, "--no-drift")
    assert result.exit_code == 0 and stack.calls == []
    assert rows[0]["status"] == "not checked" and rows[0]["reason"].startswith("--no-drift; run")


def test_drift_alone_needs_no_aws_credentials(plan_file, monkeypatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    result, rows = run_drift(plan_file)
    assert result.exit_code == 0 and [r["area"] for r in rows] == ["drift"]


# ---------------------------------------------------------------------------
# Bad input: exit 2, one line on stderr
# ---------------------------------------------------------------------------


def test_a_malformed_plan_is_bad_input(tmp_path: Path, endpoint) -> None:
    broken = tmp_path / "plan.json"
    broken.write_text('{"resources": [')
    result = run_verify("storage", STACK, "--plan", str(broken), "--endpoint-url", endpoint)
    assert_one_line_error(result, "is not JSON")


@pytest.mark.parametrize(
    "content", ["[]", '{"resources": 3}', '{"resources": [{"type": "aws:s3/bucket:Bucket"}]}']
)
def test_a_plan_of_the_wrong_shape_is_bad_input(tmp_path: Path, content: str) -> None:
    path = tmp_path / "plan.json"
    path.write_text(content)
    assert_one_line_error(run_verify(STACK, "--plan", str(path)), str(path))


def test_a_missing_plan_is_bad_input(tmp_path: Path) -> None:
    missing = tmp_path / "absent.json"
    assert_one_line_error(run_verify(STACK, "--plan", str(missing)), f"no plan file {missing}")


def test_another_stacks_plan_is_bad_input(plan, tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({**plan, "stack": "finetune"}))
    assert_one_line_error(run_verify(STACK, "--plan", str(path)), "finetune", STACK)


def test_an_unknown_stack_is_bad_input() -> None:
    assert_one_line_error(run_verify("storage", "no-such-stack"), "no stack file")


def test_no_credentials_is_bad_input(plan_file, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    result = run_verify(STACK, "--plan", str(plan_file), "--endpoint-url", "http://127.0.0.1:9")
    assert_one_line_error(result, "no AWS credentials")


def test_an_unreachable_endpoint_is_bad_input(plan_file) -> None:
    result = run_verify(STACK, "--plan", str(plan_file), "--endpoint-url", "http://127.0.0.1:9")
    assert_one_line_error(result, "cannot reach the endpoint")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["a", "b"], "llmp verify takes STACK, or `storage STACK`"),
        (["storage", STACK, "--only", "cluster"], "llmp verify takes STACK"),
        ([STACK, "--only", "network"], "--only network: not an area"),
        ([STACK, "--endpoint-url", "127.0.0.1:5000"], "not an http(s) URL"),
    ],
)
def test_a_bad_command_line_is_one_line(args: list[str], fragment: str) -> None:
    assert_one_line_error(run_verify(*args), fragment)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{", "is not JSON"),
        ("[]", "is not an object of stack outputs"),
        ('{"node_pools": ["gpu-h100-nodes"]}', "`node_pools` is not what the stack exports"),
        ('{"cluster_name": 3}', "`cluster_name` is not what the stack exports"),
    ],
)
def test_unreadable_outputs_are_bad_input(
    plan_file, tmp_path: Path, content: str, fragment: str
) -> None:
    path = tmp_path / "outputs.json"
    path.write_text(content)
    result = run_verify(STACK, "--plan", str(plan_file), "--outputs", str(path))
    assert_one_line_error(result, fragment, str(path))
