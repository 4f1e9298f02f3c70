"""Offline synthesis: run the real Pulumi program under Pulumi's mock runtime.

The program in `infra/` is executed exactly as the Python language host does
(`run_in_stack(runpy.run_path(program_dir))`), with a mock monitor in place
of the engine. The monitor records every registration, with the parent and
dependencies the engine would see, into a `Plan`:

    {"project", "stack", "resources": [{"urn", "type", "name", "parent",
     "custom", "provider", "inputs", "dependencies"}], "outputs": {...}}

and, only where set, a resource's `protect`, `retain_on_delete` and `import_id`.

Secrets are redacted before anything is recorded. Provider look-ups
(invokes) are refused: a preview must not depend on the cloud.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import re
import runpy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc, settings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.stack import run_in_stack
from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

from spec.keys import NAMESPACE, REGION_KEY
from spec.stackfile import load_config

PROJECT = "llm-platform"
REPO_ROOT = Path(__file__).resolve().parent.parent
PROGRAM_DIR = REPO_ROOT / "program"
STACKS_DIR = REPO_ROOT / "stacks"
SECRET = "[secret]"
SECRET_BASE64 = base64.b64encode(SECRET.encode()).decode()
_ACCOUNT = "000000000000"


class SynthError(Exception):
    """The program failed under the mock runtime (not a config error)."""


class StackNotFound(Exception):
    """No stack file for the named stack (`missing_file`), or a name that is not a stack's."""

    def __init__(self, message: str, missing_file: bool = False):
        super().__init__(message)
        self.missing_file = missing_file


@dataclass
class Plan:
    project: str
    stack: str
    resources: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    invokes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "stack": self.stack,
            "resources": self.resources,
            "outputs": self.outputs,
        }

    def by_type(self, type_: str) -> list[dict[str, Any]]:
        return [r for r in self.resources if r["type"] == type_]

    def one(self, type_: str, name: str) -> dict[str, Any]:
        matches = [r for r in self.resources if r["type"] == type_ and r["name"] == name]
        if len(matches) != 1:
            raise KeyError(f"{len(matches)} resources of type {type_} named {name}")
        return matches[0]

    def manifests(self) -> list[dict[str, Any]]:
        """Every Kubernetes object the program declares, as it would be applied."""
        out = []
        for r in self.resources:
            inputs = r["inputs"]
            if r["custom"] and r["type"].startswith("kubernetes:") and "kind" in inputs:
                manifest = {k: v for k, v in inputs.items() if not k.startswith("__")}
                if manifest["kind"] == "Secret" and isinstance(manifest.get("data"), dict):
                    # `data` values are base64: the placeholder is written encoded.
                    manifest["data"] = {
                        k: SECRET_BASE64 if v == SECRET else v for k, v in manifest["data"].items()
                    }
                out.append(manifest)
        return out


def stack_file(stack: str) -> Path:
    return STACKS_DIR / f"Pulumi.{stack}.yaml"


# ---------------------------------------------------------------------------
# Mock engine
# ---------------------------------------------------------------------------


def autoname(name: str) -> str:
    """The physical name the mock gives an auto-named resource (like Pulumi: name + suffix)."""
    return f"{name}-{hashlib.sha1(name.encode()).hexdigest()[:7]}"


def _short_type(type_: str) -> str:
    return type_.rsplit(":", 1)[-1].lower()


class _PlanMocks(pulumi_mocks.Mocks):
    """Answers registrations with the outputs a real provider would compute.

    Every computed value is unique to its resource (`<name>-id`, an ARN with
    the name), so tests can tell which resource's output an input came from.
    """

    def __init__(self, region: str, plan: Plan):
        self.region = region
        self.plan = plan
        self.provider_regions: dict[str, str] = {}
        """Provider id -> region: a second AWS provider (DR) puts its ARNs in its own region."""

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict, list | None]:
        self.plan.invokes.append(args.token)
        raise SynthError(_lookup_message(self.plan.invokes))

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str, dict]:
        name, inputs = args.name, dict(args.inputs)
        resource_id = f"{name}-id"
        state: dict[str, Any] = {**inputs, "id": resource_id}
        if args.typ == "pulumi:providers:aws" and isinstance(inputs.get("region"), str):
            self.provider_regions[resource_id] = inputs["region"]
        region = self.region
        if args.provider:
            region = self.provider_regions.get(args.provider.rsplit("::", 1)[-1], region)
        if args.typ.startswith("aws:"):
            state.setdefault("name", autoname(name))
            state["arn"] = f"arn:aws:mock:{region}:{_ACCOUNT}:{_short_type(args.typ)}/{name}"
        typ = args.typ
        if typ == "aws:eks/cluster:Cluster":
            state["endpoint"] = f"https://{name}.mock.{self.region}.eks.amazonaws.com"
            state["certificateAuthority"] = {
                "data": base64.b64encode(f"mock-ca-{name}".encode()).decode()
            }
            state["vpcConfig"] = {
                **inputs.get("vpcConfig", {}),
                "clusterSecurityGroupId": f"sg-{name}-cluster",
            }
            state.setdefault("version", inputs.get("version"))
        elif typ == "aws:ec2/launchTemplate:LaunchTemplate":
            state["latestVersion"] = 1
        elif typ == "aws:ec2/eip:Eip":
            state["allocationId"] = f"eipalloc-{name}"
        elif typ == "aws:kms/key:Key":
            state["keyId"] = f"{name}-key-id"
        elif typ == "aws:eks/nodeGroup:NodeGroup":
            state.setdefault("nodeGroupName", name)
        elif typ == "aws:fsx/lustreFileSystem:LustreFileSystem":
            state["dnsName"] = f"{resource_id}.fsx.{self.region}.amazonaws.com"
            state["mountName"] = f"{name}-mount"
        return resource_id, state


