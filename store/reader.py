"""Reading a store, with SQLAlchemy or without it. A question's SQL is text written once (named
``:param`` placeholders, SQL that runs unchanged on SQLite and PostgreSQL) and runs on either:

- a SQLAlchemy ``Connection`` (PostgreSQL, a writing command, a caller of the API), through ``text()``;
- a ``RawSqlite``: an existing SQLite store opened read-only with the sqlite3 module alone. Importing
  SQLAlchemy costs ~0.25 s of a ~0.4 s ``profdb query`` process (issue 15), and a question answered
  from the kept rows needs none of it. When a question must compute what was not kept (a stale
  analysis), ``connection(db)`` opens a SQLAlchemy connection then, over the same sqlite3 connection
  and inside its read transaction (one snapshot for the whole question).

This module imports no SQLAlchemy (tests/test_startup.py checks the query process)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Union

from .errors import StoreError

if TYPE_CHECKING:
    from sqlalchemy import Connection

Params = Mapping[str, Any]


class RawSqlite:
    """A read-only SQLite store through the sqlite3 module (``db.open_raw_sqlite``). ``errors`` turns a
    driver error into the StoreError the SQLAlchemy engine's handler would raise (locked, read-only...);
    ``open_connection`` opens the SQLAlchemy connection over ``con``, on first need."""

    def __init__(self, con: sqlite3.Connection, errors: Callable[[sqlite3.Error], StoreError | None],
                 open_connection: Callable[[], Connection]) -> None:
        self.con = con
        self._errors = errors
        self._open = open_connection
        self._conn: Connection | None = None

    def rows(self, sql: str, params: Params | None = None) -> list[tuple[Any, ...]]:
        with self._mapped():
            return self.con.execute(sql, params or {}).fetchall()

    def cursor(self, sql: str, params: Params | None = None) -> sqlite3.Cursor:
        """The cursor of ``sql`` executed, for the caller to fetch from (profdb sql)."""
        with self._mapped():
            return self.con.execute(sql, params or {})

    @contextmanager
    def _mapped(self) -> Iterator[None]:
        """A driver error that says what to do (locked, read-only...) raised as its StoreError."""
        try:
            yield
        except sqlite3.Error as e:
            mapped = self._errors(e)
            if mapped is None:
                raise
            raise mapped from e

    def connection(self) -> Connection:
        if self._conn is None:
            self._conn = self._open()
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            engine = self._conn.engine
            self._conn.close()
            engine.dispose()
            self._conn = None
        self.con.close()


#: what the questions read: a SQLAlchemy connection or a raw read-only SQLite store
Db = Union["Connection", RawSqlite]


def rows(db: Db, sql: str, params: Params | None = None) -> list[tuple[Any, ...]]:
    """Every row of ``sql`` (``:name`` placeholders bound from ``params``) as tuples."""
    if isinstance(db, RawSqlite):
        return db.rows(sql, params)
    from sqlalchemy import text

    return [tuple(r) for r in db.execute(text(sql), dict(params or {}))]


def first(db: Db, sql: str, params: Params | None = None) -> tuple[Any, ...] | None:
    got = rows(db, sql, params)
    return got[0] if got else None


def scalars(db: Db, sql: str, params: Params | None = None) -> list[Any]:
    return [r[0] for r in rows(db, sql, params)]


def connection(db: Db) -> Connection:
    """The SQLAlchemy connection behind ``db`` (opened now for a raw store), for what has no text SQL."""
    return db.connection() if isinstance(db, RawSqlite) else db


def in_list(prefix: str, values: Iterable[Any], params: dict[str, Any]) -> str:
    """``:prefix0, :prefix1, ...`` for an ``IN (...)``, the values added to ``params``."""
    names = []
    for i, v in enumerate(values):
        params[f"{prefix}{i}"] = v
        names.append(f":{prefix}{i}")
    if not names:
        return "NULL"  # IN (NULL) matches nothing
    return ", ".join(names)


def chunks(values: Sequence[Any], size: int = 500) -> Iterable[Sequence[Any]]:
    return (values[i : i + size] for i in range(0, len(values), size))
