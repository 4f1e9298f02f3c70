"""Which ranks and nodes slow a synchronous data-parallel job down, and by how much.

The analysis behind `llmp stragglers`, a library of the platform's own (it runs
wherever step times can be read: the operator's machine now, inside the cluster
next to Prometheus later).

Model. In synchronous data parallel training a step ends when the slowest rank
finishes: step_time(s) = max_r t(s, r). The what-if for a group G of ranks (one
rank, or all ranks of one node) replaces each t(s, r), r in G, by a reference
time and recomputes the step's max; the time lost to G is

    lost(G) = sum_s [ max_r t(s, r) - max(ref_G(s), max_{r not in G} t(s, r)) ]

ref_G(s) is the median of the step's times over the ranks *outside* G (the
step's median when G is everything). For one rank of many that is the step's
median; for a node holding a large part of the job (two nodes: half the ranks)
the median over all ranks would sit between the slow and the fast half, so the
what-if would only half-fix the node.

The job's total slowdown is sum_s [max_r t(s, r) - median_r t(s, r)]: the time
the job would save if every rank ran at the step's median. Shares are lost(G)
divided by it. Groups are scored one at a time, so shares need not sum to 1
(two equally slow ranks each explain little alone); a node holding half the
ranks moves the median itself and can explain more than 100 %.

A rank is flagged as persistently slow when t(s, r) > median(s) * (1 + threshold)
in at least `persist` of the steps it ran; a node likewise, by the median of its
ranks against the median of the other ranks.

Inputs: JSON lines `{"step", "rank", "node", "seconds"}` (what training writes
with `--step-times`), CSV with a header naming the same columns (`node`
optional), or Prometheus' `query_range` of `llmp_train_step_seconds{job=...}`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import statistics
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

METRIC = "llmp_train_step_seconds"
MAX_POINTS = 11_000  # Prometheus refuses query_range with more points per series


class BadInput(ValueError):
    """The input cannot be read as step times (one line)."""


class SourceUnavailable(RuntimeError):
    """Prometheus could not be reached or answered an error (one line)."""


@dataclass
class Trace:
    """Step times: steps[step][rank] = seconds; node[rank] = node name."""

    steps: dict[int, dict[int, float]] = field(default_factory=dict)
    node: dict[int, str] = field(default_factory=dict)
    source: str = ""

    def add(self, step: int, rank: int, seconds: float, node: str | None) -> None:
        if not math.isfinite(seconds) or seconds < 0:
            raise BadInput(f"step {step} rank {rank}: seconds must be a finite number >= 0")
        self.steps.setdefault(step, {})[rank] = seconds
        if node:
            self.node[rank] = node
        else:
            self.node.setdefault(rank, f"rank-{rank}")


# --------------------------------------------------------------------------- reading


def _field(row: dict[str, Any], key: str, where: str, kind: type) -> Any:
    if key not in row or row[key] in (None, ""):
        raise BadInput(f"{where}: missing {key!r}")
    try:
        value = kind(row[key])
    except (TypeError, ValueError):
        raise BadInput(f"{where}: {key!r} is not a {kind.__name__}: {row[key]!r}") from None
    if kind is int and isinstance(row[key], float) and not float(row[key]).is_integer():
        raise BadInput(f"{where}: {key!r} is not an int: {row[key]!r}")
    return value


def _add_row(trace: Trace, row: dict[str, Any], where: str) -> None:
    node = row.get("node")
    trace.add(
        _field(row, "step", where, int),
        _field(row, "rank", where, int),
        _field(row, "seconds", where, float),
        str(node) if node not in (None, "") else None,
    )


def read_file(path: Path) -> Trace:
    """CSV by the suffix `.csv` (or, with no JSON suffix, a first line not `{`); else JSON lines."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: cannot read: {e}") from None
    trace = Trace(source=str(path))
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    suffix = path.suffix.lower()
    if suffix == ".csv" or (
        suffix not in (".jsonl", ".json", ".ndjson") and first and not first.startswith("{")
    ):
        reader = csv.DictReader(io.StringIO(text))
        missing = {"step", "rank", "seconds"} - set(reader.fieldnames or [])
        if missing:
            raise BadInput(f"{path}: CSV header lacks {', '.join(sorted(missing))}")
        for row in reader:
            _add_row(trace, row, f"{path}:{reader.line_num}")
    else:
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise BadInput(f"{path}:{n}: not a JSON line") from None
            if not isinstance(row, dict):
                raise BadInput(f"{path}:{n}: not a JSON object")
            _add_row(trace, row, f"{path}:{n}")
    if not trace.steps:
        raise BadInput(f"{path}: no step times")
    return trace


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)$")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """Prometheus-style duration: 90s, 15m, 1h, 2d."""
    m = _DURATION.match(text.strip())
    if not m or float(m.group(1)) <= 0:
        raise BadInput(f"not a duration (like 30s, 15m, 1h, 2d): {text!r}")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def query_prometheus(
    url: str,
    job: str,
    range_: str = "1h",
    resolution: str = "15s",
    end: float | None = None,
    timeout: float = 30.0,
) -> Trace:
    """query_range of llmp_train_step_seconds{job=...}: one sample per evaluation time.

    The gauge holds each rank's *last* step, so a sample is the step that was current
    when Prometheus scraped; consecutive evaluations that repeat the same vector (a
    step longer than the resolution) are counted once.
    """
    span, step = parse_duration(range_), parse_duration(resolution)
    step = max(step, span / MAX_POINTS)
    end = time.time() if end is None else end
    quoted = job.replace("\\", "\\\\").replace('"', '\\"')
    params = {
        "query": f'{METRIC}{{job="{quoted}"}}',
        "start": f"{end - span:.3f}",
        "end": f"{end:.3f}",
        "step": f"{step:g}",
    }
    full = url.rstrip("/") + "/api/v1/query_range?" + urllib.parse.urlencode(params)
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
        raise SourceUnavailable(f"Prometheus {url}: {body.get('error', 'query failed')}")
    data = body.get("data") or {}
    if data.get("resultType") != "matrix":
        raise SourceUnavailable(
            f"Prometheus {url}: expected a matrix, got {data.get('resultType')}"
        )
    by_time: dict[float, dict[int, float]] = defaultdict(dict)
    node: dict[int, str] = {}
    for series in data.get("result") or []:
        labels = series.get("metric") or {}
        try:
            rank = int(labels["rank"])
        except (KeyError, ValueError):
            raise BadInput(f"{METRIC} series without an integer rank label: {labels}") from None
        node[rank] = str(labels.get("node") or f"rank-{rank}")
        for ts, value in series.get("values") or []:
            by_time[float(ts)][rank] = float(value)
    if not by_time:
        raise BadInput(f'Prometheus has no {METRIC}{{job="{job}"}} in the last {range_}')
    trace = Trace(source=f"{url} job={job} range={range_}")
    previous: dict[int, float] | None = None
    n = 0
    for ts in sorted(by_time):
        vector = by_time[ts]
        if vector == previous:
            continue
        previous = vector
        n += 1
        for rank, seconds in vector.items():
            trace.add(n, rank, seconds, node[rank])
    return trace


# --------------------------------------------------------------------------- model


@dataclass
class Score:
    name: str  # rank number or node name, as text
    ranks: list[int]
    node: str
    lost_s: float
    share: float  # of the job's total slowdown
    slow_fraction: float  # steps above median * (1 + threshold)
    median_ratio: float  # median over steps of t / reference
    flagged: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ranks": self.ranks,
            "node": self.node,
            "lost_s": round(self.lost_s, 6),
            "share": round(self.share, 6),
            "slow_fraction": round(self.slow_fraction, 6),
            "median_ratio": round(self.median_ratio, 6),
            "flagged": self.flagged,
        }


@dataclass
class Report:
    source: str
    steps: int
    ranks: int
    nodes: int
    incomplete_steps: int  # steps where some rank is missing
    actual_s: float
    at_median_s: float
    threshold: float
    persist: float
    by_rank: list[Score]
    by_node: list[Score]

    @property
    def slowdown_s(self) -> float:
        return self.actual_s - self.at_median_s

    @property
    def slowdown_fraction(self) -> float:
        return self.slowdown_s / self.actual_s if self.actual_s else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "steps": self.steps,
            "ranks": self.ranks,
            "nodes": self.nodes,
            "incomplete_steps": self.incomplete_steps,
            "actual_s": round(self.actual_s, 6),
            "at_median_s": round(self.at_median_s, 6),
            "slowdown_s": round(self.slowdown_s, 6),
            "slowdown_fraction": round(self.slowdown_fraction, 6),
            "threshold": self.threshold,
            "persist": self.persist,
            "by_rank": [s.as_dict() for s in self.by_rank],
            "by_node": [s.as_dict() for s in self.by_node],
        }


def _score(
    trace: Trace, group: set[int], threshold: float, persist: float
) -> tuple[float, float, float, bool]:
    """(lost seconds, slow fraction, median ratio, flagged) for replacing `group`."""
    lost = 0.0
    slow = seen = 0
    ratios: list[float] = []
    for times in trace.steps.values():
        inside = [t for r, t in times.items() if r in group]
        if not inside:
            continue
        outside = [t for r, t in times.items() if r not in group]
        ref = statistics.median(outside) if outside else statistics.median(times.values())
        actual = max(times.values())
        lost += actual - max([ref, *outside])
        mine = statistics.median(inside) if len(group) > 1 else inside[0]
        seen += 1
        ratios.append(mine / ref if ref > 0 else 1.0)
        if mine > ref * (1 + threshold):
            slow += 1
    fraction = slow / seen if seen else 0.0
    ratio = statistics.median(ratios) if ratios else 1.0
    return lost, fraction, ratio, seen > 0 and fraction >= persist


def _without(v: list[float], p: int, k: int) -> float:
    """The k-th smallest of sorted `v` once its p-th element is removed."""
    return v[k] if k < p else v[k + 1]


def _score_ranks(
    trace: Trace, ranks: list[int], threshold: float, persist: float
) -> dict[int, tuple[float, float, float, bool]]:
    """_score for every single rank at once: one sort per step instead of one per rank."""
    lost: dict[int, float] = dict.fromkeys(ranks, 0.0)
    slow: dict[int, int] = dict.fromkeys(ranks, 0)
    seen: dict[int, int] = dict.fromkeys(ranks, 0)
    ratios: dict[int, list[float]] = {r: [] for r in ranks}
    for times in trace.steps.values():
        order = sorted(times, key=times.__getitem__)
        v = [times[r] for r in order]
        n, m = len(v), len(v) - 1
        for p, r in enumerate(order):
            seen[r] += 1
            if m == 0:  # a step with one rank: nothing to compare against
                ratios[r].append(1.0)
                continue
            half = m // 2  # the median of the others, from the sorted step without p
            if m % 2:
                ref = _without(v, p, half)
            else:
                ref = (_without(v, p, half - 1) + _without(v, p, half)) / 2
            others_max = v[n - 1] if p != n - 1 else v[n - 2]
            lost[r] += v[n - 1] - max(ref, others_max)
            ratios[r].append(v[p] / ref if ref > 0 else 1.0)
            if v[p] > ref * (1 + threshold):
                slow[r] += 1
    out = {}
    for r in ranks:
        frac = slow[r] / seen[r] if seen[r] else 0.0
        ratio = statistics.median(ratios[r]) if ratios[r] else 1.0
        out[r] = (lost[r], frac, ratio, seen[r] > 0 and frac >= persist)
    return out


def analyse(trace: Trace, threshold: float = 0.05, persist: float = 0.5) -> Report:
    if not trace.steps:
        raise BadInput("no step times")
    ranks = sorted({r for times in trace.steps.values() for r in times})
    nodes: dict[str, list[int]] = defaultdict(list)
    for r in ranks:
        nodes[trace.node.get(r, f"rank-{r}")].append(r)
    actual = sum(max(t.values()) for t in trace.steps.values())
    at_median = sum(statistics.median(t.values()) for t in trace.steps.values())
    slowdown = actual - at_median

    def share(lost: float) -> float:
        return lost / slowdown if slowdown > 0 else 0.0

    by_rank = []
    for r, (lost, frac, ratio, flag) in _score_ranks(trace, ranks, threshold, persist).items():
        node = trace.node.get(r, f"rank-{r}")
        by_rank.append(Score(str(r), [r], node, lost, share(lost), frac, ratio, flag))
    by_node = []
    for name, members in nodes.items():
        lost, frac, ratio, flag = _score(trace, set(members), threshold, persist)
        by_node.append(Score(name, members, name, lost, share(lost), frac, ratio, flag))

    def order(s: Score) -> tuple[float, float]:
        return (-s.lost_s, -s.median_ratio)

    by_rank.sort(key=order)
    by_node.sort(key=order)
    return Report(
        source=trace.source,
        steps=len(trace.steps),
        ranks=len(ranks),
        nodes=len(nodes),
        incomplete_steps=sum(1 for t in trace.steps.values() if len(t) < len(ranks)),
        actual_s=actual,
        at_median_s=at_median,
        threshold=threshold,
        persist=persist,
        by_rank=by_rank,
        by_node=by_node,
    )


def load(
    source: Path | None,
    prometheus: str | None,
    job: str | None,
    range_: str,
    resolution: str,
) -> Trace:
    """Step times from a file, or from Prometheus for one job."""
    if (source is None) == (prometheus is None):
        raise BadInput("give either a step-times FILE or --prometheus URL --job NAME")
    if prometheus is not None:
        if not job:
            raise BadInput("--prometheus needs --job NAME")
        return query_prometheus(prometheus, job, range_, resolution)
    assert source is not None
    return read_file(source)


def check_options(threshold: float, persist: float, top: int) -> None:
    if not (threshold >= 0 and math.isfinite(threshold)):
        raise BadInput(f"--threshold must be >= 0: {threshold}")
    if not 0 < persist <= 1:
        raise BadInput(f"--persist must be in (0, 1]: {persist}")
    if top < 1:
        raise BadInput(f"--top must be >= 1: {top}")
