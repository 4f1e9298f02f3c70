"""`llmp policy` and `llmp synth --policy`: in-process evaluation, exit codes, JSON output."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from llmp.cli import app
from llmp.policy import PlanError, evaluate, failed, load_plan, stack_policy_config

runner = CliRunner()


@pytest.fixture
def plan_file(plans, tmp_path: Path):
    def write(stack: str = "pretrain", mutate=None) -> Path:
        plan = copy.deepcopy(plans(stack).to_dict())
        if mutate:
            mutate(plan)
        path = tmp_path / f"{stack}.json"
        path.write_text(json.dumps(plan))
        return path

    return write


def _unencrypted_fsx(plan: dict) -> None:
    for r in plan["resources"]:
        if r["type"] == "aws:fsx/lustreFileSystem:LustreFileSystem":
            del r["inputs"]["kmsKeyId"]


@pytest.mark.parametrize("stack", ["pretrain", "finetune", "inference"])
def test_the_stacks_have_no_mandatory_violation(plans, stack: str) -> None:
    violations = evaluate(plans(stack).to_dict())
    assert not failed(violations), [v for v in violations if v.level == "mandatory"]


def test_the_stack_file_sets_the_budget_and_the_fsx_pool() -> None:
    assert stack_policy_config("pretrain") == {
        "gpu-budget": {"gpu-budget-usd-per-hour": 1500},
        "fsx-in-gpu-pool-az": {"node-pool": "h100"},
    }
    assert stack_policy_config("no-such-stack") == {}


def test_the_stack_budget_applies_to_a_plan(plans) -> None:
    plan = copy.deepcopy(plans("inference").to_dict())
    for r in plan["resources"]:
        if r["type"] == "aws:eks/nodeGroup:NodeGroup" and r["name"] == "gpu-h200-nodes":
            r["inputs"]["scalingConfig"]["maxSize"] = 40
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
        (None, "cannot read plan"),
        ("{not json", "is not JSON"),
        ('{"resources": 3}', "not a plan written by `llmp synth`"),
        ('{"resources": [{"type": "x"}]}', "resource 0 lacks"),
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
    import llmp.synth

    monkeypatch.setattr(llmp.synth, "synthesize_stack", lambda stack, config=None: plans(stack))
    ok = runner.invoke(app, ["synth", "inference", "--out", str(tmp_path), "--policy"])
    assert ok.exit_code == 0, ok.output
    assert "policy: 0 mandatory" in ok.output

    bad = copy.deepcopy(plans("inference"))
    for r in bad.resources:
        if r["type"] == "aws:eks/cluster:Cluster":
            r["inputs"]["enabledClusterLogTypes"] = ["api"]
    monkeypatch.setattr(llmp.synth, "synthesize_stack", lambda stack, config=None: bad)
    failed_run = runner.invoke(app, ["synth", "inference", "--out", str(tmp_path), "--policy"])
    assert failed_run.exit_code == 1
    assert "eks-audit-logs" in failed_run.output


def test_load_plan_reads_what_synth_writes(plans, tmp_path: Path) -> None:
    from llmp.synth import write_plan

    target = write_plan(plans("finetune"), tmp_path)
    assert load_plan(target / "plan.json")["stack"] == "finetune"
    with pytest.raises(PlanError):
        load_plan(tmp_path / "missing.json")
