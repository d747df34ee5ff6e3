"""PyTorch profiler / Kineto Chrome traces (``.json`` or ``.json.gz``): the events are decoded in bounded
slices by kineto_fast (msgspec); ijson streams the file (``_read_reference``) wherever that path stops.

Reads complete events (``ph: "X"``): GPU kernels, memcpy, memset, CPU ops, user annotations
(``ProfilerStep#N``, ``nccl:all_reduce``), GPU annotations, runtime/driver calls, python functions.
CUDA and ROCm variants, old capitalised categories (``Kernel``, ``Runtime``). The complete events of
other categories (another accelerator's device work, ``mtia_ccp_events``...) are counted, not read
(``UNREAD_WHAT``; the ingest names them and stores their counts with the file). Times: ``ts``/``dur``
are microseconds (floats); converted to integer ns once here. Newer traces have relative ``ts`` and a
top-level ``baseTimeNanoseconds`` (returned as ``SourceInfo.time_base_ns``); older ones are epoch us.

Identity comes from the top-level ``distributedInfo`` (rank, world_size) and ``host_name``, which
Kineto writes before or after ``traceEvents`` depending on version: ``inspect`` looks at the head and
the tail of the file only, so GB traces are not parsed twice. The rank's GPU is the one ``args.device``
of the GPU events found there (or the only entry of ``deviceProperties``); several devices leave it
unset (listed in the source's metadata as ``devices``).

A merged trace ``profdb timeline`` wrote holds many ranks, one process each: its top-level ``profdb``
block (written first) names every process's rank (pid -> global_rank, local_rank, hostname). Only that
explicit block makes a file multi-rank (never pids guessed from the events): ``inspect`` then lists one
rank section per process and ``read_rank`` streams the events of that process only."""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Iterator
from itertools import chain
from pathlib import Path
from typing import Any

import ijson

from ..errors import InputError
from ..records import Activity, RankHint, Record, SourceInfo
from . import kineto_fast, others
from .base import (
    add_unread,
    before_damage,
    count_unread,
    display_name,
    head,
    in_lists,
    open_binary,
    tail,
    unread_label,
)
from .json_guard import guarded

NAME = "kineto"
DESCRIPTION = (
    "PyTorch profiler / Kineto Chrome trace (.json, .json.gz): kernels, memcpy/memset, cpu ops, "
    "annotations (ProfilerStep#N, collectives), runtime calls; a merged trace of many ranks written by "
    "profdb timeline"
)

#: why a trace of this format can produce no rows (ingest names the file and this reason)
EMPTY_WHY = (
    "no complete events (ph X) of a kind profdb reads (kernels, memcpy/memset, cpu ops, annotations, "
    "runtime calls): the profiler recorded nothing in its window (was a step of the schedule's active "
    "window reached, were activities enabled?)"
)

_CATS = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
    "cpu_op": "cpu_op",
    "Operator": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_runtime": "api",
    "cuda_driver": "api",
    "Runtime": "api",
    "Driver": "api",
    "python_function": "python",
}

#: what the categories of complete events Kineto writes and profdb does not read are (ingest and the
#: questions name them, with their counts, so that a trace of another device is never taken for a
#: CPU-only one). From Kineto's ActivityType names; a category not listed is named as it is.
UNREAD_WHAT = {
    "mtia_ccp_events": "MTIA device events",
    "mtia_runtime": "MTIA runtime calls",
    "mtia_insight": "MTIA insight events",
    "hpu_op": "Gaudi (HPU) device operations",
    "cuda_profiler_range": "kernels replayed by the CUPTI range profiler, whose spans are not kernel times",
    "xpu_runtime": "Intel XPU runtime calls",
    "xpu_driver": "Intel XPU driver calls",
    "privateuse1_runtime": "runtime calls of a PrivateUse1 device",
    "privateuse1_driver": "driver calls of a PrivateUse1 device",
    "glow_runtime": "Glow runtime events",
    "collective_comm": "collective communication events",
}


