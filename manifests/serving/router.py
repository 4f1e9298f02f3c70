"""The inference router of a model with `routing: endpoint-picker`: an InferencePool and
its endpoint picker (EPP).

The picker is llm-d-router's endpoint picker (the Gateway API Inference Extension's
EPP, now developed in llm-d/llm-d-router; image pinned in the catalog). It watches the
model's pods through the InferencePool, scrapes each one's vLLM `/metrics` (queue
depth, KV-cache use) from the gateway's `metrics` listener (the metrics data source's
`port`: vLLM itself listens on the pod's loopback only) and keeps an approximate index
of the prefixes it sent where; per request it scores the replicas (queue 2, KV cache 2,
prefix cache 3: the default profile that `llmp.loadtest.routing` re-implements and
`bench/loadtest.py` measures) and answers Envoy's external processing call with the
chosen `ip:port` in the header `x-gateway-destination-endpoint`: the pod's `peer`
port, the pool's target port. The gateway sidecar of whichever pod the ALB picked
(`manifests.serving.gateway`) then forwards to that pod's gateway through an
ORIGINAL_DST cluster, as the EPP's standalone Envoy configuration does, and that
gateway checks the client's key again before its vLLM.

Per such model, in the serving namespace:

- the **InferencePool** `<model>` (inference.networking.k8s.io/v1, the CRD of
  gateway-api-inference-extension v1.6.0): the model's pods, their gateways' `peer` port,
  the picker;
- the picker's **ServiceAccount**, a **Role** (read pods and InferencePools, the
  InferenceObjectives it looks for; leases and events for its leader election) and its
  **RoleBinding**;
- its **Deployment** (two replicas, one leader: only the leader is ready, so the
  Service sends every call to the one that holds the prefix index) and **Service**
  (`grpc` 9002 for ext_proc, `grpc-health` 9003, `metrics` 9090);
- a **NetworkPolicy** that lets the picker reach the API server (443 inside the VPC):
  the tenant's default deny blocks it. The flows inside the namespace (gateway -> picker
  on gRPC, gateway -> another replica's `peer` port, picker -> the gateways' `metrics`
  port) are allowed by port, and only those, by the serving component
  (`manifests.serving.network`).

ext_proc runs in plain gRPC (`--secure-serving=false`): it crosses the same pod
network as the gateway's hop to vLLM, inside one namespace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import pulumi
from pulumi_kubernetes.apps.v1 import DeploymentInitArgs, DeploymentSpecArgs
from pulumi_kubernetes.core.v1 import (
    ConfigMapProjectionArgs,
    ContainerArgs,
    ContainerPortArgs,
    DownwardAPIProjectionArgs,
    DownwardAPIVolumeFileArgs,
    EnvVarArgs,
    EnvVarSourceArgs,
    GRPCActionArgs,
    KeyToPathArgs,
    ObjectFieldSelectorArgs,
    PodSpecArgs,
    PodTemplateSpecArgs,
    ProbeArgs,
    ProjectedVolumeSourceArgs,
    ResourceRequirementsArgs,
    ServiceAccountInitArgs,
    ServiceAccountTokenProjectionArgs,
    ServiceInitArgs,
    ServicePortArgs,
    ServiceSpecArgs,
    VolumeArgs,
    VolumeMountArgs,
    VolumeProjectionArgs,
)
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, ObjectMetaArgs
from pulumi_kubernetes.networking.v1 import (
    IPBlockArgs,
    NetworkPolicyEgressRuleArgs,
    NetworkPolicyInitArgs,
    NetworkPolicyPeerArgs,
    NetworkPolicyPortArgs,
    NetworkPolicySpecArgs,
)
from pulumi_kubernetes.policy.v1 import PodDisruptionBudgetInitArgs, PodDisruptionBudgetSpecArgs
from pulumi_kubernetes.rbac.v1 import (
    PolicyRuleArgs,
    RoleBindingInitArgs,
    RoleInitArgs,
    RoleRefArgs,
    SubjectArgs,
)
from pydantic import BaseModel, ConfigDict, Field

from manifests.hardening import container_context, pod_context
from manifests.serving import METRICS_PORT as MODEL_METRICS_PORT
from manifests.serving import NAMESPACE
from spec.labels import PART_OF

API_GROUP: Final = "inference.networking.k8s.io"
API_VERSION: Final = "inference.networking.k8s.io/v1"
ROUTING_POLICIES: Final = ("round-robin", "endpoint-picker")
EXT_PROC_PORT = 9002
HEALTH_PORT = 9003
METRICS_PORT = 9090
REPLICAS = 2
RUN_AS = 65532
"""The distroless nonroot user the picker's image runs as."""
DESTINATION_HEADER = "x-gateway-destination-endpoint"
"""Where the picker puts the chosen `ip:port` (the EPP protocol's header)."""
PLUGINS = f"""\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: metrics-data-source
  parameters:
    scheme: http
    path: /metrics
    port: {MODEL_METRICS_PORT}
- type: core-metrics-extractor
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
"""
"""The default profile of the llm-d-router-standalone chart (routerlib `_config.yaml` at
v0.10.0), passed as `--config-text`: the scorers and weights that `llmp.loadtest.routing` models.
One change: the metrics data source scrapes the gateway's `metrics` port (its `port`
parameter, pkg/epp/framework/plugins/datalayer/source/metrics/datasource.go at v0.10.0:
it overrides the pool's target port), not the pool's target port, which is the
gateways' keyed `peer` listener."""


