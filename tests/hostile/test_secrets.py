"""A canary secret in the stack config never reaches the plan, the manifests, the
console or the logs; secret outputs are `[secret]` in plan.json."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi.runtime import config as runtime_config
from pulumi.runtime.config import set_all_config

from llmp.plan.synth import SECRET, SynthError, engine_config, run_program, synthesize, write_plan
from llmp.stacks import REPO_ROOT
from spec.errors import ConfigError
from spec.stackfile import load_config
from tests.conftest import raw_stack

CLI = (sys.executable, "-m", "llmp.cli")
CANARY = "CANARY-7f3a9c"
CIPHERTEXT = "v1:Q0FOQVJZLWNpcGhlcnRleHQtN2YzYTlj"


@pytest.fixture(autouse=True)
def _restore_runtime_config() -> Iterator[None]:
    """set_all_config is global to the process: leave it as the next test expects."""
    config, secrets = runtime_config.CONFIG.get(), runtime_config._SECRET_KEYS.get()
    yield
    runtime_config.CONFIG.set(config)
    runtime_config._SECRET_KEYS.set(secrets)


GRAFANA = "llm-platform-monitoring:grafanaAdminPassword"


def everything_written(target: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(target.rglob("*")) if p.is_file())


def with_secrets(stack: str) -> dict[str, Any]:
    """A stack file as a user writes one: an encrypted key outside the llm-platform namespace
    that the program reads (Grafana's admin password, which becomes a Kubernetes Secret)."""
    raw = raw_stack(stack)
    raw[GRAFANA] = {"secure": CIPHERTEXT}
    return raw


def test_a_decrypted_secret_stays_out_of_plan_manifests_and_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the engine hands the program: the plaintext, flagged secret."""
    caplog.set_level(logging.DEBUG)
    config, secret_keys = engine_config(with_secrets("pretrain"))
    assert config[GRAFANA] == SECRET and secret_keys == [GRAFANA]
    config[GRAFANA] = CANARY  # decrypted, as under `pulumi up`
    set_all_config(config, secret_keys)
    assert runtime_config.is_config_secret(GRAFANA)
    plan = run_program("pretrain", "us-east-1")
    target = write_plan(plan, tmp_path)
    written = everything_written(target)
    assert (target / "manifests").is_dir() and plan.manifests()
    assert CANARY not in written
    assert CANARY not in json.dumps(plan.to_dict())
    assert json.loads((target / "plan.json").read_text())["outputs"]["kubeconfig"] == SECRET
    captured = capsys.readouterr()
    assert CANARY not in captured.out + captured.err
    assert CANARY not in caplog.text


def test_a_secret_resource_input_and_export_are_redacted(tmp_path: Path) -> None:
    """The program reads no secret today: a minimal program that does, through the same engine."""
    program = tmp_path / "program"
    program.mkdir()
    (program / "__main__.py").write_text(
        "import pulumi\n"
        "import pulumi_aws as aws\n"
        "token = pulumi.Config('aws').require_secret('secretKey')\n"
        "param = aws.ssm.Parameter('canary', type='SecureString', value=token)\n"
        "plain = aws.ssm.Parameter('plain', type='String', value='v', description='not-secret')\n"
        "pulumi.export('token', token)\n"
        "pulumi.export('nested', {'inner': pulumi.Output.secret('" + CANARY + "')})\n"
        "pulumi.export('param_value', param.value)\n"
    )
    set_all_config({"aws:region": "us-east-1", "aws:secretKey": CANARY}, ["aws:secretKey"])
    plan = run_program("canary", "us-east-1", program)
    text = (write_plan(plan, tmp_path / "out") / "plan.json").read_text()
    assert CANARY not in text
    doc = json.loads(text)
    assert doc["outputs"]["token"] == SECRET
    # A secret inside an object makes the whole object secret on the wire.
    assert doc["outputs"]["nested"] in (SECRET, {"inner": SECRET})
    assert doc["outputs"]["param_value"] == SECRET
    inputs = {r["name"]: r["inputs"] for r in doc["resources"]}
    assert inputs["canary"]["value"] == SECRET
    assert inputs["plain"]["description"] == "not-secret"


def test_synth_cli_prints_and_writes_no_secret(tmp_path: Path) -> None:
    """`llmp synth --json` in a real process, with the canary in the stack file's ciphertext,
    in PULUMI_CONFIG as a secret, and in the AWS credential variables."""
    config_file = tmp_path / "Pulumi.canary.yaml"
    config_file.write_text(yaml.safe_dump({"config": with_secrets("inference")}))
    out = tmp_path / "out"
    env = {
        **os.environ,
        "PULUMI_CONFIG": json.dumps({GRAFANA: CANARY}),
        "PULUMI_CONFIG_SECRET_KEYS": json.dumps([GRAFANA]),
        "AWS_SECRET_ACCESS_KEY": CANARY,
        "AWS_SESSION_TOKEN": CANARY,
    }
    result = subprocess.run(
        [*CLI, "synth", "canary", "--config", str(config_file), "--json", "--out", str(out)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    for secret in (CANARY, CIPHERTEXT):
        assert secret not in result.stdout
        assert secret not in result.stderr
        assert secret not in everything_written(out)
    plan = json.loads(result.stdout)
    assert plan["outputs"]["kubeconfig"] == SECRET
    assert json.loads((out / "canary" / "plan.json").read_text()) == plan


def test_an_encrypted_llm_platform_key_is_refused_without_showing_it() -> None:
    raw = raw_stack("inference")
    raw["llm-platform:tags"] = {"secure": CIPHERTEXT}
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    assert str(info.value) == (
        "config error: llm-platform:tags = [secret]: is encrypted (secure:); llm-platform "
        "keys and aws:region hold no secrets: set the value in plain text"
    )


def test_a_bad_secret_llm_platform_value_is_not_echoed_by_the_program() -> None:
    """Under the engine a secret key arrives decrypted: its error must not print it."""
    config, _ = engine_config(raw_stack("inference"))
    config["llm-platform:tags"] = json.dumps(
        {"team": "t", "cost_center": "c", "extra": {"owner": [CANARY]}}
    )
    set_all_config(config, ["llm-platform:tags"])
    with pytest.raises(SynthError) as info:
        run_program("canary", "us-east-1")
    message = str(info.value)
    assert message.startswith("config error: llm-platform:tags.extra.owner = [secret]: "), message
    assert CANARY not in message


def test_a_secret_region_is_not_echoed_in_another_keys_error() -> None:
    raw = raw_stack("inference")  # its zones are us-east-1's
    raw["aws:region"] = "eu-central-2"
    with pytest.raises(ConfigError) as info:
        load_config(raw, secret_keys=["aws:region"])
    message = str(info.value)
    assert message.startswith("config error: llm-platform:network.availability_zones.0 = ")
    assert "eu-central-2" not in message


def test_a_secret_unknown_region_is_refused_without_showing_it() -> None:
    raw = raw_stack("inference")
    raw["aws:region"] = "eu-" + CANARY
    with pytest.raises(ConfigError) as info:
        load_config(raw, secret_keys=["aws:region"])
    message = str(info.value)
    assert message.startswith("config error: aws:region = [secret]: not an AWS region"), message
    assert CANARY not in message


def test_secrets_stay_out_of_every_line_of_a_report() -> None:
    """Several problems, one line each: the decrypted secret is in none of them."""
    raw = raw_stack("inference")
    raw["llm-platform:tags"] = {"team": CANARY, "cost_center": ["c"], "nope": CANARY}
    raw["llm_platform:guardrails"] = {"gpu_budget_usd_per_hour": CANARY}
    raw["aws:secretkey"] = CANARY  # a misspelt credential, not flagged secret
    with pytest.raises(ConfigError) as info:
        load_config(raw, secret_keys=["llm-platform:tags", "llm_platform:guardrails"])
    lines = str(info.value).splitlines()
    assert len(lines) == 4, lines
    assert lines[0].startswith("config error: llm_platform:guardrails = [secret]: "), lines
    assert lines[1].startswith("config error: aws:secretkey = [secret]: "), lines
    assert all(line.startswith("config error: ") for line in lines), lines
    assert not any(CANARY in line for line in lines), lines


def test_a_plain_text_api_key_is_refused_without_showing_it() -> None:
    raw = raw_stack("inference")
    raw["llm-platform-serving:chat-app"] = CANARY
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    assert str(info.value) == (
        "config error: llm-platform-serving:chat-app = [secret]: is a secret in plain text; "
        "set it with `pulumi config set --secret llm-platform-serving:chat-app`"
    )


def test_synthesize_with_a_secure_key_keeps_the_ciphertext_out(tmp_path: Path) -> None:
    plan = synthesize("inference", with_secrets("inference"))
    assert CIPHERTEXT not in everything_written(write_plan(plan, tmp_path))
