"""`llmp accept`: the acceptance run against a fake Kubernetes API (tests/llmp/kube_fake.py).

No cluster is involved: the fake answers the client's calls with the client's own
model objects, runs pods on a scripted clock and hands back the sample logs of the
workload tests (DCGM JSON, nccl-tests output). What is proven here is the
orchestration: which objects are created with which labels and names, how the wait
reads Job and pod states and times out, how logs become a verdict, that everything
created is deleted, and the exit codes. Whether the jobs themselves run on real GPU
nodes is not checked here.
"""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path
from typing import Any

import pytest
import urllib3
from rich.console import Console
from typer.testing import CliRunner

from llmp import accept
from llmp.accept import jobs as accept_jobs
from llmp.cli import app
from llmp.clients import kube
from manifests.jobs import dcgm_diag
from spec.platform import PlatformConfig
from spec.stackfile import load_config
from tests.conftest import merge, raw_stack
from tests.llmp.kube_fake import FakeClock, FakeCluster, FakeNode, JobScript, PodScript, api_error

DATA = Path(__file__).parents[1] / "manifests" / "jobs" / "data"
DCGM_PASS = (DATA / "dcgm_diag_p5_level2_pass.json").read_text()
DCGM_MEMORY_FAIL = (DATA / "dcgm_diag_p5_level2_memory_fail.json").read_text()
DCGM_PCIE_WARN = (DATA / "dcgm_diag_p5_level2_pcie_warn.json").read_text()
NCCL_EFA = (DATA / "all_reduce_p5_efa.log").read_text()
NCCL_SOCKET = (DATA / "all_reduce_p5_socket.log").read_text()
RUN = "a1b2c3"


def pretrain() -> PlatformConfig:
    return load_config(raw_stack("pretrain"))


def h100_nodes(n: int = 16) -> list[FakeNode]:
    return [FakeNode(f"ip-10-10-{i // 8}-{10 + i}.ec2.internal", "h100") for i in range(n)]


def cluster(
    clock: FakeClock | None = None,
    nodes: list[FakeNode] | None = None,
    scripts: dict[str, JobScript] | None = None,
    secret: bool = True,
) -> FakeCluster:
    return FakeCluster(
        clock or FakeClock(),
        h100_nodes() if nodes is None else nodes,
        scripts
        if scripts is not None
        else {
            "dcgm-h100": JobScript([PodScript(DCGM_PASS, pending_s=30, running_s=150)]),
            "fabric-h100": JobScript([PodScript(NCCL_EFA, pending_s=20, running_s=300)]),
        },
        secrets={("foundation", "fabric-ssh")} if secret else set(),
    )


def run(
    fake: FakeCluster,
    cfg: PlatformConfig | None = None,
    progress: Console | None = None,
    **options: Any,
) -> accept.AcceptReport:
    return accept.run_acceptance(
        cfg or pretrain(),
        "pretrain",
        fake.apis(),
        accept.AcceptOptions(**options),
        run_id=RUN,
        clock=fake.clock,
        sleep=fake.clock.sleep,
        progress=progress,
    )


def rows(report: accept.AcceptReport) -> list[tuple[str, str, str, str]]:
    return [(f.pool, f.check, f.subject, f.result) for f in report.findings]


# --- a healthy pool -----------------------------------------------------------------------


