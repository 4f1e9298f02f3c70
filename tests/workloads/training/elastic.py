"""Stock torchrun agents as "nodes" on one machine, loopback only: the elastic recovery drill.

Each node is one `python -m torch.distributed.run` agent in a session of its own, launched
the way a TrainJob's pod launches it (Kubeflow Trainer v2, manifests/jobs/trainjob.py): the
command is the one the builder puts in `trainer.command` (`--nnodes MIN:MAX`, the c10d
rendezvous at `$(PET_MASTER_ADDR):$(PET_MASTER_PORT)`, `--max-restarts`), expanded as the
kubelet expands it, and the environment carries the PET_* variables the Trainer's torch
plugin sets on the container: PET_NNODES (the fixed node count, which `--nnodes` overrides),
PET_NPROC_PER_NODE (torchrun's processes per node: no `--nproc-per-node` flag), PET_NODE_RANK
(the pod's completion index; a replacement takes the lost pod's), PET_MASTER_ADDR and
PET_MASTER_PORT. What differs from a cluster is where things listen:

- the rendezvous store is a FileStore (`--rdzv-conf store_type=file`): PET_MASTER_ADDR
  is a path in the work directory instead of node 0's DNS name, so the expanded endpoint
  is a file and no socket is opened, where c10d's TCPStore server would listen on every
  interface;
- TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 stops the agents from starting a TCPStore for
  their workers (also on every interface); the workers get MASTER_ADDR=127.0.0.1
  (`--local-addr`) and train.py's rank 0 binds their store to it;
- gloo binds to `lo` (GLOO_SOCKET_IFNAME).

`drill` starts three nodes; once a checkpoint is published and the next save is in
flight it SIGKILLs the node that hosts global rank 0 (the agent and every process
under it: a lost node); the survivors re-rendezvous at two and resume from the last
complete checkpoint; then a replacement node starts, the agents see it waiting,
restart their workers (train.py checkpoints on their SIGTERM, collectively), and
the job grows back to three and runs to `max_steps`.

Every process is killed by its own PID (checked against its start time, so a
reused PID is never hit), on exit from `Cluster`, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from manifests.jobs import trainjob
from manifests.jobs.trainjob import TrainJobSpec
from tests.workloads.training.harness import REPO, job_config, listening
from workloads.training import checkpointing as ckpt

T = TypeVar("T")

CHECKPOINT_INTERVAL = 3  # steps
DRILL_INSTANCE_TYPE = "g6e.12xlarge"
"""Any accelerated type the catalog knows (the builder validates the spec against it); the
drill's nodes are CPU processes, and only the command and the PET_* variables are used."""

# Inherited from a shell that is itself under torchrun, these would confuse the agents.
_LAUNCHER_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")


class DrillError(AssertionError):
    """The drill could not go on; the message carries the agents' stderr tails."""


@dataclass(frozen=True)
class Elastic:
    """The elastic settings: torchrun's and its rendezvous's, tuned for a 2-core machine."""

    nodes: int = 3
    min_nodes: int = 2
    nproc_per_node: int = 1
    max_restarts: int = 3
    monitor_interval_s: float = 0.2
    join_timeout_s: int = 120
    # Survivors wait this long after the second one joins for a third; must exceed the
    # 1 s the join loop sleeps between polls, or a slow third node makes an extra round.
    last_call_timeout_s: int = 3
    keep_alive_interval_s: int = 1
    # A node is dead after this many intervals without a heartbeat. An agent may skip a
    # beat (it only beats once a full interval has passed, checked once an interval),
    # and a loaded machine delays the rest: with 2, the replacement's agent declared the
    # live survivors dead and waited in a round of its own instead of joining theirs.
    keep_alive_max_attempt: int = 5
    stop_grace_s: float = 5.0


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(parent, process group, start time in clock ticks) of a live process, else None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()  # the command name may hold spaces and parens
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), int(fields[2]), int(fields[19])


