"""The labels every layer agrees on: what the node pools carry, what jobs and workloads carry.

Set by the components (node groups, pod templates), selected on by the
workloads (Kueue flavors, model servers, jobs), read by the policy pack, the
cost model and the operator's checks: one name, defined once.
"""

from __future__ import annotations

POOL_LABEL = "llm-platform/pool"
"""Node label (and launch-template tag): the pool a node belongs to; `system` for the system
pool, the pool's name for GPU pools (`node_pools`) and CPU pools (`cpu_pools`)."""
TEAM_LABEL = "llm-platform/team"
"""Node label of a team stack's pools on a shared cluster (`shared_stack.team`): its Kueue
flavors select it, so a team's jobs land on its own nodes only."""
ACCELERATOR_LABEL = "llm-platform/accelerator"
"""Node label: the accelerator model (H100, A100, ...) of a GPU pool's nodes."""
EFA_LABEL = "llm-platform/efa"
"""Node label: "true" where the nodes have EFA interfaces (the EFA device plugin runs there)."""
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
"""Node label the GPU operator's MIG manager reads: the name of the mig-parted config (in the
platform's ConfigMap) it applies to the node's GPUs; a MIG pool's nodes carry theirs."""
CAPACITY_TYPE_LABEL = "llm-platform/capacity-type"
"""Node label: on-demand, spot or capacity_block."""
CHECKPOINTING_LABEL = "llm-platform/checkpointing"
"""Node label: "true" where jobs checkpoint and resume (required of spot pools)."""
JOB_KIND_LABEL = "llm-platform/job-kind"
"""Pod label: training, data-prep, acceptance...: what a GPU is busy with."""
TRAINING_JOB_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""Pod label the JobSet controller sets on every pod of a TrainJob (Kubeflow Trainer v2 runs a
TrainJob as the JobSet of its name): the job's name. The training PodMonitor makes it the `job`
of the pods' series (Kubernetes' word, not the process's), and the straggler watcher checks a
node it would quarantine runs such a pod."""
PART_OF = {"app.kubernetes.io/part-of": "llm-platform"}
"""Every Kubernetes object the platform makes carries this label."""
SCRAPE_LABEL = "llm-platform/scrape"
"""Service label: "true" where Prometheus scrapes the Service's `metrics` port (model servers)."""
CPU_POOL_TAINT = "llm-platform/cpu-pool"
"""Node taint key (value the pool's name, effect NoSchedule) of a CPU pool's nodes
(`cpu_pools.<name>`): only pods that tolerate it and select the pool by `POOL_LABEL` (data
jobs' Ray workers) land there, so add-ons stay on the system pool and data work does not
crowd them. The Cluster Autoscaler is told the taint while the pool has no nodes."""
QUARANTINE_TAINT = "llm-platform/quarantined"
"""Node taint key (effect NoSchedule) of a node taken out of service: by NVSentinel for a GPU
fault (value `gpu-fault`), by `llmp stragglers --quarantine` for a persistently slow node
(value `slow`). The node is also cordoned; `kubectl uncordon` plus removing the taint returns
it."""
