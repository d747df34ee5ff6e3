"""What an ingest worker's messages are made of, with no database: the per-launch columns an activity
is interned by, and the column types a worker sends before the store's ids exist (``Interned``,
``Coded``). Imported by the parsing workers, which fork before SQLAlchemy and the store's modules are
imported (``ingest.ingest_paths``): nothing here may import them. ``bulk`` writes what these hold."""

from __future__ import annotations

import os
from typing import Any, NamedTuple

#: an activity's launch shape (table ``launch``, migrations 0005 and 0011), in its key's order
LAUNCH_COLS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
#: where an activity ran and was launched from (table ``origin``, migration 0011), in its key's order
ORIGIN_COLS = ("device", "stream", "pid", "tid")
#: the interned tables of an activity's per-launch columns, each with its columns in its key's order
SHAPE_TABLES: dict[str, tuple[str, ...]] = {"launch": LAUNCH_COLS, "origin": ORIGIN_COLS}
#: the per-launch columns of an activity as a record-reading worker asks for them (``Writer.answer_names``):
#: one tuple, the origin's values then the launch shape's
SHAPE_COLS = ORIGIN_COLS + LAUNCH_COLS

#: launch shapes and origins whose ids the writer (and each parsing worker, ``ingest_workers._Names``)
#: keeps in memory, of each table; past this many the table starts again, and a shape met again is
#: looked up in the store. Each rank has origins of its own (its pid and thread are part of them), so
#: they grow with the job; until migration 0011 they were part of the launch shape: 2,048 ranks had
#: 139k shapes, ~30 MB in each of the three processes.
LAUNCHES_KEPT = 50_000


class Interned(NamedTuple):
    """A column of interned values (names, or launch shapes or origins as tuples in their
    ``SHAPE_TABLES`` order) as a worker sends it, before their ids are known: row i holds the id of
    ``values[index[i]]`` (``index`` a numpy integer array; None: every row holds ``values[0]``'s). The
    writer interns the values in ``table`` and maps the rows (``Writer.insert_columns``), so the worker
    never waits for ids."""

    values: list[Any]
    index: Any
    table: str = "name"


class Coded(NamedTuple):
    """A column of a few distinct strings (a batch's categories): row i holds ``values[codes[i]]``,
    ``codes`` a numpy integer array. SQLite binds the code and the statement maps it back (a CASE), so
    the column travels with the integer ones (``insert_block``)."""

    codes: Any
    values: tuple[str, ...]

    def decoded(self) -> list[str]:
        return [self.values[i] for i in self.codes.tolist()]

    def case(self, mark: str = "?") -> str:
        from .bulk import sql_literal

        whens = " ".join(f"WHEN {i} THEN {sql_literal(v)}" for i, v in enumerate(self.values))
        return f"CASE {mark} {whens} END"


def cores() -> int:
    """CPU cores this process may run on (its affinity mask: a job's launcher often pins it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
