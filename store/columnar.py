"""Record batches as columns: what a columnar reader (rocprofv3 CSV kernel and counter traces, read by
pyarrow's multi-threaded CSV parser) yields instead of one tuple per row, and the per-batch work the
ingest workers do on them without a Python step per row (validation, summary, timeline).

No database here (readers import this module). Names come as a batch's dictionary (each distinct
name once, decoded once) plus one small integer per row pointing into it; every other column is a
numpy array (``Ints``: int64 values and, when some cells are empty, a mask of the empty ones)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import sub
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from .collectives import CollectiveCall, Covered, TimelineBuilder, call_name, classify_interval
from .errors import InputError
from .intervals import walk_lane
from .records import Activity, Counter
from .validate import INT64_MAX, MAX_NAME_CHARS, before_zero

I64 = npt.NDArray[np.int64]
#: below this float sum of a batch's durations its int64 sums cannot wrap (room for the float's rounding)
_SUM_LIMIT = float(1 << 63) * (1 - 2.0**-20)


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

    def pick(self, rows: Any) -> Ints:
        """The column's rows ``rows`` (a slice: numpy views; an index or mask array: copies)."""
        return Ints(self.values[rows], None if self.null is None else self.null[rows])

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

    def rows(self, a: int, b: int) -> ActivityColumns:
        """Rows ``a`` to ``b`` (numpy views), with only the names they use (``own_entries``)."""
        out = self.view(a, b)
        out.names, out.name_index = own_entries(self.names, out.name_index)
        return out

    def view(self, a: int, b: int) -> ActivityColumns:
        """Rows ``a`` to ``b`` (numpy views), with the whole dictionary."""
        return ActivityColumns(self.kind, self.names, self.name_index[a:b], self.start_ns[a:b], self.duration_ns[a:b],
                               {f: c.pick(slice(a, b)) for f, c in self.ints.items()}, self.category)

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

    def rows(self, a: int, b: int) -> CounterColumns:
        """Rows ``a`` to ``b`` (numpy views), with only the names they use (``own_entries``)."""
        kernels, kindex = own_entries(self.kernels, self.kernel_index[a:b])
        counters, cindex = own_entries(self.counters, self.counter_index[a:b])
        return CounterColumns(kernels, kindex, counters, cindex, self.value[a:b], self.dispatch_id.pick(slice(a, b)))

    def records(self) -> list[Counter]:
        ks = [self.kernels[i] for i in self.kernel_index.tolist()]
        cs = [self.counters[i] for i in self.counter_index.tolist()]
        return [Counter(k, c, v, d) for k, c, v, d in zip(ks, cs, self.value.tolist(), self.dispatch_id.tolist())]


Batch = ActivityColumns | CounterColumns


@dataclass
class GroupBatches:
    """Several small files of one kind read in one parse (``readers.rocprof_columns.read_group``): the
    parse's batches, each file's rows following the previous file's, and each file's row count."""

    batches: list[Batch]
    counts: list[int]

    def per_file(self) -> list[list[Batch]]:
        """Each file's batches, as reading it alone makes them: its rows, with only the names they use
        (``own_entries``)."""
        out: list[list[Batch]] = [[] for _ in self.counts]
        f, left = 0, self.counts[0] if self.counts else 0
        for b in self.batches:
            at = 0
            while at < len(b):
                while not left:
                    f += 1
                    left = self.counts[f]
                n = min(left, len(b) - at)
                out[f].append(b.rows(at, at + n))
                at, left = at + n, left - n
        return out


def own_entries(names: list[str], index: Any) -> tuple[list[str], Any]:
    """The entries of a dictionary (``names``) that the rows ``index`` use, in the order they first
    appear, and each row's number among them: a file's rows cut from a batch of several files'
    (``readers.rocprof_columns.read_group``) then carry the dictionary the file read on its own has, so
    its names are checked, interned and summed as they are then."""
    if not len(index):
        return [], index
    used, first = np.unique(index, return_index=True)
    order = used[np.argsort(first, kind="stable")]
    if len(order) == len(names) and bool((order == np.arange(len(names))).all()):
        return names, index
    code = np.zeros(len(names), dtype=np.int32)
    code[order] = np.arange(len(order), dtype=np.int32)
    return [names[i] for i in order.tolist()], code[index]

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


