"""Nsight Systems SQLite export (``nsys export --type sqlite``), schema 2.x (``EXPORT_META_DATA``)
and 3.x (``META_DATA_EXPORT`` + ``META_DATA_CAPTURE``).

Reads ``CUPTI_ACTIVITY_KIND_KERNEL`` (demangled names via ``StringIds``), ``..._MEMCPY`` (named
``[CUDA memcpy Host-to-Device]`` as nsys reports do, bytes and copyKind in args), ``..._MEMSET``,
``..._RUNTIME`` (CUDA API calls, kind ``api``) and NVTX push/pop and start/end ranges (kind
``annotation``). A CUDA graph's replays recorded as one span each (``--cuda-graph-trace=graph``:
``CUPTI_ACTIVITY_KIND_GRAPH_TRACE``, whose kernels are then in no kernel row) are counted, not read
(``SourceInfo.unread``: the ingest names them and what to do). ``deviceId`` is mapped to the CUDA
ordinal through ``TARGET_INFO_GPU.cuDevice`` when the export has it (``deviceId`` itself is not the
ordinal). pid/tid come from the serialized ``globalPid``/``globalTid`` (pid = (g >> 24) & 0xFFFFFF,
tid = g & 0xFFFFFF).

Timestamps are ns relative to the capture session; ``SourceInfo.time_base_ns`` is
``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` (absolute = time_base_ns + start).

Identity: the launched process's environment, ``META_DATA_CAPTURE`` rows
``PROCESS_<n>:ENVIRONMENT_VARIABLE`` = ``NAME="value"`` (newer nsys only), and the host from
``TARGET_INFO_SYSTEM_ENV`` name='Hostname' (never the ``HOSTNAME`` variable, which can be the
submit host). Older exports carry no rank: it must come from the file name or the command line.
One report profiling several MPI ranks (``nsys profile mpirun ...``) cannot be split by rank here:
nsys records the environment of the launched command only."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..records import Activity, RankHint, Record, SourceInfo, activity_of
from .launcher_env import ALL_VARS, hint_from_env
from .sqlite_common import columns, db_error, open_ro, relations, schema_mentions, stream, strings

NAME = "nsys"
DESCRIPTION = "Nsight Systems SQLite export (nsys export --type sqlite): kernels, memcpy/memset, CUDA API, NVTX ranges"

_KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
_MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
_MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
_RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
_NVTX = "NVTX_EVENTS"
#: device work profdb does not read, counted at inspect and named by the ingest: a CUDA graph's replay
#: recorded as one span (``nsys profile --cuda-graph-trace=graph``), whose kernels are then in no row of
#: the kernel table (nor their launches in the runtime's)
_UNREAD = {
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": "CUDA graph executions, recorded as one span each "
    "(--cuda-graph-trace=graph): their kernels are in no kernel row; profile with --cuda-graph-trace=node",
    "CUPTI_ACTIVITY_KIND_DEVICE_GRAPH_TRACE": "CUDA graphs launched from the device, recorded as one span each",
}
_ENV_ROW = re.compile(r"^PROCESS_(\d+):ENVIRONMENT_VARIABLE$")
_ENV_VALUE = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)="?(.*?)"?$', re.DOTALL)

#: NVTX event types that are ranges (NvtxPushPopRange, NvtxStartEndRange)
_NVTX_RANGES = (59, 60)

#: CUpti_ActivityMemcpyKind labels, for exports without ENUM_CUDA_MEMCPY_OPER
_COPY_KINDS = {
    0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array", 4: "Array-to-Host",
    5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array", 8: "Device-to-Device",
    9: "Host-to-Host", 10: "Peer-to-Peer", 11: "Unified Host-to-Device", 12: "Unified Device-to-Host",
    13: "Unified Device-to-Device",
}  # fmt: skip


def detect(path: Path) -> bool:
    found = schema_mentions(path, "StringIds", "TARGET_INFO_SESSION_START_TIME", _KERNEL, _MEMCPY, _RUNTIME, _NVTX)
    return {"StringIds", "TARGET_INFO_SESSION_START_TIME"} <= found and len(found) > 2


def _env_rows(conn: sqlite3.Connection) -> dict[int, dict[str, str]]:
    out: dict[int, dict[str, str]] = {}
    for name, value in conn.execute(
        "SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE'"
    ):
        m = _ENV_ROW.match(name)
        if not m or not isinstance(value, str):
            continue
        kv = _ENV_VALUE.match(value)
        if kv and kv.group(1) in ALL_VARS:
            out.setdefault(int(m.group(1)), {})[kv.group(1)] = kv.group(2)
    return out


def inspect(path: Path) -> SourceInfo:
    with open_ro(path) as conn:
        try:
            names = relations(conn)
            if "StringIds" not in names or not ({_KERNEL, _MEMCPY, _RUNTIME, _NVTX} & set(names)):
                raise InputError(
                    f"{path}: SQLite file without Nsight Systems tables (StringIds, CUPTI_ACTIVITY_KIND_*); "
                    "not an `nsys export --type sqlite` file: check the file, or pass --format"
                )
            hint = RankHint()
            envs = _env_rows(conn) if "META_DATA_CAPTURE" in names else {}
            ranks = {p: hint_from_env(e, f"META_DATA_CAPTURE PROCESS_{p} environment") for p, e in envs.items()}
            distinct = {h.global_rank for h in ranks.values() if h.global_rank is not None}
            if len(distinct) == 1:
                hint = next(h for _, h in sorted(ranks.items()) if h.global_rank is not None)
            elif ranks and not distinct:
                hint = min(ranks.items())[1]  # local rank / world size without a global rank
            if "TARGET_INFO_SYSTEM_ENV" in names:
                row = conn.execute(
                    "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1"
                ).fetchone()
                if row and isinstance(row[0], str) and row[0]:
                    hint.hostname = row[0]
                    hint.origin = (hint.origin + " + TARGET_INFO_SYSTEM_ENV Hostname").lstrip(" +")
            base = 0
            if "TARGET_INFO_SESSION_START_TIME" in names:
                row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
                if row and isinstance(row[0], int):
                    base = row[0]
            export_meta = "META_DATA_EXPORT" if "META_DATA_EXPORT" in names else "EXPORT_META_DATA"
            meta: dict[str, Any] = {}
            if export_meta in names:
                meta = {
                    str(n): v
                    for n, v in conn.execute(
                        f"SELECT name, value FROM {export_meta} WHERE name IN "
                        "('EXPORT_PRODUCT_VERSION', 'EXPORT_SCHEMA_VERSION')"
                    )
                }
            unread = {
                f"rows of {table} ({what})": n
                for table, what in _UNREAD.items()
                if table in names and (n := conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            }
            pids: list[int] = []
            if _KERNEL in names:
                lo, hi = conn.execute(f"SELECT min(globalPid), max(globalPid) FROM {_KERNEL}").fetchone()
                pids = sorted({(g >> 24) & 0xFFFFFF for g in (lo, hi) if isinstance(g, int)})
        except sqlite3.Error as e:
            raise db_error(path, e) from e
    if len(pids) == 1:
        hint.pid = pids[0]
        hint.origin = (hint.origin + " + kernel globalPid").lstrip(" +")
    metadata: dict[str, Any] = {
        "nsys_version": meta.get("EXPORT_PRODUCT_VERSION"),
        "schema_version": meta.get("EXPORT_SCHEMA_VERSION"),
        "kernel_pids": pids,
    }
    if len(distinct) > 1:
        # Several launched processes with different ranks: say so, pick none.
        metadata["process_ranks"] = {p: h.global_rank for p, h in sorted(ranks.items())}
    return SourceInfo(format=NAME, kind="nsys", hint=hint, time_base_ns=base, metadata=metadata, unread=unread)


def read(path: Path, info: SourceInfo) -> Iterator[Record]:
    with open_ro(path) as conn:
        try:
            names = relations(conn)
            devices = _devices(conn, names)
            if _KERNEL in names:
                yield from _kernels(conn, devices)
            if _MEMCPY in names:
                yield from _memcpy(conn, names, devices)
            if _MEMSET in names:
                yield from _memset(conn, devices)
            if _RUNTIME in names:
                yield from _runtime(conn)
            if _NVTX in names:
                yield from _nvtx(conn)
        except sqlite3.Error as e:
            raise db_error(path, e) from e
        except TypeError as e:
            raise InputError(f"{path}: a row's start or end time is empty or not a number; the export is damaged: "
                             "re-export it") from e


def _devices(conn: sqlite3.Connection, names: dict[str, str]) -> dict[int, int]:
    if "TARGET_INFO_GPU" not in names or "cuDevice" not in columns(conn, "TARGET_INFO_GPU"):
        return {}
    return {i: c for i, c in conn.execute("SELECT id, cuDevice FROM TARGET_INFO_GPU") if isinstance(c, int)}


#: a globalPid / globalTid's process id (bits 24-47; nsys's serialized GlobalId) and thread id (bits
#: 0-23), computed in every table's query (NULL for a value that is no integer)
_PID_SQL = "CASE WHEN typeof({0}) = 'integer' THEN ({0} >> 24) & 16777215 END"
_TID_SQL = "CASE WHEN typeof({0}) = 'integer' THEN {0} & 16777215 END"
#: distinct kernel args texts remembered (``_kernels``: launches repeat a few register and shared-memory
#: pairs); cleared past this many, so memory stays flat
_ARGS_KEPT = 4096


def _kernels(conn: sqlite3.Connection, devices: dict[int, int]) -> Iterator[Activity]:
    """Kernels. Their args text is made once per distinct (registers, static and dynamic shared memory,
    with their types: 32 and 32.0 are written apart): json.dumps was ~1.5 us of each row's ~5."""
    sql = (
        f"SELECT k.start, k.end, k.deviceId, k.streamId, k.correlationId, {_PID_SQL.format('k.globalPid')}, "
        "k.demangledName, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ, "
        f"k.registersPerThread, k.staticSharedMemory, k.dynamicSharedMemory, k.shortName FROM {_KERNEL} k"
    )
    text = strings(conn, f"SELECT demangledName FROM {_KERNEL} UNION SELECT shortName FROM {_KERNEL}")
    kept: dict[tuple[Any, ...], str] = {}
    for r in stream(conn, sql):
        name = text.get(r[6])
        if name is None:  # (the short name when the demangled one is missing)
            name = text.get(r[16])
        regs, static, dynamic = r[13], r[14], r[15]
        key = (regs, static, dynamic, type(regs), type(static), type(dynamic))
        args = kept.get(key)
        if args is None:
            if len(kept) >= _ARGS_KEPT:
                kept.clear()
            shared = (static or 0) + (dynamic or 0)
            args = kept[key] = json.dumps({"registers per thread": regs, "shared memory": shared})
        start = r[0]
        yield activity_of((
            "kernel", name or "", start, r[1] - start, None, devices.get(r[2], r[2]), r[3], r[4], r[5], None,
            r[7], r[8], r[9], r[10], r[11], r[12], args,
        ))  # fmt: skip


