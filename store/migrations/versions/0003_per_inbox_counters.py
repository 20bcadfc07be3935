"""counters move onto the inbox row: takeovers and refused stale finishes, per inbox

The global ``counters`` row was updated inside per-inbox critical sections, so takeovers on
different inboxes serialized on one row. The inbox row is locked by those decisions anyway:
counting there costs no lock, and an operator can see which inbox is taken over.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('inboxes') as batch:
        batch.add_column(sa.Column('takeovers', sa.BigInteger(), server_default=sa.text('0'), nullable=False))
        batch.add_column(sa.Column('stale_finishes_refused', sa.BigInteger(), server_default=sa.text('0'),
                                   nullable=False))
    op.drop_table('counters')


def downgrade() -> None:
    op.create_table('counters',
                    sa.Column('name', sa.String(length=64), nullable=False),
                    sa.Column('value', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
                    sa.PrimaryKeyConstraint('name', name=op.f('pk_counters')))
    with op.batch_alter_table('inboxes') as batch:
        batch.drop_column('stale_finishes_refused')
        batch.drop_column('takeovers')
