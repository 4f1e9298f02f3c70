"""The layout of a published model revision in the models bucket, shared by the promotion
job that writes it and `llmp promote`, which reads it back (torch-free, so the operator CLI
imports it without the trainer's packages).

`s3://<models bucket>/<prefix>/<name>/<UTC yyyymmddThhmmssZ>-step-<N>/` holds the model's
files, then `manifest.json`, then `COMPLETE`, the seal: the manifest's sha256 signed
(ECDSA P-256, SHA-256) by the stack's revision-signing KMS key, `alias/<models
bucket>-revisions` (`signing_key_alias`), which only the promotion job's role may use to
sign. A reader trusts a revision only when `COMPLETE` exists and KMS verifies its
signature of the manifest it finds with that key (`check_seal`). A bare sha256, what
`COMPLETE` held before, is no seal: whoever can write the prefix can compute one.
`<name>/<revision>` is the path the serving config names (`serving.models[].revision`),
relative to the prefix the servers mount.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
from typing import Any, Final

MANIFEST: Final = "manifest.json"
COMPLETE: Final = "COMPLETE"
SEAL_FORMAT: Final = "llmp-seal/2"
SIGNING_ALGORITHM: Final = "ECDSA_SHA_256"


def name(step: int, now: dt.datetime | None = None) -> str:
    """A revision's name: the UTC time of its promotion and its training step."""
    now = now or dt.datetime.now(dt.UTC)
    return f"{now.astimezone(dt.UTC):%Y%m%dT%H%M%SZ}-step-{step}"


def key_prefix(prefix: str, path: str) -> str:
    """The key prefix of the revision at `path` (`<name>/<revision>`) under the mounted
    `prefix`: `<prefix>/<name>/<revision>/`."""
    base = "/".join(p.strip("/") for p in (prefix, path) if p.strip("/"))
    return f"{base}/"


def signing_key_alias(bucket: str) -> str:
    """The alias of the KMS key that signs the revisions of the models bucket `bucket` (the
    stack declares it beside the bucket; promotion signs, `llmp promote` verifies)."""
    return f"alias/{bucket.replace('.', '-')}-revisions"


def digest(manifest_body: bytes) -> bytes:
    """What is signed: the manifest's SHA-256."""
    return hashlib.sha256(manifest_body).digest()


def seal(kms: Any, key_id: str, manifest_body: bytes) -> bytes:
    """`COMPLETE`'s body for a manifest: its digest signed by KMS key `key_id` (`kms`: a
    boto3 KMS client; the caller's role needs kms:Sign on the key)."""
    signed = kms.sign(
        KeyId=key_id,
        Message=digest(manifest_body),
        MessageType="DIGEST",
        SigningAlgorithm=SIGNING_ALGORITHM,
    )
    doc = {
        "format": SEAL_FORMAT,
        "algorithm": SIGNING_ALGORITHM,
        "key": signed["KeyId"],
        "sha256": digest(manifest_body).hex(),
        "signature": base64.b64encode(signed["Signature"]).decode(),
    }
    return (json.dumps(doc, sort_keys=True) + "\n").encode()


def check_seal(kms: Any, key_id: str, manifest_body: bytes, complete_body: bytes) -> str | None:
    """Why `complete_body` does not seal `manifest_body` with KMS key `key_id` (the stack's,
    never the key the seal names), or None when KMS verifies it. Errors of KMS other than
    a bad signature (no access, no such key) are raised to the caller."""
    try:
        doc = json.loads(complete_body)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("format") != SEAL_FORMAT:
        return "COMPLETE holds no signed seal (an unkeyed sha256 anyone can write)"
    try:
        signature = base64.b64decode(str(doc.get("signature")), validate=True)
    except (binascii.Error, ValueError):
        return "COMPLETE's signature is not base64"
    if doc.get("sha256") != digest(manifest_body).hex():
        return "COMPLETE seals another manifest.json"
    try:
        answer = kms.verify(
            KeyId=key_id,
            Message=digest(manifest_body),
            MessageType="DIGEST",
            Signature=signature,
            SigningAlgorithm=SIGNING_ALGORITHM,
        )
    except Exception as exc:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        if code in ("KMSInvalidSignatureException", "InvalidSignatureException"):
            return f"COMPLETE's signature is not {key_id}'s"
        raise
    return None if answer.get("SignatureValid") else f"COMPLETE's signature is not {key_id}'s"
