"""Fabric acceptance: prove that two nodes of a GPU pool talk over EFA at full speed.

A pool that schedules pods is not a pool that trains: the EFA device plugin
can fail to advertise interfaces, a security group can block EFA traffic, and
NCCL then *silently* falls back to TCP sockets at a tenth of the bandwidth
(FACTS.md, "Known pain points"). The only reliable check is the workload
itself: nccl-tests `all_reduce_perf` across 2 nodes, NCCL_DEBUG=INFO to show
which network NCCL chose, and the bus bandwidth against a per-instance-type
threshold from the catalog (`fabric_acceptance`, each with its source).

Launch without the MPI operator (not installed): an Indexed Job of 2 pods
plus a headless Service gives every pod a stable DNS name
(`<job>-<index>.<job>`), so the host list is known when the manifest is
written and no hostfile is generated. Every pod starts sshd on port 2222
with a key pair from the Secret `fabric-ssh`; pod 0 waits for the others'
sshd, then runs `mpirun` over ssh (OpenMPI's default launcher) for
`nodes x gpus` ranks. The other pods only serve ssh: the Job's
`successPolicy` (succeededIndexes "0") ends the Job, and stops them, as soon
as pod 0 succeeds. Create the Secret once per namespace:

    ssh-keygen -t ed25519 -N '' -f fabric_key
    kubectl -n NS create secret generic fabric-ssh \\
        --from-file=id_ed25519=fabric_key --from-file=id_ed25519.pub=fabric_key.pub

The pods run as root because sshd and `mpirun --allow-run-as-root` need it;
they are not privileged, use no host namespaces, and keep the runtime's
default capabilities (sshd's privilege separation needs SYS_CHROOT, SETUID
and SETGID, which `drop: [ALL]` would take away).

Read the verdict with `evaluate(kubectl logs <job>-0-..., instance_type)`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from manifests.jobs.pod import (
    EFA_RESOURCE,
    HUGEPAGES,
    HUGEPAGES_SIZE,
    JOB_NAME_LABEL,
    Container,
    ContainerPort,
    ContainerSecurityContext,
    IndexedJob,
    IndexedJobSpec,
    K8s,
    ObjectMeta,
    PodSecurityContext,
    PodSpec,
    PodTemplate,
    ResourceRequirements,
    SecretSource,
    SuccessPolicy,
    SuccessPolicyRule,
    Volume,
    VolumeMount,
    check_image,
    check_nvidia_job,
    nccl_env,
    node_placement,
    shm_volume,
)
from spec.catalog import catalog

SSH_PORT = 2222
SSH_SECRET = "fabric-ssh"
SSH_SECRET_MOUNT = "/etc/fabric-ssh"
ALL_REDUCE_PERF = "/opt/nccl-tests/build/all_reduce_perf"
"""Where the awsome-distributed-ai nccl-tests image builds the binary."""
OPENMPI = "/opt/amazon/openmpi"
"""The EFA installer's OpenMPI. `--prefix` makes the remote orted findable over a
non-interactive ssh shell, whose PATH does not include it."""


class FabricSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_type: str
    node_pool: str
    namespace: str
    name: str = "fabric-acceptance"
    nodes: int = Field(2, ge=2, le=64)
    image: str | None = Field(None, description="Default: the catalog's fabric_acceptance.image.")
    min_bytes: str = "8"
    max_bytes: str = "16G"
    iterations: int = Field(50, ge=1)
    queue_name: str | None = None
    deadline_seconds: int = Field(1800, ge=60, description="Hung runs must not hold the nodes.")
    topology: dict[str, str] = Field(
        default_factory=dict,
        description="Kueue's Topology Aware Scheduling annotations of its pods: what a pod set on "
        "a topology-aware pool must carry (`kueue.x-k8s.io/podset-unconstrained-topology`).",
    )

    @property
    def pinned_image(self) -> str:
        return check_image(self.image or catalog().fabric_acceptance.image)

    @property
    def gpus(self) -> int:
        acc = catalog().instance(self.instance_type).accelerator
        return acc.count if acc else 0


def _check(spec: FabricSpec) -> None:
    itype = check_nvidia_job(
        spec.name,
        spec.namespace,
        spec.queue_name,
        spec.instance_type,
        "fabric acceptance runs NCCL on NVIDIA instances",
    )
    if itype.efa_interfaces == 0:
        raise ValueError(f"{spec.instance_type} has no EFA interfaces to accept")
    if spec.instance_type not in catalog().fabric_acceptance.thresholds:
        raise ValueError(f"{spec.instance_type} has no fabric_acceptance threshold in the catalog")
    spec.pinned_image  # noqa: B018 - raises on an unpinned image


def hosts(spec: FabricSpec) -> list[str]:
    """Stable pod DNS names: Indexed Job pods are <job>-<index>, under the headless Service."""
    return [f"{spec.name}-{i}.{spec.name}" for i in range(spec.nodes)]


def launch_script(spec: FabricSpec) -> str:
    """The shell every pod runs; pod 0 launches, the others serve ssh until the Job ends."""
    ssh = f"ssh -p {SSH_PORT} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
    forwarded = ["PATH", "LD_LIBRARY_PATH", *(e.name for e in nccl_env())]
    mpirun = [
        f"{OPENMPI}/bin/mpirun", "--prefix", OPENMPI,
        "--allow-run-as-root", "--tag-output", "--bind-to", "none",
        "-np", str(spec.nodes * spec.gpus), "-N", str(spec.gpus),
        "--host", ",".join(f"{h}:{spec.gpus}" for h in hosts(spec)),
        "--mca", "plm_rsh_args", ssh.removeprefix("ssh "),
        # MPI itself only bootstraps; TCP is enough and keeps it off EFA.
        "--mca", "pml", "^ucx", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_exclude", "lo",
        *(a for name in forwarded for a in ("-x", name)),
        ALL_REDUCE_PERF, "-b", spec.min_bytes, "-e", spec.max_bytes, "-f", "2",
        "-g", "1", "-c", "1", "-n", str(spec.iterations),
    ]  # fmt: skip
    wait = " ".join(shlex.quote(h) for h in hosts(spec))
    return "\n".join(
        [
            "set -euo pipefail",
            "mkdir -p /root/.ssh /run/sshd",
            f"install -m 600 {SSH_SECRET_MOUNT}/id_ed25519 /root/.ssh/id_ed25519",
            f"install -m 600 {SSH_SECRET_MOUNT}/id_ed25519.pub /root/.ssh/authorized_keys",
            "ssh-keygen -A >/dev/null",
            f"/usr/sbin/sshd -p {SSH_PORT} -o PasswordAuthentication=no",
            'if [ "${JOB_COMPLETION_INDEX}" != 0 ]; then exec sleep infinity; fi',
            f"for h in {wait}; do",
            # Up to 10 minutes for the other pods to be scheduled and start sshd.
            f'  for i in $(seq 120); do {ssh} -o ConnectTimeout=5 "$h" true && break; '
            "sleep 5; done",
            "done",
            shlex.join(mpirun),
        ]
    )


class ServicePort(K8s):
    name: str
    port: int


class ServiceSpec(K8s):
    cluster_ip: Literal["None"] = Field("None", alias="clusterIP")
    selector: dict[str, str]
    publish_not_ready_addresses: bool = True
    ports: list[ServicePort]


class Service(K8s):
    api_version: Literal["v1"] = "v1"
    kind: Literal["Service"] = "Service"
    metadata: ObjectMeta
    spec: ServiceSpec


def fabric_manifests(spec: FabricSpec) -> list[dict[str, Any]]:
    """The headless Service and the Indexed Job of one acceptance run."""
    _check(spec)
    itype = catalog().instance(spec.instance_type)
    kind = catalog().accelerator_kind(spec.instance_type)
    assert kind is not None
    affinity, tolerations = node_placement(spec.instance_type, spec.node_pool)
    shm, shm_mount = shm_volume("32Gi")
    both = {
        kind.resource: str(spec.gpus),
        EFA_RESOURCE: str(itype.efa_interfaces),
        HUGEPAGES: HUGEPAGES_SIZE,
        "memory": "96Gi",
    }
    container = Container(
        name="nccl-tests",
        image=spec.pinned_image,
        command=["/bin/bash", "-c", launch_script(spec)],
        env=nccl_env(),
        ports=[ContainerPort(name="ssh", container_port=SSH_PORT)],
        resources=ResourceRequirements(limits=dict(both), requests={**both, "cpu": "32"}),
        volume_mounts=[
            shm_mount,
            VolumeMount(name="ssh", mount_path=SSH_SECRET_MOUNT, read_only=True),
        ],
        security_context=ContainerSecurityContext(allow_privilege_escalation=False),
    )
    labels = {JOB_NAME_LABEL: spec.name, "app.kubernetes.io/component": "fabric-acceptance"}
    job_labels = {"app.kubernetes.io/part-of": "llm-platform"}
    if spec.queue_name:
        job_labels["kueue.x-k8s.io/queue-name"] = spec.queue_name
    service = Service(
        metadata=ObjectMeta(name=spec.name, namespace=spec.namespace, labels=job_labels),
        spec=ServiceSpec(
            selector={JOB_NAME_LABEL: spec.name}, ports=[ServicePort(name="ssh", port=SSH_PORT)]
        ),
    )
    job = IndexedJob(
        metadata=ObjectMeta(name=spec.name, namespace=spec.namespace, labels=job_labels),
        spec=IndexedJobSpec(
            completions=spec.nodes,
            parallelism=spec.nodes,
            backoff_limit=0,
            active_deadline_seconds=spec.deadline_seconds,
            ttl_seconds_after_finished=24 * 3600,
            success_policy=SuccessPolicy(rules=[SuccessPolicyRule(succeeded_indexes="0")]),
            suspend=True if spec.queue_name else None,
            template=PodTemplate(
                metadata=ObjectMeta(labels=labels, annotations=dict(spec.topology) or None),
                spec=PodSpec(
                    service_account_name="default",
                    priority_class_name="llmp-training",
                    restart_policy="Never",
                    subdomain=spec.name,
                    affinity=affinity,
                    tolerations=tolerations,
                    security_context=PodSecurityContext(),
                    containers=[container],
                    volumes=[
                        shm,
                        Volume(
                            name="ssh",
                            secret=SecretSource(secret_name=SSH_SECRET, default_mode=0o400),
                        ),
                    ],
                ),
            ),
        ),
    )
    return [service.to_json(), job.to_json()]


# --- reading the output ----------------------------------------------------------------

_PREFIX = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:)\s?")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.]+)")
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)")
_NETWORK = re.compile(r"Using network (.+?)\s*$")
_PROVIDER = re.compile(r"Selected [Pp]rovider is ([\w-]+)")

Transport = Literal["efa", "socket", "unknown"]


@dataclass(frozen=True)
class Row:
    size_bytes: int
    busbw_out_of_place: float
    busbw_in_place: float
    wrong: int


@dataclass(frozen=True)
class NcclTestsRun:
    rows: list[Row]
    avg_busbw_gbps: float
    out_of_bounds: int | None
    transport: Transport
    networks: list[str]
    providers: list[str]

    @property
    def peak(self) -> Row:
        return max(self.rows, key=lambda r: max(r.busbw_out_of_place, r.busbw_in_place))

    @property
    def peak_busbw_gbps(self) -> float:
        return max(self.peak.busbw_out_of_place, self.peak.busbw_in_place)


def _number(token: str) -> float:
    return 0.0 if token == "N/A" else float(token)


def _wrong(token: str) -> int:
    # Recent nccl-tests print a count of wrong elements (or N/A); old ones a max error.
    return int(token) if token.isdigit() else 0


def _row(tokens: list[str]) -> Row | None:
    if len(tokens) not in (12, 13) or not (tokens[0].isdigit() and tokens[1].isdigit()):
        return None
    at = 1 if len(tokens) == 13 else 0  # the "root" column of nccl-tests >= 2.10
    try:
        return Row(
            size_bytes=int(tokens[0]),
            busbw_out_of_place=_number(tokens[6 + at]),
            busbw_in_place=_number(tokens[10 + at]),
            wrong=_wrong(tokens[7 + at]) + _wrong(tokens[11 + at]),
        )
    except ValueError:
        return None


def parse(text: str) -> NcclTestsRun:
    """Parse nccl-tests stdout (with or without mpirun --tag-output or srun prefixes)."""
    rows: list[Row] = []
    avg: float | None = None
    oob: int | None = None
    networks: list[str] = []
    providers: list[str] = []
    for raw in text.splitlines():
        line = _PREFIX.sub("", raw, count=1)
        if m := _NETWORK.search(line):
            networks.append(m.group(1))
        if m := _PROVIDER.search(line):
            providers.append(m.group(1))
        if m := _AVG.search(line):
            avg = float(m.group(1))
        if m := _OOB.search(line):
            oob = int(m.group(1))
        if not line.lstrip().startswith("#") and (row := _row(line.split())):
            rows.append(row)
    if not rows:
        raise ValueError("no nccl-tests result rows in the output")
    if avg is None:
        avg = fmean(r.busbw_out_of_place for r in rows)
    if any("socket" in n.lower() for n in networks):
        transport: Transport = "socket"  # one rank on sockets paces the whole ring
    elif any("libfabric" in n.lower() for n in networks) or "efa" in providers:
        transport = "efa"
    else:
        transport = "unknown"
    return NcclTestsRun(
        rows=rows,
        avg_busbw_gbps=avg,
        out_of_bounds=oob,
        transport=transport,
        networks=sorted(set(networks)),
        providers=sorted(set(providers)),
    )


@dataclass(frozen=True)
class Verdict:
    instance_type: str
    run: NcclTestsRun
    threshold_gbps: float
    reasons: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.reasons

    def summary(self) -> str:
        head = "PASS" if self.passed else "FAIL"
        line = (
            f"{head} {self.instance_type}: transport {self.run.transport}, peak busbw "
            f"{self.run.peak_busbw_gbps:.1f} GB/s at {self.run.peak.size_bytes} B "
            f"(threshold {self.threshold_gbps:g}), average {self.run.avg_busbw_gbps:.1f} GB/s"
        )
        return line + (f": {'; '.join(self.reasons)}" if self.reasons else "")


def evaluate(text: str, instance_type: str) -> Verdict:
    """Pass when NCCL used EFA, no value was wrong, and the peak reaches the catalog threshold."""
    thresholds = catalog().fabric_acceptance.thresholds
    if instance_type not in thresholds:
        raise ValueError(f"{instance_type} has no fabric_acceptance threshold in the catalog")
    threshold = thresholds[instance_type].min_peak_busbw_gbps
    run = parse(text)
    reasons = []
    if run.transport == "socket":
        reasons.append("NCCL fell back to TCP sockets (NET/Socket), not EFA")
    elif run.transport == "unknown":
        reasons.append("no 'Using network' line: run with NCCL_DEBUG=INFO to see the transport")
    if run.providers and set(run.providers) != {"efa"}:
        reasons.append(f"libfabric provider {', '.join(run.providers)}, not efa")
    if run.peak_busbw_gbps < threshold:
        reasons.append(f"peak busbw {run.peak_busbw_gbps:.1f} GB/s below {threshold:g}")
    wrong = sum(r.wrong for r in run.rows) + (run.out_of_bounds or 0)
    if wrong:
        reasons.append(f"{wrong} wrong or out-of-bounds values")
    return Verdict(instance_type=instance_type, run=run, threshold_gbps=threshold, reasons=reasons)
