"""Storage: every bucket's protections, lifecycle, precious-data handling, DR replication
and the adoption of existing buckets by a recovery stack."""

from __future__ import annotations

import json

import pytest

from tests.conftest import with_section

BUCKET = "aws:s3/bucket:Bucket"
S3 = "aws:s3/"


def by_bucket(plan, type_suffix: str) -> dict[str, dict]:
    """Sub-resources of one kind keyed by the physical bucket name they configure."""
    return {
        r.inputs["bucket"]: r.inputs
        for r in plan.resources
        if r.type.startswith(S3) and r.type.endswith(type_suffix)
    }


def test_every_bucket_is_encrypted_private_owner_enforced_and_tls_only(plans) -> None:
    for stack in ("pretrain", "finetune", "inference"):
        plan = plans(stack)
        names = {b.inputs["bucket"] for b in plan.by_type(BUCKET)}
        encryption = by_bucket(plan, ":BucketServerSideEncryptionConfiguration")
        access = by_bucket(plan, ":BucketPublicAccessBlock")
        ownership = by_bucket(plan, ":BucketOwnershipControls")
        policies = by_bucket(plan, ":BucketPolicy")
        assert set(encryption) == set(access) == set(ownership) == set(policies) == names
        for name in names:
            (rule,) = encryption[name]["rules"]
            default = rule["applyServerSideEncryptionByDefault"]
            if name.endswith("-logs") or name.startswith("aws-waf-logs-"):
                # S3 delivers access logs only into SSE-S3 buckets; WAF's log delivery
                # writes without a grant on the storage key.
                assert default == {"sseAlgorithm": "AES256"}
                assert rule["bucketKeyEnabled"] is False
            else:
                assert default["sseAlgorithm"] == "aws:kms"
                assert default["kmsMasterKeyId"].startswith("arn:")
                assert rule["bucketKeyEnabled"] is True
            assert all(
                access[name][k] is True
                for k in (
                    "blockPublicAcls",
                    "blockPublicPolicy",
                    "ignorePublicAcls",
                    "restrictPublicBuckets",
                )
            )
            assert ownership[name]["rule"] == {"objectOwnership": "BucketOwnerEnforced"}
            deny = json.loads(policies[name]["policy"])["Statement"][0]
            assert deny["Effect"] == "Deny"
            assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_bucket_names_come_from_the_prefix(plans) -> None:
    names = sorted(b.inputs["bucket"] for b in plans("pretrain").by_type(BUCKET))
    assert names == [
        "acme-llm-pretrain-checkpoints",
        "acme-llm-pretrain-checkpoints-us-west-2",
        "acme-llm-pretrain-datasets",
        "acme-llm-pretrain-logs",
        "acme-llm-pretrain-models",
        "acme-llm-pretrain-models-us-west-2",
    ]


def test_access_logs_go_to_the_logs_bucket(plans) -> None:
    plan = plans("pretrain")
    logging = by_bucket(plan, ":BucketLogging")
    assert set(logging) == {
        "acme-llm-pretrain-checkpoints",
        "acme-llm-pretrain-datasets",
        "acme-llm-pretrain-models",
    }
    for name, inputs in logging.items():
        assert inputs["targetBucket"] == "acme-llm-pretrain-logs"
        assert inputs["targetPrefix"] == f"s3/{name.rsplit('-', 1)[1]}/"
    statements = json.loads(by_bucket(plan, ":BucketPolicy")["acme-llm-pretrain-logs"]["policy"])
    allow = statements["Statement"][1]
    assert allow["Principal"] == {"Service": "logging.s3.amazonaws.com"}
    assert allow["Condition"]["ArnLike"]["aws:SourceArn"] == "arn:aws:s3:::acme-llm-pretrain-*"


def test_precious_buckets_are_versioned_and_retained_never_force_destroyed(plans) -> None:
    plan = plans("pretrain")
    versioned = by_bucket(plan, ":BucketVersioning")
    for bucket in plan.by_type(BUCKET):
        name = bucket.inputs["bucket"]
        assert bucket.inputs["forceDestroy"] is False
        precious = any(k in name for k in ("checkpoints", "models"))
        assert (name in versioned) == precious, name
        if precious:
            assert versioned[name]["versioningConfiguration"] == {"status": "Enabled"}


