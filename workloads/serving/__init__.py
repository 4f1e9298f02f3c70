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

NAMESPACE = "serving"
"""The tenant namespace every model server runs in (tenancy owns it)."""
