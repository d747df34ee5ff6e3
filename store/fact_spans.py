"""The fact tables' id ranges per source file (``fact_span``, migration 0010): written by every load into
an SQLite store, read wherever one rank's or one file's fact rows are wanted.

SQLite's fact tables (``activity``, ``counter``) have no secondary index: building two B-trees per table
after a bulk load was a fifth of an ingest. One writer appends their rows, a batch of one file's rows at
a time, each row taking the next id (SQLite gives a new row the largest id + 1), so a file's rows are a
few id ranges, which ``Spans`` records as they are written. A rank's or a file's rows are then rowid
range scans (``scoped``): an outer loop over its spans, an inner range of the table.

PostgreSQL keeps ``fact_span`` empty: several nodes load at once, their ids interleave, and the BRIN
index on (rank_id, source_id) finds the rows (migration 0009); ``scoped`` filters on those columns there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import groupby
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection, and_, insert
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import FromClause

from .models import FactSpan

FACTS = ("activity", "counter")
_SPAN = FactSpan.__table__
_RANK_SOURCE = itemgetter(0, 1)


class Spans:
    """The spans of the fact rows one load appends through one connection (SQLite; on other engines
    it records nothing). Call ``added`` after each batch is inserted, in insert order, and ``write``
    before commit."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.on = conn.dialect.name == "sqlite"
        #: fact table -> the id its next row takes
        self._next: dict[str, int] = {}
        #: fact table -> spans, [rank_id, source_id, first_id, last_id], in id order
        self._spans: dict[str, list[list[int]]] = {t: [] for t in FACTS}

    def added(self, table: str, rank_id: int, source_id: int, rows: int) -> None:
        """``rows`` rows of one file (``rank_id``, ``source_id``) were just appended to ``table``."""
        self.added_runs(table, [(rank_id, source_id, rows)])

    def added_runs(self, table: str, runs: Iterable[tuple[int, int, int]]) -> None:
        """Rows were just appended to ``table`` in one batch: ``runs`` says whose, in their order, as
        (rank_id, source_id, rows) (a batch of several small files' rows: ``ingest_columns.concat``)."""
        if not self.on:
            return
        runs = [r for r in runs if r[2] > 0]
        if not runs:
            return
        first = self._next.get(table)
        if first is None:  # (the batch's rows end at the table's largest id)
            first = self._max_id(table) - sum(r[2] for r in runs) + 1
        spans = self._spans[table]
        for rank_id, source_id, rows in runs:
            last = first + rows - 1
            if spans and spans[-1][1] == source_id and spans[-1][3] == first - 1:
                spans[-1][3] = last  # (the file's previous rows came just before: one span)
            else:
                spans.append([rank_id, source_id, first, last])
            first = last + 1
        self._next[table] = first

    def added_rows(self, table: str, rows: Sequence[Sequence[Any]]) -> None:
        """Rows (rank_id and source_id first, as ``Writer`` and ``transfer`` build them) were just
        appended to ``table``, in this order."""
        if not self.on or not rows:
            return
        self.added_runs(table, [(int(rank_id), int(source_id), len(list(run)))
                                for (rank_id, source_id), run in groupby(map(_RANK_SOURCE, rows))])

    def write(self) -> None:
        """Insert the recorded spans, after checking that the tables end where the spans say: the
        ids were taken as counted (an SQLite table whose largest id is 2^63 - 1 would take random ones)."""
        if not self.on:
            return
        for table, spans in self._spans.items():
            if not spans:
                continue
            end = self._max_id(table)
            if end != self._next[table] - 1:
                raise RuntimeError(
                    f"internal error: {table} ends at id {end}, but its rows written by this load end at "
                    f"{self._next[table] - 1}; nothing was stored (the load is rolled back)"
                )
            self.conn.execute(insert(_SPAN), [
                {"fact": table, "rank_id": r, "source_id": s, "first_id": a, "last_id": b} for r, s, a, b in spans
            ])
            spans.clear()

    def _max_id(self, table: str) -> int:
        return int(self.conn.exec_driver_sql(f"SELECT COALESCE(MAX(id), 0) FROM {table}").scalar_one())


def scoped(
    conn: Connection, table: Any, *, ranks: Iterable[int] | None = None, sources: Iterable[int] | None = None
) -> tuple[FromClause, list[ColumnElement[bool]]]:
    """``table`` (the Activity or Counter table) to select from, and the conditions, for the rows of
    ``ranks`` (rank ids) or of ``sources`` (source file ids). SQLite: the table joined to the rows'
    spans, each span an id range of the table (the spans are read first: ``fact_span`` is indexed
    on both columns); elsewhere the table itself, filtered on the column. The column is matched on
    SQLite too: rows deleted by hand from the end of the table free their ids for the next load, so an
    old span may cover another file's rows."""
    assert (ranks is None) != (sources is None)
    col, ids = ("rank_id", list(ranks)) if ranks is not None else ("source_id", list(sources or ()))
    if conn.dialect.name != "sqlite":
        return table, [table.c[col].in_(ids)]
    joined = _SPAN.join(
        table, and_(_SPAN.c.fact == table.name, table.c.id.between(_SPAN.c.first_id, _SPAN.c.last_id))
    )
    # (``+ 0``: the column's match stays a filter; as a constraint SQLite's planner may build an
    # automatic index on the fact table for it, a pass over the whole table at every read)
    return joined, [_SPAN.c[col].in_(ids), (table.c[col] + 0).in_(ids)]