def test_retain_on_delete_is_set_for_precious_buckets(plans, monkeypatch) -> None:
    # retain_on_delete is a resource option, not an input: check it at construction.
    import pulumi_aws as aws

    from llmp.plan.synth import synthesize
    from tests.conftest import raw_stack

    seen: dict[str, bool] = {}
    original = aws.s3.Bucket.__init__

    def spy(self, name, *args, **kwargs):  # type: ignore[no-untyped-def]
        opts = kwargs.get("opts")
        seen[kwargs.get("bucket") or name] = bool(opts and opts.retain_on_delete)
        original(self, name, *args, **kwargs)

    monkeypatch.setattr(aws.s3.Bucket, "__init__", spy)
    synthesize("pretrain", raw_stack("pretrain"))
    assert seen == {
        "acme-llm-pretrain-logs": False,
        "acme-llm-pretrain-datasets": False,
        "acme-llm-pretrain-checkpoints": True,
        "acme-llm-pretrain-models": True,
        "acme-llm-pretrain-checkpoints-us-west-2": True,
        "acme-llm-pretrain-models-us-west-2": True,
    }


def test_lifecycle_tiering_housekeeping_and_noncurrent_expiry(plans) -> None:
    lifecycle = by_bucket(plans("pretrain"), ":BucketLifecycleConfiguration")
    rules = {r["id"]: r for r in lifecycle["acme-llm-pretrain-checkpoints"]["rules"]}
    assert set(rules) == {"tier-milestones", "recent-runs", "housekeeping"}
    assert rules["tier-milestones"]["filter"] == {"prefix": "milestones/"}
    assert rules["tier-milestones"]["transitions"] == [
        {"days": 14, "storageClass": "INTELLIGENT_TIERING"},
        {"days": 90, "storageClass": "GLACIER_IR"},
    ]
    assert rules["tier-milestones"]["expiration"] == {"days": 365}
    assert rules["housekeeping"]["abortIncompleteMultipartUpload"] == {"daysAfterInitiation": 7}
    assert rules["housekeeping"]["noncurrentVersionExpiration"] == {"noncurrentDays": 30}
    # Retention: every checkpoint expires after keep_days, its version a day later; nothing
    # under runs/ is tiered (it would pay transitions for data about to go).
    assert rules["recent-runs"]["filter"] == {"prefix": "runs/"}
    assert rules["recent-runs"]["expiration"] == {"days": 7}
    assert rules["recent-runs"]["noncurrentVersionExpiration"] == {"noncurrentDays": 1}
    assert "transitions" not in rules["recent-runs"]
    datasets = {r["id"]: r for r in lifecycle["acme-llm-pretrain-datasets"]["rules"]}
    assert datasets["tier-raw"]["filter"] == {"prefix": "raw/"}
    # Unversioned buckets have no noncurrent versions to expire.
    assert "noncurrentVersionExpiration" not in datasets["housekeeping"]


def test_replication_to_the_dr_region(plans) -> None:
    plan = plans("pretrain")
    replication = by_bucket(plan, ":BucketReplicationConfig")
    assert set(replication) == {"acme-llm-pretrain-checkpoints", "acme-llm-pretrain-models"}
    (rule,) = replication["acme-llm-pretrain-checkpoints"]["rules"]
    assert rule["status"] == "Enabled"
    assert rule["deleteMarkerReplication"] == {"status": "Disabled"}
    assert rule["sourceSelectionCriteria"] == {"sseKmsEncryptedObjects": {"status": "Enabled"}}
    dest = rule["destination"]
    assert dest["bucket"].endswith(":bucket/storage-checkpoints-replica")
    assert dest["encryptionConfiguration"]["replicaKmsKeyId"].endswith(":key/storage-replica-s3")
    assert dest["replicationTime"] == {"status": "Enabled", "time": {"minutes": 15}}
    assert dest["metrics"]["status"] == "Enabled"
    # The replica key lives in the DR region.
    dr = plan.one("pulumi:providers:aws", "aws-dr")
    assert plan.one("aws:kms/key:Key", "storage-replica-s3").provider == dr.urn


