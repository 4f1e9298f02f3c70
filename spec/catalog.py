"""Typed access to `catalog.yaml`: instance facts, prices with their date, pinned versions.

The catalog is data, read once per process. Code asks it questions
(`catalog().instance("p5.48xlarge").efa_interfaces`) instead of carrying
literals, so a price change or a new instance type is a one-line data edit.
"""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from spec.errors import ConfigError, one_line

CATALOG_PATH = Path(__file__).with_name("catalog.yaml")
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it (several times faster)."""


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Accelerator(_Data):
    kind: Literal["nvidia", "neuron"]
    model: str
    count: int = Field(gt=0)
    memory_gib: int = Field(gt=0, description="total accelerator memory of the instance")
    peak_bf16_tflops: float | None = Field(None, description="dense BF16, per accelerator")


class InstanceType(_Data):
    accelerator: Accelerator | None = None
    vcpus: int
    memory_gib: int
    nvme_disks: int = Field(ge=0, description="local instance-store NVMe devices")
    network_cards: int = Field(ge=1)
    efa_interfaces: int = Field(ge=0, description="the most EFA interfaces the type takes")
    network_gbps: float
    on_demand_usd_per_hour: float
    capacity_block_usd_per_hour: float | None = None
    network_topology_layers: Literal[3, 4] | None = Field(
        None,
        description="network nodes EC2 instance topology reports for the type, which EKS puts "
        "on its nodes as topology.k8s.aws/network-node-layer-1..N; None: the type has none",
    )

    @property
    def gpu_count(self) -> int:
        return self.accelerator.count if self.accelerator else 0


class AcceleratorKind(_Data):
    ami_type: str
    resource: str
    taint_key: str


_MIG_PROFILE = re.compile(r"^(?P<compute>[1-7])g\.(?P<memory>[0-9]+)gb$")


class MigModel(_Data):
    """One accelerator model's MIG partitions (GPU instances) as the MIG manager knows them."""

    pci_device_id: str = Field(
        pattern=r"^0x[0-9A-F]{8}$",
        description="the GPU's PCI device and vendor id, mig-parted's `device-filter`",
    )
    profiles: dict[str, int] = Field(
        description="profile (`<compute slices>g.<memory GB>gb`) -> most instances per GPU"
    )

    @field_validator("profiles")
    @classmethod
    def _profiles(cls, v: dict[str, int]) -> dict[str, int]:
        for name, most in v.items():
            if not _MIG_PROFILE.match(name):
                raise ValueError(f"{name}: not a MIG profile name (<n>g.<memory>gb)")
            if not 1 <= most <= 7:
                raise ValueError(f"{name}: {most} instances per GPU, not 1..7")
        return v

    def compute_slices(self, profile: str) -> int:
        match = _MIG_PROFILE.match(profile)
        assert match is not None  # checked on load
        return int(match["compute"])

    def memory_gb(self, profile: str) -> int:
        match = _MIG_PROFILE.match(profile)
        assert match is not None
        return int(match["memory"])


class Mig(_Data):
    source: str
    read: str = Field(description="the day `source` was read")
    models: dict[str, MigModel] = Field(description="by the catalog's accelerator model")


class Prices(_Data):
    region: str
    on_demand_as_of: str
    capacity_block_as_of: str
    currency: str


class PlatformPrices(_Data):
    prices_as_of: str
    eks_control_plane_standard_usd_per_hour: float
    eks_control_plane_extended_usd_per_hour: float
    nat_gateway_usd_per_hour: float
    nat_gateway_usd_per_gb: float
    interface_endpoint_usd_per_az_hour: float
    interface_endpoint_usd_per_gb: float
    public_ipv4_usd_per_hour: float
    ebs_gp3_usd_per_gb_month: float
    cloudwatch_logs_ingest_usd_per_gb: float
    cloudwatch_logs_storage_usd_per_gb_month: float
    cloudwatch_api_usd_per_1000_requests: float = Field(
        description="GetMetricStatistics and ListMetrics per 1000 requests, GetMetricData per "
        "1000 metrics requested"
    )
    kms_key_usd_per_month: float
    alb_usd_per_hour: float
    alb_lcu_usd_per_hour: float
    waf_web_acl_usd_per_month: float
    waf_rule_usd_per_month: float
    waf_usd_per_million_requests: float
    secrets_manager_secret_usd_per_month: float
    secrets_manager_usd_per_10000_calls: float


