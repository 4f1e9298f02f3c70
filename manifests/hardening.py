"""The security contexts of the platform's own pods (the model servers, the straggler
watcher, the milestone copier): a non-root uid of no user of the image, no privilege
escalation, no capabilities, the runtime's seccomp profile, a read-only root file system.
What checkov's workload checks and Pod Security's restricted profile ask for."""

from __future__ import annotations

from pulumi_kubernetes.core.v1 import (
    CapabilitiesArgs,
    PodSecurityContextArgs,
    SeccompProfileArgs,
    SecurityContextArgs,
)


def container_context(uid: int) -> SecurityContextArgs:
    return SecurityContextArgs(
        allow_privilege_escalation=False,
        capabilities=CapabilitiesArgs(drop=["ALL"]),
        seccomp_profile=SeccompProfileArgs(type="RuntimeDefault"),
        read_only_root_filesystem=True,
        run_as_non_root=True,
        run_as_user=uid,
        run_as_group=uid,
    )


def pod_context(uid: int, fs_group: int | None = None) -> PodSecurityContextArgs:
    """`fs_group`: the group that owns the pod's volumes (a server writing to one)."""
    return PodSecurityContextArgs(
        run_as_non_root=True,
        run_as_user=uid,
        run_as_group=uid,
        fs_group=fs_group,
        seccomp_profile=SeccompProfileArgs(type="RuntimeDefault"),
    )
