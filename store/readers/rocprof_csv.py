"""rocprofv3 CSV (``--output-format csv``): kernel_trace, counter_collection, memory_copy_trace,
memory_allocation_trace, scratch_memory_trace and the API traces. Columns are mapped by header name:
both the 2025 layout (``Agent 4`` strings, Stream_Id, LDS/VGPR columns) and the 2024 layout (integer
Agent_Id, no Stream_Id, Private/Group_Segment_Size) are read, as is rocpd2csv output (leading ``Guid``).
Timestamps are integer ns on the node's CLOCK_BOOTTIME. Derived ``*_stats.csv``, ``domain_stats.csv``
and ``agent_info.csv`` are not read: they repeat what the traces hold; PC sampling CSVs
(``pc_sampling_host_trap.csv``, ``pc_sampling_stochastic.csv``) are samples, not timed activity, and
are skipped too (ingest lists them as files it does not read).

``rocprofv3 --sys-trace`` writes, per process, one API trace per domain (rocprofiler-sdk's
``domain_type.cpp``): ``<pid>_hip_api_trace.csv``, ``_hsa_api_trace.csv``, ``_marker_api_trace.csv``,
``_rccl_api_trace.csv``, ``_rocdecode_api_trace.csv``, ``_rocjpeg_api_trace.csv``, all with the same
columns. Each is its own content kind (``hip_api_trace``...), taken from the file name, else from the
first row's ``Domain``, so one rank folder holds all of them. Memory allocations and scratch memory
events are host-side runtime operations: ``api`` rows of category ``memory`` (not GPU time)."""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# pyarrow's allocator (mimalloc), as this wheel loads it, held the CSV reader's freed block buffers
# instead of giving them back to the system: tens of MB per process at any moment. With a purge delay
# set it returns them 10 ms after they are freed. Read by mimalloc when pyarrow loads (this module is
# the only one that imports pyarrow; a program that loaded it before keeps its own setting, as does a
# user who sets the variable). Measured, profdb ingest of the benchmark's long-counters run, tree peak
# PSS (CPU seconds): 1x unset 287-308 MB (21.2-22.5 s), 10 ms 229-234 MB (21.8-23.6 s), 0 ms 214-219
# MB (23.9-26.4 s); 4x unset 348 MB (80.5 s), 10 ms 261 MB (80.3 s). 0 ms cost CPU; 10 ms does not.
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "10")

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.csv as pacsv  # noqa: E402

from ..columnar import ActivityColumns, Batch, CounterColumns, Ints
from ..errors import InputError
from ..records import Activity, RankHint, Record, SourceInfo
from ..validate import INT64_MAX, INT64_MIN
from .base import display_name, head, is_gzip, open_binary

NAME = "rocprof-csv"
DESCRIPTION = (
    "rocprofv3 CSV: kernel_trace, counter_collection, memory_copy_trace, memory_allocation_trace, "
    "scratch_memory_trace, hip/hsa/marker/rccl/rocdecode/rocjpeg API traces"
)

_PID_IN_NAME = re.compile(r"^(\d+)_")

# content kind -> columns that identify it (all must be present) and columns it needs
_KINDS: dict[str, tuple[set[str], set[str]]] = {
    "counter_collection": (
        {"Counter_Name", "Counter_Value"},
        {"Kernel_Name", "Counter_Name", "Counter_Value", "Dispatch_Id"},
    ),
    "kernel_trace": ({"Kernel_Name", "Dispatch_Id"}, {"Kernel_Name", "Start_Timestamp", "End_Timestamp"}),
    "memory_copy_trace": ({"Direction", "Source_Agent_Id"}, {"Direction", "Start_Timestamp", "End_Timestamp"}),
    "memory_allocation_trace": (
        {"Operation", "Allocation_Size", "Address"},
        {"Operation", "Start_Timestamp", "End_Timestamp"},
    ),
    "scratch_memory_trace": ({"Operation", "Queue_Id"}, {"Operation", "Start_Timestamp", "End_Timestamp"}),
    "api_trace": ({"Domain", "Function"}, {"Domain", "Function", "Start_Timestamp", "End_Timestamp"}),
}

