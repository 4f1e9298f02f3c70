"""The cluster's Kubernetes API as the platform's libraries use it: the API objects, the
timeout of every call, and what an API error says, in one line.

`llmp.clients.kube` (the operator CLI) builds on this and adds the kubeconfig and its own errors;
in-cluster code (the straggler watcher) builds `KubeApis` from its service account
(`in_cluster_apis`). The official client (`kubernetes`) is imported only when a function
needs it: the Pulumi program imports this layer and must not import the client.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

REQUEST_TIMEOUT = (10, 60)
"""Connect and read timeouts of every API call: a private endpoint out of reach must not hang."""
REFUSED = frozenset({401, 403})


@dataclass(frozen=True)
class KubeApis:
    """The client's CoreV1Api, BatchV1Api, AppsV1Api and CustomObjectsApi (or anything with
    the same methods), and the API server's address for messages."""

    core: Any
    batch: Any
    apps: Any
    custom: Any
    host: str

    @classmethod
    def of(cls, configuration: Any) -> KubeApis:
        """The APIs of a loaded `kubernetes.client.Configuration`, failing fast: one retry,
        where urllib3 would otherwise retry each call 3 times on an endpoint out of reach."""
        from kubernetes import client

        configuration.retries = 1
        api_client = client.ApiClient(configuration)
        return cls(
            core=client.CoreV1Api(api_client),
            batch=client.BatchV1Api(api_client),
            apps=client.AppsV1Api(api_client),
            custom=client.CustomObjectsApi(api_client),
            host=configuration.host,
        )


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


def unusable(
    exc: Exception, host: str, doing: str, refused: Collection[int] = REFUSED
) -> str | None:
    """The line for an error that means "no usable cluster": out of reach, or an HTTP status
    in `refused` (401 and 403 by default). None for any other error."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(exc, ApiException):
        if exc.status in refused:
            return (
                f"the cluster API at {host} refused to {doing}: {exc.status} {exc.reason}: "
                f"{api_message(exc)}"
            )
        return None
    if isinstance(exc, HTTPError | OSError):
        why = getattr(exc, "reason", None) or exc
        return f"cannot reach the cluster API at {host}: {one_line(str(why))}"
    return None


class NoCluster(RuntimeError):
    """No in-cluster API to use (one line)."""


def in_cluster_apis() -> KubeApis:
    """API objects from the pod's service account (its token, CA and the API server's
    address from the environment Kubernetes gives every pod). NoCluster when the client is
    missing or the pod has no service account token."""
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError:
        raise NoCluster("needs the Kubernetes client: pip install kubernetes") from None
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except ConfigException as exc:
        raise NoCluster(f"no in-cluster Kubernetes API: {one_line(str(exc))}") from None
    return KubeApis.of(configuration)
