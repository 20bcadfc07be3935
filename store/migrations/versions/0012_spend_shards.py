"""spend shards: an agent's day over several rows, so its counts do not queue on one lock

``spend.shard`` joins the key. An inbox's counts add to the agent's shard its name picks
(store/spend.py ``shard_of``); inbox rows, and every row written before this migration, are
shard 0, so the figures already counted keep their sums.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None

_SAME_DAY = "t.scope = spend.scope AND t.name = spend.name AND t.day = spend.day"


def upgrade() -> None:
    with op.batch_alter_table('spend') as batch:
        batch.add_column(sa.Column('shard', sa.SmallInteger(), server_default=sa.text('0'), nullable=False))
        batch.drop_constraint(op.f('pk_spend'), type_='primary')
        batch.create_primary_key(op.f('pk_spend'), ['scope', 'name', 'day', 'shard'])


def downgrade() -> None:
    # Each agent's day back into one row (shard 0): its sums, its first refusal, the
    # ceilings of its last count (store/spend.py _summed, in SQL).
    op.execute("INSERT INTO spend (scope, name, day, shard, updated) SELECT scope, name, day, 0, MAX(updated) "
               "FROM spend GROUP BY scope, name, day HAVING MIN(shard) > 0")
    summed = ", ".join(f"{c} = (SELECT SUM(t.{c}) FROM spend t WHERE {_SAME_DAY})"
                       for c in ("calls", "input_tokens", "output_tokens", "cost_nanos", "refused"))
    first = ", ".join(f"{c} = (SELECT MIN(t.{c}) FROM spend t WHERE {_SAME_DAY})" for c in ("first_refused", "told"))
    latest = ", ".join(f"{c} = (SELECT t.{c} FROM spend t WHERE {_SAME_DAY} "
                       f"ORDER BY t.calls > 0 DESC, t.updated DESC, t.shard LIMIT 1)"
                       for c in ("token_ceiling", "cost_ceiling_nanos"))
    op.execute(f"UPDATE spend SET {summed}, {first}, {latest}, "
               f"updated = (SELECT MAX(t.updated) FROM spend t WHERE {_SAME_DAY}) WHERE shard = 0")
    op.execute("DELETE FROM spend WHERE shard > 0")
    with op.batch_alter_table('spend') as batch:
        batch.drop_constraint(op.f('pk_spend'), type_='primary')
        batch.create_primary_key(op.f('pk_spend'), ['scope', 'name', 'day'])
        batch.drop_column('shard')
