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
- the gateway's keys, per model in **AWS Secrets Manager** (a Secret and its
  SecretVersion, KMS-encrypted with the stack's key where it has one): the keyed
  Envoy listeners with the clients' API keys, from secret stack config
  `llm-platform-serving:<client>`, secret in every plan; the rest of Envoy's
  configuration (per model its shed point: max_num_seqs + queue, then 429, the
  clients allowed and each one's rate limit) carries no key and rides in the pod
  template. Why and how they reach the gateway: `manifests.serving.keys`;
- the **Secrets Store CSI driver** (kubernetes-sigs chart) and its **AWS provider**
  (aws chart), both pinned in the catalog, in `kube-system`: rotation on, the driver
  writing the files, no Secret sync; this component is their one owner, since only
  the gateways mount secrets so. Per model a **SecretProviderClass** (typed,
  `manifests.serving.keys`), the model pods' **ServiceAccount** `model-server` and
  its **IAM role** through EKS Pod Identity, which may read only these secrets (and
  decrypt them only through Secrets Manager);
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
- the serving namespace's **NetworkPolicies** by port, on top of the tenant's
  default deny (`manifests.serving.network`): the ALB (from the VPC) to the
  gateway's `http` and `health` ports, Prometheus to the `metrics` port, a picked
  model's gateways to each other's `peer` port and to its picker's gRPC, the picker
  to the `metrics` port, a LeaderWorkerSet's pods to each other, and where traces
  are on, the model pods to the collector's OTLP port;
- where request logs are on, the WAF's **logging configuration** (into the
  `aws-waf-logs-` bucket of `components.storage`, `authorization` redacted) and the
  Ingress's access-log attributes.

Why the gateway, and why vLLM listens on loopback only: see
`manifests.serving.gateway`. The component expects the AWS and Kubernetes providers
through `opts.providers`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.helm import pinned_release
from components.iam import pod_identity_role
from manifests import kueue
from manifests.serving import (
    NAMESPACE,
    EngineSettings,
    ServedModel,
    ServingHours,
    canary,
    gateway,
    keda,
    keys,
    multinode,
    network,
    vllm,
)
from spec.catalog import catalog
from spec.labels import PART_OF

KEDA = "keda"
LWS = "lws"
LWS_NAMESPACE = "lws-system"
CSI_DRIVER = "secrets-store-csi-driver"
CSI_PROVIDER = "secrets-store-csi-driver-provider-aws"
CSI_NAMESPACE = "kube-system"
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


def csi_driver_values() -> dict[str, Any]:
    """The Secrets Store CSI driver (chart values.yaml at v1.6.0): a token of Pod Identity's
    audience for the provider, rotation on (the keyed listeners are swapped in place), and
    no Secret sync, so the chart grants itself no access to Secrets either."""
    return {
        "tokenRequests": [{"audience": keys.POD_IDENTITY_AUDIENCE}],
        "enableSecretRotation": True,
        "rotationPollInterval": keys.ROTATION_POLL,
        "syncSecret": {"enabled": False},
    }