def test_a_healthy_pretrain_cluster_is_accepted_and_left_clean() -> None:
    fake = cluster()
    screen = io.StringIO()
    report = run(fake, progress=Console(file=screen, width=160))
    assert report.passed
    results = rows(report)
    # Pool by pool: nodes, then one DCGM row per node, then the fabric.
    assert [r[:2] for r in results] == [
        ("h100", "nodes"),
        *[("h100", "dcgm")] * 16,
        ("h100", "fabric"),
        ("h100-block", "nodes"),
        ("h100-block", "dcgm"),
        ("h100-block", "fabric"),
    ]
    assert results[0] == ("h100", "nodes", "pool", "pass")
    assert results[-3:] == [
        ("h100-block", "nodes", "pool", "pass"),
        ("h100-block", "dcgm", "pool", "not checked"),
        ("h100-block", "fabric", "pool", "not checked"),
    ]
    dcgm = [r for r in results if r[:2] == ("h100", "dcgm")]
    assert len(dcgm) == 16 and {r[3] for r in dcgm} == {"pass"}
    assert {r[2] for r in dcgm} == {n.name for n in fake.nodes}
    (fabric_row,) = [f for f in report.findings if f.check == "fabric" and f.pool == "h100"]
    assert fabric_row.result == "pass"
    assert fabric_row.detail.startswith("transport efa, peak busbw 490.8 GB/s at 17179869184 B")
    assert fabric_row.subject.count(".ec2.internal") == 2
    # Everything it created is gone: both Jobs (pods with them) and the fabric Service.
    assert sorted(fake.deleted) == [
        ("Job", "foundation", f"dcgm-h100-{RUN}", "Background"),
        ("Job", "foundation", f"fabric-h100-{RUN}", "Background"),
        ("Service", "foundation", f"fabric-h100-{RUN}", None),
    ]
    assert fake.jobs == {} and fake.services == {}
    # It polled until the longest job ended (20 s pending + 300 s running), then stopped.
    assert set(fake.clock.sleeps) == {accept.POLL_SECONDS} and fake.clock.now == 320
    shown = screen.getvalue()
    assert "acceptance jobs" in shown and "succeeded" in shown


def test_the_created_jobs_carry_the_run_and_follow_the_stack() -> None:
    fake = cluster()
    run(fake)
    dcgm_job, fabric_job = sorted(fake.created_jobs(), key=lambda j: j["metadata"]["name"])
    for job, check in ((dcgm_job, "dcgm"), (fabric_job, "fabric")):
        meta = job["metadata"]
        assert meta["name"] == f"{check}-h100-{RUN}" and meta["namespace"] == "foundation"
        assert meta["labels"][accept_jobs.RUN_LABEL] == RUN
        assert meta["labels"][accept_jobs.CHECK_LABEL] == check
        # The tenant's LocalQueue: Kueue admits the job against the team's GPU quota.
        assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "default"
        assert job["spec"]["suspend"] is True
        assert job["spec"]["template"]["metadata"]["labels"][accept_jobs.RUN_LABEL] == RUN
    assert dcgm_job["spec"]["completions"] == 16
    assert dcgm_job["spec"]["activeDeadlineSeconds"] == 20 * 60
    assert (
        "dcgmi diag -r 2 -j" in dcgm_job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    )
    assert fabric_job["spec"]["completions"] == 2
    assert fabric_job["spec"]["activeDeadlineSeconds"] == 30 * 60
    # The headless Service goes first: the fabric pods' host names need it.
    assert [o["kind"] for o in fake.created if o["metadata"]["name"].startswith("fabric")] == [
        "Service",
        "Job",
    ]
    (service,) = [o for o in fake.created if o["kind"] == "Service"]
    assert service["metadata"]["labels"][accept_jobs.RUN_LABEL] == RUN


def test_logs_are_read_raw_so_a_json_log_stays_json() -> None:
    fake = cluster()
    report = run(fake, fabric=False, keep=True)
    assert {f.result for f in report.findings if f.check == "dcgm" and f.pool == "h100"} == {"pass"}
    assert fake.calls.count("read_namespaced_pod_log") == 16
    # The client json-decodes a `str` response: without _preload_content=False the DCGM log
    # comes back as a Python dict's repr, which no JSON parser reads.
    cooked = fake.core.read_namespaced_pod_log(f"dcgm-h100-{RUN}-0-x7k2p", "foundation")
    assert cooked.startswith("{'DCGM Diagnostic'")
    assert not dcgm_diag.judge(cooked, "p5.48xlarge").passed


def test_two_runs_use_their_own_names_and_labels() -> None:
    names = {accept_jobs.job_name("dcgm", "h100", accept.new_run_id()) for _ in range(20)}
    assert len(names) == 20
    long_pool = "a" * 31
    name = accept_jobs.job_name("fabric", long_pool, RUN)
    assert len(name) <= accept_jobs.NAME_LIMIT and name.endswith(f"-{RUN}")
    other = accept_jobs.job_name("fabric", "a" * 30 + "b", RUN)
    assert other != name and len(other) <= accept_jobs.NAME_LIMIT


# --- failures -----------------------------------------------------------------------------


