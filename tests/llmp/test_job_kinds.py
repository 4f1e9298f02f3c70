"""`llmp job` for the lifecycle's steps: `kind: promote` and `kind: quantize`.

The same journey as a training run (tests/llmp/test_job.py): the job file is checked against
its stack, rendered (a TrainJob of one pod and one torchrun process, valid for Kubernetes,
admitted by the stack's Kueue queues), and submitted to the fake API server. What is the
steps' own: the command is the module's (`python -m workloads.jobs.promotion | quantize`,
parsed here by the module's own `parse_args`), the promote job mounts the training job's
ConfigMap (checked on the cluster before applying), and a bucket the tenant's workload role
cannot write is said before the job spends its GPU time.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from components.tenancy import s3_policy
from contracts import revisions
from llmp.cli import app
from llmp.jobs import check, manifests_yaml, prepare
from llmp.jobs.checks import JobFileError, load_job_file, write_denied
from llmp.stacks import REPO_ROOT
from manifests import kueue
from manifests.jobs import jobfile
from manifests.jobs.jobfile import JOB_LABEL
from manifests.jobs.trainjob import TrainJobSpec as JobSpec
from manifests.jobs.trainjob import build, cluster_training_runtimes
from manifests.queues import pool_capacities
from spec.catalog import catalog
from spec.stackfile import load_config, load_stack_file
from spec.tenancy import TENANT_BUCKETS
from tests.llmp.fake_apiserver import APPLY, Cluster, FakeApiServer, Script, Store
from tests.llmp.job_files import job_file
from tests.llmp.kube_fake import FakeClock
from tests.manifests.jobs.k8s import as_pod, node_template, policy_violations, validate

EXAMPLES = REPO_ROOT / "examples"
PROMOTE = EXAMPLES / "promote.yaml"
QUANTIZE = EXAMPLES / "quantize.yaml"
SFT = EXAMPLES / "finetune-sft.yaml"
STEPS = [PROMOTE, QUANTIZE]
FINETUNE = REPO_ROOT / "stacks" / "Pulumi.finetune.yaml"


def worker(manifest: dict[str, Any]) -> dict[str, Any]:
    """The TrainJob's nodes: the pod template the Trainer makes, and how many."""
    return {
        "template": node_template(manifest),
        "replicas": manifest["spec"]["trainer"]["numNodes"],
    }


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    (only,) = worker(manifest)["template"]["spec"]["containers"]
    return only


def module_args(manifest: dict[str, Any], module: str) -> list[str]:
    """The arguments after `torchrun [its flags] -m MODULE`: what the module's own argv is."""
    command = container(manifest)["command"]
    script = command.index("-m")
    assert command[0] == "torchrun" and command[script : script + 2] == ["-m", module], command
    assert all(a.startswith("--") for a in command[1:script]), command
    return list(command[script + 2 :])


# --- the examples: checked, valid, admitted, parsed by their module -----------------------


@pytest.mark.parametrize("path", STEPS, ids=lambda p: p.name)
def test_a_step_is_one_pod_one_process_valid_and_admitted(path: Path) -> None:
    prepared = prepare(str(path))
    (job,) = prepared.manifests  # no ConfigMap of its own
    assert job["kind"] == "TrainJob"
    template = worker(job)["template"]
    validate(as_pod(template))
    assert policy_violations(job, "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob") == []
    # Kueue's own rule against the stack's queues: the pool's flavor, the tenant's queue.
    assert prepared.admission.admitted, prepared.admission.problems
    assert prepared.flavor == kueue.flavor_name(prepared.job.pool)
    assert prepared.admission.queue == prepared.job.tenant
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    assert job["spec"]["suspend"] is True
    # One pod, one process: torchrun starts the module once.
    assert worker(job)["replicas"] == 1
    command = container(job)["command"]
    assert "--nnodes=1:1" in command and "--max-restarts=0" in command
    assert job["spec"]["trainer"]["numProcPerNode"] == 1
    # Its own errors fail it at once (not re-run); a killed or lost pod starts over: the
    # step runtime's pod failure policy.
    assert job["spec"]["runtimeRef"]["name"].startswith("llmp-step-")
    assert template["spec"]["restartPolicy"] == "Never"
    # Not a training pod: no metrics port, no GPU-idle alert, no trainer environment.
    labels = template["metadata"]["labels"]
    assert (
        labels["llm-platform/job-kind"]
        == {"promote": "promotion", "quantize": "quantization"}[prepared.job.kind]
    )
    assert labels[JOB_LABEL] == prepared.job.name
    c = container(job)
    assert "ports" not in c
    env = {e["name"] for e in c["env"]}
    assert not env & {"LLMP_METRICS_PORT", "LLMP_STEP_TIMES", "CHECKPOINT_DIR"}
    assert template["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"]
    assert template["spec"]["serviceAccountName"] == "training"


