"""Offline synthesis: run the real Pulumi program under Pulumi's mock runtime.

The program in `infra/` is executed exactly as the Python language host does
(`run_in_stack(runpy.run_path(program_dir))`), with a mock monitor in place
of the engine. The monitor records every registration, with the parent and
dependencies the engine would see, into a `Plan`:

    {"project", "stack", "resources": [{"urn", "type", "name", "parent",
     "custom", "provider", "inputs", "dependencies"}], "outputs": {...}}

and, only where set, a resource's `protect`, `retain_on_delete`, `import_id` and
`delete_before_replace`.

Secrets are redacted before anything is recorded. Provider look-ups
(invokes) are refused: a preview must not depend on the cloud.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import logging
import runpy
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc, settings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.stack import run_in_stack
from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

from llmp.errors import BadInput, Failed
from llmp.plan import SECRET, Plan, Resource
from llmp.stacks import (
    PROGRAM_DIR,
    PROJECT,
    StackNotFound,
    stack_file,
    stack_name_problem,
    stack_path,
)
from llmp.wrapping import width_of, wrap
from spec.errors import one_line
from spec.keys import NAMESPACE, REGION_KEY
from spec.platform import PlatformConfig
from spec.stackfile import load_config

_ACCOUNT = "000000000000"
STACK_REFERENCE = "pulumi:pulumi:StackReference"
ADOPTED_CLUSTER_READ = "aws:eks/getCluster:getCluster"
"""A provider read a program may make: an adopted cluster's endpoint and CA."""
S3_RANGES_READ = "aws:ec2/getPrefixList:getPrefixList"
"""The other: the address ranges of S3 in the region (its AWS-managed prefix list), the
only addresses outside the VPC that tenant pods may reach."""
ENI_READ = "aws:ec2/getNetworkInterface:getNetworkInterface"
"""And the addresses of an interface endpoint's network interfaces (tenant pods reach the
KMS endpoint's)."""
STAND_IN_S3_RANGES = ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
"""Offline, S3's ranges are unknown: the documentation ranges (RFC 5737) stand in, so a
preview shows where they go and no real address is implied."""


def stand_in_endpoint(cluster: str, region: str) -> str:
    """The offline stand-in for an adopted cluster's API endpoint."""
    return f"https://{cluster}.stand-in.{region}.eks.amazonaws.com"


class SynthError(Failed):
    """The program failed under the mock runtime (not a config error)."""


# ---------------------------------------------------------------------------
# Mock engine
# ---------------------------------------------------------------------------


class _Notices(logging.Handler):
    """What the program logs (`pulumi.log.warn`: a secret not yet set) as the engine would
    show it: each message a notice on stderr, wrapped at its width (`console.notice`).

    Like logging's last resort: only where the process has set up no logging of its own
    (the CLI). A process that has (a test's log capture, a tool around `synthesize`) gets
    the records through the root logger instead, as it did before."""

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:
            return
        # `llmp.console.notice`'s layout, without rich: a program run the way the language
        # host runs it loads nothing of the CLI's extra.
        stream = sys.stderr
        message = one_line(record.getMessage())
        stream.write("\n".join(wrap(message, width_of(stream))) + "\n")


