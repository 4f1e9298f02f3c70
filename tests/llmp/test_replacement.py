"""The replacement table against every plan, and `llmp diff`'s verdicts against the table.

Every (type, input) pair the stacks' plans hold must be classified (spec/replacement.yaml),
so a type cannot enter the program unclassified. Then each stack is mutated in one input
per class per resource type, and the diff's verdict is checked against the table: a
`replace` input replaces the resource, an `update` input changes it in place. The
conditional rules (upgrades AWS refuses, one-way changes) and the cascades (a VPC, a
cluster, a key) are tested on the real plans too.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmp.diff import transition_costs
from llmp.diff.compare import PlanDiff, compare_plans
from llmp.plan import SECRET, Plan, Resource
from llmp.plan.leaves import leaves
from spec.replacement import ReplacementTable, replacement_table, skips_minor, version_key
from tests.conftest import STACKS

GOLDEN = Path(__file__).parents[1] / "program" / "golden"


@functools.cache
def golden(stack: str) -> Plan:
    """The stack's plan as the program synthesizes it (test_golden keeps the files exact)."""
    return Plan.model_validate(json.loads((GOLDEN / f"{stack}.plan.json").read_text()))


def pairs(plan: Plan) -> set[tuple[str, str]]:
    return {(r.type, path) for r in plan.resources if r.custom for path in leaves(r.inputs)}


# ---------------------------------------------------------------------------
# Coverage: every (type, input) of every plan is classified
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_every_input_of_the_plan_is_classified(stack: str) -> None:
    table = replacement_table()
    found = pairs(golden(stack))
    assert found, stack
    assert table.unclassified(sorted(found)) == []


def test_every_type_of_the_plans_has_a_rule_with_its_source_and_date() -> None:
    table = replacement_table()
    used = {t for stack in STACKS for t, _ in pairs(golden(stack))}
    assert used <= set(table.types)
    for type_ in used:
        rule = table.types[type_]
        assert rule.source.strip(), type_
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", rule.read), type_


def test_a_new_type_or_input_is_caught_unclassified() -> None:
    table = replacement_table()
    assert table.unclassified([("aws:ec2/flowLog:FlowLog", "logDestination")]) == [
        ("aws:ec2/flowLog:FlowLog", "logDestination")
    ]
    assert table.unclassified([("aws:ec2/vpc:Vpc", "ipv6CidrBlock")]) == [
        ("aws:ec2/vpc:Vpc", "ipv6CidrBlock")
    ]
    assert table.unclassified([("aws:ec2/vpc:Vpc", "tags.team")]) == []


def test_patterns_cover_a_path_and_what_lies_under_it_and_the_strongest_class_wins() -> None:
    table = ReplacementTable.model_validate(
        {
            "read": "2026-12-01",
            "providers": {},
            "types": {
                "t": {
                    "source": "test",
                    "read": "2026-12-01",
                    "replace": ["spec.selector", "rules[].id"],
                    "update": ["**"],
                    "conditional": [
                        {"input": "size", "when": "decreased", "then": "refuse", "reason": "r"}
                    ],
                }
            },
        }
    )
    rule = table.rules["t"]
    assert rule.verdict("spec.selector.matchLabels.app") == "replace"
    assert rule.verdict("spec.selectorX") == "update"  # a segment boundary, not a prefix
    assert rule.verdict("rules[3].id") == "replace"
    assert rule.verdict("rules[3].status") == "update"
    assert rule.verdict("size") == "conditional"


def test_versions_order_and_minor_skips() -> None:
    assert version_key("v1.19.2-eksbuild.1") < version_key("v1.19.2-eksbuild.3")
    assert version_key("2.12") < version_key("2.15")
    assert version_key("PERSISTENT_2") is None
    assert skips_minor("1.33", "1.35") and skips_minor("1.33", "2.0")
    assert not skips_minor("1.33", "1.34") and not skips_minor("1.34", "1.33")


# ---------------------------------------------------------------------------
# Mutations: one input per class per type, per stack, checked against the table
# ---------------------------------------------------------------------------