def _tree(root: int) -> dict[int, int]:
    """`root` and its live descendants: pid -> start time."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (s := _stat(int(entry))) is not None:
            stats[int(entry)] = s
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in stats and pid not in found:
            found[pid] = stats[pid][2]
            todo.extend(children.get(pid, []))
    return found


class Node:
    """One torchrun agent and everything it starts."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], workdir: Path) -> None:
        self.name = name
        self.out, self.err = workdir / f"{name}.out", workdir / f"{name}.err"
        self.launched = time.time()
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.agent = subprocess.Popen(
                cmd,
                cwd=REPO,
                env={**env, "NODE_NAME": name},
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own process group, as a pod would be
            )
        self.seen: dict[int, int] = {}  # every process ever seen under the agent
        self.killed_at: float | None = None

    def processes(self) -> list[int]:
        """The node's live processes, remembered so that `kill` finds orphans too."""
        tree = _tree(self.agent.pid) if self.agent.poll() is None else {}
        self.seen.update(tree)
        return list(tree)

    def kill(self) -> float:
        """Lose the node: SIGKILL the agent and every process seen under it; returns when."""
        self.killed_at = self.stop()
        return self.killed_at

    def stop(self) -> float:
        """SIGKILL whatever of this node still runs, by PID; returns when it was done."""
        self.processes()
        now = time.time()
        for pid, started in self.seen.items():
            s = _stat(pid)
            if s is None or s[2] != started:
                continue  # gone, or the PID now belongs to someone else
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                if s[1] == pid:  # a group leader (each worker is): children forked since
                    os.killpg(pid, signal.SIGKILL)
        self.agent.wait(30)
        return now

    def alive(self) -> list[int]:
        """Processes seen under this node that still run."""
        return [p for p, started in self.seen.items() if (s := _stat(p)) and s[2] == started]

    def stderr_tail(self, chars: int = 2500) -> str:
        return f"--- {self.name} stderr\n" + self.err.read_text(errors="replace")[-chars:]


@dataclass
class Incarnation:
    """One start of the worker group, as global rank 0 logged it (on `node`)."""

    node: str
    events: list[dict[str, Any]]

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]

    @property
    def world_size(self) -> int:
        return int(self.events[0]["world_size"])

    @property
    def started(self) -> float:
        return float(self.events[0]["time"])

    @property
    def resume(self) -> dict[str, Any] | None:
        found = self.of("resume")
        return found[0] if found else None

    @property
    def steps(self) -> list[dict[str, Any]]:
        return self.of("step")

    @property
    def last_step(self) -> int:
        steps = self.steps
        return int(steps[-1]["step"]) if steps else self.resumed_step

    @property
    def resumed_step(self) -> int:
        return int(self.resume["step"]) if self.resume else 0

    @property
    def published(self) -> list[int]:
        return [int(e["step"]) for e in self.of("checkpoint_published")]

    @property
    def saved(self) -> list[int]:
        return [int(e["step"]) for e in self.of("checkpoint_saved")]

    @property
    def exit(self) -> dict[str, Any] | None:
        found = self.of("exit")
        return found[0] if found else None

    def loss_at(self, step: int) -> float | None:
        return next((float(e["loss"]) for e in self.steps if e["step"] == step), None)


def _incarnations(node: Node) -> list[Incarnation]:
    out: list[Incarnation] = []
    for line in node.out.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line still being written
        if event.get("event") == "start":
            out.append(Incarnation(node.name, [event]))
        elif out:
            out[-1].events.append(event)
    return out


