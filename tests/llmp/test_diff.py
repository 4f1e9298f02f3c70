"""`llmp diff`: plan comparison, replacements, cost and policy deltas, the command end to end.

The end-to-end tests run the real command in a git repository made under
tmp_path from the project's files (base = its one commit; the stack file is
then edited in its working tree), as a subprocess whose working directory is
that repository, so the code under test is the repository's own.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llmp.diff import CostLine, DiffReport, cost_delta, exit_code, violation_delta
from llmp.diff.compare import PlanDiff, compare_plans
from llmp.diff.render import render_markdown
from llmp.diff.replacements import computed_markers, replacement_rules
from llmp.plan import SECRET, Plan, Resource
from llmp.plan.leaves import ABSENT
from llmp.plan.policy import Violation
from llmp.stacks import REPO_ROOT
from spec.catalog import catalog
from spec.replacement import Conditional, ReplaceInput, TypeRule, replacement_table
from tests.llmp.test_revision import commit_all, copy_project, git

# ---------------------------------------------------------------------------
# Hand-made plans
# ---------------------------------------------------------------------------

STACK_URN = "urn:pulumi:s::p::"


def resource(
    type_: str,
    name: str,
    inputs: dict[str, Any],
    *,
    parent_type: str = "llmp:test:Component",
    dependencies: list[str] | None = None,
    custom: bool = True,
) -> Resource:
    return Resource(
        urn=f"{STACK_URN}{parent_type}${type_}::{name}",
        type=type_,
        name=name,
        custom=custom,
        inputs=inputs,
        dependencies=dependencies or [],
    )


def plan(*resources: Resource, cost: dict[str, Any] | None = None) -> Plan:
    return Plan(
        project="p", stack="s", resources=list(resources), outputs={"cost": cost} if cost else {}
    )


FS = "aws:fsx/lustreFileSystem:LustreFileSystem"
KEY = "aws:kms/key:Key"
BUCKET = "aws:s3/bucket:Bucket"
ROLE = "aws:iam/role:Role"


def rule(
    *,
    precious: bool = False,
    replace: tuple[str | ReplaceInput, ...] = (),
    conditional: tuple[Conditional, ...] = (),
    why: str | None = None,
    name_input: str | None = None,
) -> TypeRule:
    """A type's rules as the table would hold them (everything not listed: in place)."""
    return TypeRule(
        source="test",
        read="2026-12-01",
        precious=precious,
        replace=tuple(ReplaceInput(input=r) if isinstance(r, str) else r for r in replace),
        update=("**",),
        conditional=conditional,
        why=why,
        name_input=name_input,
    )


def cond(input: str, when: str, then: str = "replace", **kw: Any) -> Conditional:
    return Conditional(input=input, when=(when,), then=then, reason=f"test: {when}", **kw)


RULES = {
    FS: rule(
        precious=True,
        replace=("subnetIds", "kmsKeyId"),
        conditional=(
            cond("storageCapacity", "decreased"),
            cond("fileSystemTypeVersion", "decreased"),
        ),
        why="a new file system is empty",
    ),
    KEY: rule(precious=True, replace=("multiRegion",)),
    BUCKET: rule(precious=True, replace=("bucket",), name_input="bucket"),
    "aws:eks/cluster:Cluster": rule(
        precious=True, conditional=(cond("encryptionConfig", "removed"),)
    ),
    "aws:ec2/subnet:Subnet": rule(replace=("cidrBlock",)),
}


def lustre(**overrides: Any) -> Resource:
    inputs = {
        "storageCapacity": 4800,
        "subnetIds": "subnet-a-id",
        "kmsKeyId": "arn:aws:mock:us-east-1:000000000000:key/data-key",
        "fileSystemTypeVersion": "2.15",
        "tags": {"Name": "fs"},
    }
    inputs.update(overrides)
    return resource(FS, "fs", inputs)


def test_an_input_change_lists_its_path_and_values_and_nothing_else() -> None:
    base = plan(lustre(), resource(ROLE, "role", {"name": "r"}))
    head = plan(lustre(tags={"Name": "fs", "team": "ml"}), resource(ROLE, "role", {"name": "r"}))
    diff = compare_plans(base, head, RULES)
    assert [(c.name, [(x.path, x.old, x.new) for x in c.changes]) for c in diff.changed] == [
        ("fs", [("tags.team", ABSENT, '"ml"')])
    ]
    assert diff.unchanged == 1
    assert diff.added == diff.deleted == diff.renamed == diff.replacements == []


