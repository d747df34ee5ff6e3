"""Parsing input files in worker processes for ``ingest_paths``, while the one writer (the calling
process) owns the store's only transaction.

Each worker takes the next file (largest first, from a shared counter), streams its records through
the file's reader and turns them into the writer's row tuples in batches: ids of interned names come
from the writer (one request per batch that meets new names, answered from its in-memory table;
the worker sends it, does the batch's work that needs no ids, then reads the answer: ``_Names``),
categories are classified once per name, and the per-(rank, name, kind) summary and the steps of the
file are kept in the worker and sent when the file is done (a file read before the store's ids came:
its rows built with names where the ids go, completed when they come, ``_Late``). A file read as
column batches (``ingest_columns``) asks for nothing: its batches carry their names and launch shapes
(``bulk.Interned``) and the writer puts the ids in; a run of small such files (``_group_end``) is sent
once it is parsed, their batches and summaries joined (``ingest_columns``). The writer only inserts
rows with executemany and merges summaries. Workers never open the store: a failed or interrupted ingest
still rolls back in one place. Messages go over two pipes per worker (``_Duplex``; the worker's raised
to ``PIPE_BYTES``), so a slow writer makes the workers wait (memory stays bounded by a few batches per
worker).

Small ingests (or PROFDB_INGEST_WORKERS=0) run the same parsing in the writer's process
(``parse_here``). Messages, worker -> writer (``Message``): ``NamesMsg`` (answered by the ids, a
list), ``RowsMsg``, ``DoneMsg`` (the file's ``Parsed``), ``GroupDoneMsg`` (a group's), ``ErrorMsg``,
``ExitMsg``."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from operator import itemgetter, mul
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar, cast

from . import classify, lifetime, readers, validate
from .batches import LAUNCHES_KEPT, SHAPE_COLS, cores
from .collectives import RankTimeline, TimelineBuilder, step_number
from .intervals import SelfTotals
from .readers.base import ColumnReader
from .records import NESTED_KINDS as NESTED_KINDS  # (defined where the kinds are)
from .records import Activity, Aggregate, Counter, SourceInfo

if TYPE_CHECKING:
    from .columnar import GroupBatches  # (numpy: loaded by the ingests that read columns only)
    from .ingest_columns import GroupParse

BATCH = 20000
_N = TypeVar("_N", int, str)  # a summary key's name: its id, or the name itself (NamedSummaryRow)
#: below this much input (gzip files counted uncompressed: ``ingest.content_bytes``) the files are parsed
#: in the writer process (no start-up cost). 16 MB until session 47, when workers forked before the writer
#: imports SQLAlchemy (session 20) had made them pay off sooner; measured on real Kineto inputs, 10-12
#: interleaved pairs, median wall: the 8-rank DLRM job (7.4 MB) 757 -> 593 ms (as .json.gz, 0.5 MB: 808 ->
#: 685), TraceLens's Qwen H100 trace (8.6 MB) 613 -> 541 (.json.gz: 687 -> 573), the DeepSeek rank (3.1 MB)
#: 527 -> 509, the torchrun4 CPU job (1 MB) 427 -> 442: parsed in the writer below 4 MB. 2 MB since
#: session 48, when a worker reading records no longer waited for the store's ids at its first batch
#: (``_Late.hold``), with one worker below ``ALL_CORES_MIN_BYTES``; 20 interleaved pairs each against
#: in-process, pair medians: the DeepSeek rank (3.1 MB) 0.847, HTA's two sampled ranks (3.4 MB) 0.839,
#: a 1.05 MB trace (HTA's distributed_info_not_found) 1.037, the torchrun4 job (0.78 MB) with one
#: worker 0.941 and with two 1.090 (noise: +-4%)
PARALLEL_MIN_BYTES = 2 << 20
#: below this much input one worker parses, not one per core: the writer's own work is most of a small
#: ingest, and a second worker competes with it for the cores
ALL_CORES_MIN_BYTES = 4 << 20
ENV_WORKERS = "PROFDB_INGEST_WORKERS"


@dataclass(frozen=True, slots=True)
class Task:
    index: int
    path: Path
    reader: str
    info: SourceInfo
    rank_id: int
    source_id: int
    #: one rank section of a multi-rank file (reader.read_rank), or None
    section: int | None = None
    #: the file's size in bytes (small files of one kind are read together: ``_group_end``)
    size: int = 0


class Totals:
    """One (name, kind)'s running summary: calls, total, min, max and sum of squares of durations,
    and self time (``self_ns``: the total less the time in nested children, NESTED_KINDS)."""

    __slots__ = ("category", "calls", "total_ns", "min_ns", "max_ns", "sum_sq_ns", "self_ns")

    def __init__(
        self, category: str, calls: int, total_ns: int, min_ns: int, max_ns: int, sum_sq_ns: float, self_ns: int = 0
    ) -> None:
        self.category = category
        self.calls = calls
        self.total_ns = total_ns
        self.min_ns = min_ns
        self.max_ns = max_ns
        self.sum_sq_ns = sum_sq_ns
        self.self_ns = self_ns

    def row(
        self, rank_id: int, name_id: _N, kind: str, self_ns: int
    ) -> tuple[int, _N, str, str, int, int, int, int, float, int]:
        """This (rank, name, kind)'s summary row, with ``self_ns`` as its self time (``name_id``: the
        name's id, or the name itself in a ``NamedSummaryRow``)."""
        return (rank_id, name_id, kind, self.category, self.calls, self.total_ns, self.min_ns, self.max_ns,
                self.sum_sq_ns, self_ns)

    def add(self, calls: int, total_ns: int, min_ns: int, max_ns: int, sum_sq_ns: float, self_ns: int = 0) -> None:
        self.calls += calls
        self.total_ns += total_ns
        if min_ns < self.min_ns:
            self.min_ns = min_ns
        if max_ns > self.max_ns:
            self.max_ns = max_ns
        self.sum_sq_ns += sum_sq_ns
        self.self_ns += self_ns


def _fold(
    summary: dict[tuple[_N, str], Totals], key: tuple[_N, str], category: str,
    calls: int, total_ns: int, min_ns: int, max_ns: int, sum_sq_ns: float,
) -> None:
    """Add one group of calls (a batch's, or an aggregate row's) to ``key``'s running summary."""
    s = summary.get(key)
    if s is None:
        summary[key] = Totals(category, calls, total_ns, min_ns, max_ns, sum_sq_ns)
    else:
        s.add(calls, total_ns, min_ns, max_ns, sum_sq_ns)


#: A file's summary of one (name, kind), as a worker sends it and as ``bulk.add_summaries`` takes it:
#: (rank_id, name_id, kind, category, calls, total_ns, min_ns, max_ns, sum_sq_ns, self_ns). A plain
#: tuple, not a NamedTuple: a 512-file run sends 164k of them, and pickling a NamedTuple calls back
#: into Python for each (0.3 ms per file).
SummaryRow = tuple[int, int, str, str, int, int, int, int, float, int]
#: The same with the name where its id goes (``Parsed.named``: a file read as columns, whose worker
#: never learns the ids; the writer puts them in)
NamedSummaryRow = tuple[int, str, str, str, int, int, int, int, float, int]


