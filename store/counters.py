"""Monotonic counters an operator graphs: lease takeovers, stale finishes refused, ...

Bumped inside the transaction that decided the thing counted, so a count never runs ahead
of what actually happened.
"""

from __future__ import annotations

from sqlalchemy import Connection, select

from .db import insert
from .tables import counters

LEASE_TAKEOVERS = "lease_takeovers"
STALE_FINISHES_REFUSED = "stale_finishes_refused"


def bump(conn: Connection, name: str, by: int = 1) -> None:
    stmt = insert(conn, counters).values(name=name, value=by)
    conn.execute(stmt.on_conflict_do_update(index_elements=["name"], set_={"value": counters.c.value + by}))


def read(conn: Connection) -> dict[str, int]:
    values = {LEASE_TAKEOVERS: 0, STALE_FINISHES_REFUSED: 0}
    values.update({r.name: r.value for r in conn.execute(select(counters.c.name, counters.c.value))})
    return values
