"""The API's front door: ALB (HTTPS only, WAF) -> Envoy sidecar (API keys) -> vLLM on loopback.

Why this layer: vLLM's own `--api-key` takes one key for everyone and leaves
`/metrics` and `/health` open, and the ALB can only authenticate browsers
(OIDC/Cognito), not API clients. So each model pod runs a pinned Envoy as a
sidecar in front of vLLM.

**One door.** vLLM listens on 127.0.0.1:8000 of its pod (`--host 127.0.0.1`): no other
pod, the endpoint picker and Prometheus included, reaches it. Every port the pod serves
is a listener of this gateway, and each either checks a client's key before anything
reaches vLLM or answers one read-only path:

- 8080 `http` (the only port the Ingress routes to) forwards `/<model>/v1/...` to vLLM's
  `/v1/...`, and only when the `authorization` header is `Bearer <key>` of a client of the
  model (Envoy's RBAC filter); any other path gets 404, any other request 403;
- 8081 `health` answers only `GET /health` (proxied to vLLM): the ALB's target health
  check, never routed by the Ingress;
- 8090 `metrics` answers only `GET /metrics` (vLLM's Prometheus text): what Prometheus
  and the endpoint picker scrape; anything else gets 404;
- 8082 `peer` (models with `routing: endpoint-picker` only) is the door of a replica the
  picker chose for a request another gateway took in: that gateway checked the key and
  spent the client's token, and forwards the request with the client's `authorization`
  as it came; the peer listener checks it again against the same RBAC policies (no
  second rate limit) and hands it to its own vLLM through the shed point.

Why loopback rather than a key of vLLM's own (`--api-key`, which only the gateway would
hold, replacing the client's header as it forwards): the pinned vLLM v0.34.0 checks that
key only on paths under `/v1`, `/v2`, `/inference` and `/cohere` (its own help for the flag
says so); its server answers more outside them (tokenization, SageMaker's `/invocations`,
which runs a completion), and whatever a later release adds would be open until someone
noticed. On loopback nothing of vLLM's is on the
network at all, and the gateway's routes are an allow list. What it costs: the kubelet's
probes of vLLM run inside its container (an exec of python3 against 127.0.0.1), and the
picker's two hops (its scrape, the picked forward) go to the `metrics` and `peer`
listeners instead of vLLM's port. A multi-node replica's leader binds its server to
loopback the same way; its Ray ports are fenced to the pods of its own LeaderWorkerSet
(`manifests.serving.network`).

**Keys.** The keys come from secret stack config (`llm-platform-serving:<client>`) and
reach the cluster only inside AWS Secrets Manager (`manifests.serving.keys`). The
gateway's configuration is in two parts:

- the **bootstrap** (`bootstrap`): admin on loopback, the `health` and `metrics`
  listeners, the clusters, and a listener source that reads the keyed listeners from a
  file: no key in it. It is the container's `--config-yaml` argument, part of the pod
  template: no ConfigMap a tenant could edit, and a change rolls the pods;
- the **keyed listeners** (`listeners_file`: `api`, and `peer` where the model is
  picked), an LDS DiscoveryResponse that is the model's secret in Secrets Manager. The
  Secrets Store CSI driver mounts it into the gateway (`/etc/envoy/keys`, never a
  Kubernetes Secret) and, on rotation, rewrites it atomically (a `..data` symlink swap);
  Envoy watches the directory and swaps the listeners in place.

A client without a key is refused (fail closed); a keyed listener that fails to load
leaves the previous one serving, and a pod whose keys cannot be mounted never starts. The
WAF in front of the ALB rate-limits per key and per source IP (`components.serving`).

Protecting the latency SLO (Envoy v1.40, the catalog's pin), per replica:

- **authorization**: the RBAC policies are the clients that may call this model
  (`serving.models[].clients`); another client's key gets 403;
- **rate limit per client key**: the local rate limit filter, one token bucket per
  client (a route `rate_limits` action matches the client's key in the header and
  names the descriptor after the client, never the key); past it 429 with
  `retry-after: 1` (the bucket refills every second);
- **load shedding**: the local vLLM cluster's circuit breaker admits `max_requests` =
  max_num_seqs + max_queued_requests at once (the batch, and a queue that vLLM
  holds, where KEDA sees it as `vllm:num_requests_waiting`). HTTP/1.1 to vLLM takes
  a connection per request; connections may reach twice that, so the connection
  limit never queues: a request beyond `max_requests` fails at once with Envoy's
  overflow (503, response flag UO), which `local_reply_config` turns into 429 with
  `retry-after` (the model's `admission.retry_after_seconds`). Every request to a vLLM
  passes its own gateway's local cluster (the `api` route, or the `peer` listener for a
  picked one), so the breaker counts all of them, from whichever gateway;
- **timeouts and retries**: the route timeout covers the whole response (a long
  stream), and so does each try's (Envoy disarms a try's timer only when its
  response ends), so `per_try_timeout` equals the route's; retries are only for
  failures before vLLM got the request (connect-failure, refused-stream,
  reset-before-request), at most `admission.retries`, with a small back-off. Envoy
  never retries once response headers went downstream, so a request that already
  streamed is never sent twice. The `peer` hop does not retry (the first gateway does).

Where a model has `routing: endpoint-picker`, the API route asks the model's endpoint
picker (`manifests.serving.router`) which replica serves the request: after RBAC and the
rate limit, a header mutation drops any client-sent `x-gateway-destination-endpoint`,
the external processing filter (ext_proc, the picker's gRPC service, fail closed) sets
it to the chosen pod's `ip:port` (its `peer` port, the InferencePool's), and the `picked`
cluster (ORIGINAL_DST, the header as destination) forwards there; retries and timeouts
stay on that route. With `round-robin` (the default) the sidecar forwards to its own vLLM
and the ALB's round robin over the pods is the routing.

Where traces are on (`monitoring.traces`), the API listener's connection manager traces
every request with Envoy's OpenTelemetry tracer to the in-cluster collector's OTLP gRPC
port (cluster `otel-collector`); vLLM continues the trace from the `traceparent` header.

Envoy since v1.40 sizes its worker threads to the container's CPU limit when `--concurrency`
is not given (before, to the node's hardware threads: up to 192 on a p5, each with its
connection pools, in a 512 MiB container), so the sidecar runs as many workers as its limit
has cores.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import pulumi
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
    NetworkPolicyEgressRuleArgs,
    NetworkPolicyIngressRuleArgs,
    NetworkPolicyInitArgs,
    NetworkPolicyPeerArgs,
    NetworkPolicyPortArgs,
    NetworkPolicySpecArgs,
    ServiceBackendPortArgs,
)

from manifests.serving import API_PORT as API_PORT
from manifests.serving import HEALTH_PORT as HEALTH_PORT
from manifests.serving import METRICS_PORT as METRICS_PORT
from manifests.serving import PEER_PORT as PEER_PORT
from manifests.serving import VLLM_HOST as VLLM_HOST
from manifests.serving import VLLM_PORT as VLLM_PORT
from manifests.serving import EngineSettings, ServedModel, router
from spec.labels import PART_OF

ADMIN_PORT = 9901
KEYS_DIR = "/etc/envoy/keys"
"""Where the Secrets Store CSI driver mounts the model's keyed listeners (the gateway only)."""
LISTENERS_FILE = "listeners.yaml"
"""The keyed listeners' file in KEYS_DIR (the object's alias in the SecretProviderClass)."""
LISTENER_TYPE = "type.googleapis.com/envoy.config.listener.v3.Listener"
KEY_HEADER = "authorization"
INGRESS_NAME = "serving-api"
SSL_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"
REQUEST_TIMEOUT_S = 600
"""A long generation streams for minutes: ALB idle timeout and Envoy route timeout."""
RETRY_ON = "connect-failure,refused-stream,reset-before-request"
"""Failures before vLLM received the request: safe to retry a generation after them."""
CLIENT_DESCRIPTOR = "client"
SHED_FLAG = "UO"
"""Envoy's response flag of an upstream overflow (circuit breaker)."""
_TYPE = "type.googleapis.com/envoy.extensions.filters"
RBAC_TYPE = f"{_TYPE}.http.rbac.v3.RBAC"
RATE_LIMIT_TYPE = f"{_TYPE}.http.local_ratelimit.v3.LocalRateLimit"
ROUTER_TYPE = f"{_TYPE}.http.router.v3.Router"
HCM_TYPE = f"{_TYPE}.network.http_connection_manager.v3.HttpConnectionManager"
EXT_PROC_TYPE = f"{_TYPE}.http.ext_proc.v3.ExternalProcessor"
HEADER_MUTATION_TYPE = f"{_TYPE}.http.header_mutation.v3.HeaderMutation"
OTEL_TRACER_TYPE = "type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig"
HTTP_OPTIONS_TYPE = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
RATE_LIMIT_FILTER = "envoy.filters.http.local_ratelimit"
EXT_PROC_FILTER = "envoy.filters.http.ext_proc"
LOCAL_CLUSTER = "vllm"
"""This pod's vLLM (round-robin routing, and the ALB's health check)."""
PICKED_CLUSTER = "picked"
"""The replica the endpoint picker chose (ORIGINAL_DST on its header)."""
PICKER_CLUSTER = "endpoint-picker"
TRACES_CLUSTER = "otel-collector"
Routing = Literal["round-robin", "endpoint-picker"]