class SummaryColumns:
    """A file's ``SummaryRow``s as columns, as the writer makes them from a group's joined summary
    (``ingest_columns.split_summaries``), in name id order: what the tuples hold, without making them.
    2,048 small files have 655k summary rows: made into tuples, sorted and chained for the statements
    they cost the writer ~1.1 s, bound from the columns in C ~0.8 s (``bulk.add_summary_columns``).
    ``ints``: 9 x rows int64 (rank id, name id, kind and category as numbers in ``text``, calls,
    total, min, max, self time, in ns); ``sum_sq``: float64."""

    __slots__ = ("ints", "sum_sq", "text")

    def __init__(self, ints: Any, sum_sq: Any, text: tuple[str, ...]) -> None:
        self.ints = ints
        self.sum_sq = sum_sq
        self.text = text

    def __len__(self) -> int:
        return int(self.ints.shape[1])

    def rank_id(self) -> int:
        """The rank id of the first row (a file's rows are one rank's), 0 without rows."""
        return int(self.ints[0, 0]) if len(self) else 0

    def rows(self) -> list[SummaryRow]:
        """The same rows as ``SummaryRow`` tuples (a rank of several files merges its files' rows)."""
        rank, name, kind, category, calls, total, lo, hi, own = self.ints.tolist()
        text = self.text
        return list(zip(rank, name, [text[k] for k in kind], [text[c] for c in category], calls, total, lo, hi,
                        self.sum_sq.tolist(), own))


class StepTime(NamedTuple):
    step: int
    start_ns: int
    duration_ns: int


class Parsed(NamedTuple):
    """What parsing one file leaves besides its rows: row counts by kind, summary, steps, and the
    file's collective timeline (calls, busy time; None when it has no activity)."""

    counts: dict[str, int]
    #: (``SummaryColumns`` only in the writer: ``ingest_columns.split_summaries``)
    summary: list[SummaryRow] | list[NamedSummaryRow] | SummaryColumns
    steps: list[StepTime]
    timeline: RankTimeline | None = None
    #: the summary rows carry names where their ids go (NamedSummaryRow)
    named: bool = False
    #: events the reader did not read, by what they are (``base.BatchReader``; None: none)
    unread: dict[str, int] | None = None


class NamesMsg(NamedTuple):
    #: names (str) and per-launch columns (tuples in bulk.SHAPE_COLS order)
    names: list[Any]


class RowsMsg(NamedTuple):
    task: int
    #: "activity", "counter", or "counter1" (per-dispatch counters: the first six counter columns): rows
    #: are tuples; "activity_columns" or "counter_columns": rows is one ``Columns`` dict of a batch
    table: str
    rows: Any
    #: bytes of the task's file read when the batch was sent (``_ReadMeter``; 0: not known), so that a
    #: progress bar moves while one large file is parsed, not only as files end
    read: int = 0


#: a batch as columns, for the writer: column name -> one value for every row (an SQL constant: None,
#: an int, a str), a numpy array, a list, ``columnar.Ints`` (integers with empty cells) or ``bulk.Coded`` (a few
#: strings, as codes)
Columns = dict[str, Any]


class DoneMsg(NamedTuple):
    task: int
    parsed: Parsed


class GroupDoneMsg(NamedTuple):
    """The ``DoneMsg`` of each file of a group read as columns (``_Late.send_group``), their summary rows
    joined as columns (``ingest_columns.join_summaries``: each ``parsed`` holds none). The writer makes
    each file's DoneMsg again, the names' ids in (``Parsers.messages``)."""

    tasks: list[int]
    parsed: list[Parsed]
    summary: Any


class ErrorMsg(NamedTuple):
    task: int
    error: BaseException
    trace: str


class ExitMsg(NamedTuple):
    pass


class IdsMsg(NamedTuple):
    """Writer -> worker, the writer's first message (``Parsers.send_ids``): per task index, the file's
    (rank id, source id) in the store, or None for a file not to read (its content is stored already)."""

    ids: list[tuple[int, int] | None]


Message = NamesMsg | RowsMsg | DoneMsg | GroupDoneMsg | ErrorMsg | ExitMsg

#: a task's rank and source id until the writer has sent them (``IdsMsg``; the store's ids start at 1)
NO_ID = 0
#: rows a worker holds while the store's ids have not come (``_Late``; a message's rows: ``_weight``):
#: ~10 batches of ~4 MB of short-name CSV (rocprof_csv.BLOCK: ~25k rows, ~1.5 MB as columns), 32 of
#: long-name rows, or ~100 small files of 2,000 rows, ~15 MB of columns at most. A worker parses ~5-10
#: such batches, or ~70 such files, in the 0.4-0.8 s the writer takes to open the store (a budget of 12
#: messages was 6 small files: the workers then waited for the ids most of that time, a core idle).
#: Groups of small files are held as parsed, one batch each (``GroupParse.weight``: rows, summary rows
#: and calls): at 8,192 files of ~490 rows the ids come 1.3 s after the fork and each worker fills this
#: (max RSS 130-139 MB then, 103-107 MB at 2,048 files holding 84-147k rows)
HOLD_ROWS = 250_000

#: rows of files read as records a worker holds while the store's ids have not come (``_Late.hold``):
#: built with names and launch shapes where their ids go, one tuple per distinct shape, ~240 bytes a row
#: as held with the file's summary and timeline (TraceLens's Qwen H100 trace: 12,079 rows, 2.9 MB;
#: 400 bytes with a shape tuple per row), so ~25 MB; a worker builds ~50-100k Kineto rows a second
HOLD_RECORD_ROWS = 100_000


def worker_count(total_bytes: int, files: int) -> int:
    """Workers for an ingest: $PROFDB_INGEST_WORKERS if set (0 = parse in the writer), else none below
    ``PARALLEL_MIN_BYTES``, one below ``ALL_CORES_MIN_BYTES``, then one per CPU (at most one per file)
    (the input is then large enough to pay for starting them, and for a second one). One large
    file gets a worker too: it parses while the writer inserts what it sent (measured, 5 interleaved
    runs each, median wall: a 37 MB Kineto trace 1.25 -> 1.12 s, a 33 MB Nsight Systems export
    3.38 -> 3.04 s, a 17 MB rocprofv3 kernel trace 0.57 -> 0.53 s)."""
    env = os.environ.get(ENV_WORKERS)
    if env is not None and env.strip():
        try:
            n = int(env)
        except ValueError:
            n = 0
        return max(0, min(n, files))
    cpus = cores()
    if cpus < 2 or total_bytes < PARALLEL_MIN_BYTES:
        return 0
    if total_bytes < ALL_CORES_MIN_BYTES:
        return 1
    return min(cpus, files)


