"""Storage bandwidth of a training pool: what its jobs need and what FSx and S3 deliver.

Pure arithmetic on AWS's published figures (`storage.lustre_performance` and
`storage.s3_performance` in the catalog, with their sources and dates), shared by
`llmp synth` (which prints the lines), the `fsx-feeds-gpus` policy rule (which refuses a
plan whose file system cannot feed its GPUs or write its checkpoints in time) and the
docs. Decimal units throughout: 1 GB = 10^9 bytes, 1 MB/s per TiB as FSx states it.

**Needed.** Reading: tokens per second per GPU x GPUs per node x bytes per token, times
the data loader's prefetch factor (it reads ahead of what the GPUs consume, so its queue
refills after a stall). Checkpointing: one checkpoint's bytes within the time a write may
take; every rank writes its own shard, so each node writes its share.

**Delivered by FSx for Lustre.**
- The file system in total: capacity (TiB) x the tier's MB/s per TiB, the disk
  throughput a read not in the servers' cache and every write are held to
  (ssd-storage.html). Reads from cache may reach the network baseline (1300 MB/s/TiB at
  the 500 tier); the model does not count on them.
- One client: 100 Gbps over ENA (and 5 Gbps per object storage server, so a small file
  system caps it lower), 700 Gbps over EFA, 1200 Gbps with GPUDirect Storage
  (performance.html).
- Per node when the job's nodes read or write at once: the lesser of the client's cap and
  an equal share of the file system's total; alone: the lesser of the cap and the total.

**Delivered by S3** to a node reading it directly (Mountpoint, the S3 connector for
PyTorch): one network card's share of the instance's bandwidth (S3 is IP traffic, which
takes the ENA interface of card 0; the EFA interfaces after it are efa-only), with S3's
request rates per prefix as the other limit (5,500 GET/s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from spec.catalog import catalog

if TYPE_CHECKING:
    from spec.platform import PlatformConfig

ClientPath = Literal["ena", "efa", "efa_gds"]
GIB_PER_TIB = 1024
ENA_STORAGE_PER_SERVER_GIB = 2400
"""Storage per object storage server of a PERSISTENT_2 SSD file system without EFA."""

_PATH_NAMES: dict[ClientPath, str] = {"ena": "ENA", "efa": "EFA", "efa_gds": "EFA with GDS"}


def rate(gbytes_per_second: float) -> str:
    """`23.4 GB/s`, `204 MB/s`, `30.4 kB/s`: three significant figures, decimal units."""
    value, unit = gbytes_per_second, "GB/s"
    for smaller in ("MB/s", "kB/s"):
        if value >= 1:
            break
        value, unit = value * 1000, smaller
    return f"{value:,.3g} {unit}" if value < 1000 else f"{value:,.0f} {unit}"


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass(frozen=True)
class LustreThroughput:
    """What one FSx for Lustre PERSISTENT_2 SSD file system delivers."""

    capacity_gib: int
    throughput_per_tib: int
    efa: bool = False
    gpudirect_storage: bool = False

    @property
    def tib(self) -> float:
        return self.capacity_gib / GIB_PER_TIB

    @property
    def total(self) -> float:
        """GB/s of the whole file system: disk throughput, reads and writes alike."""
        return self.tib * self.throughput_per_tib / 1000

    @property
    def cache_total(self) -> float:
        """GB/s of reads served from the servers' cache (network baseline)."""
        baseline = catalog().storage.lustre_performance.network_baseline_mbps_per_tib
        return self.tib * baseline[self.throughput_per_tib] / 1000

    @property
    def servers(self) -> int:
        perf = catalog().storage.lustre_performance
        per_server = (
            perf.efa_capacity_step_gib[self.throughput_per_tib]
            if self.efa
            else ENA_STORAGE_PER_SERVER_GIB
        )
        return max(1, -(-self.capacity_gib // per_server))

    @property
    def path(self) -> ClientPath:
        if self.efa and self.gpudirect_storage:
            return "efa_gds"
        return "efa" if self.efa else "ena"

    @property
    def per_client(self) -> float:
        """GB/s one client instance can move over its path."""
        perf = catalog().storage.lustre_performance
        gbps = perf.per_client_gbps[self.path]
        if self.path == "ena":
            gbps = min(gbps, perf.ena_per_server_gbps * self.servers)
        return gbps / 8

    def per_node(self, nodes: int) -> float:
        """GB/s each of `nodes` clients gets when all move data at once."""
        return min(self.per_client, self.total / max(nodes, 1))

    def alone(self) -> float:
        """GB/s one client gets with the file system to itself."""
        return min(self.per_client, self.total)


@dataclass(frozen=True)
class TrainingDemand:
    """What one job of `nodes` nodes asks of storage."""

    nodes: int
    gpus_per_node: int
    tokens_per_second_per_gpu: float
    bytes_per_token: float
    prefetch_factor: float
    checkpoint_gb: float
    write_seconds: float

    @property
    def read_per_node(self) -> float:
        """GB/s each node must read."""
        per_gpu = self.tokens_per_second_per_gpu * self.bytes_per_token * self.prefetch_factor
        return per_gpu * self.gpus_per_node / 1e9

    @property
    def write_total(self) -> float:
        """GB/s the job must write for a checkpoint to finish within `write_seconds`."""
        return self.checkpoint_gb / self.write_seconds

    @property
    def write_per_node(self) -> float:
        return self.write_total / max(self.nodes, 1)


@dataclass(frozen=True)
class BandwidthPlan:
    """A pool's nodes, its file system, S3 beside it, and (optionally) a job's demand."""

    pool: str
    instance_type: str
    nodes: int
    lustre: LustreThroughput
    demand: TrainingDemand | None = None

    @property
    def s3_per_node(self) -> float:
        """GB/s one node reaches S3 at: one network card's share of its bandwidth."""
        spec = catalog().instance(self.instance_type)
        return spec.network_gbps / spec.network_cards / 8

    def write_seconds(self) -> float | None:
        """Seconds one checkpoint takes to write at what the file system delivers."""
        if self.demand is None or not self.demand.checkpoint_gb:
            return None
        return self.demand.checkpoint_gb / (self.lustre.per_node(self.nodes) * self.nodes)

    def problems(self) -> list[str]:
        """Why the file system cannot feed the job's GPUs or write its checkpoints in time."""
        demand = self.demand
        if demand is None:
            return []
        out = []
        delivered = self.lustre.per_node(self.nodes)
        if demand.read_per_node > delivered:
            out.append(
                f"reading needs {rate(demand.read_per_node)} per node but FSx delivers "
                f"{rate(delivered)} to each of {self.nodes} nodes; raise the capacity or "
                "throughput_per_tib, or set efa"
            )
        written = self.write_seconds()
        if written is not None and written > demand.write_seconds:
            out.append(
                f"a {demand.checkpoint_gb:,.0f} GB checkpoint takes {duration(written)} to "
                f"write at {rate(delivered * self.nodes)}, over its "
                f"{duration(demand.write_seconds)}; it needs {rate(demand.write_total)}: raise "
                "the capacity or throughput_per_tib, or write less often"
            )
        return out

    def lines(self) -> list[str]:
        """The model, one finding a line (`llmp synth` prints them)."""
        fs, n = self.lustre, self.nodes
        perf = catalog().storage.lustre_performance
        s3 = catalog().storage.s3_performance
        at_once = (
            f"{rate(fs.per_node(n))} with all {n} at once, {rate(fs.alone())} alone"
            if n > 1
            else rate(fs.alone())
        )
        out = [
            f"FSx: {fs.capacity_gib:,} GiB at {fs.throughput_per_tib} MB/s/TiB, "
            f"{_PATH_NAMES[fs.path]} clients: {rate(fs.total)} in total "
            f"({rate(fs.cache_total)} from cache), at most {rate(fs.per_client)} per client",
            f"FSx per node of {self.pool} ({n} x {self.instance_type}): {at_once}",
            f"S3 per node: {rate(self.s3_per_node)} (one network card), "
            f"{rate(self.s3_per_node * n)} in total; "
            f"{s3.get_per_prefix_per_second:,} GET/s per prefix",
        ]
        if fs.path == "ena" and self.instance_type in perf.efa_clients and fs.total > 10:
            out.append(
                f"FSx: over 10 GB/s in total and {self.instance_type} is an EFA client: AWS "
                "recommends efa: true (performance.html)"
            )
        demand = self.demand
        if demand is None:
            return out
        out.append(
            f"read: {rate(demand.read_per_node)} per node needed "
            f"({demand.tokens_per_second_per_gpu:,.0f} tokens/s/GPU x "
            f"{demand.gpus_per_node} x {demand.bytes_per_token:g} B x prefetch "
            f"{demand.prefetch_factor:g}), {rate(fs.per_node(n))} delivered"
        )
        written = self.write_seconds()
        if written is not None:
            out.append(
                f"checkpoint write: {demand.checkpoint_gb:,.0f} GB within "
                f"{duration(demand.write_seconds)} needs {rate(demand.write_total)} "
                f"({rate(demand.write_per_node)} per node); written in {duration(written)}"
            )
        return out


def job_nodes(desired_size: int, max_size: int, configured: int | None) -> int:
    """Nodes a job spans: as configured, else the pool's desired size (max when 0)."""
    return configured or desired_size or max_size


def bandwidth_plan(cfg: PlatformConfig) -> BandwidthPlan | None:
    """The stack's bandwidth model: its file system beside its pool (none without one)."""
    lustre = cfg.storage.lustre if cfg.storage is not None else None
    if lustre is None:
        return None
    pool = cfg.node_pools[lustre.node_pool]
    io = lustre.demand
    nodes = job_nodes(pool.desired_size, pool.max_size, io.nodes if io else None)
    demand = None
    if io is not None:
        demand = TrainingDemand(
            nodes=nodes,
            gpus_per_node=catalog().instance(pool.instance_type).gpu_count,
            tokens_per_second_per_gpu=io.tokens_per_second_per_gpu,
            bytes_per_token=io.bytes_per_token,
            prefetch_factor=io.prefetch_factor,
            checkpoint_gb=io.checkpoint_gb,
            write_seconds=io.write_minutes * 60,
        )
    return BandwidthPlan(
        pool=lustre.node_pool,
        instance_type=pool.instance_type,
        nodes=nodes,
        lustre=LustreThroughput(
            capacity_gib=lustre.storage_capacity_gib,
            throughput_per_tib=lustre.throughput_per_tib,
            efa=lustre.efa,
            gpudirect_storage=lustre.gpudirect_storage,
        ),
        demand=demand,
    )
