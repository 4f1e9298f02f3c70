"""The plan of a stack, typed: what `llmp synth` records and every command reads.

A plan is every resource the program declares (urn, type, name, parent,
provider, inputs, dependencies, and the resource options where set: `protect`,
`retain_on_delete`, `import_id`, `delete_before_replace`, `ignore_changes`,
`replace_on_changes`, `aliases` and `depends_on`) and the stack's outputs. `synth`
builds one, `load_plan` reads one from `plan.json`, and policy, cost, diff, dr and verify all take
this one type. The deployed stack's outputs (`pulumi stack output --json`)
have their own small model and one reader, `load_outputs`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmp.errors import BadInput
from spec import readers

SECRET = "[secret]"
"""What a secret's value becomes in a plan (the synthesis redacts it)."""
AWS_PROVIDER = "pulumi:providers:aws"
_OPTIONS = (
    "protect",
    "retain_on_delete",
    "import_id",
    "delete_before_replace",
    "ignore_changes",
    "replace_on_changes",
    "aliases",
    "depends_on",
)


class PlanError(BadInput):
    """A file that is not a plan `llmp synth` writes (one line)."""


class OutputsError(BadInput):
    """A file that is not what `pulumi stack output --json` prints (one line)."""


class Resource(BaseModel):
    """One registration, as the engine sees it (inputs camelCase, numbers as JSON has them)."""

    # Other keys are kept out, not refused: a plan of another revision may record more.
    model_config = ConfigDict(extra="ignore")

    urn: str
    type: str
    name: str
    parent: str | None = None
    """The parent's URN; None for a child of the stack."""
    custom: bool = True
    provider: str | None = None
    """The provider's URN (without its id); None for components and default providers."""
    inputs: dict[str, Any] = Field(default_factory=dict)
    dependencies: list[str] = Field(default_factory=list)
    protect: bool = False
    retain_on_delete: bool = False
    import_id: str | None = None
    delete_before_replace: bool = False
    ignore_changes: list[str] = Field(default_factory=list)
    """Input paths `pulumi up` leaves alone once the resource exists (engine names)."""
    replace_on_changes: list[str] = Field(default_factory=list)
    """Input paths whose change replaces the resource whatever its provider says."""
    aliases: list[str] = Field(default_factory=list)
    """Earlier identities (URNs, or `name=…,type=…,parent=…` specs) the resource answers to."""
    depends_on: list[str] = Field(default_factory=list)
    """URNs the resource waits for without taking an output of (explicit `depends_on`)."""

    def ignores(self, path: str) -> str | None:
        """The `ignore_changes` entry that covers input `path`, or None."""
        for entry in self.ignore_changes:
            if path == entry or path.startswith((entry + ".", entry + "[")):
                return entry
        return None

    @property
    def is_kubernetes_object(self) -> bool:
        return self.custom and self.type.startswith("kubernetes:") and "kind" in self.inputs

    def record(self) -> dict[str, Any]:
        """The resource as plan.json holds it: the lifecycle options only where set."""
        out = self.model_dump(exclude=set(_OPTIONS))
        out.update({k: getattr(self, k) for k in _OPTIONS if getattr(self, k)})
        return out


