"""Which device and dtype a model stage runs on: fp16 on CUDA, fp32 on the CPU.

The driver decides whether model actors ask Ray for GPUs (`num_gpus=gpus_per_actor`): with
`device: auto` that is when the cluster has GPUs. Inside the actor the dtype follows the
device the actor actually got (`torch.cuda.is_available()` there), never the request, and the
results carry it, so the manifest records what was really computed.
"""

from __future__ import annotations

from typing import Any, Literal

Device = Literal["cpu", "cuda"]


def wants_gpus(device: str, cluster_gpus: float) -> bool:
    """Whether model actors request GPUs from Ray."""
    return device == "cuda" or (device == "auto" and cluster_gpus > 0)


def actor_device(requested: str) -> Device:
    """The device this process will use: CUDA if asked for (or auto) and present."""
    import torch

    if requested in ("cuda", "auto") and torch.cuda.is_available():
        return "cuda"
    if requested == "cuda":
        raise RuntimeError("compute.device is 'cuda' but this actor sees no CUDA device")
    return "cpu"


def torch_dtype(device: Device) -> Any:
    """fp16 on CUDA (half the memory, tensor cores), fp32 on the CPU (fp16 is slow there)."""
    import torch

    return torch.float16 if device == "cuda" else torch.float32