@dataclass(frozen=True)
class ClientRate:
    """One client key's token bucket in a replica's gateway."""

    requests_per_second: int
    burst: int


@dataclass(frozen=True, kw_only=True)
class GatewayModel:
    """What one model's gateway enforces, per replica."""

    name: str
    max_requests: int
    """Requests in vLLM at once (batch + queue); beyond: 429."""
    retry_after_seconds: int = 2
    retries: int = 2
    clients: tuple[str, ...]
    """The clients that may call the model."""
    rates: Mapping[str, ClientRate] = field(default_factory=dict)
    """Client -> its bucket; a client missing here gets DEFAULT_RATE."""
    routing: Routing = "round-robin"
    """round-robin: this pod's vLLM; endpoint-picker: the replica the model's EPP picks."""
    picker_host: str | None = None
    """The endpoint picker Service's DNS name (endpoint-picker routing)."""
    traces: TraceCollector | None = None
    """Where the gateway sends its spans; None: no tracing."""

    def __post_init__(self) -> None:
        if self.routing == "endpoint-picker" and not self.picker_host:
            raise ValueError(f"{self.name}: endpoint-picker routing needs the picker's host")


@dataclass(frozen=True)
class TraceCollector:
    """An OTLP gRPC receiver: host and port (Envoy's tracer takes a cluster, not a URL)."""

    host: str
    port: int

    @classmethod
    def from_endpoint(cls, endpoint: str) -> TraceCollector:
        """`http://host:port` (the form vLLM's `--otlp-traces-endpoint` takes)."""
        url = urlsplit(endpoint)
        if not url.hostname or not url.port:
            raise ValueError(f"an OTLP endpoint is http://host:port, not {endpoint!r}")
        return cls(host=url.hostname, port=url.port)


