"""rocprofv3 kernel_trace and counter_collection CSV read as column batches by pyarrow (see the comment
above ``rocprof_csv.BLOCK``). Imported by rocprof_csv when such a file is read (or by ``warm_up`` as
an ingest's worker starts), not with the readers: numpy and pyarrow cost ~0.1-0.2 s of the start-up
of every ingest, and only these two kinds need them (pyarrow's compute functions, ~75 ms more, only
for a column with an odd cell: ``_as_ints``)."""

from __future__ import annotations

import atexit
import csv
import io
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.csv as pacsv

from ..columnar import ActivityColumns, Batch, CounterColumns, GroupBatches, Ints
from ..errors import InputError
from ..records import SourceInfo
from ..validate import INT64_MAX, INT64_MIN
from . import rocprof_csv
from .base import GZIP_MAGIC, is_gzip, open_binary
from .rocprof_csv import _agent, _bad_line, _header, _int, _rows

_KERNEL_INTS = (
    ("stream", ("Stream_Id", "Queue_Id")),
    ("correlation", ("Correlation_Id",)),
    ("tid", ("Thread_Id",)),
    ("grid_x", ("Grid_Size_X",)),
    ("grid_y", ("Grid_Size_Y",)),
    ("grid_z", ("Grid_Size_Z",)),
    ("block_x", ("Workgroup_Size_X",)),
    ("block_y", ("Workgroup_Size_Y",)),
    ("block_z", ("Workgroup_Size_Z",)),
)
_TEXT = pa.dictionary(pa.int32(), pa.binary())


def read_columns(path: Path, info: SourceInfo) -> Iterator[Batch]:
    """The rows of a kernel_trace or counter_collection file as column batches (``COLUMNAR_KINDS``)."""
    if info.kind == "kernel_trace":
        yield from _kernel_batches(path)
    elif info.kind == "counter_collection":
        yield from _counter_batches(path)
    else:
        raise InputError(f"{path}: rocprofv3 {info.kind} is not read as columns; pass --format")


def _columns_of(path: Path) -> list[str]:
    cols = _header(path) or []
    if cols:
        cols[0] = cols[0].lstrip("\ufeff")
    return cols


def read_group(paths: Sequence[Path], info: SourceInfo) -> GroupBatches | None:
    """The column batches of several small files of one kind (``info.kind``) and one header, in one
    pyarrow parse of their bytes joined (``GroupBatches.per_file``: each file's as ``read_columns``
    reads it): pyarrow's set-up costs about as much as parsing a 480-row file (2,048 of them:
    ~0.35-0.7 ms each). None when they cannot
    be read together as they are: another header, gzip, a cell that is not an int64, any line pyarrow
    refuses, a value spanning lines; the caller then reads each file on its own, which also reports
    precisely what is wrong with a damaged one.

    Each file's rows are found by its count of non-empty lines; they are the parse's own rows only when
    the parse made exactly one row of every such line (each row takes at least one line, so equal totals
    mean no row spans two), which is checked: a file's rows then never mix with another's."""
    if info.kind not in rocprof_csv.COLUMNAR_KINDS:
        return None
    header: bytes | None = None
    bodies: list[bytes] = []
    counts: list[int] = []
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if data.startswith(GZIP_MAGIC):
            return None
        head, _nl, body = data.removeprefix(_BOM).partition(b"\n")
        if header is None:
            header = head
        elif head != header:
            return None
        counts.append(_lines(body))
        bodies.append(body if not body or body.endswith((b"\n", b"\r")) else body + b"\n")
    cols = rocprof_csv.header_fields(header or b"")
    if not cols:
        return None
    layout = _KernelLayout.of(set(cols))
    wanted = layout.columns() if info.kind == "kernel_trace" else _COUNTER_COLUMNS
    try:
        reader = pacsv.open_csv(
            pa.py_buffer(b"".join([header or b"", b"\n", *bodies])),
            read_options=pacsv.ReadOptions(block_size=rocprof_csv.BLOCK, use_threads=False),
            parse_options=_PARSE,
            convert_options=_convert(*wanted, careful=False),
        )
        batches = list(reader)
    except (pa.ArrowException, OSError, EOFError):  # (e.g. a column missing from the header: ArrowKeyError)
        return None
    if sum(b.num_rows for b in batches) != sum(counts):
        return None
    # each batch's columns made once (a damaged cell: the files are read one by one instead, which names
    # the file and line)
    names = (_Names(), _Names())
    made: list[Batch] = []
    try:
        for batch in batches:
            b: Batch | None
            if info.kind == "kernel_trace":
                b = _kernel_columns(paths[0], batch, 0, layout, names[0])
            else:
                b = _counter_columns(paths[0], batch, 0, *names)
            if b is not None:
                made.append(b)
    except InputError:
        return None
    return GroupBatches(made, counts)


