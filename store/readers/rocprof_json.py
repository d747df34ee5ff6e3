"""rocprofv3 JSON (``--output-format json``): ``{"rocprofiler-sdk-tool": [ {process}, ... ]}``.

Each process item holds ``metadata`` (node.hostname, pid, command), ``agents[]``, ``strings``,
``kernel_symbols[]`` and ``buffer_records`` (``kernel_dispatch[]``, ``memory_copy[]``, ...).
Kernel names come from ``kernel_symbols[kernel_id]`` (the formatted, demangled name, as rocprofv3's
CSV writes it), devices from ``agents[].id.handle`` (the agent's ``node_id``, i.e. rocprofv3's
absolute agent index, the ``Agent N`` of its CSV). Timestamps are integer ns (CLOCK_BOOTTIME).

Files are GBs: memory stays bounded by a slice and the tables, never by the number of dispatches.
``activity_batches`` reads a file with rocprof_json_fast (msgspec, slices of the big arrays, two
passes) when its first pass proves the file is read alike; every other file is read here, the
reference: one event stream (ijson), building one dispatch at a time. rocprofv3 writes the small
tables (agents, strings, kernel_symbols) before ``buffer_records``; if a file has them after, a
first pass collects only those tables, and the main pass then streams the records.

Counter collection (``callback_records.counter_collection``) and the API traces are not read here
(use the CSV or rocpd output for those); the records of every ``buffer_records`` array but kernel
dispatches and copies are counted (``UNREAD_WHAT``), and the ingest names them."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import ijson

from ..errors import InputError
from ..records import Activity, RankHint, Record, SourceInfo
from .base import add_unread, count_unread, head, in_lists, open_binary, tail, unread_label
from .json_guard import guarded

NAME = "rocprof-json"
DESCRIPTION = "rocprofv3 JSON (--output-format json, rocprofiler-sdk-tool): kernel dispatches, memory copies"
#: the producer writes times as unsigned ns (a start before 0 is damage: readers.base)
UNSIGNED_TIMES = True

_ROOT_KEY = "rocprofiler-sdk-tool"
_ITEM = _ROOT_KEY + ".item"
_META = _ITEM + ".metadata"
_AGENT = _ITEM + ".agents.item"
_SYMBOL = _ITEM + ".kernel_symbols.item"
_STRINGS = _ITEM + ".strings.buffer_records.item"
_DISPATCH = _ITEM + ".buffer_records.kernel_dispatch.item"
_COPY = _ITEM + ".buffer_records.memory_copy.item"
_TABLES = {_META, _AGENT, _SYMBOL, _STRINGS}
_RECORDS = {_DISPATCH, _COPY}
#: (the dots of a buffer_records array's item prefix: ``<it>.<key>.item``)
_BUFFER_DOTS = _DISPATCH.count(".")
#: the prefix of the records of ``buffer_records`` arrays, ``<it>.<key>.item``
_BUFFER = _ITEM + ".buffer_records."
#: what the records of the other ``buffer_records`` arrays are, which this reader counts, not reads (a
#: key not listed is named as it is), and where profdb reads them when it does
UNREAD_WHAT = {
    "hip_api": "HIP API calls; read from rocprofv3's CSV output",
    "hsa_api": "HSA API calls; read from rocprofv3's CSV output",
    "marker_api": "ROCTx markers and ranges; read from rocprofv3's CSV output",
    "rccl_api": "RCCL API calls; read from rocprofv3's CSV output",
    "memory_allocation": "memory allocations; read from rocprofv3's CSV output",
    "scratch_memory": "scratch memory events; read from rocprofv3's CSV output",
    "rocdecode_api": "rocDecode API calls; read from rocprofv3's CSV output",
    "rocjpeg_api": "rocJPEG API calls; read from rocprofv3's CSV output",
    "pc_sample_host_trap": "PC samples",
    "pc_sample_stochastic": "PC samples",
}


def unread_what(key: str) -> str:
    """What the records of ``buffer_records.<key>`` are, as the ingest and the store name them."""
    return unread_label("records of buffer_records.", key, UNREAD_WHAT)

#: rocprofiler_memory_copy_operation_t, used when a file has no strings table
_COPY_OPS = [
    "MEMORY_COPY_NONE",
    "MEMORY_COPY_HOST_TO_HOST",
    "MEMORY_COPY_HOST_TO_DEVICE",
    "MEMORY_COPY_DEVICE_TO_HOST",
    "MEMORY_COPY_DEVICE_TO_DEVICE",
]


def detect(path: Path) -> bool:
    data = head(path, 4096)
    stripped = data.lstrip()
    return stripped[:1] == b"{" and b'"' + _ROOT_KEY.encode() + b'"' in stripped[:256]


def _not_rocprof(path: Path, what: str) -> InputError:
    return InputError(
        f"{path}: {what}; this is not a complete rocprofv3 JSON output (rocprofiler-sdk-tool). "
        "Re-run rocprofv3 with --output-format json, or re-copy the file if it was cut short"
    )


def inspect(path: Path) -> SourceInfo:
    if not head(path, 1):
        raise InputError(f"{path}: cannot read the file (empty, or a corrupt gzip stream); re-copy it")
    # A truncated file (profiler killed, partial copy) would otherwise fail half-way through ingest.
    if not tail(path, 4096).rstrip().endswith(b"}"):
        raise _not_rocprof(path, "the JSON is truncated (it does not end with a closing brace)")
    meta: dict[str, Any] | None = None
    try:
        with open_binary(path) as raw, guarded(raw, path) as f:
            builder: ijson.ObjectBuilder | None = None
            for prefix, event, value in ijson.parse(f):
                if builder is not None:
                    builder.event(event, value)
                    if prefix == _META and event == "end_map":
                        meta = builder.value
                        break
                elif prefix == _META and event == "start_map":
                    builder = ijson.ObjectBuilder()
                    builder.event(event, value)
                elif prefix == _ITEM and event == "end_map":
                    break  # end of the first process without metadata
    except ijson.common.IncompleteJSONError as e:
        raise _not_rocprof(path, f"invalid JSON ({e})") from e
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: cannot read the file ({e}); it is damaged: re-copy it") from e
    if not isinstance(meta, dict):
        raise _not_rocprof(path, "no 'metadata' section in the first process")
    node: dict[str, Any] = meta["node"] if isinstance(meta.get("node"), dict) else {}
    hint = RankHint(origin="rocprofiler-sdk-tool metadata")
    if isinstance(node.get("hostname"), str) and node["hostname"]:
        hint.hostname = node["hostname"]
    if isinstance(meta.get("pid"), int):
        hint.pid = meta["pid"]
    config: dict[str, Any] = meta["config"] if isinstance(meta.get("config"), dict) else {}
    return SourceInfo(
        format=NAME,
        kind="trace",
        hint=hint,
        metadata={
            "command": meta.get("command"),
            "init_time": meta.get("init_time"),
            "fini_time": meta.get("fini_time"),
            "machine_id": node.get("machine_id"),
            "output_file": config.get("output_file"),
        },
    )


@dataclass
class _Tables:
    """The small per-process tables records refer to."""

    pid: int | None = None
    agents: dict[int, int] = field(default_factory=dict)  # handle -> node_id
    symbols: dict[int, str] = field(default_factory=dict)  # kernel_id -> name
    copy_ops: list[str] = field(default_factory=lambda: list(_COPY_OPS))
    has_agents: bool = False
    has_symbols: bool = False
    #: True once the whole file was searched for this process's tables (the first pass)
    complete: bool = False

    def add_symbol(self, kernel_id: Any, formatted: Any, demangled: Any, raw: Any) -> None:
        """A kernel_symbols entry's name: its formatted name, else its demangled one, else its own."""
        if isinstance(kernel_id, int):
            self.symbols[kernel_id] = str(formatted or demangled or raw or "")

    def add(self, prefix: str, obj: Any) -> None:
        if not isinstance(obj, dict):
            return
        if prefix == _SYMBOL:
            self.add_symbol(obj.get("kernel_id"), obj.get("formatted_kernel_name"), obj.get("demangled_kernel_name"),
                            obj.get("kernel_name"))
        elif prefix == _AGENT:
            handle = (obj.get("id") or {}).get("handle")
            node_id = obj.get("node_id", obj.get("logical_node_id"))
            if isinstance(handle, int) and isinstance(node_id, int):
                self.agents[handle] = node_id
        elif prefix == _STRINGS:
            if obj.get("kind") == "MEMORY_COPY" and isinstance(obj.get("operations"), list):
                self.copy_ops = [str(op) for op in obj["operations"]]
        elif prefix == _META:
            if isinstance(obj.get("pid"), int):
                self.pid = obj["pid"]


