"""console: the audit of operator actions, and the indexes the operator's console reads by

``operator_actions``: who did what from the console (requeue, answer, cancel a timer), when,
and what came of it, written in the action's own transaction (store/console.py). The indexes
let the console's pages follow the rows they show, not the history: an inbox's finished
events newest first (a done event enters it once; the live and dead ones had theirs), an
event's source key across inboxes, an inbox's messages newest first, runs by when they finished (the runs per
minute chart, and retention's walk by age), the approvals still waiting (their live expiry
timers), and the agents' spend by day.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""
import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None

_AGENTS = sa.text("scope = 'agent'")
_DONE = {"postgresql_where": sa.text("status = 'done'"), "sqlite_where": sa.text("status = 'done'")}
_WAITING = {"postgresql_where": sa.text("key_source = 'approval' AND NOT done"),
            "sqlite_where": sa.text("key_source = 'approval' AND done = 0")}


def upgrade() -> None:
    op.create_table(
        'operator_actions',
        sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('at', sa.BigInteger(), nullable=False),
        sa.Column('actor', sa.String(length=64), nullable=False),
        sa.Column('action', sa.String(length=32), nullable=False),
        sa.Column('inbox', sa.String(length=128), nullable=False),
        sa.Column('target', sa.String(length=256), nullable=True),
        sa.Column('detail', sa.String(length=16), nullable=True),
        sa.Column('outcome', sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_operator_actions')),
    )
    op.create_index('ix_operator_actions_inbox', 'operator_actions', ['inbox', 'id'], unique=False)
    op.create_index('ix_events_done', 'events', ['inbox', 'id'], unique=False, **_DONE)
    op.create_index('ix_events_source_id', 'events', ['source_id'], unique=False)
    op.create_index('ix_outbox_inbox', 'outbox', ['inbox', 'id'], unique=False)
    op.create_index('ix_runs_finished', 'runs', ['finished'], unique=False)
    op.create_index('ix_spend_agent_day', 'spend', ['day'], unique=False, postgresql_where=_AGENTS,
                    sqlite_where=_AGENTS)
    op.create_index('ix_timers_approvals', 'timers', ['due'], unique=False, **_WAITING)


def downgrade() -> None:
    op.drop_index('ix_timers_approvals', table_name='timers', **_WAITING)
    op.drop_index('ix_spend_agent_day', table_name='spend', postgresql_where=_AGENTS, sqlite_where=_AGENTS)
    op.drop_index('ix_runs_finished', table_name='runs')
    op.drop_index('ix_outbox_inbox', table_name='outbox')
    op.drop_index('ix_events_source_id', table_name='events')
    op.drop_index('ix_events_done', table_name='events', **_DONE)
    op.drop_index('ix_operator_actions_inbox', table_name='operator_actions')
    op.drop_table('operator_actions')