def _memcpy(conn: sqlite3.Connection, names: dict[str, str], devices: dict[int, int]) -> Iterator[Activity]:
    labels = dict(_COPY_KINDS)
    if "ENUM_CUDA_MEMCPY_OPER" in names:
        labels.update({i: str(lbl) for i, lbl in conn.execute("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER") if lbl})
    sql = (f"SELECT start, end, deviceId, streamId, correlationId, {_PID_SQL.format('globalPid')}, bytes, copyKind "
           f"FROM {_MEMCPY}")
    for r in stream(conn, sql):
        label = labels.get(r[7], str(r[7]))
        yield Activity(
            "memcpy", f"[CUDA memcpy {label}]", r[0], r[1] - r[0], "memory", devices.get(r[2], r[2]), r[3], r[4],
            r[5], None, args=json.dumps({"bytes": r[6], "copyKind": r[7]}),
        )  # fmt: skip


def _memset(conn: sqlite3.Connection, devices: dict[int, int]) -> Iterator[Activity]:
    sql = f"SELECT start, end, deviceId, streamId, correlationId, {_PID_SQL.format('globalPid')}, bytes FROM {_MEMSET}"
    for r in stream(conn, sql):
        yield Activity(
            "memset", "[CUDA memset]", r[0], r[1] - r[0], "memory", devices.get(r[2], r[2]), r[3], r[4],
            r[5], None, args=json.dumps({"bytes": r[6]}),
        )  # fmt: skip


