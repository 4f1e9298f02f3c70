"""Serving: online LLM inference with vLLM, behind an authenticating gateway, an ALB and a WAF.

Owns (only when the `serving` config section is set, in the `serving` tenant
namespace that the tenancy component creates):

- **KEDA** (Helm chart pinned in the catalog, `keda` namespace): this
  component is its one owner, since only serving scales on it. Why KEDA: see
  `manifests.serving.keda`;
- per model: a vLLM **Deployment** (weights from the read-only
  `model-weights` claim, GPUs = tensor-parallel size, probes on `/health`,
  graceful drain, surge rollouts, zone and node spread, priority
  `llmp-serving`), a **Service** (`http`, `health`, and `metrics` labelled
  for scraping), a **PodDisruptionBudget** and a KEDA **ScaledObject**
  (queue depth from Prometheus, serving hours by cron);
- the gateway **Secret**: Envoy's configuration with the clients' API keys,
  from secret stack config `llm-platform-serving:<client>`, secret in every
  plan, and per model its shed point (max_num_seqs + queue, then 429), the
  clients allowed and each one's rate limit;
- a model over several nodes (`nodes_per_replica`): a **LeaderWorkerSet**
  (`manifests.serving.multinode`) instead of the Deployment, queued to Kueue,
  its Service selecting the groups' leaders; the **LWS controller** (Helm chart
  pinned in the catalog, `lws-system`) is this component's, installed only
  where such a model is served (only serving runs pod groups over nodes);
- per model with a canary (`canary.weight` above 0): a second Deployment (or
  LeaderWorkerSet), Service and PDB `<model>-canary` serving the canary's
  revision with the same engine settings and gateway, fixed replicas;
- the **Ingress** (AWS Load Balancer Controller): HTTPS on 443 only with the
  ACM certificate of the config, internal or internet-facing, a path
  `/<model>/` per model (a canaried model's through a weighted forward action,
  `manifests.serving.canary`), and the WAF attached;
- a **WAFv2 WebACL**: AWS's known-bad-inputs rules, a rate limit per API key
  (the `authorization` header) and one per source IP;
- a **NetworkPolicy** that lets the ALB (from the VPC) reach the gateway's
  ports, on top of the tenant's default deny;
- where request logs are on, the WAF's **logging configuration** (into the
  `aws-waf-logs-` bucket of `components.storage`, `authorization` redacted) and the
  Ingress's access-log attributes; where traces are on, a **NetworkPolicy** from the
  model pods to the collector's OTLP port.

Why the gateway: see `manifests.serving.gateway`. The component expects the
AWS and Kubernetes providers through `opts.providers`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.helm import pinned_release
from manifests.serving import (
    EngineSettings,
    ServedModel,
    ServingHours,
    canary,
    gateway,
    keda,
    multinode,
    vllm,
)
from spec.catalog import catalog
from spec.labels import PART_OF

KEDA = "keda"
LWS = "lws"
LWS_NAMESPACE = "lws-system"
KEY_CONFIG_NAMESPACE = "llm-platform-serving"
"""Secret config namespace of the API keys: `llm-platform-serving:<client>`."""


def api_keys(clients: list[str]) -> dict[str, pulumi.Output[str] | None]:
    """Each client's key from secret stack config; None where it is not set (refused)."""
    config = pulumi.Config(KEY_CONFIG_NAMESPACE)
    keys: dict[str, pulumi.Output[str] | None] = {}
    for client in clients:
        key = config.get_secret(client)
        if key is None:
            pulumi.log.warn(
                f"serving: client {client} has no key ({KEY_CONFIG_NAMESPACE}:{client}); "
                "its requests are refused"
            )
        keys[client] = key
    return keys


def _visibility(name: str) -> dict[str, Any]:
    return {
        "cloudwatch_metrics_enabled": True,
        "metric_name": name,
        "sampled_requests_enabled": True,
    }


