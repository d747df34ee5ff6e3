"""Bulk row loading, per engine: the driver's executemany for SQLite (no RETURNING, tuples, one
prepared statement), and for PostgreSQL the same until COPY replaces it (issue: team store)."""

from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy import Connection


def placeholder(conn: Connection) -> str:
    return "?" if conn.dialect.paramstyle == "qmark" else "%s"


def insert_sql(conn: Connection, table: str, cols: Sequence[str]) -> str:
    m = placeholder(conn)
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join([m] * len(cols))})"


def insert_rows(conn: Connection, table: str, cols: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
    """Append ``rows`` (tuples in ``cols`` order) to ``table`` inside the caller's transaction."""
    if rows:
        conn.exec_driver_sql(insert_sql(conn, table, cols), rows)