@pytest.mark.parametrize("path", STEPS, ids=lambda p: p.name)
def test_a_step_takes_one_gpu_and_its_share_of_the_node(path: Path) -> None:
    prepared = prepare(str(path))
    (job,) = prepared.manifests
    resources = container(job)["resources"]
    itype = catalog().instance(prepared.instance_type)
    assert itype.accelerator is not None
    count = itype.accelerator.count
    assert resources["limits"]["nvidia.com/gpu"] == "1"
    assert "vpc.amazonaws.com/efa" not in resources["limits"]  # no collectives
    share = 0.85 / count
    assert resources["requests"]["memory"] == f"{math.floor(itype.memory_gib * share)}Gi"
    assert resources["requests"]["cpu"] == str(math.floor(itype.vcpus * share))
    # Within what Kueue's quota gives one GPU of the pool: the node's other GPUs keep theirs.
    (pool,) = [p for p in pool_capacities(prepared.config) if p.name == prepared.job.pool]
    (pod_set,) = kueue.pod_sets(job, cluster_training_runtimes())
    asked = pod_set.requests()
    assert asked["cpu"] <= pool.cpu_per_gpu
    assert asked["memory"] <= pool.memory_gib_per_gpu * 2**30
    assert prepared.gpus == 1 and prepared.nominal_gpus == 8
    # gpus_per_node asks for more of the node (a bigger model's host memory).
    whole = check(
        str(path),
        load_job_file(str(path)).model_copy(update={"gpus_per_node": count}),
        prepared.config,
    )
    (big,) = whole.manifests
    assert container(big)["resources"]["requests"]["memory"] == (
        f"{math.floor(itype.memory_gib * 0.85)}Gi"
    )
    assert big["spec"]["trainer"]["numProcPerNode"] == 1  # still one process


@pytest.mark.full_tier("the promotion job's parser (torch)")
def test_the_promote_command_is_what_promotion_parses() -> None:
    from workloads.jobs import promotion

    prepared = prepare(str(PROMOTE))
    (job,) = prepared.manifests
    args = promotion.parse_args(module_args(job, "workloads.jobs.promotion"))
    block = prepared.job.promote
    assert block is not None
    assert args.checkpoints == prepared.job.checkpoint == "/fsx/checkpoints/chat-sft"
    assert args.job_config == "/etc/llmp/job.json"
    assert args.bucket == "acme-llm-finetune-models"  # the stack's `models`, by its name
    assert (args.name, args.prefix, args.dtype) == ("llama-8b", "revisions/", "bfloat16")
    assert args.heldout == block.heldout and args.eval_config == block.eval_config
    assert args.max_perplexity is None and args.out is None and args.endpoint_url is None
    # --job-config is the training job's own ConfigMap, mounted where the command reads it.
    template = worker(job)["template"]
    mounts = {m["mountPath"]: m for m in container(job)["volumeMounts"]}
    assert mounts["/etc/llmp"]["readOnly"] is True
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes[mounts["/etc/llmp"]["name"]]["configMap"]["name"] == "chat-sft-config"
    assert prepared.from_job == ("chat-sft", "/fsx/checkpoints/chat-sft")
    # The key prefix the job file says is the one promotion publishes under.
    assert revisions.key_prefix(args.prefix, f"{args.name}/r") == block.key_prefix() + "r/"


@pytest.mark.full_tier("the promotion job's parser (torch)")
def test_every_promote_flag_reaches_promotion(tmp_path: Path) -> None:
    from workloads.jobs import promotion

    path = job_file(
        tmp_path,
        PROMOTE,
        promote__from_job=None,
        promote__job_config="/fsx/checkpoints/chat-sft/job.json",
        promote__max_perplexity=35.5,
        promote__dtype="float32",
        promote__out="/fsx/checkpoints/chat-sft/export",
        promote__prefix="",
    )
    prepared = prepare(path)
    (job,) = prepared.manifests
    args = promotion.parse_args(module_args(job, "workloads.jobs.promotion"))
    assert args.job_config == "/fsx/checkpoints/chat-sft/job.json"
    assert (args.max_perplexity, args.dtype, args.out, args.prefix) == (
        35.5,
        "float32",
        "/fsx/checkpoints/chat-sft/export",
        "",
    )
    # A config on FSx: nothing is mounted, nothing to check on the cluster.
    assert "configMap" not in json.dumps(worker(job)["template"]["spec"]["volumes"])
    assert prepared.from_job is None
    assert revisions.key_prefix("", "llama-8b/r") == "llama-8b/r/"