def web_acl_rules(
    rate_limit_per_key: int, rate_limit_per_ip: int
) -> list[aws.wafv2.WebAclRuleArgs]:
    """Known bad inputs, then a rate limit per API key and one per source IP (per 5 min)."""
    w = aws.wafv2
    return [
        w.WebAclRuleArgs(
            name="known-bad-inputs",
            priority=0,
            override_action=w.WebAclRuleOverrideActionArgs(
                none=w.WebAclRuleOverrideActionNoneArgs()
            ),
            statement=w.WebAclRuleStatementArgs(
                managed_rule_group_statement=w.WebAclRuleStatementManagedRuleGroupStatementArgs(
                    name="AWSManagedRulesKnownBadInputsRuleSet", vendor_name="AWS"
                )
            ),
            visibility_config=w.WebAclRuleVisibilityConfigArgs(**_visibility("known-bad-inputs")),
        ),
        w.WebAclRuleArgs(
            name="rate-per-key",
            priority=1,
            action=w.WebAclRuleActionArgs(block=w.WebAclRuleActionBlockArgs()),
            statement=w.WebAclRuleStatementArgs(
                rate_based_statement=w.WebAclRuleStatementRateBasedStatementArgs(
                    aggregate_key_type="CUSTOM_KEYS",
                    limit=rate_limit_per_key,
                    evaluation_window_sec=300,
                    custom_keys=[
                        w.WebAclRuleStatementRateBasedStatementCustomKeyArgs(
                            header=w.WebAclRuleStatementRateBasedStatementCustomKeyHeaderArgs(
                                name=gateway.KEY_HEADER,
                                text_transformations=[
                                    w.WebAclRuleStatementRateBasedStatementCustomKeyHeaderTextTransformationArgs(
                                        priority=0, type="NONE"
                                    )
                                ],
                            )
                        )
                    ],
                )
            ),
            visibility_config=w.WebAclRuleVisibilityConfigArgs(**_visibility("rate-per-key")),
        ),
        w.WebAclRuleArgs(
            name="rate-per-ip",
            priority=2,
            action=w.WebAclRuleActionArgs(block=w.WebAclRuleActionBlockArgs()),
            statement=w.WebAclRuleStatementArgs(
                rate_based_statement=w.WebAclRuleStatementRateBasedStatementArgs(
                    aggregate_key_type="IP",
                    limit=rate_limit_per_ip,
                    evaluation_window_sec=300,
                )
            ),
            visibility_config=w.WebAclRuleVisibilityConfigArgs(**_visibility("rate-per-ip")),
        ),
    ]


@dataclass(frozen=True, kw_only=True)
class ServingArgs:
    models: Sequence[ServedModel]
    """Each a vLLM Deployment, Service, PodDisruptionBudget and ScaledObject."""
    engines: Mapping[str, EngineSettings]
    """Model -> vLLM's resolved engine settings (checked against its pool's GPU memory)."""
    model_clients: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Model -> the clients that may call it; a model missing here: every client."""
    client_rates: Mapping[str, gateway.ClientRate] = field(default_factory=dict)
    """Client -> its token bucket in each replica's gateway; missing: the default."""
    hostname: str
    """DNS name of the API (the ALB's rule host)."""
    certificate_arn: str
    """ACM certificate of `hostname`, in the stack's region."""
    clients: Sequence[str]
    """API clients: each one's key is the secret config `llm-platform-serving:<client>`."""
    scheme: Literal["internet-facing", "internal"] = "internal"
    prometheus_url: str = "http://kube-prometheus-stack-prometheus.monitoring:9090"
    """Where KEDA reads vLLM's queue depth."""
    schedule: ServingHours | None = None
    """Serving hours; None: always at least min_replicas."""
    rate_limit_per_key: int = 2000
    """WAF: requests per 5 minutes per API key."""
    rate_limit_per_ip: int = 6000
    namespace: pulumi.Input[str]
    """The `serving` tenant namespace (from tenancy: the objects wait for it)."""
    vpc_cidr: str
    pools: Mapping[str, str]
    """Instance type per node pool."""
    system_nodes: list[pulumi.Resource] = field(default_factory=list)
    traces_endpoint: str | None = None
    """The collector's OTLP gRPC endpoint: the gateways trace to it; None: no traces."""
    access_logs: gateway.AccessLogs | None = None
    """The ALB's access logs (bucket and prefix); None: off."""
    waf_log_bucket_arn: pulumi.Input[str] | None = None
    """The WAF's log bucket (`aws-waf-logs-...`); None: the WAF does not log."""
    """What KEDA's operator Deployment needs first (the system node group)."""


