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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..records import Activity, RankHint, Record, SourceInfo
from ..validate import shown
from .base import display_name, head, open_binary

# pyarrow's allocator (mimalloc), as this wheel loads it, held the CSV reader's freed block buffers instead of
# giving them back to the system: tens of MB per process at any moment. With a purge delay set it returns them
# 10 ms after they are freed. Read by mimalloc when pyarrow loads (set here, with the readers:
# rocprof_columns, which imports pyarrow, is loaded later; a program that loaded pyarrow before keeps its own
# setting, as does a user who sets the variable). Measured, profdb ingest of the benchmark's long-counters
# run, tree peak PSS (CPU seconds): 1x unset 287-308 MB (21.2-22.5 s), 10 ms 229-234 MB (21.8-23.6 s), 0 ms
# 214-219 MB (23.9-26.4 s); 4x unset 348 MB (80.5 s), 10 ms 261 MB (80.3 s). 0 ms cost CPU; 10 ms does not.
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "10")
# Arenas committed as they are used, not eagerly (mimalloc's default where the OS overcommits, as Linux does):
# an eagerly committed arena is backed by transparent huge pages where the kernel gives them on request (THP
# "madvise", a common default), and memory in a huge page goes back only once the whole 2 MiB page is free, so
# the purge above gave back little (each worker held 12-20 MB of AnonHugePages midway through a run; none now).
# Measured (benchmarks/run.py --only rss, tree peak PSS): long-counters 4x 301 -> 256 MB, 1x 253 -> 215 MB;
# 2,048 small files 260 -> 223 MB; the same CPU within noise (interleaved runs on five CSV shapes; README,
# "Memory (session 40)").
os.environ.setdefault("MIMALLOC_ARENA_EAGER_COMMIT", "0")

if TYPE_CHECKING:
    from ..columnar import Batch, GroupBatches

NAME = "rocprof-csv"
DESCRIPTION = (
    "rocprofv3 CSV: kernel_trace, counter_collection, memory_copy_trace, memory_allocation_trace, "
    "scratch_memory_trace, hip/hsa/marker/rccl/rocdecode/rocjpeg API traces"
)
#: the producer writes times as unsigned ns (a start before 0 is damage: readers.base)
UNSIGNED_TIMES = True

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
    return header_fields(data)


def header_fields(data: bytes) -> list[str] | None:
    """The column names of a CSV header: the first line of ``data``."""
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
        raise ValueError(f"{shown(value)} is not an integer") from None


def _whole(value: str) -> int:
    """A cell that must be an integer (a timestamp); a ValueError quoting it otherwise."""
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{shown(value)} is not an integer") from None


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

#: bytes of CSV per record batch (a batch is parsed by one thread; ~7.8k long-name or ~25k short-name
#: rows). Each batch costs some work per distinct name it holds, whatever its rows (a batch of a kernel
#: trace holds nearly every kernel: decoding, categories, summary keys, the names sent to the writer),
#: so batches of 1 MB spent ~3 ms each on the 320 names of the benchmark's long rows. Measured with 4
#: MB (interleaved pairs, `profdb ingest` with its workers): long 4.9-5.4 -> 3.9-4.2 s wall, workers'
#: CPU 4.8-5.0 -> 3.4-3.6 s; short workers' CPU 2.3-2.6 -> 1.8-2.5 s; 8 and 16 MB gained nothing more
#: and held more memory.
BLOCK = 4 << 20
#: pyarrow's threads parse a file's blocks in parallel; a file of one block gains nothing from them and
#: pays their start-up (2,048 files of 122 rows: 0.82 -> 0.75 ms per file read without; 1,953 rows:
#: 3.3 -> 2.7 ms), so only files larger than a block are read with threads
THREADS = True
COLUMNAR_KINDS = frozenset({"kernel_trace", "counter_collection"})

def warm_up() -> None:
    """Import what the column batches need (numpy, pyarrow: ``rocprof_columns``) now: each ingest
    worker calls this as it starts, while the writer opens the store (not the writer before the fork:
    it never reads columns, and the fork waited ~0.3 s for the import, a core idle)."""
    from . import rocprof_columns  # noqa: F401


def read_columns(path: Path, info: SourceInfo) -> Iterator[Batch]:
    """The rows of a kernel_trace or counter_collection file as column batches (``COLUMNAR_KINDS``)."""
    from .rocprof_columns import read_columns

    return read_columns(path, info)


#: a file of at most this many bytes may be read with others of its kind in one parse (``read_group``).
#: 256 KiB until the writer got a group's batches joined (``ingest_columns.concat``); then 1 MiB took
#: 512 files of 320 KB 8% less time (wall, median of 8 interleaved pairs, 7 faster; CPU -9%)
GROUP_FILE_BYTES = 1 << 20
#: at most this many bytes of files in one such parse (held in memory at once, with their columns)
GROUP_BYTES = 2 << 20


def read_group(paths: Sequence[Path], info: SourceInfo) -> GroupBatches | None:
    """Several small files of one kind read in one parse, or None when they cannot be read together
    (``rocprof_columns.read_group``)."""
    from .rocprof_columns import read_group

    return read_group(paths, info)


def _kernels(path: Path) -> Iterator[Record]:
    from .rocprof_columns import _kernel_batches

    for b in _kernel_batches(path):
        yield from b.records()


def _counters(path: Path) -> Iterator[Record]:
    from .rocprof_columns import _counter_batches

    for b in _counter_batches(path):
        yield from b.records()

def _copies(path: Path) -> Iterator[Record]:
    for lineno, row, ix in _rows(path):
        try:
            start = _whole(row[ix["Start_Timestamp"]])
            end = _whole(row[ix["End_Timestamp"]])
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
            start = _whole(row[ix["Start_Timestamp"]])
            end = _whole(row[ix["End_Timestamp"]])
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
            start = _whole(row[ix["Start_Timestamp"]])
            end = _whole(row[ix["End_Timestamp"]])
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
            start = _whole(row[ix["Start_Timestamp"]])
            end = _whole(row[ix["End_Timestamp"]])
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
