"""LustreFileSystem: FSx for Lustre (PERSISTENT_2) beside a GPU pool, linked to S3.

Owns the file system, its security group (Lustre's ports 988 and 1018-1023
between the file system and the cluster's nodes), and two data repository
associations:

- `/datasets` <- the datasets bucket: imported on create, then new, changed
  and deleted objects are auto-imported, so a data-prep job writing to S3 is
  visible to training without a copy; content is lazy-loaded on first read.
- `/checkpoints` -> the checkpoints bucket: new and changed files are
  auto-exported. Deletions are deliberately *not* exported: training keeps
  only the last K checkpoints on Lustre, while S3 (versioned, tiered,
  replicated) keeps them as long as its lifecycle says. Metadata of existing
  checkpoints is imported on create, so a rebuilt file system can resume.

Logging: data repository warnings and errors (failed imports and exports such as
S3ExportAccessDenied, S3ImportAccessDenied, InternalAutoExportError, NoDiskSpace) go to a
Pulumi-made log group `/aws/fsx/<cluster>-lustre` with `log_retention_days`; FSx logs nothing
unless told to. FSx writes through its service-linked role (AWSServiceRoleForAmazonFSx, whose
managed policy allows logs:PutLogEvents on `log-group:/aws/fsx/*`): hence the prefix, and no
log-group resource policy. Fullness and the auto-export backlog are alerted on from CloudWatch
metrics (components/monitoring.py).

Tenants sharing the file system (`tenant_directories`): each gets its own directory
`/tenants/<name>/` with `datasets/` <- and `checkpoints/` -> its own prefix of the buckets
(its first `s3_prefixes` entry) instead of the two shared associations above, so an export
can only write where that tenant's IAM role may. Its pods mount only that directory (a
Lustre subdirectory mount, "Mounting specific filesets", FSx for Lustre User Guide,
mounting-from-fileset.html; the FSx CSI driver mounts `dnsname@tcp:/mountname`, so the PV's
`mountname` names the subdirectory) and run as the tenant's uid (admission enforces it). The
two linked directories belong to that uid, mode 0770: FSx carries POSIX ownership and
permissions between S3 and the file system ("POSIX metadata support for data repositories",
posix-metadata-support.html): a directory is the S3 object whose key ends in `/`, with
`x-amz-meta-file-owner`, `-file-group` and `-file-permissions`, so the component writes
those two directory objects before the associations import them. Root squash is on
(`65534:65534`, "Lustre root squash", root-squash.html): a container that runs as root on
a client is `nobody` to the file system and reads none of the 0770 directories. No client
is exempt (no NoSquashNids): pods share the nodes' subnets, so no NID range would single
out a platform node. Check ownership after the first deploy (`stat -c '%u %a'` on the two
directories of a tenant's mount): that FSx applies the prefix object's metadata to the
association's root is what the User Guide's mapping implies, not something that can be
tested offline.

FSx and its associations take 10-30 minutes or more to create; the custom
timeouts leave room for that.

No FSx backups: AWS does not back up a file system linked to S3 (neither daily
nor a final backup on delete). What the file system holds that matters lives in
S3: the datasets it imports, and the checkpoints it exports (versioned, tiered,
replicated). Before deleting it, wait for the export backlog to drain
(AWS/FSx AgeOfOldestQueuedMessage at 0, alerted on in components/monitoring.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_aws as aws

LUSTRE_PORTS = ((988, 988), (1018, 1023))
TENANTS_ROOT = "/tenants"
"""Where each tenant's directory is on a shared file system: `/tenants/<name>/`."""
ROOT_SQUASH = "65534:65534"
"""Root on a client becomes nobody:nogroup (root-squash.html)."""
DIRECTORY_MODE = "040770"
"""`x-amz-meta-file-permissions` of a tenant's linked directories: st_mode of a directory
(040000) with rwx for the owner and its group, nothing for others."""


def tenant_path(tenant: str) -> str:
    """The tenant's directory on a shared file system (what its volume mounts)."""
    return f"{TENANTS_ROOT}/{tenant}"


@dataclass(frozen=True, kw_only=True)
class TenantDirectory:
    """One tenant's share of the file system: `/tenants/<name>/{datasets,checkpoints}`."""

    name: str
    uid: int
    """Owner (uid and gid) of its two linked directories."""
    prefix: str
    """Its prefix of the datasets and checkpoints buckets (ends in /)."""