_PULL_REQUEST = re.compile(r"pull[ /-]request|/pull/|refs/pull|\bPR\b", re.IGNORECASE)
_COMMIT = re.compile(r"\b[0-9a-f]{7,40}\b")


class Verified(_Data):
    """Where a pin was seen published, and when: the catalog's rule for every version.

    A chart version counts when the chart repository's published index lists it; an image
    tag, a manifest tag or an add-on build when a release tag (or the EKS add-on version
    list) names it. A branch head or a pull request's commit is no evidence that the
    version will ever be published, so `where` may name neither.
    """

    against: Literal["chart index", "release tag", "EKS add-on versions"]
    where: str = Field(description="the index or tag read, with its own date")
    checked: datetime.date = Field(description="the day it was checked")

    @field_validator("where")
    @classmethod
    def _published(cls, v: str) -> str:
        if _PULL_REQUEST.search(v):
            raise ValueError(f"{v!r}: a pull request is not a publication; cite the index or tag")
        if commit := _COMMIT.search(v):
            raise ValueError(
                f"{v!r}: names commit {commit.group()}; cite the index or release tag instead"
            )
        return v


class Addon(_Data):
    version: str
    source: str
    verified: Verified


class EksVersion(_Data):
    standard_support_ends: str
    addons: dict[str, Addon]


class Eks(_Data):
    default_version: str
    vpc_cni_min_version_for_efa_only: str
    versions: dict[str, EksVersion]

    @property
    def supported_versions(self) -> list[str]:
        return sorted(self.versions)


S3Class = Literal[
    "STANDARD",
    "INTELLIGENT_TIERING",
    "STANDARD_IA",
    "ONEZONE_IA",
    "GLACIER_IR",
    "GLACIER",
    "DEEP_ARCHIVE",
]


class IntelligentTiering(_Data):
    infrequent_after_days: int
    infrequent_usd_per_gb_month: float
    archive_instant_after_days: int
    archive_instant_usd_per_gb_month: float
    monitoring_usd_per_1000_objects_month: float


class LustrePerformance(_Data):
    """What FSx for Lustre delivers per client and per TiB (AWS's published figures)."""

    source: str
    read: str
    per_client_gbps: dict[Literal["ena", "efa", "efa_gds"], float]
    ena_per_server_gbps: float
    network_baseline_mbps_per_tib: dict[int, float]
    efa_capacity_step_gib: dict[int, int]
    max_efa_connections: int
    efa_clients: list[str]
    gds_clients: list[str]


class S3Performance(_Data):
    """S3's request rates per prefix (throughput scales with prefixes and the client's NIC)."""

    source: str
    read: str
    get_per_prefix_per_second: int
    put_per_prefix_per_second: int


class Storage(_Data):
    prices_as_of: str
    s3_usd_per_gb_month: dict[S3Class, float]
    intelligent_tiering: IntelligentTiering
    transition_usd_per_1000_requests: dict[S3Class, float]
    put_copy_list_usd_per_1000_requests: float
    min_storage_days: dict[S3Class, int]
    min_days_before_ia: int
    replication_transfer_usd_per_gb: float
    replication_time_control_usd_per_gb: float
    fsx_lustre_persistent2_usd_per_gb_month: dict[int, float]
    lustre_performance: LustrePerformance
    s3_performance: S3Performance


class Chart(_Data):
    repository: str
    version: str
    source: str
    verified: Verified


class Manifests(_Data):
    """A kustomization pinned to a git tag (an operator that ships no Helm chart)."""

    url: str
    ref: str
    source: str
    verified: Verified

    @property
    def directory(self) -> str:
        return f"{self.url}?ref={self.ref}"


class FabricThreshold(_Data):
    min_peak_busbw_gbps: float = Field(gt=0, description="nccl-tests busbw, GB/s (1e9 B/s)")
    source: str


class FabricAcceptance(_Data):
    """The 2-node nccl-tests run a new GPU pool must pass (manifests/jobs/fabric.py)."""

    image: str
    image_source: str
    image_verified: Verified
    thresholds: dict[str, FabricThreshold]


class ImagePin(_Data):
    """One version an image of ours is built from, and where it was read."""

    version: str
    source: str
    verified: Verified


