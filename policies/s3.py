"""S3 buckets: encryption, public access, TLS, versioning of precious data, lifecycle.

The bucket's settings live in separate resources (`BucketServerSideEncryptionConfiguration`,
`BucketPublicAccessBlock`, ...), so most rules are stack rules that find a
bucket's settings through the dependency graph: each settings resource depends
on its bucket (`bucket=bucket.bucket`). A settings resource whose `bucket`
input names the bucket's physical name also counts (a resource that took the
name as a plain string has no dependency edge).

**Precious buckets** (versioning required, no force-destroy): a bucket whose
resource or physical name ends in `checkpoints` or `models`, a bucket that is
the source of a `BucketReplicationConfig`, and a replica (a bucket that a
replication rule writes to, or tagged `llm-platform/bucket-role: replica`).
The stack config's `precious` flag is not visible to CrossGuard; those are the
facts of it that are.

**Adopted resources** (a recovery stack's imported replicas and their key) carry
the tag `llm-platform/adopted: "true"`. CrossGuard sees a resource's `protect`
option but not `retain_on_delete` or its import id, so the rule that guards
them asks for `protect`, the option a real preview reports.
"""

from __future__ import annotations

from collections.abc import Sequence

from pulumi_policy import PolicyResource, ResourceValidationArgs, StackValidationArgs

from policies.props import (
    UNKNOWN,
    Report,
    dependents,
    get,
    is_map,
    items,
    known,
    of_type,
    statements,
    string_set,
    tags_of,
)

BUCKET = "aws:s3/bucket:Bucket"
BUCKET_V2 = "aws:s3/bucketV2:BucketV2"
SSE = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
SSE_V2 = (
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2"
)
PUBLIC_ACCESS = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
POLICY = "aws:s3/bucketPolicy:BucketPolicy"
VERSIONING = "aws:s3/bucketVersioning:BucketVersioning"
VERSIONING_V2 = "aws:s3/bucketVersioningV2:BucketVersioningV2"
LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
LIFECYCLE_V2 = "aws:s3/bucketLifecycleConfigurationV2:BucketLifecycleConfigurationV2"
LOGGING = "aws:s3/bucketLogging:BucketLogging"
LOGGING_V2 = "aws:s3/bucketLoggingV2:BucketLoggingV2"
OWNERSHIP = "aws:s3/bucketOwnershipControls:BucketOwnershipControls"
REPLICATION = "aws:s3/bucketReplicationConfig:BucketReplicationConfig"
WAF_LOGGING = "aws:wafv2/webAclLoggingConfiguration:WebAclLoggingConfiguration"
WAF_LOG_BUCKET_PREFIX = "aws-waf-logs-"
"""WAF writes its logs only into buckets named so."""

BUCKETS = (BUCKET, BUCKET_V2)
KMS_KEY = "aws:kms/key:Key"
ADOPTED_TAG = "llm-platform/adopted"
PRECIOUS_SUFFIXES = ("checkpoints", "models")
_PUBLIC_ACCESS_FLAGS = (
    "blockPublicAcls",
    "blockPublicPolicy",
    "ignorePublicAcls",
    "restrictPublicBuckets",
)


def _physical(bucket: PolicyResource) -> str | None:
    name = known(lambda: get(bucket.props, "bucket"), None)
    return name if isinstance(name, str) else None


def _attached(
    resources: Sequence[PolicyResource], bucket: PolicyResource, *types: str
) -> list[PolicyResource]:
    """The settings resources of `types` that belong to `bucket`."""
    found = dependents(resources, bucket, *types)
    physical = _physical(bucket)
    if physical is not None:
        for r in of_type(resources, *types):
            if r not in found and known(lambda r=r: get(r.props, "bucket"), None) == physical:
                found.append(r)
    return found


def _log_targets(resources: Sequence[PolicyResource]) -> set[str]:
    """Physical names of buckets that receive S3 server access logs."""
    targets = set()
    for r in of_type(resources, LOGGING, LOGGING_V2):
        target = known(lambda r=r: get(r.props, "targetBucket"), None)
        if isinstance(target, str):
            targets.add(target)
    return targets


def _named_precious(bucket: PolicyResource) -> bool:
    """A checkpoints or models bucket, by its resource or physical name."""
    names = [bucket.name, _physical(bucket) or ""]
    return any(n.rstrip("-").endswith(PRECIOUS_SUFFIXES) for n in names)


def _tagged_replica(bucket: PolicyResource) -> bool:
    return tags_of(bucket.props).get("llm-platform/bucket-role") == "replica"


def is_precious(resources: Sequence[PolicyResource], bucket: PolicyResource) -> bool:
    """Checkpoints, models, and both ends of a replication rule."""
    if _named_precious(bucket) or _tagged_replica(bucket):
        return True
    # The source (its `bucket`) and the replica (its destination) both feed the rule.
    return bool(_attached(resources, bucket, REPLICATION))


def _buckets(args: StackValidationArgs) -> list[PolicyResource]:
    return of_type(args.resources, *BUCKETS)


