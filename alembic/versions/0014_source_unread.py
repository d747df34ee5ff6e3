"""``source_file.unread_json``: the events of a file that profdb did not read, by what they are.

Why: a Kineto trace of another device (MTIA's ``mtia_ccp_events``, Gaudi's ``hpu_op``) or one recorded
by the CUPTI range profiler (``cuda_profiler_range``, replayed kernels whose spans are not kernel times)
has its device events in categories profdb does not read. They were dropped without a word, and the
questions then said the run "has no GPU activity" and answered about its CPU operators. The ingest
now names them, and every question says which of the run's files hold such events and how many.

    source_file.unread_json   JSON object, what the events are -> their count, e.g.
                              {"events of category mtia_ccp_events (MTIA device events)": 25814}; NULL when the
                              reader left nothing out it counts (and for files stored before 0014)

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("source_file", sa.Column("unread_json", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("source_file", "unread_json")