def _lines(body: bytes) -> int:
    """The non-empty lines of ``body`` (line ends: LF, CRLF or CR, as pyarrow reads them)."""
    if b"\r" not in body and b"\n\n" not in body and not body.startswith(b"\n"):
        return body.count(b"\n") + (1 if body and not body.endswith(b"\n") else 0)
    lines = body.splitlines()
    return len(lines) - lines.count(b"")


_BOM = "\ufeff".encode()


def _decode(values: pa.Array, cache: dict[bytes, str]) -> list[str]:
    out = []
    for raw in values.to_pylist():
        s = cache.get(raw)
        if s is None:
            s = cache[raw] = raw.decode("utf-8", "replace")
        out.append(s)
    return out


#: blocks a file's reader may read past the batches taken from it (``_Paced``). pyarrow's streaming
#: reader reads up to 32 blocks ahead in its I/O thread, whatever its thread settings: 128 MB of CSV a
#: file at 4 MB blocks, ~230 MB held by each worker at 4x the benchmark's input. Batch k needs blocks k
#: and k + 1 (a row cut by a block's end is completed from the next one), so 2 keeps a block in hand.
#: One 206 MB counter file read alone, the batches taken at 20 ms each: peak anonymous memory 184-191 ->
#: 61-67 MB, CPU about the same (0.64-0.72 -> 0.57-0.74 s).
AHEAD = 2
#: a reader waiting this long for a batch while its blocks are held back gets one more (never met when
#: batch k needs only blocks up to k + 1, as above; it keeps any other case from waiting forever)
STARVED = 0.5


class _Paced(io.RawIOBase):
    """A byte stream that pyarrow's reader (through ``pa.PythonFile``, from its I/O thread) reads no
    further than ``AHEAD`` blocks past the batches taken from it: ``read`` waits until ``took`` says a
    batch was taken, or ``close`` that the reader is done with (then it reads as at the end of the
    file, so the thread of a reader left mid-file never waits)."""

    def __init__(self, raw: Any) -> None:
        super().__init__()
        self._raw = raw
        self._cond = threading.Condition()
        self._reads = 0  # blocks read
        self._taken = 0  # batches taken
        self._wanted: float | None = None  # since when a batch is awaited (None: none is)
        self._stopped = False
        self._inside = 0  # threads in ``read`` (the raw stream is closed once none is and it is stopped)
        _OPEN.add(self)

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        with self._cond:
            self._inside += 1
            while not self._stopped and self._reads > self._taken + AHEAD:
                if not self._cond.wait(STARVED) and self._starved():
                    break
            stopped = self._stopped
            self._reads += not stopped
        try:
            if stopped:
                return b""
            if n is None or n < 0:
                return bytes(self._raw.read())
            parts = []  # n bytes, or what is left (a short read would make a short block)
            while n > 0 and (part := self._raw.read(n)):
                parts.append(part)
                n -= len(part)
            return b"".join(parts)
        finally:
            with self._cond:
                self._inside -= 1
                if self._stopped and not self._inside:
                    self._raw.close()  # (closed by the last thread to leave once stopped: ``close``)

    def _starved(self) -> bool:
        wanted = self._wanted
        if wanted is not None and time.monotonic() - wanted >= STARVED:
            self._wanted = time.monotonic()
            return True
        return False

    def want(self) -> None:
        """A batch is awaited (from ``open_csv`` on: it reads the first batch)."""
        with self._cond:
            self._wanted = time.monotonic()

    def took(self) -> None:
        with self._cond:
            self._taken += 1
            self._wanted = None
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            if not self._inside:
                self._raw.close()
        super().close()


