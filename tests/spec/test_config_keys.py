"""Which keys a stack file may hold: namespaces the program reads, each key once.

A key the program never reads is refused with one line and the key it most
likely means: `llm_platform:guardrails` would otherwise drop the guardrails.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi.runtime import config as runtime_config
from pulumi.runtime.config import set_all_config

from llmp.plan.synth import SynthError, engine_config, run_program
from llmp.stacks import PROGRAM_DIR, REPO_ROOT
from spec.errors import ConfigError
from spec.keys import (
    AWS_PROVIDER_KEYS,
    CONFIG_NAMESPACES,
    GRAFANA_PASSWORD_KEY,
    MONITORING_SECRETS_NAMESPACE,
    NAMESPACE,
    SERVING_KEYS_NAMESPACE,
)
from spec.stackfile import load_config, load_stack_file
from tests.conftest import raw_stack

NAMESPACES = "aws, llm-platform, llm-platform-monitoring, llm-platform-serving, pulumi"
SECURE = {"secure": "v1:c2VjcmV0"}


@pytest.fixture
def restore_runtime_config() -> Iterator[None]:
    """set_all_config is global to the process: leave it as the next test expects."""
    config, secrets = runtime_config.CONFIG.get(), runtime_config._SECRET_KEYS.get()
    yield
    runtime_config.CONFIG.set(config)
    runtime_config._SECRET_KEYS.set(secrets)


def error_lines(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    return str(info.value).splitlines()


def renamed(stack: str, old: str, new: str) -> dict[str, Any]:
    raw = raw_stack(stack)
    raw[new] = raw.pop(old)
    return raw


# ---------------------------------------------------------------------------
# Namespaces
# ---------------------------------------------------------------------------


def test_a_typo_in_the_namespace_is_refused_not_a_silent_loss_of_the_guardrails() -> None:
    raw = renamed("finetune", "llm-platform:guardrails", "llm_platform:guardrails")
    assert error_lines(raw) == [
        "config error: llm_platform:guardrails = {'gpu_budget_usd_per_hour': 200}: unknown "
        "config namespace llm_platform; did you mean llm-platform:guardrails? (the namespaces "
        f"read: {NAMESPACES})"
    ]


def test_a_misspelt_namespace_is_reported_before_the_section_it_leaves_missing() -> None:
    raw = renamed("pretrain", "llm-platform:tags", "llm-platfrom:tags")
    assert error_lines(raw) == [
        "config error: llm-platfrom:tags = {'team': 'foundation-models', 'cost_center': "
        "'cc-4100'}: unknown config namespace llm-platfrom; did you mean llm-platform:tags? "
        f"(the namespaces read: {NAMESPACES})",
        "config error: llm-platform:tags = <missing>: required",
    ]


def test_a_key_without_a_namespace_is_refused_with_the_key_it_means() -> None:
    raw = renamed("pretrain", "llm-platform:guardrails", "guardrails")
    [line] = error_lines(raw)
    assert line.startswith(
        "config error: guardrails = {'gpu_budget_usd_per_hour': 1500}: not a namespace:name "
        "key; did you mean llm-platform:guardrails? "
    ), line
    raw = renamed("pretrain", "aws:region", "region")
    assert (
        "region = 'us-east-1': not a namespace:name key; did you mean aws:region?"
        in (error_lines(raw)[0])
    )


def test_a_namespace_the_program_does_not_read_is_refused() -> None:
    raw = {**raw_stack("pretrain"), "kubernetes:context": "prod"}
    assert error_lines(raw) == [
        "config error: kubernetes:context = 'prod': unknown config namespace kubernetes "
        f"(the namespaces read: {NAMESPACES})"
    ]


def test_the_accepted_namespaces_are_the_ones_listed_in_one_place() -> None:
    assert set(CONFIG_NAMESPACES) == {
        NAMESPACE,
        "aws",
        "pulumi",
        SERVING_KEYS_NAMESPACE,
        MONITORING_SECRETS_NAMESPACE,
    }
    assert ", ".join(sorted(CONFIG_NAMESPACES)) == NAMESPACES


def test_pulumi_settings_are_accepted() -> None:
    raw = {
        **raw_stack("pretrain"),
        "pulumi:tags": {"owner": "ml-platform"},
        "pulumi:disable-default-providers": ["kubernetes"],
    }
    assert load_config(raw) == load_config(raw_stack("pretrain"))


def test_the_aws_providers_other_settings_are_refused_not_silently_ignored() -> None:
    # The program's AWS providers are explicit: an aws:profile here would be ignored and
    # `pulumi up` would deploy with the environment's credentials, maybe elsewhere.
    raw = {
        **raw_stack("pretrain"),
        "aws:profile": "platform-prod",
        "aws:assumeRoles": [{"roleArn": "arn:aws:iam::123456789012:role/deploy"}],
        "aws:secretKey": SECURE,
    }
    lines = error_lines(raw)
    assert [line.split(" = ")[0] for line in lines] == [
        "config error: aws:profile",
        "config error: aws:assumeRoles",
        "config error: aws:secretKey",
    ]
    assert lines[0] == (
        "config error: aws:profile = 'platform-prod': is not read: the program's AWS "
        "providers are explicit and take only aws:region from the stack file; give "
        "credentials, profiles and roles through the environment (AWS_PROFILE, "
        "AWS_ACCESS_KEY_ID, ...) and remove this key"
    )
    assert lines[2].startswith("config error: aws:secretKey = [secret]: is not read")


def test_a_misspelt_aws_setting_is_refused_with_the_one_it_means() -> None:
    raw = {**raw_stack("pretrain"), "aws:profil": "platform-prod"}
    assert error_lines(raw) == [
        "config error: aws:profil = 'platform-prod': not a setting of Pulumi's AWS provider; "
        "did you mean aws:profile? (this program reads aws:region only)"
    ]


def test_a_misspelt_aws_credential_is_refused_without_showing_it() -> None:
    raw = {**raw_stack("pretrain"), "aws:secretkey": "wJalrXUtnFEMI/K7MDENG"}
    assert error_lines(raw) == [
        "config error: aws:secretkey = [secret]: not a setting of Pulumi's AWS provider; "
        "did you mean aws:secretKey? (this program reads aws:region only)"
    ]


def test_the_aws_settings_are_the_installed_providers() -> None:
    """The list in spec/keys.py is pulumi-aws's `aws:*` config: upgrade both together."""
    import pulumi_aws.config

    source = (Path(pulumi_aws.config.__file__).parent / "vars.py").read_text()
    provider_keys = set(re.findall(r"__config__\.get\w*\('(\w+)'\)", source))
    assert provider_keys, "pulumi_aws/config/vars.py no longer reads its keys this way"
    assert provider_keys == AWS_PROVIDER_KEYS