class Cluster:
    """Nodes sharing one rendezvous; a context manager that kills them all on exit."""

    def __init__(self, workdir: Path, cfg: dict[str, Any], elastic: Elastic) -> None:
        self.workdir = workdir
        self.elastic = elastic
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "job.json"
        self.config.write_text(json.dumps(cfg))
        self.rdzv = workdir / "rdzv.store"
        self.nodes: list[Node] = []
        self.listeners: dict[str, bool] = {}  # every listener seen -> on loopback?
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC_"))}
        for key in _LAUNCHER_ENV:
            env.pop(key, None)
        self.env = {
            **env,
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
            "GLOO_SOCKET_IFNAME": "lo",
            "DS_ACCELERATOR": "cpu",
            "CUDA_VISIBLE_DEVICES": "",
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            "LOGLEVEL": "INFO",  # torchrun's own log level: rendezvous rounds in <node>.err
        }

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _train_job(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The TrainJob of the drill's job (its trainer command and node count) and the pod
        the Trainer makes of it on its runtime."""
        e = self.elastic
        spec = TrainJobSpec(
            name="drill",
            namespace="drill",
            image="registry.example.com/trainer:drill",
            command=[
                "-m",
                "workloads.training.train",
                "--config",
                str(self.config),
                "--elastic-stop-grace-s",
                str(e.stop_grace_s),
            ],
            instance_type=DRILL_INSTANCE_TYPE,
            node_pool="drill",
            nodes_min=e.min_nodes,
            nodes_max=e.nodes,
            max_restarts=e.max_restarts,
            procs_per_node=e.nproc_per_node,
            checkpoint_dir="/fsx/checkpoints/drill",
            queue_name="drill",
        )
        job = trainjob.train_job(spec)
        (runtime,) = [
            r
            for r in trainjob.cluster_training_runtimes()
            if r["metadata"]["name"] == job["spec"]["runtimeRef"]["name"]
        ]
        return job, trainjob.node_pod_template(job, runtime)

    def pet_env(self, index: int) -> dict[str, str]:
        """The torch plugin's PET_* variables of the pod at completion `index`."""
        _, pod = self._train_job()
        (container,) = pod["spec"]["containers"]
        pet = {v["name"]: v for v in container["env"] if v["name"].startswith("PET_")}
        assert sorted(pet) == sorted(trainjob.TORCHRUN_PET_VARIABLES), sorted(pet)
        env = {name: v["value"] for name, v in pet.items() if "value" in v}
        # The completion index (a fieldRef on the cluster) and a file for node 0's address.
        env["PET_NODE_RANK"] = str(index)
        env["PET_MASTER_ADDR"] = str(self.rdzv)
        return env

    def command(self, name: str, index: int) -> list[str]:
        """The TrainJob's trainer command, $(VAR)-expanded from the pod's PET_* variables as
        the kubelet expands it, with the drill's own rendezvous timings and loopback address
        before the script."""
        e = self.elastic
        _, pod = self._train_job()
        (container,) = pod["spec"]["containers"]
        env = self.pet_env(index)
        expanded = [
            re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a)
            for a in container["command"]
        ]
        assert expanded[0] == "torchrun" and "$(" not in " ".join(expanded), expanded
        script = expanded.index("-m")
        conf = ",".join(
            [
                "store_type=file",
                f"join_timeout={e.join_timeout_s}",
                f"last_call_timeout={e.last_call_timeout_s}",
                f"keep_alive_interval={e.keep_alive_interval_s}",
                f"keep_alive_max_attempt={e.keep_alive_max_attempt}",
            ]
        )
        drill_flags = [
            f"--rdzv-conf={conf}",
            f"--monitor-interval={e.monitor_interval_s}",
            "--local-addr=127.0.0.1",
            f"--log-dir={self.workdir / 'torchelastic' / name}",
        ]
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            *expanded[1:script],
            *drill_flags,
            *expanded[script:],
        ]

    def start(self, name: str, index: int) -> Node:
        """A node as the pod at completion `index` (a replacement takes the lost one's)."""
        env = {**self.env, **self.pet_env(index)}
        node = Node(name, self.command(name, index), env, self.workdir)
        self.nodes.append(node)
        return node

    def incarnations(self) -> list[Incarnation]:
        found = [inc for node in self.nodes for inc in _incarnations(node)]
        return sorted(found, key=lambda inc: inc.started)

    def poll(self) -> list[Incarnation]:
        """Refresh what every node runs, check their sockets, read the event logs."""
        for node in self.nodes:
            for pid in node.processes():
                self.listeners.update(listening(pid))
        return self.incarnations()

    def wait_for(
        self, what: str, pred: Callable[[list[Incarnation]], T | None], timeout_s: float
    ) -> T:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = pred(self.poll())
            if found is not None:
                return found
            lost = [n for n in self.nodes if n.killed_at is None and n.agent.poll() is not None]
            if lost:
                hint = (
                    " (the job reached max_steps first: raise max_steps or step_sleep_s)"
                    if lost[0].agent.returncode == 0
                    else ""
                )
                raise DrillError(
                    f"waiting for {what}: agent {lost[0].name} exited "
                    f"{lost[0].agent.returncode}{hint}\n{self.stderr_tails()}"
                )
            time.sleep(0.1)
        raise DrillError(f"timed out waiting for {what}\n{self.stderr_tails()}")

    def wait_agents(self, timeout_s: float) -> dict[str, int]:
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            while node.agent.poll() is None:
                if time.monotonic() > deadline:
                    raise DrillError(f"agent {node.name} still running\n{self.stderr_tails()}")
                self.poll()
                time.sleep(0.1)
        return {n.name: int(n.agent.returncode) for n in self.nodes}

    def stderr_tails(self) -> str:
        return "\n".join(n.stderr_tail() for n in self.nodes)

    def alive(self) -> list[int]:
        return [pid for n in self.nodes for pid in n.alive()]

    def close(self) -> None:
        for node in self.nodes:
            node.stop()