#: the streams not closed yet (``_close_at_exit``)
_OPEN: weakref.WeakSet[_Paced] = weakref.WeakSet()


@atexit.register
def _close_at_exit() -> None:
    """Close every stream still open, and give their readers' threads time to leave ``read``, before
    the interpreter is finalized: a thread of pyarrow's that enters Python then (a reader left open
    mid-file, e.g. held by an exception's frames, and closed as its frames are cleared) aborts the
    process ("PyGILState_Release: thread state must be current")."""
    streams = list(_OPEN)
    for s in streams:
        s.close()
    deadline = time.monotonic() + 2.0
    while any(s._inside for s in streams) and time.monotonic() < deadline:
        time.sleep(0.005)
    if streams:
        time.sleep(0.02)  # (a thread that just left ``read`` may still hold its frame, or want the GIL back)


def _batches(path: Path, text: list[str], ints: list[str], floats: list[str]) -> Iterator[tuple[pa.RecordBatch, int]]:
    """Record batches of the named columns (text: dictionary-encoded bytes; ints: int64, or text once a
    cell pyarrow cannot read as int64 came up; floats: float64), each with the file's row index of its
    first row. A file larger than a block, or gzipped, is read through ``_Paced``, except when read on
    from a row (``careful``: the rows before it are skipped by the reader, whole blocks of them yielding
    no batch, which the pacing would hold back)."""
    done = 0
    careful = False
    gz = is_gzip(path)
    threads = rocprof_csv.THREADS and path.stat().st_size > rocprof_csv.BLOCK
    while True:
        paced: _Paced | None = None
        try:
            if (threads or gz) and not done:
                paced = _Paced(pa.input_stream(str(path), compression="gzip") if gz else open(path, "rb"))
            source: Any = pa.PythonFile(paced, mode="r") if paced is not None else (
                pa.input_stream(str(path), compression="gzip") if gz else str(path)
            )
            if paced is not None:
                paced.want()
            reader = pacsv.open_csv(
                source,
                read_options=pacsv.ReadOptions(
                    block_size=rocprof_csv.BLOCK, skip_rows_after_names=done, use_threads=threads
                ),
                parse_options=_PARSE,
                convert_options=_convert(text, ints, floats, careful),
            )
            for batch in reader:
                if paced is not None:
                    paced.took()
                yield batch, done
                done += batch.num_rows
                if paced is not None:
                    paced.want()
            return
        except pa.ArrowInvalid as e:
            if "conversion error to int64" in str(e) and not careful:
                careful = True  # read on from the row reached, integers as text (``_as_ints``)
                continue
            raise _diagnose(path, e) from None
        except (OSError, EOFError) as e:  # a damaged gzip stream, an I/O error
            raise _diagnose(path, e) from None
        finally:
            if paced is not None:
                paced.close()


_PARSE = pacsv.ParseOptions(newlines_in_values=True)


def _convert(text: list[str], ints: list[str], floats: list[str], careful: bool) -> pacsv.ConvertOptions:
    """Read only these columns: text dictionary-encoded, ints as int64 (as text once ``careful``: a cell
    pyarrow could not read as an int64 came up), floats as float64; empty cells are null."""
    types: dict[str, pa.DataType] = {c: _TEXT for c in text}
    types.update({c: (pa.string() if careful else pa.int64()) for c in ints})
    types.update({c: pa.float64() for c in floats})
    return pacsv.ConvertOptions(include_columns=list(types), column_types=types, null_values=[""])


def _diagnose(path: Path, e: Exception) -> InputError:
    """The precise error for a file pyarrow could not read: the first line the csv module finds of the
    wrong field count or malformed, else pyarrow's own words."""
    try:
        for _ in _rows(path):
            pass
    except InputError as err:
        return err
    except (OSError, EOFError) as err:
        return InputError(f"{path}: cannot read it ({err}); re-copy the file from the profiler output")
    return InputError(f"{path}: cannot read it as rocprofv3 CSV ({e}); the file is damaged: re-copy it")


