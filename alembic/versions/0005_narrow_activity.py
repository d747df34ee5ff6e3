"""narrow activity (issue 15): the per-file / per-launch-shape columns of ``activity`` (device, stream,
pid, tid, grid_x/y/z, block_x/y/z) move to an interned table ``launch``; each activity row keeps a
``launch_id``. A rocprofv3 kernel trace has a few hundred distinct shapes per million dispatches, so
the fact row loses 10 columns (writing it costs ~20% less CPU, the store ~20% fewer bytes).

    launch        id, key (the ten values as text, '|'-separated, empty for NULL: unique, so two
                  writers interning one shape at once get one row), device, stream, pid, tid,
                  grid_x, grid_y, grid_z, block_x, block_y, block_z. Rows are never deleted (like
                  ``name``): launch_id has no foreign key, which PostgreSQL would check per row.
    activity_v    unchanged for its users: every column it had, the shape columns joined in from launch.

An existing store's rows are moved: every distinct shape becomes a launch row, and activity is
rebuilt with launch_id (same ids, same order). Downgrade moves them back.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

#: the shape columns, in launch's (and the key's) order
SHAPE = ("device", "stream", "pid", "tid", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
_BIG = {"stream", "tid"}

_RANK_COLS = "r.name AS run, k.hostname, k.global_rank, k.local_rank"
_RANK_JOIN = "JOIN rank k ON k.id = {t}.rank_id JOIN run r ON r.id = k.run_id"
ACTIVITY_V = f"""
        SELECT {_RANK_COLS}, a.kind, a.category, n.value AS name,
               a.start_ns, a.start_ns + a.duration_ns AS end_ns, a.duration_ns,
               l.device, l.stream, a.correlation, l.pid, l.tid,
               l.grid_x, l.grid_y, l.grid_z, l.block_x, l.block_y, l.block_z, a.args,
               a.rank_id, a.source_id
        FROM activity a {_RANK_JOIN.format(t="a")} JOIN name n ON n.id = a.name_id
        JOIN launch l ON l.id = a.launch_id"""
# (0001's activity_v, as it was: restored by downgrade)
_OLD_ACTIVITY_V = f"""
        SELECT {_RANK_COLS}, a.kind, a.category, n.value AS name,
               a.start_ns, a.start_ns + a.duration_ns AS end_ns, a.duration_ns,
               a.device, a.stream, a.correlation, a.pid, a.tid,
               a.grid_x, a.grid_y, a.grid_z, a.block_x, a.block_y, a.block_z, a.args,
               a.rank_id, a.source_id
        FROM activity a {_RANK_JOIN.format(t="a")} JOIN name n ON n.id = a.name_id"""


def key_sql(t: str) -> str:
    """The launch key of table ``t``'s shape columns in SQL (the writer builds the same text)."""
    return " || '|' || ".join(f"COALESCE(CAST({t}.{c} AS TEXT), '')" for c in SHAPE)


def _shape_columns() -> list[sa.Column[object]]:
    return [sa.Column(c, sa.BigInteger() if c in _BIG else sa.Integer(), nullable=True) for c in SHAPE]


def _activity(name: str, narrow: bool) -> None:
    cols: list[sa.Column[object]] = [
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("rank_id", sa.Integer(), nullable=False),
        sa.Column("source_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("category", sa.String(length=20), nullable=False),
        sa.Column("name_id", sa.Integer(), nullable=False),
        sa.Column("start_ns", sa.BigInteger(), nullable=False),
        sa.Column("duration_ns", sa.BigInteger(), nullable=False),
    ]
    if narrow:
        cols += [sa.Column("correlation", sa.BigInteger(), nullable=True),
                 sa.Column("launch_id", sa.Integer(), nullable=False)]
    else:
        shape = {c.name: c for c in _shape_columns()}
        cols += [shape["device"], shape["stream"], sa.Column("correlation", sa.BigInteger(), nullable=True),
                 *(shape[c] for c in SHAPE[2:])]
    cols.append(sa.Column("args", sa.Text(), nullable=True))
    op.create_table(
        name,
        *cols,
        sa.ForeignKeyConstraint(["name_id"], ["name.id"], name="fk_activity_name_id_name"),
        sa.ForeignKeyConstraint(["rank_id"], ["rank.id"], name="fk_activity_rank_id_rank", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["source_id"], ["source_file.id"], name="fk_activity_source_id_source_file",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_activity"),
    )


def _indexes() -> None:
    op.create_index("ix_activity_rank_name", "activity", ["rank_id", "name_id"], unique=False)
    op.create_index("ix_activity_source_id", "activity", ["source_id"], unique=False)


def _swap(fill: str) -> None:
    """Fill activity_new with ``fill``, then put it in activity's place (indexes rebuilt once)."""
    op.execute(fill)
    op.drop_index("ix_activity_rank_name", table_name="activity")
    op.drop_index("ix_activity_source_id", table_name="activity")
    op.drop_table("activity")
    op.rename_table("activity_new", "activity")
    _indexes()


def _sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS activity_v")
    op.create_table(
        "launch",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        # (grid and block sizes 64-bit here: rocprofv3 counts the grid in work-items, past 2^31 on large kernels)
        *(sa.Column(c, sa.BigInteger() if c in _BIG or c.startswith(("grid", "block")) else sa.Integer(), nullable=True)
          for c in SHAPE),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_launch")),
        sa.UniqueConstraint("key", name=op.f("uq_launch_key")),
    )
    op.execute(
        f"INSERT INTO launch (key, {', '.join(SHAPE)}) SELECT DISTINCT {key_sql('a')}, "
        f"{', '.join('a.' + c for c in SHAPE)} FROM activity a"
    )
    if _sqlite():  # one copy of the table (SQLite rewrites the whole table for each dropped column)
        _activity("activity_new", narrow=True)
        _swap(
            "INSERT INTO activity_new (id, rank_id, source_id, kind, category, name_id, start_ns, duration_ns, "
            "correlation, launch_id, args) SELECT a.id, a.rank_id, a.source_id, a.kind, a.category, a.name_id, "
            "a.start_ns, a.duration_ns, a.correlation, l.id, a.args FROM activity a JOIN launch l ON l.key = "
            f"{key_sql('a')} ORDER BY a.id"
        )
    else:
        op.add_column("activity", sa.Column("launch_id", sa.Integer(), nullable=True))
        op.execute(f"UPDATE activity a SET launch_id = l.id FROM launch l WHERE l.key = {key_sql('a')}")
        op.alter_column("activity", "launch_id", nullable=False)
        for c in SHAPE:
            op.drop_column("activity", c)
    op.execute(f"CREATE VIEW activity_v AS {ACTIVITY_V}")


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS activity_v")
    if _sqlite():
        _activity("activity_new", narrow=False)
        cols = ("id", "rank_id", "source_id", "kind", "category", "name_id", "start_ns", "duration_ns", "correlation",
                "args", *SHAPE)
        _swap(
            f"INSERT INTO activity_new ({', '.join(cols)}) SELECT "
            + ", ".join(f"l.{c}" if c in SHAPE else f"a.{c}" for c in cols)
            + " FROM activity a JOIN launch l ON l.id = a.launch_id ORDER BY a.id"
        )
    else:
        for col in _shape_columns():
            op.add_column("activity", col)
        op.execute(f"UPDATE activity a SET {', '.join(f'{c} = l.{c}' for c in SHAPE)} FROM launch l "
                   "WHERE l.id = a.launch_id")
        op.drop_column("activity", "launch_id")
    op.drop_table("launch")
    op.execute(f"CREATE VIEW activity_v AS {_OLD_ACTIVITY_V}")
