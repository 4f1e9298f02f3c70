"""`system_pool`, `node_pools` and `cpu_pools`: the add-ons' CPU pool, the accelerated
managed node groups, and the tainted, autoscaled CPU pools of data work."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from spec.base import RESERVATION_ID, Section, known_instance
from spec.catalog import catalog
from spec.errors import MISSING, FieldError, sorted_names


class PoolSizes(Section):
    """Sizes and update settings shared by the system pool, the GPU pools and the CPU pools."""

    min_size: int = Field(0, ge=0, description="Fewest nodes.")
    desired_size: int = Field(0, ge=0, description="Nodes at creation; autoscalers move it later.")
    max_size: int = Field(1, ge=1, description="Most nodes (budget and quota cap).")
    disk_size_gib: int = Field(200, ge=50, le=16384, description="Encrypted gp3 root volume size.")
    max_unavailable: int = Field(1, ge=1, description="Nodes replaced at once during updates.")
    release_version: str | None = Field(
        None,
        pattern=r"^\d+\.\d+\.\d+-\d{8}$",
        description="EKS-optimized AMI release the nodes run (`1.35.0-20261120`), on the "
        "cluster's Kubernetes minor; unset: the latest at creation. A change rolls every node.",
    )

    @model_validator(mode="after")
    def _sizes(self) -> PoolSizes:
        if self.min_size > self.max_size:
            raise FieldError(
                ("min_size",), self.min_size, f"must not exceed max_size ({self.max_size})"
            )
        if not self.min_size <= self.desired_size <= self.max_size:
            raise FieldError(
                ("desired_size",),
                self.desired_size,
                f"must lie in min_size..max_size ({self.min_size}..{self.max_size})",
            )
        return self


class SystemPoolConfig(PoolSizes):
    """The CPU node group for add-ons and controllers (no taint)."""

    instance_type: str = Field("m7i.4xlarge", description="A CPU instance type from the catalog.")
    min_size: int = Field(2, ge=1, description="Fewest nodes; two keep CoreDNS available.")
    desired_size: int = Field(2, ge=1, description="Nodes at creation.")
    max_size: int = Field(4, ge=1, description="Most nodes.")
    disk_size_gib: int = Field(100, ge=20, le=16384, description="Encrypted gp3 root volume size.")

    _instance = field_validator("instance_type")(known_instance)

    @field_validator("instance_type")
    @classmethod
    def _cpu_only(cls, v: str) -> str:
        if catalog().instance(v).accelerator:
            raise ValueError("is an accelerated type; the system pool runs CPU add-ons only")
        return v


CapacityType = Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"]


class NodePoolConfig(PoolSizes):
    """One accelerated managed node group (`node_pools.<name>`)."""

    instance_type: str = Field(description="An accelerated instance type from the catalog.")
    capacity_type: CapacityType = Field(
        "ON_DEMAND", description="ON_DEMAND, SPOT, or CAPACITY_BLOCK (needs a reservation id)."
    )
    capacity_reservation_id: str | None = Field(
        None,
        description="Capacity block or On-Demand reservation (cr-...) the pool launches into.",
    )
    efa: bool = Field(False, description="Attach every EFA interface the type has.")
    placement_group: bool | None = Field(
        None,
        description=(
            "Cluster placement group; default on for EFA pools without a reservation, "
            "off otherwise (a placement group can starve blocks and reservations)."
        ),
    )
    availability_zones: list[str] | None = Field(
        None,
        description="AZs of the pool's subnets; EFA and reserved pools name exactly one.",
    )
    local_nvme_raid0: bool = Field(
        True,
        description="Assemble the instance-store NVMe disks as RAID0 for containerd and kubelet.",
    )
    auto_repair: bool = Field(True, description="EKS node auto-repair of unhealthy GPU nodes.")
    hugepages_2mi_mib: int | None = Field(
        None,
        ge=0,
        le=65536,
        description=(
            "At least this many MiB of 2 MiB huge pages reserved at boot, never fewer than "
            "the AMI's EFA installer reserves (the fabric test requests 5120; training pods "
            "set FI_EFA_USE_HUGE_PAGE=0 and use none); default 5120 on EFA pools, 0 elsewhere."
        ),
    )
    checkpointing: bool = Field(
        False,
        description=(
            "Jobs on this pool checkpoint and resume (label `llm-platform/checkpointing`); "
            "the policy pack requires it of SPOT pools."
        ),
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="Extra Kubernetes node labels."
    )
    elastic: bool = Field(
        False,
        description=(
            "The Cluster Autoscaler scales the pool between min_size and max_size as queued "
            "jobs and pending pods need nodes (Kueue asks for a gang's nodes at once through "
            "a ProvisioningRequest); off, the pool keeps the size it was given. Needs "
            "min_size below max_size."
        ),
    )
    topology_aware: bool = Field(
        False,
        description=(
            "Kueue's Topology Aware Scheduling on the pool: its flavor names the Topology of "
            "the EC2 network labels EKS puts on its nodes (topology.k8s.aws/network-node-"
            "layer-1..N, then the node), and every pod set placed there asks for a level "
            "(jobs: `topology`, default preferred at the lowest network layer). Needs an "
            "instance type that reports its network topology."
        ),
    )
    mig: dict[str, int] | None = Field(
        None,
        description=(
            "MIG partitions of every GPU of the pool's nodes: profile -> instances per GPU "
            "(`{1g.10gb: 7}`, `{3g.40gb: 2}`), applied by the GPU operator's MIG manager. "
            "Jobs and model servers then ask for a partition, not a GPU; the tenants' "
            "gpu_quota still counts whole GPUs. With addons.mig_strategy single, one profile."
        ),
    )

    _instance = field_validator("instance_type")(known_instance)

    @field_validator("mig")
    @classmethod
    def _mig_counts(cls, v: dict[str, int] | None) -> dict[str, int] | None:
        if v is not None and (not v or any(n < 1 for n in v.values())):
            raise ValueError("name at least one profile, each with at least 1 instance per GPU")
        return v

    @field_validator("instance_type")
    @classmethod
    def _accelerated(cls, v: str) -> str:
        if not catalog().instance(v).accelerator:
            raise ValueError(
                "has no accelerator; CPU nodes belong in cpu_pools (system_pool: add-ons)"
            )
        return v

    @field_validator("capacity_reservation_id")
    @classmethod
    def _reservation(cls, v: str | None) -> str | None:
        if v is not None and not RESERVATION_ID.match(v):
            raise ValueError("not a capacity reservation id; e.g. cr-0123456789abcdef0")
        return v

    @model_validator(mode="after")
    def _coherent(self) -> NodePoolConfig:
        if self.elastic and self.min_size == self.max_size:
            raise FieldError(
                ("elastic",),
                True,
                f"min_size = max_size = {self.max_size} is a fixed pool, which no autoscaler "
                "may resize; set min_size below max_size, or elastic: false",
            )
        itype = catalog().instance(self.instance_type)
        if self.efa and itype.efa_interfaces == 0:
            with_efa = [
                n for n, t in catalog().instances.items() if t.efa_interfaces and t.accelerator
            ]
            raise FieldError(
                ("efa",),
                True,
                f"{self.instance_type} has no EFA interfaces; set efa: false or use one of "
                f"{sorted_names(with_efa)}",
            )
        if self.capacity_type == "CAPACITY_BLOCK":
            if itype.capacity_block_usd_per_hour is None:
                raise FieldError(
                    ("capacity_type",),
                    self.capacity_type,
                    f"{self.instance_type} is not sold as a capacity block; use ON_DEMAND or SPOT",
                )
            if self.capacity_reservation_id is None:
                raise FieldError(
                    ("capacity_reservation_id",),
                    MISSING,
                    "required with capacity_type CAPACITY_BLOCK: the block's id, cr-...",
                )
        if self.capacity_type == "SPOT" and self.capacity_reservation_id is not None:
            raise FieldError(
                ("capacity_reservation_id",),
                self.capacity_reservation_id,
                "spot capacity cannot use a reservation; remove it or use ON_DEMAND",
            )
        if self.topology_aware and itype.network_topology_layers is None:
            reporting = [
                n
                for n, t in catalog().instances.items()
                if t.accelerator and t.network_topology_layers
            ]
            raise FieldError(
                ("topology_aware",),
                True,
                f"{self.instance_type} reports no EC2 network topology, so its nodes carry no "
                "topology.k8s.aws/network-node-layer labels and Kueue would find none of them; "
                f"set false or use one of {sorted_names(reporting)}",
            )
        if self.mig is not None:
            self._check_mig(self.mig)
        zones = self.availability_zones
        if self.efa or self.capacity_reservation_id:
            why = "an EFA pool" if self.efa else "a pool on a reservation"
            if zones is None:
                raise FieldError(
                    ("availability_zones",),
                    MISSING,
                    f"{why} sits in one subnet: name exactly one AZ",
                )
            if len(zones) != 1:
                raise FieldError(
                    ("availability_zones",),
                    zones,
                    f"{why} must sit in one subnet (one AZ); list exactly one",
                )
        return self

    def _check_mig(self, layout: dict[str, int]) -> None:
        """The layout exists on the pool's GPUs and fits one GPU: each profile at most its
        count, at most 7 compute slices and 8 memory slices in all (a necessary condition;
        the MIG manager refuses a placement the GPU cannot make when it applies it)."""
        model = catalog().mig_model(self.instance_type)
        acc = catalog().instance(self.instance_type).accelerator
        assert acc is not None  # _accelerated
        if model is None:
            with_mig = [n for n in catalog().instances if catalog().mig_model(n) is not None]
            raise FieldError(
                ("mig",),
                layout,
                f"the {acc.model} GPUs of {self.instance_type} have no MIG partitions; remove "
                f"mig or use one of {sorted_names(with_mig)}",
            )
        gpu_gb = acc.memory_gib / acc.count
        compute = memory = 0
        for profile, count in layout.items():
            if profile not in model.profiles:
                raise FieldError(
                    ("mig", profile),
                    count,
                    f"not a MIG profile of the {acc.model}; one of {', '.join(model.profiles)}",
                )
            if count > model.profiles[profile]:
                raise FieldError(
                    ("mig", profile),
                    count,
                    f"a {acc.model} holds at most {model.profiles[profile]} of {profile}",
                )
            compute += model.compute_slices(profile) * count
            memory += round(model.memory_gb(profile) / (gpu_gb / 8)) * count
        if compute > 7 or memory > 8:
            raise FieldError(
                ("mig",),
                layout,
                f"takes {compute} of a {acc.model}'s 7 compute slices and {memory} of its 8 "
                "memory slices; a layout must fit one GPU",
            )

    @property
    def mig_partitions(self) -> dict[str, int]:
        """Profile -> instances per node (per GPU x the node's GPUs); empty without MIG."""
        gpus = catalog().instance(self.instance_type).gpu_count
        return {p: n * gpus for p, n in (self.mig or {}).items()}

    @property
    def hugepages_2mi_reserved(self) -> int:
        if self.hugepages_2mi_mib is not None:
            return self.hugepages_2mi_mib
        return 5120 if self.efa else 0

    @property
    def uses_placement_group(self) -> bool:
        if self.placement_group is not None:
            return self.placement_group
        return self.efa and self.capacity_reservation_id is None


CpuCapacityType = Literal["ON_DEMAND", "SPOT"]


class CpuPoolConfig(PoolSizes):
    """One CPU managed node group for data work (`cpu_pools.<name>`): text cleaning, dedup,
    tokenization on Ray (KubeRay) workers.

    Always elastic: the Cluster Autoscaler scales it from `min_size` (default 0) up to
    `max_size` as pods that select it pend, and back once they are gone. Its nodes carry
    the label `llm-platform/pool=<name>` and the taint `llm-platform/cpu-pool=<name>:
    NoSchedule`, so only pods that tolerate the taint and select the pool land there, and
    the add-ons keep the system pool. Such pods are admitted by Kueue in the tenant's `cpu`
    flavor and counted against `tenants.<t>.cpu` and `memory_gib`.

    The quota is not capped at what the CPU pools hold: `tenants.<t>.cpu` is also the
    namespace's ResourceQuota, which the CPU requests of the tenant's GPU pods count
    against, and the `cpu` flavor (no node labels) spans the system pool and every CPU pool.
    The pool's `max_size` bounds the nodes: pods of an admitted job beyond it stay Pending
    until nodes free up (a Ray job runs on the workers it has meanwhile).
    """

    instance_type: str = Field(description="A CPU instance type from the catalog.")
    max_size: int = Field(ge=1, description="Most nodes the autoscaler may run (budget cap).")
    capacity_type: CpuCapacityType = Field(
        "ON_DEMAND",
        description=(
            "ON_DEMAND or SPOT; SPOT suits restartable data work (Ray retries the tasks of a "
            "lost node) and needs checkpointing: true."
        ),
    )
    checkpointing: bool = Field(
        False,
        description=(
            "Jobs on this pool resume after losing a node (label `llm-platform/checkpointing`); "
            "required of SPOT pools (the policy pack's spot-requires-checkpointing)."
        ),
    )
    availability_zones: list[str] | None = Field(
        None,
        description="AZs of the pool's subnets; default every AZ of the network (CPU work "
        "needs no single-AZ fabric).",
    )

    _instance = field_validator("instance_type")(known_instance)

    @field_validator("instance_type")
    @classmethod
    def _cpu_only(cls, v: str) -> str:
        if catalog().instance(v).accelerator:
            raise ValueError("is an accelerated type; accelerated pools belong in node_pools")
        return v

    @model_validator(mode="after")
    def _elastic(self) -> CpuPoolConfig:
        if self.min_size == self.max_size:
            raise FieldError(
                ("max_size",),
                self.max_size,
                f"a CPU pool is autoscaled from min_size; min_size = max_size = {self.max_size} "
                "leaves it nothing to scale: raise max_size above min_size",
            )
        if self.capacity_type == "SPOT" and not self.checkpointing:
            raise FieldError(
                ("checkpointing",),
                False,
                "a SPOT pool loses nodes at two minutes' notice: set true once its jobs "
                "resume after losing a node (Ray Data retries lost tasks), or use ON_DEMAND",
            )
        if self.availability_zones is not None and not self.availability_zones:
            raise FieldError(
                ("availability_zones",),
                [],
                "name at least one AZ, or remove the key for every AZ of the network",
            )
        return self