def test_a_dependency_change_alone_is_not_an_input_change() -> None:
    base = plan(resource(ROLE, "role", {"name": "r"}, dependencies=[]))
    head = plan(resource(ROLE, "role", {"name": "r"}, dependencies=[f"{STACK_URN}x::y"]))
    diff = compare_plans(base, head, RULES)
    assert diff.changed == []
    assert (diff.unchanged, diff.dependencies_only) == (1, 1)


def test_secrets_stay_redacted_and_long_values_are_cut() -> None:
    long_policy = json.dumps({"Statement": [{"Sid": f"s{i}"} for i in range(40)]})
    base = plan(resource(ROLE, "role", {"password": SECRET, "token": "", "policy": long_policy}))
    head = plan(
        resource(ROLE, "role", {"password": SECRET, "token": SECRET, "policy": long_policy + " "})
    )
    [changed] = compare_plans(base, head, RULES).changed
    by_path = {c.path: c for c in changed.changes}
    # Two redacted values cannot be told apart offline: not reported as a change.
    assert set(by_path) == {"token", "policy"}
    assert (by_path["token"].old, by_path["token"].new) == ('""', SECRET)
    assert len(by_path["policy"].old) == 80 and by_path["policy"].old.endswith("…")


def test_a_force_new_input_replaces_a_precious_resource() -> None:
    diff = compare_plans(plan(lustre()), plan(lustre(subnetIds="subnet-b-id")), RULES)
    [replaced] = diff.replacements
    assert (replaced.name, replaced.precious, replaced.cause) == ("fs", True, "force-new")
    assert "subnetIds" in replaced.reason
    assert replaced.why == "a new file system is empty"


@pytest.mark.parametrize(
    ("change", "replaced"),
    [
        ({"storageCapacity": 2400}, True),  # shrinking forces a new file system
        ({"storageCapacity": 9600}, False),  # growing is an update
        ({"fileSystemTypeVersion": "2.12"}, True),  # a lower Lustre version
        ({"fileSystemTypeVersion": "2.16"}, False),  # an in-place upgrade
    ],
)
def test_decreased_only_forces_a_replacement_when_the_value_goes_down(
    change: dict[str, Any], replaced: bool
) -> None:
    diff = compare_plans(plan(lustre()), plan(lustre(**change)), RULES)
    assert bool(diff.replacements) is replaced
    assert len(diff.changed) == 1


def test_removed_only_forces_a_replacement_when_the_block_is_dropped() -> None:
    cluster = "aws:eks/cluster:Cluster"
    encrypted = {"name": "c", "encryptionConfig": {"resources": ["secrets"]}}
    plain = {"name": "c"}
    dropped = compare_plans(
        plan(resource(cluster, "eks", encrypted)), plan(resource(cluster, "eks", plain)), RULES
    )
    added = compare_plans(
        plan(resource(cluster, "eks", plain)), plan(resource(cluster, "eks", encrypted)), RULES
    )
    assert [r.reason for r in dropped.replacements] == [
        "changes encryptionConfig (removed), which forces a new one"
    ]
    assert added.replacements == [] and len(added.changed) == 1


def test_a_protected_or_retained_resource_says_so_in_its_replacement() -> None:
    protected = lustre().model_copy(update={"protect": True})
    retained = resource(BUCKET, "b", {"bucket": "acme-b"}).model_copy(
        update={"retain_on_delete": True}
    )
    diff = compare_plans(plan(protected, retained), plan(), RULES)
    reasons = {r.name: r.reason for r in diff.replacements}
    assert reasons["fs"].endswith("refuses to delete it until protect is lifted")
    assert reasons["b"].endswith("the old one stays in the account, outside the stack")


def test_a_rename_is_a_delete_and_create_and_replaces_a_precious_bucket() -> None:
    base = plan(
        resource(BUCKET, "storage-models", {"bucket": "acme-models", "forceDestroy": False})
    )
    head = plan(
        resource(BUCKET, "storage-weights", {"bucket": "acme-weights", "forceDestroy": False})
    )
    diff = compare_plans(base, head, RULES)
    assert [(r.old.name, r.new.name) for r in diff.renamed] == [
        ("storage-models", "storage-weights")
    ]
    assert diff.added == diff.deleted == []
    [replaced] = diff.precious_replacements
    assert (replaced.name, replaced.cause) == ("storage-models", "rename")
    assert "aliases=[old URN]" in replaced.reason


def test_renames_pair_the_most_alike_resources_of_a_type() -> None:
    def bucket(name: str, role: str) -> dict[str, Any]:
        return resource(BUCKET, f"s-{name}", {"bucket": f"acme-{name}", "tags": {"role": role}})

    base = plan(bucket("models", "primary"), bucket("models-replica", "replica"))
    head = plan(bucket("weights-replica", "replica"), bucket("weights", "primary"))
    pairs = {(r.old.name, r.new.name) for r in compare_plans(base, head, RULES).renamed}
    assert pairs == {("s-models", "s-weights"), ("s-models-replica", "s-weights-replica")}