def test_the_grafana_password_and_the_alert_receivers_are_the_monitoring_keys() -> None:
    for key in (
        GRAFANA_PASSWORD_KEY,
        "slackWebhookUrl",
        "pagerdutyRoutingKey",
        "slackWebhookUrl-foundation",
        "pagerdutyRoutingKey-vision-eval",
    ):
        load_config({**raw_stack("pretrain"), f"{MONITORING_SECRETS_NAMESPACE}:{key}": SECURE})
    raw = {**raw_stack("pretrain"), f"{MONITORING_SECRETS_NAMESPACE}:grafanaPassword": SECURE}
    assert error_lines(raw) == [
        "config error: llm-platform-monitoring:grafanaPassword = [secret]: unknown key; the "
        "program reads llm-platform-monitoring:grafanaAdminPassword, slackWebhookUrl[-<team>] "
        "and pagerdutyRoutingKey[-<team>] only"
    ]


def test_an_api_key_names_a_serving_client() -> None:
    raw = raw_stack("inference")
    load_config({**raw, f"{SERVING_KEYS_NAMESPACE}:chat-app": SECURE})
    assert error_lines({**raw, f"{SERVING_KEYS_NAMESPACE}:chat-ap": SECURE}) == [
        "config error: llm-platform-serving:chat-ap = [secret]: not a client in "
        "serving.api.clients (chat-app, batch-eval); did you mean "
        "llm-platform-serving:chat-app?; the gateway reads the key of each listed client only"
    ]
    assert error_lines({**raw_stack("pretrain"), f"{SERVING_KEYS_NAMESPACE}:chat": SECURE}) == [
        "config error: llm-platform-serving:chat = [secret]: not a client in "
        "serving.api.clients (none); the gateway reads the key of each listed client only"
    ]


