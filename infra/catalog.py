"""Typed access to `catalog.yaml`: instance facts, prices with their date, pinned versions.

The catalog is data, read once per process. Code asks it questions
(`catalog().instance("p5.48xlarge").efa_interfaces`) instead of carrying
literals, so a price change or a new instance type is a one-line data edit.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

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

    @property
    def gpu_count(self) -> int:
        return self.accelerator.count if self.accelerator else 0


class AcceleratorKind(_Data):
    ami_type: str
    resource: str
    taint_key: str


class Prices(_Data):
    region: str
    on_demand_as_of: str
    capacity_block_as_of: str
    currency: str


class PlatformPrices(_Data):
    eks_control_plane_standard_usd_per_hour: float
    eks_control_plane_extended_usd_per_hour: float
    nat_gateway_usd_per_hour: float
    nat_gateway_usd_per_gb: float
    ebs_gp3_usd_per_gb_month: float
    cloudwatch_logs_ingest_usd_per_gb: float
    kms_key_usd_per_month: float


class Addon(_Data):
    version: str
    source: str


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


class Storage(_Data):
    prices_as_of: str
    s3_usd_per_gb_month: dict[S3Class, float]
    intelligent_tiering: IntelligentTiering
    transition_usd_per_1000_requests: dict[S3Class, float]
    min_storage_days: dict[S3Class, int]
    min_days_before_ia: int
    replication_transfer_usd_per_gb: float
    fsx_lustre_persistent2_usd_per_gb_month: dict[int, float]


class Chart(_Data):
    repository: str
    version: str
    source: str


class Manifests(_Data):
    """A kustomization pinned to a git tag (an operator that ships no Helm chart)."""

    url: str
    ref: str
    source: str

    @property
    def directory(self) -> str:
        return f"{self.url}?ref={self.ref}"


class FabricThreshold(_Data):
    min_peak_busbw_gbps: float = Field(gt=0, description="nccl-tests busbw, GB/s (1e9 B/s)")
    source: str


class FabricAcceptance(_Data):
    """The 2-node nccl-tests run a new GPU pool must pass (workloads/jobs/fabric.py)."""

    image: str
    image_source: str
    thresholds: dict[str, FabricThreshold]


class ServingPins(_Data):
    """Images and the autoscaler chart of online serving (components/serving.py)."""

    vllm_image: str
    vllm_source: str
    gateway_image: str
    gateway_source: str
    keda: Chart


class CrdManifest(_Data):
    """A pinned YAML file of CRDs (applied server-side before the chart that needs them)."""

    url: str
    source: str


class MonitoringPins(_Data):
    """Charts, CRDs and the EBS CSI add-on of components/monitoring.py."""

    ebs_csi_driver: dict[str, Addon]
    charts: dict[str, Chart]
    prometheus_operator_crds: CrdManifest
    otel_collector_image: str


class Catalog(_Data):
    prices: Prices
    instances: dict[str, InstanceType]
    accelerator_kinds: dict[str, AcceleratorKind]
    cpu_ami_type: str
    platform_prices: PlatformPrices
    spot_discount_assumption: float = Field(gt=0, lt=1)
    hours_per_month: int
    eks: Eks
    storage: Storage
    charts: dict[str, Chart]
    storage_addons: dict[str, dict[str, Addon]]
    addon_charts: dict[str, Chart] = Field(default_factory=dict)
    addon_manifests: dict[str, Manifests] = Field(default_factory=dict)
    fabric_acceptance: FabricAcceptance
    serving: ServingPins | None = None
    monitoring: MonitoringPins | None = None

    @model_validator(mode="after")
    def _fabric_types_known(self) -> Catalog:
        unknown = sorted(set(self.fabric_acceptance.thresholds) - set(self.instances))
        if unknown:
            raise ValueError(f"fabric_acceptance thresholds for unknown types: {unknown}")
        return self

    def instance(self, name: str) -> InstanceType:
        return self.instances[name]

    def ami_type(self, instance_type: str) -> str:
        acc = self.instances[instance_type].accelerator
        return self.accelerator_kinds[acc.kind].ami_type if acc else self.cpu_ami_type

    def accelerator_kind(self, instance_type: str) -> AcceleratorKind | None:
        acc = self.instances[instance_type].accelerator
        return self.accelerator_kinds[acc.kind] if acc else None


@functools.cache
def catalog() -> Catalog:
    with CATALOG_PATH.open() as fh:
        return Catalog.model_validate(yaml.load(fh, Loader=YAML_LOADER))
