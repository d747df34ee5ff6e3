"""One check of what readers yield and of the identity they claim, shared by every format.

Readers turn hostile or damaged files into records; the store must never hold a record that is
wrong in a way later queries cannot see (a negative duration flips a straggler verdict, text in an
integer column breaks every sum, a rank of -1 or 10^9 is a rank of no job). Every batch of records
passes ``activities`` / ``counters`` / ``aggregate`` before it is turned into rows (the hooks are in
``ingest_workers._parse``), and every rank hint passes ``rank_hint`` (in ``identity.resolve_file``).
A violation is an ``InputError`` naming the file and the field; the ingest then rolls back.

The limits below are part of profdb's documented guarantees (README, "Guarantees")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from itertools import chain
from operator import add, is_not, itemgetter
from pathlib import Path
from typing import Any

from .errors import InputError, ProfdbError, RankIdentityError
from .records import Activity, Aggregate, Counter, RankHint, SourceInfo

#: the store's integer columns are signed 64-bit (SQLite INTEGER, PostgreSQL BIGINT)
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
#: largest world size accepted from any source (file, manifest, environment); today's largest jobs
#: have ~10^5 ranks. Never iterate over an untrusted world size beyond this.
MAX_WORLD_SIZE = 1 << 20
#: a rank is in 0 .. MAX_WORLD_SIZE - 1 (and below the world size when one is known)
MAX_RANK = MAX_WORLD_SIZE - 1
#: longest kernel, op, annotation or counter name, in characters (the longest C++ template kernel
#: names in the samples are ~2,000); longer is a damaged or hostile file
MAX_NAME_CHARS = 1 << 16

_not_none = partial(is_not, None)
_INT_FIELDS_FROM = 5
_START, _DURATION, _NAME = itemgetter(2), itemgetter(3), itemgetter(1)
_OPTIONAL_INTS = itemgetter(
    *range(_INT_FIELDS_FROM, 16)
)  # Activity fields device .. block_z (indexes 5..15) are optional integers
_FIX = "the file is damaged or was edited: re-copy it from the profiler's output, or leave it out of the ingest"


def _bad(path: Path, what: str) -> InputError:
    return InputError(f"{path}: {what}; {_FIX}")


def shown(value: object, most: int = 80) -> str:
    """A value as an error message quotes it: its repr, cut after ``most`` characters (a damaged
    file's cell can be megabytes long; a name up to MAX_NAME_CHARS)."""
    text = repr(value)
    return text if len(text) <= most else f"{text[:most]}... ({len(text):,} characters)"


def _ints(path: Path, field: str, column: Sequence[Any], optional: bool) -> None:
    """Every value of ``column`` is an int (never a bool, a float or a str) inside int64."""
    types = set(map(type, column))
    allowed = {int, type(None)} if optional else {int}
    if not types <= allowed:
        bad = next(v for v in column if type(v) not in allowed)
        raise _bad(path, f"{field} is {shown(bad)} ({type(bad).__name__}), not an integer")
    values = list(filter(_not_none, column)) if type(None) in types else column
    if values:
        low, high = min(values), max(values)
        if low < INT64_MIN or high > INT64_MAX:
            raise _bad(path, f"{field} {low if low < INT64_MIN else high} does not fit in 64 bits")


def activities(batch: Sequence[Activity], path: Path, time_base_ns: int = 0, unsigned: bool = False) -> None:
    """Checks a batch of Activity records: integer times inside int64, no negative duration
    (an end before its start), every start and end on the file's clock (``time_base_ns`` added, as
    timelines and exports add it) inside int64 too, string names, integer optional columns. With
    ``unsigned`` (the reader's ``UNSIGNED_TIMES``: its producer writes unsigned times), no start
    before the clock's zero (``before_zero``).
    Column-wise C loops (``map``/``itemgetter``/``set``): no per-record Python code. ~0.9 us a record on a
    generated Kineto trace's batches (session 32, 81,676 records; more than half of it the 11 optional
    integers' check, whose values are scattered objects: building a set of the values instead is
    unsound, ``1 == True``, and filtering out None before typing them was the fastest of four ways)."""
    if not batch:
        return
    starts = list(map(_START, batch))
    durations = list(map(_DURATION, batch))
    _ints(path, "start time (ns)", starts, optional=False)
    _ints(path, "duration (ns)", durations, optional=False)
    if min(durations) < 0:
        a = next(a for a in batch if a.duration_ns < 0)
        raise _bad(
            path,
            f"{a.kind} {shown(a.name)} at {a.start_ns} ns ends {-a.duration_ns} ns before it starts "
            "(negative duration)",
        )
    first = min(starts)
    if unsigned and time_base_ns + first < 0:
        a = next(a for a in batch if time_base_ns + a.start_ns < 0)
        raise before_zero(path, a.kind, a.name, a.start_ns, time_base_ns)
    if time_base_ns + max(map(add, starts, durations)) > INT64_MAX or time_base_ns + first < INT64_MIN:
        a = next(a for a in batch if not INT64_MIN <= time_base_ns + a.start_ns <= time_base_ns + a.start_ns
                 + a.duration_ns <= INT64_MAX)
        raise _bad(path, f"{a.kind} {shown(a.name)} at {a.start_ns} ns, {a.duration_ns} ns long, ends past what "
                   f"64 bits hold on the file's clock (time base {time_base_ns} ns)")
    names = list(map(_NAME, batch))
    if set(map(type, names)) != {str}:
        raise _bad(path, f"an activity name is {shown(next(n for n in names if type(n) is not str))}, not a string")
    _names(path, names)
    optional = list(filter(_not_none, chain.from_iterable(map(_OPTIONAL_INTS, batch))))
    if not set(map(type, optional)) <= {int} or (optional and (min(optional) < INT64_MIN or max(optional) > INT64_MAX)):
        for i in range(_INT_FIELDS_FROM, 16):  # find the culprit (rare: costs what it costs)
            _ints(path, Activity._fields[i], [a[i] for a in batch], optional=True)


def before_zero(path: Path, kind: str, name: object, start_ns: int, time_base_ns: int = 0) -> InputError:
    """A start before its clock's zero in a file whose producer writes unsigned times (rocprofv3,
    rpd_tracer: ns of CLOCK_BOOTTIME or CLOCK_MONOTONIC): no profiler wrote it. Stored, the one
    record spanned from there to its end (a kernel of 17 hours in a damaged rocprofv3 JSON whose
    start_timestamp was -5), and led the hotspots."""
    base = f" (time base {time_base_ns} ns)" if time_base_ns else ""
    return _bad(path, f"{kind} {shown(name)} starts at {start_ns} ns{base}, before its clock's zero, which the "
                "profiler that wrote this format never gives (its times are unsigned)")


def summed(path: Path, total_ns: int) -> None:
    """A name's total duration in a file inside int64: the summary's BIGINT (no real profile comes near:
    2**63 ns are 292 years; past it was a traceback at the insert, or, read as columns, a total wrapped
    negative in a batch's int64 sums: ``columnar.sums``)."""
    if total_ns > INT64_MAX:
        raise _bad(path, f"its durations add up to {total_ns} ns, past what 64 bits hold")


def spanned(path: Path, first_ns: int, last_ns: int) -> None:
    """The time a file's activity spans (its first start to its last end) fits in 64 bits: what the
    store keeps of its timeline is shorter (a collective call's window, busy and communication time),
    so it fits too. Each time does (``activities``), but not always their difference."""
    if last_ns - first_ns > INT64_MAX:
        raise _bad(path, f"its activity spans {last_ns - first_ns} ns (from {first_ns} to {last_ns} ns), past "
                   "what 64 bits hold (292 years)")


class PastInt64(InputError):
    """A figure of one rank, added up over its files, past what 64 bits hold: each file's own totals
    are checked (``summed``), their sum where a rank's files meet (``bulk.Writer.merge``, the summary's
    upsert onto stored rows: ``bulk.check_summed``, ``timeline.save_timelines``). ``rank_id``: the
    store's id of the rank; the ingest names the rank's files (``ingest_load``)."""

    def __init__(self, rank_id: int, what: str, value: object) -> None:
        self.rank_id, self.what, self.value = rank_id, what, value
        super().__init__(self.said_of("one rank's files"))

    def said_of(self, whose: str) -> str:
        """The message, ``whose`` naming the files added up."""
        return (f"{self.what} of {whose} add up to {self.value} ns, past what 64 bits hold; each file's own fit, "
                "so one of them is damaged or was edited, or they are not of one rank: re-copy them from the "
                "profiler's output, or leave one out of the ingest")


def merged(rank_id: int, what: str, value: int) -> None:
    """``value``, ``what`` of rank ``rank_id`` added up over its files, fits the store's BIGINT."""
    if value > INT64_MAX:
        raise PastInt64(rank_id, what, value)


def past_int64(e: PastInt64, files: Sequence[object], rank: int, stored: bool) -> InputError:
    """``e`` as the ingest reports it: naming the rank's ``files`` (``rank``: its global rank;
    ``stored``: the rank had files in the store before)."""
    named = ", ".join(map(str, files[:3])) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    whose = f"rank {rank}'s files" + (" with those stored for it before" if stored else "")
    return InputError(f"{named}: {e.said_of(whose)}")


def counters(batch: Sequence[Counter], path: Path) -> None:
    """Checks a batch of Counter records: finite values (NaN/inf cannot be stored alike by both
    engines), positive sample counts, integer dispatch ids inside int64."""
    if not batch:
        return
    cols = [list(map(itemgetter(i), batch)) for i in range(7)]
    for i in (5, 6):
        if set(map(type, cols[i])) != {type(None)}:
            bad = [v for v in cols[i] if v is not None and not _finite(v)]
            if bad:
                raise _bad(path, f"counter {Counter._fields[i]} {shown(bad[0])} is not a finite number")
    if not set(map(type, cols[2])) <= {float, int} or not all(map(math.isfinite, cols[2])):
        c = next(c for c in batch if not _finite(c.value))
        raise _bad(path, f"counter {shown(c.name)} of {shown(c.kernel)} has the value {shown(c.value)}, not a finite "
                   "number")
    _ints(path, "dispatch id", cols[3], optional=True)
    _ints(path, "counter samples", cols[4], optional=False)
    if min(cols[4]) < 1:
        raise _bad(path, f"a counter aggregates {min(cols[4])} samples (at least 1 expected)")
    if set(map(type, cols[0])) | set(map(type, cols[1])) != {str}:
        raise _bad(path, "a counter or kernel name is not a string")
    _names(path, cols[0])
    _names(path, cols[1])


def _names(path: Path, names: Sequence[str]) -> None:
    longest = max(map(len, names))
    if longest > MAX_NAME_CHARS:
        name = next(n for n in names if len(n) == longest)
        raise _bad(
            path, f"a name is {longest} characters long ({name[:60]!r}...), over profdb's limit of {MAX_NAME_CHARS}"
        )


def _finite(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def aggregate(g: Aggregate, path: Path) -> None:
    """Checks one Aggregate (Metrix statistics): integer, non-negative, consistent."""
    _ints(path, "aggregate calls/total/min/max", (g.calls, g.total_ns, g.min_ns, g.max_ns), optional=False)
    if min(g.calls, g.total_ns, g.min_ns, g.max_ns) < 0 or g.min_ns > g.max_ns:
        raise _bad(
            path,
            f"the statistics of {shown(g.name)} are impossible (calls {g.calls}, total {g.total_ns} ns, "
            f"min {g.min_ns} ns, max {g.max_ns} ns)",
        )
    if g.sum_sq_ns is not None and not _finite(g.sum_sq_ns):
        raise _bad(path, f"the sum of squares of {shown(g.name)} is {shown(g.sum_sq_ns)}, not a finite number")
    if type(g.name) is not str:
        raise _bad(path, f"an aggregate name is {shown(g.name)}, not a string")
    _names(path, [g.name])


def rank_hint(hint: RankHint, path: Path, origin: str, skip: set[str] | frozenset[str] = frozenset()) -> None:
    """A source's identity claim: ranks are integers (never true/false, text or floats) in
    0..MAX_RANK, the world size in 1..MAX_WORLD_SIZE. Raises RankIdentityError naming both.
    Fields in ``skip`` (overridden by a flag) are not looked at."""
    for f in ("global_rank", "local_rank", "node_rank", "world_size", "pid", "device"):
        v = getattr(hint, f)
        if v is None or f in skip:
            continue
        if type(v) is not int:
            raise RankIdentityError(
                f"{path}: {origin} gives {f} = {shown(v)} ({type(v).__name__}), not an integer; "
                "fix that source, or override it with --rank / --rank-from-path"
            )
        low, high = (1, MAX_WORLD_SIZE) if f == "world_size" else (0, INT64_MAX if f == "pid" else MAX_RANK)
        if f in ("pid", "device"):
            low = -1 if f == "device" else 0
        if not low <= v <= high:
            raise RankIdentityError(
                f"{path}: {origin} gives {f} = {v}, outside {low}..{high} (profdb's limit); "
                "fix that source, or override it with --rank / --rank-from-path"
            )
    if hint.hostname is not None and "hostname" not in skip and type(hint.hostname) is not str:
        raise RankIdentityError(
            f"{path}: {origin} gives hostname = {shown(hint.hostname)}, not a string; fix that source or pass "
            "--hostname"
        )


def check_readable(path: Path, whole_up_to: int = 0) -> None:
    """An input file profdb cannot open (permissions, a vanished file) is an error naming it, before
    detection would call it 'not a profiler output' or a folder's walk would skip it quietly. The
    head read is kept for detection (``readers.base.read_head``: the whole file when it is at most
    ``whole_up_to`` bytes)."""
    from .readers.base import read_head

    try:
        read_head(path, whole_up_to)
    except OSError as e:
        raise InputError(
            f"{path}: cannot read it ({e.strerror or e}); check its permissions (ls -l), "
            "or leave it out of the inputs"
        ) from e


def unreadable_folder(e: OSError) -> None:
    """os.walk's onerror: a folder below an input that cannot be listed is an error, not skipped."""
    raise InputError(
        f"{e.filename}: cannot list this folder ({e.strerror or e}); check its permissions, "
        "or name the readable folders one by one"
    ) from e


#: what a reader's unexpected failure on a hostile file looks like (anything else is a bug or the system's)
READ_FAILURES = (ValueError, KeyError, TypeError, IndexError, AttributeError, ArithmeticError, RecursionError)


def inspect_file(reader: Any, path: Path) -> SourceInfo:
    """``reader.inspect(path)``, with a reader's unexpected failure on a damaged or hostile file
    (ValueError, RecursionError, ...) turned into an InputError naming the file."""
    try:
        info: SourceInfo = reader.inspect(path)
    except ProfdbError:
        raise
    except READ_FAILURES as e:
        raise InputError(
            f"{path}: cannot read it as {reader.NAME} ({type(e).__name__}: {str(e)[:200]}); "
            "the file is damaged or of an unsupported variant: re-copy it or pass --format"
        ) from e
    except OSError as e:
        raise InputError(
            f"{path}: cannot read it ({e.strerror or e}); check the file's permissions and that it is complete"
        ) from e
    base = info.time_base_ns
    if type(base) is not int or not INT64_MIN <= base <= INT64_MAX:
        raise _bad(path, f"its time base (the clock its times count from) is {shown(base)}, not a time in ns "
                   "inside 64 bits")
    return info
