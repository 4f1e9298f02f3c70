"""NodeAutoscaler: the Cluster Autoscaler that sizes the elastic GPU pools, and the
ProvisioningRequest API through which Kueue asks it for a whole gang's nodes.

Owns (in `kube-system`, on the system pool):

- **The ProvisioningRequest CRD** (`autoscaling.x-k8s.io/v1`), from the autoscaler's
  release tag. Neither chart installs it. Kueue looks for the API once, when its
  controller starts, and runs no provisioning admission check without it, so the Kueue
  release waits for `provisioning_api`.
- **The cluster-autoscaler chart** (`addon_charts.cluster-autoscaler`) with the image
  `node_autoscaler.image` (1.35.2: the ProvisioningRequest fixes, see the catalog).
  Discovery needs three tags: EKS's `k8s.io/cluster-autoscaler/enabled` and
  `k8s.io/cluster-autoscaler/<cluster>`, which EKS puts on every managed node group's Auto
  Scaling group (the system pool and fixed fabrics too), and `llm-platform/elastic=true`,
  which only elastic pools carry (`components.gpu_node_pool`). Fixed pools are invisible
  to it. The flags are `AUTOSCALER_FLAGS`, each with its reason.
- **Its IAM role through EKS Pod Identity**: describe calls on `*` (they take no resource),
  and `SetDesiredCapacity` / `TerminateInstanceInAutoScalingGroup` only on Auto Scaling groups
  tagged both `k8s.io/cluster-autoscaler/<cluster>: owned` and `llm-platform/elastic: true`.
  So even a wrong discovery flag cannot resize another cluster's groups, the system pool or a
  fixed fabric. The policy follows upstream's recommended "full features" policy at the
  pinned tag (cluster-autoscaler/cloudprovider/aws/README.md), with the tag conditions that
  README recommends adding. `eks:DescribeNodegroup` lets it read a managed node group's
  labels and taints while the group has no nodes.

The chart is given the region explicitly: nodes keep the IMDS hop limit at 1, so the pod
cannot read it from instance metadata. The component expects the AWS and Kubernetes
providers through `opts.providers`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

import pulumi
import pulumi_kubernetes as k8s

from components.helm import pinned_release
from components.iam import allow, pod_identity_role, policy_document
from components.managed_nodes import CA_ENABLED_TAG, ELASTIC_TAG, ca_cluster_tag
from spec.catalog import catalog
from spec.labels import POOL_LABEL

CHART: Final = "cluster-autoscaler"
NAMESPACE: Final = "kube-system"
SERVICE_ACCOUNT: Final = "cluster-autoscaler"
SYSTEM_POOL: Final = {POOL_LABEL: "system"}
"""The label components/cluster.py gives the system pool's nodes."""

AUTOSCALER_FLAGS: Final[dict[str, str | bool]] = {
    # Kueue's flavor puts every job on exactly one pool (the pool label), and the model
    # servers name theirs, so only a pod that several pools fit ever leaves a choice:
    # least-waste then takes the pool it fills best (no 8-GPU p5 for a 1-GPU pod a g6e
    # holds). The priority expander would need a list of patterns over the Auto Scaling
    # group names EKS generates, with nothing to rank.
    "expander": "least-waste",
    # EFA pools sit in one AZ and one placement group: spreading a gang over "similar"
    # groups would split it across the fabric. Each pool scales on its own.
    "balance-similar-node-groups": False,
    # Scale-down never evicts a training pod; each of these alone blocks removing a node
    # (simulator/drainability/rules at the pinned tag), so only a node left without such
    # pods goes:
    # - training pods carry cluster-autoscaler.kubernetes.io/safe-to-evict: "false" (the
    #   job builder), the not-safe-to-evict rule;
    # - their owner is a PyTorchJob, not a ReplicaSet/Job/StatefulSet: a custom controller,
    #   which this flag makes a reason never to delete the node;
    "skip-nodes-with-custom-controller-pods": True,
    # - a pod with a disk-backed emptyDir or a hostPath (a model server's cache; the
    #   memory-backed /dev/shm does not count) is not moved to pack nodes tighter: its
    #   node goes once KEDA has scaled the replica away;
    "skip-nodes-with-local-storage": True,
    # - nor is a kube-system pod that is not a DaemonSet's.
    "skip-nodes-with-system-pods": True,
    # A GPU node idles this long before it goes: an elastic job restarting from its
    # checkpoint, or the next job of the queue, lands within it; a new p5 takes ten
    # minutes or more to join, and the capacity may not come back at all.
    "scale-down-unneeded-time": "20m",
    # GPU nodes boot, assemble the NVMe RAID and reserve huge pages before the kubelet
    # registers; past the 15-minute default CA would give up on them and back the pool off.
    "max-node-provision-time": "25m",
    # Kueue's provisioning admission check: a gang's nodes are asked for in one request
    # (best-effort-atomic-scale-up) before the job is admitted.
    "enable-provisioning-requests": True,
    # ProvisioningRequest is a CRD, which the API server cannot take as protobuf (the
    # default); the FAQ's setup for ProvisioningRequests at the pinned tag sets this.
    "kube-api-content-type": "application/json",
    "cordon-node-before-terminating": True,
}
"""The autoscaler's command-line flags (the chart's `extraArgs`, rendered `--key=value`)."""


