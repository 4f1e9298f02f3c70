"""`llmp pins`: every pin, the day it was last verified, its age; exit 1 when one is stale."""

from __future__ import annotations

import datetime
import json
import re
from typing import Annotated

import typer

from llmp import console
from llmp.errors import BadInput
from llmp.pins import Pin

_DIGEST = re.compile(r"@sha256:([0-9a-f]{12})[0-9a-f]{52}")
_URL_VERSION = re.compile(r"[/-](v?\d+\.\d+(?:\.\d+)?(?:[-.][0-9A-Za-z.]+)?)(?=/)")


def today() -> datetime.date:
    """The day ages are counted to (a function, so a test can fix it)."""
    return datetime.date.today()


def shown(version: str, room: int | None = None) -> str:
    """A pin as a person reads it: a URL by the version in its path (`.../v0.79.2/...` ->
    `v0.79.2`), an image by its last path part with its digest shortened to 12 hex digits
    (only its tag, where that does not fit in `room`)."""
    if version.startswith(("https://", "http://")):
        match = _URL_VERSION.search(version)
        return match.group(1) if match else version
    if "/" not in version:
        return version
    image = _DIGEST.sub(lambda m: f"@sha256:{m.group(1)}…", version.rsplit("/", 1)[1])
    if room is not None and len(image) > room and ":" in image:
        return image.split(":", 1)[1]
    return image


def _row(pin: Pin, day: datetime.date, max_age: int, width: int) -> list[str]:
    """One line per pin, `KEY VERSION CHECKED AGE`, the date and age aligned at the right;
    where key and version do not fit beside them, the version goes under the key."""
    age = pin.age_days(day)
    checked = pin.checked.isoformat() if pin.checked else "never"
    tail = f"{checked:>10} {'-' if age is None else age:>4}"
    tail += " !" if pin.stale(day, max_age) else "  "
    room = width - len(tail) - 1
    head = f"{pin.key} {shown(pin.version)}"
    if len(head) <= room:
        return [f"{head:<{room}} {tail}".rstrip()]
    version = f"  {shown(pin.version, room - 2)}"
    return [pin.key, f"{version:<{room}} {tail}".rstrip()]


def pins(
    max_age: Annotated[
        int,
        typer.Option(
            "--max-age",
            metavar="DAYS",
            help="A pin verified longer ago than this is stale (exit 1).",
        ),
    ] = 180,
    only_stale: Annotated[bool, typer.Option("--stale", help="List only the stale pins.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Every pin as JSON, with where it was verified.")
    ] = False,
) -> None:
    """List every pin (the catalog's charts, images, add-ons and manifests; the
    requirements files' Python packages) with the day it was verified and its age in
    days. Exit 1 when one was verified more than --max-age days ago (or never)."""
    from llmp.pins import all_pins, stale
    from llmp.stacks import REPO_ROOT
    from spec.catalog import catalog

    if max_age < 0:
        raise BadInput(f"--max-age {max_age}: a number of days, 0 or more (default 180)")
    day = today()
    every = all_pins(catalog(), REPO_ROOT)
    old = stale(every, day, max_age)
    listed = old if only_stale else every
    if as_json:
        out = {
            "today": day.isoformat(),
            "max_age_days": max_age,
            "pins": [p.to_dict(day) for p in listed],
            "stale": [p.key for p in old],
        }
        console.write(json.dumps(out, indent=2) + "\n")
    else:
        width = console.out.width
        for p in listed:
            console.line("\n".join(_row(p, day, max_age, width)), to=console.out)
        days = "day" if max_age == 1 else "days"
        summary = f"{len(every)} pins; {len(old)} verified more than {max_age} {days} ago"
        if old:
            summary += " (marked !): check each against what its upstream published and record"
            summary += " the day (docs/operations/pins.md)"
        console.notice(summary, to=console.out)
    if old:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("pins")(pins)