def unread_what(category: str) -> str:
    """What the events of ``category`` are, as the ingest and the store name them."""
    return unread_label("events of category ", category, UNREAD_WHAT)


#: kernel/collective args worth keeping (everything else is dropped to keep rows small)
_KEEP_ARGS = kineto_fast.KEEP_ARGS

#: the profiled process: the pid of the first host-side event (CPU op, annotation, runtime call) in the
#: head of the event list (GPU events carry the device as their pid, so they are not used)
_HOST_PID = re.compile(
    rb'"cat"\s*:\s*"(?:cpu_op|Operator|user_annotation|cuda_runtime|Runtime)"[^{}]*?"pid"\s*:\s*(\d+)'
)
#: one event object with its args object, in a head/tail blob: JSON strings are skipped whole (kernel
#: names may hold braces); group 1 is the event before "args", group 2 the args' content. Runs of
#: bytes between strings are taken whole (possessive ``++``: a run ends only at a quote or a brace,
#: so giving part of one back could never let the rest match); byte by byte, this took 7-8 ms per
#: trace (two 64 KiB blobs), most of inspecting a small one (128 ranks' traces: 1.0 of 1.1 s)
_STR = rb'"(?:[^"\\]++|\\.)*+"'
_EVENT_ARGS = re.compile(rb'\{((?:[^{}"]++|' + _STR + rb')*)"args"\s*:\s*\{((?:[^{}"]++|' + _STR + rb')*)\}')
_GPU_CAT = re.compile(rb'"cat"\s*:\s*"(?:' + "|".join(kineto_fast.GPU_CATS).encode() + rb')"')
_ARG_DEVICE = re.compile(rb'"device"\s*:\s*(\d+)')
_EVENTS = re.compile(rb'"traceEvents"\s*:\s*(\S)')
_TOP_MARK = re.compile(rb'"(traceEvents|schemaVersion|deviceProperties|distributedInfo)"\s*:|^\s*\{\s*"profdb"\s*:')
#: the version of the ``profdb`` block this reader knows (store/trace_export.py BLOCK_VERSION)
PROFDB_BLOCK_VERSION = 1


#: bytes of a head looked through for Kineto's top-level keys
_DETECT_HEAD = 16384
#: bytes looked through for the events array when that head holds none of them: a harness may write
#: its own block first (TraceLens's test traces: a "metadata" object of 23-26 KB before traceEvents)
_DETECT_FAR = 1 << 20
_EVENTS_ARRAY = re.compile(rb'"traceEvents"\s*:\s*\[')


def detect(path: Path) -> bool:
    name = display_name(path)
    if not (name.endswith(".json") or name.endswith(".pt.trace.json")):
        if not name.endswith(".trace"):
            return False
    data = head(path, _DETECT_HEAD)
    if b"rocprofiler-sdk-tool" in data or data.lstrip()[:1] != b"{":
        return False
    if _TOP_MARK.search(data) is not None:
        return True
    if len(data) < _DETECT_HEAD:
        return False  # (the whole file was looked at)
    return _events_far(path)


def _events_far(path: Path) -> bool:
    """The events array starts in the first ``_DETECT_FAR`` bytes (read here, not remembered: rare,
    and larger than the heads every reader shares); of a gzip stream cut or damaged within them, in
    what decompresses before the damage (a cut trace is still known as one, and its reader says the
    stream is cut, not "not a profiler output")."""
    try:
        with open_binary(path) as f:
            far = f.read(_DETECT_FAR)
    except (EOFError, zlib.error, gzip.BadGzipFile):
        far = before_damage(path, _DETECT_FAR)
    except OSError:
        return False
    return b"rocprofiler-sdk-tool" not in far and _EVENTS_ARRAY.search(far) is not None


#: bytes after a key decoded first by ``_top_value`` (the whole rest of the blob only when the value is
#: longer): decoding the rest of a 64 KiB blob for each of five keys was 0.47 s of 1,024 traces' inspection
_VALUE_WINDOW = 4096