def _redact(value: Any) -> Any:
    """Secrets become "[secret]"; whole floats become ints (the wire carries only doubles)."""
    if rpc.is_rpc_secret(value):
        return _hidden(rpc.unwrap_rpc_secret(value))
    if isinstance(value, dict):
        return {k: _redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, pulumi.Resource):
        return "<resource>"
    return value


def _hidden(value: Any) -> Any:
    """A secret with its shape kept and every value replaced: pulumi_kubernetes makes a
    Secret's whole `stringData` map secret, and a manifest whose map became one string
    would no longer apply or validate. Map keys are names, not secrets."""
    if rpc.is_rpc_secret(value):
        return _hidden(rpc.unwrap_rpc_secret(value))
    if isinstance(value, dict):
        return {k: _hidden(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_hidden(v) for v in value]
    return SECRET


def _lifecycle_options(request: Any) -> dict[str, Any]:
    """The options that decide whether a resource can be lost, recorded only when set
    (plans without them read as before): `protect`, `retain_on_delete`, `import_id`."""
    options: dict[str, Any] = {}
    if request.protect:
        options["protect"] = True
    if request.retainOnDelete:
        options["retain_on_delete"] = True
    if request.importId:
        options["import_id"] = request.importId
    return options


def _is_stack(urn: str) -> bool:
    return not urn or "::pulumi:pulumi:Stack::" in urn


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    """A mock monitor that also records parent, dependencies and stack outputs."""

    def __init__(self, mocks: _PlanMocks, plan: Plan):
        super().__init__(mocks)
        self.plan = plan

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        # The engine leaves the root stack's type out of its children's URNs.
        if _is_stack(parent):
            parent = ""
        return super().make_urn(parent, type_, name)

    def RegisterResource(self, request: Any) -> Any:
        urn = self.make_urn(request.parent, request.type, request.name)
        if request.type == "pulumi:pulumi:Stack":
            return resource_pb2.RegisterResourceResponse(urn=urn)
        pulumi_mocks._ensure_event_loop()
        inputs = rpc.deserialize_properties(request.object)
        args = pulumi_mocks.MockResourceArgs(
            typ=request.type,
            name=request.name,
            inputs=inputs,
            provider=request.provider,
            resource_id=request.importId,
            custom=request.custom or False,
        )
        resource_id, state = self.mocks.new_resource(args)
        resource_id = resource_id or ""
        self.resources[urn] = pulumi_mocks.MockMonitor.ResourceRegistration(urn, resource_id, state)
        record = {
            "urn": urn,
            "type": request.type,
            "name": request.name,
            # The root stack is not a resource of the plan: its children are top-level.
            "parent": None if _is_stack(request.parent) else request.parent,
            "custom": bool(request.custom),
            "provider": request.provider.rsplit("::", 1)[0] if request.provider else None,
            "inputs": _redact(inputs),
            "dependencies": sorted(set(request.dependencies)),
        }
        record.update(_lifecycle_options(request))
        self.plan.resources.append(record)
        obj = _sync_await(rpc.serialize_properties(state, {}))
        return resource_pb2.RegisterResourceResponse(urn=urn, id=resource_id, object=obj)

    def RegisterResourceOutputs(self, request: Any) -> Any:
        if _is_stack(request.urn):
            outputs = rpc.deserialize_properties(request.outputs)
            if outputs:
                self.plan.outputs = _redact(outputs)
        return super().RegisterResourceOutputs(request)


# ---------------------------------------------------------------------------
# Running the program
# ---------------------------------------------------------------------------


def engine_config(raw: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """Stack-file values as the engine hands them to a program: strings, objects as JSON."""
    config: dict[str, str] = {}
    secret_keys = []
    for key, value in raw.items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            config[key] = SECRET
            secret_keys.append(key)
        elif isinstance(value, str):
            config[key] = value
        elif isinstance(value, datetime.date):
            config[key] = value.isoformat()  # YAML dates reach a program as their text
        else:
            config[key] = json.dumps(value, default=_json_default)
    return config, secret_keys


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def synthesize(stack: str, raw_config: Mapping[str, Any], program_dir: Path = PROGRAM_DIR) -> Plan:
    """Run the program for `stack` with `raw_config` (a stack file's `config:` map).

    Raises ConfigError before anything runs when the config is invalid, and
    SynthError when the program itself fails.
    """
    cfg = load_config(raw_config)
    config, secret_keys = engine_config(raw_config)
    set_all_config(config, secret_keys)
    return run_program(stack, cfg.region, program_dir)


def run_program(stack: str, region: str, program_dir: Path = PROGRAM_DIR) -> Plan:
    """Run `program_dir` as the Python language host does, against a recording mock monitor.

    The program reads its config the way it does under the engine (the
    runtime's config map, or PULUMI_CONFIG in the environment).
    """

    def program() -> None:
        runpy.run_path(str(program_dir), run_name="__main__")

    return run(stack, region, program)


def run(stack: str, region: str, program: Callable[[], None]) -> Plan:
    """Run `program` (any function that declares resources: the whole program, or one
    component built alone) inside a root stack, against a recording mock monitor."""
    # asyncio.run() elsewhere in the process (a load test, say) leaves the main
    # thread without an event loop; the Pulumi runtime expects one.
    _ensure_event_loop()
    plan = Plan(project=PROJECT, stack=stack)
    mocks = _PlanMocks(region, plan)
    monitor = _RecordingMonitor(mocks, plan)
    # One fresh mock state per run: set_mocks is global to the process.
    settings.ROOT.set(None)
    pulumi_mocks.set_mocks(mocks, project=PROJECT, stack=stack, preview=True, monitor=monitor)
    # Like the language host: a new root stack around `runpy.run_path(main)`.
    settings.ROOT.set(None)
    try:
        _sync_await(run_in_stack(program))
    except pulumi.RunError as exc:
        raise SynthError(str(exc)) from None
    except Exception:
        if plan.invokes:  # an SDK may wrap the refusal in its own error
            raise SynthError(_lookup_message(plan.invokes)) from None
        raise
    return plan


def _lookup_message(tokens: list[str]) -> str:
    return (
        f"the program made provider look-ups ({', '.join(sorted(set(tokens)))}); "
        "take the value from config or the catalog instead"
    )


_STACK_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}")


def stack_name_problem(stack: str) -> str | None:
    """Why `stack` is not a stack name (one line), or None when it is one.

    The name becomes a file name (stacks/Pulumi.STACK.yaml, out/STACK/, a path
    inside a git revision): no paths.
    """
    if _STACK_NAME.fullmatch(stack):
        return None
    return f"not a stack name: {stack!r}; stack names take letters, digits, '-', '_' and '.'"


def synthesize_stack(stack: str, config_file: Path | None = None) -> Plan:
    """Synthesize `stack` from its stack file (or `config_file`).

    Raises StackNotFound for a stack name that is not one or has no file,
    ConfigError for a file that cannot be read or holds bad config, SynthError
    when the program fails.
    """
    from spec.stackfile import load_stack_file

    problem = stack_name_problem(stack)
    if problem is not None:
        raise StackNotFound(problem)
    path = config_file or stack_file(stack)
    try:
        exists = path.exists()
    except (OSError, ValueError):
        exists = False
    if not exists:
        known = sorted(p.name.split(".")[1] for p in STACKS_DIR.glob("Pulumi.*.yaml"))
        shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
        raise StackNotFound(
            f"no stack file {shown}; known stacks: {', '.join(known)}", missing_file=True
        )
    return synthesize(stack, load_stack_file(str(path)))


def plan_text(plan: Plan) -> str:
    """The plan as `plan.json` holds it: resources in URN order (registration order varies
    from run to run), keys sorted, so the same program and config give the same bytes."""
    doc = plan.to_dict()
    doc["resources"] = sorted(doc["resources"], key=lambda r: r["urn"])
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def write_plan(plan: Plan, out_dir: Path) -> Path:
    """Write plan.json and one YAML file per Kubernetes object under `out_dir/STACK/`."""
    import yaml

    target = out_dir / plan.stack
    manifests_dir = target / "manifests"
    manifests_dir.mkdir(parents=True, exist_ok=True)
    for old in manifests_dir.glob("*.yaml"):
        old.unlink()
    (target / "plan.json").write_text(plan_text(plan))
    for manifest in plan.manifests():
        meta = manifest.get("metadata", {})
        parts = [manifest["kind"].lower(), meta.get("namespace"), meta.get("name")]
        filename = "-".join(p for p in parts if p) + ".yaml"
        (manifests_dir / filename).write_text(yaml.safe_dump(manifest, sort_keys=False))
    return target


__all__ = [
    "NAMESPACE",
    "PROGRAM_DIR",
    "REGION_KEY",
    "Plan",
    "StackNotFound",
    "SynthError",
    "autoname",
    "engine_config",
    "plan_text",
    "run",
    "run_program",
    "stack_file",
    "stack_name_problem",
    "synthesize",
    "synthesize_stack",
    "write_plan",
]
