"""`llmp` as a whole: its version, every command's output read at 80 columns, and a pipe
whose reader stops early.

The 80-column test prints each command the way a pipe or an 80-column terminal gets it
(rich's Console at width 80, no colour) and checks that no line is wider, no value is cut
with "…", and the values are there: component, pool, rule, resource and node names whole on
one line, and each description's words in order.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from llmp import console as llmp_console
from llmp import dr
from llmp.cli import app
from llmp.plan import short_type, synth
from llmp.stacks import REPO_ROOT, STACKS_DIR
from tests.conftest import raw_stack

WIDTH = 80
STACK_FILES = sorted(p.name.split(".")[1] for p in STACKS_DIR.glob("Pulumi.*.yaml"))
SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stragglers" / "step-times.jsonl"
_BOX = re.compile(r"[\u2500-\u257f]")


def test_version_prints_the_installed_package_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"llmp {version('llm-platform')}\n"


# ---------------------------------------------------------------------------
# 80 columns
# ---------------------------------------------------------------------------


@pytest.fixture
def narrow(monkeypatch: pytest.MonkeyPatch) -> Any:
    """run(*args) -> (exit code, what an 80-column pipe shows on stdout)."""

    def run(*args: str) -> tuple[int, str]:
        buffer = io.StringIO()
        console = Console(file=buffer, width=WIDTH, color_system=None, legacy_windows=False)
        monkeypatch.setattr(llmp_console, "out", console)
        monkeypatch.setattr(llmp_console, "err", Console(file=io.StringIO(), width=WIDTH))
        result = CliRunner().invoke(app, list(args))
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code, buffer.getvalue()

    return run


@pytest.fixture
def cached_synth(monkeypatch: pytest.MonkeyPatch, plans: Any) -> None:
    """Stack names synthesize from the session's cached plans (the same program and file)."""
    monkeypatch.setattr(synth, "synthesize_stack", lambda stack, *_, **__: plans(stack))


def assert_fits(text: str, *whole: str, phrases: tuple[str, ...] = ()) -> None:
    """No line over 80 columns, nothing cut; each of `whole` on one line; each phrase's
    words in order (a description may wrap inside its cell)."""
    lines = text.splitlines()
    assert lines, "no output"
    wide = [line for line in lines if len(line) > WIDTH]
    assert not wide, f"{len(wide[0])} columns: {wide[0]!r}"
    assert "…" not in text, next(line for line in lines if "…" in line)
    for value in whole:
        assert any(value in line for line in lines), f"{value!r} is not whole on one line"
    words = " ".join(_BOX.sub(" ", text).split()).split(" ")
    for phrase in phrases:
        position = 0
        for word in phrase.split():
            assert word in words[position:], f"{word!r} of {phrase!r} is missing or cut"
            position = words.index(word, position) + 1


@pytest.mark.parametrize("stack", STACK_FILES)
def test_cost_of_every_stack_reads_at_80_columns(narrow, cached_synth, plans, stack) -> None:
    code, text = narrow("cost", stack)
    assert code == 0, text
    cost = plans(stack).outputs["cost"]
    components = cost["components"]
    lines = [line for c in components.values() for line in c.get("lines", [])]
    pools = cost["node_pools"]
    assert_fits(
        text,
        *components,
        *pools,
        *{p["instance_type"] for p in pools.values()},
        "prices: catalog",
        phrases=(
            *(line["what"] for line in lines),
            *(c["note"] for c in components.values() if c.get("note")),
            *(item["what"] for item in cost.get("not_estimated", [])),
        ),
    )


def test_cost_compare_reads_at_80_columns(narrow, cached_synth, plans) -> None:
    code, text = narrow("cost", "pretrain", "--compare", "inference")
    assert code == 0, text
    names = set(plans("pretrain").outputs["cost"]["components"])
    names |= set(plans("inference").outputs["cost"]["components"])
    assert_fits(text, *names, "inference against pretrain", "prices of inference: catalog")


@pytest.fixture(scope="module")
def recovery() -> dr.DrPlan:
    """pretrain recovered in us-west-2 with nothing but its stack file: every note shows."""
    return dr.make_plan(
        raw_stack("pretrain"), dr.RecoveryOptions(source_stack="pretrain", region="us-west-2")
    )