def _line_of(path: Path, row: int) -> int:
    """The line number (1 = the header) where data row ``row`` (0-based, blank lines not counted) ends."""
    with open_binary(path) as f:
        reader = csv.reader(io.TextIOWrapper(f, encoding="utf-8", errors="replace", newline=""))
        next(reader, None)
        i = -1
        for r in reader:
            if r:
                i += 1
                if i == row:
                    return reader.line_num
    return 0


def _as_ints(path: Path, col: pa.Array, first_row: int, field: str) -> Ints:
    """An int64 column (parsed by pyarrow) or one read as text after an odd cell came up: the text is
    converted by pyarrow where it can be, else cell by cell as ``_int`` reads it (``64.0`` -> 64)."""
    if col.type != pa.int64():
        # (pyarrow.compute only here, for a column with an odd cell: importing it costs each worker
        # ~75 ms as it starts, before its first parse)
        import pyarrow.compute as pc

        try:
            col = pc.cast(pc.if_else(pc.equal(col, ""), pa.scalar(None, pa.string()), col), pa.int64())
        except pa.ArrowInvalid:
            values: list[int | None] = []
            for i, cell in enumerate(col.to_pylist()):
                try:
                    v = _int(cell)
                    if v is not None and not INT64_MIN <= v <= INT64_MAX:
                        raise ValueError(f"{v} does not fit in 64 bits")
                except ValueError as e:
                    raise _bad_line(path, _line_of(path, first_row + i), ValueError(f"{field}: {e}")) from None
                values.append(v)
            col = pa.array(values, pa.int64())
    ints = numpy_of(col)
    if not col.null_count:
        return Ints(ints)
    null = null_mask(col)
    return Ints(np.where(null, 0, ints), null)


#: numpy types of the pyarrow columns read here
_NUMPY: dict[pa.DataType, np.dtype[Any]] = {
    pa.int64(): np.dtype(np.int64), pa.int32(): np.dtype(np.int32), pa.int16(): np.dtype(np.int16),
    pa.int8(): np.dtype(np.int8), pa.float64(): np.dtype(np.float64),
}


def numpy_of(col: pa.Array) -> Any:
    """A fixed-width pyarrow column's values as a numpy array over the same memory (read-only; cells
    that are null hold anything). Not ``Array.to_numpy``: in pyarrow 26 it imports pandas when pandas is
    installed (~0.4 s CPU and ~50 MB in every process that parses; ``pa.array`` and compute functions
    given Python scalars do too)."""
    dtype = _NUMPY[col.type]
    return np.frombuffer(col.buffers()[1], dtype=dtype, count=len(col), offset=col.offset * dtype.itemsize)