#: rocprofv3's API trace files (rocprofiler-sdk source/lib/output/domain_type.cpp), by the Domain
#: column's prefix (HIP_RUNTIME_API, HIP_COMPILER_API_EXT, HSA_CORE_API, MARKER_CORE_API, RCCL_API, ...)
API_TRACES = {
    "HIP": "hip_api_trace",
    "HSA": "hsa_api_trace",
    "MARKER": "marker_api_trace",
    "RCCL": "rccl_api_trace",
    "ROCDECODE": "rocdecode_api_trace",
    "ROCJPEG": "rocjpeg_api_trace",
}
_API_FILE = re.compile(r"(?:^|_)(" + "|".join(API_TRACES.values()) + r")\.csv$")


def _header(path: Path) -> list[str] | None:
    data = head(path, 8192)
    if not data:
        return None
    line = data.split(b"\n", 1)[0].decode("utf-8", "replace").strip("\r\ufeff")
    try:
        return next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return None


def _kind_of(cols: set[str]) -> str | None:
    for kind, (marks, _need) in _KINDS.items():
        if marks <= cols:
            return kind
    return None


_NAME_KINDS = (
    ("counter_collection.csv", "counter_collection"),
    ("kernel_trace.csv", "kernel_trace"),
    ("memory_copy_trace.csv", "memory_copy_trace"),
    ("memory_allocation_trace.csv", "memory_allocation_trace"),
    ("scratch_memory_trace.csv", "scratch_memory_trace"),
    ("api_trace.csv", "api_trace"),
)


def _kind(path: Path, cols: list[str] | None) -> str | None:
    """By header; failing that by rocprofv3's file name (so a damaged header gets a precise error)."""
    kind = _kind_of(set(cols or []))
    if kind is None and cols:
        name = display_name(path)
        kind = next((k for suffix, k in _NAME_KINDS if name.endswith(suffix)), None)
    return kind


def detect(path: Path) -> bool:
    if not display_name(path).endswith(".csv"):
        return False
    return _kind(path, _header(path)) is not None


def inspect(path: Path) -> SourceInfo:
    cols = _header(path)
    kind = _kind(path, cols)
    if cols is None or kind is None:
        raise InputError(
            f"{path}: not a rocprofv3 CSV trace (header has none of kernel_trace, counter_collection, "
            "memory_copy_trace or API trace columns); check the file or pass --format"
        )
    data = head(path, 8192)
    if b"\n" not in data and len(data) < 8192:
        raise InputError(
            f"{path}: the file ends inside its header line (no line end, no rows); it was cut while being "
            "written or copied: re-copy it from the profiler output"
        )
    missing = _KINDS[kind][1] - set(cols)
    if missing:
        raise InputError(
            f"{path}: rocprofv3 {kind} CSV is missing required column(s) {', '.join(sorted(missing))}; "
            "the file is damaged or from an unsupported rocprofv3 version "
            "(re-export it with rocprofv3 --output-format csv)"
        )
    hint = RankHint(origin="file name")
    m = _PID_IN_NAME.match(path.name)
    first: list[str] | None = None
    if (not m and "Process_Id" in cols) or kind == "api_trace":
        # first data row: its pid (counter_collection and API traces carry it), an API trace's domain
        with open_binary(path) as f:
            rows = csv.reader(io.TextIOWrapper(f, encoding="utf-8", errors="replace", newline=""))
            next(rows, None)
            first = next(rows, None)
        if not first or len(first) != len(cols):
            first = None
    if m:
        hint.pid = int(m.group(1))
    elif first is not None and "Process_Id" in cols:
        try:
            hint.pid = int(first[cols.index("Process_Id")])
            hint.origin = "Process_Id column"
        except ValueError:
            pass
    if kind == "api_trace":
        kind = _api_kind(path, cols, first)
    return SourceInfo(format=NAME, kind=kind, hint=hint)


def _api_kind(path: Path, cols: list[str], first: list[str] | None) -> str:
    """An API trace's content kind: rocprofv3's file name (``<pid>_hip_api_trace.csv``), else the
    domain of its first row, else plain ``api_trace`` (an empty trace of unknown domain)."""
    m = _API_FILE.search(display_name(path))
    if m:
        return m.group(1)
    if first is not None:
        domain = first[cols.index("Domain")]
        for prefix, kind in API_TRACES.items():
            if domain.startswith(prefix):
                return kind
    return "api_trace"