@pytest.mark.full_tier("promotion and quantize (torch)")
def test_the_job_files_rules_are_promotions_and_quantizes() -> None:
    from workloads.jobs import promotion, quantize

    assert jobfile._MODEL_NAME.pattern == promotion._NAME.pattern
    dtype = jobfile.PromoteStep.model_fields["dtype"].annotation
    assert set(dtype.__args__) == set(promotion.DTYPES)  # type: ignore[union-attr]
    assert jobfile.SCHEMES is quantize.SCHEMES


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, ["--model", "--out", "--scheme"]),
        (
            {
                "quantize__scheme": "w4a16-gptq",
                "quantize__calibration": "/fsx/datasets/chat/calibration.jsonl",
                "quantize__samples": 256,
                "quantize__max_seq_len": 1024,
            },
            ["--calibration", "--samples", "--max-seq-len"],
        ),
    ],
)
def test_the_quantize_command_is_what_quantize_parses(
    tmp_path: Path, changes: dict[str, Any], expected: list[str]
) -> None:
    from workloads.jobs import quantize

    prepared = prepare(job_file(tmp_path, QUANTIZE, **changes))
    (job,) = prepared.manifests
    argv = module_args(job, "workloads.jobs.quantize")
    args = quantize.parse_args(argv)
    block = prepared.job.quantize
    assert block is not None
    assert (str(args.model), str(args.out), args.scheme) == (block.model, block.out, block.scheme)
    assert args.calibration == (None if block.calibration is None else Path(block.calibration))
    assert (args.samples, args.max_seq_len) == (block.samples, block.max_seq_len)
    assert all(flag in argv for flag in expected)
    assert quantize.SCHEMES[args.scheme].needs_calibration == (block.calibration is not None)


def test_dry_run_prints_the_step_and_its_checks() -> None:
    for path, kind in ((PROMOTE, "promote"), (QUANTIZE, "quantize")):
        result = CliRunner().invoke(app, ["job", "submit", str(path), "--dry-run"])
        assert result.exit_code == 0, result.output
        docs = list(yaml.safe_load_all(result.stdout))
        assert [d["kind"] for d in docs] == ["TrainJob"]
        assert result.stdout == manifests_yaml(prepare(str(path)))
        assert f"checked ({kind})" in result.stderr
        assert "one process on one node" in result.stderr
        assert "ClusterQueue chat, flavor pool-h100" in result.stderr
        assert "Kueue admits 1 nvidia.com/gpu (1 nominal)" in result.stderr
        for line in result.stderr.splitlines():
            assert len(line) <= 80, line
    promote = CliRunner().invoke(app, ["job", "submit", str(PROMOTE), "--dry-run"])
    assert "publish to s3://acme-llm-finetune-models/revisions/llama-8b/" in promote.stderr


# --- who may write the models bucket ------------------------------------------------------------


def _allows(policy: dict[str, Any], action: str, arn: str) -> bool:
    """Whether an Allow statement (without a condition) of `policy` grants `action` on `arn`."""
    for st in policy["Statement"]:
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        allowed = st["Effect"] == "Allow" and action in actions and "Condition" not in st
        if allowed and any(fnmatch.fnmatchcase(arn, r) for r in resources):
            return True
    return False


def test_the_tenants_role_writes_its_models_prefixes_and_the_dry_run_says_where_not(
    tmp_path: Path,
) -> None:
    cfg = prepare(str(PROMOTE)).config
    assert cfg.storage is not None and "models" in cfg.storage.buckets
    tenant = cfg.tenants["chat"]
    assert tenant.models_prefixes == ["revisions/llama-8b/"]
    # The policy the stack gives the chat tenant's `training` service account.
    arns = [f"arn:aws:s3:::{cfg.storage.bucket_name(b)}" for b in TENANT_BUCKETS]
    models = cfg.storage.bucket_name("models")
    policy = s3_policy(
        arns,
        list(tenant.s3_prefixes),
        "arn:aws:kms:us-west-2:1:key/k",
        cfg.region,
        (f"arn:aws:s3:::{models}", list(tenant.models_prefixes)),
    )
    revision = f"arn:aws:s3:::{models}/revisions/llama-8b/20261201T000000Z-step-30/config.json"
    assert _allows(policy, "s3:PutObject", revision)
    other = f"arn:aws:s3:::{models}/revisions/llama-70b/20261201T000000Z-step-30/config.json"
    assert not _allows(policy, "s3:PutObject", other)
    checkpoints = cfg.storage.bucket_name("checkpoints")
    own = f"arn:aws:s3:::{checkpoints}/teams/chat/revisions/llama-8b/r/config.json"
    assert _allows(policy, "s3:PutObject", own)
    # llmp's rule agrees with the policy.
    assert write_denied(cfg, "chat", "models", "revisions/llama-8b/") is None
    assert write_denied(cfg, "chat", "models", "revisions/llama-70b/") is not None
    assert write_denied(cfg, "chat", "checkpoints", "teams/chat/revisions/llama-8b/") is None
    assert write_denied(cfg, "chat", "checkpoints", "revisions/llama-8b/") is not None

    assert not [n for n in prepare(str(PROMOTE)).notes if "cannot publish" in n]
    prepared = prepare(job_file(tmp_path, PROMOTE, promote__name="llama-70b"))
    (note,) = [n for n in prepared.notes if "cannot publish" in n]
    assert note.startswith(f"it cannot publish to s3://{models}/revisions/llama-70b/: tenant chat")
    assert "may write only teams/chat/ in datasets; teams/chat/ in checkpoints;" in note
    assert "revisions/llama-8b/ in models (tenants.chat.models_prefixes)" in note
    assert "AccessDenied, exit 1" in note


