"""Addons: the cluster add-ons the workloads need, each pinned in the catalog and switchable.

Owns (each behind a flag of the `addons` config section):

- **NVIDIA GPU operator** (`gpu-operator` namespace) with the driver and the
  container toolkit disabled: the EKS NVIDIA AMI (AL2023_x86_64_NVIDIA)
  already ships both. It runs the device plugin, GPU feature discovery and the
  DCGM exporter on the GPU nodes (tolerating the GPU taint). The exporter's
  ServiceMonitor stays off until a Prometheus operator provides the CRD. The
  exporter publishes the fields of `DCGM_METRICS` (a ConfigMap the chart creates
  from `dcgmExporter.config`): its default list lacks the XID, ECC and NVLink
  error counters the alerts and dashboards read.
- **EFA device plugin** (eks-charts `aws-efa-k8s-device-plugin`), only when a
  pool has EFA: on nodes labelled `llm-platform/efa: "true"`, tolerating the
  accelerator taints.
- **Kueue** and its platform objects (`workloads.kueue`): a ResourceFlavor per
  GPU pool, a ClusterQueue per tenant plus the `spare` one, all in one cohort.
  Kueue's integrations are set here (the chart's defaults leave PyTorchJob out).
- **Kubeflow training-operator** v1.9 (from its kustomize manifests at a
  pinned tag; there is no v1 chart). Why this operator: the job builder emits
  `PyTorchJob` (`kubeflow.org/v1`) whose `elasticPolicy` (minReplicas,
  maxReplicas, maxRestarts, rdzvBackend c10d) makes the operator run elastic
  `torchrun`: a job survives losing a node and resumes from its checkpoint at
  another world size. Kueue admits PyTorchJobs natively
  (`kubeflow.org/pytorchjob` integration), so quotas and preemption apply to
  whole jobs (gang admission) rather than to single pods. JobSet would need
  its own elastic launcher, and the Trainer v2 `TrainJob` API is not what the
  job builder targets.
- **AWS Load Balancer Controller** (eks-charts) with its own IAM role through
  EKS Pod Identity; the policy is upstream's `iam_policy.json` at the pinned
  version, kept in `components/policies/`. `clusterName`, `region` and `vpcId`
  are set explicitly: nodes keep the IMDS hop limit at 1, so the controller's
  pod cannot discover them.
- **metrics-server**.

Ordering: Helm releases whose controller is a Deployment (operator, Kueue,
LBC, metrics-server, training-operator) wait for the system pool, since helm
waits for their pods; the EFA plugin is a DaemonSet alone and needs no node to
install. Kueue's custom resources wait for the Kueue release, which brings
their CRDs. The component expects the AWS and Kubernetes providers through
`opts.providers`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.helm import pinned_release
from components.iam import pod_identity_role
from spec.catalog import catalog
from spec.labels import EFA_LABEL
from workloads import kueue
from workloads.kueue import PoolCapacity, TenantShare

GPU_OPERATOR = "gpu-operator"
EFA_PLUGIN = "aws-efa-k8s-device-plugin"
KUEUE = "kueue"
TRAINING_OPERATOR = "training-operator"
LBC = "aws-load-balancer-controller"
METRICS_SERVER = "metrics-server"

LBC_SERVICE_ACCOUNT = "aws-load-balancer-controller"
LBC_POLICY_FILE = Path(__file__).with_name("policies") / "aws-load-balancer-controller.json"

KUEUE_FRAMEWORKS = [
    "batch/job",
    "kubeflow.org/pytorchjob",
    "jobset.x-k8s.io/jobset",
    "leaderworkerset.x-k8s.io/leaderworkerset",
]
"""Kueue integrations: the chart's default list lacks PyTorchJob, and its MPIJob integration
expects MPI operator v2 CRDs that the training-operator v1 does not install."""


DCGM_METRICS_CONFIG = "llmp-dcgm-metrics"
"""The ConfigMap (key `dcgm-metrics.csv`) the GPU operator chart creates for the exporter."""
DCGM_METRICS: list[tuple[str, str, str]] = [
    # utilisation, clocks, temperature, power
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    # frame buffer
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    # errors
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    # dcgm-exporter's own XID counter (off unless listed): the XID alerts read it.
    (
        "DCGM_EXP_XID_ERRORS_COUNT",
        "gauge",
        "Count of XID Errors within user-specified time window (see xid-count-window-size param).",
    ),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total volatile single-bit ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total volatile double-bit ECC errors."),
    (
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "counter",
        "Total NVLink replay errors.",
    ),
    (
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "counter",
        "Total NVLink recovery errors.",
    ),
    (
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "Total NVLink flow-control CRC errors.",
    ),
    (
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "counter",
        "Total NVLink data CRC errors.",
    ),
    # bandwidth
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total NVLink bandwidth counters."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "PCIe bytes transmitted per second."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "PCIe bytes received per second."),
    # profiling (DCP)
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "Ratio of cycles an SM has a warp assigned."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the memory interface is active."),
]
"""What the DCGM exporter publishes: (DCGM field, Prometheus type, help), its CSV format."""


def dcgm_metrics_csv() -> str:
    lines = ["# DCGM field, Prometheus metric type, help message"]
    lines += [f"{name}, {kind}, {text}" for name, kind, text in DCGM_METRICS]
    return "\n".join(lines) + "\n"


def gpu_operator_values() -> dict[str, Any]:
    nvidia = catalog().accelerator_kinds["nvidia"].taint_key
    tolerations = [{"key": nvidia, "operator": "Exists", "effect": "NoSchedule"}]
    return {
        # The EKS NVIDIA AMI has the driver and the container toolkit.
        "driver": {"enabled": False},
        "toolkit": {"enabled": False},
        "devicePlugin": {"enabled": True},
        "dcgmExporter": {
            "enabled": True,
            "serviceMonitor": {"enabled": False},
            # chart v26.7.0: with create and data, it renders the ConfigMap (key
            # dcgm-metrics.csv) and points the ClusterPolicy's dcgmExporter.config at it
            "config": {"name": DCGM_METRICS_CONFIG, "create": True, "data": dcgm_metrics_csv()},
        },
        "daemonsets": {"tolerations": tolerations},
        "node-feature-discovery": {"worker": {"tolerations": tolerations}},
    }


def efa_plugin_values() -> dict[str, Any]:
    return {
        "nodeSelector": {EFA_LABEL: "true"},
        "tolerations": catalog().accelerator_tolerations(),
    }


def kueue_manager_config() -> dict[str, Any]:
    """Kueue's Configuration (the chart's `controllerManagerConfigYaml`), with our frameworks."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 10,
                "LocalQueue.kueue.x-k8s.io": 5,
                "ClusterQueue.kueue.x-k8s.io": 5,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 300, "burst": 500},
        # Jobs stop holding quota if their pods are not all running in time (gang admission).
        "waitForPodsReady": {"timeout": "10m", "blockAdmission": False},
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
        # Requested by training and fabric pods but no queue's to share (why: the
        # constant's docstring); a request neither covered nor excluded is never admitted.
        "resources": {"excludeResourcePrefixes": list(kueue.EXCLUDED_RESOURCE_PREFIXES)},
    }