def check_activities(b: ActivityColumns, path: Path, unsigned: bool = False) -> None:
    """validate.activities on columns: int64 times are given by the column type; no negative duration;
    with ``unsigned``, no start before the clock's zero (``validate.before_zero``)."""
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
    if unsigned and int(b.start_ns.min()) < 0:  # (after the durations, as validate.activities)
        i = int(np.argmax(b.start_ns < 0))
        raise before_zero(path, b.kind, b.names[int(b.name_index[i])], int(b.start_ns[i]))
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


class Grouped(NamedTuple):
    """A batch's durations grouped by dictionary entry, as columns (lists, one item per entry present
    in the batch): the entry, calls, total, min, max and sum of squares."""

    entries: list[int]
    calls: list[int]
    total: list[int]
    lo: list[int]
    hi: list[int]
    sq: list[float]


def sums(index: npt.NDArray[Any], durations: I64, n: int) -> tuple[Any, Any, I64, I64, Any]:
    """Per entry 0 .. n - 1 of ``index``: calls, total, min, max and sum of squares of its rows'
    durations, as arrays. Exact integer sums: np.add.at on int64, or on Python integers when a batch's
    durations could wrap int64; totals past int64 stay Python integers (an object array) for
    ``validate.summed`` to refuse where the file is known. Squares summed as floats in row order, like
    the row path did."""
    calls = np.bincount(index, minlength=n)
    total: Any = np.zeros(n, dtype=np.int64)
    if float(durations.sum(dtype=np.float64)) < _SUM_LIMIT:
        np.add.at(total, index, durations)
    else:  # (int64 sums could wrap)
        exact = np.zeros(n, dtype=object)
        np.add.at(exact, index, durations.astype(object))
        total = exact.astype(np.int64) if max(exact) <= INT64_MAX else exact
    lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(lo, index, durations)
    hi = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(hi, index, durations)
    f = durations.astype(np.float64)
    return calls, total, lo, hi, np.bincount(index, weights=f * f, minlength=n)


def group_durations(index: npt.NDArray[np.int32], durations: I64, n: int) -> Grouped:
    """Per dictionary entry present in the batch: (entry, calls, total, min, max, sum of squares), as
    columns (``sums``)."""
    calls, total, lo, hi, sq = sums(index, durations, n)
    present = np.nonzero(calls)[0]
    return Grouped(present.tolist(), calls[present].tolist(), total[present].tolist(), lo[present].tolist(),
                   hi[present].tolist(), sq[present].tolist())


def union(starts: I64, ends: I64) -> tuple[I64, I64]:
    """The union of intervals [start, end) as sorted, disjoint, non-touching intervals; empty ones
    (end <= start) dropped, as ``intervals.merge`` does. Intervals sorted by start take no sort, and
    intervals that are a union already come back as they are (not copies: a large file's work is
    sorted, often disjoint, and its union's arrays are the largest at the file's end)."""
    keep = ends > starts
    if not bool(keep.all()):
        starts, ends = starts[keep], ends[keep]
    del keep
    if len(starts) == 0:
        return starts, ends
    if bool((starts[1:] > ends[:-1]).all()):  # (already a union: folds of work done one after another)
        return starts, ends
    if bool((starts[1:] >= starts[:-1]).all()):
        s, e = starts, np.maximum.accumulate(ends)
    else:
        order = np.argsort(starts, kind="stable")
        s = starts[order]
        e = np.maximum.accumulate(ends[order])
        del order
    # a new interval starts where a start lies beyond every earlier end (touching intervals join)
    brk = np.empty(len(s), dtype=bool)
    brk[0] = True
    brk[1:] = s[1:] > e[:-1]
    firsts = np.nonzero(brk)[0]
    lasts = np.append(firsts[1:] - 1, len(s) - 1)
    return s[firsts], e[lasts]


def fold(pending: Sequence[tuple[int, int]]) -> tuple[I64, I64]:
    """The union of the ``pending`` intervals as columns (``collectives._Union``'s fold)."""
    return union(*_pairs(pending))


def _pairs(intervals: Sequence[tuple[int, int]]) -> tuple[I64, I64]:
    """(start, end) pairs as two int64 columns."""
    both = np.array(intervals, dtype=np.int64).reshape(-1, 2)
    return both[:, 0], both[:, 1]