def bucket_sse_kms(args: StackValidationArgs, report: Report) -> None:
    """Every bucket declares SSE-KMS with a key; an access-log target may use SSE-S3, and so
    may the WAF's log bucket (`aws-waf-logs-*`, where the stack has WAF logging)."""
    log_targets = _log_targets(args.resources)
    if of_type(args.resources, WAF_LOGGING):
        log_targets |= {
            name
            for b in _buckets(args)
            if (name := _physical(b)) is not None and name.startswith(WAF_LOG_BUCKET_PREFIX)
        }
    for bucket in _buckets(args):
        algorithms: list[tuple[str | None, bool]] = []
        for sse in _attached(args.resources, bucket, SSE, SSE_V2):
            for rule in known(lambda sse=sse: items(get(sse.props, "rules")), []):
                default = known(
                    lambda rule=rule: get(rule, "applyServerSideEncryptionByDefault"), None
                )
                if default is None:
                    continue
                algorithm = known(lambda d=default: get(d, "sseAlgorithm"), None)
                has_key = known(lambda d=default: get(d, "kmsMasterKeyId"), "unknown") is not None
                algorithms.append((algorithm, has_key))
        inline = known(lambda b=bucket: get(b.props, "serverSideEncryptionConfiguration"), None)
        if is_map(inline):
            default = get(inline, "rule", "applyServerSideEncryptionByDefault")
            if default is not None:
                algorithms.append(
                    (get(default, "sseAlgorithm"), get(default, "kmsMasterKeyId") is not None)
                )
        kms = any(a in ("aws:kms", "aws:kms:dsse") and key for a, key in algorithms)
        if kms:
            continue
        if _physical(bucket) in log_targets and any(a == "AES256" for a, _ in algorithms):
            # S3 delivers server access logs only into SSE-S3 buckets; WAF's log delivery
            # writes without a grant on a key.
            continue
        if not algorithms:
            report(f"bucket {bucket.name} declares no default encryption; use SSE-KMS", bucket.urn)
        else:
            report(
                f"bucket {bucket.name} is encrypted with "
                f"{', '.join(sorted(str(a) for a, _ in algorithms))}: use aws:kms with a key "
                "(kmsMasterKeyId)",
                bucket.urn,
            )


def bucket_public_access_block(args: StackValidationArgs, report: Report) -> None:
    """Every bucket has a public access block with all four settings true."""
    for bucket in _buckets(args):
        blocks = _attached(args.resources, bucket, PUBLIC_ACCESS)
        if not blocks:
            report(f"bucket {bucket.name} has no BucketPublicAccessBlock", bucket.urn)
            continue
        for block in blocks:
            off = [
                f
                for f in _PUBLIC_ACCESS_FLAGS
                if known(lambda f=f, b=block: get(b.props, f), True) is not True
            ]
            if off:
                report(
                    f"bucket {bucket.name}: public access block leaves {', '.join(off)} "
                    "not true; set all four to true",
                    block.urn,
                )


def _denies_insecure_transport(statement: dict) -> bool:
    if statement.get("Effect") != "Deny":
        return False
    principal = statement.get("Principal")
    if principal not in ("*", {"AWS": "*"}):
        return False
    actions = string_set(statement.get("Action"))
    if not actions & {"s3:*", "*"}:
        return False
    condition = statement.get("Condition") or {}
    secure = (condition.get("Bool") or {}).get("aws:SecureTransport")
    return str(secure).lower() == "false"


def _tls_only_document(document: object) -> bool:
    return any(_denies_insecure_transport(dict(s)) for s in statements(document))


def bucket_tls_only(args: StackValidationArgs, report: Report) -> None:
    """Every bucket has a policy that denies requests not made over TLS."""
    for bucket in _buckets(args):
        documents = [
            known(lambda p=p: get(p.props, "policy"))
            for p in _attached(args.resources, bucket, POLICY)
        ]
        documents.append(known(lambda b=bucket: get(b.props, "policy"), None))
        documents = [d for d in documents if d is not None]
        if not documents:
            report(
                f"bucket {bucket.name} has no bucket policy denying insecure transport",
                bucket.urn,
            )
            continue
        verdicts = [known(lambda d=d: _tls_only_document(d)) for d in documents]
        if UNKNOWN in verdicts:
            continue  # the policy is built from ARNs the preview cannot know yet
        if not any(verdicts):
            report(
                f"bucket {bucket.name}: no policy statement denies s3:* when "
                "aws:SecureTransport is false",
                bucket.urn,
            )


def _versioning_enabled(resources: Sequence[PolicyResource], bucket: PolicyResource) -> bool:
    for v in _attached(resources, bucket, VERSIONING, VERSIONING_V2):
        status = known(lambda v=v: get(v.props, "versioningConfiguration", "status"), "Enabled")
        if status == "Enabled":
            return True
    inline = known(lambda: get(bucket.props, "versioning", "enabled"), None)
    return inline is True


