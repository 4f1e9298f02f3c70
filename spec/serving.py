"""`serving`: the model servers, their hours, the API's clients and its front door."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from spec.base import Section
from spec.errors import FieldError

_MODEL_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")
_CLIENT_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")
_REVISION = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
_CERT_ARN = re.compile(r"^arn:aws[a-z-]*:acm:[a-z0-9-]+:\d{12}:certificate/[0-9a-f-]{36}$")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
_HOUR = re.compile(r"^([01]?\d|2[0-3]) \* \* [0-7*,-]+$")


class ServingModelConfig(Section):
    """One served model (`serving.models[]`): a vLLM Deployment, Service, PDB and ScaledObject."""

    name: str = Field(description="Model name: the Deployment's name and the API path `/<name>/`.")
    revision: str = Field(
        description="Path of the revision under the mounted models prefix (read-only).",
    )
    node_pool: str = Field(description="GPU pool the replicas run on (one of node_pools).")
    gpus_per_replica: int = Field(
        1, ge=1, le=16, description="GPUs per replica = vLLM tensor parallel size."
    )
    min_replicas: int = Field(1, ge=0, description="Replicas kept inside serving hours.")
    max_replicas: int = Field(2, ge=1, description="Most replicas under load.")
    max_model_len: int = Field(8192, ge=128, le=1048576, description="vLLM --max-model-len.")
    quantization: Literal["none", "awq", "gptq", "fp8"] = Field(
        "none",
        description="vLLM --quantization. none: the weights as stored; vLLM still detects "
        "a quantized checkpoint (compressed-tensors, workloads.jobs.quantize) by its config.",
    )
    target_waiting_requests: int = Field(
        4, ge=1, description="Queued requests per replica at which KEDA adds a replica."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _MODEL_NAME.match(v):
            raise ValueError("lowercase letters, digits and '-', up to 40, starting with a letter")
        return v

    @field_validator("revision")
    @classmethod
    def _revision(cls, v: str) -> str:
        if not _REVISION.match(v) or any(part in (".", "..") for part in v.split("/")):
            raise ValueError("a relative path like llama-3-8b/2026-10-01 (no .., no leading /)")
        return v

    @model_validator(mode="after")
    def _replicas(self) -> ServingModelConfig:
        if self.min_replicas > self.max_replicas:
            raise FieldError(
                ("min_replicas",),
                self.min_replicas,
                f"must not exceed max_replicas ({self.max_replicas})",
            )
        return self


class ServingScheduleConfig(Section):
    """Serving hours: KEDA's cron trigger keeps min_replicas inside, zero outside."""

    timezone: str = Field("UTC", description="IANA time zone of the hours, e.g. Europe/Paris.")
    start: str = Field("0 7 * * 1-5", description="Cron (minute hour * * weekdays) of opening.")
    end: str = Field("0 20 * * 1-5", description="Cron of closing.")

    @field_validator("start", "end")
    @classmethod
    def _cron(cls, v: str) -> str:
        minute, _, rest = v.partition(" ")
        if not minute.isdigit() or int(minute) > 59 or not _HOUR.match(rest):
            raise ValueError("a daily cron 'M H * * DAYS', e.g. 0 7 * * 1-5")
        return v

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        from zoneinfo import ZoneInfo

        try:
            ZoneInfo(v)
        except Exception:
            raise ValueError("not an IANA time zone; e.g. UTC or Europe/Paris") from None
        return v


class ServingApiConfig(Section):
    """Who may call the API: client names (keys are secret config) and rate limits."""

    clients: list[str] = Field(
        min_length=1,
        description=(
            "API clients; each key is the secret config `llm-platform-serving:<client>` "
            "(`pulumi config set --secret`); a client without one is refused."
        ),
    )
    rate_limit_per_key: int = Field(
        2000, ge=10, description="WAF: requests per 5 minutes per API key before blocking."
    )
    rate_limit_per_ip: int = Field(
        6000, ge=10, description="WAF: requests per 5 minutes per source IP before blocking."
    )

    @field_validator("clients")
    @classmethod
    def _clients(cls, v: list[str]) -> list[str]:
        for i, client in enumerate(v):
            if not _CLIENT_NAME.match(client):
                raise FieldError((i,), client, "lowercase letters, digits and '-', up to 32")
        if len(set(v)) != len(v):
            raise ValueError("lists a client twice; list each once")
        return v


class ServingConfig(Section):
    """Online model serving (vLLM) behind an authenticating gateway, an ALB and a WAF."""

    models: list[ServingModelConfig] = Field(min_length=1, description="Served models.")
    hostname: str = Field(description="DNS name of the API (the ALB's rule host).")
    certificate_arn: str = Field(description="ACM certificate ARN of `hostname` (HTTPS only).")
    scheme: Literal["internet-facing", "internal"] = Field(
        "internal", description="ALB scheme: internal (VPC only) or internet-facing."
    )
    prometheus_url: str = Field(
        "http://kube-prometheus-stack-prometheus.monitoring:9090",
        description="Prometheus that KEDA queries for vLLM's queue metrics.",
    )
    schedule: ServingScheduleConfig | None = Field(
        None, description="Serving hours; none: always at least min_replicas."
    )
    api: ServingApiConfig

    @field_validator("hostname")
    @classmethod
    def _hostname(cls, v: str) -> str:
        if not _HOSTNAME.match(v):
            raise ValueError("a lowercase DNS name, e.g. llm.example.com")
        return v

    @field_validator("certificate_arn")
    @classmethod
    def _cert(cls, v: str) -> str:
        if not _CERT_ARN.match(v):
            raise ValueError(
                "not an ACM certificate ARN; e.g. arn:aws:acm:us-east-1:123456789012:"
                "certificate/0123abcd-0123-4567-89ab-0123456789ab"
            )
        return v

    @field_validator("prometheus_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^https?://[A-Za-z0-9.-]+(:\d+)?(/\S*)?$", v):
            raise ValueError("an http(s) URL, e.g. http://prometheus.monitoring:9090")
        return v

    @field_validator("models")
    @classmethod
    def _unique(cls, v: list[ServingModelConfig]) -> list[ServingModelConfig]:
        names = [m.name for m in v]
        for i, name in enumerate(names):
            if names.index(name) != i:
                raise FieldError((i, "name"), name, "another model has this name")
        return v
