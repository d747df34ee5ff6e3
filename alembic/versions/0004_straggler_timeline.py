"""straggler timeline (issue 12): collective calls per rank, per-rank and per-step busy/exposed time,
per-host clock offsets, self time in summary; views for sqlite3/psql users (README "The schema").

    collective_call_v   one rank's call of one collective: the k-th (seq) of (family, group, collective),
                        its start/end on the rank's own clock and arrival_ns on the common clock
                        (start - its host's offset; NULL when the host has no offset)
    collective_arrival_v  the same per matched instance: wait_ns (latest arrival - this arrival),
                        skew_ns of the instance, is_last (1 for the latest arrival)
    rank_timeline_v     per rank: span, busy (interval union), idle, communication, exposed communication,
                        its host's clock offset and error
    step_timeline_v     per rank and step: duration, busy, idle, exposed communication
    host_clock_v        per (run, host): clock offset vs the reference host, error bound, samples
    name_rank_v and the 0002 views on it (imbalance_v, hotspot_v...): total_ns is now self time for nested
                        kinds (cpu_op, annotation...), so hotspot_v's shares of a kind add to 100%;
                        inclusive_ns keeps the inclusive total
    summary_v           gains self_ns

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_F = "DOUBLE PRECISION"
_RANK_COLS = "r.name AS run, k.hostname, k.global_rank, k.local_rank"
_RANK_JOIN = "JOIN rank k ON k.id = {t}.rank_id JOIN run r ON r.id = k.run_id"
_CLOCK_JOIN = "LEFT JOIN host_clock hc ON hc.run_id = k.run_id AND hc.hostname = COALESCE(k.hostname, '')"

VIEWS = {
    "host_clock_v": """
        SELECT r.name AS run, h.hostname, h.offset_ns, h.error_ns, h.samples, h.run_id
        FROM host_clock h JOIN run r ON r.id = h.run_id""",
    "collective_call_v": f"""
        SELECT {_RANK_COLS}, c.family, c.group_name, c.collective, c.seq,
               c.start_ns, c.end_ns, c.end_ns - c.start_ns AS duration_ns, c.bytes,
               c.start_ns - hc.offset_ns AS arrival_ns, hc.error_ns AS clock_error_ns,
               c.busy_before_ns, c.window_ns, c.run_id, c.rank_id
        FROM collective_call c {_RANK_JOIN.format(t="c")} {_CLOCK_JOIN}""",
    "collective_arrival_v": """
        SELECT x.*, x.last_arrival_ns - x.arrival_ns AS wait_ns,
               x.last_arrival_ns - x.first_arrival_ns AS skew_ns,
               CASE WHEN x.arrival_ns = x.last_arrival_ns THEN 1 ELSE 0 END AS is_last
        FROM (SELECT v.*,
                     MAX(v.arrival_ns) OVER (PARTITION BY v.run_id, v.family, v.group_name, v.collective, v.seq)
                         AS last_arrival_ns,
                     MIN(v.arrival_ns) OVER (PARTITION BY v.run_id, v.family, v.group_name, v.collective, v.seq)
                         AS first_arrival_ns,
                     COUNT(*) OVER (PARTITION BY v.run_id, v.family, v.group_name, v.collective, v.seq) AS ranks
              FROM collective_call_v v WHERE v.arrival_ns IS NOT NULL) x
        WHERE x.ranks >= 2""",
    "rank_timeline_v": f"""
        SELECT {_RANK_COLS}, t.work_domain, t.first_ns, t.last_ns, t.last_ns - t.first_ns AS span_ns,
               t.busy_ns, t.last_ns - t.first_ns - t.busy_ns AS idle_ns, t.comm_ns, t.exposed_comm_ns,
               hc.offset_ns AS clock_offset_ns, hc.error_ns AS clock_error_ns, k.run_id, t.rank_id
        FROM rank_timeline t {_RANK_JOIN.format(t="t")} {_CLOCK_JOIN}""",
    "step_timeline_v": f"""
        SELECT {_RANK_COLS}, s.step, s.start_ns, s.duration_ns, t.busy_ns,
               s.duration_ns - t.busy_ns AS idle_ns, t.exposed_comm_ns, k.run_id, s.rank_id
        FROM step s {_RANK_JOIN.format(t="s")}
        LEFT JOIN step_timeline t ON t.rank_id = s.rank_id AND t.step = s.step""",
    "summary_v": f"""
        SELECT {_RANK_COLS}, m.kind, m.category, n.value AS name,
               m.calls, m.total_ns, m.total_ns / m.calls AS mean_ns, m.min_ns, m.max_ns,
               COALESCE(m.self_ns, m.total_ns) AS self_ns,
               m.rank_id, m.name_id
        FROM summary m {_RANK_JOIN.format(t="m")} JOIN name n ON n.id = m.name_id""",
}

# name_rank_v (0002) on self time: total_ns is self time (the inclusive total for kinds that do not
# nest, and for stores ingested before 0003), inclusive_ns the inclusive total; the 0002 views built on
# it (imbalance_v, hotspot_v...) follow. hotspot_v's kind total is self time too, so shares add to 100%.
NAME_RANK_V = """
        SELECT r.name AS run, n.kind, n.category, nm.value AS name,
               k.hostname, k.global_rank, k.local_rank,
               CASE WHEN s.rank_id IS NULL THEN 0 ELSE 1 END AS present,
               COALESCE(s.calls, 0) AS calls, COALESCE(s.self_ns, s.total_ns, 0) AS total_ns,
               n.run_id, n.name_id, k.id AS rank_id, COALESCE(s.total_ns, 0) AS inclusive_ns
        FROM (SELECT k2.run_id, s2.kind, s2.name_id, MIN(s2.category) AS category
              FROM summary s2 JOIN rank k2 ON k2.id = s2.rank_id
              GROUP BY k2.run_id, s2.kind, s2.name_id) n
        JOIN rank k ON k.run_id = n.run_id
        JOIN run r ON r.id = n.run_id
        JOIN name nm ON nm.id = n.name_id
        LEFT JOIN summary s ON s.rank_id = k.id AND s.name_id = n.name_id AND s.kind = n.kind"""
HOTSPOT_V = f"""
        SELECT v.run, v.kind, v.category, v.name,
               SUM(v.present) AS ranks,
               CAST(SUM(v.calls) AS BIGINT) AS calls,
               CAST(SUM(v.total_ns) AS BIGINT) AS total_ns,
               CAST(100.0 * SUM(v.total_ns) AS {_F}) / CAST(NULLIF(t.kind_total_ns, 0) AS {_F}) AS share_pct,
               CAST(SUM(v.total_ns) AS BIGINT) / NULLIF(CAST(SUM(v.calls) AS BIGINT), 0) AS mean_ns,
               MIN(v.total_ns) AS rank_min_ns,
               MAX(v.total_ns) AS rank_max_ns,
               v.run_id, v.name_id,
               CAST(SUM(v.inclusive_ns) AS BIGINT) AS inclusive_ns
        FROM name_rank_v v
        JOIN (SELECT k.run_id, s.kind, CAST(SUM(COALESCE(s.self_ns, s.total_ns)) AS BIGINT) AS kind_total_ns
              FROM summary s JOIN rank k ON k.id = s.rank_id
              GROUP BY k.run_id, s.kind) t ON t.run_id = v.run_id AND t.kind = v.kind
        GROUP BY v.run_id, v.run, v.kind, v.category, v.name_id, v.name, t.kind_total_ns"""


def _old_views(filename: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"_profdb_mig_{filename[:4]}", Path(__file__).with_name(filename))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.VIEWS


def _views_0002(replaced: bool) -> dict[str, str]:
    views = dict(_old_views("0002_query_views.py"))
    if replaced:
        # the per-rank and per-host totals (rank_total_v, host_rollup_v...) on self time as well
        views = {k: v.replace("SUM(s.total_ns)", "SUM(COALESCE(s.self_ns, s.total_ns))") for k, v in views.items()}
        views["name_rank_v"] = NAME_RANK_V
        views["hotspot_v"] = HOTSPOT_V
    return views


def upgrade() -> None:
    op.add_column("summary", sa.Column("self_ns", sa.BigInteger(), nullable=True))
    op.create_table(
        "collective_call",
        sa.Column("rank_id", sa.Integer(), nullable=False),
        sa.Column("family", sa.String(length=20), nullable=False),
        sa.Column("group_name", sa.String(length=255), nullable=False),
        sa.Column("collective", sa.String(length=60), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("start_ns", sa.BigInteger(), nullable=False),
        sa.Column("end_ns", sa.BigInteger(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=True),
        sa.Column("busy_before_ns", sa.BigInteger(), nullable=False),
        sa.Column("window_ns", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["rank_id"], ["rank.id"], name=op.f("fk_collective_call_rank_id_rank"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], name=op.f("fk_collective_call_run_id_run"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("rank_id", "family", "group_name", "collective", "seq",
                                name=op.f("pk_collective_call")),
    )
    op.create_index("ix_collective_call_match", "collective_call",
                    ["run_id", "family", "collective", "group_name", "seq"], unique=False)
    op.create_table(
        "rank_timeline",
        sa.Column("rank_id", sa.Integer(), nullable=False),
        sa.Column("first_ns", sa.BigInteger(), nullable=False),
        sa.Column("last_ns", sa.BigInteger(), nullable=False),
        sa.Column("work_domain", sa.String(length=10), nullable=False),
        sa.Column("busy_ns", sa.BigInteger(), nullable=False),
        sa.Column("comm_ns", sa.BigInteger(), nullable=False),
        sa.Column("exposed_comm_ns", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["rank_id"], ["rank.id"], name=op.f("fk_rank_timeline_rank_id_rank"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("rank_id", name=op.f("pk_rank_timeline")),
    )
    op.create_table(
        "step_timeline",
        sa.Column("rank_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("busy_ns", sa.BigInteger(), nullable=False),
        sa.Column("exposed_comm_ns", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["rank_id"], ["rank.id"], name=op.f("fk_step_timeline_rank_id_rank"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("rank_id", "step", name=op.f("pk_step_timeline")),
    )
    op.create_table(
        "host_clock",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("offset_ns", sa.BigInteger(), nullable=False),
        sa.Column("error_ns", sa.BigInteger(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], name=op.f("fk_host_clock_run_id_run"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "hostname", name=op.f("pk_host_clock")),
    )
    for name in reversed(list(_views_0002(False))):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.execute("DROP VIEW IF EXISTS summary_v")
    for name, sql in [*_views_0002(True).items(), *VIEWS.items()]:
        op.execute(f"CREATE VIEW {name} AS {sql}")


def downgrade() -> None:
    for name in [*reversed(list(VIEWS)), *reversed(list(_views_0002(True)))]:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.execute(f"CREATE VIEW summary_v AS {_old_views('0001_initial_schema.py')['summary_v']}")
    for name, sql in _views_0002(False).items():
        op.execute(f"CREATE VIEW {name} AS {sql}")
    op.drop_table("host_clock")
    op.drop_table("step_timeline")
    op.drop_table("rank_timeline")
    op.drop_index("ix_collective_call_match", table_name="collective_call")
    op.drop_table("collective_call")
    op.drop_column("summary", "self_ns")