def _collect_tables(path: Path) -> list[_Tables]:
    """First pass for files whose tables follow their records: the tables of every process."""
    out: list[_Tables] = []
    builder: ijson.ObjectBuilder | None = None
    target = ""
    with open_binary(path) as raw, guarded(raw, path) as f:
        for prefix, event, value in ijson.parse(f):
            if builder is not None:
                builder.event(event, value)
                if prefix == target and event == "end_map":
                    out[-1].add(target, builder.value)
                    builder = None
            elif event == "start_map":
                if prefix in _TABLES:
                    builder = ijson.ObjectBuilder()
                    builder.event(event, value)
                    target = prefix
                elif prefix == _ITEM:
                    out.append(_Tables())
            elif event == "start_array" and out:
                if prefix == _ITEM + ".agents":
                    out[-1].has_agents = True
                elif prefix == _ITEM + ".kernel_symbols":
                    out[-1].has_symbols = True
    return out


def _handle(obj: Any) -> int | None:
    if isinstance(obj, dict):
        v = obj.get("handle")
        return v if isinstance(v, int) else None
    return obj if isinstance(obj, int) else None


def read(path: Path, info: SourceInfo) -> Iterator[Record]:
    return chain.from_iterable(activity_batches(path, info, None))


def activity_batches(
    path: Path, info: SourceInfo, index: int | None, unread: dict[str, int] | None = None
) -> Iterator[list[Activity]]:
    """The file's records in lists (base.BatchReader): decoded in slices by rocprof_json_fast when
    its first pass proves it reads the file as the reference does, else streamed by the reference.
    The records of the other ``buffer_records`` arrays (API calls, markers...) are counted into
    ``unread``, by ``unread_what``."""
    from . import rocprof_json_fast as fast

    by_key: dict[str, int] = {}
    try:
        try:
            with open_binary(path) as f:
                checked = fast.check(f)
        except fast.Fallback:
            yield from in_lists(_read(path, by_key))  # (the fast path's lists are its slices)
        else:
            with open_binary(path) as f:
                yield from fast.records(f, checked)
            by_key = checked.unread
    except fast.Fallback as e:  # (the second pass met what the first did not: the file changed meanwhile)
        raise InputError(
            f"{path}: the file changed while profdb read it ({e}); ingest it again once it is complete"
        ) from e
    except ijson.common.IncompleteJSONError as e:
        raise _not_rocprof(path, f"invalid or truncated JSON ({e})") from e
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: cannot read the file ({e}); it is damaged: re-copy it") from e
    except (KeyError, TypeError, AttributeError) as e:  # (a field missing, or not of rocprofv3's type)
        raise InputError(
            f"{path}: a record lacks an expected field or holds another type there ({e!r}); the file is "
            "from an unsupported rocprofv3 version or damaged: re-export it with rocprofv3 --output-format json"
        ) from e
    add_unread(unread, by_key, unread_what)


