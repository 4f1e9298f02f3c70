"""The job file a user submits with `llmp job submit FILE`: one run on a pool, typed.

```yaml
kind: sft                      # pretrain, sft, dpo or grpo (the trainer's task)
name: chat-sft                 # the TrainJob's name (pods: chat-sft-node-0-<i>-<id>)
stack: finetune                # stacks/Pulumi.finetune.yaml: the pools, tenants, queues
tenant: chat                   # its namespace, ClusterQueue and quota
pool: h100                     # a node pool of the stack
nodes: {min: 1, max: 2}        # elastic between min and max; `nodes: 2` is fixed
image: 123456789012.dkr.ecr.us-west-2.amazonaws.com/llm-platform-trainer:v0.4.0
data: /fsx/datasets/chat/sft.jsonl
checkpoint: /fsx/checkpoints/chat-sft
zero_stage: 2
priority: llmp-training
trainer:                       # the trainer's own config (contracts.training.JobConfig)
  model: {pretrained: /fsx/models/llama-3.1-8b, seq_len: 4096, lora: {r: 16}}
  max_steps: 2000
```

The file says *what* to run; the stack decides *where* it may run. This module checks
the file on its own (pydantic, unknown keys refused) and renders the objects; the checks
against the stack (the pool exists, the tenant may use it, its quota and the cohort admit
the nodes, the namespace has the FSx claim) are `llmp.jobs`', which reads the stack.

What is rendered: a ConfigMap `<name>-config` holding the trainer's config as JSON (the
`trainer` block with `data`, `checkpoint`, `zero_stage` and the pool's instance type
merged in, validated by the trainer's own `JobConfig`), and the TrainJob that runs
`torchrun -m workloads.training.train --config /etc/llmp/job.json` on the pool, in the
tenant's LocalQueue, suspended until Kueue admits it.

`kind: pretrain-3d` pretrains with tensor, pipeline and data parallelism instead of ZeRO:
`parallel: {tp, pp}` (optionally `dp`; else world / (tp x pp) at each size) and no
`zero_stage`; it runs `torchrun -m workloads.training.parallel` (whose config is
`ParallelJobConfig`: `trainer.global_batch_size` in samples, the same at every layout) and
writes checkpoints any layout loads. Refused here, with the arithmetic: tp not dividing the
attention and key/value heads, more stages than layers (both from `trainer.model`); and on
the pool (`job_spec`): tp not dividing the GPUs per node (a tensor-parallel group stays on
one node's NVLink), a node count in `nodes` whose GPUs are not tp x pp x dp, and a global
batch that is not whole micro-batches at some dp.

Two more kinds run the lifecycle's single-process steps in the trainer image, through the
same queue: `promote` (`python -m workloads.jobs.promotion`: the newest complete checkpoint
under `checkpoint`, exported, checked, evaluated and published to a bucket of the stack)
and `quantize` (`python -m workloads.jobs.quantize`: a Hugging Face directory on FSx to a
compressed-tensors one). Each takes its own block (`promote:`, `quantize:`; its keys are
the module's flags) and neither `trainer`, `data`, `zero_stage` nor `max_restarts`; they run
one process on one node (`nodes: 1`, the default) with one GPU unless `gpus_per_node` says
more, and CPU and memory in proportion to their GPUs. The promote job reads the config the
training job ran with from that job's own ConfigMap (`promote.from_job: chat-sft` mounts
`chat-sft-config`), or from a file on FSx (`promote.job_config`); it renders no ConfigMap.

```yaml
kind: promote
name: chat-sft-promote
stack: finetune
tenant: chat
pool: h100
image: 123456789012.dkr.ecr.us-west-2.amazonaws.com/llm-platform-trainer:v0.4.0
checkpoint: /fsx/checkpoints/chat-sft   # the training job's checkpoint root (--checkpoints)
promote: {from_job: chat-sft, name: chat-8b, heldout: /fsx/datasets/chat/heldout}
```

Three kinds run a data pipeline as a KubeRay RayJob (manifests/jobs/rayjob.py) instead of
a TrainJob: `data-text` (`python -m workloads.data.text`: clean, filter, deduplicate and
tokenize text, on a CPU pool of `cpu_pools`), `data-web` (`python -m workloads.data.web`:
WARC/WET archives to the same shards, with URL block lists, opt-outs, main-text extraction
and a source manifest whose licences reach every shard manifest; a CPU pool too; its
`pipeline.sources` must give every source a licence) and `data-multimodal` (`python -m
workloads.data.multimodal`: frames, CLIP, VAD and Whisper, on a GPU pool, `gpus_per_node`
GPUs per worker, or on a CPU pool). They take `workers` (a count: Kueue admits the Ray
cluster at that size, as one gang), `input` (s3:// of the stack's buckets, in the tenant's
`s3_prefixes`, or under /fsx/), `output` (the same) and `pipeline` (the pipeline's own
config, validated by its `TextPipelineConfig`, `WebPipelineConfig` or
`MultimodalPipelineConfig`, keyed `pipeline.<field>`), and none of the trainer's keys. The
ConfigMap `<name>-config` holds the pipeline config (`pipeline.json`), mounted at
/etc/llmp; the head runs on the system pool.

```yaml
kind: data-text
name: web-clean
stack: pretrain
tenant: foundation
pool: data                     # a CPU pool (cpu_pools)
workers: 4
image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/llm-platform-pretrain/trainer:trainer-v0.1.0
input: s3://acme-llm-pretrain-datasets/foundation/raw/web/
output: /fsx/datasets/foundation/web
pipeline: {dedup: {threshold: 0.8}}
```
"""