def test_the_program_grants_what_the_rule_says(plans: Any) -> None:
    """The finetune plan's workload role of tenant chat: the models prefix is granted."""
    plan = plans("finetune")
    (policy,) = [
        json.loads(r.inputs["policy"])
        for r in plan.resources
        if r.type == "aws:iam/rolePolicy:RolePolicy" and "chat-workload" in r.name
    ]
    sids = [st["Sid"] for st in policy["Statement"]]
    assert sids == [
        "ListOwnPrefixes",
        "ReadWriteOwnPrefixes",
        "ListOwnModelPrefixes",
        "ReadWriteOwnModelPrefixes",
        "SignRevisions",
        "UseBucketKeyThroughS3",
    ]
    model_rw = policy["Statement"][3]["Resource"]
    assert len(model_rw) == 1 and model_rw[0].endswith("-models/revisions/llama-8b/*")
    # The promotion job seals what it publishes with the stack's signing key, and only that.
    sign = policy["Statement"][4]
    (key,) = [
        r for r in plan.resources if r.type == "aws:kms/key:Key" and r.name.endswith("-revisions")
    ]
    assert key.inputs["keyUsage"] == "SIGN_VERIFY"
    assert key.inputs["customerMasterKeySpec"] == "ECC_NIST_P256"
    assert sign["Action"] == "kms:Sign" and sign["Resource"].endswith(f":key/{key.name}")
    assert sign["Condition"] == {
        "StringEquals": {"kms:SigningAlgorithm": "ECDSA_SHA_256", "kms:MessageType": "DIGEST"}
    }
    others = [
        json.loads(r.inputs["policy"])
        for r in plan.resources
        if r.type == "aws:iam/rolePolicy:RolePolicy"
        and r.name.endswith("-workload-s3")
        and "chat-workload" not in r.name
    ]
    assert others and all(
        "SignRevisions" not in {st["Sid"] for st in o["Statement"]} for o in others
    )  # tenants without models prefixes publish no revision


# --- what is refused, in one line naming the key --------------------------------------------------


