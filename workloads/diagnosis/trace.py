"""Per-rank step times as arrays, and the readers that build them from files.

A `Trace` is sparse and columnar: one cell per (step, rank) the input holds, sorted by
step then rank; `step[c]` indexes `steps`, `rank[c]` indexes `ranks`, `seconds[c]` is
the time, and `phases[name][c]` the optional per-phase seconds (NaN: absent). `node[j]`
indexes `node_names` for rank `ranks[j]`. Memory is a few arrays the size of the input,
never a Python object per sample and never a steps x ranks grid: a file holding 70,000
rows of 70,000 distinct steps and ranks is 70,000 cells, not 4.9 billion (the analysis
builds dense blocks of a bounded size, `stragglers.CHUNK_CELLS`).

Files, by suffix: `.parquet` (or a file starting with Parquet's magic), `.csv` (or, with
no JSON suffix, a first line that is not `{`), else JSON lines. Rows carry `step`, `rank`,
`seconds` (required), `node` and `<phase>_s` for each of PHASES (optional); other columns
are ignored. A row repeated for the same (step, rank) counts once, the last one; a rank's
node is the last one its rows name (`rank-N` when none does).

JSON lines and CSV are read by pyarrow, columnar, when it is installed; a file it cannot
read as clean columns (a string where a number belongs, a missing field, a bad line) is
read again line by line with the standard library, which then names the first bad line
(`file:line: what`), or, where pyarrow was only stricter than the rules above (a rank
written `"3"` or `3.0`), reads it.
"""

from __future__ import annotations

import csv
import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spec.errors import show
from spec.readers import ReadError, parse_json, unprintable, visible

PHASES: tuple[str, ...] = ("data_wait", "compute", "collective", "optimizer", "checkpoint")
"""The phases of one training step, each written as `<phase>_s` beside `seconds` (the
step's total) in a step-times line, and as `llmp_train_phase_seconds{phase=...}`."""

PHASE_COLUMNS: tuple[str, ...] = tuple(f"{p}_s" for p in PHASES)
_JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
_PARQUET_MAGIC = b"PAR1"
MAX_LINE_CHARS = 1 << 20
"""One JSON line of step times is under 300 characters; a megabyte is no step time."""


class BadInput(ValueError):
    """The input cannot be read as step times (one line)."""


@dataclass(frozen=True)
class Trace:
    """Step times, one cell per (step, rank) given; build one with `Trace.from_columns`."""

    step: np.ndarray  # (cells,) int64 index into steps, ascending (then rank)
    rank: np.ndarray  # (cells,) int64 index into ranks
    seconds: np.ndarray  # (cells,) float64
    steps: np.ndarray  # (steps,) int64, ascending
    ranks: np.ndarray  # (ranks,) int64, ascending
    node: np.ndarray  # (ranks,) int64 index into node_names
    node_names: tuple[str, ...]
    phases: dict[str, np.ndarray] = field(default_factory=dict)  # phase -> (cells,)
    source: str = ""

    @classmethod
    def from_columns(
        cls,
        step: Sequence[int] | np.ndarray,
        rank: Sequence[int] | np.ndarray,
        seconds: Sequence[float] | np.ndarray,
        node: Sequence[str | None] | None = None,
        phases: Mapping[str, Sequence[float | None] | np.ndarray] | None = None,
        source: str = "",
    ) -> Trace:
        """One entry per row: a row's node may be None or "" (no node), a phase None (absent)."""
        names: list[str] = []
        codes = np.full(len(step), -1, dtype=np.int64)
        if node is not None:
            index: dict[str, int] = {}
            for i, name in enumerate(node):
                if name not in (None, ""):
                    codes[i] = index.setdefault(str(name), len(index))
            names = list(index)
        columns: dict[str, np.ndarray] = {"seconds": np.asarray(seconds, dtype=np.float64)}
        for p, values in (phases or {}).items():
            columns[p] = np.array(
                [np.nan if v is None else v for v in values]
                if not isinstance(values, np.ndarray)
                else values,
                dtype=np.float64,
            )
        return build(
            np.asarray(step, dtype=np.int64),
            np.asarray(rank, dtype=np.int64),
            codes,
            names,
            columns.pop,
            [p for p in PHASES if p in columns],
            source,
        )

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    @property
    def n_ranks(self) -> int:
        return len(self.ranks)

    @property
    def n_cells(self) -> int:
        return len(self.seconds)

    def step_starts(self) -> np.ndarray:
        """(steps + 1,): the cells of step i are [starts[i], starts[i + 1])."""
        return np.searchsorted(self.step, np.arange(self.n_steps + 1))

    def matrix(self, values: np.ndarray | None = None) -> np.ndarray:
        """`values` (seconds by default) as a dense steps x ranks matrix, NaN where no cell
        is: for small traces (tests, a report's example), never for a whole input."""
        out = np.full((self.n_steps, self.n_ranks), np.nan)
        out[self.step, self.rank] = self.seconds if values is None else values
        return out

    def node_of(self, rank: int) -> str:
        """The node of rank number `rank`."""
        j = int(np.searchsorted(self.ranks, rank))
        return self.node_names[int(self.node[j])]


