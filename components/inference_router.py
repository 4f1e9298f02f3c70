"""InferenceRouter: the endpoint picker of each model with `routing: endpoint-picker`.

Owns, in the serving namespace (the stack's `serving` tenant), only where a model asks
for it:

- the **InferencePool CRD** (inference.networking.k8s.io/v1, gateway-api-inference-
  extension v1.6.0, pinned in the catalog), once;
- per such model: its **InferencePool** (the model's stable pods on their gateways' `peer`
  port: vLLM listens on loopback only), the
  picker's **ServiceAccount**, **Role** and **RoleBinding**, **Deployment**, **Service**
  and **PodDisruptionBudget**, and the **NetworkPolicy** that lets the picker reach the
  API server (its flows with the model pods are the serving component's policies,
  `manifests.serving.network`).

What the picker does and why: `manifests.serving.router`; how the gateway calls it:
`manifests.serving.gateway`. The component expects the Kubernetes provider through
`opts.providers`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from manifests.serving import gateway, router, vllm
from spec.catalog import catalog


@dataclass(frozen=True, kw_only=True)
class InferenceRouterArgs:
    models: Sequence[str]
    """The models routed by the picker (one pool and one picker each)."""
    namespace: pulumi.Input[str]
    """The `serving` tenant namespace (from tenancy: the objects wait for it)."""
    vpc_cidr: str
    """The API server's endpoints are in the VPC: the picker's egress rule."""


class InferenceRouter(pulumi.ComponentResource):
    pools: list[str]

    def __init__(
        self, name: str, args: InferenceRouterArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("llmp:serving:InferenceRouter", name, None, opts)
        pins = catalog().serving
        if pins is None:
            raise ValueError("catalog.yaml has no serving section (the router's pins)")
        child = pulumi.ResourceOptions(parent=self)
        ns = args.namespace
        crd = k8s.yaml.v2.ConfigFile(
            f"{name}-inference-pool-crd", file=pins.inference_pool_crd.url, opts=child
        )
        # An InferencePool is refused until its CRD is served.
        after_crd = pulumi.ResourceOptions(parent=self, depends_on=[crd])
        for model in args.models:
            k8s.core.v1.ServiceAccount(
                f"{name}-{model}", router.service_account_args(ns, model), opts=child
            )
            k8s.rbac.v1.Role(f"{name}-{model}", router.role_args(ns, model), opts=child)
            k8s.rbac.v1.RoleBinding(
                f"{name}-{model}", router.role_binding_args(ns, model), opts=child
            )
            k8s.apps.v1.Deployment(
                f"{name}-{model}",
                router.deployment_args(ns, model, pins.router_image),
                opts=child,
            )
            k8s.core.v1.Service(f"{name}-{model}", router.service_args(ns, model), opts=child)
            k8s.policy.v1.PodDisruptionBudget(
                f"{name}-{model}", router.pdb_args(ns, model), opts=child
            )
            k8s.networking.v1.NetworkPolicy(
                f"{name}-{model}-api-server",
                router.api_server_policy_args(ns, model, args.vpc_cidr),
                opts=child,
            )
            manifest = router.inference_pool(
                model, vllm.selector(model), gateway.PEER_PORT
            ).manifest()
            k8s.apiextensions.CustomResource(
                f"{name}-{model}",
                api_version=manifest["apiVersion"],
                kind=manifest["kind"],
                metadata={**manifest["metadata"], "namespace": ns},
                spec=manifest["spec"],
                opts=after_crd,
            )
        self.pools = list(args.models)
        self.register_outputs({"pools": self.pools})
