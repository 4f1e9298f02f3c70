"""`llmp job`: the job file checked against its stack, rendered, admitted, submitted, followed.

The journey: a user writes a job file (examples/), `llmp job submit FILE --dry-run` checks
it against the stack it names and prints what would be applied (valid for Kubernetes,
admitted by the stack's Kueue queues); `submit` applies it through the official client to
an API server (tests/llmp/fake_apiserver.py, on 127.0.0.1) whose scripted controllers take
it through Kueue's queue, the provisioning check, pods and training to its end.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from llmp import console as llmp_console
from llmp.cli import app
from llmp.jobs import api as job_api
from llmp.jobs import check, manifests_yaml, prepare
from llmp.jobs import state as job_state
from llmp.jobs.checks import JobFileError, load_job_file
from llmp.stacks import REPO_ROOT
from manifests import kueue
from manifests.jobs.jobfile import JOB_LABEL, TRAINER_KINDS
from spec.stackfile import load_config, load_stack_file
from tests.llmp import job_files
from tests.llmp.fake_apiserver import APPLY, Cluster, FakeApiServer, Script, Store
from tests.llmp.kube_fake import FakeClock
from tests.manifests.jobs.k8s import as_pod, node_template, policy_violations, validate

EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.yaml"))
TRAINING_EXAMPLES = [
    p for p in EXAMPLES if yaml.safe_load(p.read_text()).get("kind", "pretrain") in TRAINER_KINDS
]
"""The training runs; the lifecycle steps' examples (promote, quantize): test_job_kinds.py."""
SFT = REPO_ROOT / "examples" / "finetune-sft.yaml"


def job_file(tmp_path: Path, base: Path = SFT, **changes: Any) -> str:
    """A copy of `base` (the SFT example) with keys changed (None removes one)."""
    return job_files.job_file(tmp_path, base, **changes)


# --- the examples: checked, valid, admitted -----------------------------------------------


def test_examples_exist_for_pretrain_and_finetune() -> None:
    stacks = {yaml.safe_load(p.read_text())["stack"] for p in EXAMPLES}
    assert {"pretrain", "finetune"} <= stacks


@pytest.mark.parametrize("path", TRAINING_EXAMPLES, ids=lambda p: p.name)
def test_every_example_renders_valid_objects_that_the_stacks_queues_admit(path: Path) -> None:
    prepared = prepare(str(path))
    config_map, job = prepared.manifests
    validate(config_map)
    template = node_template(job)
    validate(as_pod(template))
    assert policy_violations(job, "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob") == []
    # Kueue's own rule, against the queues the stack declares: the pool's flavor.
    assert prepared.admission.admitted, prepared.admission.problems
    assert prepared.flavor == kueue.flavor_name(prepared.job.pool)
    assert prepared.admission.queue == prepared.job.tenant
    # The trainer reads the ConfigMap the pod mounts, at the path its command names.
    trainer = json.loads(config_map["data"]["job.json"])
    assert trainer["data"]["path"] == prepared.job.data
    assert trainer["checkpoint"]["dir"] == prepared.job.checkpoint
    assert trainer["zero_stage"] == prepared.job.zero_stage
    container = template["spec"]["containers"][0]
    assert container["command"][-1] == "/etc/llmp/job.json"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes[mounts["/etc/llmp"]]["configMap"]["name"] == config_map["metadata"]["name"]
    # Scale-down never drains a node under a running rank.
    annotations = template["metadata"]["annotations"]
    assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    assert template["metadata"]["labels"][JOB_LABEL] == prepared.job.name


@pytest.mark.full_tier("the trainer's DeepSpeed config (deepspeed)")
def test_the_trainer_parses_the_rendered_config(tmp_path: Path) -> None:
    from contracts.training import load_job_config
    from workloads.training.ds_config import build_ds_config, validate_ds_config

    prepared = prepare(str(SFT))
    path = tmp_path / "job.json"
    path.write_text(prepared.manifests[0]["data"]["job.json"])
    trainer = load_job_config(path)
    assert trainer.instance_type == "p5.48xlarge"
    validate_ds_config(build_ds_config(trainer))


