"""Which ranks and nodes slow a synchronous data-parallel job down, by how much, and why.

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

Computation. The trace is a steps x ranks matrix (NaN for a missing rank). Each step
is sorted once; the median and the max of the ranks outside a group are order
statistics of that sorted row with the group's members taken out: the j-th smallest
of the others is at position p of the sorted row where p - (members at or before p)
= j, found by walking p up past the members' own sorted positions (at most the
group's size, 8 for a node). That is done for every node and every step at once, so
the work is a sort per step plus O(steps x ranks), whatever the number of nodes.

Causes. When the trace carries per-phase seconds (`<phase>_s` for PHASES beside
`seconds`, the step's total), the explained nodes' lost time is split into causes:

    compute        compute (forward + backward) + optimizer: slow GPUs (clocks,
                   thermals, power), or more work on that node
    communication  collective: slow links (EFA, NVLink) or a slow NIC
    io             data_wait: the input pipeline, the file system (FSx)
    checkpoint     checkpoint: the checkpoint stall
    other          seconds - the sum of the phases: time no phase accounts for

A cause's excess is the node's time in it (median of its ranks) over the reference,
the median of the other ranks in the same step, summed over steps. The node's
lost(G) is split in proportion to the positive excesses; a node whose own step time is
not above the others' (summed over steps) gets no split: its excess is time spent
waiting for the slow ones. The split is of lost(G), so a slow node that loses nothing
(another, slower one sets the steps' max) still has its causes named, with 0 s each.
The what-if per cause replaces only that cause's time on the node's ranks by the
reference, rank by rank and step by step where it is above it, keeps every other rank
as it is and recomputes each step's max: the job seconds saved if that cause went away
on that node. Causes are what-ifs one at a time, like groups: their savings need not
add up to lost(G), and a cause with no excess overall can still save a little (the
node's own jitter in it, as lost(G) itself counts the node's jitter).

Collective time needs care. In synchronous training every rank leaves a collective
together, so a fast rank *waits* in it for the slowest one: a node late for any other
reason spends *less* time in the collective than the others (a negative excess).
That is a symptom of being the one waited for, never a cause; it is not counted
(negative excesses are left out of the split and a what-if never lengthens a phase).
A node whose own collective time is *higher* than the others', although they are the
ones waiting, spends it moving the data: its links or NIC are slow. So a slow-GPU node
shows compute up and collective down; a slow-link node shows collective up with
compute as usual. What the step-max model assumes for `seconds` it assumes for the
phases too: that they are the rank's own; where the others' `seconds` include
waiting for this node, removing the node's excess would shorten their waits as well,
and the analysis does not model that.

Evidence (evidence.py): DCGM throttle reasons, XIDs and NVLink errors, EFA and ENA
counters and anything given in `--evidence FILE`, listed per explained node beside
the cause, never used to compute it.

Inputs: JSON lines `{"step", "rank", "node", "seconds"}` (what training writes
with `--step-times`) with optional `<phase>_s`, CSV with a header naming the same
columns, Parquet (trace.py), or Prometheus' `query_range` of
`llmp_train_step_seconds{namespace=...,job=...}` and `llmp_train_phase_seconds{namespace=...,
job=...}`: a job is its namespace and its name (the name is unique in its namespace only, and
the namespace is Kubernetes' own label, which no tenant pod can set: monitoring/charts.py).
Values are read as Prometheus gives them and refused (BadInput) where no step time can be:
not a number, negative, infinite, NaN; series of another namespace or job are not counted.
"""

from __future__ import annotations

import math
import re
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spec.errors import show
from spec.promql import ImpossibleValue, sample_value, selector
from spec.readers import redact_url
from workloads.diagnosis import prometheus
from workloads.diagnosis.evidence import Evidence, describe, query_evidence, read_evidence
from workloads.diagnosis.prometheus import SourceUnavailable
from workloads.diagnosis.trace import PHASES, BadInput, Trace, read_file

