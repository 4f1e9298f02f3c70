"""The two consoles every command prints to: results on stdout, errors and progress on stderr."""

from __future__ import annotations

import os
import sys

from rich.console import Console

from spec.errors import one_line


class _PipeConsole(Console):
    """stdout that a reader may close early (`llmp cost pretrain | head`): the rest of
    the output is dropped and the command ends with its own exit code. rich's default
    exits 1, which here says that a check failed."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        # Python flushes stdout at exit: into /dev/null, not into the closed pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


out = _PipeConsole()
err = Console(stderr=True)


def line(text: str, *, to: Console | None = None) -> None:
    """One line as it is (no markup, no highlighting, no wrapping), on stdout by default.
    Control characters (an ANSI escape, a bidi override from a file or a server) are shown
    escaped (`\\x1b`), never sent to the terminal; line breaks and tabs stay."""
    if not text.isprintable():
        text = "\n".join(
            "\t".join(one_line(cell) for cell in part.split("\t")) for part in text.split("\n")
        )
    (to or out).print(text, markup=False, highlight=False, soft_wrap=True)


def write(text: str) -> None:
    """Text for a machine (JSON): straight to stdout."""
    sys.stdout.write(text)
