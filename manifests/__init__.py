"""Kubernetes objects as typed builders: what the Pulumi program and the CLI render.

Kueue's queues and flavors (`kueue`, `queues`), the shared volumes (`volumes`), the
priority classes (`scheduling`), the pod hardening every workload shares
(`hardening`), the job manifests `llmp job` submits (`jobs`: PyTorchJob, RayJob, the
fabric and DCGM checks, the job file), and the serving objects (`serving`: vLLM,
the gateway, the router, KEDA, the canary). Builders only: the programs those
manifests run live in `workloads` and are never imported here (a contract).
"""
