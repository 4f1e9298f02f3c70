"""The API's front door: ALB (HTTPS only, WAF) -> Envoy sidecar (API keys) -> vLLM.

Why this layer: vLLM's own `--api-key` takes one key for everyone and leaves
`/metrics` and `/health` open, and the ALB can only authenticate browsers
(OIDC/Cognito), not API clients. So each model pod runs a pinned Envoy as a
sidecar in front of vLLM:

- port 8080 (`http`, the only port the Ingress routes to) forwards
  `/<model>/v1/...` to vLLM's `/v1/...` on localhost, and only when the
  `authorization` header is `Bearer <key>` of a known client (Envoy's RBAC
  filter); any other path gets 404, any other request 403. Nothing of vLLM is
  reachable from the ALB without a key: not `/metrics`, not `/health`;
- port 8081 (`health`) answers only `GET /health` (proxied to vLLM): the
  ALB's target health check, never routed by the Ingress.

The keys come from secret stack config (`llm-platform-serving:<client>`),
reach the cluster only inside a Kubernetes Secret holding the Envoy
configuration, and stay secret in every plan (`pulumi.Output.secret`). A
client without a key is refused (fail closed). The WAF in front of the ALB
rate-limits per key and per source IP (`components.serving`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import yaml
from pulumi_kubernetes.core.v1 import SecretInitArgs
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, ObjectMetaArgs
from pulumi_kubernetes.networking.v1 import (
    HTTPIngressPathArgs,
    HTTPIngressRuleValueArgs,
    IngressBackendArgs,
    IngressInitArgs,
    IngressRuleArgs,
    IngressServiceBackendArgs,
    IngressSpecArgs,
    IPBlockArgs,
    NetworkPolicyIngressRuleArgs,
    NetworkPolicyInitArgs,
    NetworkPolicyPeerArgs,
    NetworkPolicyPortArgs,
    NetworkPolicySpecArgs,
    ServiceBackendPortArgs,
)

from spec.labels import PART_OF

API_PORT = 8080
HEALTH_PORT = 8081
ADMIN_PORT = 9901
VLLM_PORT = 8000
GATEWAY_SECRET = "serving-gateway"
KEY_HEADER = "authorization"
INGRESS_NAME = "serving-api"
SSL_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"
REQUEST_TIMEOUT_S = 600
"""A long generation streams for minutes: ALB idle timeout and Envoy route timeout."""


def _listener(name: str, port: int, routes: list[dict[str, Any]], rbac: Any) -> dict[str, Any]:
    filters: list[dict[str, Any]] = []
    if rbac is not None:
        filters.append(
            {
                "name": "envoy.filters.http.rbac",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC",
                    "rules": rbac,
                },
            }
        )
    filters.append(
        {
            "name": "envoy.filters.http.router",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
            },
        }
    )
    hcm = (
        "type.googleapis.com/envoy.extensions.filters.network."
        "http_connection_manager.v3.HttpConnectionManager"
    )
    return {
        "name": name,
        "address": {"socket_address": {"address": "0.0.0.0", "port_value": port}},
        "filter_chains": [
            {
                "filters": [
                    {
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": {
                            "@type": hcm,
                            "stat_prefix": name,
                            "use_remote_address": False,
                            "xff_num_trusted_hops": 1,
                            "route_config": {
                                "name": name,
                                "virtual_hosts": [
                                    {"name": name, "domains": ["*"], "routes": routes}
                                ],
                            },
                            "http_filters": filters,
                        },
                    }
                ]
            }
        ],
    }


def _not_found() -> dict[str, Any]:
    return {"match": {"prefix": "/"}, "direct_response": {"status": 404}}


def envoy_config(model: str, keys: Mapping[str, str | None]) -> dict[str, Any]:
    """Envoy's bootstrap for one model: keys are client -> API key (None: no key, refused)."""
    policies = {
        client: {
            "permissions": [{"any": True}],
            "principals": [
                {
                    "header": {
                        "name": KEY_HEADER,
                        "string_match": {"exact": f"Bearer {key}"},
                    }
                }
            ],
        }
        for client, key in sorted(keys.items())
        if key
    }
    # ALLOW with no policy matches nothing: without any key every request is refused.
    rbac = {"action": "ALLOW", "policies": policies}
    api_routes = [
        {
            "match": {"prefix": f"/{model}/v1/"},
            "route": {
                "cluster": "vllm",
                "prefix_rewrite": "/v1/",
                "timeout": f"{REQUEST_TIMEOUT_S}s",
            },
        },
        _not_found(),
    ]
    health_routes = [
        {"match": {"path": "/health"}, "route": {"cluster": "vllm", "timeout": "5s"}},
        _not_found(),
    ]
    return {
        "admin": {
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": ADMIN_PORT}}
        },
        "static_resources": {
            "listeners": [
                _listener("api", API_PORT, api_routes, rbac),
                _listener("health", HEALTH_PORT, health_routes, None),
            ],
            "clusters": [
                {
                    "name": "vllm",
                    "type": "STATIC",
                    "connect_timeout": "2s",
                    "load_assignment": {
                        "cluster_name": "vllm",
                        "endpoints": [
                            {
                                "lb_endpoints": [
                                    {
                                        "endpoint": {
                                            "address": {
                                                "socket_address": {
                                                    "address": "127.0.0.1",
                                                    "port_value": VLLM_PORT,
                                                }
                                            }
                                        }
                                    }
                                ]
                            }
                        ],
                    },
                }
            ],
        },
    }