@dataclass(frozen=True)
class Transition:
    """One membership change, as the event log shows it."""

    cause: str
    world_before: int
    world_after: int
    last_step_before: int  # the newest step the old world logged
    last_complete_before: int  # the newest checkpoint published before the new world started
    resumed_step: int
    universal: bool  # resumed through a DeepSpeed universal checkpoint (resharded)
    first_step_after: int
    loss_before: float  # at `resumed_step`, as the old world logged it
    loss_after: float  # the new world's first step
    timings: dict[str, float]  # phase -> seconds, in order


@dataclass
class Report:
    elastic: Elastic
    max_steps: int
    world_sizes: list[int] = field(default_factory=list)  # every incarnation, in order
    initial_loss: float = 0.0  # step 1: the untrained weights
    transitions: list[Transition] = field(default_factory=list)
    final_step: int = 0
    final_reason: str = ""
    agents: dict[str, int] = field(default_factory=dict)  # node -> agent exit status
    killed: list[str] = field(default_factory=list)
    partial: dict[str, int] = field(default_factory=dict)  # unpublished at the kill: shards
    loopback_listeners: int = 0  # distinct listeners seen on loopback (workers' store, gloo)
    off_loopback: list[str] = field(default_factory=list)
    shards: dict[int, tuple[int, int]] = field(default_factory=dict)  # step -> (world, files)
    left_running: list[int] = field(default_factory=list)
    total_s: float = 0.0


def drill_config(workdir: Path, data: Path, max_steps: int, step_sleep_s: float) -> dict[str, Any]:
    return job_config(
        workdir,
        data,
        max_steps=max_steps,
        step_sleep_s=step_sleep_s,
        lr=1e-2,
        # keep every checkpoint: the drill checks each one's shards against its world size
        checkpoint={"interval_steps": CHECKPOINT_INTERVAL, "keep_last": 1000},
    )


def _previous(incs: list[Incarnation], after: Incarnation) -> list[Incarnation]:
    return [i for i in incs if i.started < after.started]


