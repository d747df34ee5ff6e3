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
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from ..errors import InputError
from ..records import Activity, Counter, RankHint, Record, SourceInfo
from .base import display_name, head, open_binary

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
    if value == "":
        return None
    try:
        return int(value)
    except ValueError:
        return int(float(value))


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


# The two hot loops (kernel_trace and counter_collection hold nearly all rows of a run, and their
# long templated kernel names nearly all bytes). The csv module walks every character; rocprofv3
# lines have one free-text column (Kernel_Name) between short plain ones, so a line is split as
# bytes with split(b",", n_before) and rsplit(b",", n_after), which never walk through the name, and
# names and other quoted values are decoded once per distinct value (cached). A line whose shape
# differs from the file's first line (another number of quotes, the name not ending where expected,
# a quote inside the name, a field spanning lines) goes through the csv module instead, so the
# result is the csv module's on every input.
_new = tuple.__new__
_QUOTE = 34  # b'"'[0]


def _truncated(path: Path, lineno: int, n: int, width: int) -> InputError:
    return InputError(
        f"{path}: line {lineno} has {n} fields where the header has {width}; "
        "the file looks truncated or damaged: re-copy it from the profiler output"
    )


def _unquote(v: str) -> str:
    return v[1:-1] if len(v) >= 2 and v[0] == '"' and v[-1] == '"' else v


def _text(raw: bytes) -> str:
    """A raw CSV field (no comma inside) as the csv module would give it."""
    if len(raw) >= 2 and raw[0] == _QUOTE and raw[-1] == _QUOTE:
        raw = raw[1:-1].replace(b'""', b'"')
    return raw.decode("utf-8", "replace")


class _Lines:
    """The state of one rocprofv3 CSV file read by the hot loops below: its header, the shape of its
    usual line (learnt from the first data line), the kernel names seen, and the csv-module path for
    any other line."""

    def __init__(self, path: Path, f: IO[bytes], free: str) -> None:
        self.path = path
        self.f = f
        self.ix: dict[str, int] = {}
        self.width = 0
        self.quotes = -1  # quotes on a line of the usual shape; -1 until learnt (or never: no fast path)
        self.names: dict[bytes, str] = {}  # raw quoted name -> name, for names checked to hold no quote
        header = f.readline()
        cols = next(csv.reader([header.decode("utf-8", "replace")]), []) if header else []
        if cols:
            cols[0] = cols[0].lstrip("\ufeff")
            self.ix = {c: i for i, c in enumerate(cols)}
            self.width = len(cols)
        self.i_free = self.ix.get(free, -1)
        self.n_pre, self.n_post = self.i_free, self.width - 1 - self.i_free

    def name_of(self, raw: bytes) -> str | None:
        """The name in a raw quoted field (cached), or None if it is not one plain quoted value."""
        if len(raw) >= 2 and raw[0] == _QUOTE and raw[-1] == _QUOTE and raw.count(b'"') == 2:
            name = self.names[raw] = raw[1:-1].decode("utf-8", "replace")
            return name
        return None

    def slow(self, line: bytes, lineno: int) -> list[str]:
        """The csv module's fields for this line (and the next ones, if a quoted field spans lines);
        [] for a blank line; InputError for a line whose field count is not the header's. The first
        well-formed line also teaches the usual shape."""
        text = line.decode("utf-8", "replace")
        while text.count('"') % 2:
            more = self.f.readline()
            if not more:
                break
            text += more.decode("utf-8", "replace")
        try:
            row = next(csv.reader([text]), [])
        except csv.Error as e:
            raise InputError(f"{self.path}: line {lineno}: malformed CSV ({e}); re-copy the file") from e
        if row and len(row) != self.width:
            raise _truncated(self.path, lineno, len(row), self.width)
        if self.quotes < 0 and self.i_free >= 0 and len(row) == self.width:
            # adopt the fast path if it splits this line exactly as the csv module does
            pre = line.rstrip(b"\r\n").split(b",", self.n_pre)
            post = pre.pop().rsplit(b",", self.n_post) if len(pre) > self.n_pre else []
            if [_text(v) for v in pre + post] == row and '"' not in row[self.i_free]:
                self.quotes = line.count(b'"')
        return row


