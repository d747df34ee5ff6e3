"""The Kineto events array decoded in bounded slices by msgspec, at C speed; kineto_json's streaming
ijson reader stays the reference and takes over wherever this path is not sure.

Why: ijson builds a dict per event with every field and arg (``Input Dims``, ``Concrete Inputs``...),
most of which profdb drops. msgspec decodes a slice of events into typed structs holding only the
fields profdb reads (unknown fields are skipped in C); measured on one 37 MB generated trace: ijson
``items`` 0.59 s CPU, msgspec 0.25 s, and the per-event Python is shorter (attributes, no dict lookups).

How, with memory flat in the file size: the file is read in blocks; the bytes after
``"traceEvents": [`` are cut at the last ``}`` followed by a comma before ``SLICE`` bytes, and
``[`` + slice + ``]`` is decoded. A cut in the wrong place (inside a string, or inside an event's
args) cannot decode (the string stays open, or brackets do not balance), so a slice that decodes is
exactly a run of whole events; a failed cut tries an earlier ``}``. The last slice is decoded with
the rest of the file as ``{"traceEvents": [`` + rest, which checks the trailer (distributedInfo...)
is a complete JSON object, as ijson does by reading to the end. The header before ``traceEvents`` is
checked the same way.

Whenever something is not as expected (no ``traceEvents`` array in the first ``MAX_PENDING`` bytes,
no event boundary within ``MAX_PENDING`` bytes, a slice that does not decode, a field of an
unexpected type, a second ``traceEvents`` key), ``Fallback`` is
raised with the number of events already turned into records; kineto_json then streams the file
with the guarded ijson reader from that event on, which reads the odd layout or raises its clear
error naming the file. So both paths give the same records and the same errors (tests/
test_kineto_fast.py compares them on every real trace in tests/data and on damaged copies).
Nesting depth: msgspec stops at its recursion limit (~1000 levels) and the slices bound memory; a
failure falls back to the reference, whose json_guard gives the depth error. Integers beyond 64 bits
decode as Python ints, as the reference reads them (``kineto_json._PYTHON_PARSER``); one that profdb
keeps is refused by validate."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import IO, Any

import msgspec

from ..records import Activity, activity_of
from .base import count_unread
from .json_guard import MAX_JSON_DEPTH, bad_before_cut, closed_inside, nesting

#: bytes of events decoded at once (about 7,000 events of a generated trace; one 37 MB trace read
#: with 8 MB slices took 70 MB more memory, with 2 MB 24 MB more, for the same CPU time)
SLICE = 2 << 20
#: bytes read per block
READ = 512 << 10
#: bytes looked through for the start of the events, or for the next event boundary, before the
#: streaming reader takes over
MAX_PENDING = 64 << 20
#: failed cuts tried in a slice before the streaming reader takes over
_TRIES = 4

_UNSET: Any = msgspec.UNSET


class Fallback(Exception):
    """The fast path stops here: ``done`` events of traceEvents (every entry, not only those kept)
    have been turned into records; the reference reader goes on from there."""

    def __init__(self, done: int, why: str) -> None:
        super().__init__(why)
        self.done = done
        self.why = why


class _Args(msgspec.Struct, gc=False):
    """The args profdb reads; the kept ones (kineto_json._KEEP_ARGS, in that order) are UNSET when absent."""

    device: Any = None
    stream: Any = None
    correlation: Any = None
    grid: Any = None
    block: Any = None
    k0: Any = msgspec.field(default=_UNSET, name="Collective name")
    k1: Any = msgspec.field(default=_UNSET, name="In msg nelems")
    k2: Any = msgspec.field(default=_UNSET, name="Out msg nelems")
    k3: Any = msgspec.field(default=_UNSET, name="Group size")
    k4: Any = msgspec.field(default=_UNSET, name="dtype")
    k5: Any = msgspec.field(default=_UNSET, name="Process Group Name")
    k6: Any = msgspec.field(default=_UNSET, name="Process Group Description")
    k7: Any = msgspec.field(default=_UNSET, name="Process Group Ranks")
    k8: Any = msgspec.field(default=_UNSET, name="bytes")
    k9: Any = msgspec.field(default=_UNSET, name="registers per thread")
    k10: Any = msgspec.field(default=_UNSET, name="shared memory")


KEEP_ARGS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Description",
    "Process Group Ranks",
    "bytes",
    "registers per thread",
    "shared memory",
)
_NONE_KEPT = (_UNSET,) * len(KEEP_ARGS)


class _Event(msgspec.Struct, gc=False):
    """An entry of traceEvents: the fields profdb reads (absent: as ``dict.get`` would give)."""

    ph: Any = None
    cat: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: _Args | None = None


class _Rest(msgspec.Struct):
    """The last slice of events and the rest of the file, decoded as one object."""

    traceEvents: list[_Event]


_SLICE_DECODER = msgspec.json.Decoder(list[_Event])
_REST_DECODER = msgspec.json.Decoder(_Rest)
_OBJECT_DECODER = msgspec.json.Decoder(dict[str, Any])
_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_NONE3 = (None, None, None)
#: JSON whitespace, then the comma after an event
_COMMA = re.compile(rb"[ \t\r\n]*,")


def int_or_none(v: Any) -> int | None:
    """An int field of an event, as both readers take it: an int as it is (a bool stays a bool, for
    validate to reject), a string of digits as its number, anything else None."""
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.isdigit():
        return int(v)
    return None


def activities(
    f: IO[bytes], cats: dict[str, str], pid: int | None, unread: dict[str, int]
) -> Iterator[list[Activity]]:
    """The records of the events of a Kineto trace open as ``f`` (decompressed bytes), a list per
    slice; raises ``Fallback`` (see the module doc) where the reference reader must go on. The
    complete events of categories not read (but ``SILENT``) are counted into ``unread`` by category,
    a slice's once it is turned into records whole (those after a Fallback: by the reference)."""
    buf = b""
    while True:
        m = _START.search(buf)
        if m is not None:
            break
        if len(buf) > MAX_PENDING:
            raise Fallback(0, "no traceEvents array at the start")
        data = f.read(READ)
        if not data:
            raise Fallback(0, "no traceEvents array")
        buf += data
    header = buf[: m.start()].rstrip()
    if header.endswith(b","):
        header = header[:-1]
    if nesting(header + b"}") > MAX_JSON_DEPTH:
        raise Fallback(0, "nested too deep")
    try:
        _OBJECT_DECODER.decode(header + b"}")
    except (msgspec.DecodeError, RecursionError):
        raise Fallback(0, "the header before traceEvents is not as expected") from None
    chunks = [buf[m.end() :]]
    size = len(chunks[0])
    done = 0
    kept_cache: dict[Any, str | None] = {_NONE_KEPT: None}
    eof = False
    want = SLICE  # bytes to hold before cutting
    while True:
        while size < want and not eof:
            data = f.read(READ)
            if data:
                chunks.append(data)
                size += len(data)
            else:
                eof = True
        buf = b"".join(chunks) if len(chunks) > 1 else chunks[0]
        if eof:
            text = b'{"traceEvents":[' + buf
            if b'"traceEvents"' in buf or nesting(text) > MAX_JSON_DEPTH:
                raise Fallback(done, "a second traceEvents key, or too deep, in the last slice")
            try:
                last = _REST_DECODER.decode(text).traceEvents
            except (msgspec.DecodeError, RecursionError):
                raise Fallback(done, "the last slice or the end of the file does not decode") from None
            yield _records(last, cats, pid, done, kept_cache, unread)
            return
        events, cut = _decode_slice(buf, done)
        if events is None:
            if size > MAX_PENDING:
                raise Fallback(done, f"no event boundary within {MAX_PENDING} bytes")
            chunks, size = [buf], len(buf)  # read on: an event longer than the slice, or odd cuts
            want = 2 * size  # (doubling: a long run without a boundary costs linear time)
            continue
        yield _records(events, cats, pid, done, kept_cache, unread)
        done += len(events)
        rest = buf[cut:]
        chunks, size, want = [rest], len(rest), SLICE


