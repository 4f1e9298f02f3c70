"""S3 rules: each fires on one changed bucket setting and stays quiet on the real stacks."""

from __future__ import annotations

import json

import pytest

from tests.policies.conftest import add, hits, inputs, names, res

S3_RULES = [
    "s3-sse-kms",
    "s3-public-access-block",
    "s3-tls-only",
    "s3-versioning-precious",
    "s3-no-force-destroy-precious",
    "s3-lifecycle-rules",
    "s3-abort-incomplete-uploads",
    "s3-noncurrent-version-expiry",
    "s3-owner-enforced",
]


@pytest.mark.parametrize("stack", ["pretrain", "finetune", "inference"])
@pytest.mark.parametrize("rule", S3_RULES)
def test_s3_rule_is_quiet_on_the_stacks(plan, stack: str, rule: str) -> None:
    assert hits(plan(stack), rule) == []


def test_sse_kms_fires_on_aes256_for_a_data_bucket(plan) -> None:
    p = plan()
    rule = inputs(p, "storage-datasets-encryption")["rules"][0]
    rule["applyServerSideEncryptionByDefault"] = {"sseAlgorithm": "AES256"}
    assert names(hits(p, "s3-sse-kms")) == {"storage-datasets"}


def test_sse_kms_fires_on_a_bucket_without_encryption(plan) -> None:
    p = plan()
    p.resources.remove(res(p, "storage-models-encryption"))
    assert names(hits(p, "s3-sse-kms")) == {"storage-models"}