__all__ = [
    "CAUSES",
    "MAX_POINTS",
    "METRIC",
    "PHASES",
    "PHASE_METRIC",
    "BadInput",
    "Cause",
    "Evidence",
    "Report",
    "Score",
    "SourceUnavailable",
    "Trace",
    "analyse",
    "check_options",
    "load",
    "load_evidence",
    "parse_duration",
    "query_prometheus",
    "read_evidence",
    "read_file",
]

METRIC = "llmp_train_step_seconds"
PHASE_METRIC = "llmp_train_phase_seconds"
"""Gauge {job, rank, node, phase}: each rank's seconds in each of PHASES in its last step."""
MAX_POINTS = 11_000  # Prometheus refuses query_range with more points per series

CAUSES: dict[str, tuple[str, ...]] = {
    "compute": ("compute", "optimizer"),
    "communication": ("collective",),
    "io": ("data_wait",),
    "checkpoint": ("checkpoint",),
}
"""Cause -> the phases whose time it is (`other` is the rest of `seconds`)."""


# --------------------------------------------------------------------------- Prometheus


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)$")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """Prometheus-style duration: 90s, 15m, 1h, 2d."""
    m = _DURATION.match(text.strip())
    if not m or float(m.group(1)) <= 0:
        raise BadInput(f"not a duration (like 30s, 15m, 1h, 2d): {text!r}")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def job_labels(namespace: str, job: str) -> dict[str, str]:
    """The labels that name one training job's series: its namespace and its name."""
    return {"namespace": namespace, "job": job}


def _matrix(
    url: str,
    metric: str,
    labels: dict[str, str],
    start: float,
    end: float,
    step: float,
    timeout: float,
) -> list[dict[str, Any]]:
    params = {
        "query": selector(metric, labels),
        "start": f"{start:.3f}",
        "end": f"{end:.3f}",
        "step": f"{step:g}",
    }
    data = prometheus.query(url, "query_range", params, timeout)
    if data.get("resultType") != "matrix":
        raise SourceUnavailable(
            f"Prometheus {url}: expected a matrix, got {data.get('resultType')}"
        )
    # What the query did not ask for is not counted, whoever answered (a proxy, a cache).
    result = data.get("result") or []
    if not isinstance(result, list):
        raise SourceUnavailable(f"Prometheus {redact_url(url)}: a result that is no list of series")
    return [
        s
        for s in result
        if isinstance(s, dict)
        and isinstance(s.get("metric"), dict)
        and all(s["metric"].get(k) == v for k, v in labels.items())
    ]


def _values(series: dict[str, Any], what: str) -> list[tuple[float, float]]:
    """(timestamp, value) of a matrix series; BadInput for a sample that is no number."""
    out = []
    samples = series.get("values") or []
    if not isinstance(samples, list):
        raise BadInput(f"{what}: values that are no list of [time, value] pairs: {show(samples)}")
    for sample in samples:
        try:
            ts, raw = sample
            out.append((float(ts), sample_value(raw, what)))
        except ImpossibleValue as exc:
            raise BadInput(str(exc)) from None
        except (TypeError, ValueError, OverflowError):
            raise BadInput(
                f"{what}: a sample that is no [time, value] pair: {show(sample)}"
            ) from None
    return out