from __future__ import annotations

import json
import re
from typing import Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from contracts import revisions
from contracts.multimodal_pipeline import MultimodalPipelineConfig
from contracts.parallel import (
    ParallelConfig,
    ParallelJobConfig,
    batch_problem,
    model_problem,
    placement_problem,
)
from contracts.quantization import SCHEMES
from contracts.text_pipeline import TextPipelineConfig
from contracts.training import TASKS, JobConfig, ModelConfig
from contracts.uri import S3_SCHEME, S3Error, split_uri
from contracts.web_pipeline import WebPipelineConfig
from manifests.jobs.pod import FSX_MOUNT, check_dns_label, check_image, on_fsx
from manifests.jobs.pytorchjob import CONFIG_MOUNT, JobKind
from manifests.jobs.rayjob import RayJobSpec
from manifests.jobs.trainjob import TrainJobSpec
from manifests.kueue import LEVEL_NAMES, LOCAL_QUEUE, TopologyRequest
from manifests.scheduling import check_priority_class
from spec.catalog import catalog
from spec.labels import PART_OF

JOB_LABEL: Final = "llm-platform/job"
"""On the TrainJob, its pods and its ConfigMap: the job file's name (`llmp job` selects by it)."""
CONFIG_KEY: Final = "job.json"
TRAINER_MODULE: Final = "workloads.training.train"
PARALLEL_MODULE: Final = "workloads.training.parallel"
PROMOTION_MODULE: Final = "workloads.jobs.promotion"
QUANTIZE_MODULE: Final = "workloads.jobs.quantize"
SET_BY_THE_FILE: Final = (
    "task",
    "data.path",
    "checkpoint.dir",
    "zero_stage",
    "instance_type",
    "parallel",
)
"""Trainer settings the job file (or the pool) decides; `trainer` may not set them again."""

Kind = Literal[
    "pretrain",
    "sft",
    "dpo",
    "grpo",
    "pretrain-3d",
    "promote",
    "quantize",
    "data-text",
    "data-web",
    "data-multimodal",
]
TRAINER_KINDS: Final = TASKS
"""The trainer's tasks: an elastic TrainJob of `workloads.training.train`."""
PARALLEL_KINDS: Final = ("pretrain-3d",)
"""Tensor x pipeline x data parallel pretraining: a TrainJob of `workloads.training.parallel`,
its own checkpoints (DCP, loadable at any layout), no DeepSpeed."""
STEP_KINDS: Final = ("promote", "quantize")
"""The lifecycle's single-process steps: one pod, one process, their own block."""
STEP_JOB_KINDS: Final[dict[str, JobKind]] = {"promote": "promotion", "quantize": "quantization"}
"""A step's pods' `llm-platform/job-kind` (not `training`: no metrics, no GPU-idle alert)."""
STEP_MODULES: Final = {"promote": PROMOTION_MODULE, "quantize": QUANTIZE_MODULE}
DATA_MODULES: Final = {
    "data-text": "workloads.data.text",
    "data-web": "workloads.data.web",
    "data-multimodal": "workloads.data.multimodal",
}
"""The data kinds: a RayJob whose driver runs `python -m <module> --config --input --output`."""
DATA_KINDS: Final = tuple(DATA_MODULES)
DATA_CONFIGS: Final[dict[str, type[BaseModel]]] = {
    "data-text": TextPipelineConfig,
    "data-web": WebPipelineConfig,
    "data-multimodal": MultimodalPipelineConfig,
}
DATA_CONFIG_KEY: Final = "pipeline.json"
"""The pipeline's config in the data job's ConfigMap (JSON, which its YAML reader reads too)."""
DATA_KEYS: Final = frozenset({"workers", "input", "output", "pipeline"})
REQUIRED_HERE: Final = "required_here"
"""Error type of a key that this kind (or this block) requires: shown as `<missing>`."""
DEFAULT_ZERO_STAGE: Final = 3
DEFAULT_MAX_RESTARTS: Final = 3