def _decode_slice(buf: bytes, done: int) -> tuple[list[_Event] | None, int]:
    """The whole events at the start of ``buf`` and where the next one starts (after the comma), or
    (None, 0) when no cut of the last ``_TRIES`` decodes (the data goes on after the slice)."""
    end = len(buf)
    for _ in range(_TRIES):
        brace = buf.rfind(b"}", 0, end)
        while brace > 0:
            after = _COMMA.match(buf, brace + 1)  # (a regex: a run of spaces costs C time, not a loop)
            if after is not None:
                comma = after.end() - 1
                break
            brace = buf.rfind(b"}", 0, brace)
        if brace <= 0:
            return None, 0
        piece = b"".join((b"[", memoryview(buf)[: brace + 1], b"]"))  # (one copy of the slice, not three)
        try:
            events = _SLICE_DECODER.decode(piece)
        except msgspec.ValidationError:
            raise Fallback(done, "an entry of traceEvents of an unexpected type") from None
        except RecursionError:
            raise Fallback(done, "nested too deep") from None
        except msgspec.DecodeError as e:
            if bad_before_cut(e, piece):
                raise Fallback(done, f"a slice does not decode ({e})") from None
            end = brace  # not a boundary between events: try an earlier one
            continue
        # (checked once the cut is known good; the file's events are one level deeper than the slice's)
        if nesting(piece) + 1 > MAX_JSON_DEPTH:
            raise Fallback(done, "nested too deep")
        return events, comma + 1
    return None, 0