def query_prometheus(
    url: str,
    job: str,
    range_: str = "1h",
    resolution: str = "15s",
    end: float | None = None,
    timeout: float = 30.0,
    *,
    namespace: str,
) -> Trace:
    """query_range of llmp_train_step_seconds{namespace=...,job=...}: one sample per
    evaluation time, and of llmp_train_phase_seconds{namespace=...,job=...} for the phases
    at the same times.

    The gauge holds each rank's *last* step, so a sample is the step that was current
    when Prometheus scraped; consecutive evaluations that repeat the same vector (a
    step longer than the resolution) are counted once. A step time that is not a finite
    number >= 0 is BadInput (trace.build refuses it): nothing is judged on it.
    """
    if not namespace or not job:
        raise BadInput("a training job is a namespace and a job name: both are needed")
    labels = job_labels(namespace, job)
    span, step = parse_duration(range_), parse_duration(resolution)
    step = max(step, span / MAX_POINTS)
    end = time.time() if end is None else end
    by_time: dict[float, dict[int, float]] = defaultdict(dict)
    node: dict[int, str] = {}
    for series in _matrix(url, METRIC, labels, end - span, end, step, timeout):
        found = series.get("metric") or {}
        try:
            rank = int(found["rank"])
        except (KeyError, TypeError, ValueError):
            raise BadInput(
                f"{METRIC} series without an integer rank label: {show(found)}"
            ) from None
        node[rank] = str(found.get("node") or f"rank-{rank}")
        for ts, value in _values(series, f"{METRIC} of rank {rank}"):
            by_time[ts][rank] = value
    if not by_time:
        raise BadInput(f"Prometheus has no {selector(METRIC, labels)} in the last {range_}")
    phase_at: dict[float, dict[tuple[str, int], float]] = defaultdict(dict)
    for series in _matrix(url, PHASE_METRIC, labels, end - span, end, step, timeout):
        found = series.get("metric") or {}
        if found.get("__name__", PHASE_METRIC) != PHASE_METRIC or found.get("phase") not in PHASES:
            continue
        try:
            rank = int(found["rank"])
        except (KeyError, TypeError, ValueError):
            continue
        for ts, value in _values(series, f"{PHASE_METRIC} of rank {rank}"):
            phase_at[ts][(found["phase"], rank)] = value
    steps: list[int] = []
    ranks: list[int] = []
    seconds: list[float] = []
    phases: dict[str, list[float]] = {p: [] for p in PHASES}
    previous: dict[int, float] | None = None
    n = 0
    for ts in sorted(by_time):
        vector = by_time[ts]
        if vector == previous:
            continue
        previous = vector
        n += 1
        at = phase_at.get(ts, {})
        for rank, value in vector.items():
            steps.append(n)
            ranks.append(rank)
            seconds.append(value)
            for p in PHASES:
                phases[p].append(at.get((p, rank), math.nan))
    return Trace.from_columns(
        steps,
        ranks,
        seconds,
        [node[r] for r in ranks],
        {p: np.array(v) for p, v in phases.items()},
        source=f"{redact_url(url)} namespace={namespace} job={job} range={range_}",
    )


# --------------------------------------------------------------------------- model