def kueue_values() -> dict[str, Any]:
    return {
        "managerConfig": {
            "controllerManagerConfigYaml": yaml.safe_dump(kueue_manager_config(), sort_keys=False)
        }
    }


def lbc_values(cluster_name: str, region: str, vpc_id: str, service_account: str) -> dict[str, Any]:
    return {
        "clusterName": cluster_name,
        "region": region,
        "vpcId": vpc_id,
        "serviceAccount": {"create": True, "name": service_account},
        "replicaCount": 2,
    }


def lbc_policy() -> dict[str, Any]:
    """Upstream's IAM policy of the controller at the pinned version."""
    document: dict[str, Any] = json.loads(LBC_POLICY_FILE.read_text())
    return document


@dataclass(frozen=True, kw_only=True)
class AddonsArgs:
    gpu_operator: bool = True
    """NVIDIA GPU operator (device plugin, GPU feature discovery, DCGM exporter)."""
    efa_device_plugin: bool = False
    """The EFA device plugin: on where some pool has EFA."""
    kueue: bool = True
    """Kueue and the platform's flavors and queues."""
    training_operator: bool = True
    load_balancer_controller: bool = True
    metrics_server: bool = True
    cluster_name: pulumi.Input[str]
    region: str
    vpc_id: pulumi.Input[str]
    pools: list[PoolCapacity]
    """The GPU pools at max size (Kueue flavors and the cohort's capacity)."""
    tenants: list[TenantShare] = field(default_factory=list)
    system_nodes: list[pulumi.Resource] = field(default_factory=list)
    """What a controller Deployment needs first (the system node group)."""