def test_unrelated_resources_of_a_type_are_a_delete_and_an_add_not_a_rename() -> None:
    base = plan(resource(ROLE, "a", {"x": 1, "y": 2}), resource(ROLE, "b", {"x": 1, "y": 3}))
    head = plan(resource(ROLE, "c", {"p": "q"}), resource(ROLE, "d", {"r": "s"}))
    diff = compare_plans(base, head, RULES)
    assert diff.renamed == []
    assert sorted(r.name for r in diff.deleted) == ["a", "b"]
    assert sorted(r.name for r in diff.added) == ["c", "d"]
    # Deleted, not precious (no rule for the type): listed among replacements, not loud.
    assert [(r.name, r.precious, r.cause) for r in diff.replacements] == [
        ("a", False, "delete"),
        ("b", False, "delete"),
    ]


def test_a_replacement_spreads_to_what_takes_its_id_or_arn_in_a_force_new_input() -> None:
    key = resource(KEY, "data-key", {"multiRegion": False})
    subnet = resource("aws:ec2/subnet:Subnet", "subnet-a", {"cidrBlock": "10.0.0.0/24"})
    base = plan(key, subnet, lustre())
    head = plan(resource(KEY, "data-key", {"multiRegion": True}), subnet, lustre())
    diff = compare_plans(base, head, RULES)
    assert {(r.name, r.cause) for r in diff.replacements} == {
        ("data-key", "force-new"),
        ("fs", "cascade"),
    }
    cascade = next(r for r in diff.replacements if r.cause == "cascade")
    assert cascade.reason.startswith("kmsKeyId takes an output of data-key")

    # Through a non-precious subnet the same way (its mock id `<name>-id`).
    head = plan(
        key, resource("aws:ec2/subnet:Subnet", "subnet-a", {"cidrBlock": "10.0.9.0/24"}), lustre()
    )
    diff = compare_plans(base, head, RULES)
    assert {(r.name, r.precious) for r in diff.replacements} == {("subnet-a", False), ("fs", True)}


def test_a_stack_that_is_new_is_all_added() -> None:
    diff = compare_plans(plan(), plan(lustre(), resource(ROLE, "role", {})), RULES)
    assert sorted(r.name for r in diff.added) == ["fs", "role"]
    assert diff.replacements == []


def aws_provider(name: str, region: str) -> Resource:
    return Resource(
        urn=f"{STACK_URN}pulumi:providers:aws::{name}",
        type="pulumi:providers:aws",
        name=name,
        inputs={"region": region},
    )


def on_provider(r: Resource, provider: Resource) -> Resource:
    return r.model_copy(update={"provider": provider.urn})


def test_a_move_to_a_provider_configured_differently_replaces_the_resource() -> None:
    primary, dr, twin = (
        aws_provider("aws", "us-east-1"),
        aws_provider("aws-dr", "us-west-2"),
        aws_provider("aws-twin", "us-east-1"),
    )
    bucket = resource(BUCKET, "models", {"bucket": "acme-models"})
    base = plan(primary, dr, twin, on_provider(bucket, primary))

    moved = compare_plans(base, plan(primary, dr, twin, on_provider(bucket, dr)), RULES)
    [changed] = moved.changed
    assert [(c.path, c.old, c.new) for c in changed.changes] == [("(provider)", "aws", "aws-dr")]
    [replaced] = moved.precious_replacements
    assert (replaced.name, replaced.cause) == ("models", "provider")
    assert "from aws to aws-dr, configured differently (region)" in replaced.reason

    # The same configuration under another name: the engine's DiffConfig finds nothing.
    renamed = compare_plans(base, plan(primary, dr, twin, on_provider(bucket, twin)), RULES)
    assert [c.name for c in renamed.changed] == ["models"]
    assert renamed.replacements == []


def test_numbers_compare_by_value_but_a_boolean_is_not_a_number() -> None:
    base = plan(resource(ROLE, "r", {"size": 30, "limits": [1, 2], "enabled": True, "n": 1}))
    head = plan(resource(ROLE, "r", {"size": 30.0, "limits": [1.0, 2.0], "enabled": 1, "n": True}))
    [changed] = compare_plans(base, head, RULES).changed
    assert [(c.path, c.old, c.new) for c in changed.changes] == [
        ("enabled", "true", "1"),
        ("n", "1", "true"),
    ]