@dataclass
class Cause:
    name: str  # compute, communication, io, checkpoint, other
    phases: tuple[str, ...]
    excess_s: float  # the node's time in it over the others' median, summed over steps
    lost_s: float  # its part of the node's lost time (split by positive excess)
    share: float  # of the node's lost time
    saved_s: float  # job seconds saved if this cause went away on this node alone

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "phases": list(self.phases),
            "excess_s": round(self.excess_s, 6),
            "lost_s": round(self.lost_s, 6),
            "share": round(self.share, 6),
            "saved_s": round(self.saved_s, 6),
        }


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
    causes: list[Cause] = field(default_factory=list)  # largest share first; explained nodes
    evidence: list[Evidence] = field(default_factory=list)

    @property
    def cause(self) -> Cause | None:
        """The cause with the largest share of the lost time, if any has one."""
        return self.causes[0] if self.causes and self.causes[0].share > 0 else None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "ranks": self.ranks,
            "node": self.node,
            "lost_s": round(self.lost_s, 6),
            "share": round(self.share, 6),
            "slow_fraction": round(self.slow_fraction, 6),
            "median_ratio": round(self.median_ratio, 6),
            "flagged": self.flagged,
        }
        if self.causes:
            out["cause"] = self.cause.name if self.cause else None
            out["causes"] = [c.as_dict() for c in self.causes]
        if self.evidence:
            out["evidence"] = [e.as_dict() for e in self.evidence]
        return out


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
    phases: list[str] = field(default_factory=list)  # the phases the trace carries
    notes: list[str] = field(default_factory=list)  # evidence that could not be read

    @property
    def slowdown_s(self) -> float:
        return self.actual_s - self.at_median_s

    @property
    def slowdown_fraction(self) -> float:
        return self.slowdown_s / self.actual_s if self.actual_s else 0.0

    @property
    def explained(self) -> list[Score]:
        """The nodes whose lost time is split into causes, most lost first."""
        return [s for s in self.by_node if s.causes]

    def as_dict(self) -> dict[str, Any]:
        out = {
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
        if self.phases:
            out["phases"] = self.phases
        if self.notes:
            out["notes"] = self.notes
        return out


@dataclass
class _Groups:
    """Per step and group: the others' median and max, and the group's own median."""

    ref: np.ndarray  # (steps, groups): median of the ranks outside (all ranks if none are)
    outside_max: np.ndarray  # (steps, groups): max outside; -inf where none is outside
    mine: np.ndarray  # (steps, groups): median of the group's ranks present; NaN if none
    seen: np.ndarray  # (steps, groups) bool: some rank of the group ran the step
    present: np.ndarray  # (steps, groups, k) bool: member k ran the step
    safe: np.ndarray  # (groups, k): members' rank indices (padding: 0, never present)


@dataclass
class _Sorted:
    """Each step of a block sorted once: the values, each rank's position, the count."""

    xs: np.ndarray  # (steps, ranks) ascending, NaN last
    pos: np.ndarray  # (steps, ranks) int32: rank j's position in its sorted step
    n: np.ndarray  # (steps,) int32: values present


def _middle(sorted_: np.ndarray, count: np.ndarray, axis: int) -> np.ndarray:
    """The median of the first `count` values along `axis` of an ascending array
    ((a + a) / 2 == a, so odd and even counts share the formula; NaN where count is 0)."""
    c = np.maximum(count, 1)
    lo = np.take_along_axis(sorted_, np.expand_dims((c - 1) // 2, axis), axis=axis)
    hi = np.take_along_axis(sorted_, np.expand_dims(c // 2, axis), axis=axis)
    out = np.squeeze((lo + hi) / 2, axis=axis)
    return np.where(count > 0, out, np.nan)


def _sort(x: np.ndarray) -> _Sorted:
    n_ranks = x.shape[1]
    order = np.argsort(x, axis=1).astype(np.int32)  # NaN last; ties in any order
    xs = np.take_along_axis(x, order, axis=1)
    pos = np.empty_like(order)
    np.put_along_axis(
        pos, order, np.broadcast_to(np.arange(n_ranks, dtype=np.int32), x.shape), axis=1
    )
    n = np.count_nonzero(~np.isnan(x), axis=1).astype(np.int32)
    return _Sorted(xs, pos, n)


def _groups(x: np.ndarray, members: np.ndarray, srt: _Sorted | None = None) -> _Groups:
    """x: (steps, ranks), NaN where missing; members: (groups, k) rank indices, -1 padding;
    `srt`: x's steps sorted (`_sort(x)`), when the caller has them.

    Positions are int32 and every temporary goes as soon as it is used."""
    n_ranks = x.shape[1]
    srt = srt or _sort(x)
    xs, n = srt.xs, srt.n
    valid = members >= 0
    safe = np.where(valid, members, 0)
    values = x[:, safe]  # (steps, groups, k)
    present = valid[None] & ~np.isnan(values)
    inside = present.sum(axis=2, dtype=np.int32)
    values[~present] = np.nan
    values.sort(axis=2)
    mine = _middle(values, inside, axis=2)
    del values
    # Members' positions in the sorted row, ascending, absent ones past every value. The
    # j-th smallest of the others is at j + #{i: q[i] <= j}, q[i] = mpos[i] - i being the
    # number of others before member i (non-decreasing in i).
    k = members.shape[1]
    mpos = srt.pos[:, safe]
    mpos[~present] = n_ranks + k
    if k > 1:
        mpos.sort(axis=2)
    mpos -= np.arange(k, dtype=np.int32)
    outside = n[:, None] - inside

    def kth_outside(j: np.ndarray) -> np.ndarray:
        p = j.astype(np.int32)
        p += (mpos <= p[:, :, None]).sum(axis=2, dtype=np.int32)
        np.clip(p, 0, n_ranks - 1, out=p)
        return np.take_along_axis(xs, p, axis=1)

    m = np.maximum(outside, 1)
    ref = kth_outside((m - 1) // 2)
    ref += kth_outside(m // 2)
    ref /= 2
    alone = outside == 0
    if alone.any():
        everyone = np.broadcast_to(_middle(xs, n, axis=1)[:, None], ref.shape)
        ref[alone] = everyone[alone]
    outside_max = kth_outside(m - 1)
    outside_max[alone] = -np.inf
    return _Groups(ref, outside_max, mine, inside > 0, present, safe)


CHUNK_CELLS = 1 << 16
"""Cells of one dense block (steps x ranks of the block) the analysis may build beyond
four per cell the input holds: a dense trace is one block, a sparse one (ranks that come
and go, far-apart steps) many small ones, so memory follows the input, not its grid."""


def _blocks(trace: Trace) -> Iterator[tuple[int, int]]:
    """Ranges [a, b) of steps whose dense block (steps x the ranks present in them) holds at
    most max(4 x its cells, CHUNK_CELLS) entries; a single step always fits (its ranks)."""
    starts = trace.step_starts()
    n_steps, n_cells = trace.n_steps, trace.n_cells
    if n_steps * trace.n_ranks <= max(4 * n_cells, CHUNK_CELLS):
        yield 0, n_steps
        return
    mark = np.zeros(trace.n_ranks, dtype=bool)
    touched: list[np.ndarray] = []
    a, union, cells = 0, 0, 0
    for s in range(n_steps):
        r = trace.rank[starts[s] : starts[s + 1]]
        new = r[~mark[r]]
        if s > a and (s - a + 1) * (union + len(new)) > max(4 * (cells + len(r)), CHUNK_CELLS):
            yield a, s
            for t in touched:
                mark[t] = False
            touched.clear()
            a, union, cells = s, 0, 0
            new = r
        mark[new] = True
        touched.append(new)
        union += len(new)
        cells += len(r)
    yield a, n_steps


def _buckets(sizes: np.ndarray) -> Iterator[np.ndarray]:
    """Groups (indices into `sizes`) by size class, powers of two: padded to the class's
    largest, a class's (groups, k) table is at most twice its members."""
    classes = np.ceil(np.log2(np.maximum(sizes, 1))).astype(np.int64)
    for c in np.unique(classes):
        yield np.flatnonzero(classes == c)


def _member_table(ranks_of: list[np.ndarray]) -> np.ndarray:
    k = max(len(r) for r in ranks_of)
    table = np.full((len(ranks_of), k), -1, dtype=np.int64)
    for i, r in enumerate(ranks_of):
        table[i, : len(r)] = r
    return table


class _Tally:
    """What the report needs of each group (rank or node), summed over the blocks."""

    def __init__(self, n: int) -> None:
        self.lost = np.zeros(n)
        self.slow = np.zeros(n, dtype=np.int64)
        self.seen = np.zeros(n, dtype=np.int64)
        self.late = np.zeros(n)
        self.ratio_group: list[np.ndarray] = []
        self.ratio_value: list[np.ndarray] = []
        self.excess: dict[str, np.ndarray] = {}
        self.saved: dict[str, np.ndarray] = {}

    def add(self, gid: np.ndarray, actual: np.ndarray, g: _Groups, threshold: float) -> None:
        lost = np.where(g.seen, actual[:, None] - np.maximum(g.ref, g.outside_max), 0.0)
        np.add.at(self.lost, gid, lost.sum(axis=0))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(g.ref > 0, g.mine / g.ref, 1.0)
        slow = g.seen & (g.mine > g.ref * (1 + threshold))
        np.add.at(self.slow, gid, slow.sum(axis=0))
        np.add.at(self.seen, gid, g.seen.sum(axis=0))
        np.add.at(self.late, gid, np.where(g.seen, g.mine - g.ref, 0.0).sum(axis=0))
        at = np.nonzero(g.seen)
        self.ratio_group.append(gid[at[1]])
        self.ratio_value.append(ratio[at])

    def add_cause(self, cause: str, gid: np.ndarray, excess: np.ndarray, saved: np.ndarray) -> None:
        n = len(self.lost)
        np.add.at(self.excess.setdefault(cause, np.zeros(n)), gid, excess)
        np.add.at(self.saved.setdefault(cause, np.zeros(n)), gid, saved)

    def scores(self, persist: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(lost seconds, slow fraction, median ratio, flagged) per group."""
        seen = self.seen
        fraction = np.where(seen > 0, self.slow / np.maximum(seen, 1), 0.0)
        median_ratio = np.ones(len(seen))
        if self.ratio_group:
            group = np.concatenate(self.ratio_group)
            value = np.concatenate(self.ratio_value)
            order = np.lexsort((value, group))
            group, value = group[order], value[order]
            starts = np.searchsorted(group, np.arange(len(seen) + 1))
            count = np.diff(starts)
            has = count > 0
            lo = starts[:-1] + (np.maximum(count, 1) - 1) // 2
            hi = starts[:-1] + np.maximum(count, 1) // 2
            last = max(len(value) - 1, 0)
            mid = (value[np.minimum(lo, last)] + value[np.minimum(hi, last)]) / 2
            median_ratio = np.where(has, mid, 1.0)
        return self.lost, fraction, median_ratio, (seen > 0) & (fraction >= persist)


def _dense(values: np.ndarray, where: tuple[Any, np.ndarray, np.ndarray, slice]) -> np.ndarray:
    """The block of `values` (one per cell): (shape, row and column of each cell, cells)."""
    shape, rows, columns, cells = where
    out = np.full(shape, np.nan)
    out[rows, columns] = values[cells]
    return out


def _cause_matrices(
    seconds: np.ndarray, phases: dict[str, np.ndarray]
) -> Iterator[tuple[str, tuple[str, ...], np.ndarray]]:
    """(cause, its phases, (steps, ranks) seconds in it; NaN where none of them is known),
    one at a time; `other` last, the rest of `seconds`."""
    known = np.zeros_like(seconds)
    for cause, names in CAUSES.items():
        carried = [phases[p] for p in names if p in phases]
        if not carried:
            continue
        total = carried[0].copy()
        for more in carried[1:]:
            both = np.isnan(total) & ~np.isnan(more)
            total[both] = 0.0
            total += np.nan_to_num(more)
        known += np.nan_to_num(total)
        yield cause, names, total
    if phases:
        known *= -1
        known += seconds
        yield "other", (), known


def _block_causes(
    x: np.ndarray,
    phases: dict[str, np.ndarray],
    node_sets: list[tuple[np.ndarray, np.ndarray, _Groups]],
    actual: np.ndarray,
    tally: _Tally,
) -> None:
    """Per cause and node of a block: its excess over the others and the job seconds saved
    if it went away on that node alone (see the module docstring)."""
    for cause, _, matrix in _cause_matrices(x, phases):
        srt = _sort(matrix)
        for gid, members, totals in node_sets:
            g = _groups(matrix, members, srt)
            diff = g.mine - g.ref
            excess = np.where(totals.seen & np.isfinite(diff), diff, 0.0).sum(axis=0)
            over = np.maximum(matrix[:, totals.safe] - g.ref[:, :, None], 0.0)
            shortened = x[:, totals.safe] - np.nan_to_num(over)
            own_max = np.where(totals.present, shortened, -np.inf).max(axis=2)
            step = np.maximum(totals.outside_max, own_max)
            saved = np.where(totals.seen, actual[:, None] - step, 0.0).sum(axis=0)
            tally.add_cause(cause, gid, excess, saved)
            del g, diff, over, shortened, own_max, step
        del srt, matrix


def _causes_of(tally: _Tally, lost: np.ndarray, nodes: list[int]) -> dict[int, list[Cause]]:
    """Cause split of `nodes` (index -> causes, largest share first)."""
    per_cause = []
    for cause, phases in [*CAUSES.items(), ("other", ())]:
        if cause not in tally.excess:
            continue
        excess = tally.excess[cause].copy()
        # `other` is a difference of sums: rounding leaves ~1e-16 s a step, not a cause
        excess[np.abs(excess) < 1e-9 * np.maximum(tally.seen, 1)] = 0.0
        per_cause.append((cause, phases, excess, tally.saved[cause]))
    positive = sum(np.maximum(e, 0.0) for _, _, e, _ in per_cause)
    out: dict[int, list[Cause]] = {}
    for i in nodes:
        causes = []
        for cause, phases, excess, saved in per_cause:
            # Only a node slower than the others has a cause: a fast one's excess is time
            # spent waiting for the slow ones (collective), not lost by it.
            explains = positive[i] > 0 and tally.late[i] > 0
            share = max(float(excess[i]), 0.0) / float(positive[i]) if explains else 0.0
            causes.append(
                Cause(
                    cause, phases, float(excess[i]), float(lost[i]) * share, share, float(saved[i])
                )
            )
        causes.sort(key=lambda c: (-c.share, -c.saved_s))
        out[i] = causes
    return out


def _evidence(metrics: dict[str, float], causes: list[Cause]) -> list[Evidence]:
    """A node's evidence, the ones bearing on its leading cause and the alarming ones first."""
    lead = causes[0].name if causes and causes[0].share > 0 else None
    found = [describe(m, v) for m, v in sorted(metrics.items())]
    return sorted(found, key=lambda e: (e.cause != lead, not e.alarming))


def analyse(
    trace: Trace,
    threshold: float = 0.05,
    persist: float = 0.5,
    explain: int = 10,
    evidence: dict[str, dict[str, float]] | None = None,
) -> Report:
    """The report; with phases in the trace, the first `explain` nodes by lost time and
    every flagged node carry their causes, and their `evidence` where given."""
    if trace.n_cells == 0:
        raise BadInput("no step times")
    n_ranks, n_nodes = trace.n_ranks, len(trace.node_names)
    by_node_ranks = np.argsort(trace.node, kind="stable")
    node_starts = np.searchsorted(trace.node[by_node_ranks], np.arange(n_nodes + 1))
    rank_tally, node_tally = _Tally(n_ranks), _Tally(n_nodes)
    starts = trace.step_starts()
    actual_s = at_median_s = 0.0
    for a, b in _blocks(trace):
        lo, hi = int(starts[a]), int(starts[b])
        present, local = np.unique(trace.rank[lo:hi], return_inverse=True)
        cell_step = trace.step[lo:hi] - a

        where = (b - a, len(present)), cell_step, local, slice(lo, hi)
        x = _dense(trace.seconds, where)
        srt = _sort(x)
        actual = srt.xs[np.arange(b - a), srt.n - 1]
        actual_s += float(actual.sum())
        at_median_s += float(_middle(srt.xs, srt.n, axis=1).sum())
        rank_tally.add(
            present, actual, _groups(x, np.arange(len(present)).reshape(-1, 1), srt), threshold
        )
        # The nodes of the block, by size class, their members as the block's columns.
        node_ids, column_node = np.unique(trace.node[present], return_inverse=True)
        columns = np.argsort(column_node, kind="stable")
        bounds = np.searchsorted(column_node[columns], np.arange(len(node_ids) + 1))
        node_sets = []
        for bucket in _buckets(np.diff(bounds)):
            members = _member_table([columns[bounds[i] : bounds[i + 1]] for i in bucket])
            g = _groups(x, members, srt)
            node_tally.add(node_ids[bucket], actual, g, threshold)
            node_sets.append((node_ids[bucket], members, g))
        del srt
        if trace.phases:
            phases = {p: _dense(v, where) for p, v in trace.phases.items()}
            _block_causes(x, phases, node_sets, actual, node_tally)
        del x, node_sets

    slowdown = actual_s - at_median_s

    def share(lost: float) -> float:
        return lost / slowdown if slowdown > 0 else 0.0

    lost_r, frac_r, ratio_r, flag_r = rank_tally.scores(persist)
    by_rank = [
        Score(
            str(int(trace.ranks[j])),
            [int(trace.ranks[j])],
            trace.node_names[int(trace.node[j])],
            float(lost_r[j]),
            share(float(lost_r[j])),
            float(frac_r[j]),
            float(ratio_r[j]),
            bool(flag_r[j]),
        )
        for j in range(n_ranks)
    ]
    lost_n, frac_n, ratio_n, flag_n = node_tally.scores(persist)
    by_node = [
        Score(
            name,
            sorted(int(trace.ranks[j]) for j in by_node_ranks[node_starts[i] : node_starts[i + 1]]),
            name,
            float(lost_n[i]),
            share(float(lost_n[i])),
            float(frac_n[i]),
            float(ratio_n[i]),
            bool(flag_n[i]),
        )
        for i, name in enumerate(trace.node_names)
    ]

    def order(s: Score) -> tuple[float, float]:
        return (-s.lost_s, -s.median_ratio)

    by_rank.sort(key=order)
    index = {name: i for i, name in enumerate(trace.node_names)}
    by_node.sort(key=order)
    chosen = [s for k, s in enumerate(by_node) if k < explain or s.flagged]
    if trace.phases:
        causes = _causes_of(node_tally, lost_n, [index[s.name] for s in chosen])
        for s in chosen:
            s.causes = causes[index[s.name]]
    for s in chosen:
        if evidence and s.name in evidence:
            s.evidence = _evidence(evidence[s.name], s.causes)
    return Report(
        source=trace.source,
        steps=trace.n_steps,
        ranks=n_ranks,
        nodes=len(trace.node_names),
        incomplete_steps=int((np.diff(starts) < n_ranks).sum()),
        actual_s=actual_s,
        at_median_s=at_median_s,
        threshold=threshold,
        persist=persist,
        by_rank=by_rank,
        by_node=by_node,
        phases=list(trace.phases),
    )


def load(
    source: Path | None,
    prometheus: str | None,
    job: str | None,
    range_: str,
    resolution: str,
    namespace: str | None = None,
) -> Trace:
    """Step times from a file, or from Prometheus for one job (of one namespace)."""
    if (source is None) == (prometheus is None):
        raise BadInput(
            "give either a step-times FILE or --prometheus URL --namespace NS --job NAME"
        )
    if prometheus is not None:
        if not job or not namespace:
            raise BadInput("--prometheus needs --namespace NS and --job NAME (the job's own)")
        return query_prometheus(prometheus, job, range_, resolution, namespace=namespace)
    assert source is not None
    return read_file(source)


def load_evidence(
    path: Path | None, prometheus_url: str | None, trace: Trace, range_: str
) -> tuple[dict[str, dict[str, float]], list[str]]:
    """--evidence FILE, and with --prometheus the exporters' per-node metrics (the file's
    values win where both name the same node and metric); and a line per failed query."""
    out: dict[str, dict[str, float]] = {}
    problems: list[str] = []
    if path is not None:
        given = read_evidence(path)  # a bad file is bad input before any query is made
    if prometheus_url is not None:
        out, problems = query_evidence(prometheus_url, list(trace.node_names), range_)
    if path is not None:
        for node, metrics in given.items():
            out.setdefault(node, {}).update(metrics)
    return out, problems


def check_options(threshold: float, persist: float, top: int) -> None:
    if not (threshold >= 0 and math.isfinite(threshold)):
        raise BadInput(f"--threshold must be >= 0: {threshold}")
    if not 0 < persist <= 1:
        raise BadInput(f"--persist must be in (0, 1]: {persist}")
    if top < 1:
        raise BadInput(f"--top must be >= 1: {top}")