def gateway_secret_args(
    namespace: pulumi.Input[str],
    models: list[str],
    keys: Mapping[str, pulumi.Input[str] | None],
    labels: Mapping[str, str],
) -> SecretInitArgs:
    """One Secret with `<model>.yaml` per model: the Envoy configurations, keys included."""
    clients = sorted(keys)
    present = [keys[c] for c in clients]

    def render(model: str) -> pulumi.Output[str]:
        def dump(values: list[Any]) -> str:
            resolved = dict(zip(clients, values, strict=True))
            return yaml.safe_dump(envoy_config(model, resolved), sort_keys=False)

        # Each value secret on its own: a plan shows the keys of the Secret, never a key.
        return pulumi.Output.secret(pulumi.Output.all(*present).apply(dump))

    return SecretInitArgs(
        metadata=ObjectMetaArgs(name=GATEWAY_SECRET, namespace=namespace, labels=dict(labels)),
        type="Opaque",
        string_data={f"{m}.yaml": render(m) for m in models},
    )


def ingress_annotations(
    scheme: str, certificate_arn: str, web_acl_arn: pulumi.Input[str]
) -> dict[str, pulumi.Input[str]]:
    """The Load Balancer Controller's settings; only the WAF's ARN waits for the WAF (the
    rest is known in a preview, and the cost estimate reads the scheme)."""
    return {
        "alb.ingress.kubernetes.io/scheme": scheme,
        "alb.ingress.kubernetes.io/target-type": "ip",
        # HTTPS only: no HTTP listener exists, so nothing is served in clear; the
        # redirect stays set should anyone add port 80.
        "alb.ingress.kubernetes.io/listen-ports": json.dumps([{"HTTPS": 443}]),
        "alb.ingress.kubernetes.io/ssl-redirect": "443",
        "alb.ingress.kubernetes.io/certificate-arn": certificate_arn,
        "alb.ingress.kubernetes.io/ssl-policy": SSL_POLICY,
        "alb.ingress.kubernetes.io/wafv2-acl-arn": web_acl_arn,
        "alb.ingress.kubernetes.io/backend-protocol": "HTTP",
        "alb.ingress.kubernetes.io/healthcheck-port": str(HEALTH_PORT),
        "alb.ingress.kubernetes.io/healthcheck-path": "/health",
        "alb.ingress.kubernetes.io/load-balancer-attributes": (
            f"idle_timeout.timeout_seconds={REQUEST_TIMEOUT_S},"
            "routing.http.drop_invalid_header_fields.enabled=true"
        ),
    }


def ingress_args(
    namespace: pulumi.Input[str],
    *,
    hostname: str,
    certificate_arn: str,
    scheme: str,
    models: Sequence[str],
    web_acl_arn: pulumi.Input[str],
    labels: Mapping[str, str],
) -> IngressInitArgs:
    """The ALB's Ingress: HTTPS on 443 for `hostname`, a path `/<model>/` per model."""
    paths = [
        HTTPIngressPathArgs(
            path=f"/{model}/",
            path_type="Prefix",
            backend=IngressBackendArgs(
                service=IngressServiceBackendArgs(
                    name=model, port=ServiceBackendPortArgs(name="http")
                )
            ),
        )
        for model in models
    ]
    annotations = ingress_annotations(scheme, certificate_arn, web_acl_arn)
    return IngressInitArgs(
        metadata=ObjectMetaArgs(
            name=INGRESS_NAME, namespace=namespace, labels=dict(labels), annotations=annotations
        ),
        spec=IngressSpecArgs(
            ingress_class_name="alb",
            rules=[IngressRuleArgs(host=hostname, http=HTTPIngressRuleValueArgs(paths=paths))],
        ),
    )


def alb_network_policy_args(
    namespace: pulumi.Input[str], vpc_cidr: str, pod_labels: Mapping[str, str]
) -> NetworkPolicyInitArgs:
    """The ALB (target type ip) reaches the gateway's ports from the VPC, nothing else."""
    return NetworkPolicyInitArgs(
        metadata=ObjectMetaArgs(name="allow-alb", namespace=namespace, labels=PART_OF),
        spec=NetworkPolicySpecArgs(
            pod_selector=LabelSelectorArgs(match_labels=dict(pod_labels)),
            policy_types=["Ingress"],
            ingress=[
                NetworkPolicyIngressRuleArgs(
                    from_=[NetworkPolicyPeerArgs(ip_block=IPBlockArgs(cidr=vpc_cidr))],
                    ports=[
                        NetworkPolicyPortArgs(protocol="TCP", port=API_PORT),
                        NetworkPolicyPortArgs(protocol="TCP", port=HEALTH_PORT),
                    ],
                )
            ],
        ),
    )