def test_a_reordered_terraform_set_is_listed_but_replaces_nothing() -> None:
    group = "aws:eks/nodeGroup:NodeGroup"
    rules = {
        group: rule(
            precious=True,
            replace=(ReplaceInput(input="subnetIds", unordered=True), "instanceTypes"),
        )
    }

    def pool(subnets: list[str], types: list[str]) -> dict[str, Any]:
        return plan(resource(group, "gpu", {"subnetIds": subnets, "instanceTypes": types}))

    base = pool(["subnet-a-id", "subnet-b-id"], ["p5.48xlarge", "p5en.48xlarge"])
    reordered = compare_plans(
        base, pool(["subnet-b-id", "subnet-a-id"], ["p5.48xlarge", "p5en.48xlarge"]), rules
    )
    assert [c.path for c in reordered.changed[0].changes] == ["subnetIds"]
    assert reordered.replacements == []
    # A set with another member, and an ordered list reordered (instance type priority): new.
    other = compare_plans(
        base, pool(["subnet-a-id", "subnet-c-id"], ["p5.48xlarge", "p5en.48xlarge"]), rules
    )
    assert [r.reason for r in other.replacements] == ["changes subnetIds, which forces a new one"]
    priority = compare_plans(
        base, pool(["subnet-a-id", "subnet-b-id"], ["p5en.48xlarge", "p5.48xlarge"]), rules
    )
    assert [r.cause for r in priority.replacements] == ["force-new"]


def test_a_parent_change_pairs_by_name_and_says_the_parent_changed() -> None:
    def bucket(name: str, parent_type: str, tag: str) -> dict[str, Any]:
        return resource(
            BUCKET, name, {"bucket": f"acme-{name}", "tags": {"t": tag}}, parent_type=parent_type
        )

    old_parent, new_parent = "llmp:storage:Storage", "llmp:storage:Buckets"
    base = plan(bucket("a", old_parent, "x"), bucket("b", old_parent, "x"))
    # Moved under a new parent type, and their inputs changed so much that b's now look
    # more like a's than its own: the name still says which is which.
    head = plan(bucket("a", new_parent, "y" * 40), bucket("b", new_parent, "x"))
    diff = compare_plans(base, head, RULES)
    assert sorted((r.old.name, r.new.name) for r in diff.renamed) == [("a", "a"), ("b", "b")]
    assert all(r.old.urn != r.new.urn for r in diff.renamed)
    reasons = {r.name: r.reason for r in diff.precious_replacements}
    assert set(reasons) == {"a", "b"}
    assert reasons["a"].startswith("its parent changes, and its URN with it: Pulumi deletes it")


# ---------------------------------------------------------------------------
# Cost and policy deltas
# ---------------------------------------------------------------------------


def cost(desired: float, components: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "usd_per_hour": {"min": 1.0, "desired": desired, "max": 10.0},
        "usd_per_month_with_storage": desired * 730,
        "node_pools": {"gpu": {"usd_per_hour": {"desired": desired - 1, "max": 9.0}}},
    }
    if components is not None:
        out["components"] = components
    return out


def test_cost_delta_without_components_in_the_plans() -> None:
    delta = cost_delta(plan(cost=cost(5.0)), plan(cost=cost(7.5)))
    by_measure = {c.measure: c for c in delta["totals"]}
    assert by_measure["$/h at desired size"] == CostLine("$/h at desired size", 5.0, 7.5)
    assert by_measure["$/h at desired size"].delta == 2.5
    assert by_measure["$/h at min size"].delta == 0
    assert [c.measure for c in delta["node_pools"]] == ["pool gpu, $/h at desired"]
    assert delta["components"] == []


def test_cost_delta_per_component_when_present_on_either_side() -> None:
    delta = cost_delta(
        plan(cost=cost(5.0, {"storage": {"usd_per_month": 100.0}, "net": {"usd_per_month": 3}})),
        plan(cost=cost(5.0, {"storage": {"usd_per_month": 120.0}, "net": {"usd_per_month": 3}})),
    )
    assert [(c.measure, c.base, c.head, c.delta) for c in delta["components"]] == [
        ("component storage, $/month", 100.0, 120.0, 20.0)
    ]
    older = cost_delta(plan(cost=cost(5.0)), plan(cost=cost(5.0, {"gpu": {"usd_per_month": 9}})))
    [line] = older["components"]
    assert (line.base, line.head, line.delta) == (None, 9.0, 9.0)


def test_cost_of_a_missing_side_is_zero_and_of_a_missing_output_unknown() -> None:
    added = cost_delta(None, plan(cost=cost(5.0)))
    assert {c.measure: c.base for c in added["totals"]}["$/h at desired size"] == 0.0
    no_output = cost_delta(plan(), plan(cost=cost(5.0)))
    assert {c.measure: c.base for c in no_output["totals"]}["$/h at desired size"] is None


