"""`llmp synth` on the configs a red-team review found accepted that break tenant
isolation: exit 2, the one line that names the key, the value and what would be right,
no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from llmp.cli import app
from spec.stackfile import load_stack_file

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples/stacks"
runner = CliRunner()


def synth_refused(tmp: Path, stack: str, raw: dict[str, Any], *extra: str) -> str:
    config = tmp / f"Pulumi.{stack}.yaml"
    config.write_text(yaml.safe_dump({"config": raw}))
    out = tmp / "out"
    args = ["synth", stack, "--config", str(config), "--out", str(out), *extra]
    result = runner.invoke(app, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert not out.exists() or not any(out.rglob("*"))
    (line,) = result.stderr.splitlines()
    return line


def pretrain() -> dict[str, Any]:
    return load_stack_file(str(REPO / "stacks/Pulumi.pretrain.yaml"))


def test_a_tenant_prefix_over_another_tenant_s(tmp_path: Path) -> None:
    raw = pretrain()
    raw["llm-platform:tenants"] = {
        "chat": {"cpu": 8, "memory_gib": 32, "s3_prefixes": ["teams/chat/"]},
        "research": {"cpu": 8, "memory_gib": 32, "s3_prefixes": ["teams/"]},
    }
    assert synth_refused(tmp_path, "pretrain", raw) == (
        "config error: llm-platform:tenants.research.s3_prefixes.0 = 'teams/': contains "
        "tenant chat's prefix teams/chat/ (tenants.chat.s3_prefixes): research would read "
        "and write chat's keys in the datasets and checkpoints buckets; narrow it to one of "
        "research's own, e.g. teams/research/ (no tenant's prefix may start with another "
        "tenant's)"
    )


def test_a_public_endpoint_open_to_the_internet_in_two_halves(tmp_path: Path) -> None:
    raw = pretrain()
    raw["llm-platform:cluster"] = {
        **raw.get("llm-platform:cluster", {}),
        "endpoint_public_access": True,
        "public_access_cidrs": ["0.0.0.0/1", "128.0.0.0/1"],
    }
    assert synth_refused(tmp_path, "pretrain", raw) == (
        "config error: llm-platform:cluster.public_access_cidrs = ['0.0.0.0/1', "
        "'128.0.0.0/1']: together open the API to the internet (they merge into 0.0.0.0/0); "
        "a public endpoint admits at most 65,536 IPv4 addresses (one /16) and one /48 of "
        "IPv6 in all: list your egress CIDRs, or reach the API through the private endpoint"
    )


@pytest.mark.parametrize("source", ["stack file", "outputs file"])
def test_a_team_stack_whose_vpc_cidr_is_not_the_shared_stack_s(tmp_path: Path, source: str) -> None:
    raw = load_stack_file(str(EXAMPLES / "Pulumi.team.yaml"))
    raw["llm-platform:network"]["vpc_cidr"] = "10.71.0.0/16"
    extra: tuple[str, ...] = ()
    if source == "stack file":
        (tmp_path / "Pulumi.shared.yaml").write_text((EXAMPLES / "Pulumi.shared.yaml").read_text())
    else:
        extra = ("--shared-outputs", str(EXAMPLES / "shared.outputs.json"))
    assert synth_refused(tmp_path, "team", raw, *extra) == (
        "config error: llm-platform:network.vpc_cidr = '10.71.0.0/16': is not the CIDR of "
        "shared_stack acme/llm-platform/shared's VPC, 10.70.0.0/16 (its vpc_cidr output): "
        "the stack takes network.vpc_cidr for the VPC's range (its network policies, its "
        "adopted output); set "
        "network.vpc_cidr: 10.70.0.0/16"
    )
