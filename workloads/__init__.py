"""What runs inside the platform's pods: the trainers, the data pipelines, evaluation,
promotion and quantization, the straggler watcher, the milestone copier.

Every module here is a `python -m workloads....` entry point a manifest names, or
what one imports. They read the configs in `contracts` and import torch, Ray,
DeepSpeed or transformers; the Pulumi program and the manifests never import them
(a contract in pyproject.toml), and the CLI only from a named list.
"""