def violation(rule: str, urn: str, name: str, level: str = "mandatory") -> Violation:
    return Violation(rule, urn, name, f"{rule} on {name}", level)


def test_violations_match_by_rule_and_resource_urn_or_name() -> None:
    base = [violation("a", "u1", "n1"), violation("b", "u2", "n2"), violation("c", "", "(stack)")]
    head = [
        violation("a", "u1-moved", "n1"),  # same name: not new
        violation("b", "u2", "n2-renamed"),  # same URN: not new
        violation("c", "", "(stack)"),  # stack-wide, any message
        violation("d", "u3", "n3"),
    ]
    new, fixed = violation_delta(base, head)
    assert [v.rule for v in new] == ["d"]
    assert fixed == []
    new, fixed = violation_delta(head, base)
    assert [v.rule for v in fixed] == ["d"] and new == []


def report_of(diff: PlanDiff, new: list[Violation] | None = None) -> DiffReport:
    return DiffReport(
        "s", "main (abc1234)", "the working tree", diff, cost_delta(None, None), new or []
    )


def test_exit_code_fails_on_new_mandatory_violations_and_on_request_on_precious_replacements() -> (
    None
):
    replaced = compare_plans(plan(lustre()), plan(lustre(subnetIds="other-id")), RULES)
    assert exit_code(report_of(replaced), fail_on_replace=False) == 0
    assert exit_code(report_of(replaced), fail_on_replace=True) == 1
    advisory = [violation("x", "u", "n", "advisory")]
    assert exit_code(report_of(PlanDiff(), advisory), fail_on_replace=True) == 0
    assert exit_code(report_of(PlanDiff(), [violation("x", "u", "n")]), fail_on_replace=False) == 1


# ---------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------


def assert_well_formed_markdown(text: str, limit: int = 65536) -> None:
    assert len(text) <= limit
    assert text.startswith("### ")
    assert text.count("<details>") == text.count("</details>")
    assert text.count("<summary>") == text.count("</summary>") == text.count("<details>")
    depth = 0
    for line in text.splitlines():  # never nested, never closed before opened
        depth += line.count("<details>") - line.count("</details>")
        assert depth in (0, 1)
    assert depth == 0
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.fullmatch(r"\|(-+:?\|)+|\|(-+\|)+|\|(---:?\|)+", line.replace("-:", "--:")):
            columns = lines[i - 1].count("|") - lines[i - 1].count("\\|")
            for row in lines[i + 1 :]:
                if not row.startswith("|"):
                    break
                assert row.count("|") - row.count("\\|") == columns, row
    assert text.count("```") % 2 == 0


def test_markdown_of_a_huge_change_is_truncated_between_blocks() -> None:
    base = plan(*(resource(ROLE, f"role-{i}", {"p": "x" * 50, "q": i}) for i in range(600)))
    head = plan(*(resource(ROLE, f"role-{i}", {"p": "y" * 50, "q": -i}) for i in range(600)))
    text = render_markdown(report_of(compare_plans(base, head, RULES)), limit=20000)
    assert_well_formed_markdown(text, limit=20000)
    assert "Truncated to fit a GitHub comment (20000 characters)" in text
    assert "#### Policy" in text and "#### Cost" in text


def test_markdown_escapes_pipes_in_values() -> None:
    base = plan(resource(ROLE, "role", {"expr": "a|b"}))
    head = plan(resource(ROLE, "role", {"expr": "a||b"}))
    text = render_markdown(report_of(compare_plans(base, head, RULES)))
    assert_well_formed_markdown(text)
    assert '`"a\\|b"`' in text


def test_a_precious_replacement_opens_the_comment_with_a_caution_and_fails_on_request() -> None:
    replaced = compare_plans(plan(lustre()), plan(lustre(storageCapacity=2400)), RULES)
    report = report_of(replaced)
    text = render_markdown(report)
    assert_well_formed_markdown(text)
    lines = text.splitlines()
    caution = lines.index("> [!CAUTION]")
    # Heading, the summary, then the caution: before any table or folded section.
    assert [line for line in lines[:caution] if line] == [lines[0], lines[2]]
    assert lines[caution + 1].startswith("> ⚠️ **This change replaces 1 precious resource(s).**")
    assert lines[caution + 2].startswith("> - `fs` (aws:fsx/lustreFileSystem:LustreFileSystem)")
    assert "storageCapacity (decreased)" in lines[caution + 2]
    assert exit_code(report, fail_on_replace=True) == 1
    assert exit_code(report, fail_on_replace=False) == 0


