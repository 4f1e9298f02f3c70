"""What Pulumi cannot see of a deployed stack, read-only (`llmp verify STACK`).

Property drift (a version, a label, a lifecycle rule changed outside Pulumi) is what
`pulumi preview --refresh --expect-no-changes` reports, with each provider's own
reads; `llmp.verify.drift` runs it. What stays here is state that no resource input holds,
read from the account with boto3 (`describe_*` and `list_*` calls only):

- `cluster`: the EKS cluster (the plan's name, or the outputs' `cluster_name`) is
  ACTIVE, and reports no health issues;
- `nodegroups`: every managed node group (the plan's name, or the outputs'
  `node_pools`) is ACTIVE with no health issues, and runs its launch template's latest
  version: a group left on an older version after a template change is not flagged by
  Pulumi;
- `addons`: every EKS add-on of the plan is ACTIVE with no health issues;
- `storage`: the FSx for Lustre file system (found by its `Name` tag) is AVAILABLE, and
  each data repository association is AVAILABLE;
- `adopted` (only where the stack adopts a VPC or cluster, `llmp.verify.adopted`): the VPC and
  subnets are the ones the config states, the GPU subnets reach S3 and the internet,
  each subnet has the free addresses its pools need at max size, and the cluster runs
  the stated version, add-ons, authentication mode and node role.

`llmp.verify.readiness` adds the `kubernetes` rows (Kueue, device plugins, devices
advertised), `llmp.verify.drift` the `drift` row. Every row is one of

- `pass`;
- `fail`: missing, unhealthy, or a read the account refused or failed (AccessDenied,
  throttling, a 500 from AWS): a verification that could not look must not pass;
- `not checked`: the endpoint does not implement the API (an emulator) or does not
  report the field; said, never counted as a pass, and not a failure.

Reading and its errors are `llmp.clients.aws`'s: credentials AWS refuses are bad input there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from llmp.clients.aws import ClientFactory, code, paginate, read
from llmp.plan import Plan, StackOutputs
from llmp.verify.adopted import check_adopted
from llmp.verify.findings import (
    ADDON,
    ADDONS_NOT_IMPLEMENTED,
    AREAS,
    AWS_AREAS,
    CLUSTER,
    DRA,
    DRA_NOT_IMPLEMENTED,
    EC2_NOT_IMPLEMENTED,
    EKS_NOT_IMPLEMENTED,
    FAIL,
    FSX_NOT_IMPLEMENTED,
    LUSTRE,
    NODE_GROUP,
    NOT_CHECKED,
    PASS,
    STATUSES,
    Finding,
    Status,
    unread,
)
from spec.labels import POOL_LABEL

_ISSUES_SHOWN = 3


_NOT_FOUND = frozenset({"ResourceNotFoundException"})
_NO_TEMPLATE = frozenset({"InvalidLaunchTemplateId.NotFound", "InvalidLaunchTemplateId.Malformed"})


# ---------------------------------------------------------------------------
# Rows of state and health
# ---------------------------------------------------------------------------


def state_row(resource: str, check: str, state: Any, want: str, detail: str = "") -> Finding:
    """`want` passes; any other state fails, with `detail` (an AWS failure message)."""
    if state is None:
        return Finding(resource, check, NOT_CHECKED, "the endpoint does not report its state")
    if state == want:
        return Finding(resource, check, PASS, want)
    return Finding(
        resource, check, FAIL, f"{state}, not {want}" + (f": {detail}" if detail else "")
    )


def health_row(resource: str, described: Mapping[str, Any]) -> Finding:
    """EKS's `health.issues` of a cluster, node group or add-on: none passes."""
    health = described.get("health")
    if not isinstance(health, dict):
        return Finding(resource, "health", NOT_CHECKED, "the endpoint does not report health")
    issues = health.get("issues") or []
    if not issues:
        return Finding(resource, "health", PASS, "no health issues")
    shown = []
    for issue in issues[:_ISSUES_SHOWN]:
        message = " ".join(str(issue.get("message") or "").split())
        ids = ", ".join(issue.get("resourceIds") or [])
        shown.append(f"{issue.get('code')}: {message}" + (f" ({ids})" if ids else ""))
    if len(issues) > _ISSUES_SHOWN:
        shown.append(f"{len(issues) - _ISSUES_SHOWN} more")
    return Finding(resource, "health", FAIL, "; ".join(shown))


