"""Each component built alone, from its own args: no stack file, no `PlatformConfig`.

The program maps the stack schema onto these args (`program.args`); here they
are written by hand, the way another program would use the component.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import pytest

from components.cluster import Cluster, ClusterArgs, SystemPool
from components.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.image_repository import ImageRepository, ImageRepositoryArgs
from components.managed_nodes import PoolSize
from components.network import Network, NetworkArgs
from components.serving import Serving, ServingArgs
from components.storage import Bucket, LifecycleRule, Storage, StorageArgs, Transition
from llmp.plan.synth import run

REGION = "eu-west-1"


def built(program) -> list[dict]:
    return run("alone", REGION, program).resources


def of_type(resources: list[dict], type_: str) -> list[dict]:
    return [r for r in resources if r.type == type_]


def test_a_network_alone_has_the_subnets_and_nat_gateways_it_is_given() -> None:
    def program() -> None:
        Network(
            "net",
            NetworkArgs(
                vpc_cidr="10.20.0.0/16",
                private_subnets={"eu-west-1a": "10.20.0.0/18", "eu-west-1b": "10.20.64.0/18"},
                public_subnets={"eu-west-1a": "10.20.128.0/24", "eu-west-1b": "10.20.129.0/24"},
                nat_gateways="per_az",
                s3_gateway_endpoint=False,
                region=REGION,
                cluster_name="c",
            ),
        )

    resources = built(program)
    cidrs = sorted(r.inputs["cidrBlock"] for r in of_type(resources, "aws:ec2/subnet:Subnet"))
    assert cidrs == ["10.20.0.0/18", "10.20.128.0/24", "10.20.129.0/24", "10.20.64.0/18"]
    assert len(of_type(resources, "aws:ec2/natGateway:NatGateway")) == 2
    assert not of_type(resources, "aws:ec2/vpcEndpoint:VpcEndpoint")


def test_a_network_refuses_subnets_in_different_zones() -> None:
    with pytest.raises(ValueError, match="same AZs"):
        built(
            lambda: Network(
                "net",
                NetworkArgs(
                    vpc_cidr="10.20.0.0/16",
                    private_subnets={"eu-west-1a": "10.20.0.0/18"},
                    public_subnets={"eu-west-1b": "10.20.128.0/24"},
                    region=REGION,
                    cluster_name="c",
                ),
            )
        )


def test_a_capacity_block_pool_alone_names_its_type_in_the_template_only() -> None:
    def program() -> None:
        GpuNodePool(
            "gpu",
            GpuNodePoolArgs(
                pool_name="block",
                instance_type="p5.48xlarge",
                size=PoolSize(min_size=0, desired_size=0, max_size=2),
                capacity_type="CAPACITY_BLOCK",
                capacity_reservation_id="cr-0123456789abcdef0",
                efa=True,
                cluster_name="c",
                cluster_version="1.35",
                cluster_security_group_id="sg-c",
                node_role_arn="arn:aws:iam::123456789012:role/node",
                subnet_ids=["subnet-a"],
                efa_security_group_id="sg-efa",
                wait_for=[],
                tags={"team": "t"},
            ),
        )

    resources = built(program)
    [template] = of_type(resources, "aws:ec2/launchTemplate:LaunchTemplate")
    [group] = of_type(resources, "aws:eks/nodeGroup:NodeGroup")
    assert template.inputs["instanceType"] == "p5.48xlarge"
    assert "instanceTypes" not in group.inputs
    assert len(template.inputs["networkInterfaces"]) == 33  # ENA + 32 efa-only
    assert not of_type(resources, "aws:ec2/placementGroup:PlacementGroup")


def test_a_pool_refuses_a_block_without_its_reservation() -> None:
    with pytest.raises(ValueError, match="capacity_reservation_id"):
        built(
            lambda: GpuNodePool(
                "gpu",
                GpuNodePoolArgs(
                    pool_name="block",
                    instance_type="p5.48xlarge",
                    capacity_type="CAPACITY_BLOCK",
                    cluster_name="c",
                    cluster_version="1.35",
                    cluster_security_group_id="sg",
                    node_role_arn="arn",
                    subnet_ids=["s"],
                    efa_security_group_id="sg",
                    wait_for=[],
                    tags={},
                ),
            )
        )


def test_a_pool_size_out_of_order_is_refused() -> None:
    with pytest.raises(ValueError, match="min"):
        PoolSize(min_size=3, desired_size=1, max_size=4)


def test_a_cluster_alone_pins_its_add_ons_and_sizes_its_system_pool() -> None:
    def program() -> None:
        Cluster(
            "cluster",
            ClusterArgs(
                cluster_name="alone",
                region=REGION,
                private_subnet_ids=["subnet-a", "subnet-b"],
                tags={},
                version="1.35",
                system_pool=SystemPool(
                    instance_type="c7i.4xlarge",
                    size=PoolSize(min_size=3, desired_size=3, max_size=3),
                ),
            ),
        )

    resources = built(program)
    [group] = of_type(resources, "aws:eks/nodeGroup:NodeGroup")
    assert group.inputs["instanceTypes"] == ["c7i.4xlarge"]
    assert group.inputs["scalingConfig"] == {"desiredSize": 3, "maxSize": 3, "minSize": 3}
    addons = {r.inputs["addonName"] for r in of_type(resources, "aws:eks/addon:Addon")}
    assert addons == {"vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent"}


def test_storage_alone_keeps_a_precious_bucket_and_tiers_it() -> None:
    def program() -> None:
        Storage(
            "storage",
            StorageArgs(
                bucket_name_prefix="acme-alone",
                region=REGION,
                buckets={
                    "logs": Bucket(name="acme-alone-logs"),
                    "checkpoints": Bucket(
                        name="acme-alone-checkpoints",
                        precious=True,
                        versioned=True,
                        lifecycle=[LifecycleRule(transitions=[Transition(30, "GLACIER_IR")])],
                    ),
                },
            ),
        )

    plan = run("alone", REGION, program)
    bucket = plan.one("aws:s3/bucket:Bucket", "storage-checkpoints")
    assert bucket.inputs["bucket"] == "acme-alone-checkpoints"
    assert bucket.retain_on_delete is True
    lifecycle = plan.one(
        "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
        "storage-checkpoints-lifecycle",
    )
    assert lifecycle.inputs["rules"][0]["transitions"] == [
        {"days": 30, "storageClass": "GLACIER_IR"}
    ]


def test_storage_refuses_buckets_without_a_logs_bucket() -> None:
    with pytest.raises(ValueError, match="logs"):
        built(
            lambda: Storage(
                "storage",
                StorageArgs(
                    bucket_name_prefix="acme",
                    region=REGION,
                    buckets={"models": Bucket(name="acme-models")},
                ),
            )
        )


def test_an_image_repository_alone_can_take_a_customer_managed_key() -> None:
    key = "arn:aws:kms:eu-west-1:123456789012:key/0123abcd-0123-4567-89ab-0123456789ab"

    def program() -> None:
        ImageRepository(
            "images",
            ImageRepositoryArgs(
                repository_name="team/trainer",
                release_tag_prefix="v",
                release_images_kept=3,
                kms_key_arn=key,
            ),
        )

    plan = run("alone", REGION, program)
    repository = plan.one("aws:ecr/repository:Repository", "images-repository")
    assert repository.inputs["encryptionConfigurations"] == [
        {"encryptionType": "KMS", "kmsKey": key}
    ]
    lifecycle = plan.one("aws:ecr/lifecyclePolicy:LifecyclePolicy", "images-lifecycle")
    assert '"tagPrefixList": ["v"]' in lifecycle.inputs["policy"]


@dataclass(frozen=True)
class Model:
    """Any object with the attributes a served model has will do."""

    name: str = "tiny"
    revision: str = "tiny/1"
    node_pool: str = "l4"
    gpus_per_replica: int = 1
    min_replicas: int = 0
    max_replicas: int = 1
    max_model_len: int = 4096
    quantization: str = "none"
    target_waiting_requests: int = 2
    max_queued_requests: int = 4
    admission: Any = field(default_factory=lambda: Admission())
    routing: str = "round-robin"
    nodes_per_replica: int = 1
    live_canary: Any = None


@dataclass(frozen=True)
class Admission:
    retry_after_seconds: int = 2
    retries: int = 1


@dataclass(frozen=True)
class Engine:
    """Any object with the resolved engine settings will do."""

    tensor_parallel_size: int = 1
    max_model_len: int = 4096
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 2048
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    kv_cache_dtype: str = "auto"
    speculative: Any = None
    lora_adapters: Any = field(default_factory=dict)
    max_loras: int = 0
    max_lora_rank: int = 0
    pipeline_parallel_size: int = 1
    otlp_traces_endpoint: str | None = None


def test_serving_alone_takes_any_object_shaped_like_a_served_model() -> None:
    def program() -> None:
        aws_provider = aws.Provider("aws", region=REGION)
        k8s_provider = k8s.Provider("k8s", kubeconfig="{}")
        Serving(
            "serving",
            ServingArgs(
                models=[Model()],
                engines={"tiny": Engine()},
                hostname="llm.example.com",
                certificate_arn=(
                    "arn:aws:acm:eu-west-1:123456789012:certificate/"
                    "0123abcd-0123-4567-89ab-0123456789ab"
                ),
                clients=["app"],
                rate_limit_per_key=100,
                namespace="serving",
                cluster_name="c",
                region=REGION,
                vpc_cidr="10.0.0.0/16",
                pools={"l4": "g6e.12xlarge"},
            ),
            pulumi.ResourceOptions(providers=[aws_provider, k8s_provider]),
        )

    resources = built(program)
    [deployment] = of_type(resources, "kubernetes:apps/v1:Deployment")
    assert deployment.inputs["metadata"]["name"] == "tiny"
    [acl] = of_type(resources, "aws:wafv2/webAcl:WebAcl")
    limits = [
        r["statement"]["rateBasedStatement"]["limit"]
        for r in acl.inputs["rules"]
        if "rateBasedStatement" in r["statement"]
    ]
    assert limits == [100, 6000]
