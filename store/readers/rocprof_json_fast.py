"""rocprofv3 JSON decoded by msgspec in bounded slices, at C speed; rocprof_json's streaming ijson
reader stays the reference and reads every file this path is not sure of, from its start.

Why: the reference handles ijson's events one by one in Python (3.4M events for the 37 MB real
sample: 1.2 s CPU, ~30 MB/s, of which half are its kernel_symbols table). msgspec decodes only the
fields profdb reads into typed structs and skips the others in C.

How, with memory bounded by the slices and the file's small part: the file is read in blocks; each
array under a key in ``_ARRAYS`` (the records, and the agents and kernel_symbols tables) is decoded a
slice of whole items at a time (``Walk``: ``[`` + the text up to an item's closing ``}`` + ``]``, as
kineto_fast cuts events; a cut inside an item cannot decode, so one that decodes is a run of whole
items). The rest of the file, with array k's content replaced by the number k, is the *skeleton*
(the metadata, strings and other small sections), decoded whole at the end. It proves where each
array was: every number must sit exactly under ``rocprofiler-sdk-tool[i]`` as that process's
``agents`` / ``kernel_symbols`` / ``buffer_records.kernel_dispatch`` / ``buffer_records.memory_copy``
(or one of the record arrays only counted, ``_COUNTED``: ``buffer_records.hip_api``...);
a key matched elsewhere, twice, or an array missed (an escaped key) leaves a number missing or
misplaced. The file is read twice: the first pass checks everything and collects the tables, the
second yields the records; ``Fallback`` is raised only in the first, before any record is yielded,
so a file read by the reference is read by it alone.

What this path leaves to the reference (``Fallback``): a field of another type than rocprofv3 writes
(a handle not an object with an int, a timestamp not an int...), a process whose tables come after
its records, or dispatches without a kernel_symbols table or with an unknown kernel_id (the
reference's errors), duplicate metadata/strings sections, a key with a dot or a ``\\u`` escape in the
skeleton (ijson's dotted prefixes could then name it as a record), nesting deeper than
``MAX_JSON_DEPTH``, a skeleton beyond ``SKELETON_MAX`` bytes, a slice that does not decode. tests/
test_rocprof_json_fast.py compares both paths' records on the real sample (whole, and in slices of
4 KB read 1 KB at a time) and on edited copies, each edit a case above."""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from typing import IO, Any

import msgspec

from ..records import Activity, activity_of
from .base import count_unread
from .json_guard import MAX_JSON_DEPTH, bad_before_cut, closed_inside, nesting
from .rocprof_json import _AGENT, _META, _STRINGS, _Tables, copy_activity

#: the record arrays this reader does not read but counts (rocprof_json.UNREAD_WHAT), taken in slices
#: like the others so that they stay out of the skeleton: --sys-trace's hip_api holds a record per HIP
#: call (1M records, 213 MB, made the skeleton too large and the reference read the file: 8.9 s, not
#: ~1.5). marker_api is not among them: ``strings`` has a marker_api array too (counted in the skeleton)
_COUNTED = ("hip_api", "hsa_api", "rccl_api", "memory_allocation", "scratch_memory", "rocdecode_api", "rocjpeg_api",
            "pc_sample_host_trap", "pc_sample_stochastic")
#: the arrays decoded in slices: records, the two large tables, and the records only counted
_ARRAYS = re.compile(rb'"(kernel_dispatch|memory_copy|agents|kernel_symbols|' + "|".join(_COUNTED).encode()
                     + rb')"[ \t\r\n]*:[ \t\r\n]*\[')
