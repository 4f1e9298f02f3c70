"""Files the CLI writes, under a careless or hostile user: a stack file is never replaced
by another stack's output (not even with --force), an existing file is kept without
--force, `llmp synth --out` removes only what it wrote, and `llmp dr plan --outputs` of
another stack is refused. Each refusal: exit 2, one line, no traceback, nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import llmp.stacks
from llmp.cli import app
from llmp.plan.synth import WRITTEN
from llmp.stacks import REPO_ROOT

runner = CliRunner()
STACKS = REPO_ROOT / "stacks"


def invoke(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def refusal(result: Any) -> str:
    """The one line of a refusal (exit 2, nothing on stdout, no traceback)."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output and result.stdout == ""
    return str(lines[0])


@pytest.fixture
def stacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of stacks/ that llmp takes for the repository's."""
    copy = tmp_path / "stacks"
    shutil.copytree(STACKS, copy)
    monkeypatch.setattr(llmp.stacks, "STACKS_DIR", copy)
    return copy


def texts(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


# --- llmp dr plan ----------------------------------------------------------------------


def test_dr_plan_never_writes_the_source_stack_file_even_with_force(stacks: Path) -> None:
    before = texts(stacks)
    result = invoke(
        "dr", "plan", "--from", "pretrain", "--stack", "pretrain",
        "--region", "us-west-2", "--out", str(stacks), "--force",
    )  # fmt: skip
    line = refusal(result)
    assert line == (
        f"--out {stacks}: Pulumi.pretrain.yaml is pretrain's stack file, kept even with "
        "--force; name another --stack"
    )
    assert texts(stacks) == before


def test_dr_plan_never_writes_another_stack_s_file_even_with_force(stacks: Path) -> None:
    before = texts(stacks)
    result = invoke(
        "dr", "plan", "--from", "pretrain", "--stack", "finetune",
        "--region", "us-west-2", "--out", str(stacks), "--force",
    )  # fmt: skip
    line = refusal(result)
    assert line == (
        f"--out {stacks}: Pulumi.finetune.yaml is another stack's file, kept even with "
        "--force; name another --stack"
    )
    assert texts(stacks) == before


def test_dr_plan_never_writes_the_source_given_by_config(tmp_path: Path) -> None:
    source = tmp_path / "Pulumi.pretrain.yaml"
    shutil.copy(STACKS / "Pulumi.pretrain.yaml", source)
    result = invoke(
        "dr", "plan", "--from", "pretrain", "--config", str(source), "--stack", "pretrain",
        "--region", "us-west-2", "--out", str(tmp_path), "--force",
    )  # fmt: skip
    assert "Pulumi.pretrain.yaml is pretrain's stack file, kept even with" in refusal(result)
    assert source.read_text() == (STACKS / "Pulumi.pretrain.yaml").read_text()


def test_dr_plan_keeps_an_existing_runbook_without_force(tmp_path: Path) -> None:
    runbook = tmp_path / "pretrain-dr.runbook.md"
    runbook.write_text("my notes\n")
    result = invoke(
        "dr", "plan", "--from", "pretrain", "--region", "us-west-2", "--out", str(tmp_path)
    )
    line = refusal(result)
    assert line == f"--out {runbook} exists; pass --force to overwrite it"
    assert runbook.read_text() == "my notes\n"


def _outputs(tmp_path: Path, **outputs: Any) -> Path:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    return path


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        (
            {"region": "us-east-2", "cluster_name": "llm-platform-pretrain"},
            "is not pretrain's: region us-east-2, pretrain's is us-east-1",
        ),
        (
            {"region": "us-east-1", "cluster_name": "llm-platform-finetune"},
            "is not pretrain's: cluster_name llm-platform-finetune, pretrain's is "
            "llm-platform-pretrain",
        ),
        (
            {"stack": "finetune", "region": "us-east-1"},
            "is not pretrain's: stack finetune, pretrain's is pretrain",
        ),
        (
            {"project": "other", "region": "us-east-1"},
            "is not pretrain's: project other, pretrain's is llm-platform",
        ),
        ({"buckets": {"models": "x"}}, "has no region or cluster_name: cannot tell it is"),
    ],
)
def test_dr_plan_refuses_the_outputs_of_another_stack(
    tmp_path: Path, outputs: dict[str, Any], message: str
) -> None:
    path = _outputs(tmp_path, **outputs)
    out = tmp_path / "out"
    result = invoke(
        "dr", "plan", "--from", "pretrain", "--region", "us-west-2",
        "--outputs", str(path), "--out", str(out),
    )  # fmt: skip
    line = refusal(result)
    assert line.startswith(f"--outputs {path} {message}")
    assert not out.exists()