_DECODER = json.JSONDecoder()


def _top_value(blob: bytes, key: str) -> Any:
    """The JSON value of a top-level ``"key":`` found in a head/tail blob, or None."""
    # (the key's text is found with bytes.find, the pattern tried only where it is: a pattern search
    # through 64 KiB for each key that is not there cost more than decoding the ones that are)
    needle = b'"' + key.encode() + b'"'
    pattern = re.compile(re.escape(needle) + rb"\s*:\s*")
    m = None
    at = blob.find(needle)
    while at >= 0 and m is None:
        m = pattern.match(blob, at)
        at = blob.find(needle, at + 1)
    if m is None:
        return None
    decoder = _DECODER
    if len(blob) - m.end() > _VALUE_WINDOW:
        text = blob[m.end() : m.end() + _VALUE_WINDOW].decode("utf-8", "replace")
        try:
            value, end = decoder.raw_decode(text)
            if end < len(text):  # (a value reaching the window's end may go on after it: a number)
                return value
        except ValueError:
            pass
    text = blob[m.end() :].decode("utf-8", "replace")
    try:
        value, _ = decoder.raw_decode(text)
    except ValueError:
        return None
    return value


def inspect(path: Path) -> SourceInfo:
    h = head(path, 65536)
    if not h:
        raise InputError(f"{path}: cannot read the file (empty, or a corrupt gzip stream); re-copy it")
    t = tail(path, 65536)  # raises InputError naming the file on a truncated .gz
    stripped = t.rstrip()
    if not stripped.endswith(b"}"):
        raise InputError(
            f"{path}: the trace is truncated (it does not end with a closing brace); the profiler "
            "was probably killed while writing: re-run it, or re-copy the file"
        )
    if b'"traceEvents"' not in h and b'"traceEvents"' not in t and not (len(h) == 65536 and _events_far(path)):
        et = others.ET_MARK.match(h)
        if et:
            raise InputError(
                f"{path}: this is a PyTorch execution trace (ExecutionTraceObserver, schema "
                f"{et.group(1).decode('utf-8', 'replace')}): a graph of operators without timings, not a Kineto "
                "trace; ingest the Kineto trace torch.profiler writes (on_trace_ready / export_chrome_trace) instead"
            )
        raise InputError(
            f'{path}: not a Kineto / Chrome trace (no "traceEvents" list in its first {_DETECT_FAR >> 20} MiB or '
            "its last 64 KiB); check which file this is, or drop --format"
        )
    # Header keys precede "traceEvents" in the head; trailer keys follow the events in the tail.
    # The keys looked up here never occur inside events, so the whole tail can be searched.
    events = _EVENTS.search(h)
    if events is not None and events.group(1) != b"[":
        raise InputError(
            f'{path}: "traceEvents" is not a list of events; the file is not a complete Chrome trace: '
            "re-run the profiler or re-copy the file"
        )
    head_part = h.split(b'"traceEvents"', 1)[0]
    tail_part = t
    if re.match(rb'\s*\{\s*"profdb"\s*:', head_part):
        return _inspect_merged(path, h)
    meta: dict[str, Any] = {}
    for blob in (head_part, tail_part):
        for key in ("distributedInfo", "host_name", "baseTimeNanoseconds", "displayTimeUnit", "schemaVersion"):
            if key not in meta:
                v = _top_value(blob, key)
                if v is not None:
                    meta[key] = v
    hint = RankHint()
    di = meta.get("distributedInfo")
    if isinstance(di, dict):
        if isinstance(di.get("rank"), int):
            hint.global_rank = di["rank"]
        if isinstance(di.get("world_size"), int):
            hint.world_size = di["world_size"]
        hint.origin = "distributedInfo"
    if isinstance(meta.get("host_name"), str) and meta["host_name"]:
        hint.hostname = meta["host_name"]
        hint.origin = (hint.origin + " + host_name").lstrip(" +")
    m = _HOST_PID.search(h.split(b'"traceEvents"', 1)[-1])
    if m:
        hint.pid = int(m.group(1))
    devices = _gpu_devices(h.split(b'"traceEvents"', 1)[-1], t)
    if len(devices) == 1:
        hint.device, hint.device_origin = devices[0], "args.device of the trace's GPU events"
    elif not devices:
        props = _top_value(head_part, "deviceProperties")
        ids = [d.get("id") for d in props if isinstance(d, dict)] if isinstance(props, list) else []
        if len(ids) == 1 and isinstance(ids[0], int):
            hint.device, hint.device_origin = ids[0], "deviceProperties (the only GPU listed)"
    base = meta.get("baseTimeNanoseconds")
    if len(devices) > 1:
        meta["devices"] = devices
    return SourceInfo(
        format=NAME,
        kind="trace",
        hint=hint,
        time_base_ns=int(base) if isinstance(base, int) else 0,
        metadata={k: v for k, v in meta.items() if k in ("distributedInfo", "host_name", "schemaVersion", "devices")},
    )


