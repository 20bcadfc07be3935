"""initial schema: events, inboxes (leases), timers, approvals, outbox, memory, runs, rejected, counters

Revision ID: 0001
Revises: 
Create Date: 2026-11-29
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('approvals',
    sa.Column('inbox', sa.String(length=128), nullable=False),
    sa.Column('request_id', sa.String(length=256), nullable=False),
    sa.Column('action', sa.Text(), nullable=False),
    sa.Column('deadline', sa.BigInteger(), nullable=False),
    sa.Column('created', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('inbox', 'request_id', name=op.f('pk_approvals'))
    )
    op.create_table('counters',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('value', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_counters'))
    )
    op.create_table('events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('inbox', sa.String(length=128), nullable=False),
    sa.Column('source', sa.String(length=64), nullable=False),
    sa.Column('source_id', sa.String(length=256), nullable=False),
    sa.Column('payload', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('status', sa.String(length=16), server_default=sa.text("'pending'"), nullable=False),
    sa.Column('attempts', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('claim_gen', sa.BigInteger(), nullable=True),
    sa.Column('not_before', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('created', sa.BigInteger(), nullable=False),
    sa.Column('claimed_at', sa.BigInteger(), nullable=True),
    sa.Column('finished', sa.BigInteger(), nullable=True),
    sa.CheckConstraint("status IN ('pending', 'running', 'done', 'dead')", name=op.f('ck_events_status_known')),
    sa.CheckConstraint('attempts >= 0', name=op.f('ck_events_attempts_not_negative')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_events')),
    sa.UniqueConstraint('inbox', 'source', 'source_id', name='uq_events_key')
    )
    op.create_index('ix_events_dead', 'events', ['inbox', 'id'], unique=False, postgresql_where=sa.text("status = 'dead'"), sqlite_where=sa.text("status = 'dead'"))
    op.create_index('ix_events_finished', 'events', ['finished'], unique=False, postgresql_where=sa.text('finished IS NOT NULL'), sqlite_where=sa.text('finished IS NOT NULL'))
    op.create_index('ix_events_live', 'events', ['inbox', 'id'], unique=False, postgresql_where=sa.text("status IN ('pending', 'running')"), sqlite_where=sa.text("status IN ('pending', 'running')"))
    op.create_table('inboxes',
    sa.Column('inbox', sa.String(length=128), nullable=False),
    sa.Column('holder', sa.String(length=255), nullable=True),
    sa.Column('generation', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
    sa.Column('lease_until', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
    sa.Column('last_sent', sa.BigInteger(), nullable=True),
    sa.CheckConstraint('generation >= 0', name=op.f('ck_inboxes_generation_not_negative')),
    sa.PrimaryKeyConstraint('inbox', name=op.f('pk_inboxes'))
    )
    op.create_table('memory',
    sa.Column('inbox', sa.String(length=128), nullable=False),
    sa.Column('key', sa.String(length=255), nullable=False),
    sa.Column('value', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('updated', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('inbox', 'key', name=op.f('pk_memory'))
    )
    op.create_table('outbox',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('inbox', sa.String(length=128), nullable=False),
    sa.Column('body', sa.Text(), nullable=False),
    sa.Column('urgent', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.Column('created', sa.BigInteger(), nullable=False),
    sa.Column('dispatch_key', sa.String(length=64), nullable=True),
    sa.Column('claimed_at', sa.BigInteger(), nullable=True),
    sa.Column('sent_at', sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_outbox'))
    )
    op.create_index('ix_outbox_held', 'outbox', ['inbox', 'id'], unique=False, postgresql_where=sa.text('sent_at IS NULL'), sqlite_where=sa.text('sent_at IS NULL'))
    op.create_table('rejected',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('received', sa.BigInteger(), nullable=False),
    sa.Column('origin', sa.String(length=64), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('inbox', sa.String(length=128), nullable=True),
    sa.Column('source', sa.String(length=64), nullable=True),
    sa.Column('source_id', sa.String(length=256), nullable=True),
    sa.Column('excerpt', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_rejected'))
    )
    op.create_index('ix_rejected_received', 'rejected', ['received'], unique=False)
    op.create_table('runs',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('inbox', sa.String(length=128), nullable=False),
    sa.Column('generation', sa.BigInteger(), nullable=False),
    sa.Column('holder', sa.String(length=255), nullable=False),
    sa.Column('started', sa.BigInteger(), nullable=False),
    sa.Column('finished', sa.BigInteger(), nullable=False),
    sa.Column('outcome', sa.String(length=16), nullable=False),
    sa.Column('event_ids', sa.JSON(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_runs'))
    )
    op.create_index('ix_runs_inbox', 'runs', ['inbox', 'id'], unique=False)
    op.create_table('timers',
    sa.Column('inbox', sa.String(length=128), nullable=False),
    sa.Column('timer_id', sa.String(length=256), nullable=False),
    sa.Column('due', sa.BigInteger(), nullable=False),
    sa.Column('every', sa.BigInteger(), nullable=True),
    sa.Column('cron', sa.String(length=255), nullable=True),
    sa.Column('tz', sa.String(length=64), nullable=True),
    sa.Column('misfire', sa.String(length=16), server_default=sa.text("'coalesce'"), nullable=False),
    sa.Column('payload', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('key_source', sa.String(length=64), nullable=True),
    sa.Column('key_source_id', sa.String(length=256), nullable=True),
    sa.Column('done', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.CheckConstraint("misfire IN ('coalesce', 'each')", name=op.f('ck_timers_misfire_known')),
    sa.CheckConstraint('every IS NULL OR cron IS NULL', name=op.f('ck_timers_every_or_cron')),
    sa.CheckConstraint('every IS NULL OR every > 0', name=op.f('ck_timers_every_positive')),
    sa.PrimaryKeyConstraint('inbox', 'timer_id', name=op.f('pk_timers'))
    )
    op.create_index('ix_timers_due', 'timers', ['due'], unique=False, postgresql_where=sa.text('NOT done'), sqlite_where=sa.text('done = 0'))


def downgrade() -> None:
    op.drop_index('ix_timers_due', table_name='timers', postgresql_where=sa.text('NOT done'), sqlite_where=sa.text('done = 0'))
    op.drop_table('timers')
    op.drop_index('ix_runs_inbox', table_name='runs')
    op.drop_table('runs')
    op.drop_index('ix_rejected_received', table_name='rejected')
    op.drop_table('rejected')
    op.drop_index('ix_outbox_held', table_name='outbox', postgresql_where=sa.text('sent_at IS NULL'), sqlite_where=sa.text('sent_at IS NULL'))
    op.drop_table('outbox')
    op.drop_table('memory')
    op.drop_table('inboxes')
    op.drop_index('ix_events_live', table_name='events', postgresql_where=sa.text("status IN ('pending', 'running')"), sqlite_where=sa.text("status IN ('pending', 'running')"))
    op.drop_index('ix_events_finished', table_name='events', postgresql_where=sa.text('finished IS NOT NULL'), sqlite_where=sa.text('finished IS NOT NULL'))
    op.drop_index('ix_events_dead', table_name='events', postgresql_where=sa.text("status = 'dead'"), sqlite_where=sa.text("status = 'dead'"))
    op.drop_table('events')
    op.drop_table('counters')
    op.drop_table('approvals')