#: bytes of items decoded at once
SLICE = 2 << 20
#: bytes read per block
READ = 1 << 20
#: bytes of the file outside the sliced arrays that may be held (the skeleton), and bytes looked
#: through for the next item boundary, before the reference takes over
SKELETON_MAX = 64 << 20
MAX_PENDING = 64 << 20
#: bytes left unsearched at a block's end, searched again with the next block (a key cut in two)
_TAIL = 64
#: failed cuts tried before more bytes are read
_TRIES = 8
#: (JSON's whitespace: four bytes; ``\s`` would also pass \f and \v, which the reference refuses)
_ITEM_END = re.compile(rb"[ \t\r\n]*([,\]])")
_SPACE = re.compile(rb"[ \t\r\n]*")
#: what follows an item's closing brace when another item or the array's end comes next
_NEXT = re.compile(rb"[ \t\r\n]*(?:,[ \t\r\n]*\{|\])")
_DOTTED_KEY = re.compile(rb'"[^"\\]*\.[^"\\]*"[ \t\r\n]*:')
#: how deep an array's items sit in the file (top object, process list, process, buffer_records)
_ITEM_DEPTH = 4


class Fallback(Exception):
    """The reference reader must read this file (raised before any record is yielded)."""


class _Handle(msgspec.Struct, gc=False):
    handle: int


class _Corr(msgspec.Struct, gc=False):
    internal: int | None = None


class _Dims(msgspec.Struct, gc=False):
    x: int | None = None
    y: int | None = None
    z: int | None = None


class _Info(msgspec.Struct, gc=False):
    kernel_id: int
    agent_id: _Handle | None = None
    queue_id: _Handle | None = None
    workgroup_size: _Dims | None = None
    grid_size: _Dims | None = None


class _Dispatch(msgspec.Struct, gc=False):
    """A kernel_dispatch record: the fields rocprof_json._dispatch reads, of the types rocprofv3 writes."""

    start_timestamp: int
    end_timestamp: int
    dispatch_info: _Info
    correlation_id: _Corr | None = None
    thread_id: int | None = None
    stream_id: _Handle | None = None


class _Copy(msgspec.Struct, gc=False):
    """A memory_copy record: the fields rocprof_json._copy reads."""

    start_timestamp: int
    end_timestamp: int
    operation: int | None = None
    src_agent_id: _Handle | None = None
    dst_agent_id: _Handle | None = None
    stream_id: _Handle | None = None
    correlation_id: _Corr | None = None
    thread_id: int | None = None
    bytes: int | None = None


class _Counted(msgspec.Struct, gc=False):
    """A record only counted: an object, its fields skipped in C."""


class _Symbol(msgspec.Struct, gc=False):
    kernel_id: Any = None
    formatted_kernel_name: Any = None
    demangled_kernel_name: Any = None
    kernel_name: Any = None


_DECODERS: dict[str, Any] = {
    "kernel_dispatch": msgspec.json.Decoder(list[_Dispatch]),
    "memory_copy": msgspec.json.Decoder(list[_Copy]),
    "agents": msgspec.json.Decoder(list[dict[str, Any]]),
    "kernel_symbols": msgspec.json.Decoder(list[_Symbol]),
    **dict.fromkeys(_COUNTED, msgspec.json.Decoder(list[_Counted])),
}
_RAW_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RAW_OBJECTS = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_PLACE = msgspec.json.Decoder(list[int])
_ANY = msgspec.json.Decoder()
_TABLE_KEYS = ("metadata", "strings", "agents", "kernel_symbols")


