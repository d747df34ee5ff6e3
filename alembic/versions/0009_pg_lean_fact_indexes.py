"""PostgreSQL: one BRIN index per fact table and no primary-key B-tree (issue 15, a team store's load rate).

After 0006 (no per-row foreign-key triggers) and 0008 (BRIN secondary indexes), a COPY'd fact row still
cost the server five index insertions: the primary-key B-tree and two BRIN indexes per table. Measured
with ``benchmarks/pg_ingest.py``'s load stage (4 ranks x 100,000 dispatches + counters, binary COPY,
fresh databases in turn, server backend CPU per row): 0008's layout 3.3-5.4 us; without the primary
keys 2.8-3.3 us; without the primary keys and with one BRIN (rank_id, source_id) per table 1.95-2.3 us;
with no index at all 1.6-1.8 us. So, on PostgreSQL only:

- ``activity`` and ``counter`` lose their primary keys. Nothing looks a fact row up by id: ``profdb
  merge``/export reads one source file's rows ``ORDER BY id`` (a sort of that file's rows, found through
  the BRIN index); the cross-rank questions read ``summary`` and the kept analyses. ``id`` is still
  filled by the column's sequence, so ids stay unique and in load order; only the index that would
  refuse a duplicate id written by hand is gone. (A table without a primary key publishes UPDATE and
  DELETE through logical replication only with a replica identity: ``ALTER TABLE activity REPLICA
  IDENTITY FULL``.)
- 0008's two BRIN indexes per table, ``(rank_id, name_id)`` and ``(source_id)``, become one,
  ``ix_activity_rank_source`` / ``ix_counter_rank_source`` on ``(rank_id, source_id)``. A multi-column
  BRIN index keeps each column's range per block range and serves a search on either column alone,
  so reads by rank (timeline export, reclassify, the delete triggers) and by source file (merge,
  the delete triggers) use it as before. The name column never narrowed anything: every block range of
  a rank's kernels holds nearly all of its run's name ids.

SQLite keeps its layout: ``id INTEGER PRIMARY KEY`` is the rowid itself (no index of its own), and its
B-trees are dropped and rebuilt around a bulk load. Downgrade puts 0008's indexes and the primary keys
back (the keys checked against the rows).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

#: (table, constraint) of the primary keys this migration drops (0001's and 0005's names)
FACT_KEYS = (("activity", "pk_activity"), ("counter", "pk_counter"))
#: (index, table, columns): 0008's BRIN indexes, and the one per table that replaces them
OLD_INDEXES = (
    ("ix_activity_rank_name", "activity", ("rank_id", "name_id")),
    ("ix_activity_source_id", "activity", ("source_id",)),
    ("ix_counter_rank_id", "counter", ("rank_id",)),
    ("ix_counter_source_id", "counter", ("source_id",)),
)
NEW_INDEXES = (
    ("ix_activity_rank_source", "activity", ("rank_id", "source_id")),
    ("ix_counter_rank_source", "counter", ("rank_id", "source_id")),
)


def _brin(indexes: tuple[tuple[str, str, tuple[str, ...]], ...]) -> None:
    for name, table, columns in indexes:
        op.create_index(name, table, list(columns), postgresql_using="brin", postgresql_with={"autosummarize": "on"})


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, name in FACT_KEYS:
        op.drop_constraint(name, table, type_="primary")
    for name, table, _columns in OLD_INDEXES:
        op.drop_index(name, table_name=table)
    _brin(NEW_INDEXES)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, table, _columns in NEW_INDEXES:
        op.drop_index(name, table_name=table)
    _brin(OLD_INDEXES)
    for table, name in FACT_KEYS:
        op.create_primary_key(name, table, ["id"])