#: how much lower the parsing workers' scheduling priority is than the writer's (``os.nice``). The
#: writer is one process doing the inserts of every worker's rows; when it is the slower side (many
#: small files, short CSV rows) and the machine has fewer cores than processes, a worker that takes
#: the writer's core delays every row. Measured, 2 cores, interleaved runs, median of 5-6 (nice 0 ->
#: 5): 2,048 small CSV files 9.28 -> 8.00 s (10: 8.42 s), 512 files 4.49 -> 4.09 s, 16 files of 1M
#: short rows 3.27 -> 3.24 s; Kineto (the workers the slower side) 5.81 -> 5.75 s.
WORKER_NICE = 5

#: a worker's allocations of at least this many bytes get pages of their own, given back when freed
#: (``_give_back_large_blocks``). glibc's malloc starts at 128 KB but raises the threshold to the size
#: of any such block freed, up to 32 MB, so a worker's 4 MB CSV blocks and batch columns came from its
#: heaps and arenas, which kept what they once held: at 4x the benchmark's input each worker's peak
#: anonymous memory was 101-107 MB, 79-90 MB with this (tree PSS 311-317 -> 274-289 MB). Only in
#: workers that read column files: in Kineto workers it doubled the ingest's system time (page faults
#: of fresh pages for every large block: `kineto` 0.6-0.8 -> 1.2-1.5 s, 4 interleaved pairs).
MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # (glibc's malloc.h)


def _give_back_large_blocks() -> None:
    """Fix malloc's mmap threshold at ``MMAP_THRESHOLD`` (glibc's ``mallopt``; elsewhere nothing)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # (not glibc: macOS has no mallopt)
        return
    mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)

#: the cyclic GC's first-generation threshold during an ingest (Python's default: 700 allocations).
#: Python counts container objects allocated less those freed, so this is how many may be alive (or
#: left in cycles) before a collection walks them all: a worker reading a large Kineto trace holds a
#: batch of records, its rows and the file's nested spans, and at 200,000 each collection walked them
#: (~36 ms a collection, 2 per 37 MB trace); at 1,000,000 none runs on such a trace. Measured on 8
#: traces of 37 MB (3 interleaved runs each): workers' CPU 6.63-6.90 -> 6.28-6.55 s, wall 4.36-4.47
#: -> 4.09-4.30 s; CSV shapes unchanged within noise.
GC_THRESHOLD0 = 1_000_000


@contextmanager
def quiet_gc() -> Iterator[None]:
    """Run an ingest with the cyclic garbage collector mostly out of the way, for this process and the
    workers it forks (they inherit the setting). Parsing allocates a tuple per row and per record,
    each of which counts towards a collection, and every collection of an older generation walks every
    object alive. Measured (benchmarks/ablation.py): ingest CPU x1.39 without it on 400k short-name
    rocprofv3 kernel rows, x1.23 on 60 MB of Kineto traces. ``gc.freeze()``
    moves what exists now (modules, readers, the ORM) out of the collector's sight, and the higher
    threshold makes collections rare; cycles are still collected (memory stays flat), only less
    often. Both are restored afterwards (objects a caller froze before stay frozen)."""
    old = gc.get_threshold()
    frozen_before = gc.get_freeze_count() > 0
    gc.freeze()
    gc.set_threshold(max(old[0], GC_THRESHOLD0), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        if not frozen_before:
            gc.unfreeze()


# --------------------------------------------------------------------------- worker side

#: an Activity's per-launch columns, in bulk.SHAPE_COLS order (device, stream, pid, tid: its origin;
#: grid, block: its launch shape): the tuple built in C (``a[5:7] + a[8:16]`` made three tuples per
#: row); the writer answers it with the pair (launch_id, origin_id)
_LAUNCH_SHAPE = itemgetter(*map(Activity._fields.index, SHAPE_COLS))


def _column_reader(task: Task) -> ColumnReader | None:
    """The reader of ``task``'s file when it is read as column batches (``read_columns``), not as records."""
    reader = readers.by_name(task.reader)
    if task.section is None and task.info.kind in getattr(reader, "COLUMNAR_KINDS", ()):
        return cast(ColumnReader, reader)
    return None


class _Channel(Protocol):
    def send(self, obj: Any) -> None: ...

    def recv(self) -> Any: ...

    def ready(self, task: Task) -> Task:
        """``task`` with its store ids (a worker waits for them if they have not come)."""
        ...

    def hold(self, rows: int) -> bool:
        """Whether ``rows`` built without the store's ids may wait for them (``_Late.hold``)."""
        ...

    def defer(self, finish: Callable[[], None]) -> None:
        """Call ``finish`` once the store's ids have come (a file whose rows ``hold`` let wait)."""
        ...


class _Outbox:
    """A worker's end of its connection to the writer, whose sending is done by a thread: the worker
    pickles a message and goes on parsing while it is written. Sent directly, a message waits in
    ``write`` until the writer has read it all, which it does only between its own work on other
    messages; the worker parsed nothing meanwhile, and the writer then waited for the worker's next
    message (2,048 small files: the writer idle 0.8 s of the 2.9 s it took the workers' messages,
    the workers blocked in writes ~2.4 s between them). At most ``OUTBOX_MESSAGES`` wait beside the
    one being written (memory: a few batches). Messages keep their order; a failed write (the
    writer closed its end) is raised by the next ``send`` or by ``close``. Only when every file is
    read as columns (``_worker``): a worker reading records waits for the writer's name ids at each
    batch anyway, and its thread then only competed for the GIL (128 Kineto traces: ~7% slower,
    CPU +0.36 s, medians of 6 interleaved pairs)."""

    def __init__(self, conn: _Duplex) -> None:
        import queue
        import threading

        self.conn = conn
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=OUTBOX_MESSAGES)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._write, name="profdb-outbox", daemon=True)
        self._thread.start()

    def _write(self) -> None:
        while (buf := self._queue.get()) is not None:
            if self._error is None:  # (after a failure the rest is dropped: the writer stopped reading)
                try:
                    self.conn.send_bytes(buf)
                except BaseException as e:
                    self._error = e

    def send(self, obj: Any) -> None:
        if self._error is not None:
            raise self._error
        from multiprocessing.reduction import ForkingPickler  # (what Connection.send pickles with)

        self._queue.put(ForkingPickler.dumps(obj))

    def poll(self) -> bool:
        return self.conn.poll()

    def recv(self) -> Any:
        return self.conn.recv()

    def close(self) -> None:
        """Write what is queued, then close the connection; raises a failed write's error."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self.conn.close()
        if self._error is not None:
            raise self._error


#: messages a worker's outbox holds besides the one being written (``_Outbox``). Measured, the writer's
#: idle time while the workers' messages came (2,048 small files, 3 runs each): 0.77 s sending
#: directly, 0.28-0.39 s with 1, 0.16-0.26 s with 3 (the short shape: 0.32, 0.12, 0.07-0.09 s)
OUTBOX_MESSAGES = 3


class _Skipped(Exception):
    """The task's file is not to be read after all (its content is stored already: ``IdsMsg``)."""


class _Finish(NamedTuple):
    """The end of a file read while the store's ids had not come (``_Late.defer``)."""

    finish: Callable[[], None]


