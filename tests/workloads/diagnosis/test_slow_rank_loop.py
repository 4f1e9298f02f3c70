"""The seeds' check on real servers, at real time (tests/workloads/diagnosis/slow_rank.py): three
gloo ranks train on the CPU, one is throttled once the run is warm, and the straggler watcher
reading a real Prometheus names that rank, its node and the cause (compute: the rank's own
work is slower, not its links or its data), `LlmpSlowNode` fires on the watcher's series and
Alertmanager routes it to the webhook with the node and the job. Short windows and `for`
scaled to seconds; bench/slow_rank_loop.py times it with the stack's settings.
"""

from __future__ import annotations

from pathlib import Path

from tests.workloads.diagnosis import slow_rank


def test_a_throttled_rank_is_named_with_its_node_and_cause_and_pages(tmp_path: Path) -> None:
    # A slowdown well above the noise of a loaded 2-core CI machine (the full suite runs
    # beside it): rank 2 about twice as slow, flagged at 25% over the others' median. The
    # stack's own threshold and intervals are bench/slow_rank_loop.py's.
    settings = slow_rank.LoopSettings(delay_s=0.15, threshold=0.25)
    result = slow_rank.run_loop(tmp_path, settings)
    slow = slow_rank.node_of(settings.slow_rank)
    assert result.flagged == [slow]
    assert result.finding.ranks == (settings.slow_rank,)
    assert result.finding.cause == "compute"
    assert result.finding.ratio > 1 + settings.threshold
    assert result.receiver == "platform-warning"
    assert result.alert["node"] == slow
    assert result.alert["training_namespace"] == slow_rank.NAMESPACE
    assert result.alert["training_job"] == slow_rank.JOB
    # The watcher's own target: what no tenant's series can carry.
    assert (result.alert["namespace"], result.alert["job"]) == (
        "monitoring",
        "llmp-straggler-watch",
    )
    assert result.to_diagnosis_s <= result.to_receiver_s
    print(
        f"injection -> diagnosis {result.to_diagnosis_s:.1f} s, "
        f"-> receiver {result.to_receiver_s:.1f} s; received: {result.received}"
    )
