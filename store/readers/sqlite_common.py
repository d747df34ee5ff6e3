"""Helpers shared by the SQLite-based readers (rocpd, legacy RPD, nsys).

Inputs are opened read-only (``file:...?mode=ro`` URI) and rows are streamed with a cursor
(``fetchmany``), never a whole table in memory. A gzipped database (``trace.rpd.gz``) is
decompressed to a temporary file, which is deleted when the connection is closed.
Detection looks at the header bytes and the schema only (``sqlite_master``), never at rows.
"""

from __future__ import annotations

import errno
import gzip
import os
import shutil
import sqlite3
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import InputError
from .base import SQLITE_MAGIC, head, is_gzip

#: rows per fetchmany() batch
BATCH = 5000
#: SQLite virtual-machine steps a connection may run per byte of the database file (and at least
#: STEPS_MIN): reading every row of a profiler's own views costs ~10 per byte, so only a view that
#: is not the profiler's (a recursive one, a cross join) reaches this; it is then stopped with an
#: InputError instead of running forever. Counted in steps, not seconds: no clock involved.
STEPS_PER_BYTE = 10000
STEPS_MIN = 10**9
_PROGRESS_EVERY = 100000


def is_sqlite(path: Path) -> bool:
    """True if the (possibly gzipped) file starts with the SQLite header."""
    return head(path, len(SQLITE_MAGIC)) == SQLITE_MAGIC


def schema_head(path: Path, size: int = 1 << 20) -> bytes:
    """The first bytes of the decompressed database. Page 1 holds ``sqlite_master`` and the
    schema pages follow, so table names can be searched here without opening a .gz copy."""
    return head(path, size)


def _connect(path: Path) -> sqlite3.Connection:
    uri = "file:" + quote(str(path.resolve())) + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError:
        # A WAL database in a read-only folder cannot create its -shm file: open it immutable.
        conn = sqlite3.connect(uri + "&immutable=1", uri=True)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn


#: errno values of a write that found the disk (or the user's quota, or a file size limit) full
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


