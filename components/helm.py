"""One way to install a chart: a Helm release of the version the catalog pins."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spec.catalog import Chart


def pinned_release(
    resource_name: str,
    chart_name: str,
    chart: Chart,
    *,
    namespace: str,
    values: pulumi.Input[dict[str, Any]],
    create_namespace: bool | None = None,
    opts: pulumi.ResourceOptions,
) -> k8s.helm.v3.Release:
    """A release named after its chart, at the catalog's version, from a classic or an
    OCI repository (`oci://...`, where the chart is addressed by URL, not by repository)."""
    oci = chart.repository.startswith("oci://")
    return k8s.helm.v3.Release(
        resource_name,
        k8s.helm.v3.ReleaseArgs(
            name=chart_name,
            chart=f"{chart.repository}/{chart_name}" if oci else chart_name,
            version=chart.version,
            repository_opts=None if oci else k8s.helm.v3.RepositoryOptsArgs(repo=chart.repository),
            namespace=namespace,
            create_namespace=create_namespace,
            values=values,
        ),
        opts=opts,
    )
