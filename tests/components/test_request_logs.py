"""The serving ALB's and WAF's logs in the inference stack's plan: where each one writes,
that the bucket policy admits exactly that writer there, encryption the writer supports,
and expiry from `monitoring.request_logs`."""

from __future__ import annotations

import json
from typing import Any

from components.storage import RequestLogs, alb_log_statements, waf_log_statements
from llmp.plan.synth import _ACCOUNT
from program.args import request_logs
from spec.stackfile import load_config
from tests.conftest import merge, raw_stack

S3 = "aws:s3/"
WAF_LOGGING = "aws:wafv2/webAclLoggingConfiguration:WebAclLoggingConfiguration"


def _statements(plan: Any, bucket: str) -> dict[str, dict[str, Any]]:
    policy = plan.one(f"{S3}bucketPolicy:BucketPolicy", f"{bucket}-policy")
    return {s["Sid"]: s for s in json.loads(policy.inputs["policy"])["Statement"]}


def _attributes(plan: Any) -> dict[str, str]:
    [ingress] = plan.by_type("kubernetes:networking.k8s.io/v1:Ingress")
    raw = ingress.inputs["metadata"]["annotations"][
        "alb.ingress.kubernetes.io/load-balancer-attributes"
    ]
    return dict(pair.split("=", 1) for pair in raw.split(","))


def test_the_alb_writes_where_the_logs_bucket_policy_lets_us_east_1s_elb_account_write(
    plans,
) -> None:
    plan = plans("inference")
    attributes = _attributes(plan)
    bucket = plan.one(f"{S3}bucket:Bucket", "storage-logs").inputs["bucket"]
    assert attributes["access_logs.s3.enabled"] == "true"
    assert attributes["access_logs.s3.bucket"] == bucket
    # The settings the Ingress had before stay.
    assert attributes["routing.http.drop_invalid_header_fields.enabled"] == "true"
    alb = _statements(plan, "storage-logs")["AllowAlbAccessLogs"]
    assert alb["Principal"] == {"AWS": "arn:aws:iam::127311923021:root"}
    assert alb["Action"] == "s3:PutObject"
    # ELB writes <bucket>/<prefix>/AWSLogs/<account>/...: the policy admits exactly that.
    prefix = attributes["access_logs.s3.prefix"]
    assert alb["Resource"] == f"arn:aws:s3:::{bucket}/{prefix}/AWSLogs/{_ACCOUNT}/*"