class Serving(pulumi.ComponentResource):
    web_acl_arn: pulumi.Output[str]
    models: list[str]

    def __init__(self, name: str, args: ServingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmp:serving:Serving", name, None, opts)
        ns = args.namespace
        child = pulumi.ResourceOptions(parent=self)
        pins = catalog().serving
        if pins is None:
            raise ValueError("catalog.yaml has no serving section (vLLM, gateway, KEDA pins)")

        keda_release = pinned_release(
            f"{name}-{KEDA}",
            KEDA,
            pins.keda,
            namespace=KEDA,
            create_namespace=True,
            values={"operator": {"replicaCount": 2}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.system_nodes),
        )

        routes = [
            gateway.gateway_model(
                m,
                args.engines[m.name],
                args.model_clients.get(m.name, args.clients),
                args.client_rates,
                args.traces_endpoint,
            )
            for m in args.models
        ]
        k8s.core.v1.Secret(
            f"{name}-gateway",
            gateway.gateway_secret_args(ns, routes, api_keys(list(args.clients)), PART_OF),
            opts=child,
        )

        after_keda = pulumi.ResourceOptions(parent=self, depends_on=[keda_release])
        after_lws = child
        if any(m.nodes_per_replica > 1 for m in args.models):
            # Only serving runs groups of pods over nodes: this component owns the controller.
            lws_release = pinned_release(
                f"{name}-{LWS}",
                LWS,
                pins.lws,
                namespace=LWS_NAMESPACE,
                create_namespace=True,
                values={
                    # The chart's defaults are `main` and Always: the release's own tag.
                    "image": {
                        "manager": {"tag": f"v{pins.lws.version}", "pullPolicy": "IfNotPresent"}
                    }
                },
                opts=pulumi.ResourceOptions(parent=self, depends_on=args.system_nodes),
            )
            after_lws = pulumi.ResourceOptions(parent=self, depends_on=[lws_release])
        for model in args.models:
            itype = args.pools[model.node_pool]
            kind = catalog().accelerator_kind(itype)
            if kind is None:
                raise ValueError(f"pool {model.node_pool} has no accelerator")
            release = model.live_canary
            tracks: list[tuple[str, str | None, int | None]] = [(vllm.STABLE, None, None)]
            if release is not None:
                tracks.append((vllm.CANARY, release.revision, release.replicas))
            for track, revision, replicas in tracks:
                suffix = "" if track == vllm.STABLE else f"-{track}"
                workload = vllm.workload_name(model.name, track)
                leaders = None
                if model.nodes_per_replica > 1:
                    lws = multinode.leader_worker_set(
                        model,
                        args.engines[model.name],
                        itype,
                        kind.resource,
                        kind.taint_key,
                        track=track,
                        revision=revision,
                        replicas=replicas,
                    ).manifest()
                    k8s.apiextensions.CustomResource(
                        f"{name}-{model.name}{suffix}",
                        api_version=lws["apiVersion"],
                        kind=lws["kind"],
                        metadata={**lws["metadata"], "namespace": ns},
                        spec=lws["spec"],
                        opts=after_lws,
                    )
                    leaders = multinode.leader_selector(workload)
                else:
                    k8s.apps.v1.Deployment(
                        f"{name}-{model.name}{suffix}",
                        vllm.deployment_args(
                            ns,
                            model,
                            args.engines[model.name],
                            itype,
                            kind.resource,
                            kind.taint_key,
                            track=track,
                            revision=revision,
                            replicas=replicas,
                        ),
                        opts=child,
                    )
                k8s.core.v1.Service(
                    f"{name}-{model.name}{suffix}",
                    vllm.service_args(ns, model.name, track, leaders),
                    opts=child,
                )
                k8s.policy.v1.PodDisruptionBudget(
                    f"{name}-{model.name}{suffix}",
                    vllm.pdb_args(ns, model.name, track),
                    opts=child,
                )
            manifest = keda.scaled_object(
                model,
                args.prometheus_url,
                args.schedule,
                vllm.labels(model.name),
                "LeaderWorkerSet" if model.nodes_per_replica > 1 else "Deployment",
            ).manifest()
            k8s.apiextensions.CustomResource(
                f"{name}-{model.name}",
                api_version=manifest["apiVersion"],
                kind=manifest["kind"],
                metadata={**manifest["metadata"], "namespace": ns},
                spec=manifest["spec"],
                opts=after_keda,
            )

        web_acl = aws.wafv2.WebAcl(
            f"{name}-waf",
            scope="REGIONAL",
            description="LLM serving API: known bad inputs, rate limits per key and per IP",
            default_action=aws.wafv2.WebAclDefaultActionArgs(
                allow=aws.wafv2.WebAclDefaultActionAllowArgs()
            ),
            rules=web_acl_rules(args.rate_limit_per_key, args.rate_limit_per_ip),
            visibility_config=aws.wafv2.WebAclVisibilityConfigArgs(**_visibility(f"{name}-waf")),
            opts=child,
        )
        weights = {m.name: m.live_canary.weight for m in args.models if m.live_canary}
        k8s.networking.v1.Ingress(
            f"{name}-api",
            canary.weighted_ingress(
                gateway.ingress_args(
                    ns,
                    hostname=args.hostname,
                    certificate_arn=args.certificate_arn,
                    scheme=args.scheme,
                    models=[m.name for m in args.models],
                    web_acl_arn=web_acl.arn,
                    labels=PART_OF,
                    access_logs=args.access_logs,
                ),
                weights,
            ),
            opts=child,
        )
        k8s.networking.v1.NetworkPolicy(
            f"{name}-allow-alb",
            gateway.alb_network_policy_args(ns, args.vpc_cidr, {"app.kubernetes.io/name": "vllm"}),
            opts=child,
        )
        if args.traces_endpoint is not None:
            k8s.networking.v1.NetworkPolicy(
                f"{name}-allow-traces",
                gateway.traces_network_policy_args(
                    ns,
                    gateway.TraceCollector.from_endpoint(args.traces_endpoint),
                    {"app.kubernetes.io/name": "vllm"},
                ),
                opts=child,
            )
        if args.waf_log_bucket_arn is not None:
            # The API keys travel in `authorization`: never into the logs.
            aws.wafv2.WebAclLoggingConfiguration(
                f"{name}-waf-logs",
                resource_arn=web_acl.arn,
                log_destination_configs=[args.waf_log_bucket_arn],
                redacted_fields=[
                    aws.wafv2.WebAclLoggingConfigurationRedactedFieldArgs(
                        single_header=aws.wafv2.WebAclLoggingConfigurationRedactedFieldSingleHeaderArgs(
                            name=gateway.KEY_HEADER
                        )
                    )
                ],
                opts=child,
            )
        self.web_acl_arn = web_acl.arn
        self.models = [m.name for m in args.models]
        self.register_outputs({"web_acl_arn": self.web_acl_arn, "models": self.models})