class TrainerImage(_Data):
    """What images/trainer/Dockerfile builds on (tests/peers/test_dockerfile.py keeps the
    Dockerfile's FROM and ARG defaults, and its requirements' pins, equal to these)."""

    base_image: str = Field(description="the FROM image, by tag (and digest where verified)")
    base_source: str
    base_verified: Verified
    cuda: str = Field(description="the base image's CUDA toolkit, which torch's wheels match")
    python: str = Field(description="the base OS's Python, the lock's interpreter")
    efa_installer: ImagePin
    aws_ofi_nccl: ImagePin = Field(description="the plugin the EFA installer ships")
    torch: ImagePin
    nccl: ImagePin = Field(description="the NCCL torch's wheel requires (nvidia-nccl-cu12)")
    uid: int = Field(ge=1, description="the image's user; a PyTorchJob's runAsUser")


class DcgmLevel(_Data):
    """One `dcgmi diag -r LEVEL` suite: the tests it runs and how long a node may take."""

    tests: list[str] = Field(min_length=1, description="test names in dcgmi's JSON output")
    deadline_minutes: int = Field(gt=0, description="image pull, host engine start and the run")


class DcgmDiagnostic(_Data):
    """`dcgmi diag` on every GPU node of a pool (manifests/jobs/dcgm_diag.py, `llmp accept`)."""

    image: str
    image_source: str
    image_verified: Verified
    default_level: int
    levels: dict[int, DcgmLevel]
    levels_source: str

    @model_validator(mode="after")
    def _default_level_known(self) -> DcgmDiagnostic:
        if self.default_level not in self.levels:
            raise ValueError(f"dcgm_diagnostic.default_level {self.default_level} has no entry")
        return self


class ServingPins(_Data):
    """Images and the autoscaler chart of online serving (components/serving.py)."""

    vllm_image: str
    vllm_source: str
    vllm_verified: Verified
    vllm_opentelemetry: bool = False
    """The vLLM image has the OpenTelemetry SDK: only then is `--otlp-traces-endpoint` passed
    (vLLM refuses to start with it otherwise)."""
    gateway_image: str
    gateway_source: str
    gateway_verified: Verified
    keda: Chart
    lws: Chart
    """LeaderWorkerSet, installed where a model spans nodes (`nodes_per_replica` > 1)."""
    router_image: str
    """The endpoint picker of `routing: endpoint-picker` models (manifests/serving/router.py)."""
    router_source: str
    router_verified: Verified
    inference_pool_crd: CrdManifest
    """The InferencePool CRD (inference.networking.k8s.io/v1) the picker reads its pool from."""
    secrets_store_csi_driver: Chart
    """The Secrets Store CSI driver: mounts the gateway's keys (manifests/serving/keys.py)."""
    secrets_store_provider_aws: Chart
    """Its AWS provider: reads them from Secrets Manager through EKS Pod Identity."""


class ElbLogDelivery(_Data):
    """Who writes ALB access logs into a bucket, per region (components/storage.py)."""

    accounts: dict[str, str]
    """Region -> its Elastic Load Balancing account (regions opened before August 2022);
    any other region: the `logdelivery.elasticloadbalancing.amazonaws.com` principal."""
    source: str

    def account(self, region: str) -> str | None:
        return self.accounts.get(region)


class CrdManifest(_Data):
    """A pinned YAML file of CRDs (applied server-side before the chart that needs them)."""

    url: str
    source: str
    verified: Verified


class NodeAutoscalerPins(_Data):
    """The Cluster Autoscaler's image and the ProvisioningRequest CRD
    (components/node_autoscaler.py); the chart is `addon_charts["cluster-autoscaler"]`."""

    image: str
    image_source: str
    image_verified: Verified
    provisioning_request_crd: CrdManifest

    @property
    def image_tag(self) -> str:
        return self.image.rsplit(":", 1)[1]

    @property
    def image_repository(self) -> str:
        return self.image.rsplit(":", 1)[0]


class MonitoringPins(_Data):
    """Charts, CRDs and the EBS CSI add-on of the monitoring stack (monitoring/charts.py,
    components/monitoring.py)."""

    ebs_csi_driver: dict[str, Addon]
    charts: dict[str, Chart]
    prometheus_operator_crds: CrdManifest
    otel_collector_image: str


