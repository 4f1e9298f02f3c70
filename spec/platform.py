"""The whole stack: every section, and the rules that tie sections together.

A stack file is read into `PlatformConfig` before any resource is declared.
Defaults are the safe and cheap choice: private endpoint only, one NAT
gateway, no GPU nodes running until a pool asks for them.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from pydantic import Field, field_validator, model_validator

from spec.base import POOL_NAME, Section, known_region
from spec.catalog import catalog
from spec.cluster import ClusterConfig
from spec.errors import MISSING, ConfigError, FieldError, not_in, sorted_names
from spec.images import ImagesConfig
from spec.keys import REGION_KEY
from spec.monitoring import MonitoringConfig
from spec.network import DEFAULT_INTERFACE_ENDPOINTS, NetworkConfig, TagsConfig
from spec.offerings import check_offerings
from spec.pools import CpuPoolConfig, NodePoolConfig, PoolSizes, SystemPoolConfig
from spec.serving import ServingConfig, ServingModelConfig, engine_plan
from spec.sharing import TEAM_NAME, SharedStackConfig
from spec.storage import AdoptionConfig, LustreConfig, StorageConfig
from spec.tenancy import (
    MODELS_BUCKET,
    RESERVED_NAMESPACES,
    TENANT_BUCKETS,
    TENANT_NAME,
    AddonsConfig,
    GuardrailsConfig,
    TenantConfig,
    tenant_uid,
)

LUSTRE_TENANTS_MAX = 4
"""Tenants that can share one file system: two data repository associations each, and FSx
allows 8 per file system (CreateDataRepositoryAssociation, FSx API reference)."""

SYSTEM_POOL = "system"
"""The system pool's `llm-platform/pool` label value: no other pool may take it."""
CPU_POOL_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,29}[a-z0-9])?$")


def _prefix_clash(key: str, ours: tuple[str, int, str], theirs: tuple[str, int, str]) -> FieldError:
    """Two tenants' overlapping prefixes (tenant, index, prefix), as the error at the
    broader of the two (the later where they are equal)."""
    here, there = (theirs, ours) if len(theirs[2]) < len(ours[2]) else (ours, theirs)
    (name, i, prefix), (other, _, other_prefix) = here, there
    buckets = " and ".join(TENANT_BUCKETS) + " buckets"
    if key == "models_prefixes":
        buckets = f"{MODELS_BUCKET} bucket"
    if prefix == other_prefix:
        what = f"is tenant {other}'s prefix too"
        harm = f"{name} and {other} would read and write each other's"
        parent = prefix.rstrip("/").rpartition("/")[0]
        base = f"{parent}/" if parent else prefix
        fix = f"give each its own, e.g. {base}{name}/ and {base}{other}/"
    else:
        what = f"contains tenant {other}'s prefix {other_prefix}"
        harm = f"{name} would read and write {other}'s"
        fix = f"narrow it to one of {name}'s own, e.g. {prefix}{name}/"
    return FieldError(
        ("tenants", name, key, i),
        prefix,
        f"{what} (tenants.{other}.{key}): {harm} keys in the {buckets}; {fix} (no "
        "tenant's prefix may start with another tenant's)",
    )