def _inspect_merged(path: Path, h: bytes) -> SourceInfo:
    """A merged trace of several ranks (``profdb timeline``): one rank section per process named in
    its leading ``profdb`` block, which is parsed as a stream (it is written first, so only the
    file's head is read, however many ranks it names)."""
    try:
        with open_binary(path) as raw, guarded(raw, path) as f:
            block = next(ijson.items(f, "profdb", use_float=True), None)
    except ijson.common.IncompleteJSONError as e:
        raise InputError(f"{path}: the profdb block at the top of this merged trace is not valid JSON ({e}); "
                         "write the trace again with profdb timeline") from e
    bad = f"{path}: the profdb block of this merged trace (profdb timeline) "
    if not isinstance(block, dict) or not isinstance(block.get("ranks"), list) or not block["ranks"]:
        raise InputError(bad + "lists no ranks; write the trace again with profdb timeline")
    if block.get("version") != PROFDB_BLOCK_VERSION:
        raise InputError(bad + f"has version {block.get('version')!r}, this profdb reads version "
                         f"{PROFDB_BLOCK_VERSION}; use the profdb that wrote it, or write it again")
    ranks: list[RankHint] = []
    pids: set[int] = set()
    globals_: set[int] = set()
    world = block.get("world_size") if isinstance(block.get("world_size"), int) else None
    for i, r in enumerate(block["ranks"]):
        pid = r.get("pid") if isinstance(r, dict) else None
        g = r.get("global_rank") if isinstance(r, dict) else None
        local = r.get("local_rank") if isinstance(r, dict) else None
        host = r.get("hostname") if isinstance(r, dict) else None
        if (type(pid) is not int or type(g) is not int or g < 0 or not (local is None or type(local) is int)
                or not (host is None or isinstance(host, str))):
            raise InputError(bad + f"has a bad entry {i} ({str(r)[:120]}): each needs an integer pid and "
                             "global_rank, an integer or null local_rank, a string or null hostname")
        if pid in pids or g in globals_:
            raise InputError(bad + f"names pid {pid} or rank {g} twice; write the trace again with profdb timeline")
        pids.add(pid)
        globals_.add(g)
        ranks.append(RankHint(global_rank=g, local_rank=local, hostname=host or None, world_size=world, pid=pid,
                              origin="profdb block of a merged timeline"))
    base = _top_value(h.split(b'"traceEvents"', 1)[0], "baseTimeNanoseconds")
    return SourceInfo(
        format=NAME,
        kind="merged_trace",
        hint=RankHint(world_size=world, origin="profdb block of a merged timeline"),
        time_base_ns=int(base) if isinstance(base, int) else 0,
        metadata={"profdb_run": block.get("run"), "ranks": len(ranks)},
        ranks=ranks,
    )