class _Late:
    """A worker's channel to the writer, whose ids for the tasks may not have come yet. The workers
    fork before the writer has imported SQLAlchemy and opened the store (``ingest.ingest_paths``: ~0.4
    s on the benchmarks' machine, with a core idle), so they start parsing meanwhile with ``NO_ID`` for
    the ids. A column file's batches go on being parsed, their messages held here up to ``HOLD_ROWS``
    rows; when the ids come (``IdsMsg``), the held messages, and every later one built before (a
    summary row, a batch's constant columns), get them, and those of a file the writer does not want
    (already stored) are dropped. A group of small files parsed as one batch (``send_parsed``) is held
    as it was parsed, the ids put in when they come; one of which a file is not wanted is parsed
    again without it (``redo``). A file read as records is read, and its rows built with names and
    launch shapes where their ids go, up to ``HOLD_RECORD_ROWS`` rows (``hold``); when the ids come, the
    file asks the writer for the names' ids, and its rows and result are sent (``defer``: a file read
    whole meanwhile is finished then, and the worker has gone on to its next). Until session 48 such a
    file waited at its first batch of rows: on a real one-step profile, most of its parse came after
    the writer had opened the store."""

    def __init__(self, conn: _Outbox | _Duplex) -> None:
        self.conn = conn
        self.ids: list[tuple[int, int] | None] | None = None
        self.held: list[RowsMsg | DoneMsg | tuple[list[Task], GroupParse] | _Finish] = []
        self.held_rows = 0
        #: groups held parsed that hold a file the writer does not want: to parse again without it
        self.redo: list[list[Task]] = []
        #: a group of small files is being parsed (``hold_group``): their messages wait in ``pending``
        self.grouping = False
        self.pending: list[RowsMsg | DoneMsg] = []

    def ready(self, task: Task) -> Task:
        self.wait()
        if self.skipped(task):
            raise _Skipped()
        return self._with_ids(task)

    def _with_ids(self, task: Task) -> Task:
        assert self.ids is not None
        got = self.ids[task.index]
        assert got is not None
        return replace(task, rank_id=got[0], source_id=got[1])

    def skipped(self, task: Task) -> bool:
        """The writer does not want ``task`` read (False while the ids have not come)."""
        return self.ids is not None and self.ids[task.index] is None

    def send(self, msg: Message) -> None:
        if self.ids is None:
            # (the ids may have come: ``poll`` looks without waiting, so the writer is never kept idle)
            if isinstance(msg, (RowsMsg, DoneMsg)) and self.held_rows < HOLD_ROWS and not self.conn.poll():
                self.held.append(msg)
                self.held_rows += _weight(msg)
                return
            self.wait()
        if isinstance(msg, (RowsMsg, DoneMsg)):
            if self.ids is not None and self.ids[msg.task] is None:
                raise _Skipped()
            msg = self._complete(msg)
            if self.grouping:
                self.pending.append(msg)
                return
        self.conn.send(msg)

    def hold(self, rows: int) -> bool:
        """Whether a file read as records may keep ``rows`` it built without the store's ids (names where
        their ids go) until the ids come: they have not, and this worker holds less than
        ``HOLD_RECORD_ROWS`` rows; counted among them if so."""
        if self.ids is not None or self.held_rows >= HOLD_RECORD_ROWS or self.conn.poll():
            return False
        self.held_rows += rows
        return True

    def defer(self, finish: Callable[[], None]) -> None:
        """Call ``finish`` when the ids come (``wait``), after what was held before it: the end of a file
        read while they had not (its rows held by ``hold``); it raises ``_Skipped`` for a file not wanted."""
        if self.ids is None and self.conn.poll():
            self.wait()  # (they have come: what was held first goes first)
        if self.ids is not None:
            with suppress(_Skipped):
                finish()
            return
        self.held.append(_Finish(finish))

    def send_parsed(self, tasks: list[Task], parsed: GroupParse) -> None:
        """Send a group of files parsed as one batch (``ingest_columns.parse_group``), or hold it while
        the ids have not come, as ``send`` holds a message."""
        if self.ids is None:
            if self.held_rows < HOLD_ROWS and not self.conn.poll():
                self.held.append((tasks, parsed))
                self.held_rows += parsed.weight()
                return
            self.wait()
        self._send_parsed(tasks, parsed)

    def _send_parsed(self, tasks: list[Task], parsed: GroupParse) -> None:
        assert self.ids is not None
        ids = [self.ids[t.index] for t in tasks]
        if None in ids:  # (parsed before the ids came: without the files stored already, again)
            wanted = [t for t, got in zip(tasks, ids) if got is not None]
            if wanted:
                self.redo.append(wanted)
            return
        for msg in parsed.messages(cast("list[tuple[int, int]]", ids)):
            self.conn.send(msg)

    def hold_group(self) -> None:
        """The files of a group (``_group_end``) are parsed next: their rows and results wait until
        ``send_group``, which joins their column batches and summaries."""
        self.grouping = True

    def send_group(self) -> None:
        """Send what the group's files sent (``_send_joined``)."""
        self.grouping = False
        pending, self.pending = self.pending, []
        self._send_joined(pending)

    def _send_joined(self, msgs: list[RowsMsg | DoneMsg]) -> None:
        """Send ``msgs`` (complete: with the store's ids), several files' activity column batches joined
        (``ingest_columns.concat``) and their summaries too (``join_summaries``): first the rows, then
        the files' results, so each file's rows still come before its result."""
        rows = [m for m in msgs if isinstance(m, RowsMsg)]
        done: list[DoneMsg | GroupDoneMsg] = [m for m in msgs if isinstance(m, DoneMsg)]
        batches = [m for m in rows if m.table == "activity_columns"]
        named = [m for m in msgs if isinstance(m, DoneMsg) and m.parsed.named]
        if len(batches) > 1 or len(named) > 1:
            from . import ingest_columns  # (loaded already: these are column batches)

            if len(batches) > 1:
                rows = [RowsMsg(batches[0].task, "activity_columns", cols)
                        for cols in ingest_columns.concat([m.rows for m in batches])]
                rows += [m for m in msgs if isinstance(m, RowsMsg) and m.table != "activity_columns"]
            joined = ingest_columns.join_summaries(named) if len(named) > 1 else None
            if joined is not None:
                done = [m for m in done if not (isinstance(m, DoneMsg) and m.parsed.named)] + [joined]
        for m in [*rows, *done]:
            self.conn.send(m)

    def recv(self) -> Any:
        return self.conn.recv()

    def wait(self) -> None:
        """Take the ids (the writer's first message) if they have not come, and send what was held."""
        if self.ids is not None:
            return
        msg = self.conn.recv()
        if not isinstance(msg, IdsMsg):
            raise RuntimeError(f"the writer sent {type(msg).__name__} before the store's ids")
        self.ids = msg.ids
        held, self.held, self.held_rows = self.held, [], 0
        msgs = [m for m in held if isinstance(m, (RowsMsg, DoneMsg))]
        self._send_joined([self._complete(m) for m in msgs if self.ids[m.task] is not None])
        for m in held:
            if isinstance(m, _Finish):
                with suppress(_Skipped):  # (a file the writer does not want: dropped)
                    m.finish()
            elif not isinstance(m, (RowsMsg, DoneMsg)):
                self._send_parsed(*m)

    def _complete(self, msg: RowsMsg | DoneMsg) -> RowsMsg | DoneMsg:
        """``msg`` with the store's ids where it was built with ``NO_ID``."""
        assert self.ids is not None
        got = self.ids[msg.task]
        assert got is not None
        rank_id, source_id = got
        if isinstance(msg, RowsMsg):
            # (row tuples always carry the ids: a file read as records waits for them, ``ready``)
            rows = msg.rows
            # (a batch as columns: ids are constants, or arrays with the ids in: ``parse_group``)
            if isinstance(rows, dict) and type(rows["rank_id"]) is int and rows["rank_id"] == NO_ID:
                return msg._replace(rows={**rows, "rank_id": rank_id, "source_id": source_id})
            return msg
        p = msg.parsed
        assert isinstance(p.summary, list)  # (a worker's rows are tuples)
        if p.summary and p.summary[0][0] == NO_ID:
            summary: Any = [(rank_id, *r[1:]) for r in p.summary]
            return msg._replace(parsed=p._replace(summary=summary))
        return msg