def _read(path: Path, unread: dict[str, int] | None = None) -> Iterator[Activity]:
    """The reference: every record, streamed; the records (objects) of the other ``buffer_records``
    arrays are counted into ``unread`` by key."""
    if unread is None:
        unread = {}
    procs: list[_Tables] = []
    prepass: list[_Tables] | None = None
    builder: ijson.ObjectBuilder | None = None
    target = ""
    cur = _Tables()
    with open_binary(path) as raw, guarded(raw, path) as f:
        for prefix, event, value in ijson.parse(f):
            if builder is not None:
                builder.event(event, value)
                if event != "end_map" or prefix != target:
                    continue
                obj = builder.value
                builder = None
                if target in _TABLES:
                    cur.add(target, obj)
                    continue
                if not cur.complete and not (cur.has_agents and (cur.has_symbols or target != _DISPATCH)):
                    # Records before their tables: collect every process's tables once, up front.
                    if prepass is None:
                        prepass = _collect_tables(path)
                    idx = len(procs) - 1
                    if idx < 0 or idx >= len(prepass):
                        raise _not_rocprof(path, "records found outside a process item")
                    cur = prepass[idx]
                    cur.complete = True
                    procs[idx] = cur
                if target == _DISPATCH:
                    if not cur.has_symbols:
                        raise _not_rocprof(path, "a process has kernel dispatches but no 'kernel_symbols' table")
                    yield _dispatch(path, obj, cur)
                else:
                    yield _copy(obj, cur)
            elif event == "start_map":
                if prefix in _TABLES or prefix in _RECORDS:
                    builder = ijson.ObjectBuilder()
                    builder.event(event, value)
                    target = prefix
                elif prefix == _ITEM:
                    cur = _Tables()
                    procs.append(cur)
                elif prefix.startswith(_BUFFER) and prefix.endswith(".item") and prefix.count(".") == _BUFFER_DOTS:
                    count_unread(unread, prefix[len(_BUFFER) : -5])
            elif event == "start_array":
                if prefix == _ITEM + ".agents":
                    cur.has_agents = True
                elif prefix == _ITEM + ".kernel_symbols":
                    cur.has_symbols = True
    if not procs:
        raise _not_rocprof(path, f"no '{_ROOT_KEY}' process list")