def _agent(value: str) -> int | None:
    """``Agent 4`` (2025) or ``4`` (2024) -> 4."""
    if not value:
        return None
    if value[0] == "A":
        value = value.rsplit(" ", 1)[-1]
    try:
        return int(value)
    except ValueError:
        return None


def _int(value: str) -> int | None:
    """A cell as an integer (``64.0`` -> 64), None when empty; a ValueError naming the cell when it is
    no number, or infinite (which ``int(float(...))`` raised as an OverflowError without a line)."""
    if value == "":
        return None
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return int(float(value))
    except (ValueError, OverflowError):
        raise ValueError(f"{value!r} is not an integer") from None


def _rows(path: Path) -> Iterator[tuple[int, list[str], dict[str, int]]]:
    with open_binary(path) as f:
        text = io.TextIOWrapper(f, encoding="utf-8", errors="replace", newline="")
        reader = csv.reader(text)
        cols = next(reader, None)
        if cols is None:
            return
        cols[0] = cols[0].lstrip("\ufeff")
        idx = {c: i for i, c in enumerate(cols)}
        width = len(cols)
        try:
            for lineno, row in enumerate(reader, start=2):
                if len(row) != width:
                    if not row:
                        continue
                    raise _truncated(path, lineno, len(row), width)
                yield lineno, row, idx
        except csv.Error as e:
            raise InputError(f"{path}: line {reader.line_num}: malformed CSV ({e}); re-copy the file") from e


def read(path: Path, info: SourceInfo) -> Iterator[Record]:
    readers: dict[str, Callable[[Path], Iterator[Record]]] = {
        "kernel_trace": _kernels,
        "counter_collection": _counters,
        "memory_copy_trace": _copies,
        "memory_allocation_trace": _allocations,
        "scratch_memory_trace": _scratch,
    }
    read_kind = readers.get(info.kind, _apis if info.kind.endswith("api_trace") else None)
    if read_kind is None:
        raise InputError(
            f"{path}: rocprofv3 CSV of unknown content kind {info.kind!r}; check the file or pass --format"
        )
    try:
        yield from read_kind(path)
    except (ValueError, IndexError) as e:
        raise InputError(f"{path}: unexpected value ({e}); the file is damaged or not rocprofv3 output") from e


def _bad_line(path: Path, lineno: int, e: Exception) -> InputError:
    return InputError(f"{path}: line {lineno}: {e}; the file is damaged or not rocprofv3 output")


def _truncated(path: Path, lineno: int, n: int, width: int) -> InputError:
    return InputError(
        f"{path}: line {lineno} has {n} fields where the header has {width}; "
        "the file looks truncated or damaged: re-copy it from the profiler output"
    )



# The two hot kinds (kernel_trace and counter_collection hold nearly all rows of a run, and their long
# templated kernel names nearly all bytes) are parsed by pyarrow's CSV reader: multi-threaded C++,
# streamed in record batches of BLOCK bytes (memory flat in the file's size), names dictionary-encoded
# (each distinct name decoded once per batch, with invalid UTF-8 replaced as the csv module's
# errors="replace" does), integers parsed straight into int64 columns. Quoting, doubled quotes, names
# spanning lines, CRLF, a BOM and blank lines are the CSV rules pyarrow and the csv module share.
# Two things pyarrow refuses that the rows must still survive: a cell such as "64.0" or " 1" in an
# integer column is read from that point on as text and converted per column (the way ``_int`` reads a
# cell); a line pyarrow cannot split (a field count not the header's, a cut last line) is located and
# reported by one pass of the csv module over the file (``_diagnose``), never silently skipped.

#: bytes of CSV per record batch (a batch is parsed by one thread; ~6k long-name or ~6k short-name rows)
BLOCK = 1 << 20
#: pyarrow's threads parse a file's blocks in parallel; a file of one block gains nothing from them and
#: pays their start-up (2,048 files of 122 rows: 0.82 -> 0.75 ms per file read without; 1,953 rows:
#: 3.3 -> 2.7 ms), so only files larger than a block are read with threads
THREADS = True
COLUMNAR_KINDS = frozenset({"kernel_trace", "counter_collection"})

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