DEFAULT_RATE = ClientRate(requests_per_second=20, burst=40)


def gateway_model(
    model: ServedModel,
    engine: EngineSettings,
    clients: Sequence[str],
    rates: Mapping[str, ClientRate],
    traces_endpoint: str | None = None,
) -> GatewayModel:
    """The gateway's limits of `model`: its batch and queue, its clients and their buckets,
    its routing, and where its spans go (`traces_endpoint`, OTLP gRPC; None: untraced)."""
    picked = model.routing == "endpoint-picker"
    return GatewayModel(
        name=model.name,
        max_requests=engine.max_num_seqs + model.max_queued_requests,
        retry_after_seconds=model.admission.retry_after_seconds,
        retries=model.admission.retries,
        clients=tuple(clients),
        rates={c: rates.get(c, DEFAULT_RATE) for c in clients},
        routing=model.routing,
        picker_host=router.picker_host(model.name) if picked else None,
        traces=TraceCollector.from_endpoint(traces_endpoint) if traces_endpoint else None,
    )


def _http_filter(name: str, config: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "typed_config": config}


def _header_option(key: str, value: str) -> dict[str, Any]:
    return {"header": {"key": key, "value": value}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}


def _listener(
    name: str,
    port: int,
    routes: list[dict[str, Any]],
    filters: list[dict[str, Any]],
    local_reply: dict[str, Any] | None = None,
    tracing: dict[str, Any] | None = None,
) -> dict[str, Any]:
    router = {"@type": ROUTER_TYPE, "suppress_envoy_headers": True}
    hcm: dict[str, Any] = {
        "@type": HCM_TYPE,
        "stat_prefix": name,
        "use_remote_address": False,
        "xff_num_trusted_hops": 1,
        "route_config": {
            "name": name,
            "virtual_hosts": [{"name": name, "domains": ["*"], "routes": routes}],
        },
        "http_filters": [*filters, _http_filter("envoy.filters.http.router", router)],
    }
    if local_reply is not None:
        hcm["local_reply_config"] = local_reply
    if tracing is not None:
        hcm["tracing"] = tracing
    return {
        "name": name,
        "address": {"socket_address": {"address": "0.0.0.0", "port_value": port}},
        "filter_chains": [
            {
                "filters": [
                    {"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}
                ]
            }
        ],
    }


def _not_found() -> dict[str, Any]:
    return {"match": {"prefix": "/"}, "direct_response": {"status": 404}}


def _key_header(key: str) -> dict[str, Any]:
    return {"name": KEY_HEADER, "string_match": {"exact": f"Bearer {key}"}}


def _bucket(rate: ClientRate) -> dict[str, Any]:
    return {
        "max_tokens": rate.burst,
        "tokens_per_fill": rate.requests_per_second,
        "fill_interval": "1s",
    }


def _all(numerator: int = 100) -> dict[str, Any]:
    return {"default_value": {"numerator": numerator, "denominator": "HUNDRED"}}


def rbac_rules(model: GatewayModel, keys: Mapping[str, str | None]) -> dict[str, Any]:
    """ALLOW the keys of the model's clients; ALLOW with no policy matches nothing, so a
    model no client with a key may call refuses every request."""
    policies = {
        client: {"permissions": [{"any": True}], "principals": [{"header": _key_header(key)}]}
        for client, key in sorted(keys.items())
        if key and client in model.clients
    }
    return {"action": "ALLOW", "policies": policies}


def rate_limit_actions(model: GatewayModel, keys: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """One route rate limit per client: its key in the header -> descriptor client=<name>."""
    return [
        {
            "actions": [
                {
                    "header_value_match": {
                        "descriptor_key": CLIENT_DESCRIPTOR,
                        "descriptor_value": client,
                        "headers": [_key_header(key)],
                    }
                }
            ]
        }
        for client, key in sorted(keys.items())
        if key and client in model.clients
    ]


def client_rate_limit(model: GatewayModel) -> dict[str, Any]:
    """The route's local rate limit: a bucket per client descriptor. The default bucket
    (every client's together) only counts requests no descriptor matched, which RBAC has
    already refused."""
    rates = [model.rates.get(c, DEFAULT_RATE) for c in model.clients]
    total = ClientRate(
        requests_per_second=sum(r.requests_per_second for r in rates) or 1,
        burst=sum(r.burst for r in rates) or 1,
    )
    return {
        "@type": RATE_LIMIT_TYPE,
        "stat_prefix": "client_rate",
        "token_bucket": _bucket(total),
        "filter_enabled": _all(),
        "filter_enforced": _all(),
        "descriptors": [
            {
                "entries": [{"key": CLIENT_DESCRIPTOR, "value": client}],
                "token_bucket": _bucket(model.rates.get(client, DEFAULT_RATE)),
            }
            for client in sorted(model.clients)
        ],
        "always_consume_default_token_bucket": False,
        "enable_x_ratelimit_headers": "DRAFT_VERSION_03",
        "response_headers_to_add": [_header_option("retry-after", "1")],
    }


def retry_policy(model: GatewayModel) -> dict[str, Any]:
    return {
        "retry_on": RETRY_ON,
        "num_retries": model.retries,
        "per_try_timeout": f"{REQUEST_TIMEOUT_S}s",
        "retry_back_off": {"base_interval": "0.1s", "max_interval": "1s"},
    }


def circuit_breakers(model: GatewayModel) -> dict[str, Any]:
    """The shed point: `max_requests` in vLLM at once; connections never the limit."""
    return {
        "thresholds": [
            {
                "priority": "DEFAULT",
                "max_requests": model.max_requests,
                "max_pending_requests": model.max_requests,
                "max_connections": 2 * model.max_requests,
                "max_retries": max(3, model.retries),
                "track_remaining": True,
            }
        ]
    }


def local_reply(model: GatewayModel) -> dict[str, Any]:
    """Envoy's own answers as OpenAI-style JSON errors; the circuit breaker's overflow as
    429 with Retry-After rather than 503, so clients back off instead of failing."""
    return {
        "mappers": [
            {
                "filter": {"response_flag_filter": {"flags": [SHED_FLAG]}},
                "status_code": 429,
                "headers_to_add": [_header_option("retry-after", str(model.retry_after_seconds))],
                "body": {
                    "inline_string": f"{model.name} is at its concurrency limit; retry after "
                    f"{model.retry_after_seconds} s"
                },
            }
        ],
        "body_format": {
            "json_format": {
                "error": {
                    "message": "%LOCAL_REPLY_BODY%",
                    "type": "gateway",
                    "code": "%RESPONSE_CODE%",
                }
            }
        },
    }


def _endpoint(host: str, port: int) -> dict[str, Any]:
    return {"endpoint": {"address": {"socket_address": {"address": host, "port_value": port}}}}


def _cluster(name: str, kind: str, host: str, port: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "type": kind,
        "connect_timeout": "2s",
        **extra,
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [_endpoint(host, port)]}],
        },
    }