def _kernels(path: Path) -> Iterator[Record]:
    with open_binary(path) as f:
        lines = _Lines(path, f, "Kernel_Name")
        if not lines.ix:
            return
        ix, n_pre, n_post = lines.ix, lines.n_pre, lines.n_post
        i_name, i_start, i_end = ix["Kernel_Name"], ix["Start_Timestamp"], ix["End_Timestamp"]
        i_agent = ix.get("Agent_Id", -1)
        i_stream = ix.get("Stream_Id", ix.get("Queue_Id", -1))
        ints = [
            ix.get(c, -1)
            for c in (
                "Correlation_Id",
                "Thread_Id",
                "Grid_Size_X",
                "Grid_Size_Y",
                "Grid_Size_Z",
                "Workgroup_Size_X",
                "Workgroup_Size_Y",
                "Workgroup_Size_Z",
            )
        ]
        fast = i_agent >= 0 and i_stream >= 0 and min(ints) >= 0
        i_corr, i_tid, i_gx, i_gy, i_gz, i_bx, i_by, i_bz = ints
        agents: dict[Any, int | None] = {}
        names = lines.names
        quotes = lines.quotes
        lineno = 1
        for line in f:
            lineno += 1
            row: list[Any] | None = None
            if quotes == line.count(b'"') and fast:
                row = line.split(b",", n_pre)
                if len(row) > n_pre:
                    post = row.pop().rsplit(b",", n_post)
                    if len(post) > n_post:
                        raw = post[0]
                        name = names.get(raw) or lines.name_of(raw)
                        if name is not None:
                            try:
                                row += post
                                a = row[i_agent]
                                if a in agents:
                                    dev = agents[a]
                                else:
                                    dev = agents[a] = _agent(_text(a))
                                start = int(row[i_start])
                                yield _new(
                                    Activity,
                                    (
                                        "kernel",
                                        name,
                                        start,
                                        int(row[i_end]) - start,
                                        None,
                                        dev,
                                        int(row[i_stream]),
                                        int(row[i_corr]),
                                        None,
                                        int(row[i_tid]),
                                        int(row[i_gx]),
                                        int(row[i_gy]),
                                        int(row[i_gz]),
                                        int(row[i_bx]),
                                        int(row[i_by]),
                                        int(row[i_bz]),
                                        None,
                                    ),
                                )
                                continue
                            except ValueError:  # an empty, quoted or float-formatted cell: the csv path
                                pass
            row = lines.slow(line, lineno)
            quotes = lines.quotes
            if not row:
                continue
            try:
                start = int(row[i_start])

                def g(i: int) -> int | None:
                    return _int(row[i]) if i >= 0 else None  # noqa: B023 (called within this iteration only)

                yield _new(
                    Activity,
                    (
                        "kernel",
                        row[i_name],
                        start,
                        int(row[i_end]) - start,
                        None,
                        _agent(row[i_agent]) if i_agent >= 0 else None,
                        g(i_stream),
                        g(i_corr),
                        None,
                        g(i_tid),
                        g(i_gx),
                        g(i_gy),
                        g(i_gz),
                        g(i_bx),
                        g(i_by),
                        g(i_bz),
                        None,
                    ),
                )
            except (ValueError, KeyError) as e:
                raise _bad_line(path, lineno, e) from e


def _counters(path: Path) -> Iterator[Record]:
    with open_binary(path) as f:
        lines = _Lines(path, f, "Kernel_Name")
        if not lines.ix:
            return
        ix, n_pre, n_post = lines.ix, lines.n_pre, lines.n_post
        i_kernel, i_name, i_value, i_dispatch = (
            ix["Kernel_Name"],
            ix["Counter_Name"],
            ix["Counter_Value"],
            ix["Dispatch_Id"],
        )
        # rocprofv3's order (dispatch before the kernel name, counter after it) is read from the two
        # halves of the split line directly; any other order takes the csv path
        fast = i_dispatch < n_pre < i_name and n_pre < i_value
        j_name, j_value = i_name - n_pre, i_value - n_pre
        counter_names: dict[bytes, str] = {}
        names = lines.names
        quotes = lines.quotes
        prev_raw, prev_name = b"", ""
        lineno = 1
        for line in f:
            lineno += 1
            if quotes == line.count(b'"') and fast:
                pre = line.split(b",", n_pre)
                if len(pre) > n_pre:
                    post = pre[n_pre].rsplit(b",", n_post)
                    if len(post) > n_post:
                        raw = post[0]
                        # a dispatch's counters are consecutive rows repeating its kernel name: an
                        # equal previous raw name (memcmp) spares hashing this one
                        name = prev_name if raw == prev_raw else (names.get(raw) or lines.name_of(raw))
                        if name is not None:
                            prev_raw, prev_name = raw, name
                            try:
                                cn = post[j_name]
                                counter = counter_names.get(cn)
                                if counter is None:
                                    counter = counter_names[cn] = _text(cn)
                                yield _new(
                                    Counter, (name, counter, float(post[j_value]), int(pre[i_dispatch]), 1, None, None)
                                )
                                continue
                            except ValueError:
                                pass
            row = lines.slow(line, lineno)
            quotes = lines.quotes
            if not row:
                continue
            try:
                yield _new(
                    Counter, (row[i_kernel], row[i_name], float(row[i_value]), _int(row[i_dispatch]), 1, None, None)
                )
            except ValueError as e:
                raise _bad_line(path, lineno, e) from e


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
