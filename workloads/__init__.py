"""What runs on the platform: scheduling classes, training and serving workloads.

Builders here return typed Kubernetes arguments; components turn them into
resources. The package is imported by the Pulumi program (installed, not
found on a path), so a job spec and the cluster it runs on share one source.
"""