def test_a_faulty_gpu_and_a_socket_fallback_fail_the_run_with_their_reasons() -> None:
    pods = [PodScript(DCGM_PASS)] * 16
    pods[3] = PodScript(DCGM_MEMORY_FAIL, succeeds=False)  # dcgmi exits non-zero
    pods[9] = PodScript(DCGM_PCIE_WARN, succeeds=False)
    fake = cluster(
        scripts={
            "dcgm-h100": JobScript(pods),
            "fabric-h100": JobScript([PodScript(NCCL_SOCKET, running_s=60)]),
        }
    )
    report = run(fake)
    assert not report.passed
    by_subject = {f.subject: f for f in report.findings if f.check == "dcgm"}
    failed = by_subject[fake.nodes[3].name]
    assert failed.result == "fail"
    assert "memory on GPU 3 failed: Found 4 faulty memory elements on GPU 3" in failed.detail
    warned = by_subject[fake.nodes[9].name]
    assert warned.result == "warn" and "power violation in GPU 5" in warned.detail
    assert sum(f.result == "pass" for f in by_subject.values()) == 14
    (fabric_row,) = [f for f in report.findings if f.check == "fabric" and f.pool == "h100"]
    assert fabric_row.result == "fail"
    assert "NCCL fell back to TCP sockets" in fabric_row.detail
    assert len(fake.deleted) == 3


def test_a_job_kueue_never_admits_times_out_and_is_deleted() -> None:
    fake = cluster(scripts={"dcgm-h100": JobScript([PodScript(DCGM_PASS)], admit_after_s=None)})
    screen = io.StringIO()
    report = run(fake, fabric=False, timeout_minutes=5, progress=Console(file=screen, width=160))
    assert not report.passed
    dcgm = [f for f in report.findings if f.check == "dcgm" and f.pool == "h100"]
    assert len(dcgm) == 16 and {f.result for f in dcgm} == {"fail"}
    assert dcgm[0].subject == "index 0"
    assert dcgm[0].detail == (
        "job timed out before this pod was created (suspended, waiting for Kueue to admit it)"
    )
    assert fake.clock.now == 300  # the 5-minute timeout, polled every 10 s
    assert ("Job", "foundation", f"dcgm-h100-{RUN}", "Background") in fake.deleted
    assert "timed out" in screen.getvalue()


def test_pods_that_never_schedule_fail_with_the_schedulers_message() -> None:
    fake = cluster(scripts={"dcgm-h100": JobScript([PodScript(DCGM_PASS, schedulable=False)])})
    report = run(fake, fabric=False)
    dcgm = [f for f in report.findings if f.check == "dcgm" and f.pool == "h100"]
    assert {f.result for f in dcgm} == {"fail"}
    # The cluster ends the Job at its activeDeadlineSeconds (the level-2 20 minutes).
    assert dcgm[0].detail == (
        "job failed with this pod Pending: 0/16 nodes are available: "
        "16 Insufficient nvidia.com/gpu."
    )
    assert fake.clock.now == 20 * 60


def test_nodes_that_are_not_ready_or_advertise_no_gpus_are_named_and_skipped() -> None:
    nodes = h100_nodes()
    nodes[0].ready = False
    nodes[1].gpus = 0
    nodes[2].efa = 0
    nodes[3].cordoned = True
    fake = cluster(nodes=nodes)
    report = run(fake)
    (pool_row,) = [f for f in report.findings if f.check == "nodes" and f.pool == "h100"]
    assert pool_row.result == "fail"
    assert pool_row.detail == (
        f"12 usable of 16 nodes (min 16, desired 16): {nodes[0].name} not Ready; "
        f"{nodes[1].name} advertises 0 of 8 nvidia.com/gpu; "
        f"{nodes[2].name} advertises 0 of 32 vpc.amazonaws.com/efa; {nodes[3].name} cordoned; "
        "fewer usable nodes than min_size 16"
    )
    (dcgm_job,) = [j for j in fake.created_jobs() if j["metadata"]["name"].startswith("dcgm")]
    assert dcgm_job["spec"]["completions"] == 12
    assert not report.passed  # the diagnostics passed, the pool did not


def test_a_refused_create_fails_that_job_and_the_rest_still_runs() -> None:
    fake = cluster()
    fake.fail["create_namespaced_service"] = api_error(
        403,
        "Forbidden",
        'services "fabric-h100-a1b2c3" is forbidden: exceeded quota: llmp-quota, '
        "requested: services=1, used: services=10, limited: services=10",
    )
    report = run(fake)
    (fabric_row,) = [f for f in report.findings if f.check == "fabric" and f.pool == "h100"]
    assert fabric_row.result == "fail"
    assert fabric_row.detail.startswith(
        f'could not create Service fabric-h100-{RUN}: 403 services "fabric-h100-{RUN}" is '
        "forbidden: exceeded quota"
    )
    assert {f.result for f in report.findings if f.check == "dcgm" and f.pool == "h100"} == {"pass"}
    assert [d[2] for d in fake.deleted] == [f"dcgm-h100-{RUN}"]


