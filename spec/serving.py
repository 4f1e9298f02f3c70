"""`serving`: the model servers, their hours, the API's clients and its front door.

Per model, beside where it runs: its shape (`architecture`, the numbers of its
`config.json`), the vLLM engine's settings (`engine`), how many requests a replica
admits before the gateway sheds (`admission`), which clients may call it (`clients`)
and its latency objectives (`slo`). `engine_plan` turns a model and its pool's
instance type into the settings vLLM is started with, checked against the GPU memory
(`spec.serving_memory` has the arithmetic).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator, model_validator

from spec.base import Section
from spec.catalog import catalog
from spec.errors import MISSING, FieldError
from spec.serving_memory import GIB, ModelShape, memory_need

_MODEL_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")
_CLIENT_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")
_REVISION = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
_CERT_ARN = re.compile(r"^arn:aws[a-z-]*:acm:[a-z0-9-]+:\d{12}:certificate/[0-9a-f-]{36}$")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
_HOUR = re.compile(r"^([01]?\d|2[0-3]) \* \* [0-7*,-]+$")


def _relative_path(v: str) -> bool:
    return bool(_REVISION.match(v)) and not any(part in (".", "..") for part in v.split("/"))


VLLM_DEFAULT_MAX_NUM_SEQS = 256
"""vLLM v0.34.0's max_num_seqs for its OpenAI server on GPUs under 70 GiB (as v0.11.0's:
vllm/engine/arg_utils.py, 1024 from 70 GiB up); the most sequences
a derived default admits (`EngineConfig.max_num_seqs`)."""
LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
"""max_lora_rank values vLLM v0.34.0 accepts (vllm/config/lora.py MaxLoRARanks, which also
has 1)."""
TTFT_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25)
TTFT_BUCKETS += (0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
"""Bucket bounds of vLLM v0.34.0's `vllm:time_to_first_token_seconds` (v1/metrics/buckets.py):
a latency target must be one, since the SLO counts the requests in the bucket `le` it."""
ITL_BUCKETS: tuple[float, ...] = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)
ITL_BUCKETS += (0.75, 1.0, 2.5, 5.0)
ITL_BUCKETS += (7.5, 10.0, 20.0, 40.0, 80.0)
"""Bucket bounds of vLLM v0.34.0's `vllm:inter_token_latency_seconds`."""