def _weight(msg: RowsMsg | DoneMsg) -> int:
    """The rows a message carries, as ``HOLD_ROWS`` counts them: a batch's rows (as columns or tuples),
    a file's summary rows and collective calls."""
    if isinstance(msg, DoneMsg):
        tl = msg.parsed.timeline
        return len(msg.parsed.summary) + (sum(map(len, tl.calls.values())) if tl is not None else 0)
    rows = msg.rows
    return batch_rows(rows) if isinstance(rows, dict) else len(rows)


def batch_rows(columns: Columns) -> int:
    """The rows of a batch as columns (activity or counter columns)."""
    return len(columns["start_ns"] if "start_ns" in columns else columns["value"])


def _bytes_read() -> int | None:
    """The bytes this process has read so far (``rchar`` of Linux's ``/proc/self/io``: every read,
    from the disk or its cache), or None where that cannot be told."""
    try:
        with open("/proc/self/io", "rb") as f:
            for line in f:
                if line.startswith(b"rchar:"):
                    return int(line[6:])
    except (OSError, ValueError):
        pass
    return None


class _ReadMeter:
    """How far a worker is in a task's file: the bytes it has read since it began the task (a worker
    reads one file at a time; a gzip file's compressed bytes, as its size counts them; an SQLite file's
    pages), at most the file's size; 0 where that cannot be told (``size`` 0: not measured, e.g. files
    read together as a group)."""

    __slots__ = ("size", "start")

    def __init__(self, size: int) -> None:
        self.size = size
        self.start = _bytes_read() if size else None

    def __call__(self) -> int:
        if self.start is None:
            return 0
        now = _bytes_read()
        return 0 if now is None else max(0, min(self.size, now - self.start))


class _Names:
    """The worker's copy of the writer's name table, filled on demand."""

    def __init__(self, conn: _Channel) -> None:
        self.conn = conn
        self.ids: dict[Any, Any] = {}  # (a name: its id; per-launch columns: (launch_id, origin_id))
        self.asked: list[Any] = []

    def resolve(self, names: set[Any]) -> None:
        self.ask(names)
        self.wait()

    def ask(self, names: set[Any]) -> None:
        """Send the writer the new ones of ``names`` without waiting for their ids (``wait``): the
        worker goes on with work that needs no ids meanwhile. (Waiting at once left workers idle
        for ~1.6 ms per file while the writer finished another's batch.)"""
        if len(self.ids) > LAUNCHES_KEPT:  # (launch shapes grow with the job's ranks: memory bounded)
            self.ids.clear()
        new = [n for n in names if n not in self.ids]
        if new:
            self.conn.send(NamesMsg(new))
        self.asked = new

    def wait(self) -> None:
        """The ids of what ``ask`` sent."""
        if self.asked:
            self.ids.update(zip(self.asked, self.conn.recv()))
            self.asked = []


def unsigned_times(task: Task) -> bool:
    """Whether ``task``'s reader declares its producer's times unsigned (``UNSIGNED_TIMES``)."""
    return bool(getattr(readers.by_name(task.reader), "UNSIGNED_TIMES", False))


