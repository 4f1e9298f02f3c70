"""Storage: the S3 buckets of the platform and their disaster-recovery replicas.

Owns, per bucket in `storage.buckets`:
- the bucket (explicit global name `<prefix>-<key>`), SSE-KMS with a bucket
  key, a public access block, enforced object ownership, a TLS-only policy,
  access logs into the `logs` bucket, lifecycle rules (tiering by prefix,
  noncurrent-version expiry, aborted multipart uploads) and versioning;
- checkpoint retention, as lifecycle rules: a `recent-<runs prefix>` rule expires every
  checkpoint after the recent window (and its noncurrent versions soon after), while the
  milestones' own prefix keeps its tiering rule (the copier is `CheckpointMilestones`);
- for precious buckets (checkpoints, models): versioning, no force-destroy,
  and `retain_on_delete`, so `pulumi destroy` never takes the data with it;
- for replicated buckets: a replica bucket and KMS key in the DR region (a
  second AWS provider), a least-privilege replication role, and the
  replication rule with delete-marker and Replication Time Control options.

Adoption (`storage.adoption`, written by `llmp dr plan`): a recovery stack
takes over the source stack's replicas instead of creating empty buckets. The
adopted buckets and the key that encrypts their objects are imported (Pulumi's
`import` option: the program's inputs name exactly what exists, the bucket
name and the key id), `protect`ed and `retain_on_delete`, and so are the
buckets' settings resources: no `pulumi up` replacement and no `pulumi
destroy` of the recovery stack can delete the only copy or strip its
versioning. The adopted key becomes the stack's storage key, so the file
system, its data repository associations and the tenants' roles use the key
the replicated objects are encrypted with.

Request logs (`request_logs`, stacks that serve models): the serving ALB's access logs
go into the `logs` bucket under `alb/` (that bucket is SSE-S3, the only encryption ALB
log delivery supports), admitted by a policy statement for the region's Elastic Load
Balancing account (regions opened before August 2022, such as us-east-1) or for the
`logdelivery.elasticloadbalancing.amazonaws.com` principal (newer regions), and expire
after `expire_days` (a rule on the prefix); the WAF's logs go into their own bucket
`aws-waf-logs-<prefix>-serving` (WAF requires the prefix), private, SSE-S3, TLS-only, written by
`delivery.logs.amazonaws.com` for this account's WAF only, and expired likewise. The
log delivery statements name this account's id, read from the storage key's ARN (no
provider look-up while the program runs).

Revision signing (stacks with a `models` bucket): an asymmetric KMS key (SIGN_VERIFY,
ECC_NIST_P256) under `alias/<models bucket>-revisions` (`contracts.revisions`). The
promotion job signs each revision's `COMPLETE` with it (the tenants' workload roles get
kms:Sign on it, ECDSA_SHA_256 over a digest only); `llmp promote` has KMS verify it. Its
private half never leaves KMS, so whoever can write the models bucket cannot forge a
seal. Asymmetric keys do not rotate.

Storage stands beside the cluster: nothing here waits for EKS, and EKS waits
for nothing here, so both are created in parallel after a disaster.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pulumi
import pulumi_aws as aws

from components.iam import policy_document, service_trust
from contracts.revisions import signing_key_alias


@dataclass(frozen=True)
class Transition:
    """After `days`, move objects to `storage_class` (an S3 lifecycle transition)."""

    days: int
    storage_class: str


@dataclass(frozen=True, kw_only=True)
class LifecycleRule:
    """Tiering and expiry of the objects under one prefix ("" for the whole bucket)."""

    prefix: str = ""
    transitions: Sequence[Transition] = ()
    expire_days: int | None = None
    noncurrent_days: int | None = None
    """Expire noncurrent versions under the prefix sooner than the bucket's housekeeping does
    (S3 applies the shortest of overlapping rules)."""
    role: str = "tier"
    """The rule id's first word: `tier-<prefix>`, or `recent-<prefix>` for retention's."""


@dataclass(frozen=True, kw_only=True)
class Bucket:
    """One bucket: its physical (global) name and how it keeps its objects."""

    name: str
    precious: bool = False
    """Never force-destroyed, retained when the stack is deleted."""
    versioned: bool = False
    replicate: bool = False
    """Replicate to the replication region (needs `versioned`)."""
    adopted: bool = False
    """It exists already (a disaster-recovery replica): imported, protected, retained."""
    lifecycle: Sequence[LifecycleRule] = ()
    noncurrent_version_expire_days: int = 30
    abort_incomplete_multipart_days: int = 7


@dataclass(frozen=True, kw_only=True)
class Replication:
    """Cross-region replication of the buckets marked `replicate`."""

    region: str
    replicate_delete_markers: bool = False
    time_control: bool = False
    """S3 Replication Time Control (15-minute SLA)."""


@dataclass(frozen=True, kw_only=True)
class RequestLogs:
    """Where the serving ALB and its WAF write their logs, and for how long."""

    expire_days: int
    alb_prefix: str = "alb/"
    """Under the `logs` bucket; ELB adds AWSLogs/<account>/... below it."""
    elb_account_id: str | None = None
    """The region's Elastic Load Balancing account (regions opened before August 2022);
    None: the log delivery service principal of the newer regions."""


ALB_LOG_PRINCIPAL = "logdelivery.elasticloadbalancing.amazonaws.com"
WAF_LOG_PRINCIPAL = "delivery.logs.amazonaws.com"
WAF_LOG_BUCKET_PREFIX = "aws-waf-logs-"
"""WAF logs only into a bucket whose name starts so."""


@dataclass(frozen=True, kw_only=True)
class StorageArgs:
    bucket_name_prefix: str
    """Prefix of the buckets' names (`<prefix>-<key>`), of the keys' aliases and policies."""
    buckets: Mapping[str, Bucket] = field(default_factory=dict)
    """By key; the `logs` bucket, required with any other, receives their access logs."""
    region: str
    """Region of the primary buckets."""
    replication: Replication | None = None
    """Required when a bucket replicates."""
    dr_provider: aws.Provider | None = None
    """Provider of the replication region; required when a bucket replicates."""
    adopted_kms_key_id: str | None = None
    """The existing key that encrypts adopted buckets' objects: imported as the storage key."""
    request_logs: RequestLogs | None = None
    """The serving ALB's access logs (in `logs`) and the WAF's logs (their own bucket)."""