class BadValue(BadInput):
    """A value that breaks the rules, at row `row` (0-based) of the columns given to build."""

    def __init__(self, message: str, row: int, column: str) -> None:
        super().__init__(message)
        self.row, self.column = row, column


def _index(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values ascending, each row's index among them); a lookup table where the
    values are dense (step and rank numbers are), a sort where they are not."""
    lo, hi = int(values.min()), int(values.max())
    if hi - lo < max(2 * len(values), 1 << 20):
        seen = np.zeros(hi - lo + 1, dtype=bool)
        offset = values - lo
        seen[offset] = True
        lookup = np.cumsum(seen, dtype=np.int64) - 1
        return np.flatnonzero(seen) + lo, lookup[offset]
    distinct, inverse = np.unique(values, return_inverse=True)
    return distinct, inverse.astype(np.int64)


def _check(
    name: str, values: np.ndarray, required: bool, step: np.ndarray, rank: np.ndarray
) -> None:
    bad = (values < 0) | np.isinf(values)
    if required:
        bad |= np.isnan(values)
    if bad.any():
        i = int(np.argmax(bad))
        column = "seconds" if name == "seconds" else f"{name}_s"
        raise BadValue(
            f"step {step[i]} rank {rank[i]}: {column} must be a finite number >= 0: {values[i]}",
            i,
            column,
        )


def build(
    step: np.ndarray,
    rank: np.ndarray,
    node_codes: np.ndarray,
    node_dictionary: Sequence[str],
    column: Callable[[str], np.ndarray],
    phases: Sequence[str],
    source: str,
) -> Trace:
    """The trace of row columns: step and rank numbers, node_codes indexing node_dictionary
    (-1: none), and `column(name)` giving "seconds" and each of `phases` as float64 (NaN:
    absent), fetched one at a time so a reader can let each go once it is in the matrix."""
    if len(step) == 0:
        raise BadInput(f"{source}: no step times" if source else "no step times")
    steps, si = _index(step)
    ranks, ri = _index(rank)
    n_ranks = len(ranks)
    # One cell per (step, rank), sorted: a (step, rank) given twice counts once, the last
    # row (a stable sort keeps the rows of one cell in input order).
    key = si * n_ranks + ri
    order = np.argsort(key, kind="stable")
    key = key[order]
    last_of_run = np.ones(len(key), dtype=bool)
    last_of_run[:-1] = key[1:] != key[:-1]
    keep = order[last_of_run]
    del key, order, last_of_run
    cell_step, cell_rank = si[keep], ri[keep]
    del si

    # A rank's node: the last row naming one; ranks no row names are their own node.
    named = np.flatnonzero(node_codes >= 0)
    by_rank = np.full(n_ranks, -1, dtype=np.int64)
    np.maximum.at(by_rank, ri[named], named)
    del ri, named
    index: dict[str, int] = {}
    node = np.empty(n_ranks, dtype=np.int64)
    for j in range(n_ranks):  # one entry per rank, not per sample
        row = int(by_rank[j])
        name = node_dictionary[node_codes[row]] if row >= 0 else f"rank-{int(ranks[j])}"
        node[j] = index.setdefault(name, len(index))
    names = tuple(index)
    for name in node_dictionary:  # every name the input holds, kept or not
        bad = unprintable(name)
        if bad is not None:
            raise BadInput(
                f"{source}: node {visible(name, 60)} holds the character {bad}: a node name "
                "is printable text (Kubernetes names one with letters, digits, '-' and '.')"
            )
    seconds = column("seconds")
    _check("seconds", seconds, True, step, rank)
    times = seconds[keep]
    del seconds
    carried: dict[str, np.ndarray] = {}
    for p in phases:
        values = column(p)
        _check(p, values, False, step, rank)
        if not np.isnan(values).all():
            carried[p] = values[keep]
        del values
    return Trace(
        step=cell_step,
        rank=cell_rank,
        seconds=times,
        steps=steps.astype(np.int64),
        ranks=ranks.astype(np.int64),
        node=node,
        node_names=names,
        phases={p: carried[p] for p in PHASES if p in carried},
        source=source,
    )


# --------------------------------------------------------------------------- reading


def read_file(path: Path) -> Trace:
    """The trace in `path`: Parquet, CSV or JSON lines (see the module docstring)."""
    try:
        with path.open("rb") as f:
            head = f.read(64 * 1024)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e}") from None
    suffix = path.suffix.lower()
    if suffix == ".parquet" or head.startswith(_PARQUET_MAGIC):
        return _read_parquet(path)
    first = next((ln.strip() for ln in head.splitlines() if ln.strip()), b"")
    if suffix == ".csv" or (suffix not in _JSON_SUFFIXES and first and not first.startswith(b"{")):
        return _read_csv(path)
    return _read_jsonl(path)


class _Rows:
    """Row columns gathered by the line-by-line readers: typed arrays and node codes, not
    a Python object per value."""

    def __init__(self) -> None:
        self.step = array("q")
        self.rank = array("q")
        self.seconds = array("d")
        self.node = array("q")
        self.node_index: dict[str, int] = {}
        self.phases = {p: array("d") for p in PHASES}

    def add(self, row: Mapping[str, Any], where: str) -> None:
        step = _field(row, "step", where, int)
        rank = _field(row, "rank", where, int)
        seconds = _field(row, "seconds", where, float)
        if not math.isfinite(seconds) or seconds < 0:
            raise BadInput(
                f"{where}: 'seconds' must be a finite number >= 0: {show(row['seconds'])}"
            )
        values = []
        for col in PHASE_COLUMNS:
            v = math.nan
            if row.get(col) not in (None, ""):
                v = _field(row, col, where, float)
                if not math.isfinite(v) or v < 0:
                    raise BadInput(
                        f"{where}: {col!r} must be a finite number >= 0: {show(row[col])}"
                    )
            values.append(v)
        try:
            self.step.append(step)
            self.rank.append(rank)
        except OverflowError:
            raise BadInput(f"{where}: step or rank out of range: {step}, {rank}") from None
        self.seconds.append(seconds)
        for p, v in zip(PHASES, values, strict=True):
            self.phases[p].append(v)
        node = row.get("node")
        name = str(node) if node not in (None, "") else None
        self.node.append(
            -1 if name is None else self.node_index.setdefault(name, len(self.node_index))
        )

    def trace(self, source: str) -> Trace:
        if not self.step:
            raise BadInput(f"{source}: no step times")
        columns = {"seconds": np.frombuffer(self.seconds, dtype=np.float64)}
        columns |= {p: np.frombuffer(v, dtype=np.float64) for p, v in self.phases.items()}
        return build(
            np.frombuffer(self.step, dtype=np.int64),
            np.frombuffer(self.rank, dtype=np.int64),
            np.frombuffer(self.node, dtype=np.int64),
            list(self.node_index),
            columns.pop,
            list(PHASES),
            source,
        )


def _field(row: Mapping[str, Any], key: str, where: str, kind: type) -> Any:
    if key not in row or row[key] in (None, ""):
        raise BadInput(f"{where}: missing {key!r}")
    try:
        value = kind(row[key])
    except (TypeError, ValueError, OverflowError):
        raise BadInput(f"{where}: {key!r} is not a {kind.__name__}: {show(row[key])}") from None
    if kind is int and isinstance(row[key], float) and not float(row[key]).is_integer():
        raise BadInput(f"{where}: {key!r} is not an int: {show(row[key])}")
    return value


def _lines(path: Path) -> Iterator[str]:
    try:
        with path.open(encoding="utf-8") as f:
            yield from f
    except UnicodeDecodeError as e:
        raise BadInput(f"{path}: not UTF-8 text (byte {e.start} of a line)") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror or e}") from None


def _jsonl_by_line(path: Path) -> Trace:
    rows = _Rows()
    for n, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE_CHARS:
            raise BadInput(f"{path}:{n}: a line of over {MAX_LINE_CHARS:,} characters")
        try:
            row = parse_json(line, f"{path}:{n}")
        except ReadError as e:
            problem = e.problem
            if problem.startswith("not JSON: line 1, "):
                problem = f"not a JSON line ({problem.removeprefix('not JSON: line 1, ')})"
            raise BadInput(f"{path}:{n}: {problem}") from None
        if not isinstance(row, dict):
            raise BadInput(f"{path}:{n}: not a JSON object")
        rows.add(row, f"{path}:{n}")
    return rows.trace(str(path))


def _csv_by_line(path: Path) -> Trace:
    reader = csv.DictReader(_lines(path))
    try:
        _check_header(path, reader.fieldnames or [])
        missing = {"step", "rank", "seconds"} - set(reader.fieldnames or [])
        if missing:
            raise BadInput(f"{path}: CSV header lacks {', '.join(sorted(missing))}")
        rows = _Rows()
        for row in reader:
            rows.add(row, f"{path}:{reader.line_num}")
    except csv.Error as e:
        raise BadInput(f"{path}:{reader.line_num}: not CSV: {e}") from None
    return rows.trace(str(path))


def _check_header(path: Path, names: Sequence[str]) -> None:
    """A column named twice would be read as one of the two, silently: refused."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise BadInput(f"{path}:1: column {show(name)} is named twice in the header; keep one")
        seen.add(name)


def _arrow_schema(names: Iterable[str]) -> Any:
    import pyarrow as pa

    types = {"step": pa.int64(), "rank": pa.int64(), "seconds": pa.float64(), "node": pa.string()}
    types.update(dict.fromkeys(PHASE_COLUMNS, pa.float64()))
    return pa.schema([(n, types[n]) for n in types if n in set(names)])


def _columns(table: Any) -> dict[str, Any]:
    """The table's columns by name, for _from_arrow to let go of one by one."""
    return {name: table.column(name) for name in table.column_names}


def _from_arrow(cols: dict[str, Any], source: str) -> Trace:
    """The trace of pyarrow columns of _arrow_schema's types; BadValue for a missing required
    value or one that breaks the rules. Each column is released once it is in a matrix."""
    import pyarrow as pa

    for c in ("step", "rank", "seconds"):
        if c not in cols:
            raise BadInput(f"{source}: no column {c!r}")
        if cols[c].null_count:
            row = int(np.argmax(cols[c].is_null().to_numpy(zero_copy_only=False)))
            raise BadValue(f"{source}: row {row + 1}: missing {c!r}", row, c)
    codes = np.full(len(cols["step"]), -1, dtype=np.int64)
    names: list[str] = []
    if "node" in cols:
        encoded = cols.pop("node").combine_chunks().dictionary_encode()
        names = [str(v) for v in encoded.dictionary.to_pylist()]
        codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        del encoded
        empty = [i for i, v in enumerate(names) if v == ""]
        if empty:
            codes[np.isin(codes, empty)] = -1
    step = cols.pop("step").cast(pa.int64()).to_numpy()
    rank = cols.pop("rank").cast(pa.int64()).to_numpy()

    def column(name: str) -> np.ndarray:
        col = cols.pop("seconds" if name == "seconds" else f"{name}_s")
        values = col.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
        return np.asarray(values, dtype=np.float64)

    phases = [p for p, c in zip(PHASES, PHASE_COLUMNS, strict=True) if c in cols]
    return build(step, rank, codes, names, column, phases, source)


def _release_arrow_memory() -> None:
    """Give back what pyarrow's allocator keeps cached after a read (it would stay RSS)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def _read_jsonl(path: Path) -> Trace:
    try:
        import pyarrow as pa
        import pyarrow.json as pj
    except ImportError:
        return _jsonl_by_line(path)
    options = pj.ParseOptions(
        explicit_schema=_arrow_schema(["step", "rank", "seconds", "node", *PHASE_COLUMNS]),
        unexpected_field_behavior="ignore",
    )
    try:
        cols = _columns(pj.read_json(path, parse_options=options))
        return _from_arrow(cols, str(path))
    except (pa.ArrowException, OSError, BadValue):
        pass  # read again line by line: that reader names the line, or reads it
    finally:
        cols = {}
        _release_arrow_memory()
    return _jsonl_by_line(path)


def _read_csv(path: Path) -> Trace:
    try:
        import pyarrow as pa
        import pyarrow.csv as pc
    except ImportError:
        return _csv_by_line(path)
    try:
        header = next(csv.reader(_lines(path)), [])
    except csv.Error as e:
        raise BadInput(f"{path}:1: not a CSV header: {e}") from None
    _check_header(path, header)
    if {"step", "rank", "seconds"} - set(header):
        return _csv_by_line(path)  # which says what the header lacks
    schema = _arrow_schema(header)
    convert = pc.ConvertOptions(
        column_types=schema, include_columns=schema.names, strings_can_be_null=True
    )
    try:
        cols = _columns(pc.read_csv(path, convert_options=convert))
        return _from_arrow(cols, str(path))
    except (pa.ArrowException, OSError, BadValue):
        pass
    finally:
        cols = {}
        _release_arrow_memory()
    return _csv_by_line(path)


def _read_parquet(path: Path) -> Trace:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise BadInput(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
    try:
        names = pq.read_schema(path).names
        missing = {"step", "rank", "seconds"} - set(names)
        if missing:
            raise BadInput(f"{path}: Parquet columns lack {', '.join(sorted(missing))}")
        wanted = _arrow_schema(names)
        table = pq.read_table(path, columns=wanted.names)
    except (pa.ArrowException, OSError) as e:
        raise BadInput(f"{path}: not a readable Parquet file: {e}") from None
    for f in wanted:
        try:
            table[f.name].cast(f.type)
        except (pa.ArrowException, ValueError):
            raise BadInput(
                f"{path}: column {f.name!r} is {table[f.name].type}, not {f.type} "
                f"(step and rank are integers, seconds and phases numbers, node text)"
            ) from None
    cols = _columns(table)
    del table
    try:
        return _from_arrow(cols, str(path))
    except BadValue as e:
        message = str(e).split(": ", 1)[1] if str(e).startswith("step ") else None
        what = f"row {e.row + 1}: {message}" if message else str(e).removeprefix(f"{path}: ")
        raise BadInput(f"{path}: {what}") from None
    finally:
        cols = {}
        _release_arrow_memory()