def _decode(values: pa.Array, cache: dict[bytes, str]) -> list[str]:
    out = []
    for raw in values.to_pylist():
        s = cache.get(raw)
        if s is None:
            s = cache[raw] = raw.decode("utf-8", "replace")
        out.append(s)
    return out


def _batches(path: Path, text: list[str], ints: list[str], floats: list[str]) -> Iterator[tuple[pa.RecordBatch, int]]:
    """Record batches of the named columns (text: dictionary-encoded bytes; ints: int64, or text once a
    cell pyarrow cannot read as int64 came up; floats: float64), each with the file's row index of its
    first row."""
    done = 0
    careful = False
    threads = THREADS and path.stat().st_size > BLOCK
    while True:
        types: dict[str, pa.DataType] = {c: _TEXT for c in text}
        types.update({c: (pa.string() if careful else pa.int64()) for c in ints})
        types.update({c: pa.float64() for c in floats})
        try:
            source: Any = pa.input_stream(str(path), compression="gzip") if is_gzip(path) else str(path)
            reader = pacsv.open_csv(
                source,
                read_options=pacsv.ReadOptions(block_size=BLOCK, skip_rows_after_names=done, use_threads=threads),
                parse_options=pacsv.ParseOptions(newlines_in_values=True),
                convert_options=pacsv.ConvertOptions(include_columns=list(types), column_types=types, null_values=[""]),
            )
            for batch in reader:
                yield batch, done
                done += batch.num_rows
            return
        except pa.ArrowInvalid as e:
            if "conversion error to int64" in str(e) and not careful:
                careful = True  # read on from the row reached, integers as text (``_as_ints``)
                continue
            raise _diagnose(path, e) from None
        except (OSError, EOFError) as e:  # a damaged gzip stream, an I/O error
            raise _diagnose(path, e) from None


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


def _kernel_batches(path: Path) -> Iterator[ActivityColumns]:
    cols = set(_columns_of(path))
    if not cols:
        return
    ints = {f: next((c for c in names if c in cols), None) for f, names in _KERNEL_INTS}
    present = [c for c in ints.values() if c is not None]
    agent = "Agent_Id" if "Agent_Id" in cols else None
    text = ["Kernel_Name"] + ([agent] if agent else [])
    cache: dict[bytes, str] = {}
    agents: dict[bytes, int | None] = {}
    for batch, row0 in _batches(path, text, ["Start_Timestamp", "End_Timestamp", *present], []):
        if not batch.num_rows:
            continue
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
        out = ActivityColumns("kernel", _decode(name.dictionary, cache), numpy_of(name.indices), start, duration)
        for f, c in ints.items():
            if c is not None:
                out.ints[f] = _as_ints(path, batch.column(c), row0, f)
        if agent:
            a = batch.column(agent)
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
        yield out


def _counter_batches(path: Path) -> Iterator[CounterColumns]:
    if not _columns_of(path):
        return
    kcache: dict[bytes, str] = {}
    ccache: dict[bytes, str] = {}
    for batch, row0 in _batches(path, ["Kernel_Name", "Counter_Name"], ["Dispatch_Id"], ["Counter_Value"]):
        if not batch.num_rows:
            continue
        k = batch.column("Kernel_Name")
        c = batch.column("Counter_Name")
        v = batch.column("Counter_Value")
        if v.null_count:
            i = int(np.argmax(null_mask(v)))
            raise _bad_line(path, _line_of(path, row0 + i), ValueError("Counter_Value is empty"))
        yield CounterColumns(
            _decode(k.dictionary, kcache), numpy_of(k.indices), _decode(c.dictionary, ccache), numpy_of(c.indices),
            numpy_of(v), _as_ints(path, batch.column("Dispatch_Id"), row0, "dispatch id"),
        )


def _kernels(path: Path) -> Iterator[Record]:
    for b in _kernel_batches(path):
        yield from b.records()