def _gpu_devices(events_head: bytes, tail: bytes) -> list[int]:
    """The distinct ``args.device`` of the GPU events (kernels, copies, sets) found in the head (from
    right after ``"traceEvents"``) and the tail of the event list: the GPU this process used. A device
    is an index on the node, never a local rank (CUDA_VISIBLE_DEVICES, one process driving several
    GPUs). Each blob's whole events are decoded (``kineto_fast.event_devices``); the pattern reads a
    blob that does not decode as expected."""
    found: set[int] = set()
    for blob, at_start in ((events_head, True), (tail, False)):
        if _GPU_CAT.search(blob) is None:  # (a CPU-only trace: no event to look into)
            continue
        fast = kineto_fast.event_devices(blob, at_start)
        if fast is not None:
            found |= fast
            continue
        for m in _EVENT_ARGS.finditer(blob):
            if _GPU_CAT.search(m.group(1)):
                d = _ARG_DEVICE.search(m.group(2))
                if d:
                    found.add(int(d.group(1)))
    return sorted(found)


_DAMAGED = "the file is damaged or not a PyTorch profiler trace: re-run the profiler or re-copy the file"


_int_or_none = kineto_fast.int_or_none


def read(path: Path, info: SourceInfo) -> Iterator[Record]:
    return _read(path, None)


def read_rank(path: Path, info: SourceInfo, index: int) -> Iterator[Record]:
    """The events of rank section ``index`` of a merged trace: those of its process (pid)."""
    return _read(path, info.ranks[index].pid)


def activity_batches(
    path: Path, info: SourceInfo, index: int | None, unread: dict[str, int] | None = None
) -> Iterator[list[Activity]]:
    """``read`` (``index`` None) or ``read_rank`` in lists, as they are decoded (base.BatchReader);
    the complete events of categories not read are counted into ``unread``, by ``unread_what``."""
    by_category: dict[str, int] = {}
    yield from _batches(path, None if index is None else info.ranks[index].pid, by_category)
    add_unread(unread, by_category, unread_what)


def _read(path: Path, pid: int | None) -> Iterator[Activity]:
    return chain.from_iterable(_batches(path, pid, {}))


def _batches(path: Path, pid: int | None, unread: dict[str, int]) -> Iterator[list[Activity]]:
    """Every event (``pid`` None), or those of process ``pid``: decoded in slices by kineto_fast, and
    from where it stops (an odd layout, a damaged file), streamed by the reference reader."""
    try:
        with open_binary(path) as f:
            yield from kineto_fast.activities(f, _CATS, pid, unread)
        return
    except kineto_fast.Fallback as e:
        done = e.done
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: cannot read the file ({e}); it is damaged: re-copy it") from e
    yield from in_lists(_read_reference(path, pid, done, unread))  # (kineto_fast's lists are its slices)


#: ijson's parser in Python, for a trace holding an integer beyond 64 bits: yajl (ijson's C parser)
#: refuses such a token ("integer overflow"), though it is valid JSON (json.load, and so HTA, and
#: Perfetto read it; a uint64 sentinel in an arg profdb does not read is one). Several times slower,
#: so it reads on only from the entry yajl stopped in; an integer profdb keeps (ts, pid, an arg...)
#: out of int64 is then refused by validate, naming its field.
_PYTHON_PARSER = ijson.get_backend("python")


class _Overflow(Exception):
    """yajl met an integer beyond 64 bits in entry ``entries`` (counted from 0) of traceEvents."""

    def __init__(self, entries: int) -> None:
        super().__init__(entries)
        self.entries = entries


def _read_reference(
    path: Path, pid: int | None, skip: int = 0, unread: dict[str, int] | None = None
) -> Iterator[Activity]:
    """Every event (``pid`` None), or those of process ``pid``, streamed with ijson through the depth
    guard, from entry ``skip`` of traceEvents on (the entries before are read by kineto_fast); from an
    integer beyond 64 bits on, by ijson's Python parser (``_PYTHON_PARSER``). The complete events of
    categories not read (but ``kineto_fast.SILENT``) are counted into ``unread`` by category."""
    if unread is None:
        unread = {}
    try:
        yield from _reference_events(path, pid, skip, ijson, unread)
    except _Overflow as e:  # (the entries before e.entries are read and counted)
        yield from _reference_events(path, pid, e.entries, _PYTHON_PARSER, unread)


