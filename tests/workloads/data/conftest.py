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

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        yield
    finally:
        ray.shutdown()