def _http2() -> dict[str, Any]:
    """gRPC upstreams (the picker, the collector) speak HTTP/2."""
    return {
        HTTP_OPTIONS: {
            "@type": HTTP_OPTIONS_TYPE,
            "explicit_http_config": {"http2_protocol_options": {}},
        }
    }


def picker_filters(model: GatewayModel) -> list[dict[str, Any]]:
    """Drop a client's destination header, then ask the picker (which sets it).

    The body goes to the picker as it streams, both ways (FULL_DUPLEX_STREAMED, with the
    trailers, as the EPP's Envoy configuration sends it): it reads the model and prompt
    from the request and the token usage from the response. Fail closed: without the
    picker there is no destination, and a request must not fall through to this
    listener's own address."""
    strip = {
        "@type": HEADER_MUTATION_TYPE,
        "mutations": {"request_mutations": [{"remove": router.DESTINATION_HEADER}]},
    }
    ext_proc = {
        "@type": EXT_PROC_TYPE,
        "grpc_service": {"envoy_grpc": {"cluster_name": PICKER_CLUSTER}, "timeout": "10s"},
        "failure_mode_allow": False,
        "processing_mode": {
            "request_header_mode": "SEND",
            "response_header_mode": "SEND",
            "request_body_mode": "FULL_DUPLEX_STREAMED",
            "response_body_mode": "FULL_DUPLEX_STREAMED",
            "request_trailer_mode": "SEND",
            "response_trailer_mode": "SEND",
        },
        # A streamed generation keeps the stream open for as long as the route's timeout.
        "message_timeout": f"{REQUEST_TIMEOUT_S}s",
    }
    return [
        _http_filter("envoy.filters.http.header_mutation", strip),
        _http_filter(EXT_PROC_FILTER, ext_proc),
    ]