@contextmanager
def open_ro(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to ``path`` (gzip decompressed to a temporary copy first).

    Raises InputError naming the file when it is not a readable SQLite database."""
    tmp: str | None = None
    target = path
    try:
        if is_gzip(path):
            try:
                fd, tmp = tempfile.mkstemp(prefix="profdb-", suffix=".sqlite")
            except OSError as e:
                raise InputError(
                    f"{path}: cannot make a temporary file to decompress it into ({e}); "
                    "point TMPDIR at a writable folder, or decompress it with `gunzip` and ingest the .db itself"
                ) from e
            try:
                with os.fdopen(fd, "wb") as out, gzip.open(path, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 20)
            except OSError as e:
                if e.errno not in _NO_SPACE:
                    raise InputError(
                        f"{path}: the gzip stream is truncated or corrupt ({e}); re-copy the file, "
                        "or decompress it with `gunzip` and ingest the .db itself"
                    ) from e
                raise InputError(
                    f"{path}: no space left in the temporary folder {tempfile.gettempdir()} to decompress it "
                    f"({e.strerror}); nothing was written: free space there, point TMPDIR at a larger disk, "
                    "or decompress it with `gunzip` and ingest the .db itself"
                ) from e
            except (EOFError, zlib.error) as e:
                raise InputError(
                    f"{path}: the gzip stream is truncated or corrupt ({e}); re-copy the file, "
                    "or decompress it with `gunzip` and ingest the .db itself"
                ) from e
            target = Path(tmp)
        try:
            conn = _connect(target)
            conn.set_authorizer(_no_recursion)
            _limit_steps(conn, max(STEPS_MIN, STEPS_PER_BYTE * target.stat().st_size))
        except sqlite3.DatabaseError as e:
            raise InputError(
                f"{path}: cannot open as an SQLite database ({e}); the file is damaged or not "
                "profiler output: re-copy it from the profiler's output folder"
            ) from e
        try:
            yield conn
        finally:
            conn.close()
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _no_recursion(action: int, *_args: Any) -> int:
    """Authorizer: a recursive common table expression (in a view of the input, or anywhere) is
    refused when the statement is prepared. No profiler's schema uses one; a hostile one never ends."""
    return sqlite3.SQLITE_DENY if action == sqlite3.SQLITE_RECURSIVE else sqlite3.SQLITE_OK


def _limit_steps(conn: sqlite3.Connection, budget: int) -> None:
    """Interrupt any statement on ``conn`` once the connection has run ``budget`` VM steps."""
    left = [budget // _PROGRESS_EVERY]

    def tick() -> int:
        left[0] -= 1
        return 1 if left[0] < 0 else 0

    conn.set_progress_handler(tick, _PROGRESS_EVERY)


def relations(conn: sqlite3.Connection) -> dict[str, str]:
    """Every table and view name -> its type ("table" or "view")."""
    return {
        name: kind
        for name, kind in conn.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')")
    }


def columns(conn: sqlite3.Connection, relation: str) -> list[str]:
    return [row[1] for row in conn.execute(f'PRAGMA table_info("{relation}")')]


def has_relation(names: dict[str, str] | set[str], base: str) -> bool:
    """True if ``base`` exists as a table/view, or as a table carrying a suffix (``base_<uuid>``)."""
    return base in names or any(n.startswith(base + "_") for n in names)


def stream(
    conn: sqlite3.Connection, sql: str, params: tuple[Any, ...] = (), batch: int = BATCH
) -> Iterator[tuple[Any, ...]]:
    """Rows of a query, fetched ``batch`` at a time."""
    cur = conn.execute(sql, params)
    try:
        while True:
            rows = cur.fetchmany(batch)
            if not rows:
                return
            yield from rows
    finally:
        cur.close()


def strings(conn: sqlite3.Connection, ids: str, table: str = "StringIds", column: str = "value") -> dict[Any, Any]:
    """id -> text in a string table (Nsight Systems' ``StringIds (id, value)``, RPD's ``rocpd_string (id,
    string)``) for the ids the query ``ids`` yields: the ids a table uses, bounded by its distinct names,
    not its rows. Rows look their names up here in place of a join: each row's name was a new str decoded
    from the row (a demangled kernel name: hundreds of characters) and hashed again wherever names are
    looked up; the rows of one name now share one str."""
    return dict(conn.execute(f"SELECT id, {column} FROM {table} WHERE id IN ({ids})").fetchall())


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def db_error(path: Path, e: sqlite3.Error) -> InputError:
    if "not authorized" in str(e):
        return InputError(
            f"{path}: a view in it is recursive (WITH RECURSIVE), which no profiler writes and profdb does not run "
            "(it may never end); re-copy the profiler's original output"
        )
    if "interrupted" in str(e):
        return InputError(
            f"{path}: reading it was stopped after {STEPS_PER_BYTE} SQLite steps per byte of the file: one of its "
            "views never ends (recursive) or is not the profiler's; re-copy the profiler's original output"
        )
    return InputError(
        f"{path}: reading the database failed ({e}); the file is damaged or from an unsupported "
        "profiler version: re-copy it, or check it opens with `sqlite3`"
    )


def schema_mentions(path: Path, *names: str) -> set[str]:
    """Which of ``names`` the database defines as a table or view (also with a ``_<uuid>``
    suffix). Cheap: reads the schema only; for a .gz copy, or a damaged database (a copy cut short, a
    page overwritten: SQLite cannot list its tables), searches the decompressed head (the schema pages
    come first), so that a damaged profile is still known and its reader's error names it (it read as
    no profiler output before: in a folder, skipped with a note, its rank missing). Empty if the file is
    not an SQLite database."""
    try:
        if not is_sqlite(path):
            return set()
        if not is_gzip(path):
            try:
                with open_ro(path) as conn:
                    rel = relations(conn)
                return {n for n in names if has_relation(rel, n)}
            except (InputError, sqlite3.Error):
                pass  # (damaged: its first pages are searched, as a .gz copy's)
        blob = schema_head(path)
    except OSError:
        return set()
    return {n for n in names if n.encode() in blob}