def test_dr_plan_reads_at_80_columns(narrow, recovery, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(dr, "make_plan", lambda source, options: recovery)
    code, text = narrow(
        "dr", "plan", "--from", "pretrain", "--region", "us-west-2", "--out", str(tmp_path)
    )
    assert code == 0, text
    assert_fits(
        text,
        *(r.key for r in recovery.config.rewrites),
        *(step.name for step in recovery.rto.path),
        "plan equivalence:",
        phrases=(
            *(r.why for r in recovery.config.rewrites),
            *(note.text for note in recovery.config.notes),
            *(step.type for step in recovery.rto.path),
            *(part.source for part in recovery.rpo.parts),
        ),
    )


def test_stragglers_reads_at_80_columns(narrow) -> None:
    code, text = narrow("stragglers", str(SAMPLE))
    assert code == 0, text
    nodes = {json.loads(line)["node"] for line in SAMPLE.read_text().splitlines()}
    assert_fits(text, *nodes, "SLOW", "ranks by time lost")


def test_policy_violations_read_at_80_columns(narrow, plans, tmp_path: Path) -> None:
    from llmp.plan.policy import evaluate

    plan = plans("pretrain").model_copy(deep=True)
    for r in plan.resources:
        if r.type == "aws:fsx/lustreFileSystem:LustreFileSystem":
            del r.inputs["kmsKeyId"]
    path = tmp_path / "plan.json"
    path.write_text(plan.text())
    violations = evaluate(plan)
    assert {v.level for v in violations} == {"mandatory", "advisory"}
    code, text = narrow("policy", "--plan", str(path))
    assert code == 1, text
    assert_fits(
        text,
        *(v.rule for v in violations),
        *(v.resource for v in violations),
        phrases=tuple(v.message for v in violations),
    )


@pytest.mark.parametrize("stack", ["inference", "pretrain"])
def test_synth_reads_at_80_columns(narrow, cached_synth, plans, stack, tmp_path: Path) -> None:
    """The tree too: every resource's name and short type whole, none cut at the edge."""
    code, text = narrow("synth", stack, "--out", str(tmp_path))
    assert code == 0, text
    resources = plans(stack).resources
    top = [r.name for r in resources if r.parent is None]
    assert_fits(
        text,
        *top,
        *{r.name for r in resources},
        *{short_type(r.type) for r in resources},
        "resources by type",
        "cost: $",
        "policy: 0 mandatory",
    )


def test_a_resource_type_is_its_package_module_and_class() -> None:
    assert short_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment") == (
        "aws:iam/RolePolicyAttachment"
    )
    assert short_type("kubernetes:batch/v1:CronJob") == "k8s:batch/v1/CronJob"
    assert short_type("llmp:nodes:GpuNodePool") == "llmp:nodes/GpuNodePool"
    assert short_type("pulumi:providers:aws") == "pulumi:providers/aws"
    assert short_type("aws:s3/bucketV2:Bucket") == "aws:s3/bucketV2/Bucket"  # not a repeat
    assert short_type("pulumi:pulumi:Stack:extra") == "pulumi:pulumi:Stack:extra"


def test_a_tree_label_that_does_not_fit_puts_the_type_under_the_name() -> None:
    from llmp.commands.synth import tree_label
    from llmp.console import broken

    fits = tree_label("logs", "aws:s3/bucket:Bucket", 40)
    assert fits.plain == "logs aws:s3/Bucket"
    under = tree_label(
        "storage-datasets-encryption",
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        60,
    )
    assert under.plain.splitlines() == [
        "storage-datasets-encryption",
        "aws:s3/BucketServerSideEncryptionConfiguration",
    ]
    # Narrower than the type: broken after a separator, never inside a word.
    assert broken("k8s:admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy", 40, "/:") == [
        "k8s:admissionregistration.k8s.io/v1/",
        "ValidatingAdmissionPolicy",
    ]
    assert broken("a-very-long-resource-name", 12, "-") == ["a-very-long-", "resource-", "name"]