class PlatformConfig(Section):
    """Everything under the `llm-platform:` namespace, plus `aws:region`."""

    region: str = Field(description="`aws:region`: the region the stack deploys to.")
    tags: TagsConfig
    network: NetworkConfig
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    system_pool: SystemPoolConfig = Field(default_factory=SystemPoolConfig)
    node_pools: dict[str, NodePoolConfig] = Field(
        default_factory=dict, description="Accelerated node groups by name."
    )
    cpu_pools: dict[str, CpuPoolConfig] = Field(
        default_factory=dict,
        description="Tainted CPU node groups for data work by name, autoscaled from "
        "min_size; pods select one by `llm-platform/pool` and tolerate "
        "`llm-platform/cpu-pool`, and Kueue admits them in the tenant's `cpu` flavor.",
    )
    storage: StorageConfig | None = Field(None, description="Buckets and file systems.")
    guardrails: GuardrailsConfig = Field(default_factory=lambda: GuardrailsConfig())
    addons: AddonsConfig = Field(default_factory=AddonsConfig)
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)
    tenants: dict[str, TenantConfig] = Field(
        default_factory=dict,
        description="Teams by name; each name is also its namespace. No tenant's "
        "`s3_prefixes` may be, contain or lie under another tenant's, nor its "
        "`models_prefixes` another's `models_prefixes` (grants are by prefix: `teams/` "
        "reaches `teams/chat/`; `teams/chat/` and `teams/chatbot/` are apart). A team "
        "stack's tenants are granted only in its own buckets, so its prefixes are checked "
        "among its own tenants.",
    )
    serving: ServingConfig | None = Field(
        None, description="Model serving (inference stack); none: no model servers."
    )
    images: ImagesConfig = Field(default_factory=ImagesConfig)
    shared_stack: SharedStackConfig | None = Field(
        None, description="Use the network (and cluster) of this stack instead of creating one."
    )
    share_outputs: bool = Field(
        False,
        description="Export what team stacks read of this stack's network and cluster "
        "(`shared_stack`).",
    )

    _region = field_validator("region")(known_region)

    @field_validator("tenants")
    @classmethod
    def _tenant_names(cls, v: dict[str, TenantConfig]) -> dict[str, TenantConfig]:
        for name in v:
            if not TENANT_NAME.match(name):
                raise FieldError(
                    (name,),
                    name,
                    "tenant names are namespace names: lowercase letters, digits and '-', "
                    "up to 32, starting with a letter",
                )
            if name in RESERVED_NAMESPACES:
                raise FieldError(
                    (name,),
                    name,
                    f"is a system namespace; reserved: {sorted_names(RESERVED_NAMESPACES)}",
                )
        return v

    @field_validator("node_pools")
    @classmethod
    def _pool_names(cls, v: dict[str, NodePoolConfig]) -> dict[str, NodePoolConfig]:
        for name in v:
            if not POOL_NAME.match(name):
                raise FieldError(
                    (name,), name, "pool names are lowercase letters, digits and '-', up to 31"
                )
        return v

    @field_validator("cpu_pools")
    @classmethod
    def _cpu_pool_names(cls, v: dict[str, CpuPoolConfig]) -> dict[str, CpuPoolConfig]:
        for name in v:
            if not CPU_POOL_NAME.match(name):
                raise FieldError(
                    (name,),
                    name,
                    "CPU pool names are DNS labels: lowercase letters, digits and '-', up to "
                    "31, starting with a letter and ending with a letter or digit",
                )
            if name == SYSTEM_POOL:
                raise FieldError(
                    (name,), name, "is the system pool's label; name the CPU pool otherwise"
                )
        return v

    @model_validator(mode="after")
    def _placement(self) -> PlatformConfig:
        zones = self.network.availability_zones
        for i, zone in enumerate(zones):
            if not zone.startswith(self.region):
                raise FieldError(
                    ("network", "availability_zones", i),
                    zone,
                    f"is not in {REGION_KEY} {self.region}",
                )
        for name, pool in self.node_pools.items():
            for i, zone in enumerate(pool.availability_zones or []):
                if zone not in zones:
                    raise FieldError(
                        ("node_pools", name, "availability_zones", i),
                        zone,
                        f"not one of network.availability_zones ({', '.join(zones)})",
                    )
        for name, cpu_pool in self.cpu_pools.items():
            if name in self.node_pools:
                raise FieldError(
                    ("cpu_pools", name),
                    name,
                    "is also a node_pools name: both label their nodes llm-platform/pool, so "
                    "give the CPU pool another name",
                )
            for i, zone in enumerate(cpu_pool.availability_zones or []):
                if zone not in zones:
                    raise FieldError(
                        ("cpu_pools", name, "availability_zones", i),
                        zone,
                        f"not one of network.availability_zones ({', '.join(zones)})",
                    )
        check_offerings(self)
        self._mig()
        self._release_versions()
        if self.storage is not None:
            self._storage_refs(self.storage)
        self._adoption()
        self._tenant_refs()
        self._tenant_prefixes()
        if self.serving is not None:
            self._serving_refs(self.serving)
        return self

    def _mig(self) -> None:
        """MIG pools need the GPU operator (its MIG manager applies the layout), and the single
        strategy a single profile per pool (every partition is then `nvidia.com/gpu`)."""
        for name, pool in self.node_pools.items():
            if pool.topology_aware and self.on_shared_cluster:
                raise FieldError(
                    ("node_pools", name, "topology_aware"),
                    True,
                    "a team stack's flavors cannot name a Topology: Topologies are cluster-"
                    "wide and the shared stack declares none for team pools; set false",
                )
            if pool.mig is not None and self.on_shared_cluster:
                raise FieldError(
                    ("node_pools", name, "mig"),
                    pool.mig,
                    "the MIG manager's configs are the shared stack's GPU operator's: a team "
                    "stack's pool cannot add one; remove mig",
                )
            if pool.mig is None:
                continue
            if not self.addons.gpu_operator:
                raise FieldError(
                    ("node_pools", name, "mig"),
                    pool.mig,
                    "the GPU operator's MIG manager partitions the GPUs: set "
                    "addons.gpu_operator true, or remove mig",
                )
            if self.addons.mig_strategy == "single" and len(pool.mig) > 1:
                raise FieldError(
                    ("node_pools", name, "mig"),
                    pool.mig,
                    "addons.mig_strategy single advertises every partition as nvidia.com/gpu: "
                    "one profile per pool, or mig_strategy mixed",
                )

    def _release_versions(self) -> None:
        """An AMI release is built for one Kubernetes minor: the cluster's."""
        pools: list[tuple[tuple[str | int, ...], PoolSizes]] = [
            (("system_pool",), self.system_pool)
        ]
        pools += [(("node_pools", n), p) for n, p in self.node_pools.items()]
        pools += [(("cpu_pools", n), p) for n, p in self.cpu_pools.items()]
        for where, pool in pools:
            release = pool.release_version
            if release is None:
                continue
            minor = ".".join(release.split(".")[:2])
            if minor != self.cluster.version:
                raise FieldError(
                    (*where, "release_version"),
                    release,
                    f"is an AMI release for Kubernetes {minor}, not the cluster's "
                    f"{self.cluster.version}: use a {self.cluster.version}.x release",
                )

    @property
    def adopts_network(self) -> bool:
        """The VPC is someone else's: adopted by id, or a shared stack's."""
        shared = self.shared_stack is not None and self.shared_stack.network
        return self.network.existing is not None or shared

    def interface_endpoints(self) -> list[str]:
        """The services the stack's own VPC reaches through interface endpoints: none in a
        VPC it adopts (its owner's); `network.interface_endpoints`, else the defaults and,
        where the stack serves, Secrets Manager (the gateway keys), and where it has a
        `models` bucket or shares its network, KMS (the promotion job signs revisions)."""
        if self.adopts_network:
            return []
        if self.network.interface_endpoints is not None:
            return list(self.network.interface_endpoints)
        serving = ["secretsmanager"] if self.serving is not None else []
        storage = self.storage
        # A shared stack's too: its team stacks' promotion jobs sign through it.
        promotes = storage is not None and MODELS_BUCKET in storage.buckets
        signing = ["kms"] if promotes or self.share_outputs else []
        return [*DEFAULT_INTERFACE_ENDPOINTS, *serving, *signing]

    @property
    def adopts_cluster(self) -> bool:
        shared = self.shared_stack is not None and self.shared_stack.cluster
        return self.cluster.existing is not None or shared

    @property
    def on_shared_cluster(self) -> bool:
        """A team stack on a shared stack's cluster: the shared stack owns what is
        cluster-wide (add-ons, Kueue's cohort, priority classes, monitoring)."""
        return self.shared_stack is not None and self.shared_stack.cluster

    def team_name(self, stack: str) -> str:
        """A team stack's name on its shared cluster (`shared_stack.team`, else the stack's
        name); empty where the stack owns its cluster."""
        if not self.on_shared_cluster:
            return ""
        assert self.shared_stack is not None
        name = self.shared_stack.team or stack
        if not re.match(TEAM_NAME, name):
            raise ConfigError(
                ("shared_stack", "team"),
                MISSING,
                f"the stack's name {name!r} is no team name (lowercase letters, digits and "
                "'-', at most 20): set one; it prefixes the stack's namespaces and Kueue "
                "objects",
            )
        return name

    def _team(self) -> None:
        """What a team stack cannot bring to a shared cluster: the cluster-wide parts."""
        shared = self.shared_stack
        assert shared is not None
        if self.serving is not None:
            raise FieldError(
                ("serving",),
                "set",
                f"model serving needs KEDA, which is cluster-wide: serve from the shared "
                f"stack ({shared.name}) or a stack with its own cluster; remove it here",
            )
        if self.storage is not None and self.storage.model_weights is not None:
            raise FieldError(
                ("storage", "model_weights"),
                self.storage.model_weights.bucket,
                "the S3 CSI driver is cluster-wide and its role reads one bucket: mount "
                "model weights on a stack with its own cluster; remove it here",
            )
        if self.monitoring.enabled and "enabled" in self.monitoring.model_fields_set:
            raise FieldError(
                ("monitoring", "enabled"),
                True,
                f"monitoring is cluster-wide and the shared stack's ({shared.name}); set false",
            )

    def _adoption(self) -> None:
        shared = self.shared_stack
        if self.on_shared_cluster:
            self._team()
        if shared is not None and shared.network and self.network.existing is not None:
            raise FieldError(
                ("network", "existing"),
                self.network.existing.vpc_id,
                f"the network comes from shared_stack {shared.name}; remove one of the two",
            )
        if shared is not None and shared.network and self.network.interface_endpoints:
            raise FieldError(
                ("network", "interface_endpoints"),
                self.network.interface_endpoints,
                f"the VPC's endpoints are shared_stack {shared.name}'s: list them there",
            )
        if shared is not None and shared.cluster and self.cluster.existing is not None:
            raise FieldError(
                ("cluster", "existing"),
                self.cluster.existing.name,
                f"the cluster comes from shared_stack {shared.name}; remove one of the two",
            )
        if self.cluster.existing is not None and not self.adopts_network:
            raise FieldError(
                ("cluster", "existing"),
                self.cluster.existing.name,
                "an adopted cluster lives in a VPC the stack does not create: set "
                "network.existing (or shared_stack) to that VPC",
            )
        if self.share_outputs and self.adopts_cluster:
            raise FieldError(
                ("share_outputs",),
                True,
                "only a stack that creates its cluster shares it; a team stack reads a "
                "shared stack's outputs instead",
            )
        existing = self.network.existing
        if (
            existing is not None
            and self.serving is not None
            and self.serving.scheme == "internet-facing"
        ):
            missing = [
                z for z in self.network.availability_zones if z not in existing.public_subnets
            ]
            if missing:
                raise FieldError(
                    ("network", "existing", "public_subnets"),
                    sorted(existing.public_subnets),
                    f"an internet-facing load balancer needs a public subnet in "
                    f"{', '.join(missing)}",
                )

    def pool_gpus(self, pool_name: str) -> int:
        """GPUs the pool supplies at its max size."""
        pool = self.node_pools[pool_name]
        return catalog().instance(pool.instance_type).gpu_count * pool.max_size

    def _serving_refs(self, serving: ServingConfig) -> None:
        for i, model in enumerate(serving.models):
            here: tuple[str | int, ...] = ("serving", "models", i)
            pool = self.node_pools.get(model.node_pool)
            if pool is None:
                raise FieldError(
                    (*here, "node_pool"),
                    model.node_pool,
                    not_in("pool", "node_pools", self.node_pools),
                )
            gpus = catalog().instance(pool.instance_type).gpu_count
            if model.mig_profile is not None or pool.mig is not None:
                self._serving_partition(here, model, pool)
            if model.gpus_per_replica > gpus:
                raise FieldError(
                    (*here, "gpus_per_replica"),
                    model.gpus_per_replica,
                    f"a replica stays on one node; {pool.instance_type} of pool "
                    f"{model.node_pool} has {gpus} GPUs",
                )
            if gpus % model.gpus_per_replica:
                raise FieldError(
                    (*here, "gpus_per_replica"),
                    model.gpus_per_replica,
                    f"must divide the {gpus} GPUs of {pool.instance_type} (tensor parallel size)",
                )
            try:
                engine_plan(model, pool.instance_type)
            except FieldError as e:
                raise FieldError((*here, *e.path), e.value, e.expected) from None
        self._serving_capacity(serving)
        cert_region = serving.certificate_arn.split(":")[3]
        if cert_region != self.region:
            raise FieldError(
                ("serving", "certificate_arn"),
                serving.certificate_arn,
                f"is a certificate of {cert_region}; an ALB in {self.region} takes an ACM "
                f"certificate of its own region: request or import one in {self.region}",
            )
        weights = self.storage.model_weights if self.storage else None
        if weights is None or "serving" not in weights.namespaces:
            raise FieldError(
                ("serving",),
                "models",
                "serves weights from the model-weights volume: set storage.model_weights "
                "with namespaces including serving",
            )
        if "serving" not in self.tenants:
            raise FieldError(
                ("serving",), "models", "runs in the `serving` tenant: declare tenants.serving"
            )
        self._serving_quota(serving)
        if not self.addons.load_balancer_controller:
            raise FieldError(
                ("addons", "load_balancer_controller"),
                False,
                "serving's Ingress needs the AWS Load Balancer Controller; set it to true",
            )

    @staticmethod
    def _serving_partition(
        here: tuple[str | int, ...], model: ServingModelConfig, pool: NodePoolConfig
    ) -> None:
        """A model on a MIG pool runs on one of its partitions, and one on a partition on a
        MIG pool that has it."""
        layout = pool.mig or {}
        if model.mig_profile is None:
            raise FieldError(
                (*here, "mig_profile"),
                MISSING,
                f"pool {model.node_pool} is partitioned by MIG: a replica runs on one "
                f"partition, one of {', '.join(layout)}",
            )
        if model.mig_profile not in layout:
            where = f"its layout has {', '.join(layout)}" if layout else "it has no mig layout"
            raise FieldError(
                (*here, "mig_profile"),
                model.mig_profile,
                f"not a partition of pool {model.node_pool} ({where})",
            )
        if model.gpus_per_replica != 1 or model.nodes_per_replica != 1:
            raise FieldError(
                (*here, "gpus_per_replica"),
                model.gpus_per_replica,
                "a replica on a MIG partition takes one partition of one node: "
                "gpus_per_replica 1, nodes_per_replica 1",
            )

    def _serving_demand(
        self, serving: ServingConfig, multi_node: bool | None = None
    ) -> dict[str, tuple[list[int], int, str]]:
        """Pool -> (indexes of its models, GPUs they need at max_replicas, their list);
        `multi_node` True/False: only the models over several nodes, or on one.

        The list reads `llama-8b 8 x 1, llama-70b 4 x 4`: max_replicas x gpus_per_replica
        (x nodes_per_replica where above 1); a live canary adds its replicas.
        """
        on_pool: dict[str, list[int]] = {}
        for i, model in enumerate(serving.models):
            if multi_node is None or (model.nodes_per_replica > 1) == multi_node:
                on_pool.setdefault(model.node_pool, []).append(i)

        def replicas(m: ServingModelConfig) -> int:
            canary = m.live_canary
            return m.max_replicas + (canary.replicas if canary is not None else 0)

        def per_replica(m: ServingModelConfig) -> Fraction:
            """GPUs a replica holds: a MIG partition is its share of one GPU."""
            layout = self.node_pools[m.node_pool].mig or {}
            if m.mig_profile is not None and m.mig_profile in layout:
                return Fraction(1, layout[m.mig_profile])
            return Fraction(m.gpus_per_replica * m.nodes_per_replica)

        def term(m: ServingModelConfig) -> str:
            if m.mig_profile is not None:
                return f"{m.name} {replicas(m)} x {per_replica(m)}"
            nodes = f" x {m.nodes_per_replica}" if m.nodes_per_replica > 1 else ""
            return f"{m.name} {replicas(m)} x {m.gpus_per_replica}{nodes}"

        demand = {}
        for pool_name, indexes in on_pool.items():
            models = [serving.models[i] for i in indexes]
            need = math.ceil(sum(replicas(m) * per_replica(m) for m in models))
            demand[pool_name] = (indexes, need, ", ".join(term(m) for m in models))
        return demand

    def _serving_capacity(self, serving: ServingConfig) -> None:
        """The replicas of a pool's models fit on the pool at its max size."""
        for pool_name, (indexes, need, models) in self._serving_demand(serving).items():
            have = self.pool_gpus(pool_name)
            if need > have:
                last = indexes[-1]
                raise FieldError(
                    ("serving", "models", last, "max_replicas"),
                    serving.models[last].max_replicas,
                    f"the models on pool {pool_name} need up to {need} GPUs at max_replicas "
                    f"(replicas x GPUs: {models}), but {pool_name} has {have} at max_size; "
                    f"lower max_replicas or raise node_pools.{pool_name}.max_size",
                )

    def _serving_quota(self, serving: ServingConfig) -> None:
        """The replicas of a pool's models fit in the `serving` tenant's GPUs of that pool.

        Model servers are Deployments in the `serving` namespace; Kueue admits their pods
        from serving_gpus (the queue's, unlent), and the namespace's ResourceQuota
        (serving_gpus) would refuse the pods beyond it at run time.
        """
        queued = self.tenants["serving"].gpu_quota
        for pool_name, (_, need, models) in self._serving_demand(serving, True).items():
            have = queued.get(pool_name)
            if need > (have or 0):
                raise FieldError(
                    ("tenants", "serving", "gpu_quota", pool_name),
                    MISSING if have is None else have,
                    f"the multi-node models on pool {pool_name} need up to {need} GPUs at "
                    f"max_replicas ({models}); Kueue admits their groups from the serving "
                    f"queue, which holds {have or 0}: set it to {need} or lower max_replicas",
                )
        granted = self.tenants["serving"].serving_gpus
        for pool_name, (_, need, models) in self._serving_demand(serving, False).items():
            have = granted.get(pool_name)
            if need > (have or 0):
                raise FieldError(
                    ("tenants", "serving", "serving_gpus", pool_name),
                    MISSING if have is None else have,
                    f"the models on pool {pool_name} need up to {need} GPUs at max_replicas "
                    f"(replicas x GPUs: {models}), but the serving namespace's quota holds "
                    f"{have or 0} of {pool_name} and would refuse the pods beyond; set it to "
                    f"{need} or lower max_replicas",
                )

    def _tenant_prefixes(self) -> None:
        """No tenant's key prefix is, or lies under or above, another tenant's: a grant on
        `teams/` is a grant on every key under `teams/chat/` too. Checked per set of buckets
        (`s3_prefixes` in datasets and checkpoints, `models_prefixes` in models), between
        the stack's own tenants, the only ones granted anything in its buckets. Prefixes end
        in `/`, so `teams/chat/` and `teams/chatbot/` are apart."""
        for key in ("s3_prefixes", "models_prefixes"):
            seen: list[tuple[str, int, str]] = []
            for name, tenant in self.tenants.items():
                for i, prefix in enumerate(getattr(tenant, key)):
                    for other in seen:
                        theirs = other[2]
                        if other[0] != name and (
                            prefix.startswith(theirs) or theirs.startswith(prefix)
                        ):
                            raise _prefix_clash(key, (name, i, prefix), other)
                    seen.append((name, i, prefix))

    def _tenant_refs(self) -> None:
        pools = self.node_pools
        promised: dict[str, int] = {}
        owners: dict[int, str] = {}
        for name, tenant in self.tenants.items():
            uid = tenant_uid(name, tenant)
            if uid in owners:
                raise FieldError(
                    ("tenants", name, "uid"),
                    uid,
                    f"is tenant {owners[uid]}'s too: a uid owns one tenant's files; set "
                    "`uid` on one of them",
                )
            owners[uid] = name
        for name, tenant in self.tenants.items():
            claims = [("gpu_quota", p, n) for p, n in tenant.gpu_quota.items()]
            claims += [("serving_gpus", p, n) for p, n in tenant.serving_gpus.items()]
            for key, pool, gpus in claims:
                if pool not in pools:
                    raise FieldError(
                        ("tenants", name, key, pool),
                        pool,
                        not_in("pool", "node_pools", pools),
                    )
                promised[pool] = promised.get(pool, 0) + gpus
                if promised[pool] > self.pool_gpus(pool):
                    raise FieldError(
                        ("tenants", name, key, pool),
                        gpus,
                        f"tenants are promised {promised[pool]} GPUs of {pool}, which supplies "
                        f"{self.pool_gpus(pool)} at max_size; lower the quotas or raise max_size",
                    )
            if tenant.s3_prefixes:
                buckets = self.storage.buckets if self.storage else {}
                missing = [b for b in TENANT_BUCKETS if b not in buckets]
                if missing:
                    raise FieldError(
                        ("tenants", name, "s3_prefixes"),
                        tenant.s3_prefixes,
                        f"needs storage.buckets {' and '.join(missing)}; remove the prefixes "
                        "or add the buckets",
                    )

    def lustre_tenants(self) -> list[str]:
        """The tenants that mount the file system, each its own directory (`/tenants/NAME`,
        linked to its first s3_prefix): every namespace of `storage.lustre.mount_namespaces`
        when they are all tenants and more than one; empty otherwise (one team, the whole
        file system). The validator refuses other namespaces beside several tenants."""
        lustre = self.storage.lustre if self.storage is not None else None
        if lustre is None or not all(ns in self.tenants for ns in lustre.mount_namespaces):
            return []
        names = list(dict.fromkeys(lustre.mount_namespaces))
        # One tenant's file system is its own: the whole of it, as for one team.
        return names if len(names) > 1 else []

    def _lustre_tenants(self, lustre: LustreConfig) -> None:
        here = ("storage", "lustre", "mount_namespaces")
        tenants = [ns for ns in lustre.mount_namespaces if ns in self.tenants]
        others = [ns for ns in lustre.mount_namespaces if ns not in self.tenants]
        if len(set(tenants)) > 1 and others:
            raise FieldError(
                here,
                lustre.mount_namespaces,
                f"mixes tenants ({', '.join(tenants)}) with other namespaces "
                f"({', '.join(others)}), which would mount the whole file system, tenants' "
                "directories included; mount tenants only, or make them tenants",
            )
        if len(set(tenants)) > LUSTRE_TENANTS_MAX:
            raise FieldError(
                here,
                lustre.mount_namespaces,
                f"{len(set(tenants))} tenants: each takes two data repository associations "
                f"(datasets, checkpoints) and a file system has at most 8, so at most "
                f"{LUSTRE_TENANTS_MAX} tenants share one",
            )
        for name in tenants if len(set(tenants)) > 1 else []:
            if not self.tenants[name].s3_prefixes:
                raise FieldError(
                    ("tenants", name, "s3_prefixes"),
                    MISSING,
                    "the tenant mounts the file system (storage.lustre.mount_namespaces): its "
                    "directory imports from and exports to its first prefix; add one",
                )

    def _lustre_efa(self, lustre: LustreConfig, pool: NodePoolConfig) -> None:
        perf = catalog().storage.lustre_performance
        if lustre.efa and not (pool.efa and pool.instance_type in perf.efa_clients):
            raise FieldError(
                ("storage", "lustre", "efa"),
                True,
                f"pool {lustre.node_pool} is not an EFA client of FSx (it needs efa: true and "
                f"one of {', '.join(perf.efa_clients)}; it has efa: "
                f"{str(pool.efa).lower()}, {pool.instance_type}); set efa: false",
            )
        if lustre.gpudirect_storage and pool.instance_type not in perf.gds_clients:
            raise FieldError(
                ("storage", "lustre", "gpudirect_storage"),
                True,
                f"FSx serves GPUDirect Storage to {', '.join(perf.gds_clients)} only; pool "
                f"{lustre.node_pool} is {pool.instance_type}",
            )

    def _storage_refs(self, storage: StorageConfig) -> None:
        buckets = storage.buckets
        replicated = [k for k, b in buckets.items() if b.replicate]
        target = storage.replication.region
        if replicated and target is None:
            raise FieldError(
                ("storage", "replication", "region"),
                MISSING,
                f"buckets {', '.join(replicated)} replicate: name the disaster-recovery region",
            )
        if target is not None and target == self.region:
            raise FieldError(
                ("storage", "replication", "region"),
                target,
                f"is the stack's own region; replicate to another region than {self.region}",
            )
        if storage.adoption is not None:
            self._adoption_refs(storage, storage.adoption)
        refs: list[tuple[tuple[str | int, ...], str]] = []
        if storage.lustre is not None:
            lustre = storage.lustre
            refs += [
                (("storage", "lustre", "datasets_bucket"), lustre.datasets_bucket),
                (("storage", "lustre", "checkpoints_bucket"), lustre.checkpoints_bucket),
            ]
            pool = self.node_pools.get(lustre.node_pool)
            if pool is None:
                raise FieldError(
                    ("storage", "lustre", "node_pool"),
                    lustre.node_pool,
                    not_in("pool", "node_pools", self.node_pools),
                )
            if len(self.pool_zones(pool)) != 1:
                raise FieldError(
                    ("storage", "lustre", "node_pool"),
                    lustre.node_pool,
                    "spans several AZs; the file system sits in one subnet beside one "
                    "single-AZ pool",
                )
            self._lustre_tenants(lustre)
            self._lustre_efa(lustre, pool)
        if storage.model_weights is not None:
            refs.append((("storage", "model_weights", "bucket"), storage.model_weights.bucket))
        for path, key in refs:
            if key not in buckets:
                raise FieldError(path, key, not_in("bucket", "storage.buckets", buckets))

    def _adoption_refs(self, storage: StorageConfig, adoption: AdoptionConfig) -> None:
        here = ("storage", "adoption")
        if adoption.kms_key_region != self.region:
            raise FieldError(
                (*here, "kms_key_arn"),
                adoption.kms_key_arn,
                f"is a key in {adoption.kms_key_region}; adopted buckets in {self.region} are "
                f"encrypted with a key of {self.region} (the source's replica key)",
            )
        for key in adoption.buckets:
            if key not in storage.buckets:
                raise FieldError(
                    (*here, "buckets", key),
                    key,
                    not_in("bucket", "storage.buckets", storage.buckets),
                )
            if key == "logs":
                raise FieldError(
                    (*here, "buckets", key),
                    key,
                    "the logs bucket is never replicated; let the stack create its own",
                )
        # Two Bucket resources on one physical bucket would import it twice and fight
        # over its lifecycle and policy.
        named: dict[str, str] = {}
        for key in storage.buckets:
            name = storage.bucket_name(key)
            if name in named:
                adopted = key if storage.adopted(key) else named[name]
                other = named[name] if adopted == key else key
                raise FieldError(
                    (*here, "buckets", adopted),
                    name,
                    f"is already the name of bucket {other}; adopt each replica into one "
                    "bucket only",
                )
            named[name] = key

    def pool_zones(self, pool: NodePoolConfig | CpuPoolConfig) -> list[str]:
        return pool.availability_zones or list(self.network.availability_zones)