def test_a_log_that_cannot_be_read_fails_its_rows_with_the_reason() -> None:
    fake = cluster()
    fake.fail["read_namespaced_pod_log"] = api_error(
        500, "Internal Server Error", "Get https://10.10.0.10:10250/containerLogs: EOF"
    )
    report = run(fake, pools=("h100",))
    failed = [f for f in report.findings if f.check in ("dcgm", "fabric")]
    assert len(failed) == 17 and {f.result for f in failed} == {"fail"}
    assert {f.detail for f in failed} == {
        "could not read the log: 500 Get https://10.10.0.10:10250/containerLogs: EOF"
    }
    assert fake.jobs == {} and fake.services == {}


def test_interrupting_the_wait_still_deletes_the_jobs() -> None:
    fake = cluster()

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        accept.run_acceptance(
            pretrain(),
            "pretrain",
            fake.apis(),
            accept.AcceptOptions(),
            run_id=RUN,
            clock=fake.clock,
            sleep=interrupted,
        )
    assert fake.jobs == {} and fake.services == {} and len(fake.deleted) == 3


def test_keep_leaves_the_jobs() -> None:
    fake = cluster()
    report = run(fake, keep=True)
    assert report.passed and fake.deleted == []
    assert sorted(report.kept) == [f"dcgm-h100-{RUN}", f"fabric-h100-{RUN}"]


def test_nothing_to_run_is_not_a_pass() -> None:
    fake = cluster(nodes=[])
    report = run(fake)
    assert not report.passed and not report.ran_a_job
    assert accept.verdict_line(report).startswith("not accepted: no acceptance job ran")
    assert fake.created_jobs() == []


# --- options --------------------------------------------------------------------------------


def test_level_three_and_a_timeout_shape_the_jobs() -> None:
    fake = cluster()
    run(fake, level=3, timeout_minutes=90, pools=("h100",))
    jobs = {j["metadata"]["name"].split("-")[0]: j for j in fake.created_jobs()}
    assert (
        "dcgmi diag -r 3 -j"
        in jobs["dcgm"]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    )
    assert jobs["dcgm"]["spec"]["activeDeadlineSeconds"] == 90 * 60
    assert jobs["fabric"]["spec"]["activeDeadlineSeconds"] == 90 * 60


def test_a_namespace_that_is_no_tenant_gets_no_kueue_queue() -> None:
    fake = cluster(secret=False)
    fake.secrets.add(("acceptance", "fabric-ssh"))
    run(fake, namespace="acceptance", pools=("h100",))
    for job in fake.created_jobs():
        assert job["metadata"]["namespace"] == "acceptance"
        assert "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"]
        assert "suspend" not in job["spec"]


def test_skips_leave_out_their_jobs() -> None:
    fake = cluster(secret=False)  # no Secret needed without the fabric job
    report = run(fake, fabric=False)
    assert {f.check for f in report.findings} == {"nodes", "dcgm"}
    fake = cluster()
    report = run(fake, dcgm=False)
    assert {f.check for f in report.findings} == {"nodes", "fabric"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pools": ("a100",)}, "no node pool a100 in the stack; its pools: h100, h100-block"),
        ({"level": 4}, "--dcgm-level 4: DCGM level is one of 1, 2, 3"),
        ({"timeout_minutes": 0.5}, "--timeout 0.5: give 1 to 1440 minutes"),
        ({"timeout_minutes": float("nan")}, "--timeout nan: give 1 to 1440 minutes"),
        ({"dcgm": False, "fabric": False}, "leave nothing to run"),
    ],
)
def test_bad_options_are_refused_before_anything_is_created(
    options: dict[str, Any], message: str
) -> None:
    fake = cluster()
    with pytest.raises(accept.AcceptError, match=message):
        run(fake, **options)
    assert fake.calls == []


