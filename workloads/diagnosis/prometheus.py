"""The Prometheus HTTP API as the straggler analysis uses it: one GET, one-line errors.

Queries are built with spec.promql (`selector`, `matchers`: label values quoted as PromQL
string literals), and scoped to the namespace and job they judge; what comes back is checked
by the caller (spec.promql.sample_value, checked): Prometheus' answer is input, not truth."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from workloads.diagnosis.trace import BadInput


class SourceUnavailable(RuntimeError):
    """Prometheus could not be reached or answered an error (one line)."""


def query(url: str, api: str, params: dict[str, str], timeout: float = 30.0) -> dict[str, Any]:
    """The `data` of a successful `/api/v1/<api>` answer (query, query_range)."""
    full = url.rstrip("/") + f"/api/v1/{api}?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(full, timeout=timeout) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as e:
        try:
            detail = json.loads(e.read()).get("error", "")
        except (ValueError, AttributeError):
            detail = ""
        if e.code == 400:
            raise BadInput(f"Prometheus refused the query: {detail or e.reason}") from None
        raise SourceUnavailable(f"Prometheus {url}: HTTP {e.code} {detail or e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise SourceUnavailable(f"Prometheus {url}: {getattr(e, 'reason', e)}") from None
    except ValueError:
        raise SourceUnavailable(f"Prometheus {url}: the answer is not JSON") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error", "query failed") if isinstance(body, dict) else "query failed"
        raise SourceUnavailable(f"Prometheus {url}: {' '.join(str(error).split())}")
    data = body.get("data") or {}
    return data if isinstance(data, dict) else {}
