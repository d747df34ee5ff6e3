"""classification rules per source file, how each rank ended, and views for both (issue 13).

    classification_rules  one row per distinct rule set used (digest unique, the canonical JSON)
    source_file.rules_id  the rules that classified the file's rows (NULL: stored before 0003)
    rank.exit_code, signal, started_at, ended_at, end_status
                          from the manifest `profdb record` wrote (NULL without one)
    rank_v                gains exit_code, signal, started_at, ended_at, end_status
    run_rules_v           per (run, digest): the files and rows classified with those rules
    rank_end_v            per rank: how it ended, with run and host (only ranks with a manifest)

Every view is dropped first and created again at the end (the 0001/0002 definitions, rank_v's new
one): SQLite checks the views of a table it alters.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _sibling(filename: str) -> ModuleType:
    path = Path(__file__).with_name(filename)
    spec = importlib.util.spec_from_file_location(f"_profdb_migration_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_RANK_COLS = "r.name AS run, k.hostname, k.global_rank, k.local_rank"

VIEWS = {
    "rank_v": f"""
        SELECT {_RANK_COLS}, k.node_rank, k.pid, k.device,
               (SELECT COUNT(*) FROM source_file s WHERE s.rank_id = k.id) AS sources,
               (SELECT COALESCE(SUM(s.rows), 0) FROM source_file s WHERE s.rank_id = k.id) AS rows,
               k.exit_code, k.signal, k.started_at, k.ended_at, k.end_status
        FROM rank k JOIN run r ON r.id = k.run_id""",
    "run_rules_v": """
        SELECT r.name AS run, c.digest, c.shipped_version,
               COUNT(*) AS sources, CAST(COALESCE(SUM(s.rows), 0) AS BIGINT) AS rows, c.rules_json
        FROM source_file s JOIN run r ON r.id = s.run_id
        LEFT JOIN classification_rules c ON c.id = s.rules_id
        GROUP BY r.name, c.digest, c.shipped_version, c.rules_json""",
    "rank_end_v": f"""
        SELECT {_RANK_COLS}, k.end_status, k.exit_code, k.signal, k.started_at, k.ended_at
        FROM rank k JOIN run r ON r.id = k.run_id
        WHERE k.end_status IS NOT NULL""",
}


def _rank_end() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("signal", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.Column("end_status", sa.String(length=20), nullable=True),
    )


def _old_views() -> list[tuple[str, str]]:
    return list(_sibling("0001_initial_schema.py").VIEWS.items()) + list(_sibling("0002_query_views.py").VIEWS.items())


def _drop(names: list[str]) -> None:
    for name in reversed(names):
        op.execute(f"DROP VIEW IF EXISTS {name}")


def upgrade() -> None:
    old = _old_views()
    _drop([n for n, _ in old])
    op.create_table(
        "classification_rules",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("shipped_version", sa.Integer(), nullable=False),
        sa.Column("rules_json", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_classification_rules")),
        sa.UniqueConstraint("digest", name=op.f("uq_classification_rules_digest")),
    )
    # plain ADD COLUMN, never a batch copy: SQLite's DROP TABLE of the old copy would cascade-delete
    # every row of activity, summary, ... (foreign keys are on); rules_id has no foreign key for the
    # same reason (SQLite cannot drop a column that is in one): rules rows are never deleted
    op.add_column("source_file", sa.Column("rules_id", sa.Integer(), nullable=True))
    for col in _rank_end():
        op.add_column("rank", col)
    for name, sql in old:
        op.execute(f"CREATE VIEW {name} AS {VIEWS.get(name, sql)}")
    for name, sql in VIEWS.items():
        if name not in dict(old):
            op.execute(f"CREATE VIEW {name} AS {sql}")


def downgrade() -> None:
    old = _old_views()
    _drop([n for n, _ in old] + [n for n in VIEWS if n not in dict(old)])
    for col in reversed(_rank_end()):
        op.drop_column("rank", col.name)
    op.drop_column("source_file", "rules_id")
    op.drop_table("classification_rules")
    for name, sql in old:
        op.execute(f"CREATE VIEW {name} AS {sql}")