def _counters(path: Path) -> Iterator[Record]:
    for b in _counter_batches(path):
        yield from b.records()

def _copies(path: Path) -> Iterator[Record]:
    for lineno, row, ix in _rows(path):
        try:
            start = int(row[ix["Start_Timestamp"]])
            end = int(row[ix["End_Timestamp"]])
            src = _agent(row[ix["Source_Agent_Id"]]) if "Source_Agent_Id" in ix else None
            dst = _agent(row[ix["Destination_Agent_Id"]]) if "Destination_Agent_Id" in ix else None
            yield Activity(
                "memcpy",
                row[ix["Direction"]],
                start,
                end - start,
                "memory",
                dst if dst else src,
                _int(row[ix["Stream_Id"]]) if "Stream_Id" in ix else None,
                _int(row[ix["Correlation_Id"]]) if "Correlation_Id" in ix else None,
                args=json.dumps({"src_agent": src, "dst_agent": dst}),
            )
        except ValueError as e:
            raise _bad_line(path, lineno, e) from e


def _apis(path: Path) -> Iterator[Record]:
    for lineno, row, ix in _rows(path):
        try:
            start = int(row[ix["Start_Timestamp"]])
            end = int(row[ix["End_Timestamp"]])
            domain = row[ix["Domain"]]
            kind = "annotation" if domain.startswith("MARKER") else "api"
            yield Activity(
                kind,
                row[ix["Function"]],
                start,
                end - start,
                None,
                None,
                None,
                _int(row[ix["Correlation_Id"]]) if "Correlation_Id" in ix else None,
                _int(row[ix["Process_Id"]]) if "Process_Id" in ix else None,
                _int(row[ix["Thread_Id"]]) if "Thread_Id" in ix else None,
                args=json.dumps({"domain": domain}),
            )
        except ValueError as e:
            raise _bad_line(path, lineno, e) from e


def _allocations(path: Path) -> Iterator[Record]:
    """memory_allocation_trace: hipMalloc/hipFree-level allocations (Operation MEMORY_ALLOCATION_ALLOCATE,
    _FREE, _VMEM_ALLOCATE...); the agent is set for allocations only, as rocprofv3 writes it."""
    for lineno, row, ix in _rows(path):
        try:
            start = int(row[ix["Start_Timestamp"]])
            end = int(row[ix["End_Timestamp"]])
            size = _int(row[ix["Allocation_Size"]]) if "Allocation_Size" in ix else None
            args: dict[str, Any] = {"bytes": size}
            if "Address" in ix:
                args["address"] = row[ix["Address"]]
            yield Activity(
                "api",
                row[ix["Operation"]],
                start,
                end - start,
                "memory",
                _agent(row[ix["Agent_Id"]]) if "Agent_Id" in ix else None,
                None,
                _int(row[ix["Correlation_Id"]]) if "Correlation_Id" in ix else None,
                args=json.dumps(args),
            )
        except ValueError as e:
            raise _bad_line(path, lineno, e) from e


def _scratch(path: Path) -> Iterator[Record]:
    """scratch_memory_trace: the runtime's scratch (private memory) allocations for a queue
    (SCRATCH_MEMORY_ALLOC, _FREE, _ASYNC_RECLAIM)."""
    for lineno, row, ix in _rows(path):
        try:
            start = int(row[ix["Start_Timestamp"]])
            end = int(row[ix["End_Timestamp"]])
            flags = next((row[ix[c]] for c in ("Alloc_Flags", "Alloc_flags") if c in ix), None)
            args: dict[str, Any] = {"flags": flags}
            if "Allocation_Size" in ix:
                args["bytes"] = _int(row[ix["Allocation_Size"]])
            yield Activity(
                "api",
                row[ix["Operation"]],
                start,
                end - start,
                "memory",
                _agent(row[ix["Agent_Id"]]) if "Agent_Id" in ix else None,
                _int(row[ix["Queue_Id"]]),
                None,
                None,
                _int(row[ix["Thread_Id"]]) if "Thread_Id" in ix else None,
                args=json.dumps(args),
            )
        except ValueError as e:
            raise _bad_line(path, lineno, e) from e
