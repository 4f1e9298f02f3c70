"""Online model serving: typed Kubernetes objects for vLLM, its gateway, KEDA and the ALB.

Pure functions and pydantic models: they return the `*Args` (or manifest dicts
of custom resources) that `components.serving` hands to `pulumi_kubernetes`,
and the tests read them without a Pulumi runtime.

- `vllm`: per model a Deployment (vLLM on loopback plus the authenticating gateway
  sidecar, its only door), a Service and a PodDisruptionBudget;
- `gateway`: the Envoy configuration that checks API keys (a bootstrap without keys, and
  the keyed listeners that reach the pod from Secrets Manager), the Ingress of the AWS
  Load Balancer Controller and the NetworkPolicy that lets the ALB in;
- `keys`: the gateway's keys as AWS Secrets Manager holds them and the SecretProviderClass
  that mounts them into the gateway (Secrets Store CSI driver, AWS provider);
- `network`: the serving namespace's flows by port, as NetworkPolicies;
- `keda`: the ScaledObject of each model.

The ports of a model pod are declared here, once: every one is an Envoy listener of the
gateway sidecar, and vLLM listens only on the pod's loopback (`manifests.serving.gateway`
says why).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

NAMESPACE = "serving"
"""The tenant namespace every model server runs in (tenancy owns it)."""

API_PORT = 8080
"""The gateway's API listener (`http`): client keys, rate limits; the ALB's target."""
HEALTH_PORT = 8081
"""The gateway's `health` listener: `GET /health` only, the ALB's target health check."""
PEER_PORT = 8082
"""The gateway's `peer` listener (endpoint-picker models): the replica the picker chose,
reached by the model's other gateways with the client's key; the InferencePool's port."""
METRICS_PORT = 8090
"""The gateway's `metrics` listener: `GET /metrics` only (vLLM's), for Prometheus and the
endpoint picker; nothing else is served on it."""
VLLM_PORT = 8000
"""vLLM's OpenAI server, bound to 127.0.0.1: only the pod's own gateway reaches it."""
VLLM_HOST = "127.0.0.1"


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
    @property
    def nodes_per_replica(self) -> int: ...
    @property
    def live_canary(self) -> CanaryRelease | None: ...
    @property
    def routing(self) -> Literal["round-robin", "endpoint-picker"]: ...


class CanaryRelease(Protocol):
    """A canary of a new revision with a share of the model's traffic."""

    @property
    def revision(self) -> str: ...
    @property
    def weight(self) -> int: ...
    @property
    def replicas(self) -> int: ...


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
    @property
    def pipeline_parallel_size(self) -> int: ...
    @property
    def otlp_traces_endpoint(self) -> str | None: ...


class ServingHours(Protocol):
    """Daily hours in which a model keeps its minimum replicas (KEDA's cron trigger)."""

    @property
    def timezone(self) -> str: ...
    @property
    def start(self) -> str: ...
    @property
    def end(self) -> str: ...
