"""One local Ray for the whole session: ray.init costs ~10 s on 2 cores, so every Ray test
of the text and multimodal pipelines shares it (a second ray.init in the same process
would fail)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    import ray
    import ray.data

    # Dummy credentials for the workers, standing in for a pod's own (Pod Identity on
    # EKS): a worker has the environment Ray started it with, not a test's monkeypatch, so
    # an s3:// test against moto (the endpoint ships with each task) signs with these, and
    # no worker of the test session can reach a real account or instance metadata.
    dummy = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/nonexistent/aws-config",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": dummy},
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        yield
    finally:
        ray.shutdown()