def test_a_pool_without_efa_gets_a_job_that_asks_for_none() -> None:
    raw = load_stack_file(str(REPO_ROOT / "stacks" / "Pulumi.finetune.yaml"))
    raw["llm-platform:node_pools"]["h100"]["efa"] = False
    prepared = check(str(SFT), load_job_file(str(SFT)), load_config(raw))
    worker = node_template(prepared.manifests[1])
    resources = worker["spec"]["containers"][0]["resources"]
    assert "vpc.amazonaws.com/efa" not in resources["limits"]
    env = {e["name"] for e in worker["spec"]["containers"][0]["env"]}
    assert "FI_EFA_USE_HUGE_PAGE" not in env
    with_efa = node_template(prepare(str(SFT)).manifests[1])
    limits = with_efa["spec"]["containers"][0]["resources"]["limits"]
    assert limits["vpc.amazonaws.com/efa"] == "32"


def test_borrowing_beyond_the_tenants_quota_is_said() -> None:
    prepared = prepare(str(SFT))
    assert prepared.gpus == 16 and prepared.nominal_gpus == 8
    assert any("borrows 8 GPUs" in n for n in prepared.notes)


def test_dry_run_prints_the_manifests_and_touches_no_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_cluster(*args: Any) -> None:
        raise AssertionError("--dry-run must not load a kubeconfig")

    monkeypatch.setattr("llmp.clients.kube.load_apis", no_cluster)
    result = CliRunner().invoke(app, ["job", "submit", str(SFT), "--dry-run"])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs] == ["ConfigMap", "TrainJob"]
    assert docs == prepare(str(SFT)).manifests
    assert result.stdout == manifests_yaml(prepare(str(SFT)))
    assert "ClusterQueue chat, flavor pool-h100" in result.stderr
    # finetune's h100 pool is elastic: Kueue waits for the autoscaler's nodes, all or none.
    assert "then waits for its nodes: the gpu-provisioning check asks" in result.stderr


# --- what is refused, in one line -----------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"pool": "h200"}, "pool = 'h200': not a node pool of stack finetune"),
        ({"pool": "h10"}, "did you mean h100?"),
        ({"tenant": "search"}, "tenant = 'search': not a tenant of stack finetune"),
        ({"tenant": "eval"}, "tenant eval has no quota on this pool"),
        ({"nodes": {"min": 1, "max": 3}}, "pool h100 has at most 2 nodes"),
        ({"nodes": {"min": 3, "max": 2}}, "nodes = {'min': 3, 'max': 2}: min 3 is above max 2"),
        ({"queue": "fast"}, "namespace chat has one LocalQueue, default"),
        ({"gpus_per_node": 9}, "gpus_per_node 9: p5.48xlarge has 8"),
        ({"image": "trainer:latest"}, "image = 'trainer:latest'"),
        ({"data": "/data/tokens"}, "data = '/data/tokens': must be a path under /fsx/"),
        ({"priority": "urgent"}, "not a platform priority class"),
        ({"stack": "nope"}, "stack = 'nope': no stack file"),
        ({"name": None}, "name = <missing>: required"),
        ({"gpus": 8}, "gpus = 8: unknown key"),
        ({"trainer": {"model": {"d_modle": 64}}}, "trainer.model.d_modle = 64: unknown key"),
        (
            {"trainer": {"model": {"hidden_size": 30, "num_attention_heads": 4}}},
            "not divisible by num_attention_heads",
        ),
        (
            {"kind": "sft", "trainer": {"model": {"pretrained": "/models/base"}}},
            "model.pretrained '/models/base' must be a path under /fsx/",
        ),
        (
            {"trainer": {"tensorboard_dir": "/tmp/board"}},
            "tensorboard_dir '/tmp/board' must be a path under /fsx/ (the tenant's FSx claim): "
            "rank 0 may run on any node",
        ),
        ({"kind": "grpo"}, "task grpo needs a grpo section"),
        ({"trainer": {"task": "sft"}}, "sets task, which the job file sets"),
        ({"trainer": {"data": {"path": "/fsx/x"}}}, "sets data.path, which the job file sets"),
        ({"trainer": {"zero_stage": 1}}, "sets zero_stage"),
        ({"trainer": {"data": 5}}, "trainer.data = 5: Input should be a valid dictionary"),
        ({"trainer": {"checkpoint": [1]}}, "trainer.checkpoint = [1]: Input should be"),
    ],
)
def test_a_bad_job_file_is_one_line_naming_the_key(
    tmp_path: Path, changes: dict[str, Any], expected: str
) -> None:
    path = job_file(tmp_path, **changes)
    with pytest.raises(JobFileError) as caught:
        prepare(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"job file {path}: ")
    assert expected in message