def csi_provider_values(region: str) -> dict[str, Any]:
    """The AWS provider (chart values.yaml at 3.1.1): the driver is its own release, pinned
    apart; the driver writes the files (atomically, which Envoy's directory watch needs); the
    region set (the nodes' metadata is one hop away from pods); on every node, as the
    driver is, GPU nodes and their taints included."""
    return {
        "secrets-store-csi-driver": {"install": False},
        "driverWritesSecrets": True,
        "awsRegion": region,
        "tolerations": [{"operator": "Exists"}],
    }


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
    cluster_name: pulumi.Input[str]
    """The EKS cluster: the model server's Pod Identity association, and the prefix of the
    gateway secrets' names (`<cluster>/serving/<model>/gateway`)."""
    region: str
    """Where the secrets are (the provider reads them there; the role's KMS condition)."""
    kms_key_arn: pulumi.Input[str] | None = None
    """The stack's KMS key for the secrets; None: Secrets Manager's own key."""
    vpc_cidr: str
    pools: Mapping[str, str]
    """Instance type per node pool."""
    pool_topology: Mapping[str, int] = field(default_factory=dict)
    """The topology-aware pools (Kueue's TAS) and the EC2 network layers of their nodes: a
    replica there asks for a placement (a group: preferred at the lowest layer; one pod:
    unconstrained), as every pod set on a TAS flavor must."""
    partitions: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    """Model -> the MIG partition its replicas ask for instead of GPUs: the resource and
    how many one GPU holds."""
    system_nodes: list[pulumi.Resource] = field(default_factory=list)
    """What KEDA's operator Deployment and the CSI driver's hook need first (the system node
    group)."""
    traces_endpoint: str | None = None
    """The collector's OTLP gRPC endpoint: the gateways trace to it; None: no traces."""
    access_logs: gateway.AccessLogs | None = None
    """The ALB's access logs (bucket and prefix); None: off."""
    waf_log_bucket_arn: pulumi.Input[str] | None = None
    """The WAF's log bucket (`aws-waf-logs-...`); None: the WAF does not log."""


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

        routes = {
            m.name: gateway.gateway_model(
                m,
                args.engines[m.name],
                args.model_clients.get(m.name, args.clients),
                args.client_rates,
                args.traces_endpoint,
            )
            for m in args.models
        }
        key_ready = self._gateway_keys(name, args, routes)

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
                layers = args.pool_topology.get(model.node_pool)
                resource, per_gpu = args.partitions.get(model.name, (kind.resource, 1))
                if model.nodes_per_replica > 1:
                    lws = multinode.leader_worker_set(
                        model,
                        args.engines[model.name],
                        itype,
                        kind.resource,
                        kind.taint_key,
                        gateway_model=routes[model.name],
                        track=track,
                        revision=revision,
                        replicas=replicas,
                        topology=kueue.default_topology_request(layers).annotations()
                        if layers
                        else None,
                    ).manifest()
                    k8s.apiextensions.CustomResource(
                        f"{name}-{model.name}{suffix}",
                        api_version=lws["apiVersion"],
                        kind=lws["kind"],
                        metadata={**lws["metadata"], "namespace": ns},
                        spec=lws["spec"],
                        opts=pulumi.ResourceOptions.merge(after_lws, key_ready),
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
                            resource,
                            kind.taint_key,
                            gateway_model=routes[model.name],
                            track=track,
                            revision=revision,
                            replicas=replicas,
                            pod_annotations=kueue.TopologyRequest("unconstrained").annotations()
                            if layers
                            else None,
                            partitions_per_gpu=per_gpu,
                        ),
                        opts=key_ready,
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
        policies = network.serving_network_policies(
            ns,
            vpc_cidr=args.vpc_cidr,
            picked_models=[m.name for m in args.models if m.routing == "endpoint-picker"],
            groups=[
                vllm.workload_name(m.name, track)
                for m in args.models
                if m.nodes_per_replica > 1
                for track in (
                    [vllm.STABLE, vllm.CANARY] if m.live_canary is not None else [vllm.STABLE]
                )
            ],
            traces=gateway.TraceCollector.from_endpoint(args.traces_endpoint)
            if args.traces_endpoint is not None
            else None,
        )
        for policy, policy_args in policies.items():
            k8s.networking.v1.NetworkPolicy(f"{name}-{policy}", policy_args, opts=child)
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

    def _gateway_keys(
        self, name: str, args: ServingArgs, routes: Mapping[str, gateway.GatewayModel]
    ) -> pulumi.ResourceOptions:
        """The keyed listeners of each model in Secrets Manager, the CSI driver and provider
        that mount them, the model server's account and its role; returns the options a
        model pod's workload takes (it waits for all of them: Pod Identity serves only pods
        created after their association, and a mount fails without its provider class)."""
        child = pulumi.ResourceOptions(parent=self)
        pins = catalog().serving
        assert pins is not None
        on_system = pulumi.ResourceOptions(parent=self, depends_on=args.system_nodes)
        driver = pinned_release(
            f"{name}-{CSI_DRIVER}",
            CSI_DRIVER,
            pins.secrets_store_csi_driver,
            namespace=CSI_NAMESPACE,
            values=csi_driver_values(),
            opts=on_system,
        )
        provider = pinned_release(
            f"{name}-{CSI_PROVIDER}",
            CSI_PROVIDER,
            pins.secrets_store_provider_aws,
            namespace=CSI_NAMESPACE,
            values=csi_provider_values(args.region),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.system_nodes, driver]),
        )
        client_keys = api_keys(list(args.clients))
        clients = sorted(client_keys)
        present = [client_keys[c] for c in clients]
        after_driver = pulumi.ResourceOptions(parent=self, depends_on=[driver])
        secrets: list[aws.secretsmanager.Secret] = []
        classes: list[pulumi.Resource] = []
        for model, route in routes.items():

            def named(cluster: str, model: str = model) -> str:
                return keys.secret_name(cluster, model)

            def provider_class(secret_name: str, model: str = model) -> dict[str, Any]:
                spc = keys.secret_provider_class(model, secret_name, args.region, {})
                return spc.manifest()["spec"]

            def listeners(values: list[Any], route: gateway.GatewayModel = route) -> str:
                return gateway.listeners_file(route, dict(zip(clients, values, strict=True)))

            secret = aws.secretsmanager.Secret(
                f"{name}-{model}-keys",
                name=pulumi.Output.from_input(args.cluster_name).apply(named),
                description=f"Envoy's keyed listeners of model {model} (API keys)",
                kms_key_id=args.kms_key_arn,
                # A copy of stack config, rebuilt by every `pulumi up`: deleted at once, so
                # a rebuilt stack can take the name again.
                recovery_window_in_days=0,
                opts=child,
            )

            rendered: pulumi.Output[str] = pulumi.Output.all(*present).apply(listeners)
            # Secret on its own: a plan shows that the version has a value, never a key.
            value: pulumi.Output[str] = pulumi.Output.secret(rendered)
            aws.secretsmanager.SecretVersion(
                f"{name}-{model}-keys",
                secret_id=secret.id,
                secret_string=value,
                opts=child,
            )
            classes.append(
                k8s.apiextensions.CustomResource(
                    f"{name}-{model}-keys",
                    api_version=keys.API_VERSION,
                    kind="SecretProviderClass",
                    metadata={
                        "name": keys.provider_class_name(model),
                        "namespace": args.namespace,
                        "labels": vllm.labels(model),
                    },
                    # Built by the typed model, once the secret's name is known.
                    spec=secret.name.apply(provider_class),
                    opts=after_driver,
                )
            )
            secrets.append(secret)
        account = k8s.core.v1.ServiceAccount(
            f"{name}-{keys.MODEL_SERVER_SA}",
            keys.service_account_args(args.namespace),
            opts=child,
        )
        kms = args.kms_key_arn
        policy = pulumi.Output.all(kms, *[s.arn for s in secrets]).apply(
            lambda v: keys.reader_policy(list(v[1:]), v[0], args.region)
        )
        _, association = pod_identity_role(
            f"{name}-{keys.MODEL_SERVER_SA}",
            parent=self,
            description="Model servers: read the gateway keys in Secrets Manager",
            policy=policy,
            cluster_name=args.cluster_name,
            # The plain name: an association needs neither the namespace nor the account.
            namespace=NAMESPACE,
            service_account=keys.MODEL_SERVER_SA,
        )
        return pulumi.ResourceOptions(
            parent=self, depends_on=[driver, provider, account, association, *classes]
        )
