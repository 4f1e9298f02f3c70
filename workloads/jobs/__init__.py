"""Batch workloads the platform runs on its node pools: training, data preparation, fabric checks.

Each module turns a small, validated spec into the plain JSON a Kubernetes API
server (or the Kubeflow training operator) accepts. The specs refuse what
would only fail later on the cluster (an image without a pinned version, more
GPUs or EFA interfaces than the instance has) with one `ValueError` line, so
a bad submission never reaches a queue.
"""
