"""SQLite: ``summary`` becomes a WITHOUT ROWID table (issue 15, ingest at the speed of the machine).

``summary`` holds one row per (rank, name, kind): 320 names x 2,048 ranks are 655,360 rows, written by
the ingest's writer. As a rowid table with a primary key, SQLite kept it twice: the rows in rowid order
and ``sqlite_autoindex_summary_1``, the key (rank_id, name_id, kind) with a rowid, in a second B-tree.
Nothing reads summary by rowid; every question reads it by its key (a rank's names, a name's ranks, all
of a run). WITHOUT ROWID keeps the rows in the key's B-tree alone: on that run, writing them took 0.93 ->
0.74 s CPU and the two B-trees' 47 MB of the store's 110 MB became one of ~32 MB.

The table is rebuilt: same columns, key, foreign keys and rows; the views are dropped first and made
again from their own text (SQLite checks every view when a table is renamed). PostgreSQL has no
rowid: nothing changes there. Downgrade rebuilds the rowid table.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

COLUMNS = ("rank_id", "name_id", "kind", "category", "calls", "total_ns", "min_ns", "max_ns", "sum_sq_ns",
           "self_ns")


def _rebuild(with_rowid: bool) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    # every view, not only those naming summary: a view that reads one of them (imbalance_v reads
    # name_rank_v) is checked at the rename too
    views = bind.exec_driver_sql("SELECT name, sql FROM sqlite_master WHERE type = 'view' ORDER BY rowid").all()
    for name, _sql in views:
        op.execute(f'DROP VIEW "{name}"')
    op.create_table(
        "summary_new",
        sa.Column("rank_id", sa.Integer(), nullable=False),
        sa.Column("name_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("category", sa.String(length=20), nullable=False),
        sa.Column("calls", sa.BigInteger(), nullable=False),
        sa.Column("total_ns", sa.BigInteger(), nullable=False),
        sa.Column("min_ns", sa.BigInteger(), nullable=False),
        sa.Column("max_ns", sa.BigInteger(), nullable=False),
        sa.Column("sum_sq_ns", sa.Float(), nullable=False),
        sa.Column("self_ns", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["name_id"], ["name.id"], name="fk_summary_name_id_name"),
        sa.ForeignKeyConstraint(["rank_id"], ["rank.id"], name="fk_summary_rank_id_rank", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("rank_id", "name_id", "kind", name="pk_summary"),
        sqlite_with_rowid=with_rowid,
    )
    cols = ", ".join(COLUMNS)
    op.execute(f"INSERT INTO summary_new ({cols}) SELECT {cols} FROM summary ORDER BY rank_id, name_id, kind")
    op.drop_table("summary")
    op.rename_table("summary_new", "summary")
    for _name, sql in views:
        op.execute(sql)


def upgrade() -> None:
    _rebuild(with_rowid=False)


def downgrade() -> None:
    _rebuild(with_rowid=True)
