"""Priority classes: serving outranks training, and preemptible jobs never preempt."""

from __future__ import annotations

from manifests.scheduling import PRIORITIES, priority_class_args


def test_priorities_are_ordered_and_unique() -> None:
    values = [p.value for p in PRIORITIES]
    assert values == sorted(values, reverse=True)
    assert len({p.name for p in PRIORITIES}) == len(PRIORITIES)
    assert PRIORITIES[0].name == "llmp-serving"
    # Below the system-cluster-critical / system-node-critical range (2e9).
    assert max(values) < 1_000_000_000


def test_only_the_preemptible_class_never_preempts() -> None:
    policies = {p.name: priority_class_args(p).preemption_policy for p in PRIORITIES}
    assert policies.pop("llmp-preemptible") == "Never"
    assert set(policies.values()) == {"PreemptLowerPriority"}


def test_no_class_is_the_cluster_default() -> None:
    # A global default would silently lift every unlabelled pod above preemptible work.
    assert all(priority_class_args(p).global_default is False for p in PRIORITIES)