def test_a_namespace_without_the_fsx_claim_is_refused(tmp_path: Path) -> None:
    raw = load_stack_file(str(REPO_ROOT / "stacks" / "Pulumi.finetune.yaml"))
    raw["llm-platform:storage"]["lustre"]["mount_namespaces"] = ["code", "eval"]
    cfg = load_config(raw)
    job = load_job_file(str(SFT))
    with pytest.raises(
        JobFileError,
        match=r"namespace chat has no fsx-lustre claim for /fsx "
        r"\(storage.lustre.mount_namespaces: code, eval\)",
    ):
        check(str(SFT), job, cfg)


def test_a_job_kueue_would_never_admit_is_refused() -> None:
    raw = load_stack_file(str(REPO_ROOT / "stacks" / "Pulumi.finetune.yaml"))
    # Model servers hold one H100 node, which their queue lends to none: the other queues
    # own only the other one.
    raw["llm-platform:tenants"]["code"]["gpu_quota"]["h100"] = 0
    raw["llm-platform:tenants"]["code"]["serving_gpus"] = {"h100": 8}
    cfg = load_config(raw)
    with pytest.raises(JobFileError, match="Kueue would never admit it: node: no flavor"):
        check(str(SFT), load_job_file(str(SFT)), cfg)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: [", "not valid YAML (line 2, column 1"),
        ("- a\n- b\n", "a mapping of keys"),
    ],
)
def test_a_file_that_is_not_a_job_file(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["job", "submit", str(path), "--dry-run"])
    assert result.exit_code == 2
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_missing_job_file_exits_2() -> None:
    result = CliRunner().invoke(app, ["job", "submit", "no-such.yaml", "--dry-run"])
    assert result.exit_code == 2
    assert result.stderr.startswith("job file no-such.yaml: no such file")


# --- on a cluster: the fake API server --------------------------------------------------------


class Fake:
    def __init__(self, tmp_path: Path, script: Script) -> None:
        self.clock = FakeClock()
        self.store = Store()
        self.cluster = Cluster(self.store, self.clock, script)
        self.server = FakeApiServer(self.store, self.cluster)
        self.kubeconfig = str(self.server.kubeconfig(tmp_path / "kubeconfig"))

    def run(self, *args: str) -> Any:
        return CliRunner().invoke(app, [*args, "--kubeconfig", self.kubeconfig])


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    made: list[Fake] = []

    def make(script: Script | None = None, tenant: bool = True, **tenant_kw: bool) -> Fake:
        f = Fake(tmp_path, script or Script())
        if tenant:
            f.cluster.tenant("chat", **tenant_kw)
        monkeypatch.setattr(job_api, "_now", f.clock)
        monkeypatch.setattr(job_api, "_sleep", f.clock.sleep)
        made.append(f)
        return f

    yield make
    for f in made:
        f.server.stop()


def test_submit_applies_server_side_and_follows_every_phase(fake: Any) -> None:
    f = fake()
    result = f.run("job", "submit", str(SFT))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "applied ConfigMap chat/chat-sft-config (server-side, field manager llmp)"
    assert lines[1] == "applied TrainJob chat/chat-sft (server-side, field manager llmp)"
    phases = [line.split()[1] for line in lines[2:] if not line.startswith(" " * 22)]
    order = ["created", "queued", "provisioning", "starting", "training", "succeeded"]
    assert [p for p in dict.fromkeys(phases) if p in order] == order
    text = " ".join(result.stdout.split())
    assert "insufficient unused quota for nvidia.com/gpu in flavor pool-h100" in text
    assert "waiting for nodes (gpu-provisioning Pending" in text
    assert "0/2 pods running; pending: 0/3 nodes are available" in text
    assert "training step 2/2000, loss 10.38" in text
    assert text.endswith(
        "succeeded 2 nodes succeeded; last step 30/2000, loss 10.1, 812,346 tokens/s"
    )
    # What went on the wire: server-side apply, with our field manager, for both objects.
    patches = [r for r in f.store.requests if r.method == "PATCH"]
    assert [r.path for r in patches] == [
        "/api/v1/namespaces/chat/configmaps/chat-sft-config",
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/chat/trainjobs/chat-sft",
    ]
    assert all(r.content_type == APPLY and r.query["fieldManager"] == ["llmp"] for r in patches)
    stored = f.store.get("trainer.kubeflow.org/v1alpha1", "chat", "trainjobs", "chat-sft")
    assert stored is not None
    assert stored["spec"]["trainer"] == prepare(str(SFT)).manifests[1]["spec"]["trainer"]
    for line in lines:
        assert len(line) <= 80, line


