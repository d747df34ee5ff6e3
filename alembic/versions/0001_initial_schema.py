"""initial schema: runs, ranks, sources, interned names, activity facts, counters, summaries, steps,
and the human-named views for sqlite3 users (README "The schema").

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


# Views for a plain sqlite3/psql session: names joined in, no ids needed. Portable SQL only.
_RANK_COLS = "r.name AS run, k.hostname, k.global_rank, k.local_rank"
_RANK_JOIN = "JOIN rank k ON k.id = {t}.rank_id JOIN run r ON r.id = k.run_id"
VIEWS = {
    "rank_v": f"""
        SELECT {_RANK_COLS}, k.node_rank, k.pid, k.device,
               (SELECT COUNT(*) FROM source_file s WHERE s.rank_id = k.id) AS sources,
               (SELECT COALESCE(SUM(s.rows), 0) FROM source_file s WHERE s.rank_id = k.id) AS rows
        FROM rank k JOIN run r ON r.id = k.run_id""",
    "activity_v": f"""
        SELECT {_RANK_COLS}, a.kind, a.category, n.value AS name,
               a.start_ns, a.start_ns + a.duration_ns AS end_ns, a.duration_ns,
               a.device, a.stream, a.correlation, a.pid, a.tid,
               a.grid_x, a.grid_y, a.grid_z, a.block_x, a.block_y, a.block_z, a.args,
               a.rank_id, a.source_id
        FROM activity a {_RANK_JOIN.format(t="a")} JOIN name n ON n.id = a.name_id""",
    "summary_v": f"""
        SELECT {_RANK_COLS}, m.kind, m.category, n.value AS name,
               m.calls, m.total_ns, m.total_ns / m.calls AS mean_ns, m.min_ns, m.max_ns,
               m.rank_id, m.name_id
        FROM summary m {_RANK_JOIN.format(t="m")} JOIN name n ON n.id = m.name_id""",
    "counter_v": f"""
        SELECT {_RANK_COLS}, kn.value AS kernel, cn.value AS counter, c.value, c.dispatch_id,
               c.samples, c.min_value, c.max_value
        FROM counter c {_RANK_JOIN.format(t="c")}
        JOIN name kn ON kn.id = c.kernel_name_id JOIN name cn ON cn.id = c.counter_name_id""",
    "step_v": f"""
        SELECT {_RANK_COLS}, s.step, s.start_ns, s.duration_ns
        FROM step s {_RANK_JOIN.format(t="s")}""",
    "source_v": f"""
        SELECT {_RANK_COLS}, s.path, s.format, s.content_kind, s.rows, s.size_bytes, s.sha256,
               s.identity_origin, s.ingested_at
        FROM source_file s {_RANK_JOIN.format(t="s")}""",
}


def create_views() -> None:
    for name, sql in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {sql}")


def drop_views() -> None:
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW IF EXISTS {name}")


def upgrade() -> None:
    op.create_table('name',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('value', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_name')),
    sa.UniqueConstraint('value', name=op.f('uq_name_value'))
    )
    op.create_table('run',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('launcher', sa.String(length=40), nullable=True),
    sa.Column('command', sa.Text(), nullable=True),
    sa.Column('world_size', sa.Integer(), nullable=True),
    sa.Column('metadata_json', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_run')),
    sa.UniqueConstraint('name', name=op.f('uq_run_name'))
    )
    op.create_table('rank',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('global_rank', sa.Integer(), nullable=False),
    sa.Column('local_rank', sa.Integer(), nullable=True),
    sa.Column('hostname', sa.String(length=255), nullable=True),
    sa.Column('node_rank', sa.Integer(), nullable=True),
    sa.Column('pid', sa.Integer(), nullable=True),
    sa.Column('device', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['run.id'], name=op.f('fk_rank_run_id_run'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_rank')),
    sa.UniqueConstraint('run_id', 'global_rank', name=op.f('uq_rank_run_id_global_rank'))
    )
    with op.batch_alter_table('rank', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rank_run_id'), ['run_id'], unique=False)

    op.create_table('source_file',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('rank_id', sa.Integer(), nullable=False),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('size_bytes', sa.BigInteger(), nullable=False),
    sa.Column('format', sa.String(length=40), nullable=False),
    sa.Column('content_kind', sa.String(length=60), nullable=False),
    sa.Column('rows', sa.BigInteger(), nullable=False),
    sa.Column('time_base_ns', sa.BigInteger(), nullable=False),
    sa.Column('identity_origin', sa.Text(), nullable=True),
    sa.Column('ingested_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['rank_id'], ['rank.id'], name=op.f('fk_source_file_rank_id_rank'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['run_id'], ['run.id'], name=op.f('fk_source_file_run_id_run'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_source_file')),
    sa.UniqueConstraint('rank_id', 'sha256', name=op.f('uq_source_file_rank_id_sha256'))
    )
    with op.batch_alter_table('source_file', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_source_file_rank_id'), ['rank_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_source_file_run_id'), ['run_id'], unique=False)

    op.create_table('summary',
    sa.Column('rank_id', sa.Integer(), nullable=False),
    sa.Column('name_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=20), nullable=False),
    sa.Column('category', sa.String(length=20), nullable=False),
    sa.Column('calls', sa.BigInteger(), nullable=False),
    sa.Column('total_ns', sa.BigInteger(), nullable=False),
    sa.Column('min_ns', sa.BigInteger(), nullable=False),
    sa.Column('max_ns', sa.BigInteger(), nullable=False),
    sa.Column('sum_sq_ns', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['name_id'], ['name.id'], name=op.f('fk_summary_name_id_name')),
    sa.ForeignKeyConstraint(['rank_id'], ['rank.id'], name=op.f('fk_summary_rank_id_rank'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('rank_id', 'name_id', 'kind', name=op.f('pk_summary'))
    )
    op.create_table('activity',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('rank_id', sa.Integer(), nullable=False),
    sa.Column('source_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=20), nullable=False),
    sa.Column('category', sa.String(length=20), nullable=False),
    sa.Column('name_id', sa.Integer(), nullable=False),
    sa.Column('start_ns', sa.BigInteger(), nullable=False),
    sa.Column('duration_ns', sa.BigInteger(), nullable=False),
    sa.Column('device', sa.Integer(), nullable=True),
    sa.Column('stream', sa.BigInteger(), nullable=True),
    sa.Column('correlation', sa.BigInteger(), nullable=True),
    sa.Column('pid', sa.Integer(), nullable=True),
    sa.Column('tid', sa.BigInteger(), nullable=True),
    sa.Column('grid_x', sa.Integer(), nullable=True),
    sa.Column('grid_y', sa.Integer(), nullable=True),
    sa.Column('grid_z', sa.Integer(), nullable=True),
    sa.Column('block_x', sa.Integer(), nullable=True),
    sa.Column('block_y', sa.Integer(), nullable=True),
    sa.Column('block_z', sa.Integer(), nullable=True),
    sa.Column('args', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['name_id'], ['name.id'], name=op.f('fk_activity_name_id_name')),
    sa.ForeignKeyConstraint(['rank_id'], ['rank.id'], name=op.f('fk_activity_rank_id_rank'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['source_id'], ['source_file.id'], name=op.f('fk_activity_source_id_source_file'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_activity'))
    )
    with op.batch_alter_table('activity', schema=None) as batch_op:
        batch_op.create_index('ix_activity_rank_name', ['rank_id', 'name_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_activity_source_id'), ['source_id'], unique=False)

    op.create_table('counter',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('rank_id', sa.Integer(), nullable=False),
    sa.Column('source_id', sa.Integer(), nullable=False),
    sa.Column('kernel_name_id', sa.Integer(), nullable=False),
    sa.Column('counter_name_id', sa.Integer(), nullable=False),
    sa.Column('dispatch_id', sa.BigInteger(), nullable=True),
    sa.Column('value', sa.Float(), nullable=False),
    sa.Column('samples', sa.BigInteger(), nullable=False),
    sa.Column('min_value', sa.Float(), nullable=True),
    sa.Column('max_value', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['counter_name_id'], ['name.id'], name=op.f('fk_counter_counter_name_id_name')),
    sa.ForeignKeyConstraint(['kernel_name_id'], ['name.id'], name=op.f('fk_counter_kernel_name_id_name')),
    sa.ForeignKeyConstraint(['rank_id'], ['rank.id'], name=op.f('fk_counter_rank_id_rank'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['source_id'], ['source_file.id'], name=op.f('fk_counter_source_id_source_file'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_counter'))
    )
    with op.batch_alter_table('counter', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_counter_rank_id'), ['rank_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_counter_source_id'), ['source_id'], unique=False)

    op.create_table('step',
    sa.Column('rank_id', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('source_id', sa.Integer(), nullable=False),
    sa.Column('start_ns', sa.BigInteger(), nullable=False),
    sa.Column('duration_ns', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['rank_id'], ['rank.id'], name=op.f('fk_step_rank_id_rank'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['source_id'], ['source_file.id'], name=op.f('fk_step_source_id_source_file'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('rank_id', 'step', name=op.f('pk_step'))
    )
    with op.batch_alter_table('step', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_step_source_id'), ['source_id'], unique=False)
    create_views()


def downgrade() -> None:
    drop_views()
    with op.batch_alter_table('step', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_step_source_id'))

    op.drop_table('step')
    with op.batch_alter_table('counter', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_counter_source_id'))
        batch_op.drop_index(batch_op.f('ix_counter_rank_id'))

    op.drop_table('counter')
    with op.batch_alter_table('activity', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_activity_source_id'))
        batch_op.drop_index('ix_activity_rank_name')

    op.drop_table('activity')
    op.drop_table('summary')
    with op.batch_alter_table('source_file', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_source_file_run_id'))
        batch_op.drop_index(batch_op.f('ix_source_file_rank_id'))

    op.drop_table('source_file')
    with op.batch_alter_table('rank', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_rank_run_id'))

    op.drop_table('rank')
    op.drop_table('run')
    op.drop_table('name')
