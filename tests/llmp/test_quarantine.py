"""Quarantining a slow node (`llmp stragglers --quarantine`, llmp/diagnosis/quarantine.py)
against the in-memory Kubernetes API: cordon, our taint, the annotations, evictions of
training pods only, the cap, a second run that changes nothing, and a dry run that changes
nothing at all."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from llmp.cli import app
from llmp.clients import kube
from llmp.diagnosis import quarantine as q
from llmp.errors import BadInput, Failed
from spec.labels import JOB_KIND_LABEL, QUARANTINE_TAINT
from tests.llmp.kube_fake import FakeClock, FakeCluster, FakeNode, api_error, node_pod

NOW = datetime.datetime(2026, 12, 1, 9, 30, tzinfo=datetime.UTC)
GPU_TAINT = ("nvidia.com/gpu", "true", "NoSchedule")
TRAINING = {JOB_KIND_LABEL: "training"}
SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stragglers" / "step-times.jsonl"
SLOW_NODE = "ip-10-0-1-203.ec2.internal"  # the sample's slow node
FAST_NODE = "ip-10-0-1-17.ec2.internal"
WRITES = {"patch_node", "create_namespaced_pod_eviction"}


def cluster(*nodes: FakeNode) -> FakeCluster:
    fake = FakeCluster(FakeClock(), list(nodes))
    fake.pods = [
        node_pod("foundation", "run-worker-0", "gpu-a", TRAINING),
        node_pod("foundation", "run-worker-1", "gpu-a", TRAINING),
        node_pod("foundation", "run-worker-2", "gpu-b", TRAINING),
        # On the slow node, but no training pod: a model server, a node agent.
        node_pod("serving", "llama-7f9c", "gpu-a", {"app.kubernetes.io/name": "llama"}),
        node_pod("gpu-operator", "nvidia-dcgm-exporter-x1", "gpu-a"),
        # A training pod that already finished holds no GPU.
        node_pod("foundation", "old-worker-0", "gpu-a", TRAINING, phase="Succeeded"),
    ]
    return fake


def gpu(name: str, **kwargs) -> FakeNode:
    return FakeNode(name, "h100", taints=[GPU_TAINT], **kwargs)


def target(node: str) -> q.Target:
    return q.Target(node, f"llmp stragglers: {node} is slow")


def run(fake: FakeCluster, *nodes: str, cap: int = 2, dry_run: bool = False) -> q.QuarantineReport:
    return q.quarantine(
        fake.apis(), [target(n) for n in nodes], max_quarantined=cap, dry_run=dry_run, now=NOW
    )


def node(fake: FakeCluster, name: str) -> FakeNode:
    return next(n for n in fake.nodes if n.name == name)


def test_a_slow_node_is_cordoned_tainted_annotated_and_its_training_pods_evicted() -> None:
    fake = cluster(gpu("gpu-a"), gpu("gpu-b"), FakeNode("sys-1", "system"))
    report = run(fake, "gpu-a")
    a = node(fake, "gpu-a")
    assert a.cordoned
    # Ours added, the node's own GPU taint kept (the list is replaced as a whole).
    assert a.taints == [GPU_TAINT, (QUARANTINE_TAINT, "slow", "NoSchedule")]
    assert a.annotations == {
        q.REASON_ANNOTATION: "llmp stragglers: gpu-a is slow",
        q.SINCE_ANNOTATION: "2026-12-01T09:30:00+00:00",
    }
    # Training pods only, and only those still running, through the Eviction API.
    assert fake.evictions == [("foundation", "run-worker-0"), ("foundation", "run-worker-1")]
    [outcome] = report.outcomes
    assert outcome.action == "quarantined"
    assert outcome.evicted == ("foundation/run-worker-0", "foundation/run-worker-1")
    assert report.summary() is None
    # The other nodes are untouched.
    assert not node(fake, "gpu-b").cordoned and node(fake, "gpu-b").taints == [GPU_TAINT]
    assert [name for name, _ in fake.node_patches] == ["gpu-a"]


def test_evictions_leave_the_pods_own_grace_period_alone() -> None:
    fake = cluster(gpu("gpu-a"))
    bodies = []
    evict = fake.core.create_namespaced_pod_eviction

    def spy(name, namespace, body, **kwargs):
        bodies.append(body)
        return evict(name, namespace, body, **kwargs)

    fake.core.create_namespaced_pod_eviction = spy  # type: ignore[method-assign]
    run(fake, "gpu-a")
    assert bodies and all(b.delete_options is None for b in bodies)
    # The pod is terminating, not gone: its 300 s run from the deletion timestamp.
    evicted = [p for p in fake.pods if p.metadata.deletion_timestamp is not None]
    assert {p.spec.termination_grace_period_seconds for p in evicted} == {300}


def test_a_second_run_changes_nothing_on_a_node_already_quarantined() -> None:
    fake = cluster(gpu("gpu-a"), gpu("gpu-b"))
    run(fake, "gpu-a")
    patches, evictions, version = len(fake.node_patches), len(fake.evictions), fake.nodes[0].version
    again = run(fake, "gpu-a")
    assert [o.action for o in again.outcomes] == ["already quarantined"]
    assert again.outcomes[0].taint == f"{QUARANTINE_TAINT}=slow:NoSchedule"
    assert (len(fake.node_patches), len(fake.evictions), fake.nodes[0].version) == (
        patches,
        evictions,
        version,
    )
    assert again.quarantined_before == ["gpu-a"]
    assert again.summary() is None


def test_a_node_nvsentinel_quarantined_is_left_as_it_is() -> None:
    fake = cluster(gpu("gpu-a"))
    node(fake, "gpu-a").taints.append((QUARANTINE_TAINT, "gpu-fault", "NoSchedule"))
    report = run(fake, "gpu-a")
    assert report.outcomes[0].action == "already quarantined"
    assert report.outcomes[0].taint == f"{QUARANTINE_TAINT}=gpu-fault:NoSchedule"
    assert not fake.node_patches and not fake.evictions


def test_the_cap_counts_nodes_already_quarantined_and_refuses_the_rest() -> None:
    fake = cluster(gpu("gpu-a"), gpu("gpu-b"), gpu("gpu-c"))
    node(fake, "gpu-c").taints.append((QUARANTINE_TAINT, "gpu-fault", "NoSchedule"))
    report = run(fake, "gpu-a", "gpu-b", cap=2)
    assert [(o.node, o.action) for o in report.outcomes] == [
        ("gpu-a", "quarantined"),
        ("gpu-b", "refused"),
    ]
    assert not node(fake, "gpu-b").cordoned
    assert ("foundation", "run-worker-2") not in fake.evictions
    line = report.summary()
    assert line is not None and "\n" not in line
    assert "refused gpu-b" in line and "--max-quarantined 2" in line and "gpu-c" in line


def test_a_dry_run_reads_the_cluster_and_changes_nothing() -> None:
    fake = cluster(gpu("gpu-a"), gpu("gpu-b"))
    report = run(fake, "gpu-a", dry_run=True)
    assert not WRITES & set(fake.calls)
    assert not fake.node_patches and not fake.evictions
    assert not node(fake, "gpu-a").cordoned and node(fake, "gpu-a").taints == [GPU_TAINT]
    [outcome] = report.outcomes
    assert outcome.action == "would quarantine"
    assert outcome.evicted == ("foundation/run-worker-0", "foundation/run-worker-1")
    assert report.as_dict()["acted"] is False


def test_an_eviction_a_disruption_budget_refuses_is_reported_and_the_node_stays_cordoned() -> None:
    fake = cluster(gpu("gpu-a"))
    fake.pdb_blocked = {("foundation", "run-worker-1")}
    report = run(fake, "gpu-a")
    [outcome] = report.outcomes
    assert outcome.evicted == ("foundation/run-worker-0",)
    assert outcome.blocked == ("foundation/run-worker-1",)
    assert node(fake, "gpu-a").cordoned
    assert "PodDisruptionBudget" in (report.summary() or "")


def test_a_node_changed_meanwhile_is_not_overwritten() -> None:
    fake = cluster(gpu("gpu-a"))
    fake.fail["patch_node"] = api_error(409, "Conflict", "the object has been modified")
    with pytest.raises(Failed, match="changed while it was being quarantined; run again"):
        run(fake, "gpu-a")
    assert not fake.evictions


def test_a_node_the_cluster_does_not_have_is_bad_input() -> None:
    fake = cluster(gpu("gpu-a"))
    with pytest.raises(BadInput, match="ip-1 is not a node of the cluster"):
        run(fake, "ip-1")
    assert not WRITES & set(fake.calls)


def test_a_cluster_that_refuses_us_is_one_line() -> None:
    fake = cluster(gpu("gpu-a"))
    fake.fail["list_node"] = api_error(403, "Forbidden", 'nodes is forbidden: User "x"')
    with pytest.raises(kube.KubeError, match="refused to list nodes: 403 Forbidden"):
        run(fake, "gpu-a")


def test_the_cap_is_at_least_one() -> None:
    with pytest.raises(BadInput, match="--max-quarantined 0: at least 1"):
        run(cluster(gpu("gpu-a")), "gpu-a", cap=0)


# --- the command ------------------------------------------------------------------------


@pytest.fixture
def sample_cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    """The sample trace's two nodes, each with a training pod, behind `load_apis`."""
    fake = FakeCluster(FakeClock(), [gpu(SLOW_NODE), gpu(FAST_NODE)])
    fake.pods = [
        node_pod("foundation", "run-worker-1", SLOW_NODE, TRAINING),
        node_pod("foundation", "run-worker-0", FAST_NODE, TRAINING),
    ]
    opened: list[tuple[str | None, str | None]] = []

    def load_apis(kubeconfig, context):
        opened.append((kubeconfig, context))
        return fake.apis()

    monkeypatch.setattr(kube, "load_apis", load_apis)
    fake.opened = opened  # type: ignore[attr-defined]
    return fake


