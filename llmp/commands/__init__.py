"""One module per `llmp` command: its options, and what it prints.

The work itself lives in the modules beside this package (`llmp.plan.synth`,
`llmp.verify`, `llmp.dr`, ...), imported inside each command so that
`llmp --help` starts without loading Pulumi, boto3 or the Kubernetes client.
"""

from __future__ import annotations

import typer

from llmp.commands import (
    accept,
    canary,
    cost,
    diff,
    dr,
    job,
    loadtest,
    pins,
    plan,
    policy,
    promote,
    reference,
    stragglers,
    synth,
    verify,
)

MODULES = (
    synth,
    policy,
    reference,
    cost,
    plan,
    verify,
    stragglers,
    loadtest,
    diff,
    accept,
    dr,
    job,
    promote,
    canary,
    pins,
)
"""In the order `llmp --help` lists them."""


def register(app: typer.Typer) -> None:
    for module in MODULES:
        module.register(app)
