"""What a change of each input does, per resource type: `replacement.yaml`, typed.

One table for every type a stack declares. Each input path a plan records is
classified as updated in place (`update`), forcing a new resource (`replace`),
or `conditional`: replaced, or refused by the API, only for some changes (an
FSx capacity that goes down, an EKS version that skips a minor version). The
classes come from the providers' own code, named per type with the commit
read and the date: the Terraform AWS provider's schema (`ForceNew`,
`RequiresReplace`, `CustomizeDiff`) as pulumi-aws bridges it, and
pulumi-kubernetes's table of fields that replace an object.

Input paths are the camelCase paths of `llmp synth`'s plans, dotted through
objects. A pattern names a path and everything under it (`tags` covers
`tags.Name`); `[]` stands for any list index and `**` for any path. An input
that matches several patterns takes the strongest class: a refusal or a
replacement wins over an update, so `update: ["**"]` reads "everything else
is updated in place".

`llmp diff` (llmp/diff/replacements.py) reads this table; a test fails when a plan holds
a (type, input) pair it does not classify, so no type enters the program
unclassified.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from spec.catalog import YAML_LOADER

TABLE_PATH = Path(__file__).with_name("replacement.yaml")

Condition = Literal[
    "changed", "decreased", "increased", "removed", "added", "skips_minor", "to", "cascaded"
]
"""When a conditional input replaces (or is refused):

- changed: any change; decreased / increased: a smaller / larger number or version
  (1.31, 2.15, v1.19.2-eksbuild.1), or a value earlier / later in the input's `order`;
  to: a new value among `values` that the old one was not; removed / added: the block
  or value is dropped / set where it was absent; skips_minor: a version that moves up
  more than one minor version (1.31 -> 1.33); cascaded: the new value is an output of
  a resource that is itself replaced (unknown until it exists), through one of the
  types in `via` when given (a subnet of a new VPC)."""

Verdict = Literal["update", "replace", "conditional"]


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A leaf path matches `pattern` when it is the path or lies under it."""
    if pattern == "**":
        return re.compile(r".*")
    body = re.escape(pattern).replace(r"\[\]", r"\[\d+\]").replace(r"\*\*", r".*")
    return re.compile(body + r"(?:$|[.\[].*)")


class ReplaceInput(_Data):
    """An input whose change forces a new resource."""

    input: str = Field(description="a path pattern (`[]` any index, `**` anything)")
    unordered: bool = Field(
        False, description="a Terraform set (TypeSet): the same items in another order is no change"
    )

    @functools.cached_property
    def regex(self) -> re.Pattern[str]:
        return _pattern_regex(self.input)

    def matches(self, path: str) -> bool:
        return bool(self.regex.fullmatch(path))