class Addons(pulumi.ComponentResource):
    releases: dict[str, k8s.helm.v3.Release]
    kueue_ready: list[pulumi.Resource]
    """What a Kueue object must wait for (the Kueue release and its CRDs); empty when off."""
    lbc_role_arn: pulumi.Output[str] | None

    def __init__(self, name: str, args: AddonsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmp:addons:Addons", name, None, opts)
        on_system = pulumi.ResourceOptions(parent=self, depends_on=args.system_nodes)
        self.releases = {}

        def release(
            key: str,
            namespace: str,
            values: pulumi.Input[dict[str, Any]],
            opts: pulumi.ResourceOptions,
        ) -> k8s.helm.v3.Release:
            created = pinned_release(
                f"{name}-{key}",
                key,
                catalog().addon_charts[key],
                namespace=namespace,
                create_namespace=namespace != "kube-system",
                values=values,
                opts=opts,
            )
            self.releases[key] = created
            return created

        if args.gpu_operator:
            release(GPU_OPERATOR, "gpu-operator", gpu_operator_values(), on_system)
        if args.efa_device_plugin:
            # A DaemonSet alone: installed (and ready) with no node to run on.
            release(
                EFA_PLUGIN, "kube-system", efa_plugin_values(), pulumi.ResourceOptions(parent=self)
            )
        if args.metrics_server:
            release(METRICS_SERVER, "kube-system", {"replicas": 2}, on_system)

        self.kueue_ready = []
        if args.kueue:
            kueue_release = release(KUEUE, "kueue-system", kueue_values(), on_system)
            self.kueue_ready = [kueue_release]
            after_crds = pulumi.ResourceOptions(parent=self, depends_on=self.kueue_ready)
            flavors, queues = kueue.platform_queues(args.pools, args.tenants)
            objects: list[kueue.ResourceFlavor | kueue.ClusterQueue] = [*flavors, *queues]
            for obj in objects:
                manifest = obj.manifest()
                k8s.apiextensions.CustomResource(
                    f"{name}-{obj.kind.lower()}-{obj.metadata.name}",
                    api_version=manifest["apiVersion"],
                    kind=manifest["kind"],
                    metadata=manifest["metadata"],
                    spec=manifest["spec"],
                    opts=after_crds,
                )

        if args.training_operator:
            pin = catalog().addon_manifests[TRAINING_OPERATOR]
            k8s.kustomize.v2.Directory(
                f"{name}-{TRAINING_OPERATOR}",
                directory=pin.directory,
                opts=on_system,
            )

        self.lbc_role_arn = None
        if args.load_balancer_controller:
            role, association = pod_identity_role(
                f"{name}-lbc",
                parent=self,
                description="AWS Load Balancer Controller through EKS Pod Identity",
                policy=json.dumps(lbc_policy()),
                cluster_name=args.cluster_name,
                namespace="kube-system",
                service_account=LBC_SERVICE_ACCOUNT,
            )
            region = args.region
            # The service account comes from the association: Pod Identity injects
            # credentials only into pods created after their association exists.
            values = pulumi.Output.all(
                args.cluster_name, args.vpc_id, association.service_account
            ).apply(lambda v: lbc_values(v[0], region, v[1], v[2]))
            release(LBC, "kube-system", values, on_system)
            self.lbc_role_arn = role.arn

        self.register_outputs(
            {"releases": sorted(self.releases), "lbc_role_arn": self.lbc_role_arn}
        )
