"""`llmp synth`, `llmp verify storage` and the JSON files of `llmp policy` and `llmp cost`
on hostile input: exit 2, one line on stderr (one per problem for a stack config), no
traceback, nothing written."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from typer.testing import CliRunner

from llmp.cli import app
from llmp.stacks import REPO_ROOT
from spec.errors import ConfigError
from spec.stackfile import load_config, load_stack_file
from tests.hostile.strategies import BASES, mutated_stack

runner = CliRunner()
CLI = (sys.executable, "-m", "llmp.cli")


def invoke(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    # A crash is caught by the runner: it must not be one.
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def assert_bad_input(result: Any) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""
    return lines[0]


def assert_bad_config(result: Any) -> list[str]:
    """Exit 2 and one `config error: ` line per problem on stderr, nothing else."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert lines, result.stderr
    assert all(line.startswith("config error: ") for line in lines), result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""
    return lines


def assert_nothing_written(out: Path) -> None:
    assert not out.exists() or not any(out.rglob("*")), sorted(out.rglob("*"))


def write_yaml(path: Path, doc: Any) -> None:
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))


# ---------------------------------------------------------------------------
# Invalid config end to end
# ---------------------------------------------------------------------------


@settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(mutated_stack())
def test_invalid_config_exits_2_with_a_line_per_problem_and_writes_nothing(
    tmp_path_factory: pytest.TempPathFactory, raw: dict[str, Any]
) -> None:
    tmp = tmp_path_factory.mktemp("fuzz")
    config_file, out = tmp / "Pulumi.x.yaml", tmp / "out"
    try:
        write_yaml(config_file, {"config": raw})
    except (yaml.YAMLError, RecursionError, ValueError):
        assume(False)  # not representable as YAML
    try:
        load_config(load_stack_file(str(config_file)))
    except ConfigError as exc:
        expected = str(exc).splitlines()
    else:
        assume(False)  # the mutation left a valid config
    result = invoke("synth", "x", "--config", str(config_file), "--out", str(out))
    assert assert_bad_config(result) == expected
    assert_nothing_written(out)


# ---------------------------------------------------------------------------
# Unreadable stack files
# ---------------------------------------------------------------------------


def _config_as_text(tmp: Path, text: str | bytes) -> Path:
    path = tmp / "Pulumi.x.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


BAD_FILES: dict[str, tuple[str | bytes, str]] = {
    "invalid-utf8": (
        b"config:\n  aws:region: us-east-1\xff\xfe\n",
        "not UTF-8 text (line 2, column 24: byte 0xff)",
    ),
    "invalid-yaml": ("config:\n  aws:region: [us-east-1\n  x: {\n", "not valid YAML (line "),
    "tab-indent": ("config:\n\taws:region: us-east-1\n", "not valid YAML (line 2, column 1: "),
    "top-level-list": ("- config\n- x\n", "must be a map with a `config:` map, not a list"),
    "top-level-string": ("just text\n", "must be a map with a `config:` map, not a string"),
    "config-string": ("config: llm-platform\n", "`config:` must be a map of key: value, not a"),
    "config-list": ("config: [a, b]\n", "`config:` must be a map of key: value, not a list"),
    "config-int-key": ("config:\n  1: x\n", "config key 1 is not a string"),
    "python-tag": ("config: !!python/object/apply:os.system [id]\n", "not valid YAML (line 1"),
    "huge-int": (
        f"config:\n  aws:region: {'9' * 5000}\n",
        "not accepted YAML (line 2, column 15: a number of 5000 characters",
    ),
    "duplicate-anchor": ("config: *nope\n", "not valid YAML (line 1, column 9: "),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_an_unreadable_stack_file_is_one_line_naming_the_file(tmp_path: Path, case: str) -> None:
    text, problem = BAD_FILES[case]
    path = _config_as_text(tmp_path, text)
    out = tmp_path / "out"
    line = assert_bad_input(invoke("synth", "x", "--config", str(path), "--out", str(out)))
    assert line.startswith(f"config error: {path}: {problem}"), line
    assert_nothing_written(out)


def test_a_directory_as_config(tmp_path: Path) -> None:
    line = assert_bad_input(
        invoke("synth", "x", "--config", str(tmp_path), "--out", str(tmp_path / "out"))
    )
    assert line == f"config error: {tmp_path}: cannot read it: Is a directory"
    assert_nothing_written(tmp_path / "out")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_file_as_config(tmp_path: Path) -> None:
    path = _config_as_text(tmp_path, "config: {}\n")
    path.chmod(0)
    line = assert_bad_input(invoke("synth", "x", "--config", str(path), "--out", str(tmp_path)))
    assert line == f"config error: {path}: cannot read it: Permission denied"


def test_an_empty_file_is_missing_config_with_a_line_per_missing_key(tmp_path: Path) -> None:
    path = _config_as_text(tmp_path, "")
    lines = assert_bad_config(
        invoke("synth", "x", "--config", str(path), "--out", str(tmp_path / "out"))
    )
    assert lines == [
        "config error: aws:region = <missing>: required",
        "config error: llm-platform:tags = <missing>: required",
        "config error: llm-platform:network = <missing>: required",
    ]
    assert_nothing_written(tmp_path / "out")


def test_a_missing_stack(tmp_path: Path) -> None:
    line = assert_bad_input(invoke("synth", "nosuch", "--out", str(tmp_path / "out")))
    assert line.startswith("no stack file stacks/Pulumi.nosuch.yaml; known stacks: "), line
    assert_nothing_written(tmp_path / "out")


def test_a_missing_config_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    line = assert_bad_input(invoke("synth", "x", "--config", str(missing), "--out", str(tmp_path)))
    assert line.startswith(f"no stack file {missing}; "), line


@pytest.mark.parametrize("stack", ["../escape", "a/b", "..", ".hidden", "", "x\ny", "x\n", "a b"])
def test_a_stack_name_that_is_a_path(tmp_path: Path, stack: str) -> None:
    """The stack name becomes out/STACK/: a name with a path in it would write elsewhere."""
    config = tmp_path / "Pulumi.x.yaml"
    write_yaml(config, {"config": copy.deepcopy(BASES["inference"])})
    out = tmp_path / "deep" / "out"
    line = assert_bad_input(invoke("synth", stack, "--config", str(config), "--out", str(out)))
    assert line.startswith("not a stack name: "), line
    assert not (tmp_path / "deep").exists()
    assert not (tmp_path / "escape").exists()


# ---------------------------------------------------------------------------
# llmp verify storage --plan FILE
# ---------------------------------------------------------------------------

BAD_PLANS: dict[str, tuple[str | bytes, str]] = {
    "invalid-json": ("{not json", "is not JSON: "),
    "empty": ("", "is not JSON: "),
    "list": ("[1, 2]", "is not a plan written by `llmp synth` (no `resources` list)"),
    "resources-string": ('{"resources": "x"}', "is not a plan written by `llmp synth`"),
    "resource-without-type": (
        '{"resources": [{"name": "a", "urn": "u"}]}',
        ": resource 0 lacks a type",
    ),
    "resource-not-a-map": ('{"resources": [1]}', ": resource 0 is not an object"),
}


@pytest.mark.parametrize("case", sorted(BAD_PLANS))
def test_verify_an_unreadable_plan(tmp_path: Path, case: str) -> None:
    text, problem = BAD_PLANS[case]
    plan = _config_as_text(tmp_path, text).rename(tmp_path / "plan.json")
    line = assert_bad_input(invoke("verify", "storage", "pretrain", "--plan", str(plan)))
    assert problem in line, line
    assert str(plan) in line


def test_verify_a_missing_plan(tmp_path: Path) -> None:
    missing = tmp_path / "plan.json"
    line = assert_bad_input(invoke("verify", "storage", "pretrain", "--plan", str(missing)))
    assert line == f"no plan file {missing}"


def test_verify_a_directory_as_plan(tmp_path: Path) -> None:
    line = assert_bad_input(invoke("verify", "storage", "pretrain", "--plan", str(tmp_path)))
    assert line == f"cannot read plan {tmp_path}: Is a directory"


def test_verify_the_plan_of_another_stack(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"stack": "inference", "resources": []}))
    line = assert_bad_input(invoke("verify", "storage", "pretrain", "--plan", str(plan)))
    assert line == f"{plan} is the plan of stack inference, not pretrain"