_ENGINE_LOG = logging.getLogger("llmp.program")
"""The logger the mock engine writes the program's messages to."""
_ENGINE_LOG.addHandler(_Notices())
_ENGINE_LOG.setLevel(logging.WARNING)


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

    def __init__(self, region: str, shared_outputs: Mapping[str, Any] | None = None):
        self.region = region
        self.shared_outputs = dict(shared_outputs or {})
        """The outputs a StackReference reads (a shared stack's, from a file or its plan)."""
        self.interfaces: dict[str, int] = {}
        """Network interface id -> its stand-in address's index."""
        self.invokes: list[str] = []
        """The provider functions the program called (refused: a preview must not look up)."""
        self.provider_regions: dict[str, str] = {}
        """Provider id -> region: a second AWS provider (DR) puts its ARNs in its own region."""

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict, list | None]:
        if args.token == ADOPTED_CLUSTER_READ:
            # An adopted cluster whose endpoint and CA config does not state: read at deploy
            # time; offline, stand-ins that say what they are.
            name = str(args.args.get("name"))
            return (
                {
                    "name": name,
                    "endpoint": stand_in_endpoint(name, self.region),
                    "certificateAuthorities": [
                        {"data": base64.b64encode(f"stand-in CA of {name}".encode()).decode()}
                    ],
                },
                [],
            )
        if args.token == ENI_READ:
            # An interface endpoint's network interface: a stand-in address of RFC 2544's
            # benchmarking range, one per interface, in the order they are read.
            eni = str(args.args.get("id"))
            index = self.interfaces.setdefault(eni, len(self.interfaces))
            return ({"id": eni, "privateIp": f"198.18.{index // 250}.{index % 250 + 1}"}, [])
        if args.token == S3_RANGES_READ:
            name = str(args.args.get("name"))
            return (
                {"id": f"pl-stand-in-{name}", "name": name, "cidrBlocks": list(STAND_IN_S3_RANGES)},
                [],
            )
        self.invokes.append(args.token)
        raise SynthError(_lookup_message(self.invokes))

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str, dict]:
        name, inputs = args.name, dict(args.inputs)
        if args.typ == STACK_REFERENCE:
            target = str(inputs.get("name"))
            return target, {
                "name": target,
                "outputs": self.shared_outputs,
                "secretOutputNames": [],
            }
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
            # EKS names a managed node group's Auto Scaling group eks-<group>-<uuid>.
            state["resources"] = [{"autoscalingGroups": [{"name": f"eks-{name}-asg"}]}]
        elif typ == "aws:fsx/lustreFileSystem:LustreFileSystem":
            state["dnsName"] = f"{resource_id}.fsx.{self.region}.amazonaws.com"
            state["mountName"] = f"{name}-mount"
        elif typ == "aws:ec2/vpcEndpoint:VpcEndpoint" and inputs.get("vpcEndpointType") == (
            "Interface"
        ):
            subnets = inputs.get("subnetIds") or []
            state["networkInterfaceIds"] = [f"eni-{name}-{i}" for i in range(len(subnets))]
        elif typ == "aws:ecr/repository:Repository":
            state["repositoryUrl"] = f"{_ACCOUNT}.dkr.ecr.{region}.amazonaws.com/{state['name']}"
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


def _aliases(request: Any) -> list[str]:
    """The aliases a registration carries: URNs as they are, specs as `name=…,type=…`."""
    out = list(request.aliasURNs)
    for alias in request.aliases:
        if alias.urn:
            out.append(alias.urn)
            continue
        spec = alias.spec
        parts = [f"name={spec.name}"] if spec.name else []
        parts += [f"type={spec.type}"] if spec.type else []
        if spec.noParent:
            parts.append("parent=(none)")
        elif spec.parentUrn:
            parts.append(f"parent={spec.parentUrn}")
        out.append(",".join(parts) or "(same)")
    return sorted(set(out))


def _explicit_dependencies(request: Any) -> list[str]:
    """`depends_on`: the dependencies no input takes an output of."""
    through_inputs: set[str] = set()
    for deps in request.propertyDependencies.values():
        through_inputs.update(deps.urns)
    return sorted(set(request.dependencies) - through_inputs)


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
        self.plan.resources.append(
            Resource(
                urn=urn,
                type=request.type,
                name=request.name,
                # The root stack is not a resource of the plan: its children are top-level.
                parent=None if _is_stack(request.parent) else request.parent,
                custom=bool(request.custom),
                provider=request.provider.rsplit("::", 1)[0] if request.provider else None,
                inputs=_redact(inputs),
                dependencies=sorted(set(request.dependencies)),
                protect=bool(request.protect),
                retain_on_delete=bool(request.retainOnDelete),
                import_id=request.importId or None,
                delete_before_replace=bool(request.deleteBeforeReplace),
                ignore_changes=list(request.ignoreChanges),
                replace_on_changes=list(request.replaceOnChanges),
                aliases=_aliases(request),
                depends_on=_explicit_dependencies(request),
            )
        )
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


