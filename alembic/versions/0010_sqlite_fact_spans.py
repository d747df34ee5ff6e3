"""SQLite: the fact tables lose their secondary indexes; each file's id ranges are kept in ``fact_span``
(issue 15, ingest at the speed of the machine).

An SQLite bulk load dropped the fact tables' four B-trees (``ix_activity_rank_name``,
``ix_activity_source_id``, ``ix_counter_rank_id``, ``ix_counter_source_id``) and built them again
before commit: on 1M short-name CSV rows, 20-25% of the whole ``profdb ingest`` (2.69 -> 2.15-2.28 s
without the builds), on 650k Kineto rows ~12% (5.45 -> 4.74-4.90 s). What they served: reading one
rank's or one file's rows (timeline export, ``profdb merge``, reclassify) and SQLite's foreign-key
actions, which look a deleted rank's or file's rows up by ``rank_id`` / ``source_id``.

One writer appends an SQLite store's fact rows, a batch of one file's rows at a time, each row taking
the next id; so a file's rows are a few id ranges, and

- ``fact_span`` (fact, rank_id, source_id, first_id, last_id) holds them: one row per run of a file's
  consecutive rows (a batch, or batches that followed each other), written by every load; each row of a
  file lies in exactly one of its spans, and a span holds that file's rows only. A rank's or a file's
  rows are read as rowid range scans of the table (``store/fact_spans.py``);
- ``activity`` and ``counter`` are rebuilt without the four indexes and without the foreign keys on
  ``rank_id`` and ``source_id`` (same ids, same rows). The trigger ``source_file_fact_rows`` deletes a
  deleted file's fact rows through its spans, before the file row goes, so deleting a rank or a run
  (whose files cascade) deletes theirs as the foreign keys did; ``fact_span.source_id`` references
  source_file (ON DELETE CASCADE), so a file or rank id that spans use cannot be changed.
- An existing store's spans are computed from its rows (runs of consecutive ids of one file).
- ``activity_v`` and ``counter_v`` read the rows through the spans, in a fixed join order (``VIEWS``):
  a question about one run or rank reads its rows only. A row not covered by a span (written by hand)
  is not in them. The views and the trigger also match each row's own ``source_id``: rows deleted by
  hand from the end of a table free their ids for the next load, so an old span may then cover
  another file's rows. (``+`` keeps that match a filter: as an index constraint, SQLite's planner built
  an automatic index on the fact table's source_id at every query.)

PostgreSQL: ``fact_span`` is created and stays empty. Its fact tables kept no foreign keys since 0006
and find a rank's or a file's rows through their BRIN index (0009); several nodes load at once there,
so one file's ids are not consecutive.

Downgrade (SQLite) rebuilds the tables with their foreign keys and indexes, and drops the trigger and
``fact_span``.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

#: (index, table, columns) that SQLite had until this revision
OLD_INDEXES = (
    ("ix_activity_rank_name", "activity", ("rank_id", "name_id")),
    ("ix_activity_source_id", "activity", ("source_id",)),
    ("ix_counter_rank_id", "counter", ("rank_id",)),
    ("ix_counter_source_id", "counter", ("source_id",)),
)

_COLUMNS_ACTIVITY = """SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, a.kind, a.category, n.value AS name,
               a.start_ns, a.start_ns + a.duration_ns AS end_ns, a.duration_ns,
               l.device, l.stream, a.correlation, l.pid, l.tid,
               l.grid_x, l.grid_y, l.grid_z, l.block_x, l.block_y, l.block_z, a.args,
               a.rank_id, a.source_id"""
_COLUMNS_COUNTER = """SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, kn.value AS kernel, cn.value AS counter,
               c.value, c.dispatch_id, c.samples, c.min_value, c.max_value"""
#: SQLite's views over the fact tables, through the spans: run, rank, its spans, the rows in each
#: (CROSS JOIN fixes that order: SQLite's planner, free to choose, put the fact table or ``name``
#: first and took ~100 s to count 4M rows). A question about one run or rank reads only its rows
#: (4M-row store, one rank: 0.01-0.03 s; with 0009's index 0.04-0.05 s; the whole table ~0.8 s).
VIEWS = {
    "activity_v": f"""
        {_COLUMNS_ACTIVITY}
        FROM run r CROSS JOIN rank k ON k.run_id = r.id
        CROSS JOIN fact_span s ON s.rank_id = k.id AND s.fact = 'activity'
        CROSS JOIN activity a ON a.id BETWEEN s.first_id AND s.last_id AND +a.source_id = s.source_id
        CROSS JOIN name n ON n.id = a.name_id CROSS JOIN launch l ON l.id = a.launch_id""",
    "counter_v": f"""
        {_COLUMNS_COUNTER}
        FROM run r CROSS JOIN rank k ON k.run_id = r.id
        CROSS JOIN fact_span s ON s.rank_id = k.id AND s.fact = 'counter'
        CROSS JOIN counter c ON c.id BETWEEN s.first_id AND s.last_id AND +c.source_id = s.source_id
        CROSS JOIN name kn ON kn.id = c.kernel_name_id CROSS JOIN name cn ON cn.id = c.counter_name_id""",
}
#: the views as 0005 and 0001 made them (restored by downgrade)
OLD_VIEWS = {
    "activity_v": f"""
        {_COLUMNS_ACTIVITY}
        FROM activity a JOIN rank k ON k.id = a.rank_id JOIN run r ON r.id = k.run_id JOIN name n ON n.id = a.name_id
        JOIN launch l ON l.id = a.launch_id""",
    "counter_v": f"""
        {_COLUMNS_COUNTER}
        FROM counter c JOIN rank k ON k.id = c.rank_id JOIN run r ON r.id = k.run_id
        JOIN name kn ON kn.id = c.kernel_name_id JOIN name cn ON cn.id = c.counter_name_id""",
}

TRIGGER = "source_file_fact_rows"
#: deletes a source file's fact rows through its spans, before the file (and, by cascade, its spans) goes
TRIGGER_SQL = f"""CREATE TRIGGER {TRIGGER} BEFORE DELETE ON source_file
BEGIN
    DELETE FROM activity WHERE id IN (SELECT a.id FROM fact_span s JOIN activity a
        ON a.id BETWEEN s.first_id AND s.last_id AND +a.source_id = OLD.id
        WHERE s.source_id = OLD.id AND s.fact = 'activity');
    DELETE FROM counter WHERE id IN (SELECT c.id FROM fact_span s JOIN counter c
        ON c.id BETWEEN s.first_id AND s.last_id AND +c.source_id = OLD.id
        WHERE s.source_id = OLD.id AND s.fact = 'counter');
