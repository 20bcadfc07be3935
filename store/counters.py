"""Monotonic counts an operator graphs: lease takeovers, stale finishes refused.

Kept on each inbox's row, written by the transaction that decided the thing counted (which
holds that row's lock already), so a count never runs ahead of what happened and no write on
the hot path touches a row shared by all inboxes. Takeovers are counted by the lease write
itself (``leases.TAKE``); the totals are summed when read.
"""

from __future__ import annotations

from sqlalchemy import Connection, bindparam, func, select, update

from .tables import inboxes

LEASE_TAKEOVERS = "lease_takeovers"
STALE_FINISHES_REFUSED = "stale_finishes_refused"

_STALE_FINISH = (update(inboxes).where(inboxes.c.inbox == bindparam("p_inbox"))
                 .values(stale_finishes_refused=inboxes.c.stale_finishes_refused + 1))


def stale_finish_refused(conn: Connection, inbox: str) -> None:
    conn.execute(_STALE_FINISH, {"p_inbox": inbox})


def read(conn: Connection) -> dict[str, int]:
    takeovers, refused = conn.execute(
        select(func.coalesce(func.sum(inboxes.c.takeovers), 0),
               func.coalesce(func.sum(inboxes.c.stale_finishes_refused), 0))).one()
    return {LEASE_TAKEOVERS: int(takeovers), STALE_FINISHES_REFUSED: int(refused)}