def synthesize(
    stack: str,
    raw_config: Mapping[str, Any],
    program_dir: Path = PROGRAM_DIR,
    *,
    shared_outputs: Mapping[str, Any] | None = None,
) -> Plan:
    """Run the program for `stack` with `raw_config` (a stack file's `config:` map).

    `shared_outputs`: the outputs of the stack `shared_stack` names (required with one).
    Raises ConfigError before anything runs when the config is invalid, BadInput for a
    team stack without its shared stack's outputs, and SynthError when the program fails.
    """
    cfg = load_config(raw_config)
    if cfg.shared_stack is not None and shared_outputs is None:
        raise BadInput(
            f"{stack} uses the network of shared_stack {cfg.shared_stack.name}: pass "
            "--shared-outputs FILE (its `pulumi stack output --json`) or put its stack file "
            f"Pulumi.{cfg.shared_stack.stack}.yaml beside this one"
        )
    if cfg.shared_stack is not None and shared_outputs is not None:
        _check_shared_outputs(cfg, shared_outputs)
    config, secret_keys = engine_config(raw_config)
    set_all_config(config, secret_keys)
    return run_program(stack, cfg.region, program_dir, shared_outputs=shared_outputs)


def _check_shared_outputs(cfg: PlatformConfig, outputs: Mapping[str, Any]) -> None:
    """The shared stack's outputs hold what this stack reads, and its network is the one
    this stack's config states (region, VPC CIDR, AZs): one line naming what lacks, or
    the config error naming the key and the shared stack's value. The program checks the
    same at deploy time (program.adoption.SharedStack)."""
    from spec.sharing import (
        SHARED_CLUSTER_OUTPUTS,
        SHARED_NETWORK_OUTPUTS,
        bucket_clash,
        bucket_unadmitted,
        lacking_facts_line,
        missing_facts,
        network_mismatch,
    )

    shared = cfg.shared_stack
    assert shared is not None
    wanted = list(SHARED_NETWORK_OUTPUTS[:2])
    if shared.cluster:
        wanted += [o for o in SHARED_CLUSTER_OUTPUTS if o != "cluster_addons"]
    missing = [o for o in wanted if o not in outputs]
    if missing:
        raise BadInput(
            f"the outputs of shared_stack {shared.name} lack {', '.join(missing)}: "
            "set share_outputs: true in that stack and deploy it"
        )
    lacking = missing_facts(outputs)
    if lacking:
        raise BadInput(lacking_facts_line(shared.name, lacking))
    wrong = network_mismatch(
        shared.name, cfg.region, cfg.network.vpc_cidr, cfg.network.availability_zones, outputs
    )
    if wrong is not None:
        raise wrong
    storage = cfg.storage
    if storage is not None:
        names = {key: storage.bucket_name(key) for key in storage.buckets}
        adopted = [key for key in storage.buckets if storage.adopted(key)]
        clash = bucket_clash(shared.name, names, adopted, outputs)
        if clash is not None:
            raise clash
        refused = bucket_unadmitted(shared.name, names, storage.bucket_name_prefix, outputs)
        if refused is not None:
            raise refused


def run_program(
    stack: str,
    region: str,
    program_dir: Path = PROGRAM_DIR,
    *,
    shared_outputs: Mapping[str, Any] | None = None,
) -> Plan:
    """Run `program_dir` as the Python language host does, against a recording mock monitor.

    The program reads its config the way it does under the engine (the
    runtime's config map, or PULUMI_CONFIG in the environment).
    """

    def program() -> None:
        runpy.run_path(str(program_dir), run_name="__main__")

    return run(stack, region, program, shared_outputs=shared_outputs)