class Walk:
    """One pass over a decompressed rocprofv3 JSON stream: iterating yields (k, key, items) for
    each slice of array k (keys[k] its key); afterwards ``skeleton`` holds the rest of the text,
    each array's content replaced by its number."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.keys: list[str] = []
        self.skeleton = b""

    def __iter__(self) -> Iterator[tuple[int, str, list[Any]]]:
        parts: list[bytes] = []
        held = 0
        buf, pos, eof = b"", 0, False
        while True:
            m = _ARRAYS.search(buf, pos)
            if m is not None:
                keep = m.end()
            else:  # (a key cut by the block's end is searched again with the next block)
                keep = len(buf) if eof else max(pos, len(buf) - _TAIL)
            parts.append(buf[pos:keep])
            held += keep - pos
            if held > SKELETON_MAX:
                raise Fallback("the text outside the arrays read in slices is too large")
            if m is None:
                if eof:
                    break
                data = self.f.read(READ)
                eof = not data
                buf, pos = buf[keep:] + data, 0
                continue
            k = len(self.keys)
            key = m.group(1).decode()
            self.keys.append(key)
            parts.append(str(k).encode())
            buf, pos, eof = yield from self._array(k, key, buf, m.end(), eof)
            # (buf[pos] is the array's closing bracket, kept in the skeleton)
        self.skeleton = b"".join(parts)

    def _array(
        self, k: int, key: str, buf: bytes, pos: int, eof: bool
    ) -> Generator[tuple[int, str, list[Any]], None, tuple[bytes, int, bool]]:
        """Decode array k's items from ``buf[pos:]`` (just after its ``[``) in slices; returns
        (buf, pos of its closing bracket, eof)."""
        decoder = _DECODERS[key]
        want = SLICE
        first = True
        while True:
            while len(buf) - pos < want and not eof:
                data = self.f.read(READ)
                eof = not data
                buf = buf[pos:] + data
                pos = 0
            start = _SPACE.match(buf, pos).end()  # type: ignore[union-attr]  # (matches at least "")
            if start < len(buf) and buf[start] == 93:  # "]": an empty array (after a comma: not JSON)
                if not first:
                    raise Fallback(f"a comma before the closing bracket of '{key}'")
                return buf, start, eof
            items, end = self._slice(decoder, buf, start)
            if items is None:
                if eof or len(buf) - pos > MAX_PENDING:
                    raise Fallback(f"no whole item of '{key}' found in {len(buf) - pos} bytes")
                want = 2 * (len(buf) - pos)  # (an item longer than the slice, or odd cuts)
                continue
            yield k, key, items
            first = False
            m = _ITEM_END.match(buf, end)
            assert m is not None  # (_slice cut before a comma or a bracket)
            if m.group(1) == b"]":
                return buf, m.end() - 1, eof
            pos, want = m.end(), SLICE

    @staticmethod
    def _slice(decoder: Any, buf: bytes, start: int) -> tuple[list[Any] | None, int]:
        """The whole items from ``buf[start:]`` up to the last ``}`` that the next item or the closing
        bracket follows and that decodes, and the end of that cut; (None, 0) when none of the last
        ``_TRIES`` decodes. (A ``}`` inside an item followed by a comma and a key is not tried.)"""
        end = len(buf)
        for _ in range(_TRIES):
            brace = buf.rfind(b"}", start, end)
            while brace >= start and not _NEXT.match(buf, brace + 1):
                brace = buf.rfind(b"}", start, brace)
            if brace < start:
                return None, 0
            end = brace
            piece = b"".join((b"[", memoryview(buf)[start : brace + 1], b"]"))
            try:
                items = decoder.decode(piece)
            except msgspec.ValidationError as e:
                raise Fallback(f"an item of another type than rocprofv3 writes ({e})") from None
            except RecursionError:
                raise Fallback("nested too deep") from None
            except msgspec.DecodeError as e:
                closed = closed_inside(e)
                if closed is not None:  # the array's own bracket closed inside the piece: its end
                    piece = bytes(piece[: closed - 1].rstrip())
                    items = Walk._decode(decoder, piece)
                    brace = start + len(piece) - 3  # (so that the bracket comes next)
                elif bad_before_cut(e, piece):
                    raise Fallback(f"a slice does not decode ({e})") from None
                else:
                    continue
            if nesting(piece) - 1 + _ITEM_DEPTH > MAX_JSON_DEPTH:
                raise Fallback("nested too deep")
            return items, brace + 1
        return None, 0

    @staticmethod
    def _decode(decoder: Any, piece: bytes) -> list[Any]:
        try:
            items: list[Any] = decoder.decode(piece)
        except (msgspec.DecodeError, RecursionError) as e:
            raise Fallback(f"a slice does not decode ({e})") from None
        return items


class Checked:
    """What the first pass found: each process's tables, the process of each array (by number), and
    the skeleton it proved them by (the second pass must meet the same one)."""

    def __init__(self, tables: list[_Tables], owner: dict[int, int], skeleton: bytes, unread: dict[str, int]) -> None:
        self.tables = tables
        self.owner = owner
        self.skeleton = skeleton
        #: the records (objects) of the other buffer_records arrays, by key (left in the skeleton)
        self.unread = unread


def check(f: IO[bytes]) -> Checked:
    """First pass: every process's tables (as the reference builds them), once the whole file is
    proved to be read alike by both paths; raises Fallback otherwise."""
    walk = Walk(f)
    arrays: dict[int, list[Any]] = {}
    kernels: dict[int, set[int]] = {}  # (the kernel ids each dispatch array uses)
    counted: dict[int, int] = {}  # (the records of each array only counted)
    for k, key, items in walk:
        if key in ("agents", "kernel_symbols"):
            arrays.setdefault(k, []).extend(items)
        elif key == "kernel_dispatch":
            kernels.setdefault(k, set()).update(d.dispatch_info.kernel_id for d in items)
        elif key in _COUNTED:
            counted[k] = counted.get(k, 0) + len(items)
    skeleton = walk.skeleton
    if b"\\u" in skeleton or _DOTTED_KEY.search(skeleton) is not None:
        raise Fallback("a key the reference's dotted prefixes might read otherwise")
    if nesting(skeleton) > MAX_JSON_DEPTH:
        raise Fallback("nested too deep")
    try:
        top = _RAW_OBJECT.decode(skeleton)
        procs = _RAW_OBJECTS.decode(top["rocprofiler-sdk-tool"])
    except (msgspec.DecodeError, KeyError, RecursionError):
        raise Fallback("not one rocprofiler-sdk-tool list of process objects") from None
    if not procs:
        raise Fallback("no process")
    owner: dict[int, int] = {}
    tables: list[_Tables] = []
    unread: dict[str, int] = {}
    for i, proc in enumerate(procs):
        order = list(proc)
        br = _raw_object(proc.get("buffer_records"))
        records_at = order.index("buffer_records") if br is not None else len(order)
        if any(order.index(t) > records_at for t in _TABLE_KEYS if t in proc):
            raise Fallback("a table after the records")
        t = _Tables()
        for key in ("agents", "kernel_symbols"):
            if key in proc:
                owner[_place(proc[key], key, walk.keys)] = i
        if br is not None:
            for key in ("kernel_dispatch", "memory_copy", *_COUNTED):
                if key in br:
                    owner[_place(br[key], key, walk.keys)] = i
            for key, raw in br.items():  # (the records the reference counts: objects in an array, in its order)
                if key in ("kernel_dispatch", "memory_copy"):
                    continue
                if key in _COUNTED:
                    n = counted.get(_place(raw, key, walk.keys), 0)
                else:
                    try:
                        n = sum(1 for r in _RAW_LIST.decode(raw) if bytes(r)[:1] == b"{")
                    except msgspec.ValidationError:
                        continue  # (not an array: no record)
                if n:
                    count_unread(unread, key, n)
        try:
            if "metadata" in proc:
                t.add(_META, _ANY.decode(proc["metadata"]))
            if "strings" in proc:
                strings = _ANY.decode(proc["strings"])
                records = strings.get("buffer_records") if isinstance(strings, dict) else None
                for item in records if isinstance(records, list) else ():
                    t.add(_STRINGS, item)
        except Exception as e:  # (whatever the reference makes of it)
            raise Fallback(f"{type(e).__name__}: {e}") from None
        tables.append(t)
    if sorted(owner) != list(range(len(walk.keys))):
        raise Fallback("an array outside its place, or twice")
    for section in ("metadata", "strings"):  # (a duplicate key: the reference reads both, a dict one)
        found = len(re.findall(b'"' + section.encode() + rb'"[ \t\r\n]*:', skeleton))
        if found != sum(section in p for p in procs):
            raise Fallback(f"'{section}' more than once in a process, or elsewhere")
    for k, key in enumerate(walk.keys):
        t = tables[owner[k]]
        try:
            if key == "agents":
                t.has_agents = True
                for obj in arrays.get(k, ()):
                    t.add(_AGENT, obj)
            elif key == "kernel_symbols":
                t.has_symbols = True
                for s in arrays.get(k, ()):
                    t.add_symbol(s.kernel_id, s.formatted_kernel_name, s.demangled_kernel_name, s.kernel_name)
        except Exception as e:
            raise Fallback(f"{type(e).__name__}: {e}") from None
    for k, used in kernels.items():
        t = tables[owner[k]]
        if not t.has_symbols or not used <= t.symbols.keys():
            raise Fallback("dispatches without a kernel_symbols table, or of a kernel_id not in it")
    return Checked(tables, owner, skeleton, unread)


def _raw_object(raw: msgspec.Raw | None) -> dict[str, msgspec.Raw] | None:
    if raw is None:
        return None
    try:
        return _RAW_OBJECT.decode(raw)
    except msgspec.DecodeError:
        raise Fallback("buffer_records is not an object") from None


def _place(raw: msgspec.Raw, key: str, keys: list[str]) -> int:
    """The number standing for an array in the skeleton, checked to be one of ``key``'s."""
    try:
        got = _PLACE.decode(raw)
    except msgspec.DecodeError:
        raise Fallback(f"'{key}' is not an array read in slices") from None
    if len(got) != 1 or not 0 <= got[0] < len(keys) or keys[got[0]] != key:
        raise Fallback(f"'{key}' is not an array read in slices")
    return got[0]


