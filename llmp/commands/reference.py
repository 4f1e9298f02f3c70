"""`llmp config-reference`: the Markdown reference of every stack-config key."""

from __future__ import annotations

import typer

from llmp import console


def config_reference() -> None:
    """Print the Markdown reference of every stack-config key (in docs/reference/config.md)."""
    from spec.reference import config_reference as reference

    console.write(reference())


def register(app: typer.Typer) -> None:
    app.command("config-reference")(config_reference)