# ---------------------------------------------------------------------------
# The cluster, its node groups and add-ons
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterState:
    """What was found of the cluster: node groups and add-ons are looked for inside it."""

    name: str
    row: Finding
    """The cluster's status row."""
    description: dict[str, Any] | None = None

    def blocked(self, resource: str) -> Finding | None:
        """The row of a check inside a cluster that was not found or not checked."""
        if self.description is not None:
            return None
        status = NOT_CHECKED if self.row.status == NOT_CHECKED else FAIL
        return Finding(resource, "status", status, f"its cluster {self.name}: {self.row.reason}")


def check_cluster(
    eks: Any, name: str, region: str, emulated: bool = False
) -> tuple[list[Finding], ClusterState]:
    """The cluster ACTIVE and healthy; also what was found of it."""
    resp, exc = read(eks.describe_cluster, name=name)
    if exc is not None:
        if code(exc) in _NOT_FOUND:
            row = Finding(name, "status", FAIL, f"no EKS cluster {name} in {region}")
        else:
            row = unread(name, "status", exc, emulated, EKS_NOT_IMPLEMENTED)
        return [row], ClusterState(name, row)
    cluster = resp["cluster"]
    row = state_row(name, "status", cluster.get("status"), "ACTIVE")
    return [row, health_row(name, cluster)], ClusterState(name, row, cluster)


def check_node_group(
    eks: Any, ec2: Any, name: str, cluster: ClusterState, template: bool, emulated: bool = False
) -> list[Finding]:
    """One managed node group: ACTIVE, healthy, and (`template`: the plan gives it a launch
    template) running that template's latest version."""
    if blocked := cluster.blocked(name):
        return [blocked]
    resp, exc = read(eks.describe_nodegroup, clusterName=cluster.name, nodegroupName=name)
    if exc is not None:
        if code(exc) in _NOT_FOUND:
            return [
                Finding(name, "status", FAIL, f"no node group {name} in cluster {cluster.name}")
            ]
        return [unread(name, "status", exc, emulated, EKS_NOT_IMPLEMENTED)]
    group = resp["nodegroup"]
    rows = [state_row(name, "status", group.get("status"), "ACTIVE"), health_row(name, group)]
    if template:
        rows.append(check_launch_template(ec2, name, group.get("launchTemplate"), emulated))
    return rows


def check_launch_template(
    ec2: Any, name: str, reference: Mapping[str, Any] | None, emulated: bool = False
) -> Finding:
    """The launch template version the node group runs is the template's latest: after a
    template change, a group that did not roll stays on the old version."""
    check = "launch template"
    if not reference or not reference.get("id"):
        return Finding(name, check, FAIL, "the node group runs no launch template")
    template_id = str(reference["id"])
    resp, exc = read(ec2.describe_launch_templates, LaunchTemplateIds=[template_id])
    if exc is not None:
        if code(exc) in _NO_TEMPLATE:
            return Finding(name, check, FAIL, f"its launch template {template_id} does not exist")
        return unread(name, check, exc, emulated, EC2_NOT_IMPLEMENTED)
    template = (resp.get("LaunchTemplates") or [{}])[0]
    latest = str(template.get("LatestVersionNumber"))
    version = str(reference.get("version") or "$Default")
    if version == "$Latest":
        version = latest
    elif version == "$Default":
        version = str(template.get("DefaultVersionNumber"))
    if version != latest:
        why = f"runs {template_id} version {version}; the template's latest is {latest}"
        return Finding(name, check, FAIL, why)
    return Finding(name, check, PASS, f"{template_id} version {version}, the latest")