def picked_cluster() -> dict[str, Any]:
    """The replica the picker chose, from its header: its `peer` listener, whose own local
    cluster is that vLLM's shed point."""
    return {
        "name": PICKED_CLUSTER,
        "type": "ORIGINAL_DST",
        "lb_policy": "CLUSTER_PROVIDED",
        "connect_timeout": "2s",
        "original_dst_lb_config": {
            "use_http_header": True,
            "http_header_name": router.DESTINATION_HEADER,
        },
    }


def picker_cluster(host: str) -> dict[str, Any]:
    return _cluster(
        PICKER_CLUSTER,
        "STRICT_DNS",
        host,
        router.EXT_PROC_PORT,
        dns_lookup_family="V4_ONLY",
        typed_extension_protocol_options=_http2(),
    )


def traces_cluster(collector: TraceCollector) -> dict[str, Any]:
    return _cluster(
        TRACES_CLUSTER,
        "STRICT_DNS",
        collector.host,
        collector.port,
        dns_lookup_family="V4_ONLY",
        typed_extension_protocol_options=_http2(),
    )


def tracing(model: GatewayModel) -> dict[str, Any] | None:
    """The API listener's OpenTelemetry tracer: every request, service `gateway-<model>`."""
    if model.traces is None:
        return None
    return {
        "random_sampling": {"value": 100},
        "provider": {
            "name": "envoy.tracers.opentelemetry",
            "typed_config": {
                "@type": OTEL_TRACER_TYPE,
                "grpc_service": {"envoy_grpc": {"cluster_name": TRACES_CLUSTER}, "timeout": "1s"},
                "service_name": f"gateway-{model.name}",
            },
        },
    }


def _rbac_filter(model: GatewayModel, keys: Mapping[str, str | None]) -> dict[str, Any]:
    return _http_filter(
        "envoy.filters.http.rbac", {"@type": RBAC_TYPE, "rules": rbac_rules(model, keys)}
    )


