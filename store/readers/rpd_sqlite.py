"""Legacy RPD SQLite (rocmProfileData ``rpd_tracer``, rocm-trace-lite ``rtl``), plain or gzipped.

Tables: ``rocpd_string(id, string)``, ``rocpd_op(id, gpuId, queueId, sequenceId, start, end,
description_id, opType_id)`` (GPU work), ``rocpd_api(id, pid, tid, start, end, apiName_id, args_id)``
(host calls), ``rocpd_api_ops(api_id, op_id)``, ``rocpd_kernelapi(api_ptr_id | api_id, stream,
gridX.., workgroupX.., kernelName_id)``, ``rocpd_copyapi(... size ...)``, ``rocpd_metadata(tag, value)``.
Timestamps are integer ns.

Ops: ``KernelExecution`` and ``Task`` (kernels run by a hipGraph) are kernels named by their
description (or the kernel api's name); ``Copy*`` are memcpy named by the op type
(``CopyHostToDevice``), with bytes from rocpd_copyapi.size or rtl's ``CopyDeviceToDevice:<bytes>``
description; ``FillBuffer`` is a memset; ``UserMarker`` ops (rtl ROCTx, gpuId -1) are annotations.
Barrier and marker packets carry no work and are skipped. API rows become ``api`` activity, except
``UserMarker`` rows (rpd_tracer ROCTx ranges: the message is in args) which become annotations.
Devices are ``gpuId`` (an HSA agent index, not a rank); streams are ``queueId``.

Identity: none in the file (no rank, no host). The hint carries the pid when the file names a single
one: rtl's ``rocpd_metadata`` tag ``pid``, else a single distinct ``rocpd_api.pid``.

Merged rtl traces (``rtl trace -o trace.db torchrun --nproc_per_node=8 ...``): rtl copies the largest
per-process file whole, then appends only the ``rocpd_op`` rows (and strings, metadata) of the others,
so ops keep their ``gpuId`` but host API rows exist for the base process only. Only when the user says
so (``--rank-by gpu``: a gpuId is a device, not a rank) does ``split_ranks`` make one rank section per
gpuId (sorted, ranks 0..n-1); a section reads the ops of its GPU, and the API rows when every op they
launched ran on that GPU. ROCTx markers (gpuId -1) belong to no GPU and are not read; the mapping and
what was left out are in ``info.metadata["rank_by"]``."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..records import Activity, RankHint, Record, SourceInfo, activity_of
from .sqlite_common import columns, db_error, open_ro, relations, schema_mentions, stream, strings

NAME = "rpd"
DESCRIPTION = "legacy RPD / rocm-trace-lite SQLite (.rpd, .db, .rpd.gz): GPU ops (kernels, copies), HIP API, ROCTx"
#: the producer writes times as unsigned ns (a start before 0 is damage: readers.base)
UNSIGNED_TIMES = True

_KERNEL_OPS = {"KernelExecution", "Task"}
_SKIP_OPS = re.compile(r"^(Barrier|Marker)", re.IGNORECASE)
_BYTES_IN_DESC = re.compile(r":(\d+)$")


def detect(path: Path) -> bool:
    found = schema_mentions(path, "rocpd_op", "rocpd_string", "rocpd_info_process")
    return {"rocpd_op", "rocpd_string"} <= found and "rocpd_info_process" not in found


def inspect(path: Path) -> SourceInfo:
    with open_ro(path) as conn:
        try:
            names = relations(conn)
            missing = {"rocpd_op", "rocpd_string"} - set(names)
            if missing:
                raise InputError(
                    f"{path}: SQLite file without the RPD table(s) {', '.join(sorted(missing))}; not an RPD "
                    "trace (rpd_tracer / rocm-trace-lite): check the file, or pass --format"
                )
            meta: list[tuple[str, str]] = []
            if "rocpd_metadata" in names:
                meta = [(str(t), str(v)) for t, v in conn.execute("SELECT tag, value FROM rocpd_metadata")]
            api_pids: list[int] = []
            if "rocpd_api" in names:
                lo, hi = conn.execute("SELECT min(pid), max(pid) FROM rocpd_api").fetchone()
                api_pids = sorted({p for p in (lo, hi) if isinstance(p, int)})
        except sqlite3.Error as e:
            raise db_error(path, e) from e
    hint = RankHint()
    meta_pids = sorted({int(v) for t, v in meta if t == "pid" and v.isdigit()})
    if len(meta_pids) == 1:
        hint.pid, hint.origin = meta_pids[0], "rocpd_metadata pid"
    elif not meta_pids and len(api_pids) == 1:
        hint.pid, hint.origin = api_pids[0], "rocpd_api.pid"
    metadata: dict[str, Any] = {k: v for k, v in meta if k in ("schema_version", "session_count")}
    metadata["pids"] = meta_pids or api_pids
    return SourceInfo(format=NAME, kind="rpd", hint=hint, metadata=metadata)


RANK_BY = ("gpu",)


def split_ranks(path: Path, info: SourceInfo, by: str) -> SourceInfo:
    """``info`` with one rank section per GPU (``--rank-by gpu``): gpuIds sorted, rank i = i-th gpuId."""
    if by not in RANK_BY:
        raise InputError(f"{path}: --rank-by {by!r} does not apply to RPD files; use --rank-by gpu")
    with open_ro(path) as conn:
        try:
            names = relations(conn)
            gpus = [
                int(g) for (g,) in conn.execute("SELECT DISTINCT gpuId FROM rocpd_op WHERE gpuId >= 0 ORDER BY gpuId")
            ]
            markers = int(conn.execute("SELECT count(*) FROM rocpd_op WHERE gpuId < 0 OR gpuId IS NULL").fetchone()[0])
            api_rows, api_gpus, api_pids = 0, [], []
            if "rocpd_api" in names:
                api_rows = int(conn.execute("SELECT count(*) FROM rocpd_api").fetchone()[0])
                api_pids = [int(p) for (p,) in conn.execute("SELECT DISTINCT pid FROM rocpd_api WHERE pid IS NOT NULL")]
                if "rocpd_api_ops" in names:
                    api_gpus = [
                        int(g)
                        for (g,) in conn.execute(
                            "SELECT DISTINCT o.gpuId FROM rocpd_api_ops l JOIN rocpd_op o ON o.id = l.op_id "
                            "WHERE o.gpuId >= 0"
                        )
                    ]
        except sqlite3.Error as e:
            raise db_error(path, e) from e
    if not gpus:
        raise InputError(f"{path}: no GPU ops (rocpd_op.gpuId >= 0) to split with --rank-by gpu; ingest it as one rank")
    api_gpu = api_gpus[0] if len(api_gpus) == 1 and api_rows else None
    ranks = []
    for rank, gpu in enumerate(gpus):
        hint = RankHint(
            global_rank=rank, device=gpu, device_origin=f"rocpd_op.gpuId {gpu}", origin=f"--rank-by gpu: gpuId {gpu}"
        )
        if gpu == api_gpu and len(api_pids) == 1:
            hint.pid = api_pids[0]
        ranks.append(hint)
    mapping = ", ".join(f"gpuId {g} -> rank {r}" for r, g in enumerate(gpus))
    left = []
    if markers:
        left.append(f"{markers} ROCTx marker op(s) (gpuId -1, no GPU) not read")
    if api_rows and api_gpu is None:
        left.append(f"{api_rows} API row(s) not read: the ops they launched are on {len(api_gpus)} GPUs, not one")
    elif api_rows:
        left.append(f"{api_rows} API row(s) (pid {', '.join(map(str, api_pids))}) go to the rank of gpuId {api_gpu}")
    note = f"{path}: --rank-by gpu: {mapping}" + ("; " + "; ".join(left) if left else "")
    rank_by = {
        "by": by,
        "gpu_to_rank": {str(g): r for r, g in enumerate(gpus)},
        "api_gpu": api_gpu,
        "markers_not_read": markers,
        "note": note,
    }
    return SourceInfo(
        format=info.format,
        kind=info.kind,
        hint=info.hint,
        time_base_ns=info.time_base_ns,
        metadata={**info.metadata, "rank_by": rank_by},
        ranks=ranks,
    )


def read_rank(path: Path, info: SourceInfo, index: int) -> Iterator[Record]:
    """The records of rank section ``index`` of ``split_ranks``: the ops of its GPU, and the API rows
    when they belong to that GPU."""
    gpu = info.ranks[index].device
    assert gpu is not None
    yield from _stream(path, gpu, info.metadata.get("rank_by", {}).get("api_gpu") == gpu)


def read(path: Path, info: SourceInfo) -> Iterator[Record]:
    return _stream(path, None, True)  # (not a generator of its own: one level less for every record)


def _stream(path: Path, gpu: int | None, apis: bool) -> Iterator[Record]:
    """The ops (of GPU ``gpu`` only, when given), then the API calls when ``apis``."""
    with open_ro(path) as conn:
        try:
            names = relations(conn)
            yield from _ops(conn, names, gpu)
            if apis and "rocpd_api" in names:
                yield from _apis(conn)
        except sqlite3.Error as e:
            raise db_error(path, e) from e
        except TypeError as e:
            raise InputError(
                f"{path}: an RPD row's start or end time is empty or not a number; the trace is damaged: re-record it"
            ) from e


def _ops(conn: sqlite3.Connection, names: dict[str, str], gpu: int | None = None) -> Iterator[Activity]:
    # Link each op to one launching API call (rocpd_api_ops), then to its kernel/copy arguments.
    link = kernel_names = ""
    api_cols = "NULL, NULL, NULL"
    kern_cols = "NULL, NULL, NULL, NULL, NULL, NULL, NULL"
    copy_col = "NULL"
    joins = ""
    if "rocpd_api_ops" in names:
        link = " LEFT JOIN (SELECT op_id, min(api_id) AS api_id FROM rocpd_api_ops GROUP BY op_id) L ON L.op_id = o.id"
        api_cols = "L.api_id, a.pid, a.tid" if "rocpd_api" in names else "L.api_id, NULL, NULL"
        if "rocpd_api" in names:
            joins += " LEFT JOIN rocpd_api a ON a.id = L.api_id"
        if "rocpd_kernelapi" in names:
            kcols = set(columns(conn, "rocpd_kernelapi"))
            key = "api_ptr_id" if "api_ptr_id" in kcols else "api_id"
            kern_cols = "k.gridX, k.gridY, k.gridZ, k.workgroupX, k.workgroupY, k.workgroupZ, k.kernelName_id"
            joins += f" LEFT JOIN rocpd_kernelapi k ON k.{key} = L.api_id"
            kernel_names = " UNION SELECT kernelName_id FROM rocpd_kernelapi"
        if "rocpd_copyapi" in names:
            ccols = set(columns(conn, "rocpd_copyapi"))
            key = "api_ptr_id" if "api_ptr_id" in ccols else "api_id"
            copy_col = "c.size"
            joins += f" LEFT JOIN rocpd_copyapi c ON c.{key} = L.api_id"
    sql = (
        "SELECT o.start, o.end, o.gpuId, o.queueId, o.description_id, o.opType_id, "
        f"{api_cols}, {kern_cols}, {copy_col} FROM rocpd_op o{link}{joins}"
    )
    if gpu is not None:
        sql += f" WHERE o.gpuId = {int(gpu)}"
    text = strings(conn, f"SELECT description_id FROM rocpd_op UNION SELECT opType_id FROM rocpd_op{kernel_names}",
                   "rocpd_string", "string")
    for r in stream(conn, sql):
        start, end, gpu, queue, desc, optype = r[0], r[1], r[2], r[3], text.get(r[4]) or "", text.get(r[5]) or ""
        api_id, pid, tid = r[6], r[7], r[8]
        if optype in _KERNEL_OPS:
            yield activity_of((
                "kernel", desc or text.get(r[15]) or optype, start, end - start, None, gpu, queue, api_id, pid, tid,
                r[9], r[10], r[11], r[12], r[13], r[14], None,
            ))  # fmt: skip
        elif optype.startswith("Copy"):
            size = r[16]
            if size is None:
                m = _BYTES_IN_DESC.search(desc)
                size = int(m.group(1)) if m else None
            yield Activity(
                "memcpy", optype, start, end - start, "memory", gpu, queue, api_id, pid, tid,
                args=json.dumps({"bytes": size}) if size is not None else None,
            )  # fmt: skip
        elif optype.startswith("Fill"):
            yield Activity("memset", optype, start, end - start, "memory", gpu, queue, api_id, pid, tid)
        elif optype == "UserMarker":
            yield activity_of(("annotation", desc or optype, start, end - start, None, None, None, api_id, pid, tid,
                                  None, None, None, None, None, None, None))
        elif _SKIP_OPS.match(optype):
            continue
        else:
            # An op type this reader does not know: keep it as GPU work under its own name.
            yield Activity("kernel", desc or optype, start, end - start, None, gpu, queue, api_id, pid, tid)


def _apis(conn: sqlite3.Connection) -> Iterator[Activity]:
    sql = "SELECT a.id, a.pid, a.tid, a.start, a.end, a.apiName_id, a.args_id FROM rocpd_api a"
    text = strings(conn, "SELECT apiName_id FROM rocpd_api", "rocpd_string", "string")
    # (the args texts are read only for markers, whose name they are: other calls' args, often one text
    # per call, are not read)
    markers = "SELECT id FROM rocpd_string WHERE string = 'UserMarker'"
    marker_args = strings(conn, f"SELECT args_id FROM rocpd_api WHERE apiName_id IN ({markers})", "rocpd_string",
                          "string")
    for api_id, pid, tid, start, end, name_id, args_id in stream(conn, sql):
        name = text.get(name_id) or ""
        if name == "UserMarker":
            yield activity_of(("annotation", marker_args.get(args_id) or name, start, end - start, None, None, None,
                                  api_id, pid, tid, None, None, None, None, None, None, None))
        else:
            yield activity_of(("api", name, start, end - start, None, None, None, api_id, pid, tid,
                                  None, None, None, None, None, None, None))