def check_addon(
    eks: Any, addon: str, cluster: ClusterState, emulated: bool = False
) -> list[Finding]:
    """One EKS add-on: installed, ACTIVE and healthy."""
    if blocked := cluster.blocked(addon):
        return [blocked]
    resp, exc = read(eks.describe_addon, clusterName=cluster.name, addonName=addon)
    if exc is not None:
        if code(exc) in _NOT_FOUND:
            return [Finding(addon, "status", FAIL, f"not installed on {cluster.name}")]
        return [unread(addon, "status", exc, emulated, ADDONS_NOT_IMPLEMENTED)]
    found = resp.get("addon") or {}
    return [state_row(addon, "status", found.get("status"), "ACTIVE"), health_row(addon, found)]


# ---------------------------------------------------------------------------
# The file system and its data repository associations
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpectedFileSystem:
    """A Lustre file system of the plan (found by its Name tag) and its associations:
    (row label, file-system path)."""

    name_tag: str
    associations: tuple[tuple[str, str], ...]


def expected_file_systems(plan: Plan) -> list[ExpectedFileSystem]:
    out = []
    for fs in plan.by_type(LUSTRE):
        dras = [
            r
            for r in plan.by_type(DRA)
            if fs.urn in r.dependencies or r.inputs.get("fileSystemId") == f"{fs.name}-id"
        ]
        paths = tuple(
            sorted(
                (f"{r.name} {r.inputs.get('fileSystemPath')}", str(r.inputs.get("fileSystemPath")))
                for r in dras
            )
        )
        out.append(
            ExpectedFileSystem(str((fs.inputs.get("tags") or {}).get("Name", fs.name)), paths)
        )
    return out


def _tag(resource: Mapping[str, Any], key: str) -> str | None:
    return next(
        (str(t.get("Value")) for t in resource.get("Tags") or [] if t.get("Key") == key), None
    )


def check_file_system(
    fsx: Any, expected: ExpectedFileSystem, region: str, emulated: bool = False
) -> list[Finding]:
    """The file system AVAILABLE, then each declared association AVAILABLE (matched by its
    file-system path); FAILED and MISCONFIGURED carry AWS's failure message."""
    name, check = expected.name_tag, "data repository association"

    def every(status: Status, reason: str) -> list[Finding]:
        return [Finding(label, check, status, reason) for label, _ in expected.associations]

    systems, exc = read(paginate, call=fsx.describe_file_systems, key="FileSystems")
    if exc is not None:
        row = unread(name, "status", exc, emulated, FSX_NOT_IMPLEMENTED)
        return [row, *every(row.status, f"its file system {name}: {row.reason}")]
    matches = [
        fs
        for fs in systems
        if fs.get("FileSystemType", "LUSTRE") == "LUSTRE" and _tag(fs, "Name") == name
    ]
    if len(matches) != 1:
        ids = ", ".join(sorted(str(fs.get("FileSystemId")) for fs in matches))
        why = (
            f"{len(matches)} file systems tagged Name={name}: {ids}"
            if matches
            else (f"no Lustre file system tagged Name={name} in {region}")
        )
        return [Finding(name, "status", FAIL, why), *every(FAIL, f"its file system {name}: {why}")]
    fs = matches[0]
    fs_id = str(fs.get("FileSystemId"))
    failure = (fs.get("FailureDetails") or {}).get("Message", "")
    rows = [state_row(name, "status", fs.get("Lifecycle"), "AVAILABLE", failure)]
    rows[0] = replace(rows[0], reason=f"{fs_id}: {rows[0].reason}")
    if not expected.associations:
        return rows
    filters = [{"Name": "file-system-id", "Values": [fs_id]}]
    found, exc = read(
        paginate,
        call=fsx.describe_data_repository_associations,
        key="Associations",
        Filters=filters,
    )
    if exc is not None:
        row = unread(name, check, exc, emulated, DRA_NOT_IMPLEMENTED)
        return [*rows, *every(row.status, row.reason)]
    by_path = {str(a.get("FileSystemPath")): a for a in found}
    for label, path in expected.associations:
        dra = by_path.get(path)
        if dra is None:
            rows.append(Finding(label, check, FAIL, f"no association at {path} on {fs_id}"))
            continue
        failure = (dra.get("FailureDetails") or {}).get("Message", "")
        rows.append(state_row(label, check, dra.get("Lifecycle"), "AVAILABLE", failure))
    return rows