def test_a_notice_wraps_between_words_with_a_hanging_indent() -> None:
    text = (
        "monitoring: Grafana's login form is off: llm-platform-monitoring:grafanaAdminPassword "
        "is not set; set it with `pulumi config set --secret x <password>`"
    )
    lines = llmp_console.wrap(text, WIDTH)
    assert max(len(line) for line in lines) <= WIDTH
    assert lines[0].startswith("monitoring: ") and all(line.startswith("  ") for line in lines[1:])
    assert " ".join(line.strip() for line in lines) == text  # every word whole, in order
    assert any("`pulumi config set --secret x <password>`" in line for line in lines)
    # A word wider than the line stays whole rather than cut, a path is broken after a `/`.
    assert llmp_console.wrap("key: " + "x" * 100, 40) == ["key:", "  " + "x" * 100]
    path = "/" + "/".join(["a-directory"] * 6) + "/plan.json"
    assert llmp_console.wrap(f"wrote {path} and 3 manifests", 40) == [
        "wrote /a-directory/a-directory/",
        "  a-directory/a-directory/a-directory/",
        "  a-directory/plan.json and 3 manifests",
    ]
    # The console's width: a narrow one wraps narrower.
    buffer = io.StringIO()
    llmp_console.notice(text, to=Console(file=buffer, width=50, color_system=None))
    assert max(len(line) for line in buffer.getvalue().splitlines()) <= 50


ERROR_LINE = re.compile(r"^(config error|error|policy error): ")
"""A line the CLI reports a failure with: one line, whatever its length (`llmp.cli`)."""


def test_the_commands_read_at_80_columns_in_a_pipe_warnings_included(tmp_path: Path) -> None:
    """What `COLUMNS=80 llmp ... 2>&1` shows, the program's warnings on stderr included:
    no line over 80 columns but an error line (none here)."""
    env = {**os.environ, "COLUMNS": "80"}
    commands = [
        ["synth", "pretrain", "--out", str(tmp_path / "out")],
        ["synth", "inference", "--out", str(tmp_path / "out")],
        ["dr", "plan", "--from", "pretrain", "--region", "us-west-2", "--out", str(tmp_path)],
        ["diff", "pretrain", "--base", "HEAD"],
    ]
    for args in commands:
        done = subprocess.run(
            [sys.executable, "-m", "llmp.cli", *args],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout
        assert "Grafana's login form is off:" in done.stdout  # the program's warning shows
        wide = [
            line
            for line in done.stdout.splitlines()
            if len(line) > WIDTH and not ERROR_LINE.match(line)
        ]
        assert not wide, f"llmp {' '.join(args)}: {len(wide[0])} columns: {wide[0]!r}"


# ---------------------------------------------------------------------------
# A reader that stops early (`| head`)
# ---------------------------------------------------------------------------


def _with_reader_gone(*args: str) -> subprocess.CompletedProcess[str]:
    """`llmp ARGS` whose stdout pipe is closed before it prints: as under `| head -0`."""
    process = subprocess.Popen(
        [sys.executable, "-m", "llmp.cli", *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    stderr = process.stderr.read()
    process.stderr.close()
    return subprocess.CompletedProcess(process.args, process.wait(timeout=120), "", stderr)


def test_a_reader_that_stops_early_leaves_the_commands_exit_code(tmp_path: Path) -> None:
    done = _with_reader_gone("stragglers", str(SAMPLE))
    assert (done.returncode, done.stderr) == (0, "")

    # A file system without a KMS key: the mandatory fsx-kms-key violation.
    fs = "aws:fsx/lustreFileSystem:LustreFileSystem"
    resource = {
        "urn": f"urn:pulumi:x::llm-platform::{fs}::fs",
        "type": fs,
        "name": "fs",
        "inputs": {"storageCapacity": 1200},
        "dependencies": [],
    }
    plan = {"stack": "x", "resources": [resource]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    failing = _with_reader_gone("policy", "--plan", str(path))
    assert failing.returncode == 1, failing.stderr  # a mandatory violation stays a failure
    assert "Traceback" not in failing.stderr


def test_plan_train_reads_at_80_columns(narrow) -> None:
    code, text = narrow(
        "plan", "train", "--params", "175e9", "--layers", "96", "--hidden", "12288",
        "--tokens", "300e9", "--stack", "pretrain", "--hours", "72", "--tflops", "120",
        "--tp", "8", "--pp", "8",
    )  # fmt: skip
    assert code == 0, text
    assert_fits(
        text,
        "  ZeRO 3: 0.0 + 0.0 + 0.3 + 0.8 + 9.6 = 10.7: fits",
        "10,176 GPUs",
        phrases=("pool h100 of stack pretrain has at most 16",),
    )