def test_the_alb_log_bucket_is_sse_s3_and_expires_the_alb_prefix(plans) -> None:
    plan = plans("inference")
    [rule] = plan.one(
        f"{S3}bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        "storage-logs-encryption",
    ).inputs["rules"]
    assert rule["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "AES256"}
    rules = plan.one(
        f"{S3}bucketLifecycleConfiguration:BucketLifecycleConfiguration", "storage-logs-lifecycle"
    ).inputs["rules"]
    expiry = {r["filter"]["prefix"]: r.get("expiration", {}).get("days") for r in rules}
    days = load_config(raw_stack("inference")).monitoring.request_logs.expire_days
    assert expiry[f"{_attributes(plan)['access_logs.s3.prefix']}/"] == days == 90


def test_the_waf_logs_into_its_own_private_bucket_that_admits_this_accounts_waf(plans) -> None:
    plan = plans("inference")
    [logging] = plan.by_type(WAF_LOGGING)
    [acl] = plan.by_type("aws:wafv2/webAcl:WebAcl")
    bucket = plan.one(f"{S3}bucket:Bucket", "storage-waf-logs").inputs["bucket"]
    assert bucket.startswith("aws-waf-logs-")
    assert logging.inputs["logDestinationConfigs"] == [f"arn:aws:s3:::{bucket}"]
    assert logging.inputs["resourceArn"].endswith(f"/{acl.name}")
    # The API keys are in `authorization`: redacted from every log record.
    assert logging.inputs["redactedFields"] == [{"singleHeader": {"name": "authorization"}}]
    access = plan.one(
        f"{S3}bucketPublicAccessBlock:BucketPublicAccessBlock", "storage-waf-logs-public-access"
    ).inputs
    assert all(access[k] for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls"))
    assert access["restrictPublicBuckets"] is True
    statements = _statements(plan, "storage-waf-logs")
    write, check = statements["AWSLogDeliveryWrite"], statements["AWSLogDeliveryAclCheck"]
    assert write["Principal"] == check["Principal"] == {"Service": "delivery.logs.amazonaws.com"}
    assert write["Resource"] == f"arn:aws:s3:::{bucket}/AWSLogs/{_ACCOUNT}/*"
    assert check["Action"] == "s3:GetBucketAcl"
    for s in (write, check):
        assert s["Condition"]["StringEquals"]["aws:SourceAccount"] == _ACCOUNT
        assert s["Condition"]["ArnLike"]["aws:SourceArn"] == f"arn:aws:logs:us-east-1:{_ACCOUNT}:*"
    assert statements["DenyInsecureTransport"]["Effect"] == "Deny"
    rules = plan.one(
        f"{S3}bucketLifecycleConfiguration:BucketLifecycleConfiguration",
        "storage-waf-logs-lifecycle",
    ).inputs["rules"]
    assert {"filter": {"prefix": ""}, "expiration": {"days": 90}}.items() <= rules[0].items()
    # Its own server access logs land in the logs bucket, which admits it as a source.
    sources = _statements(plan, "storage-logs")["AllowServerAccessLogs"]["Condition"]
    assert any(
        bucket.startswith(p.removeprefix("arn:aws:s3:::").rstrip("*"))
        for p in sources["ArnLike"]["aws:SourceArn"]
    )


def test_the_log_writers_wait_for_the_policies_that_admit_them(plans) -> None:
    plan = plans("inference")
    [logging] = plan.by_type(WAF_LOGGING)
    [ingress] = plan.by_type("kubernetes:networking.k8s.io/v1:Ingress")
    waits = {r.name for r in plan.dependencies_of(logging, f"{S3}bucketPolicy:BucketPolicy")}
    assert waits == {"storage-waf-logs-policy"}
    waits = {r.name for r in plan.dependencies_of(ingress, f"{S3}bucketPolicy:BucketPolicy")}
    assert waits == {"storage-logs-policy"}


def test_a_newer_region_admits_the_log_delivery_principal_not_an_account() -> None:
    # A region opened after 2022-08 (no ELB account) that offers the stack's GPU types.
    zones = [f"eu-south-2{z}" for z in "abc"]
    cert = (
        "arn:aws:acm:eu-south-2:123456789012:certificate/0123abcd-0123-4567-89ab-0123456789ab"
    )
    newer = {
        "aws:region": "eu-south-2",
        "llm-platform:network": {"availability_zones": zones},
        "llm-platform:serving": {"certificate_arn": cert},
    }
    cfg = load_config(merge(raw_stack("inference"), newer))
    logs = request_logs(cfg)
    assert logs is not None and logs.elb_account_id is None
    [statement] = alb_log_statements("b", "111122223333", logs)
    assert statement["Principal"] == {"Service": "logdelivery.elasticloadbalancing.amazonaws.com"}
    assert statement["Resource"] == "arn:aws:s3:::b/alb/AWSLogs/111122223333/*"
    older = request_logs(load_config(raw_stack("inference")))
    assert older == RequestLogs(expire_days=90, elb_account_id="127311923021")
    arns = [s["Condition"]["ArnLike"]["aws:SourceArn"] for s in waf_log_statements("b", "1", "r")]
    assert arns == ["arn:aws:logs:r:1:*"] * 2


def test_request_logs_follow_the_config() -> None:
    raw = raw_stack("inference")
    off = merge(raw, {"llm-platform:monitoring": {"request_logs": {"enabled": False}}})
    assert request_logs(load_config(off)) is None
    days = merge(raw, {"llm-platform:monitoring": {"request_logs": {"expire_days": 30}}})
    assert request_logs(load_config(days)).expire_days == 30
    assert request_logs(load_config(raw_stack("pretrain"))) is None  # no serving