def _reference_events(
    path: Path, pid: int | None, skip: int, parser: Any, unread: dict[str, int]
) -> Iterator[Activity]:
    cats = _CATS
    silent = kineto_fast.SILENT
    keep = _KEEP_ARGS
    entry = skip  # (the entry being parsed)
    try:
        with open_binary(path) as raw, guarded(raw, path) as f:
            for ev in parser.items(f, "traceEvents.item", use_float=True):
                if skip:
                    skip -= 1
                    continue
                entry += 1
                if type(ev) is not dict:
                    raise InputError(
                        f"{path}: an entry of traceEvents is {str(ev)[:80]!r}, not an event object; {_DAMAGED}"
                    )
                if ev.get("ph") != "X" or (pid is not None and ev.get("pid") != pid):
                    continue
                cat = ev.get("cat", "")
                kind = cats.get(cat) if type(cat) is str else None
                if kind is None:
                    if type(cat) is str and cat not in silent:
                        count_unread(unread, cat)
                    continue
                ts = ev.get("ts")
                if ts is None:
                    continue
                args = ev.get("args") or {}
                if (
                    type(ts) not in (int, float)
                    or type(args) is not dict
                    or type(ev.get("dur") or 0) not in (int, float)
                ):
                    raise InputError(
                        f"{path}: event {str(ev.get('name'))[:80]!r} has ts {ts!r}, dur {ev.get('dur')!r}, "
                        "args of type "
                        f"{type(args).__name__} (numbers and an object expected); {_DAMAGED}"
                    )
                try:
                    start = round(ts * 1000)
                    dur = round((ev.get("dur") or 0) * 1000)
                except (OverflowError, ValueError):  # (a float past any clock: infinite in ns)
                    raise InputError(
                        f"{path}: event {str(ev.get('name'))[:80]!r} has ts {ts!r}, dur {ev.get('dur')!r} (us): "
                        f"a time no clock gives, infinite in nanoseconds; {_DAMAGED}"
                    ) from None
                extra = None
                if kind in ("kernel", "memcpy", "memset"):
                    grid = args.get("grid") or (None, None, None)
                    block = args.get("block") or (None, None, None)
                    kept: dict[str, Any] | None = {k: args[k] for k in keep if k in args}
                    extra = json.dumps(kept) if kept else None
                    yield Activity(
                        kind,
                        ev.get("name", ""),
                        start,
                        dur,
                        None,
                        _int_or_none(args.get("device")),
                        _int_or_none(args.get("stream")),
                        _int_or_none(args.get("correlation")),
                        _int_or_none(ev.get("pid")),
                        _int_or_none(ev.get("tid")),
                        grid[0],
                        grid[1],
                        grid[2],
                        block[0],
                        block[1],
                        block[2],
                        extra,
                    )
                else:
                    kept = {k: args[k] for k in keep if k in args} if args else None
                    yield Activity(
                        kind,
                        ev.get("name", ""),
                        start,
                        dur,
                        None,
                        _int_or_none(args.get("device")) if kind == "gpu_annotation" else None,
                        None,
                        _int_or_none(args.get("correlation")),
                        _int_or_none(ev.get("pid")),
                        _int_or_none(ev.get("tid")),
                        args=json.dumps(kept) if kept else None,
                    )
    except ijson.common.JSONError as e:
        if parser is ijson and "integer overflow" in str(e):
            raise _Overflow(entry) from None
        raise InputError(
            f"{path}: the trace is truncated or not valid JSON ({e}); re-run the profiler or re-copy the file"
        ) from e
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: cannot read the file ({e}); it is damaged: re-copy it") from e
