"""Launch real training ranks on loopback only, and always reap them.

Rendezvous uses a `file://` store: a TCPStore server listens on every interface
(checked: `*:PORT`), which tests must not open. Gloo's own sockets bind to the
`lo` address through GLOO_SOCKET_IFNAME; `listening_on_any` proves it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]


def job_config(tmp: Path, data: Path, **over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "model": {
            "vocab_size": 256,
            "seq_len": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
        },
        "data": {"path": str(data)},
        "checkpoint": {"dir": str(tmp / "ckpt"), "interval_steps": 4, "keep_last": 2},
        "max_steps": 16,
        "micro_batch_size": 8,
        "zero_stage": 3,
        "bf16": False,
        "optimizer": "torch",
        "lr": 3e-3,
        "peak_tflops_per_device": 1.0,
    }
    for k, v in over.items():
        cfg[k] = {**cfg[k], **v} if isinstance(v, dict) and isinstance(cfg.get(k), dict) else v
    return cfg


class Run:
    """One launch of `world` ranks; rank 0's stdout is the JSON event log."""

    def __init__(
        self,
        workdir: Path,
        cfg: dict[str, Any],
        world: int,
        extra: list[str],
        track: Callable[[subprocess.Popen[bytes]], None],
        env: dict[str, str] | None = None,
        rank_env: dict[int, dict[str, str]] | None = None,
        module: str = "workloads.training.train",
    ) -> None:
        """`rank_env`: more variables for some ranks (NODE_NAME: the node a rank says it is on);
        `module`: the trainer (the 3-D one: workloads.training.parallel)."""
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "job.json").write_text(json.dumps(cfg))
        store = workdir / f"store-{time.monotonic_ns()}"
        full_env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "GLOO_SOCKET_IFNAME": "lo",
            "DS_ACCELERATOR": "cpu",
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            "CUDA_VISIBLE_DEVICES": "",
            **(env or {}),
        }
        self.procs: list[subprocess.Popen[bytes]] = []
        for rank in range(world):
            cmd = [
                sys.executable,
                "-m",
                module,
                "--config",
                str(workdir / "job.json"),
                "--rank",
                str(rank),
                "--world-size",
                str(world),
                "--init-method",
                f"file://{store}",
                *extra,
            ]
            with (
                open(workdir / f"rank{rank}.out", "wb") as out,
                open(workdir / f"rank{rank}.err", "wb") as err,
            ):
                rank_vars = {**full_env, **(rank_env or {}).get(rank, {})}
                p = subprocess.Popen(cmd, cwd=REPO, env=rank_vars, stdout=out, stderr=err)
            track(p)
            self.procs.append(p)

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in (self.workdir / "rank0.out").read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["event"] == event]

    def wait_for(self, pred: Callable[[list[dict[str, Any]]], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred(self.events()):
                return
            if any(p.poll() is not None for p in self.procs):
                raise AssertionError(f"a rank exited early:\n{self.stderr_tail()}")
            time.sleep(0.05)
        raise AssertionError(
            f"timed out waiting; events: {self.events()[-3:]}\n{self.stderr_tail()}"
        )

    def wait(self, timeout: float) -> list[int]:
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout))
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    f"rank {p.pid} still running after {timeout}s\n{self.stderr_tail()}"
                ) from None
        return codes

    def stderr_tail(self) -> str:
        return "\n".join(
            f"--- rank{r} stderr\n"
            + (self.workdir / f"rank{r}.err").read_text(errors="replace")[-3000:]
            for r in range(len(self.procs))
        )

    def signal(self, rank: int, sig: int) -> None:
        os.kill(self.procs[rank].pid, sig)


def kill_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)


def _inodes_of(pid: int) -> set[str]:
    found = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                found.add(target[8:-1])
    except OSError:
        pass
    return found


def _listeners(pid: int) -> list[tuple[str, str]]:
    """This process's listening TCP sockets: (table, local address as the kernel prints it)."""
    inodes = _inodes_of(pid)
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state == "0A" and inode in inodes:
                found.append((table, local))
    return found


def listening_on_any(pid: int) -> list[str]:
    """This process's TCP listeners on a wildcard address (0.0.0.0 or ::)."""
    return [
        f"{table} {local}" for table, local in _listeners(pid) if set(local.split(":")[0]) == {"0"}
    ]


def _kernel_address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    # /proc/net/tcp* print the address as 32-bit words, each in host byte order.
    raw = bytes.fromhex(hex_addr)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(raw)


def _is_loopback(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = addr.ipv4_mapped if isinstance(addr, ipaddress.IPv6Address) else None
    return addr.is_loopback or (mapped is not None and mapped.is_loopback)


def listening(pid: int) -> list[tuple[str, bool]]:
    """This process's TCP listeners: ("pid P: ADDRESS:PORT", on loopback?)."""
    out = []
    for _, local in _listeners(pid):
        hex_addr, hex_port = local.split(":")
        addr = _kernel_address(hex_addr)
        where = f"[{addr}]" if addr.version == 6 else str(addr)
        out.append((f"pid {pid}: {where}:{int(hex_port, 16)}", _is_loopback(addr)))
    return out


def listening_off_loopback(pid: int) -> list[str]:
    """This process's TCP listeners on any address but loopback: wildcards included,
    and also a specific interface's address, which `listening_on_any` would not see."""
    return [name for name, loopback in listening(pid) if not loopback]
