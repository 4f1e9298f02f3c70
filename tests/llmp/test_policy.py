"""`llmp policy` and the policy pack `llmp synth` runs: in-process evaluation, a stack name or
a plan file, exit codes, JSON output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from llmp.cli import app
from llmp.plan import Plan, PlanError, load_plan
from llmp.plan.policy import evaluate, failed, stack_policy_config
from tests.conftest import with_section

runner = CliRunner()


@pytest.fixture
def plan_file(plans, tmp_path: Path):
    def write(stack: str = "pretrain", mutate=None) -> Path:
        plan = plans(stack).model_copy(deep=True)
        if mutate:
            mutate(plan)
        path = tmp_path / f"{stack}.json"
        path.write_text(plan.text())
        return path

    return write


def _unencrypted_fsx(plan: Plan) -> None:
    for r in plan.resources:
        if r.type == "aws:fsx/lustreFileSystem:LustreFileSystem":
            del r.inputs["kmsKeyId"]


@pytest.mark.parametrize("stack", ["pretrain", "finetune", "inference"])
def test_the_stacks_have_no_mandatory_violation(plans, stack: str) -> None:
    violations = evaluate(plans(stack))
    assert not failed(violations), [v for v in violations if v.level == "mandatory"]


def test_the_stack_file_sets_the_budget_the_fsx_pool_and_its_demand() -> None:
    assert stack_policy_config("pretrain") == {
        "gpu-budget": {"gpu-budget-usd-per-hour": 1500},
        "fsx-in-gpu-pool-az": {"node-pool": "h100"},
        "fsx-feeds-gpus": {
            "node-pool": "h100",
            "demand": {
                "tokens_per_second_per_gpu": 942,
                "bytes_per_token": 4,
                "prefetch_factor": 2,
                "checkpoint_gb": 980,
                "write_minutes": 10,
            },
            "gpudirect-storage": False,
        },
    }
    assert stack_policy_config("no-such-stack") == {}


def test_the_stack_file_demand_reaches_the_rule_and_a_slow_checkpoint_is_refused(
    plans, tmp_path: Path
) -> None:
    """Pretrain's 980 GB checkpoint in 30 s needs 32.7 GB/s; its file system writes 23.4."""
    text = (Path(__file__).parents[2] / "stacks" / "Pulumi.pretrain.yaml").read_text()
    stack_file = tmp_path / "Pulumi.pretrain.yaml"
    stack_file.write_text(
        text.replace("checkpoint_write_minutes: 10", "checkpoint_write_minutes: 0.5")
    )
    violations = evaluate(plans("pretrain"), stack_policy_config("pretrain", stack_file))
    refused = [v for v in violations if v.rule == "fsx-feeds-gpus"]
    assert [v.level for v in refused] == ["mandatory"]
    assert "980 GB checkpoint takes 42 s" in refused[0].message
    assert "needs 32.7 GB/s" in refused[0].message


def test_the_stack_budget_applies_to_a_plan(plans) -> None:
    plan = plans("inference").model_copy(deep=True)
    for r in plan.resources:
        if r.type == "aws:eks/nodeGroup:NodeGroup" and r.name == "gpu-h200-nodes":
            r.inputs["scalingConfig"]["maxSize"] = 40
    assert [v.rule for v in evaluate(plan) if v.level == "mandatory"] == ["gpu-budget"]
    assert not failed(evaluate(plan, {"gpu-budget": {"gpu-budget-usd-per-hour": 5000}}))


def test_cli_exits_0_on_a_clean_plan_and_prints_a_table(plan_file) -> None:
    result = runner.invoke(app, ["policy", str(plan_file("pretrain"))])
    assert result.exit_code == 0, result.output
    assert "s3-access-logging" in result.output and "advisory" in result.output


def test_cli_exits_1_on_a_mandatory_violation_with_json(plan_file) -> None:
    result = runner.invoke(app, ["policy", str(plan_file("pretrain", _unencrypted_fsx)), "--json"])
    assert result.exit_code == 1
    violations = json.loads(result.stdout)
    mandatory = [v for v in violations if v["level"] == "mandatory"]
    assert [(v["rule"], v["resource"]) for v in mandatory] == [("fsx-kms-key", "lustre-fs")]
    assert set(mandatory[0]) == {"rule", "urn", "resource", "message", "level"}
    assert mandatory[0]["urn"].endswith("::lustre-fs")