def bucket_versioning_precious(args: StackValidationArgs, report: Report) -> None:
    """Precious buckets (checkpoints, models, replication sources and replicas) are versioned."""
    for bucket in _buckets(args):
        if is_precious(args.resources, bucket) and not _versioning_enabled(args.resources, bucket):
            report(
                f"bucket {bucket.name} holds precious data (checkpoints, models or a "
                "replica) but has no BucketVersioning with status Enabled",
                bucket.urn,
            )


def bucket_no_force_destroy_precious(args: StackValidationArgs, report: Report) -> None:
    """Precious buckets are not force-destroyed (a destroy would delete every object)."""
    for bucket in _buckets(args):
        if not is_precious(args.resources, bucket):
            continue
        if known(lambda b=bucket: get(b.props, "forceDestroy"), False) is True:
            report(f"bucket {bucket.name} holds precious data: set forceDestroy false", bucket.urn)


def _lifecycle_rules(resources: Sequence[PolicyResource], bucket: PolicyResource) -> list:
    rules: list = []
    for lc in _attached(resources, bucket, LIFECYCLE, LIFECYCLE_V2):
        rules += known(lambda lc=lc: items(get(lc.props, "rules")), [])
    return [r for r in rules if known(lambda r=r: get(r, "status"), "Enabled") == "Enabled"]


def bucket_lifecycle_rules(args: StackValidationArgs, report: Report) -> None:
    """Every bucket has a lifecycle configuration with at least one enabled rule."""
    for bucket in _buckets(args):
        if not _lifecycle_rules(args.resources, bucket):
            report(f"bucket {bucket.name} has no enabled lifecycle rule", bucket.urn)


def bucket_abort_incomplete_uploads(args: StackValidationArgs, report: Report) -> None:
    """Every bucket aborts incomplete multipart uploads (their parts are billed forever)."""
    for bucket in _buckets(args):
        rules = _lifecycle_rules(args.resources, bucket)
        if not any(
            known(lambda r=r: get(r, "abortIncompleteMultipartUpload"), 1) is not None
            for r in rules
        ):
            report(
                f"bucket {bucket.name}: no lifecycle rule aborts incomplete multipart uploads",
                bucket.urn,
            )


def bucket_noncurrent_expiry(args: StackValidationArgs, report: Report) -> None:
    """Versioned buckets expire noncurrent versions (overwrites are otherwise kept forever)."""
    for bucket in _buckets(args):
        if not _versioning_enabled(args.resources, bucket):
            continue
        rules = _lifecycle_rules(args.resources, bucket)
        if not any(
            known(lambda r=r: get(r, "noncurrentVersionExpiration"), 1) is not None for r in rules
        ):
            report(
                f"bucket {bucket.name} is versioned but no lifecycle rule expires noncurrent "
                "versions",
                bucket.urn,
            )


def bucket_access_logging(args: StackValidationArgs, report: Report) -> None:
    """Every bucket but an access-log target sends server access logs somewhere."""
    log_targets = _log_targets(args.resources)
    for bucket in _buckets(args):
        if _physical(bucket) in log_targets:
            continue
        if _attached(args.resources, bucket, LOGGING, LOGGING_V2):
            continue
        if known(lambda b=bucket: get(b.props, "loggings"), None):
            continue
        report(f"bucket {bucket.name} has no server access logging", bucket.urn)


def bucket_owner_enforced(args: StackValidationArgs, report: Report) -> None:
    """Every bucket disables ACLs (object ownership BucketOwnerEnforced)."""
    for bucket in _buckets(args):
        controls = _attached(args.resources, bucket, OWNERSHIP)
        owners = {
            known(lambda c=c: get(c.props, "rule", "objectOwnership"), "BucketOwnerEnforced")
            for c in controls
        }
        if "BucketOwnerEnforced" not in owners:
            report(
                f"bucket {bucket.name}: set BucketOwnershipControls objectOwnership "
                "BucketOwnerEnforced (ACLs off)",
                bucket.urn,
            )


def precious_replicated(args: StackValidationArgs, report: Report) -> None:
    """Checkpoint and model buckets replicate to another region: without a replica a region
    loss takes them with it, and a recovery stack has nothing to adopt (unbounded RPO)."""
    for bucket in _buckets(args):
        if not _named_precious(bucket) or _tagged_replica(bucket):
            continue
        if _attached(args.resources, bucket, REPLICATION):
            continue
        report(
            f"bucket {bucket.name} has no cross-region replica: set replicate: true and "
            "storage.replication.region, or accept losing it with its region",
            bucket.urn,
        )


def adopted_bucket_protected(args: ResourceValidationArgs, report: Report) -> None:
    """Adopted buckets and the key of their objects (tag `llm-platform/adopted`) are
    protected: no update or destroy of a recovery stack may delete the only copy."""
    if args.resource_type not in (*BUCKETS, KMS_KEY):
        return
    if tags_of(args.props).get(ADOPTED_TAG) != "true":
        return
    if not args.opts.protect:
        what = "bucket" if args.resource_type in BUCKETS else "KMS key"
        report(
            f"adopted {what} {args.name} is not protected: set protect=True (and "
            "retain_on_delete=True) so the recovery stack can never delete the only copy"
        )
