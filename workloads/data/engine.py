"""What both data pipelines' command lines share: their config file and their Ray.

- `load_config(path, model)`: a YAML or JSON file (the RayJob mounts `pipeline.json` from
  its ConfigMap) validated by the pipeline's pydantic model, every mistake one line that
  names the file, the key path and what is wrong (`cfg.yaml: video.fsp: unknown key (got
  2)`), never a traceback.
- `connect(address)`: inside a KubeRay RayJob the submitter sets RAY_ADDRESS and the
  driver joins that cluster; `--address` names one explicitly; without either a local Ray
  starts (a laptop, the tests). An already started Ray (a test session's) is used as it is.
- `s3_endpoint()` / `filesystem(uri, endpoint)`: where s3:// URIs go. The standard AWS
  variables `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` (a VPC endpoint, a local S3, the
  tests' moto) are read on the driver and handed to the tasks, because a Ray worker is
  another process, often on another pod, that does not have the driver's environment.
  Only the endpoint travels, never a credential: on EKS every worker pod gets its own
  Pod Identity credentials from the agent, which pyarrow's default chain finds there.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyarrow import fs as pafs


ENDPOINT_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def s3_endpoint() -> str | None:
    """The S3 endpoint this process's environment names (`AWS_ENDPOINT_URL_S3`, else
    `AWS_ENDPOINT_URL`, as the AWS SDKs read them), or None for AWS's own."""
    for var in ENDPOINT_VARS:
        if value := os.environ.get(var):
            return value
    return None


def filesystem(uri: str, endpoint: str | None = None) -> tuple[pafs.FileSystem, str]:
    """(pyarrow file system, path without a trailing slash) of a local path or a URI.

    An s3:// URI goes to `endpoint` when given (the driver's `s3_endpoint()`, shipped with
    the task), else to this process's own `s3_endpoint()`, else to AWS (the bucket's
    region resolved by pyarrow). Credentials are always this process's default chain."""
    from pyarrow import fs as pafs

    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    endpoint = endpoint or s3_endpoint()
    if uri.startswith("s3://") and endpoint:
        rest = uri.removeprefix("s3://")
        scheme, _, host = endpoint.partition("://")
        if not host:
            scheme, host = "https", endpoint
        s3 = pafs.S3FileSystem(
            endpoint_override=host.rstrip("/"),
            scheme=scheme,
            region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
        )
        return s3, rest.split("?", 1)[0].rstrip("/")
    filesystem, root = pafs.FileSystem.from_uri(uri)
    return filesystem, root.rstrip("/")


def connect(address: str | None = None) -> None:
    """Join the Ray cluster at `address` or $RAY_ADDRESS, else start a local one."""
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(include_dashboard=False, log_to_driver=False)