def _get_only(path: str, timeout: str) -> list[dict[str, Any]]:
    """One read-only path of the local vLLM, for GET only; any other method or path 404."""
    match = {"path": path, "headers": [{"name": ":method", "string_match": {"exact": "GET"}}]}
    return [{"match": match, "route": {"cluster": LOCAL_CLUSTER, "timeout": timeout}}, _not_found()]


def api_listener(model: GatewayModel, keys: Mapping[str, str | None]) -> dict[str, Any]:
    """The ALB's door (keyed): a client of the model, within its rate, to this pod's vLLM or
    to the replica the picker chose."""
    picked = model.routing == "endpoint-picker"
    routes = [
        {
            "match": {"prefix": f"/{model.name}/v1/"},
            "route": {
                "cluster": PICKED_CLUSTER if picked else LOCAL_CLUSTER,
                "prefix_rewrite": "/v1/",
                "timeout": f"{REQUEST_TIMEOUT_S}s",
                "retry_policy": retry_policy(model),
                "rate_limits": rate_limit_actions(model, keys),
            },
            "typed_per_filter_config": {RATE_LIMIT_FILTER: client_rate_limit(model)},
        },
        _not_found(),
    ]
    filters = [
        _rbac_filter(model, keys),
        # Buckets live on the route; this instance only places the filter after RBAC.
        _http_filter(RATE_LIMIT_FILTER, {"@type": RATE_LIMIT_TYPE, "stat_prefix": "client_rate"}),
        # Only an authorized request within its client's rate reaches the picker.
        *(picker_filters(model) if picked else []),
    ]
    return _listener("api", API_PORT, routes, filters, local_reply(model), tracing(model))


def peer_listener(model: GatewayModel, keys: Mapping[str, str | None]) -> dict[str, Any]:
    """A picked replica's door (keyed): the request another gateway of the model took in,
    its client's key checked again, to this pod's vLLM through its shed point. No rate limit
    (the first gateway spent the token) and no retry (the first gateway retries)."""
    routes = [
        {
            "match": {"prefix": "/v1/"},
            "route": {"cluster": LOCAL_CLUSTER, "timeout": f"{REQUEST_TIMEOUT_S}s"},
        },
        _not_found(),
    ]
    return _listener("peer", PEER_PORT, routes, [_rbac_filter(model, keys)], local_reply(model))