# ---------------------------------------------------------------------------
# The whole AWS side
# ---------------------------------------------------------------------------


def _node_groups(plan: Plan, outputs: StackOutputs) -> list[tuple[str, bool]]:
    """(name, whether the plan gives it a launch template) of every managed node group:
    the outputs' `node_pools` name it where they list its pool."""
    out = []
    for r in plan.by_type(NODE_GROUP):
        pool = (r.inputs.get("labels") or {}).get(POOL_LABEL)
        name = outputs.node_pools.get(pool or "") or r.inputs.get("nodeGroupName") or r.name
        out.append((str(name), bool(r.inputs.get("launchTemplate"))))
    return out


def verify_aws(
    plan: Plan,
    clients: ClientFactory,
    region: str,
    outputs: StackOutputs | None = None,
    areas: Iterable[str] = AWS_AREAS,
) -> list[Finding]:
    """The AWS rows of `areas`, in the order of AREAS, each with its area. Every resource is
    looked for in `region` (the stack's own: the DR replicas are buckets, not checked here)."""
    outputs = outputs or StackOutputs()
    wanted, emulated = set(areas), clients.emulated
    rows: dict[str, list[Finding]] = {}
    clusters = plan.by_type(CLUSTER)
    name = outputs.cluster_name or (str(clusters[0].inputs.get("name") or "") if clusters else "")
    if name and wanted & {"cluster", "nodegroups", "addons"}:
        eks = clients("eks", region)
        rows["cluster"], cluster = check_cluster(eks, name, region, emulated)
        rows["nodegroups"] = [
            row
            for group, template in _node_groups(plan, outputs)
            for row in check_node_group(
                eks, clients("ec2", region), group, cluster, template, emulated
            )
        ]
        rows["addons"] = [
            row
            for addon in sorted({str(r.inputs.get("addonName")) for r in plan.by_type(ADDON)})
            for row in check_addon(eks, addon, cluster, emulated)
        ]
    adopted = (outputs.model_extra or {}).get("adopted") or plan.outputs.get("adopted")
    if "adopted" in wanted and adopted:
        rows["adopted"] = check_adopted(clients, adopted, region, emulated)
    if "storage" in wanted:
        rows["storage"] = [
            row
            for fs in expected_file_systems(plan)
            for row in check_file_system(clients("fsx", region), fs, region, emulated)
        ]
    return [replace(r, area=area) for area in AREAS if area in wanted for r in rows.get(area, [])]


# ---------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------


def failed(findings: Iterable[Finding]) -> bool:
    """Whether any finding failed ("not checked" alone does not fail)."""
    return any(f.status == FAIL for f in findings)


def summary(findings: Sequence[Finding]) -> str:
    """`12 pass, 1 fail, 9 not checked`: the line under the table."""
    counts = Counter(f.status for f in findings)
    return ", ".join(f"{counts.get(s, 0)} {s}" for s in STATUSES)


STATUS_STYLE = {PASS: "green", FAIL: "bold red", NOT_CHECKED: "yellow"}


def render_table(findings: Sequence[Finding], title: str) -> Any:
    """The one table of the report: a section per area, a row per finding."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, expand=True)
    table.add_column("resource", overflow="fold", ratio=3)
    table.add_column("check", overflow="fold", ratio=2, min_width=12)
    table.add_column("status", no_wrap=True)
    table.add_column("reason", overflow="fold", ratio=5)
    for i, f in enumerate(findings):
        last_of_area = i + 1 == len(findings) or findings[i + 1].area != f.area
        table.add_row(
            Text(f.resource),
            Text(f.check),
            Text(f.status, style=STATUS_STYLE.get(f.status, "")),
            Text(f.reason),
            end_section=last_of_area,
        )
    return table