def stragglers(*args: str):
    return CliRunner().invoke(app, ["stragglers", str(SAMPLE), *args])


def test_quarantine_without_a_kubeconfig_says_what_it_would_do_and_touches_no_cluster(
    sample_cluster: FakeCluster,
) -> None:
    result = stragglers("--quarantine")
    assert result.exit_code == 0, result.output
    assert f"would cordon {SLOW_NODE}" in result.stdout
    assert "pass --kubeconfig to act" in result.stdout
    assert FAST_NODE not in result.stdout.split("quarantine:", 1)[1]
    assert sample_cluster.opened == [] and sample_cluster.calls == []  # type: ignore[attr-defined]


def test_quarantine_with_a_kubeconfig_isolates_the_slow_node_only(
    sample_cluster: FakeCluster,
) -> None:
    result = stragglers("--quarantine", "--kubeconfig", "kubeconfig")
    assert result.exit_code == 0, result.output
    assert sample_cluster.opened == [("kubeconfig", None)]  # type: ignore[attr-defined]
    assert f"quarantine: {SLOW_NODE}: quarantined" in result.stdout
    slow, fast = sample_cluster.nodes
    assert slow.cordoned and (QUARANTINE_TAINT, "slow", "NoSchedule") in slow.taints
    assert "1.148x the other nodes' median step time" in slow.annotations[q.REASON_ANNOTATION]
    assert not fast.cordoned
    assert sample_cluster.evictions == [("foundation", "run-worker-1")]