def span_columns(lanes: list[int], starts: list[int], durations: list[int], slots: list[int]) -> I64:
    """Nested ranges as columns (``intervals.SelfTotals``'s fold): rows lane id, start, duration, key
    slot of one 4 x n int64 array (the starts and durations validated inside int64 by the reader's
    batch checks; lanes and slots are counts)."""
    return np.array((lanes, starts, durations, slots), dtype=np.int64).reshape(4, -1)


#: ranges turned back into Python integers at a time by ``_walk_sorted``
_WALK = 1 << 16


def self_time_sums(chunks: list[I64], out: list[int]) -> None:
    """Adds the self time of every range of ``span_columns`` chunks to ``out[slot]``: the ranges put in
    stack order by one sort (lane, start, the longer first, input order) and walked on one stack
    (``_walk_sorted``). Takes ``chunks`` over:
    it empties the list once they are joined, and reuses their arrays (memory at the file's end: the
    joined columns, the sort's order and lexsort's own work, ~7 int64s a range)."""
    cols = np.concatenate(chunks, axis=1) if len(chunks) > 1 else chunks[0]
    chunks.clear()
    _sort_and_walk(cols, out, _one_stack())


def _one_stack() -> Callable[[int], list[tuple[int, int]]]:
    """``stack_of`` for ranges that come lane after lane (each lane's together): one stack, emptied
    when the lane changes."""
    stack: list[tuple[int, int]] = []
    last = None  # the lane the stack belongs to

    def stack_of(this: int) -> list[tuple[int, int]]:
        nonlocal last
        if this != last:
            stack.clear()
            last = this
        return stack

    return stack_of


def _sort_and_walk(cols: I64, out: list[int], stack_of: Callable[[int], list[tuple[int, int]]]) -> None:
    """Walks ``span_columns`` ranges (reused: durations become -durations) in stack order, one sort."""
    lane, start, negative, _slot = cols
    np.maximum(negative, 0, out=negative)  # (a negative duration nests as a zero one)
    np.negative(negative, out=negative)  # (the longer first; ends are start - negative)
    # lexsort sorts key by key with numpy's stable sort, so equal keys keep input order
    order = np.lexsort((negative, start, lane))
    _walk_sorted(cols, order, out, stack_of)


#: ranges a file given out of order sorts at once at its end (``walk_kept``; ~7 int64s a range while
#: sorted): more are put in order piece by piece, so memory does not grow with the file's ranges
END_WALK = 1 << 18
#: keys sampled to cut the ranges into those pieces
_SAMPLE = 1 << 16