class ModelArchitectureConfig(Section):
    """The served model's shape, copied from its `config.json` (the names are Hugging Face's).

    The weights live in S3 and a preview reads nothing from there, so the memory check
    needs these numbers in the stack. Parameters are counted for a dense decoder with a
    gated MLP (Llama, Mistral, Qwen); set `parameters` for any other (mixture of experts).
    """

    hidden_size: int = Field(ge=64, le=65536, description="config.json hidden_size.")
    num_hidden_layers: int = Field(ge=1, le=512, description="config.json num_hidden_layers.")
    num_attention_heads: int = Field(ge=1, le=1024, description="config.json num_attention_heads.")
    num_key_value_heads: int | None = Field(
        None, ge=1, le=1024, description="config.json num_key_value_heads; none: no GQA."
    )
    head_dim: int | None = Field(
        None, ge=8, le=1024, description="config.json head_dim; none: hidden / heads."
    )
    intermediate_size: int = Field(ge=64, le=1048576, description="config.json intermediate_size.")
    vocab_size: int = Field(ge=256, le=4194304, description="config.json vocab_size.")
    tie_word_embeddings: bool = Field(False, description="config.json tie_word_embeddings.")
    parameters: int | None = Field(
        None,
        ge=1_000_000,
        le=10_000_000_000_000,
        description="Total parameters, where the dense-decoder count is wrong (MoE).",
    )
    weight_bits: Literal[4, 8, 16] | None = Field(
        None,
        description="Bits per weight as stored; none: from `quantization` (awq/gptq 4, fp8 "
        "8, none 16). Set it for a checkpoint quantized in its files (compressed-tensors).",
    )

    @model_validator(mode="after")
    def _heads(self) -> ModelArchitectureConfig:
        kv = self.num_key_value_heads or self.num_attention_heads
        if self.num_attention_heads % kv:
            raise FieldError(
                ("num_key_value_heads",),
                kv,
                f"must divide num_attention_heads ({self.num_attention_heads})",
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise FieldError(
                ("head_dim",),
                MISSING,
                f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                f"{self.num_attention_heads}: set head_dim from config.json",
            )
        return self

    def shape(self, quantization: str) -> ModelShape:
        bits = self.weight_bits or {"awq": 4, "gptq": 4, "fp8": 8}.get(quantization, 16)
        return ModelShape(
            hidden_size=self.hidden_size,
            layers=self.num_hidden_layers,
            heads=self.num_attention_heads,
            kv_heads=self.num_key_value_heads or self.num_attention_heads,
            head_dim=self.head_dim or self.hidden_size // self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            vocab_size=self.vocab_size,
            tied_embeddings=self.tie_word_embeddings,
            parameters=self.parameters,
            weight_bits=bits,
        )


class SpeculativeDecodingConfig(Section):
    """Speculative decoding, rendered as vLLM's `--speculative-config` JSON.

    `ngram` proposes tokens found in the prompt (no extra weights); `eagle`/`eagle3` run an
    EAGLE draft head trained for the model (`model`: its path under the models prefix).
    A separate small draft LM (`draft_model`) is not offered: vLLM v0.11.0's V1 engine refused
    it ("Draft model speculative decoding is not supported yet"); v0.34.0 lists the method,
    but the platform does not place a draft model's weights and parallelism yet.
    """

    method: Literal["ngram", "eagle", "eagle3"] = Field(description="Proposer.")
    num_speculative_tokens: int = Field(4, ge=1, le=16, description="Tokens proposed per step.")
    model: str | None = Field(
        None, description="eagle/eagle3: the draft head's path under the models prefix."
    )
    prompt_lookup_min: int = Field(2, ge=1, le=32, description="ngram: shortest n-gram.")
    prompt_lookup_max: int = Field(4, ge=1, le=32, description="ngram: longest n-gram.")

    @field_validator("method", mode="before")
    @classmethod
    def _method(cls, v: object) -> object:
        if v == "draft_model":
            raise ValueError(
                "the platform does not serve a separate draft model (vLLM v0.11.0 refuses "
                "a separate draft model in its V1 engine; v0.34.0's is not wired here); "
                "use ngram, or eagle/eagle3 with a draft head trained for the model"
            )
        return v

    @field_validator("model")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        if v is not None and not _relative_path(v):
            raise ValueError("a relative path like eagle-llama-3.1-8b/1 (no .., no leading /)")
        return v

    @model_validator(mode="after")
    def _needs(self) -> SpeculativeDecodingConfig:
        if self.method == "ngram":
            if self.model is not None:
                raise FieldError(("model",), self.model, "ngram reads the prompt; remove model")
            if self.prompt_lookup_min > self.prompt_lookup_max:
                raise FieldError(
                    ("prompt_lookup_min",),
                    self.prompt_lookup_min,
                    f"must not exceed prompt_lookup_max ({self.prompt_lookup_max})",
                )
        elif self.model is None:
            raise FieldError(("model",), MISSING, f"{self.method} needs its draft head's path")
        return self

    def vllm_json(self) -> dict[str, object]:
        if self.method == "ngram":
            return {
                "method": "ngram",
                "num_speculative_tokens": self.num_speculative_tokens,
                "prompt_lookup_max": self.prompt_lookup_max,
                "prompt_lookup_min": self.prompt_lookup_min,
            }
        return {
            "method": self.method,
            "model": self.model,
            "num_speculative_tokens": self.num_speculative_tokens,
        }


class LoraConfig(Section):
    """LoRA adapters served beside the base weights (`--enable-lora`): a client asks for an
    adapter by its name in the request's `model` field."""

    adapters: dict[str, str] = Field(
        min_length=1,
        description="Adapter name -> its path under the models prefix (read-only).",
    )
    max_loras: int | None = Field(
        None, ge=1, le=64, description="Adapters on the GPU at once; none: all, up to 4."
    )
    max_lora_rank: int = Field(16, description=f"Highest adapter rank, one of {LORA_RANKS}.")

    @field_validator("adapters")
    @classmethod
    def _adapters(cls, v: dict[str, str]) -> dict[str, str]:
        for name, path in v.items():
            if not _MODEL_NAME.match(name):
                raise FieldError((name,), name, "an adapter name: lowercase letters, digits, '-'")
            if not _relative_path(path):
                raise FieldError((name,), path, "a relative path like llama-8b-sql/1 (no ..)")
        return v

    @field_validator("max_lora_rank")
    @classmethod
    def _rank(cls, v: int) -> int:
        if v not in LORA_RANKS:
            raise ValueError(f"vLLM v0.34.0 takes one of {', '.join(map(str, LORA_RANKS))}")
        return v

    @property
    def slots(self) -> int:
        return self.max_loras or min(len(self.adapters), 4)


class EngineConfig(Section):
    """vLLM's engine settings for one model; what is left out is derived (`engine_plan`)."""

    max_num_seqs: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Sequences in a batch. none: as many as fit in the GPUs' memory at "
        f"max_model_len each, up to {VLLM_DEFAULT_MAX_NUM_SEQS}.",
    )
    max_num_batched_tokens: int | None = Field(
        None,
        ge=64,
        le=1048576,
        description="Tokens per engine step. none: vLLM's server default for the GPU "
        "(8192 on GPUs of 70 GiB or more but A100, else 2048); max_model_len without "
        "chunked prefill.",
    )
    gpu_memory_utilization: float = Field(
        0.9, gt=0.3, le=0.98, description="Share of each GPU's memory vLLM may take."
    )
    enable_prefix_caching: bool = Field(True, description="Reuse the KV cache of shared prefixes.")
    enable_chunked_prefill: bool = Field(
        True, description="Split long prompts over steps, so decoding never stalls for one."
    )
    kv_cache_dtype: Literal["auto", "fp8"] = Field(
        "auto", description="KV cache precision: auto (the model's, 2 bytes) or fp8 (1)."
    )
    speculative: SpeculativeDecodingConfig | None = Field(
        None, description="Speculative decoding; none: off."
    )
    lora: LoraConfig | None = Field(None, description="LoRA adapters; none: off.")