XidClassName = Literal["node_replacement", "gpu_reset", "application", "informational"]


class XidCode(_Data):
    """One XID code: what NVIDIA calls it and what the cited source says to do."""

    name: str = Field(description="the error's name in the cited source")
    action: str = Field(description="the source's immediate action (NVIDIA's resolution bucket)")
    source: str = Field(description="a key of `gpu_xids.sources`")
    note: str | None = Field(
        None, description="why the code is in this class, where it is not plain"
    )


class XidClass(_Data):
    """XIDs that need the same response: one alert, one severity, one runbook."""

    alert: str = Field(description="the alert rule's name (monitoring/rules.py)")
    severity: Literal["info", "warning", "critical"]
    summary: str
    runbook: str = Field(description="one line: what the on-call engineer does")
    quarantine: bool = Field(
        False,
        description="the node is taken out of service (NVSentinel cordons, taints and drains "
        "it, components/addons.py): the GPU needs a reset or the node a replacement",
    )
    codes: dict[int, XidCode] = Field(min_length=1)


class UnclassifiedXid(_Data):
    """Any code no class lists: a warning that asks for it to be looked up and classified."""

    alert: str
    severity: Literal["warning", "critical"]
    summary: str
    runbook: str


class GpuXids(_Data):
    """XID codes by what they need (monitoring/rules.py builds one alert per class from them).

    A code sits in exactly one class; a code in none fires the unclassified warning, so a
    new code is never silent.
    """

    checked: datetime.date
    sources: dict[str, str] = Field(description="key -> the document or file read, with its date")
    classes: dict[XidClassName, XidClass]
    unclassified: UnclassifiedXid

    @model_validator(mode="after")
    def _one_class_per_code(self) -> GpuXids:
        seen: dict[int, str] = {}
        for name, cls in self.classes.items():
            for code, entry in cls.codes.items():
                if code in seen:
                    raise ValueError(f"XID {code} is in both {seen[code]} and {name}")
                seen[code] = name
                if entry.source not in self.sources:
                    raise ValueError(f"XID {code}: unknown source {entry.source!r}")
        alerts = [c.alert for c in self.classes.values()] + [self.unclassified.alert]
        if len(alerts) != len(set(alerts)):
            raise ValueError(f"gpu_xids: alert names repeat: {alerts}")
        return self

    def codes(self, name: XidClassName) -> list[int]:
        return sorted(self.classes[name].codes)

    @property
    def classified(self) -> list[int]:
        return sorted(code for cls in self.classes.values() for code in cls.codes)


class CreationTime(_Data):
    """How long `pulumi up` typically takes to create one resource of a type."""

    minutes: float = Field(ge=0, description="typical")
    low: float = Field(ge=0)
    high: float = Field(ge=0)
    source: str = Field(description="where the figure comes from, or `operator's estimate`")

    @model_validator(mode="after")
    def _ordered(self) -> CreationTime:
        if not self.low <= self.minutes <= self.high:
            raise ValueError(f"creation time {self.minutes} not within {self.low}-{self.high}")
        return self


class Lag(_Data):
    """A delay between data written in one place and its copy elsewhere."""

    minutes: float = Field(ge=0)
    source: str
    bound: bool = Field(description="an SLA-backed bound (true) or an assumption (false)")


class GpuQuota(_Data):
    """The EC2 vCPU quota an instance family runs under (Service Quotas, service `ec2`)."""

    on_demand: str = Field(description="quota code, e.g. L-417A185B")
    on_demand_name: str
    spot: str
    spot_name: str


class Recovery(_Data):
    """Disaster-recovery estimates for `llmp dr plan`: creation times, replication lag."""

    as_of: str
    default_creation_minutes: CreationTime = Field(
        description="for resource types not listed (reported as unknown)"
    )
    creation_minutes: dict[str, CreationTime] = Field(description="by Pulumi type token")
    s3_replication_rtc: Lag
    s3_replication_without_rtc: Lag
    fsx_auto_export: Lag
    ec2_quotas: dict[str, GpuQuota] = Field(
        description="by instance family prefix (p, g, trn, standard for the rest)"
    )
    quotas_source: str

    def quota_for(self, instance_type: str) -> tuple[str, GpuQuota]:
        """The family key and quota of an instance type (p5.48xlarge -> p)."""
        family = instance_type.split(".", 1)[0]
        for prefix in sorted(self.ec2_quotas, key=len, reverse=True):
            if prefix != "standard" and family.startswith(prefix):
                return prefix, self.ec2_quotas[prefix]
        return "standard", self.ec2_quotas["standard"]