_TAKES: Final[dict[str, frozenset[str]]] = {
    **{
        kind: frozenset({"nodes", "data", "checkpoint", "zero_stage", "max_restarts", "trainer"})
        for kind in TRAINER_KINDS
    },
    "pretrain-3d": frozenset(
        {"nodes", "data", "checkpoint", "max_restarts", "trainer", "parallel"}
    ),
    "promote": frozenset({"nodes", "checkpoint", "promote"}),
    "quantize": frozenset({"nodes", "quantize"}),
    **{kind: DATA_KEYS for kind in DATA_KINDS},
}
"""The keys that depend on `kind`, and which kinds take them."""
_REQUIRES: Final[dict[str, frozenset[str]]] = {
    **{kind: frozenset({"nodes", "data", "checkpoint"}) for kind in TRAINER_KINDS},
    "pretrain-3d": frozenset({"nodes", "data", "checkpoint", "parallel"}),
    "promote": frozenset({"checkpoint", "promote"}),
    "quantize": frozenset({"quantize"}),
    **{kind: frozenset({"workers", "input", "output"}) for kind in DATA_KINDS},
}
_MODEL_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
"""`workloads.jobs.promotion`'s rule for --name (it refuses others, exit 2)."""
_PREFIX = re.compile(r"^[A-Za-z0-9._/-]*$")


def _required(why: str) -> PydanticCustomError:
    """A key this kind or this block cannot do without (shown as `KEY = <missing>: ...`)."""
    return PydanticCustomError(REQUIRED_HERE, "required {why}", {"why": why})


class PromoteStep(BaseModel):
    """`kind: promote`: the flags of `python -m workloads.jobs.promotion` (the job file's
    `checkpoint` is its --checkpoints)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job_config: str | None = Field(
        None,
        description=f"The training job's config, a JSON or YAML file under {FSX_MOUNT}/ "
        "(instead of from_job).",
    )
    from_job: str | None = Field(
        None,
        validate_default=True,
        description="The training job (its job file's name) whose ConfigMap <from_job>-config "
        "holds the config it trained with: mounted read-only, read as --job-config.",
    )
    bucket: str = Field(
        "models", description="The stack's bucket (a key of storage.buckets) to publish to."
    )
    name: str = Field(description="The model's name: revisions go under <prefix>/<name>/.")
    prefix: str = Field("revisions/", description="Key prefix of the revisions in the bucket.")
    heldout: str | None = Field(
        None, description=f"Held-out token shards under {FSX_MOUNT}/ (perplexity, the probe)."
    )
    eval_config: str | None = Field(
        None, description=f"YAML under {FSX_MOUNT}/: harness tasks, limit and thresholds."
    )
    max_perplexity: float | None = Field(
        None, gt=0, description="Gate: fail above this held-out perplexity."
    )
    dtype: Literal["bfloat16", "float32"] = Field("bfloat16", description="The served weights.")
    out: str | None = Field(
        None,
        description=f"Keep the exported directory here, under {FSX_MOUNT}/ (default: a temporary "
        "one). A new directory each time: promotion publishes every file it finds in it.",
    )

    @field_validator("job_config", "heldout", "eval_config", "out")
    @classmethod
    def _on_fsx(cls, v: str | None) -> str | None:
        return None if v is None else on_fsx(v)

    @field_validator("from_job")
    @classmethod
    def _one_config(cls, v: str | None, info: ValidationInfo) -> str | None:
        given = info.data.get("job_config")
        if v is None and given is None and "job_config" in info.data:
            raise _required(
                "(or job_config): the training job whose ConfigMap holds the config it "
                f"trained with, or that config as a file under {FSX_MOUNT}/"
            )
        if v is not None and given is not None:
            raise ValueError("give from_job or job_config, not both")
        return None if v is None else check_dns_label(v, "the training job's name", 52)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _MODEL_NAME.match(v):
            raise ValueError("lowercase letters, digits, '.', '_' and '-', at most 63")
        return v

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not _PREFIX.match(v) or ".." in v.split("/") or v.startswith("/"):
            raise ValueError("an S3 key prefix: letters, digits, '.', '_', '-' and '/'")
        return v

    @field_validator("max_perplexity")
    @classmethod
    def _measured(cls, v: float | None, info: ValidationInfo) -> float | None:
        if v is not None and info.data.get("heldout") is None and "heldout" in info.data:
            raise ValueError("needs heldout: the shards the perplexity is measured on")
        return v

    @property
    def config_path(self) -> str:
        """--job-config: the mounted ConfigMap's file, or the file on FSx."""
        return f"{CONFIG_MOUNT}/{CONFIG_KEY}" if self.job_config is None else self.job_config

    def key_prefix(self) -> str:
        """Where its revisions go in the bucket: `<prefix>/<name>/` (promotion's rule)."""
        return revisions.key_prefix(self.prefix, self.name)

    def args(self, checkpoints: str, bucket: str) -> list[str]:
        """promotion's command line; `bucket`: the physical name of `self.bucket`."""
        args = ["--checkpoints", checkpoints, "--job-config", self.config_path]
        args += ["--bucket", bucket, "--name", self.name, "--prefix", self.prefix]
        for flag, value in (
            ("--heldout", self.heldout),
            ("--eval-config", self.eval_config),
            (
                "--max-perplexity",
                None if self.max_perplexity is None else repr(self.max_perplexity),
            ),
        ):
            if value is not None:
                args += [flag, value]
        args += ["--dtype", self.dtype]
        return args + (["--out", self.out] if self.out is not None else [])