def directory_metadata(uid: int) -> dict[str, str]:
    """The S3 user metadata FSx reads as a directory's owner, group and mode (the provider
    adds `x-amz-meta-`)."""
    return {"file-owner": str(uid), "file-group": str(uid), "file-permissions": DIRECTORY_MODE}


LOG_GROUP_PREFIX = "/aws/fsx/"
"""FSx writes only to log groups whose name begins with this (its service-linked role's policy)."""
LOG_LEVEL = "WARN_ERROR"
"""Data repository warnings and errors (DISABLED, WARN_ONLY, ERROR_ONLY or WARN_ERROR)."""


def log_group_name(cluster_name: str) -> str:
    """The file system's log group: FSx requires the `/aws/fsx/` prefix."""
    return f"{LOG_GROUP_PREFIX}{cluster_name}-lustre"


def fsx_key_policy(key_arn: str, file_system_id: str, buckets: list[str]) -> str:
    """The storage key's policy: the account's IAM delegation, plus use through S3 by this
    file system's S3-access service-linked role, on objects of the linked buckets only."""
    _, partition, _, region, account, _ = key_arn.split(":", 5)
    slr = (
        f"arn:{partition}:iam::{account}:role/aws-service-role/"
        f"s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_{file_system_id}"
    )
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "EnableIamPolicies",
                    "Effect": "Allow",
                    "Principal": {"AWS": f"arn:{partition}:iam::{account}:root"},
                    "Action": "kms:*",
                    "Resource": "*",
                },
                {
                    "Sid": "FsxS3AccessThroughS3",
                    "Effect": "Allow",
                    "Principal": {"AWS": slr},
                    "Action": [
                        "kms:Encrypt",
                        "kms:Decrypt",
                        "kms:ReEncrypt*",
                        "kms:GenerateDataKey*",
                    ],
                    "Resource": "*",
                    "Condition": {
                        "StringEquals": {
                            "kms:CallerAccount": account,
                            "kms:ViaService": f"s3.{region}.amazonaws.com",
                        },
                        # With bucket keys the encryption context is the bucket ARN.
                        "StringLike": {
                            "kms:EncryptionContext:aws:s3:arn": [
                                f"arn:{partition}:s3:::{bucket}" for bucket in buckets
                            ]
                        },
                    },
                },
            ],
        }
    )


@dataclass(frozen=True, kw_only=True)
class LustreFileSystemArgs:
    storage_capacity_gib: int = 1200
    """1200 GiB or a multiple of 2400 GiB (PERSISTENT_2)."""
    throughput_per_tib: Literal[125, 250, 500, 1000] = 125
    compression: Literal["LZ4", "NONE"] = "LZ4"
    metadata_mode: Literal["AUTOMATIC", "USER_PROVISIONED"] = "AUTOMATIC"
    metadata_iops: int | None = None
    """With USER_PROVISIONED only."""
    lustre_version: Literal["2.15", "2.12"] = "2.15"
    datasets_prefix: str = ""
    """Prefix of the datasets bucket imported at /datasets."""
    checkpoints_prefix: str = ""
    """Prefix of the checkpoints bucket exported from /checkpoints."""
    log_retention_days: int = 90
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    """The private subnet of the GPU pool named in `node_pool` (one AZ)."""
    client_security_group_id: pulumi.Input[str]
    """The EKS cluster security group every node interface carries."""
    kms_key_arn: pulumi.Input[str]
    """The storage key: encrypts the file system and the linked buckets' objects."""
    kms_key_id: pulumi.Input[str]
    datasets_bucket: pulumi.Input[str]
    checkpoints_bucket: pulumi.Input[str]
    log_group_name: str
    """CloudWatch log group of the data repository events (`log_group_name(cluster)`)."""
    tenants: list[TenantDirectory] = field(default_factory=list)
    """Tenants sharing the file system, each in its own directory (empty: one team, the
    shared `/datasets` and `/checkpoints`)."""
    efa: bool = False
    """EFA and GPUDirect Storage support (`efa_enabled`): set at creation only; the
    security groups then allow all traffic between the file system and its clients."""


