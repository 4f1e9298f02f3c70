"""The job manifests `llmp job` submits: the job file, PyTorchJob, RayJob, and the
NCCL fabric and DCGM diagnostic jobs the platform runs on its own nodes."""
