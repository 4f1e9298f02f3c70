"""The deployed cluster's Kubernetes API, shared by `llmp accept` and `llmp verify`.

`load_apis` reads a kubeconfig into the official client's API objects (or anything with
their methods: the tests use tests/llmp/kube_fake.py); `KubeError` (bad input, exit 2)
says the cluster cannot be used (`fatal`); `Devices`, `readiness` and `shortfall` judge
a GPU node: Ready, and advertising every accelerator and EFA interface of its instance
type (the catalog's counts).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from llmp.errors import BadInput
from spec.catalog import catalog
from spec.labels import POOL_LABEL
from workloads.jobs.fabric import EFA_RESOURCE

REQUEST_TIMEOUT = (10, 60)
"""Connect and read timeouts of every API call: a private endpoint out of reach must not hang."""
REFUSED = frozenset({401, 403})


class KubeError(BadInput):
    """No usable cluster or kubeconfig: one line, exit 2."""


@dataclass(frozen=True)
class KubeApis:
    """The client's CoreV1Api, BatchV1Api, AppsV1Api and CustomObjectsApi (or anything with
    the same methods), and the API server's address for messages."""

    core: Any
    batch: Any
    apps: Any
    custom: Any
    host: str


# --- errors -----------------------------------------------------------------------------


def one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def status_of(exc: Exception) -> int | None:
    """The HTTP status of the client's ApiException; None for any other error."""
    from kubernetes.client.exceptions import ApiException

    return exc.status if isinstance(exc, ApiException) else None


def api_message(exc: Any) -> str:
    """The `message` of a Kubernetes Status body, else the HTTP reason."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return one_line(str(message or exc.reason or "no detail"))


def reason(exc: Exception) -> str:
    """`STATUS message` of an API error, else the error's own text: one line."""
    status = status_of(exc)
    return f"{status} {api_message(exc)}" if status else one_line(str(exc))


def fatal(
    exc: Exception, host: str, doing: str, refused: Collection[int] = REFUSED
) -> KubeError | None:
    """The KubeError for an error that means "no usable cluster": out of reach, or an HTTP
    status in `refused` (401 and 403 by default). None for any other error."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(exc, ApiException):
        if exc.status in refused:
            return KubeError(
                f"the cluster API at {host} refused to {doing}: {exc.status} {exc.reason}: "
                f"{api_message(exc)}"
            )
        return None
    if isinstance(exc, HTTPError | OSError):
        why = getattr(exc, "reason", None) or exc
        return KubeError(f"cannot reach the cluster API at {host}: {one_line(str(why))}")
    return None


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
    # Fail fast on an endpoint out of reach; urllib3 would otherwise retry each call 3 times.
    configuration.retries = 1
    api_client = client.ApiClient(configuration)
    return KubeApis(
        core=client.CoreV1Api(api_client),
        batch=client.BatchV1Api(api_client),
        apps=client.AppsV1Api(api_client),
        custom=client.CustomObjectsApi(api_client),
        host=configuration.host,
    )


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
