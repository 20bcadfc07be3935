"""grants and audit: the egress proxy's lease-bound grants and its audit trail

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_NOT_OK = "outcome <> 'ok'"


def upgrade() -> None:
    op.create_table(
        "grants",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("inbox", sa.String(length=128), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.String(length=255), nullable=False),
        sa.Column("routes", sa.JSON(), nullable=False),
        sa.Column("tool_use_id", sa.String(length=256), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("created", sa.BigInteger(), nullable=False),
        sa.Column("expires", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_grants")),
    )
    op.create_index("ix_grants_inbox", "grants", ["inbox", "expires"], unique=False)
    op.create_table(
        "audit",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True,
                  nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("inbox", sa.String(length=128), nullable=True),
        sa.Column("generation", sa.BigInteger(), nullable=True),
        sa.Column("tool_use_id", sa.String(length=256), nullable=True),
        sa.Column("route", sa.String(length=64), nullable=False),
        sa.Column("method", sa.String(length=16), nullable=False),
        sa.Column("path", sa.String(length=1024), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("duration_ms", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit")),
    )
    op.create_index("ix_audit_inbox", "audit", ["inbox", "id"], unique=False)
    op.create_index("ix_audit_at", "audit", ["at"], unique=False)
    op.create_index("ix_audit_not_ok", "audit", ["route", "outcome"], unique=False,
                    postgresql_where=sa.text(_NOT_OK), sqlite_where=sa.text(_NOT_OK))


def downgrade() -> None:
    op.drop_index("ix_audit_not_ok", table_name="audit")
    op.drop_index("ix_audit_at", table_name="audit")
    op.drop_index("ix_audit_inbox", table_name="audit")
    op.drop_table("audit")
    op.drop_index("ix_grants_inbox", table_name="grants")
    op.drop_table("grants")
