"""Time on a timeline, counted once: self (exclusive) time of nested ranges, busy time as an interval
union. Pure functions over plain integers (ns); no database here.

Self time. CPU ops and annotations nest on a thread (``aten::linear`` holds ``aten::addmm``;
``ProfilerStep#3`` holds everything): summing their inclusive durations counts a nested op once per
ancestor. The self time of a range is the part of it covered by none of its children, where the
ranges of one *lane* (the caller's key, typically (kind, pid, tid)) form a stack:

- ordered by start, then longest first (equal starts: the longer range is the parent), then input
  order (equal start and end: the first one given is the parent), so the result is deterministic;
- a child that runs past its parent's end is clipped at the parent's end (profilers round ends, and
  a record_function may outlive its caller); the clipped part is counted nowhere;
- a zero-length range has zero self time and takes none from its parent.

Consequence (tested on real traces): per lane, the self times add up to the union of the (clipped)
ranges, so hotspot shares of one kind add up to 100%, where inclusive totals add up to 200% or more.

Busy time. Work on several streams of one device, or several ops at once on one thread, overlaps;
the busy time of a lane is the length of the union of its intervals, never the sum.

(``SelfTotals`` folds a large file's ranges into numpy columns, ``columnar.span_columns``, loaded by
its first fold only, and walks each fold as it comes, ``columnar.SelfWalk``; the stack walk is this
module's ``walk_lane`` either way.)"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable, Sequence
from operator import itemgetter, neg
from typing import Any

_LANE, _START, _DURATION = itemgetter(0), itemgetter(1), itemgetter(2)


def self_times(spans: Sequence[tuple[Hashable, int, int]]) -> list[int]:
    """Self time of each ``(lane, start_ns, duration_ns)``, in input order (see the module doc)."""
    n = len(spans)
    starts = list(map(_START, spans))
    ends = [s + d if d > 0 else s for s, d in zip(starts, map(_DURATION, spans))]
    # each span's place in its lane, as a tuple made in C: start, then longest first (the later end),
    # then input order; the lanes' sorts call its __getitem__ (a lambda per span cost ~15% more)
    order = list(zip(starts, map(neg, ends), range(n)))
    lanes: dict[Hashable, list[int]] = {}
    for i, lane in enumerate(map(_LANE, spans)):
        members = lanes.get(lane)
        if members is None:
            lanes[lane] = members = []
        members.append(i)
    result = [0] * n
    for members in lanes.values():
        members.sort(key=order.__getitem__)
        walk_lane(zip(map(starts.__getitem__, members), map(ends.__getitem__, members), members), result, [])
    return result


def walk_lane(ranges: Iterable[tuple[int, int, int]], out: list[int], stack: list[tuple[int, int]]) -> None:
    """Adds the self time of each ``(start_ns, end_ns, slot)`` of one lane to ``out[slot]``: the ranges
    in stack order (start, then the later end first, then input order) and ends not before starts.
    ``stack`` holds the open ranges, ``(clipped end_ns, slot)``, innermost last: empty for a new lane,
    and kept between calls that go on with one lane (``columnar.self_time_sums`` walks it in chunks)."""
    for start, end, slot in ranges:
        while stack and stack[-1][0] <= start:
            stack.pop()
        if stack:
            top_end, top = stack[-1]
            if end > top_end:
                end = top_end
            if end > start:
                out[top] -= end - start
        if end > start:
            out[slot] += end - start
            stack.append((end, slot))


def merge(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of ``(start_ns, end_ns)`` intervals as sorted, disjoint, non-touching intervals.
    Empty intervals (end <= start) are dropped."""
    out: list[tuple[int, int]] = []
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if cur_e is not None and s <= cur_e:
            if e > cur_e:
                cur_e = e
        else:
            if cur_e is not None:
                out.append((cur_s, cur_e))  # type: ignore[arg-type]
            cur_s, cur_e = s, e
    if cur_e is not None:
        out.append((cur_s, cur_e))  # type: ignore[arg-type]
    return out


def union_length(intervals: Iterable[tuple[int, int]]) -> int:
    """Length of the union of ``(start_ns, end_ns)`` intervals: busy time, never a sum."""
    return sum(e - s for s, e in merge(intervals))


