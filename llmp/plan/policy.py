"""`llmp policy`: evaluate the CrossGuard pack in-process against a plan from `llmp synth`.

Each rule is called with the argument objects CrossGuard builds: a
`ResourceValidationArgs` per resource (inputs behind the same unknown-checking
proxy, the resource's provider, the rule's config) and one
`StackValidationArgs` of `PolicyResource`s with parents and dependencies
linked. Each `report_violation(message, urn)` becomes a `Violation`.

Policy config is the pack's defaults, then what the stack file implies
(`guardrails.gpu_budget_usd_per_hour` -> `gpu-budget`,
`storage.lustre.node_pool` -> `fsx-in-gpu-pool-az`, `storage.lustre.demand` ->
`fsx-feeds-gpus`), then `--config FILE`.
`stack_policy_config()` writes the same implied config for `pulumi preview
--policy-pack policies --policy-pack-config FILE`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyProviderResource,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    StackValidationArgs,
)
from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy

from llmp.plan import Plan, Resource, read_json
from policies.config import PolicyConfigError, merge, resolve
from policies.cost import BUDGET_KEY
from policies.registry import RULES

__all__ = [
    "PolicyConfigError",
    "Violation",
    "evaluate",
    "failed",
    "load_policy_config",
    "stack_policy_config",
]


@dataclass(frozen=True)
class Violation:
    rule: str
    urn: str
    """The resource's URN; empty for a violation of the whole stack."""
    resource: str
    """The resource's name (`(stack)` for the whole stack)."""
    message: str
    level: str
    """mandatory or advisory."""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def failed(violations: list[Violation]) -> bool:
    return any(v.level == "mandatory" for v in violations)


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------


def load_policy_config(path: Path) -> dict[str, Any]:
    """A CrossGuard policy-config JSON file; PolicyConfigError (one line) when it is not one."""
    data = read_json(path, "policy config")
    if not isinstance(data, dict):
        raise PolicyConfigError(f"policy config {path} must be a JSON object keyed by rule name")
    resolve(data)  # names and levels are checked before anything runs
    return data


def stack_policy_config(stack: str, stack_file: Path | None = None) -> dict[str, Any]:
    """The policy config a stack file implies: its GPU budget and its FSx node pool.

    Empty when the stack has no stack file. Raises ConfigError for an invalid one.
    """
    from llmp.stacks import stack_file as default_stack_file
    from spec.stackfile import load_config, load_stack_file

    path = stack_file or default_stack_file(stack)
    if not path.exists():
        return {}
    cfg = load_config(load_stack_file(str(path)))
    config: dict[str, Any] = {}
    budget = cfg.guardrails.gpu_budget_usd_per_hour
    if budget is not None:
        config["gpu-budget"] = {BUDGET_KEY: budget}
    if cfg.storage is not None and cfg.storage.lustre is not None:
        lustre = cfg.storage.lustre
        config["fsx-in-gpu-pool-az"] = {"node-pool": lustre.node_pool}
        if lustre.demand is not None:
            io = lustre.demand
            demand = {
                "tokens_per_second_per_gpu": io.tokens_per_second_per_gpu,
                "bytes_per_token": io.bytes_per_token,
                "prefetch_factor": io.prefetch_factor,
                "checkpoint_gb": io.checkpoint_gb,
                "write_minutes": io.write_minutes,
            }
            if io.nodes is not None:
                demand["nodes"] = io.nodes
            config["fsx-feeds-gpus"] = {
                "node-pool": lustre.node_pool,
                "demand": demand,
                "gpudirect-storage": lustre.gpudirect_storage,
            }
    return config


# ---------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------


def _opts(resource: Resource) -> PolicyResourceOptions:
    # `protect` is the one lifecycle option a real preview hands CrossGuard
    # (retain_on_delete and import ids never reach the analyzer).
    return PolicyResourceOptions(
        protect=resource.protect,
        ignore_changes=[],
        delete_before_replace=None,
        aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
        additional_secret_outputs=[],
        parent=resource.parent,
    )


def _resource_name(urn: str, by_urn: Mapping[str, Resource]) -> str:
    if not urn:
        return "(stack)"
    if urn in by_urn:
        return by_urn[urn].name
    return urn.rsplit("::", 1)[-1]


def evaluate(
    plan: Plan,
    config: Mapping[str, Any] | None = None,
    *,
    stack_config: bool = True,
    only: Iterable[str] | None = None,
) -> list[Violation]:
    """Run every enabled rule against `plan`, as CrossGuard would during a preview.

    `config` is CrossGuard policy config; with `stack_config`, what the plan's
    stack file implies is applied under it; `only` limits the run to those
    rules. PolicyConfigError on bad config.
    """
    implied = stack_policy_config(plan.stack) if stack_config and plan.stack else {}
    settings = resolve(merge(implied, config))
    resources = plan.resources
    by_urn = {r.urn: r for r in resources}
    providers: dict[str, PolicyProviderResource] = {
        r.urn: PolicyProviderResource(r.type, unknown_checking_proxy(r.inputs), r.urn, r.name)
        for r in resources
        if r.type.startswith("pulumi:providers:")
    }

    def provider_of(r: Resource) -> PolicyProviderResource | None:
        return providers.get(r.provider.split("::id", 1)[0]) if r.provider else None

    violations: list[Violation] = []

    def reporter(rule: str, level: str, default_urn: str | None):
        def report(message: str, urn: str | None = None) -> None:
            # A resource rule's violation is always the resource's (CrossGuard ignores `urn`).
            target = default_urn if default_urn is not None else (urn or "")
            violations.append(
                Violation(rule, target, _resource_name(target, by_urn), message, level)
            )

        return report

    wanted = set(only) if only is not None else None
    enabled = [
        (r, settings[r.name])
        for r in RULES
        if settings[r.name].level != "disabled" and (wanted is None or r.name in wanted)
    ]
    for rule, s in enabled:
        if rule.kind != "resource":
            continue
        for r in resources:
            args = ResourceValidationArgs(
                r.type,
                unknown_checking_proxy(r.inputs),
                r.urn,
                r.name,
                _opts(r),
                provider_of(r),
                dict(s.properties) or None,
            )
            _run(rule.validate, args, reporter(rule.name, s.level, r.urn))

    for rule, s in enabled:
        if rule.kind != "stack":
            continue
        stack_args = StackValidationArgs(
            _policy_resources(resources, provider_of), s.properties or None
        )
        _run(rule.validate, stack_args, reporter(rule.name, s.level, None))
    return violations


def _run(validate: Any, args: Any, report: Any) -> None:
    # CrossGuard reports "can't run policy during preview"; a synthesized plan has no unknowns.
    with contextlib.suppress(UnknownValueError):
        validate(args, report)


def _policy_resources(resources: list[Resource], provider_of: Any) -> list[PolicyResource]:
    built = {
        r.urn: PolicyResource(
            r.type,
            unknown_checking_proxy(r.inputs),
            r.urn,
            r.name,
            _opts(r),
            provider_of(r),
            None,
            [],
            {},
        )
        for r in resources
    }
    for r in resources:
        res = built[r.urn]
        res.parent = built.get(r.parent) if r.parent else None
        res.dependencies = [built[d] for d in r.dependencies if d in built]
    return list(built.values())