class Plan(BaseModel):
    """Every resource of one stack and its outputs."""

    model_config = ConfigDict(extra="forbid", ignored_types=(functools.cached_property,))

    project: str
    stack: str
    resources: list[Resource] = Field(default_factory=list)
    outputs: dict[str, Any] = Field(default_factory=dict)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Plan:
        """A copy whose indexes (`by_urn`, the providers, the region) are computed from
        its own resources: pydantic copies the instance dict, cached properties included,
        so a copy with new resources would otherwise answer from the old ones."""
        copy = super().model_copy(update=update, deep=deep)
        for name, attr in vars(Plan).items():
            if isinstance(attr, functools.cached_property):
                copy.__dict__.pop(name, None)
        return copy

    # -- finding resources ---------------------------------------------------------------

    def by_type(self, type_: str) -> list[Resource]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str) -> Resource:
        matches = [r for r in self.resources if r.type == type_ and r.name == name]
        if len(matches) != 1:
            raise KeyError(f"{len(matches)} resources of type {type_} named {name}")
        return matches[0]

    @functools.cached_property
    def by_urn(self) -> dict[str, Resource]:
        return {r.urn: r for r in self.resources}

    def dependencies_of(self, resource: Resource, type_: str | None = None) -> list[Resource]:
        """The resources `resource` takes an input from (of `type_`, when given): the
        engine's dependency edges, which survive the mock runtime's invented ids."""
        found = [self.by_urn[u] for u in resource.dependencies if u in self.by_urn]
        return [d for d in found if type_ is None or d.type == type_]

    def component_of(self, resource: Resource) -> str:
        """The name of the top-level resource `resource` belongs to (itself at the top)."""
        while resource.parent is not None and resource.parent in self.by_urn:
            resource = self.by_urn[resource.parent]
        return resource.name

    def graph(self) -> dict[str, set[str]]:
        """URN -> the URNs it waits for: its dependencies and its parent (a child is
        registered inside its parent's constructor), for `graphlib` and the dr model."""
        out: dict[str, set[str]] = {}
        for r in self.resources:
            edges = {u for u in r.dependencies if u in self.by_urn}
            if r.parent is not None and r.parent in self.by_urn:
                edges.add(r.parent)
            out[r.urn] = edges
        return out

    # -- providers and regions -----------------------------------------------------------

    @functools.cached_property
    def aws_providers(self) -> dict[str, Resource]:
        return {r.urn: r for r in self.resources if r.type == AWS_PROVIDER}

    @functools.cached_property
    def primary_region(self) -> str | None:
        """The region of the AWS provider most AWS resources use (the stack's own region)."""
        counts = dict.fromkeys(self.aws_providers, 0)
        for r in self.resources:
            if r.type.startswith("aws:") and r.provider in counts:
                counts[r.provider] += 1
        if not counts:
            return None
        urn = max(sorted(counts), key=lambda u: counts[u])
        region = self.aws_providers[urn].inputs.get("region")
        return region if isinstance(region, str) else None

    # -- what it renders -----------------------------------------------------------------

    def manifests(self) -> list[dict[str, Any]]:
        """Every Kubernetes object the program declares, as it would be applied."""
        import base64

        encoded = base64.b64encode(SECRET.encode()).decode()
        out = []
        for r in self.resources:
            if not r.is_kubernetes_object:
                continue
            manifest = {k: v for k, v in r.inputs.items() if not k.startswith("__")}
            if manifest["kind"] == "Secret" and isinstance(manifest.get("data"), dict):
                # `data` values are base64: the placeholder is written encoded.
                manifest["data"] = {
                    k: encoded if v == SECRET else v for k, v in manifest["data"].items()
                }
            out.append(manifest)
        return out

    def to_dict(self) -> dict[str, Any]:
        """plan.json's document: resources in URN order, so the same plan gives the same bytes."""
        resources = sorted(self.resources, key=lambda r: r.urn)
        return {
            "project": self.project,
            "stack": self.stack,
            "resources": [r.record() for r in resources],
            "outputs": self.outputs,
        }

    def text(self) -> str:
        """plan.json's text: keys sorted, two-space indent, a final newline."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


# ---------------------------------------------------------------------------
# Reading files
# ---------------------------------------------------------------------------


def short_type(token: str) -> str:
    """A resource type as a narrow screen shows it: the package, the module and the class,
    without what the token repeats. `aws:iam/rolePolicyAttachment:RolePolicyAttachment`
    is `aws:iam/RolePolicyAttachment` (its file segment is the class again), the
    `kubernetes` package is `k8s` (`k8s:batch/v1/CronJob`); `llmp:nodes:GpuNodePool` is
    `llmp:nodes/GpuNodePool`. Anything not `package:module:Class` stays as it is."""
    parts = token.split(":")
    if len(parts) != 3 or not all(parts):
        return token
    package, module, cls = parts
    path = module.split("/")
    if len(path) > 1 and path[-1] == cls[:1].lower() + cls[1:]:
        path.pop()
    package = {"kubernetes": "k8s"}.get(package, package)
    return f"{package}:{'/'.join([*path, cls])}"


def read_json(path: Path, what: str, error: type[BadInput] = BadInput) -> Any:
    """The JSON document in `path`; `error` (one line) when it cannot be read or parsed.
    `what` names it in the message ("plan", "outputs", "policy config")."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"no {what} file {path}") from None
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:  # a path with a NUL byte
        raise error(f"not a file name: {path!r} ({exc})") from None
    try:
        return readers.parse_json(text, f"{what} {path}", max_bytes=readers.MAX_FILE_BYTES * 16)
    except readers.ReadError as exc:  # not JSON, too deep, a key twice, a number too long
        raise error(f"{what} {path} is {exc.problem}") from None


