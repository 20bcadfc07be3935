"""events: an index of pending events in arrival order, for the worker that takes the next inbox

A run task whose inbox has gone idle takes the inbox with the oldest ready event and no live
lease straight from the database (store/backlog.py). The live-events index is by inbox; this
one is the whole backlog in id order, and holds pending rows only, so its size follows the
backlog, not the history.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_events_pending', 'events', ['id'], unique=False,
                    postgresql_where=sa.text("status = 'pending'"),
                    sqlite_where=sa.text("status = 'pending'"))


def downgrade() -> None:
    op.drop_index('ix_events_pending', table_name='events',
                  postgresql_where=sa.text("status = 'pending'"),
                  sqlite_where=sa.text("status = 'pending'"))