class AdmissionConfig(Section):
    """How much a replica admits before its gateway sheds with 429 and Retry-After."""

    max_queued_requests: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Requests a replica queues beyond max_num_seqs; past max_num_seqs + this "
        "the gateway answers 429. none: twice target_waiting_requests.",
    )
    retry_after_seconds: int = Field(
        2, ge=1, le=300, description="Retry-After of a shed or rate-limited request."
    )
    retries: int = Field(
        2,
        ge=0,
        le=5,
        description="Retries of a request vLLM never received (connect failure, reset "
        "before the request); a request that got a response is never retried.",
    )


class LatencySloConfig(Section):
    """One latency objective: `objective` of the observations at or under `target_seconds`."""

    target_seconds: float = Field(gt=0, description="Latency bound (a bucket of vLLM's histogram).")
    objective: float = Field(
        0.99, ge=0.9, le=0.9999, description="Share of observations within the target."
    )


class ServingSloConfig(Section):
    """Latency SLOs over 30 days, alerted by multi-window burn rates (SRE workbook)."""

    time_to_first_token: LatencySloConfig = Field(
        default_factory=lambda: LatencySloConfig(target_seconds=2.5),
        description="TTFT (vllm:time_to_first_token_seconds).",
    )
    inter_token_latency: LatencySloConfig = Field(
        default_factory=lambda: LatencySloConfig(target_seconds=0.1),
        description="Time between tokens (vllm:inter_token_latency_seconds).",
    )

    @model_validator(mode="after")
    def _buckets(self) -> ServingSloConfig:
        for key, slo, buckets in (
            ("time_to_first_token", self.time_to_first_token, TTFT_BUCKETS),
            ("inter_token_latency", self.inter_token_latency, ITL_BUCKETS),
        ):
            if slo.target_seconds not in buckets:
                near = min(buckets, key=lambda b: abs(b - slo.target_seconds))
                raise FieldError(
                    (key, "target_seconds"),
                    slo.target_seconds,
                    f"vLLM's histogram has no bucket there; the nearest is {near:g} "
                    f"(buckets: {', '.join(f'{b:g}' for b in buckets)})",
                )
        return self


