"""grants and audit: the egress proxy's lease-bound grants and its audit trail (claimed; filled in below)

Revision ID: 0006
Revises: 0005
"""

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
