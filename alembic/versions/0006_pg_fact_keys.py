"""PostgreSQL: the fact tables' foreign keys replaced by one check per load and delete triggers (issue 15).

On PostgreSQL every foreign key is a trigger fired per inserted row (a locked index lookup into the
referenced table for each key): with the fact tables' seven keys, COPY spent ~75% of its time in these
checks (400,000 activity rows, binary COPY: ~5.4 s with them, ~1.4 s without; benchmarks/pg_ingest.py).
This migration, on PostgreSQL only (SQLite keeps its foreign keys, which a bulk load already turns off):

- drops every foreign key of ``activity`` and ``counter`` (rank_id, source_id and the name ids);
- what the keys guaranteed on insert, the loader checks once per transaction over the distinct ids it
  wrote (store/bulk.py ``copy_rows``: ``SELECT ... FOR KEY SHARE`` of each new rank, source and name
  id, as the foreign key check itself would lock them), so a load that used a missing id fails and
  writes nothing;
- what ``ON DELETE CASCADE`` did, statement-level triggers do, one set-based DELETE per statement over
  its transition table: deleting rows of ``rank`` or ``source_file`` (directly, or through ``run``'s
  cascade) deletes their activity and counter rows; TRUNCATE of rank, source_file or name (with
  CASCADE) truncates the fact tables too;
- what the name keys refused, a trigger refuses: deleting a name that a fact row still uses, and
  changing the id of a rank, source file or name (nothing in profdb does either).

Downgrade drops the triggers and puts the seven foreign keys back (as 0001 made them).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

#: (table, column, referenced table, ON DELETE) of the keys this migration replaces (0001's)
FACT_KEYS = (
    ("activity", "rank_id", "rank", "CASCADE"),
    ("activity", "source_id", "source_file", "CASCADE"),
    ("activity", "name_id", "name", None),
    ("counter", "rank_id", "rank", "CASCADE"),
    ("counter", "source_id", "source_file", "CASCADE"),
    ("counter", "kernel_name_id", "name", None),
    ("counter", "counter_name_id", "name", None),
)

_FUNCTIONS = {
    # AFTER DELETE ... FOR EACH STATEMENT, the deleted rows in the transition table ``gone``
    "profdb_fact_delete_by_rank": """
        BEGIN
            DELETE FROM activity WHERE rank_id IN (SELECT id FROM gone);
            DELETE FROM counter WHERE rank_id IN (SELECT id FROM gone);
            RETURN NULL;
        END""",
    "profdb_fact_delete_by_source": """
        BEGIN
            DELETE FROM activity WHERE source_id IN (SELECT id FROM gone);
            DELETE FROM counter WHERE source_id IN (SELECT id FROM gone);
            RETURN NULL;
        END""",
    "profdb_fact_name_in_use": """
        BEGIN
            IF EXISTS (SELECT 1 FROM activity WHERE name_id IN (SELECT id FROM gone))
               OR EXISTS (SELECT 1 FROM counter WHERE kernel_name_id IN (SELECT id FROM gone))
               OR EXISTS (SELECT 1 FROM counter WHERE counter_name_id IN (SELECT id FROM gone)) THEN
                RAISE EXCEPTION 'cannot delete names that activity or counter rows use'
                    USING ERRCODE = 'foreign_key_violation';
            END IF;
            RETURN NULL;
        END""",
    # AFTER TRUNCATE (also when reached by another table's TRUNCATE ... CASCADE)
    "profdb_fact_truncate": """
        BEGIN
            TRUNCATE activity, counter;
            RETURN NULL;
        END""",
    # BEFORE UPDATE OF id ... FOR EACH ROW WHEN (the id changes)
    "profdb_fact_id_fixed": """
        BEGIN
            RAISE EXCEPTION 'the id of a % row cannot change: activity and counter rows refer to it', TG_TABLE_NAME
                USING ERRCODE = 'foreign_key_violation';
        END""",
}

#: (trigger, table, definition between the table and EXECUTE FUNCTION, function)
_TRIGGERS = (
    ("profdb_rank_delete_facts", "rank", "AFTER DELETE", "REFERENCING OLD TABLE AS gone FOR EACH STATEMENT",
     "profdb_fact_delete_by_rank"),
    ("profdb_source_delete_facts", "source_file", "AFTER DELETE", "REFERENCING OLD TABLE AS gone FOR EACH STATEMENT",
     "profdb_fact_delete_by_source"),
    ("profdb_name_delete_check", "name", "AFTER DELETE", "REFERENCING OLD TABLE AS gone FOR EACH STATEMENT",
     "profdb_fact_name_in_use"),
    ("profdb_rank_truncate_facts", "rank", "AFTER TRUNCATE", "FOR EACH STATEMENT", "profdb_fact_truncate"),
    ("profdb_source_truncate_facts", "source_file", "AFTER TRUNCATE", "FOR EACH STATEMENT", "profdb_fact_truncate"),
    ("profdb_name_truncate_facts", "name", "AFTER TRUNCATE", "FOR EACH STATEMENT", "profdb_fact_truncate"),
    ("profdb_rank_id_fixed", "rank", "BEFORE UPDATE OF id", "FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)",
     "profdb_fact_id_fixed"),
    ("profdb_source_id_fixed", "source_file", "BEFORE UPDATE OF id",
     "FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)", "profdb_fact_id_fixed"),
    ("profdb_name_id_fixed", "name", "BEFORE UPDATE OF id", "FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)",
     "profdb_fact_id_fixed"),
)


def _fact_foreign_keys(bind: sa.Connection) -> list[tuple[str, str]]:
    """(table, constraint) of every foreign key on activity and counter, whatever its name (a later
    migration may have added or renamed one)."""
    return [
        (str(t), str(n))
        for t, n in bind.exec_driver_sql(
            "SELECT c.conrelid::regclass::text, c.conname FROM pg_constraint c "
            "WHERE c.contype = 'f' AND c.conrelid IN ('activity'::regclass, 'counter'::regclass) ORDER BY 1, 2"
        )
    ]


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for table, name in _fact_foreign_keys(bind):
        op.drop_constraint(name, table, type_="foreignkey")
    for fn, body in _FUNCTIONS.items():
        op.execute(f"CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $body${body}\n$body$")
    for trigger, table, when, how, fn in _TRIGGERS:
        op.execute(f"CREATE TRIGGER {trigger} {when} ON {table} {how} EXECUTE FUNCTION {fn}()")


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for trigger, table, _when, _how, _fn in _TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
    for fn in _FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {fn}()")
    for table, column, referred, ondelete in FACT_KEYS:
        op.create_foreign_key(
            f"fk_{table}_{column}_{referred}", table, referred, [column], ["id"], ondelete=ondelete
        )
