"""launch shapes without their origin (issue 15): ``launch`` keeps an activity's grid and block sizes;
the device and stream it ran on and the process and thread that launched it move to an interned table
``origin``; each activity row gets an ``origin_id`` beside its ``launch_id``.

Why: 0005's launch shape held all ten values, so every rank had shapes of its own (its pid and thread
are in them): a 2,048-rank run of 68 distinct grid/block shapes interned 139,264 launch rows, one by
one in the ingest's writer (~8 us each: ~1 s of a 10 s ingest), and workers and writer kept up to
50,000 of them each. Split, that run has 68 launch rows and 2,048 origins.

    origin        id, key (the four values as text, '|'-separated, empty for NULL: unique, like
                  launch's), device, stream, pid, tid. Never deleted; origin_id has no foreign key.
    launch        id, key (now the six grid/block values), grid_x, grid_y, grid_z, block_x, block_y,
                  block_z.
    activity      + origin_id.
    activity_v    unchanged for its users: the same columns, device/stream/pid/tid from origin.

An existing store's rows are moved: each distinct origin of the old shapes becomes an origin row; the
old shapes of one grid/block keep the smallest of their ids and lose the rest; activity's rows get the
ids of both (same ids, same order: fact_span's ranges still hold). Downgrade makes a launch row of each
(launch, origin) pair activity uses and moves the rows back.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

LAUNCH = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
ORIGIN = ("device", "stream", "pid", "tid")
#: 0005's launch columns, in its key's order
OLD = ORIGIN + LAUNCH
_BIG = {"stream", "tid", *LAUNCH}

_SELECT_ACTIVITY = """SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, a.kind, a.category, n.value AS name,
               a.start_ns, a.start_ns + a.duration_ns AS end_ns, a.duration_ns,
               {o}.device, {o}.stream, a.correlation, {o}.pid, {o}.tid,
               l.grid_x, l.grid_y, l.grid_z, l.block_x, l.block_y, l.block_z, a.args,
               a.rank_id, a.source_id"""
#: activity_v on SQLite: through the spans, in 0010's fixed join order
_SQLITE_FROM = """
        FROM run r CROSS JOIN rank k ON k.run_id = r.id
        CROSS JOIN fact_span s ON s.rank_id = k.id AND s.fact = 'activity'
        CROSS JOIN activity a ON a.id BETWEEN s.first_id AND s.last_id AND +a.source_id = s.source_id
        CROSS JOIN name n ON n.id = a.name_id CROSS JOIN launch l ON l.id = a.launch_id"""
#: activity_v on PostgreSQL (0005's joins)
_PG_FROM = """
        FROM activity a JOIN rank k ON k.id = a.rank_id JOIN run r ON r.id = k.run_id JOIN name n ON n.id = a.name_id
        JOIN launch l ON l.id = a.launch_id"""
ACTIVITY_V = {
    "sqlite": _SELECT_ACTIVITY.format(o="o") + _SQLITE_FROM + " CROSS JOIN origin o ON o.id = a.origin_id",
    "postgresql": _SELECT_ACTIVITY.format(o="o") + _PG_FROM + " JOIN origin o ON o.id = a.origin_id",
}
#: the views as 0010 (SQLite) and 0005 (PostgreSQL) left them, restored by downgrade
OLD_ACTIVITY_V = {
    "sqlite": _SELECT_ACTIVITY.format(o="l") + _SQLITE_FROM,
    "postgresql": _SELECT_ACTIVITY.format(o="l") + _PG_FROM,
}

#: 0010's trigger (SQLite), which reads activity: dropped while activity is rebuilt, then made again
TRIGGER = "source_file_fact_rows"
TRIGGER_SQL = f"""CREATE TRIGGER {TRIGGER} BEFORE DELETE ON source_file
BEGIN
    DELETE FROM activity WHERE id IN (SELECT a.id FROM fact_span s JOIN activity a
        ON a.id BETWEEN s.first_id AND s.last_id AND +a.source_id = OLD.id
        WHERE s.source_id = OLD.id AND s.fact = 'activity');
    DELETE FROM counter WHERE id IN (SELECT c.id FROM fact_span s JOIN counter c
        ON c.id BETWEEN s.first_id AND s.last_id AND +c.source_id = OLD.id
        WHERE s.source_id = OLD.id AND s.fact = 'counter');