class QuantizeStep(BaseModel):
    """`kind: quantize`: the flags of `python -m workloads.jobs.quantize`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description=f"The Hugging Face model directory, under {FSX_MOUNT}/.")
    out: str = Field(description=f"A new directory for the result, under {FSX_MOUNT}/.")
    scheme: str = Field(description=f"One of {', '.join(SCHEMES)}.")
    calibration: str | None = Field(
        None,
        validate_default=True,
        description=f"JSONL text under {FSX_MOUNT}/: required by every scheme but fp8-dynamic.",
    )
    samples: int | None = Field(None, ge=1, description="Calibration samples (default 512).")
    max_seq_len: int | None = Field(None, ge=1, description="Tokens per sample (default 2048).")

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        return on_fsx(v)

    @field_validator("out")
    @classmethod
    def _out(cls, v: str, info: ValidationInfo) -> str:
        v = on_fsx(v)
        model = info.data.get("model")
        if model is not None and (v == model or v.startswith(model + "/")):
            raise ValueError(f"inside model {model}: write the result elsewhere")
        return v

    @field_validator("scheme")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if v not in SCHEMES:
            raise ValueError(f"not a scheme; one of {', '.join(SCHEMES)}")
        return v

    @field_validator("calibration")
    @classmethod
    def _calibration(cls, v: str | None, info: ValidationInfo) -> str | None:
        scheme = SCHEMES.get(info.data.get("scheme", ""))
        if scheme is not None and scheme.needs_calibration and v is None:
            raise _required(
                f"by scheme {scheme.name}: it calibrates on text (JSONL under {FSX_MOUNT}/)"
            )
        if v is not None:
            if scheme is not None and not scheme.needs_calibration:
                raise ValueError(f"scheme {scheme.name} is data-free: it takes no calibration")
            return on_fsx(v)
        return v

    @field_validator("samples", "max_seq_len")
    @classmethod
    def _calibrated(cls, v: int | None, info: ValidationInfo) -> int | None:
        scheme = SCHEMES.get(info.data.get("scheme", ""))
        if v is not None and scheme is not None and not scheme.needs_calibration:
            raise ValueError(f"scheme {scheme.name} is data-free: it takes no {info.field_name}")
        return v

    def args(self) -> list[str]:
        args = ["--model", self.model, "--out", self.out, "--scheme", self.scheme]
        for flag, value in (
            ("--calibration", self.calibration),
            ("--samples", self.samples),
            ("--max-seq-len", self.max_seq_len),
        ):
            if value is not None:
                args += [flag, str(value)]
        return args


def config_map_name(job: str) -> str:
    """The ConfigMap of a training job's trainer config (`llmp job cancel` deletes it)."""
    return f"{job}-config"


class TopologyChoice(BaseModel):
    """`topology`: where Kueue places the job's nodes on a topology-aware pool, by the EC2
    network labels of its nodes. One of `required: <level>` (all nodes under one network
    node of that layer, or the job waits), `preferred: <level>` (there if one has room,
    else as close above as fits) or `unconstrained: true`. Levels: `layer-1` (the top of
    the network, the least selective) to `layer-3` (`layer-4` on types with four layers),
    and `node`. Default on a topology-aware pool: preferred at its lowest layer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    required: str | None = Field(None, description="A level every node must share.")
    preferred: str | None = Field(None, description="A level the nodes should share.")
    unconstrained: bool = Field(False, description="Anywhere on the pool.")

    @field_validator("required", "preferred")
    @classmethod
    def _level(cls, v: str | None) -> str | None:
        if v is not None and v not in LEVEL_NAMES:
            raise ValueError(f"not a level; one of {', '.join(LEVEL_NAMES)}")
        return v

    @model_validator(mode="after")
    def _one(self) -> TopologyChoice:
        given = [k for k in ("required", "preferred") if getattr(self, k)]
        if self.unconstrained:
            given.append("unconstrained")
        if len(given) != 1:
            raise ValueError("give one of required, preferred or unconstrained")
        return self

    def request(self) -> TopologyRequest:
        if self.unconstrained:
            return TopologyRequest("unconstrained")
        if self.required is not None:
            return TopologyRequest.parse("required", self.required)
        return TopologyRequest.parse("preferred", self.preferred)


class NodeRange(BaseModel):
    """How many nodes (pods, one per node): elastic between `min` and `max`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: int = Field(ge=1, description="Fewest nodes the job trains on (after losing some).")
    max: int = Field(ge=1, description="Most nodes; Kueue admits the job at this size.")

    @model_validator(mode="after")
    def _ordered(self) -> NodeRange:
        if self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        return self