def mutated(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "-x"
    if isinstance(value, list):
        return [*value, "added-by-test"]
    if isinstance(value, dict):
        return {**value, "added-by-test": "x"}
    return "x"


def set_leaf(inputs: dict[str, Any], path: str, value: Any) -> None:
    """Set the leaf at a path as `leaves` writes it (dots through objects, [i] into lists);
    keys holding dots (tags) are matched greedily against the object's own keys."""
    node: Any = inputs
    rest = path
    while True:
        if rest.startswith("["):
            index, rest = rest[1:].split("]", 1)
            rest = rest.removeprefix(".")
            if not rest:
                node[int(index)] = value
                return
            node = node[int(index)]
            continue
        key = next(
            (
                k
                for k in sorted(node, key=len, reverse=True)
                if rest == k or rest.startswith((k + ".", k + "["))
            ),
            rest,  # a new input
        )
        rest = rest[len(key) :].removeprefix(".")
        if not rest:
            node[key] = value
            return
        node = node[key]


def mutations(stack: str) -> Iterator[tuple[str, str, str, str]]:
    """(stack, type, resource name, input path): per type, one input of each class it has."""
    table = replacement_table()
    seen: set[tuple[str, str]] = set()
    for r in golden(stack).resources:
        if not r.custom:
            continue
        rule = table.rules[r.type]
        for path, value in leaves(r.inputs).items():
            verdict = rule.verdict(path)
            if verdict == "conditional" or value == SECRET or (r.type, verdict) in seen:
                continue
            seen.add((r.type, str(verdict)))
            yield stack, r.type, r.name, path


CASES = [case for stack in STACKS for case in mutations(stack)]


def test_the_mutations_reach_every_type_of_every_stack() -> None:
    for stack in STACKS:
        types = {r.type for r in golden(stack).resources if r.custom}
        assert types == {t for s, t, _, _ in CASES if s == stack}, stack


@pytest.mark.parametrize(
    ("stack", "type_", "name", "path"), CASES, ids=[f"{c[0]}-{c[1]}-{c[3]}" for c in CASES]
)
def test_the_diff_verdict_of_a_mutation_is_the_table_class(
    stack: str, type_: str, name: str, path: str
) -> None:
    base = golden(stack)
    head = base.model_copy(deep=True)
    target = head.one(type_, name)
    set_leaf(target.inputs, path, mutated(leaves(target.inputs)[path]))
    diff = compare_plans(base, head)
    assert [c.urn for c in diff.changed] == [target.urn]
    [change] = diff.changed
    # (an empty block that gains a key changes under its path)
    assert all(c.path == path or c.path.startswith(path + ".") for c in change.changes)
    replaced = {r.urn: r for r in diff.replacements}
    if replacement_table().rules[type_].verdict(path) == "replace":
        assert replaced[target.urn].cause == "force-new"
    else:
        assert target.urn not in replaced
    assert diff.unclassified == []


# ---------------------------------------------------------------------------
# Upgrades and one-way changes the API refuses
# ---------------------------------------------------------------------------


def change(stack: str, type_: str, name: str | None, **inputs: Any) -> PlanDiff:
    base = golden(stack)
    head = base.model_copy(deep=True)
    target = head.one(type_, name) if name else head.by_type(type_)[0]
    for path, value in inputs.items():
        set_leaf(target.inputs, path.replace("__", "."), value)
    return compare_plans(base, head)


CLUSTER = "aws:eks/cluster:Cluster"
ADDON = "aws:eks/addon:Addon"
FS = "aws:fsx/lustreFileSystem:LustreFileSystem"


def refused_inputs(diff: PlanDiff) -> list[str]:
    return [r.input for r in diff.refused]


def test_an_eks_version_that_skips_a_minor_version_or_goes_down_is_refused() -> None:
    version = golden("pretrain").one(CLUSTER, "cluster-eks").inputs["version"]
    major, minor = (int(p) for p in version.split("."))
    up_one = change("pretrain", CLUSTER, "cluster-eks", version=f"{major}.{minor + 1}")
    assert up_one.refused == [] and up_one.replacements == []
    skip = change("pretrain", CLUSTER, "cluster-eks", version=f"{major}.{minor + 2}")
    assert refused_inputs(skip) == ["version (skips_minor)"]
    assert skip.refused[0].precious and "one minor version at a time" in skip.refused[0].reason
    down = change("pretrain", CLUSTER, "cluster-eks", version=f"{major}.{minor - 1}")
    assert refused_inputs(down) == ["version (decreased)"]


def test_an_add_on_version_lower_than_the_deployed_one_is_refused() -> None:
    addon = golden("pretrain").by_type(ADDON)[0]
    version = addon.inputs["addonVersion"]
    lower = re.sub(r"eksbuild\.(\d+)$", "eksbuild.0", version)
    if lower == version:
        lower = re.sub(r"^v(\d+)\.(\d+)", lambda m: f"v{m[1]}.{int(m[2]) - 1}", version)
    diff = change("pretrain", ADDON, addon.name, addonVersion=lower)
    assert refused_inputs(diff) == ["addonVersion (decreased)"]
    higher = change("pretrain", ADDON, addon.name, addonVersion=version + "9")
    assert higher.refused == []


def test_the_authentication_mode_moves_only_forward() -> None:
    mode = golden("pretrain").one(CLUSTER, "cluster-eks").inputs["accessConfig"]
    assert mode["authenticationMode"] == "API"
    back = change("pretrain", CLUSTER, "cluster-eks", accessConfig__authenticationMode="CONFIG_MAP")
    assert refused_inputs(back) == ["accessConfig.authenticationMode (decreased)"]


def test_shrinking_the_file_system_replaces_it_and_growing_does_not() -> None:
    size = golden("pretrain").by_type(FS)[0].inputs["storageCapacity"]
    shrink = change("pretrain", FS, None, storageCapacity=size - 1200)
    [replaced] = [r for r in shrink.replacements if r.type == FS]
    assert replaced.precious and "storageCapacity (decreased)" in replaced.reason
    grow = change("pretrain", FS, None, storageCapacity=size + 2400)
    assert not [r for r in grow.replacements if r.type == FS]


def test_kubernetes_fields_the_api_server_holds_immutable_are_refused() -> None:
    queue = golden("pretrain").by_type("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue")[0]
    diff = change("pretrain", queue.type, queue.name, spec__clusterQueue="another")
    assert refused_inputs(diff) == ["spec.clusterQueue"]
    priority = golden("pretrain").by_type("kubernetes:scheduling.k8s.io/v1:PriorityClass")[0]
    diff = change("pretrain", priority.type, priority.name, value=priority.inputs["value"] + 1)
    assert refused_inputs(diff) == ["value"]


# ---------------------------------------------------------------------------
# Cascades
# ---------------------------------------------------------------------------


def vpc_cidr_change(stack: str) -> PlanDiff:
    """What `network.vpc_cidr: 10.10.0.0/16 -> 10.11.0.0/16` does to the plan's inputs."""
    base = golden(stack)
    head = base.model_copy(deep=True)
    old = base.by_type("aws:ec2/vpc:Vpc")[0].inputs["cidrBlock"].rsplit(".", 2)[0]
    new = old.rsplit(".", 1)[0] + "." + str(int(old.rsplit(".", 1)[1]) + 1)
    for r in head.resources:
        if r.type in ("aws:ec2/vpc:Vpc", "aws:ec2/subnet:Subnet"):
            r.inputs["cidrBlock"] = r.inputs["cidrBlock"].replace(old + ".", new + ".")
    return compare_plans(base, head)


def test_a_new_vpc_cidr_replaces_the_network_and_everything_in_it() -> None:
    diff = vpc_cidr_change("pretrain")
    by_type: dict[str, int] = {}
    for r in diff.replacements:
        by_type[r.type] = by_type.get(r.type, 0) + 1
    plan = golden("pretrain")
    for type_ in (
        "aws:ec2/vpc:Vpc",
        "aws:ec2/subnet:Subnet",
        "aws:ec2/routeTable:RouteTable",
        "aws:ec2/natGateway:NatGateway",
        "aws:ec2/securityGroup:SecurityGroup",
        "aws:eks/nodeGroup:NodeGroup",
        "aws:fsx/lustreFileSystem:LustreFileSystem",
        "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation",
    ):
        assert by_type.get(type_) == len(plan.by_type(type_)), type_
    precious = {r.type for r in diff.precious_replacements}
    assert precious == {"aws:eks/nodeGroup:NodeGroup", "aws:fsx/lustreFileSystem:LustreFileSystem"}
    # The cluster cannot follow its subnets into another VPC: EKS refuses the update.
    [refusal] = diff.refused
    assert refusal.type == CLUSTER and refusal.input.startswith("vpcConfig.subnetIds")
    # The internet gateway moves in place (detach, attach).
    assert "network-igw" in {r.name for r in diff.updated_by_cascade}


def test_a_subnet_replaced_in_the_same_vpc_does_not_refuse_the_cluster() -> None:
    base = golden("pretrain")
    head = base.model_copy(deep=True)
    subnet = head.by_type("aws:ec2/subnet:Subnet")[0]
    subnet.inputs["availabilityZone"] = subnet.inputs["availabilityZone"][:-1] + "f"
    diff = compare_plans(base, head)
    assert diff.refused == []
    assert subnet.urn in {r.urn for r in diff.replacements}


def test_a_replaced_cluster_replaces_its_kubernetes_provider_and_every_object() -> None:
    diff = change("pretrain", CLUSTER, "cluster-eks", roleArn="arn:aws:iam::1:role/other")
    plan = golden("pretrain")
    provider = next(r for r in plan.resources if r.type == "pulumi:providers:kubernetes")
    on_it = {r.urn for r in plan.resources if r.provider == provider.urn}
    replaced = {r.urn: r for r in diff.replacements}
    assert provider.urn in replaced
    assert on_it and on_it <= set(replaced)
    sample = replaced[min(on_it)]
    assert sample.cause == "cascade" and "its provider cluster-k8s is replaced" in sample.reason


def test_a_replaced_key_leaves_its_key_policy_on_the_old_key() -> None:
    key = "aws:kms/key:Key"
    plan = golden("pretrain")
    policies = plan.by_type("aws:kms/keyPolicy:KeyPolicy")
    if not policies:
        pytest.skip("no key policy in this plan")
    target = plan.dependencies_of(policies[0], key)[0]
    diff = change("pretrain", key, target.name, multiRegion=not target.inputs.get("multiRegion"))
    assert any(r.type == "aws:kms/keyPolicy:KeyPolicy" for r in diff.refused)


# ---------------------------------------------------------------------------
# Order of a replacement, and what it costs meanwhile
# ---------------------------------------------------------------------------


def node_group(plan: Plan, pool: str) -> Resource:
    return next(
        r
        for r in plan.by_type("aws:eks/nodeGroup:NodeGroup")
        if r.inputs.get("labels", {}).get("llm-platform/pool") == pool
    )


def test_a_named_node_group_is_deleted_first_and_its_pool_has_no_nodes_meanwhile() -> None:
    base = golden("pretrain")
    head = base.model_copy(deep=True)
    group = node_group(head, "h100")
    group.inputs["amiType"] = "AL2023_x86_64_NVIDIA-x"
    diff = compare_plans(base, head)
    [replaced] = [r for r in diff.replacements if r.urn == group.urn]
    assert replaced.order == "delete-first"
    [transition] = transition_costs(diff, base, head)
    assert (transition.pool, transition.order, transition.usd) == ("h100", "delete-first", 0.0)
    assert transition.nodes == 16 and "no capacity" in transition.describe()


def test_an_autonamed_node_group_is_created_first_and_both_run_meanwhile() -> None:
    base = golden("pretrain").model_copy(deep=True)
    del node_group(base, "h100").inputs["nodeGroupName"]
    head = base.model_copy(deep=True)
    node_group(head, "h100").inputs["amiType"] = "AL2023_x86_64_NVIDIA-x"
    diff = compare_plans(base, head)
    [transition] = transition_costs(diff, base, head)
    assert transition.order == "create-first"
    per_hour = base.outputs["cost"]["node_pools"]["h100"]["usd_per_hour"]["desired"]
    assert transition.usd_per_hour == per_hour
    assert transition.usd == round(per_hour * transition.minutes / 60, 2) > 0


def test_delete_before_replace_on_the_resource_makes_it_delete_first() -> None:
    base = golden("pretrain").model_copy(deep=True)
    group = node_group(base, "h100")
    del group.inputs["nodeGroupName"]
    group.delete_before_replace = True
    head = base.model_copy(deep=True)
    node_group(head, "h100").inputs["amiType"] = "AL2023_x86_64_NVIDIA-x"
    [replaced] = [r for r in compare_plans(base, head).replacements if r.urn == group.urn]
    assert replaced.order == "delete-first"