def _parse(
    task: Task, conn: _Channel, names: _Names, cats: dict[tuple[str, str], str], batches: Iterable[Any] | None = None
) -> None:
    """Parse one file and send its rows, then its ``Parsed`` (``batches``: its column batches, already
    read with other small files' by ``_read_group``; None: the reader reads the file)."""
    reader = readers.by_name(task.reader)
    column_reader = _column_reader(task)
    unsigned = unsigned_times(task)
    rank_id, source_id = task.rank_id, task.source_id
    counts: dict[str, int] = {}
    summary: dict[tuple[str, str], Totals] = {}  # (name, kind): the ids are put in at the end
    steps: list[StepTime] = []
    acts: list[Activity] = []
    ctrs: list[Counter] = []
    ids = names.ids
    timeline = TimelineBuilder(task.info.time_base_ns)
    nested = SelfTotals()
    nested_span, nested_key = nested.spans.append, nested.keys.append  # (SelfTotals.add, inlined)
    fold_nested = nested.compact  # (``nested`` is a flag in flush_acts' loop)
    read = _ReadMeter(task.size if batches is None else 0)  # (a group's files were read together)
    #: activity batches built while the store's ids had not come (``_Late.hold``): rows with the name
    #: and the launch shape where their ids go, and the bytes read then; ``wanted``: their names and shapes
    held: list[tuple[list[tuple[Any, ...]], int]] = []
    wanted: set[Any] = set()
    shape_seen: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    one_shape = shape_seen.setdefault

    def with_ids() -> None:
        """Records are read (a JSON trace parsed) before the store's ids come; their rows need them, and
        name ids the writer gives only after it sent them: the rows built meanwhile (``held``) get them
        here, and are sent; a worker waits for the ids here if they have not come (``ready``)."""
        nonlocal task, rank_id, source_id, held
        if rank_id == NO_ID:
            task = conn.ready(task)
            rank_id, source_id = task.rank_id, task.source_id
        if held:
            names.resolve(wanted)
            for named, at in held:
                conn.send(RowsMsg(task.index, "activity", [
                    (rank_id, source_id, kind, cat, ids[name], start, d, corr, *ids[shape], x)
                    for kind, cat, name, start, d, corr, shape, x in named
                ], at))
            held = []
            wanted.clear()

    def flush_acts() -> None:
        # the ids have not come: the rows wait for them with names (``_Late.hold``; a worker's budget)
        waiting = rank_id == NO_ID and conn.hold(len(acts))
        if not waiting:
            with_ids()
        validate.activities(acts, task.path, task.info.time_base_ns, unsigned)
        shapes = list(map(_LAUNCH_SHAPE, acts))  # (bulk.SHAPE_COLS: device, stream, pid, tid, grid, block)
        if waiting:
            # (held rows keep their shape: one tuple per distinct one, not one per row)
            shapes = list(map(one_shape, shapes, shapes))
            wanted.update({a[1] for a in acts}, shapes)
        else:
            names.ask({a[1] for a in acts} | set(shapes))
        timeline.add_many(acts)  # (needs no ids: done while the writer answers)
        if not waiting:
            names.wait()
        rows: list[tuple[Any, ...]] = []
        append = rows.append
        # each (name, kind)'s durations, summed up after the loop by builtins that loop in C
        # (updating its Totals row by row cost ~1 us a row)
        durations: dict[tuple[str, str], list[int]] = {}
        first_cat: dict[tuple[str, str], str] = {}
        # per name, what its records of one kind share (kind, id (the name while ``waiting``), category,
        # durations, key, nested?, a step?), found once instead of per record (four lookups and two
        # tuples: ~20% of this loop); a record with its own category, or a name met with another kind,
        # takes the long way
        per: dict[str, tuple[str, int | str, str, list[int], tuple[str, str], bool, bool]] = {}
        for a, shape in zip(acts, shapes):
            kind = a[0]
            name = a[1]
            got = per.get(name)
            if got is None or got[0] != kind or a[4] is not None:
                nid = name if waiting else ids[name]
                cat = a[4]
                if cat is None:
                    ck = (kind, name)
                    cat = cats.get(ck)
                    if cat is None:
                        cat = cats[ck] = classify.category(kind, name)
                key = (name, kind)
                ds = durations.get(key)
                if ds is None:
                    durations[key] = ds = []
                    first_cat[key] = cat
                got = (kind, nid, cat, ds, key, kind in NESTED_KINDS,
                       kind == "annotation" and name.startswith("ProfilerStep#"))
                if a[4] is None:
                    per[name] = got
            _kind, nid, cat, ds, key, nested, step = got
            d = a[3]
            if waiting:
                append((kind, cat, nid, a[2], d, a[7], shape, a[16]))
            else:
                launch_id, origin_id = ids[shape]
                append((rank_id, source_id, kind, cat, nid, a[2], d, a[7], launch_id, origin_id, a[16]))
            ds.append(d)
            if nested:
                nested_span(((kind, a[8], a[9], a[5]), a[2], d))
                nested_key(key)
            if step:
                n = step_number(name)
                if n is not None:
                    steps.append(StepTime(n, a[2], d))
        for key, ds in durations.items():
            f = list(map(float, ds))
            _fold(summary, key, first_cat[key], len(ds), sum(ds), min(ds), max(ds), sum(map(mul, f, f)))
            counts[key[1]] = counts.get(key[1], 0) + len(ds)
        fold_nested()  # (a large file's CPU ops: columns, not tuples)
        if waiting:
            held.append((rows, read()))
        else:
            conn.send(RowsMsg(task.index, "activity", rows, read()))

    def flush_ctrs() -> None:
        with_ids()
        validate.counters(ctrs, task.path)
        names.resolve({c[0] for c in ctrs} | {c[1] for c in ctrs})
        rows: list[tuple[Any, ...]]
        if all(s == 1 and mn is None and mx is None for _k, _n, _v, _d, s, mn, mx in ctrs):
            table = "counter1"  # per-dispatch values: the writer binds six columns, not nine
            # (tuple unpacking: several times cheaper than NamedTuple attribute access)
            rows = [(rank_id, source_id, ids[k], ids[n], d, v) for k, n, v, d, _s, _mn, _mx in ctrs]
        else:
            table = "counter"
            rows = [(rank_id, source_id, ids[c.kernel], ids[c.name], c.dispatch_id, c.value, c.samples, c.min_value,
                     c.max_value) for c in ctrs]
        counts["counter"] = counts.get("counter", 0) + len(rows)
        conn.send(RowsMsg(task.index, table, rows, read()))

    if column_reader is not None:
        # (no nesting, steps or aggregates among these kinds: self time is the total)
        from . import columnar, ingest_columns  # (numpy: loaded by the ingests that read columns only)

        by_name = ingest_columns.RunningSums()
        #: (name, kind) -> its final row, for keys a column batch met and no other batch of the file did
        done: dict[tuple[str, str], NamedSummaryRow] = {}
        columns = columnar.ColumnTimeline(task.info.time_base_ns)
        if batches is None:
            batches = column_reader.read_columns(task.path, task.info)
        ingest_columns.parse_columns(task, batches, conn, cats, counts, by_name, done, columns, read)
        named = list(done.values())
        named += by_name.rows(rank_id)
        if named:  # (a name's total over the file's batches: exact Python integers past 2**62)
            validate.summed(task.path, max(r[5] for r in named))
        conn.send(DoneMsg(task.index, Parsed(counts, named, steps, columns.file_timeline(), named=True)))
        return
    batches_of = getattr(reader, "activity_batches", None)
    unread: dict[str, int] = {}
    if batches_of is not None:  # (lists of Activity records, taken whole: BatchReader)
        for batch in batches_of(task.path, task.info, task.section, unread):
            at = 0
            while at < len(batch):
                room = BATCH - len(acts)
                acts += batch[at : at + room]
                at += room
                if len(acts) >= BATCH:
                    flush_acts()
                    acts = []
        records: Iterable[Any] = ()
    elif task.section is not None:
        records = reader.read_rank(task.path, task.info, task.section)  # type: ignore[attr-defined]
    else:
        records = reader.read(task.path, task.info)
    rec: Any
    for rec in records:
        t = type(rec)
        if t is Activity:
            acts.append(rec)
            if len(acts) >= BATCH:
                flush_acts()
                acts = []
        elif t is Counter:
            ctrs.append(rec)
            if len(ctrs) >= BATCH:
                flush_ctrs()
                ctrs = []
        elif t is Aggregate:
            with_ids()
            g = rec
            validate.aggregate(g, task.path)
            cat = g.category or cats.get((g.kind, g.name)) or classify.category(g.kind, g.name)
            mean = g.total_ns / g.calls if g.calls else 0.0
            sumsq = g.sum_sq_ns if g.sum_sq_ns is not None else g.calls * mean * mean
            _fold(summary, (g.name, g.kind), cat, g.calls, g.total_ns, g.min_ns, g.max_ns, sumsq)
            counts["aggregate"] = counts.get("aggregate", 0) + 1
    if acts:
        flush_acts()
    if ctrs:
        flush_ctrs()
    own = nested.totals()
    if summary:  # (each name's total over the file's batches and aggregates: exact Python integers)
        validate.summed(task.path, max(t.total_ns for t in summary.values()))
    file_timeline = timeline.file_timeline()

    def finish() -> None:
        with_ids()
        names.resolve({name for name, _kind in summary})
        rows = [t.row(rank_id, ids[name], kind,
                      own.get((name, kind), t.total_ns) if kind in NESTED_KINDS else t.total_ns)
                for (name, kind), t in summary.items()]
        conn.send(DoneMsg(task.index, Parsed(counts, rows, steps, file_timeline, unread=unread or None)))

    if held or (rank_id == NO_ID and conn.hold(len(summary))):
        conn.defer(finish)  # (the ids have not come: the worker goes on with its next file meanwhile)
    else:
        finish()