_GPU_KINDS = frozenset(("kernel", "memcpy", "memset"))
#: categories of complete events profdb leaves out on purpose, not counted as unread (kineto_json's
#: ``UNREAD_WHAT`` says what the others are): the profiler's own span of the trace ("Trace"), its
#: overhead, and the GPU's waits on synchronisation (stream, event and context syncs: not work)
SILENT = frozenset(("Trace", "overhead", "cuda_sync", "cuda_event", "xpu_sync"))
#: distinct kept-args texts remembered (kernels repeat a few register/shared-memory pairs; message
#: sizes of collectives vary): cleared past this many, so memory stays flat
_KEPT_CACHE = 4096


def _records(
    events: list[_Event], cats: dict[str, str], pid: int | None, done: int, kept_cache: dict[Any, str | None],
    unread: dict[str, int],
) -> list[Activity]:
    """kineto_json's per-event rules (the reference: kineto_json._read_events), on decoded structs.
    Anything the reference would reject or read otherwise raises Fallback at this slice's start; the
    slice's events of categories not read are added to ``unread`` only once it is read whole."""
    out: list[Activity] = []
    skipped: dict[str, int] = {}
    append = out.append
    new = activity_of  # (Activity(...) handles keywords and defaults in Python, per record)
    if len(kept_cache) > _KEPT_CACHE:
        kept_cache.clear()
        kept_cache[_NONE_KEPT] = None
    try:
        for ev in events:
            if ev.ph != "X" or (pid is not None and ev.pid != pid):
                continue
            cat = ev.cat
            kind = cats.get(cat) if type(cat) is str else None
            if kind is None:
                if type(cat) is str and cat not in SILENT:
                    skipped[cat] = skipped.get(cat, 0) + 1
                continue
            ts = ev.ts
            if ts is None:
                continue
            dur = ev.dur or 0
            tt, td = type(ts), type(dur)
            if (tt is not float and tt is not int) or (td is not float and td is not int):
                raise Fallback(done, "ts or dur not a number")
            a = ev.args
            if a is None:
                a = _EMPTY
            kv = (a.k0, a.k1, a.k2, a.k3, a.k4, a.k5, a.k6, a.k7, a.k8, a.k9, a.k10)
            try:
                extra = kept_cache[kv]
            except KeyError:
                extra = kept_cache[kv] = _kept(kv)
            except TypeError:  # an unhashable value (a list): not cached
                extra = _kept(kv)
            # (int_or_none inlined for the usual int and None)
            p, t, c = ev.pid, ev.tid, a.correlation
            if p is not None and type(p) is not int:
                p = int_or_none(p)
            if t is not None and type(t) is not int:
                t = int_or_none(t)
            if c is not None and type(c) is not int:
                c = int_or_none(c)
            if kind in _GPU_KINDS:
                grid = a.grid or _NONE3
                block = a.block or _NONE3
                append(new((
                    kind, ev.name, round(ts * 1000), round(dur * 1000), None,
                    int_or_none(a.device), int_or_none(a.stream), c, p, t,
                    grid[0], grid[1], grid[2], block[0], block[1], block[2], extra,
                )))
            else:
                append(new((
                    kind, ev.name, round(ts * 1000), round(dur * 1000), None,
                    int_or_none(a.device) if kind == "gpu_annotation" else None, None, c, p, t,
                    None, None, None, None, None, None, extra,
                )))
    except Fallback:
        raise
    except Exception as e:  # whatever the reference makes of it (its error, or its reading)
        raise Fallback(done, f"{type(e).__name__}: {e}") from None
    for cat, n in skipped.items():
        count_unread(unread, cat, n)
    return out