def _config_calls(path: Path) -> Iterator[tuple[str, str | None]]:
    """(where, namespace) of each `pulumi.Config(...)` in a module; None: not resolvable."""
    tree = ast.parse(path.read_text())
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    for node in ast.walk(tree):
        func = getattr(node, "func", None)
        if not (
            isinstance(node, ast.Call)
            and isinstance(func, ast.Attribute)
            and func.attr == "Config"
            and isinstance(func.value, ast.Name)
            and func.value.id == "pulumi"
        ):
            continue
        where = f"{path.relative_to(REPO_ROOT)}:{node.lineno}"
        if not node.args:
            yield where, NAMESPACE  # Config() reads the project's own namespace
        elif isinstance(node.args[0], ast.Constant):
            yield where, node.args[0].value
        elif isinstance(node.args[0], ast.Name):
            yield where, constants.get(node.args[0].id)
        else:
            yield where, None


def test_every_config_namespace_the_code_reads_is_accepted() -> None:
    """A new `pulumi.Config("x")` anywhere in the program must be listed in CONFIG_NAMESPACES,
    or its keys would be refused in every stack file."""
    calls = [
        call
        for package in ("spec", "program", "components", "workloads", "monitoring", "policies")
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
        for call in _config_calls(path)
    ]
    assert calls, "found no pulumi.Config(...) at all"
    for where, namespace in calls:
        assert namespace in CONFIG_NAMESPACES, f"{where}: pulumi.Config({namespace!r})"
    read = {namespace for _, namespace in calls}
    assert {SERVING_KEYS_NAMESPACE, MONITORING_SECRETS_NAMESPACE} <= read


def test_the_components_read_the_namespaces_the_schema_accepts() -> None:
    from components import monitoring, serving

    assert serving.KEY_CONFIG_NAMESPACE == SERVING_KEYS_NAMESPACE
    assert monitoring.SECRET_CONFIG_NAMESPACE == MONITORING_SECRETS_NAMESPACE
    assert monitoring.GRAFANA_PASSWORD_KEY == GRAFANA_PASSWORD_KEY


def test_the_config_reference_says_which_namespaces_a_stack_file_may_use() -> None:
    page = (REPO_ROOT / "docs/reference/config.md").read_text()
    section = page.split("# Stack config reference", 1)[1].split(
        "<!-- config-reference:start -->", 1
    )[0]
    for namespace in CONFIG_NAMESPACES:
        assert f"`{namespace}:" in section, namespace


# ---------------------------------------------------------------------------
# The program under the engine refuses them the same way
# ---------------------------------------------------------------------------


def test_the_program_refuses_an_unknown_namespace_like_synth(restore_runtime_config) -> None:
    """Under `pulumi up` the engine hands the program every key as a string: same lines."""
    raw = renamed("finetune", "llm-platform:guardrails", "llm_platform:guardrails")
    raw["llm-platform:node_pools"]["h100"]["desired_size"] = 3
    expected = error_lines(raw)
    assert len(expected) == 2
    config, secret_keys = engine_config(raw)
    set_all_config(config, secret_keys)
    with pytest.raises(SynthError) as info:
        run_program("finetune", "us-west-2")
    assert str(info.value).splitlines() == expected


LANGUAGE_HOST = """
import os, sys
from pathlib import Path
from llmp.plan.synth import SynthError, run_program
try:
    run_program('finetune', 'us-west-2', Path.cwd())
except SynthError as exc:  # the RunError of program/__main__.py: its message, no traceback
    print(exc)
    sys.exit(3)
"""