class _Here:
    """The writer's end of the channel when parsing in the writer's own process: what ``_parse``
    sends is handled at once, so small ingests run the same code as the workers, without processes."""

    def __init__(
        self, answer_names: Callable[[list[str]], list[int]], insert: Callable[[str, list[Any]], None]
    ) -> None:
        self.answer_names = answer_names
        self.insert = insert
        self.reply: Any = None
        self.done: Parsed | None = None

    def send(self, msg: Message) -> None:
        if isinstance(msg, NamesMsg):
            self.reply = self.answer_names(msg.names)
        elif isinstance(msg, RowsMsg):
            self.insert(msg.table, msg.rows)
        elif isinstance(msg, DoneMsg):
            self.done = msg.parsed

    def recv(self) -> Any:
        reply, self.reply = self.reply, None
        return reply

    def ready(self, task: Task) -> Task:
        return task

    def hold(self, rows: int) -> bool:
        return False  # (the ids are here)

    def defer(self, finish: Callable[[], None]) -> None:
        finish()


def parse_here(
    task: Task,
    answer_names: Callable[[list[str]], list[int]],
    insert: Callable[[str, list[Any]], None],
    cats: dict[tuple[str, str], str],
) -> Parsed:
    """Parse ``task`` in this process: rows go to ``insert`` as they are built; returns the file's
    counts, summary rows and steps, as a worker's DoneMsg carries them."""
    here = _Here(answer_names, insert)
    _parse(task, here, _Names(here), cats)
    assert here.done is not None
    return here.done


def _group_end(tasks: list[Task], i: int) -> int:
    """The end of the tasks a worker takes at ``i``: one, or a run of small files of one reader and kind
    read as columns (at most the reader's ``GROUP_FILE_BYTES`` each, ``GROUP_BYTES`` in all), which
    ``_read_group`` parses together. Tasks come largest first, so the small files are the last ones."""
    if i >= len(tasks):
        return i
    first = tasks[i]
    reader = _column_reader(first)
    if reader is None or not 0 < first.size <= reader.GROUP_FILE_BYTES:
        return i + 1
    limit = reader.GROUP_FILE_BYTES
    total, end = first.size, i + 1
    while end < len(tasks):
        t = tasks[end]
        if (t.reader != first.reader or t.info.kind != first.info.kind or t.section is not None
                or not 0 < t.size <= limit or total + t.size > reader.GROUP_BYTES):
            break
        total += t.size
        end += 1
    return end


def _read_group(group: list[Task]) -> GroupBatches | None:
    """The tasks' column batches, read in one parse (``reader.read_group``); None when the files cannot
    be read together (each is then read on its own, as if never grouped)."""
    reader = _column_reader(group[0])
    assert reader is not None
    return reader.read_group([t.path for t in group], group[0].info)


def _worker(tasks: list[Task], counter: Any, pipe: _Duplex, current: Any = None, slot: int = 0) -> None:
    lifetime.leave_signals_to_parent()
    lifetime.die_with_parent()
    os.nice(WORKER_NICE)
    column_tasks = [t for t in tasks if _column_reader(t) is not None]
    conn: _Outbox | _Duplex = _Outbox(pipe) if len(column_tasks) == len(tasks) else pipe
    late = _Late(conn)
    names = _Names(late)
    cats: dict[tuple[str, str], str] = {}
    task: Task | None = None

    def groups() -> Iterator[list[Task]]:
        """The runs of tasks to parse (``_group_end``), as this worker takes them, and the groups to
        parse again (``_Late.redo``)."""
        while True:
            while late.redo:
                yield late.redo.pop(0)
            with counter.get_lock():
                i = counter.value
                counter.value = end = _group_end(tasks, i)
            if i >= len(tasks):
                break
            yield tasks[i:end]
        late.wait()  # (what is held goes before the end)
        while late.redo:
            yield late.redo.pop(0)

    try:
        # (while the writer opens the store; only when some file is read as columns: the other ingests
        # do not load pyarrow)
        column_readers = sorted({t.reader for t in column_tasks})
        for name in column_readers:
            cast(ColumnReader, readers.by_name(name)).warm_up()
        if column_readers:
            _give_back_large_blocks()
        for taken in groups():
            group = [t for t in taken if not late.skipped(t)]
            # (tasks begun before the ids came carry NO_ID: ``_Late`` completes their messages)
            group = [late._with_ids(t) if late.ids is not None else t for t in group]
            if current is not None and len(group) > 1:  # (a death in there is the group's, not one file's)
                current[2 * slot + 1], current[2 * slot] = group[-1].index, group[0].index
            got = _read_group(group) if len(group) > 1 else None
            if got is not None:  # (one batch for all, if it can; the ids are put in as they come)
                from . import ingest_columns

                task = group[0]
                parsed = ingest_columns.parse_group(group, got, cats)
                if parsed is not None:
                    late.send_parsed(group, parsed)
                    continue
            read: list[list[Any] | None] = [None] * len(group) if got is None else list(got.per_file())
            if len(group) > 1:
                late.hold_group()
            for task, batches in zip(group, read):
                if current is not None:  # so the writer can name the file if this process dies
                    current[2 * slot + 1], current[2 * slot] = -1, task.index
                try:
                    _parse(task, late, names, cats, batches)
                except _Skipped:
                    continue
                except Exception:
                    if late.ids is None:
                        late.wait()  # (a file the writer does not want is not this ingest's error)
                    if late.skipped(task):
                        continue
                    raise
            late.send_group()
        conn.send(ExitMsg())
    except BaseException as e:  # reported to the writer, which rolls back and raises it
        try:
            conn.send(ErrorMsg(task.index if task else -1, e, traceback.format_exc()))
        except OSError:  # the writer closed its end: it stopped (e.g. the store refused the run) and says why
            pass
        except Exception:  # the exception itself does not pickle
            with suppress(OSError):
                conn.send(ErrorMsg(task.index if task else -1, RuntimeError(repr(e)), traceback.format_exc()))
    finally:
        with suppress(OSError):  # (the writer stopped reading: it says why)
            conn.close()


# --------------------------------------------------------------------------- writer side


class WorkerDied(Exception):
    """A worker process ended without a word (killed: the OOM killer, SIGKILL, a crash in C code)."""

    def __init__(self, exitcode: int | None) -> None:
        how = f"killed by signal {-exitcode}" if exitcode is not None and exitcode < 0 else f"exit code {exitcode}"
        super().__init__(f"an ingest worker died ({how}{', e.g. out of memory' if exitcode == -9 else ''})")
        self.exitcode = exitcode