def test_a_failed_job_or_a_timeout_exits_1(fake: Any) -> None:
    f = fake(Script(quota_at=None))
    result = f.run("job", "submit", str(SFT), "--timeout", "2")
    assert result.exit_code == 1
    assert "job chat/chat-sft still queued after 2m00s" in result.stderr


@pytest.mark.parametrize(
    ("tenant_kw", "expected"),
    [
        ({"claim": False}, "namespace chat has no PersistentVolumeClaim fsx-lustre"),
        ({"queue": False}, "namespace chat has no Kueue LocalQueue default"),
    ],
)
def test_submit_checks_the_cluster_first(
    fake: Any, tenant_kw: dict[str, bool], expected: str
) -> None:
    f = fake(**tenant_kw)
    result = f.run("job", "submit", str(SFT), "--detach")
    assert result.exit_code == 2
    assert expected in result.stderr
    assert not [r for r in f.store.requests if r.method == "PATCH"]


def test_submit_to_a_cluster_without_the_namespace(fake: Any) -> None:
    f = fake(tenant=False)
    result = f.run("job", "submit", str(SFT), "--detach")
    assert result.exit_code == 2
    assert "namespace chat does not exist on the cluster at http://127.0.0.1:" in result.stderr


def test_a_second_submit_of_the_same_name_is_refused(fake: Any) -> None:
    f = fake()
    assert f.run("job", "submit", str(SFT), "--detach").exit_code == 0
    again = f.run("job", "submit", str(SFT), "--detach")
    assert again.exit_code == 2
    assert "job chat/chat-sft exists" in again.stderr and "llmp job cancel chat-sft" in again.stderr


@pytest.mark.parametrize(
    ("script", "after", "phase", "because"),
    [
        (Script(quota_at=None), 20, "queued", "waiting for quota"),
        (Script(), 40, "provisioning", "waiting for capacity"),
        (Script(preempted_at=30, quota_at=20), 40, "preempted", "preempted: a job with"),
    ],
)
def test_status_explains_why_a_job_waits(
    fake: Any, script: Script, after: float, phase: str, because: str
) -> None:
    f = fake(script)
    assert f.run("job", "submit", str(SFT), "--detach").exit_code == 0
    f.run("job", "status", "chat-sft")  # Kueue sees the job from here
    f.clock.now += after
    result = f.run("job", "status", "chat-sft")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == f"job chat/chat-sft: {phase}"
    assert because in result.stdout
    as_json = json.loads(f.run("job", "status", "chat-sft", "--json").stdout)
    assert as_json["phase"] == phase and as_json["namespace"] == "chat"


def test_list_logs_and_cancel(fake: Any) -> None:
    f = fake()
    assert f.run("job", "submit", str(SFT), "--detach").exit_code == 0
    f.run("job", "list")
    f.clock.now += 120
    listed = f.run("job", "list", "--json")
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.stdout)
    assert (row["namespace"], row["name"], row["nodes"], row["phase"]) == (
        "chat",
        "chat-sft",
        "1..2",
        "running",
    )
    assert row["cluster_queue"] == "chat" and row["flavors"] == ["pool-h100"]
    table = f.run("job", "list", "-n", "chat").stdout.splitlines()
    assert table[0].split() == ["JOB", "NODES", "STATE", "DETAIL"]
    assert table[1].startswith("chat/chat-sft")
    logs = f.run("job", "logs", "chat-sft", "--tail", "1")
    assert logs.exit_code == 0
    assert json.loads(logs.stdout)["event"] == "step"
    cancelled = f.run("job", "cancel", "chat-sft")
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.splitlines() == [
        "deleted TrainJob chat/chat-sft",
        "deleted ConfigMap chat/chat-sft-config",
    ]
    gone = f.run("job", "status", "chat-sft")
    assert gone.exit_code == 2 and "no job chat-sft in any namespace" in gone.stderr