def records(f: IO[bytes], checked: Checked) -> Iterator[list[Activity]]:
    """Second pass: the records, a list per slice, with what ``check`` found in the same file (both
    passes meet the arrays in the same order, so array k is the same one). A file that changed after
    the first pass shows another skeleton at the end: Fallback then, which the reader reports as an
    error, so the ingest that took these records fails whole."""
    walk = Walk(f)
    tables, owners = checked.tables, checked.owner
    new = activity_of
    for k, key, items in walk:
        if key == "kernel_dispatch":
            t = tables[owners[k]]
            out = []
            for d in items:
                di = d.dispatch_info
                name = t.symbols[di.kernel_id]  # (check found every kernel_id in the table)
                stream = d.stream_id.handle if d.stream_id is not None else None
                if stream is None:
                    stream = di.queue_id.handle if di.queue_id is not None else None
                agent = di.agent_id
                grid = di.grid_size or _NO_DIMS
                wg = di.workgroup_size or _NO_DIMS
                start = d.start_timestamp
                out.append(new((
                    "kernel", name, start, d.end_timestamp - start, None,
                    t.agents.get(agent.handle) if agent is not None else None, stream,
                    d.correlation_id.internal if d.correlation_id is not None else None,
                    t.pid, d.thread_id, grid.x, grid.y, grid.z, wg.x, wg.y, wg.z, None,
                )))
            yield out
        elif key == "memory_copy":
            t = tables[owners[k]]
            yield [copy_activity(t, c.operation, c.src_agent_id.handle if c.src_agent_id is not None else None,
                                 c.dst_agent_id.handle if c.dst_agent_id is not None else None, c.start_timestamp,
                                 c.end_timestamp, c.stream_id.handle if c.stream_id is not None else None,
                                 c.correlation_id.internal if c.correlation_id is not None else None,
                                 c.thread_id, c.bytes) for c in items]
    if walk.skeleton != checked.skeleton:
        raise Fallback("the text around the arrays is not what the first pass read")


_NO_DIMS = _Dims()