def test_replication_role_is_least_privilege(plans) -> None:
    plan = plans("pretrain")
    role = plan.one("aws:iam/role:Role", "storage-replication")
    trust = json.loads(role.inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "s3.amazonaws.com"}
    policy = json.loads(
        plan.one("aws:iam/rolePolicy:RolePolicy", "storage-replication").inputs["policy"]
    )
    for statement in policy["Statement"]:
        actions = (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
        assert not any("*" in a for a in actions)
        resources = (
            statement["Resource"]
            if isinstance(statement["Resource"], list)
            else [statement["Resource"]]
        )
        assert all(r != "*" for r in resources)
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert by_sid["WriteReplicas"]["Resource"] == [
        "arn:aws:mock:us-west-2:000000000000:bucket/storage-checkpoints-replica/*",
        "arn:aws:mock:us-west-2:000000000000:bucket/storage-models-replica/*",
    ]
    assert by_sid["DecryptSources"]["Condition"]["StringEquals"] == {
        "kms:ViaService": "s3.us-east-1.amazonaws.com"
    }


def test_delete_markers_and_rtc_follow_config(synth) -> None:
    plan = synth(
        with_section(
            "pretrain",
            "storage",
            {"replication": {"replicate_delete_markers": True, "time_control": False}},
        )
    )
    (rule,) = by_bucket(plan, ":BucketReplicationConfig")["acme-llm-pretrain-models"]["rules"]
    assert rule["deleteMarkerReplication"] == {"status": "Enabled"}
    assert "replicationTime" not in rule["destination"]


def test_no_replication_means_no_dr_provider(plans) -> None:
    plan = plans("finetune")
    assert [p.name for p in plan.by_type("pulumi:providers:aws")] == ["aws"]
    assert not by_bucket(plan, ":BucketReplicationConfig")


def test_storage_and_the_cluster_do_not_wait_on_each_other(plans) -> None:
    plan = plans("pretrain")
    storage = [r for r in plan.resources if (r.parent or "").endswith("::storage")]
    cluster = [r for r in plan.resources if (r.parent or "").endswith("::cluster")]
    storage_urns = {r.urn for r in storage}
    cluster_urns = {r.urn for r in cluster}
    assert storage and cluster
    assert not any(set(r.dependencies) & cluster_urns for r in storage)
    assert not any(set(r.dependencies) & storage_urns for r in cluster)


def test_the_models_bucket_has_a_signing_key_under_the_alias_promotion_uses(plans) -> None:
    from contracts.revisions import signing_key_alias

    for stack in ("pretrain", "finetune", "inference"):
        plan = plans(stack)
        key = plan.one("aws:kms/key:Key", "storage-revisions")
        assert key.inputs["keyUsage"] == "SIGN_VERIFY"
        assert key.inputs["customerMasterKeySpec"] == "ECC_NIST_P256"
        assert "enableKeyRotation" not in key.inputs  # asymmetric keys do not rotate
        alias = plan.one("aws:kms/alias:Alias", "storage-revisions")
        assert alias.inputs["name"] == signing_key_alias(f"acme-llm-{stack}-models")
        assert key.urn in alias.dependencies


def test_without_a_models_bucket_there_is_no_signing_key(synth) -> None:
    raw = with_section("pretrain", "storage", {})
    buckets = raw["llm-platform:storage"]["buckets"]
    raw["llm-platform:storage"]["buckets"] = {k: v for k, v in buckets.items() if k != "models"}
    plan = synth(raw)
    assert not [r for r in plan.by_type("aws:kms/key:Key") if r.name.endswith("-revisions")]


# ---------------------------------------------------------------------------
# Adoption: a recovery stack takes over existing buckets (llmp dr plan writes this)
# ---------------------------------------------------------------------------

ADOPT_KEY = "arn:aws:kms:us-west-2:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def adopting(**overrides) -> dict:
    """finetune (us-west-2) adopting an existing checkpoints bucket and its key."""
    adoption = {"kms_key_arn": ADOPT_KEY, "buckets": {"checkpoints": "old-checkpoints"}}
    return with_section("finetune", "storage", {"adoption": {**adoption, **overrides}})


def test_the_replica_key_has_an_alias_to_find_it_by_in_the_dr_region(plans) -> None:
    plan = plans("pretrain")
    alias = plan.one("aws:kms/alias:Alias", "storage-replica-s3")
    assert alias.inputs["name"] == "alias/acme-llm-pretrain-s3-replica"
    assert alias.provider == plan.one("pulumi:providers:aws", "aws-dr").urn


def test_an_adopted_bucket_is_imported_protected_and_retained(synth) -> None:
    plan = synth(adopting())
    bucket = plan.one(BUCKET, "storage-checkpoints")
    assert bucket.inputs["bucket"] == "old-checkpoints"  # the import id is its name
    assert bucket.import_id == "old-checkpoints"
    assert bucket.protect is True and bucket.retain_on_delete is True
    assert bucket.inputs["tags"]["llm-platform/adopted"] == "true"
    for settings in ("encryption", "versioning", "lifecycle", "policy", "public-access"):
        r = next(r for r in plan.resources if r.name == f"storage-checkpoints-{settings}")
        assert r.retain_on_delete is True, settings
    key = plan.one("aws:kms/key:Key", "storage-s3")
    assert key.import_id == "1234abcd-12ab-34cd-56ef-1234567890ab"
    assert key.protect is True
    encryption = by_bucket(plan, ":BucketServerSideEncryptionConfiguration")["old-checkpoints"]
    assert encryption["rules"][0]["applyServerSideEncryptionByDefault"]["kmsMasterKeyId"].endswith(
        ":key/storage-s3"
    )
    # Everything else is created as before.
    datasets = plan.one(BUCKET, "storage-datasets")
    assert datasets.inputs["bucket"] == "acme-llm-finetune-datasets"
    assert "import_id" not in datasets and "protect" not in datasets


def test_without_adoption_nothing_is_imported_or_protected(plans) -> None:
    for stack in ("pretrain", "finetune", "inference"):
        for r in plans(stack).resources:
            assert r.import_id is None and not r.protect, r.name


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"kms_key_arn": ADOPT_KEY.replace("us-west-2", "us-east-1")},
            "storage.adoption.kms_key_arn = 'arn:aws:kms:us-east-1:",
        ),
        ({"kms_key_arn": "alias/mine"}, "not a KMS key ARN"),
        ({"buckets": {"scratch": "x-bucket"}}, "storage.adoption.buckets.scratch = 'scratch'"),
        ({"buckets": {"logs": "old-logs"}}, "the logs bucket is never replicated"),
        ({"buckets": {"checkpoints": "Not_A_Bucket"}}, "not an S3 bucket name"),
    ],
)
def test_adoption_errors_are_one_line(overrides, message) -> None:
    from spec.errors import ConfigError
    from spec.stackfile import load_config

    with pytest.raises(ConfigError) as exc:
        load_config(adopting(**overrides))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_the_replica_expires_runs_and_keeps_milestones_like_the_primary(plans) -> None:
    lifecycle = by_bucket(plans("pretrain"), ":BucketLifecycleConfiguration")
    primary = lifecycle["acme-llm-pretrain-checkpoints"]["rules"]
    replica = lifecycle["acme-llm-pretrain-checkpoints-us-west-2"]["rules"]
    # S3 does not replicate the delete markers its lifecycle expiry adds: the DR bucket
    # expires runs/ by its own, identical rule.
    assert replica == primary
    # The one replication rule covers the whole bucket: milestones/ copies replicate too.
    (rule,) = by_bucket(plans("pretrain"), ":BucketReplicationConfig")[
        "acme-llm-pretrain-checkpoints"
    ]["rules"]
    assert rule["filter"] == {"prefix": ""}


def test_retention_on_an_unversioned_bucket_has_no_noncurrent_rule(synth) -> None:
    raw = with_section(
        "pretrain",
        "storage",
        {"buckets": {"checkpoints": {"precious": False, "replicate": False}}},
    )
    lifecycle = by_bucket(synth(raw), ":BucketLifecycleConfiguration")
    rules = {r["id"]: r for r in lifecycle["acme-llm-pretrain-checkpoints"]["rules"]}
    assert rules["recent-runs"]["expiration"] == {"days": 7}
    assert "noncurrentVersionExpiration" not in rules["recent-runs"]
