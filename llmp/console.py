"""The two consoles every command prints to: results on stdout, errors and progress on stderr."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from rich.console import Console

# Re-exported: commands lay text out with them through the console module.
from llmp.wrapping import INDENT as INDENT
from llmp.wrapping import broken as broken
from llmp.wrapping import wrap
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


def _width(stream: TextIO) -> int | None:
    """The width output is laid out at: COLUMNS where it says one, else the terminal's (rich
    reads both: None), else 80. Not a terminal's width when only stdin is one: a pipe or a
    file gets 80, not whatever window the command was typed in."""
    if os.environ.get("COLUMNS", "").isdigit():
        return None
    try:
        return None if stream.isatty() else 80
    except (AttributeError, ValueError):  # a closed or odd stream
        return 80


out = _PipeConsole(width=_width(sys.stdout))
err = Console(stderr=True, width=_width(sys.stderr))

def notice(text: str, *, to: Console | None = None) -> None:
    """A warning or any notice of more than one clause (`what: the value; why`), wrapped at
    the console's width with a hanging indent, on stderr by default. Each line of `text`
    is wrapped on its own. Not for error lines: those stay one line (`llmp.cli`)."""
    console = to or err
    for part in text.split("\n"):
        line("\n".join(wrap(part, console.width)), to=console)


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