def keyed_listeners(model: GatewayModel, keys: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """The listeners that carry keys: `api`, and `peer` where the model is picked."""
    listeners = [api_listener(model, keys)]
    if model.routing == "endpoint-picker":
        listeners.append(peer_listener(model, keys))
    return listeners


def listeners_file(model: GatewayModel, keys: Mapping[str, str | None]) -> str:
    """The keyed listeners as the LDS DiscoveryResponse Envoy reads from KEYS_DIR: the value
    of the model's secret in Secrets Manager (JSON, which Envoy reads as YAML)."""
    resources = [{"@type": LISTENER_TYPE, **lst} for lst in keyed_listeners(model, keys)]
    return json.dumps({"resources": resources}, sort_keys=True, separators=(",", ":"))


def _clusters(model: GatewayModel) -> list[dict[str, Any]]:
    # Every request to this pod's vLLM passes here (the api route, the health and metrics
    # listeners, a peer's forward): the shed point is this cluster's breaker.
    clusters = [
        _cluster(
            LOCAL_CLUSTER,
            "STATIC",
            VLLM_HOST,
            VLLM_PORT,
            circuit_breakers=circuit_breakers(model),
        )
    ]
    if model.routing == "endpoint-picker":
        assert model.picker_host is not None
        clusters += [picked_cluster(), picker_cluster(model.picker_host)]
    if model.traces is not None:
        clusters.append(traces_cluster(model.traces))
    return clusters


def bootstrap(model: GatewayModel) -> dict[str, Any]:
    """Envoy's bootstrap for one model, with no key in it: admin on loopback, the `health`
    and `metrics` listeners, the clusters, and the keyed listeners read from the file the
    Secrets Store CSI driver mounts (watched: a rotated file is swapped in, no restart)."""
    listeners_path = f"{KEYS_DIR}/{LISTENERS_FILE}"
    return {
        "node": {"id": f"gateway-{model.name}", "cluster": f"gateway-{model.name}"},
        "admin": {
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": ADMIN_PORT}}
        },
        "static_resources": {
            "listeners": [
                _listener("health", HEALTH_PORT, _get_only("/health", "5s"), []),
                _listener("metrics", METRICS_PORT, _get_only("/metrics", "10s"), []),
            ],
            "clusters": _clusters(model),
        },
        "dynamic_resources": {
            "lds_config": {
                "resource_api_version": "V3",
                # The driver swaps `..data` atomically; a move in the directory reloads.
                "path_config_source": {
                    "path": listeners_path,
                    "watched_directory": {"path": KEYS_DIR},
                },
            }
        },
    }


def bootstrap_arg(model: GatewayModel) -> str:
    """The bootstrap as Envoy's `--config-yaml` (compact JSON, which is YAML)."""
    return json.dumps(bootstrap(model), sort_keys=True, separators=(",", ":"))


def envoy_config(model: GatewayModel, keys: Mapping[str, str | None]) -> dict[str, Any]:
    """What Envoy runs once the keyed listeners are loaded, as one bootstrap (the keyed
    listeners first: `api`, then `health`, `metrics` and `peer` where picked): the unit the
    tests and the schema check read. Deployed, it is `bootstrap` plus `listeners_file`."""
    config = bootstrap(model)
    del config["dynamic_resources"]
    keyed = keyed_listeners(model, keys)
    static = config["static_resources"]["listeners"]
    config["static_resources"]["listeners"] = [keyed[0], *static, *keyed[1:]]
    return config


@dataclass(frozen=True)
class AccessLogs:
    """The ALB's access logs: the bucket (SSE-S3, ELB admitted by its policy) and prefix."""

    bucket: pulumi.Input[str]
    prefix: str = "alb/"


def load_balancer_attributes(access_logs: AccessLogs | None) -> pulumi.Input[str]:
    """The ALB's attributes: idle timeout, invalid headers dropped, and access logs."""
    base = (
        f"idle_timeout.timeout_seconds={REQUEST_TIMEOUT_S},"
        "routing.http.drop_invalid_header_fields.enabled=true"
    )
    if access_logs is None:
        return base
    # ELB writes <prefix>/AWSLogs/<account>/elasticloadbalancing/...: the prefix goes
    # without its trailing slash (and never contains AWSLogs).
    prefix = access_logs.prefix.strip("/")
    return pulumi.Output.from_input(access_logs.bucket).apply(
        lambda bucket: (
            f"{base},access_logs.s3.enabled=true,access_logs.s3.bucket={bucket},"
            f"access_logs.s3.prefix={prefix}"
        )
    )


def ingress_annotations(
    scheme: str,
    certificate_arn: str,
    web_acl_arn: pulumi.Input[str],
    access_logs: AccessLogs | None = None,
) -> dict[str, pulumi.Input[str]]:
    """The Load Balancer Controller's settings; only the WAF's ARN and the log bucket wait
    for what they name (the rest is known in a preview; the cost estimate reads the
    scheme)."""
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
        "alb.ingress.kubernetes.io/load-balancer-attributes": load_balancer_attributes(access_logs),
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
    access_logs: AccessLogs | None = None,
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
    annotations = ingress_annotations(scheme, certificate_arn, web_acl_arn, access_logs)
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


TRACES_NAMESPACE = "monitoring"
"""Where the OpenTelemetry collector runs (components.monitoring)."""


def traces_network_policy_args(
    namespace: pulumi.Input[str], collector: TraceCollector, pod_labels: Mapping[str, str]
) -> NetworkPolicyInitArgs:
    """Spans out of the tenant's default deny: the model pods (gateway, and vLLM where its
    image traces) reach the collector's OTLP gRPC port in `monitoring`, nothing else."""
    return NetworkPolicyInitArgs(
        metadata=ObjectMetaArgs(name="allow-traces", namespace=namespace, labels=PART_OF),
        spec=NetworkPolicySpecArgs(
            pod_selector=LabelSelectorArgs(match_labels=dict(pod_labels)),
            policy_types=["Egress"],
            egress=[
                NetworkPolicyEgressRuleArgs(
                    to=[
                        NetworkPolicyPeerArgs(
                            namespace_selector=LabelSelectorArgs(
                                match_labels={"kubernetes.io/metadata.name": TRACES_NAMESPACE}
                            )
                        )
                    ],
                    ports=[NetworkPolicyPortArgs(protocol="TCP", port=collector.port)],
                )
            ],
        ),
    )
