"""PostgreSQL: the fact tables' secondary indexes become BRIN (issue 15, a team store's load rate).

After 0006 took the foreign keys off the fact tables, most of what the server spends per COPY'd row
was index upkeep: the B-trees ``ix_activity_rank_name`` (rank_id, name_id) and
``ix_activity_source_id``, and ``counter``'s on rank_id and source_id, updated row by row (an SQLite
bulk load drops and rebuilds them instead; a team store holds other runs' rows, so it cannot).
Measured here (binary COPY of 1M activity rows, server CPU per row, alternating runs): ~5-6 us with the
B-trees, ~2.5 us with BRIN, ~3.5-4 us with no secondary index at all (the BRIN indexes cost ~nothing
per row: an entry per 128-page block range, not per row). A load writes each source file's rows
together (and a rank's files are its own), so each block range holds few ranks and files: a BRIN
search by rank or by source reads those ranges only. What reads these columns: per-rank reads of
``activity`` (timeline export, reclassify's updates), the delete triggers of 0006 (by rank and source),
and users' SQL; cross-rank questions read ``summary`` and never ``activity``.

``autosummarize = on``: a block range filled by a writer is summarized by autovacuum; an ingest also
summarizes its own ranges right after commit (store/bulk.py ``summarize_fact_ranges``), so a store is
fully indexed when ``profdb ingest`` returns.

SQLite keeps its B-trees (rebuilt once after a bulk load); the index names and columns are the same on
both engines. Downgrade puts the B-trees back.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

#: (index, table, columns): the fact tables' secondary indexes (0001's, and 0005's for activity)
FACT_INDEXES = (
    ("ix_activity_rank_name", "activity", ("rank_id", "name_id")),
    ("ix_activity_source_id", "activity", ("source_id",)),
    ("ix_counter_rank_id", "counter", ("rank_id",)),
    ("ix_counter_source_id", "counter", ("source_id",)),
)


def _rebuild(using: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, table, columns in FACT_INDEXES:
        op.drop_index(name, table_name=table)
        if using == "brin":
            op.create_index(name, table, list(columns), postgresql_using="brin",
                            postgresql_with={"autosummarize": "on"})
        else:
            op.create_index(name, table, list(columns))


def upgrade() -> None:
    _rebuild("brin")


def downgrade() -> None:
    _rebuild("btree")
