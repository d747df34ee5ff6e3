"""rocprofv3 rocpd SQLite (the default output, ``<pid>_results.db``).

Physical tables carry a UUID suffix (``rocpd_kernel_dispatch_<uuid>``); rocprofv3 also creates an
un-suffixed view of each and data views for humans. This reader uses the data views, selecting
columns by name (the producer has changed its tables between schema versions, the views less):

- ``kernels``: name, start, end, agent_abs_index, stream_id / queue_id, corr_id, pid, tid, grid/workgroup
- ``memory_copies``: name (``MEMORY_COPY_HOST_TO_DEVICE``...), start, end, size, src/dst agents
- ``regions``: HIP/HSA/RCCL API calls (kind ``api``) and ROCTx ranges (``MARKER_*``: ``annotation``)
- ``counters_collection``: one row per (dispatch, counter): kernel_name, counter_name, value

Devices are the agent's absolute index (``Agent N`` in rocprofv3's CSV). Timestamps are integer
ns on the node's clock.

Identity: ``rocpd_info_process.environment`` (JSON of the process environment: ``RANK``,
``OMPI_COMM_WORLD_RANK``, ``SLURM_PROCID``...; local rank from ``LOCAL_RANK``...) and
``rocpd_info_node.hostname``. A database holding processes of several ranks (merged with rocpd
tools) lists one ``SourceInfo.ranks`` entry per rank; ``read_rank`` streams that rank's rows.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..records import Activity, Counter, RankHint, Record, SourceInfo
from .launcher_env import hint_from_env
from .sqlite_common import columns, db_error, open_ro, quote_ident, relations, schema_mentions, stream

NAME = "rocpd"
DESCRIPTION = "rocprofv3 rocpd SQLite (<pid>_results.db): kernels, memory copies, API/ROCTx regions, counters"
#: the producer writes times as unsigned ns (a start before 0 is damage: readers.base)
UNSIGNED_TIMES = True

_MARKS = ("rocpd_info_process", "rocpd_kernel_dispatch")
_ENV_ORIGIN = "rocpd_info_process.environment"


def detect(path: Path) -> bool:
    found = schema_mentions(path, *_MARKS)
    return len(found) == len(_MARKS)


@dataclass
class _Process:
    pid: int
    hint: RankHint
    guid: str | None = None
    nid: int | None = None
    command: str | None = None


def _env(value: Any) -> dict[str, str]:
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return {}
    if not isinstance(value, str) or not value:
        return {}
    try:
        obj = json.loads(value)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in obj.items()} if isinstance(obj, dict) else {}


def _processes(path: Path, conn: sqlite3.Connection, names: dict[str, str]) -> list[_Process]:
    if "rocpd_info_process" not in names:
        raise InputError(
            f"{path}: rocpd database without the rocpd_info_process view; it was written by an "
            "unsupported rocprofv3 version: convert it with `rocpd2csv` and ingest the CSV files"
        )
    pcols = set(columns(conn, "rocpd_info_process"))
    ncols = set(columns(conn, "rocpd_info_node")) if "rocpd_info_node" in names else set()
    hosts: dict[tuple[Any, Any], str] = {}
    if {"id", "hostname"} <= ncols:
        guid_n = "guid" if "guid" in ncols else "NULL"
        for nid, guid, host in conn.execute(f"SELECT id, {guid_n}, hostname FROM rocpd_info_node"):
            if isinstance(host, str) and host:
                hosts[(nid, guid)] = host
    sel = ", ".join(c if c in pcols else "NULL" for c in ("pid", "nid", "guid", "command", "environment"))
    out = []
    for pid, nid, guid, command, env in conn.execute(f"SELECT {sel} FROM rocpd_info_process ORDER BY pid"):
        if not isinstance(pid, int):
            continue
        hint = hint_from_env(_env(env), _ENV_ORIGIN)
        hint.pid = pid
        host = hosts.get((nid, guid)) or (hosts.get((nid, None)) if guid is None else None)
        if host is None and len(hosts) == 1:
            host = next(iter(hosts.values()))
        if host:
            hint.hostname = host
            hint.origin = (hint.origin + " + rocpd_info_node.hostname").lstrip(" +")
        out.append(_Process(pid, hint, guid, nid, command if isinstance(command, str) else None))
    return out


def _group(procs: list[_Process]) -> list[tuple[RankHint, list[int]]]:
    """Processes grouped by global rank (processes without a rank join the only rank, if one)."""
    by_rank: dict[int, list[_Process]] = {}
    for p in procs:
        if p.hint.global_rank is not None:
            by_rank.setdefault(p.hint.global_rank, []).append(p)
    if len(by_rank) <= 1:
        hint = _merge([p.hint for p in procs if p.hint.global_rank is not None] or [p.hint for p in procs])
        return [(hint, [p.pid for p in procs])]
    return [(_merge([p.hint for p in ps]), [p.pid for p in ps]) for _, ps in sorted(by_rank.items())]


def _merge(hints: list[RankHint]) -> RankHint:
    """One hint for several processes of one rank: fields they agree on; pid only if one process."""
    if not hints:
        return RankHint()
    out = RankHint(origin=hints[0].origin)
    for attr in ("global_rank", "local_rank", "hostname", "world_size", "node_rank", "pid", "device"):
        values = {getattr(h, attr) for h in hints} - {None}
        if len(values) == 1:
            setattr(out, attr, values.pop())
    return out


def inspect(path: Path) -> SourceInfo:
    with open_ro(path) as conn:
        try:
            names = relations(conn)
            if "kernels" not in names and not any(n.startswith("rocpd_kernel_dispatch") for n in names):
                raise InputError(
                    f"{path}: SQLite file without rocpd tables (no rocpd_kernel_dispatch / kernels); "
                    "not rocprofv3 rocpd output: check the file, or pass --format"
                )
            procs = _processes(path, conn, names)
            meta = {}
            if "rocpd_metadata" in names:
                meta = {str(t): v for t, v in conn.execute("SELECT tag, value FROM rocpd_metadata")}
        except sqlite3.Error as e:
            raise db_error(path, e) from e
    if not procs:
        raise InputError(
            f"{path}: rocpd database with no process in rocpd_info_process; the file is empty or "
            "damaged: re-run rocprofv3"
        )
    groups = _group(procs)
    metadata: dict[str, Any] = {
        "pids": [p.pid for p in procs],
        "commands": sorted({p.command for p in procs if p.command}),
        "schema_version": meta.get("schema_version"),
    }
    if len(groups) == 1:
        return SourceInfo(format=NAME, kind="rocpd", hint=groups[0][0], metadata=metadata)
    metadata["rank_pids"] = [pids for _, pids in groups]
    common = _merge([h for h, _ in groups])
    common.global_rank = common.local_rank = common.pid = None
    return SourceInfo(format=NAME, kind="rocpd", hint=common, metadata=metadata, ranks=[h for h, _ in groups])


def read(path: Path, info: SourceInfo) -> Iterator[Record]:
    yield from _read(path, None)


def read_rank(path: Path, info: SourceInfo, index: int) -> Iterator[Record]:
    pids = info.metadata.get("rank_pids")
    if not info.ranks or not isinstance(pids, list) or not 0 <= index < len(pids):
        raise InputError(
            f"{path}: rank section {index} does not exist (the file holds {len(info.ranks)} rank sections)"
        )
    yield from _read(path, [int(p) for p in pids[index]])


def _select(conn: sqlite3.Connection, view: str, wanted: list[str], need: set[str], path: Path) -> str:
    have = set(columns(conn, view))
    missing = need - have
    if missing:
        raise InputError(
            f"{path}: rocpd view {view} lacks column(s) {', '.join(sorted(missing))}; the database is "
            "from an unsupported rocprofv3 version: convert it with `rocpd2csv` and ingest the CSV files"
        )
    return ", ".join(quote_ident(c) if c in have else "NULL" for c in wanted)


def _where(conn: sqlite3.Connection, view: str, pids: list[int] | None, path: Path) -> tuple[str, tuple[Any, ...]]:
    if pids is None:
        return "", ()
    if "pid" not in columns(conn, view):
        raise InputError(f"{path}: cannot split the ranks of this database: view {view} has no pid column")
    return f" WHERE pid IN ({', '.join('?' * len(pids))})", tuple(pids)


_KERNEL_COLS = [
    "name", "start", "end", "agent_abs_index", "stream_id", "queue_id", "corr_id", "pid", "tid",
    "grid_x", "grid_y", "grid_z", "workgroup_x", "workgroup_y", "workgroup_z",
]  # fmt: skip
_COPY_COLS = [
    "name", "start", "end", "size", "src_agent_abs_index", "dst_agent_abs_index", "stream_id",
    "queue_id", "corr_id", "pid", "tid",
]  # fmt: skip
_REGION_COLS = ["category", "name", "start", "end", "corr_id", "pid", "tid"]
_COUNTER_COLS = ["kernel_name", "counter_name", "value", "dispatch_id"]


def _read(path: Path, pids: list[int] | None) -> Iterator[Record]:
    with open_ro(path) as conn:
        try:
            names = relations(conn)
            if "kernels" not in names:
                raise InputError(
                    f"{path}: rocpd database without the 'kernels' view; it was written by an unsupported "
                    "rocprofv3 version: convert it with `rocpd2csv` and ingest the CSV files"
                )
            sel = _select(conn, "kernels", _KERNEL_COLS, {"name", "start", "end"}, path)
            where, params = _where(conn, "kernels", pids, path)
            for r in stream(conn, f"SELECT {sel} FROM kernels{where}", params):
                yield Activity(
                    "kernel", r[0] or "", r[1], r[2] - r[1], None, r[3],
                    r[4] if r[4] is not None else r[5], r[6], r[7], r[8],
                    r[9], r[10], r[11], r[12], r[13], r[14], None,
                )  # fmt: skip
            if "memory_copies" in names:
                sel = _select(conn, "memory_copies", _COPY_COLS, {"name", "start", "end"}, path)
                where, params = _where(conn, "memory_copies", pids, path)
                for r in stream(conn, f"SELECT {sel} FROM memory_copies{where}", params):
                    args: dict[str, Any] = {"src_agent": r[4], "dst_agent": r[5]}
                    if r[3] is not None:
                        args["bytes"] = r[3]
                    yield Activity(
                        "memcpy", r[0] or "", r[1], r[2] - r[1], "memory", r[5] if r[5] else r[4],
                        r[6] if r[6] is not None else r[7], r[8], r[9], r[10], args=json.dumps(args),
                    )  # fmt: skip
            if "regions" in names:
                sel = _select(conn, "regions", _REGION_COLS, {"name", "start", "end"}, path)
                where, params = _where(conn, "regions", pids, path)
                for r in stream(conn, f"SELECT {sel} FROM regions{where}", params):
                    cat = r[0] or ""
                    kind = "annotation" if cat.startswith("MARKER") else "api"
                    yield Activity(
                        kind, r[1] or "", r[2], r[3] - r[2], None, None, None, r[4], r[5], r[6],
                        args=json.dumps({"domain": cat}) if cat else None,
                    )  # fmt: skip
            if "counters_collection" in names:
                sel = _select(
                    conn, "counters_collection", _COUNTER_COLS, {"kernel_name", "counter_name", "value"}, path
                )
                where, params = _where(conn, "counters_collection", pids, path)
                for r in stream(conn, f"SELECT {sel} FROM counters_collection{where}", params):
                    yield Counter(r[0] or "", r[1] or "", float(r[2]) if r[2] is not None else 0.0, r[3])
        except sqlite3.Error as e:
            raise db_error(path, e) from e
        except TypeError as e:
            raise InputError(
                f"{path}: a rocpd row's start or end time is empty or not a number; the database is damaged: "
                "re-run rocprofv3"
            ) from e
