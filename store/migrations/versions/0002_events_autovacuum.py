"""events: vacuum and analyze after 5 % / 2 % of its rows changed, not PostgreSQL's 20 % / 10 %

Every event is updated twice (claimed, then done) and a status change cannot be a HOT
update (status is in the partial indexes' predicates), so the live-events index collects
dead entries that each claim steps over until a vacuum clears them. And a worker keeps a
prepared statement's generic plan until the table's statistics change: a plan made while the
table was much smaller (a scan of the whole table looked cheap then) stays until the next
ANALYZE. Both are bounded by how much of the table may change first. SQLite: nothing to do.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE events SET (autovacuum_vacuum_scale_factor = 0.05,"
                   " autovacuum_analyze_scale_factor = 0.02)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE events RESET (autovacuum_vacuum_scale_factor,"
                   " autovacuum_analyze_scale_factor)")
