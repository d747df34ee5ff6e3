"""Record batches as columns: what a columnar reader (rocprofv3 CSV kernel and counter traces, read by
pyarrow's multi-threaded CSV parser) yields instead of one tuple per row, and the per-batch work the
ingest workers do on them without a Python step per row (validation, summary, timeline).

No database here (readers import this module). Names come as a batch's dictionary (each distinct
name once, decoded once) plus one small integer per row pointing into it; every other column is a
numpy array (``Ints``: int64 values and, when some cells are empty, a mask of the empty ones)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import InputError
from .records import Activity, Counter
from .validate import MAX_NAME_CHARS

I64 = npt.NDArray[np.int64]


@dataclass
class Ints:
    """An optional integer column: int64 values, and ``null`` (True where the cell was empty) or None
    when no cell is."""

    values: I64
    null: npt.NDArray[np.bool_] | None = None

    def tolist(self) -> list[int | None]:
        if self.null is None:
            out: list[Any] = self.values.tolist()
            return out
        obj = self.values.astype(object)
        obj[self.null] = None
        out = obj.tolist()
        return out

    def constant(self) -> tuple[bool, int | None]:
        """(True, the value) when every row holds the same value (None: every cell empty)."""
        v = self.values
        if len(v) == 0:
            return True, None
        if self.null is not None:
            if bool(self.null.all()):
                return True, None
            return False, None
        first = int(v[0])
        return bool((v == first).all()), first


#: Activity's optional integer fields, in its order (device .. block_z)
ACTIVITY_INTS = ("device", "stream", "correlation", "pid", "tid", "grid_x", "grid_y", "grid_z",
                 "block_x", "block_y", "block_z")


@dataclass
class ActivityColumns:
    """A batch of activities of one kind: ``names[name_index[i]]`` is row i's name."""

    kind: str
    names: list[str]
    name_index: npt.NDArray[np.int32]
    start_ns: I64
    duration_ns: I64
    #: optional integer columns by Activity field name (absent: NULL on every row)
    ints: dict[str, Ints] = field(default_factory=dict)
    category: str | None = None

    def __len__(self) -> int:
        return len(self.start_ns)

    def records(self) -> list[Activity]:
        """The same rows as Activity tuples (for callers that want records, not for the ingest)."""
        names = [self.names[i] for i in self.name_index.tolist()]
        cols = [self.ints[f].tolist() if f in self.ints else [None] * len(self) for f in ACTIVITY_INTS]
        return [
            Activity(self.kind, n, s, d, self.category, *rest)
            for n, s, d, *rest in zip(names, self.start_ns.tolist(), self.duration_ns.tolist(), *cols)
        ]


@dataclass
class CounterColumns:
    """A batch of per-dispatch counter values (samples 1, no min/max)."""

    kernels: list[str]
    kernel_index: npt.NDArray[np.int32]
    counters: list[str]
    counter_index: npt.NDArray[np.int32]
    value: npt.NDArray[np.float64]
    dispatch_id: Ints

    def __len__(self) -> int:
        return len(self.value)

    def records(self) -> list[Counter]:
        ks = [self.kernels[i] for i in self.kernel_index.tolist()]
        cs = [self.counters[i] for i in self.counter_index.tolist()]
        return [Counter(k, c, v, d) for k, c, v, d in zip(ks, cs, self.value.tolist(), self.dispatch_id.tolist())]


Batch = ActivityColumns | CounterColumns

_FIX = "the file is damaged or was edited: re-copy it from the profiler's output, or leave it out of the ingest"


def _bad(path: Path, what: str) -> InputError:
    return InputError(f"{path}: {what}; {_FIX}")


def check_names(path: Path, names: Sequence[str]) -> None:
    """A batch's distinct names are within profdb's length limit (validate._names, on the dictionary)."""
    if not names:
        return
    longest = max(map(len, names))
    if longest > MAX_NAME_CHARS:
        name = next(n for n in names if len(n) == longest)
        raise _bad(
            path, f"a name is {longest} characters long ({name[:60]!r}...), over profdb's limit of {MAX_NAME_CHARS}"
        )


def check_activities(b: ActivityColumns, path: Path) -> None:
    """validate.activities on columns: int64 times are given by the column type; no negative duration."""
    if not len(b):
        return
    d = b.duration_ns
    if int(d.min()) < 0:
        i = int(np.argmax(d < 0))
        raise _bad(
            path,
            f"{b.kind} {b.names[int(b.name_index[i])]!r} at {int(b.start_ns[i])} ns ends {-int(d[i])} ns before "
            "it starts (negative duration)",
        )
    check_names(path, b.names)


def check_counters(b: CounterColumns, path: Path) -> None:
    """validate.counters on columns: finite values (dispatch ids are int64 by their column type)."""
    if not len(b):
        return
    finite = np.isfinite(b.value)
    if not bool(finite.all()):
        i = int(np.argmin(finite))
        raise _bad(
            path,
            f"counter {b.counters[int(b.counter_index[i])]!r} of {b.kernels[int(b.kernel_index[i])]!r} has the "
            f"value {float(b.value[i])!r}, not a finite number",
        )
    check_names(path, b.kernels)
    check_names(path, b.counters)


def group_durations(
    index: npt.NDArray[np.int32], durations: I64, n: int
) -> list[tuple[int, int, int, int, int, float]]:
    """Per dictionary entry present in the batch: (entry, calls, total, min, max, sum of squares).
    Exact integer sums (np.add.at on int64), squares summed as floats like the row path did."""
    calls = np.bincount(index, minlength=n)
    total = np.zeros(n, dtype=np.int64)
    np.add.at(total, index, durations)
    lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(lo, index, durations)
    hi = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(hi, index, durations)
    f = durations.astype(np.float64)
    sq = np.bincount(index, weights=f * f, minlength=n)
    present = np.nonzero(calls)[0]
    return list(zip(present.tolist(), calls[present].tolist(), total[present].tolist(), lo[present].tolist(),
                    hi[present].tolist(), sq[present].tolist()))


def union(starts: I64, ends: I64) -> tuple[list[int], list[int]]:
    """The union of intervals [start, end) as sorted disjoint intervals (columns in, lists out)."""
    if len(starts) == 0:
        return [], []
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    e = np.maximum.accumulate(ends[order])
    # a new interval starts where a start lies beyond every earlier end (touching intervals join)
    brk = np.empty(len(s), dtype=bool)
    brk[0] = True
    brk[1:] = s[1:] > e[:-1]
    firsts = np.nonzero(brk)[0]
    lasts = np.append(firsts[1:] - 1, len(s) - 1)
    return s[firsts].tolist(), e[lasts].tolist()