@pytest.mark.parametrize(
    ("base", "changes", "expected"),
    [
        (PROMOTE, {"promote": None}, "promote = <missing>: required by kind promote"),
        (PROMOTE, {"checkpoint": None}, "checkpoint = <missing>: required by kind promote"),
        (
            PROMOTE,
            {"trainer": {"max_steps": 5}},
            "trainer = {'max_steps': 5}: kind promote takes no trainer: it runs "
            "workloads.jobs.promotion",
        ),
        (PROMOTE, {"data": "/fsx/x"}, "data = '/fsx/x': kind promote takes no data"),
        (PROMOTE, {"zero_stage": 2}, "zero_stage = 2: kind promote takes no zero_stage"),
        (PROMOTE, {"max_restarts": 1}, "max_restarts = 1: kind promote takes no max_restarts"),
        (PROMOTE, {"nodes": 2}, "nodes = 2: kind promote runs one process on one node"),
        (
            PROMOTE,
            {"nodes": {"min": 1, "max": 2}},
            "nodes = {'min': 1, 'max': 2}: kind promote runs one process",
        ),
        (
            PROMOTE,
            {"quantize": {"model": "/fsx/m"}},
            "quantize = {'model': '/fsx/m'}: kind promote takes no quantize",
        ),
        (PROMOTE, {"gpus_per_node": 9}, "gpus_per_node 9: p5.48xlarge has 8"),
        (
            PROMOTE,
            {"promote__job_config": "/fsx/checkpoints/chat-sft/job.json"},
            "promote.from_job = 'chat-sft': give from_job or job_config, not both",
        ),
        (
            PROMOTE,
            {"promote__from_job": None},
            "promote.from_job = <missing>: required (or job_config)",
        ),
        (PROMOTE, {"promote__from_job": "Chat_SFT"}, "promote.from_job = 'Chat_SFT'"),
        (
            PROMOTE,
            {"promote__from_job": None, "promote__job_config": "/etc/job.json"},
            "promote.job_config = '/etc/job.json': must be a path under /fsx/",
        ),
        (
            PROMOTE,
            {"promote__heldout": "/data/heldout"},
            "promote.heldout = '/data/heldout': must be a path under /fsx/",
        ),
        (PROMOTE, {"promote__eval_config": "../eval.yaml"}, "promote.eval_config = '../eval"),
        (PROMOTE, {"promote__out": "/tmp/out"}, "promote.out = '/tmp/out': must be a path"),
        (PROMOTE, {"promote__name": None}, "promote.name = <missing>: required"),
        (
            PROMOTE,
            {"promote__name": "Llama 8B"},
            "promote.name = 'Llama 8B': lowercase letters, digits",
        ),
        (PROMOTE, {"promote__prefix": "/revisions"}, "promote.prefix = '/revisions': an S3 key"),
        (
            PROMOTE,
            {"promote__bucket": "weights"},
            "promote.bucket = 'weights': not a bucket of stack finetune",
        ),
        (PROMOTE, {"promote__bucket": "modles"}, "did you mean models?"),
        (PROMOTE, {"promote__dtype": "fp16"}, "promote.dtype = 'fp16': Input should be"),
        (
            PROMOTE,
            {"promote__heldout": None, "promote__max_perplexity": 20},
            "promote.max_perplexity = 20: needs heldout",
        ),
        (PROMOTE, {"promote__max_perplexity": 0}, "promote.max_perplexity = 0: Input should be"),
        (PROMOTE, {"promote__bukcet": "models"}, "promote.bukcet = 'models': unknown key"),
        (QUANTIZE, {"quantize": None}, "quantize = <missing>: required by kind quantize"),
        (
            QUANTIZE,
            {"checkpoint": "/fsx/checkpoints/x"},
            "checkpoint = '/fsx/checkpoints/x': kind quantize takes no checkpoint: it runs "
            "workloads.jobs.quantize",
        ),
        (QUANTIZE, {"promote": {"name": "x"}}, "kind quantize takes no promote"),
        (QUANTIZE, {"nodes": 3}, "nodes = 3: kind quantize runs one process on one node"),
        (
            QUANTIZE,
            {"quantize__scheme": "int8"},
            "quantize.scheme = 'int8': not a scheme; one of fp8-dynamic, w8a8-fp8",
        ),
        (
            QUANTIZE,
            {"quantize__scheme": "w8a8-fp8"},
            "quantize.calibration = <missing>: required by scheme w8a8-fp8",
        ),
        (
            QUANTIZE,
            {"quantize__calibration": "/fsx/c.jsonl"},
            "quantize.calibration = '/fsx/c.jsonl': scheme fp8-dynamic is data-free",
        ),
        (
            QUANTIZE,
            {"quantize__samples": 64},
            "quantize.samples = 64: scheme fp8-dynamic is data-free",
        ),
        (
            QUANTIZE,
            {"quantize__scheme": "w4a16-awq", "quantize__calibration": "/data/c.jsonl"},
            "quantize.calibration = '/data/c.jsonl': must be a path under /fsx/",
        ),
        (
            QUANTIZE,
            {
                "quantize__scheme": "w4a16-awq",
                "quantize__calibration": "/fsx/c.jsonl",
                "quantize__samples": 0,
            },
            "quantize.samples = 0: Input should be greater than or equal to 1",
        ),
        (QUANTIZE, {"quantize__model": "/models/x"}, "quantize.model = '/models/x': must be"),
        (QUANTIZE, {"quantize__out": None}, "quantize.out = <missing>: required"),
        (
            QUANTIZE,
            {"quantize__out": "/fsx/datasets/models/chat-sft/20261130T120000Z-step-2000/fp8"},
            "inside model /fsx/datasets/models/chat-sft/20261130T120000Z-step-2000",
        ),
        (QUANTIZE, {"quantize__recipe": "x"}, "quantize.recipe = 'x': unknown key"),
        (QUANTIZE, {"kind": "quantise"}, "kind = 'quantise': Input should be"),
        (
            SFT,
            {"promote": {"name": "x"}},
            "promote = {'name': 'x'}: kind sft takes no promote: that block is for kind promote",
        ),
        (SFT, {"nodes": None}, "nodes = <missing>: required by kind sft"),
        (SFT, {"data": None}, "data = <missing>: required by kind sft"),
        (SFT, {"checkpoint": None}, "checkpoint = <missing>: required by kind sft"),
    ],
)
def test_a_bad_step_is_one_line_naming_the_key(
    tmp_path: Path, base: Path, changes: dict[str, Any], expected: str
) -> None:
    path = job_file(tmp_path, base, **changes)
    with pytest.raises(JobFileError) as caught:
        prepare(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"job file {path}: ")
    assert expected in message