END"""


def key_sql(t: str, cols: tuple[str, ...]) -> str:
    """The key of table ``t``'s ``cols`` in SQL, as the writer builds it (``bulk.shape_key``)."""
    return _key_of([f"{t}.{c}" for c in cols])


def _key_of(exprs: list[str]) -> str:
    """The key text of SQL expressions (each a qualified column): '|'-separated, empty for NULL."""
    return " || '|' || ".join(f"COALESCE(CAST({e} AS TEXT), '')" for e in exprs)


def _sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"


def _shape_table(name: str, cols: tuple[str, ...], constraint: str) -> None:
    op.create_table(
        name,
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        *(sa.Column(c, sa.BigInteger() if c in _BIG else sa.Integer(), nullable=True) for c in cols),
        sa.PrimaryKeyConstraint("id", name=f"pk_{constraint}"),
        sa.UniqueConstraint("key", name=f"uq_{constraint}_key"),
    )


def _sqlite_launch(cols: tuple[str, ...]) -> None:
    """SQLite: launch rebuilt with ``cols`` (same ids and rows)."""
    _shape_table("launch_new", cols, "launch")
    names = ", ".join(("id", "key", *cols))
    op.execute(f"INSERT INTO launch_new ({names}) SELECT {names} FROM launch ORDER BY id")
    op.drop_table("launch")
    op.rename_table("launch_new", "launch")


def _sqlite_activity(with_origin: bool, fill: str) -> None:
    """SQLite: activity rebuilt (0010's columns, and origin_id after launch_id when ``with_origin``),
    filled by ``fill`` (an INSERT INTO activity_new ... SELECT)."""
    cols: list[sa.Column[object]] = [
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("rank_id", sa.Integer(), nullable=False),
        sa.Column("source_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("category", sa.String(length=20), nullable=False),
        sa.Column("name_id", sa.Integer(), nullable=False),
        sa.Column("start_ns", sa.BigInteger(), nullable=False),
        sa.Column("duration_ns", sa.BigInteger(), nullable=False),
        sa.Column("correlation", sa.BigInteger(), nullable=True),
        sa.Column("launch_id", sa.Integer(), nullable=False),
        sa.Column("args", sa.Text(), nullable=True),
    ]
    if with_origin:
        cols.insert(-1, sa.Column("origin_id", sa.Integer(), nullable=False))
    op.create_table(
        "activity_new",
        *cols,
        sa.PrimaryKeyConstraint("id", name="pk_activity"),
        sa.ForeignKeyConstraint(["name_id"], ["name.id"], name="fk_activity_name_id_name"),
    )
    op.execute(fill)
    op.drop_table("activity")
    op.rename_table("activity_new", "activity")


def _pg_regroup() -> None:
    """PostgreSQL, after activity's rows were updated: put each file's rows together again, in id order.
    An UPDATE writes a row's new version on its own page when there is room there and at the table's
    end otherwise, so a file's rows would no longer lie together, which its BRIN index (0009) relies on.
    (CLUSTER by a throwaway index on (source_id, id); it also drops the old versions.)"""
    op.execute("CREATE INDEX ix_activity_0011_order ON activity (source_id, id)")
    op.execute("CLUSTER activity USING ix_activity_0011_order")
    op.execute("DROP INDEX ix_activity_0011_order")


def _begin() -> str:
    """Drop what reads the tables rebuilt here (activity_v; SQLite: 0010's trigger); returns the dialect."""
    dialect = op.get_bind().dialect.name
    op.execute("DROP VIEW IF EXISTS activity_v")
    if dialect == "sqlite":
        op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}")
    return dialect


def _end(dialect: str, views: dict[str, str]) -> None:
    op.execute(f"CREATE VIEW activity_v AS {views[dialect]}")
    if dialect == "sqlite":
        op.execute(TRIGGER_SQL)


