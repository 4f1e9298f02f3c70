"""The elastic recovery path with real processes: stock torchrun agents as nodes on the CPU.

`test_lost_node_then_replacement` runs `elastic.drill` (3 nodes, nnodes 2:3): a whole
node is SIGKILLed while a save is in flight, the survivors go on at 2 from the last
complete checkpoint, a replacement joins and the job grows back to 3 and finishes.
The figures are printed (run with -s to see them; `bench/recovery.py` prints the same).

`test_rank_stopped_by_a_peer_under_torchrun_exits_to_be_restarted` pins the exit status
the grow path relies on, deterministically, without agents.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.workloads.training.elastic import Elastic, drill, format_report
from tests.workloads.training.harness import Run, job_config, kill_all
from workloads.training import checkpointing as ckpt
from workloads.training.data import write_synthetic_shards
from workloads.training.train import EXIT_REJOIN


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tokens")
    write_synthetic_shards(path, n_shards=2, tokens_per_shard=20_000, vocab=256)
    return path


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    spawned: list[subprocess.Popen[bytes]] = []
    yield spawned
    kill_all(spawned)


def test_lost_node_then_replacement(tmp_path: Path, data: Path) -> None:
    elastic = Elastic()
    report = drill(tmp_path, data, elastic=elastic, log=print)
    print(format_report(report))

    assert report.left_running == []
    assert report.off_loopback == []
    assert report.loopback_listeners > 0  # the check saw the workers' sockets at all
    # The first start may be at 2 if a node was slow to join; from the kill on it is fixed.
    assert report.world_sizes[-3:] == [3, 2, 3], report.world_sizes
    shrink, grow = report.transitions
    assert (shrink.world_before, shrink.world_after) == (3, 2)
    assert (grow.world_before, grow.world_after) == (2, 3)

    for t in (shrink, grow):
        assert t.resumed_step == t.last_complete_before, t
        assert t.first_step_after == t.resumed_step + 1, t
        assert t.universal  # the world size changed: resharded, not loaded as saved
        # Training had got somewhere, and the resume kept it: a restart from scratch
        # would log about the initial loss again.
        progress = report.initial_loss - t.loss_before
        assert progress > 0.75, (report.initial_loss, t)
        assert abs(t.loss_after - t.loss_before) < 0.25 * progress, (report.initial_loss, t)

    # Killed with a save in flight: the survivors went back to the one before it.
    assert shrink.last_step_before > shrink.resumed_step
    # Grown by a collective SIGTERM checkpoint of the newest step: nothing redone.
    assert grow.resumed_step == grow.last_step_before

    assert report.final_step == report.max_steps and report.final_reason == "max_steps"
    survivors = {n: c for n, c in report.agents.items() if n not in report.killed}
    assert list(survivors.values()) == [0] * (elastic.nodes), report.agents
    assert report.agents[report.killed[0]] == -signal.SIGKILL
    # A save left unpublished by the kill is redone at the new world size without the dead
    # ranks' shards in it.
    assert report.shards and all(world == n for world, n in report.shards.values()), report.shards


def test_rank_stopped_by_a_peer_under_torchrun_exits_to_be_restarted(
    tmp_path: Path, data: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    """Rank 2 gets SIGTERM (its agent stops it), the group checkpoints and stops. Rank 1
    gets its own SIGTERM during the grace: exit 0. Rank 0 never does: EXIT_REJOIN, which
    makes its agent restart it instead of reporting the job finished."""
    cfg = job_config(tmp_path, data, max_steps=1000, checkpoint={"interval_steps": 1000})
    run = Run(
        tmp_path,
        cfg,
        3,
        ["--elastic-stop-grace-s", "5"],
        procs.append,
        env={"TORCHELASTIC_RUN_ID": "test"},
    )
    run.wait_for(lambda ev: sum(e["event"] == "step" for e in ev) >= 2, 180)
    run.signal(2, signal.SIGTERM)
    run.wait_for(lambda ev: any(e["event"] == "exit" for e in ev), 60)
    run.signal(1, signal.SIGTERM)
    assert run.wait(60) == [EXIT_REJOIN, 0, 0], run.stderr_tail()
    exit_event = run.of("exit")[0]
    assert exit_event["reason"] == "sigterm"
    chosen = ckpt.select_resume(tmp_path / "ckpt")
    assert chosen is not None and chosen.step == exit_event["step"]