def run(
    stack: str,
    region: str,
    program: Callable[[], None],
    *,
    shared_outputs: Mapping[str, Any] | None = None,
) -> Plan:
    """Run `program` (any function that declares resources: the whole program, or one
    component built alone) inside a root stack, against a recording mock monitor."""
    # asyncio.run() elsewhere in the process (a load test, say) leaves the main
    # thread without an event loop; the Pulumi runtime expects one.
    _ensure_event_loop()
    plan = Plan(project=PROJECT, stack=stack)
    mocks = _PlanMocks(region, shared_outputs)
    monitor = _RecordingMonitor(mocks, plan)
    # One fresh mock state per run: set_mocks is global to the process.
    settings.ROOT.set(None)
    pulumi_mocks.set_mocks(
        mocks, project=PROJECT, stack=stack, preview=True, monitor=monitor, logger=_ENGINE_LOG
    )
    # Like the language host: a new root stack around `runpy.run_path(main)`.
    settings.ROOT.set(None)
    declared: dict[tuple[str, str], int] = {}

    def in_order(args: pulumi.ResourceTransformationArgs) -> None:
        declared.setdefault((args.type_, args.name), len(declared))

    def declared_in_order() -> None:
        # Registrations reach the engine in whatever order their inputs resolve; the
        # plan lists resources in the order the program declares them.
        pulumi.runtime.register_stack_transformation(in_order)
        program()

    try:
        _sync_await(run_in_stack(declared_in_order))
    except pulumi.RunError as exc:
        raise SynthError(str(exc)) from None
    except Exception:
        if mocks.invokes:  # an SDK may wrap the refusal in its own error
            raise SynthError(_lookup_message(mocks.invokes)) from None
        raise
    plan.resources.sort(key=lambda r: declared.get((r.type, r.name), len(declared)))
    return plan


def _lookup_message(tokens: list[str]) -> str:
    return (
        f"the program made provider look-ups ({', '.join(sorted(set(tokens)))}); "
        "take the value from config or the catalog instead"
    )


def shared_outputs_for(
    stack: str, raw: Mapping[str, Any], path: Path, outputs_file: Path | None = None
) -> dict[str, Any] | None:
    """The outputs of the stack `shared_stack` names: `outputs_file` (`pulumi stack output
    --json` of it), else the synthesized plan of its stack file beside `path` (or in
    stacks/); None where the stack shares nothing or neither is there."""
    from llmp.plan import OutputsError, parse_outputs, read_json
    from spec.stackfile import load_stack_file

    shared = load_config(raw).shared_stack
    if shared is None:
        return None
    if outputs_file is not None:
        doc = read_json(outputs_file, "outputs", OutputsError)
        parse_outputs(doc, str(outputs_file))
        return dict(doc)
    if shared.stack == stack:
        raise BadInput(f"shared_stack {shared.name} is this stack itself")
    for candidate in (path.parent / f"Pulumi.{shared.stack}.yaml", stack_file(shared.stack)):
        if candidate.exists():
            try:
                plan = synthesize(shared.stack, load_stack_file(str(candidate)))
            except SynthError as exc:
                raise SynthError(f"synth of shared stack {shared.stack} failed: {exc}") from None
            return plan.outputs
    return None


def synthesize_stack(
    stack: str,
    config_file: Path | None = None,
    *,
    hint: bool = False,
    quiet: bool = False,
    shared_outputs_file: Path | None = None,
) -> Plan:
    """Synthesize `stack` from its stack file (or `config_file`).

    Raises StackNotFound for a stack name that is not one or has no file (`hint`:
    saying that --config names another), ConfigError for a file that cannot be read or
    holds bad config, SynthError (`synth of STACK failed: ...`) when the program fails.
    `shared_outputs_file`: a shared stack's `pulumi stack output --json` (default: its
    synthesized plan, `shared_outputs_for`).
    `quiet` keeps the program's warnings (a secret not yet set) off stderr: they are
    for `llmp synth`, not for a command that only reads the plan.
    """
    import contextlib
    import io

    from spec.stackfile import load_stack_file

    path = stack_path(stack, config_file, hint=hint)
    raw = load_stack_file(str(path))
    with contextlib.redirect_stderr(io.StringIO()) if quiet else contextlib.nullcontext():
        shared = shared_outputs_for(stack, raw, path, shared_outputs_file)
        try:
            return synthesize(stack, raw, shared_outputs=shared)
        except SynthError as exc:
            raise SynthError(f"synth of {stack} failed: {exc}") from None


