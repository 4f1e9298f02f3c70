"""The metrics the platform's exporters publish, by exporter: what rules and dashboards may use.

- **dcgm**: NVIDIA DCGM exporter of the GPU operator (Service `nvidia-dcgm-exporter`, port
  `gpu-metrics`); labels `gpu`, `UUID`, `Hostname`, `modelName` and, with the Kubernetes
  mapping the operator turns on, `namespace`, `pod`, `container` of the pod using the GPU
  (scraped with honorLabels, the one monitor that is: the exporter is the platform's).
  The XID, ECC and NVLink counters must be in the exporter's metrics CSV
  (`components.addons.DCGM_METRICS`, which lists exactly these).
  `DCGM_EXP_XID_ERRORS_COUNT` (dcgm-exporter 3.3.5-3.4.0 and later, off unless listed in the
  CSV) counts each XID within the exporter's window (label `xid`, window label
  `window_size_in_ms`, 5 minutes by default); with none it publishes 0 without `xid`.
- **node**: the chart's prometheus-node-exporter. EFA: its `infiniband` collector (on by
  default) reads `/sys/class/infiniband/<efa device>/ports/1/counters`; the ENA allowance
  counters come from the `ethtool` collector, which we turn on. The EFA device plugin
  publishes no metrics.
- **kubelet** / **kube-state-metrics**: the chart's own scrapes. `kube_pod_labels` and
  `kube_node_labels` carry only allow-listed labels (`llm-platform/job-kind` on pods,
  `llm-platform/pool` on nodes). No `kubelet_volume_stats_*` exist for FSx claims: the FSx
  CSI driver does not implement NodeGetVolumeStats.
- **cloudwatch**: the Prometheus CloudWatch exporter (stacks with `storage.lustre`): the file
  system's AWS/FSx metrics, named `aws_fsx_<metric>_<statistic>` with the dimensions as
  labels (`file_system_id`, `publisher`); `cloudwatch_exporter_scrape_error` is 1 after a
  failed CloudWatch call.
- **vllm**: vLLM's `/metrics` (port `metrics`), including the API server's
  prometheus-fastapi-instrumentator `http_requests_total{status="2xx|4xx|5xx"}`.
- **training**: the `llmp_*` exporter of training jobs (port `metrics`; rank 0 of
  `workloads.training.train` and of `workloads.training.parallel`, both through
  `workloads.training.telemetry`): per rank `llmp_train_step_seconds{job,rank,node}` and
  `llmp_train_phase_seconds{job,rank,node,phase}` (the five phases of
  `workloads.diagnosis.trace.PHASES`: 5 series a rank), per job the rest: loss, tokens/s,
  TFLOPS per GPU, MFU (pretraining only: full windows), the gradient norm, the step number
  and the checkpoint's times. Tenants
  run these pods, so nothing of the exposition overrides the target: `namespace` and `pod`
  are Kubernetes', `job` is the pod's `jobset.sigs.k8s.io/jobset-name` label (the JobSet
  controller's, a TrainJob's name; the PodMonitor's `jobLabel`), and the trainer's own `job`
  label is dropped. A job is (namespace, job): match on both.
- **straggler-watch**: the straggler watcher (workloads/diagnosis/watch.py, port `metrics`),
  its target's `namespace="monitoring"` and `job="llmp-straggler-watch"` on every series (no
  honorLabels: select on them, no tenant series can carry them); the job a finding judges is
  in `training_namespace` and `training_job`, beside `node`, `kind`, `action`.
- **recording**: series our own recording rules produce.
"""

from __future__ import annotations

from monitoring.rules import ERROR_RATIO_WINDOWS, error_ratio

INVENTORY: dict[str, frozenset[str]] = {
    "dcgm": frozenset(
        {
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_MEMORY_TEMP",
            "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
            "DCGM_FI_DEV_SM_CLOCK",
            "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_EXP_XID_ERRORS_COUNT",
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
            "DCGM_FI_PROF_PCIE_TX_BYTES",
            "DCGM_FI_PROF_PCIE_RX_BYTES",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "DCGM_FI_PROF_SM_ACTIVE",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "DCGM_FI_PROF_DRAM_ACTIVE",
        }
    ),
    "node": frozenset(
        {
            "node_infiniband_port_data_received_bytes_total",
            "node_infiniband_port_data_transmitted_bytes_total",
            "node_infiniband_port_errors_received_total",
            "node_ethtool_bw_in_allowance_exceeded",
            "node_ethtool_bw_out_allowance_exceeded",
            "node_ethtool_pps_allowance_exceeded",
            "node_cpu_seconds_total",
            "node_memory_MemAvailable_bytes",
            "node_memory_MemTotal_bytes",
            "node_filesystem_avail_bytes",
            "node_filesystem_size_bytes",
            "node_network_receive_bytes_total",
            "node_network_transmit_bytes_total",
        }
    ),
    "kubelet": frozenset(
        {
            "kubelet_volume_stats_used_bytes",
            "kubelet_volume_stats_capacity_bytes",
            "container_cpu_usage_seconds_total",
            "container_memory_working_set_bytes",
        }
    ),
    "cloudwatch": frozenset(
        {
            "aws_fsx_free_data_storage_capacity_minimum",
            "aws_fsx_age_of_oldest_queued_message_maximum",
            "cloudwatch_exporter_scrape_error",
        }
    ),
    "kube-state-metrics": frozenset(
        {
            "kube_pod_labels",
            "kube_pod_status_phase",
            "kube_pod_container_status_restarts_total",
            "kube_node_labels",
            "kube_node_spec_taint",
        }
    ),
    "vllm": frozenset(
        {
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
            "vllm:e2e_request_latency_seconds_bucket",
            "vllm:time_to_first_token_seconds_bucket",
            "vllm:time_to_first_token_seconds_count",
            # The inter-token histogram (the serving SLOs read it); v0.34.0 no longer exports
            # its old name, vllm:time_per_output_token_seconds.
            "vllm:inter_token_latency_seconds_bucket",
            "vllm:inter_token_latency_seconds_count",
            "vllm:request_success_total",
            "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total",
            "http_requests_total",
        }
    ),
    "training": frozenset(
        {
            "llmp_train_step_seconds",
            "llmp_train_tokens_per_second",
            "llmp_train_loss",
            "llmp_train_tflops_per_gpu",
            "llmp_train_mfu",
            "llmp_train_grad_norm",
            "llmp_train_step",
            "llmp_train_phase_seconds",
            "llmp_checkpoint_last_success_timestamp_seconds",
            "llmp_checkpoint_stall_seconds",
            "llmp_checkpoint_write_seconds",
        }
    ),
    "straggler-watch": frozenset(
        {
            "llmp_straggler_node_ratio",
            "llmp_straggler_node_flagged",
            "llmp_straggler_node_share",
            "llmp_straggler_node_flagged_runs",
            "llmp_straggler_job_slowdown_ratio",
            "llmp_straggler_jobs",
            "llmp_straggler_last_run_timestamp_seconds",
            "llmp_straggler_quarantine_enabled",
            "llmp_straggler_errors_total",
            "llmp_straggler_quarantine_actions_total",
        }
    ),
    "recording": frozenset(error_ratio(w) for w in ERROR_RATIO_WINDOWS),
}

ALL_METRICS: frozenset[str] = frozenset().union(*INVENTORY.values())