def picker_name(model: str) -> str:
    return f"{model}-epp"


def picker_host(model: str, namespace: str = NAMESPACE) -> str:
    """The picker Service's DNS name (what the gateway's ext_proc cluster resolves)."""
    return f"{picker_name(model)}.{namespace}.svc.cluster.local"


def picker_labels(model: str) -> dict[str, str]:
    return {**PART_OF, **picker_selector(model), "app.kubernetes.io/component": "router"}


def picker_selector(model: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "endpoint-picker", "app.kubernetes.io/instance": model}


# -- the InferencePool (a custom resource: typed here) ---------------------------------


class _Obj(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Metadata(_Obj):
    name: str
    namespace: str
    labels: dict[str, str] = Field(default_factory=dict)


class PoolSelector(_Obj):
    match_labels: dict[str, str] = Field(alias="matchLabels", min_length=1)


class PortNumber(_Obj):
    number: int = Field(ge=1, le=65535)


class EndpointPickerRef(_Obj):
    group: str = ""
    kind: Literal["Service"] = "Service"
    name: str = Field(min_length=1, max_length=253)
    port: PortNumber
    failure_mode: Literal["FailOpen", "FailClose"] = Field("FailClose", alias="failureMode")


class InferencePoolSpec(_Obj):
    selector: PoolSelector
    target_ports: list[PortNumber] = Field(alias="targetPorts", min_length=1, max_length=8)
    app_protocol: Literal["http", "kubernetes.io/h2c"] = Field("http", alias="appProtocol")
    endpoint_picker_ref: EndpointPickerRef = Field(alias="endpointPickerRef")


class InferencePool(_Obj):
    api_version: Literal["inference.networking.k8s.io/v1"] = Field(API_VERSION, alias="apiVersion")
    kind: Literal["InferencePool"] = "InferencePool"
    metadata: Metadata
    spec: InferencePoolSpec

    def manifest(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


def inference_pool(
    model: str, pod_selector: Mapping[str, str], target_port: int, namespace: str = NAMESPACE
) -> InferencePool:
    """The model's pods (those of its Deployment) on `target_port` (their gateways' `peer`
    listener), picked by its EPP.
    FailClose: without the picker no replica is chosen, and the gateway answers 500
    rather than sending a request nowhere."""
    return InferencePool(
        metadata=Metadata(name=model, namespace=namespace, labels=picker_labels(model)),
        spec=InferencePoolSpec(
            selector=PoolSelector(match_labels=dict(pod_selector)),
            target_ports=[PortNumber(number=target_port)],
            endpoint_picker_ref=EndpointPickerRef(
                name=picker_name(model), port=PortNumber(number=EXT_PROC_PORT)
            ),
        ),
    )


# -- the picker ---------------------------------------------------------------------


def picker_args(model: str) -> list[str]:
    """The EPP's flags: its pool (in the pod's own namespace, the NAMESPACE variable), the
    default scorers, leader election for two replicas, plain gRPC (in-namespace) and
    metrics without token review (Prometheus scrapes them)."""
    return [
        "--pool-name",
        model,
        "--pool-group",
        API_GROUP,
        "--grpc-port",
        str(EXT_PROC_PORT),
        "--grpc-health-port",
        str(HEALTH_PORT),
        "--zap-encoder",
        "json",
        "--config-text",
        PLUGINS,
        "--ha-enable-leader-election",
        "--secure-serving=false",
        "--metrics-endpoint-auth=false",
        "--tracing=false",
    ]


def service_account_args(namespace: pulumi.Input[str], model: str) -> ServiceAccountInitArgs:
    return ServiceAccountInitArgs(
        metadata=ObjectMetaArgs(
            name=picker_name(model), namespace=namespace, labels=picker_labels(model)
        ),
        automount_service_account_token=False,
    )


def role_args(namespace: pulumi.Input[str], model: str) -> RoleInitArgs:
    """Read the pool and its pods (and the objectives it looks up); leases and events for
    leader election. Namespaced: the picker sees nothing outside the serving namespace."""
    read = ["get", "list", "watch"]
    return RoleInitArgs(
        metadata=ObjectMetaArgs(
            name=picker_name(model), namespace=namespace, labels=picker_labels(model)
        ),
        rules=[
            PolicyRuleArgs(api_groups=[""], resources=["pods"], verbs=read),
            PolicyRuleArgs(api_groups=[API_GROUP], resources=["inferencepools"], verbs=read),
            PolicyRuleArgs(
                api_groups=["inference.networking.x-k8s.io"],
                resources=["inferenceobjectives", "inferencemodelrewrites"],
                verbs=read,
            ),
            PolicyRuleArgs(
                api_groups=["coordination.k8s.io"],
                resources=["leases"],
                verbs=[*read, "create", "update", "patch", "delete"],
            ),
            PolicyRuleArgs(api_groups=[""], resources=["events"], verbs=["create", "patch"]),
        ],
    )


def role_binding_args(namespace: pulumi.Input[str], model: str) -> RoleBindingInitArgs:
    return RoleBindingInitArgs(
        metadata=ObjectMetaArgs(
            name=picker_name(model), namespace=namespace, labels=picker_labels(model)
        ),
        role_ref=RoleRefArgs(
            api_group="rbac.authorization.k8s.io", kind="Role", name=picker_name(model)
        ),
        subjects=[SubjectArgs(kind="ServiceAccount", name=picker_name(model), namespace=namespace)],
    )


TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where client-go's in-cluster config reads the token, the CA and the namespace."""


def api_token_volume() -> VolumeArgs:
    """What the automatic mount would give, projected: a bound token that the kubelet
    rotates (one hour), the cluster CA and the pod's namespace."""
    return VolumeArgs(
        name="api-token",
        projected=ProjectedVolumeSourceArgs(
            sources=[
                VolumeProjectionArgs(
                    service_account_token=ServiceAccountTokenProjectionArgs(
                        path="token", expiration_seconds=3607
                    )
                ),
                VolumeProjectionArgs(
                    config_map=ConfigMapProjectionArgs(
                        name="kube-root-ca.crt",
                        items=[KeyToPathArgs(key="ca.crt", path="ca.crt")],
                    )
                ),
                VolumeProjectionArgs(
                    downward_api=DownwardAPIProjectionArgs(
                        items=[
                            DownwardAPIVolumeFileArgs(
                                path="namespace",
                                field_ref=ObjectFieldSelectorArgs(field_path="metadata.namespace"),
                            )
                        ]
                    )
                ),
            ]
        ),
    )


def _field(path: str) -> EnvVarSourceArgs:
    return EnvVarSourceArgs(field_ref=ObjectFieldSelectorArgs(field_path=path))


def _grpc_probe(service: str, period: int) -> ProbeArgs:
    return ProbeArgs(grpc=GRPCActionArgs(port=HEALTH_PORT, service=service), period_seconds=period)


def deployment_args(namespace: pulumi.Input[str], model: str, image: str) -> DeploymentInitArgs:
    """Two pickers, one leader (readiness `readiness` passes only on the leader, liveness
    on both). No GPU toleration: they land on the system nodes."""
    container = ContainerArgs(
        name="epp",
        image=image,
        image_pull_policy="IfNotPresent",
        args=picker_args(model),
        env=[
            EnvVarArgs(name="NAMESPACE", value_from=_field("metadata.namespace")),
            EnvVarArgs(name="POD_NAME", value_from=_field("metadata.name")),
        ],
        ports=[
            ContainerPortArgs(name="grpc", container_port=EXT_PROC_PORT),
            ContainerPortArgs(name="grpc-health", container_port=HEALTH_PORT),
            ContainerPortArgs(name="metrics", container_port=METRICS_PORT),
        ],
        resources=ResourceRequirementsArgs(
            requests={"cpu": "1", "memory": "2Gi"},
            limits={"cpu": "4", "memory": "4Gi"},
        ),
        liveness_probe=_grpc_probe("liveness", 10),
        readiness_probe=_grpc_probe("readiness", 2),
        volume_mounts=[VolumeMountArgs(name="api-token", mount_path=TOKEN_PATH, read_only=True)],
        security_context=container_context(RUN_AS),
    )
    pod = PodSpecArgs(
        service_account_name=picker_name(model),
        # No automatic token: the one container that talks to the API server mounts a
        # short-lived one where client-go's in-cluster config reads it.
        automount_service_account_token=False,
        volumes=[api_token_volume()],
        security_context=pod_context(RUN_AS),
        # As long as the longest drain of the model's pods (the chart's choice).
        termination_grace_period_seconds=130,
        containers=[container],
    )
    return DeploymentInitArgs(
        metadata=ObjectMetaArgs(
            name=picker_name(model), namespace=namespace, labels=picker_labels(model)
        ),
        spec=DeploymentSpecArgs(
            replicas=REPLICAS,
            selector=LabelSelectorArgs(match_labels=picker_selector(model)),
            template=PodTemplateSpecArgs(
                metadata=ObjectMetaArgs(labels=picker_labels(model)), spec=pod
            ),
        ),
    )


def service_args(namespace: pulumi.Input[str], model: str) -> ServiceInitArgs:
    return ServiceInitArgs(
        metadata=ObjectMetaArgs(
            name=picker_name(model), namespace=namespace, labels=picker_labels(model)
        ),
        spec=ServiceSpecArgs(
            type="ClusterIP",
            selector=picker_selector(model),
            ports=[
                ServicePortArgs(
                    name="grpc", port=EXT_PROC_PORT, target_port="grpc", app_protocol="http2"
                ),
                ServicePortArgs(name="grpc-health", port=HEALTH_PORT, target_port="grpc-health"),
                ServicePortArgs(name="metrics", port=METRICS_PORT, target_port="metrics"),
            ],
        ),
    )


def api_server_policy_args(
    namespace: pulumi.Input[str], model: str, vpc_cidr: str
) -> NetworkPolicyInitArgs:
    """The picker's watch of pods and pools: HTTPS to the API server, whose endpoints are
    the control plane's ENIs inside the VPC (the tenant's AWS-API rule excludes the VPC)."""
    return NetworkPolicyInitArgs(
        metadata=ObjectMetaArgs(
            name=f"{picker_name(model)}-api-server", namespace=namespace, labels=PART_OF
        ),
        spec=NetworkPolicySpecArgs(
            pod_selector=LabelSelectorArgs(match_labels=picker_selector(model)),
            policy_types=["Egress"],
            egress=[
                NetworkPolicyEgressRuleArgs(
                    to=[NetworkPolicyPeerArgs(ip_block=IPBlockArgs(cidr=vpc_cidr))],
                    ports=[NetworkPolicyPortArgs(protocol="TCP", port=443)],
                )
            ],
        ),
    )


def pdb_args(namespace: pulumi.Input[str], model: str) -> PodDisruptionBudgetInitArgs:
    """One picker at a time: a node drain never takes both (requests fail closed without
    one)."""
    return PodDisruptionBudgetInitArgs(
        metadata=ObjectMetaArgs(
            name=picker_name(model), namespace=namespace, labels=picker_labels(model)
        ),
        spec=PodDisruptionBudgetSpecArgs(
            max_unavailable=1, selector=LabelSelectorArgs(match_labels=picker_selector(model))
        ),
    )