def test_a_pool_without_a_tenant_needs_a_namespace() -> None:
    cfg = load_config(raw_stack("inference"))
    with pytest.raises(accept.AcceptError, match="no tenant has a gpu_quota on pool h200"):
        accept.pool_targets(cfg)
    (target,) = accept.pool_targets(cfg, ["l40s"], "serving")
    assert (target.namespace, target.queue_name, target.efa) == ("serving", "default", False)
    raw = merge(raw_stack("inference"), {"llm-platform:addons": {"kueue": False}})
    (target,) = accept.pool_targets(load_config(raw), ["l40s"], "serving")
    assert target.queue_name is None


def test_a_missing_ssh_secret_stops_before_anything_is_created() -> None:
    fake = cluster(secret=False)
    with pytest.raises(accept.AcceptError, match="namespace foundation has no Secret fabric-ssh"):
        run(fake)
    assert "create_namespaced_job" not in fake.calls


def test_an_unreachable_or_refusing_cluster_is_one_line() -> None:
    fake = cluster()
    fake.fail["list_node"] = urllib3.exceptions.MaxRetryError(
        None,  # type: ignore[arg-type]
        "/api/v1/nodes",
        urllib3.exceptions.NewConnectionError(
            None, "Failed to establish a new connection: timed out"
        ),  # type: ignore[arg-type]
    )
    with pytest.raises(kube.KubeError) as caught:
        run(fake)
    assert str(caught.value).startswith(f"cannot reach the cluster API at {fake.host}: ")
    assert "\n" not in str(caught.value)
    fake.fail["list_node"] = api_error(
        403,
        "Forbidden",
        'nodes is forbidden: User "arn:aws:sts::123456789012:assumed-role/dev/x" cannot '
        'list resource "nodes" in API group "" at the cluster scope',
    )
    with pytest.raises(kube.KubeError, match="refused to list nodes: 403 Forbidden: nodes is"):
        run(fake)
    assert fake.created_jobs() == []


# --- the command line -------------------------------------------------------------------------