def test_a_trainer_still_defaults_its_zero_stage_and_restarts() -> None:
    job = load_job_file(str(SFT))
    assert (job.zero_stage, job.max_restarts, job.promote, job.quantize) == (2, 3, None, None)
    raw = yaml.safe_load(SFT.read_text())
    raw.pop("zero_stage")
    assert jobfile.JobFile.model_validate(raw).zero_stage == 3
    step = load_job_file(str(PROMOTE))
    assert (step.nodes.min, step.nodes.max, step.max_restarts) == (1, 1, 0)


# --- the pod builder's single-process knobs -------------------------------------------------------


BASE: dict[str, Any] = {
    "name": "step",
    "namespace": "chat",
    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
    "command": ["-m", "workloads.jobs.quantize"],
    "instance_type": "p5.48xlarge",
    "node_pool": "h100",
    "nodes_min": 1,
    "nodes_max": 1,
    "queue_name": "default",
}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({}, "checkpoint_dir: a training job needs one"),
        ({"job_kind": "quantization", "gpus_per_node": 2, "procs_per_node": 3}, "procs_per_node 3"),
        ({"job_kind": "quantization", "procs_per_node": 0}, "procs_per_node"),
        ({"job_kind": "evaluation"}, "job_kind"),
        ({"job_kind": "quantization", "restart_policy": "Never"}, "restart_policy"),
    ],
)
def test_bad_step_specs_fail_with_one_line(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as exc:
        build(**{**BASE, **overrides})
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_host_share_follows_the_gpus() -> None:
    spec = JobSpec.model_validate(
        {**BASE, "job_kind": "quantization", "gpus_per_node": 2, "host_share": "gpus"}
    )
    body = build(**spec.model_dump())
    requests = node_template(body)["spec"]["containers"][0]["resources"]["requests"]
    assert requests["memory"] == f"{math.floor(2048 * 0.85 * 2 / 8)}Gi"
    assert requests["cpu"] == str(math.floor(192 * 0.85 * 2 / 8))
    assert body["spec"]["trainer"]["numProcPerNode"] == 2  # one per GPU unless procs_per_node says


# --- on a cluster: the fake API server ---------------------------------------------------------


class Fake:
    def __init__(self, tmp_path: Path) -> None:
        self.clock = FakeClock()
        self.store = Store()
        self.cluster = Cluster(self.store, self.clock, Script())
        self.server = FakeApiServer(self.store, self.cluster)
        self.kubeconfig = str(self.server.kubeconfig(tmp_path / "kubeconfig"))
        self.cluster.tenant("chat")

    def run(self, *args: str) -> Any:
        return CliRunner().invoke(app, [*args, "--kubeconfig", self.kubeconfig])


@pytest.fixture
def fake(tmp_path: Path) -> Any:
    f = Fake(tmp_path)
    yield f
    f.server.stop()


def test_promote_needs_the_training_jobs_config_on_the_cluster(fake: Fake) -> None:
    refused = fake.run("job", "submit", str(PROMOTE), "--detach")
    assert refused.exit_code == 2
    text = " ".join(refused.stderr.split())
    assert (
        "namespace chat has no ConfigMap chat-sft-config, the config training job chat-sft" in text
    )
    assert "give promote.job_config" in text
    assert not [r for r in fake.store.requests if r.method == "PATCH"]

    assert fake.run("job", "submit", str(SFT), "--detach").exit_code == 0
    applied = fake.run("job", "submit", str(PROMOTE), "--detach")
    assert applied.exit_code == 0, applied.output
    assert applied.stdout.splitlines() == [
        "applied TrainJob chat/chat-sft-promote (server-side, field manager llmp)"
    ]
    patch = [r for r in fake.store.requests if r.method == "PATCH"][-1]
    assert patch.path == (
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/chat/trainjobs/chat-sft-promote"
    )
    assert patch.content_type == APPLY
    stored = fake.store.get(
        "trainer.kubeflow.org/v1alpha1", "chat", "trainjobs", "chat-sft-promote"
    )
    assert stored is not None and stored["spec"]["runtimeRef"]["name"].startswith("llmp-step-")

    # Cancelling the step leaves the training job's ConfigMap alone.
    cancelled = fake.run("job", "cancel", "chat-sft-promote")
    assert cancelled.stdout.splitlines() == ["deleted TrainJob chat/chat-sft-promote"]
    assert fake.store.get("v1", "chat", "configmaps", "chat-sft-config") is not None


def test_promote_refuses_a_config_that_trained_elsewhere(fake: Fake, tmp_path: Path) -> None:
    config = copy.deepcopy(prepare(str(SFT)).manifests[0])
    trainer = json.loads(config["data"]["job.json"])
    trainer["checkpoint"]["dir"] = "/fsx/checkpoints/chat-sft-v2"
    config["data"]["job.json"] = json.dumps(trainer)
    fake.store.put("v1", "chat", "configmaps", config)
    result = fake.run("job", "submit", str(PROMOTE), "--detach")
    assert result.exit_code == 2
    text = " ".join(result.stderr.split())
    assert (
        "training job chat-sft checkpointed to /fsx/checkpoints/chat-sft-v2 (ConfigMap "
        "chat/chat-sft-config), not to /fsx/checkpoints/chat-sft" in text
    )
    fake.store.put(
        "v1", "chat", "configmaps", {"metadata": {"name": "chat-sft-config"}, "data": {"x": "y"}}
    )
    other = fake.run("job", "submit", str(PROMOTE), "--detach")
    assert other.exit_code == 2 and "holds no trainer config" in other.stderr


def test_quantize_submits_and_is_followed_like_any_job(fake: Fake) -> None:
    result = fake.run("job", "submit", str(QUANTIZE), "--detach")
    assert result.exit_code == 0, result.output
    fake.run("job", "status", "chat-sft-fp8")
    fake.clock.now += 200
    status = fake.run("job", "status", "chat-sft-fp8", "--json")
    assert status.exit_code == 0, status.output
    assert json.loads(status.stdout)["phase"] == "succeeded"
    listed = json.loads(fake.run("job", "list", "--json").stdout)
    assert [(j["name"], j["nodes"]) for j in listed] == [("chat-sft-fp8", "1..1")]


def test_a_stack_without_the_bucket(tmp_path: Path) -> None:
    raw = load_stack_file(str(FINETUNE))
    del raw["llm-platform:storage"]["buckets"]["models"]
    with pytest.raises(JobFileError, match=r"promote.bucket = 'models': not a bucket of stack"):
        check(str(PROMOTE), load_job_file(str(PROMOTE)), load_config(raw))


def test_a_step_that_restarts_or_is_preempted_starts_over() -> None:
    from llmp.jobs import state as job_state

    (job,) = prepare(str(QUANTIZE)).manifests
    job = {**copy.deepcopy(job), "metadata": {**job["metadata"], "uid": "u1"}}
    job["status"] = {"conditions": [{"type": "Suspended", "status": "False"}]}
    pod = {
        "metadata": {"name": "x"},
        "status": {"containerStatuses": [{"restartCount": 2, "state": {"terminated": {}}}]},
    }
    admitted = {
        "metadata": {"ownerReferences": [{"kind": "TrainJob", "uid": "u1"}]},
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "True"},
                {"type": "Admitted", "status": "True"},
            ],
            "admission": {"clusterQueue": "chat", "podSetAssignments": []},
        },
    }
    state = job_state.state_of(
        job_state.Snapshot("chat", "chat-sft-fp8", job, admitted, pods=[pod])
    )
    assert state.phase == "restarting"
    assert state.detail == "pod x restarted 2 times; its pod starts over"
    preempted = {
        "metadata": admitted["metadata"],
        "status": {"conditions": [{"type": "Preempted", "status": "True", "reason": "R"}]},
    }
    state = job_state.state_of(job_state.Snapshot("chat", "chat-sft-fp8", job, preempted))
    assert state.phase == "preempted" and state.detail.endswith("starts over when admitted again")