def test_cli_config_can_make_a_rule_advisory(plan_file, tmp_path: Path) -> None:
    config = tmp_path / "policy.json"
    config.write_text(json.dumps({"fsx-kms-key": {"enforcementLevel": "advisory"}}))
    result = runner.invoke(
        app, ["policy", str(plan_file("pretrain", _unencrypted_fsx)), "--config", str(config)]
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no plan file"),
        ("{not json", "is not JSON"),
        ('{"resources": 3}', "not a plan written by `llmp synth`"),
        ('{"resources": [{"type": "x"}]}', "resource 0 lacks a urn"),
    ],
)
def test_cli_exits_2_on_bad_plans(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "plan.json"
    if content is not None:
        path.write_text(content)
    result = runner.invoke(app, ["policy", str(path)])
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_cli_exits_2_on_a_bad_policy_config(plan_file, tmp_path: Path) -> None:
    config = tmp_path / "policy.json"
    config.write_text(json.dumps({"no-such-rule": "advisory"}))
    result = runner.invoke(app, ["policy", str(plan_file()), "--config", str(config)])
    assert result.exit_code == 2 and "unknown rules no-such-rule" in result.stderr


def test_write_config_writes_what_the_stack_implies(tmp_path: Path) -> None:
    target = tmp_path / "cfg.json"
    result = runner.invoke(app, ["policy", "--write-config", "inference", "--to", str(target)])
    assert result.exit_code == 0, result.output
    assert json.loads(target.read_text()) == {"gpu-budget": {"gpu-budget-usd-per-hour": 400}}
    result = runner.invoke(app, ["policy", "--write-config", "nope", "--to", str(target)])
    assert result.exit_code == 2


def test_synth_policy_runs_the_pack(tmp_path: Path, monkeypatch, plans) -> None:
    import llmp.plan.synth

    monkeypatch.setattr(llmp.plan.synth, "synthesize_stack", lambda stack, *_, **__: plans(stack))
    ok = runner.invoke(app, ["synth", "inference", "--out", str(tmp_path), "--policy"])
    assert ok.exit_code == 0, ok.output
    assert "policy: 0 mandatory" in ok.output

    bad = plans("inference").model_copy(deep=True)
    for r in bad.resources:
        if r.type == "aws:eks/cluster:Cluster":
            r.inputs["enabledClusterLogTypes"] = ["api"]
    monkeypatch.setattr(llmp.plan.synth, "synthesize_stack", lambda stack, *_, **__: bad)
    failed_run = runner.invoke(app, ["synth", "inference", "--out", str(tmp_path), "--policy"])
    assert failed_run.exit_code == 1
    assert "eks-audit-logs" in failed_run.output


@pytest.fixture
def cached_synth(monkeypatch, plans) -> None:
    """Stack names synthesize from the session's cached plans (the same program and file)."""
    import llmp.plan.synth

    monkeypatch.setattr(llmp.plan.synth, "synthesize_stack", lambda stack, *_, **__: plans(stack))


def _over_budget(tmp_path: Path) -> Path:
    """inference's stack file with a GPU budget far below its pools' $342/h at max size."""
    raw = with_section("inference", "guardrails", {"gpu_budget_usd_per_hour": 100})
    path = tmp_path / "Pulumi.inference.yaml"
    path.write_text(yaml.safe_dump({"config": raw}))
    return path


def test_synth_runs_the_policy_pack_by_default(tmp_path: Path, cached_synth) -> None:
    """`make preview` is `llmp synth STACK`: a stack over its GPU budget must fail it."""
    config = _over_budget(tmp_path)
    out = tmp_path / "out"
    result = runner.invoke(app, ["synth", "inference", "--config", str(config), "--out", str(out)])
    assert result.exit_code == 1, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("policy: 1 mandatory (gpu-budget), "), last
    assert "gpu-budget: (stack)" in result.stdout
    assert (out / "inference" / "plan.json").is_file()  # the plan is written all the same

    as_json = runner.invoke(
        app, ["synth", "inference", "--config", str(config), "--out", str(out), "--json"]
    )
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["stack"] == "inference"
    assert "policy: 1 mandatory (gpu-budget)" in as_json.stderr


def test_synth_no_policy_skips_the_pack_and_policy_is_still_accepted(
    tmp_path: Path, cached_synth
) -> None:
    config = _over_budget(tmp_path)
    args = ["synth", "inference", "--config", str(config), "--out", str(tmp_path / "out")]
    skipped = runner.invoke(app, [*args, "--no-policy"])
    assert skipped.exit_code == 0, skipped.output
    assert "policy:" not in skipped.stdout
    explicit = runner.invoke(app, [*args, "--policy"])  # the older spelling: the default
    assert explicit.exit_code == 1
    assert "gpu-budget" in explicit.stdout


def test_cli_takes_a_stack_name_and_synthesizes_it(cached_synth) -> None:
    result = runner.invoke(app, ["policy", "pretrain"])
    assert result.exit_code == 0, result.output
    assert "policy violations in pretrain" in result.stdout
    assert "s3-access-logging" in result.stdout
    as_json = runner.invoke(app, ["policy", "inference", "--json"])
    assert as_json.exit_code == 0
    assert not [v for v in json.loads(as_json.stdout) if v["level"] == "mandatory"]


def test_cli_stack_name_with_a_mandatory_violation_exits_1(cached_synth, monkeypatch, plans):
    import llmp.plan.synth

    bad = plans("pretrain").model_copy(deep=True)
    for r in bad.resources:
        if r.type == "aws:fsx/lustreFileSystem:LustreFileSystem":
            del r.inputs["kmsKeyId"]
    monkeypatch.setattr(llmp.plan.synth, "synthesize_stack", lambda stack, *_, **__: bad)
    result = runner.invoke(app, ["policy", "pretrain"])
    assert result.exit_code == 1
    assert "fsx-kms-key: lustre-fs" in result.stdout


def test_cli_plan_option_reads_a_plan_file(plan_file) -> None:
    result = runner.invoke(app, ["policy", "--plan", str(plan_file("pretrain", _unencrypted_fsx))])
    assert result.exit_code == 1
    assert "fsx-kms-key" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuchstack"], "no stack file stacks/Pulumi.nosuchstack.yaml; known stacks: "),
        (["pre train"], "not a stack name: "),
        ([], "give one of STACK or --plan FILE"),
        (["pretrain", "--plan", "x.json"], "give one of STACK or --plan FILE"),
        (["--write-config", "pretrain", "pretrain"], "--write-config STACK writes a config"),
    ],
)
def test_cli_bad_stack_arguments_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["policy", *args])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_load_plan_reads_what_synth_writes(plans, tmp_path: Path) -> None:
    from llmp.plan.synth import write_plan

    target = write_plan(plans("finetune"), tmp_path)
    assert load_plan(target / "plan.json").stack == "finetune"
    with pytest.raises(PlanError):
        load_plan(tmp_path / "missing.json")
