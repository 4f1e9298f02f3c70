"""Options more than one command takes, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Stack = Annotated[str, typer.Argument(help="Stack name: pretrain, finetune, inference...")]
Kubeconfig = Annotated[
    str | None,
    typer.Option(
        "--kubeconfig",
        metavar="FILE",
        help="Default: $KUBECONFIG, else ~/.kube/config. The stack's: `pulumi stack output "
        "kubeconfig --show-secrets > kubeconfig` (or `aws eks update-kubeconfig`).",
    ),
]
Context = Annotated[str | None, typer.Option("--context", help="The kubeconfig context to use.")]
EndpointUrl = Annotated[
    str | None,
    typer.Option("--endpoint-url", help="Another endpoint (moto, LocalStack) than AWS's."),
]
ConfigFile = Annotated[
    Path | None,
    typer.Option(
        "--config",
        metavar="FILE",
        help="Read this stack file instead of stacks/Pulumi.STACK.yaml (as `llmp synth`).",
    ),
]
