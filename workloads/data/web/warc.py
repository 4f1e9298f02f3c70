"""WARC and WET files in splits no larger than a block, and their records as pages.

Splits (`warc_splits`) come from the listing alone: a file is cut into byte ranges of
`block_size`, and a range owns the records that *start* in it (Hadoop's rule for lines,
here for records), so every record belongs to exactly one range and no task reads more
than its block and the tail of its last record.

- A `.warc.gz` (`.wet.gz`) file is a series of gzip members, one record each, as the
  WARC standard recommends and Common Crawl writes. A range's first record is found by
  scanning for a gzip header (`1f 8b 08`) at or after its start and decompressing the
  member there in full: it must end cleanly (zlib checks its CRC-32 and length) and hold
  a record that starts `WARC/`. From that member on, the members are a chain. A file
  compressed as one stream has one member: the first range reads it, the others find
  nothing.
- An uncompressed `.warc` (`.wet`): a record starts with a `WARC/1.x` line; a candidate is
  taken only if its `Content-Length` lands on the record's `\\r\\n\\r\\n` and then on the
  file's end or another `WARC/` line.

FastWARC (Resiliparse's WARC reader) parses the records from the first one on; its
`stream_pos` is the record's offset in the file (compressed, for .gz), which is the
document's id: `<relative path>@<offset>`.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

WARC_SUFFIXES = (".warc", ".warc.gz", ".wet", ".wet.gz")
GZIP_MAGIC = b"\x1f\x8b\x08"
_SCAN = 1 << 20
_CONTENT_LENGTH = re.compile(rb"\r\nContent-Length:\s*(\d+)\r\n", re.IGNORECASE)
HTML_TYPES = ("text/html", "application/xhtml+xml")


@dataclass(frozen=True)
class Page:
    """One response (or WET conversion) record, as the pipeline needs it."""

    offset: int
    url: str
    date: str
    kind: str
    """`response` or `conversion` (a WET file's extracted text)."""
    status: int
    content_type: str
    headers: dict[str, str]
    """The HTTP headers, names lower-cased (a WET record has none)."""
    body: bytes
    charset: str | None


def is_warc(name: str) -> bool:
    return name.endswith(WARC_SUFFIXES)


def byte_ranges(size: int, block_size: int) -> list[tuple[int, int]]:
    return [(s, min(s + block_size, size)) for s in range(0, max(size, 1), block_size)]


def _gzip_member_at(f: Any, pos: int) -> bool:
    """Whether a whole gzip member holding a WARC record starts at `pos`."""
    f.seek(pos)
    d = zlib.decompressobj(31)
    head = b""
    try:
        while not d.eof:
            chunk = f.read(1 << 16)
            if not chunk:
                return False
            out = d.decompress(chunk)
            if len(head) < 5:
                head += out[:5]
                if len(head) >= 5 and not head.startswith(b"WARC/"):
                    return False
    except zlib.error:
        return False
    return head.startswith(b"WARC/")


def _plain_record_at(f: Any, pos: int, size: int) -> bool:
    """Whether an uncompressed WARC record starts at `pos` (see the module docstring)."""
    f.seek(pos)
    head = f.read(1 << 16)
    if not head.startswith(b"WARC/1."):
        return False
    end = head.find(b"\r\n\r\n")
    length = _CONTENT_LENGTH.search(head[: end + 2]) if end > 0 else None
    if length is None:
        return False
    after = pos + end + 4 + int(length.group(1))
    f.seek(after)
    tail = f.read(4 + 7)
    return tail[:4] == b"\r\n\r\n" and (after + 4 == size or tail[4:].startswith(b"WARC/1."))


def first_record(f: Any, start: int, end: int, size: int, gz: bool) -> int | None:
    """The offset of the first record that starts in [start, end), or None."""
    if start == 0:
        return 0 if size else None
    # A plain record starts after a newline: the window begins one byte early, so that a
    # record starting exactly at `start` is seen.
    mark, lead = (GZIP_MAGIC, 0) if gz else (b"\nWARC/1.", 1)
    pos = start
    while pos < end:
        f.seek(pos - lead)
        window = f.read(min(_SCAN, end - pos) + lead + len(mark))
        at = window.find(mark)
        while at >= 0:
            candidate = pos - lead + at + lead
            if candidate >= end:
                return None
            if candidate >= start and (
                _gzip_member_at(f, candidate) if gz else _plain_record_at(f, candidate, size)
            ):
                return candidate
            at = window.find(mark, at + 1)
        pos += _SCAN
    return None


def _headers(record: Any) -> dict[str, str]:
    if not record.is_http:
        return {}
    return {str(k).lower(): str(v) for k, v in record.http_headers.items()}


def read_range(f: Any, start: int, end: int, size: int, gz: bool) -> Iterator[Page]:
    """The response and conversion records that start in [start, end) of the open file."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    first = first_record(f, start, end, size, gz)
    if first is None:
        return
    f.seek(first)
    shift: int | None = None
    for record in ArchiveIterator(f, parse_http=True):
        # FastWARC counts from the stream's start or from where it was handed the stream,
        # depending on the stream: the first record it yields is the one at `first`.
        if shift is None:
            shift = first - int(record.stream_pos)
        offset = shift + int(record.stream_pos)
        if offset >= end:
            return
        if record.record_type not in (WarcRecordType.response, WarcRecordType.conversion):
            continue
        conversion = record.record_type == WarcRecordType.conversion
        headers = _headers(record)
        status = 200 if conversion or not record.is_http else record.http_headers.status_code or 0
        content_type = (
            "text/plain"
            if conversion
            else str(record.headers.get("WARC-Identified-Payload-Type") or "")
            or str(record.http_content_type or "")
        ).lower()
        yield Page(
            offset=offset,
            url=str(record.headers.get("WARC-Target-URI") or ""),
            date=str(record.headers.get("WARC-Date") or ""),
            kind="conversion" if conversion else "response",
            status=status,
            content_type=content_type,
            headers=headers,
            body=record.reader.read(),
            charset=None if conversion or not record.is_http else record.http_charset,
        )