@pytest.fixture
def fake_cli(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    """`llmp accept` with the fake behind load_apis; its pods end at once, so no sleep."""
    fake = cluster(
        scripts={
            "dcgm-h100": JobScript([PodScript(DCGM_PASS)] * 15 + [PodScript(DCGM_PCIE_WARN)]),
            "fabric-h100": JobScript([PodScript(NCCL_EFA)]),
        }
    )
    monkeypatch.setattr(kube, "load_apis", lambda kubeconfig, context: fake.apis())
    monkeypatch.setattr(accept, "new_run_id", lambda: RUN)
    return fake


def test_cli_prints_the_verdict_table_and_exits_0(fake_cli: FakeCluster) -> None:
    result = CliRunner().invoke(app, ["accept", "pretrain"])
    assert result.exit_code == 0, result.output
    assert "acceptance of pretrain (run a1b2c3)" in result.stdout
    assert result.stdout.rstrip().endswith("accepted: 18 pass, 1 warn, 0 fail, 2 not checked")
    assert fake_cli.jobs == {}


def test_cli_json_for_machines(fake_cli: FakeCluster) -> None:
    result = CliRunner().invoke(app, ["accept", "pretrain", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["passed"] is True and doc["run_id"] == RUN
    assert doc["counts"] == {"pass": 18, "warn": 1, "not checked": 2}
    assert {f["check"] for f in doc["findings"]} == {"nodes", "dcgm", "fabric"}


def test_cli_exits_1_on_a_failed_check(fake_cli: FakeCluster) -> None:
    fake_cli.scripts["fabric-h100"] = JobScript([PodScript(NCCL_SOCKET)])
    result = CliRunner().invoke(app, ["accept", "pretrain"])
    assert result.exit_code == 1
    assert "not accepted: 17 pass, 1 warn, 1 fail, 2 not checked" in result.stdout


def test_cli_exits_2_on_bad_input(fake_cli: FakeCluster) -> None:
    result = CliRunner().invoke(app, ["accept", "no-such-stack"])
    assert result.exit_code == 2
    assert result.stderr.startswith("accept: no stack file ") and result.stderr.count("\n") == 1
    result = CliRunner().invoke(app, ["accept", "../pretrain"])
    assert result.exit_code == 2
    assert result.stderr.startswith("accept: not a stack name: '../pretrain'; stack names take")
    result = CliRunner().invoke(app, ["accept", "pretrain", "--pool", "nope"])
    assert result.exit_code == 2
    assert result.stderr == "accept: no node pool nope in the stack; its pools: h100, h100-block\n"
    assert fake_cli.calls == []


def test_cli_without_a_kubeconfig_says_how_to_get_one(tmp_path: Path) -> None:
    missing = tmp_path / "kubeconfig"
    result = CliRunner().invoke(app, ["accept", "pretrain", "--kubeconfig", str(missing)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"accept: cannot use kubeconfig {missing}: ")
    assert "pulumi stack output kubeconfig --show-secrets > kubeconfig" in result.stderr


def test_cli_against_an_api_server_that_is_not_there(tmp_path: Path) -> None:
    # The real client and a kubeconfig like the stack's output (a token instead of the
    # `aws eks get-token` exec), pointing at a loopback port nothing listens on.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
                "users": [{"name": "u", "user": {"token": "not-a-real-token"}}],
            }
        )
    )
    result = CliRunner().invoke(app, ["accept", "pretrain", "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(
        f"accept: cannot reach the cluster API at https://127.0.0.1:{port}: "
    )
    assert result.stderr.count("\n") == 1
    result = CliRunner().invoke(
        app, ["accept", "pretrain", "--kubeconfig", str(kubeconfig), "--context", "other"]
    )
    assert result.exit_code == 2 and "cannot use kubeconfig" in result.stderr
    assert "other" in result.stderr


def test_cli_with_a_credential_command_that_fails_is_one_line(tmp_path: Path) -> None:
    # The stack's kubeconfig gets its token from `aws eks get-token`; without that command the
    # client would log the failure and carry on unauthenticated.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
                "users": [
                    {
                        "name": "u",
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1beta1",
                                "command": "llmp-test-no-such-command",
                                "args": ["eks", "get-token", "--cluster-name", "c"],
                            }
                        },
                    }
                ],
            }
        )
    )
    result = CliRunner().invoke(app, ["accept", "pretrain", "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(
        f"accept: kubeconfig {kubeconfig}: its credential command failed: "
    )
    assert "llmp-test-no-such-command" in result.stderr and result.stderr.count("\n") == 1


def test_checks_on_a_topology_aware_pool_ask_kueue_for_any_placement_and_mig_pools_skip() -> None:
    """Kueue places a pod set on a TAS flavor only if it asks for a topology: the checks ask
    unconstrained there. A MIG pool has no whole GPU for them: both are not checked."""
    from manifests import kueue

    raw = merge(
        raw_stack("pretrain"),
        {
            "llm-platform:node_pools": {
                "h100-block": {"topology_aware": True},
                "eval": {
                    "instance_type": "p5.48xlarge",
                    "min_size": 2,
                    "desired_size": 2,
                    "max_size": 2,
                    "mig": {"3g.40gb": 2},
                },
            },
            "llm-platform:tenants": {"foundation": {"gpu_quota": {"eval": 8}}},
        },
    )
    cfg = load_config(raw)
    targets = {t.pool: t for t in accept.pool_targets(cfg, ["h100-block", "eval"])}
    block, partitioned = targets["h100-block"], targets["eval"]
    assert block.topology == {kueue.UNCONSTRAINED_TOPOLOGY: "true"} and not block.partitioned
    assert partitioned.partitioned and partitioned.topology == {}
    nodes = [f"ip-{i}" for i in range(2)]
    pools = [
        accept_jobs.PoolNodes(t, nodes, accept_jobs.Finding(t.pool, "nodes", "pool", "pass", ""))
        for t in (block, partitioned)
    ]
    jobs, skipped = accept_jobs.plan_jobs(
        pools, "r1", dcgm=True, fabric_check=True, level=None, timeout_minutes=None
    )
    assert {(j.check, j.target.pool) for j in jobs} == {
        ("dcgm", "h100-block"),
        ("fabric", "h100-block"),
    }
    for job in jobs:
        (workload,) = [m for m in job.manifests if m["kind"] == "Job"]
        notes = workload["spec"]["template"]["metadata"]["annotations"]
        assert notes == {kueue.UNCONSTRAINED_TOPOLOGY: "true"}
    # (eval has no EFA: no fabric check was due there anyway.)
    assert [(s.pool, s.check, s.result, s.detail) for s in skipped] == [
        (
            "eval",
            "dcgm",
            "not checked",
            "its GPUs are MIG partitions; the DCGM diagnostic and the fabric test take whole GPUs",
        )
    ]
