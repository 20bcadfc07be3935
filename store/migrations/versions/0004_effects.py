"""effects: a tool call with an effect, committed by the run's finish, executed after it

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

_PAYLOAD = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')
_RUNNABLE = "status IN ('ready', 'executing')"


def upgrade() -> None:
    op.create_table(
        'effects',
        sa.Column('inbox', sa.String(length=128), nullable=False),
        sa.Column('tool_use_id', sa.String(length=256), nullable=False),
        sa.Column('tool', sa.String(length=128), nullable=False),
        sa.Column('input', _PAYLOAD, nullable=False),
        sa.Column('words', sa.Text(), nullable=True),
        sa.Column('idempotency_key', sa.String(length=128), nullable=False),
        sa.Column('delivery', sa.String(length=16), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('attempts', sa.Integer(), server_default=sa.text('0'), nullable=False),
        sa.Column('generation', sa.BigInteger(), nullable=False),
        sa.Column('result', _PAYLOAD, nullable=True),
        sa.Column('created', sa.BigInteger(), nullable=False),
        sa.Column('updated', sa.BigInteger(), nullable=False),
        sa.CheckConstraint("status IN ('asked', 'ready', 'executing', 'done', 'refused', 'expired', "
                           "'interrupted')", name=op.f('ck_effects_status_known')),
        sa.CheckConstraint("delivery IN ('at-least-once', 'at-most-once')",
                           name=op.f('ck_effects_delivery_known')),
        sa.CheckConstraint('attempts >= 0', name=op.f('ck_effects_attempts_not_negative')),
        sa.PrimaryKeyConstraint('inbox', 'tool_use_id', name=op.f('pk_effects')),
    )
    op.create_index('ix_effects_runnable', 'effects', ['updated'], unique=False,
                    postgresql_where=sa.text(_RUNNABLE), sqlite_where=sa.text(_RUNNABLE))


def downgrade() -> None:
    op.drop_index('ix_effects_runnable', table_name='effects')
    op.drop_table('effects')
