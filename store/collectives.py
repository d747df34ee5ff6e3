"""Collectives on the timeline: who arrived last, who waited, on which clock.

Pure functions over typed records (no database): phase 2 feeds them from the store, tests from the
readers. Three stages, each usable alone:

1. ``summarize_rank(rank, activities, time_base_ns)`` -> ``RankTimeline``: one pass over one rank's
   activity. Finds its collective calls (see FAMILIES), numbers the k-th call of each (process group,
   collective) ``seq``, and measures per call the work done since the previous call ended
   (``busy_before_ns`` in ``window_ns``); also the rank's busy time (interval union, per device or
   thread, never a sum over streams), exposed communication and its ``ProfilerStep#N`` ranges.
   Everything here is in the rank's own clock, so it can be computed at ingest, rank by rank.
2. ``match_instances`` + ``estimate_offsets``: the k-th call of one collective in one group is matched
   across ranks (an *instance*). Ranks on one host share a clock; each other host gets one offset,
   estimated from the instants at which blocking collectives complete (every participant leaves
   within microseconds), with a residual that bounds its error.
3. ``attribute``: per instance the arrival skew, the last rank (ties are ties) and each rank's wait;
   per rank and per step the times entered last, the wait caused to the others and the wait suffered.

Definitions (ns; a_{i,r} = arrival of rank r at instance i on the common clock, i.e. its call's start
minus its host's offset; L_i = the last rank, when unique):

- skew_i = max_r a_{i,r} - min_r a_{i,r}
- wait_{i,r} = a_{i,L_i} - a_{i,r} (time rank r waited in instance i for the last rank)
- wait caused by rank c = sum over the instances where c is last of sum_r wait_{i,r}
- wait suffered by rank r = sum_i wait_{i,r}
- busy = union of the rank's non-communication work (device kernels/copies if it has any, else CPU ops)
- idle = span - busy (span: first to last activity of the rank)
- exposed communication = union(communication) minus the part overlapped by busy
"""

from __future__ import annotations

import bisect
import functools
import json
import operator
import re
import statistics
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar, Union, overload

from .classify import category as _category
from .identity import rank_ranges
from .intervals import Coverage, union_length
from .records import Activity
from .units import fmt_ns
from .validate import INT64_MAX

#: Call families, best first: where a collective's arrival is observed. A device kernel starts when
#: the device reaches the collective; a CPU-side annotation or c10d op when the host does.
FAMILIES = ("kernel", "annotation", "api", "cpu_op")

_KERNEL = re.compile(r"^(?:nccl|rccl)(?:Dev)?(?:Kernel)?_?([A-Za-z]+)", re.IGNORECASE)
_ANNOTATION = re.compile(r"^(?:nccl|gloo|ucc|mpi):(.+)$", re.IGNORECASE)
_API = re.compile(r"^(?:nccl|rccl)([A-Z][A-Za-z]+)$")
_C10D = re.compile(r"^c10d::(.+?)_?$")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: API calls that are not collectives (communicator setup, groups, queries)
_NOT_COLLECTIVE = {"commcount", "commuserrank", "commcudevice", "comminitrank", "comminitall", "commdestroy",
                   "commabort", "commfinalize", "commsplit", "groupstart", "groupend", "getuniqueid",
                   "getversion", "geterrorstring", "getlasterror", "commgetasyncerror", "meminit", "memalloc",
                   "memfree", "redopcreatepremulsum", "redopdestroy", "commregister", "commderegister"}
_DTYPE_BYTES = {"float": 4, "float32": 4, "int": 4, "int32": 4, "double": 8, "float64": 8, "long": 8, "int64": 8,
                "half": 2, "float16": 2, "bfloat16": 2, "byte": 1, "char": 1, "int8": 1, "uint8": 1, "bool": 1}



class RankIdentity(NamedTuple):
    """Where a rank ran: the host whose clock it uses, and its slot on that host."""

    host: str
    local_rank: int | None = None


class CollectiveCall(NamedTuple):
    """One rank's call of one collective. Times in ns on the rank's own clock (time base added)."""

    rank: int
    family: str
    group: str
    name: str
    #: the k-th call (0-based) of (family, group, name) on this rank
    seq: int
    start_ns: int
    end_ns: int
    #: message size in bytes where the profiler says (elements x dtype size), else None
    bytes: int | None
    #: work (see ``RankTimeline.work_domain``) done in the window before this call: from the end of
    #: the rank's previous call of the same family (or its first activity) to this call's start
    busy_before_ns: int
    window_ns: int


class Step(NamedTuple):
    """One ``ProfilerStep#N`` range of a rank, with the rank's busy time and exposed communication in it."""

    number: int
    start_ns: int
    end_ns: int
    busy_ns: int = 0
    exposed_comm_ns: int = 0

    @property
    def idle_ns(self) -> int:
        return max(self.end_ns - self.start_ns - self.busy_ns, 0)


