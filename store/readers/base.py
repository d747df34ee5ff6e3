"""The reader protocol. A reader is a module (or object) with:

``NAME``         short format name, used by ``--format NAME`` and stored in source_file.format
``DESCRIPTION``  one line for ``profdb formats``: what it reads
``detect(path) -> bool``            cheap: looks at the name and the first bytes only
``inspect(path) -> SourceInfo``     cheap: identity hints and time base, without streaming the rows
``read(path, info) -> Iterator[Record]``   streams Activity / Counter / Aggregate records

Optional, for files that hold several ranks (merged Metrix output with ``rank_<r>:`` key prefixes,
a rocpd database of several processes):

``read_rank(path, info, index) -> Iterator[Record]``
    streams only the records of rank section ``info.ranks[index]``.

A reader that can return a non-empty ``SourceInfo.ranks`` from ``inspect`` must provide
``read_rank`` (``has_rank_sections(reader)`` tells). The ingest then treats each section as its own
input: it resolves the identity of ``info.ranks[index]`` (a RankHint like ``info.hint``) and loads
``read_rank(path, info, index)`` under that rank; it never calls ``read`` for such a file (``read``
still yields every section's records one after the other, for tools that do not care about ranks).

Optional, for readers whose records come in lists anyway (Kineto's decoded slices):

``activity_batches(path, info, index) -> Iterator[list[Activity]]``
    what ``read`` (``index`` None) or ``read_rank`` (``index``) yields, in lists of Activity records
    only, in the same order: the ingest's workers take each list whole instead of one record at a
    time (``BatchReader``).

Optional, for kinds read as columns (rocprofv3 kernel and counter CSV; ``store/columnar.py``):

``COLUMNAR_KINDS``                    the ``SourceInfo.kind`` values ``read_columns`` takes
``read_columns(path, info) -> Iterator[columnar.Batch]``   the rows as numpy/pyarrow column batches
``warm_up()``                         imports what ``read_columns`` needs (numpy, pyarrow); each ingest
                                      worker calls it as it starts, when a file is read as columns
``read_group(paths, info) -> columnar.GroupBatches | None``
                                      several small files of one kind at once: their batches and each
                                      file's row count (``per_file``: each file's batches, as
                                      ``read_columns`` gives them), or None when they cannot be read
                                      together (the ingest then reads each on its own)
``GROUP_FILE_BYTES``, ``GROUP_BYTES``   the largest file ``read_group`` takes, and the most bytes in all
(``ColumnReader``)

Optional, for formats whose producer writes times as unsigned integers (rocprofv3's ns of CLOCK_BOOTTIME,
rpd_tracer's of CLOCK_MONOTONIC):
``UNSIGNED_TIMES = True``   a start before the clock's zero is then damage (``validate.activities``)
Readers know nothing of the database. They raise ``InputError`` naming the file on bad input.
Helpers here are shared by readers: opening .gz transparently, peeking at a file's head.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

from ..errors import InputError
from ..records import Activity, Record, SourceInfo

if TYPE_CHECKING:
    from ..columnar import Batch, GroupBatches


class Reader(Protocol):
    NAME: str
    DESCRIPTION: str

    def detect(self, path: Path) -> bool: ...

    def inspect(self, path: Path) -> SourceInfo: ...

    def read(self, path: Path, info: SourceInfo) -> Iterator[Record]: ...


class MultiRankReader(Reader, Protocol):
    """A reader whose files may hold several ranks (``SourceInfo.ranks`` non-empty)."""

    def read_rank(self, path: Path, info: SourceInfo, index: int) -> Iterator[Record]: ...


class BatchReader(Reader, Protocol):
    """A reader whose Activity records come in lists (``activity_batches``, see the module doc). It
    counts the events it does not read into ``unread`` (what -> events; e.g. Kineto's categories of
    another device), which the ingest names and stores with the file."""

    def activity_batches(
        self, path: Path, info: SourceInfo, index: int | None, unread: dict[str, int] | None = None
    ) -> Iterator[list[Activity]]: ...


#: distinct kinds of records not read counted by name in a file; the rest are counted together under
#: ``OTHER_KINDS`` (a damaged or hostile file with a category per event must not grow the count unbounded)
UNREAD_KINDS = 256
OTHER_KINDS = "\x00others"


def count_unread(unread: dict[str, int], key: str, n: int = 1) -> None:
    """Add ``n`` records of kind ``key`` to ``unread`` (past ``UNREAD_KINDS`` kinds: to ``OTHER_KINDS``)."""
    if key not in unread and len(unread) >= UNREAD_KINDS:
        key = OTHER_KINDS
    unread[key] = unread.get(key, 0) + n


def add_unread(unread: dict[str, int] | None, by_key: dict[str, int], label: Callable[[str], str]) -> None:
    """``by_key``'s counts (a reader's, by category or array) added to ``unread`` under their labels (the
    reader's ``unread_what``); nothing when the caller passed no ``unread``."""
    if unread is not None:
        for key, n in by_key.items():
            what = label(key)
            unread[what] = unread.get(what, 0) + n


def unread_label(kind: str, key: str, what: dict[str, str]) -> str:
    """How the ingest and the store name records a reader did not read: ``kind`` + ``key`` (e.g.
    "events of category " + "hpu_op"), and what they are when ``what`` knows ``key``."""
    if key == OTHER_KINDS:
        return f"{kind}(any other: past the first {UNREAD_KINDS} named)"
    if key == "":
        return f"{kind}(none)"
    known = what.get(key)
    return f"{kind}{key}" + (f" ({known})" if known else "")


#: records per list when a BatchReader's records come one by one (its reference reader's)
RECORDS_PER_LIST = 4096


def in_lists(records: Iterator[Activity]) -> Iterator[list[Activity]]:
    """``records`` as ``activity_batches`` gives them: lists of ``RECORDS_PER_LIST``."""
    while batch := list(islice(records, RECORDS_PER_LIST)):
        yield batch


class ColumnReader(Reader, Protocol):
    """A reader that reads some kinds (``COLUMNAR_KINDS``) as column batches (see the module doc)."""

    COLUMNAR_KINDS: frozenset[str]
    GROUP_FILE_BYTES: int
    GROUP_BYTES: int

    def read_columns(self, path: Path, info: SourceInfo) -> Iterator[Batch]: ...

    def read_group(self, paths: Sequence[Path], info: SourceInfo) -> GroupBatches | None: ...

    def warm_up(self) -> None: ...


def has_rank_sections(reader: object) -> bool:
    """True if ``reader`` can split a multi-rank file (provides ``read_rank``)."""
    return callable(getattr(reader, "read_rank", None))


GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def open_binary(path: Path) -> IO[bytes]:
    """Open a file for streaming, decompressing gzip by content (not by extension). A plain file is
    opened once (its first bytes read, then rewound), not once to look and once to read."""
    f = open(path, "rb")
    try:
        gz = f.read(2) == GZIP_MAGIC
        f.seek(0)
    except BaseException:
        f.close()
        raise
    if not gz:
        return f
    f.close()
    return gzip.open(path, "rb")  # type: ignore[return-value]


#: bytes read for a head while heads are remembered (``remembered_heads``): every reader's ``detect``
#: asks for at most this much, so one read serves them all
HEAD_READ = 65536
#: files whose head is remembered at once: detection looks at one file at a time
_HEADS_KEPT = 4
#: path -> (its head, whether that is the whole content, whether it is the file's own bytes (not gzip's
#: decompressed ones))
_heads: OrderedDict[str, tuple[bytes, bool, bool]] | None = None


@contextmanager
def remembered_heads() -> Iterator[None]:
    """While inside, ``head`` reads each file once and answers every later request for it from
    memory (the last ``_HEADS_KEPT`` files, ``HEAD_READ`` bytes each): detecting a file's format asks
    every reader in turn, nine heads per file, each an open and a read (0.5 ms per file on 2,048
    small CSV files). Only for a phase in which the files do not change (ingest's phase 1)."""
    global _heads
    outer, _heads = _heads, OrderedDict()
    try:
        yield
    finally:
        _heads = outer


def head(path: Path, size: int = 65536) -> bytes:
    """The first ``size`` bytes of the (decompressed) content; b"" if unreadable."""
    heads = _heads
    key = str(path)
    if heads is not None and key in heads:
        data, whole, _raw = heads[key]
        if whole or len(data) >= size:
            heads.move_to_end(key)
            return data[:size]
    want = max(size, HEAD_READ) if heads is not None else size
    try:
        with open_binary(path) as f:
            data = f.read(want)
            raw = not isinstance(f, gzip.GzipFile)
    except (EOFError, zlib.error, gzip.BadGzipFile):
        return before_damage(path, size)
    except OSError:
        return b""
    if heads is not None:
        _remember(heads, key, data, want, raw)
    return data[:size]


def before_damage(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of a gzip file whose stream is cut or damaged within them: what
    decompresses before the damage, so the file is still known by its content (and its reader then
    says the stream is damaged, naming it). A truncated .rpd.gz or .json.gz used to read as no
    profiler output at all: skipped in a folder with a note, its rank missing. Never remembered: it is
    not the file's content."""
    return gunzipped(path, size)[0]


def gunzipped(path: Path, keep: int, whole: bool = False) -> tuple[bytes, int, bool]:
    """A gzip file decompressed as far as its stream goes: its first ``keep`` bytes, how many bytes it
    decompressed to before the stream ended or broke, and whether it ended as a gzip stream should.
    Stops once ``keep`` bytes are out (never decompressing more), unless ``whole``: then reads to the
    end, memory bounded (what is past ``keep`` is counted, not kept)."""
    out = bytearray()
    total = 0
    d = zlib.decompressobj(wbits=31)
    try:
        with open(path, "rb") as f:
            while not d.eof and (whole or total < keep):
                block = f.read(1 << 16)
                if not block:
                    break
                while True:
                    piece = d.decompress(block, 1 << 22 if whole else keep - total)
                    total += len(piece)
                    if len(out) < keep:
                        out += piece[: keep - len(out)]
                    block = d.unconsumed_tail
                    if not block or not (whole or total < keep):
                        break
    except (OSError, zlib.error):
        return bytes(out), total, False
    return bytes(out), total, d.eof


def _remember(heads: OrderedDict[str, tuple[bytes, bool, bool]], key: str, data: bytes, asked: int,
              raw: bool) -> None:
    """Keep ``data``, read asking for ``asked`` bytes, as ``key``'s head (the whole content when fewer
    came), dropping the least recently used beyond ``_HEADS_KEPT``."""
    heads[key] = (data, len(data) < asked, raw)
    heads.move_to_end(key)
    while len(heads) > _HEADS_KEPT:
        heads.popitem(last=False)


def read_head(path: Path, whole_up_to: int = 0) -> None:
    """Open and read ``path`` (raising ``OSError`` when it cannot be), keeping its head for ``head``
    while heads are remembered: the whole file when it is at most ``whole_up_to`` bytes (for
    ``whole_file``), else ``HEAD_READ`` bytes. One open then serves the readability check, every
    reader's ``detect`` and the hash of a small file (three opens and reads before: ~0.1 ms a file
    on 2,048 small CSV files)."""
    heads = _heads
    with open(path, "rb") as f:
        if heads is None:
            f.read(1)
            return
        size = os.fstat(f.fileno()).st_size
        want = max(size + 1 if size <= whole_up_to else 0, HEAD_READ)
        data = f.read(want)
    if data[:2] == GZIP_MAGIC:  # its head is the decompressed content: ``head`` reads it
        return
    _remember(heads, str(path), data, want, True)


def whole_file(path: Path) -> bytes | None:
    """The whole content of ``path`` as its remembered head holds it (``remembered_heads``: a file
    read whole by ``read_head``, or smaller than ``HEAD_READ`` when its head was read; not
    gzip-compressed), else None."""
    remembered = _heads.get(str(path)) if _heads is not None else None
    if remembered is None:
        return None
    data, whole, raw = remembered
    return data if whole and raw else None


def tail(path: Path, size: int = 65536) -> bytes:
    """The last ``size`` bytes of the (decompressed) content. For gzip this decompresses the
    whole stream (C speed, constant memory) keeping only the tail."""
    if not is_gzip(path):
        with open(path, "rb") as f:
            f.seek(0, io.SEEK_END)
            n = f.tell()
            f.seek(max(0, n - size))
            return f.read()
    buf = b""
    try:
        with gzip.open(path, "rb") as f:
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                buf = (buf + chunk)[-size:]
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(
            f"{path}: the gzip stream is truncated or corrupt ({e}); re-copy the file "
            "or decompress what is left with `zcat` and ingest the result"
        ) from e
    return buf


def display_name(path: Path) -> str:
    """File name without compression suffix, lower case (for name-based detection)."""
    name = path.name.lower()
    return name[:-3] if name.endswith(".gz") else name
