"""Options more than one command takes, declared once."""

from __future__ import annotations

from typing import Annotated

import typer

Stack = Annotated[str, typer.Argument(help="Stack name: pretrain, finetune, inference...")]
Context = Annotated[str | None, typer.Option("--context", help="The kubeconfig context to use.")]
EndpointUrl = Annotated[
    str | None,
    typer.Option("--endpoint-url", help="Another endpoint (moto, LocalStack) than AWS's."),
]