def _runtime(conn: sqlite3.Connection) -> Iterator[Activity]:
    sql = (
        f"SELECT r.start, r.end, r.correlationId, {_PID_SQL.format('r.globalTid')}, {_TID_SQL.format('r.globalTid')}, "
        f"r.nameId FROM {_RUNTIME} r"
    )
    text = strings(conn, f"SELECT nameId FROM {_RUNTIME}")
    for start, end, corr, pid, tid, name_id in stream(conn, sql):
        yield activity_of(("api", text.get(name_id) or "", start, end - start, None, None, None, corr, pid, tid,
                              None, None, None, None, None, None, None))


def _nvtx(conn: sqlite3.Connection) -> Iterator[Activity]:
    """NVTX ranges: a range's own text, else its registered string's (``textId``, looked up by id)."""
    has_text_id = "textId" in columns(conn, _NVTX)
    ranges = f"n.eventType IN ({', '.join(str(t) for t in _NVTX_RANGES)}) AND n.end IS NOT NULL"
    sql = (
        f"SELECT n.start, n.end, {_PID_SQL.format('n.globalTid')}, {_TID_SQL.format('n.globalTid')}, n.text, "
        f"{'n.textId' if has_text_id else 'NULL'} FROM {_NVTX} n WHERE {ranges}"
    )
    text = strings(conn, f"SELECT n.textId FROM {_NVTX} n WHERE {ranges} AND n.text IS NULL") if has_text_id else {}
    for start, end, pid, tid, own, text_id in stream(conn, sql):
        name = own if own is not None else text.get(text_id)
        yield activity_of(("annotation", name or "", start, end - start, None, None, None, None, pid, tid,
                              None, None, None, None, None, None, None))
