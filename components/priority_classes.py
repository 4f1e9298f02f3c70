"""PriorityClasses: the cluster-wide pod priorities defined in `manifests.scheduling`."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from manifests.scheduling import PRIORITIES, priority_class_args


class PriorityClasses(pulumi.ComponentResource):
    names: list[str]

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmp:scheduling:PriorityClasses", name, None, opts)
        for priority in PRIORITIES:
            k8s.scheduling.v1.PriorityClass(
                f"{name}-{priority.name}",
                priority_class_args(priority),
                pulumi.ResourceOptions(parent=self),
            )
        self.names = [p.name for p in PRIORITIES]
        self.register_outputs({"names": self.names})