# ---------------------------------------------------------------------------
# The catalog's replacement table, against the SDK and the plans
# ---------------------------------------------------------------------------


def _args_class(type_token: str) -> type:
    """pulumi_aws's `<Name>Args` class of a type token such as aws:eks/cluster:Cluster."""
    _, module_path, name = type_token.split(":")
    package = importlib.import_module(f"pulumi_aws.{module_path.split('/')[0]}")
    # The resource's own module: `pulumi_aws.s3.BucketLoggingArgs` is another class (the
    # Bucket's logging block).
    module = sys.modules[getattr(package, name).__module__]
    # Where a block type has the resource's name, the SDK names the resource's args InitArgs.
    return getattr(module, f"{name}InitArgs", None) or getattr(module, f"{name}Args")


def _sdk_inputs(cls: type) -> dict[str, str]:
    """camelCase input name -> its annotation's text, from the class's Pulumi getters."""
    out = {}
    for attr in vars(cls).values():
        getter = attr.fget if isinstance(attr, property) else None
        if getter is not None and hasattr(getter, "_pulumi_name"):
            out[getter._pulumi_name] = str(getter.__annotations__.get("return"))
    return out


def _resolve_input_path(type_token: str, path: str) -> bool:
    module = importlib.import_module(f"pulumi_aws.{type_token.split(':')[1].split('/')[0]}")
    cls = _args_class(type_token)
    parts = path.split(".")
    for i, part in enumerate(parts):
        inputs = _sdk_inputs(cls)
        if part not in inputs:
            return False
        if i == len(parts) - 1:
            return True
        nested = re.search(r"ForwardRef\('(\w+Args)'\)", inputs[part])
        if nested is None:
            return False
        cls = getattr(module, nested.group(1))
    return True


def test_every_aws_input_the_table_names_is_an_input_of_the_sdk() -> None:
    table = replacement_table()
    checked = 0
    for type_token, type_rule in table.types.items():
        if not type_token.startswith("aws:"):
            continue
        patterns = [
            *(r.input for r in type_rule.replace),
            *(c.input for c in type_rule.conditional),
            *type_rule.update,
        ]
        for pattern in patterns:
            path = pattern.replace("[]", "")
            assert _resolve_input_path(type_token, path), (type_token, pattern)
            checked += 1
    assert checked > 250


def test_the_sdk_check_catches_a_wrong_input_name() -> None:
    assert _resolve_input_path("aws:eks/nodeGroup:NodeGroup", "scalingConfig.desiredSize")
    assert not _resolve_input_path("aws:eks/nodeGroup:NodeGroup", "scalingConfig.desired_size")
    assert not _resolve_input_path("aws:eks/nodeGroup:NodeGroup", "taint")  # the SDK says taints


def test_every_precious_type_is_a_type_the_plans_use(plans: Callable[[str], Any]) -> None:
    used = {r.type for r in plans("pretrain").resources}
    assert set(replacement_table().precious_types) <= used
    # pulumi-aws 7 names the bucket aws:s3/bucket:Bucket (the V2 bucket of version 6).
    assert "aws:s3/bucket:Bucket" in used and "aws:s3/bucketV2:BucketV2" not in used


def test_a_kms_key_replacement_spreads_to_the_file_system_in_the_real_plan(
    plans: Callable[[str], Any],
) -> None:
    base = plans("pretrain")
    head = base.model_copy(deep=True)
    key = head.one(KEY, "storage-s3")
    key.inputs["multiRegion"] = True
    (fs,) = base.by_type(FS)
    # The plan's file system takes the key's ARN as the synth mocks write it.
    assert fs.inputs["kmsKeyId"].endswith(":key/storage-s3")
    assert "storage-s3-id" in computed_markers(key)
    diff = compare_plans(base, head, replacement_rules())
    replaced = {(r.name, r.cause) for r in diff.replacements}
    assert ("storage-s3", "force-new") in replaced
    assert (fs.name, "cascade") in replaced


# ---------------------------------------------------------------------------
# The command, end to end, in a repository under tmp_path
# ---------------------------------------------------------------------------

P5_PER_HOUR = catalog().instance("p5.48xlarge").on_demand_usd_per_hour


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_project(tmp_path_factory.mktemp("diff-repo"))
    git(root, "init", "-q")
    commit_all(root, "base")
    return root


@pytest.fixture
def stack_file(repo: Path) -> Iterator[Path]:
    """The pretrain stack file of the repository's working tree, restored after the test."""
    path = repo / "stacks" / "Pulumi.pretrain.yaml"
    original = path.read_text()
    yield path
    path.write_text(original)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) >= 1, old
    path.write_text(text.replace(old, new, 1))


