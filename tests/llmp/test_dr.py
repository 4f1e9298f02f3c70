"""`llmp dr plan`: the recovery stack's config, its equivalence with the source, RTO and RPO.

The recovery of `pretrain` in us-west-2 is synthesized once per module (both plans run
the real program under the mocks) and every test reads it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from llmp import dr
from llmp.cli import app
from llmp.dr.config import KEY_STAND_IN, DrError, RecoveryOptions, build_recovery_config
from llmp.dr.equivalence import (
    ADOPTION_RULE,
    ALLOWED_DIFFERENCES,
    BUCKET_RULE,
    CAPACITY_BLOCK_RULE,
    REGION_RULE,
    REPLICATION_RULE,
    RESERVATION_RULE,
    STACK_RULE,
    ZONE_RULE,
    PlanDifferences,
    plan_differences,
    without_flavors,
)
from llmp.dr.rto import critical_path, estimate_rpo, waits_for
from llmp.plan import parse_outputs, parse_plan
from llmp.plan.synth import synthesize
from spec.catalog import catalog
from spec.errors import ConfigError
from spec.stackfile import load_config
from tests.conftest import raw_stack, with_section

KEY_ARN = "arn:aws:kms:us-west-2:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
KEY_ID = "1234abcd-12ab-34cd-56ef-1234567890ab"
CHECKPOINTS = "acme-llm-pretrain-checkpoints-us-west-2"
MODELS = "acme-llm-pretrain-models-us-west-2"


def options(**overrides: Any) -> RecoveryOptions:
    base: dict[str, Any] = {
        "source_stack": "pretrain",
        "region": "us-west-2",
        "replica_key_arn": KEY_ARN,
    }
    return RecoveryOptions(**{**base, **overrides})


@pytest.fixture(scope="module")
def recovery() -> dr.DrPlan:
    return dr.make_plan(raw_stack("pretrain"), options())


@pytest.fixture(scope="module")
def plans_pair(recovery: dr.DrPlan) -> tuple[dict[str, Any], dict[str, Any]]:
    source = synthesize("pretrain", raw_stack("pretrain")).to_dict()
    rebuilt = synthesize(recovery.config.stack, recovery.config.synth_raw).to_dict()
    return source, rebuilt


def differences(source: dict[str, Any], recovery: dict[str, Any]) -> PlanDifferences:
    """The comparison of two plan documents (as plan.json holds them, mutated by a test)."""
    return plan_differences(parse_plan(source), parse_plan(recovery))


def one(plan: dict[str, Any], type_: str, name: str) -> dict[str, Any]:
    (found,) = [r for r in plan["resources"] if r["type"] == type_ and r["name"] == name]
    return found


# ---------------------------------------------------------------------------
# The recovery stack's config
# ---------------------------------------------------------------------------


def test_region_bound_settings_are_rewritten(recovery: dr.DrPlan) -> None:
    raw = recovery.config.raw
    assert raw["aws:region"] == "us-west-2"
    network = raw["llm-platform:network"]
    assert network["availability_zones"] == ["us-west-2a", "us-west-2b", "us-west-2c"]
    assert network["vpc_cidr"] == "10.10.0.0/16"  # everything else is the source's
    pools = raw["llm-platform:node_pools"]
    assert pools["h100"]["availability_zones"] == ["us-west-2a"]
    # The capacity block cannot move: the pool and every quota naming it are left out.
    assert "h100-block" not in pools
    assert raw["llm-platform:tenants"]["foundation"]["gpu_quota"] == {"h100": 128}
    assert raw["llm-platform:cluster"]["name"] == "llm-platform-pretrain"
    storage = raw["llm-platform:storage"]
    assert storage["bucket_name_prefix"] == "acme-llm-pretrain-us-west-2"
    assert storage["adoption"] == {
        "buckets": {"checkpoints": CHECKPOINTS, "models": MODELS},
        "kms_key_arn": KEY_ARN,
    }
    # Replication is off: its target is the recovery region itself.
    assert "region" not in storage.get("replication", {})
    assert not any(b.get("replicate") for b in storage["buckets"].values())
    assert recovery.config.dropped_pools == ["h100-block"]
    # The file holds what the source file set and the rewrites, not every default.
    assert "private_subnet_prefix" not in network and "version" not in raw["llm-platform:cluster"]
    assert storage["replication"] == {"time_control": True}
    assert storage["buckets"]["datasets"]["initial_gb"] == 200000  # as written, not 200000.0
    assert set(raw) == set(raw_stack("pretrain"))


def test_an_on_demand_reservation_is_dropped_and_the_pool_kept() -> None:
    raw = with_section(
        "pretrain", "node_pools", {"h100": {"capacity_reservation_id": "cr-0123456789abcdef0"}}
    )
    rc = build_recovery_config(raw, options())
    pool = rc.raw["llm-platform:node_pools"]["h100"]
    assert "capacity_reservation_id" not in pool and pool["placement_group"] is True
    (rewrite,) = [r for r in rc.rewrites if r.key.endswith("h100.capacity_reservation_id")]
    assert rewrite.before == "cr-0123456789abcdef0" and rewrite.after is None
    assert rc.cfg.node_pools["h100"].capacity_reservation_id is None


def test_the_source_config_is_left_unchanged() -> None:
    raw = raw_stack("pretrain")
    before = copy.deepcopy(raw)
    build_recovery_config(raw, options())
    assert raw == before


def test_the_written_stack_file_is_a_valid_stack_file(recovery: dr.DrPlan, tmp_path) -> None:
    stack_path, runbook_path = dr.write_plan_files(recovery, tmp_path, force=False)
    assert stack_path.name == "Pulumi.pretrain-dr.yaml"
    doc = yaml.safe_load(stack_path.read_text())
    cfg = load_config(doc["config"])
    assert cfg.region == "us-west-2"
    assert cfg.storage is not None and cfg.storage.adoption is not None
    assert cfg.storage.adoption.kms_key_id == KEY_ID
    assert runbook_path.name == "pretrain-dr.runbook.md"
    with pytest.raises(DrError, match="exists; pass --force to overwrite it"):
        dr.write_plan_files(recovery, tmp_path, force=False)
    dr.write_plan_files(recovery, tmp_path, force=True)


def test_an_unknown_replica_key_is_left_out_with_an_action_and_a_clear_error() -> None:
    rc = build_recovery_config(raw_stack("pretrain"), options(replica_key_arn=None))
    assert "kms_key_arn" not in rc.raw["llm-platform:storage"]["adoption"]
    assert any(n.level == "action" and "kms_key_arn" in n.text for n in rc.notes)
    with pytest.raises(ConfigError) as exc:
        load_config(rc.raw)
    message = str(exc.value)
    assert message.startswith("config error: llm-platform:storage.adoption.kms_key_arn")
    assert "alias/<source prefix>-s3-replica" in message and "\n" not in message
    # The offline plan still runs, with a stand-in key that never reaches the file.
    stand_in = rc.synth_raw["llm-platform:storage"]["adoption"]["kms_key_arn"]
    assert stand_in == KEY_STAND_IN.format(region="us-west-2")


def test_source_outputs_give_the_real_replica_names_and_key() -> None:
    outputs = parse_outputs(
        {
            "dr_replicas": {
                "checkpoints": {
                    "bucket": "real-ckpt",
                    "region": "us-west-2",
                    "kms_key_arn": KEY_ARN,
                },
                "models": {"bucket": "real-models", "region": "us-west-2", "kms_key_arn": KEY_ARN},
            }
        }
    )
    rc = build_recovery_config(
        raw_stack("pretrain"), options(replica_key_arn=None, outputs=outputs)
    )
    assert rc.adopted == {"checkpoints": "real-ckpt", "models": "real-models"}
    assert rc.key_arn == KEY_ARN and "outputs" in rc.key_from
    # Without dr_replicas, the primary names of `buckets` still give the replicas'.
    rc = build_recovery_config(
        raw_stack("pretrain"),
        options(outputs=parse_outputs({"buckets": {"checkpoints": "a", "models": "b"}})),
    )
    assert rc.adopted == {"checkpoints": "a-us-west-2", "models": "b-us-west-2"}


def test_the_source_stacks_output_names_what_a_recovery_adopts(plans) -> None:
    replicas = plans("pretrain").outputs["dr_replicas"]
    assert replicas["checkpoints"]["bucket"] == CHECKPOINTS
    assert replicas["models"]["region"] == "us-west-2"
    assert replicas["models"]["kms_key_arn"].endswith(":key/storage-replica-s3")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"region": "us-east-1"}, "the source stack's own region"),
        ({"region": "eu-west-1"}, "replicates to us-west-2"),
        ({"region": "uswest2"}, "not an AWS region name"),
        ({"zones": ["us-west-2a", "us-west-2b"]}, "names 2 zones; pretrain uses 3"),
        ({"zones": ["us-west-2a", "us-west-2b", "eu-west-1a"]}, "not an AZ of us-west-2"),
        ({"reservations": {"h100": "cr-0123456789abcdef0"}}, "has no pool h100 on a reservation"),
        ({"reservations": {"h100-block": "block"}}, "not a reservation id"),
        ({"replica_key_arn": "arn:aws:kms:us-east-1:123456789012:key/abc"}, "not us-west-2"),
        ({"stack": "../evil"}, "stack names take"),
        ({"bucket_prefix": "x" * 41}, "longer than 40 characters"),
    ],
)
def test_options_that_cannot_work_are_one_line_errors(overrides, message) -> None:
    with pytest.raises(DrError) as exc:
        build_recovery_config(raw_stack("pretrain"), options(**overrides))
    assert message in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "is not JSON: "),
        (b"\xff", "is not UTF-8 text (byte 0)"),
        ("[" * 100_000, "nested too deeply"),
        ("[1]", "is not an object of stack outputs (`pulumi stack output --json`)"),
        ('{"dr_replicas": {"models": {"bucket": 1}}}', "`dr_replicas.models.bucket` is not"),
    ],
)
def test_outputs_that_are_no_stack_outputs_are_one_line_errors(
    text: str | bytes, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "outputs.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    args = ["--from", "pretrain", "--region", "us-west-2", "--outputs", str(path)]
    result = CliRunner().invoke(app, ["dr", "plan", *args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("--outputs: ") and str(path) in result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_a_reservation_bought_in_the_region_keeps_the_block_pool() -> None:
    rc = build_recovery_config(
        raw_stack("pretrain"), options(reservations={"h100-block": "cr-0fedcba9876543210"})
    )
    pool = rc.raw["llm-platform:node_pools"]["h100-block"]
    assert pool["capacity_reservation_id"] == "cr-0fedcba9876543210"
    assert pool["availability_zones"] == ["us-west-2a"]
    assert rc.dropped_pools == []


def test_given_zones_map_by_position() -> None:
    rc = build_recovery_config(
        raw_stack("pretrain"), options(zones=["us-west-2c", "us-west-2a", "us-west-2b"])
    )
    assert rc.zone_map["us-east-1a"] == "us-west-2c"
    assert rc.raw["llm-platform:node_pools"]["h100"]["availability_zones"] == ["us-west-2c"]
    assert not any("derived from the region name" in n.text for n in rc.notes)


def test_secrets_are_not_copied_but_named() -> None:
    raw = raw_stack("pretrain")
    raw["llm-platform-monitoring:grafanaAdminPassword"] = {"secure": "v1:abc"}
    rc = build_recovery_config(raw, options())
    assert "llm-platform-monitoring:grafanaAdminPassword" not in rc.raw
    assert rc.secrets == ["llm-platform-monitoring:grafanaAdminPassword"]


def test_a_serving_stack_needs_a_certificate_of_the_region() -> None:
    raw = with_section("inference", "network", {})
    with pytest.raises(DrError, match="ACM certificates are regional"):
        build_recovery_config(raw, options(source_stack="inference"))
    cert = "arn:aws:acm:us-west-2:123456789012:certificate/0123abcd-0123-4567-89ab-0123456789ab"
    wrong = cert.replace("us-west-2", "us-east-1")
    with pytest.raises(DrError, match="not an ACM certificate ARN in us-west-2"):
        build_recovery_config(raw, options(source_stack="inference", certificate_arn=wrong))
    rc = build_recovery_config(raw, options(source_stack="inference", certificate_arn=cert))
    assert rc.raw["llm-platform:serving"]["certificate_arn"] == cert
    # inference replicates nothing: its buckets start empty, and the plan says so.
    assert rc.adopted == {}
    assert any("starts empty" in n.text for n in rc.notes)


# ---------------------------------------------------------------------------
# Equivalence
# ---------------------------------------------------------------------------


def test_the_recovery_plan_is_the_source_platform_in_another_region(plans_pair) -> None:
    source, rebuilt = plans_pair
    diff = differences(source, rebuilt)
    assert diff.unexplained == []
    assert diff.equivalent
    # Only replication and the capacity-block pool are missing; nothing is added.
    assert {d.rules for d in diff.only_in_source} == {
        (REPLICATION_RULE,),
        (CAPACITY_BLOCK_RULE,),
    }
    assert diff.only_in_recovery == []
    left_out = {d.name for d in diff.only_in_source if d.rules == (CAPACITY_BLOCK_RULE,)}
    assert left_out >= {"gpu-h100-block", "addons-resourceflavor-pool-h100-block"}
    by_rule = diff.by_rule()
    for rule in (REGION_RULE, ZONE_RULE, BUCKET_RULE, ADOPTION_RULE, STACK_RULE):
        assert by_rule.get(rule), f"no {rule} difference"
    assert set(by_rule) <= set(ALLOWED_DIFFERENCES)
    # The control plane differs only where the region and zones reach it.
    cluster = [d for d in diff.changed if d.type == "aws:eks/cluster:Cluster"]
    assert cluster and all(set(d.rules) <= {REGION_RULE, ZONE_RULE} for d in cluster)
    assert not any(d.path in ("inputs.name", "inputs.version") for d in cluster)


def test_a_bought_block_and_onward_replication_stay_equivalent() -> None:
    plan = dr.make_plan(
        raw_stack("pretrain"),
        options(
            reservations={"h100-block": "cr-0fedcba9876543210"},
            replicate_to="eu-west-1",
            zones=["us-west-2b", "us-west-2c", "us-west-2d"],
        ),
    )
    diff = plan.differences
    assert diff.equivalent, diff.unexplained[:5]
    assert diff.only_in_source == [] and diff.only_in_recovery == []
    (reservation,) = [d for d in diff.changed if d.rules == (RESERVATION_RULE,)]
    assert reservation.recovery == "cr-0fedcba9876543210"
    assert diff.by_rule()[REPLICATION_RULE] > 0  # replicas now go to eu-west-1


def _mutated(rebuilt: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(rebuilt)


def test_a_difference_no_rule_names_is_unexplained(plans_pair) -> None:
    source, rebuilt = plans_pair
    changed = _mutated(rebuilt)
    one(changed, "aws:eks/nodeGroup:NodeGroup", "gpu-h100-nodes")["inputs"]["scalingConfig"][
        "maxSize"
    ] = 8
    one(changed, "aws:ec2/vpc:Vpc", "network-vpc")["inputs"]["cidrBlock"] = "10.99.0.0/16"
    diff = differences(source, changed)
    found = {(d.name, d.path) for d in diff.unexplained}
    assert ("gpu-h100-nodes", "inputs.scalingConfig.maxSize") in found
    assert ("network-vpc", "inputs.cidrBlock") in found
    assert not diff.equivalent


def test_a_missing_or_extra_resource_is_unexplained(plans_pair) -> None:
    source, rebuilt = plans_pair
    changed = _mutated(rebuilt)
    changed["resources"] = [
        r for r in changed["resources"] if r["type"] != "aws:eks/cluster:Cluster"
    ]
    extra = copy.deepcopy(one(changed, "aws:iam/role:Role", "cluster-node"))
    extra["name"], extra["urn"] = "surprise", extra["urn"].replace("cluster-node", "surprise")
    changed["resources"].append(extra)
    diff = differences(source, changed)
    assert {(d.name, d.source, d.recovery) for d in diff.unexplained} >= {
        ("cluster-eks", "present", None),
        ("surprise", None, "present"),
    }


def test_import_ids_and_protection_are_named_adoption_differences(plans_pair) -> None:
    source, rebuilt = plans_pair
    diff = differences(source, rebuilt)
    options_diff = {(d.name, d.path): d for d in diff.changed if d.path.startswith("options.")}
    assert options_diff[("storage-checkpoints", "options.import_id")].recovery == CHECKPOINTS
    assert options_diff[("storage-s3", "options.import_id")].recovery == KEY_ID
    assert options_diff[("storage-s3", "options.protect")].rules == (ADOPTION_RULE,)


def _renamed(plan: dict[str, Any], old: str, new: str) -> None:
    """Every input of `plan` that names `old` names `new` instead."""
    for r in plan["resources"]:
        r["inputs"] = json.loads(json.dumps(r["inputs"]).replace(old, new))


def test_a_bucket_name_that_is_not_region_bound_is_unexplained(plans_pair) -> None:
    source, rebuilt = plans_pair
    # A new bucket must keep its name under the new prefix, not take any name.
    elsewhere = _mutated(rebuilt)
    _renamed(elsewhere, "acme-llm-pretrain-us-west-2-datasets", "somebody-elses-datasets")
    found = {(d.name, d.path) for d in differences(source, elsewhere).unexplained}
    assert ("storage-datasets", "inputs.bucket") in found
    assert ("lustre-datasets", "inputs.dataRepositoryPath") in found
    # Two buckets on one replica: each name alone looks adopted, together they are not.
    merged = _mutated(rebuilt)
    checkpoints = one(merged, "aws:s3/bucket:Bucket", "storage-checkpoints")
    checkpoints["import_id"] = MODELS
    _renamed(merged, CHECKPOINTS, MODELS)
    found = {(d.name, d.path) for d in differences(source, merged).unexplained}
    assert {("storage-checkpoints", "inputs.bucket"), ("storage-models", "inputs.bucket")} <= found


def test_two_buckets_adopting_one_replica_is_a_config_error() -> None:
    raw = copy.deepcopy(build_recovery_config(raw_stack("pretrain"), options()).raw)
    raw["llm-platform:storage"]["adoption"]["buckets"]["models"] = CHECKPOINTS
    with pytest.raises(ConfigError, match=r"adoption\.buckets\.models = .* is already the name of"):
        load_config(raw)
    raw["llm-platform:storage"]["adoption"]["buckets"]["models"] = (
        "acme-llm-pretrain-us-west-2-datasets"  # the name the stack gives a new bucket
    )
    with pytest.raises(ConfigError, match="already the name of bucket datasets"):
        load_config(raw)


def test_a_source_prefix_that_names_the_region_is_translated_once() -> None:
    """`acme-us-east-1` becomes `acme-us-east-1-us-west-2`: the region inside the new
    prefix must not be translated again."""
    raw = with_section("pretrain", "storage", {"bucket_name_prefix": "acme-us-east-1"})
    diff = dr.make_plan(raw, options()).differences
    assert diff.equivalent, diff.unexplained[:3]
    assert diff.by_rule()[BUCKET_RULE] > 0


def test_only_a_capacity_block_pool_may_be_left_out(plans_pair) -> None:
    source, rebuilt = plans_pair
    changed = _mutated(rebuilt)
    changed["resources"] = [
        r
        for r in changed["resources"]
        if r["name"] not in ("gpu-h100", "addons-resourceflavor-pool-h100")
        and not r["name"].startswith("gpu-h100-")
    ]
    for r in changed["resources"]:
        if r["type"].startswith("kubernetes:kueue.x-k8s.io/"):
            r["inputs"], _ = without_flavors(r["inputs"], {"h100"})
    # The quota lowered by exactly what the left-out pools held, as for a block.
    quota = one(changed, "kubernetes:core/v1:ResourceQuota", "tenancy-foundation-quota")
    quota["inputs"]["spec"]["hard"]["requests.nvidia.com/gpu"] = "0"
    diff = differences(source, changed)
    unexplained = {(d.name, d.path) for d in diff.unexplained}
    assert {("gpu-h100", ""), ("gpu-h100-nodes", "")} <= unexplained
    assert ("tenancy-foundation-quota", "inputs.spec.hard.requests.nvidia.com/gpu") in unexplained
    assert not diff.equivalent


def test_adoption_explains_only_what_adoption_sets(plans_pair) -> None:
    source, rebuilt = plans_pair
    changed = _mutated(rebuilt)
    bucket = one(changed, "aws:s3/bucket:Bucket", "storage-checkpoints")
    bucket["protect"] = bucket["retain_on_delete"] = False  # adopted, yet deletable
    # Adoption retains a bucket's settings; it does not protect them.
    one(changed, "aws:s3/bucketVersioning:BucketVersioning", "storage-checkpoints-versioning")[
        "protect"
    ] = True
    cluster = one(changed, "aws:eks/cluster:Cluster", "cluster-eks")
    cluster["import_id"] = "llm-platform-pretrain"  # only buckets and their key are adopted
    cluster["inputs"].setdefault("tags", {})["llm-platform/adopted"] = "true"
    found = {(d.name, d.path) for d in differences(source, changed).unexplained}
    assert found >= {
        ("storage-checkpoints", "options.retain_on_delete"),
        ("storage-checkpoints-versioning", "options.protect"),
        ("cluster-eks", "options.import_id"),
        ("cluster-eks", "inputs.tags.llm-platform/adopted"),
    }


def test_parents_providers_dependencies_and_twins_are_compared(plans_pair) -> None:
    source, rebuilt = plans_pair
    cluster_urn = "urn:pulumi:pretrain-dr::llm-platform::llmp:cluster:Cluster::cluster"
    changed = _mutated(rebuilt)
    nodes = one(changed, "aws:eks/nodeGroup:NodeGroup", "gpu-h100-nodes")
    # Node groups must wait for the vpc-cni add-on (else nodes stay NotReady).
    nodes["dependencies"] = [d for d in nodes["dependencies"] if not d.endswith("cluster-vpc-cni")]
    system = one(changed, "aws:eks/nodeGroup:NodeGroup", "cluster-system")
    system["provider"] = system["provider"].replace("::aws", "::aws-other")
    vpc = one(changed, "aws:ec2/vpc:Vpc", "network-vpc")
    vpc["parent"] = cluster_urn
    twin = copy.deepcopy(one(changed, "aws:eks/nodeGroup:NodeGroup", "gpu-h100-nodes"))
    twin["urn"] = f"{cluster_urn.rsplit('::', 1)[0]}$aws:eks/nodeGroup:NodeGroup::gpu-h100-nodes"
    twin["parent"] = cluster_urn
    changed["resources"].append(twin)  # same type and name, another parent
    diff = differences(source, changed)
    found = {(d.name, d.path) for d in diff.unexplained}
    assert found >= {
        ("gpu-h100-nodes", "dependencies"),
        ("cluster-system", "provider"),
        ("network-vpc", "parent"),
        ("gpu-h100-nodes", ""),
    }
    (missing,) = [d for d in diff.unexplained if d.path == "dependencies"]
    assert missing.source.endswith("::cluster-vpc-cni") and missing.recovery is None


@pytest.fixture(scope="module")
def onward_pair() -> tuple[dict[str, Any], dict[str, Any]]:
    """pretrain recovered with its replicas kept replicating, to eu-west-1."""
    rc = build_recovery_config(raw_stack("pretrain"), options(replicate_to="eu-west-1"))
    source = synthesize("pretrain", raw_stack("pretrain")).to_dict()
    return source, synthesize(rc.stack, rc.synth_raw).to_dict()


def test_onward_replication_differs_only_in_its_region_and_names(onward_pair) -> None:
    source, rebuilt = onward_pair
    diff = differences(source, rebuilt)
    assert diff.equivalent, diff.unexplained[:3]
    replica = [d for d in diff.changed if d.name == "storage-checkpoints-replica"]
    assert {d.path for d in replica} >= {"inputs.bucket"}
    assert all(REPLICATION_RULE in d.rules for d in replica)
    # Being part of the replication does not explain a setting that is not region-bound.
    changed = _mutated(rebuilt)
    lifecycle = one(
        changed,
        "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
        "storage-checkpoints-replica-lifecycle",
    )
    lifecycle["inputs"]["rules"][0]["expiration"] = {"days": 1}
    rule = one(
        changed,
        "aws:s3/bucketReplicationConfig:BucketReplicationConfig",
        "storage-checkpoints-replication",
    )
    rule["inputs"]["rules"][0]["destination"].pop("replicationTime")
    _renamed(changed, "acme-llm-pretrain-us-west-2-models-eu-west-1", "any-other-name")
    found = {(d.name, d.path) for d in differences(source, changed).unexplained}
    assert found >= {
        ("storage-checkpoints-replica-lifecycle", "inputs.rules[0].expiration.days"),
        ("storage-checkpoints-replication", "inputs.rules[0].destination.replicationTime.status"),
        ("storage-models-replica", "inputs.bucket"),
    }


# ---------------------------------------------------------------------------
# Adoption in the recovery plan
# ---------------------------------------------------------------------------


def test_adopted_buckets_and_key_are_imported_protected_and_retained(plans_pair) -> None:
    source, rebuilt = plans_pair
    for name, import_id in (("storage-checkpoints", CHECKPOINTS), ("storage-models", MODELS)):
        bucket = one(rebuilt, "aws:s3/bucket:Bucket", name)
        assert bucket["inputs"]["bucket"] == import_id
        assert bucket["import_id"] == import_id
        assert bucket["protect"] is True and bucket["retain_on_delete"] is True
        assert bucket["inputs"]["tags"]["llm-platform/adopted"] == "true"
        assert "import_id" not in one(source, "aws:s3/bucket:Bucket", name)
    key = one(rebuilt, "aws:kms/key:Key", "storage-s3")
    assert key["import_id"] == KEY_ID and key["protect"] is True
    # Their settings are retained too: a destroy never strips versioning or encryption.
    versioning = one(
        rebuilt, "aws:s3/bucketVersioning:BucketVersioning", "storage-checkpoints-versioning"
    )
    assert versioning["retain_on_delete"] is True and "protect" not in versioning
    # New buckets are created, not imported.
    datasets = one(rebuilt, "aws:s3/bucket:Bucket", "storage-datasets")
    assert datasets["inputs"]["bucket"] == "acme-llm-pretrain-us-west-2-datasets"
    assert "import_id" not in datasets


def test_the_file_system_is_rebuilt_on_the_adopted_buckets_and_key(plans_pair) -> None:
    _, rebuilt = plans_pair
    checkpoints = one(
        rebuilt, "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation", "lustre-checkpoints"
    )["inputs"]
    assert checkpoints["dataRepositoryPath"] == f"s3://{CHECKPOINTS}/runs/"
    assert checkpoints["batchImportMetaDataOnCreate"] is True  # existing checkpoints appear
    datasets = one(
        rebuilt, "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation", "lustre-datasets"
    )["inputs"]
    assert datasets["dataRepositoryPath"] == "s3://acme-llm-pretrain-us-west-2-datasets/"
    key = one(rebuilt, "aws:kms/key:Key", "storage-s3")
    fs = one(rebuilt, "aws:fsx/lustreFileSystem:LustreFileSystem", "lustre-fs")["inputs"]
    assert fs["kmsKeyId"].endswith(":key/storage-s3") and ":us-west-2:" in fs["kmsKeyId"]
    policy = json.loads(
        one(rebuilt, "aws:kms/keyPolicy:KeyPolicy", "lustre-key-policy")["inputs"]["policy"]
    )
    slr = policy["Statement"][1]
    assert (
        f"arn:aws:s3:::{CHECKPOINTS}"
        in slr["Condition"]["StringLike"]["kms:EncryptionContext:aws:s3:arn"]
    )
    assert (
        key["urn"]
        in one(rebuilt, "aws:kms/keyPolicy:KeyPolicy", "lustre-key-policy")["dependencies"]
    )


def test_the_logs_bucket_admits_the_adopted_buckets(plans_pair) -> None:
    _, rebuilt = plans_pair
    policy = json.loads(
        one(rebuilt, "aws:s3/bucketPolicy:BucketPolicy", "storage-logs-policy")["inputs"]["policy"]
    )
    sources = policy["Statement"][1]["Condition"]["ArnLike"]["aws:SourceArn"]
    assert sources == [
        "arn:aws:s3:::acme-llm-pretrain-us-west-2-*",
        f"arn:aws:s3:::{CHECKPOINTS}",
        f"arn:aws:s3:::{MODELS}",
    ]
    logging = one(rebuilt, "aws:s3/bucketLogging:BucketLogging", "storage-checkpoints-logging")
    assert logging["inputs"]["targetBucket"] == "acme-llm-pretrain-us-west-2-logs"


def test_the_recovery_plan_passes_the_policy_pack(plans_pair) -> None:
    from llmp.plan.policy import evaluate, failed

    _, rebuilt = plans_pair
    violations = evaluate(parse_plan(rebuilt), stack_config=False)
    assert not failed(violations), [v for v in violations if v.level == "mandatory"]


# ---------------------------------------------------------------------------
# RTO and RPO
# ---------------------------------------------------------------------------


def _resource(name: str, type_: str, deps=(), parent=None, custom=True, provider=None):
    return {
        "urn": f"urn:{name}",
        "type": type_,
        "name": name,
        "parent": parent,
        "custom": custom,
        "provider": provider,
        "inputs": {},
        "dependencies": list(deps),
    }


def test_the_critical_path_is_the_longest_weighted_chain() -> None:
    times = catalog().recovery.creation_minutes
    plan = {
        "resources": [
            _resource("vpc", "aws:ec2/vpc:Vpc"),
            _resource("eks", "aws:eks/cluster:Cluster", ["urn:vpc"]),
            _resource("nodes", "aws:eks/nodeGroup:NodeGroup", ["urn:eks"]),
            _resource("fs", "aws:fsx/lustreFileSystem:LustreFileSystem", ["urn:vpc"]),
            _resource(
                "dra", "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation", ["urn:fs"]
            ),
        ]
    }
    rto = critical_path(parse_plan(plan))
    assert [s.name for s in rto.path] == ["vpc", "fs", "dra"]
    expected = sum(
        times[t].minutes
        for t in (
            "aws:ec2/vpc:Vpc",
            "aws:fsx/lustreFileSystem:LustreFileSystem",
            "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation",
        )
    )
    assert rto.minutes == pytest.approx(expected)
    assert rto.low < rto.minutes < rto.high
    for before, after in zip(rto.path, rto.path[1:], strict=False):
        assert after.start == pytest.approx(before.finish)


def test_the_critical_path_is_the_heaviest_chain_not_the_longest_one() -> None:
    """Six quick resources in a row lose to one file system; a diamond's join starts
    when its slower branch ends."""
    times = catalog().recovery.creation_minutes
    role = "aws:iam/role:Role"
    chain = [_resource("r0", role)] + [
        _resource(f"r{i}", role, [f"urn:r{i - 1}"]) for i in range(1, 6)
    ]
    plan = {
        "resources": [
            *chain,
            _resource("fs", "aws:fsx/lustreFileSystem:LustreFileSystem"),
            _resource("vpc", "aws:ec2/vpc:Vpc"),
            _resource("nat", "aws:ec2/natGateway:NatGateway", ["urn:vpc"]),
            _resource("sg", "aws:ec2/securityGroup:SecurityGroup", ["urn:vpc"]),
            _resource("eks", "aws:eks/cluster:Cluster", ["urn:nat", "urn:sg"]),
            _resource("nodes", "aws:eks/nodeGroup:NodeGroup", ["urn:eks"]),
        ]
    }
    rto = critical_path(parse_plan(plan))
    assert [s.name for s in rto.path] == ["vpc", "nat", "eks", "nodes"]
    expected = sum(
        times[t].minutes
        for t in (
            "aws:ec2/vpc:Vpc",
            "aws:ec2/natGateway:NatGateway",
            "aws:eks/cluster:Cluster",
            "aws:eks/nodeGroup:NodeGroup",
        )
    )
    assert expected > times["aws:fsx/lustreFileSystem:LustreFileSystem"].minutes
    assert expected > 6 * times[role].minutes
    assert rto.minutes == pytest.approx(expected)
    # Brute force over every chain agrees.
    edges = waits_for(parse_plan(plan))

    def longest(urn: str) -> float:
        own = times[plan_types[urn]].minutes
        return own + max((longest(d) for d in edges[urn]), default=0.0)

    plan_types = {r["urn"]: r["type"] for r in plan["resources"]}
    assert rto.minutes == pytest.approx(max(longest(u) for u in edges))


def test_a_dependency_cycle_is_an_error_not_a_shorter_path() -> None:
    plan = {
        "resources": [
            _resource("a", "aws:iam/role:Role", ["urn:c"]),
            _resource("b", "aws:iam/role:Role", ["urn:a"]),
            _resource("c", "aws:iam/role:Role", ["urn:b"]),
        ]
    }
    with pytest.raises(DrError, match="cycle through urn:") as exc:
        critical_path(parse_plan(plan))
    assert "\n" not in str(exc.value)


def test_of_two_chains_that_end_together_the_path_is_the_first_urns() -> None:
    role = "aws:iam/role:Role"
    plan = {"resources": [_resource(n, role, ["urn:base"]) for n in ("b", "a")]}
    plan["resources"].append(_resource("base", role))
    rto = critical_path(parse_plan(plan))
    assert [s.name for s in rto.path] == ["base", "a"]


def test_depending_on_a_component_waits_for_all_its_resources_and_providers_count() -> None:
    plan = {
        "resources": [
            _resource("cluster", "llmp:cluster:Cluster", custom=False),
            _resource("eks", "aws:eks/cluster:Cluster", parent="urn:cluster"),
            _resource("addon", "aws:eks/addon:Addon", ["urn:eks"], parent="urn:cluster"),
            # Depends on the component only: must still wait for the add-on inside it.
            _resource("after", "aws:iam/role:Role", ["urn:cluster"]),
            _resource("k8s", "pulumi:providers:kubernetes", ["urn:eks"]),
            _resource("ns", "kubernetes:core/v1:Namespace", provider="urn:k8s"),
            _resource("odd", "aws:some/new:Thing"),
        ]
    }
    edges = waits_for(parse_plan(plan))
    assert edges["urn:after"] == {"urn:cluster", "urn:eks", "urn:addon"}
    assert edges["urn:eks"] == {"urn:cluster"}  # a child waits for its parent (Plan.graph)
    assert edges["urn:ns"] == {"urn:k8s"}
    rto = critical_path(parse_plan(plan))
    assert [s.name for s in rto.path] == ["eks", "addon", "after"]
    assert rto.unknown_types == ["aws:some/new:Thing"]


def test_the_pretrain_restart_waits_for_the_cluster_not_the_associations(
    recovery: dr.DrPlan,
) -> None:
    rto = recovery.rto
    types = [s.type for s in rto.path]
    assert "aws:eks/cluster:Cluster" in types and "aws:eks/nodeGroup:NodeGroup" in types
    assert not any(t.startswith("aws:fsx/") for t in types)
    assert rto.minutes == pytest.approx(sum(s.minutes for s in rto.path))
    assert rto.minutes <= 30 < rto.complete
    later = {n.name: n for n in rto.not_awaited}
    # The associations end after the restart begins; it reads S3 instead.
    assert {"lustre-datasets", "lustre-checkpoints"} <= set(later)
    assert all(n.finish > rto.minutes for n in rto.not_awaited)
    assert max(n.finish for n in rto.not_awaited) == pytest.approx(rto.complete)
    assert "--restore-from" in later["lustre-checkpoints"].why
    assert rto.unknown_types == []


def test_a_resource_not_awaited_still_delays_what_needs_it() -> None:
    """Matching NOT_AWAITED takes a resource off the targets, never off the graph."""
    dra = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
    plan = {
        "resources": [
            _resource("vpc", "aws:ec2/vpc:Vpc"),
            _resource("lustre-datasets", dra, ["urn:vpc"]),
            _resource("after", "aws:iam/role:Role", ["urn:lustre-datasets"]),
        ]
    }
    rto = critical_path(parse_plan(plan))
    assert [s.name for s in rto.path] == ["vpc", "lustre-datasets", "after"]
    assert rto.not_awaited == []


def test_the_recovery_names_what_it_creates_new_and_what_it_adopts(recovery: dr.DrPlan) -> None:
    by_type = {r.type: r for r in recovery.recreated}
    # The replicas are adopted; the cluster, its pools and the file system start empty.
    buckets = by_type["aws:s3/bucket:Bucket"]
    assert buckets.adopted and all(n.startswith("storage-") for n in buckets.adopted)
    assert by_type["aws:eks/cluster:Cluster"].created == ["cluster-eks"]
    assert by_type["aws:fsx/lustreFileSystem:LustreFileSystem"].created
    assert "empty" in (by_type["aws:fsx/lustreFileSystem:LustreFileSystem"].why or "")
    assert by_type["aws:kms/key:Key"].adopted  # the replica key
    runbook = dr.render_runbook(recovery, "Pulumi.pretrain-dr.yaml")
    assert "## What the recovery re-creates" in runbook
    assert "| `aws:eks/cluster:Cluster` | `cluster-eks` | none |" in runbook


def test_rpo_is_interval_plus_export_plus_replication(recovery: dr.DrPlan) -> None:
    rpo = recovery.rpo
    parts = {p.what: p for p in rpo.parts}
    assert parts["checkpoint interval"].minutes == 30  # 1800 s in monitoring.alerts
    assert parts["S3 replication (RTC)"].minutes == 15
    assert parts["S3 replication (RTC)"].kind == "SLA"
    assert parts["FSx auto-export to S3"].kind == "assumption"
    assert rpo.minutes == 30 + 15 + catalog().recovery.fsx_auto_export.minutes
    assert not rpo.bound  # the export lag is an assumption


def test_rpo_without_rtc_or_replication() -> None:
    no_rtc = load_config(
        with_section("pretrain", "storage", {"replication": {"time_control": False}})
    )
    rpo = estimate_rpo(no_rtc, interval_seconds=600)
    parts = {p.what: p for p in rpo.parts}
    assert parts["checkpoint interval"].minutes == 10
    assert parts["S3 replication (no RTC)"].kind == "assumption"
    finetune = estimate_rpo(load_config(raw_stack("finetune")))
    assert not finetune.replicated and not finetune.bound
    assert finetune.to_dict()["minutes"] is None  # unbounded: every checkpoint is lost


def test_quotas_cover_the_pools_at_max_size(recovery: dr.DrPlan) -> None:
    by_code = {q.code: q for q in recovery.quotas}
    assert by_code["L-417A185B"].vcpus == 16 * catalog().instance("p5.48xlarge").vcpus
    # The CPU pool data (m7i.4xlarge, max 8) shares the standard instances' quota.
    assert by_code["L-1216C47A"].pools == ["system pool", "data"]
    assert by_code["L-1216C47A"].vcpus == (6 + 8) * catalog().instance("m7i.4xlarge").vcpus


# ---------------------------------------------------------------------------
# Runbook and command line
# ---------------------------------------------------------------------------


def test_the_runbook_walks_through_the_recovery(recovery: dr.DrPlan) -> None:
    text = dr.render_runbook(recovery, "Pulumi.pretrain-dr.yaml")
    for expected in (
        "pulumi stack init pretrain-dr",
        "pulumi up -s pretrain-dr",
        "llmp verify storage pretrain-dr --region us-west-2",
        f"llmp dr restore-point --bucket {CHECKPOINTS} --prefix runs/<job>/ --region us-west-2",
        "`L-417A185B` | 3,072",
        "## RTO: the critical path",
        "| `lustre-checkpoints` |",
        "## RPO: what a disaster can take",
        "## Not carried over, and why",
        "## Failing back",
        "pulumi state delete",
        "None is unexplained.",
    ):
        assert expected in text, expected
    assert "cp Pulumi.pretrain-dr.yaml stacks/" not in text
    assert "cp Pulumi.pretrain-dr.yaml stacks/" in dr.render_runbook(
        recovery, "Pulumi.pretrain-dr.yaml", in_stacks_dir=False
    )
    copied = dr.render_runbook(
        recovery,
        "Pulumi.pretrain-dr.yaml",
        in_stacks_dir=False,
        copy_from="out/dr/Pulumi.pretrain-dr.yaml",
    )
    assert "\ncp out/dr/Pulumi.pretrain-dr.yaml stacks/   # " in copied


def test_the_copy_step_names_the_file_from_the_repository_root(tmp_path: Path) -> None:
    from llmp.stacks import REPO_ROOT

    inside = REPO_ROOT / "out" / "dr" / "Pulumi.pretrain-dr.yaml"
    assert dr.from_repo_root(inside) == "out/dr/Pulumi.pretrain-dr.yaml"
    outside = tmp_path / "Pulumi.pretrain-dr.yaml"
    assert dr.from_repo_root(outside) == str(outside.resolve())


def test_dr_plan_writes_out_dr_by_default_and_nothing_into_stacks(
    recovery: dr.DrPlan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file in stacks/ is a stack the tests and CI synthesize: a recovery stack file
    lands there only when the operator copies it, as the runbook says."""
    import llmp.stacks

    stacks = tmp_path / "repo" / "stacks"  # the repository's stacks/, copied
    stacks.mkdir(parents=True)
    for path in llmp.stacks.STACKS_DIR.glob("Pulumi.*.yaml"):
        (stacks / path.name).write_text(path.read_text())
    before = sorted(p.name for p in stacks.iterdir())
    monkeypatch.setattr(llmp.stacks, "STACKS_DIR", stacks)
    monkeypatch.setattr(llmp.stacks, "REPO_ROOT", stacks.parent)
    monkeypatch.setattr(dr, "make_plan", lambda source, options: recovery)
    monkeypatch.chdir(stacks.parent)
    result = CliRunner().invoke(app, ["dr", "plan", "--from", "pretrain", "--region", "us-west-2"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in stacks.iterdir()) == before
    written = stacks.parent / "out" / "dr"
    assert sorted(p.name for p in written.iterdir()) == [
        "Pulumi.pretrain-dr.yaml",
        "pretrain-dr.runbook.md",
    ]
    runbook = (written / "pretrain-dr.runbook.md").read_text()
    (copy_step,) = [line for line in runbook.splitlines() if line.startswith("cp ")]
    assert copy_step.startswith("cp out/dr/Pulumi.pretrain-dr.yaml stacks/ ")
    assert (stacks.parent / copy_step.split()[1]).is_file()  # the path, run from the root


def test_dr_plan_writes_the_stack_file_and_runbook(tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["dr", "plan", "--from", "pretrain", "--region", "us-west-2", "--out", str(tmp_path)]
    result = runner.invoke(app, [*args, "--replica-key-arn", KEY_ARN, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["equivalence"]["equivalent"] is True
    assert doc["rto"]["critical_path"][-1]["name"] == "addons-clusterqueue-foundation"
    assert doc["rto"]["minutes"] <= 30 < doc["rto"]["complete"]
    assert {"lustre-checkpoints", "lustre-datasets"} <= {
        n["name"] for n in doc["rto"]["not_awaited"]
    }
    assert doc["rpo"]["minutes"] == 55
    assert (tmp_path / "Pulumi.pretrain-dr.yaml").is_file()
    assert (tmp_path / "pretrain-dr.runbook.md").is_file()
    again = runner.invoke(app, args)
    assert again.exit_code == 2
    assert again.stderr.endswith("exists; pass --force to overwrite it\n")
    assert again.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "nope", "--region", "us-west-2"], "no stack file"),
        (["--from", "../pretrain", "--region", "us-west-2"], "--from: not a stack name"),
        (["--from", "pretrain", "--region", "us-east-1"], "own region"),
        (["--from", "pretrain", "--region", "us-west-2", "--reservation", "x"], "POOL=cr-"),
        (
            ["--from", "pretrain", "--region", "us-west-2", "--outputs", "/nonexistent/o.json"],
            "--outputs: no outputs file /nonexistent/o.json",
        ),
        (["--from", "pretrain", "--region", "uswest2"], "is not an AWS region name"),
        (
            ["--from", "pretrain", "--region", "us-west-2", "--zones", "us-west-2a,us-west-2b"],
            "--zones names 2 zones; pretrain uses 3",
        ),
        (["--from", "inference", "--region", "us-west-2"], "pass --certificate-arn ARN"),
    ],
)
def test_dr_plan_bad_input_is_one_line_and_exit_2(args, message, tmp_path) -> None:
    result = CliRunner().invoke(app, ["dr", "plan", *args, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("below", ["", "sub"])
def test_dr_plan_out_on_a_file_is_bad_input_before_anything_runs(
    below: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = tmp_path / "taken"
    taken.write_text("")
    out = taken / below if below else taken

    def never(*_: Any, **__: Any) -> None:
        raise AssertionError("synthesized although --out cannot be written")

    monkeypatch.setattr(dr, "make_plan", never)
    args = ["dr", "plan", "--from", "pretrain", "--region", "us-west-2", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--force"])
    assert result.exit_code == 2, result.output
    assert result.stderr == f"--out {out}: {taken} is a file, not a directory\n"


def test_dr_plan_reads_the_stack_file_config_names(tmp_path: Path) -> None:
    from llmp.stacks import REPO_ROOT

    config = REPO_ROOT / "examples" / "stacks" / "Pulumi.existing-vpc.yaml"
    args = ["dr", "plan", "--from", "existing-vpc", "--region", "us-west-2"]
    done = CliRunner().invoke(app, [*args, "--config", str(config), "--out", str(tmp_path)])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "Pulumi.existing-vpc-dr.yaml").is_file()
    missing = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "x")])
    assert missing.exit_code == 2 and "no stack file" in missing.output


def test_a_pool_left_out_of_the_recovery_names_what_ran_there(tmp_path: Path) -> None:
    """pretrain's capacity block cannot move: the plan says whose work waits for it."""
    args = ["dr", "plan", "--from", "pretrain", "--region", "us-west-2", "--json"]
    done = CliRunner().invoke(app, [*args, "--out", str(tmp_path), "--replica-key-arn", KEY_ARN])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output)
    assert doc["dropped_pools"] == ["h100-block"]
    (note,) = [n["text"] for n in doc["notes"] if "not recovered until" in n["text"]]
    assert note.startswith("pool h100-block") and "training:" in note