def test_quarantine_dry_run_and_json_report_the_plan_without_a_write(
    sample_cluster: FakeCluster,
) -> None:
    result = stragglers("--quarantine", "--kubeconfig", "kubeconfig", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["quarantine"]
    assert plan["acted"] is False
    assert plan["nodes"] == [
        {
            "node": SLOW_NODE,
            "action": "would quarantine",
            "taint": f"{QUARANTINE_TAINT}=slow:NoSchedule",
            "evicted": ["foundation/run-worker-1"],
            "blocked": [],
        }
    ]
    assert not WRITES & set(sample_cluster.calls)


def test_quarantine_beyond_the_cap_exits_1_with_one_line(sample_cluster: FakeCluster) -> None:
    sample_cluster.nodes[1].taints.append((QUARANTINE_TAINT, "gpu-fault", "NoSchedule"))
    result = stragglers("--quarantine", "--kubeconfig", "kubeconfig", "--max-quarantined", "1")
    assert result.exit_code == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"stragglers: refused {SLOW_NODE}: --max-quarantined 1")
    assert not sample_cluster.node_patches


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dry-run"], "--kubeconfig, --context and --dry-run go with --quarantine"),
        (["--kubeconfig", "k"], "--kubeconfig, --context and --dry-run go with --quarantine"),
        (["--quarantine", "--max-quarantined", "0"], "--max-quarantined 0: at least 1"),
    ],
)
def test_quarantine_options_misused_are_bad_input(
    sample_cluster: FakeCluster, args: list[str], message: str
) -> None:
    result = stragglers(*args)
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert line == f"stragglers: {message}"
    assert sample_cluster.calls == []