_EMPTY = _Args()


def _kept(kv: tuple[Any, ...]) -> str | None:
    kept = {k: v for k, v in zip(KEEP_ARGS, kv) if v is not _UNSET}
    return json.dumps(kept) if kept else None


# --------------------------------------------------------------------------- the GPU of a trace (inspect)


class _DeviceArgs(msgspec.Struct, gc=False):
    device: Any = None


class _DeviceEvent(msgspec.Struct, gc=False):
    """An event as device detection reads it: its phase, its category and its args' device."""

    ph: Any = None
    cat: Any = ""
    args: _DeviceArgs | None = None


_DEVICE_DECODER = msgspec.json.Decoder(list[_DeviceEvent])
#: the categories of the GPU events whose args.device names the process's GPU (kernels, copies, sets)
GPU_CATS = ("kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset")
_GPU_CATS = frozenset(GPU_CATS)
_EVENTS_OPEN = re.compile(rb"\s*:\s*\[\s*")
_NEXT_EVENT = re.compile(rb"\}\s*,\s*\{")
_EVENT_END = re.compile(rb"\}\s*[,\]]")
#: event starts (tail) and cuts (both) tried in a blob before the caller's pattern takes over
_DEVICE_TRIES = 6


def _whole_events(body: bytes) -> list[_DeviceEvent] | None:
    """The whole events at the start of ``body`` (which starts at an event's ``{``): cut after the
    last ``}`` that ends an event (a comma or the closing bracket follows), or where the events array
    closes (the rest of a small file), and decoded; None when no cut decodes."""
    end = len(body)
    for _ in range(_DEVICE_TRIES):
        brace = body.rfind(b"}", 0, end)
        while brace >= 0 and not _EVENT_END.match(body, brace):
            brace = body.rfind(b"}", 0, brace)
        if brace < 0:
            return None
        end = brace
        piece = b"[" + body[: brace + 1] + b"]"
        try:
            return _DEVICE_DECODER.decode(piece)
        except (msgspec.ValidationError, RecursionError):
            return None
        except msgspec.DecodeError as e:
            closed = closed_inside(e)  # the events array closed inside the piece: decode that
            if closed is None:
                if bad_before_cut(e, piece):
                    return None  # bad before the cut (or the blob's start is not an event's)
                continue  # a cut inside a string or inside an event: try an earlier one
            try:  # (the byte msgspec names is the one after the closing bracket, or the comma after it)
                return _DEVICE_DECODER.decode(piece[:closed].rstrip(b" \t\r\n,"))
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                return None
    return None


def event_devices(blob: bytes, at_start: bool) -> set[int] | None:
    """The ``args.device`` of the GPU events (``GPU_CATS``) among the whole
    events of a head or tail blob, decoded by msgspec; None when the blob is not as expected (the
    caller's pattern reads it then). ``at_start``: the blob starts right after ``"traceEvents"`` (a
    head); else it starts inside an event (a tail) and the events are read from the first event
    start that decodes."""
    if not at_start:
        # a tail that holds the whole file (a small trace) holds the events' start: read from there,
        # not from the first "}, {", which may be between entries of deviceProperties
        opening = blob.find(b'"traceEvents"')
        if opening >= 0:
            return event_devices(blob[opening + len(b'"traceEvents"') :], True)
    if at_start:
        m = _EVENTS_OPEN.match(blob)
        starts = [m.end()] if m is not None and blob[m.end() : m.end() + 1] == b"{" else []
    else:
        starts = [m.end() - 1 for _, m in zip(range(_DEVICE_TRIES), _NEXT_EVENT.finditer(blob))]
    for start in starts:
        events = _whole_events(blob[start:])
        if events is not None and not all(type(ev.ph) is str for ev in events):
            continue  # (objects of another array, deviceProperties' entries: no events)
        if events is not None:  # (cat and device typed Any: a list or a float is no GPU event's)
            return {
                d for ev in events
                if type(ev.cat) is str and ev.cat in _GPU_CATS and ev.args is not None
                and type(d := ev.args.device) is int and d >= 0
            }
    return None