# --- llmp synth --out --------------------------------------------------------------------


def test_synth_refuses_a_directory_it_did_not_write(tmp_path: Path) -> None:
    theirs = tmp_path / "out" / "finetune" / "manifests" / "theirs.yaml"
    theirs.parent.mkdir(parents=True)
    theirs.write_text("kind: Mine\n")
    result = invoke("synth", "finetune", "--no-policy", "--out", str(tmp_path / "out"))
    line = refusal(result)
    assert line == (
        f"--out {tmp_path / 'out'}: finetune/ holds files llmp synth did not write; "
        "--force writes beside them"
    )
    assert texts(tmp_path / "out") == {"finetune/manifests/theirs.yaml": "kind: Mine\n"}


def test_synth_removes_only_what_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "out"
    theirs = out / "finetune" / "manifests" / "theirs.yaml"
    theirs.parent.mkdir(parents=True)
    theirs.write_text("kind: Mine\n")
    result = invoke("synth", "finetune", "--no-policy", "--json", "--force", "--out", str(out))
    assert result.exit_code == 0, result.output
    target = out / "finetune"
    written = json.loads((target / WRITTEN).read_text())
    assert "plan.json" in written and "manifests/theirs.yaml" not in written
    assert theirs.read_text() == "kind: Mine\n"  # --force writes beside it
    # A manifest of an earlier synth that this plan lacks goes; nothing else does.
    stale = target / "manifests" / "stale-old.yaml"
    stale.write_text("kind: Old\n")
    (target / WRITTEN).write_text(
        json.dumps([*written, "manifests/stale-old.yaml", "../escape.txt", "/etc/passwd"])
    )
    (out / "escape.txt").write_text("outside\n")
    result = invoke("synth", "finetune", "--no-policy", "--json", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert not stale.exists()
    assert theirs.read_text() == "kind: Mine\n"
    assert (out / "escape.txt").read_text() == "outside\n"
    assert json.loads((target / WRITTEN).read_text()) == written


# --- llmp loadtest --output, llmp policy --write-config --to, llmp diff --markdown -------


def test_loadtest_keeps_an_existing_output_without_force(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text("earlier run\n")
    result = invoke(
        "loadtest", "http://127.0.0.1:9/v1", "--requests", "1",
        "--output", str(report),
    )  # fmt: skip
    line = refusal(result)
    assert line == (
        f"loadtest: --output {report} exists; pass --force to overwrite it"
    )
    assert report.read_text() == "earlier run\n"


def test_loadtest_never_writes_a_stack_file_even_with_force(stacks: Path) -> None:
    before = texts(stacks)
    target = stacks / "Pulumi.pretrain.yaml"
    result = invoke(
        "loadtest", "http://127.0.0.1:9/v1", "--requests", "1",
        "--output", str(target), "--force",
    )  # fmt: skip
    line = refusal(result)
    assert line == (
        f"loadtest: --output {target} is pretrain's stack file: never overwritten, even with "
        "--force"
    )
    assert texts(stacks) == before


def test_policy_write_config_keeps_an_existing_file_without_force(tmp_path: Path) -> None:
    target = tmp_path / "policy-config.json"
    target.write_text("{}\n")
    line = refusal(invoke("policy", "--write-config", "inference", "--to", str(target)))
    assert line == f"--to {target} exists; pass --force to overwrite it"
    assert target.read_text() == "{}\n"
    result = invoke("policy", "--write-config", "inference", "--to", str(target), "--force")
    assert result.exit_code == 0, result.output
    assert json.loads(target.read_text())


def test_policy_write_config_never_writes_a_stack_file(stacks: Path) -> None:
    before = texts(stacks)
    target = stacks / "Pulumi.inference.yaml"
    result = invoke("policy", "--write-config", "inference", "--to", str(target), "--force")
    assert "is inference's stack file: never overwritten, even with --force" in refusal(result)
    assert texts(stacks) == before


def test_diff_keeps_an_existing_markdown_file_before_synthesizing(tmp_path: Path) -> None:
    comment = tmp_path / "comment.md"
    comment.write_text("posted\n")
    line = refusal(invoke("diff", "--base", "HEAD", "pretrain", "--markdown", str(comment)))
    assert line == f"--markdown {comment} exists; pass --force to overwrite it"
    assert comment.read_text() == "posted\n"