def llmp(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmp.cli", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_raising_the_gpu_pool_by_two_nodes(repo: Path, stack_file: Path) -> None:
    pool = stack_file.read_text().split("    h100:\n", 1)[1]
    assert pool.startswith("      instance_type: p5.48xlarge\n      min_size: 16\n")
    edit(
        stack_file,
        "      desired_size: 16\n      max_size: 16\n",
        "      desired_size: 18\n      max_size: 18\n",
    )
    markdown = repo / "out" / "diff.md"
    done = llmp(repo, "diff", "--base", "HEAD", "pretrain", "--json", "--markdown", str(markdown))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)

    node_groups = [c for c in report["changed"] if c["type"] == "aws:eks/nodeGroup:NodeGroup"]
    assert [(c["name"], c["changes"]) for c in node_groups] == [
        (
            "gpu-h100-nodes",
            [
                {"path": "scalingConfig.desiredSize", "old": "16", "new": "18"},
                {"path": "scalingConfig.maxSize", "old": "16", "new": "18"},
            ],
        )
    ]
    assert report["added"] == report["deleted"] == report["renamed"] == []
    assert report["replacements"] == []
    totals = {c["measure"]: c for c in report["cost"]["totals"]}
    two_nodes = round(2 * P5_PER_HOUR, 2)
    assert totals["$/h at desired size"]["delta"] == pytest.approx(two_nodes, abs=0.011)
    assert totals["$/h at max size"]["delta"] == pytest.approx(two_nodes, abs=0.011)
    assert totals["$/h at min size"]["delta"] == 0
    assert report["new_violations"] == []

    text = markdown.read_text()
    assert_well_formed_markdown(text)
    assert text.startswith(
        f"### `llmp diff` pretrain: HEAD ({git(repo, 'rev-parse', '--short=7', 'HEAD').strip()})"
    )
    assert re.search(rf"\| \$/h at desired size \| .* \| \+\${two_nodes:,.2f} \|", text)
    assert "✅ No precious resource" in text
    assert "<code>gpu-h100-nodes</code>" in text


def test_cost_compares_a_revision_with_the_working_tree(repo: Path, stack_file: Path) -> None:
    """`llmp cost STACK@REF` is the stack as revision REF's own code prices it."""
    edit(
        stack_file,
        "      desired_size: 16\n      max_size: 16\n",
        "      desired_size: 18\n      max_size: 18\n",
    )
    done = llmp(repo, "cost", "pretrain@HEAD", "--compare", "pretrain", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["a"]["label"], report["b"]["label"]) == ("pretrain@HEAD", "pretrain")
    two_nodes = round(2 * P5_PER_HOUR, 2)
    hourly = report["deltas"]["usd_per_hour"]
    assert hourly["desired"]["delta"] == pytest.approx(two_nodes, abs=0.011)
    assert hourly["min"]["delta"] == 0
    gpu = report["deltas"]["components"]["gpu-h100"]
    root_volumes = 2 * 500 * catalog().platform_prices.ebs_gp3_usd_per_gb_month
    month = 2 * P5_PER_HOUR * catalog().hours_per_month + root_volumes
    assert gpu["delta"] == pytest.approx(month, abs=0.05)

    unknown = llmp(repo, "cost", "pretrain", "--compare", "pretrain@no-such-branch")
    assert unknown.returncode == 2
    assert len(unknown.stderr.strip().splitlines()) == 1
    assert "unknown revision 'no-such-branch'" in unknown.stderr


def test_shrinking_the_file_system_is_a_loud_replacement(repo: Path, stack_file: Path) -> None:
    # 38,400 GiB: the EFA-enabled file system's capacity comes in 9,600 GiB steps at 500.
    edit(stack_file, "storage_capacity_gib: 48000", "storage_capacity_gib: 38400")
    done = llmp(repo, "diff", "--base", "HEAD", "pretrain", "--json", "--fail-on-replace")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    precious = [r for r in report["replacements"] if r["precious"]]
    assert [(r["type"], r["cause"]) for r in precious] == [(FS, "force-new")]
    assert "storageCapacity (decreased)" in precious[0]["reason"]


