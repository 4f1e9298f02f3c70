"""The ledger: every resource the program declares, as the program declares it.

The stack's `cost` output prices the program's own resources (`program.cost`),
not its config: a resource added to the composition is priced (or named as not
priced) without anyone editing the cost model. Inside `pulumi up` the program
cannot read the engine's plan, so the ledger writes down each registration as
it is made, through a stack transformation (run in-process by the SDK for every
resource, the same under the engine and under `llmp synth`'s mocks):

- its type, its name and the top-level component it belongs to;
- its inputs as the engine names them (camelCase, `*Args` expanded), where the
  program knows them: a value that is another resource's output is unknown
  until that resource exists (`COMPUTED`), as it is in a real preview.

`llmp` prices a synthesized plan with the same function (its resources as
`Declared`), and a test holds the two equal, so the ledger cannot drift from
what the engine is handed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi import _types

COMPUTED = "<computed>"
"""An input the program does not know before the engine runs (another resource's output)."""


@dataclass(frozen=True)
class Declared:
    """One resource, for pricing: type, name, top-level component, inputs."""

    type: str
    name: str
    component: str
    """The name of the top-level resource it belongs to (itself at the top)."""
    inputs: Mapping[str, Any]
    custom: bool = True


@dataclass
class Ledger:
    """What the program has declared so far, in order."""

    declared: list[Declared] = field(default_factory=list)
    _components: dict[int, str] = field(default_factory=dict)
    _closed: str | None = None

    def record(self, args: pulumi.ResourceTransformationArgs) -> None:
        if self._closed is not None:
            raise RuntimeError(
                f"{args.type_} {args.name} is declared after {self._closed} was priced: "
                "declare every resource before the stack's outputs"
            )
        parent = args.opts.parent if args.opts is not None else None
        # The stack itself was never recorded: its children are the top-level resources.
        component = self._components.get(id(parent), args.name)
        self._components[id(args.resource)] = component
        self.declared.append(
            Declared(
                type=args.type_,
                name=args.name,
                component=component,
                inputs=_top_level(args.resource, args.props or {}),
                custom=isinstance(args.resource, pulumi.CustomResource),
            )
        )

    def close(self, what: str) -> list[Declared]:
        """Everything declared; any later declaration is an error (it would go unpriced)."""
        self._closed = what
        return list(self.declared)


def start() -> Ledger:
    """A ledger of every resource declared from now on in this stack."""
    ledger = Ledger()

    def transformation(
        args: pulumi.ResourceTransformationArgs,
    ) -> pulumi.ResourceTransformationResult | None:
        ledger.record(args)
        return None  # nothing is changed

    pulumi.runtime.register_stack_transformation(transformation)
    return ledger


_CAMEL = re.compile(r"_([a-z0-9])")


def _top_level(resource: pulumi.Resource, props: Mapping[str, Any]) -> dict[str, Any]:
    """The resource's own inputs under the engine's names (its class's property names)."""
    names = _types.resource_py_to_pulumi_names(type(resource))
    out = {}
    for key, value in props.items():
        if value is None or key.startswith("__"):
            continue
        name = names.get(key) or _CAMEL.sub(lambda m: m.group(1).upper(), key)
        out[name] = static(value)
    return out


def static(value: Any) -> Any:
    """`value` with `*Args` objects as dicts under their engine names, and every output of
    another resource (unknown to the program) as COMPUTED."""
    if isinstance(value, pulumi.Output | pulumi.Resource) or hasattr(value, "__await__"):
        return COMPUTED
    if _types.is_input_type(type(value)):
        return {k: static(v) for k, v in _types.input_type_to_dict(value).items()}
    if isinstance(value, Mapping):
        return {k: static(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [static(v) for v in value]
    return value