CANARY_WINDOWS = {"30m": "5m", "1h": "5m", "2h": "10m", "6h": "30m"}
"""A canary's judging window -> its short window (a twelfth, as the SRE workbook's pairs):
both must burn for a rollback, so a burn that already stopped does not roll back."""


class CanaryConfig(Section):
    """A canary of a new revision beside the stable one: a second Deployment (same engine
    settings, same gateway), `weight` percent of the model's traffic through the ALB's
    weighted target groups, judged on its own SLO burn by `llmp canary`."""

    revision: str = Field(description="The new revision's path under the models prefix.")
    weight: int = Field(
        ge=0,
        le=99,
        description="Percent of the model's requests sent to the canary; 0: no canary "
        "deployed (rolled back, or promoted: `llmp canary` writes 0 either way).",
    )
    replicas: int = Field(
        1, ge=1, le=16, description="Canary replicas (fixed; KEDA scales the stable)."
    )
    window: Literal["30m", "1h", "2h", "6h"] = Field(
        "1h", description="Judging window of `llmp canary` (with its short window, a twelfth)."
    )
    max_burn_rate: float = Field(
        2.0,
        gt=0,
        le=100,
        description="Rollback above this burn of the model's SLO budgets, over the window and "
        "its short window both, when the stable burns less.",
    )
    min_requests: int = Field(
        200, ge=1, description="Requests the canary must have served in the window to be judged."
    )

    @field_validator("revision")
    @classmethod
    def _revision(cls, v: str) -> str:
        if not _relative_path(v):
            raise ValueError("a relative path like llama-3-8b/2026-11-01 (no .., no leading /)")
        return v

    @property
    def short_window(self) -> str:
        return CANARY_WINDOWS[self.window]


