"""`llmp`: the operator's command line beside `pulumi`.

One module per command in `llmp/commands/`; this module makes the app and is
the one place errors become output: an `LlmpError` (and the spec layer's
`ConfigError`, and bad policy config) is printed as one line on stderr and
ends the command with its exit code. Exit codes: 0 fine, 1 the program or a
check failed, 2 bad input (config, arguments, files).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

try:
    import typer
    from typer.core import TyperGroup
except ImportError:  # the operator CLI's dependencies are an extra of the project
    sys.exit("llmp needs the project's ops extra: pip install -e '.[ops]' (make .venv/.ops)")

from llmp import console
from llmp.commands import register
from llmp.errors import EXIT_BAD_INPUT, LlmpError


def exit_code_of(exc: BaseException) -> int | None:
    """The exit code of an error meant for the user; None for a bug (a traceback)."""
    from policies.config import PolicyConfigError
    from spec.errors import ConfigError

    if isinstance(exc, LlmpError):
        return exc.exit_code
    if isinstance(exc, ConfigError | PolicyConfigError):
        return EXIT_BAD_INPUT
    return None


class _Group(TyperGroup):
    """Every command's errors, handled once: one line on stderr, then its exit code."""

    def invoke(self, ctx: Any) -> Any:  # typer's own (vendored) click Context
        try:
            return super().invoke(ctx)
        except Exception as exc:
            code = exit_code_of(exc)
            if code is None:
                raise
            console.line(str(exc), to=console.err)
            raise typer.Exit(code) from None


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Markdown reflows a docstring's paragraphs to the terminal's width ("rich" keeps the
    # source's line breaks after the first paragraph, which wrap badly at 80 columns).
    rich_markup_mode="markdown",
    help="Operate the llm-platform stacks: synthesize offline, inspect, check.",
)


def _print_version(value: bool) -> None:
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("llm-platform")
    except PackageNotFoundError:
        installed = "unknown (the llm-platform package is not installed: pip install -e .)"
    console.line(f"llmp {installed}")
    raise typer.Exit()


@app.callback()
def _main(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print llmp's version (the installed llm-platform package's) and exit.",
        ),
    ] = False,
) -> None:
    """Operate the llm-platform stacks: synthesize offline, inspect, check."""


register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