def test_sse_kms_lets_the_access_log_target_use_sse_s3(plan) -> None:
    p = plan()
    inputs(p, "storage-logs-encryption")["rules"] = [
        {"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}
    ]
    assert hits(p, "s3-sse-kms") == []
    for r in [r for r in p.resources if r.type.endswith("BucketLogging")]:
        p.resources.remove(r)
    assert names(hits(p, "s3-sse-kms")) == {"storage-logs"}


def test_sse_kms_lets_the_waf_log_bucket_use_sse_s3_only_where_the_waf_logs_to_it(plan) -> None:
    p = plan("inference")
    assert hits(p, "s3-sse-kms") == []
    waf = [r for r in p.resources if r.type.endswith("WebAclLoggingConfiguration")]
    assert len(waf) == 1
    p.resources.remove(waf[0])
    assert names(hits(p, "s3-sse-kms")) == {"storage-waf-logs"}


def test_public_access_block_fires_on_one_flag_off(plan) -> None:
    p = plan()
    inputs(p, "storage-checkpoints-public-access")["restrictPublicBuckets"] = False
    found = hits(p, "s3-public-access-block")
    assert names(found) == {"storage-checkpoints-public-access"}
    assert "restrictPublicBuckets" in found[0].message


def test_public_access_block_fires_when_missing(plan) -> None:
    p = plan()
    p.resources.remove(res(p, "storage-datasets-public-access"))
    assert names(hits(p, "s3-public-access-block")) == {"storage-datasets"}


def test_tls_only_fires_on_a_policy_without_the_deny(plan) -> None:
    p = plan()
    policy = inputs(p, "storage-models-policy")
    document = json.loads(policy["policy"])
    document["Statement"][0]["Condition"]["Bool"]["aws:SecureTransport"] = "true"
    policy["policy"] = json.dumps(document)
    assert names(hits(p, "s3-tls-only")) == {"storage-models"}


def test_tls_only_fires_on_a_bucket_without_policy(plan) -> None:
    p = plan()
    p.resources.remove(res(p, "storage-datasets-policy"))
    assert names(hits(p, "s3-tls-only")) == {"storage-datasets"}


def test_versioning_fires_on_checkpoints_without_versioning(plan) -> None:
    p = plan()
    p.resources.remove(res(p, "storage-checkpoints-versioning"))
    assert names(hits(p, "s3-versioning-precious")) == {"storage-checkpoints"}


def test_versioning_fires_on_a_suspended_replica(plan) -> None:
    p = plan()
    versioning = inputs(p, "storage-models-replica-versioning")
    versioning["versioningConfiguration"]["status"] = "Suspended"
    assert names(hits(p, "s3-versioning-precious")) == {"storage-models-replica"}


def test_versioning_treats_a_replicated_bucket_as_precious(plan) -> None:
    p = plan()
    bucket = res(p, "storage-checkpoints")
    bucket.name = "storage-runs"
    bucket.inputs["bucket"] = "acme-llm-pretrain-runs"
    bucket.urn = bucket.urn.replace("storage-checkpoints", "storage-runs")
    for r in p.resources:
        r.dependencies = [
            d.replace("::storage-checkpoints", "::storage-runs") for d in r.dependencies
        ]
    p.resources.remove(res(p, "storage-checkpoints-versioning"))
    assert names(hits(p, "s3-versioning-precious")) == {"storage-runs"}


def test_datasets_need_no_versioning(plan) -> None:
    p = plan()
    assert not any(r.name == "storage-datasets-versioning" for r in p.resources)
    assert hits(p, "s3-versioning-precious") == []


def test_force_destroy_fires_on_a_precious_bucket_only(plan) -> None:
    p = plan()
    inputs(p, "storage-datasets")["forceDestroy"] = True
    assert hits(p, "s3-no-force-destroy-precious") == []
    inputs(p, "storage-models")["forceDestroy"] = True
    assert names(hits(p, "s3-no-force-destroy-precious")) == {"storage-models"}


def test_lifecycle_fires_when_missing_or_disabled(plan) -> None:
    p = plan()
    p.resources.remove(res(p, "storage-datasets-lifecycle"))
    for rule in inputs(p, "storage-logs-lifecycle")["rules"]:
        rule["status"] = "Disabled"
    assert names(hits(p, "s3-lifecycle-rules")) == {"storage-datasets", "storage-logs"}


def test_abort_incomplete_uploads_fires_without_the_rule(plan) -> None:
    p = plan()
    for rule in inputs(p, "storage-models-lifecycle")["rules"]:
        rule.pop("abortIncompleteMultipartUpload", None)
    assert names(hits(p, "s3-abort-incomplete-uploads")) == {"storage-models"}


def test_noncurrent_expiry_fires_on_a_versioned_bucket(plan) -> None:
    p = plan()
    for rule in inputs(p, "storage-checkpoints-lifecycle")["rules"]:
        rule.pop("noncurrentVersionExpiration", None)
    assert names(hits(p, "s3-noncurrent-version-expiry")) == {"storage-checkpoints"}


def test_access_logging_fires_on_buckets_without_logs(plan) -> None:
    p = plan("finetune")
    assert hits(p, "s3-access-logging") == []
    p.resources.remove(res(p, "storage-datasets-logging"))
    assert names(hits(p, "s3-access-logging")) == {"storage-datasets"}


def test_access_logging_flags_the_dr_replicas_of_pretrain(plan) -> None:
    found = hits(plan("pretrain"), "s3-access-logging")
    assert names(found) == {"storage-checkpoints-replica", "storage-models-replica"}
    assert {v.level for v in found} == {"advisory"}


def test_precious_replicated_is_quiet_where_checkpoints_and_models_replicate(plan) -> None:
    assert hits(plan("pretrain"), "s3-precious-replicated") == []


def test_precious_replicated_flags_the_stacks_without_a_replica(plan) -> None:
    found = hits(plan("finetune"), "s3-precious-replicated")
    assert names(found) == {"storage-checkpoints", "storage-models"}
    assert {v.level for v in found} == {"advisory"}
    assert names(hits(plan("inference"), "s3-precious-replicated")) == {"storage-models"}


def test_precious_replicated_fires_when_the_replication_rule_goes(plan) -> None:
    p = plan("pretrain")
    p.resources.remove(res(p, "storage-checkpoints-replication"))
    assert names(hits(p, "s3-precious-replicated")) == {"storage-checkpoints"}


def test_owner_enforced_fires_on_object_writer(plan) -> None:
    p = plan("inference")
    inputs(p, "storage-models-ownership")["rule"]["objectOwnership"] = "ObjectWriter"
    assert names(hits(p, "s3-owner-enforced")) == {"storage-models"}


def test_settings_found_by_bucket_name_without_a_dependency(plan) -> None:
    p = plan("inference")
    bucket = add(p, "aws:s3/bucket:Bucket", "extra", {"bucket": "acme-extra"})
    assert "extra" in names(hits(p, "s3-public-access-block"))
    add(
        p,
        "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
        "extra-pab",
        {
            "bucket": "acme-extra",
            "blockPublicAcls": True,
            "blockPublicPolicy": True,
            "ignorePublicAcls": True,
            "restrictPublicBuckets": True,
        },
    )
    assert bucket.name not in names(hits(p, "s3-public-access-block"))