WRITTEN = ".llmp-synth-written.json"
"""The list of files `write_plan` wrote into `out_dir/STACK/`, kept there: the next write
removes those (a manifest the plan no longer has) and nothing else."""


def _written_before(target: Path) -> list[Path] | None:
    """The files a previous `write_plan` wrote under `target` (from its list), or None when
    `target` holds no such list. Only `plan.json` and `manifests/*.yaml` inside `target` are
    taken from it: an edited list cannot name anything else."""
    try:
        names = json.loads((target / WRITTEN).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(names, list):
        return None
    found = []
    for name in names:
        if not isinstance(name, str):
            continue
        parts = Path(name).parts
        ours = parts == ("plan.json",) or (
            len(parts) == 2 and parts[0] == "manifests" and parts[1].endswith(".yaml")
        )
        if ours and ".." not in parts:
            found.append(target / name)
    return found


def check_out_dir(out_dir: Path, stack: str, *, force: bool = False) -> Path:
    """`out_dir/STACK/`, where `write_plan` may write: FileRefused (one line) for a file
    there, or a non-empty directory `llmp synth` did not write, unless `force`."""
    from llmp.files import FileRefused

    target = out_dir / stack
    if target.exists() and not target.is_dir():
        raise FileRefused(f"--out {out_dir}: {target} is a file, not a directory")
    if not force and _written_before(target) is None and target.is_dir() and any(target.iterdir()):
        raise FileRefused(
            f"--out {out_dir}: {stack}/ holds files llmp synth did not write; "
            "--force writes beside them"
        )
    return target


def write_plan(plan: Plan, out_dir: Path, *, force: bool = False) -> Path:
    """Write plan.json and one YAML file per Kubernetes object under `out_dir/STACK/`, each
    atomically, and the list of what was written (`WRITTEN`).

    What an earlier `write_plan` wrote there and this plan no longer has is removed;
    nothing else is. A non-empty `out_dir/STACK/` without that list (not written by
    `llmp synth`) is refused (`FileRefused`, one line) unless `force`, which then writes
    beside what is there and still removes nothing.
    """
    import yaml

    from llmp.files import refuse, write_file

    target = check_out_dir(out_dir, plan.stack, force=force)
    before = _written_before(target)
    files: dict[str, str] = {"plan.json": plan.text()}
    for manifest in plan.manifests():
        meta = manifest.get("metadata", {})
        parts = [manifest["kind"].lower(), meta.get("namespace"), meta.get("name")]
        filename = "-".join(p for p in parts if p) + ".yaml"
        files[f"manifests/{filename}"] = yaml.safe_dump(manifest, sort_keys=False)
    for name in files:
        refuse(target / name, force=True, what="--out")
    for old in before or []:
        if old.relative_to(target).as_posix() not in files and (old.is_file() or old.is_symlink()):
            old.unlink()
    for name, text in files.items():
        write_file(target / name, text, force=True, what="--out")
    listing = json.dumps(sorted(files), indent=1) + "\n"
    write_file(target / WRITTEN, listing, force=True, what="--out")
    return target


__all__ = [
    "NAMESPACE",
    "PROGRAM_DIR",
    "REGION_KEY",
    "Plan",
    "StackNotFound",
    "SynthError",
    "autoname",
    "check_out_dir",
    "engine_config",
    "run",
    "run_program",
    "stack_file",
    "stack_name_problem",
    "synthesize",
    "synthesize_stack",
    "write_plan",
]