class Conditional(_Data):
    """An input updated in place except for some changes, which replace or are refused."""

    input: str = Field(description="a concrete path (no pattern): the value the conditions read")
    when: tuple[Condition, ...]
    then: Literal["replace", "refuse"] = Field(
        description="replace: the provider deletes and re-creates it; refuse: the API rejects "
        "the update, so `pulumi up` fails there"
    )
    reason: str = Field(description="the provider's rule, in a sentence, for the report")
    order: tuple[str, ...] = Field(
        (), description="the values in the order decreased/increased compare them by"
    )
    values: tuple[str, ...] = Field((), description="for `to`: the values it lands on")
    via: tuple[str, ...] = Field(
        (),
        description="for `cascaded`: only when the replacement came through one of these "
        "types (a subnet replaced because its VPC is)",
    )

    @field_validator("when", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _values_for_to(self) -> Conditional:
        if ("to" in self.when) != bool(self.values):
            raise ValueError(f"{self.input}: `values` goes with `when: to`, and only with it")
        return self

    def rank(self, value: Any) -> tuple[float, ...] | None:
        """A value's place for decreased/increased: in `order` when given, else as a version."""
        if self.order:
            return (float(self.order.index(value)),) if value in self.order else None
        return version_key(value)

    @field_validator("input")
    @classmethod
    def _concrete(cls, value: str) -> str:
        if "[]" in value or "*" in value:
            raise ValueError(f"a conditional input is a concrete path, not a pattern: {value}")
        return value

    @functools.cached_property
    def regex(self) -> re.Pattern[str]:
        return _pattern_regex(self.input)

    def matches(self, path: str) -> bool:
        return bool(self.regex.fullmatch(path))


class _Rules(_Data):
    replace: tuple[ReplaceInput, ...] = ()
    update: tuple[str, ...] = ()
    conditional: tuple[Conditional, ...] = ()

    @field_validator("replace", mode="before")
    @classmethod
    def _inputs(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return [{"input": v} if isinstance(v, str) else v for v in value]
        return value


class Base(_Rules):
    """Rules many types share (every Kubernetes object replaces on a new name)."""

    source: str
    name_input: str | None = None


class TypeRule(_Rules):
    """How one Pulumi type's inputs change, and whether losing it is a loud event."""

    source: str = Field(description="the provider code read: repository, file, commit")
    read: str = Field(description="when it was read (YYYY-MM-DD)")
    terraform: str | None = Field(None, description="the Terraform resource it bridges")
    base: str | None = Field(None, description="a `bases` entry whose rules this type adds to")
    precious: bool = False
    why: str | None = Field(None, description="what a replacement costs, for the report")
    name_input: str | None = Field(
        None,
        description="the input holding its physical name: set explicitly and kept, the "
        "provider deletes the old one before it creates the new (two cannot share a name)",
    )
    note: str | None = None

    @functools.cached_property
    def _updates(self) -> tuple[re.Pattern[str], ...]:
        return tuple(_pattern_regex(p) for p in self.update)

    def verdict(self, path: str) -> Verdict | None:
        """The class of one input leaf, the strongest that matches; None: unclassified."""
        if any(c.matches(path) for c in self.conditional):
            return "conditional"
        if any(r.matches(path) for r in self.replace):
            return "replace"
        if any(p.fullmatch(path) for p in self._updates):
            return "update"
        return None

    def replacing(self, path: str) -> ReplaceInput | None:
        return next((r for r in self.replace if r.matches(path)), None)

    def conditions(self, path: str) -> list[Conditional]:
        return [c for c in self.conditional if c.matches(path)]

    def with_base(self, base: Base) -> TypeRule:
        return self.model_copy(
            update={
                "replace": (*base.replace, *self.replace),
                "update": (*base.update, *self.update),
                "conditional": (*base.conditional, *self.conditional),
                "name_input": self.name_input or base.name_input,
            }
        )


class ReplacementTable(_Data):
    read: str
    providers: dict[str, str] = Field(description="the provider versions the table was read for")
    sources: list[str] = Field(default_factory=list, description="texts the types cite (anchors)")
    bases: dict[str, Base] = Field(default_factory=dict)
    types: dict[str, TypeRule]

    @model_validator(mode="after")
    def _bases_known(self) -> ReplacementTable:
        unknown = sorted({r.base for r in self.types.values() if r.base} - set(self.bases))
        if unknown:
            raise ValueError(f"types name unknown bases: {unknown}")
        return self

    @functools.cached_property
    def rules(self) -> dict[str, TypeRule]:
        """Every type's rules, its base's merged in."""
        return {
            t: rule.with_base(self.bases[rule.base]) if rule.base else rule
            for t, rule in self.types.items()
        }

    @property
    def precious_types(self) -> list[str]:
        return sorted(t for t, rule in self.types.items() if rule.precious)

    def unclassified(self, pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """The (type, input path) pairs no rule classifies (a type without a rule: all)."""
        out = []
        for type_, path in pairs:
            rule = self.rules.get(type_)
            if rule is None or rule.verdict(path) is None:
                out.append((type_, path))
        return out


@functools.cache
def replacement_table() -> ReplacementTable:
    with TABLE_PATH.open() as fh:
        return ReplacementTable.model_validate(yaml.load(fh, Loader=YAML_LOADER))


_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)(?:-[a-z]+\.(\d+))?$")


def version_key(value: Any) -> tuple[float, ...] | None:
    """A number or version as a tuple that orders: 1.31, "2.15", "v1.19.2-eksbuild.1"."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return (float(value),)
    if not isinstance(value, str):
        return None
    match = _VERSION.fullmatch(value.strip())
    if match is None:
        return None
    parts = [float(p) for p in match.group(1).split(".")]
    if match.group(2) is not None:
        parts.append(float(match.group(2)))
    return tuple(parts)


def skips_minor(before: Any, after: Any) -> bool:
    """A major.minor version that moves up by more than one minor version (1.31 -> 1.33)."""
    b, a = version_key(before), version_key(after)
    if b is None or a is None or len(b) < 2 or len(a) < 2 or isinstance(before, int | float):
        return False
    return (a[0] == b[0] and a[1] - b[1] > 1) or a[0] > b[0]