class Offerings(_Data):
    """Where each instance type of the catalog is offered: region -> the zone ids (`use1-az4`)
    whose EC2 `DescribeInstanceTypeOfferings` lists it (`LocationType availability-zone-id`).

    Zone ids, not names: a zone's name (`us-east-1a`) maps to a different zone id in each
    account, so the stack config states the names and, optionally, its account's mapping
    (`network.zone_ids`); offline the check is per region, and per zone where that mapping is
    given (spec/offerings.py). `llmp verify --preflight` asks the account itself.
    """

    source: str
    checked: datetime.date
    zone_ids: dict[str, list[str]] = Field(
        description="region -> every zone id of the region the source lists (any type)"
    )
    types: dict[str, dict[str, list[str]]] = Field(
        description="instance type -> region -> the zone ids that offer it"
    )

    def regions_of(self, instance_type: str) -> dict[str, list[str]]:
        return self.types.get(instance_type, {})

    def knows_region(self, region: str) -> bool:
        """The source read the region: a type it does not list there is not offered there."""
        return region in self.zone_ids


class Catalog(_Data):
    prices: Prices
    instances: dict[str, InstanceType]
    accelerator_kinds: dict[str, AcceleratorKind]
    mig: Mig
    cpu_ami_type: str
    platform_prices: PlatformPrices
    spot_discount_assumption: float = Field(gt=0, lt=1)
    hours_per_month: int
    eks: Eks
    storage: Storage
    charts: dict[str, Chart]
    storage_addons: dict[str, dict[str, Addon]]
    gpu_node_addons: dict[str, dict[str, Addon]] = Field(
        default_factory=dict,
        description="EKS add-ons of clusters with accelerated pools, per Kubernetes version",
    )
    addon_charts: dict[str, Chart] = Field(default_factory=dict)
    addon_manifests: dict[str, Manifests] = Field(default_factory=dict)
    fabric_acceptance: FabricAcceptance
    trainer_image: TrainerImage
    dcgm_diagnostic: DcgmDiagnostic | None = None
    serving: ServingPins | None = None
    elb_log_delivery: ElbLogDelivery | None = None
    monitoring: MonitoringPins | None = None
    node_autoscaler: NodeAutoscalerPins
    gpu_xids: GpuXids | None = None
    recovery: Recovery | None = None
    offerings: Offerings

    @model_validator(mode="after")
    def _fabric_types_known(self) -> Catalog:
        unknown = sorted(set(self.fabric_acceptance.thresholds) - set(self.instances))
        if unknown:
            raise ValueError(f"fabric_acceptance thresholds for unknown types: {unknown}")
        return self

    @model_validator(mode="after")
    def _lustre_clients_known(self) -> Catalog:
        perf = self.storage.lustre_performance
        unknown = sorted(set(perf.efa_clients + perf.gds_clients) - set(self.instances))
        if unknown:
            raise ValueError(f"storage.lustre_performance names unknown types: {unknown}")
        return self

    @model_validator(mode="after")
    def _mig_models_known(self) -> Catalog:
        models = {t.accelerator.model for t in self.instances.values() if t.accelerator}
        unknown = sorted(set(self.mig.models) - models)
        if unknown:
            raise ValueError(f"mig.models for accelerators no instance type has: {unknown}")
        return self

    def mig_model(self, instance_type: str) -> MigModel | None:
        """The MIG partitions of the type's GPUs; None where they have none (or no GPUs)."""
        acc = self.instance(instance_type).accelerator
        return self.mig.models.get(acc.model) if acc is not None else None

    def instance(self, name: str) -> InstanceType:
        """The catalog's facts of `name`; ValueError (one line) for a type it does not list."""
        try:
            return self.instances[name]
        except KeyError:
            known = ", ".join(sorted(self.instances))
            raise ValueError(f"{name} is not an instance type of the catalog ({known})") from None

    def accelerator_tolerations(self) -> list[dict[str, str]]:
        """Tolerate every accelerator taint of the catalog (NoSchedule): what a DaemonSet
        that must also run on GPU and Neuron nodes needs."""
        keys = sorted({k.taint_key for k in self.accelerator_kinds.values()})
        return [{"key": key, "operator": "Exists", "effect": "NoSchedule"} for key in keys]

    def ami_type(self, instance_type: str) -> str:
        acc = self.instance(instance_type).accelerator
        return self.accelerator_kinds[acc.kind].ami_type if acc else self.cpu_ami_type

    def accelerator_kind(self, instance_type: str) -> AcceleratorKind | None:
        acc = self.instance(instance_type).accelerator
        return self.accelerator_kinds[acc.kind] if acc else None


