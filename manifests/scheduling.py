"""Pod priority classes every workload picks from.

Serving outranks training (a user request beats a gradient step); a
checkpointing pretrain run outranks experiments; `preemptible` jobs never
preempt anything and are first to go. Kueue's workload priorities sit on top
of these for queueing order; these decide who the kubelet and scheduler
evict.
"""

from __future__ import annotations

from dataclasses import dataclass

from pulumi_kubernetes.meta.v1 import ObjectMetaArgs
from pulumi_kubernetes.scheduling.v1 import PriorityClassInitArgs

from spec.labels import PART_OF
from spec.tenancy import PRIORITY_CLASSES


@dataclass(frozen=True)
class Priority:
    name: str
    value: int
    description: str
    preempts: bool = True


PRIORITIES: tuple[Priority, ...] = (
    Priority("llmp-serving", 100_000, "Online model serving: user-facing latency."),
    Priority("llmp-training-critical", 50_000, "Production pretraining runs."),
    Priority("llmp-training", 10_000, "Fine-tuning and evaluation jobs."),
    Priority(
        "llmp-preemptible",
        1_000,
        "Experiments and backfill: never preempt, first to be preempted.",
        preempts=False,
    ),
)


assert tuple(p.name for p in PRIORITIES) == PRIORITY_CLASSES, "spec.tenancy names them"


def check_priority_class(name: str) -> str:
    """`name` if it is one of PRIORITIES, else ValueError naming them (jobs' validators)."""
    names = [p.name for p in PRIORITIES]
    if name not in names:
        raise ValueError(
            f"not a platform priority class: {name!r} is not one of {', '.join(names)}"
        )
    return name


def priority_class_args(priority: Priority) -> PriorityClassInitArgs:
    return PriorityClassInitArgs(
        metadata=ObjectMetaArgs(name=priority.name, labels=PART_OF),
        value=priority.value,
        global_default=False,
        description=priority.description,
        preemption_policy="PreemptLowerPriority" if priority.preempts else "Never",
    )