@dataclass(frozen=True)
class RankTimeline:
    """What the cross-rank analysis needs of one rank, computed in one pass over its activity."""

    rank: int
    calls: Mapping[str, tuple[CollectiveCall, ...]]
    steps: tuple[Step, ...]
    first_ns: int
    last_ns: int
    #: "device" when the rank has device work (kernels, copies), else "cpu" (CPU ops), "" for none
    work_domain: str
    busy_ns: int
    comm_ns: int
    exposed_comm_ns: int

    @property
    def span_ns(self) -> int:
        return max(self.last_ns - self.first_ns, 0)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled with its calls as plain tuples, made calls again in C (``_timeline``): a NamedTuple
        pickles through a Python call per object on each side (``__getnewargs__``, ``__new__``), and a
        worker sends every call of its files (62k calls of 16 ranks: ~0.05 s in the workers, as much
        in the writer, which is the ingest's bottleneck)."""
        calls = {family: tuple(map(tuple, some)) for family, some in self.calls.items()}
        return _timeline, (self.rank, calls, tuple(map(tuple, self.steps)), self.first_ns, self.last_ns,
                           self.work_domain, self.busy_ns, self.comm_ns, self.exposed_comm_ns)

    @property
    def idle_ns(self) -> int:
        return max(self.span_ns - self.busy_ns, 0)


def _timeline(rank: int, calls: dict[str, tuple[tuple[Any, ...], ...]], steps: tuple[tuple[int, ...], ...],
              *rest: Any) -> RankTimeline:
    """``RankTimeline.__reduce__``'s other half: ``tuple.__new__`` makes each call and step in C."""
    call, step = functools.partial(tuple.__new__, CollectiveCall), functools.partial(tuple.__new__, Step)
    return RankTimeline(rank, {family: tuple(map(call, some)) for family, some in calls.items()},
                        tuple(map(step, steps)), *rest)


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _args(text: str | None) -> dict[str, object]:
    if not text:
        return {}
    try:
        v = json.loads(text)
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def _bytes(args: Mapping[str, object]) -> int | None:
    """A collective's message size in bytes from its args, or None where they give no size that can be
    one: not an integer (a bool is none), negative, or beyond int64 (stored as BIGINT: 4e18 elements of
    4 bytes was a traceback, not a stored row)."""
    n = args.get("In msg nelems")
    dtype = args.get("dtype")
    if type(n) is int and isinstance(dtype, str) and dtype.lower() in _DTYPE_BYTES:
        b: object = n * _DTYPE_BYTES[dtype.lower()]
    else:
        b = args.get("bytes")
    return b if type(b) is int and 0 <= b <= INT64_MAX else None


@functools.lru_cache(maxsize=65536)
def call_name(kind: str, name: str) -> tuple[str, str] | None:
    """(family, collective) if an activity of ``kind`` named ``name`` is a collective call, else None
    (the name part of ``collective_of``; cached: millions of rows repeat a few thousand names)."""
    if kind == "kernel":
        m = _KERNEL.match(name)
        return ("kernel", _norm(m.group(1))) if m else None
    if kind == "annotation":
        # PyTorch's "nccl:all_reduce" / "gloo:all_reduce"; NCCL's own NVTX ranges (nsys) "ncclAllReduce"
        m = _ANNOTATION.match(name) or _API.match(name)
    elif kind == "api":
        m = _API.match(name)
    elif kind == "cpu_op":
        m = _C10D.match(name)
    else:
        return None
    if not m or _norm(m.group(1)) in _NOT_COLLECTIVE:
        return None
    return (kind, _norm(m.group(1)))


def collective_of(a: Activity) -> tuple[str, str, str, int | None] | None:
    """(family, process group, collective, bytes) if ``a`` is a collective call, else None.

    Device kernels ``nccl*``/``rccl*`` (name from the "Collective name" arg where present, else from
    the kernel name: ``ncclKernel_AllReduce_RING_LL_Sum_float`` -> ``allreduce``); annotations
    ``nccl:*``/``gloo:*`` and NCCL's NVTX ranges ``ncclAllReduce``; RCCL/NCCL API calls (rocprofv3
    ``ncclAllReduce``); c10d ops (``c10d::allreduce_``). ``record_param_comms`` is not a call of its
    own (it sits inside the c10d op); setup calls (``ncclCommInitAll``, ``ncclGroupStart``) are not
    collectives."""
    found = call_name(a.kind, a.name)
    if found is None:
        return None
    family, coll = found
    if family in ("api", "cpu_op") or not a.args:
        return (family, "", coll, None)
    args = _args(a.args)
    named = args.get("Collective name") if family == "kernel" else None
    group = args.get("Process Group Name")
    return (family, str(group) if group is not None else "", _norm(str(named)) if named else coll, _bytes(args))


def summarize_rank(rank: int, activities: Iterable[Activity], time_base_ns: int = 0) -> RankTimeline:
    """One pass over one rank's activity (any order): its collective calls, steps and busy time."""
    b = TimelineBuilder(time_base_ns)
    for a in activities:
        b.add(a)
    return b.finish(rank)


@functools.lru_cache(maxsize=65536)
def classify_interval(kind: str, name: str, category: str | None) -> tuple[int, bool, int | None]:
    """Where an activity's interval goes (0 nowhere, 1 device work, 2 device communication, 3 CPU work,
    4 host communication), whether it can be a collective call, and its ProfilerStep number. Cached:
    a worker sees the same few thousand names in every file."""
    is_call = call_name(kind, name) is not None
    is_comm = (category or _category(kind, name)) == "communication"
    where = 0
    if kind in ("kernel", "memcpy", "memset"):
        where = 2 if is_comm else 1
    elif kind == "cpu_op":
        where = 4 if is_comm else 3
    elif kind in ("annotation", "api") and is_call:
        where = 4
    return where, is_call, step_number(name) if kind == "annotation" else None


@functools.lru_cache(maxsize=4096)
def step_number(name: str) -> int | None:
    """N of an annotation named ``ProfilerStep#N``; None for any other name, and for an N beyond int64
    (no profiler writes one: a damaged or hostile name, kept as a plain annotation; as a step it was a
    traceback at the insert into the step tables' BIGINT column)."""
    m = _STEP.match(name)
    if m is None:
        return None
    n = int(m.group(1))
    return n if n <= INT64_MAX else None


#: work intervals kept unmerged before they are folded into the running union (bounds memory: each
#: is ~120 bytes of tuple and integers until its fold, and a file has four unions; 1 << 18 held
#: ~80 MB of them in a 600 MB Kineto trace's worker)
_COMPACT = 1 << 16


class _Union:
    """A growing set of intervals, folded into their union every _COMPACT additions, so nested or
    overlapping work (CPU ops in their parents, kernels on several streams) costs no memory.
    ``pending`` is appended to directly by ``TimelineBuilder.add_many`` (the same list for the
    builder's life), which then calls ``compact``.

    Each fold is the union of the pending intervals as numpy columns (int64 starts and ends, 16 bytes
    an interval), not a list of tuples: work that does not overlap (a GPU's kernels one after another)
    does not shrink, and a tuple of two ints is ~120 bytes (one 484 MB rocprofv3 JSON file of 1.05M
    dispatches: the worker grew to 290 MB). The folds are kept side by side and merged once, by
    ``finish``: merging each into all the earlier ones re-sorted the whole union at every fold, whose
    ever larger arrays, freed at the next fold, left glibc's heap holding ~20 MB more by the end of a
    600 MB Kineto trace. numpy is loaded by the first fold only, i.e. for a file of at least _COMPACT
    such intervals; smaller ones never fold. (``columnar.ColumnTimeline`` adds each column batch's
    union to ``columns`` too.)"""

    __slots__ = ("columns", "pending")

    def __init__(self) -> None:
        self.columns: list[Any] = []  # (starts, ends) of each fold's union, numpy int64
        self.pending: list[tuple[int, int]] = []

    def add(self, start: int, end: int) -> None:
        self.pending.append((start, end))
        self.compact()

    def compact(self) -> None:
        if len(self.pending) >= _COMPACT:
            from .columnar import fold  # (numpy)

            self.columns.append(fold(self.pending))
            self.pending.clear()

    def intervals(self) -> list[tuple[int, int]]:
        """The intervals not folded yet (all of them while ``columns`` is empty)."""
        return list(self.pending)

    def __bool__(self) -> bool:
        return bool(self.pending) or any(len(c[0]) for c in self.columns)


class TimelineBuilder:
    """``summarize_rank`` one activity at a time (``add``), for the ingest workers: they see a file's
    activities in batches and keep only what the timeline needs (the calls, the work intervals folded
    into their union, the step ranges), never the activities themselves."""

    def __init__(self, time_base_ns: int = 0) -> None:
        self.base = time_base_ns
        self.raw: dict[str, list[tuple[int, int, str, str, int | None]]] = {f: [] for f in FAMILIES}
        self.device_work = _Union()
        self.cpu_work = _Union()
        self.device_comm = _Union()
        self.host_comm = _Union()
        self.step_ranges: dict[int, tuple[int, int]] = {}
        self.first: int | None = None
        self.last: int | None = None
        # per (kind, name, category): where its intervals go, whether it can be a call, its step number
        self.seen: dict[tuple[str, str, str | None], tuple[_Union | None, bool, int | None]] = {}
        # the same for add_many: the bound append of the bucket's pending list
        self.fast: dict[tuple[str, str, str | None], tuple[Callable[[tuple[int, int]], None] | None, bool,
                                                           int | None]] = {}

    def add(self, a: Activity) -> None:
        start = a.start_ns + self.base
        end = start + max(a.duration_ns, 0)
        if self.first is None or start < self.first:
            self.first = start
        if self.last is None or end > self.last:
            self.last = end
        key = (a.kind, a.name, a.category)
        how = self.seen.get(key)
        if how is None:
            how = self.seen[key] = self._classify(a.kind, a.name, a.category)
        bucket, is_call, step = how
        if bucket is not None:
            bucket.add(start, end)
        if is_call:
            found = collective_of(a)
            if found is not None:
                family, group, coll, nbytes = found
                self.raw[family].append((start, end, group, coll, nbytes))
        if step is not None:
            self.step_ranges[step] = (start, end)

    def add_many(self, activities: Sequence[Activity]) -> None:
        """``add`` for a batch (the ingest workers' hot loop: the lookups bound once per batch)."""
        if not activities:
            return
        base = self.base
        seen = self.fast
        raw = self.raw
        lo = self.first
        hi = self.last
        steps = self.step_ranges
        for a in activities:
            start = a[2] + base
            end = start + (a[3] if a[3] > 0 else 0)
            if lo is None or start < lo:
                lo = start
            if hi is None or end > hi:
                hi = end
            key = (a[0], a[1], a[4])
            how = seen.get(key)
            if how is None:
                bucket, is_call, step = self._classify(a[0], a[1], a[4])
                how = seen[key] = (bucket.pending.append if bucket is not None else None, is_call, step)
            append, is_call, step = how
            if append is not None:
                append((start, end))
            if is_call:
                found = collective_of(a)
                if found is not None:
                    family, group, coll, nbytes = found
                    raw[family].append((start, end, group, coll, nbytes))
            if step is not None:
                steps[step] = (start, end)
        self.first = lo
        self.last = hi
        for u in (self.device_work, self.cpu_work, self.device_comm, self.host_comm):
            u.compact()

    def _classify(self, kind: str, name: str, category: str | None) -> tuple[_Union | None, bool, int | None]:
        where, is_call, step = classify_interval(kind, name, category)
        return self.buckets()[where], is_call, step

    def buckets(self) -> tuple[_Union | None, _Union, _Union, _Union, _Union]:
        """The unions by ``classify_interval``'s where-code: 0 none, 1 device work, 2 device
        communication, 3 CPU work, 4 host communication."""
        return (None, self.device_work, self.device_comm, self.cpu_work, self.host_comm)

    def _coverage(self) -> tuple[str, Covered, Covered, int]:
        """(work domain, its work's coverage, work and communication's coverage together, the length of
        communication's union): device work when the rank has any, else CPU work. With numpy when a
        union was folded (a large file: ``_Union``), as ``columnar.ColumnTimeline`` does."""
        if any(u.columns for u in self.buckets()[1:]):
            from .columnar import bucket_columns, coverage_of

            return coverage_of(self, bucket_columns)
        comm: list[tuple[int, int]]
        if self.device_work or self.device_comm:
            domain, work, comm = "device", Coverage(self.device_work.intervals()), self.device_comm.intervals()
        elif self.cpu_work or self.host_comm:
            domain, work, comm = "cpu", Coverage(self.cpu_work.intervals()), self.host_comm.intervals()
        else:
            domain, work, comm = "", Coverage(()), []
        both = Coverage([*comm, *zip(work.starts, work.ends)]) if comm else work
        return domain, work, both, union_length(comm)

    def _busy(self, work: Covered, los: list[int], starts: list[int]) -> Sequence[int]:
        """``work.within(lo, start)`` of every pair."""
        return [work.within(lo, start) for lo, start in zip(los, starts)]

    def _family_calls(self, rank: int, family: str, items: list[tuple[int, int, str, str, int | None]],
                      work: Covered, first_ns: int) -> tuple[CollectiveCall, ...]:
        """A family's calls (``raw`` items: start, end, group, collective, bytes) in time order, each
        with its window and busy time before it, numbered per (group, collective)."""
        items.sort(key=lambda x: (x[0], x[1]))
        # each call's window: from the end of the rank's previous call (or its first event) to its start
        prev_end = first_ns
        los = []
        for start, end, _group, _coll, _nbytes in items:
            los.append(min(prev_end, start))
            prev_end = max(prev_end, end)
        busy = self._busy(work, los, [i[0] for i in items])
        seqs: dict[tuple[str, str], int] = {}
        out = []
        for (start, end, group, coll, nbytes), lo, w in zip(items, los, busy):
            k = seqs.get((group, coll), 0)
            seqs[(group, coll)] = k + 1
            out.append(CollectiveCall(rank, family, group, coll, k, start, end, nbytes, w, start - lo))
        return tuple(out)

    def file_timeline(self) -> RankTimeline | None:
        """The timeline of one file's activities (its rank filled in later: -1), None when it had none."""
        return self.finish(-1) if self.first is not None else None

    def finish(self, rank: int) -> RankTimeline:
        domain, work, both, comm_ns = self._coverage()
        first_ns = self.first if self.first is not None else 0
        calls: dict[str, tuple[CollectiveCall, ...]] = {}
        for family, items in self.raw.items():
            if items:
                calls[family] = self._family_calls(rank, family, items, work, first_ns)
        return RankTimeline(
            rank=rank,
            calls=calls,
            steps=tuple(Step(n, s, e, work.within(s, e), both.within(s, e) - work.within(s, e))
                        for n, (s, e) in sorted(self.step_ranges.items())),
            first_ns=first_ns,
            last_ns=self.last if self.last is not None else 0,
            work_domain=domain,
            busy_ns=work.total,
            comm_ns=comm_ns,
            exposed_comm_ns=both.total - work.total,
        )


class Covered(Protocol):
    """An interval union's answers ``finish`` needs (``intervals.Coverage``, ``columnar.Cover``)."""

    @property
    def total(self) -> int: ...

    def within(self, a: int, b: int) -> int: ...


class Instance(NamedTuple):
    """The k-th call of one collective in one group, matched across the ranks that made it, one entry
    per participating rank in rank order: what ``Instances`` gives for one instance."""

    group: str
    name: str
    seq: int
    ranks: tuple[int, ...]
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    #: each rank's ``CollectiveCall.busy_before_ns`` and ``window_ns``
    busy_before: tuple[int, ...]
    window: tuple[int, ...]
    #: the largest message size any rank recorded, None when none did
    bytes: int | None


T = TypeVar("T")
#: an int64 column, or (holding a value past int64) a list
Ints = Union["array[int]", list[int]]


def _ints() -> array[int]:
    return array("q")


def _extend(column: Ints, values: Sequence[int]) -> Ints:
    """``column`` with ``values`` added: an int64 array while they fit, else (a hostile timestamp) a
    list from then on; the column to keep using."""
    if isinstance(column, array):
        try:
            column.extend(values if isinstance(values, array) else array("q", values))
            return column
        except OverflowError:  # (nothing was added)
            column = column.tolist()
    column.extend(values)
    return column


def _append(column: Ints, value: int) -> Ints:
    """``_extend`` by one value."""
    if isinstance(column, array):
        try:
            column.append(value)
            return column
        except OverflowError:
            column = column.tolist()
    column.append(value)
    return column


class _Built(Sequence[T]):
    """A sequence of items built on demand (``_at``) from columns: indexing, slicing (a list), and
    equality item by item."""

    def _at(self, k: int) -> T:
        raise NotImplementedError

    @overload
    def __getitem__(self, k: int) -> T: ...

    @overload
    def __getitem__(self, k: slice) -> list[T]: ...

    def __getitem__(self, k: int | slice) -> T | list[T]:
        if isinstance(k, slice):
            return [self._at(j) for j in range(*k.indices(len(self)))]
        if not -len(self) <= k < len(self):
            raise IndexError(k)
        return self._at(k % len(self))

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


class Instances(_Built[Instance]):
    """Matched instances (``Instance``) as columns: a run can have millions of calls, so per call only
    its start, end, busy_before and window, as int64 (32 bytes a call, not ~200 as tuples of ints);
    per instance its (group, collective), seq, size and participants, the participant tuples shared
    (instances usually have one). Instance k's calls are ``bounds[k]:bounds[k + 1]`` of the call
    columns, in the rank order of ``ranks_of(k)``. Indexing gives an ``Instance``, built on demand.
    Built once (``add``, ``time_sorted``, ``on_ranks``), then only read."""

    def __init__(self) -> None:
        #: (group, collective) by number, and per instance its number
        self.names: list[tuple[str, str]] = []
        self._name_ids: dict[tuple[str, str], int] = {}
        self.name: array[int] = _ints()
        self.seq: array[int] = _ints()
        #: the distinct participant tuples (global ranks, ascending), and per instance its index
        self.parts: list[tuple[int, ...]] = []
        self._part_ids: dict[tuple[int, ...], int] = {}
        self.who: array[int] = _ints()
        #: per instance the largest message size, and whether any rank recorded one
        self.size: array[int] = _ints()
        self.sized: array[int] = array("b")
        self.bounds: array[int] = array("q", [0])
        self.starts: Ints = _ints()
        self.ends: Ints = _ints()
        self.busy: Ints = _ints()
        self.window: Ints = _ints()

    def name_id(self, key: tuple[str, str]) -> int:
        """The number of (group, collective) ``key`` (added when new)."""
        n = self._name_ids.get(key)
        if n is None:
            n = self._name_ids[key] = len(self.names)
            self.names.append(key)
        return n

    def part(self, ranks: tuple[int, ...]) -> int:
        """The index of participant tuple ``ranks`` (added when new)."""
        p = self._part_ids.get(ranks)
        if p is None:
            p = self._part_ids[ranks] = len(self.parts)
            self.parts.append(ranks)
        return p

    def add(self, group: str, name: str, seq: int, ranks: tuple[int, ...], starts: Sequence[int],
            ends: Sequence[int], busy_before: Sequence[int], window: Sequence[int], size: int | None) -> None:
        """One instance, its columns in the order of ``ranks``."""
        self.name.append(self.name_id((group, name)))
        self.seq.append(seq)
        self.who.append(self.part(ranks))
        self.size.append(size or 0)
        self.sized.append(size is not None)
        self.bounds.append(self.bounds[-1] + len(ranks))
        self.starts = _extend(self.starts, starts)
        self.ends = _extend(self.ends, ends)
        self.busy = _extend(self.busy, busy_before)
        self.window = _extend(self.window, window)

    def __len__(self) -> int:
        return len(self.seq)

    def _at(self, k: int) -> Instance:
        a, b = self.bounds[k], self.bounds[k + 1]
        group, name = self.names[self.name[k]]
        return Instance(group, name, self.seq[k], self.parts[self.who[k]], tuple(self.starts[a:b]),
                        tuple(self.ends[a:b]), tuple(self.busy[a:b]), tuple(self.window[a:b]),
                        self.size[k] if self.sized[k] else None)

    def ranks_of(self, k: int) -> tuple[int, ...]:
        return self.parts[self.who[k]]

    def first_starts(self) -> list[int]:
        """Per instance its earliest call start (on the ranks' own clocks)."""
        b, s = self.bounds, self.starts
        return [min(s[b[k]:b[k + 1]]) for k in range(len(self))]

    def time_sorted(self) -> Instances:
        """These instances in time order: by their first call (on the ranks' own clocks), then group,
        collective, seq; ``self`` when they are in it already."""
        first, names, name, seq = self.first_starts(), self.names, self.name, self.seq
        order = sorted(range(len(self)), key=lambda k: (first[k], names[name[k]], seq[k]))
        if all(k == j for j, k in enumerate(order)):
            return self
        return self._take(order, {})

    def on_ranks(self, known: set[int]) -> tuple[Instances, int]:
        """These instances with only the calls of ``known`` ranks, and how many were left out for
        having fewer than two of them; ``(self, 0)`` when nothing is left out."""
        if all(len(p) >= 2 and known.issuperset(p) for p in self.parts):
            return self, 0
        keep = {p: [j for j, r in enumerate(ranks) if r in known] for p, ranks in enumerate(self.parts)}
        order = [k for k in range(len(self)) if len(keep[self.who[k]]) >= 2]
        return self._take(order, keep), len(self) - len(order)

    def _take(self, order: Sequence[int], keep: Mapping[int, list[int]]) -> Instances:
        """Instances ``order`` of these, in that order; of those whose participant tuple has
        positions in ``keep``, only the calls at those positions."""
        out = Instances()
        bounds, who, parts = self.bounds, self.who, self.parts
        for k in order:
            a, b = bounds[k], bounds[k + 1]
            positions = keep.get(who[k])
            if positions is None or len(positions) == b - a:
                ranks, pick = parts[who[k]], slice(a, b)
                starts, ends, busy, window = self.starts[pick], self.ends[pick], self.busy[pick], self.window[pick]
            else:
                ranks = tuple(parts[who[k]][j] for j in positions)
                starts, ends, busy, window = ([col[a + j] for j in positions]
                                              for col in (self.starts, self.ends, self.busy, self.window))
            group, name = self.names[self.name[k]]
            out.add(group, name, self.seq[k], ranks, starts, ends, busy, window,
                    self.size[k] if self.sized[k] else None)
        return out


@dataclass(frozen=True)
class Matching:
    family: str
    #: in time order (earliest first call first)
    instances: Instances
    #: ranks whose calls were used
    ranks: tuple[int, ...]
    notes: tuple[str, ...] = ()


def choose_family(timelines: Sequence[RankTimeline]) -> tuple[str, tuple[int, ...]]:
    """The best call family (FAMILIES order) that every rank has; else the one most ranks have
    ("" when fewer than two ranks have any calls)."""
    return choose_family_of({f: tuple(t.rank for t in timelines if t.calls.get(f)) for f in FAMILIES},
                            len(timelines))


def choose_family_of(having: Mapping[str, Sequence[int]], n_ranks: int) -> tuple[str, tuple[int, ...]]:
    """``choose_family`` from the ranks having calls of each family, out of ``n_ranks``."""
    best = ("", ())  # type: tuple[str, tuple[int, ...]]
    for family in FAMILIES:
        ranks = tuple(having.get(family, ()))
        if len(ranks) == n_ranks and len(ranks) >= 2:
            return family, ranks
        if len(ranks) >= 2 and len(ranks) > len(best[1]):
            best = (family, ranks)
    return best


def no_family_notes(ranks: Sequence[int], with_calls: Sequence[int]) -> tuple[str, ...]:
    """Why nothing could be matched: ``ranks`` all ranks, ``with_calls`` those with any calls."""
    if len(ranks) < 2:
        return ("a single rank: no cross-rank comparison is possible",)
    if not with_calls:
        return ("no collective calls on any rank (no NCCL/RCCL/gloo kernels, annotations, API calls or c10d ops)",)
    return (f"collective calls on rank {min(with_calls)} only: nothing to match them with",)


def matching_notes(family: str, ranks: Sequence[int], used: Sequence[int],
                   counts: Mapping[tuple[str, str], Mapping[int, int]]) -> list[str]:
    """What could not be matched: ranks without calls of ``family`` (``used``: those with), and per
    (group, collective) the ranks that made fewer calls than others or were alone in making them
    (``counts``: rank -> calls)."""
    notes = []
    using = set(used)
    missing = [r for r in ranks if r not in using]
    if missing:
        notes.append(f"no {family} collective calls on rank(s) {_ranges(missing)}: left out of the collective timeline")
    for (group, name), per_rank in sorted(counts.items()):
        label = f"{name}" + (f" (group {group})" if group else "")
        if len(per_rank) < 2:
            ((only, n),) = per_rank.items()
            notes.append(f"{label}: called on rank {only} only ({n} calls), not matched")
            continue
        if len(set(per_rank.values())) > 1:
            lo, hi = min(per_rank.values()), max(per_rank.values())
            notes.append(
                f"{label}: ranks made {lo}-{hi} calls ("
                + ", ".join(f"rank {r}: {n}" for r, n in sorted(per_rank.items()))
                + f"); matched in call order, the first {lo} on all of them, later calls on the ranks that have them"
            )
    return notes


def match_instances(timelines: Sequence[RankTimeline], family: str | None = None) -> Matching:
    """Match the k-th call of each (group, collective) across ranks. Ranks with fewer calls of a
    collective than others (a truncated profile, different profiling windows) take part in the
    instances they have; what could not be matched is said in ``notes``. (``match_calls`` on the
    timelines' calls, each rank's numbered in list order per (group, collective).)"""
    if family is None:
        family, ranks = choose_family(timelines)
    else:
        ranks = tuple(t.rank for t in timelines if t.calls.get(family))
    if not family:
        return Matching("", Instances(), (), no_family_notes([t.rank for t in timelines],
                                                    [t.rank for t in timelines if any(t.calls.values())]))
    calls = CallColumns()
    for t in timelines:
        mine = t.calls.get(family, ())
        if not mine:
            continue
        seqs: dict[tuple[str, str], int] = {}
        numbered = []
        for c in mine:
            k = seqs.get((c.group, c.name), 0)
            seqs[(c.group, c.name)] = k + 1
            numbered.append(k)
        calls.add([family] * len(mine), [c.group for c in mine], [c.name for c in mine], numbered,
                  [t.rank] * len(mine), [c.start_ns for c in mine], [c.end_ns for c in mine],
                  [c.bytes for c in mine], [c.busy_before_ns for c in mine], [c.window_ns for c in mine])
    return match_calls(calls, family, {t.rank: t.rank for t in timelines}, [t.rank for t in timelines], ranks)


#: a run's analysis matches the calls its ingest kept (``CallColumns``) instead of reading them back
#: when numpy is loaded anyway (rocprofv3 CSV is read as columns), or when they are this many: importing
#: numpy (~0.1-0.15 s) then costs less than reading them (~3 us a call; matching them: ~1 us)
MATCH_IMPORT_CALLS = 50_000
#: an ingest keeps at most this many calls (~10 MB): a larger run's analysis reads them back, so the
#: ingest's peak memory does not grow with the run's calls (a 1M-dispatch CSV run has ~62k)
KEEP_CALLS = 150_000


class CallColumns:
    """Collective calls as columns, added chunk by chunk (``add``): the calls an ingest stored (so the
    run's analysis needs not read them back: ``timeline.store_analysis``), or a timeline's
    (``match_instances``). ``rank`` is whatever ``match_calls``'s ``rank_ids`` maps to global ranks
    (the store's rank ids, or global ranks). ~65 bytes a call, no object per call: the columns are
    ``array.array`` (numpy is imported only to match them: ``columns``)."""

    def __init__(self, most: int | None = None) -> None:
        #: (family, group, collective) -> its number (``key``)
        self.keys: dict[tuple[str, str, str], int] = {}
        #: key, seq, rank, start, end, busy_before, window, size (0 when none), sized (0 or 1)
        self._columns = self._empty()
        self.rows = 0
        #: at most this many calls are kept (None: all); past it every one is let go (``dropped``)
        self.most = most
        self.dropped = False

    @staticmethod
    def _empty() -> tuple[Any, ...]:
        from array import array

        return tuple(array("q") for _ in range(8)) + (array("b"),)

    def add(self, family: Sequence[str], group: Sequence[str], name: Sequence[str], seq: Sequence[int],
            rank: Sequence[int], start: Sequence[int], end: Sequence[int], nbytes: Sequence[int | None],
            busy_before: Sequence[int], window: Sequence[int]) -> None:
        """Calls given as columns of equal length (``seq``: the k-th call of its (family, group,
        collective) on its rank; ``nbytes``: None where the profiler gave no size)."""
        from array import array

        if self.dropped:
            return
        if self.most is not None and self.rows + len(seq) > self.most:
            self.keys, self._columns, self.rows, self.dropped = {}, self._empty(), 0, True  # (memory back)
            return
        keys = self.keys
        key = [keys.setdefault(k, len(keys)) for k in zip(family, group, name)]
        values: tuple[Sequence[int], ...] = (key, seq, rank, start, end, busy_before, window,
                                             [b or 0 for b in nbytes], [b is not None for b in nbytes])
        for column, v in zip(self._columns, values):
            column.extend(array(column.typecode, v))  # (faster than extend(v), whose per-item path is generic)
        self.rows += len(key)

    def worth_matching(self) -> bool:
        """Whether matching these calls costs less than reading them back (MATCH_IMPORT_CALLS), and
        none was let go (``most``)."""
        import sys

        return not self.dropped and ("numpy" in sys.modules or self.rows >= MATCH_IMPORT_CALLS)

    def counts(self, family: str) -> dict[int, int]:
        """rank -> its calls of ``family``."""
        import numpy as np

        key, _seq, rank = self.columns()[:3]
        of = np.isin(key, [i for k, i in self.keys.items() if k[0] == family])
        values, n = np.unique(rank[of], return_counts=True)
        return dict(zip(values.tolist(), n.tolist()))

    def columns(self) -> tuple[Any, ...]:
        """(key, seq, rank, start, end, busy_before, window, size, sized) as numpy arrays (copies)."""
        import numpy as np

        *ints, sized = self._columns
        return (*(np.array(c, dtype=np.int64) for c in ints), np.array(sized, dtype=np.bool_))


def match_calls(calls: CallColumns, family: str, rank_ids: Mapping[int, int], ranks: Sequence[int],
                used: Sequence[int]) -> Matching:
    """The instances of ``family``'s calls: the calls with one (group, collective, seq) on two ranks
    or more, each instance's columns in global-rank order. ``rank_ids``: ``calls.rank`` -> global
    rank (calls of other ranks are left out); ``ranks``: the run's ranks with a timeline, ``used``:
    those with calls of ``family`` (for the notes). Sorts and splits the columns in numpy, into
    ``Instances``' columns (no object per call)."""
    import numpy as np

    cols = calls.columns()
    names = {i: k for k, i in calls.keys.items() if k[0] == family}
    if not names:
        return Matching(family, Instances(), tuple(used), tuple(matching_notes(family, ranks, used, {})))
    key, seq, rank, start, end, busy, window, size, sized = cols
    ids = np.array(sorted(rank_ids), dtype=np.int64)
    mine = np.isin(key, list(names)) & np.isin(rank, ids)
    key, seq, rank, start, end, busy, window, size, sized = (c[mine] for c in cols)
    glob = np.array([rank_ids[i] for i in ids.tolist()], dtype=np.int64)[np.searchsorted(ids, rank)]
    order = np.lexsort((glob, seq, key))
    key, seq, glob = key[order], seq[order], glob[order]
    # calls per (group, collective) and rank, for the notes
    low = int(glob.min()) if len(glob) else 0
    width = int(glob.max()) - low + 1 if len(glob) else 1
    pairs, made = np.unique(key * width + (glob - low), return_counts=True)
    counts: dict[tuple[str, str], dict[int, int]] = {}
    for kr, c in zip(pairs.tolist(), made.tolist()):
        counts.setdefault(names[kr // width][1:], {})[kr % width + low] = c
    notes = matching_notes(family, ranks, used, counts)
    n = len(key)
    cut = np.flatnonzero((key[1:] != key[:-1]) | (seq[1:] != seq[:-1])) + 1
    firsts = np.concatenate([[0], cut]).astype(np.int64)
    lasts = np.concatenate([cut, [n]]).astype(np.int64)
    many = lasts - firsts >= 2
    found = Instances()
    if not many.any():
        return Matching(family, found, tuple(used), tuple(notes))
    # the calls of the instances (a (group, collective, seq) made on two ranks or more), in order
    in_one = np.repeat(many, lasts - firsts)
    picked = order[in_one]
    firsts, lasts = firsts[many], lasts[many]
    big = np.where(sized[order], size[order], np.iinfo(np.int64).min)
    largest = np.maximum.reduceat(big, firsts)
    any_size = np.logical_or.reduceat(sized[order], firsts)
    counts_of = (lasts - firsts).tolist()
    found.bounds = _column(np.concatenate([[0], np.cumsum(lasts - firsts)]))
    found.starts, found.ends, found.busy, found.window = (
        _column(c[picked]) for c in (start, end, busy, window))
    # participant tuples: one per distinct run of global ranks (looked up by its bytes)
    raw = glob[in_one].tobytes()
    by_bytes: dict[bytes, int] = {}
    who = []
    at = 0
    for c in counts_of:
        piece = raw[at : at + 8 * c]
        p = by_bytes.get(piece)
        if p is None:
            p = by_bytes[piece] = found.part(tuple(array("q", piece)))
        who.append(p)
        at += 8 * c
    found.who = array("q", who)
    name_ids = {k: found.name_id(names[k][1:]) for k in np.unique(key[firsts]).tolist()}
    found.name = array("q", [name_ids[k] for k in key[firsts].tolist()])
    found.seq = _column(seq[firsts])
    found.size = _column(np.where(any_size, largest, 0))
    found.sized = array("b", any_size.astype(np.int8).tobytes())
    return Matching(family, found.time_sorted(), tuple(used), tuple(notes))


def _column(values: Any) -> array[int]:
    """A numpy integer array as an int64 ``array.array``, copied once (from its buffer)."""
    import numpy as np

    out = array("q")
    out.frombytes(np.ascontiguousarray(values, dtype=np.int64).view(np.uint8).data)
    return out


def _ranges(ranks: Sequence[int]) -> str:
    return ", ".join(str(r) for r in sorted(ranks))


class ClockOffset(NamedTuple):
    """A host's clock minus the reference host's clock, and how well it is known."""

    host: str
    offset_ns: int
    #: the largest deviation of one instance's estimate from ``offset_ns`` (after rejecting outliers):
    #: a bound on the offset's error, 0 for the reference host
    error_ns: int
    #: blocking collectives the estimate rests on (0 for the reference host)
    samples: int


@dataclass(frozen=True)
class Clocks:
    reference: str
    offsets: Mapping[str, ClockOffset]
    notes: tuple[str, ...] = ()

    def offset(self, host: str) -> int | None:
        o = self.offsets.get(host)
        return o.offset_ns if o is not None else None


#: ranks of one host leaving a collective further apart than this did not leave it together: the
#: instance is not used to estimate clocks (gloo ring steps and NCCL kernels end within ~50 us)
BLOCKING_TOLERANCE_NS = 100_000
#: at most this many instances, evenly spread over the run, are used to estimate the clocks (a median
#: of thousands of estimates does not move with more; the error bound covers the ones used)
CLOCK_SAMPLES = 4000


def estimate_offsets(instances: Instances, hosts: Mapping[int, str]) -> Clocks:
    """One clock offset per host, from the instants at which collectives complete.

    Each instance in which host h and an already-aligned host take part gives one estimate:
    (median end on h) - (median aligned end on the aligned hosts). An instance is used only where the
    ranks of each host end within BLOCKING_TOLERANCE_NS of each other (they share a clock, so a
    wider spread means the call did not block until every participant arrived). The offset is the
    median estimate; estimates further than 5 median absolute deviations (and 10 us) from it are
    rejected; the error bound is the largest remaining deviation. Hosts are aligned outward from the
    host of the lowest rank, so hosts that share no collective with it can go through another host.
    Runs with more than CLOCK_SAMPLES instances use that many, evenly spread."""
    picks: Sequence[int] = range(len(instances))
    if len(instances) > CLOCK_SAMPLES:
        step = len(instances) / CLOCK_SAMPLES
        picks = [int(i * step) for i in range(CLOCK_SAMPLES)]
    parts, who, bounds, ends_col = instances.parts, instances.who, instances.bounds, instances.ends
    all_hosts = sorted({hosts[r] for p in {who[k] for k in picks} for r in parts[p] if r in hosts})
    ranked = sorted(hosts.items())
    if not ranked:
        return Clocks("", {}, ("no rank identities: clocks not aligned",))
    reference = ranked[0][1]
    known: dict[str, ClockOffset] = {reference: ClockOffset(reference, 0, 0, 0)}
    notes: list[str] = []
    if all_hosts == [reference] or not all_hosts:
        return Clocks(reference, known, ())
    ends: list[dict[str, int]] = []  # per instance: host -> median end, for hosts whose ranks left together
    # (each distinct set of participants is split by host once; its hosts' ends are then picked in C)
    layouts: dict[int, list[tuple[str, Callable[[Sequence[int]], Sequence[int]]]]] = {}
    for k in picks:
        p = who[k]
        layout = layouts.get(p)
        if layout is None:
            where: dict[str, list[int]] = {}
            for j, r in enumerate(parts[p]):
                if r in hosts:
                    where.setdefault(hosts[r], []).append(j)
            layout = layouts[p] = [(h, _picker(js)) for h, js in where.items()]
        mine = ends_col[bounds[k] : bounds[k + 1]]
        row = {}
        for h, pick in layout:
            v = sorted(pick(mine))
            if v[-1] - v[0] <= BLOCKING_TOLERANCE_NS:
                row[h] = int(_sorted_median(v))
        if len(row) >= 2:
            ends.append(row)
    # per instance, the aligned hosts' ends on the reference clock, kept sorted as hosts are aligned,
    # so each estimate's median is read, not recomputed over the instance's hosts (that was hosts x
    # hosts x instances: 2.5 s for 64 hosts of 4,000 instances, ~10 s for 128)
    rows_of: dict[str, list[int]] = {}
    for i, row in enumerate(ends):
        for h in row:
            rows_of.setdefault(h, []).append(i)
    aligned: list[list[int]] = [[] for _ in ends]

    def align(host: str, offset: int) -> None:
        for i in rows_of.get(host, ()):
            bisect.insort(aligned[i], ends[i][host] - offset)

    align(reference, 0)
    progress = True
    while progress:
        progress = False
        for h in all_hosts:
            if h in known:
                continue
            est = []
            for i in rows_of.get(h, ()):
                ref = aligned[i]
                if ref:
                    est.append(ends[i][h] - int(_sorted_median(ref)))
            if not est:
                continue
            known[h] = offset_of(h, est)
            align(h, known[h].offset_ns)
            progress = True
    for h in all_hosts:
        if h not in known:
            notes.append(
                f"host {h}: no blocking collective in common with the other hosts, so its clock offset cannot be "
                "estimated; its ranks are left out of cross-rank time comparisons"
            )
    return Clocks(reference, known, tuple(notes))


def offset_of(host: str, estimates: Sequence[int]) -> ClockOffset:
    """A host's clock offset from its estimates (``estimate_offsets``): their median, once the ones
    further than 5 median absolute deviations (and 10 us) from it are rejected; the error bound is the
    largest remaining deviation."""
    med = int(statistics.median(estimates))
    mad = statistics.median(abs(e - med) for e in estimates)
    keep = [e for e in estimates if abs(e - med) <= max(5 * mad, 10_000)]
    offset = int(statistics.median(keep))
    return ClockOffset(host, offset, max(abs(e - offset) for e in keep), len(keep))


def _sorted_median(values: Sequence[int]) -> float:
    """``statistics.median`` of values already in order, computed as it computes it (the middle one,
    or the mean of the two middle ones), without sorting a copy."""
    m = len(values) // 2
    return values[m] if len(values) % 2 else (values[m - 1] + values[m]) / 2


def _picker(positions: list[int]) -> Callable[[Sequence[int]], Sequence[int]]:
    """A function taking the items at ``positions`` of a sequence, as a tuple, in C."""
    if len(positions) == 1:
        only = positions[0]
        return lambda seq: (seq[only],)
    return operator.itemgetter(*positions)


#: the collective ends of a run line up when their median end spread is at most the larger of these:
#: a floor (gloo/NCCL ring steps end within ~50 us; a busy shared CPU delays a rank's return by
#: milliseconds) and the median instance duration (its longest call: the first arrival waits through
#: the whole skew). Ends further apart than a whole call lasts mean a rank left before another
#: arrived: impossible for a blocking collective on comparable clocks. Measured (median spread /
#: median duration): DLRM 8 ranks 2.5 us / 574 us, torchrun4_cpu 4.1 ms / 18.8 ms, HTA 2 ranks
#: 21 ms / 53 ms (0.40: the highest of the real sets), examples/rocprof-8ranks 0 / 71 us, the recorded
#: gloo jobs (tests/test_straggler_calibration.py) 8-15 us / 0.3-4.3 ms; a rank shifted by seconds,
#: or the benchmark generator's unsynchronized ranks: seconds / us-ms.
END_SPREAD_FLOOR_NS = 1_000_000
END_SPREAD_SHARE = 1.0


def ends_line_up(end_spread_ns: int, duration_ns: int) -> bool:
    """The analysis's premise, checked: blocking collectives, all participants leave together, so
    the median end spread is small (END_SPREAD_FLOOR_NS, END_SPREAD_SHARE of the median duration).
    False: the ranks' clocks are not comparable (a rank on a clock of its own, wrong host offsets,
    wrongly matched calls) or the calls do not block, and arrival order means nothing."""
    return end_spread_ns <= max(END_SPREAD_FLOOR_NS, END_SPREAD_SHARE * duration_ns)


#: two arrivals closer than this (or than twice the clock error of their hosts) are a tie
TIE_NS = 1_000


class InstanceResult(NamedTuple):
    """One matched instance on the common clock, what ``InstanceResults`` gives for one: its
    participants as columns, in rank order (``arrivals``: in arrival order)."""

    group: str
    name: str
    seq: int
    #: the participating ranks on a known clock, in rank order
    ranks: tuple[int, ...]
    #: their arrivals, ns on the common clock, in the same order
    times: tuple[int, ...]
    skew_ns: int
    #: the rank every other participant waited for; None when the latest arrivals tie
    last_rank: int | None
    #: ranks tied for last (empty when ``last_rank`` is set)
    tied: tuple[int, ...]
    bytes: int | None
    #: the time the other participants waited for the last arrival (the sum of ``waits``)
    wait_total_ns: int
    #: each participant's work before its call and the window it was measured in (``CollectiveCall``
    #: busy_before_ns and window_ns), in the same order, for the cause
    busy_before: tuple[int, ...]
    window: tuple[int, ...]
    #: the latest arrival (``latest_ns - skew_ns``: the first)
    latest_ns: int

    @property
    def first_ns(self) -> int:
        return self.latest_ns - self.skew_ns

    @property
    def arrivals(self) -> tuple[tuple[int, int], ...]:
        """(rank, arrival ns on the common clock), earliest first (rank order among equal arrivals)."""
        return tuple((r, t) for t, r in sorted(zip(self.times, self.ranks)))

    @property
    def waits(self) -> dict[int, int]:
        """rank -> time it waited for the latest arrival."""
        return {r: self.latest_ns - t for r, t in zip(self.ranks, self.times)}


class InstanceResults(_Built[InstanceResult]):
    """The matched instances on the common clock (``InstanceResult``), as columns beside the
    ``Instances`` they come from (only the ranks on a known clock): per call its arrival (``times``,
    the instances' own starts when every host has offset 0), per instance its skew, last rank (-1 on
    a tie), the ranks tied for last, the total wait and the latest arrival. Indexing gives an
    ``InstanceResult``, built on demand; the methods below answer the verdict's questions without
    building one per instance."""

    def __init__(self, instances: Instances | None = None, times: Ints | None = None) -> None:
        self.instances = instances if instances is not None else Instances()
        self.times: Ints = times if times is not None else self.instances.starts
        self.skew: Ints = _ints()
        self.last: array[int] = _ints()
        self.tied: list[tuple[int, ...]] = []
        self.wait: Ints = _ints()
        self.latest: Ints = _ints()

    def __len__(self) -> int:
        return len(self.last)

    def _at(self, k: int) -> InstanceResult:
        i = self.instances[k]
        a, b = self.instances.bounds[k], self.instances.bounds[k + 1]
        last = self.last[k]
        return InstanceResult(i.group, i.name, i.seq, i.ranks, tuple(self.times[a:b]), self.skew[k],
                              None if last < 0 else last, self.tied[k], i.bytes, self.wait[k], i.busy_before,
                              i.window, self.latest[k])

    def ties(self) -> int:
        """How many instances ended in a tie (no last rank)."""
        return self.last.count(-1)

    def first_ns(self) -> int:
        """The earliest arrival of all (common clock); the instances must not be empty."""
        return int(min(map(operator.sub, self.latest, self.skew)))

    def latest_ns(self) -> int:
        """The latest arrival of all (common clock); the instances must not be empty."""
        return max(self.latest)

    def ranks(self) -> tuple[int, ...]:
        """Every rank that took part in an instance, ascending."""
        inst = self.instances
        return tuple(sorted(set().union(*(inst.parts[p] for p in set(inst.who)))))

    def sizes_with_last(self) -> list[int]:
        """Per instance with a last rank, its number of participants."""
        parts, who = self.instances.parts, self.instances.who
        return [len(parts[who[k]]) for k, last in enumerate(self.last) if last >= 0]

    def of_rank(self, rank: int) -> Iterator[tuple[int, Sequence[int], Sequence[int], Sequence[int]]]:
        """Per instance ``rank`` took part in, in order: its position among the participants, and the
        participants' arrivals, busy_before and window (slices of the columns)."""
        inst = self.instances
        where = {p: ranks.index(rank) for p, ranks in enumerate(inst.parts) if rank in ranks}
        bounds, times, busy, window = inst.bounds, self.times, inst.busy, inst.window
        for k, p in enumerate(inst.who):
            j = where.get(p)
            if j is not None:
                a, b = bounds[k], bounds[k + 1]
                yield j, times[a:b], busy[a:b], window[a:b]


@dataclass(frozen=True)
class RankResult:
    rank: int
    host: str
    local_rank: int | None
    instances: int
    #: instances it entered last (alone)
    last: int
    #: instances it tied for last
    tied_last: int
    wait_caused_ns: int
    wait_suffered_ns: int
    busy_ns: int
    idle_ns: int
    span_ns: int
    comm_ns: int
    exposed_comm_ns: int
    work_domain: str


@dataclass(frozen=True)
class StepResult:
    step: int
    #: the rank the others waited on in this step (largest wait caused), None when none or tied
    waited_on: int | None
    wait_caused_ns: int
    #: the rank with the longest ProfilerStep range: usually a *victim* (it waited), shown for contrast
    longest_rank: int
    longest_ns: int
    ranks: Mapping[int, StepRank]


class StepRank(NamedTuple):
    """One rank in one step. An instance counts in the step (of each rank) holding that rank's arrival."""

    duration_ns: int
    last: int
    wait_caused_ns: int
    wait_suffered_ns: int
    busy_ns: int
    idle_ns: int
    exposed_comm_ns: int


@dataclass(frozen=True)
class Analysis:
    """Everything the collective timeline says about a run."""

    family: str
    instances: InstanceResults
    ranks: Mapping[int, RankResult]
    steps: tuple[StepResult, ...]
    clocks: Clocks
    notes: tuple[str, ...] = ()
    #: median over instances of the end spread (latest minus earliest end of the participants, common
    #: clock), and of the instance's duration (its longest participant's call); None without instances
    end_spread_ns: int | None = None
    duration_ns: int | None = None
    #: set when the ends do not line up (``ends_line_up``): the timeline names no rank, and says this
    apart: str | None = None

    @property
    def has_timeline(self) -> bool:
        return bool(self.instances)


def analyze(
    timelines: Sequence[RankTimeline], identities: Mapping[int, RankIdentity], clocks: Clocks | None = None
) -> Analysis:
    """Match, align and attribute (module doc). Ranks missing from ``identities`` share the clock
    of the host named ``""``. ``clocks``: offsets estimated before from the same timelines (the
    store keeps them), else estimated here. Never raises for the shape of the data: what could not
    be answered is in ``notes``."""
    return analyze_matched(timelines, match_instances(timelines), identities, clocks)


def analyze_matched(
    timelines: Sequence[RankTimeline], matching: Matching, identities: Mapping[int, RankIdentity],
    clocks: Clocks | None = None,
) -> Analysis:
    """``analyze`` of instances matched before (``match_instances``, or the store's own matching of
    its stored calls, which reads no call objects): ``timelines`` give every rank's busy, idle and
    step figures (their ``calls`` are not read here) and must include every rank of ``matching``."""
    hosts = {t.rank: identities[t.rank].host if t.rank in identities else "" for t in timelines}
    if clocks is None:
        clocks = estimate_offsets(matching.instances, hosts)
    notes = list(matching.notes) + list(clocks.notes)
    caused = {t.rank: 0 for t in timelines}
    suffered = {t.rank: 0 for t in timelines}
    last = {t.rank: 0 for t in timelines}
    tied = {t.rank: 0 for t in timelines}
    seen = {t.rank: 0 for t in timelines}
    # per rank on a known clock: its host's offset and error
    shift: dict[int, int] = {}
    error: dict[int, int] = {}
    for t in timelines:
        off = clocks.offsets.get(hosts[t.rank])
        if off is not None:
            shift[t.rank] = off.offset_ns
            error[t.rank] = off.error_ns
    # ranks on a host whose clock is unknown are left out, and instances left with fewer than two ranks
    insts, dropped = matching.instances.on_ranks(set(shift))
    same_clock = not any(shift.values())
    several = len(clocks.offsets) > 1
    spreads: list[int] = []  # per instance: latest end - earliest end on the common clock
    durations: list[int] = []  # per instance: its longest participant's call
    # per participant tuple: their offsets, the largest clock error among them, and the tie threshold
    per_part = []
    for rk in insts.parts:
        err = max(error[r] for r in rk)
        per_part.append((tuple(shift[r] for r in rk), TIE_NS if not several or 2 * err < TIE_NS else 2 * err))
    # per participant tuple: instances, the sum of their latest arrivals, each participant's sum of arrivals
    sums: dict[int, tuple[int, int, list[int]]] = {}
    results = InstanceResults(insts, None if same_clock else _ints())
    times, skews, lasts, ties, waits, latests = (results.times, results.skew, results.last, results.tied,
                                                 results.wait, results.latest)
    bounds, starts_col, ends_col, parts = insts.bounds, insts.starts, insts.ends, insts.parts
    no_tie: tuple[int, ...] = ()
    for k, p in enumerate(insts.who):
        rk = parts[p]
        a, b = bounds[k], bounds[k + 1]
        starts, ends = starts_col[a:b], ends_col[a:b]
        offsets, tie_ns = per_part[p]
        durations.append(max(map(operator.sub, ends, starts)))
        if same_clock:
            arrive: Sequence[int] = starts
            leave: Sequence[int] = ends
        else:
            arrive = tuple(map(operator.sub, starts, offsets))
            leave = tuple(map(operator.sub, ends, offsets))
            times = _extend(times, arrive)
        spreads.append(max(leave) - min(leave))
        order = sorted(arrive)
        latest = order[-1]
        if latest - order[-2] > tie_ns:
            last_rank = rk[arrive.index(latest)]
            tops = no_tie
        else:
            last_rank = -1
            tops = tuple(sorted(r for r, at in zip(rk, arrive) if latest - at <= tie_ns))
        total_wait = latest * len(arrive) - sum(arrive)
        skews = _append(skews, latest - order[0])
        lasts.append(last_rank)
        ties.append(tops)
        waits = _append(waits, total_wait)
        latests = _append(latests, latest)
        # wait suffered, summed per participant tuple: sum of latest arrivals minus the rank's own arrivals
        acc = sums.get(p)
        sums[p] = (1, latest, list(arrive)) if acc is None else (
            acc[0] + 1, acc[1] + latest, list(map(operator.add, acc[2], arrive)))
        if last_rank >= 0:
            last[last_rank] += 1
            caused[last_rank] += total_wait
        else:
            for r in tops:
                tied[r] += 1
    results.times, results.skew, results.wait, results.latest = times, skews, waits, latests
    for p, (count, latest_sum, arrived) in sums.items():
        for r, at in zip(parts[p], arrived):
            suffered[r] += latest_sum - at
            seen[r] += count
    if dropped:
        notes.append(f"{dropped} instance(s) had fewer than two ranks on a known clock and were left out")
    ranks_out = {
        t.rank: RankResult(
            t.rank, hosts[t.rank], identities[t.rank].local_rank if t.rank in identities else None, seen[t.rank],
            last[t.rank], tied[t.rank], caused[t.rank], suffered[t.rank], t.busy_ns, t.idle_ns, t.span_ns,
            t.comm_ns, t.exposed_comm_ns, t.work_domain,
        )
        for t in timelines
    }
    spread = int(statistics.median(spreads)) if spreads else None
    duration = int(statistics.median(durations)) if durations else None
    apart = None
    if spread is not None and duration is not None and not ends_line_up(spread, duration):
        apart = (f"collective ends do not line up (median end spread {fmt_ns(spread)} over {len(spreads)} "
                 "instances: clocks not comparable or collectives not blocking); their median duration is "
                 f"{fmt_ns(duration)}, so arrival order and waits are not evidence of a straggler"
                 + _odd_one_out(insts, shift, hosts))
        notes.append(apart)
    steps = _steps(timelines, results, hosts, clocks)
    return Analysis(matching.family, results, ranks_out, steps, clocks, tuple(notes), spread, duration, apart)


#: at most about this many instances are looked at for the one rank apart (``_odd_one_out``), evenly
#: spaced: a Python step each
ODD_ONE_INSTANCES = 10_000


def _odd_one_out(insts: Instances, shift: Mapping[int, int], hosts: Mapping[int, str]) -> str:
    """When the ends do not line up: the one rank whose calls end apart from the others' (which line up
    without it) in most instances, if there is one and it shares its host's clock with another rank of
    those instances. Then that clock is not the cause: its file was recorded at another time (another
    run, another profiling window) or its time base is wrong. "" otherwise. Read only when the ends do
    not line up."""
    far: dict[int, list[int]] = {}
    n = 0
    step = max(1, len(insts.who) // ODD_ONE_INSTANCES)
    for k in range(0, len(insts.who), step):
        rk = insts.parts[insts.who[k]]
        if len(rk) < 3:  # (of two, neither is the odd one)
            continue
        n += 1
        a, b = insts.bounds[k], insts.bounds[k + 1]
        leave = [e - shift[r] for e, r in zip(insts.ends[a:b], rk)]
        mid = sorted(leave)[len(leave) // 2]
        i = max(range(len(leave)), key=lambda j: abs(leave[j] - mid))
        others = leave[:i] + leave[i + 1:]
        longest = max(map(operator.sub, insts.ends[a:b], insts.starts[a:b]))
        if ends_line_up(max(others) - min(others), longest):  # (else no single rank is apart)
            far.setdefault(rk[i], []).append(abs(leave[i] - mid))
    if not far:
        return ""
    rank, gaps = max(far.items(), key=lambda kv: len(kv[1]))
    mates = sorted(r for r in shift if r != rank and hosts.get(r) == hosts.get(rank) and hosts.get(rank))
    if 2 * len(gaps) <= n or not mates:
        return ""
    looked = " looked at" if step > 1 else ""
    return (f"; rank {rank} ends {fmt_ns(int(statistics.median(gaps)))} from the others in {len(gaps)} of {n} "
            f"instances{looked}, on the one clock of host {hosts[rank]} that rank(s) {rank_ranges(mates)} share: "
            "its file is likely from another run or profiling window, or its time base is wrong")


def _steps(timelines: Sequence[RankTimeline], results: InstanceResults, hosts: Mapping[int, str],
           clocks: Clocks) -> tuple[StepResult, ...]:
    """Per ProfilerStep#N present on at least two ranks: who the others waited on, and, for
    contrast, whose step was longest; per rank its figures in that step."""
    by_step: dict[int, dict[int, Step]] = {}
    for t in timelines:
        for s in t.steps:
            by_step.setdefault(s.number, {})[t.rank] = s

    if not by_step:
        return ()
    # per rank: its steps by start, and its clock offset (arrivals back on the rank's own clock)
    starts: dict[int, list[int]] = {}
    ordered: dict[int, list[Step]] = {}
    for t in timelines:
        ss = sorted(t.steps, key=lambda s: s.start_ns)
        ordered[t.rank] = ss
        starts[t.rank] = [s.start_ns for s in ss]
    shift = {t.rank: clocks.offset(hosts[t.rank]) or 0 for t in timelines}

    def step_of(rank: int, arrival: int) -> int | None:
        t = arrival + shift[rank]
        k = bisect.bisect_right(starts[rank], t) - 1
        if k >= 0:
            s = ordered[rank][k]
            if s.start_ns <= t < s.end_ns:
                return s.number
        return None

    last: dict[tuple[int, int], int] = {}
    caused: dict[tuple[int, int], int] = {}
    suffered: dict[tuple[int, int], int] = {}
    inst = results.instances
    bounds, parts, times = inst.bounds, inst.parts, results.times
    for k, p in enumerate(inst.who):
        a = bounds[k]
        latest, last_rank = results.latest[k], results.last[k]
        for r, at in zip(parts[p], times[a : bounds[k + 1]]):
            n = step_of(r, at)
            if n is None:
                continue
            suffered[(n, r)] = suffered.get((n, r), 0) + latest - at
            if r == last_rank:
                last[(n, r)] = last.get((n, r), 0) + 1
                caused[(n, r)] = caused.get((n, r), 0) + results.wait[k]
    out = []
    for n, per_rank in sorted(by_step.items()):
        if len(per_rank) < 2:
            continue
        out.append(step_result(n, {
            r: StepRank(s.end_ns - s.start_ns, last.get((n, r), 0), caused.get((n, r), 0), suffered.get((n, r), 0),
                        s.busy_ns, s.idle_ns, s.exposed_comm_ns)
            for r, s in sorted(per_rank.items())
        }))
    return tuple(out)


def step_result(number: int, ranks: Mapping[int, StepRank]) -> StepResult:
    """A step's result from its ranks' figures (rank order): the rank waited on (the largest wait
    caused, when it is above 0 and unique) and the rank with the longest step (the lowest on a tie)."""
    top = max(x.wait_caused_ns for x in ranks.values())
    leaders = [r for r, x in ranks.items() if x.wait_caused_ns == top]
    waited_on = leaders[0] if top > 0 and len(leaders) == 1 else None
    longest = max(x.duration_ns for x in ranks.values())
    longest_rank = min(r for r, x in ranks.items() if x.duration_ns == longest)
    return StepResult(number, waited_on, top, longest_rank, longest, ranks)
