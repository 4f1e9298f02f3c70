"""The Prometheus HTTP API as the straggler analysis uses it: one GET, one-line errors.

Queries are built with spec.promql (`selector`, `matchers`: label values quoted as PromQL
string literals), and scoped to the namespace and job they judge; what comes back is checked
by the caller (spec.promql.sample_value, checked): Prometheus' answer is input, not truth."""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from spec.readers import (
    MAX_ANSWER_BYTES,
    ReadError,
    host_problem,
    parse_json,
    redact_url,
    visible,
)
from workloads.diagnosis.trace import BadInput


class SourceUnavailable(RuntimeError):
    """Prometheus could not be reached or answered an error (one line)."""


def query(
    url: str,
    api: str,
    params: dict[str, str],
    timeout: float = 30.0,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> dict[str, Any]:
    """The `data` of a successful `/api/v1/<api>` answer (query, query_range).

    An answer is input: over `max_bytes`, or not all there within `timeout` seconds (a
    trickle resets a socket's timeout at every byte), it is refused (SourceUnavailable);
    its JSON is read by spec.readers (depth, numbers, duplicate keys)."""
    shown = visible(redact_url(url), 80)
    full = url.rstrip("/") + f"/api/v1/{api}?" + urllib.parse.urlencode(params)
    deadline = time.monotonic() + timeout
    try:
        request = urllib.request.Request(full)
        problem = host_problem(urllib.parse.urlsplit(url).hostname or "")
    except ValueError as e:  # a malformed URL: an unclosed IPv6 bracket, no scheme
        problem = visible(e)
    if problem is not None:
        raise BadInput(f"Prometheus URL {shown}: {problem}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            raw = _read(resp, shown, max_bytes, deadline)
    except urllib.error.HTTPError as e:
        try:
            detail = parse_json(_read(e, shown, 64 * 1024, deadline), shown).get("error", "")
        except (ReadError, SourceUnavailable, AttributeError, OSError):
            detail = ""
        detail = visible(detail or e.reason, 200)
        if e.code == 400:
            raise BadInput(f"Prometheus refused the query: {detail}") from None
        raise SourceUnavailable(f"Prometheus {shown}: HTTP {e.code} {detail}") from None
    except (urllib.error.URLError, OSError, ValueError, UnicodeError) as e:
        reason = visible(getattr(e, "reason", None) or e, 200)
        raise SourceUnavailable(f"Prometheus {shown}: {reason}") from None
    try:
        body = parse_json(raw, f"Prometheus {shown}")
    except ReadError as e:
        raise SourceUnavailable(f"{e.source}: the answer is {e.problem}") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error", "query failed") if isinstance(body, dict) else "query failed"
        raise SourceUnavailable(f"Prometheus {shown}: {visible(' '.join(str(error).split()))}")
    data = body.get("data") or {}
    return data if isinstance(data, dict) else {}


def _read(resp: Any, shown: str, max_bytes: int, deadline: float) -> bytes:
    """The body, at most `max_bytes`, all of it before `deadline`; SourceUnavailable if not."""
    parts: list[bytes] = []
    got = 0
    while True:
        if time.monotonic() > deadline:
            raise SourceUnavailable(f"Prometheus {shown}: the answer took longer than the timeout")
        part = resp.read(min(1 << 20, max_bytes + 1 - got))
        if not part:
            return b"".join(parts)
        parts.append(part)
        got += len(part)
        if got > max_bytes:
            raise SourceUnavailable(
                f"Prometheus {shown}: the answer is larger than {max_bytes // (1 << 20)} MiB; "
                "ask for a shorter --range or a coarser --resolution"
            )