# --- kind pretrain-3d: tensor x pipeline x data parallel -----------------------------------

PRETRAIN_3D = EXAMPLES / "pretrain-3d.yaml"


def test_the_3d_example_renders_valid_objects_that_the_stacks_queues_admit() -> None:
    from contracts.parallel import Layout, ParallelJobConfig, layout_for
    from workloads.training.parallel import __main__ as parallel_main

    prepared = prepare(str(PRETRAIN_3D))
    config_map, job = prepared.manifests
    validate(config_map)
    template = worker(job)["template"]
    validate(as_pod(template))
    assert policy_violations(job, "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob") == []
    assert prepared.admission.admitted, prepared.admission.problems
    assert prepared.flavor == kueue.flavor_name(prepared.job.pool)
    assert prepared.admission.queue == prepared.job.tenant
    assert prepared.gpus == 128 and job["spec"]["suspend"] is True
    # The 3-D trainer's own entry point and config, read back by its own parser and schema.
    args = parallel_main.parse_args(module_args(job, "workloads.training.parallel"))
    assert args.config == "/etc/llmp/job.json"
    trainer = ParallelJobConfig.model_validate_json(config_map["data"]["job.json"])
    assert trainer == prepared.trainer
    assert "zero_stage" not in json.loads(config_map["data"]["job.json"])
    # The layout torchrun's world gives it: nodes x numProcPerNode ranks.
    nodes, procs = worker(job)["replicas"], int(job["spec"]["trainer"]["numProcPerNode"])
    layout = layout_for(trainer.parallel, nodes * procs)
    assert layout == Layout(tp=8, pp=2, dp=8)
    assert trainer.microbatches(layout.dp) == 72  # 1152 / (8 x 2): >= pp for 1F1B
    # tp innermost: torchrun gives node k ranks k*procs .. k*procs + procs - 1, so every
    # tensor-parallel group (consecutive tp ranks) is one node's GPUs.
    for rank in range(layout.world):
        first = rank - rank % layout.tp
        assert first // procs == rank // procs
    # The fabric the platform sets for NCCL over EFA, as for every training kind.
    c = container(job)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NCCL_SOCKET_IFNAME"] == "^lo" and env["NCCL_DEBUG"] == "INFO"
    assert env["FI_EFA_USE_HUGE_PAGE"] == "0" and env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert not {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "RDMAV_FORK_SAFE"} & set(env)
    efa = catalog().instance(prepared.instance_type).efa_interfaces
    assert c["resources"]["limits"]["vpc.amazonaws.com/efa"] == str(efa)
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    # It serves the llmp_* metrics as the ZeRO trainer does: the port and the variables its
    # own parser reads them from.
    assert c["ports"] == [{"name": "metrics", "containerPort": 9300, "protocol": "TCP"}]
    assert env["LLMP_METRICS_PORT"] == "9300" and env["LLMP_JOB_NAME"] == prepared.job.name
    assert template["metadata"]["labels"]["llm-platform/job-kind"] == "training"


