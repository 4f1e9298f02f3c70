"""CrossGuard policy config: enforcement levels and rule properties, merged with defaults.

The format is the one `pulumi preview --policy-pack-config FILE` reads:

    {"all": "advisory",                               # every rule (optional)
     "s3-access-logging": "disabled",                 # a level alone
     "gpu-budget": {"enforcementLevel": "mandatory", "gpu-budget-usd-per-hour": 1500}}

Levels: advisory, mandatory, remediate (treated as mandatory, as CrossGuard
does for these validate-only rules) and disabled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.registry import BY_NAME, RULES, Rule

LEVELS = ("advisory", "mandatory", "remediate", "disabled")


class PolicyConfigError(ValueError):
    """Policy config that names an unknown rule or level (one line)."""


@dataclass(frozen=True)
class RuleSettings:
    level: str
    """advisory, mandatory or disabled."""
    properties: dict[str, Any]
    """What `args.get_config()` returns to the rule."""


def _level(value: Any, where: str) -> str:
    if value not in LEVELS:
        raise PolicyConfigError(
            f"{where}: enforcementLevel {value!r}; use one of {', '.join(LEVELS)}"
        )
    return "mandatory" if value == "remediate" else str(value)


def defaults(rule: Rule) -> dict[str, Any]:
    return {k: v["default"] for k, v in rule.config.items() if "default" in v}


def resolve(config: Mapping[str, Any] | None = None) -> dict[str, RuleSettings]:
    """Each rule's level and properties: defaults, then `all`, then the rule's own entry."""
    if config is not None and not isinstance(config, Mapping):
        raise PolicyConfigError("policy config must be a JSON object keyed by rule name")
    config = dict(config or {})
    unknown = sorted(k for k in config if k != "all" and k not in BY_NAME)
    if unknown:
        raise PolicyConfigError(
            f"policy config names unknown rules {', '.join(unknown)}; known: "
            f"{', '.join(sorted(BY_NAME))}"
        )
    pack_level: str | None = None
    if "all" in config:
        entry = config["all"]
        value = entry.get("enforcementLevel") if isinstance(entry, Mapping) else entry
        pack_level = _level(value, "all")
    settings = {}
    for rule in RULES:
        level = pack_level or rule.level
        properties = defaults(rule)
        entry = config.get(rule.name)
        if isinstance(entry, str):
            level = _level(entry, rule.name)
        elif isinstance(entry, Mapping):
            for key, value in entry.items():
                if key == "enforcementLevel":
                    level = _level(value, rule.name)
                elif key not in rule.config:
                    known = ", ".join(sorted(rule.config)) or "none"
                    raise PolicyConfigError(
                        f"{rule.name}: unknown property {key!r}; known properties: {known}"
                    )
                else:
                    properties[key] = value
        elif entry is not None:
            raise PolicyConfigError(f"{rule.name}: expected a level or an object, got {entry!r}")
        settings[rule.name] = RuleSettings(level, properties)
    return settings


def merge(*configs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Later configs win; a rule's object entries are merged key by key."""
    out: dict[str, Any] = {}
    for config in configs:
        for name, entry in (config or {}).items():
            if isinstance(entry, str):
                entry = {"enforcementLevel": entry}
            previous = out.get(name)
            if isinstance(previous, Mapping) and isinstance(entry, Mapping):
                out[name] = {**previous, **entry}
            else:
                out[name] = dict(entry) if isinstance(entry, Mapping) else entry
    return out