def discovery_tags(cluster_name: str) -> list[str]:
    """The tags an Auto Scaling group needs to be autoscaled (all of them): EKS's two, which
    every managed node group's group carries, and the elastic tag only elastic pools carry."""
    return [CA_ENABLED_TAG, ca_cluster_tag(cluster_name), f"{ELASTIC_TAG}=true"]


def autoscaler_policy(cluster_name: str) -> dict[str, Any]:
    """The autoscaler's identity policy: read anything, resize only this cluster's elastic
    groups (upstream README, "Full Cluster Autoscaler Features Policy", with tag conditions)."""
    describe = allow(
        "Describe",
        [
            "autoscaling:DescribeAutoScalingGroups",
            "autoscaling:DescribeAutoScalingInstances",
            "autoscaling:DescribeLaunchConfigurations",
            "autoscaling:DescribeScalingActivities",
            "ec2:DescribeImages",
            "ec2:DescribeInstanceTypes",
            "ec2:DescribeLaunchTemplateVersions",
            "ec2:GetInstanceTypesFromInstanceRequirements",
            # Labels and taints of a managed node group that has no node yet.
            "eks:DescribeNodegroup",
        ],
        "*",
    )
    resize = {
        **allow(
            "ResizeElasticGroupsOfThisCluster",
            ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
            "*",
        ),
        "Condition": {
            "StringEquals": {
                f"aws:ResourceTag/{ca_cluster_tag(cluster_name)}": "owned",
                f"aws:ResourceTag/{ELASTIC_TAG}": "true",
            }
        },
    }
    document: dict[str, Any] = json.loads(policy_document(describe, resize))
    return document


def autoscaler_values(cluster_name: str, region: str, service_account: str) -> dict[str, Any]:
    pins = catalog().node_autoscaler
    return {
        "cloudProvider": "aws",
        "awsRegion": region,
        "autoDiscovery": {"clusterName": cluster_name, "tags": discovery_tags(cluster_name)},
        "image": {"repository": pins.image_repository, "tag": pins.image_tag},
        "fullnameOverride": CHART,
        "rbac": {"serviceAccount": {"create": True, "name": service_account}},
        # One active autoscaler (it elects a leader); it restarts in seconds on the system pool.
        "replicaCount": 1,
        "nodeSelector": dict(SYSTEM_POOL),
        "extraArgs": dict(AUTOSCALER_FLAGS),
        "resources": {
            "requests": {"cpu": "100m", "memory": "600Mi"},
            "limits": {"memory": "1Gi"},
        },
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "runAsGroup": 65534,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containerSecurityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


@dataclass(frozen=True, kw_only=True)
class NodeAutoscalerArgs:
    cluster_name: pulumi.Input[str]
    """Scopes discovery, the IAM condition and the Pod Identity association."""
    region: str
    system_nodes: list[pulumi.Resource] = field(default_factory=list)
    """What the autoscaler's Deployment needs first (the system node group): helm waits for
    its pod."""


class NodeAutoscaler(pulumi.ComponentResource):
    provisioning_api: list[pulumi.Resource]
    """What serves `autoscaling.x-k8s.io/v1` ProvisioningRequest (the CRD): Kueue must start
    after it."""
    role_arn: pulumi.Output[str]

    def __init__(
        self, name: str, args: NodeAutoscalerArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("llmp:addons:NodeAutoscaler", name, None, opts)
        pins = catalog().node_autoscaler
        crd = k8s.yaml.v2.ConfigFile(
            f"{name}-provisioning-request-crd",
            file=pins.provisioning_request_crd.url,
            opts=pulumi.ResourceOptions(parent=self),
        )

        role, association = pod_identity_role(
            f"{name}-iam",
            parent=self,
            description="Cluster Autoscaler through EKS Pod Identity: resizes elastic pools",
            policy=pulumi.Output.from_input(args.cluster_name).apply(
                lambda cluster: json.dumps(autoscaler_policy(cluster))
            ),
            cluster_name=args.cluster_name,
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
        )
        region = args.region
        # The service account comes from the association: Pod Identity injects credentials
        # only into pods created after their association exists.
        values = pulumi.Output.all(args.cluster_name, association.service_account).apply(
            lambda v: autoscaler_values(v[0], region, v[1])
        )
        pinned_release(
            f"{name}-{CHART}",
            CHART,
            catalog().addon_charts[CHART],
            namespace=NAMESPACE,
            values=values,
            # With --enable-provisioning-requests it watches the API from its first loop.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[crd, *args.system_nodes]),
        )

        self.provisioning_api = [crd]
        self.role_arn = role.arn
        self.register_outputs({"role_arn": self.role_arn})
