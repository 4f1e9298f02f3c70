"""The registry, the policy config, and the pack that `policies/__main__.py` builds."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pulumi_policy
import pytest

from policies.config import PolicyConfigError, merge, resolve
from policies.registry import RULES

PACK_MAIN = Path(__file__).resolve().parents[2] / "policies" / "__main__.py"


def test_rules_are_named_described_and_cover_every_domain() -> None:
    assert len(RULES) >= 30
    for rule in RULES:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name), rule.name
        assert rule.description and rule.level in ("mandatory", "advisory")
        assert rule.kind in ("resource", "stack")
    domains = {r.domain for r in RULES}
    assert domains == {"s3", "fsx", "eks", "nodes", "iam", "network", "kubernetes", "tags", "cost"}


def test_main_builds_one_pack_of_every_rule(monkeypatch) -> None:
    built = {}

    def fake_pack(**kwargs):
        built.update(kwargs)

    monkeypatch.setattr(pulumi_policy, "PolicyPack", fake_pack)
    runpy.run_path(str(PACK_MAIN), run_name="__main__")
    policies = built["policies"]
    assert [p.name for p in policies] == [r.name for r in RULES]
    by_name = {p.name: p for p in policies}
    assert isinstance(by_name["gpu-budget"], pulumi_policy.StackValidationPolicy)
    assert isinstance(by_name["fsx-kms-key"], pulumi_policy.ResourceValidationPolicy)
    assert by_name["fsx-kms-key"].enforcement_level == pulumi_policy.EnforcementLevel.MANDATORY
    schema = by_name["gpu-budget"].config_schema
    assert schema is not None and "gpu-budget-usd-per-hour" in schema.properties


def test_pack_metadata_file_names_the_python_runtime() -> None:
    import yaml

    meta = yaml.safe_load((PACK_MAIN.parent / "PulumiPolicy.yaml").read_text())
    assert meta["runtime"]["name"] == "python"
    assert meta["runtime"]["options"]["virtualenv"] == "../.venv"


def test_config_sets_levels_and_properties() -> None:
    settings = resolve(
        {
            "s3-access-logging": "disabled",
            "fsx-kms-key": {"enforcementLevel": "advisory"},
            "gpu-budget": {"gpu-budget-usd-per-hour": 10},
            "imds-hop-limit": "remediate",
        }
    )
    assert settings["s3-access-logging"].level == "disabled"
    assert settings["fsx-kms-key"].level == "advisory"
    assert settings["gpu-budget"].properties == {"gpu-budget-usd-per-hour": 10}
    assert settings["imds-hop-limit"].level == "mandatory"
    assert settings["required-tags"].properties == {"tags": ["team", "cost-center", "stack"]}


def test_config_all_sets_every_level_under_rule_entries() -> None:
    settings = resolve({"all": "advisory", "gpu-budget": "mandatory"})
    assert settings["fsx-kms-key"].level == "advisory"
    assert settings["gpu-budget"].level == "mandatory"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"no-such-rule": "advisory"}, "unknown rules no-such-rule"),
        ({"fsx-kms-key": "loud"}, "enforcementLevel 'loud'"),
        ({"gpu-budget": {"budget": 1}}, "unknown property 'budget'"),
        ({"fsx-kms-key": 3}, "expected a level or an object"),
    ],
)
def test_config_errors_are_one_line(config: dict, message: str) -> None:
    with pytest.raises(PolicyConfigError, match=re.escape(message)):
        resolve(config)


def test_merge_lets_later_configs_win_key_by_key() -> None:
    merged = merge(
        {"gpu-budget": {"gpu-budget-usd-per-hour": 1}},
        {"gpu-budget": "advisory"},
        {"gpu-budget": {"gpu-budget-usd-per-hour": 2}},
    )
    assert merged == {"gpu-budget": {"enforcementLevel": "advisory", "gpu-budget-usd-per-hour": 2}}
