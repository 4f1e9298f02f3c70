"""Addons: the cluster add-ons the workloads need, each pinned in the catalog and switchable.

Owns (each behind a flag of the `addons` config section):

- **NVIDIA GPU operator** (`gpu-operator` namespace) with the driver and the
  container toolkit disabled: the EKS NVIDIA AMI (AL2023_x86_64_NVIDIA)
  already ships both. It runs the device plugin, GPU feature discovery, the
  standalone DCGM host engine (`dcgm.enabled`: the `nvidia-dcgm` Service on port
  5555, node-local, which NVSentinel reads) and the DCGM exporter on the GPU nodes
  (tolerating the GPU taint and the quarantine taint: a quarantined node keeps the
  telemetry its diagnosis needs). The exporter then reads the standalone host
  engine instead of starting its own, so a node runs as many host engines as
  before; it stays on without NVSentinel, so switching NVSentinel does not
  restart the GPU telemetry. The exporter's ServiceMonitor stays off until a
  Prometheus operator provides the CRD. The exporter publishes the fields of
  `DCGM_METRICS` (a ConfigMap the chart creates from `dcgmExporter.config`): its
  default list lacks the XID, ECC and NVLink error counters the alerts and
  dashboards read.
- **NVSentinel** (`nvsentinel` namespace), only where NVIDIA pools exist: what
  happens when a GPU fails.

  - *Detect.* The GPU health monitor (a DaemonSet on the GPU nodes) watches DCGM's
    health systems through the GPU operator's host engine; the syslog health monitor
    reads XIDs, SXIDs and "fallen off the bus" from the kernel log. The EKS node
    monitoring agent (components/cluster.py) watches the same hardware for EKS.
  - *Isolate.* Fault-quarantine's rules (`quarantine_rule_sets`) are derived from the
    catalog, not kept beside it: one per `gpu_xids` class marked `quarantine`
    (node replacement, GPU reset) matching its codes, one for XIDs the catalog does not
    classify that NVSentinel itself calls fatal (the application and informational
    classes never quarantine), GPU-fallen-off and NVSwitch SXIDs, and fatal incidents of
    the DCGM health watches that catch, while jobs run, what the diagnostic levels of
    `dcgm_diagnostic` test (`DCGM_DIAG_WATCHES`). A match cordons the node and taints it
    `llm-platform/quarantined=gpu-fault:NoSchedule`. NoSchedule, not NoExecute:
    NoExecute evicts at once, past PodDisruptionBudgets, and would also evict the GPU
    operator's DaemonSets (they tolerate only the GPU taint), taking the node's telemetry
    away when it is needed. The node drainer then evicts the pods (Eviction API, so PDBs
    hold) with a grace period of `TRAINER_GRACE_S`, the 300 s a PyTorchJob rank takes to
    write its checkpoint shard; system namespaces and DaemonSets are left alone. The
    circuit breaker caps it: once `nvsentinel_max_quarantined_percent` of the cluster's
    nodes were cordoned within `nvsentinel_quarantine_window_minutes`, quarantining stops
    until a person resets it (a fleet-wide "fault" is more often a bad rule, driver or
    monitor than bad GPUs). `llmp stragglers --quarantine` isolates slow nodes the same
    way (same taint key, value `slow`).
  - *Replace.* EKS node auto-repair replaces (or reboots) a node once the node monitoring
    agent has set `AcceleratedHardwareReady=False` for 10 minutes; NVSentinel's own
    remediation (fault-remediation, janitor: reboot or terminate) is off, so the two never
    act on the same node at once. The work divides: NVSentinel quarantines and drains
    within seconds (the job restarts from its checkpoint elsewhere), EKS repairs. A fault
    only NVSentinel sees (a DCGM watch incident the agent does not call fatal) leaves the
    node cordoned, tainted and empty for a person to replace (terminate the instance; the
    node group starts another). A rebooted node that reports healthy is released by
    fault-quarantine.
  - *Datastore.* Health events live in the chart's MongoDB replica set (3 pods of 1 CPU,
    1.5 GiB on the system pool, each with an 8 GiB gp3 volume of the Monitoring
    component's StorageClass: 24 GiB, $1.92 a month at the catalog's gp3 price, which
    the cost model does not list since it prices only the monitoring releases' volumes),
    with TLS certificates from **cert-manager** (jetstack chart, CRDs included,
    `cert-manager` namespace), installed with it. The Deployments run on the system pool;
    the monitors tolerate every taint, so they keep watching a quarantined node and see
    it recover. NVSentinel's PodMonitor stays off: its CRD comes with Monitoring, which
    is built after the add-ons (and so is its StorageClass: the volumes bind once it
    exists, while helm waits).
- **EFA device plugin** (eks-charts `aws-efa-k8s-device-plugin`), only when a
  pool has EFA: on nodes labelled `llm-platform/efa: "true"`, tolerating the
  accelerator taints.
- **Kueue** and its platform objects (`manifests.kueue`): a ResourceFlavor per
  GPU pool, a ClusterQueue per tenant plus the `spare` one, all in one cohort.
  Kueue's integrations are set here (the chart's defaults leave PyTorchJob out).
  Where some pool is elastic, the ProvisioningRequest AdmissionCheck and its
  ProvisioningRequestConfig too; Kueue then starts after `kueue_after` (the
  ProvisioningRequest CRD, components/node_autoscaler.py): it looks for that API
  only when it starts, and runs no provisioning check without it.
- **Kubeflow Trainer v2** (`kubeflow-trainer` chart, `kubeflow-system` namespace) and
  **JobSet** (`jobset` chart, `jobset-system`, installed beside it), which the Trainer runs
  each TrainJob as; the
  trainer chart's own JobSet and built-in runtimes are off. The program renders its own
  ClusterTrainingRuntimes (manifests/jobs/trainjob.py: DeepSpeed, torch and the lifecycle
  steps, one per training priority class, torchrun launched with the job's elastic range) once the
  Trainer's CRDs exist. Kueue admits TrainJobs whole (`trainer.kubeflow.org/trainjob`
  integration, gang admission of the JobSet's pods); it need not start after the Trainer, as
  it sets a framework's controller up once that API is served. Trainer 2.2.x, not 2.3: Kueue
  0.19 is built against 2.2, and Kueue 0.20's TrainJob integration supports 2.3 only (the
  catalog entry says more).
- **AWS Load Balancer Controller** (eks-charts) with its own IAM role through
  EKS Pod Identity; the policy is upstream's `iam_policy.json` at the pinned
  version, kept in `components/policies/`. `clusterName`, `region` and `vpcId`
  are set explicitly: nodes keep the IMDS hop limit at 1, so the controller's
  pod cannot discover them.
- **KubeRay operator** (`kuberay-operator` chart, `kuberay-system` namespace, CRDs from the
  chart): the RayJobs of `llmp job` data kinds (manifests/jobs/rayjob.py). Its own requests
  equal its limits, on the system pool; its control-plane metrics on (the chart's
  ServiceMonitor off: that CRD comes with Monitoring, built after the add-ons; the Ray pods'
  own metrics are Monitoring's `ray` PodMonitor). No batch scheduler: Kueue admits a RayJob
  whole (head, workers and the submitter as pod sets of one Workload), so a second gang
  scheduler (Volcano, YuniKorn) would only race it. Kueue's `ray.io/rayjob` integration
  needs nothing of the operator's config: it suspends and unsuspends the RayJob and builds
  its pod sets from `rayClusterSpec`.
- **metrics-server**.

Ordering: Helm releases whose controller is a Deployment (operator, Kueue,
LBC, metrics-server, JobSet, the Trainer, KubeRay, cert-manager, NVSentinel) wait for the
system pool, since helm waits for their pods; NVSentinel also waits for
cert-manager (its certificates) and the GPU operator (its DCGM); the EFA plugin
is a DaemonSet alone and needs no node to install. Kueue's custom resources
wait for the Kueue release, which brings their CRDs. The component expects the
AWS and Kubernetes providers through `opts.providers`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.helm import pinned_release
from components.iam import pod_identity_role
from components.tenancy import KUBERAY_NAMESPACE, TENANT_LABEL
from manifests import kueue
from manifests.jobs import trainjob
from manifests.kueue import PoolCapacity, TenantShare
from monitoring.charts import STORAGE_CLASS
from spec.catalog import catalog
from spec.labels import EFA_LABEL, POOL_LABEL, QUARANTINE_TAINT

GPU_OPERATOR = "gpu-operator"
EFA_PLUGIN = "aws-efa-k8s-device-plugin"
KUEUE = "kueue"
JOBSET = "jobset"
TRAINER = "kubeflow-trainer"
TRAINER_NAMESPACE = "kubeflow-system"
JOBSET_NAMESPACE = "jobset-system"
LBC = "aws-load-balancer-controller"
METRICS_SERVER = "metrics-server"
NVSENTINEL = "nvsentinel"
CERT_MANAGER = "cert-manager"
KUBERAY = "kuberay-operator"
GPU_OPERATOR_NAMESPACE = "gpu-operator"
SYSTEM_POOL = "system"

LBC_SERVICE_ACCOUNT = "aws-load-balancer-controller"
LBC_POLICY_FILE = Path(__file__).with_name("policies") / "aws-load-balancer-controller.json"

KUEUE_FRAMEWORKS = [
    "batch/job",
    "trainer.kubeflow.org/trainjob",
    "jobset.x-k8s.io/jobset",
    "leaderworkerset.x-k8s.io/leaderworkerset",
    "ray.io/rayjob",
]
"""Kueue integrations. `trainer.kubeflow.org/trainjob`: the training jobs (Kubeflow Trainer v2);
`kubeflow.org/pytorchjob` is gone with Trainer v1 (Kueue 0.19 deprecates it), and the chart's
MPIJob integration would expect an MPI operator the platform does not install.
`jobset.x-k8s.io/jobset`: a TrainJob's JobSet is its child: Kueue admits the TrainJob, and a job
whose controller owner it can manage is no workload of its own (v0.19.2 jobframework:
IsOwnerManagedByKueueForObject, FindAncestorJobManagedByKueue; so are the JobSet's Jobs).

`ray.io/rayjob`: the data jobs (KubeRay). Not `ray.io/raycluster`: at v0.19.2 the RayJob
integration builds its pod sets from the RayJob's own `rayClusterSpec` and watches the
RayCluster it creates only as its child (pkg/controller/jobs/rayjob), and the platform submits
no standalone RayCluster; enabling it would add a webhook on RayClusters for nothing."""


DCGM_METRICS_CONFIG = "llmp-dcgm-metrics"
"""The ConfigMap (key `dcgm-metrics.csv`) the GPU operator chart creates for the exporter."""
DCGM_METRICS: list[tuple[str, str, str]] = [
    # utilisation, clocks, temperature, power
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    # why the clocks are down (NVML's clocks-event reasons, a bitmask): the thermal and
    # power evidence `llmp stragglers` shows beside a node slow in compute
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Current clock event reasons (bitmask)."),
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


MIG_CONFIG = "llmp-mig-parted-config"
"""The ConfigMap (key `config.yaml`) of the MIG manager's configs, created by the chart."""
MIG_DISABLED = "all-disabled"


@dataclass(frozen=True, kw_only=True)
class MigLayout:
    """One MIG pool's partitions, as a named mig-parted config its nodes select by label."""

    config: str
    """The config's name: the value of the pool's `nvidia.com/mig.config` node label."""
    device_filter: str
    """The PCI id of the pool's GPU model: the config applies to those GPUs only."""
    per_gpu: dict[str, int]
    """Profile -> instances on every GPU."""


def mig_config_name(pool: str, team: str = "") -> str:
    return f"llmp-{team}-{pool}" if team else f"llmp-{pool}"


def mig_parted_config(layouts: list[MigLayout]) -> str:
    """mig-parted's config file (`version: v1`, `mig-configs`): `all-disabled` (what the
    operator labels a MIG-capable node that names no config) and one config per pool."""
    configs: dict[str, Any] = {MIG_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    for layout in layouts:
        configs[layout.config] = [
            {
                "device-filter": [layout.device_filter],
                "devices": "all",
                "mig-enabled": True,
                "mig-devices": dict(layout.per_gpu),
            }
        ]
    return yaml.safe_dump({"version": "v1", "mig-configs": configs}, sort_keys=False)


def gpu_operator_values(
    mig_strategy: str | None = None, mig_layouts: list[MigLayout] | None = None
) -> dict[str, Any]:
    """The chart's values. Where a pool has MIG (`mig_layouts`), the MIG manager (chart
    v26.7.0: `migManager.enabled`, on by default) is given the platform's configs
    (`migManager.config`: name, create, data, and `default: all-disabled`, the chart's), and
    the device plugin the strategy (`mig.strategy`, cluster-wide)."""
    nvidia = catalog().accelerator_kinds["nvidia"].taint_key
    tolerations = [
        {"key": nvidia, "operator": "Exists", "effect": "NoSchedule"},
        # A quarantined node keeps its device plugin, DCGM and exporter: what diagnosis reads.
        {"key": QUARANTINE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
    ]
    values: dict[str, Any] = {
        # The EKS NVIDIA AMI has the driver and the container toolkit.
        "driver": {"enabled": False},
        "toolkit": {"enabled": False},
        "devicePlugin": {"enabled": True},
        # chart v26.7.0: the standalone host engine (DaemonSet and Service nvidia-dcgm, port
        # 5555) that NVSentinel connects to; the exporter is pointed at it by the operator.
        "dcgm": {"enabled": True},
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
    if mig_layouts:
        values["mig"] = {"strategy": mig_strategy or "mixed"}
        values["migManager"] = {
            "enabled": True,
            "config": {
                "name": MIG_CONFIG,
                "create": True,
                "default": MIG_DISABLED,
                "data": {"config.yaml": mig_parted_config(mig_layouts)},
            },
        }
    return values


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
        # The timeout runs from admission, and on an elastic pool a job is admitted once the
        # autoscaler has *asked* for its nodes (ProvisioningRequest Provisioned): 30 minutes
        # cover the autoscaler's 25-minute max-node-provision-time and the image pull, so a
        # scale-up from zero is not evicted before its nodes exist. A running job that loses
        # a pod still gets the 10 minutes it had to recover.
        "waitForPodsReady": {
            "timeout": "30m",
            "recoveryTimeout": "10m",
            "blockAdmission": False,
        },
        # Every Job, PyTorchJob, RayJob and bare pod in a tenant namespace is Kueue's, queue
        # name or not: none starts before its quota admits it (the namespaces' LocalQueue is
        # `default`, which Kueue gives any workload that names none).
        "manageJobsWithoutQueueName": True,
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
        # The LeaderWorkerSet integration turns on Kueue's pod webhook (v0.19.2's
        # ImplicitlyEnabledFrameworkNames: pod): it acts in tenant namespaces only, so no
        # system pod (CNI, CSI, the controllers) ever waits on a webhook or a queue.
        "managedJobsNamespaceSelector": {
            "matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]
        },
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


def jobset_values() -> dict[str, Any]:
    """JobSet's values (chart 0.11.0; the keys are read in the catalog entry's source): the
    controller on the system pool."""
    return {"controller": {"nodeSelector": {POOL_LABEL: SYSTEM_POOL}}}


def trainer_values() -> dict[str, Any]:
    """Kubeflow Trainer's values (chart 2.2.1; the keys are read in the catalog entry's
    source). JobSet is the `jobset` release, the runtimes are the platform's own (the
    built-in ones run as root from public images), and no data cache (it would install an
    LWS 0.8 beside the platform's)."""
    return {
        "jobset": {"install": False},
        "runtimes": {"defaultEnabled": False},
        "dataCache": {"enabled": False},
        "manager": {"nodeSelector": {POOL_LABEL: SYSTEM_POOL}},
    }


def kuberay_values() -> dict[str, Any]:
    """The KubeRay operator's values (chart 1.7.0; the keys are read in the catalog entry's
    source)."""
    resources = {"cpu": "100m", "memory": "512Mi"}
    return {
        "nodeSelector": {POOL_LABEL: SYSTEM_POOL},
        # The chart sets limits only (100m, 512Mi: "about 500 Ray pods"); requests equal
        # limits so the scheduler counts what it may use.
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "metrics": {"enabled": True, "serviceMonitor": {"enabled": False}},
        # Kueue is the gang admitter; a batch scheduler here would make a second decision.
        "batchScheduler": {"enabled": False, "name": ""},
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


DCGM_SERVICE = "nvidia-dcgm"
"""The GPU operator's standalone host engine Service (`dcgm.enabled`), node-local traffic."""
DCGM_PORT = 5555
TRAINER_GRACE_S = 300
"""The termination grace of a training pod (manifests/jobs/trainjob.py: GRACE_S): a rank's time to
write its checkpoint shard on SIGTERM. The node drainer's evictions grant it."""
GPU_FAULT = "gpu-fault"
"""The quarantine taint's value when NVSentinel set it (`llmp stragglers` sets `slow`)."""
SYSTEM_NAMESPACES = (
    NVSENTINEL,
    CERT_MANAGER,
    "kube-system",
    GPU_OPERATOR_NAMESPACE,
    "kueue-system",
    TRAINER_NAMESPACE,
    JOBSET_NAMESPACE,
    KUBERAY_NAMESPACE,
    "monitoring",
)
"""Namespaces the node drainer leaves alone: the platform's own controllers and agents."""
DATASTORE_GIB = 8
"""Each MongoDB replica's volume (the chart's default, set here so the cost is stated)."""

DCGM_DIAG_WATCHES: dict[str, tuple[str, ...]] = {
    "software": ("GpuDriverWatch", "GpuInforomWatch"),
    "pcie": ("GpuPcieWatch",),
    "memory": ("GpuMemWatch",),
    "memory_bandwidth": ("GpuMemWatch",),
    "diagnostic": ("GpuSmWatch",),
    "targeted_stress": ("GpuSmWatch", "GpuThermalWatch"),
    "targeted_power": ("GpuPowerWatch",),
}
"""Each test of the catalog's `dcgm_diagnostic` levels (what `llmp accept` runs before a pool
takes jobs) and the DCGM health watches that report the same faults while jobs run: the
check names of NVSentinel's GPU health monitor (`Gpu<Watch>Watch`, docs/INTEGRATIONS.md at
v1.13.0). A fatal incident of one of them quarantines the node."""
FABRIC_WATCHES = ("GpuNvlinkWatch",)
"""NVLink, which the fabric acceptance test's nccl-tests cross inside a node."""

_MANAGED = (
    "!('k8saas.nvidia.com/ManagedByNVSentinel' in node.metadata.labels && "
    "node.metadata.labels['k8saas.nvidia.com/ManagedByNVSentinel'] == 'false')"
)
"""NVSentinel's own opt-out: a node labelled ManagedByNVSentinel=false is never quarantined."""


def _codes(codes: list[int]) -> str:
    return "[" + ", ".join(f"'{c}'" for c in codes) + "]"


def _rule_set(name: str, expression: str) -> dict[str, Any]:
    """One fault-quarantine rule set (chart v1.13.0 `fault-quarantine.ruleSets[]`): cordon and
    taint when the health event matches and the node is managed."""
    return {
        "enabled": True,
        "version": "1",
        "name": name,
        "match": {
            "all": [
                {"kind": "HealthEvent", "expression": expression},
                {"kind": "Node", "expression": _MANAGED},
            ]
        },
        "cordon": {"shouldCordon": True},
        "taint": {"key": QUARANTINE_TAINT, "value": GPU_FAULT, "effect": "NoSchedule"},
    }


def xid_rule_sets() -> list[dict[str, Any]]:
    """From the catalog's `gpu_xids`: a rule set per class marked `quarantine`, matching its
    codes whatever NVSentinel's own fatality says, and one for XIDs no class lists that
    NVSentinel calls fatal. A code of a class not marked (application, informational) is in
    neither, so it never takes a node out of service."""
    xids = catalog().gpu_xids
    if xids is None:
        raise ValueError("the catalog has no gpu_xids: the quarantine rules are derived from it")
    xid = "event.agent == 'syslog-health-monitor' && event.checkName == 'SysLogsXIDError'"
    rules = [
        _rule_set(
            f"XID {name}",
            f"{xid} && event.errorCode != null && "
            f"event.errorCode.exists(c, c in {_codes(xids.codes(name))})",
        )
        for name, cls in xids.classes.items()
        if cls.quarantine
    ]
    rules.append(
        _rule_set(
            "XID unclassified",
            f"{xid} && event.isFatal == true && event.errorCode != null && "
            f"!event.errorCode.exists(c, c in {_codes(xids.classified)})",
        )
    )
    return rules


def quarantine_rule_sets() -> list[dict[str, Any]]:
    """Every rule set NVSentinel's fault-quarantine runs (they replace the chart's defaults)."""
    watches = sorted({w for ws in DCGM_DIAG_WATCHES.values() for w in ws} | set(FABRIC_WATCHES))
    watch_list = "[" + ", ".join(f"'{w}'" for w in watches) + "]"
    syslog = "event.agent == 'syslog-health-monitor' && event.isFatal == true"
    return [
        *xid_rule_sets(),
        _rule_set(
            "GPU fallen off the bus", f"{syslog} && event.checkName == 'SysLogsGPUFallenOff'"
        ),
        _rule_set("NVSwitch SXID", f"{syslog} && event.checkName == 'SysLogsSXIDError'"),
        # Not GpuDcgmConnectivityFailure: a restarting host engine is no GPU fault.
        _rule_set(
            "DCGM health watches",
            "event.agent == 'gpu-health-monitor' && event.isFatal == true && "
            f"event.checkName in {watch_list}",
        ),
    ]


def nvsentinel_values(max_quarantined_percent: int, window_minutes: int) -> dict[str, Any]:
    """NVSentinel's values (chart v1.13.0; the keys are read in the catalog entry's source)."""
    system = {POOL_LABEL: SYSTEM_POOL}
    return {
        "global": {
            "dcgm": {
                "mode": "operator-service",
                "enabled": True,
                "service": {
                    "endpoint": f"{DCGM_SERVICE}.{GPU_OPERATOR_NAMESPACE}.svc",
                    "port": DCGM_PORT,
                },
            },
            # The DaemonSets (monitors, platform connector) run on every GPU node, quarantined
            # ones included, so they see a node recover; the Deployments on the system pool.
            "tolerations": [{"operator": "Exists"}],
            "systemNodeSelector": system,
            "gpuHealthMonitor": {"enabled": True},
            "syslogHealthMonitor": {"enabled": True},
            "faultQuarantine": {"enabled": True},
            "nodeDrainer": {"enabled": True},
            # EKS node auto-repair replaces nodes; a reboot or terminate from here would race it.
            "faultRemediation": {"enabled": False},
            "janitor": {"enabled": False},
            "mongodbStore": {"enabled": True},
        },
        "podMonitor": {"enabled": False},
        "fault-quarantine": {
            "circuitBreaker": {
                "enabled": True,
                "percentage": max_quarantined_percent,
                "duration": f"{window_minutes}m",
            },
            "ruleSets": quarantine_rule_sets(),
        },
        "node-drainer": {
            # Immediate mode sends each pod an Eviction with this grace period (then waits as
            # long again before it force-deletes a pod still terminating).
            "evictionTimeoutInSeconds": str(TRAINER_GRACE_S),
            "systemNamespaces": "^(" + "|".join(SYSTEM_NAMESPACES) + ")$",
            # Every other namespace. Not AllowCompletion: a training job never completes on
            # its own, so it would run on the faulty GPU until it crashed.
            "userNamespaces": [{"name": "*", "mode": "Immediate"}],
        },
        "mongodb-store": {
            "job": {"nodeSelector": system},
            "mongodb": {
                "nodeSelector": system,
                "persistence": {"storageClass": STORAGE_CLASS, "size": f"{DATASTORE_GIB}Gi"},
            },
        },
    }


def cert_manager_values() -> dict[str, Any]:
    return {
        "crds": {"enabled": True, "keep": True},
        "global": {"nodeSelector": {POOL_LABEL: SYSTEM_POOL}},
    }


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
    kuberay: bool = True
    """The KubeRay operator: the RayJobs of `llmp job` data kinds (Kueue admits them)."""
    nvsentinel: bool = False
    """NVSentinel (and the cert-manager its datastore needs): on where NVIDIA pools exist. Needs
    the GPU operator (its DCGM host engine) and the gp3 StorageClass (the Monitoring
    component's)."""
    nvsentinel_max_quarantined_percent: int = 10
    """Circuit breaker: the share of all nodes cordoned within the window that stops it."""
    nvsentinel_quarantine_window_minutes: int = 60
    mig_strategy: str = "mixed"
    """How the device plugin advertises MIG partitions (`mixed`: one resource per profile)."""
    mig_layouts: list[MigLayout] = field(default_factory=list)
    """The MIG pools' partitions; empty: the MIG manager's configuration is left alone."""
    cluster_name: pulumi.Input[str]
    region: str
    vpc_id: pulumi.Input[str]
    pools: list[PoolCapacity]
    """The GPU pools at max size (Kueue flavors and the cohort's capacity)."""
    tenants: list[TenantShare] = field(default_factory=list)
    system_nodes: list[pulumi.Resource] = field(default_factory=list)
    """What a controller Deployment needs first (the system node group)."""
    kueue_after: list[pulumi.Resource] = field(default_factory=list)
    """APIs Kueue must find when it starts: the ProvisioningRequest CRD where a pool is
    elastic (the NodeAutoscaler's `provisioning_api`)."""
    provisioning_resources: list[str] = field(default_factory=list)
    """Accelerator resources the ProvisioningRequest check manages beyond this stack's
    elastic pools': a shared stack's check serves the pools team stacks bring."""
    cluster_wide: bool = True
    """False on a team stack of a shared cluster: the shared stack installs every release
    and the cluster-wide Kueue objects; this one declares only its pools' flavors and its
    ClusterQueues (named after `team`), attached to the shared stack's `scheduling`."""
    team: str = ""
    scheduling: pulumi.Input[dict[str, Any]] | None = None
    """The shared stack's `scheduling` output (`spec.sharing.SCHEDULING_KEYS`)."""


def _queue_spec(
    queues: Callable[[dict[str, Any]], list[kueue.ClusterQueue]], i: int, names: dict[str, Any]
) -> dict[str, Any]:
    spec: dict[str, Any] = queues(names)[i].manifest()["spec"]
    return spec


class Addons(pulumi.ComponentResource):
    releases: dict[str, k8s.helm.v3.Release]
    kueue_ready: list[pulumi.Resource]
    """What a Kueue object must wait for (the Kueue release and its CRDs); empty when off."""
    lbc_role_arn: pulumi.Output[str] | None

    def __init__(self, name: str, args: AddonsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmp:addons:Addons", name, None, opts)
        self.releases = {}
        self.kueue_ready = []
        self.lbc_role_arn = None
        if args.cluster_wide:
            self._install(name, args)
        elif args.kueue:
            self.kueue_ready = self._team_queues(name, args)
        self.register_outputs(
            {"releases": sorted(self.releases), "lbc_role_arn": self.lbc_role_arn}
        )

    def _team_queues(self, name: str, args: AddonsArgs) -> list[pulumi.Resource]:
        """A team's flavors (its pools, named after it) and ClusterQueues (one per tenant, and
        its own spare queue), in the shared stack's cohort."""
        if not args.team or args.scheduling is None:
            raise ValueError("a team stack's queues need its team name and the shared scheduling")
        child = pulumi.ResourceOptions(parent=self)
        created: list[pulumi.Resource] = []
        for flavor in kueue.resource_flavors(args.pools, cpu=False):
            manifest = flavor.manifest()
            created.append(self._custom(name, manifest, manifest["spec"], child))

        def queues(names: dict[str, Any]) -> list[kueue.ClusterQueue]:
            shared = kueue.Scheduling(
                cohort=names["cohort"],
                cpu_flavor=names["cpu_flavor"],
                provisioning_check=names["provisioning_check"],
            )
            return [
                *(kueue.tenant_cluster_queue(t, args.pools, shared) for t in args.tenants),
                kueue.spare_cluster_queue(
                    args.tenants, args.pools, shared, name=f"{args.team}-{kueue.SPARE_QUEUE}"
                ),
            ]

        scheduling = pulumi.Output.from_input(args.scheduling)
        defaults = vars(kueue.Scheduling())
        # The names are the team's own, known now; the specs name the shared stack's objects.
        for i, queue in enumerate(queues(defaults)):
            spec = scheduling.apply(functools.partial(_queue_spec, queues, i))
            created.append(self._custom(name, queue.manifest(), spec, child))
        return created

    def _custom(
        self,
        name: str,
        manifest: dict[str, Any],
        spec: pulumi.Input[dict[str, Any]],
        opts: pulumi.ResourceOptions,
    ) -> k8s.apiextensions.CustomResource:
        return k8s.apiextensions.CustomResource(
            f"{name}-{manifest['kind'].lower()}-{manifest['metadata']['name']}",
            api_version=manifest["apiVersion"],
            kind=manifest["kind"],
            metadata=manifest["metadata"],
            spec=spec,
            opts=opts,
        )

    def _trainer(
        self,
        name: str,
        release: Callable[..., k8s.helm.v3.Release],
        on_system: pulumi.ResourceOptions,
    ) -> None:
        """JobSet and the Trainer side by side, then the platform's ClusterTrainingRuntimes
        (their CRD comes with the Trainer).

        The Trainer's manager watches JobSets, so it needs their CRD, not a running JobSet
        controller: Helm creates a chart's `crds/` first, seconds into the jobset release,
        while the manager's image is still being pulled; a manager that started first fails
        its watch and the kubelet starts it again, within the release's wait. In series the
        restart of a recovered cluster would wait one more Helm release (`llmp dr`'s
        critical path ends at the runtimes)."""
        release(JOBSET, JOBSET_NAMESPACE, jobset_values(), on_system)
        trainer = release(TRAINER, TRAINER_NAMESPACE, trainer_values(), on_system)
        after_trainer = pulumi.ResourceOptions(parent=self, depends_on=[trainer])
        for runtime in trainjob.cluster_training_runtimes():
            self._custom(name, runtime, runtime["spec"], after_trainer)

    def _install(self, name: str, args: AddonsArgs) -> None:
        """Everything cluster-wide: the releases, the cpu flavor, the checks, the queues."""
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

        if args.nvsentinel and not args.gpu_operator:
            raise ValueError(
                "nvsentinel needs gpu_operator: it reads the operator's DCGM host engine"
            )
        if not 1 <= args.nvsentinel_max_quarantined_percent <= 100:
            raise ValueError(
                f"nvsentinel_max_quarantined_percent {args.nvsentinel_max_quarantined_percent}: "
                "a percentage from 1 to 100"
            )
        if args.nvsentinel_quarantine_window_minutes < 1:
            raise ValueError(
                f"nvsentinel_quarantine_window_minutes {args.nvsentinel_quarantine_window_minutes}:"
                " at least 1"
            )
        gpu_operator = None
        if args.gpu_operator:
            gpu_operator = release(
                GPU_OPERATOR,
                GPU_OPERATOR_NAMESPACE,
                gpu_operator_values(args.mig_strategy, args.mig_layouts),
                on_system,
            )
        if args.nvsentinel and gpu_operator is not None:
            certificates = release(CERT_MANAGER, CERT_MANAGER, cert_manager_values(), on_system)
            release(
                NVSENTINEL,
                NVSENTINEL,
                nvsentinel_values(
                    args.nvsentinel_max_quarantined_percent,
                    args.nvsentinel_quarantine_window_minutes,
                ),
                pulumi.ResourceOptions(
                    parent=self, depends_on=[*args.system_nodes, certificates, gpu_operator]
                ),
            )
        if args.efa_device_plugin:
            # A DaemonSet alone: installed (and ready) with no node to run on.
            release(
                EFA_PLUGIN, "kube-system", efa_plugin_values(), pulumi.ResourceOptions(parent=self)
            )
        if args.metrics_server:
            release(METRICS_SERVER, "kube-system", {"replicas": 2}, on_system)
        if args.kuberay:
            release(KUBERAY, KUBERAY_NAMESPACE, kuberay_values(), on_system)

        if args.training_operator:
            self._trainer(name, release, on_system)

        self.kueue_ready = []
        if args.kueue:
            if any(p.elastic for p in args.pools) and not args.kueue_after:
                raise ValueError(
                    "elastic pools need the ProvisioningRequest API in kueue_after: Kueue "
                    "checks for it only at start"
                )
            kueue_release = release(
                KUEUE,
                "kueue-system",
                kueue_values(),
                # Not after the Trainer: Kueue 0.19.2 registers the TrainJob webhook at start and
                # sets its controller up once the TrainJob API is served (jobframework
                # WaitForAPI), by when JobSet's is too (the Trainer waits for JobSet).
                pulumi.ResourceOptions(
                    parent=self, depends_on=[*args.system_nodes, *args.kueue_after]
                ),
            )
            self.kueue_ready = [kueue_release]
            after_crds = pulumi.ResourceOptions(parent=self, depends_on=self.kueue_ready)
            flavors, queues = kueue.platform_queues(args.pools, args.tenants)
            objects: list[
                kueue.Topology
                | kueue.ResourceFlavor
                | kueue.ClusterQueue
                | kueue.AdmissionCheck
                | kueue.ProvisioningRequestConfig
            ] = [*kueue.topologies(args.pools), *flavors]
            provisioning = kueue.provisioning_check(args.pools, args.provisioning_resources)
            if provisioning is not None:
                objects += provisioning
            objects += queues
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