class Coverage:
    """A merged interval set that answers "how much of [a, b) is covered" in O(log n)."""

    __slots__ = ("ends", "prefix", "starts")

    def __init__(self, intervals: Iterable[tuple[int, int]]) -> None:
        merged = merge(intervals)
        self.starts = [s for s, _ in merged]
        self.ends = [e for _, e in merged]
        self.prefix = [0]
        for s, e in merged:
            self.prefix.append(self.prefix[-1] + e - s)

    @property
    def total(self) -> int:
        return self.prefix[-1]

    def covered_before(self, t: int) -> int:
        """Covered length in (-inf, t)."""
        k = bisect.bisect_right(self.starts, t)  # intervals starting at or before t
        if k == 0:
            return 0
        full = self.prefix[k - 1]
        return full + min(self.ends[k - 1], t) - self.starts[k - 1]

    def within(self, a: int, b: int) -> int:
        """Covered length of [a, b) (0 when b <= a)."""
        if b <= a:
            return 0
        return self.covered_before(b) - self.covered_before(a)


#: nested ranges a ``SelfTotals`` holds as Python objects before it folds them into columns
FOLD = 1 << 16


class SelfTotals:
    """Self time summed per key (e.g. (name_id, kind)), for the nested ranges of a file, fed one range
    at a time. Ranges are kept as Python objects (~250 bytes a CPU op of a Kineto trace: the tuples and
    their integers) until there are ``FOLD`` of them, then folded into int64 columns (``compact``) and
    walked at once (``columnar.SelfWalk``): self time needs a lane's ranges in stack order, which real
    traces give, or nearly, so a file of millions of CPU ops holds a fold, not all of them. A file in
    another order (rpd_tracer's ROCTx ranges, written as they end) is walked at its end, from the folds
    kept in a temporary file (32 bytes a range), sorted a piece at a time (``columnar.walk_kept``).
    numpy is loaded by the first fold only: smaller files take the plain-integer path."""

    __slots__ = ("_lanes", "_slots", "_walk", "keys", "spans")

    def __init__(self) -> None:
        self.spans: list[tuple[Hashable, int, int]] = []
        self.keys: list[Hashable] = []
        self._walk: Any = None  # the folded ranges' walk (``columnar.SelfWalk``), from the first fold
        self._lanes: dict[Hashable, int] = {}  # lane: its id in the columns
        self._slots: dict[Hashable, int] = {}  # key: its slot, in the order keys were first given

    def add(self, lane: Hashable, start_ns: int, duration_ns: int, key: Hashable) -> None:
        self.spans.append((lane, start_ns, duration_ns))
        self.keys.append(key)
        if len(self.spans) >= FOLD:
            self.compact()

    def compact(self) -> None:
        """Folds the ranges given since the last fold into columns once there are ``FOLD`` of them
        (callers that append to ``spans`` and ``keys`` themselves call it between batches)."""
        if len(self.spans) >= FOLD:
            self._fold()

    @property
    def folded(self) -> bool:
        return self._walk is not None

    def _fold(self) -> None:
        from .columnar import SelfWalk, span_columns  # (numpy)

        if self._walk is None:
            self._walk = SelfWalk()
        lanes, slots = self._lanes, self._slots
        self._walk.add(span_columns(
            [lanes.setdefault(lane, len(lanes)) for lane in map(_LANE, self.spans)],
            list(map(_START, self.spans)), list(map(_DURATION, self.spans)),
            [slots.setdefault(key, len(slots)) for key in self.keys]), len(slots))
        self.spans.clear()  # (in place: callers hold its append)
        self.keys.clear()

    def totals(self) -> dict[Hashable, int]:
        """Each key's self time, keys in the order they were first given."""
        if self._walk is None:
            out: dict[Hashable, int] = {}
            for key, own in zip(self.keys, self_times(self.spans)):
                out[key] = out.get(key, 0) + own
            return out
        if self.spans:
            self._fold()
        sums = [0] * len(self._slots)
        self._walk.finish(sums)  # (totals() is the end of it)
        return dict(zip(self._slots, sums))