def test_a_new_vpc_cidr_replaces_the_network_and_what_lives_in_it(
    repo: Path, stack_file: Path
) -> None:
    edit(stack_file, "vpc_cidr: 10.10.0.0/16", "vpc_cidr: 10.11.0.0/16")
    markdown = repo / "out" / "vpc.md"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmp.cli",
            "diff",
            "--base",
            "HEAD",
            "pretrain",
            "--markdown",
            str(markdown),
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "COLUMNS": "80"},
    )
    # The cluster cannot follow its subnets into a new VPC: a change `pulumi up` fails on.
    assert done.returncode == 1, done.stderr
    out = done.stdout
    # The CPU pool data's node group and its 6 Auto Scaling group tags follow the subnets,
    # and the 6 interface endpoints with their security group and its rule, the VPC; so do
    # the file system's EFA rules that name its security group.
    assert "PRECIOUS RESOURCES REPLACED: 5 (of 59 replaced)" in out
    assert "REFUSED BY THE API: 1" in out
    assert "59 to replace (5 precious)" in " ".join(out.split())
    assert max(len(line) for line in out.splitlines()) <= 80
    text = markdown.read_text()
    assert_well_formed_markdown(text)
    assert "> [!WARNING]" in text and "`cluster-eks` (aws:eks/cluster:Cluster)" in text


def test_renaming_a_bucket_deletes_a_precious_bucket(repo: Path, stack_file: Path) -> None:
    edit(stack_file, "\n      models:\n", "\n      weights:\n")
    markdown = repo / "out" / "rename.md"
    done = llmp(repo, "diff", "--base", "HEAD", "pretrain", "--markdown", str(markdown))
    assert done.returncode == 0, done.stderr  # loud, but only --fail-on-replace fails on it
    # The two buckets, and the revisions' signing key: a stack without a `models` bucket
    # signs nothing, so the key goes too.
    assert "PRECIOUS RESOURCES REPLACED: 3" in done.stdout
    text = markdown.read_text()
    assert_well_formed_markdown(text)
    assert "> [!CAUTION]" in text
    assert "`storage-revisions` (aws:kms/key:Key)" in text
    assert "> - `storage-models` (aws:s3/bucket:Bucket): renamed to storage-weights" in text
    assert (
        "> - `storage-models-replica` (aws:s3/bucket:Bucket): renamed to storage-weights-replica"
        in text
    )
    assert "<summary>Renamed: delete + create (16)</summary>" in text


def test_a_new_mandatory_violation_fails_the_diff(repo: Path, stack_file: Path) -> None:
    # 4 more p5 nodes at max size: over the stack's GPU budget of $1500/h.
    edit(
        stack_file,
        "      desired_size: 16\n      max_size: 16\n",
        "      desired_size: 16\n      max_size: 20\n",
    )
    done = llmp(repo, "diff", "--base", "HEAD", "pretrain", "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert [(v["rule"], v["level"]) for v in report["new_violations"]] == [
        ("gpu-budget", "mandatory")
    ]
    assert report["replacements"] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--base", "no-such-branch", "pretrain"), "unknown revision 'no-such-branch'"),
        (("--base", "HEAD", "../pretrain"), "not a stack name: '../pretrain'"),
        (("--base", "HEAD", "nosuchstack"), "stack nosuchstack exists neither at HEAD ("),
    ],
)
def test_bad_input_is_one_line_and_exit_2(repo: Path, args: tuple[str, ...], message: str) -> None:
    done = llmp(repo, "diff", *args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(message)
    assert done.stderr.count("\n") == 1


def test_outside_a_git_repository_is_one_line_and_exit_2(tmp_path: Path) -> None:
    tree = copy_project(tmp_path / "no-git")
    done = subprocess.run(
        [sys.executable, "-m", "llmp.cli", "diff", "--base", "HEAD", "pretrain"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)},
    )
    assert done.returncode == 2
    assert "is not in a git repository" in done.stderr
    assert done.stderr.count("\n") == 1


def test_diff_has_help() -> None:
    done = llmp(REPO_ROOT, "diff", "--help")
    assert done.returncode == 0
    for option in ("--base", "--head", "--markdown", "--json", "--fail-on-replace"):
        assert option in done.stdout


def test_diff_takes_a_stack_file_of_the_repository_with_config(repo: Path) -> None:
    """`llmp synth existing-vpc --config FILE` has `llmp diff ... --config FILE` beside it:
    the same file read at the base revision and in the working tree."""
    path = repo / "examples" / "stacks" / "Pulumi.existing-vpc.yaml"
    original = path.read_text()
    try:
        edit(path, "disk_size_gib: 500", "disk_size_gib: 600")
        args = ["diff", "--base", "HEAD", "existing-vpc", "--json"]
        done = llmp(repo, *args, "--config", str(path))
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert [r["pool"] for r in report["rolls"]] == ["h100"]
        outside = llmp(repo, *args, "--config", str(repo.parent / "elsewhere.yaml"))
        assert outside.returncode == 2
        assert "not a file of the repository" in outside.stderr
        assert "Traceback" not in outside.stderr
    finally:
        path.write_text(original)
