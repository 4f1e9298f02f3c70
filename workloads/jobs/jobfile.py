"""The job file a user submits with `llmp job submit FILE`: one training run, typed.

```yaml
kind: sft                      # pretrain, sft, dpo or grpo (the trainer's task)
name: chat-sft                 # the PyTorchJob's name (pods: chat-sft-worker-<i>)
stack: finetune                # stacks/Pulumi.finetune.yaml: the pools, tenants, queues
tenant: chat                   # its namespace, ClusterQueue and quota
pool: h100                     # a node pool of the stack
nodes: {min: 1, max: 2}        # elastic between min and max; `nodes: 2` is fixed
image: 123456789012.dkr.ecr.us-west-2.amazonaws.com/llm-platform-trainer:v0.4.0
data: /fsx/datasets/chat/sft.jsonl
checkpoint: /fsx/checkpoints/chat-sft
zero_stage: 2
priority: llmp-training
trainer:                       # the trainer's own config (ds_config.JobConfig)
  model: {pretrained: /fsx/models/llama-3.1-8b, seq_len: 4096, lora: {r: 16}}
  max_steps: 2000
```

The file says *what* to run; the stack decides *where* it may run. This module checks
the file on its own (pydantic, unknown keys refused) and renders the objects; the checks
against the stack (the pool exists, the tenant may use it, its quota and the cohort admit
the nodes, the namespace has the FSx claim) are `llmp.jobs`', which reads the stack.

What is rendered: a ConfigMap `<name>-config` holding the trainer's config as JSON (the
`trainer` block with `data`, `checkpoint`, `zero_stage` and the pool's instance type
merged in, validated by the trainer's own `JobConfig`), and the PyTorchJob that runs
`torchrun -m workloads.training.train --config /etc/llmp/job.json` on the pool, in the
tenant's LocalQueue, suspended until Kueue admits it.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from spec.labels import PART_OF
from workloads.jobs.pod import FSX_MOUNT, check_dns_label, check_image
from workloads.jobs.pytorchjob import CONFIG_MOUNT, JobSpec
from workloads.kueue import LOCAL_QUEUE
from workloads.scheduling import PRIORITIES
from workloads.training.ds_config import JobConfig

JOB_LABEL: Final = "llm-platform/job"
"""On the PyTorchJob, its pods and its ConfigMap: the job file's name (`llmp job` selects by it)."""
CONFIG_KEY: Final = "job.json"
TRAINER_MODULE: Final = "workloads.training.train"
SET_BY_THE_FILE: Final = ("task", "data.path", "checkpoint.dir", "zero_stage", "instance_type")
"""Trainer settings the job file (or the pool) decides; `trainer` may not set them again."""


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
    """One training run on a stack's pool, in a tenant's queue."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["pretrain", "sft", "dpo", "grpo"] = Field(
        "pretrain",
        description="What the trainer does (its `task`): pretrain: next-token loss on token "
        "shards; sft: chat records, loss on the assistant turns; dpo: preference pairs; "
        "grpo: prompts scored by a reward.",
    )
    name: str = Field(description="Job name: a DNS label of at most 52 characters.")
    stack: str = Field(description="The stack it runs on (stacks/Pulumi.<stack>.yaml).")
    tenant: str = Field(description="The tenant: its namespace, queue and quota.")
    queue: str = Field(LOCAL_QUEUE, description="The LocalQueue in the tenant's namespace.")
    pool: str = Field(description="The node pool (its `llm-platform/pool` label).")
    nodes: NodeRange = Field(description="`{min, max}`, or one number for a fixed size.")
    gpus_per_node: int | None = Field(None, ge=1, description="Default: every accelerator.")
    image: str = Field(description="The trainer image, pinned by tag or digest.")
    data: str = Field(
        description=f"Under {FSX_MOUNT}/: token shards (pretrain) or JSONL records (the "
        "trainer's data.path)."
    )
    checkpoint: str = Field(description=f"Checkpoint root under {FSX_MOUNT}/, shared by nodes.")
    zero_stage: Literal[1, 2, 3] = Field(3, description="DeepSpeed ZeRO stage.")
    priority: str = Field("llmp-training", description="A platform PriorityClass.")
    max_restarts: int = Field(3, ge=0, description="Elastic restarts of the worker group.")
    trainer: dict[str, Any] = Field(
        default_factory=dict,
        description="The rest of the trainer's config (model, steps, batch, optimizer).",
    )

    @field_validator("nodes", mode="before")
    @classmethod
    def _fixed(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return {"min": v, "max": v}
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

    @field_validator("data", "checkpoint")
    @classmethod
    def _on_fsx(cls, v: str) -> str:
        parts = v.split("/")
        if not v.startswith(FSX_MOUNT + "/") or ".." in parts or len(v) <= len(FSX_MOUNT) + 1:
            raise ValueError(f"must be a path under {FSX_MOUNT}/ (the tenant's FSx claim)")
        return v.rstrip("/")

    @field_validator("priority")
    @classmethod
    def _priority(cls, v: str) -> str:
        names = [p.name for p in PRIORITIES]
        if v not in names:
            raise ValueError(f"not a platform priority class; one of {', '.join(names)}")
        return v

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
            if isinstance(path, str) and not path.startswith(FSX_MOUNT + "/"):
                raise ValueError(
                    f"model.{key} {path!r} must be a path under {FSX_MOUNT}/: the pods read "
                    "base weights from the tenant's FSx claim (nothing downloads at run time)"
                )
        return v

    @property
    def namespace(self) -> str:
        """A tenant's namespace is its name (components/tenancy.py)."""
        return self.tenant

    @property
    def config_map_name(self) -> str:
        return f"{self.name}-config"

    def trainer_config(self, instance_type: str) -> JobConfig:
        """The trainer's config: `trainer` with what the file and the pool decide merged in.

        Raises pydantic's ValidationError for a bad `trainer` block (locations relative to it).
        """

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
        return JobConfig.model_validate(merged)

    def job_spec(self, instance_type: str, efa: bool = True) -> JobSpec:
        """The PyTorchJob's spec on a pool of `instance_type`; `efa`: whether the pool's nodes
        have their EFA interfaces (a pool without them offers no `vpc.amazonaws.com/efa`)."""
        return JobSpec(
            name=self.name,
            namespace=self.namespace,
            image=self.image,
            command=["-m", TRAINER_MODULE, "--config", f"{CONFIG_MOUNT}/{CONFIG_KEY}"],
            instance_type=instance_type,
            node_pool=self.pool,
            nodes_min=self.nodes.min,
            nodes_max=self.nodes.max,
            max_restarts=self.max_restarts,
            gpus_per_node=self.gpus_per_node,
            efa_per_node=None if efa else 0,
            checkpoint_dir=self.checkpoint,
            queue_name=self.queue,
            priority_class=self.priority,
            config_map=self.config_map_name,
            labels={JOB_LABEL: self.name},
        )


def config_map(job: JobFile, trainer: JobConfig) -> dict[str, Any]:
    """The ConfigMap the trainer reads its config from."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": job.config_map_name,
            "namespace": job.namespace,
            "labels": {JOB_LABEL: job.name, **PART_OF},
        },
        "data": {CONFIG_KEY: json.dumps(trainer.model_dump(mode="json"), indent=2) + "\n"},
    }