def parse_plan(doc: Any, source: str = "plan") -> Plan:
    """`doc` (plan.json's JSON) as a Plan; PlanError naming the first problem."""
    if not isinstance(doc, dict) or not isinstance(doc.get("resources"), list):
        raise PlanError(f"{source} is not a plan written by `llmp synth` (no `resources` list)")
    doc = {"project": "llm-platform", "stack": "", "outputs": {}, **doc}
    try:
        return Plan.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"]
        if len(loc) >= 2 and loc[0] == "resources" and isinstance(loc[1], int):
            i = loc[1]
            if len(loc) == 2:
                raise PlanError(f"{source}: resource {i} is not an object") from None
            field = ".".join(str(p) for p in loc[2:])
            if first["type"] == "missing":
                what = {"urn": "a urn", "type": "a type", "name": "a name"}.get(field, field)
                raise PlanError(f"{source}: resource {i} lacks {what}") from None
            raise PlanError(f"{source}: resource {i}: {field}: {first['msg']}") from None
        where = ".".join(str(p) for p in loc)
        raise PlanError(
            f"{source} is not a plan written by `llmp synth` ({where}: {first['msg']})"
        ) from None


def load_plan(path: Path) -> Plan:
    """Read a plan.json; PlanError (one line) when it is missing, unreadable or not a plan."""
    return parse_plan(read_json(path, "plan", PlanError), str(path))


# ---------------------------------------------------------------------------
# The deployed stack's outputs
# ---------------------------------------------------------------------------


class Replica(BaseModel):
    """One replica bucket a recovery stack adopts (the source's output `dr_replicas`)."""

    model_config = ConfigDict(extra="ignore")

    bucket: str
    region: str
    kms_key_arn: str | None = None


class StackOutputs(BaseModel):
    """What the commands read of `pulumi stack output --json` (program/platform.py exports
    it); the other outputs are kept as they are."""

    model_config = ConfigDict(extra="allow")

    region: str | None = None
    cluster_name: str | None = None
    node_pools: dict[str, str] = Field(default_factory=dict)
    """Pool -> node group name."""
    buckets: dict[str, str] = Field(default_factory=dict)
    """Bucket key -> bucket name (the primary buckets)."""
    dr_replicas: dict[str, Replica] = Field(default_factory=dict)
    cost: dict[str, Any] | None = None


def parse_outputs(doc: Any, source: str = "outputs") -> StackOutputs:
    if not isinstance(doc, dict):
        raise OutputsError(
            f"{source} is not an object of stack outputs (`pulumi stack output --json`)"
        )
    try:
        return StackOutputs.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise OutputsError(
            f"{source}: `{key}` is not what the stack exports ({first['msg']})"
        ) from None


def load_outputs(path: Path) -> StackOutputs:
    """Read `pulumi stack output --json`; OutputsError (one line) when it is not that."""
    return parse_outputs(read_json(path, "outputs", OutputsError), str(path))