@dataclass(frozen=True)
class BucketRef:
    """What other components need of a bucket."""

    name: pulumi.Output[str]
    arn: pulumi.Output[str]
    versioning: aws.s3.BucketVersioning | None = None
    policy_bucket: pulumi.Output[str] | None = None
    """The name, once the bucket policy is in place: what a log writer should wait for."""


def _tls_only(bucket_arn: str, extra: list[dict] | None = None) -> str:
    statements = [
        {
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": [bucket_arn, f"{bucket_arn}/*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        },
        *(extra or []),
    ]
    return policy_document(*statements)


class Storage(pulumi.ComponentResource):
    buckets: dict[str, BucketRef]
    replicas: dict[str, BucketRef]
    kms_key_arn: pulumi.Output[str]
    kms_key_id: pulumi.Output[str]
    replica_kms_key_arn: pulumi.Output[str] | None
    """The key of the replicas in the DR region (what a recovery stack adopts with them)."""
    signing_key_arn: pulumi.Output[str] | None
    """The key that signs the models bucket's revisions (None: no `models` bucket)."""
    alb_logs: AlbLogTarget | None
    """Where the serving Ingress sends ALB access logs (request_logs set)."""
    waf_logs_arn: pulumi.Output[str] | None
    """The WAF log bucket's ARN, once its policy admits WAF (request_logs set)."""

    def __init__(self, name: str, args: StorageArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmp:storage:Storage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if args.buckets and "logs" not in args.buckets:
            raise ValueError(
                "a `logs` bucket is required: every bucket sends its access logs there"
            )

        adoption = args.adopted_kms_key_id
        key = aws.kms.Key(
            f"{name}-s3",
            description=f"S3 encryption for {args.bucket_name_prefix}-*",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            tags=ADOPTED_TAGS if adoption else None,
            # The adopted buckets' objects are encrypted with this key: losing it loses them.
            opts=pulumi.ResourceOptions.merge(child, _adopt(adoption)) if adoption else child,
        )
        aws.kms.Alias(
            f"{name}-s3",
            name=f"alias/{args.bucket_name_prefix}-s3",
            target_key_id=key.key_id,
            opts=child,
        )

        requests = args.request_logs
        if requests is not None and "logs" not in args.buckets:
            raise ValueError("request_logs need the `logs` bucket (ALB access logs go there)")
        # The account id for the log delivery statements, without a look-up.
        account = key.arn.apply(lambda arn: arn.split(":")[4])
        # Logs first: every other bucket's access logs land there.
        order = sorted(args.buckets, key=lambda k: k != "logs")
        self.buckets = {}
        for bucket_key in order:
            spec = args.buckets[bucket_key]
            alb = requests if bucket_key == "logs" else None
            if alb is not None:
                spec = replace(spec, lifecycle=[*spec.lifecycle, _expiry(alb)])
            self.buckets[bucket_key] = self._bucket(
                f"{name}-{bucket_key}",
                spec=spec,
                # S3 delivers server access logs only into buckets encrypted with
                # SSE-S3: the logs bucket cannot use the KMS key (nor can ALB logs).
                key_arn=None if bucket_key == "logs" else key.arn,
                logs=None if bucket_key == "logs" else self.buckets["logs"].name,
                log_prefix=f"s3/{bucket_key}/",
                log_sources=_log_sources(args) if bucket_key == "logs" else None,
                writers=_alb_writers(alb) if alb is not None else None,
                account=account,
                opts=child,
            )

        self.alb_logs = None
        self.waf_logs_arn = None
        if requests is not None:
            logs = self.buckets["logs"]
            assert logs.policy_bucket is not None
            self.alb_logs = AlbLogTarget(bucket=logs.policy_bucket, prefix=requests.alb_prefix)
            waf = self._bucket(
                f"{name}-waf-logs",
                spec=Bucket(
                    name=waf_log_bucket_name(args.bucket_name_prefix),
                    lifecycle=[LifecycleRule(expire_days=requests.expire_days, role="expire")],
                ),
                # SSE-S3: WAF's log delivery writes without a grant on the storage key.
                key_arn=None,
                logs=logs.name,
                log_prefix="s3/waf-logs/",
                writers=lambda b, acct: waf_log_statements(b, acct, args.region),
                account=account,
                role_tag="waf-logs",
                opts=child,
            )
            assert waf.policy_bucket is not None
            self.waf_logs_arn = waf.policy_bucket.apply(lambda b: f"arn:aws:s3:::{b}")

        self.replicas = {}
        self.replica_kms_key_arn = None
        replicated = [k for k in order if args.buckets[k].replicate]
        if replicated:
            if args.replication is None or args.dr_provider is None:
                raise ValueError(
                    f"buckets {', '.join(replicated)} replicate: give replication and dr_provider"
                )
            self._replicate(
                name, args.region, args, args.replication, replicated, key.arn, args.dr_provider
            )

        self.signing_key_arn = None
        if "models" in args.buckets:
            models = args.buckets["models"].name
            signing = aws.kms.Key(
                f"{name}-revisions",
                description=f"Signs the revisions published to {models} (promotion)",
                key_usage="SIGN_VERIFY",
                customer_master_key_spec="ECC_NIST_P256",
                deletion_window_in_days=30,
                opts=child,
            )
            aws.kms.Alias(
                f"{name}-revisions",
                name=signing_key_alias(models),
                target_key_id=signing.key_id,
                opts=child,
            )
            self.signing_key_arn = signing.arn

        self.kms_key_arn = key.arn
        self.kms_key_id = key.key_id
        self.register_outputs(
            {
                "buckets": {k: b.name for k, b in self.buckets.items()},
                "replicas": {k: b.name for k, b in self.replicas.items()},
                "kms_key_arn": self.kms_key_arn,
                "replica_kms_key_arn": self.replica_kms_key_arn,
                "signing_key_arn": self.signing_key_arn,
                "waf_logs_arn": self.waf_logs_arn,
            }
        )

    # -- one bucket ------------------------------------------------------------

    def _bucket(
        self,
        name: str,
        *,
        spec: Bucket,
        key_arn: pulumi.Input[str] | None,
        logs: pulumi.Input[str] | None,
        log_prefix: str,
        log_sources: str | list[str] | None = None,
        writers: Callable[[str, str], list[dict]] | None = None,
        account: pulumi.Output[str] | None = None,
        role_tag: str | None = None,
        opts: pulumi.ResourceOptions,
    ) -> BucketRef:
        """A private, encrypted, TLS-only, versioned-if-asked bucket with `spec`'s lifecycle.

        `key_arn` None: SSE-S3 (AES256) instead of SSE-KMS, for the access-log target.
        `adopted`: the bucket exists (a replica taken over after a disaster) and is
        imported by its name; its settings are retained too, so a destroy of this
        stack leaves it versioned, encrypted and private.
        """
        physical, adopted, precious = spec.name, spec.adopted, spec.precious
        tags = {"Name": physical, "llm-platform/bucket-role": role_tag or "primary"}
        bucket = aws.s3.Bucket(
            name,
            bucket=physical,
            force_destroy=False,
            tags={**tags, **ADOPTED_TAGS} if adopted else tags,
            opts=pulumi.ResourceOptions.merge(
                opts,
                _adopt(physical) if adopted else pulumi.ResourceOptions(retain_on_delete=precious),
            ),
        )
        if adopted:
            opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(retain_on_delete=True))
        on_bucket = bucket.bucket
        aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access",
            bucket=on_bucket,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=opts,
        )
        aws.s3.BucketOwnershipControls(
            f"{name}-ownership",
            bucket=on_bucket,
            rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
            opts=opts,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption",
            bucket=on_bucket,
            rules=[
                aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=_sse_default(key_arn),
                    # Bucket keys cut KMS requests (and their cost) by orders of magnitude.
                    bucket_key_enabled=key_arn is not None,
                )
            ],
            opts=opts,
        )
        extra = None
        if log_sources is not None:
            extra = [
                {
                    "Sid": "AllowServerAccessLogs",
                    "Effect": "Allow",
                    "Principal": {"Service": "logging.s3.amazonaws.com"},
                    "Action": "s3:PutObject",
                    "Resource": f"arn:aws:s3:::{physical}/s3/*",
                    "Condition": {"ArnLike": {"aws:SourceArn": log_sources}},
                }
            ]
        if writers is None:
            document = bucket.arn.apply(lambda arn: _tls_only(arn, extra))
        else:
            # Log delivery services that write here (request logs), for this account only.
            assert account is not None
            document = pulumi.Output.all(bucket.arn, account).apply(
                lambda v: _tls_only(v[0], [*(extra or []), *writers(physical, v[1])])
            )
        policy = aws.s3.BucketPolicy(f"{name}-policy", bucket=on_bucket, policy=document, opts=opts)
        versioning = None
        if spec.versioned:
            versioning = aws.s3.BucketVersioning(
                f"{name}-versioning",
                bucket=on_bucket,
                versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(
                    status="Enabled"
                ),
                opts=opts,
            )
        if logs is not None:
            aws.s3.BucketLogging(
                f"{name}-logging",
                bucket=on_bucket,
                target_bucket=logs,
                target_prefix=log_prefix,
                opts=opts,
            )
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle",
            bucket=on_bucket,
            rules=lifecycle_rules(spec),
            opts=opts,
        )
        return BucketRef(
            name=on_bucket,
            arn=bucket.arn,
            versioning=versioning,
            # The bucket's name, carrying the wait for its policy: a log writer checks it.
            policy_bucket=pulumi.Output.all(on_bucket, policy.id).apply(lambda v: v[0])
            if writers is not None
            else None,
        )

    # -- replication -------------------------------------------------------------

    def _replicate(
        self,
        name: str,
        source_region: str,
        cfg: StorageArgs,
        rep: Replication,
        replicated: list[str],
        source_key_arn: pulumi.Output[str],
        dr_provider: aws.Provider,
    ) -> None:
        replica_region = rep.region
        in_dr = pulumi.ResourceOptions(parent=self, provider=dr_provider)
        replica_key = aws.kms.Key(
            f"{name}-replica-s3",
            description=f"S3 encryption for {cfg.bucket_name_prefix}-* replicas in {rep.region}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            opts=in_dr,
        )
        # A name to find the key by in the DR region when this stack's state is gone:
        # a recovery stack adopts the replicas together with this key.
        aws.kms.Alias(
            f"{name}-replica-s3",
            name=f"alias/{cfg.bucket_name_prefix}-s3-replica",
            target_key_id=replica_key.key_id,
            opts=in_dr,
        )
        self.replica_kms_key_arn = replica_key.arn
        role = aws.iam.Role(
            f"{name}-replication",
            assume_role_policy=service_trust("s3.amazonaws.com"),
            description="S3 cross-region replication of precious buckets",
            opts=pulumi.ResourceOptions(parent=self),
        )
        pairs = []
        for bucket_key in replicated:
            source = self.buckets[bucket_key]
            replica = self._bucket(
                f"{name}-{bucket_key}-replica",
                # Replicas land in Standard and then age like their source, so the DR
                # copy keeps data exactly as long as the primary does.
                spec=replace(
                    cfg.buckets[bucket_key],
                    name=f"{cfg.bucket_name_prefix}-{bucket_key}-{rep.region}",
                    adopted=False,
                ),
                key_arn=replica_key.arn,
                logs=None,
                log_prefix="",
                role_tag="replica",
                opts=in_dr,
            )
            self.replicas[bucket_key] = replica
            pairs.append((bucket_key, source, replica))

        aws.iam.RolePolicy(
            f"{name}-replication",
            role=role.id,
            policy=pulumi.Output.all(
                [s.arn for _, s, _ in pairs],
                [r.arn for _, _, r in pairs],
                source_key_arn,
                replica_key.arn,
            ).apply(
                lambda v: replication_policy(v[0], v[1], v[2], v[3], source_region, replica_region)
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        for bucket_key, source, replica in pairs:
            aws.s3.BucketReplicationConfig(
                f"{name}-{bucket_key}-replication",
                bucket=source.name,
                role=role.arn,
                rules=[replication_rule(bucket_key, replica.arn, replica_key.arn, rep)],
                # S3 refuses a replication rule until both sides are versioned.
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[v for v in (source.versioning, replica.versioning) if v],
                ),
            )


ADOPTED_TAGS = {"llm-platform/adopted": "true"}
"""Marks an adopted resource; the policy pack requires it to be protected."""


def _adopt(import_id: str) -> pulumi.ResourceOptions:
    """Take over an existing resource and make sure this stack can never delete it."""
    return pulumi.ResourceOptions(import_=import_id, protect=True, retain_on_delete=True)


def _log_sources(cfg: StorageArgs) -> str | list[str]:
    """Buckets whose access logs the logs bucket admits: the prefix's, plus adopted ones
    (their names come from the source stack's prefix) and the WAF log bucket."""
    own = f"arn:aws:s3:::{cfg.bucket_name_prefix}-*"
    adopted = sorted(b.name for b in cfg.buckets.values() if b.adopted)
    # A pattern, not the name: the WAF log bucket is made after this one (it logs here).
    waf = [f"arn:aws:s3:::{WAF_LOG_BUCKET_PREFIX}{cfg.bucket_name_prefix}-*"]
    if cfg.request_logs is None:
        waf = []
    if cfg.adopted_kms_key_id is None and not waf:
        return own
    return [own, *(f"arn:aws:s3:::{n}" for n in adopted), *waf]


@dataclass(frozen=True)
class AlbLogTarget:
    """The Ingress's access-log settings: bucket (after its policy) and prefix."""

    bucket: pulumi.Output[str]
    prefix: str


def waf_log_bucket_name(bucket_name_prefix: str) -> str:
    """`aws-waf-logs-<prefix>-serving`: WAF's required prefix, then the stack's own."""
    return f"{WAF_LOG_BUCKET_PREFIX}{bucket_name_prefix}-serving"


def _alb_writers(logs: RequestLogs) -> Callable[[str, str], list[dict]]:
    return lambda bucket, account: alb_log_statements(bucket, account, logs)


def _expiry(logs: RequestLogs) -> LifecycleRule:
    return LifecycleRule(prefix=logs.alb_prefix, expire_days=logs.expire_days, role="expire")


def alb_log_statements(bucket: str, account: str, logs: RequestLogs) -> list[dict]:
    """ELB's access-log delivery into `<prefix>AWSLogs/<account>/`: the region's ELB
    account where the region predates August 2022, the log delivery principal otherwise
    (AWS's "Enable access logs for your Application Load Balancer", step 2)."""
    principal = (
        {"AWS": f"arn:aws:iam::{logs.elb_account_id}:root"}
        if logs.elb_account_id
        else {"Service": ALB_LOG_PRINCIPAL}
    )
    return [
        {
            "Sid": "AllowAlbAccessLogs",
            "Effect": "Allow",
            "Principal": principal,
            "Action": "s3:PutObject",
            "Resource": f"arn:aws:s3:::{bucket}/{logs.alb_prefix}AWSLogs/{account}/*",
        }
    ]


def waf_log_statements(bucket: str, account: str, region: str) -> list[dict]:
    """WAF's log delivery (CloudWatch Logs' vended-log service) writes under AWSLogs/ and
    checks the ACL first; only for this account's sources (AWS WAF developer guide,
    "Permissions for publishing logs to Amazon S3")."""
    scope = {
        "StringEquals": {"aws:SourceAccount": account},
        "ArnLike": {"aws:SourceArn": f"arn:aws:logs:{region}:{account}:*"},
    }
    return [
        {
            "Sid": "AWSLogDeliveryWrite",
            "Effect": "Allow",
            "Principal": {"Service": WAF_LOG_PRINCIPAL},
            "Action": "s3:PutObject",
            "Resource": f"arn:aws:s3:::{bucket}/AWSLogs/{account}/*",
            "Condition": {
                **scope,
                "StringEquals": {
                    "s3:x-amz-acl": "bucket-owner-full-control",
                    "aws:SourceAccount": account,
                },
            },
        },
        {
            "Sid": "AWSLogDeliveryAclCheck",
            "Effect": "Allow",
            "Principal": {"Service": WAF_LOG_PRINCIPAL},
            "Action": "s3:GetBucketAcl",
            "Resource": f"arn:aws:s3:::{bucket}",
            "Condition": scope,
        },
    ]


def _sse_default(
    key_arn: pulumi.Input[str] | None,
) -> aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs:
    """SSE-KMS with `key_arn`, or SSE-S3 (AES256) when there is no key."""
    args = aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs
    if key_arn is None:
        return args(sse_algorithm="AES256")
    return args(sse_algorithm="aws:kms", kms_master_key_id=key_arn)


def replication_policy(
    sources: list[str],
    replicas: list[str],
    source_key_arn: str,
    replica_key_arn: str,
    source_region: str,
    replica_region: str,
) -> str:
    """Least privilege for S3 replication: read versions of the sources, write replicas,
    decrypt with the source key and encrypt with the replica key, through S3 only."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "ReadReplicationConfiguration",
                    "Effect": "Allow",
                    "Action": ["s3:GetReplicationConfiguration", "s3:ListBucket"],
                    "Resource": sources,
                },
                {
                    "Sid": "ReadSourceVersions",
                    "Effect": "Allow",
                    "Action": [
                        "s3:GetObjectVersionForReplication",
                        "s3:GetObjectVersionAcl",
                        "s3:GetObjectVersionTagging",
                    ],
                    "Resource": [f"{arn}/*" for arn in sources],
                },
                {
                    "Sid": "WriteReplicas",
                    "Effect": "Allow",
                    "Action": ["s3:ReplicateObject", "s3:ReplicateDelete", "s3:ReplicateTags"],
                    "Resource": [f"{arn}/*" for arn in replicas],
                },
                {
                    "Sid": "DecryptSources",
                    "Effect": "Allow",
                    "Action": "kms:Decrypt",
                    "Resource": source_key_arn,
                    "Condition": {
                        "StringEquals": {"kms:ViaService": f"s3.{source_region}.amazonaws.com"}
                    },
                },
                {
                    "Sid": "EncryptReplicas",
                    "Effect": "Allow",
                    "Action": ["kms:Encrypt", "kms:GenerateDataKey"],
                    "Resource": replica_key_arn,
                    "Condition": {
                        "StringEquals": {"kms:ViaService": f"s3.{replica_region}.amazonaws.com"}
                    },
                },
            ],
        }
    )


def replication_rule(
    bucket_key: str,
    replica_arn: pulumi.Input[str],
    replica_key_arn: pulumi.Input[str],
    rep: Replication,
) -> aws.s3.BucketReplicationConfigRuleArgs:
    """Replicate every object, SSE-KMS ones included, re-encrypted with the replica key."""
    rtc = "Enabled" if rep.time_control else "Disabled"
    return aws.s3.BucketReplicationConfigRuleArgs(
        id=f"dr-{bucket_key}",
        status="Enabled",
        priority=1,
        filter=aws.s3.BucketReplicationConfigRuleFilterArgs(prefix=""),
        delete_marker_replication=aws.s3.BucketReplicationConfigRuleDeleteMarkerReplicationArgs(
            status="Enabled" if rep.replicate_delete_markers else "Disabled"
        ),
        source_selection_criteria=aws.s3.BucketReplicationConfigRuleSourceSelectionCriteriaArgs(
            sse_kms_encrypted_objects=aws.s3.BucketReplicationConfigRuleSourceSelectionCriteriaSseKmsEncryptedObjectsArgs(
                status="Enabled"
            )
        ),
        destination=aws.s3.BucketReplicationConfigRuleDestinationArgs(
            bucket=replica_arn,
            storage_class="STANDARD",
            encryption_configuration=aws.s3.BucketReplicationConfigRuleDestinationEncryptionConfigurationArgs(
                replica_kms_key_id=replica_key_arn
            ),
            replication_time=aws.s3.BucketReplicationConfigRuleDestinationReplicationTimeArgs(
                status=rtc,
                time=aws.s3.BucketReplicationConfigRuleDestinationReplicationTimeTimeArgs(
                    minutes=15
                ),
            )
            if rep.time_control
            else None,
            # Replication metrics are required with RTC and cheap without it.
            metrics=aws.s3.BucketReplicationConfigRuleDestinationMetricsArgs(
                status="Enabled",
                event_threshold=aws.s3.BucketReplicationConfigRuleDestinationMetricsEventThresholdArgs(
                    minutes=15
                ),
            ),
        ),
    )


def lifecycle_rules(spec: Bucket) -> list[aws.s3.BucketLifecycleConfigurationRuleArgs]:
    """The bucket's tiering rules by prefix, plus one rule for housekeeping."""
    rules = []
    for rule in spec.lifecycle:
        rules.append(
            aws.s3.BucketLifecycleConfigurationRuleArgs(
                id=f"{rule.role}-{rule.prefix.strip('/').replace('/', '-') or 'all'}",
                status="Enabled",
                filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=rule.prefix),
                transitions=[
                    aws.s3.BucketLifecycleConfigurationRuleTransitionArgs(
                        days=step.days, storage_class=step.storage_class
                    )
                    for step in rule.transitions
                ]
                or None,
                expiration=aws.s3.BucketLifecycleConfigurationRuleExpirationArgs(
                    days=rule.expire_days
                )
                if rule.expire_days
                else None,
                noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                    noncurrent_days=rule.noncurrent_days
                )
                if rule.noncurrent_days and spec.versioned
                else None,
            )
        )
    rules.append(
        aws.s3.BucketLifecycleConfigurationRuleArgs(
            id="housekeeping",
            status="Enabled",
            filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
            abort_incomplete_multipart_upload=aws.s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                days_after_initiation=spec.abort_incomplete_multipart_days
            ),
            noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                noncurrent_days=spec.noncurrent_version_expire_days
            )
            if spec.versioned
            else None,
        )
    )
    return rules