class WorkerError(Exception):
    """A worker failed on a task: ``error`` is what it raised (re-raised by the writer). A worker that
    died while reading a group of small files together (``_read_group``) was on ``files`` tasks, from
    ``index`` to ``last`` (-1: on ``index`` alone)."""

    def __init__(self, index: int, error: BaseException, trace: str, last: int = -1, files: int = 1) -> None:
        super().__init__(f"task {index}: {error!r}")
        self.index = index
        self.error = error
        self.trace = trace
        self.last = last
        self.files = files


#: bytes the pipe of a worker's messages to the writer holds (``F_SETPIPE_SZ``; Linux lets any process
#: raise a pipe to /proc/sys/fs/pipe-max-size, 1 MiB unless changed). A message (a batch of rows, or a
#: group of small files) is written in fewer pieces, each a wakeup of the writer and of the worker's
#: sending thread. Measured, interleaved runs (8 pairs): 2,048 small files 2.97 -> 2.91 s, 512 files
#: 2.11 -> 2.06 s; 16 large files and 128 Kineto traces the same within noise (5 pairs). (A socket
#: pair, the connection before, has its buffers capped by net.core.wmem_max, 208 KiB by default;
#: raised to 2 MiB on a host that allowed it, 2,048 files took 2.94 s against 3.10.)
PIPE_BYTES = 1 << 20


class _Duplex:
    """Both ways between the writer and one worker, as two pipes (the end of each that this side
    uses): what the other side sends comes in through ``incoming``, whose pipe the writer raises to
    ``PIPE_BYTES`` for the worker's messages. ``multiprocessing.connection.wait`` takes it (its
    ``fileno`` is the incoming pipe's)."""

    def __init__(self, incoming: Connection, outgoing: Connection) -> None:
        self.incoming, self.outgoing = incoming, outgoing

    def fileno(self) -> int:
        return self.incoming.fileno()

    def send(self, obj: Any) -> None:
        self.outgoing.send(obj)

    def send_bytes(self, buf: bytes) -> None:
        self.outgoing.send_bytes(buf)

    def recv(self) -> Any:
        return self.incoming.recv()

    def poll(self, timeout: float | None = 0.0) -> bool:
        return self.incoming.poll(timeout)

    def close(self) -> None:
        self.incoming.close()
        self.outgoing.close()


def _pipes(ctx: Any) -> tuple[_Duplex, _Duplex]:
    """The writer's and a worker's ends of two pipes between them; the worker's messages' pipe raised
    to ``PIPE_BYTES`` where the system allows it (Linux; else left as it is)."""
    from_worker, to_writer = ctx.Pipe(duplex=False)
    from_writer, to_worker = ctx.Pipe(duplex=False)
    try:
        import fcntl

        fcntl.fcntl(to_writer.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):  # (not Linux, or above pipe-max-size: it stays as it is)
        pass
    return _Duplex(from_worker, to_worker), _Duplex(from_writer, to_writer)


class Parsers:
    """A set of worker processes parsing ``tasks``; iterate ``messages()`` in the writer."""

    def __init__(self, tasks: list[Task], workers: int) -> None:
        methods = mp.get_all_start_methods()
        ctx: Any = mp.get_context("fork" if "fork" in methods else "spawn")
        # largest first, so the last file to finish is a small one
        self.tasks = sorted(tasks, key=lambda t: -(t.size or t.path.stat().st_size))
        self.counter = ctx.Value("i", 0)
        self.procs: list[Any] = []
        self.conns: list[_Duplex] = []
        #: the task each worker is parsing (-1: none yet) and, while it reads a group of small files
        #: together, the group's last task (else -1): slot k's at 2k and 2k + 1
        self.current = ctx.Array("i", [-1] * 2 * max(1, workers), lock=False)
        # numpy's half of a worker (ingest_columns) is loaded once before the fork, for all (the writer
        # needs numpy too); what a reader loads for its column batches (pyarrow) each worker loads once
        # it runs (``_worker``), not this process: the writer never uses it, and loading it here was
        # ~0.3 s before the fork, one core idle (short-many-files: writer CPU -9%, wall -6%, medians of 8)
        if any(_column_reader(t) is not None for t in tasks):
            from . import ingest_columns  # noqa: F401
        self.ids_sent = False
        try:
            with lifetime.starting_workers():
                for slot in range(max(1, workers)):
                    mine, theirs = _pipes(ctx)
                    p = ctx.Process(
                        target=_worker, args=(self.tasks, self.counter, theirs, self.current, slot), daemon=True
                    )
                    p.start()
                    theirs.close()
                    self.procs.append(p)
                    self.conns.append(mine)
        except BaseException:  # e.g. Ctrl-C, handled as the signals are let through again
            self.close()
            raise

    def send_ids(self, ids: list[tuple[int, int] | None]) -> None:
        """Tell every worker each task's (rank id, source id) in the store, None for a file not to read
        (``IdsMsg``): the writer's first message, once the store is open; the workers hold what they
        parsed until then (``_Late``)."""
        for c in self.conns:
            try:
                c.send(IdsMsg(ids))
            except OSError:  # (a worker that died: ``messages`` says so when it finds its end closed)
                pass
        self.ids_sent = True

    def messages(self, answer_names: Callable[[list[str]], list[int]]) -> Iterator[RowsMsg | DoneMsg]:
        """Row batches and per-file results as workers send them; name requests are answered here
        with ``answer_names(list_of_names) -> list_of_ids``. Raises WorkerError on a worker's error.
        After ``send_ids``."""
        assert self.ids_sent, "the workers wait for the store's ids (send_ids) before they send anything"
        live = {c: p for c, p in zip(self.conns, self.procs)}
        slots = {c: i for i, c in enumerate(self.conns)}
        while live:
            for ready in wait(list[Any](live)):  # (a _Duplex is waited on by its fileno)
                conn = cast(_Duplex, ready)
                try:
                    msg: Message = conn.recv()
                except EOFError:
                    proc = live.pop(conn)
                    proc.join(5)
                    first, last = self.current[2 * slots[conn]], self.current[2 * slots[conn] + 1]
                    at = {t.index: i for i, t in enumerate(self.tasks)} if last >= 0 else {}
                    files = at[last] - at[first] + 1 if first in at and last in at and at[last] > at[first] else 1
                    raise WorkerError(first, WorkerDied(proc.exitcode), "", last if files > 1 else -1, files) from None
                if isinstance(msg, NamesMsg):
                    ids = answer_names(msg.names)
                    try:
                        conn.send(ids)
                    except OSError:  # the worker failed after asking (``_Names.ask``) and closed its end:
                        pass  # its ErrorMsg, or its end, is read next
                elif isinstance(msg, ExitMsg):
                    live.pop(conn)
                elif isinstance(msg, ErrorMsg):
                    raise WorkerError(msg.task, msg.error, msg.trace)
                elif isinstance(msg, GroupDoneMsg):
                    from .ingest_columns import split_summaries

                    yield from split_summaries(msg, answer_names)
                else:
                    yield msg

    def close(self) -> None:
        for c in self.conns:
            c.close()
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(10)

    def __enter__(self) -> Parsers:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