def test_job_output_fits_80_columns(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    f = fake()
    buffer = io.StringIO()
    monkeypatch.setattr(llmp_console, "out", Console(file=buffer, width=80, color_system=None))
    monkeypatch.setattr(llmp_console, "err", Console(file=buffer, width=80, color_system=None))
    assert f.run("job", "submit", str(SFT), "--detach").exit_code == 0
    f.clock.now += 40
    f.run("job", "status", "chat-sft")
    f.run("job", "list")
    for line in buffer.getvalue().splitlines():
        assert len(line) <= 80, line


# --- the state machine, without a cluster -------------------------------------------------------


def _job(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j", "uid": "u1"}, "spec": {}, "status": status}


def test_state_of_a_restarting_job_says_it_resumes() -> None:
    workload = {
        "metadata": {"ownerReferences": [{"kind": "TrainJob", "uid": "u1"}]},
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "True"},
                {"type": "Admitted", "status": "True"},
            ],
            "admission": {
                "clusterQueue": "chat",
                "podSetAssignments": [{"flavors": {"nvidia.com/gpu": "pool-h100"}}],
            },
        },
    }
    # Trainer v2.2 has no Restarting condition: the node's container restarting says it.
    job = _job(conditions=[{"type": "Suspended", "status": "False", "reason": "Resumed"}])
    pod = {
        "metadata": {"name": "j-node-0-1-abcde"},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "node", "restartCount": 1, "state": {"waiting": {"reason": "x"}}}
            ],
        },
    }
    state = job_state.state_of(job_state.Snapshot("chat", "j", job, workload, pods=[pod]))
    assert state.phase == "restarting"
    assert state.detail.startswith("pod j-node-0-1-abcde restarted 1 time; ")
    assert "resume from the last checkpoint" in state.detail
    assert state.cluster_queue == "chat" and state.flavors == ("pool-h100",)


def test_a_failed_job_is_done_and_not_ok() -> None:
    job = _job(conditions=[{"type": "Failed", "status": "True", "message": "backoff limit"}])
    state = job_state.state_of(job_state.Snapshot("chat", "j", job))
    assert (state.phase, state.done, state.ok, state.detail) == (
        "failed",
        True,
        False,
        "backoff limit",
    )


def test_a_request_kueue_can_never_fit_is_said_so() -> None:
    kind, sentence = job_state.why_queued(
        "couldn't assign flavors to pod set worker: insufficient quota for nvidia.com/gpu in "
        "flavor pool-h100, request > maximum capacity (24 > 16)"
    )
    assert kind == "quota" and sentence.startswith("it can never fit its queue")


def test_the_last_step_is_read_from_rank_zeros_json_events() -> None:
    log = b'{"event": "start"}\nnot json\n{"event": "step", "step": 3, "loss": 2.5}\n'
    assert job_api.last_step(log) == {"event": "step", "step": 3, "loss": 2.5}
    assert job_api.last_step(None) is None


def test_a_job_is_checked_against_the_stack_file_config_names(tmp_path: Path) -> None:
    """`--config FILE`: a stack file outside stacks/, as `llmp synth --config` reads one."""
    copy = tmp_path / "Pulumi.ft-copy.yaml"
    copy.write_text((REPO_ROOT / "stacks" / "Pulumi.finetune.yaml").read_text())
    job = str(REPO_ROOT / "examples" / "finetune-sft.yaml")
    args = ["job", "submit", job, "--dry-run", "--stack", "ft-copy"]
    done = CliRunner().invoke(app, [*args, "--config", str(copy)])
    assert done.exit_code == 0, done.output
    assert "on stack ft-copy: checked" in done.output
    missing = CliRunner().invoke(app, args)
    assert missing.exit_code == 2 and "(or pass --config FILE)" in missing.output
