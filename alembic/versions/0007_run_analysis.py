"""run analysis (issue 15): what a run's collective timeline says, kept per run instead of computed at
every question (store/timeline.py ``store_analysis``; README "The schema").

    run_analysis    one row per run: the matched call family and instances, the window, the clock offsets,
                    the timeline's verdict (rank, line, cause, p_value, shares...) and notes, with the
                    fingerprint of the data it was computed from (a question checks it and computes
                    the analysis itself when it does not match)
    rank_analysis   per rank: collectives entered last (alone, tied), wait caused and suffered, busy, idle,
                    span, communication, exposed communication, clock offset
    step_analysis   per rank and step: duration, entered last, wait caused and suffered, busy, idle, exposed
    rank_analysis_v rank_analysis with run name, hostname, global_rank and local_rank (no joins needed)

A store upgraded from 0006 has no rows: its questions compute the analysis as before, until the next
ingest, transfer or reclassify of the run writes them.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

VIEWS = {
    "rank_analysis_v": """
        SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, a.clock_offset_ns, a.instances,
               a.entered_last, a.tied_last, a.wait_caused_ns, a.wait_suffered_ns, a.busy_ns, a.idle_ns,
               a.span_ns, a.comm_ns, a.exposed_comm_ns, a.work_domain, a.run_id, a.rank_id
        FROM rank_analysis a JOIN rank k ON k.id = a.rank_id JOIN run r ON r.id = a.run_id""",
}

_FIGURES = ("wait_caused_ns", "wait_suffered_ns", "busy_ns", "idle_ns")


def upgrade() -> None:
    op.create_table(
        "run_analysis",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("computed_at", sa.DateTime(), nullable=False),
        sa.Column("family", sa.String(length=20), nullable=False),
        sa.Column("instances", sa.Integer(), nullable=False),
        sa.Column("tied_instances", sa.Integer(), nullable=False),
        sa.Column("window_first_ns", sa.BigInteger(), nullable=True),
        sa.Column("window_last_ns", sa.BigInteger(), nullable=True),
        sa.Column("window_ranks_json", sa.Text(), nullable=True),
        sa.Column("end_spread_ns", sa.BigInteger(), nullable=True),
        sa.Column("duration_ns", sa.BigInteger(), nullable=True),
        sa.Column("apart", sa.Text(), nullable=True),
        sa.Column("verdict_rank", sa.Integer(), nullable=True),
        sa.Column("verdict_line", sa.Text(), nullable=True),
        sa.Column("verdict_cause", sa.String(length=20), nullable=True),
        sa.Column("verdict_last", sa.Integer(), nullable=True),
        sa.Column("verdict_instances", sa.Integer(), nullable=True),
        sa.Column("p_value", sa.Float(), nullable=True),
        sa.Column("wait_share", sa.Float(), nullable=True),
        sa.Column("time_share", sa.Float(), nullable=True),
        sa.Column("work_ratio", sa.Float(), nullable=True),
        sa.Column("lateness", sa.Float(), nullable=True),
        sa.Column("clocks_json", sa.Text(), nullable=False),
        sa.Column("notes_json", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], name=op.f("fk_run_analysis_run_id_run"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_run_analysis")),
    )
    op.create_table(
        "rank_analysis",
        sa.Column("rank_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("clock_offset_ns", sa.BigInteger(), nullable=True),
        sa.Column("instances", sa.Integer(), nullable=False),
        sa.Column("entered_last", sa.Integer(), nullable=False),
        sa.Column("tied_last", sa.Integer(), nullable=False),
        *[sa.Column(c, sa.BigInteger(), nullable=False) for c in _FIGURES],
        sa.Column("span_ns", sa.BigInteger(), nullable=False),
        sa.Column("comm_ns", sa.BigInteger(), nullable=False),
        sa.Column("exposed_comm_ns", sa.BigInteger(), nullable=False),
        sa.Column("work_domain", sa.String(length=10), nullable=False),
        sa.ForeignKeyConstraint(["rank_id"], ["rank.id"], name=op.f("fk_rank_analysis_rank_id_rank"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["run_analysis.run_id"],
                                name=op.f("fk_rank_analysis_run_id_run_analysis"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("rank_id", name=op.f("pk_rank_analysis")),
    )
    op.create_index(op.f("ix_rank_analysis_run_id"), "rank_analysis", ["run_id"], unique=False)
    op.create_table(
        "step_analysis",
        sa.Column("rank_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("duration_ns", sa.BigInteger(), nullable=False),
        sa.Column("entered_last", sa.Integer(), nullable=False),
        *[sa.Column(c, sa.BigInteger(), nullable=False) for c in _FIGURES],
        sa.Column("exposed_comm_ns", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["rank_id"], ["rank.id"], name=op.f("fk_step_analysis_rank_id_rank"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["run_analysis.run_id"],
                                name=op.f("fk_step_analysis_run_id_run_analysis"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("rank_id", "step", name=op.f("pk_step_analysis")),
    )
    op.create_index(op.f("ix_step_analysis_run_id"), "step_analysis", ["run_id"], unique=False)
    for name, sql in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {sql}")


def downgrade() -> None:
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.drop_index(op.f("ix_step_analysis_run_id"), table_name="step_analysis")
    op.drop_table("step_analysis")
    op.drop_index(op.f("ix_rank_analysis_run_id"), table_name="rank_analysis")
    op.drop_table("rank_analysis")
    op.drop_table("run_analysis")