def walk_kept(kept: _Kept, out: list[int]) -> None:
    """``self_time_sums`` of every chunk ``kept`` holds, in memory bounded by ``END_WALK`` ranges.

    Out of order, each lane's ranges must be sorted whole before the walk (rpd_tracer writes a ROCTx
    range when it ends, so an outer range comes after its children, up to the whole trace later): the
    sort of them all at once held ~60 bytes a range (1.2M ROCTx ranges: +70 MB). So, when the chunks
    are in a temporary file and more than ``END_WALK``: the (lane, start) keys are sampled (one read),
    cut into pieces of about ``END_WALK / 2`` ranges, each range written to its piece's place in a
    second temporary file (one read, one write), and the pieces sorted and walked in key order on one
    stack. Ranges of one key stay in one piece, in input order, so the walk is the one sort's: the same
    sums. Where that cannot be done (no file, a full disk, keys beyond 62 bits) all are sorted at once."""
    n = kept.ranges()
    if kept.file is None or n <= END_WALK:
        self_time_sums(kept.chunks(), out)
        return
    step = max(1, n // _SAMPLE)
    lanes: list[I64] = []
    starts: list[I64] = []
    lo: int | None = None
    hi: int | None = None
    top = 0
    for c in kept.each():
        if c.shape[1]:
            lanes.append(c[0, ::step].copy())  # (copies: a view would keep the whole chunk)
            starts.append(c[1, ::step].copy())
            top = max(top, int(c[0].max()))
            lo = int(c[1].min()) if lo is None else min(lo, int(c[1].min()))
            hi = int(c[1].max()) if hi is None else max(hi, int(c[1].max()))
    assert lo is not None and hi is not None
    span = hi - lo + 1
    if (top + 1) * span >= 1 << 62:  # (a key per range is lane * span + start - lo: within int64)
        self_time_sums(kept.chunks(), out)
        return
    sample = np.sort(np.concatenate(lanes) * span + (np.concatenate(starts) - lo))
    pieces = -(-2 * n // END_WALK)
    bounds = np.unique(sample[(np.arange(1, pieces) * len(sample)) // pieces])
    try:
        spill = tempfile.TemporaryFile(prefix="profdb-ranges-")
    except OSError:
        self_time_sums(kept.chunks(), out)
        return
    with spill:
        places: list[list[tuple[int, int]]] = [[] for _ in range(len(bounds) + 1)]  # (offset, ranges)
        try:
            for c in kept.each():
                if not c.shape[1]:
                    continue
                piece = np.searchsorted(bounds, c[0] * span + (c[1] - lo), side="right")
                order = np.argsort(piece, kind="stable")  # (each piece's ranges in input order)
                c, piece = c[:, order], piece[order]
                cuts = (np.flatnonzero(piece[1:] != piece[:-1]) + 1).tolist()
                for a, b in zip([0, *cuts], [*cuts, len(piece)]):
                    places[int(piece[a])].append((spill.tell(), b - a))
                    spill.write(np.ascontiguousarray(c[:, a:b]).tobytes())
        except OSError:  # (a full disk)
            self_time_sums(kept.chunks(), out)
            return
        kept.close()
        stack_of = _one_stack()
        for where in places:
            parts = []
            for at, count in where:
                spill.seek(at)
                parts.append(np.fromfile(spill, dtype=np.int64, count=4 * count).reshape(4, count))
            if parts:
                _sort_and_walk(np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0], out, stack_of)


def _walk_sorted(ranges: I64, order: I64 | None, out: list[int],
                 stack_of: Callable[[int], list[tuple[int, int]]]) -> None:
    """Walks ``ranges`` (rows lane, start, -duration, slot) taken in ``order`` (None: as they are),
    which puts each lane's in stack order, on ``stack_of(lane)`` (``intervals.walk_lane``), ``_WALK``
    at a time, so the Python integers alive stay bounded. Ends are Python integers (exact wherever a
    start plus a duration lands)."""
    lane, start, negative, slot = ranges
    for at in range(0, len(lane) if order is None else len(order), _WALK):
        o = slice(at, at + _WALK) if order is None else order[at : at + _WALK]
        lanes = lane[o]
        starts, slots = start[o].tolist(), slot[o].tolist()
        ends = list(map(sub, starts, negative[o].tolist()))
        # where the lane changes: at the chunk's start (from the last chunk's), and inside it
        cuts = (np.flatnonzero(lanes[1:] != lanes[:-1]) + 1).tolist()
        for a, b in zip([0, *cuts], [*cuts, len(starts)]):
            walk_lane(zip(starts[a:b], ends[a:b], slots[a:b]), out, stack_of(int(lanes[a])))


#: per lane, the latest ranges (in stack order) a ``SelfWalk`` keeps back for the next chunk, where a
#: range given a little late still finds its place (real Kineto traces: a child given before its
#: parent of the same start, one or two ranges back; a GPU annotation up to seven back)
HOLD = 256
#: at most this many ranges kept back in all (a file of many lanes holds back fewer per lane)
HOLD_ALL = 1 << 16
#: lanes whose stacks a ``SelfWalk`` keeps between chunks (~200 bytes a lane): a file of more lanes (a
#: thread per range, say) is walked at its end instead, as before, at 32 bytes a range
MAX_LANES = 1 << 16
_NO_MARK = -(1 << 63)


class SelfWalk:
    """``self_time_sums`` for ranges that come a chunk at a time (``intervals.SelfTotals``' folds), with
    memory flat in the file: each chunk is walked when it comes, so a file's nested ranges are not held
    to its end. The result is the same as one sort and walk of all of them (sums of Python integers).

    Self time needs each lane's ranges in stack order (start, the longer first, input order). A trace
    gives them so, or nearly: a chunk is put in that order with the ranges kept back from the last
    one (``HOLD`` per lane, the latest), walked on each lane's stack, and the latest ranges of each lane
    kept back again. A range that sorts before one already walked on its lane (a file in another order)
    would change what was walked: then nothing more is walked, and ``finish`` sorts and walks all the
    ranges as ``self_time_sums`` does, from the chunks kept (``_Kept``: a temporary file, or memory
    where no file can be written), at most ``END_WALK`` of them sorted at once (``walk_kept``). So is a
    file of more than ``MAX_LANES`` lanes."""

    def __init__(self) -> None:
        self.sums: list[int] = []
        self.stacks: dict[int, list[tuple[int, int]]] = {}
        self.back = np.zeros((4, 0), dtype=np.int64)  # (lane, start, -duration, slot), in stack order
        self.mark_start = np.zeros(0, dtype=np.int64)  # per lane id: the last walked range's start,
        self.mark_neg = np.zeros(0, dtype=np.int64)  # and its -duration (_NO_MARK: none walked yet)
        self.kept = _Kept()
        self.in_order = True

    def add(self, chunk: I64, slots: int) -> None:
        """Walks a ``span_columns`` chunk (``slots``: the key slots given so far)."""
        self.kept.add(chunk)
        if not self.in_order or not chunk.shape[1]:
            return
        lane, start, dur, slot = chunk
        neg = -np.maximum(dur, 0)
        lanes = int(lane.max()) + 1
        if lanes > MAX_LANES:
            self._stop()
            return
        if lanes > len(self.mark_start):
            more = np.full(lanes - len(self.mark_start), _NO_MARK, dtype=np.int64)
            self.mark_start = np.concatenate((self.mark_start, more))
            self.mark_neg = np.concatenate((self.mark_neg, more))
        ms, mn = self.mark_start[lane], self.mark_neg[lane]
        if bool(((start < ms) | ((start == ms) & (neg < mn))).any()):
            self._stop()
            return
        self.sums.extend(repeat(0, slots - len(self.sums)))
        both = np.concatenate((self.back, np.stack((lane, start, neg, slot))), axis=1)
        order = np.lexsort((both[2], both[1], both[0]))  # (stable: ties keep input order)
        both = both[:, order]
        # each lane's run in the sorted ranges; its latest ``hold`` are kept back
        cuts = np.flatnonzero(both[0, 1:] != both[0, :-1]) + 1
        firsts = np.concatenate(([0], cuts))
        lasts = np.concatenate((cuts, [both.shape[1]]))
        hold = min(HOLD, HOLD_ALL // len(firsts))
        ends = np.maximum(lasts - hold, firsts)  # (each lane's run: walked up to here, kept back after)
        walked = np.arange(both.shape[1]) < np.repeat(ends, lasts - firsts)
        self._walk(both[:, walked])
        self.back = both[:, ~walked]

    def _stop(self) -> None:
        """Walks no more: ``finish`` walks all the ranges from the kept chunks."""
        self.in_order = False
        self.sums, self.stacks = [], {}
        self.back = np.zeros((4, 0), dtype=np.int64)
        self.mark_start = self.mark_neg = np.zeros(0, dtype=np.int64)

    def _walk(self, ranges: I64) -> None:
        """Walks ``ranges`` (stack order within each lane) on the lanes' stacks, and marks each lane's last."""
        if not ranges.shape[1]:
            return
        lane_ids = ranges[0]
        lasts = np.flatnonzero(np.append(lane_ids[1:] != lane_ids[:-1], True))
        self.mark_start[lane_ids[lasts]] = ranges[1, lasts]
        self.mark_neg[lane_ids[lasts]] = ranges[2, lasts]
        _walk_sorted(ranges, None, self.sums, lambda lane: self.stacks.setdefault(lane, []))

    def finish(self, out: list[int]) -> None:
        """Adds every range's self time to ``out[slot]`` (the end of it: the kept chunks are let go)."""
        if not self.in_order:
            walk_kept(self.kept, out)
            return
        self.kept.close()
        self._walk(self.back)
        self.back = np.zeros((4, 0), dtype=np.int64)
        for slot, own in enumerate(self.sums):
            out[slot] += own


class _Kept:
    """The chunks a ``SelfWalk`` was given, should it need them again: in a temporary file (unlinked
    at once, gone with the process), or in memory where none can be written."""

    def __init__(self) -> None:
        self.file: Any = None
        self.sizes: list[int] = []
        self.memory: list[I64] | None = None

    def add(self, chunk: I64) -> None:
        if self.memory is None and self.file is None:
            try:
                self.file = tempfile.TemporaryFile(prefix="profdb-ranges-")
            except OSError:
                self.memory = []
        if self.file is not None:
            try:
                self.file.write(np.ascontiguousarray(chunk).tobytes())
                self.sizes.append(chunk.shape[1])
                return
            except OSError:  # (a full disk: the chunks written so far come back into memory)
                self.memory = self.chunks()
        assert self.memory is not None
        self.memory.append(chunk)

    def ranges(self) -> int:
        """The ranges of every chunk given."""
        return sum(self.sizes) if self.file is not None else sum(c.shape[1] for c in self.memory or ())

    def each(self) -> Iterator[I64]:
        """Every chunk given, one at a time (read back from the file, which stays open)."""
        if self.file is None:
            yield from self.memory or ()
            return
        self.file.seek(0)
        for n in self.sizes:
            yield np.fromfile(self.file, dtype=np.int64, count=4 * n).reshape(4, n)

    def chunks(self) -> list[I64]:
        """Every chunk given (the file read back, and closed)."""
        if self.file is None:
            return self.memory if self.memory is not None else []
        out = list(self.each())
        self.close()
        return out

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        self.memory = None


def bucket_columns(bucket: Any) -> tuple[I64, I64]:
    """All the intervals of a ``collectives._Union`` (its unions' columns and the intervals not folded
    yet) as two int64 columns (not merged)."""
    parts = list(bucket.columns)
    rest = bucket.intervals()
    if rest:
        parts.append(_pairs(rest))
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def coverage_of(tl: TimelineBuilder, columns: Any) -> tuple[str, Covered, Covered, int]:
    """``TimelineBuilder._coverage`` with numpy unions (the same steps, in the same order), each
    bucket's intervals given by ``columns(bucket)``."""
    dw, dc = columns(tl.device_work), columns(tl.device_comm)
    cw, hc = columns(tl.cpu_work), columns(tl.host_comm)
    if len(dw[0]) or len(dc[0]):
        domain, work, comm = "device", Cover(*dw), dc
    elif len(cw[0]) or len(hc[0]):
        domain, work, comm = "cpu", Cover(*cw), hc
    else:
        empty = np.zeros(0, dtype=np.int64)
        domain, work, comm = "", Cover(empty, empty), (empty, empty)
    if not len(comm[0]):
        return domain, work, work, 0
    both = WorkAndComm(work, *union(*comm))
    return domain, work, both, both.comm_ns


class Cover:
    """``intervals.Coverage`` over numpy columns: the union of intervals, answering "how much of [a, b)
    is covered" by binary search (the same numbers; built without a Python step per interval)."""

    def __init__(self, starts: I64, ends: I64) -> None:
        self.starts, self.ends = union(starts, ends)
        self.prefix = np.empty(len(self.starts) + 1, dtype=np.int64)
        self.prefix[0] = 0
        np.subtract(self.ends, self.starts, out=self.prefix[1:])
        np.cumsum(self.prefix[1:], out=self.prefix[1:])

    @property
    def total(self) -> int:
        return int(self.prefix[-1])

    def covered_before(self, t: int) -> int:
        k = int(np.searchsorted(self.starts, t, side="right"))
        if k == 0:
            return 0
        return int(self.prefix[k - 1]) + min(int(self.ends[k - 1]), t) - int(self.starts[k - 1])

    def within(self, a: int, b: int) -> int:
        if b <= a:
            return 0
        return self.covered_before(b) - self.covered_before(a)

    def before_many(self, t: I64) -> I64:
        """``covered_before`` of every value of ``t`` at once."""
        k = np.searchsorted(self.starts, t, side="right")
        j = np.maximum(k - 1, 0)
        if not len(self.starts):
            return np.zeros(len(t), dtype=np.int64)
        got = self.prefix[j] + np.minimum(self.ends[j], t) - self.starts[j]
        return np.where(k == 0, 0, got)

    def within_many(self, a: I64, b: I64) -> list[int]:
        """``within`` of every pair (a[i], b[i]) at once."""
        out = self.before_many(b) - self.before_many(a)
        result: list[int] = np.where(b <= a, 0, out).tolist()
        return result


class WorkAndComm:
    """The union of work and communication (``Covered``), answered from work's union and
    communication's: ``within`` is work's part of [a, b) plus the communication outside work there.
    Never a union of both built at a file's end (their intervals together, sorted, with prefix sums:
    the largest arrays a long trace's worker held). The same numbers as ``Cover`` of both."""

    def __init__(self, work: Cover, starts: I64, ends: I64) -> None:
        self.work, self.starts, self.ends = work, starts, ends  # (communication's union)
        lengths = ends - starts
        #: per communication interval, its part outside work; and their running sum
        self.prefix = np.zeros(len(starts) + 1, dtype=np.int64)
        np.subtract(lengths, work.before_many(ends) - work.before_many(starts), out=self.prefix[1:])
        np.cumsum(self.prefix[1:], out=self.prefix[1:])
        self.comm_ns = int(lengths.sum())

    @property
    def total(self) -> int:
        return self.work.total + int(self.prefix[-1])

    def _outside(self, a: int, b: int) -> int:
        """The part of [a, b) (a < b) that is communication outside work."""
        first = int(np.searchsorted(self.ends, a, side="right"))  # the first interval ending after a
        last = int(np.searchsorted(self.starts, b, side="left"))  # past the last starting before b
        if first >= last:
            return 0
        got = int(self.prefix[last]) - int(self.prefix[first])
        s, e = int(self.starts[first]), int(self.ends[last - 1])
        if s < a:  # (the first interval begins before a: its part before a is not in [a, b))
            got -= (a - s) - self.work.within(s, a)
        if e > b:
            got -= (e - b) - self.work.within(b, e)
        return got

    def within(self, a: int, b: int) -> int:
        if b <= a:
            return 0
        return self.work.within(a, b) + self._outside(a, b)


class EntryPlan(NamedTuple):
    """What ``ColumnTimeline.add_columns`` makes of a batch's dictionary entries, before any row: where
    each entry's intervals go (``classify_interval``: ``where``, and the codes among them), the entries
    that are steps (``special``), the collective calls of the others (entry -> (family, collective)),
    and per entry whether it is one of those calls (``is_call``)."""

    where: npt.NDArray[np.int8]
    distinct: set[int]
    special: list[int]
    calls: dict[int, tuple[str, str]]
    is_call: npt.NDArray[np.bool_]


def entry_plan(kind: str, names: Sequence[str], category: str | None) -> EntryPlan:
    how = [classify_interval(kind, n, category) for n in names]  # (where, is_call, step) per entry
    # a collective call without args (all rows of a column batch) is (family, "", collective, None)
    # by its name alone (collectives.collective_of): its calls are taken per name, as columns; only
    # steps (annotations) go through add_many
    where = [h[0] for h in how]
    special = [e for e, h in enumerate(how) if h[2] is not None]
    found = {e: call_name(kind, names[e]) for e, h in enumerate(how) if h[1]}
    calls = {e: c for e, c in found.items() if c is not None and e not in special}
    is_call = np.zeros(len(names), dtype=bool)
    is_call[list(calls)] = True
    return EntryPlan(np.array(where, dtype=np.int8), set(where), special, calls, is_call)


#: intervals kept per bucket before its unions are folded into one (bounds memory)
_FOLD = 1 << 20


class ColumnTimeline(TimelineBuilder):
    """A ``TimelineBuilder`` fed column batches (``add_columns``): each batch's intervals join their
    bucket as a numpy union (``_Union.columns``, beside its own folds) and ``finish`` computes with
    them (``Cover``) what ``TimelineBuilder.finish`` computes with Python lists; the few rows that may
    be collective calls or steps still go through ``add_many`` (their intervals join the same unions
    at the end). tests/test_columnar.py checks both give the same RankTimeline."""

    def add_columns(self, b: ActivityColumns, plan: EntryPlan | None = None) -> None:
        """Add a batch's rows (``plan``: ``entry_plan`` of its names, made once for the batches of several
        files that share one dictionary; else made here)."""
        kind, names = b.kind, b.names
        if plan is None:
            plan = entry_plan(kind, names, b.category)
        special, calls = plan.special, plan.calls
        idx = b.name_index
        # (rows are picked through per-entry lookup tables indexed by the rows' entries: np.isin on a
        # small batch cost ~20 us a call, a third of a 122-row file's timeline)
        special_rows: Any = None  # (per row: is its entry special)
        plain: Any = slice(None)
        if special:
            is_special = np.zeros(len(names), dtype=bool)
            is_special[special] = True
            special_rows = is_special[idx]
            plain = ~special_rows
        pidx = idx[plain]
        if len(pidx):
            starts = b.start_ns[plain] + self.base
            ends = starts + b.duration_ns[plain]  # (durations are checked not negative)
            lo, hi = int(starts.min()), int(ends.max())
            self.first = lo if self.first is None else min(self.first, lo)
            self.last = hi if self.last is None else max(self.last, hi)
            if calls:  # (the rows of each call entry, entries in order, rows in order: one sort, not a
                rows = np.flatnonzero(plan.is_call[pidx])  # pass over the batch per entry)
                if len(rows):
                    rows = rows[np.argsort(pidx[rows], kind="stable")]
                    entries = pidx[rows]
                    cut = np.flatnonzero(entries[1:] != entries[:-1]) + 1
                    los, his = [0, *cut.tolist()], [*cut.tolist(), len(rows)]
                    call_starts, call_ends = starts[rows].tolist(), ends[rows].tolist()
                    for e, lo, hi in zip(entries[los].tolist(), los, his):
                        family, coll = calls[e]
                        n = hi - lo
                        self.raw[family].extend(zip(call_starts[lo:hi], call_ends[lo:hi], repeat("", n),
                                                    repeat(coll, n), repeat(None, n)))
            distinct = plan.distinct
            row_where = plan.where[pidx] if len(distinct) > 1 else None
            buckets = self.buckets()
            for code in sorted(distinct - {0}):
                if row_where is None:  # (every entry goes to this one bucket)
                    part = union(starts, ends)
                else:
                    mask = row_where == code
                    part = union(starts[mask], ends[mask])
                unions = buckets[code].columns  # type: ignore[union-attr]  # (code 0, no bucket, is left out)
                unions.append(part)
                if len(unions) > 1 and sum(len(u[0]) for u in unions) >= _FOLD:
                    unions[:] = [union(np.concatenate([u[0] for u in unions]), np.concatenate([u[1] for u in unions]))]
        if special_rows is not None:
            rows = np.nonzero(special_rows)[0]
            sub = ActivityColumns(
                kind, names, idx[rows], b.start_ns[rows], b.duration_ns[rows],
                {f: c.pick(rows) for f, c in b.ints.items()},
                b.category,
            )
            self.add_many(sub.records())

    def _coverage(self) -> tuple[str, Covered, Covered, int]:
        """``TimelineBuilder._coverage`` with numpy unions (the same steps, in the same order), also
        when no bucket holds a union yet."""
        return coverage_of(self, bucket_columns)

    def _family_calls(self, rank: int, family: str, items: list[tuple[int, int, str, str, int | None]],
                      work: Covered, first_ns: int) -> tuple[CollectiveCall, ...]:
        """``TimelineBuilder._family_calls`` with numpy: the same order (a stable sort by start, then
        end), windows (the running maximum of earlier ends), busy time and numbering (the rank of each
        call among those of its (group, collective) in that order); one object per call only at the end."""
        starts_t, ends_t, groups, colls, sizes = zip(*items)
        s = np.array(starts_t, dtype=np.int64)
        e = np.array(ends_t, dtype=np.int64)
        order = np.lexsort((e, s))
        s, e = s[order], e[order]
        prev = np.maximum.accumulate(np.concatenate((np.array([first_ns], dtype=np.int64), e[:-1])))
        lo = np.minimum(prev, s)
        assert isinstance(work, Cover)
        busy = work.within_many(lo, s)
        keys: dict[tuple[str, str], int] = {}
        code = np.array([keys.setdefault(k, len(keys)) for k in zip(groups, colls)], dtype=np.int64)[order]
        by_key = np.argsort(code, kind="stable")
        grouped = code[by_key]
        heads = np.flatnonzero(np.concatenate(([True], grouped[1:] != grouped[:-1])))
        seq = np.empty(len(s), dtype=np.int64)
        seq[by_key] = np.arange(len(s)) - np.repeat(heads, np.diff(np.append(heads, len(s))))
        perm = order.tolist()
        return tuple(map(CollectiveCall, repeat(rank), repeat(family), [groups[i] for i in perm],
                         [colls[i] for i in perm], seq.tolist(), s.tolist(), e.tolist(), [sizes[i] for i in perm],
                         busy, (s - lo).tolist()))

    def _busy(self, work: Covered, los: list[int], starts: list[int]) -> Sequence[int]:
        """``work.within(lo, start)`` of every pair at once."""
        assert isinstance(work, Cover)
        return work.within_many(np.array(los, dtype=np.int64), np.array(starts, dtype=np.int64))