class JobFile(BaseModel):
    """One run on a stack's pool, in a tenant's queue: training, or a lifecycle step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Kind = Field(
        "pretrain",
        description="What the trainer does (its `task`): pretrain: next-token loss on token "
        "shards; sft: chat records, loss on the assistant turns; dpo: preference pairs; "
        "grpo: prompts scored by a reward; pretrain-3d: pretrain with tensor, pipeline and "
        "data parallelism (`parallel`). Or a step: promote (checkpoint -> a published "
        "revision), quantize (a model directory -> a compressed-tensors one).",
    )
    name: str = Field(description="Job name: a DNS label of at most 52 characters.")
    stack: str = Field(description="The stack it runs on (stacks/Pulumi.<stack>.yaml).")
    tenant: str = Field(description="The tenant: its namespace, queue and quota.")
    queue: str = Field(LOCAL_QUEUE, description="The LocalQueue in the tenant's namespace.")
    pool: str = Field(description="The node pool (its `llm-platform/pool` label).")
    nodes: NodeRange = Field(
        None,  # set by _for_kind: required for training, 1 for a step
        validate_default=True,
        description="`{min, max}`, or one number for a fixed size; a step runs on 1.",
    )
    gpus_per_node: int | None = Field(
        None, ge=1, description="Default: every accelerator (training), 1 (a step)."
    )
    topology: TopologyChoice | None = Field(
        None,
        description="On a topology-aware pool: `{required: layer-3}`, `{preferred: layer-2}` "
        "or `{unconstrained: true}`; default preferred at the pool's lowest network layer.",
    )
    partition: str | None = Field(
        None,
        description="On a MIG pool, a step (promote's evaluation, quantize) runs on one MIG "
        "partition of this profile (`3g.40gb`) instead of whole GPUs.",
    )
    image: str = Field(description="The trainer image, pinned by tag or digest.")
    data: str | None = Field(
        None,
        validate_default=True,
        description=f"Under {FSX_MOUNT}/: token shards (pretrain) or JSONL records (the "
        "trainer's data.path); for pretrain also s3://bucket/prefix/ of the stack's, in the "
        "tenant's s3_prefixes (shards fetched on first use). Training only.",
    )
    checkpoint: str | None = Field(
        None,
        validate_default=True,
        description=f"Checkpoint root under {FSX_MOUNT}/, shared by nodes: what training "
        "writes, what promote reads (--checkpoints).",
    )
    zero_stage: Literal[1, 2, 3] = Field(
        None,  # set by _for_kind
        validate_default=True,
        description=f"DeepSpeed ZeRO stage (default {DEFAULT_ZERO_STAGE}). Training only.",
    )
    priority: str = Field("llmp-training", description="A platform PriorityClass.")
    max_restarts: int = Field(
        None,  # set by _for_kind
        ge=0,
        validate_default=True,
        description=f"Elastic restarts of the worker group (default {DEFAULT_MAX_RESTARTS}). "
        "Training only: a step fails on its own errors (a lost pod is created again).",
    )
    trainer: dict[str, Any] = Field(
        default_factory=dict,
        validate_default=True,
        description="The rest of the trainer's config (model, steps, batch, optimizer).",
    )
    promote: PromoteStep | None = Field(
        None, validate_default=True, description="kind promote: promotion's flags."
    )
    quantize: QuantizeStep | None = Field(
        None, validate_default=True, description="kind quantize: quantize's flags."
    )
    parallel: ParallelConfig | None = Field(
        None,
        validate_default=True,
        description="kind pretrain-3d: `{tp, pp}` (and `dp`, else world / (tp x pp)); tp "
        "within a node, dividing the attention and key/value heads.",
    )
    workers: int | None = Field(
        None,
        ge=1,
        le=1000,
        validate_default=True,
        description="Data kinds: Ray worker pods, one per node of the pool; Kueue admits them "
        "all at once with the head and the submitter.",
    )
    input: str | None = Field(
        None,
        validate_default=True,
        description=f"Data kinds: what the pipeline reads: s3://bucket/prefix/ of the stack's "
        f"(in the tenant's s3_prefixes) or a path under {FSX_MOUNT}/.",
    )
    output: str | None = Field(
        None,
        validate_default=True,
        description=f"Data kinds: where it writes: a path under {FSX_MOUNT}/ or s3:// as input.",
    )
    pipeline: dict[str, Any] = Field(
        default_factory=dict,
        validate_default=True,
        description="Data kinds: the pipeline's config (TextPipelineConfig, WebPipelineConfig "
        "or MultimodalPipelineConfig); defaults where it says nothing.",
    )

    @field_validator(
        "nodes",
        "data",
        "checkpoint",
        "zero_stage",
        "max_restarts",
        "trainer",
        "promote",
        "quantize",
        "parallel",
        "workers",
        "input",
        "output",
        "pipeline",
        mode="before",
    )
    @classmethod
    def _for_kind(cls, v: Any, info: ValidationInfo) -> Any:
        """The keys `kind` decides: required, refused, or their kind's default."""
        kind = info.data.get("kind")
        key = str(info.field_name)
        if kind is None:  # `kind` itself was refused: that is the error
            return v
        given = v is not None and v != {}
        if given and key not in _TAKES[kind]:
            if kind in DATA_KINDS:
                why = f"it runs {DATA_MODULES[kind]} on Ray workers with what pipeline says"
            elif key in DATA_KEYS:
                why = f"that is for the data kinds ({', '.join(DATA_KINDS)})"
            elif kind in STEP_KINDS:
                why = f"it runs {STEP_MODULES[kind]} with what its {kind} block says"
            elif kind in PARALLEL_KINDS:
                why = "it shards with tensor, pipeline and FSDP data parallelism, not ZeRO"
            elif key == "parallel":
                why = f"tensor and pipeline parallelism is kind {PARALLEL_KINDS[0]}"
            else:  # a trainer refuses only the steps' blocks
                why = f"that block is for kind {key}"
            raise PydanticCustomError(
                "not_for_kind",
                "kind {kind} takes no {key}: {why}",
                {"kind": kind, "key": key, "why": why},
            )
        if not given and key in _REQUIRES[kind]:
            raise _required(f"by kind {kind}")
        if kind in DATA_KINDS and key not in DATA_KEYS:
            # Unused by a RayJob; the typed keys keep a value of their type.
            unused = {"min": 1, "max": 1}
            defaults = {"nodes": unused, "zero_stage": DEFAULT_ZERO_STAGE, "max_restarts": 0}
            return defaults.get(key, {} if key == "trainer" else None)
        if key == "nodes":
            if kind in STEP_KINDS:
                if given and v not in (1, {"min": 1, "max": 1}):
                    raise ValueError(f"kind {kind} runs one process on one node: nodes is 1")
                return {"min": 1, "max": 1}
            if isinstance(v, int) and not isinstance(v, bool):
                return {"min": v, "max": v}
        if not given and key == "zero_stage":
            return DEFAULT_ZERO_STAGE  # unused by a step
        if not given and key == "max_restarts":
            return DEFAULT_MAX_RESTARTS if kind not in STEP_KINDS else 0
        return v

    @field_validator("parallel")
    @classmethod
    def _splits_the_model(
        cls, v: ParallelConfig | None, info: ValidationInfo
    ) -> ParallelConfig | None:
        """tp divides the heads, pp at most the layers: of a model built from `trainer.model`
        (a pretrained one's shape is its config.json's, which the trainer checks)."""
        trainer = info.data.get("trainer")
        if v is None or not isinstance(trainer, dict):
            return v
        try:
            model = ModelConfig.model_validate(trainer.get("model", {}))
        except ValidationError:
            return v  # the trainer's schema says what is wrong with it
        if model.pretrained is None:
            problem = model_problem(v, model.dimensions())
            if problem is not None:
                raise ValueError(f"{problem} (trainer.model)")
        return v

    @field_validator("partition")
    @classmethod
    def _partition(cls, v: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        if v is not None and kind is not None and kind not in STEP_KINDS:
            raise ValueError(
                f"kind {kind} takes no partition: a MIG partition runs one process "
                f"(the steps: {', '.join(STEP_KINDS)}); training takes whole GPUs"
            )
        return v

    @field_validator("name", "tenant", "queue", "pool")
    @classmethod
    def _dns(cls, v: str) -> str:
        # 52: the operator appends "-worker-<index>" and the Service name must stay a label.
        return check_dns_label(v, "the name", 52)

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        return check_image(v)

    @field_validator("checkpoint")
    @classmethod
    def _on_fsx(cls, v: str | None) -> str | None:
        return None if v is None else on_fsx(v)

    @field_validator("data")
    @classmethod
    def _data(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None or not v.startswith(S3_SCHEME):
            return None if v is None else on_fsx(v)
        if info.data.get("kind") != "pretrain":
            raise ValueError(
                f"{v!r}: s3:// data is read as token shards, which only kind pretrain takes; "
                f"give a path under {FSX_MOUNT}/"
            )
        try:
            split_uri(v)
        except S3Error as e:
            raise ValueError(str(e)) from None
        return v

    @field_validator("input", "output")
    @classmethod
    def _location(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return v
        if v.startswith(S3_SCHEME):
            try:
                split_uri(v)
            except S3Error as e:
                raise ValueError(str(e)) from None
            return v
        try:
            return on_fsx(v)
        except ValueError:
            raise ValueError(
                f"s3://bucket/prefix/ of the stack's buckets or a path under {FSX_MOUNT}/ "
                "(the tenant's FSx claim)"
            ) from None

    @field_validator("priority")
    @classmethod
    def _priority(cls, v: str) -> str:
        return check_priority_class(v)

    @field_validator("trainer")
    @classmethod
    def _trainer(cls, v: dict[str, Any]) -> dict[str, Any]:
        def sets(key: str) -> bool:
            section, _, leaf = key.partition(".")
            inner = v.get(section)
            return section in v if not leaf else isinstance(inner, dict) and leaf in inner

        owned = [key for key in SET_BY_THE_FILE if sets(key)]
        if owned:
            raise ValueError(f"sets {', '.join(owned)}, which the job file sets at its top level")
        model = v.get("model")
        for key in ("pretrained", "tokenizer"):
            path = model.get(key) if isinstance(model, dict) else None
            if isinstance(path, str):
                try:
                    on_fsx(path, f"model.{key}")
                except ValueError as exc:
                    raise ValueError(f"{exc}: the pods read base weights there") from None
        board = v.get("tensorboard_dir")
        if isinstance(board, str):
            try:
                on_fsx(board, "tensorboard_dir")
            except ValueError as exc:
                # A pod's own disk goes with the pod: the event files would be lost.
                raise ValueError(f"{exc}: rank 0 may run on any node") from None
        return v

    @property
    def namespace(self) -> str:
        """A tenant's namespace is its name (components/tenancy.py)."""
        return self.tenant

    @property
    def config_map_name(self) -> str:
        return config_map_name(self.name)

    @property
    def is_data(self) -> bool:
        """A data pipeline on Ray (a RayJob), not a TrainJob."""
        return self.kind in DATA_KINDS

    def pipeline_config(self) -> BaseModel:
        """The pipeline's config, validated by its own model (ValidationError, keyed relative
        to the `pipeline` block)."""
        return DATA_CONFIGS[self.kind].model_validate(self.pipeline)

    def data_args(self) -> list[str]:
        """The pipeline module's flags: its mounted config, the input and the output."""
        if self.input is None or self.output is None:
            raise ValueError(f"kind {self.kind} has no input and output")
        config = f"{CONFIG_MOUNT}/{DATA_CONFIG_KEY}"
        return ["--config", config, "--input", self.input, "--output", self.output]

    def ray_job_spec(
        self,
        *,
        instance_type: str,
        pool_taint: str,
        gpus_per_worker: int,
        service_account: str,
        team: str = "",
        run_as_user: int = 1000,
        worker_topology: TopologyRequest | None = None,
    ) -> RayJobSpec:
        """The RayJob's spec on the pool (the stack decides its type and taint, and, for a
        team stack on a shared cluster, the team its pools carry; `worker_topology`: what
        the workers ask of Kueue's TAS on a topology-aware pool)."""
        if self.workers is None:
            raise ValueError(f"kind {self.kind} needs workers")
        return RayJobSpec(
            name=self.name,
            namespace=self.namespace,
            image=self.image,
            module=DATA_MODULES[self.kind],
            args=self.data_args(),
            queue_name=self.queue,
            pool=self.pool,
            team=team,
            instance_type=instance_type,
            pool_taint=pool_taint,
            workers=self.workers,
            gpus_per_worker=gpus_per_worker,
            service_account=service_account,
            config_map=self.config_map_name,
            priority_class=self.priority,
            labels={JOB_LABEL: self.name},
            run_as_user=run_as_user,
            worker_topology=worker_topology.annotations() if worker_topology else {},
        )

    @property
    def is_step(self) -> bool:
        """A lifecycle step (promote, quantize), not a training run."""
        return self.kind in STEP_KINDS

    @property
    def mounted_config_map(self) -> str | None:
        """The ConfigMap the pods mount: the job's own (training), the training job's
        (promote.from_job), or none."""
        if self.promote is not None:
            from_job = self.promote.from_job
            return None if from_job is None else config_map_name(from_job)
        return None if self.is_step else self.config_map_name

    @property
    def is_parallel(self) -> bool:
        """Tensor x pipeline x data parallel (`workloads.training.parallel`)."""
        return self.kind in PARALLEL_KINDS

    def command(self, bucket: str | None = None) -> list[str]:
        """What torchrun runs: `-m module` and its flags. `bucket`: for promote, the physical
        name of the stack's `promote.bucket` (the stack decides it)."""
        if self.promote is not None:
            if bucket is None or self.checkpoint is None:
                raise ValueError("promote: the bucket's name and the checkpoint are needed")
            return ["-m", PROMOTION_MODULE, *self.promote.args(self.checkpoint, bucket)]
        if self.quantize is not None:
            return ["-m", QUANTIZE_MODULE, *self.quantize.args()]
        module = PARALLEL_MODULE if self.is_parallel else TRAINER_MODULE
        return ["-m", module, "--config", f"{CONFIG_MOUNT}/{CONFIG_KEY}"]

    def trainer_config(self, instance_type: str) -> JobConfig:
        """The trainer's config: `trainer` with what the file and the pool decide merged in.

        Raises pydantic's ValidationError for a bad `trainer` block (locations relative to it).
        """

        if self.is_step or self.data is None or self.checkpoint is None:
            raise ValueError(f"kind {self.kind} runs no trainer")

        def section(name: str, key: str, value: str) -> Any:
            # Not a mapping: left as it is, for the trainer's schema to refuse with its key.
            given = self.trainer.get(name, {})
            return {**given, key: value} if isinstance(given, dict) else given

        merged = {
            **self.trainer,
            "task": self.kind,
            "data": section("data", "path", self.data),
            "checkpoint": section("checkpoint", "dir", self.checkpoint),
            "zero_stage": self.zero_stage,
            "instance_type": instance_type,
        }
        if self.parallel is not None:
            del merged["zero_stage"]
            merged["task"] = "pretrain"
            merged["parallel"] = self.parallel.model_dump(exclude_none=True)
            return ParallelJobConfig.model_validate(merged)
        return JobConfig.model_validate(merged)

    def job_spec(
        self,
        instance_type: str,
        efa: bool = True,
        bucket: str | None = None,
        run_as_user: int = 1000,
        *,
        topology: TopologyRequest | None = None,
        partition: tuple[str, int] | None = None,
    ) -> TrainJobSpec:
        """The TrainJob's spec on a pool of `instance_type`; `efa`: whether the pool's nodes
        have their EFA interfaces (a pool without them offers no `vpc.amazonaws.com/efa`);
        `bucket`: promote's bucket, by its physical name; `topology`: what its pods ask of
        Kueue's Topology Aware Scheduling (the pool is topology-aware); `partition`: a step on
        a MIG pool, the partition's resource and how many one GPU holds.

        A step is one pod and one process (`procs_per_node` 1) with 1 GPU by default, CPU
        and memory in proportion to its GPUs (`host_share`), no EFA (no collectives), its own
        job-kind, no checkpoint dir of its own, and the `ExitCode` restart policy."""
        common: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "image": self.image,
            "command": self.command(bucket),
            "instance_type": instance_type,
            "node_pool": self.pool,
            "nodes_min": self.nodes.min,
            "nodes_max": self.nodes.max,
            "max_restarts": self.max_restarts,
            "queue_name": self.queue,
            "priority_class": self.priority,
            "config_map": self.mounted_config_map,
            "labels": {JOB_LABEL: self.name},
            # The tenant's uid: admission refuses any other in its namespace.
            "run_as_user": run_as_user,
            "topology": topology.annotations() if topology is not None else {},
        }
        if partition is not None:
            common["accelerator_resource"], common["partitions_per_gpu"] = partition
        if self.is_step:
            return TrainJobSpec(
                **common,
                gpus_per_node=self.gpus_per_node or 1,
                procs_per_node=1,
                efa_per_node=0,
                host_share="gpus",
                job_kind=STEP_JOB_KINDS[self.kind],
                restart_policy="ExitCode",
            )
        if self.parallel is not None:
            self._check_layout(instance_type)
        return TrainJobSpec(
            **common,
            gpus_per_node=self.gpus_per_node,
            efa_per_node=None if efa else 0,
            checkpoint_dir=self.checkpoint,
            # The parallel trainer (plain torch), or the trainer's DeepSpeed ZeRO.
            framework="torch" if self.is_parallel else "deepspeed",
        )

    def _check_layout(self, instance_type: str) -> None:
        """pretrain-3d on `instance_type`: TP within a node, every node count a whole
        layout, the global batch whole micro-batches at every dp (ValidationError, keyed)."""
        parallel = self.parallel
        acc = catalog().instance(instance_type).accelerator
        if parallel is None or acc is None:
            return
        gpus = self.gpus_per_node or acc.count
        nodes = range(self.nodes.min, self.nodes.max + 1)
        placed = placement_problem(parallel, nodes, gpus)
        if placed is not None:
            key, why = placed
            value: Any = parallel.model_dump(exclude_none=True, exclude={"schedule"})
            if key != "parallel":
                value = getattr(parallel, key.rpartition(".")[2])
            raise _keyed_error(key, value, why)
        try:
            trainer = self.trainer_config(instance_type)
        except ValidationError:
            return  # the trainer's schema says what is wrong (trainer_config's caller)
        assert isinstance(trainer, ParallelJobConfig)
        for n in nodes:
            dp = n * gpus // (parallel.tp * parallel.pp)
            problem = batch_problem(trainer, dp)
            if problem is not None:
                at = f" (at nodes {n})" if len(nodes) > 1 else ""
                raise _keyed_error(
                    "trainer.global_batch_size", trainer.global_batch_size, problem + at
                )


def _keyed_error(key: str, value: Any, why: str) -> ValidationError:
    """A one-error ValidationError at the dotted `key` (the job file's), as pydantic's own."""
    detail = InitErrorDetails(
        type=PydanticCustomError("layout", "{why}", {"why": why}),
        loc=tuple(key.split(".")),
        input=value,
    )
    return ValidationError.from_exception_data("JobFile", [detail])


def data_config_map(job: JobFile, pipeline: BaseModel) -> dict[str, Any]:
    """The ConfigMap the data pipeline reads its config from (`--config`)."""
    return _config_map(job, DATA_CONFIG_KEY, pipeline)


def config_map(job: JobFile, trainer: JobConfig) -> dict[str, Any]:
    """The ConfigMap the trainer reads its config from."""
    return _config_map(job, CONFIG_KEY, trainer)


def _config_map(job: JobFile, key: str, config: BaseModel) -> dict[str, Any]:
    """`<name>-config` in the job's namespace: `config` as JSON under `key`."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": job.config_map_name,
            "namespace": job.namespace,
            "labels": {JOB_LABEL: job.name, **PART_OF},
        },
        "data": {key: json.dumps(config.model_dump(mode="json"), indent=2) + "\n"},
    }