def test_the_program_run_by_the_language_host_refuses_it_too() -> None:
    """Config from PULUMI_CONFIG, only program/ on sys.path: as `pulumi up` runs it."""
    raw = renamed("finetune", "llm-platform:tags", "llm_platform:tags")
    config, _ = engine_config(raw)
    result = subprocess.run(
        [sys.executable, "-I", "-c", LANGUAGE_HOST],
        cwd=PROGRAM_DIR,
        env={"PULUMI_CONFIG": json.dumps(config), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 3, result.stderr[-2000:]
    assert result.stdout.splitlines() == error_lines(raw)


# ---------------------------------------------------------------------------
# The stack file: top-level keys, duplicate keys
# ---------------------------------------------------------------------------


def test_a_stack_files_own_top_level_keys_stay_accepted(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    doc = {
        "secretsprovider": "awskms://alias/pulumi?region=us-east-1",
        "encryptedkey": "AQICAHh...",
        "encryptionsalt": "v1:abc:def",
        "environment": ["llm-platform/prod"],
        "config": raw_stack("pretrain"),
    }
    path.write_text(yaml.safe_dump(doc))
    assert load_config(load_stack_file(str(path))) == load_config(raw_stack("pretrain"))


def _stack_text(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text(text)
    return path


def test_a_config_key_given_twice_is_refused_naming_it_and_its_line(tmp_path: Path) -> None:
    path = _stack_text(
        tmp_path,
        "config:\n"
        "  aws:region: us-east-1\n"
        "  llm-platform:guardrails:\n"
        "    gpu_budget_usd_per_hour: 100\n"
        "  llm-platform:tags: {team: t, cost_center: c}\n"
        "  llm-platform:guardrails: {}\n",
    )
    with pytest.raises(ConfigError) as info:
        load_stack_file(str(path))
    assert str(info.value) == (
        f"config error: {path}: duplicate key 'llm-platform:guardrails' at line 6 (first at "
        "line 3); YAML would keep only the last one: merge them or remove one"
    )


def test_a_key_twice_deep_inside_a_section_is_refused(tmp_path: Path) -> None:
    path = _stack_text(
        tmp_path,
        "config:\n"
        "  llm-platform:node_pools:\n"
        "    h100:\n"
        "      instance_type: p5.48xlarge\n"
        "      max_size: 16\n"
        "      efa: true\n"
        "      max_size: 2\n",
    )
    with pytest.raises(ConfigError) as info:
        load_stack_file(str(path))
    assert str(info.value) == (
        f"config error: {path}: duplicate key 'max_size' at line 7 (first at line 5); "
        "YAML would keep only the last one: merge them or remove one"
    )


def test_a_top_level_key_twice_is_refused(tmp_path: Path) -> None:
    path = _stack_text(tmp_path, "config:\n  aws:region: us-east-1\nconfig: {}\n")
    with pytest.raises(ConfigError) as info:
        load_stack_file(str(path))
    assert "duplicate key 'config' at line 3 (first at line 1)" in str(info.value)


def test_a_merge_key_may_be_overridden(tmp_path: Path) -> None:
    path = _stack_text(
        tmp_path,
        "config:\n"
        "  llm-platform:node_pools:\n"
        "    a: &pool {instance_type: p5.48xlarge, max_size: 2}\n"
        "    b:\n"
        "      <<: *pool\n"
        "      max_size: 4\n",
    )
    pools = load_stack_file(str(path))["llm-platform:node_pools"]
    assert pools["b"] == {"instance_type": "p5.48xlarge", "max_size": 4}


def test_the_stack_files_hold_each_key_once() -> None:
    for stack in ("pretrain", "finetune", "inference"):
        assert load_stack_file(str(REPO_ROOT / "stacks" / f"Pulumi.{stack}.yaml"))


def test_an_unknown_top_level_key_of_the_stack_file_is_refused(tmp_path) -> None:
    # `confg:` would otherwise leave the stack with no config at all.
    path = _stack_text(tmp_path, "confg:\n  aws:region: us-east-1\n")
    with pytest.raises(ConfigError) as info:
        load_stack_file(str(path))
    assert str(info.value) == (
        f"config error: {path}: top-level key 'confg' is not one of a Pulumi stack file's "
        "(config, secretsprovider, encryptedkey, encryptionsalt, environment); did you mean "
        "config? (a misspelt `config` drops every setting)"
    )
    accepted = _stack_text(
        tmp_path, "secretsprovider: awskms://alias/x\nencryptedkey: abc\nconfig: {}\n"
    )
    assert load_stack_file(str(accepted)) == {}
