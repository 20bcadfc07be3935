"""the people around an agent: outbox message kinds and fields, approvers, the reply rule

``outbox.kind`` (reply, notice, approval) and ``outbox.fields`` (an approval's tool, input,
words, deadline ...) let a channel tell a reply from an approval request without parsing the
text; ``outbox.channel`` names the channel an approver ``channel:NAME`` is reached through.
``approvals.approver`` is who gets the link (NULL: the inbox's own user). ``inboxes
.replied_through`` is the newest event from the person the inbox talks to that a reply
answered: a reply is sent inside the outbox gap only while one is owed.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

_PAYLOAD = sa.JSON().with_variant(postgresql.JSONB(), 'postgresql')


def upgrade() -> None:
    with op.batch_alter_table('outbox') as batch:
        batch.add_column(sa.Column('kind', sa.String(16), server_default=sa.text("'notice'"), nullable=False))
        batch.add_column(sa.Column('fields', _PAYLOAD, nullable=True))
        batch.add_column(sa.Column('channel', sa.String(64), nullable=True))
        batch.create_check_constraint(op.f('ck_outbox_kind_known'), "kind IN ('reply', 'notice', 'approval')")
    with op.batch_alter_table('approvals') as batch:
        batch.add_column(sa.Column('approver', sa.String(144), nullable=True))
    with op.batch_alter_table('inboxes') as batch:
        batch.add_column(sa.Column('replied_through', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('inboxes') as batch:
        batch.drop_column('replied_through')
    with op.batch_alter_table('approvals') as batch:
        batch.drop_column('approver')
    with op.batch_alter_table('outbox') as batch:
        batch.drop_constraint(op.f('ck_outbox_kind_known'), type_='check')
        batch.drop_column('channel')
        batch.drop_column('fields')
        batch.drop_column('kind')
