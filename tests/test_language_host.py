"""The program runs the way the Pulumi language host runs it.

The host starts Python in the program directory (`main: program/`), passes the
stack config in PULUMI_CONFIG, and calls `runpy.run_path(<program dir>)` inside
a root stack. Only program/ is then on sys.path, so `components`, `workloads`
and `spec` must come from the installed package: this test proves they do.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from llmp.plan.synth import engine_config
from llmp.stacks import PROGRAM_DIR, REPO_ROOT
from tests.conftest import raw_stack

DRIVER = """
import json, os, sys
from pathlib import Path
assert str(Path.cwd()) not in sys.path and '' not in sys.path, sys.path
from llmp.plan.synth import run_program
plan = run_program(os.environ['STACK'], os.environ['REGION'], Path.cwd())
import components, workloads
print(json.dumps({
    'resources': len(plan.resources),
    'types': sorted({r.type for r in plan.resources}),
    'outputs': sorted(plan.outputs),
    'components_from': components.__file__,
    'ops_modules': sorted(
        m for m in ('typer', 'rich', 'boto3', 'kubernetes', 'httpx', 'jinja2') if m in sys.modules
    ),
    'sys_path_has_repo_root': any(
        Path(p or '.').resolve() == Path(os.environ['ROOT']) for p in sys.path
    ),
}))
"""


def test_pulumi_yaml_points_at_program_and_the_stacks_dir() -> None:
    project = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())
    assert project["name"] == "llm-platform"
    assert project["main"].rstrip("/") == "program"
    assert project["stackConfigDir"] == "stacks"
    assert project["runtime"]["name"] == "python"
    assert project["runtime"]["options"]["virtualenv"] == ".venv"
    assert (PROGRAM_DIR / "__main__.py").exists()


def test_program_runs_from_program_dir_with_config_from_the_environment() -> None:
    config, _ = engine_config(raw_stack("pretrain"))
    result = subprocess.run(
        # -I: no script directory or cwd on sys.path, no PYTHONPATH; site-packages only.
        [sys.executable, "-I", "-c", DRIVER],
        cwd=PROGRAM_DIR,
        env={
            "PULUMI_CONFIG": json.dumps(config),
            "STACK": "pretrain",
            "REGION": "us-east-1",
            "ROOT": str(REPO_ROOT),
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["sys_path_has_repo_root"] is False
    assert Path(report["components_from"]).resolve() == (REPO_ROOT / "components/__init__.py")
    assert "aws:eks/nodeGroup:NodeGroup" in report["types"]
    assert {"cluster_name", "cost", "kubeconfig"} <= set(report["outputs"])
    assert report["resources"] > 50
    # requirements.txt is what `pulumi up` needs: nothing of the operator CLI's extra.
    assert report["ops_modules"] == []