class ServingModelConfig(Section):
    """One served model (`serving.models[]`): a vLLM Deployment, Service, PDB and ScaledObject."""

    name: str = Field(description="Model name: the Deployment's name and the API path `/<name>/`.")
    revision: str = Field(
        description="Path of the revision under the mounted models prefix (read-only).",
    )
    node_pool: str = Field(description="GPU pool the replicas run on (one of node_pools).")
    gpus_per_replica: int = Field(
        1,
        ge=1,
        le=16,
        description="GPUs per replica on each of its nodes = vLLM tensor parallel size.",
    )
    nodes_per_replica: int = Field(
        1,
        ge=1,
        le=8,
        description="Nodes per replica = vLLM pipeline parallel size (over EFA); above 1 a "
        "LeaderWorkerSet of whole nodes (gpus_per_replica = the node's GPUs), queued to "
        "Kueue as one group.",
    )
    mig_profile: str | None = Field(
        None,
        description="A MIG partition of this profile per replica (`3g.40gb`), on a pool whose "
        "`mig` layout has it: a small model, or an evaluation endpoint, on part of a GPU "
        "(gpus_per_replica 1, nodes_per_replica 1; the memory check takes the partition's).",
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
    architecture: ModelArchitectureConfig | None = Field(
        None,
        description="The model's shape from its config.json; required by a stack that serves "
        "it (the GPU memory check).",
    )
    engine: EngineConfig = Field(
        default_factory=EngineConfig, description="vLLM's engine settings."
    )
    admission: AdmissionConfig = Field(
        default_factory=AdmissionConfig, description="Concurrency per replica before load shedding."
    )
    clients: list[str] | None = Field(
        None, description="API clients that may call the model; none: every serving.api client."
    )
    slo: ServingSloConfig = Field(
        default_factory=ServingSloConfig, description="Latency objectives."
    )
    canary: CanaryConfig | None = Field(
        None, description="A canary of a new revision with a share of the traffic; none: off."
    )
    routing: Literal["round-robin", "endpoint-picker"] = Field(
        "round-robin",
        description="Which replica serves a request: round-robin (the ALB's, over the pods), "
        "or endpoint-picker (llm-d-router's EPP scores queue, KV cache and prefix hits; an "
        "InferencePool and its picker per model).",
    )

    @model_validator(mode="after")
    def _routing(self) -> ServingModelConfig:
        # The picker's pool is the stable pods, and a canary's gateway would hand every
        # request to one of them: the canary's weight would mean nothing.
        if self.routing == "endpoint-picker" and self.canary is not None and self.canary.weight:
            raise FieldError(
                ("routing",),
                self.routing,
                "round-robin while a canary takes traffic (canary.weight > 0): the endpoint "
                "picker routes over the stable replicas only",
            )
        if self.routing == "endpoint-picker" and self.nodes_per_replica > 1:
            # The pool would hold a group's workers too, which serve no requests.
            raise FieldError(
                ("routing",),
                self.routing,
                "round-robin for a model over several nodes (nodes_per_replica > 1): the "
                "picker's pool selects single-pod replicas",
            )
        return self

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _MODEL_NAME.match(v):
            raise ValueError("lowercase letters, digits and '-', up to 40, starting with a letter")
        return v

    @field_validator("revision")
    @classmethod
    def _revision(cls, v: str) -> str:
        if not _relative_path(v):
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
        if (
            self.canary is not None
            and self.canary.weight
            and (self.canary.revision == self.revision)
        ):
            raise FieldError(
                ("canary", "revision"),
                self.canary.revision,
                "is the stable revision; a canary serves another (or set weight 0)",
            )
        queued = self.admission.max_queued_requests
        if queued is not None and queued < self.target_waiting_requests:
            raise FieldError(
                ("admission", "max_queued_requests"),
                queued,
                f"KEDA adds a replica at {self.target_waiting_requests} waiting "
                "(target_waiting_requests); a smaller queue sheds before it ever scales",
            )
        return self

    @property
    def live_canary(self) -> CanaryConfig | None:
        """The canary, where it gets traffic (weight above 0)."""
        return self.canary if self.canary is not None and self.canary.weight else None

    @property
    def max_queued_requests(self) -> int:
        """Requests a replica queues beyond its batch before the gateway sheds."""
        return self.admission.max_queued_requests or 2 * self.target_waiting_requests


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


class ClientRateConfig(Section):
    """A token bucket per client key in each replica's gateway (Envoy's local rate limit)."""

    requests_per_second: int = Field(20, ge=1, le=100000, description="Refill per second.")
    burst: int = Field(40, ge=1, le=1000000, description="Bucket size: requests at once.")


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
    client_rate: ClientRateConfig = Field(
        default_factory=ClientRateConfig,
        description="Gateway: each client key's bucket in each replica, before the WAF's "
        "per-5-minute limit; past it, 429 with Retry-After.",
    )
    client_rates: dict[str, ClientRateConfig] = Field(
        default_factory=dict, description="Per-client buckets that replace client_rate."
    )

    @model_validator(mode="after")
    def _rates(self) -> ServingApiConfig:
        for client in self.client_rates:
            if client not in self.clients:
                raise FieldError(
                    ("client_rates", client), client, f"not a client ({', '.join(self.clients)})"
                )
        return self

    def rate(self, client: str) -> ClientRateConfig:
        return self.client_rates.get(client, self.client_rate)

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

    @model_validator(mode="after")
    def _authorized(self) -> ServingConfig:
        for i, model in enumerate(self.models):
            for j, client in enumerate(model.clients or []):
                if client not in self.api.clients:
                    raise FieldError(
                        ("models", i, "clients", j),
                        client,
                        f"not a client in serving.api.clients ({', '.join(self.api.clients)})",
                    )
        return self

    def model_clients(self, model: ServingModelConfig) -> list[str]:
        """The clients that may call `model` (the gateway's authorization map)."""
        return list(model.clients) if model.clients is not None else list(self.api.clients)


@dataclass(frozen=True)
class EnginePlan:
    """What vLLM is started with for one model on one pool, checked against GPU memory."""

    model: str
    instance_type: str
    tensor_parallel_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    kv_cache_dtype: str
    gpu_memory_gib: float
    need_gib: float
    """Weights, LoRA slots and the KV cache of every sequence at max_model_len, per GPU."""
    budget_gib: float
    speculative: dict[str, object] | None
    lora_adapters: dict[str, str]
    max_loras: int
    max_lora_rank: int
    pipeline_parallel_size: int = 1
    """Nodes per replica: vLLM's pipeline stages, one per node."""
    otlp_traces_endpoint: str | None = None
    """Where vLLM sends its request spans (OTLP gRPC); None: untraced."""


def mig_memory_gb(profile: str) -> int:
    """The memory of a MIG profile (`3g.40gb`: 40), in GB as NVIDIA names it."""
    return int(profile.rsplit(".", 1)[-1].removesuffix("gb"))


def engine_plan(model: ServingModelConfig, instance_type: str) -> EnginePlan:
    """The engine settings of `model` on `instance_type`: defaults derived, memory checked.

    Per GPU, the model needs its weights (parameters x bytes per weight), the LoRA slots and
    the KV cache of max_num_seqs sequences at max_model_len (2 x layers x KV heads x head_dim
    x bytes x tokens), all divided over the tensor-parallel GPUs; that must fit in
    gpu_memory_utilization x the GPU's memory (the catalog's). With KV room for every
    admitted sequence at full length vLLM never preempts, which is what keeps the P99 where
    the load test measured it. Raises FieldError (path under the model) with the arithmetic.
    """
    itype = catalog().instance(instance_type)
    acc = itype.accelerator
    if acc is None or model.architecture is None:
        raise FieldError(
            ("architecture",),
            MISSING,
            "the model's shape from its config.json (hidden_size, num_hidden_layers, "
            "num_attention_heads, num_key_value_heads, intermediate_size, vocab_size): the "
            "GPU memory check needs it",
        )
    tp, pp = model.gpus_per_replica, model.nodes_per_replica
    arch = model.architecture
    if pp > 1:
        if tp != acc.count:
            raise FieldError(
                ("gpus_per_replica",),
                tp,
                f"a replica over {pp} nodes takes whole nodes: {acc.count} GPUs of "
                f"{instance_type} per node (tensor parallel within a node)",
            )
        if itype.efa_interfaces == 0:
            raise FieldError(
                ("nodes_per_replica",),
                pp,
                f"{instance_type} has no EFA: pipeline stages on several nodes need it",
            )
        if arch.num_hidden_layers < pp:
            raise FieldError(
                ("nodes_per_replica",),
                pp,
                f"more pipeline stages than the {arch.num_hidden_layers} layers",
            )
    if arch.num_attention_heads % tp:
        raise FieldError(
            ("gpus_per_replica",),
            tp,
            f"vLLM splits the {arch.num_attention_heads} attention heads over the tensor-"
            "parallel GPUs: it must divide them",
        )
    eng = model.engine
    gpu_gib = acc.memory_gib / acc.count
    if model.mig_profile is not None:
        # A partition's name gives its memory in GB (10^9 bytes): less than the GiB it shows,
        # which errs on the side of fitting.
        gpu_gib = mig_memory_gb(model.mig_profile) * 1e9 / GIB
    budget = eng.gpu_memory_utilization * gpu_gib
    lora = eng.lora
    spec = eng.speculative
    need = memory_need(
        arch.shape(model.quantization),
        tensor_parallel=tp,
        pipeline_parallel=pp,
        kv_bytes=1 if eng.kv_cache_dtype == "fp8" else 2,
        lora_slots=lora.slots if lora else 0,
        lora_rank=lora.max_lora_rank if lora else 0,
        draft_head=spec is not None and spec.method != "ngram",
    )
    per_seq = need.kv_per_token * model.max_model_len
    room = budget * GIB - need.fixed
    gpu = acc.model if model.mig_profile is None else f"{acc.model} {model.mig_profile} partition"
    size = f"{gpu_gib:g}" if model.mig_profile is None else f"{gpu_gib:.1f}"
    where = f"{eng.gpu_memory_utilization:.2f} x {size} GiB of a {gpu} on {instance_type}"
    if pp > 1:
        where += f" (the heaviest of {pp} pipeline stages)"
    fits = math.floor(room / per_seq) if room > 0 else 0
    seqs = eng.max_num_seqs
    if seqs is None:
        seqs = min(fits, VLLM_DEFAULT_MAX_NUM_SEQS)
        key: tuple[str | int, ...] = ("max_model_len",)
        shown: object = model.max_model_len
        if seqs < 1:
            seqs = 1
    else:
        key, shown = ("engine", "max_num_seqs"), seqs
    total = need.fixed + per_seq * seqs
    if total > budget * GIB:
        raise FieldError(
            key,
            shown,
            f"{model.name} needs {total / GIB:.1f} GiB per GPU ({need.describe()} + KV cache "
            f"{per_seq * seqs / GIB:.1f} at {model.max_model_len} tokens x {seqs} seqs) > "
            f"{where}; lower max_num_seqs or max_model_len, or "
            + (
                "take a larger partition (mig_profile)"
                if model.mig_profile is not None
                else "raise gpus_per_replica (tensor parallel size)"
                if tp < acc.count
                else "raise nodes_per_replica (pipeline parallel size over nodes)"
            ),
        )
    batched = eng.max_num_batched_tokens
    if batched is None:
        large = gpu_gib >= 70 and not acc.model.startswith("A100")
        batched = (8192 if large else 2048) if eng.enable_chunked_prefill else model.max_model_len
    if not eng.enable_chunked_prefill and batched < model.max_model_len:
        raise FieldError(
            ("engine", "max_num_batched_tokens"),
            batched,
            f"without chunked prefill a step must hold a whole prompt: at least max_model_len "
            f"({model.max_model_len})",
        )
    if batched < seqs:
        raise FieldError(
            ("engine", "max_num_batched_tokens"),
            batched,
            f"vLLM needs at least max_num_seqs ({seqs}) tokens per step",
        )
    return EnginePlan(
        model=model.name,
        instance_type=instance_type,
        tensor_parallel_size=tp,
        max_model_len=model.max_model_len,
        max_num_seqs=seqs,
        max_num_batched_tokens=batched,
        gpu_memory_utilization=eng.gpu_memory_utilization,
        enable_prefix_caching=eng.enable_prefix_caching,
        enable_chunked_prefill=eng.enable_chunked_prefill,
        kv_cache_dtype=eng.kv_cache_dtype,
        gpu_memory_gib=gpu_gib,
        need_gib=round(total / GIB, 2),
        budget_gib=round(budget, 2),
        speculative=spec.vllm_json() if spec else None,
        lora_adapters=dict(lora.adapters) if lora else {},
        max_loras=lora.slots if lora else 0,
        max_lora_rank=lora.max_lora_rank if lora else 0,
        pipeline_parallel_size=pp,
    )
