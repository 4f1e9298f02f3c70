"""Online model serving: typed Kubernetes objects for vLLM, its gateway, KEDA and the ALB.

Pure functions and pydantic models: they return the `*Args` (or manifest dicts
of custom resources) that `components.serving` hands to `pulumi_kubernetes`,
and the tests read them without a Pulumi runtime.

- `vllm`: per model a Deployment (vLLM plus the authenticating gateway
  sidecar), a Service and a PodDisruptionBudget;
- `gateway`: the Envoy configuration that checks API keys, the Ingress of the
  AWS Load Balancer Controller and the NetworkPolicy that lets the ALB in;
- `keda`: the ScaledObject of each model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

NAMESPACE = "serving"
"""The tenant namespace every model server runs in (tenancy owns it)."""


class ServedModel(Protocol):
    """What the builders read of one served model (the stack's `serving.models[]` items are
    one; a test may pass any object with these attributes)."""

    @property
    def name(self) -> str: ...
    @property
    def revision(self) -> str: ...
    @property
    def node_pool(self) -> str: ...
    @property
    def gpus_per_replica(self) -> int: ...
    @property
    def min_replicas(self) -> int: ...
    @property
    def max_replicas(self) -> int: ...
    @property
    def max_model_len(self) -> int: ...
    @property
    def quantization(self) -> str: ...
    @property
    def target_waiting_requests(self) -> int: ...
    @property
    def max_queued_requests(self) -> int: ...
    @property
    def admission(self) -> Admission: ...


class Admission(Protocol):
    """The gateway's shedding and retry settings of one model."""

    @property
    def retry_after_seconds(self) -> int: ...
    @property
    def retries(self) -> int: ...


class EngineSettings(Protocol):
    """vLLM's resolved engine settings of one model (the stack's `spec.serving.EnginePlan`):
    every value concrete, the GPU memory already checked."""

    @property
    def tensor_parallel_size(self) -> int: ...
    @property
    def max_model_len(self) -> int: ...
    @property
    def max_num_seqs(self) -> int: ...
    @property
    def max_num_batched_tokens(self) -> int: ...
    @property
    def gpu_memory_utilization(self) -> float: ...
    @property
    def enable_prefix_caching(self) -> bool: ...
    @property
    def enable_chunked_prefill(self) -> bool: ...
    @property
    def kv_cache_dtype(self) -> str: ...
    @property
    def speculative(self) -> Mapping[str, object] | None: ...
    @property
    def lora_adapters(self) -> Mapping[str, str]: ...
    @property
    def max_loras(self) -> int: ...
    @property
    def max_lora_rank(self) -> int: ...


class ServingHours(Protocol):
    """Daily hours in which a model keeps its minimum replicas (KEDA's cron trigger)."""

    @property
    def timezone(self) -> str: ...
    @property
    def start(self) -> str: ...
    @property
    def end(self) -> str: ...
