"""KEDA ScaledObjects: scale each model on vLLM's queue, and to zero outside serving hours.

Why KEDA rather than a plain HorizontalPodAutoscaler: the signal that matters
for an LLM server is its request queue (`vllm:num_requests_waiting`), which
lives in Prometheus; an HPA would need the prometheus-adapter and its
hand-written metric rules to see it, and an HPA cannot scale to zero. KEDA
reads the Prometheus query directly (its `prometheus` trigger), combines it
with a `cron` trigger for serving hours, and owns the HPA it creates, with
`minReplicaCount: 0` outside the hours and the model's `min_replicas` inside
(the cron trigger asks for that many while it is active).

Outside the hours the cron trigger holds nothing: since KEDA 2.18 it reports 0 there (1
before, kedacore/keda#6886), which the HPA reads against its default AverageValue target
of 1, below the HPA's own floor of one replica either way; KEDA scales to zero once no
trigger was active for `cooldownPeriod`. That stays true only without
`advanced.scalingModifiers` or another `metricType` on the cron trigger
(tests/manifests/serving/test_keda.py checks the object against the chart's CRD, too).

The objects are typed here (extra fields refused) and rendered to the dicts
that `kubernetes.apiextensions.CustomResource` takes.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from manifests.serving import NAMESPACE, ServedModel, ServingHours

API_VERSION: Final = "keda.sh/v1alpha1"
WAITING_METRIC = "vllm:num_requests_waiting"


class _Obj(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Metadata(_Obj):
    name: str
    namespace: str
    labels: dict[str, str] = Field(default_factory=dict)


class ScaleTargetRef(_Obj):
    api_version: str = Field("apps/v1", alias="apiVersion")
    kind: Literal["Deployment", "LeaderWorkerSet"] = "Deployment"
    name: str


class Trigger(_Obj):
    type: Literal["prometheus", "cron"]
    name: str
    metadata: dict[str, str]


class ScaledObjectSpec(_Obj):
    scale_target_ref: ScaleTargetRef = Field(alias="scaleTargetRef")
    min_replica_count: int = Field(ge=0, alias="minReplicaCount")
    max_replica_count: int = Field(ge=1, alias="maxReplicaCount")
    polling_interval: int = Field(15, ge=1, alias="pollingInterval")
    cooldown_period: int = Field(600, ge=0, alias="cooldownPeriod")
    triggers: list[Trigger] = Field(min_length=1)


class ScaledObject(_Obj):
    api_version: Literal["keda.sh/v1alpha1"] = Field(API_VERSION, alias="apiVersion")
    kind: Literal["ScaledObject"] = "ScaledObject"
    metadata: Metadata
    spec: ScaledObjectSpec

    def manifest(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


def waiting_query(model: str) -> str:
    """Requests queued in all of a model's replicas (vLLM labels them with model_name)."""
    return f'sum({WAITING_METRIC}{{namespace="{NAMESPACE}",model_name="{model}"}})'


def scaled_object(
    model: ServedModel,
    prometheus_url: str,
    schedule: ServingHours | None,
    labels: dict[str, str],
    target_kind: Literal["Deployment", "LeaderWorkerSet"] = "Deployment",
) -> ScaledObject:
    """`target_kind` LeaderWorkerSet: one group per replica, through its scale subresource."""
    triggers = [
        Trigger(
            type="prometheus",
            name="queue",
            metadata={
                "serverAddress": prometheus_url,
                "query": waiting_query(model.name),
                # Average value per replica: one more replica per `threshold` queued requests.
                "threshold": str(model.target_waiting_requests),
                # Waking from zero needs a queue, but a replica-less model has none to report.
                "activationThreshold": "0",
                "ignoreNullValues": "true",
            },
        )
    ]
    minimum = model.min_replicas
    if schedule is not None and model.min_replicas > 0:
        minimum = 0
        triggers.append(
            Trigger(
                type="cron",
                name="serving-hours",
                metadata={
                    "timezone": schedule.timezone,
                    "start": schedule.start,
                    "end": schedule.end,
                    "desiredReplicas": str(model.min_replicas),
                },
            )
        )
    return ScaledObject(
        metadata=Metadata(name=model.name, namespace=NAMESPACE, labels=labels),
        spec=ScaledObjectSpec(
            scale_target_ref=ScaleTargetRef(name=model.name)
            if target_kind == "Deployment"
            else ScaleTargetRef(
                api_version="leaderworkerset.x-k8s.io/v1", kind=target_kind, name=model.name
            ),
            min_replica_count=minimum,
            max_replica_count=model.max_replicas,
            triggers=triggers,
        ),
    )