VERSION_KEYED: dict[str, str] = {
    "storage_addons": "aws-mountpoint-s3-csi-driver",
    "gpu_node_addons": "eks-node-monitoring-agent",
    "monitoring.ebs_csi_driver": "aws-ebs-csi-driver",
}
"""The sections besides `eks.versions` keyed by Kubernetes version, and the add-on each pins:
every version of `eks.versions` needs an entry in each (CONTRIBUTING.md, "Adding an EKS
version")."""


class CatalogError(ConfigError):
    """The catalog file itself is wrong: one line per problem, naming the entry.

    A ConfigError (the CLI and the program print it as lines, no traceback), and not a
    ValueError: the catalog is read inside the stack schema's validators, which would
    otherwise fold it into the config error of whichever key asked first.
    """

    def __init__(self, file: str, problems: list[str]):
        self.file = file
        self.problem = problems[0]
        super().__init__((), None, problems[0])
        self.others = [CatalogError(file, [p]) for p in problems[1:]]

    def line(self) -> str:
        return one_line(f"catalog error: {self.file}: {self.problem}")


def _minor(version: str) -> str:
    return ".".join(version.lstrip("v").split(".")[:2])


def version_problems(cat: Catalog) -> list[str]:
    """One line per entry a Kubernetes version of `eks.versions` lacks elsewhere."""
    problems = []
    keyed: dict[str, Mapping[str, object] | None] = {
        "storage_addons": cat.storage_addons,
        "gpu_node_addons": cat.gpu_node_addons,
        "monitoring.ebs_csi_driver": cat.monitoring.ebs_csi_driver if cat.monitoring else None,
    }
    for version in cat.eks.supported_versions:
        for section, addon in VERSION_KEYED.items():
            pins = keyed[section]
            if pins is None:
                continue
            entry = pins.get(version)
            if entry is None or (isinstance(entry, dict) and addon not in entry):
                problems.append(
                    f'{section}."{version}".{addon} is missing: every version of eks.versions '
                    f"needs one (pinned for: {', '.join(sorted(pins)) or 'none'})"
                )
    default = cat.eks.default_version
    if default not in cat.eks.versions:
        problems.append(
            f'eks.default_version "{default}" has no eks.versions entry '
            f"(versions: {', '.join(cat.eks.supported_versions)})"
        )
    autoscaler = _minor(cat.node_autoscaler.image_tag)
    if autoscaler != _minor(default):
        problems.append(
            f"node_autoscaler.image {cat.node_autoscaler.image_tag} is not on "
            f'eks.default_version "{default}": the Cluster Autoscaler runs on its cluster\'s '
            f"minor; pin its {_minor(default)} release (and addon_charts.cluster-autoscaler)"
        )
    return problems


def load_catalog(path: Path) -> Catalog:
    """The catalog at `path`, or CatalogError: one line per missing or wrong entry."""
    from pydantic import ValidationError

    shown = path.name
    try:
        with path.open() as fh:
            raw = yaml.load(fh, Loader=YAML_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogError(shown, [f"cannot be read: {str(exc).splitlines()[0]}"]) from None
    try:
        cat = Catalog.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for e in exc.errors():
            where = ".".join(str(p) for p in e["loc"]) or "(top level)"
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(f"{where}: {'is missing' if e['type'] == 'missing' else msg}")
        raise CatalogError(shown, lines) from None
    problems = version_problems(cat)
    if problems:
        raise CatalogError(shown, problems)
    return cat


@functools.cache
def catalog() -> Catalog:
    return load_catalog(CATALOG_PATH)
