"""The deployed cluster's Kubernetes API, shared by `llmp accept` and `llmp verify`.

`load_apis` reads a kubeconfig into the official client's API objects (or anything with
their methods: the tests use tests/llmp/kube_fake.py); `KubeError` (bad input, exit 2)
says the cluster cannot be used (`fatal`); `Devices`, `readiness` and `shortfall` judge
a GPU node: Ready, and advertising every accelerator and EFA interface of its instance
type (the catalog's counts).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from llmp.errors import BadInput
from manifests.jobs.fabric import EFA_RESOURCE
from spec.catalog import catalog
from spec.labels import POOL_LABEL
from workloads.kube_api import (
    REFUSED,
    REQUEST_TIMEOUT,
    KubeApis,
    api_message,
    one_line,
    reason,
    status_of,
    unusable,
)

__all__ = [
    "REFUSED",
    "REQUEST_TIMEOUT",
    "Devices",
    "KubeApis",
    "KubeError",
    "api_message",
    "fatal",
    "load_apis",
    "one_line",
    "pool_nodes",
    "quantity",
    "readiness",
    "reason",
    "shortfall",
    "status_of",
]


class KubeError(BadInput):
    """No usable cluster or kubeconfig: one line, exit 2."""


# --- errors (what an API error says: workloads.kube_api) ----------------------------------


def fatal(
    exc: Exception, host: str, doing: str, refused: Collection[int] = REFUSED
) -> KubeError | None:
    """The KubeError for an error that means "no usable cluster": out of reach, or an HTTP
    status in `refused` (401 and 403 by default). None for any other error."""
    line = unusable(exc, host, doing, refused)
    return KubeError(line) if line is not None else None


# --- the kubeconfig ---------------------------------------------------------------------


class _ErrorLog(logging.Handler):
    """Collects the error lines the kubernetes config loader logs instead of raising."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def load_apis(kubeconfig: str | None, context: str | None) -> KubeApis:
    """API objects from a kubeconfig (default: $KUBECONFIG, else ~/.kube/config).

    The stack's `kubeconfig` output is one (a secret output: `pulumi stack output
    kubeconfig --show-secrets > kubeconfig`); its user runs `aws eks get-token`, so the
    AWS CLI and credentials must be at hand. `aws eks update-kubeconfig` writes one too.
    """
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError:
        raise KubeError("needs the kubernetes client: pip install kubernetes") from None
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    configuration = client.Configuration()
    # The client logs a failed exec plugin (`aws eks get-token`) and goes on without
    # credentials; catch that log line to say it once, instead of a 401 later.
    logged = _ErrorLog()
    root = logging.getLogger()
    root.addHandler(logged)
    try:
        config.load_kube_config(
            config_file=kubeconfig,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except ConfigException as exc:
        hint = ""
        if "No configuration found" in str(exc) or "Invalid kube-config file" in str(exc):
            hint = (
                "; write the stack's with `pulumi stack output kubeconfig --show-secrets > "
                "kubeconfig` and pass --kubeconfig kubeconfig"
            )
        why = one_line(str(exc)).rstrip(".")
        raise KubeError(f"cannot use kubeconfig {where}: {why}{hint}") from None
    except (OSError, ValueError, TypeError) as exc:
        raise KubeError(f"cannot read kubeconfig {where}: {one_line(str(exc))}") from None
    finally:
        root.removeHandler(logged)
    if logged.messages:
        raise KubeError(
            f"kubeconfig {where}: its credential command failed: {one_line(logged.messages[0])}"
        )
    return KubeApis.of(configuration)


# --- GPU nodes --------------------------------------------------------------------------


@dataclass(frozen=True)
class Devices:
    """What every node of a GPU pool advertises (allocatable) when its device plugins work."""

    resource: str
    """nvidia.com/gpu, or aws.amazon.com/neuron."""
    count: int
    efa: int
    """vpc.amazonaws.com/efa interfaces; 0 on a pool without EFA."""

    @classmethod
    def of(cls, instance_type: str, efa: bool) -> Devices:
        """The catalog's counts; ValueError for a type without accelerators."""
        kind = catalog().accelerator_kind(instance_type)
        if kind is None:
            raise ValueError(f"{instance_type} has no accelerators")
        itype = catalog().instance(instance_type)
        return cls(kind.resource, itype.gpu_count, itype.efa_interfaces if efa else 0)

    def __str__(self) -> str:
        efa = f" and {self.efa} {EFA_RESOURCE}" if self.efa else ""
        return f"{self.count} {self.resource}{efa}"


def quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def readiness(node: Any) -> str | None:
    """Why jobs cannot land on `node` ("not Ready", "cordoned"), or None."""
    conditions = {c.type: c.status for c in (node.status.conditions or [])}
    if conditions.get("Ready") != "True":
        return "not Ready"
    return "cordoned" if node.spec.unschedulable else None


def shortfall(node: Any, devices: Devices) -> str | None:
    """What `node` advertises short of `devices` ("advertises 0 of 8 nvidia.com/gpu"), or None."""
    allocatable = node.status.allocatable or {}
    for resource, want in ((devices.resource, devices.count), (EFA_RESOURCE, devices.efa)):
        have = quantity(allocatable.get(resource, 0))
        if want and have < want:
            return f"advertises {have} of {want} {resource}"
    return None


def pool_nodes(apis: KubeApis, pool: str) -> list[Any]:
    """The nodes labelled llm-platform/pool=`pool`; KubeError when the cluster is unusable
    (`fatal`), the client's own error for any other failed read."""
    try:
        listed = apis.core.list_node(
            label_selector=f"{POOL_LABEL}={pool}", _request_timeout=REQUEST_TIMEOUT
        )
    except Exception as exc:
        raise fatal(exc, apis.host, "list nodes") or exc from None
    return list(listed.items)
