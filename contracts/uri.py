"""S3 URIs as the job configs name them: `s3://bucket/prefix`.
"""

from __future__ import annotations

import os

S3_SCHEME = "s3://"


class S3Error(RuntimeError):
    """S3 could not give what was asked (one line: what, where)."""


def is_s3(path: str | os.PathLike[str]) -> bool:
    return str(path).startswith(S3_SCHEME)


def split_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/some/prefix` -> (`bucket`, `some/prefix/`): a directory prefix."""
    if not is_s3(uri):
        raise S3Error(f"{uri}: not an s3://bucket/prefix URI")
    bucket, _, prefix = uri[len(S3_SCHEME) :].partition("/")
    if not bucket:
        raise S3Error(f"{uri}: no bucket (s3://bucket/prefix)")
    prefix = prefix.lstrip("/")
    return bucket, prefix if not prefix or prefix.endswith("/") else prefix + "/"