def test_dry_run_prints_the_3d_job() -> None:
    result = CliRunner().invoke(app, ["job", "submit", str(PRETRAIN_3D), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.stdout == manifests_yaml(prepare(str(PRETRAIN_3D)))
    assert [d["kind"] for d in yaml.safe_load_all(result.stdout)] == ["ConfigMap", "TrainJob"]
    assert "Kueue admits 128 nvidia.com/gpu (128 nominal)" in result.stderr
    assert "  layout tp 8 x pp 2 x dp 8 (tp within a node)\n" in result.stderr


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"parallel__tp": 3},
            "parallel = {'tp': 3, 'pp': 2}: tp 3 must divide the attention heads (32) and the "
            "key/value heads (8)",
        ),
        (
            {"parallel__tp": 16, "trainer__model__num_key_value_heads": 16},
            "parallel.tp = 16: tensor parallelism stays within a node: tp must divide its 8 GPUs",
        ),
        (
            {"parallel__dp": 4},
            "parallel = {'tp': 8, 'pp': 2, 'dp': 4}: tp 8 x pp 2 x dp 4 = 64 GPUs, but nodes 16 "
            "x 8 GPUs per node = 128",
        ),
        (
            {"nodes": {"min": 12, "max": 16}},
            "nodes 13 x 8 GPUs per node = 104 is not a multiple of tp 8 x pp 2 = 16 (every size "
            "of the elastic range must be)",
        ),
        (
            {"nodes": {"min": 12, "max": 16}, "parallel__pp": 1},
            "trainer.global_batch_size = 1152: global_batch_size 1152 is not a multiple of dp "
            "13 x micro_batch_size 2 = 26 (at nodes 13)",
        ),
        ({"parallel__pp": 40}, "pp 40 is more stages than the model's 32 decoder layers"),
        ({"parallel__schedule": "zb"}, "parallel.schedule = 'zb': Input should be"),
        ({"parallel": None}, "parallel = <missing>: required by kind pretrain-3d"),
        (
            {"zero_stage": 3},
            "zero_stage = 3: kind pretrain-3d takes no zero_stage: it shards with tensor, "
            "pipeline and FSDP data parallelism",
        ),
        (
            {"kind": "pretrain"},
            "kind pretrain takes no parallel: tensor and pipeline parallelism is kind pretrain-3d",
        ),
        ({"trainer__parallel": {"tp": 1}}, "sets parallel, which the job file sets"),
        ({"trainer__zero_stage": 1}, "sets zero_stage"),
        ({"trainer__gradient_accumulation_steps": 4}, "sets gradient_accumulation_steps"),
    ],
)
def test_a_bad_3d_job_is_one_line_naming_the_key(
    tmp_path: Path, changes: dict[str, Any], expected: str
) -> None:
    path = job_file(tmp_path, PRETRAIN_3D, **changes)
    with pytest.raises(JobFileError) as caught:
        prepare(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"job file {path}: ")
    assert expected in message


def test_an_elastic_3d_job_whose_every_size_is_a_layout_is_admitted(tmp_path: Path) -> None:
    # tp 4 x pp 2 is one node, so every node count is a whole layout (dp = nodes); the
    # global batch must split into micro-batches of 2 at dp 15 and at dp 16: 960 does.
    path = job_file(
        tmp_path,
        PRETRAIN_3D,
        nodes={"min": 15, "max": 16},
        parallel={"tp": 4, "pp": 2},
        trainer__global_batch_size=960,
    )
    prepared = prepare(path)
    _, job = prepared.manifests
    assert "--nnodes=15:16" in container(job)["command"]
    assert prepared.admission.admitted