def _transition(cause: str, at: float, incs: list[Incarnation], after: Incarnation) -> Transition:
    earlier = _previous(incs, after)
    before = earlier[-1]
    resume = after.resume
    if resume is None or not after.steps:
        raise DrillError(f"the world of {after.world_size} started at {after.started} never ran")
    resumed = int(resume["step"])
    loss_before = next(
        (loss for inc in reversed(earlier) if (loss := inc.loss_at(resumed)) is not None), None
    )
    if loss_before is None:
        raise DrillError(f"no loss was logged at step {resumed} before the resume")
    first = after.steps[0]
    timings: dict[str, float] = {}
    if before.exit is not None:  # stopped by its agents (SIGTERM checkpoint)
        timings[f"{cause} -> old world stopped, checkpoint published"] = before.exit["time"] - at
        timings["old world stopped -> new world started"] = after.started - before.exit["time"]
    else:
        timings[f"{cause} -> new world started"] = after.started - at
    timings["  of which checkpoint conversion (universal)"] = float(resume.get("convert_s", 0.0))
    timings["checkpoint load"] = float(resume["load_s"])
    timings[f"{cause} -> first step at the new world"] = first["time"] - at
    return Transition(
        cause=cause,
        world_before=before.world_size,
        world_after=after.world_size,
        last_step_before=before.last_step,
        last_complete_before=max((s for inc in earlier for s in inc.published), default=0),
        resumed_step=resumed,
        universal=bool(resume["universal"]),
        first_step_after=int(first["step"]),
        loss_before=loss_before,
        loss_after=float(first["loss"]),
        timings=timings,
    )


def _shards(root: Path) -> dict[int, tuple[int, int]]:
    return {
        c.step: (c.world_size, len(list(c.path.glob("*optim_states.pt"))))
        for c in ckpt.complete_checkpoints(root)
    }


def drill(
    workdir: Path,
    data: Path,
    *,
    elastic: Elastic | None = None,
    max_steps: int = 45,
    kill_after_step: int = 12,
    step_sleep_s: float = 0.4,
    phase_timeout_s: float = 180,
    log: Callable[[str], None] = lambda _: None,
) -> Report:
    """Run the kill-and-replace scenario; the figures come back in a `Report`.

    `step_sleep_s` paces the steps so that the world of 2 is still training when the
    replacement has started and joined (its interpreter alone takes seconds); the
    steps left to `max_steps` after that must outlast it, with room for a loaded
    machine. Raises DrillError when a phase does not come (with the agents' stderr);
    the processes are gone either way.
    """
    e = elastic or Elastic()
    cfg = drill_config(workdir, data, max_steps, step_sleep_s)
    report = Report(elastic=e, max_steps=max_steps)
    t0 = time.monotonic()
    with Cluster(workdir, cfg, e) as cluster:
        for i in range(e.nodes):
            cluster.start(f"n{i}", i)
        log(f"started {e.nodes} agents")

        def save_in_flight(incs: list[Incarnation]) -> Incarnation | None:
            for inc in incs:
                if inc.world_size != e.nodes or not inc.published or not inc.saved:
                    continue
                if inc.saved[-1] >= kill_after_step and inc.saved[-1] > inc.published[-1]:
                    return inc
            return None

        full = cluster.wait_for("a published checkpoint and the next save", save_in_flight, 300)
        victim = next(n for n in cluster.nodes if n.name == full.node)
        kill_at = victim.kill()
        report.killed.append(victim.name)
        root = Path(cfg["checkpoint"]["dir"])
        report.partial = {
            d.name: len(list(d.glob("*optim_states.pt"))) for d in root.glob("tmp-step-*")
        }
        log(f"killed {victim.name} (global rank 0's node) at step {full.last_step}")

        def started_after(
            at: float, world: int | None
        ) -> Callable[[list[Incarnation]], Incarnation | None]:
            def pred(incs: list[Incarnation]) -> Incarnation | None:
                for inc in incs:
                    if inc.started > at and inc.steps and world in (None, inc.world_size):
                        return inc
                return None

            return pred

        shrunk = cluster.wait_for(
            "the survivors' first step", started_after(kill_at, None), phase_timeout_s
        )
        log(f"world {shrunk.world_size} resumed at step {shrunk.resumed_step}")
        # The Job creates the lost pod again at its completion index.
        replacement = cluster.start(f"n{e.nodes}", int(victim.name.removeprefix("n")))
        grown = cluster.wait_for(
            f"the first step at {e.nodes} nodes",
            started_after(replacement.launched, e.nodes),
            phase_timeout_s,
        )
        log(f"world {grown.world_size} resumed at step {grown.resumed_step}")
        report.agents = cluster.wait_agents(phase_timeout_s)
        incs = cluster.poll()
        report.off_loopback = sorted(k for k, lo in cluster.listeners.items() if not lo)
        report.loopback_listeners = sum(cluster.listeners.values())
    report.left_running = cluster.alive()
    report.total_s = time.monotonic() - t0

    report.world_sizes = [inc.world_size for inc in incs]
    report.initial_loss = next(
        float(e["loss"]) for inc in incs if inc.resume is None for e in inc.steps[:1]
    )
    shrunk = next(i for i in incs if i.started == shrunk.started)
    grown = next(i for i in incs if i.started == grown.started)
    report.transitions = [
        _transition(f"kill {victim.name}", kill_at, incs, shrunk),
        _transition(f"start {replacement.name}", replacement.launched, incs, grown),
    ]
    last = incs[-1]
    report.final_step = last.last_step
    report.final_reason = last.exit["reason"] if last.exit else "(no exit event)"
    report.shards = _shards(root)
    return report


