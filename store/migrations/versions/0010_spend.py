"""spend: tokens and money per inbox and per agent per UTC day (budgets, store/spend.py)

Revision ID: 0010
Revises: 0008
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'spend',
        sa.Column('scope', sa.String(length=8), nullable=False),
        sa.Column('name', sa.String(length=128), nullable=False),
        sa.Column('day', sa.BigInteger(), nullable=False),
        sa.Column('calls', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
        sa.Column('input_tokens', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
        sa.Column('output_tokens', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
        sa.Column('cost_nanos', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
        sa.Column('token_ceiling', sa.BigInteger(), nullable=True),
        sa.Column('cost_ceiling_nanos', sa.BigInteger(), nullable=True),
        sa.Column('refused', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
        sa.Column('first_refused', sa.BigInteger(), nullable=True),
        sa.Column('told', sa.BigInteger(), nullable=True),
        sa.Column('updated', sa.BigInteger(), nullable=False),
        sa.CheckConstraint("scope IN ('inbox', 'agent')", name=op.f('ck_spend_scope_known')),
        sa.PrimaryKeyConstraint('scope', 'name', 'day', name=op.f('pk_spend')),
    )
    op.create_index('ix_spend_day', 'spend', ['day'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_spend_day', table_name='spend')
    op.drop_table('spend')
