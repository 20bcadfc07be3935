"""events and effects wait out an outage: a run's "try later" gives its attempt back

``effects.why`` keeps the runtime's reason for asking a human apart from the model's words.

``events.waits`` counts the runs that said "try later" for an event (each gave back the
attempt its claim charged, so attempts + waits = claims); ``outage_since`` is when the current
outage began, for the backoff and the horizon. ``effects.not_before`` and ``outage_since`` do
the same for a committed tool call whose upstream was down.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('events') as batch:
        batch.add_column(sa.Column('waits', sa.Integer(), server_default=sa.text('0'), nullable=False))
        batch.add_column(sa.Column('outage_since', sa.BigInteger(), nullable=True))
    with op.batch_alter_table('effects') as batch:
        batch.add_column(sa.Column('not_before', sa.BigInteger(), server_default=sa.text('0'), nullable=False))
        batch.add_column(sa.Column('outage_since', sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column('why', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('effects') as batch:
        batch.drop_column('why')
        batch.drop_column('outage_since')
        batch.drop_column('not_before')
    with op.batch_alter_table('events') as batch:
        batch.drop_column('outage_since')
        batch.drop_column('waits')