def null_mask(col: pa.Array) -> Any:
    """True where a pyarrow column's cell is null (its validity bitmap, unpacked)."""
    bitmap = col.buffers()[0]
    if bitmap is None:
        return np.zeros(len(col), dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    return bits[col.offset : col.offset + len(col)] == 0


def _required(path: Path, ints: Ints, first_row: int, what: str) -> npt.NDArray[np.int64]:
    if ints.null is not None:
        i = int(np.argmax(ints.null))
        raise _bad_line(path, _line_of(path, first_row + i), ValueError(f"{what} is empty"))
    return ints.values


class _KernelLayout(NamedTuple):
    """Which columns of a kernel_trace header are read, and as what (from its column names)."""

    #: Activity field -> the file's column for it (None: absent, NULL on every row)
    ints: dict[str, str | None]
    agent: str | None

    @classmethod
    def of(cls, cols: set[str]) -> _KernelLayout:
        return cls({f: next((c for c in names if c in cols), None) for f, names in _KERNEL_INTS},
                   "Agent_Id" if "Agent_Id" in cols else None)

    def columns(self) -> tuple[list[str], list[str], list[str]]:
        """(text, integer, float) columns, as ``_batches`` takes them."""
        text = ["Kernel_Name"] + ([self.agent] if self.agent else [])
        return text, ["Start_Timestamp", "End_Timestamp", *(c for c in self.ints.values() if c is not None)], []


class _Names:
    """The decoded names and agents of a file's (or a group's) batches: each distinct value decoded once
    (``_decode``), however many batches hold it."""

    def __init__(self) -> None:
        self.text: dict[bytes, str] = {}
        self.agents: dict[bytes, int | None] = {}

    def of(self, dictionary: pa.Array) -> list[str]:
        return _decode(dictionary, self.text)


def _kernel_batches(path: Path) -> Iterator[ActivityColumns]:
    cols = set(_columns_of(path))
    if not cols:
        return
    layout = _KernelLayout.of(cols)
    names = _Names()
    for batch, row0 in _batches(path, *layout.columns()):
        out = _kernel_columns(path, batch, row0, layout, names)
        if out is not None:
            yield out


def _kernel_columns(
    path: Path, batch: pa.RecordBatch, row0: int, layout: _KernelLayout, cache: _Names
) -> ActivityColumns | None:
    """One record batch of ``path``'s kernel rows (``row0``: the file's row index of its first) as columns."""
    if not batch.num_rows:
        return None
    name = batch.column("Kernel_Name")
    start = _required(path, _as_ints(path, batch.column("Start_Timestamp"), row0, "start time (ns)"), row0,
                      "Start_Timestamp")
    end = _required(path, _as_ints(path, batch.column("End_Timestamp"), row0, "end time (ns)"), row0,
                    "End_Timestamp")
    duration = end - start
    # int64 overflow of end - start (only with ends and starts of opposite signs far apart)
    over = (end < 0) != (start < 0)
    if bool(over.any()) and bool((((end ^ duration) & (start ^ end)) < 0).any()):
        i = int(np.argmax(((end ^ duration) & (start ^ end)) < 0))
        raise _bad_line(path, _line_of(path, row0 + i), ValueError("duration (ns) does not fit in 64 bits"))
    out = ActivityColumns("kernel", cache.of(name.dictionary), numpy_of(name.indices), start, duration)
    for f, c in layout.ints.items():
        if c is not None:
            out.ints[f] = _as_ints(path, batch.column(c), row0, f)
    if layout.agent:
        a = batch.column(layout.agent)
        agents = cache.agents
        devs = []
        for raw in a.dictionary.to_pylist():
            if raw not in agents:
                agents[raw] = _agent(raw.decode("utf-8", "replace"))
            devs.append(agents[raw])
        known = np.array([-1 if d is None else d for d in devs], dtype=np.int64)
        idx = numpy_of(a.indices)
        vals = known[idx] if len(known) else np.zeros(len(idx), dtype=np.int64)
        null = np.array([d is None for d in devs], dtype=bool)[idx] if None in devs else None
        out.ints["device"] = Ints(np.where(null, 0, vals) if null is not None else vals, null)
    return out


def _counter_batches(path: Path) -> Iterator[CounterColumns]:
    if not _columns_of(path):
        return
    kernels, counters = _Names(), _Names()
    for batch, row0 in _batches(path, *_COUNTER_COLUMNS):
        out = _counter_columns(path, batch, row0, kernels, counters)
        if out is not None:
            yield out


_COUNTER_COLUMNS: tuple[list[str], list[str], list[str]] = (["Kernel_Name", "Counter_Name"], ["Dispatch_Id"],
                                                            ["Counter_Value"])


def _counter_columns(
    path: Path, batch: pa.RecordBatch, row0: int, kernels: _Names, counters: _Names
) -> CounterColumns | None:
    if not batch.num_rows:
        return None
    k = batch.column("Kernel_Name")
    c = batch.column("Counter_Name")
    v = batch.column("Counter_Value")
    if v.null_count:
        i = int(np.argmax(null_mask(v)))
        raise _bad_line(path, _line_of(path, row0 + i), ValueError("Counter_Value is empty"))
    return CounterColumns(kernels.of(k.dictionary), numpy_of(k.indices), counters.of(c.dictionary), numpy_of(c.indices),
                          numpy_of(v),
                          _as_ints(path, batch.column("Dispatch_Id"), row0, "dispatch id"))