@pytest.mark.parametrize(
    "text", [b'{"resources": []}\xff', b"[" * 100_000], ids=["not-utf8", "too-deep"]
)
def test_verify_a_plan_that_is_not_utf8_or_too_deep(tmp_path: Path, text: bytes) -> None:
    plan = tmp_path / "plan.json"
    plan.write_bytes(text)
    assert_bad_input(invoke("verify", "storage", "pretrain", "--plan", str(plan)))


@pytest.mark.parametrize(
    "text", [b'{"resources": []}\xff', b"[" * 100_000], ids=["not-utf8", "too-deep"]
)
@pytest.mark.parametrize(
    "command",
    [
        ("policy", "{file}"),
        ("policy", "--config", "{file}", "{plan}"),
        ("cost", "--plan", "{file}"),
    ],
    ids=["policy-plan", "policy-config", "cost-plan"],
)
def test_json_files_that_are_not_utf8_or_too_deep_are_one_line(
    tmp_path: Path, text: bytes, command: tuple[str, ...]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(text)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"stack": "x", "resources": []}))
    args = [part.format(file=bad, plan=plan) for part in command]
    line = assert_bad_input(invoke(*args))
    assert str(bad) in line, line


# ---------------------------------------------------------------------------
# A real process, and an output directory that cannot be written
# ---------------------------------------------------------------------------


def test_a_real_process_prints_one_line_and_no_traceback(tmp_path: Path) -> None:
    path = _config_as_text(tmp_path, b"config:\n  \xc3\x28: x\n")
    result = subprocess.run(
        [*CLI, "synth", "x", "--config", str(path), "--out", str(tmp_path / "out")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"config error: {path}: not UTF-8 text (line 2, column 3: byte 0xc3)"
    ]
    assert result.stdout == ""
    assert not (tmp_path / "out").exists()


def test_an_out_dir_that_is_a_file(tmp_path: Path) -> None:
    config = tmp_path / "Pulumi.x.yaml"
    write_yaml(config, {"config": copy.deepcopy(BASES["inference"])})
    out = tmp_path / "out"
    out.write_text("a file\n")
    line = assert_bad_input(invoke("synth", "x", "--config", str(config), "--out", str(out)))
    assert str(out) in line


def test_yaml_dates_and_bytes_outside_the_namespace_reach_the_program_as_text() -> None:
    """`aws:expiry: 2030-01-01` is a date to YAML: json.dumps alone raised TypeError."""
    import datetime

    from llmp.plan.synth import engine_config

    config, _ = engine_config(
        {
            "aws:expiry": datetime.date(2030, 1, 1),
            "x:blob": {"b": b"\x00", "d": [datetime.date(2030, 1, 2)]},
        }
    )
    assert config["aws:expiry"] == "2030-01-01"
    assert json.loads(config["x:blob"]) == {"b": "AA==", "d": ["2030-01-02"]}
