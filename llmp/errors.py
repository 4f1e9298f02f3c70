"""The one error base of the operator CLI, carrying the exit code `llmp` ends with.

Every command fails the same way: one line on stderr, then exit 1 (the program
or a check failed: something CI should stop on) or exit 2 (bad input: an
unknown stack, an unreadable file, missing credentials). Modules raise an
`LlmpError` subclass; `llmp.cli.main` is the one place that prints it and
exits. Config errors of the spec layer (`spec.errors.ConfigError`) and policy
config errors are bad input too, and are handled there as well.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

EXIT_OK = 0
EXIT_FAILED = 1
"""The program or a check failed (a synthesis error, a mandatory violation, a failed row)."""
EXIT_BAD_INPUT = 2
"""What was given cannot be used (an unknown stack, a file that is not a plan, no credentials)."""


class LlmpError(Exception):
    """A failure to report: `str()` is its one line, `exit_code` what `llmp` exits with."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class BadInput(LlmpError):
    """Input that cannot be used: exit 2."""

    exit_code = EXIT_BAD_INPUT


class Failed(LlmpError):
    """The program, the cloud or a check failed: exit 1."""

    exit_code = EXIT_FAILED


NO_CREDENTIALS = (
    "no AWS credentials: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
)


@contextlib.contextmanager
def prefixed(prefix: str) -> Iterator[None]:
    """Report what fails inside as `PREFIX: message`, with its own exit code."""
    try:
        yield
    except LlmpError as exc:
        raise LlmpError(f"{prefix}: {exc}", exit_code=exc.exit_code) from None
