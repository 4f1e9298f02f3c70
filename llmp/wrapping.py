"""Wrapping text at a width, with no dependency beyond the standard library: the CLI's
printer (`llmp.console`) and the mock engine's log handler (`llmp.plan.synth`, which a
program run as the language host runs it loads without the CLI's extra) lay notices out
alike."""

from __future__ import annotations

import os
import re
import shutil
from typing import TextIO

INDENT = "  "
"""The hanging indent of a wrapped notice: its second and later lines."""

_CODE = re.compile(r"`[^`\n]+`")
_KEEP = "\x00"  # a space inside a command kept on one line: no space to break at


def broken(text: str, room: int, after: str = "/") -> list[str]:
    """`text` in pieces of at most `room` columns, broken only after one of the characters
    `after` (a path's `/`, a type's `:`, a name's `-`): never inside a word. A part with no
    such break wider than `room` stays whole."""
    parts = re.findall(rf"[^{re.escape(after)}]*[{re.escape(after)}]|[^{re.escape(after)}]+$", text)
    pieces = [""]
    for part in parts:
        if pieces[-1] and len(pieces[-1]) + len(part) > room:
            pieces.append("")
        pieces[-1] += part
    return pieces


def wrap(text: str, width: int) -> list[str]:
    """`text` as lines of at most `width` columns, the second and later indented by
    `INDENT`: broken between words, a word wider than a line after its `/` (a path), never
    inside a word (one with no `/` stays whole), and a `command` in backticks kept on one
    line where it fits on one."""
    room = max(width - len(INDENT), 1)
    text = _CODE.sub(
        lambda m: m.group(0).replace(" ", _KEEP) if len(m.group(0)) <= room else m.group(0),
        text,
    )
    lines: list[str] = []
    current = ""
    for word in text.split():
        word = word.replace(_KEEP, " ")
        # A word wider than a line fills the line it starts on, up to one of its `/`.
        for i, piece in enumerate([word] if len(word) <= room else broken(word, 1)):
            glue = "" if i else " "  # the rest of a word goes on without a space
            if not current:
                current = (INDENT if lines else "") + piece
            elif len(current) + len(glue) + len(piece) > width:
                lines.append(current)
                current = INDENT + piece
            else:
                current += glue + piece
    return [*lines, current]




def width_of(stream: TextIO) -> int:
    """The width to lay `stream` out at: COLUMNS where it says one, else the terminal's,
    else 80 (a pipe or a file)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if stream.isatty():
            return shutil.get_terminal_size().columns
    except (AttributeError, ValueError):
        pass
    return 80
