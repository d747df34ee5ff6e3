"""rocprofv3 CSV (``--output-format csv``): kernel_trace, counter_collection, memory_copy_trace and
the API traces (hip/hsa/rccl/marker). Columns are mapped by header name: both the 2025 layout
(``Agent 4`` strings, Stream_Id, LDS/VGPR columns) and the 2024 layout (integer Agent_Id, no
Stream_Id, Private/Group_Segment_Size) are read, as is rocpd2csv output (leading ``Guid``).
Timestamps are integer ns on the node's CLOCK_BOOTTIME. Derived ``*_stats.csv`` and
``agent_info.csv`` are not read: they repeat what the traces hold."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Callable, Iterator

from ..errors import InputError
from ..records import Activity, Counter, Record, RankHint, SourceInfo
from .base import display_name, head, open_binary

NAME = "rocprof-csv"
DESCRIPTION = "rocprofv3 CSV: kernel_trace, counter_collection, memory_copy_trace, hip/hsa/rccl/marker API traces"

_PID_IN_NAME = re.compile(r"^(\d+)_")

# content kind -> columns that identify it (all must be present) and columns it needs
_KINDS: dict[str, tuple[set[str], set[str]]] = {
    "counter_collection": ({"Counter_Name", "Counter_Value"}, {"Kernel_Name", "Counter_Name", "Counter_Value", "Dispatch_Id"}),
    "kernel_trace": ({"Kernel_Name", "Dispatch_Id"}, {"Kernel_Name", "Start_Timestamp", "End_Timestamp"}),
    "memory_copy_trace": ({"Direction", "Source_Agent_Id"}, {"Direction", "Start_Timestamp", "End_Timestamp"}),
    "api_trace": ({"Domain", "Function"}, {"Domain", "Function", "Start_Timestamp", "End_Timestamp"}),
}


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
    missing = _KINDS[kind][1] - set(cols)
    if missing:
        raise InputError(
            f"{path}: rocprofv3 {kind} CSV is missing required column(s) {', '.join(sorted(missing))}; "
            "the file is damaged or from an unsupported rocprofv3 version (re-export it with rocprofv3 --output-format csv)"
        )
    hint = RankHint(origin="file name")
    m = _PID_IN_NAME.match(path.name)
    if m:
        hint.pid = int(m.group(1))
    elif "Process_Id" in cols:
        # first data row's pid (counter_collection and API traces carry it)
        with open_binary(path) as f:
            rows = csv.reader(io.TextIOWrapper(f, encoding="utf-8", newline=""))
            next(rows, None)
            first = next(rows, None)
        if first and len(first) == len(cols):
            try:
                hint.pid = int(first[cols.index("Process_Id")])
                hint.origin = "Process_Id column"
            except ValueError:
                pass
    return SourceInfo(format=NAME, kind=kind, hint=hint)


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
                    raise InputError(
                        f"{path}: line {lineno} has {len(row)} fields where the header has {width}; "
                        "the file looks truncated or damaged: re-copy it from the profiler output"
                    )
                yield lineno, row, idx
        except csv.Error as e:
            raise InputError(f"{path}: line {reader.line_num}: malformed CSV ({e}); re-copy the file") from e


def read(path: Path, info: SourceInfo) -> Iterator[Record]:
    readers: dict[str, Callable[[Path], Iterator[Record]]] = {
        "kernel_trace": _kernels,
        "counter_collection": _counters,
        "memory_copy_trace": _copies,
        "api_trace": _apis,
    }
    try:
        yield from readers[info.kind](path)
    except (ValueError, IndexError) as e:
        raise InputError(f"{path}: unexpected value ({e}); the file is damaged or not rocprofv3 output") from e


def _bad_line(path: Path, lineno: int, e: Exception) -> InputError:
    return InputError(f"{path}: line {lineno}: {e}; the file is damaged or not rocprofv3 output")


def _kernels(path: Path) -> Iterator[Record]:
    for lineno, row, ix in _rows(path):
        try:
            g = lambda c: row[ix[c]] if c in ix else ""  # noqa: E731
            start = int(row[ix["Start_Timestamp"]])
            end = int(row[ix["End_Timestamp"]])
            yield Activity(
                "kernel",
                row[ix["Kernel_Name"]],
                start,
                end - start,
                None,
                _agent(g("Agent_Id")),
                _int(g("Stream_Id")) if "Stream_Id" in ix else _int(g("Queue_Id")),
                _int(g("Correlation_Id")),
                None,
                _int(g("Thread_Id")),
                _int(g("Grid_Size_X")),
                _int(g("Grid_Size_Y")),
                _int(g("Grid_Size_Z")),
                _int(g("Workgroup_Size_X")),
                _int(g("Workgroup_Size_Y")),
                _int(g("Workgroup_Size_Z")),
                None,
            )
        except (ValueError, KeyError) as e:
            raise _bad_line(path, lineno, e) from e


def _counters(path: Path) -> Iterator[Record]:
    for lineno, row, ix in _rows(path):
        try:
            yield Counter(
                row[ix["Kernel_Name"]],
                row[ix["Counter_Name"]],
                float(row[ix["Counter_Value"]]),
                _int(row[ix["Dispatch_Id"]]),
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