def _dispatch(path: Path, d: dict[str, Any], t: _Tables) -> Activity:
    di = d["dispatch_info"]
    kid = di["kernel_id"]
    name = t.symbols.get(kid)
    if name is None:
        raise InputError(
            f"{path}: dispatch {di.get('dispatch_id')} refers to kernel_id {kid}, which is not in "
            "kernel_symbols; the file is damaged or incomplete: re-run rocprofv3"
        )
    start = d["start_timestamp"]
    wg = di.get("workgroup_size") or {}
    grid = di.get("grid_size") or {}
    stream = _handle(d.get("stream_id"))
    agent = _handle(di.get("agent_id"))
    return Activity(
        "kernel",
        name,
        start,
        d["end_timestamp"] - start,
        None,
        t.agents.get(agent) if agent is not None else None,
        stream if stream is not None else _handle(di.get("queue_id")),
        (d.get("correlation_id") or {}).get("internal"),
        t.pid,
        d.get("thread_id"),
        grid.get("x"),
        grid.get("y"),
        grid.get("z"),
        wg.get("x"),
        wg.get("y"),
        wg.get("z"),
        None,
    )


def _copy(d: dict[str, Any], t: _Tables) -> Activity:
    start = d["start_timestamp"]
    nbytes = d.get("bytes")
    return copy_activity(
        t, d.get("operation"), _handle(d.get("src_agent_id")), _handle(d.get("dst_agent_id")), start,
        d["end_timestamp"], _handle(d.get("stream_id")), (d.get("correlation_id") or {}).get("internal"),
        d.get("thread_id"), nbytes if isinstance(nbytes, int) else None,
    )


def copy_activity(
    t: _Tables, op: Any, src: int | None, dst: int | None, start: Any, end: Any, stream: int | None,
    correlation: Any, tid: Any, nbytes: int | None,
) -> Activity:
    """A memory_copy record of process ``t`` as an Activity, from its fields (``src``/``dst``: the
    agents' handles): named by its operation, on the device of its GPU end (the other when that one's
    is unknown), its agents and byte count in args. (Both readers: this one's ``_copy``, and
    rocprof_json_fast's.)"""
    name = t.copy_ops[op] if isinstance(op, int) and 0 <= op < len(t.copy_ops) else f"MEMORY_COPY_{op}"
    src_dev = t.agents.get(src) if src is not None else None
    dst_dev = t.agents.get(dst) if dst is not None else None
    args: dict[str, Any] = {"src_agent": src_dev, "dst_agent": dst_dev}
    if nbytes is not None:
        args["bytes"] = nbytes
    return Activity(
        "memcpy", name, start, end - start, "memory", dst_dev if dst_dev else src_dev, stream, correlation,
        t.pid, tid, args=json.dumps(args),
    )
