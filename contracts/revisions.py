"""The layout of a published model revision in the models bucket, shared by the promotion
job that writes it and `llmp promote`, which reads it back (torch-free, so the operator CLI
imports it without the trainer's packages).

`s3://<models bucket>/<prefix>/<name>/<UTC yyyymmddThhmmssZ>-step-<N>/` holds the model's
files, then `manifest.json`, then `COMPLETE`, whose body is the manifest's sha256: a
reader trusts a revision only when `COMPLETE` exists and seals the manifest it finds.
`<name>/<revision>` is the path the serving config names (`serving.models[].revision`),
relative to the prefix the servers mount.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Final

MANIFEST: Final = "manifest.json"
COMPLETE: Final = "COMPLETE"


def name(step: int, now: dt.datetime | None = None) -> str:
    """A revision's name: the UTC time of its promotion and its training step."""
    now = now or dt.datetime.now(dt.UTC)
    return f"{now.astimezone(dt.UTC):%Y%m%dT%H%M%SZ}-step-{step}"


def key_prefix(prefix: str, path: str) -> str:
    """The key prefix of the revision at `path` (`<name>/<revision>`) under the mounted
    `prefix`: `<prefix>/<name>/<revision>/`."""
    base = "/".join(p.strip("/") for p in (prefix, path) if p.strip("/"))
    return f"{base}/"


def seal(manifest_body: bytes) -> str:
    """What `COMPLETE` holds for a manifest."""
    return hashlib.sha256(manifest_body).hexdigest()


def sealed(manifest_body: bytes, complete_body: bytes) -> bool:
    return complete_body.decode(errors="replace").strip() == seal(manifest_body)