END"""


def _sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"


def _columns(table: str) -> list[sa.Column[object]]:
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    head: list[sa.Column[object]] = [
        sa.Column("id", big_id, nullable=False),
        sa.Column("rank_id", sa.Integer(), nullable=False),
        sa.Column("source_id", sa.Integer(), nullable=False),
    ]
    if table == "activity":
        return head + [
            sa.Column("kind", sa.String(length=20), nullable=False),
            sa.Column("category", sa.String(length=20), nullable=False),
            sa.Column("name_id", sa.Integer(), nullable=False),
            sa.Column("start_ns", sa.BigInteger(), nullable=False),
            sa.Column("duration_ns", sa.BigInteger(), nullable=False),
            sa.Column("correlation", sa.BigInteger(), nullable=True),
            sa.Column("launch_id", sa.Integer(), nullable=False),
            sa.Column("args", sa.Text(), nullable=True),
        ]
    return head + [
        sa.Column("kernel_name_id", sa.Integer(), nullable=False),
        sa.Column("counter_name_id", sa.Integer(), nullable=False),
        sa.Column("dispatch_id", sa.BigInteger(), nullable=True),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.Column("min_value", sa.Float(), nullable=True),
        sa.Column("max_value", sa.Float(), nullable=True),
    ]


def _rebuild(table: str, keys: bool) -> None:
    """Copy ``table`` into a new table of the same columns, with (``keys``) or without the foreign keys
    on rank_id and source_id, and put it in its place (same ids, same order). The views that read it are
    dropped first and made again from their own text (SQLite checks them when a table is renamed)."""
    bind = op.get_bind()
    views = bind.exec_driver_sql(
        "SELECT name, sql FROM sqlite_master WHERE type = 'view' AND sql LIKE '%' || ? || '%' ORDER BY name",
        (table,),
    ).all()
    for name, _sql in views:
        op.execute(f'DROP VIEW "{name}"')
    cols = _columns(table)
    constraints: list[sa.Constraint] = [sa.PrimaryKeyConstraint("id", name=f"pk_{table}")]
    names = ("name_id",) if table == "activity" else ("counter_name_id", "kernel_name_id")
    constraints += [sa.ForeignKeyConstraint([c], ["name.id"], name=f"fk_{table}_{c}_name") for c in names]
    if keys:
        constraints += [
            sa.ForeignKeyConstraint(["rank_id"], ["rank.id"], name=f"fk_{table}_rank_id_rank", ondelete="CASCADE"),
            sa.ForeignKeyConstraint(["source_id"], ["source_file.id"], name=f"fk_{table}_source_id_source_file",
                                    ondelete="CASCADE"),
        ]
    op.create_table(f"{table}_new", *cols, *constraints)
    names_sql = ", ".join(c.name for c in cols)
    op.execute(f"INSERT INTO {table}_new ({names_sql}) SELECT {names_sql} FROM {table} ORDER BY id")
    op.drop_table(table)
    op.rename_table(f"{table}_new", table)
    for _name, sql in views:
        op.execute(sql)


def upgrade() -> None:
    op.create_table(
        "fact_span",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fact", sa.String(length=20), nullable=False),
        sa.Column("rank_id", sa.Integer(), nullable=False),
        sa.Column("source_id", sa.Integer(), nullable=False),
        sa.Column("first_id", sa.BigInteger(), nullable=False),
        sa.Column("last_id", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["source_id"], ["source_file.id"], name=op.f("fk_fact_span_source_id_source_file"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fact_span")),
    )
    op.create_index(op.f("ix_fact_span_rank_id"), "fact_span", ["rank_id"], unique=False)
    op.create_index(op.f("ix_fact_span_source_id"), "fact_span", ["source_id"], unique=False)
    if not _sqlite():
        return
    for name, _table, _columns in OLD_INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {name}")  # (IF EXISTS: a bulk load drops them for its duration)
    for table in ("activity", "counter"):
        _rebuild(table, keys=False)
        # each run of consecutive ids of one file is a span (ids minus their number within the file are
        # equal along such a run)
        op.execute(
            f"INSERT INTO fact_span (fact, rank_id, source_id, first_id, last_id) "
            f"SELECT '{table}', rank_id, source_id, MIN(id), MAX(id) FROM ("
            f"  SELECT id, rank_id, source_id, id - ROW_NUMBER() OVER (PARTITION BY source_id ORDER BY id) AS run "
            f"  FROM {table}) GROUP BY source_id, rank_id, run ORDER BY MIN(id)"
        )
    op.execute(TRIGGER_SQL)
    _views(VIEWS)


def _views(views: dict[str, str]) -> None:
    for name, sql in views.items():
        op.execute(f"DROP VIEW IF EXISTS {name}")
        op.execute(f"CREATE VIEW {name} AS {sql}")


def downgrade() -> None:
    if _sqlite():
        op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}")
        _views(OLD_VIEWS)
        for table in ("activity", "counter"):
            _rebuild(table, keys=True)
        for name, table, columns in OLD_INDEXES:
            op.create_index(name, table, list(columns), unique=False)
    op.drop_index(op.f("ix_fact_span_source_id"), table_name="fact_span")
    op.drop_index(op.f("ix_fact_span_rank_id"), table_name="fact_span")
    op.drop_table("fact_span")