def upgrade() -> None:
    dialect = _begin()
    _shape_table("origin", ORIGIN, "origin")
    op.execute(
        f"INSERT INTO origin (key, {', '.join(ORIGIN)}) SELECT DISTINCT {key_sql('l', ORIGIN)}, "
        f"{', '.join('l.' + c for c in ORIGIN)} FROM launch l"
    )
    # each old shape: the id its grid/block keeps (the smallest of that key's), its origin's id
    op.execute(
        f"CREATE TABLE launch_map AS SELECT old_id, new_key, MIN(old_id) OVER (PARTITION BY new_key) AS new_id, "
        f"origin_id FROM (SELECT l.id AS old_id, {key_sql('l', LAUNCH)} AS new_key, o.id AS origin_id "
        f"FROM launch l JOIN origin o ON o.key = {key_sql('l', ORIGIN)}) m"
    )
    op.execute("CREATE UNIQUE INDEX ix_launch_map_old_id ON launch_map (old_id)")
    op.execute("DELETE FROM launch WHERE id NOT IN (SELECT new_id FROM launch_map)")
    # (a six-value key cannot equal a ten-value one: no clash with the keys not yet renamed)
    op.execute("UPDATE launch SET key = (SELECT m.new_key FROM launch_map m WHERE m.old_id = launch.id)")
    if dialect == "sqlite":
        _sqlite_launch(LAUNCH)
        # (a row whose launch row is missing, written by hand, stays as unseen by activity_v as it was)
        _sqlite_activity(
            True,
            "INSERT INTO activity_new (id, rank_id, source_id, kind, category, name_id, start_ns, duration_ns, "
            "correlation, launch_id, origin_id, args) SELECT a.id, a.rank_id, a.source_id, a.kind, a.category, "
            "a.name_id, a.start_ns, a.duration_ns, a.correlation, COALESCE(m.new_id, a.launch_id), "
            "COALESCE(m.origin_id, 0), a.args FROM activity a LEFT JOIN launch_map m ON m.old_id = a.launch_id "
            "ORDER BY a.id",
        )
    else:
        for c in ORIGIN:
            op.drop_column("launch", c)
        op.add_column("activity", sa.Column("origin_id", sa.Integer(), nullable=True))
        op.execute("UPDATE activity a SET launch_id = m.new_id, origin_id = m.origin_id FROM launch_map m "
                   "WHERE m.old_id = a.launch_id")
        op.execute("UPDATE activity SET origin_id = 0 WHERE origin_id IS NULL")
        op.alter_column("activity", "origin_id", nullable=False)
        _pg_regroup()
    op.drop_table("launch_map")
    _end(dialect, ACTIVITY_V)


def downgrade() -> None:
    dialect = _begin()
    # each (launch, origin) pair activity uses becomes a launch row of all ten values again
    op.execute("CREATE TABLE launch_pair AS SELECT DISTINCT launch_id, origin_id FROM activity")
    for c in ORIGIN:
        op.add_column("launch", sa.Column(c, sa.BigInteger() if c in _BIG else sa.Integer(), nullable=True))
    wide_cols = [f"o.{c}" if c in ORIGIN else f"l.{c}" for c in OLD]
    wide, wide_key = ", ".join(wide_cols), _key_of(wide_cols)
    op.execute(
        f"INSERT INTO launch (key, {', '.join(OLD)}) SELECT {wide_key}, {wide} FROM launch_pair p "
        "JOIN launch l ON l.id = p.launch_id JOIN origin o ON o.id = p.origin_id"
    )
    op.execute("ALTER TABLE launch_pair ADD COLUMN new_id INTEGER")
    op.execute(
        f"UPDATE launch_pair SET new_id = (SELECT n.id FROM launch l, origin o, launch n WHERE "
        f"l.id = launch_pair.launch_id AND o.id = launch_pair.origin_id AND n.key = {wide_key})"
    )
    op.execute("CREATE INDEX ix_launch_pair ON launch_pair (launch_id, origin_id)")
    op.execute("DELETE FROM launch WHERE id NOT IN (SELECT new_id FROM launch_pair)")
    if dialect == "sqlite":
        _sqlite_launch(OLD)
        _sqlite_activity(
            False,
            "INSERT INTO activity_new (id, rank_id, source_id, kind, category, name_id, start_ns, duration_ns, "
            "correlation, launch_id, args) SELECT a.id, a.rank_id, a.source_id, a.kind, a.category, a.name_id, "
            "a.start_ns, a.duration_ns, a.correlation, COALESCE(p.new_id, a.launch_id), a.args FROM activity a "
            "LEFT JOIN launch_pair p ON p.launch_id = a.launch_id AND p.origin_id = a.origin_id ORDER BY a.id",
        )
    else:
        op.execute("UPDATE activity a SET launch_id = p.new_id FROM launch_pair p "
                   "WHERE p.launch_id = a.launch_id AND p.origin_id = a.origin_id")
        op.drop_column("activity", "origin_id")
        _pg_regroup()
    op.drop_table("launch_pair")
    op.drop_table("origin")
    _end(dialect, OLD_ACTIVITY_V)
