"""hook secrets: per-inbox webhook secrets, encrypted at rest

Revision ID: 0005
Revises: 0004
"""
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hook_secrets",
        sa.Column("inbox", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("secrets", sa.Text(), nullable=False),
        sa.Column("updated", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("kind IN ('github', 'stripe', 'standard')", name=op.f("ck_hook_secrets_kind")),
        sa.PrimaryKeyConstraint("inbox", "kind", name=op.f("pk_hook_secrets")),
    )


def downgrade() -> None:
    op.drop_table("hook_secrets")