class LustreFileSystem(pulumi.ComponentResource):
    file_system_id: pulumi.Output[str]
    dns_name: pulumi.Output[str]
    mount_name: pulumi.Output[str]
    log_group_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: LustreFileSystemArgs, opts: pulumi.ResourceOptions | None = None
    ):
        if not args.log_group_name.startswith(LOG_GROUP_PREFIX):
            raise ValueError(
                f"FSx log group {args.log_group_name!r} must begin with {LOG_GROUP_PREFIX}"
            )
        super().__init__("llmp:storage:LustreFileSystem", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        log_group = aws.cloudwatch.LogGroup(
            f"{name}-logs",
            name=args.log_group_name,
            retention_in_days=args.log_retention_days,
            opts=child,
        )

        sg = aws.ec2.SecurityGroup(
            f"{name}-fs",
            vpc_id=args.vpc_id,
            description="FSx for Lustre: Lustre ports from its clients and itself",
            tags={"Name": f"{name}-fs"},
            opts=child,
        )
        for low, high in LUSTRE_PORTS:
            ports = f"{low}" if low == high else f"{low}-{high}"
            for peer, who in ((sg.id, "self"), (args.client_security_group_id, "nodes")):
                for rule, direction, preposition in (
                    (aws.vpc.SecurityGroupIngressRule, "in", "from"),
                    (aws.vpc.SecurityGroupEgressRule, "out", "to"),
                ):
                    rule(
                        f"{name}-{direction}-{who}-{ports}",
                        security_group_id=sg.id,
                        referenced_security_group_id=peer,
                        ip_protocol="tcp",
                        from_port=low,
                        to_port=high,
                        description=f"Lustre {ports} {preposition} {who}",
                        opts=child,
                    )
            # Lustre servers also open connections back to their clients.
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-nodes-from-fs-{ports}",
                security_group_id=args.client_security_group_id,
                referenced_security_group_id=sg.id,
                ip_protocol="tcp",
                from_port=low,
                to_port=high,
                description=f"Lustre {ports} from the file system",
                opts=child,
            )

        if args.efa:
            self._efa_rules(name, sg, args.client_security_group_id, child)

        fs = aws.fsx.LustreFileSystem(
            f"{name}-fs",
            deployment_type="PERSISTENT_2",
            storage_type="SSD",
            storage_capacity=args.storage_capacity_gib,
            per_unit_storage_throughput=args.throughput_per_tib,
            data_compression_type=args.compression,
            metadata_configuration=aws.fsx.LustreFileSystemMetadataConfigurationArgs(
                mode=args.metadata_mode, iops=args.metadata_iops
            ),
            file_system_type_version=args.lustre_version,
            # EFA needs PERSISTENT_2 with a metadata configuration (both above) and the
            # all-traffic security group rules (_efa_rules); it cannot be turned on later.
            efa_enabled=True if args.efa else None,
            subnet_ids=args.subnet_id,  # FSx for Lustre lives in exactly one subnet
            security_group_ids=[sg.id],
            kms_key_id=args.kms_key_arn,
            # Linked to S3, so no FSx backups: AWS refuses them on S3-linked file
            # systems ("Backups cannot be enabled on S3-linked file systems",
            # DeleteFileSystem API reference). The durable copy is S3's: checkpoints
            # are exported, datasets are imported from it.
            automatic_backup_retention_days=0,
            skip_final_backup=True,
            # Failed imports and exports are otherwise invisible; updatable in place.
            log_configuration=aws.fsx.LustreFileSystemLogConfigurationArgs(
                level=LOG_LEVEL, destination=log_group.arn
            ),
            # Tenants' directories are theirs by uid: root on a client must not override that.
            root_squash_configuration=aws.fsx.LustreFileSystemRootSquashConfigurationArgs(
                root_squash=ROOT_SQUASH
            )
            if args.tenants
            else None,
            tags={"Name": f"{name}-fs"},
            opts=pulumi.ResourceOptions(
                parent=self,
                custom_timeouts=pulumi.CustomTimeouts(create="90m", update="90m", delete="60m"),
            ),
        )

        # The linked buckets are SSE-KMS: FSx's per-file-system service-linked role
        # may only import and export if the key policy names it. A key policy is a
        # whole document, so it restates the account's default IAM delegation.
        key_policy = aws.kms.KeyPolicy(
            f"{name}-key-policy",
            key_id=args.kms_key_id,
            policy=pulumi.Output.all(
                args.kms_key_arn, fs.id, args.datasets_bucket, args.checkpoints_bucket
            ).apply(lambda v: fsx_key_policy(v[0], v[1], [v[2], v[3]])),
            opts=child,
        )

        def association(
            role: str,
            path: str,
            bucket: pulumi.Input[str],
            prefix: str,
            s3: aws.fsx.DataRepositoryAssociationS3Args,
            after: list[pulumi.Resource] | None = None,
        ) -> aws.fsx.DataRepositoryAssociation:
            return aws.fsx.DataRepositoryAssociation(
                f"{name}-{role}",
                file_system_id=fs.id,
                file_system_path=path,
                data_repository_path=pulumi.Output.concat("s3://", bucket, "/", prefix),
                batch_import_meta_data_on_create=True,
                imported_file_chunk_size=1024,
                # Never delete S3 data because an association goes away.
                delete_data_in_filesystem=False,
                s3=s3,
                opts=pulumi.ResourceOptions(
                    parent=self,
                    # An association created before FSx may use the key fails its import;
                    # a tenant's imports its directory's owner from the directory object.
                    depends_on=[key_policy, *(after or [])],
                    custom_timeouts=pulumi.CustomTimeouts(create="45m", update="45m", delete="45m"),
                ),
            )

        imports = aws.fsx.DataRepositoryAssociationS3Args(
            auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(
                events=["NEW", "CHANGED", "DELETED"]
            )
        )
        exports = aws.fsx.DataRepositoryAssociationS3Args(
            auto_export_policy=aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(
                events=["NEW", "CHANGED"]
            )
        )
        if not args.tenants:
            association(
                "datasets", "/datasets", args.datasets_bucket, args.datasets_prefix, imports
            )
            association(
                "checkpoints",
                "/checkpoints",
                args.checkpoints_bucket,
                args.checkpoints_prefix,
                exports,
            )
        for tenant in args.tenants:
            for role, bucket, s3 in (
                ("datasets", args.datasets_bucket, imports),
                ("checkpoints", args.checkpoints_bucket, exports),
            ):
                directory = aws.s3.BucketObjectv2(
                    f"{name}-{tenant.name}-{role}-dir",
                    bucket=bucket,
                    key=tenant.prefix,
                    content="",
                    content_type="application/x-directory",
                    metadata=directory_metadata(tenant.uid),
                    opts=child,
                )
                association(
                    f"{tenant.name}-{role}",
                    f"{tenant_path(tenant.name)}/{role}",
                    bucket,
                    tenant.prefix,
                    s3,
                    after=[directory],
                )

        self.file_system_id = fs.id
        self.dns_name = fs.dns_name
        self.mount_name = fs.mount_name
        self.log_group_name = log_group.name
        self.register_outputs(
            {
                "file_system_id": self.file_system_id,
                "dns_name": self.dns_name,
                "mount_name": self.mount_name,
                "log_group_name": self.log_group_name,
            }
        )

    @staticmethod
    def _efa_rules(
        name: str,
        sg: aws.ec2.SecurityGroup,
        nodes: pulumi.Input[str],
        child: pulumi.ResourceOptions,
    ) -> None:
        """All traffic between the file system and its clients, and within the file system's
        own group, each rule naming a security group: an EFA file system needs both, and
        CIDR rules (0.0.0.0/0 included) do not count (limit-access-security-groups.html)."""
        rules: list[tuple[str, pulumi.Input[str], pulumi.Input[str], bool, str]] = [
            ("efa-in-self", sg.id, sg.id, True, "from itself"),
            ("efa-out-self", sg.id, sg.id, False, "to itself"),
            ("efa-in-nodes", sg.id, nodes, True, "from the nodes"),
            ("efa-out-nodes", sg.id, nodes, False, "to the nodes"),
            ("nodes-efa-from-fs", nodes, sg.id, True, "from the file system"),
            ("nodes-efa-to-fs", nodes, sg.id, False, "to the file system"),
        ]
        for role, group, peer, ingress, words in rules:
            kind = aws.vpc.SecurityGroupIngressRule if ingress else aws.vpc.SecurityGroupEgressRule
            kind(
                f"{name}-{role}",
                security_group_id=group,
                referenced_security_group_id=peer,
                ip_protocol="-1",
                description=f"EFA: all traffic {words}",
                opts=child,
            )