def format_report(r: Report) -> str:
    e = r.elastic
    lines = [
        f"elastic drill: {e.nodes} nodes x {e.nproc_per_node} proc, nnodes {e.min_nodes}:"
        f"{e.nodes}, ZeRO-3 on gloo (CPU), checkpoint every {CHECKPOINT_INTERVAL} steps, "
        f"max_steps {r.max_steps}",
        "world sizes, one per start of the workers: " + " -> ".join(str(w) for w in r.world_sizes),
        f"initial loss (step 1, untrained weights): {r.initial_loss:.4f}",
    ]
    for t in r.transitions:
        lines += [
            "",
            f"{t.cause}: world {t.world_before} -> {t.world_after}",
            f"  last step logged before             {t.last_step_before}",
            f"  last complete checkpoint            step {t.last_complete_before}",
            f"  resumed from                        step {t.resumed_step}"
            + ("  (universal: resharded)" if t.universal else "")
            + f"  steps redone: {t.last_step_before - t.resumed_step}",
            f"  loss at step {t.resumed_step:<4} (world {t.world_before})      {t.loss_before:.4f}",
            f"  loss at step {t.first_step_after:<4} (world {t.world_after})      "
            f"{t.loss_after:.4f}",
        ]
        lines += [f"  {phase:<50} {secs:7.2f} s" for phase, secs in t.timings.items()]
    lines += [
        "",
        f"finished: step {r.final_step} ({r.final_reason}); agents exited "
        + ", ".join(f"{n}={c}" for n, c in r.agents.items())
        + (f" (killed: {', '.join(r.killed)})" if r.killed else ""),
        "checkpoints (step: world size / optimizer shards): "
        + ", ".join(f"{s}: {w}/{n}" for s, (w, n) in r.shards.items()),
        "unpublished save left by the kill: "
        + (", ".join(f"{d} ({n} optimizer shards)" for d, n in r.partial.items()) or "none"),
        f"listeners seen on loopback: {r.loopback_listeners}; off loopback: "
        + (", ".join(r.off_loopback) or "none"),
        f"processes left running: {r.left_running or 'none'}",
        f"drill took {r.total_s:.1f} s",
    ]
    return "\n".join(lines)
