"""The next inbox a free worker takes, straight from the database: the throughput path.

A doorbell (a Celery message naming one inbox) is the latency path: an idle inbox is served
as soon as its message arrives. But a message per wake costs the broker as much as the wake
costs the store, and a broker that lost its messages leaves a backlog that only the sweep
rings again, a bounded number of inboxes per interval. So a run task whose own inbox has
gone idle asks for the next one here: the inbox with the oldest ready event and no live
lease, leased and claimed in the same transaction.

Concurrent takers never wait for each other: candidates come from the pending-events index
in arrival order (so no inbox waits behind a hot one: a leased inbox's events are passed
over), and the inbox row is locked with ``SKIP LOCKED`` (PostgreSQL; SQLite's writers are
serialized anyway). The lease itself is then decided exactly as a doorbell's would be.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, bindparam, exists, select

from . import runs
from .db import NOW, dialect_insert
from .records import RunStart
from .settings import StoreSettings
from .tables import events, inboxes, status_is

CANDIDATES = 8  # oldest ready inboxes looked at per take: enough for takers that race

_live_lease = exists().where(inboxes.c.inbox == events.c.inbox, inboxes.c.lease_until >= bindparam("p_now"))
_READY = (
    select(events.c.inbox)
    .where(status_is("pending"), events.c.not_before <= bindparam("p_now"), ~_live_lease,
           events.c.inbox.not_in(bindparam("p_skip", expanding=True)))
    .order_by(events.c.id)
    .limit(bindparam("p_scan"))
)
_FREE = (
    select(inboxes.c.inbox)
    .where(inboxes.c.inbox.in_(bindparam("p_names", expanding=True)), inboxes.c.lease_until < bindparam("p_now"))
    .limit(1)
    .with_for_update(skip_locked=True)
)
_NOW = select(NOW)


def take_next(conn: Connection, s: StoreSettings, holder: str, skip: Iterable[str],
              now: int | None) -> tuple[str, RunStart] | None:
    """(inbox, its RunStart) for the oldest ready inbox nobody holds, or None when there is
    none (or every candidate is being taken by someone else right now)."""
    now = int(conn.execute(_NOW, {"p_now": now}).scalar_one())
    params = {"p_now": now, "p_skip": list(skip), "p_scan": CANDIDATES}
    names = list(dict.fromkeys(conn.execute(_READY, params).scalars()))  # distinct, oldest first
    if not names:
        return None
    # An inbox never woken before has no row yet: make them, so they can be locked.
    new_rows = dialect_insert(conn.dialect.name, inboxes).on_conflict_do_nothing(index_elements=["inbox"])
    conn.execute(new_rows, [{"inbox": name} for name in names])
    inbox = conn.execute(_FREE, {"p_names": names, "p_now": now}).scalar()
    if inbox is None:
        return None
    start = runs.start(conn, s, inbox, holder, now)
    return (inbox, start) if start.events else None
